//! Ownership (decision D6, docs/protocol.md "Ownership") through the guide's agent flows:
//! a command under a tool-call claim, a dev server detached to the background, a detach by
//! another client, a reclaim and restart, and what watchers see when the claim changes.

use crate::support::*;
use serde_json::{json, Value};

const AGENT: &str = "agent-1";

fn is_type(e: &Value, channel: &str, ty: &str) -> bool {
    e["channel"] == channel && e["action"]["type"] == ty
}

/// The claim of `uri` in the latest root update seen on `raw`.
fn root_claim(raw: &Raw, uri: &str) -> Option<Value> {
    raw.envelopes()
        .rev()
        .find(|e| is_type(e, ROOT, "root/terminalsChanged"))
        .and_then(|e| {
            e["action"]["terminals"]
                .as_array()?
                .iter()
                .find(|r| r["resource"] == uri)
                .map(|r| r["claim"].clone())
        })
}

/// Waits for the accepted `terminal/claimed` carrying `origin (client, clientSeq)`.
async fn wait_claimed(raw: &mut Raw, uri: &str, client: &str, seq: i64) -> Value {
    let (u, c) = (uri.to_string(), client.to_string());
    let e = raw
        .wait_envelope(
            &format!("terminal/claimed from {client}#{seq}"),
            SHELL_TIMEOUT,
            move |e| {
                is_type(e, &u, "terminal/claimed")
                    && e["origin"]["clientId"] == c.as_str()
                    && e["origin"]["clientSeq"] == seq
            },
        )
        .await;
    assert!(e.get("rejectionReason").is_none(), "claim rejected: {e}");
    e
}

/// Waits for the rejection of the dispatcher's own action `seq`.
async fn wait_rejected(raw: &mut Raw, uri: &str, seq: i64) -> Value {
    let (u, me) = (uri.to_string(), raw.client_id.clone());
    raw.wait_envelope(&format!("rejection of #{seq}"), SHELL_TIMEOUT, move |e| {
        e["channel"] == u.as_str()
            && e["origin"]["clientId"] == me.as_str()
            && e["origin"]["clientSeq"] == seq
            && e.get("rejectionReason").is_some()
    })
    .await
}

async fn claim(raw: &mut Raw, uri: &str, claim: Value) -> i64 {
    raw.dispatch(uri, json!({"type": "terminal/claimed", "claim": claim}))
        .await
}

/// A connection subscribed to the root and to `uri`, for watching.
async fn watcher(url: &str, id: &str, uri: &str) -> Raw {
    let (mut w, _) = Raw::connect_init(url, id, &[ROOT]).await;
    w.subscribe_at(uri).await;
    w
}

/// Waits for `commandExecuted` of `line` and returns its commandId.
async fn wait_executed(raw: &mut Raw, uri: &str, line: &str) -> String {
    let (u, l) = (uri.to_string(), line.to_string());
    let e = raw
        .wait_envelope(
            &format!("commandExecuted {line:?}"),
            SHELL_TIMEOUT,
            move |e| {
                is_type(e, &u, "terminal/commandExecuted")
                    && e["action"]["commandLine"] == l.as_str()
            },
        )
        .await;
    e["action"]["commandId"].as_str().unwrap().to_string()
}

async fn wait_finished(raw: &mut Raw, uri: &str, command_id: &str) -> Value {
    let (u, id) = (uri.to_string(), command_id.to_string());
    raw.wait_envelope("commandFinished", SHELL_TIMEOUT, move |e| {
        is_type(e, &u, "terminal/commandFinished") && e["action"]["commandId"] == id.as_str()
    })
    .await
}

// Flow (a): an agent runs a command under a tool-call claim and reads its output and exit
// code from the injected shell integration.
spec!(agent_runs_a_command_under_a_tool_call_claim, async {
    let d = Daemon::start();
    let (mut agent, _) = Raw::connect_init(&d.url(), AGENT, &[ROOT]).await;
    let t = term_uri("tool");
    let tool = session_claim(Some("t1"), Some("tc1"));
    agent.create_claimed(&t, tool.clone()).await;
    assert_eq!(root_claim(&agent, &t), Some(tool.clone()));
    let (_, snap) = agent.subscribe_at(&t).await;
    assert_eq!(snap["state"]["claim"], tool);
    agent.ready(&t).await;
    let line = "echo out-$((6*7)); (exit 3)";
    agent.type_text(&t, &format!("{line}\r")).await;
    let id = wait_executed(&mut agent, &t, line).await;
    let fin = wait_finished(&mut agent, &t, &id).await;
    assert_eq!(fin["action"]["exitCode"], 3, "{fin}");
    // The output arrives between the two marks.
    let envs: Vec<&Value> = agent.envelopes().collect();
    let pos = |pred: &dyn Fn(&Value) -> bool| envs.iter().position(|e| pred(e)).unwrap();
    let exec_at = pos(&|e| {
        is_type(e, &t, "terminal/commandExecuted") && e["action"]["commandId"] == id.as_str()
    });
    let fin_at = pos(&|e| {
        is_type(e, &t, "terminal/commandFinished") && e["action"]["commandId"] == id.as_str()
    });
    let between: String = envs[exec_at..fin_at]
        .iter()
        .filter(|e| is_type(e, &t, "terminal/data"))
        .map(|e| e["action"]["data"].as_str().unwrap())
        .collect();
    assert!(between.contains("out-42"), "{between:?}");
    // A fresh snapshot records the finished command with its output and exit code.
    let (_, snap) = agent.subscribe_at(&t).await;
    let part = snap["state"]["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "command" && p["commandId"] == id.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("no command part: {snap}"));
    assert_eq!(part["isComplete"], true);
    assert_eq!(part["exitCode"], 3);
    assert!(
        part["output"].as_str().unwrap().contains("out-42"),
        "{part}"
    );
    assert_eq!(
        snap["state"]["claim"], tool,
        "running a command changes no claim"
    );
});

// Flows (b) and (d): a dev server started under a tool call is detached to the background
// (claim narrowed to {session, chat}) and keeps running; later the session reclaims it for a
// new tool call, stops it with Ctrl-C and starts it again.
spec!(dev_server_detached_then_reclaimed_and_restarted, async {
    let d = Daemon::start();
    let (mut agent, _) = Raw::connect_init(&d.url(), AGENT, &[ROOT]).await;
    let t = term_uri("devserver");
    agent
        .create_claimed(&t, session_claim(Some("t1"), Some("tc1")))
        .await;
    agent.subscribe_at(&t).await;
    let mut user = watcher(&d.url(), "user-1", &t).await;
    agent.ready(&t).await;
    let server = "while :; do echo tick; sleep 0.2; done";
    agent.type_text(&t, &format!("{server}\r")).await;
    let first = wait_executed(&mut agent, &t, server).await;
    agent.wait_data(&t, "tick\r\ntick\r\n", SHELL_TIMEOUT).await;

    // (b) Detach: the tool call returns, the server stays with the chat.
    let background = session_claim(None, None);
    let s = claim(&mut agent, &t, background.clone()).await;
    let e = wait_claimed(&mut agent, &t, AGENT, s).await;
    assert_eq!(e["action"]["claim"], background);
    wait_claimed(&mut user, &t, AGENT, s).await;
    let u = t.clone();
    let bg = background.clone();
    user.wait_until("root row with the background claim", SHELL_TIMEOUT, |r| {
        root_claim(r, &u) == Some(bg.clone())
    })
    .await;
    let ticks = agent.data(&t).matches("tick\r\n").count();
    let u = t.clone();
    agent
        .wait_until("the server keeps running detached", SHELL_TIMEOUT, |r| {
            r.data(&u).matches("tick\r\n").count() >= ticks + 2
        })
        .await;
    // Another client cannot re-scope a background terminal to its own tool call.
    let s = claim(&mut user, &t, session_claim(Some("t9"), Some("tc9"))).await;
    let rej = wait_rejected(&mut user, &t, s).await;
    assert!(
        rej["rejectionReason"].as_str().unwrap().contains(AGENT),
        "{rej}"
    );

    // (d) Reclaim for a new tool call, restart the server.
    let again = session_claim(Some("t2"), Some("tc2"));
    let s = claim(&mut agent, &t, again.clone()).await;
    wait_claimed(&mut agent, &t, AGENT, s).await;
    wait_claimed(&mut user, &t, AGENT, s).await;
    agent.type_text(&t, "\u{3}").await;
    let fin = wait_finished(&mut agent, &t, &first).await;
    assert_eq!(fin["action"]["exitCode"], 130, "Ctrl-C: {fin}");
    let restarted = "while :; do echo tock; sleep 0.2; done";
    agent.type_text(&t, &format!("{restarted}\r")).await;
    let second = wait_executed(&mut agent, &t, restarted).await;
    assert_ne!(first, second);
    user.wait_data(&t, "tock\r\ntock\r\n", SHELL_TIMEOUT).await;
    let (_, snap) = user.subscribe_at(&t).await;
    assert_eq!(snap["state"]["claim"], again);
    assert_eq!(root_claim(&user, &t), Some(again));
    agent.type_text(&t, "\u{3}").await;
});

// Flow (c): another client detaches a terminal a tool call is using. Narrowing by a
// non-holder is accepted; the holder stays the agent, so the other client cannot take the
// terminal, while the agent can still re-scope it.
spec!(another_client_detaches_a_tool_call_terminal, async {
    let d = Daemon::start();
    let (mut agent, _) = Raw::connect_init(&d.url(), AGENT, &[ROOT]).await;
    let t = term_uri("detach");
    agent
        .create_claimed(&t, session_claim(Some("t1"), Some("tc1")))
        .await;
    agent.subscribe_at(&t).await;
    let mut user = watcher(&d.url(), "user-1", &t).await;

    // Dropping only the tool call, then the turn: both are narrowings.
    let s = claim(&mut user, &t, session_claim(Some("t1"), None)).await;
    wait_claimed(&mut agent, &t, "user-1", s).await;
    wait_claimed(&mut user, &t, "user-1", s).await;
    let s = claim(&mut user, &t, session_claim(None, None)).await;
    wait_claimed(&mut agent, &t, "user-1", s).await;
    let u = t.clone();
    agent
        .wait_until("root row detached", SHELL_TIMEOUT, |r| {
            root_claim(r, &u) == Some(session_claim(None, None))
        })
        .await;

    // Not narrowings: another session, a turn added back, a client claim.
    for bad in [
        json!({"kind": "session", "session": "ahp-session:/s2", "chat": "ahp-chat:/c1"}),
        session_claim(Some("t1"), None),
        client_claim("user-1"),
    ] {
        let s = claim(&mut user, &t, bad.clone()).await;
        let rej = wait_rejected(&mut user, &t, s).await;
        let reason = rej["rejectionReason"].as_str().unwrap();
        assert!(
            reason.contains(AGENT),
            "reason should name the holder: {reason}"
        );
        assert_eq!(rej["action"]["claim"], bad);
    }
    // The holder re-scopes the terminal.
    let s = claim(&mut agent, &t, session_claim(Some("t2"), Some("tc2"))).await;
    wait_claimed(&mut user, &t, AGENT, s).await;
    // The agent never saw the user's rejections.
    let (pos, _) = agent.subscribe_at(ROOT).await;
    let leaked: Vec<&Value> = agent.received[..pos]
        .iter()
        .filter(|m| m["params"].get("rejectionReason").is_some())
        .collect();
    assert!(
        leaked.is_empty(),
        "rejections leaked to the agent: {leaked:?}"
    );
});

// Flow (e): two watchers see every claim change (terminal/claimed, then the root update); a
// non-holder's transfer to a client claim is rejected to it only; concurrent claims from
// different clients are decided one at a time, in serverSeq order, each against the claim
// the previous accepted one left.
spec!(
    watchers_see_claim_changes_and_concurrent_claims_resolve_in_order,
    async {
        let d = Daemon::start();
        let (mut agent, _) = Raw::connect_init(&d.url(), AGENT, &[ROOT]).await;
        let t = term_uri("watched");
        agent
            .create_claimed(&t, session_claim(Some("t1"), Some("tc1")))
            .await;
        agent.subscribe_at(&t).await;
        let mut w1 = watcher(&d.url(), "w1", &t).await;
        let mut w2 = watcher(&d.url(), "w2", &t).await;

        let next = session_claim(Some("t2"), Some("tc2"));
        let s = claim(&mut agent, &t, next.clone()).await;
        for w in [&mut w1, &mut w2] {
            let c = wait_claimed(w, &t, AGENT, s).await;
            let seq = c["serverSeq"].as_u64().unwrap();
            let (u, n) = (t.clone(), next.clone());
            let row = w
                .wait_envelope("root update after the claim", SHELL_TIMEOUT, move |e| {
                    is_type(e, ROOT, "root/terminalsChanged")
                        && e["serverSeq"].as_u64().unwrap() > seq
                        && e["action"]["terminals"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .any(|r| r["resource"] == u.as_str() && r["claim"] == n)
                })
                .await;
            assert!(row["serverSeq"].as_u64().unwrap() > seq);
        }

        // A non-holder's transfer to a client claim: rejected, to it only.
        let s = claim(&mut w1, &t, client_claim("w1")).await;
        let rej = wait_rejected(&mut w1, &t, s).await;
        assert!(
            rej["rejectionReason"].as_str().unwrap().contains(AGENT),
            "{rej}"
        );

        // Concurrent claims: the holder hands the terminal to w1, w1 claims it for its laptop,
        // w2 detaches it. Every outcome must follow D6 applied in serverSeq order.
        let start = (next.clone(), AGENT.to_string());
        let to_w1 = client_claim("w1");
        let w1_laptop = client_claim("w1-laptop");
        let detach = session_claim(None, None);
        let (sa, s1, s2) = tokio::join!(
            claim(&mut agent, &t, to_w1.clone()),
            claim(&mut w1, &t, w1_laptop.clone()),
            claim(&mut w2, &t, detach.clone()),
        );
        let tries = [
            (AGENT, sa, to_w1),
            ("w1", s1, w1_laptop),
            ("w2", s2, detach),
        ];
        // Each dispatcher learns its outcome: its own claimed envelope, accepted or rejected.
        let mut outcomes: Vec<(u64, &str, Value, bool)> = Vec::new();
        for (raw, (who, seq, c)) in [&mut agent, &mut w1, &mut w2].into_iter().zip(tries.iter()) {
            let (u, id, seq) = (t.clone(), who.to_string(), *seq);
            let e = raw
                .wait_envelope("own claim outcome", SHELL_TIMEOUT, move |e| {
                    is_type(e, &u, "terminal/claimed")
                        && e["origin"]["clientId"] == id.as_str()
                        && e["origin"]["clientSeq"] == seq
                })
                .await;
            assert_eq!(&e["action"]["claim"], c);
            outcomes.push((
                e["serverSeq"].as_u64().unwrap(),
                who,
                c.clone(),
                e.get("rejectionReason").is_none(),
            ));
        }
        outcomes.sort_by_key(|o| o.0);
        let (mut cur, mut holder) = start;
        let mut last_accepted = cur.clone();
        for (seq, who, c, accepted) in &outcomes {
            let connected = [AGENT, "w1", "w2"].contains(&holder.as_str());
            let allowed = d6_allows(&cur, &holder, connected, who, c);
            assert_eq!(
                *accepted, allowed,
                "claim #{seq} from {who} ({c}) against {cur} held by {holder}: \
             accepted={accepted}, D6 says {allowed}; all outcomes: {outcomes:?}"
            );
            if allowed {
                if *who == holder || !connected {
                    holder = match c["kind"].as_str() {
                        Some("client") => c["clientId"].as_str().unwrap().to_string(),
                        _ => who.to_string(),
                    };
                }
                cur = c.clone();
                last_accepted = c.clone();
            }
        }
        // Everyone ends with the last accepted claim; rejected ones were seen by their sender only.
        for w in [&mut agent, &mut w1, &mut w2] {
            let (pos, snap) = w.subscribe_at(&t).await;
            assert_eq!(snap["state"]["claim"], last_accepted, "{outcomes:?}");
            let me = w.client_id.clone();
            for m in &w.received[..pos] {
                let e = &m["params"];
                if e.get("rejectionReason").is_some() {
                    assert_eq!(
                        e["origin"]["clientId"],
                        me.as_str(),
                        "foreign rejection: {e}"
                    );
                }
            }
        }
    }
);
