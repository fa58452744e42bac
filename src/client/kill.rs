//! `ahpty kill TERMINAL`: dispose of a terminal (`disposeTerminal`): it disappears from the
//! list and every process of its session gets SIGHUP, then SIGKILL after the daemon's
//! `--kill-grace`; returns once they are gone.
//!
//! `ahpty kill --exited [--dry-run]`: the same for every exited terminal (restored from
//! transcripts, or whose program exited), one line on stdout for each; with `--dry-run` the
//! lines say what would go and nothing is disposed of.
//!
//! May touch: its one daemon connection, stdout; nothing local.

use ahp::ahp_types::state::TerminalLifecycleState;

use super::{remote, Conn, Outcome, Target};
use crate::proto::catalog::TerminalSummary;

/// `ahpty kill`.
pub async fn kill(target: &Target, token: Option<&str>, query: &str) -> Outcome {
    let mut conn = Conn::open(target, token, &[]).await?;
    let (t, _) = remote::find(&mut conn, query).await?;
    remote::dispose(&mut conn, &t.resource).await?;
    conn.close().await;
    Ok(0)
}

/// `ahpty kill --exited`: disposes of every exited terminal, printing
/// `disposed of ID "TITLE" URI` for each (`would dispose of …` with `dry_run`, which disposes
/// of nothing). A terminal that is gone by the time its turn comes (disposed of by someone
/// else, reaped) is skipped; any other refusal stops there (exit 1).
pub async fn kill_exited(target: &Target, token: Option<&str>, dry_run: bool) -> Outcome {
    let mut conn = Conn::open(target, token, &[]).await?;
    let listing = conn.list().await?;
    let exited: Vec<&TerminalSummary> = listing.terminals.iter().filter(|t| is_exited(t)).collect();
    for t in exited {
        if !dry_run {
            if let Err(e) = remote::dispose(&mut conn, &t.resource).await {
                if e.message.contains("terminal not found") {
                    continue;
                }
                return Err(e);
            }
        }
        let verb = if dry_run {
            "would dispose of"
        } else {
            "disposed of"
        };
        println!(
            "{verb} {} {:?} {}",
            t.id,
            super::one_line(&t.title),
            t.resource
        );
    }
    conn.close().await;
    Ok(0)
}

/// Whether a listed terminal has exited (restored terminals always have).
pub(crate) fn is_exited(t: &TerminalSummary) -> bool {
    matches!(t.lifecycle, TerminalLifecycleState::Exited(_))
}
