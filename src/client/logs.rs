//! `ahpty logs TERMINAL [--follow] [--plain]`: a terminal's retained output (the snapshot's
//! content, up to the daemon's `--scrollback-bytes`), then with `--follow` its live output
//! until it exits or is disposed (like `docker logs -f`). `--plain` strips escape sequences
//! ([`super::plain`]). With `--follow`, a reader that stops reading for longer than the
//! daemon's `--stall-timeout` is disconnected (exit 255). A live upgrade of the daemon (close
//! code 1012) does not end `--follow`: the connection is resumed ([`super::connect`]) and the
//! output goes on from the last `serverSeq`, with no gap and no duplicate (resumed with a
//! snapshot instead, one line on stderr says output may be missing).
//!
//! Raw output to a terminal goes through [`super::filter`] as in `attach`: the program's
//! clipboard writes and the queries the local terminal would answer (into the shell `logs`
//! returns to) are removed. Into a file or a pipe it stays verbatim.
//!
//! May touch: its one daemon connection and stdout.

use ahp::ahp_types::actions::StateAction;
use ahp::ahp_types::state::TerminalLifecycleState;
use tokio::io::AsyncWriteExt;

use super::connect::{Event, ROOT};
use super::filter::QueryFilter;
use super::plain::Plain;
use super::{remote, tty, Conn, Outcome, Target};

/// `ahpty logs`.
pub async fn logs(
    target: &Target,
    token: Option<&str>,
    query: &str,
    follow: bool,
    plain: bool,
) -> Outcome {
    let subs: &[&str] = if follow { &[ROOT] } else { &[] };
    let mut conn = Conn::open(target, token, subs).await?;
    let (t, _) = remote::find(&mut conn, query).await?;
    let uri = t.resource;
    let (state, from_seq) = remote::subscribe(&mut conn, &uri).await?;
    let mut filter = plain.then(Plain::new);
    let mut guard = (!plain && tty::stdout_is_tty()).then(|| QueryFilter::new(false));
    let mut out = tokio::io::stdout();
    let mut emit = |text: &str| match (&mut filter, &mut guard) {
        (Some(p), _) => p.push(text),
        (None, Some(g)) => g.filter(text),
        (None, None) => text.to_string(),
    };
    let first = emit(&remote::replay(&state));
    if write(&mut out, &first).await.is_err() {
        return Ok(0);
    }
    let running = matches!(state.lifecycle, TerminalLifecycleState::Running(_));
    if !follow || !running {
        conn.close().await;
        return Ok(0);
    }
    conn.resume_on_restart();
    let mut from_seq = from_seq;
    loop {
        let e = match conn.next().await {
            None => return Err(conn.lost_failure()),
            Some(Event::Action(e)) => e,
            Some(Event::Missing(m)) if m == uri => break,
            Some(Event::Snapshot {
                channel,
                state,
                from_seq: at,
            }) if channel == uri => {
                from_seq = at;
                if !matches!(state.lifecycle, TerminalLifecycleState::Running(_)) {
                    break;
                }
                eprintln!(
                    "ahpty: the daemon restarted and could not replay {uri}'s output \
                     meanwhile; some may be missing"
                );
                continue;
            }
            Some(_) => continue,
        };
        if e.server_seq <= from_seq {
            continue;
        }
        if e.channel == ROOT && remote::disposed(&e, &uri) {
            break;
        }
        if e.channel != uri {
            continue;
        }
        match &e.action {
            StateAction::TerminalData(d) => {
                let text = emit(&d.data);
                if write(&mut out, &text).await.is_err() {
                    break;
                }
            }
            StateAction::TerminalExited(_) => break,
            _ => {}
        }
    }
    conn.close().await;
    Ok(0)
}

async fn write(out: &mut tokio::io::Stdout, text: &str) -> std::io::Result<()> {
    if text.is_empty() {
        return Ok(());
    }
    out.write_all(text.as_bytes()).await?;
    out.flush().await
}
