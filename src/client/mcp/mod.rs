//! `ahpty mcp`: an MCP server on stdio (rmcp) that is one agent session of the daemon: a
//! client of it like the other subcommands (default socket, `--url`, `$AHPTY_URL`), starting
//! one in the background (`ahpty serve`, default settings) when none answers on the default
//! socket, unless `--no-start`. docs/agents.md describes the tools and the claims.
//!
//! Files: [`session`] (the session and its claims), [`tools`] (the tools), [`reply`] (the
//! reply shape), [`output`] (output for a model), [`keys`] (named keys).
//!
//! May touch: stdin and stdout (the MCP transport), the daemon, and a daemon process it starts.

pub mod keys;
pub mod output;
pub mod reply;
pub mod session;
pub mod tools;

use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;

use super::{Conn, Failure, Outcome, Target};

/// `ahpty mcp`.
pub async fn mcp(
    target: Target,
    token: Option<&str>,
    default_socket: bool,
    start: bool,
) -> Outcome {
    let session = Arc::new(session::Session::new(
        target.clone(),
        token.map(str::to_string),
    ));
    // The session's own connection: open for the process's life, so its terminals are held.
    let keep = match session.conn().await {
        Ok(c) => c,
        Err(e) if default_socket && start && e.code == super::EXIT_UNREACHABLE => {
            start_daemon()?;
            wait_for(&session).await?
        }
        Err(e) => return Err(e),
    };
    let server = tools::Server {
        session: session.clone(),
    };
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| Failure::failed(format!("MCP initialize failed: {e}")))?;
    if let Some(info) = running.peer().peer_info() {
        session.name_after(&info.client_info.name);
    }
    let _ = running.waiting().await;
    keep.close().await;
    Ok(0)
}

/// Starts `ahpty serve` in its own process group, detached from stdio.
fn start_daemon() -> Result<(), Failure> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().map_err(|e| {
        Failure::failed(format!(
            "cannot find the ahpty binary to start a daemon: {e}"
        ))
    })?;
    std::process::Command::new(exe)
        .arg("serve")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .map(|_| ())
        .map_err(|e| Failure::failed(format!("cannot start a daemon (ahpty serve): {e}")))
}

/// Connects once the started daemon answers (at most 10 s).
async fn wait_for(session: &session::Session) -> Result<Conn, Failure> {
    let mut last = None;
    for _ in 0..100 {
        match session.conn().await {
            Ok(c) => return Ok(c),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(last.unwrap_or_else(|| Failure::unreachable("the daemon started did not answer")))
}
