//! JSON-RPC 2.0 framing: one message per WebSocket frame.
//!
//! Incoming frames are parsed as raw JSON so that request ids are echoed exactly as received
//! (numbers and strings; the typed `ahp-types` message enum would drop string ids). Outgoing
//! messages reuse the `ahp-types` version and error types. Touches no state.

use ahp_types::actions::ActionEnvelope;
use ahp_types::messages::{JsonRpcError, JsonRpcVersion};
use serde::Serialize;
use serde_json::{Map, Value};

use super::error::RpcError;

/// One parsed incoming message.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A request: must be answered with the same `id`.
    Request {
        /// The id exactly as received (number or string).
        id: Value,
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
        id: Value,
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
                id: Value::Null,
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
            id: Value::Null,
            error: RpcError::invalid_request(what),
        };
    };
    let id = obj.remove("id");
    let id_ok = matches!(&id, None | Some(Value::Number(_)) | Some(Value::String(_)));
    let echo_id = match &id {
        Some(v @ (Value::Number(_) | Value::String(_))) => v.clone(),
        _ => Value::Null,
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Incoming::Invalid {
            id: echo_id,
            error: RpcError::invalid_request("\"jsonrpc\" must be \"2.0\""),
        };
    }
    if !id_ok {
        return Incoming::Invalid {
            id: Value::Null,
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
        Some(id) => Incoming::Request { id, method, params },
        None => Incoming::Notification { method, params },
    }
}

#[derive(Serialize)]
struct SuccessResponse<'a, R: Serialize> {
    jsonrpc: JsonRpcVersion,
    id: &'a Value,
    result: R,
}

#[derive(Serialize)]
struct ErrorResponse<'a> {
    jsonrpc: JsonRpcVersion,
    id: &'a Value,
    error: JsonRpcError,
}

#[derive(Serialize)]
struct Notification<'a, P: Serialize> {
    jsonrpc: JsonRpcVersion,
    method: &'a str,
    params: P,
}

/// `{"jsonrpc":"2.0","id":<id>,"result":<result>}`.
pub fn success(id: &Value, result: impl Serialize) -> String {
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
pub fn error(id: &Value, err: &RpcError) -> String {
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
    let msg = Notification {
        jsonrpc: JsonRpcVersion::V2,
        method: "action",
        params: envelope,
    };
    serde_json::to_string(&msg).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_are_echoed_verbatim() {
        for id in [
            json!(1),
            json!("a-1"),
            json!(18446744073709551615u64),
            json!(-3),
        ] {
            let text = json!({"jsonrpc":"2.0","id":id,"method":"ping"}).to_string();
            match parse(&text) {
                Incoming::Request { id: got, .. } => {
                    assert_eq!(got, id);
                    let out: Value = serde_json::from_str(&success(&got, ())).unwrap();
                    assert_eq!(out["id"], id);
                    assert_eq!(out["result"], Value::Null);
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
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","id":1,"result":null}"#),
            Incoming::Response
        );
    }
}
