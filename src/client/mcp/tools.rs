//! The MCP tools (`run`, `wait`, `list`, `send`, `stop`), their parameters (optional fields
//! with defaults, never `null` types) and the loop that follows a command in a terminal until
//! it finishes (`terminal/commandFinished`, from shell integration) or `wait_s` passes.
//!
//! May touch: the daemon, through [`Session`] connections.

use std::sync::Arc;
use std::time::Duration;

use ahp::ahp_types::actions::StateAction;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{schemars, tool, tool_router, RoleServer};
use serde::Deserialize;
use serde_json::json;
use tokio::time::Instant;

use super::keys::key;
use super::output::{cut, render};
use super::reply::{misuse, Holder, Omitted, Reply};
use super::session::Session;
use crate::client::{remote, Conn};

/// Raw output one call keeps at most (bytes); a longer output's head is replied.
const MAX_RAW_BYTES: usize = 64 << 20;

/// Longest wait of one call, in seconds (clients cut tool calls at 60 s).
const MAX_WAIT_S: u64 = 50;

fn default_wait() -> u64 {
    25
}
fn default_send_wait() -> u64 {
    2
}
fn default_max() -> usize {
    16000
}
fn default_signal() -> String {
    "INT".into()
}

/// `run`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RunParams {
    /// The shell command line.
    pub command: String,
    /// A terminal of this session to run it in (number, title or URI); default: an idle one.
    #[serde(default)]
    pub terminal: String,
    /// A title for a new terminal.
    #[serde(default)]
    pub name: String,
    /// Working directory of a new terminal.
    #[serde(default)]
    pub cwd: String,
    /// Seconds to wait before returning `running` (at most 50).
    #[serde(default = "default_wait")]
    pub wait_s: u64,
    /// Bytes of output returned at most (head + tail).
    #[serde(default = "default_max")]
    pub max_bytes: usize,
}

/// `wait`, `stop` and the terminal selection they share.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct WaitParams {
    /// The terminal (number, title or URI).
    pub terminal: String,
    #[serde(default = "default_wait")]
    pub wait_s: u64,
    #[serde(default = "default_max")]
    pub max_bytes: usize,
}

/// `send`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SendParams {
    pub terminal: String,
    /// Text typed as is.
    #[serde(default)]
    pub text: String,
    /// Named keys after the text: C-c, Enter, Up, Tab, Esc, F2, …
    #[serde(default)]
    pub keys: Vec<String>,
    #[serde(default = "default_send_wait")]
    pub wait_s: u64,
}

/// `stop`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct StopParams {
    pub terminal: String,
    /// INT (Ctrl-C), or KILL (disposes of the terminal).
    #[serde(default = "default_signal")]
    pub signal: String,
    #[serde(default)]
    pub dispose: bool,
}

/// `list` takes nothing.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct ListParams {}

/// The MCP server: one agent session.
#[derive(Clone)]
pub struct Server {
    pub session: Arc<Session>,
}

/// What following a terminal found.
struct Followed {
    raw: String,
    finished: Option<(i64, u64)>,
    exited: bool,
}

/// Follows `uri` on `conn` (subscribed) until its command finishes, the terminal exits, or
/// `wait`. `capturing`: the command already started (else output counts after
/// `terminal/commandExecuted`).
async fn follow(conn: &mut Conn, uri: &str, wait: Duration, mut capturing: bool) -> Followed {
    let deadline = Instant::now() + wait;
    let mut f = Followed {
        raw: String::new(),
        finished: None,
        exited: false,
    };
    while let Ok(Some(e)) = tokio::time::timeout_at(deadline, conn.next_event()).await {
        if e.channel != uri {
            continue;
        }
        match e.action {
            StateAction::TerminalCommandExecuted(_) => capturing = true,
            // Past MAX_RAW_BYTES the rest stays in the terminal's scrollback only.
            StateAction::TerminalData(d) if capturing && f.raw.len() < MAX_RAW_BYTES => {
                f.raw.push_str(&d.data)
            }
            StateAction::TerminalCommandFinished(c) => {
                f.finished = Some((
                    c.exit_code.unwrap_or(-1),
                    c.duration_ms.unwrap_or(0).max(0) as u64,
                ));
                break;
            }
            StateAction::TerminalExited(_) => {
                f.exited = true;
                break;
            }
            _ => {}
        }
    }
    f
}

fn reply_of(
    t: &crate::proto::catalog::TerminalSummary,
    command: &str,
    f: &Followed,
    max: usize,
    started: Instant,
) -> Reply {
    let shaped = cut(&render(&f.raw), max);
    let (status, exit_code, duration_ms) = match (f.finished, f.exited) {
        (Some((code, ms)), _) => ("exited", code, ms),
        (None, true) => ("killed", -1, started.elapsed().as_millis() as u64),
        (None, false) => ("running", -1, started.elapsed().as_millis() as u64),
    };
    Reply {
        terminal: t.title.clone(),
        id: t.id,
        command: command.to_string(),
        cwd: t.cwd.clone().unwrap_or_default(),
        status: status.into(),
        exit_code,
        signal: String::new(),
        duration_ms,
        output: shaped.text,
        omitted: Omitted {
            bytes: shaped.omitted_bytes,
            lines: shaped.omitted_lines,
        },
        cursor: 0,
        holder: Holder {
            kind: "agent".into(),
            name: t.holder.clone(),
        },
        attach: format!("ahpty attach {}", t.id),
    }
}

fn failed(e: crate::client::Failure) -> CallToolResult {
    misuse("daemon", &e.message)
}

/// The call's (turnId, toolCallId).
fn call_ids(ctx: &RequestContext<RoleServer>) -> (String, String) {
    let id = match &ctx.id {
        rmcp::model::NumberOrString::Number(n) => n.to_string(),
        rmcp::model::NumberOrString::String(s) => s.to_string(),
    };
    (format!("turn-{id}"), format!("call-{id}"))
}

impl Server {
    /// The session's connection and the terminal `name` selects (number, title, URI or
    /// prefix, as `ahpty attach` takes); on failure, the tool's error reply.
    async fn open(
        &self,
        name: &str,
    ) -> Result<(Conn, crate::proto::catalog::TerminalSummary), CallToolResult> {
        let mut conn = self.session.conn().await.map_err(failed)?;
        match remote::find(&mut conn, name).await {
            Ok((t, _)) => Ok((conn, t)),
            Err(e) => Err(misuse("unknown_terminal", &e.message)),
        }
    }
}

#[tool_router(server_handler)]
impl Server {
    #[tool(
        description = "Run a shell command in a terminal a person can watch (`ahpty attach`). Returns when it finishes (with its exit code) or after wait_s; then it keeps running and `wait` follows it."
    )]
    async fn run(
        &self,
        Parameters(p): Parameters<RunParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let s = &self.session;
        let (turn, call) = call_ids(&ctx);
        let mut conn = match s.conn().await {
            Ok(c) => c,
            Err(e) => return failed(e),
        };
        let started = Instant::now();
        let uri = if !p.terminal.is_empty() {
            match remote::find(&mut conn, &p.terminal).await {
                Ok((t, _)) => t.resource,
                Err(e) => return misuse("unknown_terminal", &e.message),
            }
        } else if let (Some(u), true) = (s.idle(), p.name.is_empty()) {
            u
        } else {
            let uri = format!("ahp-terminal:/{}", uuid::Uuid::new_v4());
            let cwd = if p.cwd.is_empty() {
                std::env::current_dir()
                    .map(|d| d.display().to_string())
                    .unwrap_or_else(|_| "/".into())
            } else {
                p.cwd.clone()
            };
            let mut params = json!({
                "channel": uri,
                "claim": s.claim(Some((&turn, &call))),
                "cwd": cwd,
            });
            if !p.name.is_empty() {
                params["name"] = json!(p.name);
            }
            if let Err(e) = conn
                .request::<serde_json::Value>("createTerminal", params)
                .await
            {
                return failed(e);
            }
            uri
        };
        if s.busy.lock().get(&uri).copied().unwrap_or(false) {
            return misuse("busy", "a command of this session runs in that terminal: call wait or stop first, or run without terminal");
        }
        if let Err(e) = remote::subscribe(&mut conn, &uri).await {
            return failed(e);
        }
        match remote::dispatch_checked(&mut conn, &uri, s.claimed(Some((&turn, &call)))).await {
            Ok(Ok(())) => {}
            Ok(Err(reason)) => {
                return misuse(
                    "held_by_human",
                    &format!("{reason}: read it, or ask the person to hand it back"),
                )
            }
            Err(e) => return failed(e),
        }
        s.set_busy(&uri, true);
        if let Err(e) = conn
            .dispatch(&uri, remote::input(format!("{}\r", p.command)))
            .await
        {
            return failed(e);
        }
        let f = follow(
            &mut conn,
            &uri,
            Duration::from_secs(p.wait_s.min(MAX_WAIT_S)),
            false,
        )
        .await;
        self.finish(conn, &uri, &p.command, f, p.max_bytes, started)
            .await
    }

    #[tool(
        description = "Wait for the command running in a terminal (started by run): the same reply as run, with the output produced since."
    )]
    async fn wait(
        &self,
        Parameters(p): Parameters<WaitParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let s = &self.session;
        let (turn, call) = call_ids(&ctx);
        let started = Instant::now();
        let (mut conn, t) = match self.open(&p.terminal).await {
            Ok(opened) => opened,
            Err(reply) => return reply,
        };
        if let Err(e) = remote::subscribe(&mut conn, &t.resource).await {
            return failed(e);
        }
        let _ =
            remote::dispatch_checked(&mut conn, &t.resource, s.claimed(Some((&turn, &call)))).await;
        let f = follow(
            &mut conn,
            &t.resource,
            Duration::from_secs(p.wait_s.min(MAX_WAIT_S)),
            true,
        )
        .await;
        self.finish(conn, &t.resource, "", f, p.max_bytes, started)
            .await
    }

    #[tool(
        description = "Type text and named keys (C-c, Enter, Up, Tab, Esc, F2, …) into a terminal; returns the output it caused."
    )]
    async fn send(&self, Parameters(p): Parameters<SendParams>) -> CallToolResult {
        let mut data = p.text.clone();
        for k in &p.keys {
            match key(k) {
                Some(b) => data.push_str(&b),
                None => return misuse("unknown_key", &format!("{k:?} is not a key name: use C-x, Enter, Tab, Esc, Up, Down, Left, Right, Home, End, PageUp, PageDown, Delete, Backspace, F1–F12")),
            }
        }
        let started = Instant::now();
        let (mut conn, t) = match self.open(&p.terminal).await {
            Ok(opened) => opened,
            Err(reply) => return reply,
        };
        if let Err(e) = remote::subscribe(&mut conn, &t.resource).await {
            return failed(e);
        }
        match remote::dispatch_checked(&mut conn, &t.resource, remote::input(data)).await {
            Ok(Ok(())) => {}
            Ok(Err(reason)) => return misuse("input_rejected", &reason),
            Err(e) => return failed(e),
        }
        let f = follow(
            &mut conn,
            &t.resource,
            Duration::from_secs(p.wait_s.min(MAX_WAIT_S)),
            true,
        )
        .await;
        self.finish(conn, &t.resource, "", f, default_max(), started)
            .await
    }

    #[tool(
        description = "Stop the command in a terminal: INT types Ctrl-C; KILL or dispose disposes of the terminal."
    )]
    async fn stop(&self, Parameters(p): Parameters<StopParams>) -> CallToolResult {
        let started = Instant::now();
        let (mut conn, t) = match self.open(&p.terminal).await {
            Ok(opened) => opened,
            Err(reply) => return reply,
        };
        if p.dispose || p.signal == "KILL" {
            if let Err(e) = remote::dispose(&mut conn, &t.resource).await {
                return failed(e);
            }
            self.session.busy.lock().remove(&t.resource);
            let f = Followed {
                raw: String::new(),
                finished: None,
                exited: true,
            };
            let mut r = reply_of(&t, "", &f, default_max(), started);
            r.signal = p.signal.clone();
            return r.into_result();
        }
        if p.signal != "INT" {
            return misuse("unknown_signal", "signal must be INT or KILL");
        }
        if let Err(e) = remote::subscribe(&mut conn, &t.resource).await {
            return failed(e);
        }
        if let Err(e) = conn.dispatch(&t.resource, remote::input("\x03")).await {
            return failed(e);
        }
        let f = follow(&mut conn, &t.resource, Duration::from_secs(5), true).await;
        let mut r = self
            .finish(conn, &t.resource, "", f, default_max(), started)
            .await;
        if let Some(v) = r.structured_content.as_mut() {
            v["signal"] = json!("INT");
        }
        r
    }

    #[tool(
        description = "Every terminal on the host: number, title, holder, status, cwd and the ahpty attach line."
    )]
    async fn list(&self, Parameters(_p): Parameters<ListParams>) -> CallToolResult {
        let mut conn = match self.session.conn().await {
            Ok(c) => c,
            Err(e) => return failed(e),
        };
        let listing = match conn.list().await {
            Ok(l) => l,
            Err(e) => return failed(e),
        };
        conn.close().await;
        let me = &self.session.client_id;
        let terminals: Vec<serde_json::Value> = listing
            .terminals
            .iter()
            .map(|t| {
                let kind = if t.holder.starts_with("ahpty-mcp-")
                    || matches!(t.claim, ahp::ahp_types::state::TerminalClaim::Session(_))
                {
                    "agent"
                } else {
                    "human"
                };
                json!({
                    "id": t.id,
                    "terminal": t.title,
                    "uri": t.resource,
                    "holder": {"kind": kind, "name": t.holder, "this_session": &t.holder == me},
                    "status": match &t.lifecycle {
                        ahp::ahp_types::state::TerminalLifecycleState::Exited(_) => "exited",
                        _ => "running",
                    },
                    "cwd": t.cwd.clone().unwrap_or_default(),
                    "attach": format!("ahpty attach {}", t.id),
                })
            })
            .collect();
        let text = terminals
            .iter()
            .map(|t| {
                format!(
                    "t{} [{}] {} held by {}",
                    t["id"],
                    t["terminal"].as_str().unwrap_or(""),
                    t["status"].as_str().unwrap_or(""),
                    t["holder"]["name"].as_str().unwrap_or("")
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        let mut r = CallToolResult::success(vec![rmcp::model::ContentBlock::text(text)]);
        r.structured_content = Some(json!({ "terminals": terminals }));
        r
    }
}

impl Server {
    /// The reply after following; a command still running is backgrounded: the claim narrows
    /// to `{session, chat}`.
    async fn finish(
        &self,
        mut conn: Conn,
        uri: &str,
        command: &str,
        f: Followed,
        max: usize,
        started: Instant,
    ) -> CallToolResult {
        let running = f.finished.is_none() && !f.exited;
        self.session.set_busy(uri, running);
        if !f.exited {
            let _ = remote::dispatch_checked(&mut conn, uri, self.session.claimed(None)).await;
        }
        let listing = conn.list().await;
        conn.close().await;
        let t = match listing
            .ok()
            .and_then(|l| l.terminals.into_iter().find(|t| t.resource == uri))
        {
            Some(t) => t,
            None => crate::proto::catalog::TerminalSummary {
                id: 0,
                resource: uri.to_string(),
                title: String::new(),
                claim: self.session.claim(None),
                holder: self.session.client_id.clone(),
                holder_connected: true,
                lifecycle: ahp::ahp_types::state::TerminalLifecycleState::Exited(Default::default()),
                cwd: None,
                cols: None,
                rows: None,
                created_at: 0,
                supports_command_detection: None,
                restored: false,
            },
        };
        reply_of(&t, command, &f, max, started).into_result()
    }
}
