//! JSON-RPC 2.0 framing of incoming messages: one message per WebSocket frame.
//!
//! Incoming frames are parsed as raw JSON so that request ids are echoed exactly as received —
//! strings, and numbers byte for byte (`1e2` stays `1e2`, a 30-digit number is not rounded);
//! the typed `ahp-types` message enum would drop string ids. What the daemon sends is encoded
//! by [`crate::codec`]; [`error`] is the one answer built from this layer's [`RpcError`].
//! Touches no state.

use ahp_types::messages::JsonRpcError;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::error::RpcError;
use crate::codec;

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
    /// A notification whose `params` is not an object: it cannot be answered, so it is dropped
    /// (and logged at debug level).
    MalformedNotification {
        /// Method name.
        method: String,
        /// What is wrong with it (-32602).
        error: RpcError,
    },
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
            let error = RpcError::invalid_params("\"params\" must be an object");
            if id.is_none() {
                return Incoming::MalformedNotification { method, error };
            }
            return Incoming::Invalid { id: echo_id, error };
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

/// `{"jsonrpc":"2.0","id":<id>,"error":{code,message,data?}}`.
pub fn error(id: &RawValue, err: &RpcError) -> String {
    codec::error(
        id,
        JsonRpcError {
            code: err.code,
            message: err.message.clone(),
            data: err.data.clone(),
        },
    )
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
                    let out = codec::success(&got, ());
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
        match parse(r#"{"jsonrpc":"2.0","method":"unsubscribe","params":[1]}"#) {
            Incoming::MalformedNotification { method, error } => {
                assert_eq!((method.as_str(), error.code), ("unsubscribe", -32602));
            }
            other => panic!("{other:?}"),
        }
    }
}
