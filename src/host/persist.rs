//! The host's side of the transcript store ([`crate::store`]): what each terminal hands it,
//! and the terminals it gives back at start.
//!
//! Under the host lock, and without I/O: every accepted envelope that changes a terminal's
//! state goes to the store as the very bytes sent to subscribers (`terminal/input` changes
//! nothing and is left out; rejections are never state); the claim holder and the
//! client-renamed flag follow a claim or title change; a *checkpoint* — the terminal's
//! metadata and retained state, at most `--scrollback-bytes` of content — is sent at creation,
//! once the records since the last one pass [`compact_after`], and when the store dropped
//! records (the store then rewrites the file from it). That bounds each transcript by about
//! three times the scrollback.
//!
//! Restored terminals have no process: they come back exited with no exit code (unless they
//! had already exited), keep their URI, claim, holder, size and content, and are disposed,
//! reaped and listed like any exited terminal. At most `--max-exited-terminals` come back
//! (the most recently created); the older transcripts are deleted.
//!
//! May touch: the store's queue (never its files) and the terminal entries it is given, under
//! the host lock.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ahp_types::actions::StateAction;
use ahp_types::state::{TerminalExitedLifecycleState, TerminalLifecycleState};

use super::flow::Subscribers;
use super::history::History;
use super::screen::Screen;
use super::{scrollback, Host, Inner, TerminalEntry};
use crate::codec::{self, Frame};
use crate::store::{self, Key, Meta, Owner, Payload, Store};
use crate::terminal::Pty;

/// How long `disposeTerminal` waits for the store to delete a transcript before answering
/// anyway (the disk is stuck); the deletion still happens when the disk lets it.
const REMOVAL_TIMEOUT: Duration = Duration::from_secs(5);

/// Why input to a restored terminal is rejected.
pub const RESTORED_INPUT: &str = "this terminal was restored from the transcript of an earlier \
ahpty process and has no process: nothing reads its input (create a new terminal)";

/// Records sent to a terminal's transcript after which the next one is a checkpoint instead,
/// for a scrollback of `cap` bytes: twice the cap, plus 64 KiB.
pub fn compact_after(cap: usize) -> usize {
    cap.saturating_mul(2).saturating_add(64 * 1024)
}

/// A terminal's transcript, as the host tracks it.
pub(super) struct Transcript {
    key: Key,
    /// Bytes of records sent since the last checkpoint.
    since_checkpoint: usize,
}

impl Transcript {
    /// `(key, bytes since the last checkpoint)`, for a live upgrade's hand-over.
    pub(super) fn image(&self) -> (String, usize) {
        (self.key.as_str().to_string(), self.since_checkpoint)
    }

    /// The transcript an [`image`](Self::image) describes (`None`: not a valid key).
    pub(super) fn from_image(key: &str, since_checkpoint: usize) -> Option<Transcript> {
        Some(Transcript {
            key: Key::parse(key)?,
            since_checkpoint,
        })
    }
}

/// What an accepted action means for the transcript.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Changes no state: not recorded.
    Skip,
    /// Recorded.
    State,
    /// `terminal/exited`: recorded, and the terminal becomes evictable.
    Exited,
    /// A claim or title change: recorded, followed by the holder and the rename flag.
    Owner,
}

impl Kind {
    pub(super) fn of(action: &StateAction) -> Kind {
        match action {
            StateAction::TerminalInput(_) => Kind::Skip,
            StateAction::TerminalExited(_) => Kind::Exited,
            StateAction::TerminalClaimed(_) | StateAction::TerminalTitleChanged(_) => Kind::Owner,
            _ => Kind::State,
        }
    }
}

/// What removing a terminal leaves to do outside the lock: kill its processes (none for a
/// restored terminal) and wait for its transcript to be deleted.
pub struct Removed {
    pub(super) process: Option<Arc<dyn Pty>>,
    pub(super) transcript: Option<store::Removal>,
}

impl Removed {
    /// The process's pid, if it has one.
    pub fn pid(&self) -> Option<i32> {
        self.process.as_ref().map(|p| p.pid())
    }
}

/// Sends the envelope `text` of an accepted action of `kind` to `t`'s transcript (`uri` is
/// `t`'s channel, `cap` the scrollback), or a checkpoint instead when one is due.
pub(super) fn record(
    store: Option<&Store>,
    t: &mut TerminalEntry,
    uri: &str,
    cap: usize,
    text: &Frame,
    kind: Kind,
) {
    let (Some(store), Some(tr)) = (store, t.transcript.as_mut()) else {
        return;
    };
    if kind == Kind::Skip {
        return;
    }
    let Some(payload) = payload(text) else {
        return;
    };
    tr.since_checkpoint += payload.len();
    let mut sent = tr.since_checkpoint <= compact_after(cap)
        && store.append(&tr.key, payload, kind == Kind::Exited);
    if sent && kind == Kind::Owner {
        let owner = Owner {
            holder: t.holder.clone(),
            renamed_by_client: t.renamed_by_client,
        };
        sent = store.owner(&tr.key, owner);
    }
    if !sent {
        checkpoint(store, t, uri, cap);
    }
}

/// Sends `t`'s checkpoint (metadata and retained state) if the store has room for it;
/// `false` if not (the store asks again later).
pub(super) fn checkpoint(store: &Store, t: &mut TerminalEntry, uri: &str, cap: usize) -> bool {
    let Some(tr) = t.transcript.as_ref() else {
        return true;
    };
    let estimate = t.content_bytes.min(cap) + 4096;
    let sent = store.checkpoint(&tr.key, estimate, || Meta {
        uri: uri.to_string(),
        created_at_ms: t.created_ms,
        holder: t.holder.clone(),
        renamed_by_client: t.renamed_by_client,
        state: scrollback::retained(&t.state, cap),
    });
    if sent {
        if let Some(tr) = t.transcript.as_mut() {
            tr.since_checkpoint = 0;
        }
    }
    sent
}

/// The envelope JSON inside an `action` notification, as a store payload (no copy).
fn payload(text: &Frame) -> Option<Payload> {
    let whole = text.as_str();
    let params = codec::action_params(whole);
    let start = (params.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    let bytes = text.bytes();
    Payload::new(bytes.clone(), start..start + params.len())
}

impl Inner {
    /// Starts the transcript of the new terminal at `uri` (its first checkpoint).
    pub(super) fn persist_new(&mut self, uri: &str) {
        let cap = self.scrollback_bytes;
        let (Some(store), Some(t)) = (self.store.as_deref(), self.terminals.get_mut(uri)) else {
            return;
        };
        t.transcript = Some(Transcript {
            key: Key::new(),
            since_checkpoint: 0,
        });
        checkpoint(store, t, uri, cap);
    }

    /// What a removed terminal leaves to do: its process, and the deletion of its transcript
    /// (queued now, behind its last records).
    pub(super) fn removed(&self, entry: TerminalEntry) -> Removed {
        let transcript = match (&self.store, &entry.transcript) {
            (Some(store), Some(tr)) => Some(store.remove(&tr.key)),
            _ => None,
        };
        Removed {
            process: entry.process,
            transcript,
        }
    }

    /// Adds the terminals read back from the store, oldest first, each checked and sanitised
    /// as the wire's input is ([`super::restored`]; one that fails is set aside): exited (with no exit code if
    /// they were running), no process, their content trimmed to the scrollback, histories
    /// starting now. Their orphan clocks start (no client is connected yet). At most
    /// `max_exited` (`--max-exited-terminals`) come back, the most recently created: the
    /// transcripts of the older ones are deleted, in one log line.
    pub(super) fn restore(
        &mut self,
        mut restored: Vec<store::Restored>,
        history_bytes: usize,
        max_exited: usize,
    ) {
        let cap = self.scrollback_bytes;
        let over = restored.len().saturating_sub(max_exited);
        if over > 0 {
            let evicted: Vec<store::Restored> = restored.drain(..over).collect();
            self.evict_restored(evicted, max_exited);
        }
        let mut any = false;
        for mut r in restored {
            match super::restored::check(&mut r.meta) {
                Ok(fixes) if !fixes.is_empty() => tracing::warn!(
                    "transcript {}: restored terminal {}: {}",
                    format!("{}.log", r.key.as_str()),
                    crate::codec::clip(r.meta.uri.clone(), 256),
                    fixes.join("; ")
                ),
                Ok(_) => {}
                Err(reason) => {
                    if let Some(store) = &self.store {
                        store.set_aside(&r.key, reason);
                    }
                    continue;
                }
            }
            let Meta {
                uri,
                created_at_ms,
                holder,
                renamed_by_client,
                mut state,
            } = r.meta;
            if self.terminals.contains_key(&uri) {
                continue;
            }
            if matches!(state.lifecycle, TerminalLifecycleState::Running(_)) {
                state.lifecycle = TerminalLifecycleState::Exited(TerminalExitedLifecycleState {
                    exit_code: None,
                });
            }
            // A transcript replayed from its last checkpoint may hold more parts than a live
            // terminal keeps.
            scrollback::merge_oldest(&mut state);
            let content_bytes = scrollback::trim(&mut state, cap);
            // Nothing feeds a restored terminal's model: its snapshots are the restored
            // content as it is.
            let dimension = |d: Option<i64>, default: u16| {
                d.and_then(|d| u16::try_from(d).ok())
                    .filter(|d| *d > 0)
                    .unwrap_or(default)
            };
            let screen = Screen::new(dimension(state.cols, 80), dimension(state.rows, 24));
            let serial = self.next_serial;
            self.next_serial += 1;
            let since_checkpoint = usize::try_from(r.file_len).unwrap_or(usize::MAX);
            self.terminals.insert(
                uri,
                TerminalEntry {
                    serial,
                    state,
                    subscribers: Subscribers::new(Arc::new(tokio::sync::Notify::new())),
                    process: None,
                    holder,
                    renamed_by_client,
                    content_bytes,
                    history: History::new(history_bytes, self.server_seq),
                    orphaned_since: None,
                    created_ms: created_at_ms,
                    info_json: None,
                    screen,
                    transcript: Some(Transcript {
                        key: r.key,
                        since_checkpoint,
                    }),
                    exited_at: 0,
                },
            );
            any = true;
        }
        if any {
            self.refresh_orphans();
            self.emit_root_terminals();
        }
    }

    /// Deletes the transcripts of restored terminals that do not come back, being older than
    /// the `max_exited` newest (their deletion is queued; nothing waits for it), and says so
    /// in one line naming the first few.
    fn evict_restored(&mut self, evicted: Vec<store::Restored>, max_exited: usize) {
        if let Some(store) = &self.store {
            for r in &evicted {
                drop(store.remove(&r.key));
            }
        }
        // URIs read from disk: control characters escaped.
        let mut named: Vec<String> = evicted
            .iter()
            .take(3)
            .map(|r| r.meta.uri.escape_debug().to_string())
            .collect();
        if evicted.len() > named.len() {
            named.push(format!("and {} more", evicted.len() - named.len()));
        }
        tracing::warn!(
            "{} exited terminals restored from transcripts are over --max-exited-terminals \
             ({max_exited}): the oldest were disposed of and their transcripts deleted ({}); \
             the newest {max_exited} are kept",
            evicted.len(),
            named.join(", ")
        );
    }

    /// Raises the `serverSeq` high-water mark on disk once half of its margin is used.
    pub(super) fn renew_seq_mark(&mut self) {
        if let Some(store) = &self.store {
            store.reserve_seq(self.server_seq.saturating_add(store::SEQ_MARGIN));
        }
        self.seq_renew_at = self.server_seq.saturating_add(store::SEQ_MARGIN / 2);
    }
}

impl Host {
    /// Sends a checkpoint for every terminal whose transcript records the store had to drop
    /// (the disk lagged or failed), whenever the store asks; returns at once without a store.
    /// Runs until the host shuts down.
    pub async fn repair_transcripts(self: Arc<Self>) {
        let Some(store) = self.lock().store.clone() else {
            return;
        };
        loop {
            let keys = store.lost().await;
            let mut inner = self.lock();
            if inner.shutting_down {
                return;
            }
            let cap = inner.scrollback_bytes;
            let mut by_key: HashMap<Key, &mut TerminalEntry> = HashMap::new();
            let mut uris: HashMap<Key, String> = HashMap::new();
            for (uri, t) in inner.terminals.iter_mut() {
                if let Some(tr) = &t.transcript {
                    uris.insert(tr.key.clone(), uri.clone());
                    by_key.insert(tr.key.clone(), t);
                }
            }
            for key in keys {
                match (by_key.get_mut(&key), uris.get(&key)) {
                    (Some(t), Some(uri)) => {
                        checkpoint(&store, t, uri, cap);
                    }
                    _ => store.forget(&key),
                }
            }
        }
    }

    /// Kills a removed terminal's processes (SIGHUP, then SIGKILL after the configured grace)
    /// and waits until they are gone and its transcript is deleted.
    pub async fn kill(&self, removed: Removed) {
        if let Some(process) = removed.process {
            let grace = self.config.kill_grace;
            let _ = tokio::task::spawn_blocking(move || process.kill_session(grace)).await;
        }
        if let Some(transcript) = removed.transcript {
            if !transcript.wait(REMOVAL_TIMEOUT).await {
                tracing::warn!(
                    "a disposed terminal's transcript was not deleted within {} s (is the disk \
                     stuck?); answering anyway",
                    REMOVAL_TIMEOUT.as_secs()
                );
            }
        }
    }

    /// Writes and syncs every queued transcript record and stops the store's writer (at
    /// shutdown; the transcripts stay for the next start).
    pub(super) async fn close_store(&self) {
        let Some(store) = self.lock().store.clone() else {
            return;
        };
        let _ = tokio::task::spawn_blocking(move || store.close(REMOVAL_TIMEOUT)).await;
    }
}
