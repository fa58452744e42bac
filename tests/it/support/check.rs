//! Reading and checking what the daemon sent: decoding raw messages with the official types,
//! folding envelopes with the official reducers, the text a stream or a snapshot holds, and
//! the assertions on streams (increasing `serverSeq`, consecutive numbered lines). Also the
//! claims of the guide's flows and the ownership rules (docs/protocol.md, decision D6) as a
//! model, and a tiny seeded RNG for the randomized tests.

use ahp::ahp_types::actions::{ActionEnvelope, StateAction};
use ahp::ahp_types::state::{
    RootState, Snapshot, SnapshotState, TerminalContentPart, TerminalState,
};
use ahp::{apply_action_to_root, apply_action_to_terminal, ClientError};
use serde_json::{json, Value};

use super::{clip, ROOT};

// ─── Decoding ────────────────────────────────────────────────────────────────

/// The action envelopes among `msgs` (raw messages), decoded with the official types.
pub fn envelopes_of(msgs: &[Value]) -> Vec<ActionEnvelope> {
    msgs.iter()
        .filter(|m| m.get("method").and_then(Value::as_str) == Some("action"))
        .map(|m| decode_envelope(&m["params"]))
        .collect()
}

pub fn decode_envelope(v: &Value) -> ActionEnvelope {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("bad envelope ({e}): {v}"))
}

/// The terminal state of a raw snapshot.
pub fn terminal_of(snapshot: &Value) -> TerminalState {
    serde_json::from_value(snapshot["state"].clone())
        .unwrap_or_else(|e| panic!("not a terminal snapshot ({e}): {snapshot}"))
}

/// The root state of a raw snapshot.
pub fn root_of(snapshot: &Value) -> RootState {
    serde_json::from_value(snapshot["state"].clone())
        .unwrap_or_else(|e| panic!("not a root snapshot ({e}): {snapshot}"))
}

/// The terminal state of a typed snapshot (re-decoding from JSON if the untagged union chose
/// another variant).
pub fn terminal_state(snap: &Snapshot) -> TerminalState {
    match &snap.state {
        SnapshotState::Terminal(t) => (**t).clone(),
        other => serde_json::from_value(serde_json::to_value(other).unwrap())
            .expect("snapshot state is not a terminal state"),
    }
}

/// The root state of a typed snapshot.
pub fn root_state(snap: &Snapshot) -> RootState {
    match &snap.state {
        SnapshotState::Root(r) => (**r).clone(),
        other => serde_json::from_value(serde_json::to_value(other).unwrap())
            .expect("snapshot state is not a root state"),
    }
}

/// An envelope as JSON.
pub fn jv(e: &ActionEnvelope) -> Value {
    serde_json::to_value(e).unwrap()
}

/// The JSON-RPC error code of a typed client's answer.
pub fn rpc_code(r: &Result<Value, ClientError>) -> Option<i32> {
    match r {
        Err(ClientError::Rpc(e)) => Some(e.code),
        _ => None,
    }
}

/// The JSON-RPC error message of a typed client's answer (or what it was instead).
pub fn rpc_message(r: &Result<Value, ClientError>) -> String {
    match r {
        Err(ClientError::Rpc(e)) => e.message.clone(),
        other => format!("{other:?}"),
    }
}

// ─── Folding ─────────────────────────────────────────────────────────────────

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

// ─── Text of streams and snapshots ───────────────────────────────────────────

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

/// The text of a raw terminal state's content parts (values and command outputs, in order,
/// a synthesized prefix included); empty when the state has no content.
pub fn state_text(state: &Value) -> String {
    state["content"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p["value"].as_str().or_else(|| p["output"].as_str()))
                .collect()
        })
        .unwrap_or_default()
}

/// How the synthesized prefix of a snapshot (its own first part, there when the terminal's
/// output was trimmed) begins: the preamble that resets the client's emulator.
pub const SYNTHESIZED_START: &str = "\x1b[?1049l\x1b[r\x1b[?6l";

/// Whether content part `p` is a snapshot's synthesized prefix.
pub fn is_synthesized(p: &Value) -> bool {
    p["type"] == "unclassified"
        && p["value"]
            .as_str()
            .is_some_and(|v| v.starts_with(SYNTHESIZED_START))
}

/// The text of a raw terminal snapshot's retained content (values and command outputs, in
/// order), without the synthesized prefix: the tail of the output stream.
pub fn snapshot_text(snapshot: &Value) -> String {
    snapshot["state"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no snapshot content: {}", clip(snapshot.to_string(), 300)))
        .iter()
        .filter(|p| !is_synthesized(p))
        .filter_map(|p| p["value"].as_str().or_else(|| p["output"].as_str()))
        .collect()
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

/// The `terminal/data` of `channel` in a `reconnect` replay result, concatenated.
pub fn replayed_data(result: &Value, channel: &str) -> String {
    result["actions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|e| e["channel"] == channel && e["action"]["type"] == "terminal/data")
                .filter_map(|e| e["action"]["data"].as_str())
                .collect()
        })
        .unwrap_or_default()
}

pub fn is_exited(e: &ActionEnvelope, uri: &str) -> bool {
    e.channel == uri && matches!(e.action, StateAction::TerminalExited(_))
}

/// The last 40 envelopes of a log, one a line, for failure messages.
pub fn describe_envelopes(log: &[ActionEnvelope]) -> String {
    let mut out = String::new();
    let skip = log.len().saturating_sub(40);
    if skip > 0 {
        out.push_str(&format!("  … {skip} earlier envelopes\n"));
    }
    for e in &log[skip..] {
        out.push_str("  ");
        out.push_str(&clip(serde_json::to_string(e).unwrap_or_default(), 300));
        out.push('\n');
    }
    out
}

// ─── Assertions on streams ───────────────────────────────────────────────────

/// Asserts that `nums` is exactly `first..=last`, naming the first number twice or missing.
pub fn assert_consecutive(nums: &[u64], first: u64, last: u64, what: &str) {
    let mut expected = first;
    for (i, &n) in nums.iter().enumerate() {
        assert_eq!(
            n,
            expected,
            "{what}: line {i} is {n}, expected {expected} (a line {}); around it: {:?}",
            if n < expected { "twice" } else { "missing" },
            &nums[i.saturating_sub(3)..(i + 4).min(nums.len())]
        );
        expected += 1;
    }
    assert_eq!(
        expected,
        last + 1,
        "{what}: lines end at {}, expected {last}",
        expected - 1
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

// ─── Claims ──────────────────────────────────────────────────────────────────

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

/// Decision D6 as a model: may `dispatcher` replace `cur` (held by `holder`, connected iff
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

/// xorshift64*: a tiny seeded RNG.
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
