//! Resume without loss: `reconnect` after a killed socket, replay and snapshot answers,
//! replay exactness and superseded connections (docs/protocol.md "Reconnect, history and
//! reaping").

mod common;
mod resume_support;

use std::time::Duration;

use ahp::ahp_types::actions::StateAction;
use ahp::ahp_types::commands::ReconnectResult;
use common::*;
use resume_support::*;
use serde_json::{json, Value};

const BIG: &str = "67108864"; // 64 MiB
const FLOOD_TIMEOUT: Duration = Duration::from_secs(40);

/// Decodes a reconnect response with the official type as well (shape check).
fn typed_result(resp: &Value) -> ReconnectResult {
    let result = resp
        .get("result")
        .unwrap_or_else(|| panic!("reconnect failed: {resp}"));
    serde_json::from_value(result.clone())
        .unwrap_or_else(|e| panic!("reconnect result does not decode ({e}): {result}"))
}

/// Requirement 1: a socket killed in the middle of a flood, resumed by replay: the data seen
/// before the kill + the replay + live envelopes is the whole output, once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_after_socket_killed_mid_flood_has_no_gap_and_no_duplicate() {
    let d = Daemon::start_with(&["--history-bytes", BIG, "--scrollback-bytes", BIG]);
    let (mut a, mut obs, t, a_snap, obs_snap) =
        owner_and_observer(&d.url(), "flood-a", "flood").await;
    // The second half starts 2 s after the first: it is certainly produced after the
    // reconnect, so the resumed connection gets both replayed and live output.
    a.type_text(
        &t,
        "seq 1 100000; sleep 2; seq 100001 300000; echo END-$((1+1))\r",
    )
    .await;
    a.wait_data(&t, "\n50000\r", FLOOD_TIMEOUT).await;
    let last_seen = last_seq(&a);
    let before = envelopes_of(&a.received);
    assert!(
        !a.data(&t).contains("\n100000\r"),
        "the first half was complete before the kill; not a mid-flood kill"
    );
    kill(a);

    // Let the first half finish while nobody listens as flood-a.
    obs.wait_data(&t, "\n100000\r", FLOOD_TIMEOUT).await;
    let (mut r, resp) = raw_reconnect(&d.url(), "flood-a", last_seen as i64, &[ROOT, &t]).await;
    assert_eq!(
        resp.pointer("/result/type"),
        Some(&json!("replay")),
        "{resp}"
    );
    let ReconnectResult::Replay(replay) = typed_result(&resp) else {
        unreachable!()
    };
    assert!(replay.missing.is_empty(), "missing: {:?}", replay.missing);
    assert!(
        !data_text(&replay.actions, &t).is_empty(),
        "the replay holds none of the output produced after the kill"
    );
    r.wait_data(&t, "END-2", FLOOD_TIMEOUT).await;
    let live = envelopes_of(&r.received);
    assert!(
        !data_text(&live, &t).is_empty(),
        "no live output after the replay"
    );

    // Envelope level: one strictly increasing stream, nothing at or below lastSeen replayed.
    for e in &replay.actions {
        assert!(
            e.server_seq > last_seen,
            "replayed {} ≤ lastSeen {last_seen}",
            e.server_seq
        );
        assert!(
            e.channel == t || e.channel == ROOT,
            "replayed channel {}",
            e.channel
        );
    }
    let mut story = before.clone();
    story.extend(replay.actions.iter().cloned());
    story.extend(live.iter().cloned());
    assert_increasing(&story, "before + replay + live");

    // Line level: exactly 1..=300000.
    let text = data_text(&story, &t);
    let end = text.find("END-2").unwrap();
    assert_contiguous(
        &number_lines(&text[..end]),
        300_000,
        "resumed client's output",
    );

    // Same envelopes as the observer that never left (up to END-2).
    let end_seq = {
        let mut acc = String::new();
        story
            .iter()
            .filter(|e| e.channel == t)
            .find(|e| {
                if let StateAction::TerminalData(x) = &e.action {
                    acc.push_str(&x.data);
                }
                acc.contains("END-2")
            })
            .unwrap()
            .server_seq
    };
    obs.wait_data(&t, "END-2", FLOOD_TIMEOUT).await;
    let from = a_snap["fromSeq"]
        .as_u64()
        .unwrap()
        .max(obs_snap["fromSeq"].as_u64().unwrap());
    let pick = |envs: &[ahp::ahp_types::actions::ActionEnvelope]| -> Vec<Value> {
        envs.iter()
            .filter(|e| e.channel == t && e.server_seq > from && e.server_seq <= end_seq)
            .map(|e| serde_json::to_value(e).unwrap())
            .collect()
    };
    let mine = pick(&story);
    let theirs = pick(&envelopes_of(&obs.received));
    assert!(
        mine == theirs,
        "resumed stream ({} envelopes) differs from the observer's ({} envelopes)",
        mine.len(),
        theirs.len()
    );
    assert!(d.stderr().contains("client reconnected: replay of"));
}

/// Requirement 2: history exceeded → a "snapshot" answer; snapshot + later envelopes folded
/// with the official reducers equals a fresh snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_exceeded_answers_snapshot_and_fold_matches_fresh_snapshot() {
    let d = Daemon::start_with(&["--history-bytes", "65536", "--scrollback-bytes", BIG]);
    let (mut a, mut obs, t, _, _) = owner_and_observer(&d.url(), "snap-a", "snap").await;
    a.type_text(
        &t,
        "seq 1 100000; sleep 1; seq 100001 200000; echo END-$((1+1))\r",
    )
    .await;
    a.wait_data(&t, "\n30000\r", FLOOD_TIMEOUT).await;
    let last_seen = last_seq(&a);
    kill(a);
    // Far more than 64 KiB of output since lastSeen.
    obs.wait_data(&t, "\n100000\r", FLOOD_TIMEOUT).await;

    let (mut r, resp) = raw_reconnect(&d.url(), "snap-a", last_seen as i64, &[ROOT, &t]).await;
    assert_eq!(
        resp.pointer("/result/type"),
        Some(&json!("snapshot")),
        "{resp}"
    );
    let ReconnectResult::Snapshot(snaps) = typed_result(&resp) else {
        unreachable!()
    };
    let mut resources: Vec<&str> = snaps
        .snapshots
        .iter()
        .map(|s| s.resource.as_str())
        .collect();
    resources.sort();
    let mut want = vec![ROOT, t.as_str()];
    want.sort();
    assert_eq!(resources, want);
    let snap_of = |uri: &str| -> Value {
        resp["result"]["snapshots"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["resource"] == uri)
            .cloned()
            .unwrap()
    };
    let mut term = terminal_of(&snap_of(&t));
    let mut root = root_of(&snap_of(ROOT));
    let term_from = snap_of(&t)["fromSeq"].as_u64().unwrap();
    let root_from = snap_of(ROOT)["fromSeq"].as_u64().unwrap();

    // Wait for the end of the flood (it may already be in the snapshot), then a final marker.
    let snap_text = content_text(&term);
    let u = t.clone();
    r.wait_until("END-2 in snapshot + live data", FLOOD_TIMEOUT, |c| {
        (snap_text.clone() + &c.data(&u)).contains("END-2")
    })
    .await;
    r.type_text(&t, "echo FIN-$((2+3))\r").await;
    r.wait_data(&t, "FIN-5", SHELL_TIMEOUT).await;

    // A fresh snapshot on the same connection: every envelope up to its fromSeq arrived
    // before its response.
    let (t_pos, fresh_t) = raw_subscribe(&mut r, &t).await;
    let (root_pos, fresh_root) = raw_subscribe(&mut r, ROOT).await;
    let live_t = envelopes_of(&r.received[..t_pos]);
    let live_root = envelopes_of(&r.received[..root_pos]);
    for e in &live_root {
        let from = if e.channel == t { term_from } else { root_from };
        assert!(
            e.server_seq > from,
            "envelope {} not after the snapshot at {from}",
            e.server_seq
        );
    }
    assert_increasing(&live_root, "envelopes after a snapshot reconnect");
    fold_terminal(&mut term, &live_t, &t);
    fold_root(&mut root, &live_root);
    assert_eq!(
        serde_json::to_value(&term).unwrap(),
        serde_json::to_value(terminal_of(&fresh_t)).unwrap(),
        "snapshot + folded envelopes differs from a fresh terminal snapshot"
    );
    assert_eq!(
        serde_json::to_value(&root).unwrap(),
        serde_json::to_value(root_of(&fresh_root)).unwrap(),
        "snapshot + folded envelopes differs from a fresh root snapshot"
    );
    // Nothing was lost: the folded content holds the whole output once.
    let text = content_text(&term);
    let start = text.find("rdy-42").unwrap();
    let end = text.find("END-2").unwrap();
    assert_contiguous(
        &number_lines(&text[start..end]),
        200_000,
        "snapshot + live output",
    );
}

/// Requirement 3: the replay holds exactly the envelopes after lastSeenServerSeq on the
/// listed channels, in order, with the client's own rejections only; missing URIs are
/// listed; the subscriptions are live afterwards without a gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_is_exact_for_listed_channels_and_own_rejections() {
    let d = Daemon::start_with(&["--history-bytes", BIG]);
    let (mut a, _) = Raw::connect_init(&d.url(), "exact-a", &[ROOT]).await;
    let (mut b, _) = Raw::connect_init(&d.url(), "exact-b", &[ROOT]).await;
    let (t1, t2, gone) = (term_uri("ex1"), term_uri("ex2"), term_uri("gone"));
    let never = term_uri("never");
    for t in [&t1, &t2, &gone] {
        raw_create(&mut b, t, client_claim("exact-b")).await;
        raw_subscribe(&mut a, t).await;
        raw_subscribe(&mut b, t).await;
    }
    a.ready(&t1).await;
    b.ready(&t2).await;
    b.wait_data(&t1, "rdy-42", SHELL_TIMEOUT).await;
    let last_seen = last_seq(&a);
    // A dispatches a rejected action and dies before reading anything else.
    let a_reject_seq = a
        .dispatch(
            &t1,
            json!({"type": "terminal/resized", "cols": 0, "rows": 5}),
        )
        .await;
    a.dispatch(
        &t1,
        json!({"type": "terminal/input", "data": "echo a-last-$((1+1))\r"}),
    )
    .await;
    // Kill A only once the daemon has taken both (a socket closed with unread data resets
    // the connection, and a reset discards what the daemon has not read yet).
    b.wait_data(&t1, "a-last-2", SHELL_TIMEOUT).await;
    kill(a);

    // While A is away: output on both terminals, a rejection of B's, a title on T2, a new
    // terminal and a dispose (root updates).
    b.dispatch(&t1, json!({"type": "terminal/titleChanged", "title": 5}))
        .await;
    b.type_text(&t1, "seq 1 500; echo away1-$((2+2))\r").await;
    b.type_text(&t2, "seq 1 300; echo away2-$((2+3))\r").await;
    b.dispatch(
        &t2,
        json!({"type": "terminal/titleChanged", "title": "T2 renamed"}),
    )
    .await;
    let t3 = term_uri("ex3");
    raw_create(&mut b, &t3, client_claim("exact-b")).await;
    let r = b.request("disposeTerminal", json!({"channel": gone})).await;
    assert!(r.get("error").is_none(), "{r}");
    b.wait_data(&t1, "away1-4", SHELL_TIMEOUT).await;
    b.wait_data(&t2, "away2-5", SHELL_TIMEOUT).await;

    let (mut r, resp) = raw_reconnect(
        &d.url(),
        "exact-a",
        last_seen as i64,
        &[ROOT, &t1, &gone, &never],
    )
    .await;
    assert_eq!(
        resp.pointer("/result/type"),
        Some(&json!("replay")),
        "{resp}"
    );
    let ReconnectResult::Replay(replay) = typed_result(&resp) else {
        unreachable!()
    };
    let mut missing = replay.missing.clone();
    missing.sort();
    let mut want_missing = vec![gone.clone(), never.clone()];
    want_missing.sort();
    assert_eq!(missing, want_missing, "missing");

    // Live afterwards: B types on T1 and T2; A gets T1's envelopes only.
    b.type_text(&t1, "echo live-$((3+4))\r").await;
    b.type_text(&t2, "echo notmine-$((3+4))\r").await;
    b.wait_data(&t2, "notmine-7", SHELL_TIMEOUT).await;
    r.wait_data(&t1, "live-7", SHELL_TIMEOUT).await;
    // Barriers: B's stream is complete up to its snapshot's fromSeq; A's likewise, later.
    let (b_pos, b_snap) = raw_subscribe(&mut b, ROOT).await;
    let f_b = b_snap["fromSeq"].as_u64().unwrap();
    let (r_pos, _) = raw_subscribe(&mut r, ROOT).await;

    let listed = |e: &ahp::ahp_types::actions::ActionEnvelope| e.channel == ROOT || e.channel == t1;
    // Expected: what B saw on ROOT and T1 after lastSeen, without B's rejections, plus A's
    // own rejection (its serverSeq is taken from the replay: A never saw it).
    let b_envs = envelopes_of(&b.received[..b_pos]);
    let own_rejection: Vec<_> = replay
        .actions
        .iter()
        .filter(|e| e.rejection_reason.is_some())
        .cloned()
        .collect();
    assert_eq!(
        own_rejection.len(),
        1,
        "A's own rejection replayed once: {own_rejection:?}"
    );
    let rej = &own_rejection[0];
    assert_eq!(rej.channel, t1);
    let origin = rej.origin.as_ref().expect("origin");
    assert_eq!(
        (origin.client_id.as_str(), origin.client_seq),
        ("exact-a", a_reject_seq)
    );
    let mut expected: Vec<_> = b_envs
        .iter()
        .filter(|e| listed(e) && e.server_seq > last_seen && e.server_seq <= f_b)
        .filter(|e| e.rejection_reason.is_none())
        .cloned()
        .collect();
    expected.push(rej.clone());
    expected.sort_by_key(|e| e.server_seq);
    assert!(
        b_envs.iter().any(|e| e.rejection_reason.is_some()),
        "B's own rejection should have reached B"
    );

    let mut actual = replay.actions.clone();
    assert_increasing(&actual, "replay");
    let live = envelopes_of(&r.received[..r_pos]);
    assert!(
        live.iter().all(listed),
        "envelopes for unlisted channels after the reconnect: {:?}",
        live.iter()
            .filter(|e| !listed(e))
            .map(|e| &e.channel)
            .collect::<Vec<_>>()
    );
    actual.extend(live.into_iter().filter(|e| e.server_seq <= f_b));
    assert_increasing(&actual, "replay + live");
    let as_json = |v: &[ahp::ahp_types::actions::ActionEnvelope]| -> Vec<Value> {
        v.iter().map(|e| serde_json::to_value(e).unwrap()).collect()
    };
    let (actual, expected) = (as_json(&actual), as_json(&expected));
    if actual != expected {
        let seqs = |v: &[Value]| -> Vec<u64> {
            v.iter().map(|e| e["serverSeq"].as_u64().unwrap()).collect()
        };
        panic!(
            "replay + live differs from the envelopes after {last_seen} on the listed channels\n\
             actual seqs:   {:?}\nexpected seqs: {:?}",
            seqs(&actual),
            seqs(&expected)
        );
    }
    assert!(
        data_text(&replay.actions, &t1).contains("away1-4"),
        "replay lacks output produced while away"
    );
}

/// Requirement 3: a reconnect superseding a still-open connection of the same clientId closes
/// it with 4000; the old connection receives nothing after the point of the reconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnect_supersedes_an_open_connection_with_close_4000() {
    let d = Daemon::start_with(&["--history-bytes", BIG]);
    let (mut old, mut obs, t, _, _) = owner_and_observer(&d.url(), "twice", "twice").await;
    // Continuous output around the reconnect.
    old.type_text(
        &t,
        "i=0; while :; do echo tick-$((i++)); sleep 0.02; done\r",
    )
    .await;
    old.wait_data(&t, "tick-5\r", SHELL_TIMEOUT).await;
    let last_seen = last_seq(&old);

    let (mut new, resp) = raw_reconnect(&d.url(), "twice", last_seen as i64, &[ROOT, &t]).await;
    assert_eq!(
        resp.pointer("/result/type"),
        Some(&json!("replay")),
        "{resp}"
    );
    let replay = envelopes_of(
        &resp["result"]["actions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| json!({"method": "action", "params": e}))
            .collect::<Vec<_>>(),
    );
    let frame = old.wait_closed(RPC_TIMEOUT).await;
    let code = frame.as_ref().map(|f| u16::from(f.code));
    assert_eq!(
        code,
        Some(4000),
        "close frame of the superseded connection: {frame:?}"
    );
    let n_old = old.envelopes().len();

    // The new connection carries on; the old one got nothing the new one got live.
    new.wait_until("live ticks on the new connection", SHELL_TIMEOUT, |c| {
        c.envelopes().len() >= 3
    })
    .await;
    let live = envelopes_of(&new.received);
    let first_live = live.first().expect("live envelope").server_seq;
    let old_max = last_seq(&old);
    assert!(
        old_max < first_live,
        "the superseded connection received {old_max}, the new one's first live envelope is {first_live}"
    );
    if let Some(last_replayed) = replay.last() {
        assert!(old_max <= last_replayed.server_seq);
    }
    assert_eq!(old.envelopes().len(), n_old);
    // Ticks are contiguous across replay and live on the new connection.
    let mut story = envelopes_of(&old.received);
    story.retain(|e| e.server_seq <= last_seen);
    story.extend(replay);
    story.extend(live);
    assert_increasing(&story, "old (≤ lastSeen) + replay + live");
    let text = data_text(&story, &t);
    let ticks: Vec<u64> = text
        .split('\n')
        .filter_map(|l| {
            let l = l.trim_end_matches('\r');
            l.rsplit('\r').next().unwrap_or(l).strip_prefix("tick-")
        })
        .filter_map(|n| n.parse().ok())
        .collect();
    assert!(ticks.len() > 5);
    for (i, &n) in ticks.iter().enumerate() {
        assert_eq!(n, i as u64, "tick sequence broken: {ticks:?}");
    }
    // The observer is not affected by someone else's reconnect.
    let n = obs.data(&t).len();
    obs.wait_until("observer keeps receiving", SHELL_TIMEOUT, |c| {
        c.data(&t).len() > n
    })
    .await;
    assert!(obs.closed.is_none());
    new.type_text(&t, "\u{3}").await;
}

/// Docs: "Otherwise a snapshot … also the answer for a lastSeenServerSeq from a previous
/// daemon": a lastSeenServerSeq above the current counter, or negative, gets snapshots
/// (unknown URIs left out), and the subscriptions are live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_range_last_seen_answers_snapshots() {
    let d = Daemon::start_with(&["--history-bytes", BIG]);
    let (mut a, init) = Raw::connect_init(&d.url(), "range-a", &[ROOT]).await;
    let t = term_uri("range");
    raw_create(&mut a, &t, client_claim("range-a")).await;
    raw_subscribe(&mut a, &t).await;
    a.ready(&t).await;
    let now = last_seq(&a) as i64;
    assert!(now > init["serverSeq"].as_i64().unwrap());
    let never = term_uri("never");
    for (i, bad) in [now + 1_000_000, -1].into_iter().enumerate() {
        let (mut r, resp) = raw_reconnect(&d.url(), "range-a", bad, &[ROOT, &t, &never]).await;
        assert_eq!(
            resp.pointer("/result/type"),
            Some(&json!("snapshot")),
            "lastSeenServerSeq {bad}: {resp}"
        );
        let resources: Vec<&str> = resp["result"]["snapshots"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["resource"].as_str().unwrap())
            .collect();
        assert!(resources.contains(&ROOT) && resources.contains(&t.as_str()));
        assert!(!resources.contains(&never.as_str()), "{resources:?}");
        let marker = format!("rng{i}-$((5*5))");
        r.type_text(&t, &format!("echo {marker}\r")).await;
        r.wait_data(&t, &format!("rng{i}-25"), SHELL_TIMEOUT).await;
        // A later initialize on the resumed connection is refused.
        let again = r
            .request(
                "initialize",
                json!({"channel": ROOT, "protocolVersions": ["1.0.0"], "clientId": "range-a"}),
            )
            .await;
        assert_eq!(Raw::code(&again), Some(-32601), "{again}");
    }
}

/// Docs: a clientId the daemon has never seen cannot be resumed, even with a
/// lastSeenServerSeq that happens to be in range (it counts another process's sequence): the
/// answer is -32008, and the terminal's owner keeps its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_client_id_is_not_found() {
    let d = Daemon::start_with(&["--history-bytes", BIG]);
    let (mut a, _) = Raw::connect_init(&d.url(), "known", &[ROOT]).await;
    let t = term_uri("unknown");
    raw_create(&mut a, &t, client_claim("known")).await;
    raw_subscribe(&mut a, &t).await;
    a.ready(&t).await;
    let seen = last_seq(&a) as i64 - 1;
    let (_r, resp) = raw_reconnect(&d.url(), "never-connected-before", seen, &[ROOT, &t]).await;
    assert_eq!(
        Raw::code(&resp),
        Some(-32008),
        "unknown clientId: {}",
        resp.to_string().chars().take(300).collect::<String>()
    );
    // The known client's own reconnect still resumes by replay.
    let (mut r, resp) = raw_reconnect(&d.url(), "known", seen, &[ROOT, &t]).await;
    assert_eq!(
        resp.pointer("/result/type"),
        Some(&json!("replay")),
        "{resp}"
    );
    r.ready(&t).await;
}
