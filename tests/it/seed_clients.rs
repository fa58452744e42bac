//! Seed-era clients: programs built on the published `ahp` 0.5.2 and 0.8.0 SDKs (as renamed
//! dev-dependencies) connect, create a terminal, stream its output, see it exit and dispose
//! it, each with its own version's types and reducers; clients of three versions watching one
//! terminal each fold to their own version's view of the same state; and on the wire every
//! version gets exactly its shapes (docs/protocol.md, "Protocol versions").

use std::time::Duration;

use crate::support::*;
use ahp_05::ahp_types as t05;
use ahp_08::ahp_types as t08;
use serde_json::{json, Value};

const T: Duration = SHELL_TIMEOUT;

fn cfg05() -> ahp_05::ClientConfig {
    ahp_05::ClientConfig {
        default_request_timeout: Some(Duration::from_secs(30)),
        subscription_buffer: 1 << 16,
    }
}

fn cfg08() -> ahp_08::ClientConfig {
    ahp_08::ClientConfig {
        default_request_timeout: Some(Duration::from_secs(30)),
        subscription_buffer: 1 << 16,
    }
}

async fn connect_05(url: &str) -> ahp_05::Client {
    let t = ahp_ws_05::WebSocketTransport::connect(url).await.unwrap();
    ahp_05::Client::connect(t, cfg05()).await.unwrap()
}

async fn connect_08(url: &str) -> ahp_08::Client {
    let t = ahp_ws_08::WebSocketTransport::connect(url).await.unwrap();
    ahp_08::Client::connect(t, cfg08()).await.unwrap()
}

/// What each SDK version offers by default (its `SUPPORTED_PROTOCOL_VERSIONS`).
fn offers(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn jv<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap()
}

/// Visible text of a folded state of any version (the content parts are the same in all).
fn text_of(state: &Value) -> String {
    state["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            p.get("output")
                .or_else(|| p.get("value"))
                .and_then(Value::as_str)
                .unwrap_or("")
        })
        .collect()
}

/// Folds a subscription's envelopes into `$state` with `$reduce` until `terminal/exited`.
macro_rules! fold_until_exited {
    ($sub:expr, $state:expr, $reduce:path, $action:path, $event:path) => {{
        let folded = tokio::time::timeout(T, async {
            loop {
                match $sub.recv().await {
                    Some($event(env)) => {
                        $reduce(&mut $state, &env.action);
                        if matches!(env.action, $action(_)) {
                            break;
                        }
                    }
                    Some(_) => {}
                    None => panic!("subscription closed before terminal/exited"),
                }
            }
        })
        .await;
        assert!(
            folded.is_ok(),
            "no terminal/exited within {T:?}; folded: {}",
            jv(&$state)
        );
    }};
}

/// Folds root envelopes into `$root` until `$done(&root_json)` holds.
macro_rules! fold_root_until {
    ($sub:expr, $root:expr, $reduce:path, $event:path, $done:expr) => {{
        let folded = tokio::time::timeout(T, async {
            while !$done(&jv(&$root)) {
                match $sub.recv().await {
                    Some($event(env)) => {
                        $reduce(&mut $root, &env.action);
                    }
                    Some(_) => {}
                    None => panic!("root subscription closed"),
                }
            }
        })
        .await;
        assert!(
            folded.is_ok(),
            "root never reached the expected state within {T:?}: {}",
            jv(&$root)
        );
    }};
}

/// The root row of `uri` in a root state's JSON.
fn row<'a>(root: &'a Value, uri: &str) -> Option<&'a Value> {
    root["terminals"]
        .as_array()?
        .iter()
        .find(|r| r["resource"] == uri)
}

spec!(sdk_0_5_2_creates_streams_exits_and_disposes, async {
    use t05::actions::{StateAction, TerminalInputAction};
    use t05::commands::{CreateTerminalParams, DisposeTerminalParams};
    use t05::state::{SnapshotState, TerminalClaim, TerminalClientClaim};
    let d = Daemon::start();
    let c = connect_05(&d.url()).await;
    let init = c
        .initialize(
            "seed-05".into(),
            offers(t05::SUPPORTED_PROTOCOL_VERSIONS),
            vec![ROOT.into()],
        )
        .await
        .expect("0.5.2 initialize");
    assert_eq!(init.protocol_version, "0.5.2");
    let mut root_sub = c.attach_subscription(ROOT).await;
    let SnapshotState::Root(root) = &init.snapshots[0].state else {
        panic!("root snapshot: {:?}", init.snapshots)
    };
    let mut root = (**root).clone();
    let uri = term_uri("seed05");
    let _: () = c
        .request(
            "createTerminal",
            CreateTerminalParams {
                channel: uri.clone(),
                claim: TerminalClaim::Client(TerminalClientClaim {
                    client_id: "seed-05".into(),
                }),
                name: None,
                cwd: None,
                cols: Some(90),
                rows: Some(30),
            },
        )
        .await
        .expect("createTerminal");
    let (res, mut sub) = c.subscribe(uri.clone()).await.expect("subscribe");
    let SnapshotState::Terminal(state) = res.snapshot.unwrap().state else {
        panic!("not a terminal snapshot")
    };
    let mut state = *state;
    assert_eq!(state.exit_code, None, "a running terminal has no exitCode");
    c.dispatch(
        uri.clone(),
        StateAction::TerminalInput(TerminalInputAction {
            data: "echo seed-$((6*7)); exit 3\r".into(),
        }),
    )
    .await
    .expect("dispatch");
    fold_until_exited!(
        sub,
        state,
        ahp_05::apply_action_to_terminal,
        StateAction::TerminalExited,
        ahp_05::SubscriptionEvent::Action
    );
    assert_eq!(state.exit_code, Some(3));
    assert!(text_of(&jv(&state)).contains("seed-42"), "{}", jv(&state));
    // A fresh snapshot in 0.5.2's shape equals the fold.
    let (res, _) = c.subscribe(uri.clone()).await.unwrap();
    let SnapshotState::Terminal(fresh) = res.snapshot.unwrap().state else {
        panic!()
    };
    assert_eq!(jv(&*fresh), jv(&state));
    // The root list, folded with 0.5.2's reducer, shows the exit as `exitCode`.
    let u = uri.clone();
    fold_root_until!(
        root_sub,
        root,
        ahp_05::apply_action_to_root,
        ahp_05::SubscriptionEvent::Action,
        |r: &Value| row(r, &u).is_some_and(|x| x["exitCode"] == 3)
    );
    let _: () = c
        .request(
            "disposeTerminal",
            DisposeTerminalParams {
                channel: uri.clone(),
            },
        )
        .await
        .expect("disposeTerminal");
    match c.subscribe(uri.clone()).await.map(|(r, _)| r) {
        Err(ahp_05::ClientError::Rpc(e)) => assert_eq!(e.code, -32008),
        other => panic!("subscribe after dispose: {other:?}"),
    }
    c.shutdown().await;
});

spec!(sdk_0_8_0_creates_streams_exits_and_disposes, async {
    use t08::actions::{StateAction, TerminalInputAction};
    use t08::commands::{CreateTerminalParams, DisposeTerminalParams};
    use t08::state::{SnapshotState, TerminalClaim, TerminalSessionClaim};
    let d = Daemon::start();
    let c = connect_08(&d.url()).await;
    let init = c
        .initialize(
            "seed-08".into(),
            offers(t08::SUPPORTED_PROTOCOL_VERSIONS),
            vec![ROOT.into()],
        )
        .await
        .expect("0.8.0 initialize");
    assert_eq!(init.protocol_version, "0.8.0");
    assert_eq!(init.server_info.as_ref().unwrap().name, "ahpty");
    c.ping().await.expect("ping");
    let mut root_sub = c.attach_subscription(ROOT).await;
    let SnapshotState::Root(root) = &init.snapshots[0].state else {
        panic!()
    };
    let mut root = (**root).clone();
    let uri = term_uri("seed08");
    // An agent's tool call in 0.8.0: a session claim without a chat.
    let claim = TerminalClaim::Session(TerminalSessionClaim {
        session: "copilotcli:/s08".into(),
        turn_id: Some("turn-1".into()),
        tool_call_id: Some("tool-1".into()),
    });
    let _: () = c
        .request(
            "createTerminal",
            CreateTerminalParams {
                channel: uri.clone(),
                meta: None,
                claim: claim.clone(),
                name: Some("seed".into()),
                cwd: None,
                cols: Some(90),
                rows: Some(30),
            },
        )
        .await
        .expect("createTerminal with a chat-less session claim");
    let (res, mut sub) = c.subscribe(uri.clone()).await.expect("subscribe");
    let SnapshotState::Terminal(state) = res.snapshot.unwrap().state else {
        panic!("not a terminal snapshot")
    };
    let mut state = *state;
    assert_eq!(state.exit_code, None);
    assert_eq!(state.is_pty, Some(true));
    assert_eq!(state.claim, claim);
    c.dispatch(
        uri.clone(),
        StateAction::TerminalInput(TerminalInputAction {
            data: "echo seed-$((6*7)); exit 5\r".into(),
        }),
    )
    .await
    .expect("dispatch");
    fold_until_exited!(
        sub,
        state,
        ahp_08::apply_action_to_terminal,
        StateAction::TerminalExited,
        ahp_08::SubscriptionEvent::Action
    );
    assert_eq!(state.exit_code, Some(5));
    assert!(text_of(&jv(&state)).contains("seed-42"));
    let (res, _) = c.subscribe(uri.clone()).await.unwrap();
    let SnapshotState::Terminal(fresh) = res.snapshot.unwrap().state else {
        panic!()
    };
    assert_eq!(jv(&*fresh), jv(&state));
    let u = uri.clone();
    fold_root_until!(
        root_sub,
        root,
        ahp_08::apply_action_to_root,
        ahp_08::SubscriptionEvent::Action,
        |r: &Value| row(r, &u).is_some_and(|x| x["exitCode"] == 5)
    );
    let _: () = c
        .request(
            "disposeTerminal",
            DisposeTerminalParams {
                channel: uri.clone(),
                meta: None,
            },
        )
        .await
        .expect("disposeTerminal");
    match c.subscribe(uri.clone()).await.map(|(r, _)| r) {
        Err(ahp_08::ClientError::Rpc(e)) => assert_eq!(e.code, -32008),
        other => panic!("subscribe after dispose: {other:?}"),
    }
    c.shutdown().await;
});

// One terminal, three clients (1.0.0, 0.8.0, 0.5.2): each folds the same envelopes with its
// own version's reducer into its own version's view, equal to its version's fresh snapshot;
// the views agree on everything but the shapes that differ.
spec!(
    clients_of_different_versions_fold_to_their_own_view_of_one_terminal,
    async {
        let d = Daemon::start();
        let mut v10 = Ahp::connect(&d.url(), "view-10", &[]).await;
        let c08 = connect_08(&d.url()).await;
        c08.initialize("view-08".into(), vec!["0.8.0".into()], vec![])
            .await
            .unwrap();
        let c05 = connect_05(&d.url()).await;
        c05.initialize("view-05".into(), vec!["0.5.2".into()], vec![])
            .await
            .unwrap();
        let uri = term_uri("views");
        let claim = json!({"kind": "session", "session": "copilotcli:/s", "chat": "ahp-chat:/c",
                       "turnId": "turn-7"});
        v10.call("createTerminal", json!({"channel": uri, "claim": claim}))
            .await
            .expect("createTerminal");
        let (mut s10, _) = v10.subscribe_terminal(&uri).await;
        let (r08, mut sub08) = c08.subscribe(uri.clone()).await.unwrap();
        let t08::state::SnapshotState::Terminal(s08) = r08.snapshot.unwrap().state else {
            panic!()
        };
        let mut s08 = *s08;
        let (r05, mut sub05) = c05.subscribe(uri.clone()).await.unwrap();
        let t05::state::SnapshotState::Terminal(s05) = r05.snapshot.unwrap().state else {
            panic!()
        };
        let mut s05 = *s05;
        v10.type_text(&uri, "echo view-$((6*7)); exit 3\r").await;
        v10.wait_exited(&uri, T).await;
        for e in &v10.log {
            if e.channel == uri {
                ahp::apply_action_to_terminal(&mut s10, &e.action);
            }
        }
        fold_until_exited!(
            sub08,
            s08,
            ahp_08::apply_action_to_terminal,
            t08::actions::StateAction::TerminalExited,
            ahp_08::SubscriptionEvent::Action
        );
        fold_until_exited!(
            sub05,
            s05,
            ahp_05::apply_action_to_terminal,
            t05::actions::StateAction::TerminalExited,
            ahp_05::SubscriptionEvent::Action
        );
        // Each view is its version's fresh snapshot.
        let (fresh10, _) = v10.subscribe_terminal(&uri).await;
        assert_eq!(jv(&s10), jv(&fresh10), "1.0.0 view");
        let (f08, _) = c08.subscribe(uri.clone()).await.unwrap();
        assert_eq!(jv(&s08), jv(&f08.snapshot.unwrap().state), "0.8.0 view");
        let (f05, _) = c05.subscribe(uri.clone()).await.unwrap();
        assert_eq!(jv(&s05), jv(&f05.snapshot.unwrap().state), "0.5.2 view");
        // The same state in three shapes.
        let (j10, j08, j05) = (jv(&s10), jv(&s08), jv(&s05));
        assert_eq!(j10["lifecycle"], json!({"status": "exited", "exitCode": 3}));
        assert_eq!(j08["exitCode"], 3);
        assert_eq!(j05["exitCode"], 3);
        assert_eq!(j10["claim"], claim);
        let without_chat =
            json!({"kind": "session", "session": "copilotcli:/s", "turnId": "turn-7"});
        assert_eq!(j08["claim"], without_chat);
        assert_eq!(j05["claim"], without_chat);
        assert_eq!(j10["isPty"], true);
        assert_eq!(j08["isPty"], true);
        for k in ["content", "title", "cwd", "cols", "rows"] {
            assert_eq!(j08[k], j10[k], "{k}");
            assert_eq!(j05[k], j10[k], "{k}");
        }
        assert!(text_of(&j10).contains("view-42"));
        c08.shutdown().await;
        c05.shutdown().await;
    }
);

/// Raw initialize offering `version`, subscribed to the root channel and `subs`.
async fn raw_at(url: &str, id: &str, version: &str, subs: &[&str]) -> (Raw, Value) {
    let mut raw = Raw::connect(url).await;
    let resp = raw
        .request(
            "initialize",
            json!({"channel": ROOT, "protocolVersions": [version], "clientId": id,
                   "initialSubscriptions": subs}),
        )
        .await;
    let result = resp
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("initialize {version}: {resp}"));
    assert_eq!(result["protocolVersion"], version);
    raw.client_id = id.into();
    (raw, result)
}

// Byte-level shapes per version: `serverInfo` from 0.5.2, `isPty` from 0.7.0, `exitCode` vs
// `lifecycle` and the claim's `chat` before/after 0.9.0 — in initialize snapshots, subscribe
// results, live `root/terminalsChanged` and `terminal/claimed`; `terminal/data` is the same
// text for every version.
spec!(each_version_gets_exactly_its_wire_shapes, async {
    let d = Daemon::start();
    let (mut owner, _) = Raw::connect_init(&d.url(), "shapes-owner", &[]).await;
    let t = term_uri("shapes");
    owner.create_claimed(&t, client_claim("shapes-owner")).await;
    owner.subscribe_at(&t).await;
    owner.ready(&t).await;
    // (version, serverInfo, isPty, lifecycle rather than exitCode)
    let versions = [
        ("0.5.1", false, false, false),
        ("0.6.0", true, false, false),
        ("0.7.0", true, true, false),
        ("0.9.0", true, true, true),
        ("1.0.0", true, true, true),
    ];
    let mut watchers = Vec::new();
    for (v, server_info, is_pty, lifecycle) in versions {
        let (raw, init) = raw_at(&d.url(), &format!("shapes-{v}"), v, &[ROOT, &t]).await;
        assert_eq!(init.get("serverInfo").is_some(), server_info, "{v}: {init}");
        let snaps = init["snapshots"].as_array().unwrap();
        let term = &snaps.iter().find(|s| s["resource"] == t.as_str()).unwrap()["state"];
        let root = &snaps.iter().find(|s| s["resource"] == ROOT).unwrap()["state"];
        assert_eq!(term.get("isPty").is_some(), is_pty, "{v}: {term}");
        assert_eq!(term.get("lifecycle").is_some(), lifecycle, "{v}: {term}");
        assert!(term.get("exitCode").is_none(), "{v}: running: {term}");
        let r = row(root, &t).unwrap();
        assert_eq!(r.get("lifecycle").is_some(), lifecycle, "{v}: {r}");
        watchers.push((v, lifecycle, raw));
    }
    // A session claim, then the exit: live envelopes in each version's shape.
    let claim = json!({"kind": "session", "session": "copilotcli:/x", "chat": "ahp-chat:/y"});
    owner
        .dispatch(&t, json!({"type": "terminal/claimed", "claim": claim}))
        .await;
    owner.type_text(&t, "echo shapes-$((2*3)); exit 4\r").await;
    for (v, current, raw) in &mut watchers {
        let claimed = raw
            .wait_envelope("terminal/claimed", T, |e| {
                e["action"]["type"] == "terminal/claimed"
            })
            .await;
        assert_eq!(
            claimed["action"]["claim"].get("chat").is_some(),
            *current,
            "{v}: {claimed}"
        );
        let listed = raw
            .wait_envelope("the exit in the root list", T, |e| {
                e["channel"] == ROOT
                    && row(&e["action"], &t).is_some_and(|r| {
                        r.get("exitCode").is_some() || r["lifecycle"]["status"] == "exited"
                    })
            })
            .await;
        let r = row(&listed["action"], &t).unwrap();
        if *current {
            assert_eq!(
                r["lifecycle"],
                json!({"status": "exited", "exitCode": 4}),
                "{v}"
            );
            assert_eq!(r["claim"], claim, "{v}");
        } else {
            assert_eq!(r["exitCode"], 4, "{v}: {r}");
            assert!(r.get("lifecycle").is_none(), "{v}: {r}");
            assert!(r["claim"].get("chat").is_none(), "{v}: {r}");
        }
        let exited = raw
            .wait_envelope("terminal/exited", T, |e| {
                e["action"]["type"] == "terminal/exited"
            })
            .await;
        assert_eq!(
            exited["action"],
            json!({"type": "terminal/exited", "exitCode": 4})
        );
        let snap = raw.request("subscribe", json!({"channel": t})).await;
        let state = &snap["result"]["snapshot"]["state"];
        if *current {
            assert_eq!(
                state["lifecycle"],
                json!({"status": "exited", "exitCode": 4}),
                "{v}"
            );
        } else {
            assert_eq!(state["exitCode"], 4, "{v}: {state}");
            assert!(state.get("lifecycle").is_none(), "{v}: {state}");
        }
    }
    // terminal/data went out as the same text to every version (from the typed line on: the
    // prompt may have come between two watchers' subscriptions).
    let data: Vec<String> = watchers
        .iter()
        .map(|(_, _, raw)| {
            let d = raw.data(&t);
            d[d.find("echo shapes").unwrap_or(0)..].to_string()
        })
        .collect();
    assert!(data[0].contains("shapes-6"));
    assert!(data.iter().all(|x| *x == data[0]), "{data:?}");
});

// Chat-less session claims from a 0.8.0 client: `createTerminal` gets the session's default
// chat; a detach (`{session}`) keeps the current chat and stays a narrowing; a rejected
// transfer is echoed to the old client in its own shape.
spec!(chat_less_session_claims_from_old_clients, async {
    let d = Daemon::start();
    let (mut viewer, _) = Raw::connect_init(&d.url(), "claims-viewer", &[]).await;
    let (mut old, _) = raw_at(&d.url(), "claims-08", "0.8.0", &[]).await;
    let created = term_uri("claims-created");
    let r = old
        .request(
            "createTerminal",
            json!({"channel": created,
                   "claim": {"kind": "session", "session": "copilotcli:/abc", "turnId": "t"}}),
        )
        .await;
    assert!(r.get("error").is_none(), "{r}");
    let (_, snap) = viewer.subscribe_at(&created).await;
    // `ahp-chat://default/<base64url("copilotcli:/abc")>`, as VS Code derives a default chat.
    assert_eq!(
        snap["state"]["claim"],
        json!({"kind": "session", "session": "copilotcli:/abc",
               "chat": "ahp-chat://default/Y29waWxvdGNsaTovYWJj", "turnId": "t"})
    );

    // A 1.0.0 agent's terminal with a real chat; the old client detaches it.
    let held = term_uri("claims-held");
    let tool = json!({"kind": "session", "session": "copilotcli:/s", "chat": "ahp-chat:/real",
                      "turnId": "t1", "toolCallId": "x1"});
    let r = viewer
        .request("createTerminal", json!({"channel": held, "claim": tool}))
        .await;
    assert!(r.get("error").is_none(), "{r}");
    viewer.subscribe_at(&held).await;
    old.subscribe_at(&held).await;
    old.dispatch(
        &held,
        json!({"type": "terminal/claimed", "claim": {"kind": "session", "session": "copilotcli:/s"}}),
    )
    .await;
    let seen = viewer
        .wait_envelope("the detach", T, |e| {
            e["channel"] == held && e["action"]["type"] == "terminal/claimed"
        })
        .await;
    assert!(seen.get("rejectionReason").is_none(), "{seen}");
    assert_eq!(
        seen["action"]["claim"],
        json!({"kind": "session", "session": "copilotcli:/s", "chat": "ahp-chat:/real"})
    );
    // Not the holder, another session: rejected, echoed without the synthesized chat.
    let seq = old
        .dispatch(
            &held,
            json!({"type": "terminal/claimed", "claim": {"kind": "session", "session": "copilotcli:/other"}}),
        )
        .await;
    let echo = old
        .wait_envelope("the rejection", T, |e| {
            e["origin"]["clientSeq"] == seq && e.get("rejectionReason").is_some()
        })
        .await;
    assert_eq!(
        echo["action"],
        json!({"type": "terminal/claimed", "claim": {"kind": "session", "session": "copilotcli:/other"}})
    );
    // A 1.0.0 client must still send the chat itself.
    let r = viewer
        .request(
            "createTerminal",
            json!({"channel": term_uri("claims-10"),
                   "claim": {"kind": "session", "session": "copilotcli:/abc"}}),
        )
        .await;
    assert_eq!(Raw::code(&r), Some(-32602), "{r}");
});

// A 0.8.0 client's `reconnect` is answered in 0.8.0 shapes: the replayed root list and the
// snapshot carry `exitCode`, with the official 0.8.0 client decoding both.
spec!(
    reconnect_answers_in_the_version_the_client_negotiated,
    async {
        let d = Daemon::start();
        let t = term_uri("seed-resume");
        let first = connect_08(&d.url()).await;
        first
            .initialize("resume-08".into(), vec!["0.8.0".into()], vec![ROOT.into()])
            .await
            .unwrap();
        let (mut owner, _) = Raw::connect_init(&d.url(), "resume-owner", &[]).await;
        owner.create_claimed(&t, client_claim("resume-owner")).await;
        let (res, _) = first.subscribe(t.clone()).await.unwrap();
        let seen = res.snapshot.unwrap().from_seq;
        first.shutdown().await;
        owner.subscribe_at(&t).await;
        owner.type_text(&t, "exit 6\r").await;
        // The root list follows `terminal/exited` atomically.
        owner
            .wait_envelope("terminal/exited", T, |e| {
                e["action"]["type"] == "terminal/exited"
            })
            .await;

        let again = connect_08(&d.url()).await;
        let result = again
            .reconnect("resume-08".into(), seen, vec![ROOT.into(), t.clone()])
            .await
            .expect("reconnect");
        let t08::commands::ReconnectResult::Replay(replay) = result else {
            panic!("expected a replay: {}", jv(&result))
        };
        let exits: Vec<Value> = replay
            .actions
            .iter()
            .filter(|e| e.channel == ROOT)
            .filter_map(|e| row(&jv(&e.action), &t).cloned())
            .collect();
        assert_eq!(exits.last().unwrap()["exitCode"], 6, "{exits:?}");
        assert!(
            exits.iter().all(|r| r.get("lifecycle").is_none()),
            "{exits:?}"
        );
        again.shutdown().await;

        let third = connect_08(&d.url()).await;
        let result = third
            .reconnect("resume-08".into(), -1, vec![t.clone()])
            .await
            .expect("reconnect");
        let t08::commands::ReconnectResult::Snapshot(snap) = result else {
            panic!("expected snapshots: {}", jv(&result))
        };
        let t08::state::SnapshotState::Terminal(state) = &snap.snapshots[0].state else {
            panic!()
        };
        assert_eq!(state.exit_code, Some(6));
        third.shutdown().await;
    }
);
