//! The host's side of a live upgrade: quiesce the store, describe it as data
//! ([`HostImage`]) plus the pty masters, and rebuild it from that in the new image.
//!
//! [`Host::begin_upgrade`] stops new terminals and closes every connection with
//! [`CLOSE_RESTART`]; [`Host::suspend`] stops every terminal's reader and writer (the
//! programs keep running, their output waits in the ptys), lets every pump apply what was
//! read, freezes reaping and returns the image. [`Host::resume`] rebuilds the store from an
//! image and restarts each terminal's threads and pump. Nothing is read from a pty between the
//! two, so clients that `reconnect` get a replay with no gap and no duplicate.
//! docs/upgrade.md describes the format; this module knows nothing of `execve`.
//!
//! May touch: the store under the host lock, every connection's outbox (the 1012 close), each
//! terminal's `Pty` (suspended, or adopted from its descriptor) and pump; no I/O of its own.

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use ahp_types::state::{RootState, TerminalState};

use super::flow::Subscribers;
use super::history::{History, HistoryImage};
use super::pump::{self, PumpState};
use super::screen::{self, Screen, ScreenImage};
use super::{persist, Host, TerminalEntry};
use crate::config::Config;
use crate::terminal::{self, Adopted, Pty, PtyMaster, ReaderCarry, Reaping};

pub use crate::proto::close::CLOSE_RESTART;

/// A timeout as messages name it: `5 s`, `1.5 s`.
pub fn seconds(d: Duration) -> String {
    format!("{} s", d.as_millis() as f64 / 1000.0)
}

/// The host's state as data (part of the hand-over, docs/upgrade.md).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostImage {
    /// The daemon instance's id (`AHPTY_HOST_ID` in every terminal).
    pub instance_id: String,
    /// The last `serverSeq` handed out.
    pub server_seq: u64,
    /// The id the next terminal gets.
    pub next_terminal: u64,
    /// The root state (AHP `RootState`).
    pub root: RootState,
    /// The root channel's retained envelopes.
    pub root_history: HistoryImage,
    /// Client ids that may resume by replay: `[clientId, millisecondsAgo, wire]`, oldest first.
    pub seen_clients: Vec<(String, u64, u8)>,
    /// Every terminal.
    pub terminals: Vec<TerminalImage>,
    /// The shell-integration script directory (`$TMPDIR/ahpty-PID-…`), which the new image
    /// goes on using and removes when it stops.
    #[serde(default)]
    pub script_dir: Option<std::path::PathBuf>,
}

impl HostImage {
    /// Drops the retained envelopes of every channel (for a hand-over that did not fit: the
    /// clients then resume with a snapshot instead of a replay).
    pub fn forget_histories(&mut self) {
        self.root_history.forget();
        for t in &mut self.terminals {
            t.history.forget();
        }
    }
}

/// One terminal of a [`HostImage`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminalImage {
    /// The terminal's channel URI.
    pub uri: String,
    /// Its id in this daemon (distinguishes it from a later terminal at the same URI).
    pub id: u64,
    /// The AHP `TerminalState` (content as retained).
    pub state: TerminalState,
    /// The client holding the claim.
    pub holder: String,
    /// A client renamed it (titles from escape sequences no longer apply).
    pub renamed_by_client: bool,
    /// Bytes of content retained.
    pub content_bytes: usize,
    /// Its retained envelopes.
    pub history: HistoryImage,
    /// Milliseconds since its holder's last connection went away (`None`: connected).
    #[serde(default)]
    pub orphaned_for_ms: Option<u64>,
    /// Creation time, Unix milliseconds.
    pub created_ms: i64,
    /// The program's pid (`None`: a terminal restored from its transcript, with no process).
    #[serde(default)]
    pub pid: Option<i32>,
    /// Index of its pty master in the hand-over's descriptor list.
    #[serde(default)]
    pub pty: Option<usize>,
    /// The old image had reaped the process (its code is `exit_code`).
    #[serde(default)]
    pub reaped: bool,
    #[serde(default)]
    pub exit_code: Option<i64>,
    /// Input accepted but not yet written to the pty.
    #[serde(default)]
    pub input: Vec<u8>,
    /// The reader's pipeline state.
    pub reader: ReaderCarry,
    /// The pump's state.
    pub pump: PumpState,
    /// The terminal model's bookkeeping (`None`: a fresh model at the retained content).
    #[serde(default)]
    pub screen: Option<ScreenImage>,
    /// Its transcript in the state directory: `(key, bytes since the last checkpoint)`.
    #[serde(default)]
    pub transcript: Option<(String, usize)>,
    /// Format 3: the lengths in bytes of its [`texts_mut`](Self::texts_mut), in that order,
    /// which follow the JSON as raw bytes (each text is empty in the JSON). `None`: every
    /// text is in the JSON (formats 1 and 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_texts: Option<Vec<u64>>,
}

impl TerminalImage {
    /// Its bulky texts — the retained content parts' text (up to `--scrollback-bytes`), the
    /// model's base and the output not yet applied to it — in a fixed order that depends only
    /// on the rest of the image. A live upgrade's hand-over carries them as raw bytes.
    pub fn texts_mut(&mut self) -> impl Iterator<Item = &mut String> {
        use ahp_types::state::TerminalContentPart as Part;
        let content = self.state.content.iter_mut().filter_map(|part| match part {
            Part::Unclassified(u) => Some(&mut u.value),
            Part::Command(c) => Some(&mut c.output),
            Part::Unknown(_) => None,
        });
        content.chain(self.screen.iter_mut().flat_map(ScreenImage::texts_mut))
    }
}

impl Host {
    /// First step of a live upgrade: refuses new terminals (-32603 "ahpty is upgrading"),
    /// waits at most `timeout` (the daemon's `--upgrade-timeout`, which bounds every wait of an
    /// upgrade: docs/upgrade.md) for creations in flight, then closes every connection with
    /// [`CLOSE_RESTART`]. Errors: creations did not finish in time (nothing was closed and the
    /// host serves on as before).
    pub async fn begin_upgrade(&self, timeout: Duration) -> Result<(), String> {
        self.lock().upgrading = true;
        let deadline = Instant::now() + timeout;
        while !self.lock().spawning.is_empty() {
            if Instant::now() >= deadline {
                self.lock().upgrading = false;
                return Err(format!(
                    "terminals being created did not finish within {}",
                    seconds(timeout)
                ));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let inner = self.lock();
        for c in inner.connections.values() {
            c.outbox.close(CLOSE_RESTART, "service restart");
        }
        Ok(())
    }

    /// Connections still registered (they go once their socket has closed).
    pub fn connection_count(&self) -> usize {
        self.lock().connections.len()
    }

    /// Second step: suspends every terminal (its process keeps running, its output waits in
    /// the pty), waits until each pump has applied what its reader read, stops all reaping in
    /// this image for good and returns the state with the pty masters (close-on-exec;
    /// `TerminalImage::pty` indexes them). Every connection left is forgotten. After this the
    /// host serves nothing: the caller executes the new image (or this one again).
    ///
    /// Every terminal is told to stop first and then collected, so they stop in parallel and
    /// the whole suspension ends by `deadline` (what is left of `--upgrade-timeout` since
    /// SIGUSR2, docs/upgrade.md), whatever the number of terminals.
    ///
    /// Never fails as a whole: a terminal whose pty cannot be duplicated is left out (and
    /// logged); one whose writer does not stop by `deadline` is handed over without its queued
    /// input, one whose pump does not stop by then without its reader's held-back bytes (both
    /// logged).
    pub async fn suspend(
        self: &Arc<Self>,
        deadline: std::time::Instant,
    ) -> (HostImage, Vec<OwnedFd>) {
        let processes: Vec<_> = {
            let mut inner = self.lock();
            let conns: Vec<_> = inner.connections.keys().copied().collect();
            for conn in conns {
                inner.drop_connection(conn);
            }
            inner
                .terminals
                .values()
                .filter_map(|t| Some((t.serial, t.process.clone()?, t.subscribers.wake.clone())))
                .collect()
        };
        let started = Instant::now();
        // Every reader and writer is told first: their stops overlap instead of adding up.
        for (_, process, wake) in &processes {
            process.begin_suspend();
            // A pump waiting for a congested subscriber re-checks its (now open) gate.
            wake.notify_one();
        }
        let mut io_state = HashMap::new();
        for (id, process, wake) in processes {
            let pid = process.pid();
            match tokio::task::spawn_blocking(move || process.suspend(deadline)).await {
                Ok(Ok(suspended)) => {
                    io_state.insert(id, suspended);
                }
                Ok(Err(e)) => tracing::error!(pid, error = %e, "cannot hand a terminal over"),
                Err(e) => tracing::error!(pid, error = %e, "cannot hand a terminal over"),
            }
            wake.notify_one();
        }
        loop {
            let waiting = {
                let inner = self.lock();
                inner
                    .terminals
                    .values()
                    .filter(|t| {
                        io_state.contains_key(&t.serial) && !inner.parked.contains_key(&t.serial)
                    })
                    .count()
            };
            if waiting == 0 {
                break;
            }
            if std::time::Instant::now() >= deadline {
                tracing::warn!(
                    "{waiting} terminal(s) did not stop within --upgrade-timeout: handed over \
                     without the bytes their readers held back"
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tracing::info!(
            terminals = io_state.len(),
            ms = started.elapsed().as_millis() as u64,
            "terminals suspended"
        );
        let _ = tokio::task::spawn_blocking(terminal::process::freeze_reaping).await;
        // Everything recorded so far reaches the transcripts (the new image appends to them).
        let store = self.lock().store.clone();
        if let Some(store) = store {
            let flushed =
                tokio::task::spawn_blocking(move || store.flush(Duration::from_secs(2))).await;
            if !matches!(flushed, Ok(true)) {
                tracing::warn!("the transcripts were not flushed within 2 s");
            }
        }
        tracing::info!(
            ms = started.elapsed().as_millis() as u64,
            "transcripts flushed"
        );
        let mut inner = self.lock();
        let mut fds = Vec::new();
        let mut terminals = Vec::new();
        let now = tokio::time::Instant::now();
        let entries: Vec<(String, u64)> = inner
            .terminals
            .iter()
            .map(|(uri, t)| (uri.clone(), t.serial))
            .collect();
        for (uri, id) in entries {
            let (pty, input) = match io_state.remove(&id) {
                Some((fd, input)) => {
                    fds.push(fd);
                    (Some(fds.len() - 1), input)
                }
                None => (None, Vec::new()),
            };
            let parked = inner.parked.remove(&id).unwrap_or(pump::Parked {
                reader: ReaderCarry::default(),
                state: PumpState::default(),
            });
            let Some(t) = inner.terminals.get(&uri) else {
                continue;
            };
            let (pid, exit) = match (&t.process, pty) {
                (Some(p), Some(_)) => (Some(p.pid()), p.exit_status()),
                // Restored (no process), or its pty could not be handed over.
                (Some(_), None) => continue,
                (None, _) => (None, Reaping::Pending),
            };
            let (reaped, exit_code) = match exit {
                Reaping::Pending => (false, None),
                Reaping::Reaped { code } => (true, code),
            };
            terminals.push(TerminalImage {
                uri,
                id,
                state: t.state.clone(),
                holder: t.holder.clone(),
                renamed_by_client: t.renamed_by_client,
                content_bytes: t.content_bytes,
                history: t.history.image(),
                orphaned_for_ms: t
                    .orphaned_since
                    .map(|at| now.duration_since(at).as_millis() as u64),
                created_ms: t.created_ms,
                pid,
                pty,
                reaped,
                exit_code,
                input,
                reader: parked.reader,
                pump: parked.state,
                screen: Some(t.screen.image()),
                transcript: t.transcript.as_ref().map(|tr| tr.image()),
                raw_texts: None,
            });
        }
        let image = HostImage {
            instance_id: self.instance_id.clone(),
            server_seq: inner.server_seq,
            next_terminal: inner.next_serial,
            root: inner.root.clone(),
            root_history: inner.root_history.image(),
            seen_clients: inner.seen_clients.image(),
            terminals,
            script_dir: crate::terminal::shell_integration::current_script_dir(),
        };
        (image, fds)
    }

    /// Rebuilds a host from `image` (see [`Host::suspend`]) with `config`, taking the pty
    /// masters from `fds` (by index), and restarts every terminal: its reader from the carried
    /// pipeline state, its writer with the input not yet written, its waiter unless the process
    /// was already reaped, and its pump. Must run inside the tokio runtime.
    ///
    /// Errors: a descriptor is missing or not a pty master, or a thread cannot be started;
    /// terminals restarted before the error keep running.
    pub fn resume(
        config: &Config,
        image: HostImage,
        fds: &mut [Option<OwnedFd>],
        store: Option<crate::store::Opened>,
    ) -> io::Result<Arc<Host>> {
        // The hand-over, not the transcripts, says which terminals exist: it has them all, live.
        let store = store.map(|mut o| {
            o.restored.clear();
            o
        });
        if let Some(dir) = &image.script_dir {
            crate::terminal::shell_integration::adopt_script_dir(dir);
        }
        let mut host = Host::with_store(config, store);
        match Arc::get_mut(&mut host) {
            Some(h) => h.instance_id = image.instance_id,
            None => return Err(io::Error::other("the new host is already shared")),
        }
        let mut pumps = Vec::new();
        {
            let mut inner = host.lock();
            inner.server_seq = image.server_seq;
            inner.next_serial = image.next_terminal;
            inner.root = image.root;
            inner.root_history = History::from_image(image.root_history);
            for (id, age, wire) in &image.seen_clients {
                inner.seen_clients.restore(id, *age, *wire);
            }
            let now = tokio::time::Instant::now();
            for mut t in image.terminals {
                let (Some(pid), Some(pty)) = (t.pid, t.pty) else {
                    // Restored from a transcript: no process, no pump.
                    let screen = t
                        .screen
                        .take()
                        .map_or_else(|| Screen::new(80, 24), Screen::from_image);
                    let wake = Arc::new(tokio::sync::Notify::new());
                    let uri = t.uri.clone();
                    inner
                        .terminals
                        .insert(uri, entry(t, None, wake, screen, now));
                    continue;
                };
                let fd = fds.get_mut(pty).and_then(Option::take).ok_or_else(|| {
                    io::Error::other(format!("terminal {}: no pty descriptor #{pty}", t.uri))
                })?;
                let master = PtyMaster::adopt(fd).map_err(|e| {
                    io::Error::new(e.kind(), format!("terminal {}: pty: {e}", t.uri))
                })?;
                let (process, events) = terminal::adopt(Adopted {
                    pid,
                    master,
                    input: std::mem::take(&mut t.input),
                    exit: if t.reaped {
                        Reaping::Reaped { code: t.exit_code }
                    } else {
                        Reaping::Pending
                    },
                    carry: std::mem::take(&mut t.reader),
                })?;
                let mut state = std::mem::take(&mut t.pump);
                if t.reaped && !state.exited {
                    state.exited = true;
                    state.exit_code = t.exit_code;
                }
                let wake = Arc::new(tokio::sync::Notify::new());
                let screen = match t.screen.take() {
                    Some(image) => Screen::from_image(image),
                    None => {
                        let size =
                            |v: Option<i64>, d| v.and_then(|v| u16::try_from(v).ok()).unwrap_or(d);
                        let mut s = Screen::new(size(t.state.cols, 80), size(t.state.rows, 24));
                        let bytes = t.content_bytes;
                        s.appended(bytes, bytes);
                        s
                    }
                };
                let model_wake = screen.wake();
                let (uri, id) = (t.uri.clone(), t.id);
                let entry = entry(t, Some(process), wake.clone(), screen, now);
                inner.terminals.insert(uri.clone(), entry);
                pumps.push((uri, id, events, wake, state, model_wake));
            }
            inner.refresh_orphans();
        }
        for (uri, id, events, wake, state, model_wake) in pumps {
            tokio::spawn(screen::run(host.clone(), uri.clone(), id, model_wake));
            tokio::spawn(pump::resume(host.clone(), uri, id, events, wake, state));
        }
        Ok(host)
    }

    /// Number of terminals.
    pub fn terminal_count(&self) -> usize {
        self.lock().terminals.len()
    }

    /// Called by a pump that stopped for a live upgrade (see [`Host::suspend`]).
    pub(super) fn park(&self, id: u64, parked: pump::Parked) {
        self.lock().parked.insert(id, parked);
    }
}

/// The store's entry for terminal `t` of an image, with what the new image made of the rest
/// of it: `process` its adopted pty (`None` for a terminal restored from a transcript, which
/// has no process), `wake` what its pump waits on, `screen` its model's bookkeeping. The
/// orphan clock goes on from `now`, as far back as the image says.
fn entry(
    t: TerminalImage,
    process: Option<Arc<dyn Pty>>,
    wake: Arc<tokio::sync::Notify>,
    screen: Screen,
    now: tokio::time::Instant,
) -> TerminalEntry {
    TerminalEntry {
        serial: t.id,
        state: t.state,
        subscribers: Subscribers::new(wake),
        process,
        holder: t.holder,
        renamed_by_client: t.renamed_by_client,
        content_bytes: t.content_bytes,
        history: History::from_image(t.history),
        orphaned_since: t
            .orphaned_for_ms
            .and_then(|ms| now.checked_sub(Duration::from_millis(ms))),
        created_ms: t.created_ms,
        info_json: None,
        screen,
        transcript: t
            .transcript
            .as_ref()
            .and_then(|(key, since)| persist::Transcript::from_image(key, *since)),
        exited_at: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--upgrade-timeout` bounds the wait for creations in flight: a shell that is still
    /// being spawned when it runs out makes the upgrade give up — after exactly that long, not
    /// the 5 s default — with nothing closed and `createTerminal` accepted again.
    #[tokio::test(start_paused = true)]
    async fn the_upgrade_timeout_bounds_the_wait_for_creations_in_flight() {
        let host = Host::new(&Config::default());
        host.lock().spawning.insert("ahp-terminal:/slow".into());
        let started = Instant::now();
        let err = host
            .begin_upgrade(Duration::from_millis(1500))
            .await
            .unwrap_err();
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(1500) && waited < Duration::from_millis(1600),
            "gave up after {waited:?}"
        );
        assert_eq!(err, "terminals being created did not finish within 1.5 s");
        assert!(!host.lock().upgrading, "new terminals are still refused");

        // Once the creation is over, the same wait ends at once.
        host.lock().spawning.clear();
        let started = Instant::now();
        host.begin_upgrade(Duration::from_secs(60)).await.unwrap();
        assert!(started.elapsed() < Duration::from_millis(10));
        assert!(host.lock().upgrading);
    }
}
