//! JSON-RPC 2.0 framing: one message per WebSocket frame.
//!
//! Incoming frames are parsed as raw JSON so that request ids are echoed exactly as received —
//! strings, and numbers byte for byte (`1e2` stays `1e2`, a 30-digit number is not rounded);
//! the typed `ahp-types` message enum would drop string ids. Outgoing
//! messages reuse the `ahp-types` version and error types. Touches no state.

use ahp_types::actions::ActionEnvelope;
use ahp_types::messages::{JsonRpcError, JsonRpcVersion};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::error::RpcError;

/// A request id, kept as the exact JSON text the peer sent (a number or a string, or `null`
/// when unknown).
pub type RequestId = Box<RawValue>;

/// The id of an answer to a message whose id could not be read.
pub fn null_id() -> RequestId {
    RawValue::NULL.to_owned()
}

/// Reads `id` from the frame's text without interpreting it.
#[derive(Deserialize)]
struct RawId<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
}

/// The id's exact text, falling back to re-encoding `value` (e.g. with duplicate `id` keys).
fn exact_id(text: &str, value: &Value) -> RequestId {
    serde_json::from_str::<RawId>(text)
        .ok()
        .and_then(|r| r.id)
        .map(RawValue::to_owned)
        .or_else(|| serde_json::value::to_raw_value(value).ok())
        .unwrap_or_else(null_id)
}

/// One parsed incoming message.
#[derive(Debug, Clone)]
pub enum Incoming {
    /// A request: must be answered with the same `id`.
    Request {
        /// The id exactly as received (number or string).
        id: RequestId,
        /// Method name.
        method: String,
        /// Params object (`{}` when absent).
        params: Value,
    },
    /// A notification: never answered.
    Notification {
        /// Method name.
        method: String,
        /// Params object (`{}` when absent).
        params: Value,
    },
    /// A response from the peer (ahpty sends no requests, so these are ignored).
    Response,
    /// Malformed: answer with `error` under `id` (`null` when the id is unknown).
    Invalid {
        /// The id if one could be read, else `null`.
        id: RequestId,
        /// -32700 or -32600.
        error: RpcError,
    },
}

/// Rewrites every `\uXXXX` escape of a lone UTF-16 surrogate (a high surrogate not followed
/// by a low one, or a low one on its own) into `\uFFFD`, which the JSON parser would otherwise
/// refuse for the whole message. One pass over the text; borrowed when there is none.
pub fn replace_lone_surrogates(text: &str) -> std::borrow::Cow<'_, str> {
    fn escape_at(b: &[u8], i: usize) -> Option<u16> {
        let hex = b.get(i..i + 6)?;
        if hex[0] != b'\\' || hex[1] != b'u' {
            return None;
        }
        u16::from_str_radix(std::str::from_utf8(&hex[2..]).ok()?, 16).ok()
    }
    let b = text.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        let Some(unit) = escape_at(b, i) else {
            // Any other escape: skip the escaped character (it may be a backslash).
            i += 2;
            continue;
        };
        let lone = match unit {
            0xD800..=0xDBFF => {
                if escape_at(b, i + 6).is_some_and(|u| (0xDC00..=0xDFFF).contains(&u)) {
                    i += 12;
                    continue;
                }
                true
            }
            0xDC00..=0xDFFF => true,
            _ => false,
        };
        if lone {
            let s = out.get_or_insert_with(|| String::with_capacity(text.len()));
            s.push_str(&text[copied..i]);
            s.push_str("\\uFFFD");
            copied = i + 6;
        }
        i += 6;
    }
    match out {
        None => std::borrow::Cow::Borrowed(text),
        Some(mut s) => {
            s.push_str(&text[copied..]);
            std::borrow::Cow::Owned(s)
        }
    }
}

/// Parses one frame's text.
///
/// Not JSON → -32700; not a JSON-RPC 2.0 object (arrays/batches included), a bad `jsonrpc`,
/// `id` or `method` → -32600; `params` present but not an object → -32602. Lone surrogate
/// escapes (`"\ud800"`) are read as U+FFFD (see [`replace_lone_surrogates`]).
pub fn parse(text: &str) -> Incoming {
    let text = replace_lone_surrogates(text);
    let text = text.as_ref();
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return Incoming::Invalid {
                id: null_id(),
                error: RpcError::parse_error(format!("parse error: {e}")),
            }
        }
    };
    let Value::Object(mut obj) = value else {
        let what = if value.is_array() {
            "batches (JSON arrays) are not supported; send one JSON-RPC object per frame"
        } else {
            "a JSON-RPC message must be a JSON object"
        };
        return Incoming::Invalid {
            id: null_id(),
            error: RpcError::invalid_request(what),
        };
    };
    let id = obj.remove("id");
    let id_ok = matches!(&id, None | Some(Value::Number(_)) | Some(Value::String(_)));
    let echo_id = match &id {
        Some(v @ (Value::Number(_) | Value::String(_))) => exact_id(text, v),
        _ => null_id(),
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Incoming::Invalid {
            id: echo_id,
            error: RpcError::invalid_request("\"jsonrpc\" must be \"2.0\""),
        };
    }
    if !id_ok {
        return Incoming::Invalid {
            id: null_id(),
            error: RpcError::invalid_request("\"id\" must be a number or a string"),
        };
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        None if obj.contains_key("result") || obj.contains_key("error") => {
            return Incoming::Response
        }
        _ => {
            return Incoming::Invalid {
                id: echo_id,
                error: RpcError::invalid_request("\"method\" must be a string"),
            }
        }
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(p @ Value::Object(_)) => p,
        Some(_) => {
            if id.is_none() {
                // A notification cannot be answered; drop it as malformed.
                return Incoming::Response;
            }
            return Incoming::Invalid {
                id: echo_id,
                error: RpcError::invalid_params("\"params\" must be an object"),
            };
        }
    };
    match id {
        Some(_) => Incoming::Request {
            id: echo_id,
            method,
            params,
        },
        None => Incoming::Notification { method, params },
    }
}

#[derive(Serialize)]
struct SuccessResponse<'a, R: Serialize> {
    jsonrpc: JsonRpcVersion,
    id: &'a RawValue,
    result: R,
}

#[derive(Serialize)]
struct ErrorResponse<'a> {
    jsonrpc: JsonRpcVersion,
    id: &'a RawValue,
    error: JsonRpcError,
}

#[derive(Serialize)]
struct Notification<'a, P: Serialize> {
    jsonrpc: JsonRpcVersion,
    method: &'a str,
    params: P,
}

/// `{"jsonrpc":"2.0","id":<id>,"result":<result>}`.
pub fn success(id: &RawValue, result: impl Serialize) -> String {
    let msg = SuccessResponse {
        jsonrpc: JsonRpcVersion::V2,
        id,
        result,
    };
    serde_json::to_string(&msg).unwrap_or_else(|e| {
        error(
            id,
            &RpcError::internal(format!("cannot encode result: {e}")),
        )
    })
}

/// `{"jsonrpc":"2.0","id":<id>,"error":{code,message,data?}}`.
pub fn error(id: &RawValue, err: &RpcError) -> String {
    let msg = ErrorResponse {
        jsonrpc: JsonRpcVersion::V2,
        id,
        error: JsonRpcError {
            code: err.code,
            message: err.message.clone(),
            data: err.data.clone(),
        },
    };
    // Encoding strings, integers and JSON values cannot fail.
    serde_json::to_string(&msg).unwrap_or_default()
}

/// [`action`] for an envelope whose `action` was already encoded as `action_json` (outside
/// the host lock, for a large input echo); the result is the same text.
pub fn action_encoded(envelope: &ActionEnvelope, action_json: &str) -> String {
    let extra = 160 + envelope.channel.len();
    let mut out = String::with_capacity(action_json.len() + extra);
    out.push_str(r#"{"jsonrpc":"2.0","method":"action","params":{"channel":"#);
    out.push_str(&serde_json::to_string(&envelope.channel).unwrap_or_default());
    out.push_str(r#","action":"#);
    out.push_str(action_json);
    out.push_str(r#","serverSeq":"#);
    out.push_str(&envelope.server_seq.to_string());
    if let Some(origin) = &envelope.origin {
        out.push_str(r#","origin":"#);
        out.push_str(&serde_json::to_string(origin).unwrap_or_default());
    }
    if let Some(reason) = &envelope.rejection_reason {
        out.push_str(r#","rejectionReason":"#);
        out.push_str(&serde_json::to_string(reason).unwrap_or_default());
    }
    out.push_str("}}");
    out
}

/// The server → client `action` notification whose params are the envelope.
pub fn action(envelope: &ActionEnvelope) -> String {
    notification("action", envelope)
}

/// `{"jsonrpc":"2.0","method":<method>,"params":<params>}`.
pub fn notification(method: &str, params: impl Serialize) -> String {
    let msg = Notification {
        jsonrpc: JsonRpcVersion::V2,
        method,
        params,
    };
    serde_json::to_string(&msg).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_echoed_verbatim() {
        for id in [
            "1",
            "\"a-1\"",
            "18446744073709551615",
            "-3",
            "1e2",
            "-0",
            "123456789012345678901234567890",
            "1.50",
            "\"\\u00e9\"",
        ] {
            let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            match parse(&text) {
                Incoming::Request { id: got, .. } => {
                    assert_eq!(got.get(), id);
                    let out = success(&got, ());
                    assert_eq!(
                        out,
                        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":null}}"#)
                    );
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn malformed_frames_get_the_right_codes() {
        let code = |t: &str| match parse(t) {
            Incoming::Invalid { error, .. } => error.code,
            other => panic!("{t}: {other:?}"),
        };
        assert_eq!(code("{"), -32700);
        assert_eq!(code("[]"), -32600);
        assert_eq!(
            code(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#),
            -32600
        );
        assert_eq!(code("42"), -32600);
        assert_eq!(code(r#"{"id":1,"method":"ping"}"#), -32600);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#), -32600);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":5}"#), -32600);
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}"#),
            -32602
        );
    }

    #[test]
    fn pre_encoded_actions_give_the_same_text() {
        use ahp_types::actions::{ActionOrigin, StateAction, TerminalInputAction};
        let mut envelope = ActionEnvelope {
            channel: "ahp-terminal:/\"q\"".into(),
            action: StateAction::TerminalInput(TerminalInputAction {
                data: "x\u{1}\"é".into(),
            }),
            server_seq: 42,
            origin: Some(ActionOrigin {
                client_id: "c".into(),
                client_seq: 7,
            }),
            rejection_reason: None,
        };
        let encoded = serde_json::to_string(&envelope.action).unwrap();
        assert_eq!(action_encoded(&envelope, &encoded), action(&envelope));
        envelope.origin = None;
        envelope.rejection_reason = Some("no".into());
        assert_eq!(action_encoded(&envelope, &encoded), action(&envelope));
    }

    #[test]
    fn lone_surrogates_become_replacement_characters() {
        let fixed = |t: &str| replace_lone_surrogates(t).into_owned();
        assert_eq!(fixed(r#""a\ud800b""#), r#""a\uFFFDb""#);
        assert_eq!(fixed(r#""\udc00""#), r#""\uFFFD""#);
        assert_eq!(fixed(r#""\ud800\ud800\udc00""#), r#""\uFFFD\ud800\udc00""#);
        assert_eq!(
            fixed(r#""\ud83d\ude00 \u00e9""#),
            r#""\ud83d\ude00 \u00e9""#
        );
        // An escaped backslash followed by text is not an escape.
        assert_eq!(fixed(r#""\\ud800""#), r#""\\ud800""#);
        assert_eq!(fixed(r#""\ud800"#), r#""\uFFFD"#);
        assert!(matches!(
            replace_lone_surrogates(r#"{"a":"\u00e9"}"#),
            std::borrow::Cow::Borrowed(_)
        ));
        match parse(r#"{"jsonrpc":"2.0","method":"x","params":{"d":"\ud800!"}}"#) {
            Incoming::Notification { params, .. } => assert_eq!(params["d"], "\u{fffd}!"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn notifications_and_responses() {
        assert!(matches!(
            parse(r#"{"jsonrpc":"2.0","method":"unsubscribe","params":{"channel":"x:/1"}}"#),
            Incoming::Notification { .. }
        ));
        assert!(matches!(
            parse(r#"{"jsonrpc":"2.0","id":1,"result":null}"#),
            Incoming::Response
        ));
    }
}
