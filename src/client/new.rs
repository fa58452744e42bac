//! `ahpty new [--name N] [--cwd DIR] [--attach]`: create a terminal running the daemon's
//! shell, claimed by the CLI ([`super::connect::CLIENT_ID`]), at the local window size when
//! there is one; print its URI on stdout (or, with `--attach`, attach to it at once).
//!
//! A `--name` is the terminal's title for good (escape sequences from its programs do not
//! change it), so `ahpty send NAME` keeps finding it. A name a running terminal already has
//! is refused (exit 1) unless `--force`: selecting by that name would be ambiguous. A name
//! only exited terminals have is taken over: once the new terminal exists they are disposed
//! of (one line on stderr for each), so the name selects the new one.
//!
//! Its URI is `ahp-terminal:/<UUID v4>`; its cwd defaults to the current directory. Like any
//! terminal whose holder has no connection, it is disposed after the daemon's
//! `--orphan-grace` (default 24 h) without any `ahpty` client connected.
//!
//! May touch: its one daemon connection, the current directory and window size (read),
//! stdout; with `--attach`, what [`super::attach`] touches.

use std::path::PathBuf;

use serde_json::json;

use super::attach::{attach_to, AttachOptions};
use super::connect::{CLIENT_ID, ROOT};
use super::kill::is_exited;
use super::{remote, run, tty, Conn, Failure, Outcome, Target};
use crate::proto::catalog::TerminalSummary;

/// What `new` creates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewOptions {
    /// Title.
    pub name: Option<String>,
    /// Create it even when another terminal already has this name.
    pub force: bool,
    /// Working directory (default: the current one).
    pub cwd: Option<PathBuf>,
    /// Attach right away, with these options.
    pub attach: Option<AttachOptions>,
}

/// `ahpty new`.
pub async fn new(target: &Target, token: Option<&str>, opts: &NewOptions) -> Outcome {
    let cwd = match &opts.cwd {
        Some(d) => std::path::absolute(d),
        None => std::env::current_dir(),
    }
    .map_err(|e| Failure::failed(format!("cannot determine the working directory: {e}")))?;
    let mut conn = Conn::open(target, token, &[ROOT]).await?;
    // Exited terminals with this name: disposed of once the new one exists.
    let mut namesakes: Vec<TerminalSummary> = Vec::new();
    if let (Some(name), false) = (&opts.name, opts.force) {
        let listing = conn.list().await?;
        let (exited, running): (Vec<_>, Vec<_>) = listing
            .terminals
            .into_iter()
            .filter(|t| &t.title == name)
            .partition(is_exited);
        if let Some(t) = running.first() {
            conn.close().await;
            return Err(Failure::failed(format!(
                "terminal {} ({}) is already named {name:?} and is running: pick another \
                 --name, dispose of it first (`ahpty kill {}`), or pass --force to have two",
                t.id, t.resource, t.id
            )));
        }
        namesakes = exited;
    }
    let uri = format!("ahp-terminal:/{}", uuid::Uuid::new_v4());
    let mut params = json!({
        "channel": uri,
        "claim": {"kind": "client", "clientId": CLIENT_ID},
        "cwd": cwd.display().to_string(),
    });
    if let Some(name) = &opts.name {
        params["name"] = json!(name);
    }
    if let Some((cols, rows)) = tty::window_size() {
        params["cols"] = json!(cols);
        params["rows"] = json!(rows);
    }
    run::create(&mut conn, params, &cwd, opts.cwd.is_some()).await?;
    for t in &namesakes {
        // Gone already (disposed of or reaped meanwhile) is as good as disposed of.
        if let Err(e) = remote::dispose(&mut conn, &t.resource).await {
            if !e.message.contains("terminal not found") {
                eprintln!(
                    "ahpty: could not dispose of exited terminal {} ({}), also named {:?}: {}",
                    t.id,
                    t.resource,
                    t.title,
                    super::one_line(&e.message)
                );
                continue;
            }
        }
        eprintln!(
            "ahpty: disposed of exited terminal {} ({}), which had the name {:?}",
            t.id, t.resource, t.title
        );
    }
    match &opts.attach {
        Some(a) => {
            // Without a terminal, attach pipes the terminal's output to stdout: the URI goes
            // to stderr, so the terminal can be found again.
            if !tty::stdin_is_tty() {
                eprintln!("ahpty: new terminal {uri}");
            }
            attach_to(conn, &uri, CLIENT_ID, a).await
        }
        None => {
            println!("{uri}");
            conn.close().await;
            Ok(0)
        }
    }
}
