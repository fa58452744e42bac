//! Handshake, version negotiation and the answers of a host with no agents (docs/protocol.md,
//! "Protocol versions" and "Methods").

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

fn init_params(versions: Value) -> Value {
    json!({"channel": ROOT, "protocolVersions": versions, "clientId": "hs-client"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_before_initialize_is_null() {
    let d = Daemon::start();
    let mut raw = Raw::connect(&d.url()).await;
    let resp = raw.request("ping", json!({"channel": ROOT})).await;
    assert_eq!(resp.get("result"), Some(&Value::Null), "{resp}");
    assert!(resp.get("error").is_none(), "{resp}");
    // And the official client's ping (decodes the result into a unit value).
    let c = Ahp::connect(&d.url(), "pinger", &[]).await;
    c.client.ping().await.expect("ping after initialize");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_one_zero_zero_with_root_snapshot() {
    let d = Daemon::start();
    let mut raw = Raw::connect(&d.url()).await;
    let mut p = init_params(json!(["1.0.0"]));
    p["initialSubscriptions"] = json!([ROOT]);
    let resp = raw.request("initialize", p).await;
    let r = &resp["result"];
    assert_eq!(r["protocolVersion"], "1.0.0", "{resp}");
    assert_eq!(r["serverInfo"]["name"], "ahpty", "{resp}");
    let dir = r["defaultDirectory"].as_str().expect("defaultDirectory");
    assert!(dir.starts_with("file:///"), "defaultDirectory {dir}");
    assert!(r["serverSeq"].is_i64() || r["serverSeq"].is_u64(), "{resp}");
    let snaps = r["snapshots"].as_array().expect("snapshots");
    assert_eq!(snaps.len(), 1, "{resp}");
    assert_eq!(snaps[0]["resource"], ROOT);
    assert_eq!(snaps[0]["state"]["agents"], json!([]), "{resp}");
    assert!(snaps[0]["fromSeq"].is_i64(), "{resp}");
    // Omitted agent/chat fields.
    for k in [
        "completionTriggerCharacters",
        "terminalCommandPrefix",
        "telemetry",
        "automations",
    ] {
        assert!(r.get(k).is_none(), "{k} present: {resp}");
    }
    // Without initialSubscriptions: snapshots is present and empty.
    let mut raw2 = Raw::connect(&d.url()).await;
    let resp = raw2
        .request("initialize", init_params(json!(["1.0.0"])))
        .await;
    assert_eq!(resp["result"]["snapshots"], json!([]), "{resp}");

    // The official client decodes the result too.
    let c = Ahp::connect(&d.url(), "official", &[ROOT]).await;
    assert_eq!(c.init.protocol_version, "1.0.0");
    assert_eq!(c.init.snapshots.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_negotiation_picks_highest_acceptable() {
    let d = Daemon::start();
    for (offer, want) in [
        (json!(["1.2.3", "0.9.0"]), "1.2.3"),
        (json!(["0.9.0", "1.2.3"]), "1.2.3"),
        (json!(["0.9.5"]), "0.9.5"),
        (json!(["1.0.0", "0.9.0"]), "1.0.0"),
        // Seed-era versions (docs/protocol.md, "Protocol versions").
        (json!(["0.8.0"]), "0.8.0"),
        (json!(["0.5.2", "0.5.1"]), "0.5.2"),
        (json!(["0.5.1", "0.8.0", "1.0.0"]), "1.0.0"),
    ] {
        let mut raw = Raw::connect(&d.url()).await;
        let resp = raw.request("initialize", init_params(offer.clone())).await;
        assert_eq!(
            resp["result"]["protocolVersion"], want,
            "offer {offer}: {resp}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_versions_get_32005_then_close() {
    let d = Daemon::start();
    for offer in [
        json!(["0.4.0"]),
        json!(["2.0.0"]),
        json!([]),
        json!(["0.10.0", "0.1.0"]),
    ] {
        let mut raw = Raw::connect(&d.url()).await;
        let resp = raw.request("initialize", init_params(offer.clone())).await;
        assert_eq!(Raw::code(&resp), Some(-32005), "offer {offer}: {resp}");
        let sv = resp
            .pointer("/error/data/supportedVersions")
            .and_then(Value::as_array)
            .unwrap_or_else(|| panic!("no data.supportedVersions: {resp}"));
        assert_eq!(sv, &[json!("^1.0.0"), json!(">=0.5.0 <0.10.0")], "{resp}");
        raw.wait_closed(Duration::from_secs(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_version_is_invalid_params() {
    let d = Daemon::start();
    let mut raw = Raw::connect(&d.url()).await;
    let resp = raw.request("initialize", init_params(json!(["1.0"]))).await;
    assert_eq!(Raw::code(&resp), Some(-32602), "{resp}");
    // The connection stays usable.
    let resp = raw.request("ping", json!({"channel": ROOT})).await;
    assert_eq!(resp["result"], Value::Null, "{resp}");
}

/// Docs: a second `initialize` → -32601 (the reference host's answer; the spec is silent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_initialize_is_method_not_found() {
    let d = Daemon::start();
    let (mut raw, _) = Raw::connect_init(&d.url(), "twice", &[]).await;
    let resp = raw
        .request("initialize", init_params(json!(["1.0.0"])))
        .await;
    assert_eq!(Raw::code(&resp), Some(-32601), "{resp}");
    let resp = raw
        .request(
            "reconnect",
            json!({"clientId": "twice", "lastSeenServerSeq": 0, "subscriptions": []}),
        )
        .await;
    assert_eq!(
        Raw::code(&resp),
        Some(-32601),
        "reconnect after the handshake: {resp}"
    );
    let resp = raw.request("ping", json!({"channel": ROOT})).await;
    assert_eq!(resp["result"], Value::Null, "{resp}");
}

/// Docs: before the handshake, any request but `ping` → -32601 (as the reference host).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_before_initialize_are_method_not_found() {
    let d = Daemon::start();
    let mut raw = Raw::connect(&d.url()).await;
    for (method, params) in [
        ("subscribe", json!({"channel": ROOT})),
        ("listSessions", json!({"channel": ROOT})),
        (
            "createTerminal",
            json!({"channel": "ahp-terminal:/early", "claim": {"kind": "client", "clientId": "x"}}),
        ),
        ("disposeTerminal", json!({"channel": "ahp-terminal:/early"})),
        ("noSuchMethod", json!({})),
    ] {
        let resp = raw.request(method, params).await;
        assert_eq!(Raw::code(&resp), Some(-32601), "{method}: {resp}");
    }
    // initialize still works afterwards, and nothing was created.
    let resp = raw
        .request("initialize", {
            let mut p = init_params(json!(["1.0.0"]));
            p["initialSubscriptions"] = json!([ROOT]);
            p
        })
        .await;
    assert_eq!(resp["result"]["protocolVersion"], "1.0.0", "{resp}");
    let terminals = &resp["result"]["snapshots"][0]["state"]["terminals"];
    assert!(
        terminals.is_null() || terminals == &json!([]),
        "terminal created before initialize: {resp}"
    );
}

/// `reconnect` as the first message from a client this daemon has never seen (e.g. after a
/// restart): -32008, nothing subscribed, and `initialize` then works on the same socket — the
/// fallback VS Code takes on exactly this code (docs/protocol.md, "reconnect").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnect_from_unknown_client_is_not_found_and_initialize_follows() {
    let d = Daemon::start();
    let mut raw = Raw::connect(&d.url()).await;
    let resp = raw
        .request(
            "reconnect",
            json!({"channel": ROOT, "clientId": "rc-unknown", "lastSeenServerSeq": 5,
                   "subscriptions": [ROOT, "ahp-terminal:/never-created"]}),
        )
        .await;
    assert_eq!(Raw::code(&resp), Some(-32008), "{resp}");
    let message = resp
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap();
    assert!(message.contains("initialize"), "{message}");
    // Still not initialized: other requests are refused, and nothing was subscribed (no
    // envelope arrives for the terminal created below until this connection subscribes).
    let resp = raw.request("listSessions", json!({"channel": ROOT})).await;
    assert_eq!(Raw::code(&resp), Some(-32601), "{resp}");
    let resp = raw
        .request("initialize", init_params(json!(["1.0.0"])))
        .await;
    assert_eq!(resp["result"]["protocolVersion"], "1.0.0", "{resp}");
    assert_eq!(resp["result"]["snapshots"], json!([]), "{resp}");
    let (mut other, _) = Raw::connect_init(&d.url(), "rc-other", &[]).await;
    let t = "ahp-terminal:/rc-unknown-barrier";
    let r = other
        .request(
            "createTerminal",
            json!({"channel": t, "claim": {"kind": "client", "clientId": "rc-other"}}),
        )
        .await;
    assert!(r.get("error").is_none(), "{r}");
    // The ping's answer is queued after anything the create could have sent us.
    let resp = raw.request("ping", json!({"channel": ROOT})).await;
    assert_eq!(resp["result"], Value::Null);
    assert!(raw.envelopes().is_empty(), "{}", raw.describe());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_agents_answers() {
    let d = Daemon::start();
    let (mut raw, _) = Raw::connect_init(&d.url(), "na", &[]).await;
    let resp = raw
        .request(
            "createResourceWatch",
            json!({"channel": ROOT, "uri": "file:///tmp"}),
        )
        .await;
    assert_eq!(Raw::code(&resp), Some(-32601), "{resp}");
    let resp = raw.request("listSessions", json!({"channel": ROOT})).await;
    assert_eq!(resp["result"], json!({"items": []}), "{resp}");
    let resp = raw
        .request(
            "createSession",
            json!({"channel": "ahp-session:/new", "provider": "copilot"}),
        )
        .await;
    assert_eq!(Raw::code(&resp), Some(-32002), "{resp}");
    let resp = raw
        .request("subscribe", json!({"channel": "ahp-session:/x"}))
        .await;
    assert_eq!(Raw::code(&resp), Some(-32001), "{resp}");
    let resp = raw
        .request(
            "subscribe",
            json!({"channel": "ahp-terminal:/does-not-exist"}),
        )
        .await;
    assert_eq!(Raw::code(&resp), Some(-32008), "{resp}");
    let resp = raw
        .request(
            "disposeTerminal",
            json!({"channel": "ahp-terminal:/does-not-exist"}),
        )
        .await;
    assert_eq!(Raw::code(&resp), Some(-32008), "{resp}");

    // The official client sees the same through its typed API.
    let c = Ahp::connect(&d.url(), "na-official", &[]).await;
    let r = c.call("listSessions", json!({"channel": ROOT})).await;
    assert_eq!(r.expect("listSessions"), json!({"items": []}));
    let err = c.subscribe("ahp-terminal:/nope").await.unwrap_err();
    assert!(
        matches!(&err, ahp::ClientError::Rpc(e) if e.code == -32008),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_initial_subscription_is_left_out() {
    let d = Daemon::start();
    let mut raw = Raw::connect(&d.url()).await;
    let mut p = init_params(json!(["1.0.0"]));
    p["initialSubscriptions"] = json!(["ahp-terminal:/ghost", ROOT, "ahp-session:/ghost"]);
    let resp = raw.request("initialize", p).await;
    let snaps = resp["result"]["snapshots"]
        .as_array()
        .unwrap_or_else(|| panic!("{resp}"));
    let resources: Vec<&Value> = snaps.iter().map(|s| &s["resource"]).collect();
    assert_eq!(resources, vec![&json!(ROOT)], "{resp}");
}
