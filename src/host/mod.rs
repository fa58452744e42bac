//! The authoritative store: root and terminal states, the global `serverSeq`, subscriptions
//! and fan-out.
//!
//! Every state change, whether from pty output or from a client, runs here under one lock:
//! the official `ahp` reducers update the state, a fresh `serverSeq` is assigned, the
//! envelope is encoded once and queued on each subscriber's [`Outbox`]. Because queuing
//! happens under the same lock that assigns sequence numbers, every connection receives its
//! envelopes in increasing `serverSeq` order, and a snapshot plus its subscription (and the
//! response carrying it) are atomic with respect to later actions (notes §5, §6).
//! Every envelope is also kept in its channel's bounded [`history::History`], which is what
//! `reconnect` replays. Connections own only their outbox; terminals outlive them, and a
//! terminal whose claim holder stays away longer than the orphan grace is reaped.
//!
//! This file holds the store itself and the connection registry (initialize, subscribe);
//! `terminals.rs` the terminal lifecycle and server actions, `actions.rs` client actions,
//! `resume.rs` reconnect and reaping, `flow.rs` the flow-control policy (watermarks, limits,
//! lagging and stalled connections); `pump.rs` is the per-terminal task.

mod actions;
pub mod channel;
mod flow;
pub mod history;
pub mod outbox;
mod pump;
mod resume;
pub mod scrollback;
mod terminals;
pub mod validate;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use ahp_types::state::{RootState, Snapshot, SnapshotState, TerminalState};

use crate::config::Config;
use crate::rpc::error::RpcError;
use crate::terminal::{shell_integration, PtyProcess};
use channel::ChannelKind;
pub use flow::{CLOSE_LAGGING, CLOSE_STALLED};
use history::History;
pub use outbox::{Outbox, OutboxReceiver, Outgoing};
pub use resume::{CLOSE_SUPERSEDED, MAX_REPLAY_BYTES};
pub use terminals::MAX_DATA_BYTES;

/// Identifies one connection for the life of the daemon.
pub type ConnId = u64;

/// The host: shared by every connection and terminal task.
pub struct Host {
    config: Config,
    inner: Mutex<Inner>,
    /// Flow control: its policy and the watchdog's and reaper's wake-ups.
    flow: Arc<flow::Flow>,
}

struct Inner {
    server_seq: u64,
    root: RootState,
    root_subscribers: BTreeSet<ConnId>,
    root_history: History,
    terminals: HashMap<String, TerminalEntry>,
    /// Live connections per `clientId` (for reaping and reconnect).
    clients: HashMap<String, usize>,
    /// Every `clientId` that presented itself since the daemon started: only those can be
    /// resumed by replay (another daemon's `serverSeq` means nothing here).
    seen_clients: HashSet<String>,
    /// URIs whose `createTerminal` is spawning the process.
    reserved: HashSet<String>,
    /// Most subscriptions per connection (`--max-subscriptions`).
    max_subscriptions: usize,
    /// Retained content per terminal, in bytes (`--scrollback-bytes`).
    scrollback_bytes: usize,
    /// Flow control (shared with [`Host`]).
    flow: Arc<flow::Flow>,
    connections: HashMap<ConnId, ConnEntry>,
    next_conn: ConnId,
    next_terminal: u64,
    shutting_down: bool,
}

struct ConnEntry {
    outbox: Outbox,
    client_id: Option<String>,
}

struct TerminalEntry {
    /// Distinguishes a terminal from a later one created under the same URI.
    id: u64,
    state: TerminalState,
    subscribers: flow::Subscribers,
    process: Arc<PtyProcess>,
    /// The client that holds the claim (decision D6).
    holder: String,
    /// A client renamed the terminal: titles from escape sequences no longer apply.
    renamed_by_client: bool,
    content_bytes: usize,
    history: History,
    /// When the holder's last connection went away (`None` while it is connected).
    orphaned_since: Option<Instant>,
}

impl Host {
    /// A host with no terminals.
    pub fn new(config: &Config) -> Arc<Host> {
        let flow = flow::Flow::new(config);
        Arc::new(Host {
            config: config.clone(),
            flow: flow.clone(),
            inner: Mutex::new(Inner {
                server_seq: 0,
                root: RootState {
                    agents: Vec::new(),
                    active_sessions: None,
                    terminals: Some(Vec::new()),
                    config: None,
                    meta: None,
                },
                root_subscribers: BTreeSet::new(),
                root_history: History::new(history::ROOT_HISTORY_BYTES, 0),
                terminals: HashMap::new(),
                clients: HashMap::new(),
                seen_clients: HashSet::new(),
                reserved: HashSet::new(),
                max_subscriptions: config.max_subscriptions,
                scrollback_bytes: config.scrollback_bytes,
                flow,
                connections: HashMap::new(),
                next_conn: 1,
                next_terminal: 1,
                shutting_down: false,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the state half-reduced in a way that is
        // worse than stopping; keep serving.
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
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
            },
        );
        id
    }

    /// Forgets a connection and all its subscriptions. Terminals are not affected.
    pub fn disconnect(&self, conn: ConnId) {
        let mut inner = self.lock();
        inner.drop_connection(conn);
    }

    /// Completes `initialize`: records the client id, subscribes the connection to every
    /// known channel of `subscriptions` (unknown ones are left out), and queues the response
    /// built by `respond(serverSeq, snapshots)` — all atomically.
    pub fn initialize(
        &self,
        conn: ConnId,
        client_id: String,
        subscriptions: &[String],
        respond: impl FnOnce(i64, Vec<Snapshot>) -> String,
    ) {
        let mut inner = self.lock();
        inner.set_client(conn, client_id);
        let mut snapshots = Vec::new();
        for uri in subscriptions {
            if let Ok(s) = inner.subscribe(conn, uri) {
                if !snapshots
                    .iter()
                    .any(|x: &Snapshot| x.resource == s.resource)
                {
                    snapshots.push(s);
                }
            }
        }
        let seq = inner.server_seq as i64;
        let text = respond(seq, snapshots);
        inner.send(conn, text);
    }

    /// `subscribe`: takes the snapshot, registers the subscription and queues the response
    /// built by `respond`, atomically with respect to `serverSeq`.
    ///
    /// Errors: a session/chat URI → -32001; an unknown terminal or an unserved reserved
    /// scheme → -32008; not an absolute URI → -32602.
    pub fn subscribe(
        &self,
        conn: ConnId,
        channel: &str,
        respond: impl FnOnce(Result<Snapshot, RpcError>) -> String,
    ) {
        let mut inner = self.lock();
        let result = inner.subscribe(conn, channel);
        let text = respond(result);
        inner.send(conn, text);
    }

    /// `unsubscribe`: stops delivery on `channel`; unknown channels are ignored.
    pub fn unsubscribe(&self, conn: ConnId, channel: &str) {
        let mut inner = self.lock();
        if channel == channel::ROOT {
            inner.root_subscribers.remove(&conn);
        } else if let Some(t) = inner.terminals.get_mut(channel) {
            t.subscribers.remove(&conn);
        }
    }

    /// Stops accepting terminals, kills every terminal's session and asks every connection
    /// to close with code 1001.
    pub async fn shutdown(&self) {
        let (processes, outboxes) = {
            let mut inner = self.lock();
            inner.shutting_down = true;
            let processes: Vec<_> = inner.terminals.drain().map(|(_, t)| t.process).collect();
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
        for o in outboxes {
            o.close(1001, "ahpty is shutting down");
        }
        if let Err(e) = shell_integration::remove_script_dir() {
            tracing::debug!(error = %e, "cannot remove the shell-integration script directory");
        }
    }
}

impl Inner {
    fn send(&self, conn: ConnId, text: String) {
        if let Some(c) = self.connections.get(&conn) {
            c.outbox.send(text);
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
        if !self.seen_clients.contains(&client_id) {
            self.seen_clients.insert(client_id.clone());
        }
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
        }
        self.unsubscribe_all(conn);
        self.refresh_orphans();
    }

    fn unsubscribe_all(&mut self, conn: ConnId) {
        self.root_subscribers.remove(&conn);
        for t in self.terminals.values_mut() {
            t.subscribers.remove(&conn);
        }
    }

    fn subscription_count(&self, conn: ConnId) -> usize {
        usize::from(self.root_subscribers.contains(&conn))
            + self
                .terminals
                .values()
                .filter(|t| t.subscribers.contains(&conn))
                .count()
    }

    fn is_subscribed(&self, conn: ConnId, channel: &str) -> bool {
        if channel == channel::ROOT {
            self.root_subscribers.contains(&conn)
        } else {
            self.terminals
                .get(channel)
                .is_some_and(|t| t.subscribers.contains(&conn))
        }
    }

    /// Adds a subscriber to an existing channel (no snapshot).
    /// Whether `conn` is still registered and may hold one more subscription (re-subscribing to
    /// a channel it already has is always allowed).
    fn check_room(&self, conn: ConnId, channel: &str) -> Result<(), RpcError> {
        if !self.connections.contains_key(&conn) {
            return Err(RpcError::internal("this connection is closing"));
        }
        if self.subscription_count(conn) >= self.max_subscriptions
            && !self.is_subscribed(conn, channel)
        {
            return Err(RpcError::internal(format!(
                "subscription limit reached: a connection may hold at most {} subscriptions \
                 (--max-subscriptions)",
                self.max_subscriptions
            )));
        }
        Ok(())
    }

    fn add_subscriber(&mut self, conn: ConnId, uri: &str) {
        if self.check_room(conn, uri).is_err() {
            return;
        }
        if uri == channel::ROOT {
            self.root_subscribers.insert(conn);
        } else if let Some(t) = self.terminals.get_mut(uri) {
            t.subscribers.insert(conn);
        }
    }

    fn snapshot(&self, channel: &str) -> Option<Snapshot> {
        let state = if channel == channel::ROOT {
            SnapshotState::Root(Box::new(self.root.clone()))
        } else {
            let t = self.terminals.get(channel)?;
            SnapshotState::Terminal(Box::new(scrollback::retained(
                &t.state,
                self.scrollback_bytes,
            )))
        };
        Some(Snapshot {
            resource: channel.to_string(),
            state,
            from_seq: self.server_seq as i64,
        })
    }

    /// Subscribes `conn` to an existing channel and returns its snapshot. Errors: see
    /// [`Host::subscribe`]; also -32603 when the connection is at its subscription limit or
    /// is gone (e.g. superseded by a reconnect).
    fn subscribe(&mut self, conn: ConnId, channel: &str) -> Result<Snapshot, RpcError> {
        self.check_room(conn, channel)?;
        match channel::classify(channel) {
            ChannelKind::Root => {
                self.root_subscribers.insert(conn);
            }
            ChannelKind::Session => return Err(RpcError::session_not_found(channel)),
            ChannelKind::ReservedOther => {
                return Err(RpcError::not_found(format!(
                    "channel not served by ahpty: {channel}"
                )))
            }
            ChannelKind::Invalid(msg) => {
                return Err(RpcError::invalid_params(format!("channel: {msg}")))
            }
            ChannelKind::Terminal => match self.terminals.get_mut(channel) {
                Some(t) => {
                    t.subscribers.insert(conn);
                }
                None => {
                    return Err(RpcError::not_found(format!(
                        "terminal not found: {channel}"
                    )))
                }
            },
        }
        self.snapshot(channel)
            .ok_or_else(|| RpcError::not_found(format!("channel not found: {channel}")))
    }

    fn next_seq(&mut self) -> u64 {
        self.server_seq += 1;
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
