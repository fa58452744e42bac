//! What the ported VS Code suites share: VS Code's parameters (`agenthost-terminal://e2e/<uuid>`
//! channels, `copilotcli:/<uuid>` sessions and their default chats, `file://` workspaces,
//! 90×30), its `withTerminal` set-up on the official `ahp` client, and its text helpers.

#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use ahp::ahp_types::actions::{ActionEnvelope, StateAction};
use ahp::ahp_types::state::{Snapshot, TerminalContentPart, TerminalState};
use ahp::{Client, ClientError};
use base64::Engine;
use serde_json::{json, Value};

use crate::support::*;

/// VS Code's `PROTOCOL_VERSION`, as the Rust SDK's.
pub const PV: &str = "1.0.0";

/// Timeout of VS Code's terminal waits (30 s upstream; the shell's first prompt here).
pub const TERMINAL_TIMEOUT: Duration = SHELL_TIMEOUT;

/// `URI.from({scheme:'agenthost-terminal', authority:'e2e', path:'/'+uuid})`.
pub fn terminal_uri() -> String {
    format!("agenthost-terminal://e2e/{}", uuid::Uuid::new_v4())
}

/// A `copilotcli:/<uuid>` session URI (an opaque claim target here: ahpty hosts no sessions).
pub fn session_uri() -> String {
    format!("copilotcli:/{}", uuid::Uuid::new_v4())
}

/// VS Code's `buildChatUri(session, id)`: `ahp-chat://<id>/<unpadded base64url(session)>`.
pub fn chat_uri(session: &str, id: &str) -> String {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(session);
    format!("ahp-chat://{id}/{b64}")
}

/// `buildDefaultChatUri(session)`.
pub fn default_chat(session: &str) -> String {
    chat_uri(session, "default")
}

/// `URI.file(path).toString()`.
pub fn file_uri(path: &Path) -> String {
    url::Url::from_file_path(path).unwrap().to_string()
}

/// `mkdtemp(tmpdir + '/ahp-<prefix>-')`, resolved like `realpath`.
pub fn workspace(prefix: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(&format!("ahp-{prefix}-"))
        .tempdir()
        .unwrap();
    assert_eq!(dir.path().canonicalize().unwrap(), dir.path());
    dir
}

/// A terminal of VS Code's `createTerminal(prefix)`: created by client `<prefix>-copilotcli`
/// with a client claim, `name: 'E2E <prefix>'`, cwd = the workspace, 90×30, and subscribed.
pub struct Term {
    pub uri: String,
    pub client_id: String,
    /// The session its tests transfer claims to (VS Code creates a real one).
    pub session: String,
    pub workspace: tempfile::TempDir,
}

/// Connects the "shared" client (`<prefix>-copilotcli`) and creates its terminal
/// (`withTerminal`).
pub async fn with_terminal(d: &Daemon, prefix: &str) -> (Ahp, Term) {
    let client_id = format!("{prefix}-copilotcli");
    let c = Ahp::connect(&d.url(), &client_id, &[]).await;
    let t = create_terminal(&c, prefix).await;
    (c, t)
}

/// `createTerminal` + `subscribe` on an initialized client.
pub async fn create_terminal(c: &Ahp, prefix: &str) -> Term {
    let ws = workspace(&format!("state-{prefix}"));
    let uri = terminal_uri();
    let r = c
        .call(
            "createTerminal",
            json!({"channel": uri, "claim": {"kind": "client", "clientId": c.client_id},
                   "name": format!("E2E {prefix}"), "cwd": file_uri(ws.path()),
                   "cols": 90, "rows": 30}),
        )
        .await;
    assert_eq!(r.expect("createTerminal"), Value::Null);
    c.subscribe(&uri).await.expect("subscribe");
    Term {
        uri,
        client_id: c.client_id.clone(),
        session: session_uri(),
        workspace: ws,
    }
}

/// An official client that has connected but not initialized (`context.connectClient()`).
pub async fn uninitialized(url: &str) -> Client {
    let transport = ahp_ws::WebSocketTransport::connect(url)
        .await
        .expect("ahp-ws connect");
    Client::connect(transport, client_config())
        .await
        .expect("Client::connect")
}

/// `dispatchAndWait(channel, action)`: clears the log, dispatches, and waits for an action of
/// that type on that channel; returns the clientSeq used.
pub async fn dispatch_and_wait(c: &mut Ahp, channel: &str, action: Value) -> i64 {
    c.log.clear();
    let ty = action["type"].as_str().unwrap().to_string();
    let action: StateAction = serde_json::from_value(action).unwrap();
    let seq = c.dispatch(channel, action).await;
    let ch = channel.to_string();
    c.wait_for(&format!("{ty} on {channel}"), RPC_TIMEOUT, |log| {
        log.iter().any(|e| e.channel == ch && action_type(e) == ty)
    })
    .await;
    seq
}

/// Waits until the concatenated `terminal/data` of `uri` since the last clear satisfies `pred`.
pub async fn wait_streamed(c: &mut Ahp, uri: &str, what: &str, pred: impl Fn(&str) -> bool) {
    let u = uri.to_string();
    c.wait_for(what, TERMINAL_TIMEOUT, |log| pred(&data_text(log, &u)))
        .await;
}

/// A fresh snapshot of `uri`'s terminal state (`terminalState(uri)`).
pub async fn terminal_snapshot(c: &Ahp, uri: &str) -> TerminalState {
    c.subscribe_terminal(uri).await.0
}

/// The stateOps suite's `terminalText`: every part's visible text, joined.
pub fn terminal_text(state: &TerminalState) -> String {
    state
        .content
        .iter()
        .map(|p| match p {
            TerminalContentPart::Command(c) => c.output.as_str(),
            TerminalContentPart::Unclassified(u) => u.value.as_str(),
            _ => "",
        })
        .collect()
}

/// `/(?:^|\D)42(?:\D|$)/`: `42` not part of a longer number.
pub fn has_lone_42(text: &str) -> bool {
    let b = text.as_bytes();
    (0..b.len().saturating_sub(1)).any(|i| {
        &b[i..i + 2] == b"42"
            && (i == 0 || !b[i - 1].is_ascii_digit())
            && b.get(i + 2).is_none_or(|c| !c.is_ascii_digit())
    })
}

/// The action's `type`, as on the wire.
pub fn action_type(e: &ActionEnvelope) -> String {
    serde_json::to_value(&e.action).unwrap()["type"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// A snapshot's state as JSON.
pub fn state_json(s: &Snapshot) -> Value {
    serde_json::to_value(&s.state).unwrap()
}

/// The JSON-RPC error code of a failed call (`assert.rejects(…, {code})`).
pub fn code<T: std::fmt::Debug>(r: &Result<T, ClientError>) -> i32 {
    match r {
        Err(ClientError::Rpc(e)) => e.code,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

/// The `initialize` params VS Code sends (`channel`, `protocolVersions: [PV]`, `clientId`)
/// merged with `extra`.
pub fn init_params(client_id: &str, extra: Value) -> Value {
    let mut p = json!({"channel": ROOT, "protocolVersions": [PV], "clientId": client_id});
    if let Value::Object(m) = extra {
        for (k, v) in m {
            p[k] = v;
        }
    }
    p
}

/// VS Code's `afterConnectionDrop(id, body)` with a body that subscribes `uris`: a connection
/// initialized as `id` subscribes each and is closed; returns the highest snapshot `fromSeq`.
pub async fn dropped_after_subscribing(url: &str, id: &str, uris: &[&str]) -> i64 {
    let (mut first, init) = Raw::connect_init(url, id, &[]).await;
    assert_eq!(init["protocolVersion"], PV);
    let mut seen = 0;
    for uri in uris {
        seen = seen.max(raw_subscribe_from(&mut first, uri).await);
    }
    let _ = first.ws.close(None).await;
    seen
}

/// The `{channel, type}` of each envelope of a replay result.
pub fn replayed(result: &Value) -> Vec<Value> {
    assert_eq!(result["type"], "replay", "{result}");
    result["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| json!({"channel": e["channel"], "type": e["action"]["type"]}))
        .collect()
}

/// `reconnect {channel: root, clientId, lastSeenServerSeq, subscriptions}` on a fresh,
/// un-initialized connection (`revived`); returns it and the result.
pub async fn revive(url: &str, id: &str, seen: i64, subs: &[&str]) -> (Raw, Value) {
    let mut revived = Raw::connect(url).await;
    let resp = revived
        .request(
            "reconnect",
            json!({"channel": ROOT, "clientId": id, "lastSeenServerSeq": seen,
                   "subscriptions": subs}),
        )
        .await;
    let result = resp
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("reconnect failed: {resp}"));
    revived.client_id = id.into();
    (revived, result)
}

/// `subscribe` on a raw connection; returns the snapshot's `fromSeq`.
pub async fn raw_subscribe_from(raw: &mut Raw, uri: &str) -> i64 {
    let r = raw.request("subscribe", json!({"channel": uri})).await;
    r.pointer("/result/snapshot/fromSeq")
        .and_then(Value::as_i64)
        .unwrap_or_else(|| panic!("subscribe {uri}: {r}"))
}
