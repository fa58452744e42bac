//! Validation of client-dispatched actions, judged from the raw JSON: the typed decoder turns
//! a malformed known action into `Unknown`, so shape checks happen here first. Also the claim
//! policy (decision D6) and the length caps on everything a peer can make the daemon keep
//! (URIs, ids, titles) or echo back (rejected actions). Pure functions; the host applies the
//! verdicts.

use std::collections::HashSet;

use ahp_types::actions::StateAction;
use ahp_types::state::{TerminalClaim, TerminalSessionClaim};
use serde_json::{json, Value};

// Titles a client sets (`terminal/titleChanged`, `createTerminal.name`) have the same cap,
// in characters, as titles set by escape sequences.
use crate::terminal::shell_integration::{sanitize_title, MAX_TITLE_CHARS};
use crate::terminal::MAX_DIMENSION;

/// Longest URI accepted anywhere (channels, `initialSubscriptions` and `reconnect` entries,
/// a session claim's `session` and `chat`), in bytes.
pub const MAX_URI_BYTES: usize = 2048;

/// Longest identifier accepted (`clientId`, and a claim's `clientId`, `turnId`, `toolCallId`),
/// in bytes.
pub const MAX_ID_BYTES: usize = 256;

/// Largest rejected action echoed back verbatim in its rejection envelope, in bytes of JSON
/// (estimated); a larger one is echoed as `{"type": …}` only.
pub const MAX_ECHOED_ACTION_BYTES: usize = 4096;

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
            check_title(require_string(obj, "title")?)?;
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
    let mut action = typed(raw, ty)?;
    if let StateAction::TerminalTitleChanged(change) = &mut action {
        change.title = sanitize_title(&change.title);
    }
    Ok(action)
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
/// Control characters are then removed with [`sanitize_title`], as for titles set by escape
/// sequences.
pub fn check_title(title: &str) -> Result<(), String> {
    if title.chars().nth(MAX_TITLE_CHARS).is_some() {
        return Err(format!("title is longer than {MAX_TITLE_CHARS} characters"));
    }
    Ok(())
}

/// `value` of `field` is at most `max` bytes; the error names the field and the limit (never
/// the value).
pub fn check_len(field: &str, value: &str, max: usize) -> Result<(), String> {
    if value.len() > max {
        return Err(format!(
            "{field} is longer than {max} bytes ({} bytes)",
            value.len()
        ));
    }
    Ok(())
}

/// A list of channel URIs (`initialSubscriptions`, `reconnect.subscriptions`): at most
/// `max_entries` entries, each at most [`MAX_URI_BYTES`]. Returns the distinct entries in order.
pub fn channel_list<'a>(
    field: &str,
    list: &'a [String],
    max_entries: usize,
) -> Result<Vec<&'a str>, String> {
    if list.len() > max_entries {
        return Err(format!(
            "{field} has {} entries; at most {max_entries} are accepted (twice \
             --max-subscriptions)",
            list.len()
        ));
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (i, uri) in list.iter().enumerate() {
        check_len(&format!("{field}[{i}]"), uri, MAX_URI_BYTES)?;
        if seen.insert(uri.as_str()) {
            out.push(uri.as_str());
        }
    }
    Ok(out)
}

/// What a rejection envelope echoes of the rejected `action`: the action itself when its JSON
/// is at most [`MAX_ECHOED_ACTION_BYTES`], else only its `type` (when that is a short string),
/// so a rejection never sends megabytes back.
pub fn rejection_echo(action: Value) -> Value {
    if json_size(&action, MAX_ECHOED_ACTION_BYTES) <= MAX_ECHOED_ACTION_BYTES {
        return action;
    }
    match action.get("type").and_then(Value::as_str) {
        Some(t) if t.len() <= MAX_ID_BYTES => json!({ "type": t }),
        _ => json!({}),
    }
}

/// Roughly the size of `v` as JSON, in bytes (strings without escapes); stops counting once
/// past `limit`.
fn json_size(v: &Value, limit: usize) -> usize {
    match v {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 24,
        Value::String(s) => s.len() + 2,
        Value::Array(a) => {
            let mut n = 2;
            for x in a {
                n += json_size(x, limit) + 1;
                if n > limit {
                    break;
                }
            }
            n
        }
        Value::Object(o) => {
            let mut n = 2;
            for (k, x) in o {
                n += k.len() + 4 + json_size(x, limit);
                if n > limit {
                    break;
                }
            }
            n
        }
    }
}

/// Decodes a claim, requiring the 1.0.0 shape (a session claim needs `session` and `chat`).
pub fn parse_claim(raw: &Value) -> Result<TerminalClaim, String> {
    let obj = raw
        .as_object()
        .ok_or_else(|| "claim must be an object".to_string())?;
    match obj.get("kind").and_then(Value::as_str) {
        Some("client") => {
            check_len(
                "claim.clientId",
                require_string(obj, "clientId")?,
                MAX_ID_BYTES,
            )?;
        }
        Some("session") => {
            check_len(
                "claim.session",
                require_string(obj, "session")?,
                MAX_URI_BYTES,
            )?;
            check_len("claim.chat", require_string(obj, "chat")?, MAX_URI_BYTES)?;
            for key in ["turnId", "toolCallId"] {
                if let Some(v) = optional_string(obj, key)? {
                    check_len(&format!("claim.{key}"), v, MAX_ID_BYTES)?;
                }
            }
        }
        Some(k) => {
            return Err(format!(
                "claim.kind {:?} is neither \"client\" nor \"session\"",
                crate::codec::clip(k.to_string(), 64)
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

fn optional_string<'a>(
    obj: &'a serde_json::Map<String, Value>,
    key: &str,
) -> Result<Option<&'a str>, String> {
    match obj.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
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
