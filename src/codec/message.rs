//! The JSON-RPC messages the daemon sends, as text: results (typed, or already encoded),
//! errors, and `action` notifications — built once per envelope, either by serde or, for the
//! hot `terminal/data` path, by writing the frame straight from the output pieces. Every
//! function here produces exactly what serde_json makes of the corresponding `ahp-types`
//! value (the tests compare them), so clients cannot tell the fast paths apart. Pure; no
//! state.

use ahp_types::actions::ActionEnvelope;
use ahp_types::errors::json_rpc_error_codes;
use ahp_types::messages::{JsonRpcError, JsonRpcVersion};
use serde::Serialize;
use serde_json::value::RawValue;

use super::json::push_escaped;

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
        // Only a result holding something JSON cannot express (e.g. a map with non-string
        // keys) gets here: answer -32603 rather than nothing.
        let msg = ErrorResponse {
            jsonrpc: JsonRpcVersion::V2,
            id,
            error: JsonRpcError {
                code: json_rpc_error_codes::INTERNAL_ERROR,
                message: format!("cannot encode result: {e}"),
                data: None,
            },
        };
        serde_json::to_string(&msg).unwrap_or_default()
    })
}

/// `{"jsonrpc":"2.0","id":<id>,"error":<error>}`.
pub fn error(id: &RawValue, error: JsonRpcError) -> String {
    let msg = ErrorResponse {
        jsonrpc: JsonRpcVersion::V2,
        id,
        error,
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
    fit(&mut out);
    out
}

/// Gives back what escaping left unused in a frame's buffer. The frame lives on in the
/// channel's history, which counts its length: a buffer that grew by doubling because the
/// escapes outran the estimate (every `\r\n` of plain lines is four bytes; an ESC is six)
/// would otherwise hold up to twice what the history counts. For a large buffer the allocator
/// shrinks in place, without a copy.
fn fit(out: &mut String) {
    if out.capacity() - out.len() > out.len() / 16 + 64 {
        out.shrink_to_fit();
    }
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
}
