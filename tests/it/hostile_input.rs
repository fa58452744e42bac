//! Hostile input hurts nobody else: client A's terminal streams numbered lines from before
//! the attack starts until after it ends, while other clients send oversized messages,
//! invalid UTF-8 text frames, deeply nested JSON, 10 000 subscribes and junk actions. A's
//! stream must keep flowing during the attack and arrive complete and in order, and the
//! daemon's memory must stay bounded.

use std::time::Duration;

use crate::support::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::Message;

/// Lines the terminal prints per `seq` it runs while the attack lasts.
const CHUNK: u64 = 1000;

fn vm_kib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Reads everything the server sends until it closes (or `limit`), discarding it.
async fn drain(ws: &mut Ws, limit: Duration) {
    let _ = tokio::time::timeout(limit, async { while let Some(Ok(_)) = ws.next().await {} }).await;
}

async fn init(ws: &mut Ws, id: &str) {
    let msg = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"channel": ROOT, "protocolVersions": ["1.0.0"], "clientId": id}});
    ws.send(Message::Text(msg.to_string().into()))
        .await
        .unwrap();
}

/// The attackers, one after another, each on its own connection(s).
async fn attack(url: String, victim: String) {
    // 1. Oversized messages (limit 1 MiB here): the connection is closed, nothing else.
    for size in [2 << 20, 8 << 20] {
        let mut ws = ws_connect(&url).await;
        let big = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"dispatchAction\",\"params\":{{\"channel\":\"{victim}\",\"clientSeq\":1,\"action\":{{\"type\":\"terminal/input\",\"data\":\"{}\"}}}}}}",
            "A".repeat(size)
        );
        let _ = ws.send(Message::Text(big.into())).await;
        drain(&mut ws, Duration::from_secs(5)).await;
    }
    // 2. Invalid UTF-8 in a text frame, and in a binary frame.
    let mut ws = ws_connect(&url).await;
    let frame = Frame::message(vec![b'{', 0xff, 0xfe, b'}'], OpCode::Data(Data::Text), true);
    let _ = ws.send(Message::Frame(frame)).await;
    drain(&mut ws, Duration::from_secs(5)).await;
    let mut ws = ws_connect(&url).await;
    let _ = ws
        .send(Message::Binary(vec![0xc3, 0x28, 0xff].into()))
        .await;
    let _ = ws.send(Message::Text("{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\",\"params\":{\"channel\":\"ahp-root://\"}}".into())).await;
    // 3. Deeply nested JSON, as a message and inside params.
    let _ = ws.send(Message::Text("[".repeat(100_000).into())).await;
    let _ = ws
        .send(Message::Text(
            format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"ping\",\"params\":{{\"channel\":\"ahp-root://\",\"x\":{}{}}}}}",
                "{\"a\":".repeat(50_000),
                "}".repeat(50_000)
            )
            .into(),
        ))
        .await;
    // 4. 10 000 subscribes (unknown terminals, the victim's, garbage), read concurrently for
    // a few seconds; then the attacker goes away with most of them unanswered. (Each subscribe
    // to the victim is answered with a snapshot of its whole scrollback, which takes a debug
    // build about 0.1 s: answering all 2 500 would take minutes.)
    init(&mut ws, "attacker").await;
    let (mut tx, mut rx) = ws.split();
    let reader = tokio::spawn(async move {
        let mut n = 0u64;
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(Ok(_)) = rx.next().await {
                n += 1;
            }
        })
        .await;
        n
    });
    for i in 0..10_000u32 {
        let channel = match i % 4 {
            0 => format!("ahp-terminal:/nope-{i}"),
            1 => victim.clone(),
            2 => format!("x:{}", "y".repeat((i % 500) as usize)),
            _ => "not a uri".to_string(),
        };
        let msg = json!({"jsonrpc": "2.0", "id": 100 + i, "method": "subscribe",
                         "params": {"channel": channel}});
        if tx
            .send(Message::Text(msg.to_string().into()))
            .await
            .is_err()
        {
            break;
        }
    }
    // 5. Junk actions aimed at the victim's terminal (none of them valid input).
    let junk: Vec<Value> = vec![
        json!({"type": "terminal/input"}),
        json!({"type": "terminal/input", "data": 42}),
        json!({"type": "terminal/resized", "cols": -1, "rows": 1e300}),
        json!({"type": "terminal/resized", "cols": 0, "rows": 0}),
        json!({"type": "terminal/claimed", "claim": {"kind": "session"}}),
        json!({"type": "terminal/exited", "exitCode": 0}),
        json!({"type": "root/terminalsChanged", "terminals": []}),
        json!({"type": "nope/nope"}),
        json!(null),
        json!([1, 2, 3]),
    ];
    for round in 0..200 {
        for (k, action) in junk.iter().enumerate() {
            let msg = json!({"jsonrpc": "2.0", "method": "dispatchAction",
                "params": {"channel": victim, "clientSeq": round * 100 + k, "action": action}});
            if tx
                .send(Message::Text(msg.to_string().into()))
                .await
                .is_err()
            {
                break;
            }
        }
    }
    let _ = tx.send(Message::Close(None)).await;
    let _ = reader.await;
}

measured!(
    hostile_clients_do_not_disturb_a_streaming_terminal,
    threads = 4,
    async {
        let d = Daemon::start_with(&["--max-message-bytes", "1048576"]);
        let url = d.url();
        let pid = d.pid();
        let (mut a, _) = Raw::connect_init(&url, "victim", &[]).await;
        let t = term_uri("victim");
        a.create_terminal(&t).await;
        a.subscribe(&t).await;
        a.ready(&t).await;
        let rss_before = vm_kib(pid, "VmRSS:");

        // The stream runs from before the attack until the flag file appears, which happens
        // once the attack is over.
        let dir = tempfile::tempdir().unwrap();
        let flag = dir.path().join("attack-over");
        a.type_text(
            &t,
            &format!(
                "n=0; until [ -e {} ]; do seq $((n+1)) $((n+{CHUNK})); n=$((n+{CHUNK})); done; echo seq-$((6*7))-done\r",
                flag.display()
            ),
        )
        .await;
        a.wait_data(&t, "\n1000\r", Duration::from_secs(30)).await;
        let attacker = tokio::spawn({
            let (url, t, flag) = (url.clone(), t.clone(), flag.clone());
            async move {
                attack(url, t).await;
                std::fs::write(&flag, b"").unwrap();
            }
        });

        // Read A's stream ourselves (linear time), checking serverSeq order as we go.
        let mut data = a.data.get(&t).cloned().unwrap_or_default();
        let mut last_seq = 0i64;
        let mut peak_rss = rss_before;
        let mut samples = 0u32;
        const DONE: &str = "seq-42-done";
        let streamed = tokio::time::timeout(Duration::from_secs(120), async {
            // Only the new bytes (and the marker's length before them) are searched.
            let mut searched = 0;
            while !data[searched..].contains(DONE) {
                searched = data.len().saturating_sub(DONE.len());
                while !data.is_char_boundary(searched) {
                    searched -= 1;
                }
                let msg = tokio::time::timeout(Duration::from_secs(30), a.ws.next())
                    .await
                    .expect("A's stream stalled for 30 s")
                    .expect("A's connection closed")
                    .expect("A's connection failed");
                let Message::Text(text) = msg else { continue };
                let v: Value = serde_json::from_str(text.as_str()).unwrap();
                if v["method"] != "action" || v["params"]["channel"] != json!(t) {
                    continue;
                }
                let seq = v["params"]["serverSeq"].as_i64().unwrap();
                assert!(seq > last_seq, "serverSeq went from {last_seq} to {seq}");
                last_seq = seq;
                if v["params"]["action"]["type"] == "terminal/data" {
                    data.push_str(v["params"]["action"]["data"].as_str().unwrap());
                }
                samples += 1;
                if samples.is_multiple_of(64) {
                    peak_rss = peak_rss.max(vm_kib(pid, "VmRSS:"));
                }
            }
        })
        .await;
        assert!(
            streamed.is_ok(),
            "stream incomplete after 120 s: {} bytes; tail {:?}",
            data.len(),
            tail(&data, 200)
        );
        attacker.await.unwrap();
        peak_rss = peak_rss.max(vm_kib(pid, "VmRSS:"));

        // 1 … n, each exactly once, in order, no gap. The shell checks the flag between chunks,
        // so all but the first chunk (printed before the attack) and the last (after it) were
        // printed, and read from the pty by the daemon, while the attack went on.
        let all: Vec<u64> = data
            .split(['\r', '\n'])
            .filter(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()))
            .map(|l| l.parse().unwrap())
            .collect();
        let first_bad = all
            .iter()
            .enumerate()
            .find(|(i, n)| **n != *i as u64 + 1)
            .map(|(i, n)| (i, *n));
        assert_eq!(first_bad, None, "sequence broken (index, value)");
        assert!(
            (all.len() as u64).is_multiple_of(CHUNK),
            "{} lines",
            all.len()
        );
        let during = (all.len() as u64).saturating_sub(2 * CHUNK);
        eprintln!(
            "{} lines, {during} of them printed during the attack",
            all.len()
        );
        assert!(
            during >= 20 * CHUNK,
            "the terminal printed only {during} lines during the attack"
        );

        // The daemon is still healthy for a newcomer.
        let (mut c, _) = Raw::connect_init(&url, "after", &[]).await;
        let r = c.request("ping", json!({"channel": ROOT})).await;
        assert!(r.get("error").is_none(), "{r}");

        // Memory bounded: the attack (tens of MiB sent) left no trace of that size.
        let hwm = vm_kib(pid, "VmHWM:");
        eprintln!("VmRSS before {rss_before} KiB, peak sampled {peak_rss} KiB, VmHWM {hwm} KiB");
        assert!(
            peak_rss < rss_before + 96 * 1024,
            "RSS grew from {rss_before} KiB to {peak_rss} KiB"
        );
        assert!(hwm < 256 * 1024, "VmHWM {hwm} KiB");
        assert!(!d.stderr().contains("panicked"), "{}", d.stderr());
    }
);
