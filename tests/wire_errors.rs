//! Malformed frames and rejected actions, with raw WebSocket frames (docs/protocol.md,
//! "Transport", "Methods" and "Actions").

mod common;

use common::*;
use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// Sends a raw text frame and returns the next non-action message.
async fn answer(raw: &mut Raw, text: &str) -> Value {
    raw.skip_seen();
    raw.send_text(text).await;
    raw.next_response(RPC_TIMEOUT).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_are_answered_and_harmless() {
    let d = Daemon::start();
    // A second client with a terminal printing slowly while the first misbehaves.
    let mut b = Ahp::connect(&d.url(), "bystander", &[]).await;
    let t = term_uri("bystander");
    b.create_terminal(&t, json!({}))
        .await
        .expect("createTerminal");
    b.subscribe_terminal(&t).await;
    b.ready(&t).await;
    b.type_text(
        &t,
        "for i in $(seq 1 40); do echo line-$i; sleep 0.02; done; echo end-$((7*7))\r",
    )
    .await;

    let (mut raw, _) = Raw::connect_init(&d.url(), "misbehaving", &[]).await;

    let r = answer(&mut raw, "{not json").await;
    assert_eq!(Raw::code(&r), Some(-32700), "{r}");
    assert_eq!(r.get("id"), Some(&Value::Null), "{r}");

    let r = answer(&mut raw, r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#).await;
    assert_eq!(Raw::code(&r), Some(-32600), "batch: {r}");

    let r = answer(&mut raw, "42").await;
    assert_eq!(Raw::code(&r), Some(-32600), "non-object: {r}");

    let r = answer(&mut raw, r#""ping""#).await;
    assert_eq!(Raw::code(&r), Some(-32600), "string: {r}");

    let r = answer(
        &mut raw,
        r#"{"jsonrpc":"2.0","id":"abc","method":"ping","params":{"channel":"ahp-root://"}}"#,
    )
    .await;
    assert_eq!(r["id"], json!("abc"), "{r}");
    assert!(r.get("result").is_some() && r["result"].is_null(), "{r}");

    let r = answer(
        &mut raw,
        r#"{"jsonrpc":"2.0","id":77,"method":"ping","params":{"channel":"ahp-root://"}}"#,
    )
    .await;
    assert_eq!(r["id"], json!(77), "{r}");
    assert!(r["result"].is_null(), "{r}");

    let r = answer(
        &mut raw,
        r#"{"jsonrpc":"2.0","id":"q-1","method":"noSuchMethod","params":{"channel":"ahp-root://"}}"#,
    )
    .await;
    assert_eq!(Raw::code(&r), Some(-32601), "{r}");
    assert_eq!(r["id"], json!("q-1"), "{r}");

    // Missing / bad params name the field.
    let r = answer(
        &mut raw,
        r#"{"jsonrpc":"2.0","id":5,"method":"createTerminal","params":{"channel":"ahp-terminal:/noclaim"}}"#,
    )
    .await;
    assert_eq!(Raw::code(&r), Some(-32602), "{r}");
    let msg = r
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or("");
    assert!(msg.contains("claim"), "message should name `claim`: {r}");

    let r = answer(
        &mut raw,
        r#"{"jsonrpc":"2.0","id":6,"method":"subscribe","params":{}}"#,
    )
    .await;
    assert_eq!(Raw::code(&r), Some(-32602), "{r}");
    let msg = r
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or("");
    assert!(
        msg.contains("channel"),
        "message should name `channel`: {r}"
    );

    let r = answer(
        &mut raw,
        r#"{"jsonrpc":"2.0","id":8,"method":"createTerminal","params":{"channel":"ahp-terminal:/badcols","claim":{"kind":"client","clientId":"m"},"cols":"wide"}}"#,
    )
    .await;
    assert_eq!(Raw::code(&r), Some(-32602), "{r}");
    let msg = r
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or("");
    assert!(msg.contains("cols"), "message should name `cols`: {r}");

    // A binary frame holding UTF-8 JSON is answered, with a text frame (Raw panics on
    // binary frames from the server).
    raw.skip_seen();
    raw.ws
        .send(Message::Binary(
            br#"{"jsonrpc":"2.0","id":"bin","method":"ping","params":{"channel":"ahp-root://"}}"#
                .to_vec()
                .into(),
        ))
        .await
        .unwrap();
    let r = raw.response_to(&json!("bin"), RPC_TIMEOUT).await;
    assert_eq!(r["id"], json!("bin"), "{r}");
    assert!(r["result"].is_null(), "{r}");

    // Still alive.
    let r = raw.request("ping", json!({"channel": ROOT})).await;
    assert!(r["result"].is_null(), "{r}");
    assert!(raw.closed.is_none());

    // The bystander's output is intact.
    b.wait_data(&t, "end-49", SHELL_TIMEOUT).await;
    let data = b.data(&t);
    let lines: Vec<&str> = data
        .split("\r\n")
        .map(|l| l.rsplit('\r').next().unwrap_or(l))
        .filter(|l| l.starts_with("line-"))
        .collect();
    let want: Vec<String> = (1..=40).map(|i| format!("line-{i}")).collect();
    assert_eq!(
        lines,
        want,
        "bystander output damaged: {}",
        tail(&data, 2000)
    );
}

fn rejected_by(e: &Value, client: &str, seq: i64) -> bool {
    e["origin"]["clientId"] == client && e["origin"]["clientSeq"] == seq
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_actions_go_only_to_the_dispatcher() {
    let d = Daemon::start();
    let t = term_uri("rej");
    let (mut a, _) = Raw::connect_init(&d.url(), "holder-a", &[]).await;
    let (mut b, _) = Raw::connect_init(&d.url(), "other-b", &[]).await;
    let r = a
        .request(
            "createTerminal",
            json!({"channel": t, "claim": {"kind": "client", "clientId": "holder-a"},
                   "cols": 100, "rows": 30}),
        )
        .await;
    assert!(r["result"].is_null() && r.get("error").is_none(), "{r}");
    for c in [&mut a, &mut b] {
        let r = c.request("subscribe", json!({"channel": t})).await;
        assert!(r["result"]["snapshot"].is_object(), "{r}");
    }
    a.ready(&t).await;

    let bad = [
        json!({"type": "terminal/resized", "cols": 0, "rows": 0}),
        json!({"type": "terminal/resized", "cols": -1, "rows": 5}),
        json!({"type": "terminal/resized", "cols": 1e9, "rows": 24}),
        json!({"type": "terminal/resized", "cols": "80", "rows": 24}),
        json!({"type": "terminal/resized", "cols": 80.5, "rows": 24}),
        json!({"type": "terminal/resized", "cols": 80}),
        json!({"type": "terminal/data", "data": "forged output"}),
        json!({"type": "terminal/bogus", "x": 1}),
        json!({"type": "terminal/exited", "exitCode": 0}),
    ];
    let mut a_seqs = Vec::new();
    for action in &bad {
        a_seqs.push((a.dispatch(&t, action.clone()).await, action.clone()));
    }
    // A claim transfer by the non-holder.
    let b_claim =
        json!({"type": "terminal/claimed", "claim": {"kind": "client", "clientId": "other-b"}});
    let b_seq = b.dispatch(&t, b_claim.clone()).await;

    // Each rejection comes back to its dispatcher with origin, serverSeq and reason.
    let mut last_seq = 0;
    for (seq, action) in &a_seqs {
        let e = a
            .wait_envelope(&format!("rejection of {action}"), RPC_TIMEOUT, |e| {
                rejected_by(e, "holder-a", *seq)
            })
            .await;
        let reason = e["rejectionReason"].as_str().unwrap_or("");
        assert!(!reason.is_empty(), "no rejectionReason: {e}");
        assert_eq!(e["channel"], json!(t), "{e}");
        assert_eq!(
            &e["action"], action,
            "rejected action not echoed as sent: {e}"
        );
        let s = e["serverSeq"].as_u64().expect("serverSeq");
        assert!(s > last_seq, "serverSeq not increasing: {e}");
        last_seq = s;
    }
    let e = b
        .wait_envelope("rejection of the claim transfer", RPC_TIMEOUT, |e| {
            rejected_by(e, "other-b", b_seq)
        })
        .await;
    let reason = e["rejectionReason"].as_str().unwrap_or("");
    assert!(
        reason.contains("holder-a"),
        "reason should name the holder: {e}"
    );
    assert!(e["serverSeq"].as_u64().is_some(), "{e}");

    // Sync both connections on an accepted action, then check neither saw the other's
    // rejections (envelopes arrive in serverSeq order).
    let sync = a
        .dispatch(
            &t,
            json!({"type": "terminal/titleChanged", "title": "sync-1"}),
        )
        .await;
    for c in [&mut a, &mut b] {
        c.wait_envelope("the accepted title change", RPC_TIMEOUT, |e| {
            rejected_by(e, "holder-a", sync) && e.get("rejectionReason").is_none()
        })
        .await;
    }
    let leaked: Vec<&Value> = b
        .envelopes()
        .into_iter()
        .filter(|e| e["origin"]["clientId"] == "holder-a" && e.get("rejectionReason").is_some())
        .collect();
    assert!(leaked.is_empty(), "B received A's rejections: {leaked:?}");
    let leaked: Vec<&Value> = a
        .envelopes()
        .into_iter()
        .filter(|e| e["origin"]["clientId"] == "other-b")
        .collect();
    assert!(leaked.is_empty(), "A received B's rejection: {leaked:?}");
    let forged: Vec<&Value> = b
        .envelopes()
        .into_iter()
        .filter(|e| e["action"]["data"] == "forged output")
        .collect();
    assert!(forged.is_empty(), "forged data was broadcast: {forged:?}");

    // State unchanged: size and claim.
    let r = b.request("subscribe", json!({"channel": t})).await;
    let st = &r["result"]["snapshot"]["state"];
    assert_eq!(
        (st["cols"].clone(), st["rows"].clone()),
        (json!(100), json!(30)),
        "{r}"
    );
    assert_eq!(
        st["claim"],
        json!({"kind": "client", "clientId": "holder-a"}),
        "{r}"
    );
    assert_eq!(st["title"], "sync-1", "{r}");
    assert_eq!(st["lifecycle"], json!({"status": "running"}), "{r}");
    a.type_text(&t, "echo sz-$((1+1)) $(stty size)\r").await;
    a.wait_until("stty size output", SHELL_TIMEOUT, |c| {
        c.data(&t).contains("sz-2 ")
    })
    .await;
    let data = a.data(&t);
    assert!(
        data.contains("sz-2 30 100"),
        "pty size changed: {}",
        tail(&data, 400)
    );

    // Input to an exited terminal is rejected too, to the dispatcher only.
    a.type_text(&t, "exit\r").await;
    a.wait_envelope("terminal/exited", SHELL_TIMEOUT, |e| {
        e["channel"] == json!(t)
            && e["action"]["type"] == "terminal/exited"
            && e.get("rejectionReason").is_none()
    })
    .await;
    let seq = a.type_text(&t, "echo too late\r").await;
    let e = a
        .wait_envelope("rejection of input after exit", RPC_TIMEOUT, |e| {
            rejected_by(e, "holder-a", seq)
        })
        .await;
    assert!(
        e["rejectionReason"].as_str().is_some_and(|r| !r.is_empty()),
        "{e}"
    );
    let sync = a
        .dispatch(
            &t,
            json!({"type": "terminal/titleChanged", "title": "sync-2"}),
        )
        .await;
    b.wait_envelope("the second sync", RPC_TIMEOUT, |e| {
        rejected_by(e, "holder-a", sync)
    })
    .await;
    assert!(
        !b.envelopes()
            .iter()
            .any(|e| rejected_by(e, "holder-a", seq)),
        "B received the rejected input"
    );
}
