//! Input never waits behind output: a client that has stopped reading its socket while a
//! flood fills its queue (so the terminal is paused for it) can still stop the flood with
//! Ctrl-C, and its held-back output then arrives in order.

use std::time::Duration;

use crate::support::*;
use serde_json::json;

/// Pids of the `yes` processes in session `sid`.
fn yes_processes(sid: i32) -> Vec<i32> {
    session_members(sid)
        .into_iter()
        .filter(|&pid| comm(pid).as_deref() == Some("yes"))
        .collect()
}

measured!(
    ctrl_c_reaches_the_pty_while_the_client_is_not_reading,
    async {
        let daemon = Daemon::start();
        let (mut a, _) = Raw::connect_init(&daemon.url(), "slow-reader", &[]).await;
        let uri = term_uri("prio");
        a.create_terminal(&uri).await;
        let sub = a.request("subscribe", json!({"channel": uri})).await;
        assert!(sub.get("result").is_some(), "{sub}");
        a.type_text(&uri, "echo pid-$$\r").await;
        let u = uri.clone();
        a.wait_until("the shell's pid", SHELL_TIMEOUT, |raw| {
            find_number_after(raw.data(&u), "pid-").is_some()
        })
        .await;
        let shell = find_number_after(a.data(&uri), "pid-").expect("shell pid") as i32;

        // Start the flood, then stop reading the socket.
        a.type_text(&uri, "yes\r").await;
        let yes = eventually("yes to start", Duration::from_secs(10), async || {
            yes_processes(shell).first().copied()
        })
        .await;
        // The queue fills and the terminal pauses: `yes` sleeps, blocked in write.
        eventually(
            "yes to block (the terminal paused for the client that stopped reading)",
            Duration::from_secs(15),
            async || {
                for _ in 0..20 {
                    // 20 samples 5 ms apart: asleep in each one, not just between two writes.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    if proc_state(yes) != Some('S') {
                        return false;
                    }
                }
                true
            },
        )
        .await;

        // A ping (whose answer also waits behind the flood), then Ctrl-C, sent while still not
        // reading anything: neither may wait for the queue to drain.
        a.send_json(
            &json!({"jsonrpc": "2.0", "id": "p1", "method": "ping", "params": {"channel": ROOT}}),
        )
        .await;
        a.dispatch(&uri, json!({"type": "terminal/input", "data": "\u{3}"}))
            .await;
        eventually(
            "Ctrl-C to reach the pty while the client's queue is congested",
            Duration::from_secs(2),
            async || yes_processes(shell).is_empty(),
        )
        .await;

        // Reading again, the client gets the rest: the command finished with 130 and a prompt.
        a.wait_envelope("commandFinished 130", SHELL_TIMEOUT, |e| {
            e["action"]["type"] == "terminal/commandFinished" && e["action"]["exitCode"] == 130
        })
        .await;
        a.type_text(&uri, "echo after-$((2+3))\r").await;
        a.wait_data(&uri, "after-5", SHELL_TIMEOUT).await;
    }
);
