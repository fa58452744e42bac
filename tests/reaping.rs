//! Orphan reaping (docs/protocol.md "Reaping"): a terminal whose claim holder has no live
//! connection for longer than `--orphan-grace` is disposed; a connection presenting the
//! holder's clientId within the grace cancels it; `--orphan-grace 0` disables it.
//!
//! Some tests sleep: only to let a grace period pass when the expected outcome is that
//! nothing happens (bounded, a few hundred milliseconds past the grace and its tick).

mod common;
mod resume_support;

use std::time::{Duration, Instant};

use common::*;
use resume_support::*;
use serde_json::json;

/// A terminal held by `holder` (a client claim unless `claim` is given), with its shell pid.
async fn held_terminal(raw: &mut Raw, tag: &str, claim: serde_json::Value) -> (String, i32) {
    let t = term_uri(tag);
    raw_create(raw, &t, claim).await;
    raw_subscribe(raw, &t).await;
    let pid = shell_pid(raw, &t).await;
    (t, pid)
}

/// A root observer that stays connected for the whole test.
async fn observer(url: &str) -> Raw {
    Raw::connect_init(url, "observer", &[ROOT]).await.0
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_terminals_are_reaped_after_the_grace() {
    let d = Daemon::start_with(&["--orphan-grace", "1s"]);
    let mut obs = observer(&d.url()).await;
    let (mut h, _) = Raw::connect_init(&d.url(), "holder", &[]).await;
    let (t_client, pid_client) = held_terminal(&mut h, "reap-c", client_claim("holder")).await;
    // The holder of a session claim is the client that established it.
    let (t_session, pid_session) =
        held_terminal(&mut h, "reap-s", session_claim(Some("t1"), Some("tc1"))).await;
    // The observer's own terminal must survive.
    let (t_mine, _) = held_terminal(&mut obs, "mine", client_claim("observer")).await;
    wait_root_lists(&mut obs, &t_session, true, RPC_TIMEOUT).await;

    let gone_at = Instant::now();
    kill(h);
    wait_root_lists(&mut obs, &t_client, false, Duration::from_secs(10)).await;
    wait_root_lists(&mut obs, &t_session, false, Duration::from_secs(10)).await;
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
    assert!(root_lists(&obs, &t_mine) == Some(true));
    assert!(
        d.stderr().contains("reaping terminal"),
        "reaping is logged at info level"
    );
}

/// A claim transferred to a client that is not connected starts the clock; a claim naming a
/// clientId that never connects starts it at creation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_held_by_absent_clients_are_reaped() {
    let d = Daemon::start_with(&["--orphan-grace", "1s"]);
    let mut obs = observer(&d.url()).await;
    let (t_ghost, pid_ghost) = held_terminal(&mut obs, "ghost", client_claim("ghost")).await;
    let (t_given, pid_given) = held_terminal(&mut obs, "given", client_claim("observer")).await;
    obs.dispatch(
        &t_given,
        json!({"type": "terminal/claimed", "claim": client_claim("nobody")}),
    )
    .await;
    wait_root_lists(&mut obs, &t_ghost, false, Duration::from_secs(10)).await;
    wait_root_lists(&mut obs, &t_given, false, Duration::from_secs(10)).await;
    wait_dead(
        &[pid_ghost, pid_given],
        Duration::from_secs(10),
        "reaped shells",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_returning_within_the_grace_cancels_reaping() {
    let d = Daemon::start_with(&["--orphan-grace", "2s"]);
    let mut obs = observer(&d.url()).await;
    let (mut h1, _) = Raw::connect_init(&d.url(), "comes-back-r", &[]).await;
    let (t1, pid1) = held_terminal(&mut h1, "back-r", client_claim("comes-back-r")).await;
    let (mut h2, _) = Raw::connect_init(&d.url(), "comes-back-i", &[]).await;
    let (t2, pid2) = held_terminal(&mut h2, "back-i", session_claim(None, None)).await;
    // Two connections of one client: closing one leaves the other live.
    let (mut h3a, _) = Raw::connect_init(&d.url(), "two-conns", &[]).await;
    let (h3b, _) = Raw::connect_init(&d.url(), "two-conns", &[]).await;
    let (t3, pid3) = held_terminal(&mut h3a, "two", client_claim("two-conns")).await;
    let seen = last_seq(&h1) as i64;
    kill(h1);
    kill(h2);
    kill(h3b);
    // Come back well within the grace: one by reconnect, one by initialize.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_r1, resp) = raw_reconnect(&d.url(), "comes-back-r", seen, &[ROOT, &t1]).await;
    assert!(resp.get("result").is_some(), "{resp}");
    let (_r2, _) = Raw::connect_init(&d.url(), "comes-back-i", &[]).await;
    // Let the whole grace (2 s from the disconnect) and a reaper tick pass: nothing happens.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for (t, pid) in [(&t1, pid1), (&t2, pid2), (&t3, pid3)] {
        assert!(still_exists(&mut obs, t).await, "{t} was reaped");
        assert!(!is_dead(pid), "shell of {t} died");
    }
    assert!(!d.stderr().contains("reaping terminal"), "{}", d.stderr());
    // Sanity: leaving again does reap (the clock restarts).
    drop(_r1);
    wait_root_lists(&mut obs, &t1, false, Duration::from_secs(10)).await;
    wait_dead(&[pid1], Duration::from_secs(10), "reaped shell");
    assert!(still_exists(&mut obs, &t2).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_grace_zero_disables_reaping() {
    let d = Daemon::start_with(&["--orphan-grace", "0"]);
    let mut obs = observer(&d.url()).await;
    let (t_ghost, pid_ghost) = held_terminal(&mut obs, "z-ghost", client_claim("ghost")).await;
    let (mut h, _) = Raw::connect_init(&d.url(), "leaver", &[]).await;
    let (t, pid) = held_terminal(&mut h, "z-left", client_claim("leaver")).await;
    kill(h);
    // Nothing to wait for: give a would-be reaper 1.5 s (its shortest tick is 50 ms).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for (t, pid) in [(&t_ghost, pid_ghost), (&t, pid)] {
        assert!(still_exists(&mut obs, t).await, "{t} was reaped");
        assert!(!is_dead(pid));
    }
    assert!(!d.stderr().contains("reaping terminal"));
}
