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

/// Parses one frame's text.
///
/// Not JSON → -32700; not a JSON-RPC 2.0 object (arrays/batches included), a bad `jsonrpc`,
/// `id` or `method` → -32600; `params` present but not an object → -32602.
pub fn parse(text: &str) -> Incoming {
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
