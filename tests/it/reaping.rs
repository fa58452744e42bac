//! Orphan reaping (docs/protocol.md "Reaping"): a terminal whose claim holder has no live
//! connection for longer than `--orphan-grace` is disposed; a connection presenting the
//! holder's clientId within the grace cancels it; `--orphan-grace 0` disables it.
//!
//! That a terminal is *not* reaped is shown against a control: a terminal whose holder left
//! later (or on a daemon with a grace) and which is reaped; by then every earlier grace has
//! run out too. The daemons log closed connections (at debug level), so a test knows when a
//! disconnect has been seen.

use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::json;

/// A terminal held by `holder` (a client claim unless `claim` is given), with its shell pid.
async fn held_terminal(raw: &mut Raw, tag: &str, claim: serde_json::Value) -> (String, i32) {
    let t = term_uri(tag);
    raw.create_claimed(&t, claim).await;
    raw.subscribe_at(&t).await;
    let pid = raw.shell_pid(&t).await;
    (t, pid)
}

/// A root observer that stays connected for the whole test.
async fn observer(url: &str) -> Raw {
    Raw::connect_init(url, "observer", &[ROOT]).await.0
}

/// A daemon with `--orphan-grace GRACE` that logs each closed connection.
fn daemon(grace: &str) -> Daemon {
    Daemon::builder()
        .args(&["--orphan-grace", grace])
        .log("info,ahpty::server=debug")
        .start()
}

/// Waits until the daemon has seen `n` connections close.
async fn closed_connections(d: &Daemon, n: usize) {
    eventually(
        "the daemon to see the disconnects",
        RPC_TIMEOUT,
        async || {
            let seen = d.stderr().matches("connection closed").count();
            if seen >= n {
                Ok(())
            } else {
                Err(format!("{seen} closed"))
            }
        },
    )
    .await
}

async fn still_exists(obs: &mut Raw, uri: &str) -> bool {
    let r = obs.request("subscribe", json!({"channel": uri})).await;
    if r.get("error").is_some() {
        assert_eq!(Raw::code(&r), Some(-32008), "{r}");
        false
    } else {
        true
    }
}

spec!(orphaned_terminals_are_reaped_after_the_grace, async {
    let d = daemon("1s");
    let mut obs = observer(&d.url()).await;
    let (mut h, _) = Raw::connect_init(&d.url(), "holder", &[]).await;
    let (t_client, pid_client) = held_terminal(&mut h, "reap-c", client_claim("holder")).await;
    // The holder of a session claim is the client that established it.
    let (t_session, pid_session) =
        held_terminal(&mut h, "reap-s", session_claim(Some("t1"), Some("tc1"))).await;
    // The observer's own terminal must survive.
    let (t_mine, _) = held_terminal(&mut obs, "mine", client_claim("observer")).await;
    obs.wait_root_lists(&t_session, true, RPC_TIMEOUT).await;

    let gone_at = Instant::now();
    h.drop_abruptly();
    obs.wait_root_lists(&t_client, false, Duration::from_secs(10))
        .await;
    obs.wait_root_lists(&t_session, false, Duration::from_secs(10))
        .await;
    let took = gone_at.elapsed();
    assert!(
        took >= Duration::from_millis(900),
        "reaped after {took:?}, before the 1 s grace"
    );
    wait_dead(
        &[pid_client, pid_session],
        Duration::from_secs(10),
        "reaped shells",
    );
    assert!(!still_exists(&mut obs, &t_client).await);
    assert!(!still_exists(&mut obs, &t_session).await);
    assert!(
        still_exists(&mut obs, &t_mine).await,
        "a connected holder's terminal was reaped"
    );
    assert!(obs.root_lists(&t_mine) == Some(true));
    assert!(
        d.stderr().contains("reaping terminal"),
        "reaping is logged at info level"
    );
});

// A claim transferred to a client that is not connected starts the clock; a claim naming a
// clientId that never connects starts it at creation.
spec!(claims_held_by_absent_clients_are_reaped, async {
    let d = daemon("1s");
    let mut obs = observer(&d.url()).await;
    let (t_ghost, pid_ghost) = held_terminal(&mut obs, "ghost", client_claim("ghost")).await;
    let (t_given, pid_given) = held_terminal(&mut obs, "given", client_claim("observer")).await;
    obs.dispatch(
        &t_given,
        json!({"type": "terminal/claimed", "claim": client_claim("nobody")}),
    )
    .await;
    obs.wait_root_lists(&t_ghost, false, Duration::from_secs(10))
        .await;
    obs.wait_root_lists(&t_given, false, Duration::from_secs(10))
        .await;
    wait_dead(
        &[pid_ghost, pid_given],
        Duration::from_secs(10),
        "reaped shells",
    );
});

spec!(holder_returning_within_the_grace_cancels_reaping, async {
    let d = daemon("2s");
    let mut obs = observer(&d.url()).await;
    let (mut h1, _) = Raw::connect_init(&d.url(), "comes-back-r", &[]).await;
    let (t1, pid1) = held_terminal(&mut h1, "back-r", client_claim("comes-back-r")).await;
    let (mut h2, _) = Raw::connect_init(&d.url(), "comes-back-i", &[]).await;
    let (t2, pid2) = held_terminal(&mut h2, "back-i", session_claim(None, None)).await;
    // Two connections of one client: closing one leaves the other live.
    let (mut h3a, _) = Raw::connect_init(&d.url(), "two-conns", &[]).await;
    let (h3b, _) = Raw::connect_init(&d.url(), "two-conns", &[]).await;
    let (t3, pid3) = held_terminal(&mut h3a, "two", client_claim("two-conns")).await;
    // The control: its holder leaves after the others have come back.
    let (mut ctl, _) = Raw::connect_init(&d.url(), "control", &[]).await;
    let (t_ctl, pid_ctl) = held_terminal(&mut ctl, "control", client_claim("control")).await;
    let seen = h1.last_envelope_seq() as i64;
    h1.drop_abruptly();
    h2.drop_abruptly();
    h3b.drop_abruptly();
    closed_connections(&d, 3).await;
    // Come back within the grace: one by reconnect, one by initialize.
    let (r1, resp) = Raw::reconnect(&d.url(), "comes-back-r", seen, &[ROOT, &t1]).await;
    assert!(resp.get("result").is_some(), "{resp}");
    let (_r2, _) = Raw::connect_init(&d.url(), "comes-back-i", &[]).await;
    ctl.drop_abruptly();
    // Once the control is reaped, the others' graces (started earlier) are over too.
    obs.wait_root_lists(&t_ctl, false, Duration::from_secs(10))
        .await;
    wait_dead(&[pid_ctl], Duration::from_secs(10), "the control's shell");
    for (t, pid) in [(&t1, pid1), (&t2, pid2), (&t3, pid3)] {
        assert!(still_exists(&mut obs, t).await, "{t} was reaped");
        assert!(!is_dead(pid), "shell of {t} died");
    }
    assert_eq!(
        d.stderr().matches("reaping terminal").count(),
        1,
        "only the control is reaped: {}",
        d.stderr()
    );
    // Sanity: leaving again does reap (the clock restarts).
    drop(r1);
    obs.wait_root_lists(&t1, false, Duration::from_secs(10))
        .await;
    wait_dead(&[pid1], Duration::from_secs(10), "reaped shell");
    assert!(still_exists(&mut obs, &t2).await);
});

spec!(orphan_grace_zero_disables_reaping, async {
    let d = daemon("0");
    // The control: the same departure on a daemon with a 1 s grace, after this one's.
    let control = daemon("1s");
    let mut obs = observer(&d.url()).await;
    let (t_ghost, pid_ghost) = held_terminal(&mut obs, "z-ghost", client_claim("ghost")).await;
    let (mut h, _) = Raw::connect_init(&d.url(), "leaver", &[]).await;
    let (t, pid) = held_terminal(&mut h, "z-left", client_claim("leaver")).await;
    let mut ctl_obs = observer(&control.url()).await;
    let (mut ctl, _) = Raw::connect_init(&control.url(), "leaver", &[]).await;
    let (t_ctl, _) = held_terminal(&mut ctl, "z-control", client_claim("leaver")).await;
    h.drop_abruptly();
    closed_connections(&d, 1).await;
    ctl.drop_abruptly();
    ctl_obs
        .wait_root_lists(&t_ctl, false, Duration::from_secs(10))
        .await;
    for (t, pid) in [(&t_ghost, pid_ghost), (&t, pid)] {
        assert!(still_exists(&mut obs, t).await, "{t} was reaped");
        assert!(!is_dead(pid));
    }
    assert!(!d.stderr().contains("reaping terminal"));
});
