//! `ahpty new [--name N] [--cwd DIR] [--attach]`: create a terminal running the daemon's
//! shell, claimed by the CLI ([`super::connect::CLIENT_ID`]), at the local window size when
//! there is one; print its URI on stdout (or, with `--attach`, attach to it at once).
//!
//! Its URI is `ahp-terminal:/<UUID v4>`; its cwd defaults to the current directory. Like any
//! terminal whose holder has no connection, it is disposed after the daemon's
//! `--orphan-grace` (default 24 h) without any `ahpty` client connected.

use std::path::PathBuf;

use serde_json::json;

use super::attach::{attach_to, AttachOptions};
use super::connect::{CLIENT_ID, ROOT};
use super::{run, tty, Conn, Failure, Outcome, Target};

/// What `new` creates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewOptions {
    /// Title.
    pub name: Option<String>,
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
    run::create(&mut conn, params, &cwd).await?;
    match &opts.attach {
        Some(a) => attach_to(conn, &uri, CLIENT_ID, a).await,
        None => {
            println!("{uri}");
            conn.close().await;
            Ok(0)
        }
    }
}
