//! The authoritative store: root and terminal states, the global `serverSeq`, subscriptions
//! and fan-out.
//!
//! Every state change, whether from pty output or from a client, runs here under one lock:
//! the official `ahp` reducers update the state, a fresh `serverSeq` is assigned, the
//! envelope is encoded once and queued on each subscriber's [`Outbox`]. Because queuing
//! happens under the same lock that assigns sequence numbers, every connection receives its
//! envelopes in increasing `serverSeq` order, and a snapshot plus its subscription (and the
//! response carrying it) are atomic with respect to later actions (notes §5, §6).
//! Connections own only their outbox; terminals outlive them.

pub mod channel;
pub mod outbox;
mod pump;
pub mod scrollback;
pub mod validate;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use ahp::reducers::{apply_action_to_root, apply_action_to_terminal};
use ahp_types::actions::{
    ActionEnvelope, ActionOrigin, RootTerminalsChangedAction, StateAction, TerminalDataAction,
    TerminalExitedAction,
};
use ahp_types::commands::CreateTerminalParams;
use ahp_types::state::{
    RootState, Snapshot, SnapshotState, TerminalClaim, TerminalInfo, TerminalLifecycleState,
    TerminalRunningLifecycleState, TerminalState,
};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Utf8Bytes;

use crate::config::Config;
use crate::rpc::error::RpcError;
use crate::rpc::frame;
use crate::terminal::{
    self, shell_integration, OutputPipeline, PtyEvent, PtyProcess, SpawnRequest,
};
use channel::ChannelKind;
pub use outbox::{Outbox, OutboxReceiver, Outgoing};

/// Identifies one connection for the life of the daemon.
pub type ConnId = u64;

/// Largest `data` of one `terminal/data` envelope, in bytes; longer output is split on
/// character boundaries.
pub const MAX_DATA_BYTES: usize = 1024 * 1024;

/// The host: shared by every connection and terminal task.
pub struct Host {
    config: Config,
    inner: Mutex<Inner>,
}

struct Inner {
    server_seq: u64,
    root: RootState,
    root_subscribers: BTreeSet<ConnId>,
    terminals: HashMap<String, TerminalEntry>,
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
}

impl Host {
    /// A host with no terminals.
    pub fn new(config: &Config) -> Arc<Host> {
        Arc::new(Host {
            config: config.clone(),
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
                terminals: HashMap::new(),
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
        inner.connections.remove(&conn);
        inner.root_subscribers.remove(&conn);
        for t in inner.terminals.values_mut() {
            t.subscribers.remove(&conn);
        }
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
        if let Some(c) = inner.connections.get_mut(&conn) {
            c.client_id = Some(client_id);
        }
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
        let inject = self.config.shell_integration;
        let request = self.spawn_request(shell.clone(), cwd.clone(), cols, rows);
        let pipeline = OutputPipeline::new(nonce.clone(), Some(cwd_uri.clone()));
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
                },
            );
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
        let Some(entry) = inner.terminals.remove(uri) else {
            return Err(RpcError::not_found(format!("terminal not found: {uri}")));
        };
        inner.emit_root_terminals();
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
                let process = t.process.clone();
                let bytes = input.data.clone().into_bytes();
                self.emit_terminal(uri, action, Some(origin), cap);
                process.write(bytes);
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
        self.send(conn, frame::action(&envelope));
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
    }
}

fn size_param(name: &str, value: Option<i64>, default: u16) -> Result<u16, RpcError> {
    match value {
        None => Ok(default),
        Some(v) => validate::dimension_value(name, &Value::from(v))
            .map_err(RpcError::invalid_params),
    }
}

fn shell_name(shell: &std::path::Path) -> String {
    shell
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "shell".into())
}
