//! Terminal lifecycle in the store: `createTerminal` (validate, spawn, register), removal and
//! killing, and every server-originated terminal action — pty output, marks, exit — reduced
//! with the official reducers, numbered and fanned out, plus the root catalogue update that
//! follows create, exit, dispose, title and claim changes.
//!
//! The output path is the hot one: the pieces of output merged into one `terminal/data` are
//! reduced one by one (the reducer appends each to the content, the one copy it needs) and
//! escaped straight into the envelope's frame, which is encoded once and shared by every
//! subscriber's queue and the history.
//!
//! May touch: the store under the host lock, subscribers' outboxes, the `PtySystem` (spawn, on
//! the blocking pool) and the terminals' `Pty` (kill).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use ahp::reducers::{apply_action_to_root, apply_action_to_terminal};
use ahp_types::actions::{
    ActionEnvelope, ActionOrigin, RootTerminalsChangedAction, StateAction, TerminalDataAction,
    TerminalExitedAction,
};
use ahp_types::commands::CreateTerminalParams;
use ahp_types::state::{
    TerminalClaim, TerminalInfo, TerminalLifecycleState, TerminalRunningLifecycleState,
    TerminalState,
};
use serde_json::Value;

use super::channel::{self, ChannelKind};
use super::flow::{Gate, Subscribers};
use super::history::History;
use super::outbox::OutboxRef;
use super::persist::{self, Removed};
use super::{
    pump, screen, scrollback, validate, ConnEntry, ConnId, Host, HostError, Inner, TerminalEntry,
};
use crate::codec::{self, version, Frame};
use crate::config::{EXE_ENV, HOST_ID_ENV, TERMINAL_ENV};
use crate::terminal::{shell_integration, OutputItem, OutputPipeline, SpawnRequest};

/// Largest `data` of one `terminal/data` envelope, in bytes; longer output is split on
/// character boundaries.
pub const MAX_DATA_BYTES: usize = 1024 * 1024;

/// The daemon's executable path, without the ` (deleted)` Linux appends once the file was
/// replaced (an upgrade in place leaves the new binary at the same path).
fn own_executable() -> Option<std::ffi::OsString> {
    let exe = std::env::current_exe().ok()?.into_os_string();
    let text = exe.to_string_lossy();
    match text.strip_suffix(" (deleted)") {
        Some(path) => Some(path.into()),
        None => Some(exe),
    }
}

impl Host {
    /// `createTerminal` (docs/protocol.md, "Terminals"): validates, spawns the shell on a new
    /// pty, registers the terminal and emits `root/terminalsChanged` before returning.
    /// `raw_claim` is `params.claim` as the client sent it: its shape is checked on the raw
    /// JSON too ([`validate::parse_claim`]), as the typed decoder accepts some malformed claims.
    ///
    /// Errors: invalid params (-32602: channel, claim, cwd form or permission, size, a `name`
    /// over 4096 characters; control characters are removed from it), already exists (-32010:
    /// the URI, decision D1; for an exited terminal the message says so and how to dispose of
    /// it), not found (-32008: the cwd), internal (-32603: the shell cannot be started —
    /// nothing is left registered —, `--max-terminals` running terminals, which exited ones do
    /// not count toward, a connection that is closing).
    pub async fn create_terminal(
        self: &Arc<Self>,
        conn: ConnId,
        params: CreateTerminalParams,
        raw_claim: Option<&Value>,
    ) -> Result<(), HostError> {
        if let Some(raw) = raw_claim {
            validate::parse_claim(raw)
                .map_err(|msg| HostError::invalid_params(format!("claim: {msg}")))?;
        }
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
        if let Some(name) = &params.name {
            validate::check_title(name)
                .map_err(|m| HostError::invalid_params(format!("name: {m}")))?;
        }
        // A name the client gave is the title for good: escape sequences no longer change it.
        let named = params.name.is_some();
        let title = match &params.name {
            Some(name) => shell_integration::sanitize_title(name),
            None => shell_name(&shell),
        };
        let holder = {
            let mut inner = self.lock();
            if inner.shutting_down {
                return Err(HostError::internal("ahpty is shutting down"));
            }
            if inner.upgrading {
                return Err(HostError::internal("ahpty is upgrading; retry in a moment"));
            }
            if inner.terminals.contains_key(&uri) || inner.spawning.contains(&uri) {
                return Err(inner.exists_error(&uri));
            }
            // Exited terminals have their own bound (`exited.rs`).
            if inner.running_terminals() >= self.config.max_terminals {
                return Err(inner.limit_error(self.config.max_terminals));
            }
            // A connection superseded by a reconnect may still be finishing a request.
            let Some(me) = inner
                .connections
                .get(&conn)
                .and_then(|c| c.client_id.clone())
            else {
                return Err(HostError::internal("this connection is closing"));
            };
            inner.spawning.insert(uri.clone());
            match &claim {
                TerminalClaim::Client(c) => c.client_id.clone(),
                TerminalClaim::Session(_) => me,
            }
        };
        let cwd_uri = channel::file_uri(&cwd);
        let nonce = shell_integration::new_nonce();
        let inject =
            self.config.shell_integration && shell_integration::shell_kind(&shell).is_some();
        let mut request = self.spawn_request(&uri, shell.clone(), cwd.clone(), cols, rows);
        // An agent's terminal never waits on a pager or a prompt (docs/protocol.md).
        if matches!(claim, TerminalClaim::Session(_)) {
            let agent_env = self.config.agent_env.iter();
            request
                .env
                .extend(agent_env.map(|(k, v)| (k.into(), v.into())));
        }
        let pipeline = OutputPipeline::new(nonce.clone(), Some(cwd_uri.clone()), inject)
            .with_report_colors(self.config.report_colors);
        let ptys = self.ptys.clone();
        let started = tokio::task::spawn_blocking(move || {
            let mut request = request;
            if inject {
                let injection = shell_integration::prepare(&request.program, &nonce)?;
                request.args = injection.args;
                request.env.extend(injection.env);
            }
            ptys.start(request, pipeline)
        })
        .await;
        let (process, events) = match started {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                self.lock().spawning.remove(&uri);
                tracing::warn!(terminal = %uri, error = %e, "cannot start terminal");
                return Err(HostError::internal(format!("cannot start the shell: {e}")));
            }
            Err(e) => {
                self.lock().spawning.remove(&uri);
                return Err(HostError::internal(format!("cannot start the shell: {e}")));
            }
        };
        let wake = Arc::new(tokio::sync::Notify::new());
        let screen = screen::Screen::new(cols, rows);
        let model_wake = screen.wake();
        let serial = {
            let mut inner = self.lock();
            inner.spawning.remove(&uri);
            let serial = inner.next_serial;
            inner.next_serial += 1;
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
                    serial,
                    state,
                    subscribers: Subscribers::new(wake.clone()),
                    process: Some(process.clone()),
                    holder,
                    renamed_by_client: named,
                    content_bytes: 0,
                    history: History::new(self.config.history_bytes, floor),
                    orphaned_since: None,
                    created_ms: shell_integration::now_ms(),
                    info_json: None,
                    screen,
                    transcript: None,
                    exited_at: 0,
                },
            );
            inner.persist_new(&uri);
            inner.refresh_orphans();
            inner.emit_root_terminals();
            // A shutdown that began while spawning has already swept the terminal list.
            if inner.shutting_down {
                let entry = inner.terminals.remove(&uri);
                Err(entry.map(|t| inner.removed(t)))
            } else {
                Ok(serial)
            }
        };
        let serial = match serial {
            Ok(serial) => serial,
            Err(removed) => {
                let removed = removed.unwrap_or(Removed {
                    process: Some(process),
                    transcript: None,
                });
                self.kill(removed).await;
                return Err(HostError::internal("ahpty is shutting down"));
            }
        };
        tracing::info!(terminal = %uri, pid = process.pid(), shell = %shell.display(), "terminal created");
        tokio::spawn(screen::run(self.clone(), uri.clone(), serial, model_wake));
        tokio::spawn(pump::run(self.clone(), uri, serial, events, wake));
        Ok(())
    }

    /// The shell's command, cwd, size and environment: the daemon's environment plus `TERM`,
    /// `COLORTERM`, a UTF-8 `LANG` when no locale is set, and the [`TERMINAL_ENV`],
    /// [`HOST_ID_ENV`] and [`EXE_ENV`] variables the CLI relies on.
    pub(super) fn spawn_request(
        &self,
        uri: &str,
        shell: PathBuf,
        cwd: PathBuf,
        cols: u16,
        rows: u16,
    ) -> SpawnRequest {
        let mut env = vec![
            ("TERM".into(), "xterm-256color".into()),
            ("COLORTERM".into(), "truecolor".into()),
            (TERMINAL_ENV.into(), uri.into()),
            (HOST_ID_ENV.into(), self.instance_id.clone().into()),
        ];
        if let Some(exe) = own_executable() {
            env.push((EXE_ENV.into(), exe));
        }
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
            // systemd's readiness socket is the daemon's alone.
            env_remove: vec!["NOTIFY_SOCKET".into()],
        }
    }

    /// `disposeTerminal` (docs/protocol.md, "`disposeTerminal`"), first half: removes the
    /// terminal (no more actions on its channel; its URI is free again), queues the deletion
    /// of its transcript and emits `root/terminalsChanged`. The caller then kills its
    /// processes and waits for the deletion with [`Host::kill`] before answering.
    /// Errors (decision D2): unknown terminal → not found (-32008); session/chat URI → session
    /// not found (-32001); not a URI → invalid params (-32602).
    pub fn remove_terminal(&self, uri: &str) -> Result<Removed, HostError> {
        let mut inner = self.lock();
        match channel::classify(uri) {
            ChannelKind::Session => return Err(HostError::session_not_found(uri)),
            ChannelKind::Invalid(msg) => {
                return Err(HostError::invalid_params(format!("channel: {msg}")))
            }
            _ => {}
        }
        let Some(entry) = inner.remove_terminal(uri) else {
            return Err(HostError::not_found(format!("terminal not found: {uri}")));
        };
        let removed = inner.removed(entry);
        tracing::info!(terminal = %uri, pid = removed.pid(), "terminal disposed");
        Ok(removed)
    }

    /// Output of the terminal at `uri` numbered `serial`, in stream order (called by the terminal's pump).
    /// Fills `in_flight` with each subscriber's queue and a ticket that is written once this
    /// update has reached that subscriber's socket (see [`OutboxRef::is_written`]), and returns
    /// the terminal's gate for what follows; `None` if the terminal is gone.
    pub(super) fn apply_output(
        &self,
        uri: &str,
        serial: u64,
        events: Vec<OutputItem>,
        in_flight: &mut Vec<(OutboxRef, u64)>,
    ) -> Option<Gate> {
        in_flight.clear();
        let mut inner = self.lock();
        if inner.terminals.get(uri).is_none_or(|t| t.serial != serial) {
            return None;
        }
        let mut pieces = Vec::with_capacity(events.len());
        // Each query's offset in the text stream: what came before it in this batch.
        let mut replies = Vec::new();
        let mut seen = 0;
        for ev in events {
            match ev {
                OutputItem::Data(d) => {
                    seen += d.len() as u64;
                    pieces.push(d);
                }
                OutputItem::Action(a) => {
                    inner.emit_data(uri, std::mem::take(&mut pieces));
                    inner.apply_server_action(uri, *a);
                }
                OutputItem::Reply(r) => replies.push((seen, r)),
            }
        }
        inner.emit_data(uri, pieces);
        let t = inner.terminals.get_mut(uri)?;
        if !replies.is_empty() {
            let base = t.screen.tail() - seen;
            let process = t.process.clone();
            let replies = replies.into_iter().map(|(at, r)| (base + at, r)).collect();
            t.screen.queries(replies, process.as_deref());
        }
        let t = inner.terminals.get(uri)?;
        in_flight.extend(
            inner
                .queues(&t.subscribers)
                .map(|q| (q.clone(), q.ticket())),
        );
        inner.gate(uri)
    }

    /// The wake-up to wait for when the model of the terminal at `uri` numbered `serial` is
    /// too far behind for more output to be taken (see `screen.rs`); `None` when it may go on.
    pub(super) fn model_backlog(&self, uri: &str, serial: u64) -> Option<Arc<tokio::sync::Notify>> {
        let inner = self.lock();
        let t = inner.terminals.get(uri).filter(|t| t.serial == serial)?;
        t.screen.backlog()
    }

    /// The process of the terminal at `uri` numbered `serial` exited: `terminal/exited`, then
    /// the root update, then the exited terminals over `--max-exited-terminals` go.
    pub(super) fn apply_exited(self: &Arc<Self>, uri: &str, serial: u64, exit_code: Option<i64>) {
        let mut inner = self.lock();
        if inner.terminals.get(uri).is_none_or(|t| t.serial != serial) {
            return;
        }
        tracing::info!(terminal = %uri, exit_code, "terminal exited");
        inner.emit_terminal(
            uri,
            StateAction::TerminalExited(TerminalExitedAction { exit_code }),
            None,
        );
        inner.emit_root_terminals();
        self.exited_now(&mut inner, uri);
    }
}

impl Inner {
    /// Removes a terminal and emits the root update; no more actions follow on its channel.
    pub(super) fn remove_terminal(&mut self, uri: &str) -> Option<TerminalEntry> {
        let entry = self.terminals.remove(uri)?;
        for conn in &entry.subscribers {
            if let Some(c) = self.connections.get_mut(conn) {
                c.subscriptions.remove(uri);
            }
        }
        self.emit_root_terminals();
        Some(entry)
    }

    /// Reduces an accepted terminal action, assigns `serverSeq` and fans the envelope out.
    pub(super) fn emit_terminal(
        &mut self,
        uri: &str,
        action: StateAction,
        origin: Option<ActionOrigin>,
    ) {
        self.emit_terminal_encoded(uri, action, origin, None);
    }

    /// [`Inner::emit_terminal`] with the action's JSON already encoded (`encoded`, done outside
    /// the lock for a large client input), so that only a copy of it happens under the lock.
    pub(super) fn emit_terminal_encoded(
        &mut self,
        uri: &str,
        action: StateAction,
        origin: Option<ActionOrigin>,
        encoded: Option<String>,
    ) {
        let cap = self.scrollback_bytes;
        let seq = self.next_seq();
        let Some(t) = self.terminals.get_mut(uri) else {
            return;
        };
        if matches!(action, StateAction::TerminalCleared(_)) {
            t.screen.before_clear(&t.state);
        }
        match &action {
            // Searched from the newest part (see `scrollback::finish_command`).
            StateAction::TerminalCommandFinished(f) => {
                scrollback::finish_command(&mut t.state, f);
            }
            _ => {
                apply_action_to_terminal(&mut t.state, &action);
            }
        }
        let persisted = persist::Kind::of(&action);
        if matches!(
            action,
            StateAction::TerminalTitleChanged(_)
                | StateAction::TerminalClaimed(_)
                | StateAction::TerminalExited(_)
        ) {
            t.info_json = None;
        }
        match &action {
            StateAction::TerminalData(d) => t.add_content(d.data.len(), cap),
            StateAction::TerminalCleared(_) => t.content_bytes = 0,
            StateAction::TerminalCommandExecuted(c) => t.add_content(c.command_line.len(), cap),
            _ => {}
        }
        let envelope = ActionEnvelope {
            channel: uri.to_string(),
            action,
            server_seq: seq,
            origin,
            rejection_reason: None,
        };
        let text: Frame = match encoded {
            Some(action_json) => codec::action_encoded(&envelope, &action_json),
            None => codec::action(&envelope),
        }
        .into();
        fan_out(
            &mut self.connections,
            &t.subscribers,
            Some(&envelope),
            &text,
        );
        persist::record(self.store.as_deref(), t, uri, cap, &text, persisted);
        t.history.push(seq, text, None);
    }

    /// Emits output as `terminal/data`: the concatenation of `pieces`, in envelopes of at most
    /// [`MAX_DATA_BYTES`] split on character boundaries.
    pub(super) fn emit_data(&mut self, uri: &str, pieces: Vec<String>) {
        let mut batch: Vec<String> = Vec::new();
        let mut len = 0;
        for mut piece in pieces {
            while len + piece.len() > MAX_DATA_BYTES {
                let mut cut = MAX_DATA_BYTES - len;
                while !piece.is_char_boundary(cut) {
                    cut -= 1;
                }
                let rest = piece.split_off(cut);
                if !piece.is_empty() {
                    batch.push(piece);
                }
                self.emit_data_envelope(uri, std::mem::take(&mut batch));
                len = 0;
                piece = rest;
            }
            if !piece.is_empty() {
                len += piece.len();
                batch.push(piece);
            }
        }
        if !batch.is_empty() {
            self.emit_data_envelope(uri, batch);
        }
    }

    /// One `terminal/data` envelope whose data is the concatenation of `pieces`.
    fn emit_data_envelope(&mut self, uri: &str, mut pieces: Vec<String>) {
        let cap = self.scrollback_bytes;
        let seq = self.next_seq();
        let Some(t) = self.terminals.get_mut(uri) else {
            return;
        };
        // Reducing piece by piece appends exactly what reducing their concatenation would.
        let mut added = 0;
        for piece in &mut pieces {
            let action = StateAction::TerminalData(TerminalDataAction {
                data: std::mem::take(piece),
            });
            apply_action_to_terminal(&mut t.state, &action);
            if let StateAction::TerminalData(d) = action {
                added += d.data.len();
                *piece = d.data;
            }
        }
        t.screen.appended(added, cap);
        t.add_content(added, cap);
        let text: Frame = codec::data_action(uri, seq, &pieces).into();
        fan_out(&mut self.connections, &t.subscribers, None, &text);
        let kind = persist::Kind::State;
        persist::record(self.store.as_deref(), t, uri, cap, &text, kind);
        t.history.push(seq, text, None);
    }

    /// A server-originated action derived from output (title, cwd, command marks).
    pub(super) fn apply_server_action(&mut self, uri: &str, action: StateAction) {
        if let StateAction::TerminalTitleChanged(change) = &action {
            let Some(t) = self.terminals.get(uri) else {
                return;
            };
            // A client's rename wins over escape sequences; an unchanged title is not news.
            if t.renamed_by_client || t.state.title == change.title {
                return;
            }
            self.emit_terminal(uri, action, None);
            self.emit_root_terminals();
            return;
        }
        self.emit_terminal(uri, action, None);
    }

    /// Emits `root/terminalsChanged` with the complete catalogue, in creation order. Each
    /// terminal's row is encoded once and reused until it changes (see
    /// `TerminalEntry::info_json`), so an update costs a copy of the catalogue, not its
    /// encoding.
    pub(super) fn emit_root_terminals(&mut self) {
        let mut rows: Vec<(u64, TerminalInfo, &str)> = self
            .terminals
            .iter_mut()
            .map(|(uri, t)| {
                let info = TerminalInfo {
                    resource: uri.clone(),
                    title: t.state.title.clone(),
                    claim: t.state.claim.clone(),
                    lifecycle: t.state.lifecycle.clone(),
                };
                let json = t
                    .info_json
                    .get_or_insert_with(|| serde_json::to_string(&info).unwrap_or_default());
                (t.serial, info, json.as_str())
            })
            .collect();
        rows.sort_by_key(|(serial, _, _)| *serial);
        let action_json = terminals_changed_json(rows.iter().map(|(_, _, json)| *json));
        let action = StateAction::RootTerminalsChanged(RootTerminalsChangedAction {
            terminals: rows.into_iter().map(|(_, info, _)| info).collect(),
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
        let text: Frame = codec::action_encoded(&envelope, &action_json).into();
        fan_out(
            &mut self.connections,
            &self.root_subscribers,
            Some(&envelope),
            &text,
        );
        self.root_history.push(seq, text, None);
    }
}

impl TerminalEntry {
    /// Counts `bytes` more of retained content (after an action that may have added a part),
    /// merging the oldest parts once there are more than [`scrollback::merge_threshold`] and
    /// trimming the content back to `cap` once it passes [`scrollback::trim_threshold`].
    fn add_content(&mut self, bytes: usize, cap: usize) {
        self.content_bytes += bytes;
        if self.state.content.len() > scrollback::merge_threshold() {
            self.content_bytes -= scrollback::merge_oldest(&mut self.state);
        }
        if self.content_bytes > scrollback::trim_threshold(cap) {
            self.screen.before_trim(&self.state, cap);
            self.content_bytes = scrollback::trim(&mut self.state, cap);
        }
    }
}

/// Queues `text`, the `action` notification of `envelope`, for every connection in
/// `subscribers` (behind an answer being encoded for it, if there is one). A pre-0.9
/// subscriber gets the envelope in its own shapes where they differ (see
/// [`version::Encodings`]); `envelope` is `None` for actions that never differ
/// (`terminal/data`).
fn fan_out<'a>(
    connections: &mut HashMap<ConnId, ConnEntry>,
    subscribers: impl IntoIterator<Item = &'a ConnId>,
    envelope: Option<&ActionEnvelope>,
    text: &Frame,
) {
    let mut encodings = envelope.map(|e| version::Encodings::new(e, text));
    for c in subscribers {
        if let Some(conn) = connections.get_mut(c) {
            let text = match &mut encodings {
                Some(e) => e.text(conn.wire),
                None => text.clone(),
            };
            conn.deliver(text);
        }
    }
}

/// The JSON of a `root/terminalsChanged` action whose rows are already encoded.
fn terminals_changed_json<'a>(rows: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::from(r#"{"type":"root/terminalsChanged","terminals":["#);
    for (i, row) in rows.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(row);
    }
    out.push_str("]}");
    out
}

fn size_param(name: &str, value: Option<i64>, default: u16) -> Result<u16, HostError> {
    match value {
        None => Ok(default),
        Some(v) => {
            validate::dimension_value(name, &Value::from(v)).map_err(HostError::invalid_params)
        }
    }
}

fn shell_name(shell: &std::path::Path) -> String {
    shell
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "shell".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::state::{TerminalClientClaim, TerminalExitedLifecycleState};

    #[test]
    fn catalogue_from_encoded_rows_matches_the_encoder() {
        let rows: Vec<TerminalInfo> = (0..3)
            .map(|i| TerminalInfo {
                resource: format!("ahp-terminal:/t{i}"),
                title: format!("t\"{i}é"),
                claim: TerminalClaim::Client(TerminalClientClaim {
                    client_id: "c".into(),
                }),
                lifecycle: if i == 1 {
                    TerminalLifecycleState::Exited(TerminalExitedLifecycleState {
                        exit_code: Some(3),
                    })
                } else {
                    TerminalLifecycleState::Running(TerminalRunningLifecycleState {})
                },
            })
            .collect();
        let encoded: Vec<String> = rows
            .iter()
            .map(|r| serde_json::to_string(r).unwrap())
            .collect();
        for n in 0..=rows.len() {
            let action = StateAction::RootTerminalsChanged(RootTerminalsChangedAction {
                terminals: rows[..n].to_vec(),
            });
            assert_eq!(
                terminals_changed_json(encoded[..n].iter().map(String::as_str)),
                serde_json::to_string(&action).unwrap()
            );
        }
    }
}
