//! Validation of client-dispatched actions, judged from the raw JSON (notes §7.2): the typed
//! decoder turns a malformed known action into `Unknown`, so shape checks happen here first.
//! Also the claim policy (decision D6). Pure functions; the host applies the verdicts.

use ahp_types::actions::StateAction;
use ahp_types::state::{TerminalClaim, TerminalSessionClaim};
use serde_json::Value;

use crate::terminal::MAX_DIMENSION;

/// Longest title a client may set, in characters.
pub const MAX_TITLE_CHARS: usize = 4096;

const SERVER_ONLY_TERMINAL: &[&str] = &[
    "terminal/data",
    "terminal/cwdChanged",
    "terminal/exited",
    "terminal/commandDetectionAvailable",
    "terminal/commandExecuted",
    "terminal/commandFinished",
];

const SERVER_ONLY_ROOT: &[&str] = &[
    "root/agentsChanged",
    "root/activeSessionsChanged",
    "root/terminalsChanged",
];

/// Checks an action dispatched to a terminal channel. `Ok` holds the typed action; `Err` the
/// `rejectionReason`. Claim policy is checked separately ([`check_claim_transfer`]).
pub fn terminal_action(raw: &Value) -> Result<StateAction, String> {
    let obj = raw
        .as_object()
        .ok_or_else(|| "action must be a JSON object".to_string())?;
    let ty = obj
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| "action.type must be a string".to_string())?;
    match ty {
        "terminal/input" => {
            require_string(obj, "data")?;
        }
        "terminal/resized" => {
            dimension(obj, "cols")?;
            dimension(obj, "rows")?;
        }
        "terminal/titleChanged" => {
            let title = require_string(obj, "title")?;
            if title.chars().count() > MAX_TITLE_CHARS {
                return Err(format!("title is longer than {MAX_TITLE_CHARS} characters"));
            }
        }
        "terminal/cleared" => {}
        "terminal/claimed" => {
            let claim = obj
                .get("claim")
                .ok_or_else(|| "terminal/claimed needs a claim".to_string())?;
            parse_claim(claim)?;
        }
        t if SERVER_ONLY_TERMINAL.contains(&t) => {
            return Err(format!("{t} is a server-only action"));
        }
        t if t.starts_with("root/") => {
            return Err(format!("{t} cannot be dispatched to a terminal channel"));
        }
        t => return Err(format!("unknown action type {t:?} for a terminal channel")),
    }
    typed(raw, ty)
}

/// The `rejectionReason` for an action dispatched to `ahp-root://`: ahpty has no root
/// configuration, so `root/configChanged` is refused like server-only and unknown types.
pub fn root_action_rejection(raw: &Value) -> String {
    let Some(ty) = raw
        .as_object()
        .and_then(|o| o.get("type"))
        .and_then(Value::as_str)
    else {
        return "action.type must be a string".into();
    };
    match ty {
        "root/configChanged" => {
            "ahpty has no root configuration; root/configChanged is not accepted".into()
        }
        t if SERVER_ONLY_ROOT.contains(&t) => format!("{t} is a server-only action"),
        t if t.starts_with("terminal/") => {
            format!("{t} must be dispatched to a terminal channel, not ahp-root://")
        }
        t => format!("unknown action type {t:?} for the root channel"),
    }
}

/// A title (client rename or `createTerminal.name`): at most [`MAX_TITLE_CHARS`] characters.
pub fn check_title(title: &str) -> Result<(), String> {
    if title.chars().count() > MAX_TITLE_CHARS {
        return Err(format!("title is longer than {MAX_TITLE_CHARS} characters"));
    }
    Ok(())
}

/// Decodes a claim, requiring the 1.0.0 shape (a session claim needs `session` and `chat`).
pub fn parse_claim(raw: &Value) -> Result<TerminalClaim, String> {
    let obj = raw
        .as_object()
        .ok_or_else(|| "claim must be an object".to_string())?;
    match obj.get("kind").and_then(Value::as_str) {
        Some("client") => {
            require_string(obj, "clientId")?;
        }
        Some("session") => {
            require_string(obj, "session")?;
            require_string(obj, "chat")?;
            optional_string(obj, "turnId")?;
            optional_string(obj, "toolCallId")?;
        }
        Some(k) => {
            return Err(format!(
                "claim.kind {k:?} is neither \"client\" nor \"session\""
            ))
        }
        None => return Err("claim.kind must be \"client\" or \"session\"".into()),
    }
    serde_json::from_value(raw.clone()).map_err(|e| format!("malformed claim: {e}"))
}

/// Decision D6 with its take-over extension: may the client `dispatcher` replace `current`
/// (held by `holder`, who has a live connection iff `holder_connected`) with `new`?
/// The holder may transfer to anything; anyone may take a claim whose holder has no live
/// connection (an agent that went away); anyone may narrow a session claim (same session and
/// chat, `turnId`/`toolCallId` kept or dropped — the detach flow). Err is the
/// `rejectionReason`, naming the holder.
pub fn check_claim_transfer(
    current: &TerminalClaim,
    holder: &str,
    holder_connected: bool,
    dispatcher: &str,
    new: &TerminalClaim,
) -> Result<(), String> {
    if dispatcher == holder || !holder_connected {
        return Ok(());
    }
    if let (TerminalClaim::Session(cur), TerminalClaim::Session(next)) = (current, new) {
        if narrows(cur, next) {
            return Ok(());
        }
    }
    Err(format!(
        "terminal is held by client {holder:?}, which is connected; only the holder may \
         transfer the claim (others may narrow a session claim, or take the claim once its \
         holder has no connection)"
    ))
}

fn narrows(cur: &TerminalSessionClaim, next: &TerminalSessionClaim) -> bool {
    let kept_or_dropped = |c: &Option<String>, n: &Option<String>| n.is_none() || n == c;
    cur.session == next.session
        && cur.chat == next.chat
        && kept_or_dropped(&cur.turn_id, &next.turn_id)
        && kept_or_dropped(&cur.tool_call_id, &next.tool_call_id)
        && !(next.turn_id.is_none() && next.tool_call_id.is_some())
}

fn typed(raw: &Value, ty: &str) -> Result<StateAction, String> {
    match serde_json::from_value::<StateAction>(raw.clone()) {
        Ok(StateAction::Unknown(_)) | Err(_) => Err(format!("malformed {ty} action")),
        Ok(a) => Ok(a),
    }
}

fn require_string<'a>(
    obj: &'a serde_json::Map<String, Value>,
    key: &str,
) -> Result<&'a str, String> {
    match obj.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(format!("{key} must be a string")),
        None => Err(format!("missing field {key}")),
    }
}

fn optional_string(obj: &serde_json::Map<String, Value>, key: &str) -> Result<(), String> {
    match obj.get(key) {
        None | Some(Value::String(_)) => Ok(()),
        Some(_) => Err(format!("{key} must be a string")),
    }
}

/// A `cols`/`rows` value: a JSON integer in `1..=MAX_DIMENSION`.
pub fn dimension(obj: &serde_json::Map<String, Value>, key: &str) -> Result<u16, String> {
    let v = obj.get(key).ok_or_else(|| format!("missing field {key}"))?;
    dimension_value(key, v)
}

/// See [`dimension`].
pub fn dimension_value(key: &str, v: &Value) -> Result<u16, String> {
    let n = v
        .as_i64()
        .filter(|_| v.is_i64() || v.is_u64())
        .ok_or_else(|| format!("{key} must be an integer, got {v}"))?;
    if !(1..=MAX_DIMENSION).contains(&n) {
        return Err(format!(
            "{key} must be between 1 and {MAX_DIMENSION}, got {n}"
        ));
    }
    u16::try_from(n).map_err(|_| format!("{key} out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resize_values() {
        for bad in [
            json!({"type":"terminal/resized","cols":0,"rows":0}),
            json!({"type":"terminal/resized","cols":-1,"rows":5}),
            json!({"type":"terminal/resized","cols":1e9,"rows":24}),
            json!({"type":"terminal/resized","cols":1000000000,"rows":24}),
            json!({"type":"terminal/resized","cols":"80","rows":24}),
            json!({"type":"terminal/resized","cols":80.5,"rows":24}),
            json!({"type":"terminal/resized","cols":80}),
        ] {
            assert!(terminal_action(&bad).is_err(), "{bad}");
        }
        assert!(terminal_action(&json!({"type":"terminal/resized","cols":73,"rows":19})).is_ok());
    }

    #[test]
    fn families_and_server_only() {
        assert!(terminal_action(&json!({"type":"terminal/data","data":"x"})).is_err());
        assert!(terminal_action(&json!({"type":"terminal/nope"})).is_err());
        assert!(terminal_action(&json!({"type":"root/configChanged","config":{}})).is_err());
        assert!(terminal_action(&json!({"type":"terminal/input"})).is_err());
        assert!(terminal_action(&json!({"type":"terminal/input","data":3})).is_err());
        assert!(terminal_action(&json!("x")).is_err());
        assert!(terminal_action(&json!({"type":"terminal/cleared"})).is_ok());
        assert!(
            root_action_rejection(&json!({"type":"root/terminalsChanged","terminals":[]}))
                .contains("server-only")
        );
    }

    #[test]
    fn claims() {
        let bad = json!({"type":"terminal/claimed","claim":{"kind":"session","session":"ahp-session:/s"}});
        assert!(terminal_action(&bad).is_err());
        let tool = parse_claim(
            &json!({"kind":"session","session":"s:/1","chat":"c:/1","turnId":"t","toolCallId":"x"}),
        )
        .unwrap();
        let bg = parse_claim(&json!({"kind":"session","session":"s:/1","chat":"c:/1"})).unwrap();
        let other = parse_claim(&json!({"kind":"session","session":"s:/2","chat":"c:/1"})).unwrap();
        let client = parse_claim(&json!({"kind":"client","clientId":"b"})).unwrap();
        assert!(check_claim_transfer(&tool, "a", true, "b", &bg).is_ok());
        assert!(check_claim_transfer(&bg, "a", true, "b", &tool).is_err());
        assert!(check_claim_transfer(&tool, "a", true, "b", &other).is_err());
        assert!(check_claim_transfer(&tool, "a", true, "b", &client).is_err());
        assert!(check_claim_transfer(&tool, "a", true, "a", &client).is_ok());
        // A holder without a live connection gives the claim up to anyone.
        assert!(check_claim_transfer(&tool, "a", false, "b", &client).is_ok());
        assert!(check_claim_transfer(&bg, "a", false, "b", &other).is_ok());
        let refused = check_claim_transfer(&client, "a", true, "b", &client).unwrap_err();
        assert!(refused.contains("\"a\""), "{refused}");
    }
}
