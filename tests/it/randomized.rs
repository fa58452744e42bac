//! Randomized multi-client test (seeded): several clients on several terminals dispatch
//! input, resize, title, clear and claim actions and subscribe/unsubscribe at random while
//! the terminals produce output. Checked:
//! - every time a client re-subscribes to a channel it was following, the state it folded
//!   (snapshot + accepted envelopes after it, official reducers) equals the fresh snapshot;
//! - each connection's envelopes come in strictly increasing serverSeq order, after the
//!   snapshot they follow; rejections reach only their dispatcher;
//! - every claim's outcome (accepted/rejected) is what decision D6 says, applied in serverSeq
//!   order; all other actions are accepted.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::support::*;
use ahp::ahp_types::state::{RootState, TerminalState};
use ahp::{apply_action_to_root, apply_action_to_terminal};
use serde_json::{json, Value};

const CLIENTS: usize = 4;
const STEPS: usize = 260;

struct Player {
    raw: Raw,
    id: String,
    /// Channels this client currently follows (client-side view).
    subs: HashSet<String>,
    /// Request id (as JSON text) → channel, for subscribe requests.
    sub_ids: HashMap<String, String>,
    /// (index into `received` at the time it was sent, channel) for each unsubscribe.
    unsubs: Vec<(usize, String)>,
    /// (terminal, clientSeq, claim) for every claim dispatched.
    claims: Vec<(String, i64, Value)>,
}

impl Player {
    async fn subscribe(&mut self, channel: &str) {
        let r = self
            .raw
            .request("subscribe", json!({"channel": channel}))
            .await;
        assert!(r.get("result").is_some(), "subscribe {channel}: {r}");
        self.sub_ids
            .insert(r["id"].to_string(), channel.to_string());
        self.subs.insert(channel.to_string());
    }

    async fn unsubscribe(&mut self, channel: &str) {
        self.unsubs
            .push((self.raw.received.len(), channel.to_string()));
        self.raw
            .send_json(&json!({"jsonrpc": "2.0", "method": "unsubscribe",
                               "params": {"channel": channel}}))
            .await;
        self.subs.remove(channel);
    }

    /// Reads whatever has arrived, without waiting for more.
    async fn drain(&mut self) {
        while tokio::time::timeout(
            Duration::from_millis(1),
            self.raw.next_message(Duration::from_secs(60)),
        )
        .await
        .is_ok()
        {}
    }
}

enum Folded {
    Root(RootState, u64),
    Term(TerminalState, u64),
}

/// Replays one client's stream; returns the number of snapshot comparisons made.
fn check_player(p: &Player) -> usize {
    let mut states: HashMap<String, Folded> = HashMap::new();
    let mut checkpoints = 0;
    let mut unsubs = p.unsubs.iter().peekable();
    let mut last_seq = 0u64;
    for (i, m) in p.raw.received.iter().enumerate() {
        while let Some((at, ch)) = unsubs.peek() {
            if *at > i {
                break;
            }
            states.remove(ch);
            unsubs.next();
        }
        if let Some(channel) = p.sub_ids.get(&m["id"].to_string()) {
            let snap = &m["result"]["snapshot"];
            let from = snap["fromSeq"].as_u64().unwrap();
            let fresh = if channel == ROOT {
                Folded::Root(root_of(snap), from)
            } else {
                Folded::Term(terminal_of(snap), from)
            };
            if let Some(old) = states.get(channel) {
                let (mine, theirs) = match (old, &fresh) {
                    (Folded::Root(a, _), Folded::Root(b, _)) => (
                        serde_json::to_value(a).unwrap(),
                        serde_json::to_value(b).unwrap(),
                    ),
                    (Folded::Term(a, _), Folded::Term(b, _)) => (
                        serde_json::to_value(a).unwrap(),
                        serde_json::to_value(b).unwrap(),
                    ),
                    _ => unreachable!(),
                };
                if mine != theirs {
                    let diff: Vec<String> = mine
                        .as_object()
                        .unwrap()
                        .iter()
                        .filter(|(k, v)| theirs.get(k.as_str()) != Some(v))
                        .map(|(k, v)| {
                            let s = |x: &Value| x.to_string().chars().take(400).collect::<String>();
                            format!("{k}: folded {} / fresh {}", s(v), s(&theirs[k.as_str()]))
                        })
                        .collect();
                    panic!(
                        "{}: folded state of {channel} differs from the snapshot at {from} \
                         (message #{i}):\n{}",
                        p.id,
                        diff.join("\n")
                    );
                }
                checkpoints += 1;
            }
            states.insert(channel.clone(), fresh);
            continue;
        }
        if m["method"] != "action" {
            continue;
        }
        let e = decode_envelope(&m["params"]);
        assert!(
            e.server_seq > last_seq,
            "{}: serverSeq {} after {last_seq}",
            p.id,
            e.server_seq
        );
        last_seq = e.server_seq;
        if e.rejection_reason.is_some() {
            let origin = e.origin.as_ref().expect("rejection origin");
            assert_eq!(origin.client_id, p.id, "someone else's rejection: {e:?}");
            continue;
        }
        match states.get_mut(&e.channel) {
            Some(Folded::Root(s, from)) => {
                assert!(e.server_seq > *from);
                apply_action_to_root(s, &e.action);
            }
            Some(Folded::Term(s, from)) => {
                assert!(e.server_seq > *from);
                apply_action_to_terminal(s, &e.action);
            }
            None => {} // in flight around an unsubscribe, or before a subscribe response
        }
    }
    checkpoints
}

fn random_claim(rng: &mut Rng) -> Value {
    match rng.below(6) {
        0 | 1 => client_claim(&format!("rnd-{}", rng.below(CLIENTS))),
        2 => session_claim(Some("t1"), Some("tc1")),
        3 => session_claim(Some("t1"), None),
        4 => session_claim(None, None),
        _ => session_claim(Some(["t1", "t2"][rng.below(2)]), Some("tc2")),
    }
}

fn random_input(rng: &mut Rng) -> String {
    match rng.below(7) {
        0 | 1 => format!("echo word-{}\r", rng.below(100_000)),
        2 => format!("seq 1 {}\r", 1 + rng.below(1500)),
        3 => format!("printf '\\e]0;osc-{}\\a'\r", rng.below(1000)),
        4 => format!(
            "for i in 1 2 3; do echo slow-{}-$i; sleep 0.05; done\r",
            rng.below(100)
        ),
        5 => "\u{3}".to_string(),
        _ => format!("ech{}", rng.below(10)), // a partial line
    }
}

async fn run(seed: u64) {
    let d = Daemon::start_with(&[
        "--scrollback-bytes",
        "67108864",
        "--history-bytes",
        "1048576",
    ]);
    let mut rng = Rng::new(seed);
    let mut players = Vec::new();
    for i in 0..CLIENTS {
        let id = format!("rnd-{i}");
        let (raw, _) = Raw::connect_init(&d.url(), &id, &[]).await;
        players.push(Player {
            raw,
            id,
            subs: HashSet::new(),
            sub_ids: HashMap::new(),
            unsubs: Vec::new(),
            claims: Vec::new(),
        });
    }
    // The observer follows everything from the start: it sees every accepted action.
    let (mut obs, _) = Raw::connect_init(&d.url(), "rnd-obs", &[ROOT]).await;
    let terms: Vec<String> = (0..3).map(|i| term_uri(&format!("rnd{i}"))).collect();
    let initial = [
        (client_claim("rnd-0"), "rnd-0"),
        (session_claim(Some("t1"), Some("tc1")), "rnd-1"),
        (client_claim("rnd-2"), "rnd-2"),
    ];
    for (i, t) in terms.iter().enumerate() {
        players[i].raw.create_claimed(t, initial[i].0.clone()).await;
        obs.subscribe_at(t).await;
        // Background output for the first seconds.
        obs.type_text(
            t,
            &format!("for i in $(seq 1 150); do echo bg-{i}-$i; sleep 0.02; done\r"),
        )
        .await;
    }
    let channels: Vec<String> = std::iter::once(ROOT.to_string())
        .chain(terms.iter().cloned())
        .collect();
    for p in players.iter_mut() {
        for c in &channels {
            if rng.chance(60) {
                p.subscribe(c).await;
            }
        }
    }

    for _ in 0..STEPS {
        let who = rng.below(CLIENTS);
        let t = terms[rng.below(terms.len())].clone();
        let p = &mut players[who];
        match rng.below(100) {
            0..=34 => {
                let input = random_input(&mut rng);
                p.raw.type_text(&t, &input).await;
            }
            35..=44 => {
                let (cols, rows) = (20 + rng.below(180), 5 + rng.below(55));
                p.raw
                    .dispatch(
                        &t,
                        json!({"type": "terminal/resized", "cols": cols, "rows": rows}),
                    )
                    .await;
            }
            45..=52 => {
                let title = format!("title-{}", rng.below(1000));
                p.raw
                    .dispatch(&t, json!({"type": "terminal/titleChanged", "title": title}))
                    .await;
            }
            53..=56 => {
                p.raw
                    .dispatch(&t, json!({"type": "terminal/cleared"}))
                    .await;
            }
            57..=72 => {
                let c = random_claim(&mut rng);
                let seq = p
                    .raw
                    .dispatch(&t, json!({"type": "terminal/claimed", "claim": c}))
                    .await;
                p.claims.push((t.clone(), seq, c));
            }
            73..=86 => {
                let c = channels[rng.below(channels.len())].clone();
                p.subscribe(&c).await;
            }
            87..=94 => {
                let subs: Vec<String> = p.subs.iter().cloned().collect();
                if !subs.is_empty() {
                    let c = subs[rng.below(subs.len())].clone();
                    p.unsubscribe(&c).await;
                }
            }
            _ => {}
        }
        if rng.chance(30) {
            tokio::time::sleep(Duration::from_millis(rng.below(25) as u64)).await;
        }
        for p in players.iter_mut() {
            p.drain().await;
        }
        obs.skip_seen();
        while tokio::time::timeout(
            Duration::from_millis(1),
            obs.next_message(Duration::from_secs(60)),
        )
        .await
        .is_ok()
        {}
    }

    // Final checkpoints: every client re-subscribes to what it follows; the observer last,
    // so its stream holds every accepted action dispatched above.
    for p in players.iter_mut() {
        let subs: Vec<String> = p.subs.iter().cloned().collect();
        for c in subs {
            p.subscribe(&c).await;
        }
        // A barrier on a channel it may not follow, for its own rejections.
        let r = p.raw.request("subscribe", json!({"channel": ROOT})).await;
        p.sub_ids.insert(r["id"].to_string(), ROOT.to_string());
        p.subs.insert(ROOT.to_string());
    }
    let (obs_pos, _) = obs.subscribe_at(ROOT).await;
    let mut total = 0;
    for p in &players {
        total += check_player(p);
    }
    assert!(total >= CLIENTS, "only {total} snapshot comparisons");
    let envelopes: usize = players.iter().map(|p| p.raw.envelopes().count()).sum();
    eprintln!("seed {seed:#x}: {total} snapshot comparisons, {envelopes} envelopes folded");

    // Claims against the D6 model, per terminal in serverSeq order.
    let obs_envs = envelopes_of(&obs.received[..obs_pos]);
    for (ti, t) in terms.iter().enumerate() {
        let mut outcomes: Vec<(u64, String, Value, bool)> = Vec::new();
        for p in &players {
            let mine = envelopes_of(&p.raw.received);
            for (ct, seq, c) in &p.claims {
                if ct != t {
                    continue;
                }
                let is_it = |e: &&ahp::ahp_types::actions::ActionEnvelope| {
                    e.channel == *t
                        && e.origin
                            .as_ref()
                            .is_some_and(|o| o.client_id == p.id && o.client_seq == *seq)
                };
                let accepted = obs_envs.iter().find(is_it);
                let rejected = mine
                    .iter()
                    .filter(|e| e.rejection_reason.is_some())
                    .find(is_it);
                let (seq_no, ok) = match (accepted, rejected) {
                    (Some(a), None) => (a.server_seq, true),
                    (None, Some(r)) => (r.server_seq, false),
                    other => panic!("claim {}#{seq} on {t}: outcome {other:?}", p.id),
                };
                outcomes.push((seq_no, p.id.clone(), c.clone(), ok));
            }
        }
        outcomes.sort_by_key(|o| o.0);
        let accepted = outcomes.iter().filter(|o| o.3).count();
        eprintln!("{t}: {} claims, {accepted} accepted", outcomes.len());
        let (mut cur, mut holder) = (initial[ti].0.clone(), initial[ti].1.to_string());
        for (seq, who, c, ok) in &outcomes {
            let connected = holder.starts_with("rnd-");
            let allowed = d6_allows(&cur, &holder, connected, who, c);
            assert_eq!(
                *ok, allowed,
                "{t}: claim #{seq} by {who} ({c}) against {cur} held by {holder}"
            );
            if allowed {
                if *who == holder || !connected {
                    holder = match c["kind"].as_str() {
                        Some("client") => c["clientId"].as_str().unwrap().to_string(),
                        _ => who.clone(),
                    };
                }
                cur = c.clone();
            }
        }
    }
    // Nothing but claims is ever rejected here.
    for p in &players {
        for e in envelopes_of(&p.raw.received) {
            if e.rejection_reason.is_some() {
                let raw = serde_json::to_value(&e.action).unwrap();
                assert_eq!(
                    raw["type"], "terminal/claimed",
                    "unexpected rejection: {e:?}"
                );
            }
        }
    }
}

spec!(random_clients_fold_to_fresh_snapshots_seed_1, async {
    run(0x5eed_0001).await;
});

spec!(random_clients_fold_to_fresh_snapshots_seed_2, async {
    run(0x0dea_dbee_f002).await;
});
