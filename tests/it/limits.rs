//! Limits against a hostile client that hold for every entry point: input echoes cannot grow
//! the daemon's memory without bound, terminal names are capped like titles, and the
//! subscription limit also binds `initialize` and `reconnect` (whose lists are bounded too).

use std::time::Duration;

use crate::support::*;
use futures_util::SinkExt;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

// A client that never reads but keeps sending large inputs to a terminal that swallows them:
// every input is echoed back to it, so without a bound its queue — and the daemon — would
// grow without limit. The daemon stops reading it instead, and refuses input to a terminal
// whose subscriber is that far behind; a well-behaved client keeps working.
measured!(
    input_echoes_to_a_client_that_never_reads_stay_bounded,
    async {
        let daemon = Daemon::start();
        let (mut a, _) = Raw::connect_init(&daemon.url(), "flooder", &[]).await;
        let uri = term_uri("echo-flood");
        a.create_terminal(&uri).await;
        a.subscribe(&uri).await;
        a.type_text(&uri, "stty -echo raw; cat > /dev/null\r").await;
        a.wait_envelope("cat to start", SHELL_TIMEOUT, |e| {
            e["action"]["type"] == "terminal/commandExecuted"
        })
        .await;

        let before = rss_kib(daemon.pid());
        let chunk = "x".repeat(4 * 1024 * 1024);
        let frame = json!({"jsonrpc": "2.0", "method": "dispatchAction", "params": {
        "channel": uri, "clientSeq": 1, "action": {"type": "terminal/input", "data": chunk}}})
        .to_string();
        // Send without reading anything until the daemon has stopped reading this socket: the
        // sends block for a second (two 500 ms tries in a row), which is the point. A daemon that
        // kept reading is stopped after 6 s, when its memory is judged the same way.
        let mut sent = 0;
        let mut blocked = 0;
        let _ = tokio::time::timeout(Duration::from_secs(6), async {
            while blocked < 2 {
                let send = a.ws.send(Message::Text(frame.clone().into()));
                match tokio::time::timeout(Duration::from_millis(500), send).await {
                    Ok(Ok(())) => {
                        sent += 1;
                        blocked = 0;
                    }
                    Ok(Err(_)) => break,
                    Err(_) => blocked += 1, // the daemon is not reading us
                }
            }
        })
        .await;
        let after = rss_kib(daemon.pid());
        eprintln!("sent {sent} × 4 MiB; daemon RSS {before} KiB → {after} KiB");
        assert!(
            after < before + 128 * 1024,
            "daemon RSS grew from {before} KiB to {after} KiB after {sent} × 4 MiB inputs"
        );

        // Another client is unaffected.
        let mut b = Ahp::connect(&daemon.url(), "bystander", &[]).await;
        let other = term_uri("bystander");
        b.create_terminal(&other, json!({})).await.expect("create");
        b.subscribe_terminal(&other).await;
        b.ready(&other).await;
    }
);

spec!(terminal_names_are_capped_like_titles, async {
    let daemon = Daemon::start();
    let (mut a, _) = Raw::connect_init(&daemon.url(), "namer", &[ROOT]).await;
    let long = "n".repeat(4097);
    let resp = a
        .request(
            "createTerminal",
            json!({"channel": term_uri("long"), "name": long,
                   "claim": {"kind": "client", "clientId": "namer"}}),
        )
        .await;
    assert_eq!(Raw::code(&resp), Some(-32602), "{resp}");
    assert!(resp["error"]["message"].as_str().unwrap().contains("name"));
    let ok = a
        .request(
            "createTerminal",
            json!({"channel": term_uri("ok"), "name": "n".repeat(4096),
                   "claim": {"kind": "client", "clientId": "namer"}}),
        )
        .await;
    assert!(ok.get("result").is_some(), "{ok}");
});

spec!(subscription_limit_binds_initialize_and_reconnect, async {
    let daemon = Daemon::start_with(&["--max-subscriptions", "2"]);
    let owner = Ahp::connect(&daemon.url(), "owner", &[]).await;
    let uris: Vec<String> = (0..4).map(|i| term_uri(&format!("lim{i}"))).collect();
    for u in &uris {
        owner.create_terminal(u, json!({})).await.expect("create");
    }
    // Lists may hold twice --max-subscriptions entries; only that many channels are taken.
    let mut subs: Vec<&str> = vec![ROOT];
    subs.extend(uris.iter().take(3).map(String::as_str));

    let (_, init) = Raw::connect_init(&daemon.url(), "greedy", &subs).await;
    assert_eq!(init["snapshots"].as_array().unwrap().len(), 2, "{init}");

    // A longer list is refused, naming the field and the limit.
    let mut too_many = subs.clone();
    too_many.push(&uris[3]);
    let mut r = Raw::connect(&daemon.url()).await;
    let resp = r
        .request(
            "initialize",
            json!({"channel": ROOT, "protocolVersions": ["1.0.0"], "clientId": "greedy3",
                   "initialSubscriptions": too_many}),
        )
        .await;
    assert_eq!(Raw::code(&resp), Some(-32602), "{resp}");
    let msg = resp["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("initialSubscriptions") && msg.contains("at most 4"),
        "{msg}"
    );

    let mut r = Raw::connect(&daemon.url()).await;
    let resp = r
        .request(
            "reconnect",
            json!({"channel": ROOT, "clientId": "greedy", "lastSeenServerSeq": 0,
                   "subscriptions": subs}),
        )
        .await;
    let result = &resp["result"];
    let held = match result["type"].as_str() {
        Some("snapshot") => result["snapshots"].as_array().unwrap().len(),
        Some("replay") => subs.len() - result["missing"].as_array().unwrap().len(),
        _ => panic!("unexpected reconnect answer {resp}"),
    };
    assert_eq!(held, 2, "{resp}");
    let _ = owner.client.shutdown().await;
});
