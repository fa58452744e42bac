//! Protocol versions at the connection boundary: negotiation of the published AHP versions
//! (0.5.0 … 0.9.0 and 1.x) and the translation between the host's 1.0.0 shapes and an older
//! version's (docs/protocol.md, "Protocol versions").
//!
//! The host's state is always 1.0.0. What leaves a connection is encoded for its [`Wire`];
//! what an older client sends is patched into 1.0.0 before it is decoded. Only a few shapes
//! differ (terminal lifecycle vs `exitCode`, `isPty`, the session claim's `chat`,
//! `serverInfo`), so the translation works on the JSON of the few items that carry them; an
//! envelope whose action contains none of them is shared, byte for byte, by every version.
//! Pure functions and per-fan-out caches; no state.

use std::borrow::Cow;

use ahp_types::actions::{ActionEnvelope, StateAction};
use ahp_types::state::{Snapshot, TerminalClaim};
use base64::Engine;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::{message, Frame};

/// Protocol baselines ahpty negotiates, as advertised in `-32005`'s `data.supportedVersions`.
pub const SUPPORTED_VERSION_RANGES: &[&str] = &["^1.0.0", ">=0.5.0 <0.10.0"];

/// Baselines of the caret rule, newest first, with the wire shapes each one selects.
const BASELINES: &[((u64, u64, u64), Wire)] = &[
    ((1, 0, 0), Wire::Current),
    ((0, 9, 0), Wire::Current),
    ((0, 8, 0), Wire::V0_7_0),
    ((0, 7, 0), Wire::V0_7_0),
    ((0, 6, 0), Wire::V0_5_2),
    ((0, 5, 2), Wire::V0_5_2),
    ((0, 5, 0), Wire::V0_5_0),
];

/// The wire shapes of a negotiated version; each variant is named after the first version
/// that has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wire {
    /// 0.5.0 and 0.5.1: no `serverInfo`, no `isPty`, `exitCode`, chat-less session claims.
    V0_5_0,
    /// 0.5.2 … 0.6.x: as 0.5.0 with `serverInfo`.
    V0_5_2,
    /// 0.7.x and 0.8.x: as 0.5.2 with `isPty`.
    V0_7_0,
    /// 0.9.x and 1.x: the host's own shapes, sent untranslated.
    #[default]
    Current,
}

impl Wire {
    /// Every variant, oldest first (a stable order: indexes of it cross a live upgrade).
    pub const ALL: [Wire; 4] = [Wire::V0_5_0, Wire::V0_5_2, Wire::V0_7_0, Wire::Current];

    /// Whether this is the host's own shape (0.9.x, 1.x): nothing is translated.
    pub fn is_current(self) -> bool {
        self == Wire::Current
    }

    /// `lifecycle` in terminal state and info, and `chat` in session claims (0.9.0+).
    fn has_lifecycle_and_chat(self) -> bool {
        self == Wire::Current
    }

    /// `TerminalState.isPty` (0.7.0+).
    fn has_is_pty(self) -> bool {
        matches!(self, Wire::V0_7_0 | Wire::Current)
    }

    /// `InitializeResult.serverInfo` (0.5.2+).
    fn has_server_info(self) -> bool {
        self != Wire::V0_5_0
    }
}

/// Picks the protocol version for `offered` (`initialize.protocolVersions`): the highest
/// offer that matches a baseline of [`BASELINES`] under the caret rule, returned verbatim with
/// its wire shapes. `Ok(None)`: nothing acceptable (answer `-32005`). `Err`: a malformed
/// version string (answer `-32602`), judged by the 1.0.0 rule of
/// `ahp_types::negotiate_protocol_version`.
pub fn negotiate(offered: &[String]) -> Result<Option<(String, Wire)>, String> {
    ahp_types::negotiate_protocol_version(offered)?;
    let mut best: Option<((u64, u64, u64), &String, Wire)> = None;
    for version in offered {
        let Some(parts) = parse(version) else {
            continue;
        };
        let Some(wire) = BASELINES
            .iter()
            .find(|(base, _)| caret_matches(parts, *base))
            .map(|(_, w)| *w)
        else {
            continue;
        };
        if best.as_ref().is_none_or(|(b, _, _)| parts > *b) {
            best = Some((parts, version, wire));
        }
    }
    Ok(best.map(|(_, v, w)| (v.clone(), w)))
}

/// `MAJOR.MINOR.PATCH` (already validated by the 1.0.0 rule).
fn parse(version: &str) -> Option<(u64, u64, u64)> {
    let mut it = version.split('.').map(|p| p.parse::<u64>().ok());
    let v = (it.next()??, it.next()??, it.next()??);
    it.next().is_none().then_some(v)
}

/// `^base`: same major; for `0.x` the same minor (for `0.0.x` the same patch); at least `base`.
fn caret_matches(v: (u64, u64, u64), base: (u64, u64, u64)) -> bool {
    v.0 == base.0
        && (v.0 > 0 || v.1 == base.1)
        && (v.0 > 0 || v.1 > 0 || v.2 == base.2)
        && v >= base
}

// ─── Host → client ───────────────────────────────────────────────────────────

/// The encodings of one envelope during a fan-out: the 1.0.0 text, shared by every
/// subscriber whose version has the same shape for this action (all of them, unless the
/// action is `terminal/claimed` or `root/terminalsChanged`), and the pre-0.9 text, encoded on
/// first use only. Cost for a `terminal/data` envelope: one match on the action type.
pub struct Encodings<'a> {
    envelope: &'a ActionEnvelope,
    current: &'a Frame,
    older: Option<Frame>,
    differs: bool,
}

impl<'a> Encodings<'a> {
    /// `current` is `envelope` encoded as an `action` notification (1.0.0).
    pub fn new(envelope: &'a ActionEnvelope, current: &'a Frame) -> Self {
        Encodings {
            envelope,
            current,
            older: None,
            differs: action_differs(&envelope.action),
        }
    }

    /// The `action` notification for a subscriber speaking `wire`.
    pub fn text(&mut self, wire: Wire) -> Frame {
        if wire.is_current() || !self.differs {
            return self.current.clone();
        }
        // Every pre-0.9 shape encodes envelopes alike (`isPty` and `serverInfo` never
        // appear in one).
        self.older
            .get_or_insert_with(|| action_text(self.envelope, wire).into())
            .clone()
    }
}

/// Whether `action`'s JSON differs between 1.0.0 and the pre-0.9 shapes.
fn action_differs(action: &StateAction) -> bool {
    match action {
        StateAction::TerminalClaimed(_) | StateAction::RootTerminalsChanged(_) => true,
        StateAction::Unknown(raw) => matches!(
            raw.get("type").and_then(Value::as_str),
            Some("terminal/claimed" | "root/terminalsChanged")
        ),
        _ => false,
    }
}

/// `envelope` as an `action` notification for `wire` (e.g. a rejection echoed to its
/// dispatcher).
pub fn action_text(envelope: &ActionEnvelope, wire: Wire) -> String {
    if wire.is_current() || !action_differs(&envelope.action) {
        return message::action(envelope);
    }
    let mut v = to_json(envelope);
    envelope_json(&mut v, wire);
    message::notification("action", &v)
}

/// The `initialize` success response for `wire`.
pub fn initialize_response(
    id: &RawValue,
    result: &ahp_types::commands::InitializeResult,
    wire: Wire,
) -> String {
    if wire.is_current() {
        return message::success(id, result);
    }
    let mut v = to_json(result);
    if let Some(m) = v.as_object_mut() {
        if !wire.has_server_info() {
            m.remove("serverInfo");
        }
        m.remove("_meta");
        m.remove("automations");
    }
    for s in array_mut(&mut v, "snapshots") {
        snapshot_json(s, wire);
    }
    message::success(id, v)
}

/// A `subscribe` success response (`{snapshot}`) for `wire`.
pub fn subscribe_response(id: &RawValue, snapshot: Snapshot, wire: Wire) -> String {
    let result = ahp_types::commands::SubscribeResult {
        snapshot: Some(snapshot),
    };
    if wire.is_current() {
        return message::success(id, result);
    }
    let mut v = to_json(&result);
    if let Some(s) = v.get_mut("snapshot") {
        snapshot_json(s, wire);
    }
    message::success(id, v)
}

/// The JSON of a `reconnect` result (replay or snapshots) for `wire`.
pub fn reconnect_result_json(result: &ahp_types::commands::ReconnectResult, wire: Wire) -> String {
    if wire.is_current() {
        return serde_json::to_string(result).unwrap_or_default();
    }
    let mut v = to_json(result);
    for e in array_mut(&mut v, "actions") {
        envelope_json(e, wire);
    }
    for s in array_mut(&mut v, "snapshots") {
        snapshot_json(s, wire);
    }
    v.to_string()
}

/// A retained envelope's JSON (as a history keeps it) for a subscriber speaking `wire`: as it
/// is, or — for a pre-0.9 shape, when the action is one whose shape differs — translated.
pub fn envelope_for(json: &str, wire: Wire) -> Cow<'_, str> {
    let differs = json.contains(r#""type":"terminal/claimed""#)
        || json.contains(r#""type":"root/terminalsChanged""#);
    if wire.is_current() || !differs {
        return Cow::Borrowed(json);
    }
    match serde_json::from_str::<Value>(json) {
        Ok(mut v) => {
            envelope_json(&mut v, wire);
            Cow::Owned(v.to_string())
        }
        Err(_) => Cow::Borrowed(json),
    }
}

fn to_json<T: Serialize + ?Sized>(value: &T) -> Value {
    // Encoding the ahp-types structs (strings, integers, JSON values) cannot fail.
    serde_json::to_value(value).unwrap_or(Value::Null)
}

fn array_mut<'v>(v: &'v mut Value, key: &str) -> impl Iterator<Item = &'v mut Value> {
    v.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

/// An envelope's JSON, translated for a pre-0.9 `wire`.
fn envelope_json(envelope: &mut Value, wire: Wire) {
    let Some(action) = envelope.get_mut("action").and_then(Value::as_object_mut) else {
        return;
    };
    match action.get("type").and_then(Value::as_str) {
        Some("terminal/claimed") => {
            if let Some(claim) = action.get_mut("claim") {
                claim_json(claim, wire);
            }
        }
        Some("root/terminalsChanged") => {
            if let Some(list) = action.get_mut("terminals").and_then(Value::as_array_mut) {
                for info in list {
                    terminal_json(info, wire);
                }
            }
        }
        _ => {}
    }
}

/// A snapshot's JSON (`{resource, state, fromSeq}`), translated for a pre-0.9 `wire`.
fn snapshot_json(snapshot: &mut Value, wire: Wire) {
    let Some(state) = snapshot.get_mut("state") else {
        return;
    };
    // Root state has `agents`; terminal state has `content` (the untagged union of the
    // ahp-types crates tells them apart the same way).
    if state.get("agents").is_some() {
        for info in array_mut(state, "terminals") {
            terminal_json(info, wire);
        }
    } else if state.get("content").is_some() {
        terminal_json(state, wire);
    }
}

/// A `TerminalState` or `TerminalInfo`: `lifecycle` becomes `exitCode` (present once
/// exited), `isPty` goes where the version lacks it, the claim loses `chat`.
fn terminal_json(value: &mut Value, wire: Wire) {
    let Some(m) = value.as_object_mut() else {
        return;
    };
    if wire.has_lifecycle_and_chat() {
        return;
    }
    if let Some(lifecycle) = m.remove("lifecycle") {
        if lifecycle.get("status").and_then(Value::as_str) == Some("exited") {
            if let Some(code) = lifecycle.get("exitCode") {
                m.insert("exitCode".into(), code.clone());
            }
        }
    }
    if !wire.has_is_pty() {
        m.remove("isPty");
    }
    if let Some(claim) = m.get_mut("claim") {
        claim_json(claim, wire);
    }
}

fn claim_json(claim: &mut Value, wire: Wire) {
    if wire.has_lifecycle_and_chat() {
        return;
    }
    if let Some(m) = claim.as_object_mut() {
        if m.get("kind").and_then(Value::as_str) == Some("session") {
            m.remove("chat");
        }
    }
}

// ─── Client → host ───────────────────────────────────────────────────────────

/// The default chat URI of a session, `ahp-chat://default/<session URI in unpadded
/// base64url>`, as VS Code derives it.
pub fn default_chat_uri(session: &str) -> String {
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(session.as_bytes());
    format!("ahp-chat://default/{encoded}")
}

/// Gives a chat-less session claim from a pre-0.9 client a `chat` (docs/protocol.md,
/// "Decoding from a version before 0.9.0"): the current claim's if it names the same
/// session, else the session's [`default_chat_uri`]. Anything else is left as it is, to be
/// judged by the 1.0.0 validation.
pub fn upgrade_claim(claim: &mut Value, current: Option<&TerminalClaim>) {
    let Some(m) = claim.as_object_mut() else {
        return;
    };
    if m.get("kind").and_then(Value::as_str) != Some("session") || m.contains_key("chat") {
        return;
    }
    let Some(session) = m.get("session").and_then(Value::as_str) else {
        return;
    };
    let chat = match current {
        Some(TerminalClaim::Session(c)) if c.session == session => c.chat.clone(),
        _ => default_chat_uri(session),
    };
    m.insert("chat".into(), Value::String(chat));
}

/// [`upgrade_claim`] applied to a dispatched action (only `terminal/claimed` carries a claim).
pub fn upgrade_action(action: &mut Value, current: &TerminalClaim) {
    let Some(m) = action.as_object_mut() else {
        return;
    };
    if m.get("type").and_then(Value::as_str) == Some("terminal/claimed") {
        if let Some(claim) = m.get_mut("claim") {
            upgrade_claim(claim, Some(current));
        }
    }
}

/// [`upgrade_claim`] applied to `createTerminal` params.
pub fn upgrade_create_terminal(params: &mut Value) {
    if let Some(claim) = params.as_object_mut().and_then(|m| m.get_mut("claim")) {
        upgrade_claim(claim, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::actions::{
        RootTerminalsChangedAction, TerminalClaimedAction, TerminalDataAction,
    };
    use ahp_types::state::{
        TerminalClientClaim, TerminalExitedLifecycleState, TerminalInfo, TerminalLifecycleState,
        TerminalSessionClaim,
    };
    use serde_json::json;

    fn offers(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn negotiation_picks_the_highest_acceptable_offer() {
        let pick = |v: &[&str]| negotiate(&offers(v)).unwrap();
        assert_eq!(pick(&["1.0.0"]), Some(("1.0.0".into(), Wire::Current)));
        assert_eq!(pick(&["0.9.0"]), Some(("0.9.0".into(), Wire::Current)));
        assert_eq!(pick(&["1.3.7"]), Some(("1.3.7".into(), Wire::Current)));
        assert_eq!(pick(&["0.8.0"]), Some(("0.8.0".into(), Wire::V0_7_0)));
        assert_eq!(pick(&["0.7.4"]), Some(("0.7.4".into(), Wire::V0_7_0)));
        assert_eq!(pick(&["0.6.0"]), Some(("0.6.0".into(), Wire::V0_5_2)));
        assert_eq!(pick(&["0.5.2"]), Some(("0.5.2".into(), Wire::V0_5_2)));
        assert_eq!(pick(&["0.5.9"]), Some(("0.5.9".into(), Wire::V0_5_2)));
        assert_eq!(pick(&["0.5.1"]), Some(("0.5.1".into(), Wire::V0_5_0)));
        assert_eq!(pick(&["0.5.0"]), Some(("0.5.0".into(), Wire::V0_5_0)));
        // Highest wins whatever the order.
        assert_eq!(
            pick(&["0.5.2", "1.0.0", "0.8.0"]),
            Some(("1.0.0".into(), Wire::Current))
        );
        assert_eq!(
            pick(&["0.5.1", "0.8.0", "999.0.0"]),
            Some(("0.8.0".into(), Wire::V0_7_0))
        );
        for none in [
            &[][..],
            &["0.4.0"],
            &["0.1.0"],
            &["999.0.0"],
            &["2.0.0"],
            &["0.10.0"],
        ] {
            assert_eq!(pick(none), None, "{none:?}");
        }
        assert!(negotiate(&offers(&["1.0"])).is_err());
        assert!(negotiate(&offers(&["0.8.0", "01.0.0"])).is_err());
    }

    fn session_claim() -> TerminalClaim {
        TerminalClaim::Session(TerminalSessionClaim {
            session: "copilotcli:/s".into(),
            chat: "ahp-chat:/c".into(),
            turn_id: Some("t".into()),
            tool_call_id: None,
        })
    }

    fn envelope(action: StateAction) -> ActionEnvelope {
        ActionEnvelope {
            channel: "ahp-terminal:/1".into(),
            action,
            server_seq: 7,
            origin: None,
            rejection_reason: None,
        }
    }

    #[test]
    fn only_claims_and_the_terminal_list_are_translated_in_envelopes() {
        let data = envelope(StateAction::TerminalData(TerminalDataAction {
            data: "\"claim\":{\"kind\":\"session\",\"chat\":1}".into(),
        }));
        let text: Frame = message::action(&data).into();
        let mut enc = Encodings::new(&data, &text);
        assert_eq!(enc.text(Wire::V0_5_0).as_str(), text.as_str());
        assert!(enc.older.is_none(), "terminal/data is never re-encoded");

        let claimed = envelope(StateAction::TerminalClaimed(TerminalClaimedAction {
            claim: session_claim(),
        }));
        let text: Frame = message::action(&claimed).into();
        let mut enc = Encodings::new(&claimed, &text);
        assert_eq!(enc.text(Wire::Current).as_str(), text.as_str());
        let old: Value = serde_json::from_str(enc.text(Wire::V0_7_0).as_str()).unwrap();
        assert_eq!(
            old["params"]["action"]["claim"],
            json!({"kind":"session","session":"copilotcli:/s","turnId":"t"})
        );
        assert_eq!(old["params"]["serverSeq"], 7);

        let listed = envelope(StateAction::RootTerminalsChanged(
            RootTerminalsChangedAction {
                terminals: vec![TerminalInfo {
                    resource: "ahp-terminal:/1".into(),
                    title: "sh".into(),
                    claim: TerminalClaim::Client(TerminalClientClaim {
                        client_id: "c".into(),
                    }),
                    lifecycle: TerminalLifecycleState::Exited(TerminalExitedLifecycleState {
                        exit_code: Some(3),
                    }),
                }],
            },
        ));
        let old: Value = serde_json::from_str(&action_text(&listed, Wire::V0_5_0)).unwrap();
        assert_eq!(
            old["params"]["action"]["terminals"][0],
            json!({"resource":"ahp-terminal:/1","title":"sh",
                   "claim":{"kind":"client","clientId":"c"},"exitCode":3})
        );
    }

    #[test]
    fn terminal_state_per_version() {
        let running = json!({"title":"t","content":[],"lifecycle":{"status":"running"},
            "claim":{"kind":"session","session":"s:/1","chat":"c:/1"},"isPty":true});
        let mut v = running.clone();
        terminal_json(&mut v, Wire::V0_7_0);
        assert_eq!(
            v,
            json!({"title":"t","content":[],"claim":{"kind":"session","session":"s:/1"},"isPty":true})
        );
        let mut v = running.clone();
        terminal_json(&mut v, Wire::V0_5_2);
        assert!(v.get("isPty").is_none() && v.get("exitCode").is_none());
        let mut v = running.clone();
        terminal_json(&mut v, Wire::Current);
        assert_eq!(v, running);
        let mut exited = running;
        exited["lifecycle"] = json!({"status":"exited","exitCode":137});
        terminal_json(&mut exited, Wire::V0_5_0);
        assert_eq!(exited["exitCode"], 137);
        assert!(exited.get("lifecycle").is_none());
    }

    #[test]
    fn chat_less_claims_get_a_chat() {
        let mut c = json!({"kind":"session","session":"copilotcli:/abc"});
        upgrade_claim(&mut c, None);
        assert_eq!(c["chat"], "ahp-chat://default/Y29waWxvdGNsaTovYWJj");
        // Same session: the current chat is kept (a narrowing stays a narrowing).
        let mut c = json!({"kind":"session","session":"copilotcli:/s","turnId":"t"});
        upgrade_claim(&mut c, Some(&session_claim()));
        assert_eq!(c["chat"], "ahp-chat:/c");
        // Another session: its default chat.
        let mut c = json!({"kind":"session","session":"copilotcli:/other"});
        upgrade_claim(&mut c, Some(&session_claim()));
        assert_eq!(c["chat"], default_chat_uri("copilotcli:/other"));
        // Claims that carry a chat, client claims and malformed ones are untouched.
        for keep in [
            json!({"kind":"session","session":"s:/1","chat":"c:/9"}),
            json!({"kind":"client","clientId":"x"}),
            json!({"kind":"session"}),
            json!({"kind":"robot","session":"s:/1"}),
        ] {
            let mut c = keep.clone();
            upgrade_claim(&mut c, None);
            assert_eq!(c, keep);
        }
        let mut a =
            json!({"type":"terminal/claimed","claim":{"kind":"session","session":"copilotcli:/s"}});
        upgrade_action(&mut a, &session_claim());
        assert_eq!(a["claim"]["chat"], "ahp-chat:/c");
    }
}
