//! Exited terminals — restored from transcripts, or whose program exited — as the limits see
//! them: they do not count toward `--max-terminals` (which bounds running processes and their
//! ptys), and at most `--max-exited-terminals` of them are kept, the one that exited first
//! being disposed of when one more exits. Also the messages that say so: the refusal at the
//! terminal limit and the `-32010` for the URI of an exited terminal.
//!
//! May touch: the store under the host lock (counting, removing the evicted terminals), the
//! evicted terminals' processes and transcripts (through [`Host::kill`], in a task).

use std::sync::Arc;

use ahp_types::state::TerminalLifecycleState;

use super::persist::Removed;
use crate::codec::clip;

/// Most bytes of a URI quoted in an error message (longer ones are clipped, with `…`).
const SHOWN_URI_BYTES: usize = 256;
use super::{Host, HostError, Inner, TerminalEntry};

impl TerminalEntry {
    /// Whether its lifecycle is exited (its program exited, or it was restored).
    pub(super) fn is_exited(&self) -> bool {
        matches!(self.state.lifecycle, TerminalLifecycleState::Exited(_))
    }
}

impl Inner {
    /// Terminals that count toward `--max-terminals`: those not exited, and those being
    /// spawned.
    pub(super) fn running_terminals(&self) -> usize {
        let running = self.terminals.values().filter(|t| !t.is_exited()).count();
        running + self.spawning.len()
    }

    /// The refusal of `createTerminal` at the terminal limit `max` (-32603): how many run,
    /// how many exited ones are kept besides, and what to do.
    pub(super) fn limit_error(&self, max: usize) -> HostError {
        let running = self.running_terminals();
        let exited = self.terminals.len() + self.spawning.len() - running;
        HostError::internal(format!(
            "terminal limit reached: {running} terminals are running, the most --max-terminals \
             ({max}) allows (the {exited} exited ones kept besides do not count); dispose of a \
             running one (disposeTerminal; `ahpty ls`, `ahpty kill TERMINAL`) or start the \
             daemon with a larger --max-terminals"
        ))
    }

    /// `createTerminal` on the URI of an existing terminal (-32010): for an exited one, that
    /// it has exited and how to free the URI.
    pub(super) fn exists_error(&self, uri: &str) -> HostError {
        // The hint must survive rpc's clipping of messages to 1 KiB, whatever the URI's length.
        let shown = clip(uri.to_string(), SHOWN_URI_BYTES);
        match self.terminals.get(uri) {
            Some(t) if t.is_exited() => {
                let how = if t.process.is_none() {
                    "it was restored from the transcript of an earlier ahpty process and has \
                     exited"
                } else {
                    "it has exited"
                };
                HostError::already_exists_because(
                    &shown,
                    &format!(
                        "{how}, but its URI stays taken until it is disposed of: send \
                         disposeTerminal for it (`ahpty kill {}`, or `ahpty kill --exited` \
                         for every exited terminal), then create it again",
                        t.serial
                    ),
                )
            }
            Some(_) => HostError::already_exists_because(&shown, "it is running"),
            None => HostError::already_exists_because(&shown, "it is being created"),
        }
    }

    /// Disposes of exited terminals until at most `max` are left, the one that exited first
    /// first (restored terminals before any that exited since the start, then by creation
    /// order), each in one log line. Returns what is left to do outside the lock.
    fn evict_exited(&mut self, max: usize) -> Vec<Removed> {
        let exited = self.terminals.values().filter(|t| t.is_exited()).count();
        if exited <= max {
            return Vec::new();
        }
        let mut order: Vec<(u64, u64, String)> = self
            .terminals
            .iter()
            .filter(|(_, t)| t.is_exited())
            .map(|(uri, t)| (t.exited_at, t.serial, uri.clone()))
            .collect();
        order.sort_unstable();
        order.truncate(exited - max);
        let mut removed = Vec::with_capacity(order.len());
        for (_, _, uri) in order {
            if let Some(entry) = self.remove_terminal(&uri) {
                tracing::info!(
                    terminal = %uri,
                    "disposing of exited terminal: more than --max-exited-terminals ({max}) \
                     exited terminals, and it exited first"
                );
                removed.push(self.removed(entry));
            }
        }
        removed
    }
}

impl Host {
    /// Marks the terminal at `uri` as having exited now (after its `terminal/exited` was
    /// emitted under this same lock) and disposes of the exited terminals over
    /// `--max-exited-terminals`: their processes are killed and transcripts deleted in a task.
    pub(super) fn exited_now(self: &Arc<Self>, inner: &mut Inner, uri: &str) {
        let seq = inner.server_seq;
        if let Some(t) = inner.terminals.get_mut(uri) {
            t.exited_at = seq;
        }
        for removed in inner.evict_exited(self.config.max_exited_terminals) {
            let host = self.clone();
            tokio::spawn(async move { host.kill(removed).await });
        }
    }
}
