//! Helpers shared by the resume, ownership, reaping and randomized tests (on top of
//! `tests/common`): raw `reconnect`, typed decoding of raw messages, folding with the
//! official reducers, `seq` output checks and a tiny seeded RNG.

#![allow(dead_code)]

use std::time::Duration;

use ahp::ahp_types::actions::{ActionEnvelope, StateAction};
use ahp::ahp_types::state::{RootState, TerminalContentPart, TerminalState};
use ahp::{apply_action_to_root, apply_action_to_terminal};
use serde_json::{json, Value};

use crate::common::*;

/// The session claim of the guide's flows, with optional turn and tool call.
pub fn session_claim(turn: Option<&str>, tool_call: Option<&str>) -> Value {
    let mut c = json!({"kind": "session", "session": "ahp-session:/s1", "chat": "ahp-chat:/c1"});
    if let Some(t) = turn {
        c["turnId"] = json!(t);
    }
    if let Some(t) = tool_call {
        c["toolCallId"] = json!(t);
    }
    c
}

pub fn client_claim(id: &str) -> Value {
    json!({"kind": "client", "clientId": id})
}

/// Opens a new socket and sends `reconnect` as its first message; returns the connection
/// and the whole response.
pub async fn raw_reconnect(
    url: &str,
    client_id: &str,
    last_seen: i64,
    subs: &[&str],
) -> (Raw, Value) {
    let mut raw = Raw::connect(url).await;
    let resp = raw
        .request(
            "reconnect",
            json!({"channel": ROOT, "clientId": client_id, "lastSeenServerSeq": last_seen,
                   "subscriptions": subs}),
        )
        .await;
    raw.client_id = client_id.into();
    (raw, resp)
}

/// `createTerminal` over a raw connection; panics on an error.
pub async fn raw_create(raw: &mut Raw, uri: &str, claim: Value) {
    let r = raw
        .request("createTerminal", json!({"channel": uri, "claim": claim}))
        .await;
    assert!(r.get("error").is_none(), "createTerminal {uri}: {r}");
}

/// `subscribe` over a raw connection; returns (index of the response in `received`,
/// snapshot JSON).
pub async fn raw_subscribe(raw: &mut Raw, uri: &str) -> (usize, Value) {
    let r = raw.request("subscribe", json!({"channel": uri})).await;
    let snap = r
        .pointer("/result/snapshot")
        .cloned()
        .unwrap_or_else(|| panic!("subscribe {uri}: {r}"));
    let pos = raw
        .received
        .iter()
        .position(|m| m.get("id") == r.get("id") && m.get("method").is_none())
        .unwrap();
    (pos, snap)
}

/// Two raw clients on one new terminal: `owner` (also subscribed to the root channel) creates
/// it with a client claim, then the observer (`<owner>-obs`) and the owner subscribe, and the
/// shell is ready. Returns (owner, observer, URI, owner's snapshot, observer's snapshot).
pub async fn owner_and_observer(
    url: &str,
    owner: &str,
    tag: &str,
) -> (Raw, Raw, String, Value, Value) {
    let (mut a, _) = Raw::connect_init(url, owner, &[ROOT]).await;
    let (mut obs, _) = Raw::connect_init(url, &format!("{owner}-obs"), &[]).await;
    let t = term_uri(tag);
    raw_create(&mut a, &t, client_claim(owner)).await;
    let (_, obs_snap) = raw_subscribe(&mut obs, &t).await;
    let (_, a_snap) = raw_subscribe(&mut a, &t).await;
    a.ready(&t).await;
    (a, obs, t, a_snap, obs_snap)
}

/// The action envelopes among `msgs`, decoded with the official types.
pub fn envelopes_of(msgs: &[Value]) -> Vec<ActionEnvelope> {
    msgs.iter()
        .filter(|m| m.get("method").and_then(Value::as_str) == Some("action"))
        .map(|m| decode_envelope(&m["params"]))
        .collect()
}

pub fn decode_envelope(v: &Value) -> ActionEnvelope {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("bad envelope ({e}): {v}"))
}

pub fn terminal_of(snapshot: &Value) -> TerminalState {
    serde_json::from_value(snapshot["state"].clone())
        .unwrap_or_else(|e| panic!("not a terminal snapshot ({e}): {snapshot}"))
}

pub fn root_of(snapshot: &Value) -> RootState {
    serde_json::from_value(snapshot["state"].clone())
        .unwrap_or_else(|e| panic!("not a root snapshot ({e}): {snapshot}"))
}

/// Folds the accepted envelopes of `channel` onto a terminal state.
pub fn fold_terminal(state: &mut TerminalState, envs: &[ActionEnvelope], channel: &str) {
    for e in envs {
        if e.channel == channel && e.rejection_reason.is_none() {
            apply_action_to_terminal(state, &e.action);
        }
    }
}

/// Folds the accepted envelopes of the root channel onto a root state.
pub fn fold_root(state: &mut RootState, envs: &[ActionEnvelope]) {
    for e in envs {
        if e.channel == ROOT && e.rejection_reason.is_none() {
            apply_action_to_root(state, &e.action);
        }
    }
}

/// Retained text of a terminal state (unclassified values and command outputs).
pub fn content_text(state: &TerminalState) -> String {
    let mut s = String::new();
    for p in &state.content {
        match p {
            TerminalContentPart::Unclassified(u) => s.push_str(&u.value),
            TerminalContentPart::Command(c) => s.push_str(&c.output),
            TerminalContentPart::Unknown(_) => {}
        }
    }
    s
}

/// Concatenated `terminal/data` of `channel` in `envs`.
pub fn data_text(envs: &[ActionEnvelope], channel: &str) -> String {
    let mut s = String::new();
    for e in envs {
        if e.channel == channel {
            if let StateAction::TerminalData(d) = &e.action {
                s.push_str(&d.data);
            }
        }
    }
    s
}

/// Every line of `text` that consists of digits only (the output of `seq`).
pub fn number_lines(text: &str) -> Vec<u64> {
    text.split('\n')
        .map(|l| l.trim_end_matches('\r'))
        .map(|l| l.rsplit('\r').next().unwrap_or(l))
        .filter(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()))
        .filter_map(|l| l.parse().ok())
        .collect()
}

/// Asserts that `nums` is exactly `1..=n`, naming the first gap or duplicate.
pub fn assert_contiguous(nums: &[u64], n: u64, what: &str) {
    for (i, &x) in nums.iter().enumerate() {
        let want = i as u64 + 1;
        if x != want {
            let lo = i.saturating_sub(3);
            let hi = (i + 4).min(nums.len());
            panic!(
                "{what}: line #{i} is {x}, expected {want} (a {}); around it: {:?}",
                if x < want { "duplicate" } else { "gap" },
                &nums[lo..hi]
            );
        }
    }
    assert_eq!(
        nums.len() as u64,
        n,
        "{what}: {} numbers, expected {n}",
        nums.len()
    );
}

/// Asserts strictly increasing `serverSeq` values.
pub fn assert_increasing(envs: &[ActionEnvelope], what: &str) {
    for w in envs.windows(2) {
        assert!(
            w[0].server_seq < w[1].server_seq,
            "{what}: serverSeq {} followed by {}",
            w[0].server_seq,
            w[1].server_seq
        );
    }
}

/// The `serverSeq` of the last envelope received on a raw connection (0 if none).
pub fn last_seq(raw: &Raw) -> u64 {
    raw.envelopes()
        .last()
        .and_then(|e| e["serverSeq"].as_u64())
        .unwrap_or(0)
}

/// Abruptly drops a raw connection (no WebSocket close frame).
pub fn kill(raw: Raw) {
    drop(raw.ws);
}

/// Types `echo pid-$$` and returns the shell's pid.
pub async fn shell_pid(raw: &mut Raw, uri: &str) -> i32 {
    raw.type_text(uri, "echo pid-$$\r").await;
    let u = uri.to_string();
    raw.wait_until("pid-<digits>", SHELL_TIMEOUT, |r| {
        find_number_after(&r.data(&u), "pid-").is_some()
    })
    .await;
    find_number_after(&raw.data(uri), "pid-").unwrap() as i32
}

/// Does the latest `root/terminalsChanged` on a raw connection list `uri`?
pub fn root_lists(raw: &Raw, uri: &str) -> Option<bool> {
    raw.envelopes()
        .iter()
        .rev()
        .find(|e| e["channel"] == ROOT && e["action"]["type"] == "root/terminalsChanged")
        .map(|e| {
            e["action"]["terminals"]
                .as_array()
                .is_some_and(|rows| rows.iter().any(|r| r["resource"] == uri))
        })
}

/// Waits until the latest root update on `raw` does (or does not) list `uri`.
pub async fn wait_root_lists(raw: &mut Raw, uri: &str, listed: bool, timeout: Duration) {
    let u = uri.to_string();
    raw.wait_until(
        &format!(
            "root/terminalsChanged {} {uri}",
            if listed { "with" } else { "without" }
        ),
        timeout,
        |r| root_lists(r, &u) == Some(listed),
    )
    .await
}

/// xorshift64*: a tiny seeded RNG (no new crates).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// D6 as a model: may `dispatcher` replace `cur` (held by `holder`, connected iff
/// `holder_connected`) with `new`? The holder may transfer; anyone may take an absent holder's
/// claim; anyone may narrow a session claim.
pub fn d6_allows(
    cur: &Value,
    holder: &str,
    holder_connected: bool,
    dispatcher: &str,
    new: &Value,
) -> bool {
    if dispatcher == holder || !holder_connected {
        return true;
    }
    if cur["kind"] != "session" || new["kind"] != "session" {
        return false;
    }
    let kept_or_dropped = |k: &str| new.get(k).is_none() || new.get(k) == cur.get(k);
    cur["session"] == new["session"]
        && cur["chat"] == new["chat"]
        && kept_or_dropped("turnId")
        && kept_or_dropped("toolCallId")
        && !(new.get("turnId").is_none() && new.get("toolCallId").is_some())
}
