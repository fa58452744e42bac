//! Several clients on one daemon: identical fan-out, folding envelopes onto snapshots with
//! the official reducers, and `serverSeq` strictly increasing on every connection.

use crate::support::*;
use ahp::ahp_types::actions::{
    StateAction, TerminalClearedAction, TerminalResizedAction, TerminalTitleChangedAction,
};
use ahp::ahp_types::state::{RootState, Snapshot, SnapshotState};
use ahp::{apply_action_to_root, apply_action_to_terminal};
use serde_json::{json, Value};

fn root_state(snap: &Snapshot) -> RootState {
    match &snap.state {
        SnapshotState::Root(r) => (**r).clone(),
        other => serde_json::from_value(serde_json::to_value(other).unwrap())
            .expect("snapshot state is not a root state"),
    }
}

spec!(two_clients_see_identical_data_envelopes, async {
    let d = Daemon::start();
    let mut a = Ahp::connect(&d.url(), "viewer-a", &[]).await;
    let mut b = Ahp::connect(&d.url(), "viewer-b", &[]).await;
    let t = term_uri("shared");
    a.create_terminal(&t, json!({})).await.expect("create");
    let (_, from_a) = a.subscribe_terminal(&t).await;
    let (_, from_b) = b.subscribe_terminal(&t).await;
    a.ready(&t).await;
    b.wait_data(&t, "rdy-42", SHELL_TIMEOUT).await;
    b.type_text(&t, "seq 1 2000; echo done-$((3*3))\r").await;
    a.wait_data(&t, "done-9", SHELL_TIMEOUT).await;
    b.wait_data(&t, "done-9", SHELL_TIMEOUT).await;

    let start = from_a.max(from_b) as u64;
    let data_envs = |c: &Ahp| -> Vec<(u64, String)> {
        c.log
            .iter()
            .filter(|e| e.channel == t && e.server_seq > start)
            .filter_map(|e| match &e.action {
                StateAction::TerminalData(x) => Some((e.server_seq, x.data.clone())),
                _ => None,
            })
            .collect()
    };
    // Cut both lists at the envelope completing "done-9" on A, after B has seen it.
    let env_a = data_envs(&a);
    let mut acc = String::new();
    let end = env_a
        .iter()
        .find(|(_, s)| {
            acc.push_str(s);
            acc.contains("done-9")
        })
        .map(|(seq, _)| *seq)
        .unwrap();
    let upto = |v: Vec<(u64, String)>| -> Vec<(u64, String)> {
        v.into_iter().filter(|(s, _)| *s <= end).collect()
    };
    let (env_a, env_b) = (upto(env_a), upto(data_envs(&b)));
    assert!(!env_a.is_empty());
    assert_eq!(
        env_a, env_b,
        "A and B saw different terminal/data envelopes"
    );
    let text: String = env_a.iter().map(|(_, s)| s.as_str()).collect();
    let nums: Vec<u32> = text
        .split("\r\n")
        .map(|l| l.rsplit('\r').next().unwrap_or(l))
        .filter_map(|l| l.parse().ok())
        .collect();
    assert_eq!(
        nums,
        (1..=2000).collect::<Vec<u32>>(),
        "seq output not contiguous"
    );

    // B's input echo carries B's origin and reaches A too.
    assert!(a.log.iter().any(|e| e.channel == t
        && matches!(&e.action, StateAction::TerminalInput(_))
        && e.origin.as_ref().is_some_and(|o| o.client_id == "viewer-b")));

    // A leaving changes nothing for B.
    a.client.shutdown().await;
    drop(a);
    b.type_text(&t, "echo still-$((2*4))\r").await;
    b.wait_data(&t, "still-8", SHELL_TIMEOUT).await;
    let (state, _) = b.subscribe_terminal(&t).await;
    assert_eq!(
        serde_json::to_value(&state.claim).unwrap(),
        json!({"kind": "client", "clientId": "viewer-a"})
    );
    assert_eq!(
        serde_json::to_value(&state.lifecycle).unwrap(),
        json!({"status": "running"})
    );
});

spec!(
    folding_envelopes_onto_snapshots_matches_a_fresh_snapshot,
    async {
        let d = Daemon::start();
        let mut c = Ahp::connect(&d.url(), "folder", &[ROOT]).await;
        let other = Ahp::connect(&d.url(), "typist", &[]).await;
        assert_eq!(c.init.snapshots.len(), 1);
        let root_snap = c.init.snapshots[0].clone();
        assert_eq!(root_snap.resource, ROOT);
        let mut root = root_state(&root_snap);
        let root_from = root_snap.from_seq as u64;

        let t = term_uri("fold");
        c.create_terminal(&t, json!({"cols": 100, "rows": 20}))
            .await
            .expect("create");
        let (mut term, term_from) = c.subscribe_terminal(&t).await;
        let term_from = term_from as u64;
        other.subscribe_terminal(&t).await;
        c.ready(&t).await;

        c.type_text(&t, "echo one-$((0+1))\r").await;
        c.wait_data(&t, "one-1", SHELL_TIMEOUT).await;
        c.dispatch(
            &t,
            StateAction::TerminalResized(TerminalResizedAction { cols: 90, rows: 30 }),
        )
        .await;
        c.dispatch(
            &t,
            StateAction::TerminalTitleChanged(TerminalTitleChangedAction {
                title: "renamed".into(),
            }),
        )
        .await;
        other
            .type_text(&t, "printf '\\e]0;from-osc\\a'; echo two-$((1+1))\r")
            .await;
        c.wait_data(&t, "two-2", SHELL_TIMEOUT).await;
        c.dispatch(&t, StateAction::TerminalCleared(TerminalClearedAction {}))
            .await;
        other.type_text(&t, "echo three-$((1+2))\r").await;
        c.wait_data(&t, "three-3", SHELL_TIMEOUT).await;
        c.type_text(&t, "exit 4\r").await;
        c.wait_exited(&t, SHELL_TIMEOUT).await;
        let u = t.clone();
        c.wait_for("root row exited 4", SHELL_TIMEOUT, |log| {
            log.iter().any(|e| {
                e.channel == ROOT
                    && serde_json::to_value(&e.action).unwrap()["terminals"]
                        .as_array()
                        .is_some_and(|rows| {
                            rows.iter().any(|r| {
                                r["resource"] == u
                                    && r["lifecycle"] == json!({"status": "exited", "exitCode": 4})
                            })
                        })
            })
        })
        .await;

        for e in &c.log {
            assert!(e.rejection_reason.is_none(), "unexpected rejection: {e:?}");
            if e.channel == t {
                assert!(
                    e.server_seq > term_from,
                    "action {} not after the snapshot's fromSeq {term_from}",
                    e.server_seq
                );
                apply_action_to_terminal(&mut term, &e.action);
            } else if e.channel == ROOT {
                assert!(e.server_seq > root_from);
                apply_action_to_root(&mut root, &e.action);
            }
        }
        let (fresh_term, _) = c.subscribe_terminal(&t).await;
        let fresh_root = root_state(&c.subscribe(ROOT).await.expect("root"));
        let folded = serde_json::to_value(&term).unwrap();
        let fresh = serde_json::to_value(&fresh_term).unwrap();
        assert_eq!(
            folded, fresh,
            "folded terminal state differs from a fresh snapshot"
        );
        assert_eq!(
            serde_json::to_value(&root).unwrap(),
            serde_json::to_value(&fresh_root).unwrap(),
            "folded root state differs from a fresh snapshot"
        );
        // Sanity: the script really changed things.
        assert_eq!(fresh["title"], "renamed");
        assert_eq!(
            (fresh["cols"].clone(), fresh["rows"].clone()),
            (json!(90), json!(30))
        );
        let content = fresh["content"].to_string();
        assert!(
            content.contains("three-3") && !content.contains("one-1"),
            "{content}"
        );
    }
);

/// Concatenated text of a subscribe response's snapshot content.
fn snap_text(resp: &Value) -> String {
    state_text(&resp["result"]["snapshot"]["state"])
}

/// Checks one raw connection's stream: strictly increasing serverSeq overall; for each
/// subscribe response, no envelope of that channel before it and only larger ones after.
fn check_ordering(raw: &Raw, subscribe_ids: &[(Value, &str)]) {
    let mut last = 0u64;
    for m in &raw.received {
        if m["method"] == "action" {
            let s = m["params"]["serverSeq"].as_u64().expect("serverSeq");
            assert!(s > last, "serverSeq {s} after {last} on one connection");
            last = s;
        }
    }
    for (id, channel) in subscribe_ids {
        let pos = raw
            .received
            .iter()
            .position(|m| m.get("id") == Some(id))
            .expect("subscribe response");
        let from = raw.received[pos]["result"]["snapshot"]["fromSeq"]
            .as_u64()
            .expect("fromSeq");
        for (i, m) in raw.received.iter().enumerate() {
            if m["method"] == "action" && m["params"]["channel"] == *channel {
                let s = m["params"]["serverSeq"].as_u64().unwrap();
                if i < pos {
                    // Only possible from an earlier subscription to the same channel.
                    continue;
                }
                assert!(s > from, "{channel}: action {s} after a snapshot at {from}");
            }
        }
    }
}

spec!(server_seq_is_strictly_increasing_per_connection, async {
    let d = Daemon::start();
    let (mut a, _) = Raw::connect_init(&d.url(), "order-a", &[ROOT]).await;
    let (mut b, _) = Raw::connect_init(&d.url(), "order-b", &[ROOT]).await;
    let t1 = term_uri("ord1");
    let t2 = term_uri("ord2");
    for (c, t, id) in [(&mut a, &t1, "order-a"), (&mut b, &t2, "order-b")] {
        let r = c
            .request(
                "createTerminal",
                json!({"channel": t, "claim": {"kind": "client", "clientId": id}}),
            )
            .await;
        assert!(r.get("error").is_none(), "{r}");
    }
    // The root row is announced before the createTerminal response.
    let row_pos = a.received.iter().position(|m| {
        m["params"]["action"]["type"] == "root/terminalsChanged"
            && m["params"]["action"]["terminals"][0]["resource"] == json!(t1)
    });
    let resp_pos = a
        .received
        .iter()
        .position(|m| m.get("result").is_some() && m["result"].is_null());
    assert!(
        matches!((row_pos, resp_pos), (Some(r), Some(p)) if r < p),
        "root row {row_pos:?} should precede the createTerminal response {resp_pos:?}"
    );
    let s_a1 = a.request("subscribe", json!({"channel": t1})).await;
    let s_b2 = b.request("subscribe", json!({"channel": t2})).await;
    a.ready(&t1).await;
    b.ready(&t2).await;
    // Both terminals produce output concurrently; A joins T2 in the middle of its output.
    b.type_text(
        &t2,
        "seq 1 20000; sleep 0.3; seq 20001 40000; echo fin-$((2+9))\r",
    )
    .await;
    a.type_text(&t1, "seq 1 20000; echo fin-$((3+9))\r").await;
    b.wait_data(&t2, "\r\n1000\r\n", SHELL_TIMEOUT).await;
    let s_a2 = a.request("subscribe", json!({"channel": t2})).await;
    // Rejections on A's stream take sequence numbers too.
    for _ in 0..5 {
        a.dispatch(
            &t1,
            json!({"type": "terminal/resized", "cols": 0, "rows": 1}),
        )
        .await;
    }
    a.wait_data(&t1, "fin-12", SHELL_TIMEOUT).await;
    let snap_a2 = snap_text(&s_a2);
    let t2c = t2.clone();
    a.wait_until("fin-11 in T2 (snapshot + data)", SHELL_TIMEOUT, |c| {
        (snap_a2.clone() + c.data(&t2c)).contains("fin-11")
    })
    .await;
    b.wait_data(&t2, "fin-11", SHELL_TIMEOUT).await;
    a.wait_until("5 rejections", RPC_TIMEOUT, |c| {
        c.envelopes()
            .filter(|e| e.get("rejectionReason").is_some())
            .count()
            >= 5
    })
    .await;

    check_ordering(
        &a,
        &[
            (s_a1["id"].clone(), t1.as_str()),
            (s_a2["id"].clone(), t2.as_str()),
        ],
    );
    check_ordering(&b, &[(s_b2["id"].clone(), t2.as_str())]);

    // A's late snapshot plus the envelopes after it tell the same story as B's full stream.
    let a_story = snap_text(&s_a2) + a.data(&t2);
    let b_story = snap_text(&s_b2) + b.data(&t2);
    let cut = |s: &str| s[..s.find("fin-11").expect("marker") + 6].to_string();
    assert!(
        cut(&a_story) == cut(&b_story),
        "late subscriber's snapshot + actions differ from the full stream (lengths {} vs {})",
        a_story.len(),
        b_story.len()
    );
});
