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

pub mod channel;
pub mod history;
pub mod outbox;
mod pump;
pub mod scrollback;
pub mod validate;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ahp::reducers::{apply_action_to_root, apply_action_to_terminal};
use ahp_types::actions::{
    ActionEnvelope, ActionOrigin, RootTerminalsChangedAction, StateAction, TerminalDataAction,
    TerminalExitedAction,
};
use ahp_types::commands::{
    CreateTerminalParams, ReconnectReplayResult, ReconnectResult, ReconnectSnapshotResult,
};
use ahp_types::state::{
    RootState, Snapshot, SnapshotState, TerminalClaim, TerminalInfo, TerminalLifecycleState,
    TerminalRunningLifecycleState, TerminalState,
};
use serde_json::Value;
use tokio::sync::Notify;
use tokio_tungstenite::tungstenite::Utf8Bytes;

use crate::config::Config;
use crate::rpc::error::RpcError;
use crate::rpc::frame;
use crate::terminal::{
    self, shell_integration, OutputPipeline, PtyEvent, PtyProcess, SpawnRequest,
};
use channel::ChannelKind;
use history::History;
pub use outbox::{Outbox, OutboxReceiver, Outgoing};

/// Identifies one connection for the life of the daemon.
pub type ConnId = u64;

/// Largest `data` of one `terminal/data` envelope, in bytes; longer output is split on
/// character boundaries.
pub const MAX_DATA_BYTES: usize = 1024 * 1024;

/// Largest `reconnect` replay, in bytes of encoded envelopes; a longer one is answered with
/// snapshots instead, which are never larger than the retained state.
pub const MAX_REPLAY_BYTES: usize = 32 * 1024 * 1024;

/// WebSocket close code sent to a connection whose `clientId` reconnected elsewhere.
pub const CLOSE_SUPERSEDED: u16 = 4000;

/// The host: shared by every connection and terminal task.
pub struct Host {
    config: Config,
    inner: Mutex<Inner>,
    /// Signalled whenever any connection's writer has written to its socket.
    progress: Arc<Notify>,
}

/// Close code for a connection that stopped reading its socket (see `--stall-timeout`).
pub const CLOSE_STALLED: u16 = 4001;

/// How congested the subscribers of one terminal are (see [`outbox`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Pressure {
    /// Some subscriber is above the high watermark: stop reading the pty.
    pub above_high: bool,
    /// Some subscriber is above the low watermark: a paused terminal stays paused.
    pub above_low: bool,
    /// Some subscriber has not yet written everything queued: merge new output.
    pub unsent: bool,
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
    subscribers: BTreeSet<ConnId>,
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
        Arc::new(Host {
            config: config.clone(),
            progress: Arc::new(Notify::new()),
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

    /// The daemon's settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The current global `serverSeq`.
    pub fn server_seq(&self) -> u64 {
        self.lock().server_seq
    }

    /// `defaultDirectory` of the initialize result: the `file://` URI of the home directory.
    pub fn default_directory(&self) -> String {
        channel::file_uri(&channel::home_dir())
    }

    /// A new outbound queue for a connection, wired to the host's progress signal.
    pub fn new_outbox(&self) -> (Outbox, OutboxReceiver) {
        Outbox::new(self.progress.clone())
    }

    /// Signalled whenever a connection's writer made progress (used by paused terminals).
    pub(crate) fn progress(&self) -> Arc<Notify> {
        self.progress.clone()
    }

    /// Congestion of terminal `id`'s subscribers; `None` if the terminal is gone.
    pub(crate) fn pressure(&self, uri: &str, id: u64) -> Option<Pressure> {
        let inner = self.lock();
        let t = inner.terminals.get(uri).filter(|t| t.id == id)?;
        let mut p = Pressure::default();
        for c in &t.subscribers {
            if let Some(conn) = inner.connections.get(c) {
                let queued = conn.outbox.queued_bytes();
                p.above_high |= queued > outbox::HIGH_WATERMARK_BYTES;
                p.above_low |= queued > outbox::LOW_WATERMARK_BYTES;
                p.unsent |= queued > 0;
            }
        }
        Some(p)
    }

    /// Closes, every second, the connections that have been congested longer than the stall
    /// timeout (code [`CLOSE_STALLED`]), dropping their subscriptions at once so the terminals
    /// they held back resume. The client may `reconnect` and resume from history. Runs until
    /// the host shuts down.
    pub async fn watch_stalls(self: Arc<Self>) {
        let timeout = self.config.stall_timeout;
        let tick = (timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        let mut interval = tokio::time::interval(tick);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            let mut inner = self.lock();
            if inner.shutting_down {
                return;
            }
            let stalled: Vec<ConnId> = inner
                .connections
                .iter()
                .filter(|(_, c)| c.outbox.congested_for().is_some_and(|d| d >= timeout))
                .map(|(id, _)| *id)
                .collect();
            for conn in stalled {
                if let Some(c) = inner.connections.get(&conn) {
                    tracing::warn!(
                        conn,
                        client_id = c.client_id.as_deref().unwrap_or("?"),
                        queued_bytes = c.outbox.queued_bytes(),
                        "closing a stalled connection: it has not read its output for {:?}",
                        timeout
                    );
                    c.outbox.kill(
                        CLOSE_STALLED,
                        format!("stalled: output not read for {} s", timeout.as_secs()),
                    );
                }
                inner.drop_connection(conn);
            }
            drop(inner);
            // Terminals waiting on the dropped connections re-check their subscribers.
            self.progress.notify_waiters();
        }
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
        let result = if inner.subscription_count(conn) >= self.config.max_subscriptions
            && !inner.is_subscribed(conn, channel)
        {
            Err(RpcError::internal(format!(
                "subscription limit reached: a connection may hold at most {} subscriptions",
                self.config.max_subscriptions
            )))
        } else {
            inner.subscribe(conn, channel)
        };
        let text = respond(result);
        inner.send(conn, text);
    }

    /// `reconnect` (notes §4): resumes `client_id` on this connection.
    ///
    /// Any other live connection of the same `clientId` is closed first (code
    /// [`CLOSE_SUPERSEDED`]) and loses its subscriptions. If the `clientId` presented itself
    /// to this daemon before, and every requested channel that still
    /// exists has retained every envelope after `last_seen` (and the replay fits in
    /// [`MAX_REPLAY_BYTES`]), the answer is `{"type":"replay","actions":[…],"missing":[…]}` with
    /// exactly those envelopes in `serverSeq` order (a rejected one only if this client
    /// dispatched it); otherwise `{"type":"snapshot","snapshots":[…]}` with fresh snapshots.
    /// Channels that no longer exist are listed in `missing` (replay) or left out (snapshot).
    /// Either way the surviving subscriptions are live on this connection, atomically with the
    /// answer queued by `respond`.
    pub fn reconnect(
        &self,
        conn: ConnId,
        client_id: String,
        last_seen: i64,
        subscriptions: &[String],
        respond: impl FnOnce(ReconnectResult) -> String,
    ) {
        let mut inner = self.lock();
        let others: Vec<ConnId> = inner
            .connections
            .iter()
            .filter(|(id, c)| **id != conn && c.client_id.as_deref() == Some(client_id.as_str()))
            .map(|(id, _)| *id)
            .collect();
        for other in others {
            if let Some(c) = inner.connections.get(&other) {
                c.outbox.close(
                    CLOSE_SUPERSEDED,
                    "this clientId reconnected on another connection",
                );
            }
            inner.drop_connection(other);
            tracing::info!(conn = other, %client_id, "connection superseded by a reconnect");
        }
        let known = inner.seen_clients.contains(&client_id);
        inner.set_client(conn, client_id.clone());
        let mut live: Vec<String> = Vec::new();
        let mut missing: Vec<String> = Vec::new();
        for uri in subscriptions {
            if live.contains(uri) || missing.contains(uri) {
                continue;
            }
            if uri == channel::ROOT || inner.terminals.contains_key(uri) {
                live.push(uri.clone());
            } else {
                missing.push(uri.clone());
            }
        }
        let replayable = u64::try_from(last_seen)
            .ok()
            .filter(|_| known)
            .filter(|&s| s <= inner.server_seq)
            .filter(|&s| live.iter().all(|c| inner.covers(c, s)));
        let mut replay = None;
        if let Some(seen) = replayable {
            let mut actions = Vec::new();
            let mut bytes = 0;
            for uri in &live {
                let history = if uri == channel::ROOT {
                    &inner.root_history
                } else {
                    match inner.terminals.get(uri) {
                        Some(t) => &t.history,
                        None => continue,
                    }
                };
                for (envelope, size) in history.after(seen, &client_id) {
                    bytes += size;
                    actions.push(envelope.clone());
                }
            }
            if bytes <= MAX_REPLAY_BYTES {
                actions.sort_by_key(|e| e.server_seq);
                replay = Some(actions);
            }
        }
        let result = match replay {
            Some(actions) => {
                for uri in &live {
                    inner.add_subscriber(conn, uri);
                }
                ReconnectResult::Replay(ReconnectReplayResult { actions, missing })
            }
            None => {
                let snapshots = live
                    .iter()
                    .filter_map(|uri| inner.subscribe(conn, uri).ok())
                    .collect();
                ReconnectResult::Snapshot(ReconnectSnapshotResult { snapshots })
            }
        };
        let kind = match &result {
            ReconnectResult::Replay(r) => format!("replay of {} actions", r.actions.len()),
            ReconnectResult::Snapshot(s) => format!("{} snapshots", s.snapshots.len()),
        };
        tracing::info!(conn, %client_id, last_seen, "client reconnected: {kind}");
        let text = respond(result);
        inner.send(conn, text);
    }

    /// Disposes, every tick, the terminals whose claim holder has had no live connection for
    /// longer than the configured orphan grace; returns at once when reaping is disabled.
    /// Runs until the host shuts down.
    pub async fn reap_orphans(self: Arc<Self>) {
        let Some(grace) = self.config.orphan_grace else {
            return;
        };
        let tick = (grace / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
        let mut interval = tokio::time::interval(tick);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            let expired: Vec<(String, String, Arc<PtyProcess>)> = {
                let mut inner = self.lock();
                if inner.shutting_down {
                    return;
                }
                let uris: Vec<String> = inner
                    .terminals
                    .iter()
                    .filter(|(_, t)| t.orphaned_since.is_some_and(|s| s.elapsed() >= grace))
                    .map(|(uri, _)| uri.clone())
                    .collect();
                uris.into_iter()
                    .filter_map(|uri| {
                        let t = inner.remove_terminal(&uri)?;
                        Some((uri, t.holder, t.process))
                    })
                    .collect()
            };
            for (uri, holder, process) in expired {
                tracing::info!(
                    terminal = %uri,
                    %holder,
                    grace_secs = grace.as_secs_f64(),
                    "reaping terminal: its claim holder has been disconnected longer than the orphan grace"
                );
                self.kill(process).await;
            }
        }
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

    /// Queues a message for one connection.
    pub fn send(&self, conn: ConnId, text: String) {
        self.lock().send(conn, text);
    }

    /// `createTerminal` (notes §9.5): validates, spawns the shell on a new pty, registers the
    /// terminal and emits `root/terminalsChanged` before returning.
    ///
    /// Errors: -32602 (channel, claim, cwd form, size), -32010 (URI exists), -32008 (cwd
    /// missing), -32603 (the shell cannot be started; nothing is left registered).
    pub async fn create_terminal(
        self: &Arc<Self>,
        conn: ConnId,
        params: CreateTerminalParams,
    ) -> Result<(), RpcError> {
        let uri = params.channel.clone();
        channel::check_new_terminal_uri(&uri)?;
        let claim = params.claim.clone();
        let cwd = match params.cwd.as_deref() {
            Some(c) => channel::resolve_cwd(c)?,
            None => channel::home_dir(),
        };
        let cols = size_param("cols", params.cols, 80)?;
        let rows = size_param("rows", params.rows, 24)?;
        let shell = self.config.shell.clone();
        let title = params.name.clone().unwrap_or_else(|| shell_name(&shell));
        let holder = {
            let mut inner = self.lock();
            if inner.shutting_down {
                return Err(RpcError::internal("ahpty is shutting down"));
            }
            if inner.terminals.contains_key(&uri) || inner.reserved.contains(&uri) {
                return Err(RpcError::already_exists(&uri));
            }
            if inner.terminals.len() + inner.reserved.len() >= self.config.max_terminals {
                return Err(RpcError::internal(format!(
                    "terminal limit reached: this host runs at most {} terminals \
                     (--max-terminals); dispose one first",
                    self.config.max_terminals
                )));
            }
            let me = inner
                .connections
                .get(&conn)
                .and_then(|c| c.client_id.clone())
                .unwrap_or_default();
            inner.reserved.insert(uri.clone());
            match &claim {
                TerminalClaim::Client(c) => c.client_id.clone(),
                TerminalClaim::Session(_) => me,
            }
        };
        let cwd_uri = channel::file_uri(&cwd);
        let nonce = shell_integration::new_nonce();
        let inject =
            self.config.shell_integration && shell_integration::shell_kind(&shell).is_some();
        let request = self.spawn_request(shell.clone(), cwd.clone(), cols, rows);
        let pipeline = OutputPipeline::new(nonce.clone(), Some(cwd_uri.clone()), inject);
        let started = tokio::task::spawn_blocking(move || {
            let mut request = request;
            if inject {
                let injection = shell_integration::prepare(&request.program, &nonce)?;
                // The injected arguments (e.g. bash's --rcfile) come first.
                let mut args = injection.args;
                args.append(&mut request.args);
                request.args = args;
                request.env.extend(injection.env);
            }
            terminal::start(request, pipeline)
        })
        .await;
        let (process, events) = match started {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                self.lock().reserved.remove(&uri);
                tracing::warn!(terminal = %uri, error = %e, "cannot start terminal");
                return Err(RpcError::internal(format!("cannot start the shell: {e}")));
            }
            Err(e) => {
                self.lock().reserved.remove(&uri);
                return Err(RpcError::internal(format!("cannot start the shell: {e}")));
            }
        };
        let id = {
            let mut inner = self.lock();
            inner.reserved.remove(&uri);
            let id = inner.next_terminal;
            inner.next_terminal += 1;
            // Envelopes of this terminal all come after this point (see `History`).
            let floor = inner.server_seq;
            let state = TerminalState {
                title,
                cwd: Some(cwd_uri),
                cols: Some(i64::from(cols)),
                rows: Some(i64::from(rows)),
                content: Vec::new(),
                lifecycle: TerminalLifecycleState::Running(TerminalRunningLifecycleState {}),
                claim,
                supports_command_detection: None,
                is_pty: Some(true),
            };
            inner.terminals.insert(
                uri.clone(),
                TerminalEntry {
                    id,
                    state,
                    subscribers: BTreeSet::new(),
                    process: process.clone(),
                    holder,
                    renamed_by_client: false,
                    content_bytes: 0,
                    history: History::new(self.config.history_bytes, floor),
                    orphaned_since: None,
                },
            );
            inner.refresh_orphans();
            inner.emit_root_terminals();
            // A shutdown that began while spawning has already swept the terminal list.
            if inner.shutting_down {
                inner.terminals.remove(&uri);
                None
            } else {
                Some(id)
            }
        };
        let Some(id) = id else {
            let grace = self.config.kill_grace;
            let _ = tokio::task::spawn_blocking(move || process.kill_session(grace)).await;
            return Err(RpcError::internal("ahpty is shutting down"));
        };
        tracing::info!(terminal = %uri, pid = process.pid(), shell = %shell.display(), "terminal created");
        tokio::spawn(pump::run(self.clone(), uri, id, events));
        Ok(())
    }

    fn spawn_request(&self, shell: PathBuf, cwd: PathBuf, cols: u16, rows: u16) -> SpawnRequest {
        let mut env = vec![
            ("TERM".into(), "xterm-256color".into()),
            ("COLORTERM".into(), "truecolor".into()),
        ];
        let has_locale = ["LC_ALL", "LC_CTYPE", "LANG"]
            .iter()
            .any(|k| std::env::var_os(k).is_some_and(|v| !v.is_empty()));
        if !has_locale {
            env.push(("LANG".into(), "C.UTF-8".into()));
        }
        SpawnRequest {
            program: shell,
            args: Vec::new(),
            cwd,
            cols,
            rows,
            env,
            env_remove: Vec::new(),
        }
    }

    /// `disposeTerminal` (notes §9.6), first half: removes the terminal (no more actions on
    /// its channel; its URI is free again) and emits `root/terminalsChanged`. The caller then
    /// kills its processes with [`Host::kill`] before answering.
    /// Errors: unknown terminal → -32008; session/chat URI → -32001; not a URI → -32602.
    pub fn remove_terminal(&self, uri: &str) -> Result<Arc<PtyProcess>, RpcError> {
        let mut inner = self.lock();
        match channel::classify(uri) {
            ChannelKind::Session => return Err(RpcError::session_not_found(uri)),
            ChannelKind::Invalid(msg) => {
                return Err(RpcError::invalid_params(format!("channel: {msg}")))
            }
            _ => {}
        }
        let Some(entry) = inner.remove_terminal(uri) else {
            return Err(RpcError::not_found(format!("terminal not found: {uri}")));
        };
        tracing::info!(terminal = %uri, pid = entry.process.pid(), "terminal disposed");
        Ok(entry.process)
    }

    /// Kills every process of a removed terminal's session (SIGHUP, then SIGKILL after the
    /// configured grace) and waits until they are gone.
    pub async fn kill(&self, process: Arc<PtyProcess>) {
        let grace = self.config.kill_grace;
        let _ = tokio::task::spawn_blocking(move || process.kill_session(grace)).await;
    }

    /// `disposeTerminal`: [`Host::remove_terminal`] then [`Host::kill`].
    pub async fn dispose_terminal(&self, uri: &str) -> Result<(), RpcError> {
        let process = self.remove_terminal(uri)?;
        self.kill(process).await;
        Ok(())
    }

    /// `dispatchAction` (notes §7.2): validates a client action; accepted ones are reduced,
    /// echoed with `origin` to every subscriber and then take effect (pty write, resize);
    /// rejected ones go back, with a `rejectionReason`, to the dispatching connection only
    /// (D3). Actions for channels that do not exist are ignored.
    pub fn dispatch(&self, conn: ConnId, channel: &str, client_seq: i64, action: Value) {
        let mut inner = self.lock();
        let Some(client_id) = inner
            .connections
            .get(&conn)
            .and_then(|c| c.client_id.clone())
        else {
            return;
        };
        let origin = ActionOrigin {
            client_id: client_id.clone(),
            client_seq,
        };
        match channel::classify(channel) {
            ChannelKind::Root => {
                let reason = match validate::root_action(&action) {
                    Err(r) => r,
                    Ok(_) => "root actions are not accepted from clients".to_string(),
                };
                inner.reject(conn, channel, action, origin, reason);
            }
            ChannelKind::Terminal if inner.terminals.contains_key(channel) => {
                match validate::terminal_action(&action) {
                    Err(reason) => inner.reject(conn, channel, action, origin, reason),
                    Ok(typed) => inner.apply_client_action(
                        conn,
                        channel,
                        &client_id,
                        typed,
                        action,
                        origin,
                        self.config.scrollback_bytes,
                    ),
                }
            }
            _ => tracing::debug!(%channel, "action for an unknown channel ignored"),
        }
    }

    /// Output of terminal `id` at `uri`, in stream order (called by the terminal's pump).
    fn apply_output(&self, uri: &str, id: u64, events: Vec<PtyEvent>) {
        let mut inner = self.lock();
        if !inner.terminals.get(uri).is_some_and(|t| t.id == id) {
            return;
        }
        let cap = self.config.scrollback_bytes;
        let mut text = String::new();
        for ev in events {
            match ev {
                PtyEvent::Data(d) => text.push_str(&d),
                PtyEvent::Action(a) => {
                    inner.emit_data(uri, std::mem::take(&mut text), cap);
                    inner.apply_server_action(uri, *a, cap);
                }
            }
        }
        inner.emit_data(uri, text, cap);
    }

    /// The process of terminal `id` exited: `terminal/exited`, then the root update.
    fn apply_exited(&self, uri: &str, id: u64, exit_code: Option<i64>) {
        let mut inner = self.lock();
        if !inner.terminals.get(uri).is_some_and(|t| t.id == id) {
            return;
        }
        tracing::info!(terminal = %uri, exit_code, "terminal exited");
        let cap = self.config.scrollback_bytes;
        inner.emit_terminal(
            uri,
            StateAction::TerminalExited(TerminalExitedAction { exit_code }),
            None,
            cap,
        );
        inner.emit_root_terminals();
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

    /// A snapshot of a channel, for tests and diagnostics. `None` for unknown channels.
    pub fn snapshot(&self, channel: &str) -> Option<Snapshot> {
        self.lock().snapshot(channel)
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

    /// Starts or stops each terminal's orphan clock after presence or ownership changed.
    fn refresh_orphans(&mut self) {
        let now = Instant::now();
        for t in self.terminals.values_mut() {
            if self.clients.contains_key(&t.holder) {
                t.orphaned_since = None;
            } else if t.orphaned_since.is_none() {
                t.orphaned_since = Some(now);
            }
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

    /// Removes a terminal and emits the root update; no more actions follow on its channel.
    fn remove_terminal(&mut self, uri: &str) -> Option<TerminalEntry> {
        let entry = self.terminals.remove(uri)?;
        self.emit_root_terminals();
        Some(entry)
    }

    /// Adds a subscriber to an existing channel (no snapshot).
    fn add_subscriber(&mut self, conn: ConnId, uri: &str) {
        if uri == channel::ROOT {
            self.root_subscribers.insert(conn);
        } else if let Some(t) = self.terminals.get_mut(uri) {
            t.subscribers.insert(conn);
        }
    }

    /// Whether every envelope after `seq` on `channel` is retained.
    fn covers(&self, channel: &str, seq: u64) -> bool {
        if channel == channel::ROOT {
            self.root_history.covers(seq)
        } else {
            self.terminals
                .get(channel)
                .is_some_and(|t| t.history.covers(seq))
        }
    }

    fn snapshot(&self, channel: &str) -> Option<Snapshot> {
        let state = if channel == channel::ROOT {
            SnapshotState::Root(Box::new(self.root.clone()))
        } else {
            SnapshotState::Terminal(Box::new(self.terminals.get(channel)?.state.clone()))
        };
        Some(Snapshot {
            resource: channel.to_string(),
            state,
            from_seq: self.server_seq as i64,
        })
    }

    fn subscribe(&mut self, conn: ConnId, channel: &str) -> Result<Snapshot, RpcError> {
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

    /// Reduces an accepted terminal action, assigns `serverSeq` and fans the envelope out.
    fn emit_terminal(
        &mut self,
        uri: &str,
        action: StateAction,
        origin: Option<ActionOrigin>,
        cap: usize,
    ) {
        let seq = self.next_seq();
        let Some(t) = self.terminals.get_mut(uri) else {
            return;
        };
        apply_action_to_terminal(&mut t.state, &action);
        match &action {
            StateAction::TerminalData(d) => {
                t.content_bytes += d.data.len();
                if t.content_bytes > cap {
                    t.content_bytes = scrollback::trim(&mut t.state, cap);
                }
            }
            StateAction::TerminalCleared(_) => t.content_bytes = 0,
            StateAction::TerminalCommandExecuted(c) => t.content_bytes += c.command_line.len(),
            _ => {}
        }
        let envelope = ActionEnvelope {
            channel: uri.to_string(),
            action,
            server_seq: seq,
            origin,
            rejection_reason: None,
        };
        let text: Utf8Bytes = frame::action(&envelope).into();
        for c in &t.subscribers {
            if let Some(conn) = self.connections.get(c) {
                conn.outbox.send(text.clone());
            }
        }
        t.history.push(envelope, text.len());
    }

    /// Emits output text as `terminal/data`, split into envelopes of at most
    /// [`MAX_DATA_BYTES`] on character boundaries.
    fn emit_data(&mut self, uri: &str, mut text: String, cap: usize) {
        while !text.is_empty() {
            let rest = if text.len() > MAX_DATA_BYTES {
                let mut cut = MAX_DATA_BYTES;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.split_off(cut)
            } else {
                String::new()
            };
            self.emit_terminal(
                uri,
                StateAction::TerminalData(TerminalDataAction { data: text }),
                None,
                cap,
            );
            text = rest;
        }
    }

    /// A server-originated action derived from output (title, cwd, command marks).
    fn apply_server_action(&mut self, uri: &str, action: StateAction, cap: usize) {
        if let StateAction::TerminalTitleChanged(change) = &action {
            let Some(t) = self.terminals.get(uri) else {
                return;
            };
            // A client's rename wins over escape sequences; an unchanged title is not news.
            if t.renamed_by_client || t.state.title == change.title {
                return;
            }
            self.emit_terminal(uri, action, None, cap);
            self.emit_root_terminals();
            return;
        }
        self.emit_terminal(uri, action, None, cap);
    }

    #[allow(clippy::too_many_arguments)]
    fn apply_client_action(
        &mut self,
        conn: ConnId,
        uri: &str,
        client_id: &str,
        action: StateAction,
        raw: Value,
        origin: ActionOrigin,
        cap: usize,
    ) {
        let Some(t) = self.terminals.get_mut(uri) else {
            return;
        };
        match &action {
            StateAction::TerminalInput(input) => {
                if matches!(t.state.lifecycle, TerminalLifecycleState::Exited(_)) {
                    self.reject(conn, uri, raw, origin, "terminal has exited".into());
                    return;
                }
                if !t.process.input_fits(input.data.len()) {
                    let reason = format!(
                        "input queue full: more than {} bytes are waiting for the program to \
                         read them",
                        terminal::process::MAX_PENDING_INPUT_BYTES
                    );
                    self.reject(conn, uri, raw, origin, reason);
                    return;
                }
                let process = t.process.clone();
                let bytes = input.data.clone().into_bytes();
                self.emit_terminal(uri, action, Some(origin), cap);
                // Checked above; only the pty vanishing can fail here, and then the exit
                // follows on its own.
                let _ = process.write(bytes);
            }
            StateAction::TerminalResized(r) => {
                // Validated to 1..=MAX_DIMENSION, so the conversions cannot fail.
                let cols = u16::try_from(r.cols).unwrap_or(u16::MAX);
                let rows = u16::try_from(r.rows).unwrap_or(u16::MAX);
                if let Err(e) = t.process.resize(cols, rows) {
                    tracing::debug!(terminal = %uri, error = %e, "pty resize failed");
                }
                self.emit_terminal(uri, action, Some(origin), cap);
            }
            StateAction::TerminalTitleChanged(_) => {
                t.renamed_by_client = true;
                self.emit_terminal(uri, action, Some(origin), cap);
                self.emit_root_terminals();
            }
            StateAction::TerminalClaimed(c) => {
                if let Err(reason) =
                    validate::check_claim_transfer(&t.state.claim, &t.holder, client_id, &c.claim)
                {
                    self.reject(conn, uri, raw, origin, reason);
                    return;
                }
                let narrowing_by_other = client_id != t.holder;
                if !narrowing_by_other {
                    t.holder = match &c.claim {
                        TerminalClaim::Client(cc) => cc.client_id.clone(),
                        TerminalClaim::Session(_) => client_id.to_string(),
                    };
                }
                self.emit_terminal(uri, action, Some(origin), cap);
                self.emit_root_terminals();
                self.refresh_orphans();
            }
            _ => self.emit_terminal(uri, action, Some(origin), cap),
        }
    }

    /// Sends a rejected action back to its dispatcher only (decision D3).
    fn reject(
        &mut self,
        conn: ConnId,
        channel: &str,
        raw: Value,
        origin: ActionOrigin,
        reason: String,
    ) {
        let seq = self.next_seq();
        tracing::debug!(%channel, %reason, "action rejected");
        let envelope = ActionEnvelope {
            channel: channel.to_string(),
            action: StateAction::Unknown(raw),
            server_seq: seq,
            origin: Some(origin),
            rejection_reason: Some(reason),
        };
        let text = frame::action(&envelope);
        let bytes = text.len();
        self.send(conn, text);
        // Kept for a replay to the same client (decision D3 applies there too).
        if channel == channel::ROOT {
            self.root_history.push(envelope, bytes);
        } else if let Some(t) = self.terminals.get_mut(channel) {
            t.history.push(envelope, bytes);
        }
    }

    /// Emits `root/terminalsChanged` with the complete catalogue, in creation order.
    fn emit_root_terminals(&mut self) {
        let mut rows: Vec<(u64, TerminalInfo)> = self
            .terminals
            .iter()
            .map(|(uri, t)| {
                (
                    t.id,
                    TerminalInfo {
                        resource: uri.clone(),
                        title: t.state.title.clone(),
                        claim: t.state.claim.clone(),
                        lifecycle: t.state.lifecycle.clone(),
                    },
                )
            })
            .collect();
        rows.sort_by_key(|(id, _)| *id);
        let action = StateAction::RootTerminalsChanged(RootTerminalsChangedAction {
            terminals: rows.into_iter().map(|(_, info)| info).collect(),
        });
        let seq = self.next_seq();
        apply_action_to_root(&mut self.root, &action);
        let envelope = ActionEnvelope {
            channel: channel::ROOT.to_string(),
            action,
            server_seq: seq,
            origin: None,
            rejection_reason: None,
        };
        let text: Utf8Bytes = frame::action(&envelope).into();
        for c in &self.root_subscribers {
            if let Some(conn) = self.connections.get(c) {
                conn.outbox.send(text.clone());
            }
        }
        self.root_history.push(envelope, text.len());
    }
}

fn size_param(name: &str, value: Option<i64>, default: u16) -> Result<u16, RpcError> {
    match value {
        None => Ok(default),
        Some(v) => {
            validate::dimension_value(name, &Value::from(v)).map_err(RpcError::invalid_params)
        }
    }
}

fn shell_name(shell: &std::path::Path) -> String {
    shell
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "shell".into())
}

fn decrement(counts: &mut HashMap<String, usize>, key: &str) {
    if let Some(n) = counts.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            counts.remove(key);
        }
    }
}
