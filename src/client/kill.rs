//! `ahpty kill TERMINAL`: dispose of a terminal (`disposeTerminal`): it disappears from the
//! list and every process of its session gets SIGHUP, then SIGKILL after the daemon's
//! `--kill-grace`; returns once they are gone.
//!
//! May touch: its one daemon connection; nothing local.

use super::{remote, Conn, Outcome, Target};

/// `ahpty kill`.
pub async fn kill(target: &Target, token: Option<&str>, query: &str) -> Outcome {
    let mut conn = Conn::open(target, token, &[]).await?;
    let (t, _) = remote::find(&mut conn, query).await?;
    remote::dispose(&mut conn, &t.resource).await?;
    conn.close().await;
    Ok(0)
}
