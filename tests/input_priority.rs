//! Input never waits behind output: a client that has stopped reading its socket while a
//! flood fills its queue (so the terminal is paused for it) can still stop the flood with
//! Ctrl-C, and its held-back output then arrives in order.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

/// Pids of the `yes` processes in session `sid`.
fn yes_processes(sid: i32) -> Vec<i32> {
    session_members(sid)
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .map(|c| c.trim() == "yes")
                .unwrap_or(false)
        })
        .collect()
}

/// Polls `cond` every 10 ms until it holds or `timeout` passes.
fn poll(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_reaches_the_pty_while_the_client_is_not_reading() {
    let daemon = Daemon::start();
    let (mut a, _) = Raw::connect_init(&daemon.url(), "slow-reader", &[]).await;
    let uri = term_uri("prio");
    let created = a
        .request(
            "createTerminal",
            json!({"channel": uri, "claim": {"kind": "client", "clientId": "slow-reader"}}),
        )
        .await;
    assert!(created.get("result").is_some(), "{created}");
    let sub = a.request("subscribe", json!({"channel": uri})).await;
    assert!(sub.get("result").is_some(), "{sub}");
    a.type_text(&uri, "echo pid-$$\r").await;
    let u = uri.clone();
    a.wait_until("the shell's pid", SHELL_TIMEOUT, |raw| {
        find_number_after(&raw.data(&u), "pid-").is_some()
    })
    .await;
    let shell = find_number_after(&a.data(&uri), "pid-").expect("shell pid") as i32;

    // Start the flood, then stop reading the socket.
    a.type_text(&uri, "yes\r").await;
    assert!(
        poll(Duration::from_secs(10), || !yes_processes(shell).is_empty()),
        "yes did not start"
    );
    // The queue fills and the terminal pauses: `yes` sleeps, blocked in write.
    let yes = yes_processes(shell)[0];
    assert!(
        poll(Duration::from_secs(15), || {
            (0..20).all(|_| {
                std::thread::sleep(Duration::from_millis(5));
                proc_state(yes) == Some('S')
            })
        }),
        "yes never blocked: the terminal was not paused for the client that stopped reading"
    );

    // A ping (whose answer also waits behind the flood), then Ctrl-C, sent while still not
    // reading anything: neither may wait for the queue to drain.
    a.send_json(
        &json!({"jsonrpc": "2.0", "id": "p1", "method": "ping", "params": {"channel": ROOT}}),
    )
    .await;
    a.dispatch(&uri, json!({"type": "terminal/input", "data": "\u{3}"}))
        .await;
    assert!(
        poll(Duration::from_secs(2), || yes_processes(shell).is_empty()),
        "Ctrl-C did not reach the pty within 2 s while the client's queue was congested"
    );

    // Reading again, the client gets the rest: the command finished with 130 and a prompt.
    a.wait_envelope("commandFinished 130", SHELL_TIMEOUT, |e| {
        e["action"]["type"] == "terminal/commandFinished" && e["action"]["exitCode"] == 130
    })
    .await;
    a.type_text(&uri, "echo after-$((2+3))\r").await;
    a.wait_data(&uri, "after-5", SHELL_TIMEOUT).await;
}
