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

/// How every `action` notification starts; the envelope follows, then the closing `}`.
const ACTION_PREFIX: &str = r#"{"jsonrpc":"2.0","method":"action","params":"#;

/// The envelope (`params`) of an `action` notification produced by [`action`] or
/// [`data_action`], as JSON text.
pub fn action_params(notification: &str) -> &str {
    notification
        .strip_prefix(ACTION_PREFIX)
        .and_then(|rest| rest.strip_suffix('}'))
        .unwrap_or(notification)
}

/// The `action` notification of a server-originated `terminal/data` envelope whose `data` is
/// the concatenation of `pieces`: byte for byte what [`action`] makes of the same envelope,
/// without building it (the pieces are escaped straight into the frame).
pub fn data_action(channel: &str, server_seq: u64, pieces: &[String]) -> String {
    let len: usize = pieces.iter().map(String::len).sum();
    let mut out = String::with_capacity(len + len / 32 + channel.len() + 128);
    out.push_str(ACTION_PREFIX);
    out.push_str(r#"{"channel":""#);
    push_escaped(&mut out, channel);
    out.push_str(r#"","action":{"type":"terminal/data","data":""#);
    for p in pieces {
        push_escaped(&mut out, p);
    }
    out.push_str(r#""},"serverSeq":"#);
    out.push_str(&server_seq.to_string());
    out.push_str("}}");
    out
}

/// `{"jsonrpc":"2.0","id":<id>,"result":<result>}` for a result already encoded as JSON: the
/// same bytes [`success`] produces for the decoded result.
pub fn success_raw(id: &RawValue, result: &str) -> String {
    let mut out = String::with_capacity(result.len() + id.get().len() + 40);
    out.push_str(r#"{"jsonrpc":"2.0","id":"#);
    out.push_str(id.get());
    out.push_str(r#","result":"#);
    out.push_str(result);
    out.push('}');
    out
}

/// A `reconnect` replay result, `{"type":"replay","actions":[…],"missing":[…]}`, from envelopes
/// already encoded as JSON.
pub fn replay_result<'a>(actions: impl IntoIterator<Item = &'a str>, missing: &[String]) -> String {
    let mut out = String::from(r#"{"type":"replay","actions":["#);
    for (i, a) in actions.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(a);
    }
    out.push_str(r#"],"missing":"#);
    out.push_str(&serde_json::to_string(missing).unwrap_or_else(|_| "[]".into()));
    out.push('}');
    out
}

/// The bytes of `w` that must be escaped in a JSON string (a control character, `"` or `\\`),
/// as a mask with the high bit of each such byte set. The lowest set bit is exact (later bits
/// may be false positives), which is all [`push_escaped`] uses; bytes ≥ 0x80 never match.
fn escape_mask(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    let q = w ^ (ONES * u64::from(b'"'));
    let quote = q.wrapping_sub(ONES) & !q & HIGH;
    let b = w ^ (ONES * u64::from(b'\\'));
    let backslash = b.wrapping_sub(ONES) & !b & HIGH;
    control | quote | backslash
}

/// Appends the escape of `b` (a byte [`escape_mask`] matches), exactly as serde_json writes it.
fn push_escape(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match b {
        b'"' => out.push_str("\\\""),
        b'\\' => out.push_str("\\\\"),
        0x08 => out.push_str("\\b"),
        0x0c => out.push_str("\\f"),
        b'\n' => out.push_str("\\n"),
        b'\r' => out.push_str("\\r"),
        b'\t' => out.push_str("\\t"),
        _ => {
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
}

/// Appends `s` escaped as the inside of a JSON string, exactly as serde_json escapes it
/// (`\"`, `\\`, `\b \f \n \r \t`, other controls as `\u00xx`; nothing else): eight bytes
/// are checked at a time, and runs without escapes are copied whole.
fn push_escaped(out: &mut String, s: &str) {
    let bytes = s.as_bytes();
    // `start..i` is the run not yet copied; escapes are ASCII, so every cut is on a character
    // boundary.
    let mut start = 0;
    let mut i = 0;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        let mask = escape_mask(u64::from_le_bytes(w));
        if mask == 0 {
            i += 8;
            continue;
        }
        let j = i + (mask.trailing_zeros() / 8) as usize;
        out.push_str(&s[start..j]);
        push_escape(out, bytes[j]);
        i = j + 1;
        start = i;
    }
    while i < bytes.len() {
        let b = bytes[i];
        if b < 0x20 || b == b'"' || b == b'\\' {
            out.push_str(&s[start..i]);
            push_escape(out, b);
            start = i + 1;
        }
        i += 1;
    }
    out.push_str(&s[start..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::actions::{StateAction, TerminalDataAction};

    #[test]
    fn data_frames_match_the_serde_encoding_byte_for_byte() {
        let mut all_bytes = String::new();
        for c in (0u32..0x80).chain([0xe9, 0x2028, 0x2029, 0xfffd, 0x1f600]) {
            all_bytes.push(char::from_u32(c).unwrap());
        }
        let samples = [
            "",
            "plain text, longer than eight bytes",
            "\u{1b}[1;31mred\u{1b}[0m\r\n",
            "quote \" backslash \\ tab \t",
            "é😀─中 \u{7f} del",
            all_bytes.as_str(),
        ];
        for channel in ["ahp-terminal:/t1", "x:/\"odd\\uri\u{1}"] {
            for (i, a) in samples.iter().enumerate() {
                for b in &samples[i..] {
                    let pieces = vec![a.to_string(), b.to_string()];
                    let envelope = ActionEnvelope {
                        channel: channel.into(),
                        action: StateAction::TerminalData(TerminalDataAction {
                            data: pieces.concat(),
                        }),
                        server_seq: 123456789,
                        origin: None,
                        rejection_reason: None,
                    };
                    let want = action(&envelope);
                    assert_eq!(data_action(channel, 123456789, &pieces), want);
                    assert_eq!(
                        action_params(&want),
                        serde_json::to_string(&envelope).unwrap()
                    );
                }
            }
        }
    }

    #[test]
    fn escaping_matches_serde_at_every_alignment() {
        let specials = "\"\\\u{0}\u{1f}\n\r\t\u{8}\u{c}\u{7f}é";
        for pad in 0..24 {
            for gap in 0..10 {
                let s = format!(
                    "{}{}{}{}",
                    "a".repeat(pad),
                    specials,
                    "b".repeat(gap),
                    specials
                );
                let mut out = String::new();
                push_escaped(&mut out, &s);
                assert_eq!(format!("\"{out}\""), serde_json::to_string(&s).unwrap());
            }
        }
    }

    #[test]
    fn raw_results_match_the_serde_encoding() {
        let id = RawValue::from_string("\"a-1\"".into()).unwrap();
        assert_eq!(
            success_raw(&id, r#"{"x":[1,2]}"#),
            success(&id, serde_json::json!({"x": [1, 2]}))
        );
        let envelope = ActionEnvelope {
            channel: "t:/1".into(),
            action: StateAction::TerminalData(TerminalDataAction { data: "hi".into() }),
            server_seq: 7,
            origin: None,
            rejection_reason: None,
        };
        let text = action(&envelope);
        let missing = vec!["t:/gone".to_string()];
        let typed = ahp_types::commands::ReconnectResult::Replay(
            ahp_types::commands::ReconnectReplayResult {
                actions: vec![envelope.clone(), envelope],
                missing: missing.clone(),
            },
        );
        assert_eq!(
            replay_result([action_params(&text), action_params(&text)], &missing),
            serde_json::to_string(&typed).unwrap()
        );
    }

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
