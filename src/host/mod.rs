//! The authoritative store: root and terminal states, the global `serverSeq`, subscriptions
//! and fan-out.
//!
//! Every state change, whether from pty output or from a client, runs here under one lock:
//! the official `ahp` reducers update the state, a fresh `serverSeq` is assigned, the
//! envelope is encoded once and queued on each subscriber's [`Outbox`]. Because queuing
//! happens under the same lock that assigns sequence numbers, every connection receives its
//! envelopes in increasing `serverSeq` order, and a snapshot plus its subscription (and the
//! response carrying it) are atomic with respect to later actions (docs/protocol.md, "Sequence numbers").
//! Every envelope is also kept in its channel's bounded [`history::History`], which is what
//! `reconnect` replays. Connections own only their outbox; terminals outlive them, and a
//! terminal whose claim holder stays away longer than the orphan grace is reaped.
//!
//! This file holds the store itself and the connection registry (initialize, subscribe);
//! `terminals.rs` the terminal lifecycle and server actions, `actions.rs` client actions,
//! `resume.rs` reconnect and reaping, `flow.rs` the flow-control policy (watermarks, limits,
//! lagging and stalled connections); `pump.rs` is the per-terminal task; `screen.rs` keeps
//! what snapshots and cursor reports need of the terminal model, and runs its task.
//!
//! May touch: the store under its lock and the connections' outboxes; the OS only through
//! `terminal`'s [`Pty`] and [`PtySystem`] traits. Imports nothing above it (no rpc, server or
//! WebSocket types).

mod actions;
pub(crate) mod catalog;
pub(crate) mod channel;
pub(crate) mod error;
mod exited;
mod flow;
pub mod handover;
pub(crate) mod history;
mod model_threads;
pub(crate) mod outbox;
mod persist;
mod pump;
mod restored;
mod resume;
mod screen;
pub(crate) mod scrollback;
mod terminals;
pub(crate) mod validate;
mod versions;

#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use ahp_types::state::{RootState, Snapshot, SnapshotState, TerminalState};
use parking_lot::{Mutex, MutexGuard};
use tokio::time::Instant;

use crate::codec::{Frame, Wire};
use crate::config::Config;
/// File descriptors each running terminal keeps open (what the open-file limit must leave
/// room for; the pty layer's own count).
pub use crate::terminal::FDS_PER_TERMINAL;
use crate::terminal::{shell_integration, NativePtys, Pty, PtySystem};
use channel::ChannelKind;
pub use error::{ErrorKind, HostError};
pub use flow::{CLOSE_LAGGING, CLOSE_STALLED};
use history::History;
pub use outbox::{Outbox, OutboxReceiver, Outgoing};
pub use persist::{compact_after, Removed, RESTORED_INPUT};
pub use resume::{CLOSE_SUPERSEDED, MAX_REPLAY_BYTES};
pub use terminals::MAX_DATA_BYTES;

/// Channels looked up per lock acquisition when checking a long list (see `Host::existing`).
const LOOKUP_CHUNK: usize = 64;

/// Identifies one connection for the life of the daemon.
pub type ConnId = u64;

/// The host: shared by every connection and terminal task.
pub struct Host {
    config: Config,
    /// A random UUID naming this daemon instance (exported to terminals as `AHPTY_HOST_ID`).
    instance_id: String,
    inner: Mutex<Inner>,
    /// Flow control: its policy and the watchdog's and reaper's wake-ups.
    flow: Arc<flow::Flow>,
    /// Where terminals come from: the OS's ptys, or a stand-in in unit tests.
    ptys: Arc<dyn PtySystem>,
    /// Terminal-model jobs running at once, daemon-wide ([`screen::MODEL_JOBS`]).
    model_jobs: tokio::sync::Semaphore,
    /// Signalled after each model job; the allocator-trimming task waits on it
    /// (`screen::give_back_memory`, started once with the first model task).
    memory_trim: Arc<tokio::sync::Notify>,
    trimmer: std::sync::Once,
}

struct Inner {
    server_seq: u64,
    root: RootState,
    root_subscribers: BTreeSet<ConnId>,
    root_history: History,
    terminals: HashMap<String, TerminalEntry>,
    /// Live connections per `clientId` (for reaping and reconnect).
    clients: HashMap<String, usize>,
    /// The `clientId`s that presented themselves recently (bounded in count and age): only
    /// those can be resumed by replay (another daemon's `serverSeq` means nothing here).
    seen_clients: resume::RecentClients,
    /// URIs whose `createTerminal` is spawning the shell: taken, though not yet terminals.
    spawning: HashSet<String>,
    /// Most subscriptions per connection (`--max-subscriptions`).
    max_subscriptions: usize,
    /// Retained content per terminal, in bytes (`--scrollback-bytes`).
    scrollback_bytes: usize,
    /// Flow control (shared with [`Host`]).
    flow: Arc<flow::Flow>,
    connections: HashMap<ConnId, ConnEntry>,
    next_conn: ConnId,
    /// The [`TerminalEntry::serial`] of the next terminal created.
    next_serial: u64,
    shutting_down: bool,
    /// A live upgrade is under way (see `handover.rs`): no new terminals.
    upgrading: bool,
    /// Suspended pumps' hand-over state, by terminal id (during a live upgrade).
    parked: HashMap<u64, pump::Parked>,
    /// The transcript store (`None` without persistence).
    store: Option<Arc<crate::store::Store>>,
    /// The `serverSeq` at which the store's high-water mark is raised next.
    seq_renew_at: u64,
}

struct ConnEntry {
    outbox: Outbox,
    client_id: Option<String>,
    /// The shapes envelopes are encoded in for this connection.
    wire: Wire,
    /// Every channel this connection subscribes to (the root and terminal URIs), so that
    /// counting, checking and dropping its subscriptions never scans every terminal.
    subscriptions: HashSet<String>,
    /// `Some` while an answer to this connection is being encoded outside the lock (see
    /// [`Host::answer`]): envelopes for it wait here, in order, and follow the answer. They
    /// count as queued in its outbox ([`Outbox::hold`]), so flow control sees them.
    held: Option<Vec<Frame>>,
}

impl ConnEntry {
    /// Queues a message for the socket, behind an answer being encoded if there is one.
    fn deliver(&mut self, text: Frame) {
        match &mut self.held {
            Some(held) => {
                self.outbox.hold(text.len());
                held.push(text);
            }
            None => self.outbox.send(text),
        }
    }
}

struct TerminalEntry {
    /// The daemon's number for this terminal: 1 for the first created since start, then
    /// increasing, never reused. It orders the catalogue, is the `id` of
    /// `ahpty/listTerminals`, and tells this terminal from a later one created under the same
    /// URI (a pump whose terminal was disposed finds another serial there and stops).
    serial: u64,
    state: TerminalState,
    subscribers: flow::Subscribers,
    /// `None` for a terminal restored from an earlier process's transcript.
    process: Option<Arc<dyn Pty>>,
    /// The client that holds the claim (decision D6).
    holder: String,
    /// A client named (`createTerminal.name`) or renamed the terminal: titles from escape
    /// sequences no longer apply.
    renamed_by_client: bool,
    content_bytes: usize,
    history: History,
    /// When the holder's last connection went away (`None` while it is connected); tokio's
    /// clock, like every deadline of the host, so paused time drives reaping in tests.
    orphaned_since: Option<Instant>,
    /// Creation time, Unix milliseconds.
    created_ms: i64,
    /// This terminal's row of the root catalogue (`TerminalInfo`) as JSON, kept until its
    /// title, claim or lifecycle changes, so a catalogue update encodes only what changed.
    info_json: Option<String>,
    /// What snapshots and cursor reports need of the terminal model.
    screen: screen::Screen,
    /// Its transcript in the store (`None` without persistence).
    transcript: Option<persist::Transcript>,
    /// The `serverSeq` at which its `terminal/exited` was emitted: with the serial, the order
    /// in which exited terminals are disposed past `--max-exited-terminals` (see
    /// `terminals.rs`). 0 while it runs, and for one restored from a transcript or adopted
    /// in a live upgrade already exited (they count as exited before any other).
    exited_at: u64,
}

impl Host {
    /// A host with no terminals and no transcript store; `serverSeq` starts from the clock
    /// ([`crate::store::clock_seq_base`]).
    pub fn new(config: &Config) -> Arc<Host> {
        Host::with_store(config, None)
    }

    /// A host with no terminals and no transcript store, whose terminals `ptys` starts.
    #[cfg(test)]
    pub(crate) fn with_ptys(config: &Config, ptys: Arc<dyn PtySystem>) -> Arc<Host> {
        Host::build(config, None, ptys)
    }

    /// A host with the terminals of an opened transcript store (restored exited, without
    /// processes; see docs/protocol.md), writing to it from now on; `serverSeq` starts above
    /// every value an earlier process of that store handed out.
    pub fn with_store(config: &Config, opened: Option<crate::store::Opened>) -> Arc<Host> {
        Host::build(config, opened, Arc::new(NativePtys))
    }

    fn build(
        config: &Config,
        opened: Option<crate::store::Opened>,
        ptys: Arc<dyn PtySystem>,
    ) -> Arc<Host> {
        let (store, restored, base) = match opened {
            Some(o) => {
                let kept = o.restored.len().min(config.max_exited_terminals);
                tracing::info!(
                    "transcripts in {}: {} terminal{} restored ({} KiB, read in {} ms)",
                    o.store.dir().display(),
                    kept,
                    if kept == 1 { "" } else { "s" },
                    o.bytes / 1024,
                    o.took.as_millis()
                );
                (Some(o.store), o.restored, o.seq_base)
            }
            None => (None, Vec::new(), crate::store::clock_seq_base()),
        };
        let flow = flow::Flow::new(config);
        let host = Arc::new(Host {
            config: config.clone(),
            instance_id: uuid::Uuid::new_v4().to_string(),
            flow: flow.clone(),
            ptys,
            model_jobs: tokio::sync::Semaphore::new(screen::MODEL_JOBS),
            memory_trim: Arc::new(tokio::sync::Notify::new()),
            trimmer: std::sync::Once::new(),
            inner: Mutex::new(Inner {
                server_seq: base,
                root: RootState {
                    agents: Vec::new(),
                    active_sessions: None,
                    terminals: Some(Vec::new()),
                    config: None,
                    meta: None,
                },
                root_subscribers: BTreeSet::new(),
                root_history: History::new(history::ROOT_HISTORY_BYTES, base),
                terminals: HashMap::new(),
                clients: HashMap::new(),
                seen_clients: resume::RecentClients::new(
                    resume::MAX_REMEMBERED_CLIENTS,
                    resume::REMEMBER_CLIENTS_FOR,
                ),
                spawning: HashSet::new(),
                max_subscriptions: config.max_subscriptions,
                scrollback_bytes: config.scrollback_bytes,
                flow,
                connections: HashMap::new(),
                next_conn: 1,
                next_serial: 1,
                shutting_down: false,
                upgrading: false,
                parked: HashMap::new(),
                store,
                seq_renew_at: base.saturating_add(crate::store::SEQ_MARGIN / 2),
            }),
        });
        host.lock()
            .restore(restored, config.history_bytes, config.max_exited_terminals);
        host
    }

    /// The store's one lock. It does not poison: a panic while holding it cannot leave the
    /// state half-reduced in a way that is worse than stopping, so the daemon keeps serving.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock()
    }

    /// Most entries accepted in `initialSubscriptions` and `reconnect.subscriptions`: twice
    /// `--max-subscriptions` (room for stale entries next to a full set of live ones), which
    /// bounds the work a single request does under the lock.
    pub fn max_channel_list(&self) -> usize {
        self.config.max_subscriptions.saturating_mul(2)
    }

    /// `defaultDirectory` of the initialize result: the `file://` URI of the home directory.
    pub fn default_directory(&self) -> String {
        channel::file_uri(&channel::home_dir())
    }

    /// Registers a new connection and its outbox.
    pub fn connect(&self, outbox: Outbox) -> ConnId {
        let mut inner = self.lock();
        let id = inner.next_conn;
        inner.next_conn += 1;
        inner.connections.insert(
            id,
            ConnEntry {
                outbox,
                client_id: None,
                wire: Wire::Current,
                subscriptions: HashSet::new(),
                held: None,
            },
        );
        id
    }

    /// Forgets a connection and all its subscriptions. Terminals are not affected.
    pub fn disconnect(&self, conn: ConnId) {
        let mut inner = self.lock();
        inner.drop_connection(conn);
    }

    /// Queues the answer `encode` builds for `conn`, encoding it *after* releasing `inner`, so
    /// that the size of an answer (snapshots, a replay, a `missing` list) never holds the lock.
    /// Ordering is kept as if it were queued under the lock: until the answer is queued,
    /// every envelope for `conn` is held back in its [`ConnEntry`] and follows the answer.
    fn answer(
        &self,
        mut inner: MutexGuard<'_, Inner>,
        conn: ConnId,
        encode: impl FnOnce() -> String,
    ) {
        match inner.connections.get_mut(&conn) {
            Some(c) if c.held.is_none() => c.held = Some(Vec::new()),
            _ => {
                let text = encode();
                inner.send(conn, text);
                return;
            }
        }
        drop(inner);
        let text = encode();
        let mut inner = self.lock();
        if let Some(c) = inner.connections.get_mut(&conn) {
            c.outbox.send(text);
            for t in c.held.take().unwrap_or_default() {
                c.outbox.send_held(t);
            }
        }
    }

    /// Which of `channels` exist (the root, or a terminal), looked up [`LOOKUP_CHUNK`] at a
    /// time with the lock released in between, so a long list never holds it for long. The
    /// answer may be stale by the time the caller takes the lock again: callers re-check the
    /// channels they keep.
    fn existing(&self, channels: &[&str]) -> Vec<bool> {
        let mut out = Vec::with_capacity(channels.len());
        for chunk in channels.chunks(LOOKUP_CHUNK) {
            let inner = self.lock();
            out.extend(
                chunk
                    .iter()
                    .map(|&c| c == channel::ROOT || inner.terminals.contains_key(c)),
            );
        }
        out
    }

    /// Checks the `clientId` and channel list a handshake presents (`initialize`,
    /// `reconnect`): an id of at most [`validate::MAX_ID_BYTES`], at most
    /// [`Host::max_channel_list`] entries of at most [`validate::MAX_URI_BYTES`] each. Returns
    /// the distinct entries, in order. Errors: invalid params naming the field.
    fn check_handshake<'a>(
        &self,
        client_id: &str,
        field: &str,
        channels: &'a [String],
    ) -> Result<Vec<&'a str>, HostError> {
        validate::check_len("clientId", client_id, validate::MAX_ID_BYTES)
            .and_then(|()| validate::channel_list(field, channels, self.max_channel_list()))
            .map_err(HostError::invalid_params)
    }

    /// Completes `initialize` for a connection that negotiated `wire`: checks the client id and
    /// `initialSubscriptions` (see `check_handshake`; nothing happens on an error), records
    /// both, subscribes the connection to every known channel of `subscriptions` (distinct
    /// entries; unknown ones are left out), and queues the response built by
    /// `respond(serverSeq, snapshots)`, atomically with respect to `serverSeq` (the response
    /// is encoded outside the lock).
    pub fn initialize(
        &self,
        conn: ConnId,
        client_id: String,
        subscriptions: &[String],
        wire: Wire,
        respond: impl FnOnce(i64, Vec<Snapshot>) -> String,
    ) -> Result<(), HostError> {
        let subscriptions =
            self.check_handshake(&client_id, "initialSubscriptions", subscriptions)?;
        self.set_wire(conn, &client_id, wire);
        let exists = self.existing(&subscriptions);
        let mut inner = self.lock();
        inner.set_client(conn, client_id);
        let mut snapshots = Vec::new();
        for (&uri, _) in subscriptions.iter().zip(exists).filter(|(_, e)| *e) {
            let kind = if uri == channel::ROOT {
                ChannelKind::Root
            } else {
                ChannelKind::Terminal
            };
            if let Ok(s) = inner.subscribe(conn, uri, kind) {
                snapshots.push(s);
            }
        }
        let seq = inner.server_seq as i64;
        self.answer(inner, conn, || respond(seq, snapshots));
        Ok(())
    }

    /// `subscribe`: takes the snapshot, registers the subscription and queues the response
    /// built by `respond`, atomically with respect to `serverSeq`.
    ///
    /// Errors (decision D2): a session/chat URI → session not found (-32001); an unknown
    /// terminal or an unserved reserved scheme → not found (-32008); not an absolute URI →
    /// invalid params (-32602).
    pub fn subscribe(
        &self,
        conn: ConnId,
        channel: &str,
        respond: impl FnOnce(Result<Snapshot, HostError>) -> String,
    ) {
        let kind = channel::classify(channel);
        let mut inner = self.lock();
        let result = inner.subscribe(conn, channel, kind);
        self.answer(inner, conn, || respond(result));
    }

    /// `unsubscribe`: stops delivery on `channel`; unknown channels are ignored.
    pub fn unsubscribe(&self, conn: ConnId, channel: &str) {
        let mut inner = self.lock();
        inner.remove_subscriber(conn, channel);
    }

    /// Stops accepting terminals, kills every terminal's session, writes out the transcripts
    /// (kept for the next start) and asks every connection to close with code 1001.
    pub async fn shutdown(&self) {
        let (processes, outboxes) = {
            let mut inner = self.lock();
            inner.shutting_down = true;
            let processes: Vec<_> = inner
                .terminals
                .drain()
                .filter_map(|(_, t)| t.process)
                .collect();
            let outboxes: Vec<_> = inner
                .connections
                .values()
                .map(|c| c.outbox.clone())
                .collect();
            (processes, outboxes)
        };
        let grace = self.config.kill_grace;
        let kills: Vec<_> = processes
            .into_iter()
            .map(|p| tokio::task::spawn_blocking(move || p.kill_session(grace)))
            .collect();
        for k in kills {
            let _ = k.await;
        }
        self.close_store().await;
        for o in outboxes {
            o.close(
                crate::proto::close::CLOSE_GOING_AWAY,
                "ahpty is shutting down",
            );
        }
        if let Err(e) = shell_integration::remove_script_dir() {
            tracing::debug!(error = %e, "cannot remove the shell-integration script directory");
        }
    }
}

impl Inner {
    fn send(&mut self, conn: ConnId, text: String) {
        if let Some(c) = self.connections.get_mut(&conn) {
            c.deliver(text.into());
        }
    }

    /// Records the `clientId` a connection presented (`initialize` or `reconnect`).
    fn set_client(&mut self, conn: ConnId, client_id: String) {
        let Some(c) = self.connections.get_mut(&conn) else {
            return;
        };
        if let Some(old) = c.client_id.replace(client_id.clone()) {
            decrement(&mut self.clients, &old);
        }
        self.seen_clients.touch(&client_id);
        *self.clients.entry(client_id).or_insert(0) += 1;
        self.refresh_orphans();
    }

    /// Forgets a connection: its subscriptions, and its share in its client's presence.
    fn drop_connection(&mut self, conn: ConnId) {
        let Some(c) = self.connections.remove(&conn) else {
            return;
        };
        if let Some(id) = c.client_id {
            decrement(&mut self.clients, &id);
            self.seen_clients.touch(&id);
        }
        for channel in &c.subscriptions {
            if channel == channel::ROOT {
                self.root_subscribers.remove(&conn);
            } else if let Some(t) = self.terminals.get_mut(channel) {
                t.subscribers.remove(&conn);
            }
        }
        self.refresh_orphans();
    }

    /// Stops delivery of `channel` to `conn` (nothing happens if it was not subscribed).
    fn remove_subscriber(&mut self, conn: ConnId, channel: &str) {
        let Some(c) = self.connections.get_mut(&conn) else {
            return;
        };
        if !c.subscriptions.remove(channel) {
            return;
        }
        if channel == channel::ROOT {
            self.root_subscribers.remove(&conn);
        } else if let Some(t) = self.terminals.get_mut(channel) {
            t.subscribers.remove(&conn);
        }
    }

    /// Whether `conn` is still registered and may hold one more subscription (re-subscribing to
    /// a channel it already has is always allowed).
    fn check_room(&self, conn: ConnId, channel: &str) -> Result<(), HostError> {
        let Some(c) = self.connections.get(&conn) else {
            return Err(HostError::internal("this connection is closing"));
        };
        if c.subscriptions.len() >= self.max_subscriptions && !c.subscriptions.contains(channel) {
            return Err(HostError::internal(format!(
                "subscription limit reached: a connection may hold at most {} subscriptions \
                 (--max-subscriptions)",
                self.max_subscriptions
            )));
        }
        Ok(())
    }

    /// Adds a subscriber to an existing channel (no snapshot); returns whether it is
    /// subscribed now.
    fn add_subscriber(&mut self, conn: ConnId, uri: &str) -> bool {
        if self.check_room(conn, uri).is_err() {
            return false;
        }
        if uri == channel::ROOT {
            self.root_subscribers.insert(conn);
        } else if let Some(t) = self.terminals.get_mut(uri) {
            t.subscribers.insert(conn);
        } else {
            return false;
        }
        if let Some(c) = self.connections.get_mut(&conn) {
            if !c.subscriptions.contains(uri) {
                c.subscriptions.insert(uri.to_string());
            }
        }
        true
    }

    fn snapshot(&self, channel: &str) -> Option<Snapshot> {
        let state = if channel == channel::ROOT {
            SnapshotState::Root(Box::new(self.root.clone()))
        } else {
            let t = self.terminals.get(channel)?;
            SnapshotState::Terminal(Box::new(scrollback::with_content(
                &t.state,
                t.screen.snapshot_content(&t.state, self.scrollback_bytes),
            )))
        };
        Some(Snapshot {
            resource: channel.to_string(),
            state,
            from_seq: self.server_seq as i64,
        })
    }

    /// Subscribes `conn` to an existing channel of the given kind ([`channel::classify`],
    /// done by the caller outside the lock) and returns its snapshot. Errors: see
    /// [`Host::subscribe`]; also internal (-32603) when the connection is at its subscription
    /// limit or is gone (e.g. superseded by a reconnect).
    fn subscribe(
        &mut self,
        conn: ConnId,
        channel: &str,
        kind: ChannelKind,
    ) -> Result<Snapshot, HostError> {
        self.check_room(conn, channel)?;
        match kind {
            ChannelKind::Root => {
                self.add_subscriber(conn, channel);
            }
            ChannelKind::Session => return Err(HostError::session_not_found(channel)),
            ChannelKind::ReservedOther => {
                return Err(HostError::not_found(format!(
                    "channel not served by ahpty: {channel}"
                )))
            }
            ChannelKind::Invalid(msg) => {
                return Err(HostError::invalid_params(format!("channel: {msg}")))
            }
            ChannelKind::Terminal => {
                if !self.add_subscriber(conn, channel) {
                    return Err(HostError::not_found(format!(
                        "terminal not found: {channel}"
                    )));
                }
            }
        }
        self.snapshot(channel)
            .ok_or_else(|| HostError::not_found(format!("channel not found: {channel}")))
    }

    fn next_seq(&mut self) -> u64 {
        self.server_seq += 1;
        if self.server_seq >= self.seq_renew_at {
            self.renew_seq_mark();
        }
        self.server_seq
    }
}

fn decrement(counts: &mut HashMap<String, usize>, key: &str) {
    if let Some(n) = counts.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            counts.remove(key);
        }
    }
}
