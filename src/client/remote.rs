//! One remote terminal as the subcommands use it: selecting it by what the user typed,
//! subscribing (its snapshot and the `serverSeq` after which live actions follow), the raw
//! output stream its retained content stands for, input and other actions whose rejection is
//! reported, and disposal.
//!
//! May touch: only the connection it is given.

use ahp::ahp_types::actions::{ActionEnvelope, StateAction, TerminalInputAction};
use ahp::ahp_types::state::{TerminalContentPart, TerminalState};
use serde_json::{json, Value};

use super::select::select;
use super::{Conn, Failure};
use crate::proto::catalog::TerminalSummary;
use crate::proto::ROOT;

/// The listed terminal `query` designates (see [`super::select`]), and the daemon's host id.
pub async fn find(conn: &mut Conn, query: &str) -> Result<(TerminalSummary, String), Failure> {
    let listing = conn.list().await?;
    let t = select(&listing.terminals, query)?.clone();
    Ok((t, listing.host_id))
}

/// `subscribe` to a terminal: its state and the snapshot's `fromSeq` (every later action on
/// it has a larger `serverSeq`). The connection resumes the subscription after a restart.
pub async fn subscribe(conn: &mut Conn, uri: &str) -> Result<(TerminalState, u64), Failure> {
    let result: Value = conn.request("subscribe", json!({ "channel": uri })).await?;
    let snapshot = result
        .get("snapshot")
        .ok_or_else(|| Failure::failed(format!("subscribe {uri}: the answer has no snapshot")))?;
    let from_seq = snapshot.get("fromSeq").and_then(Value::as_u64).unwrap_or(0);
    let state: TerminalState = snapshot
        .get("state")
        .cloned()
        .ok_or_else(|| Failure::failed(format!("subscribe {uri}: the snapshot has no state")))
        .and_then(|s| {
            serde_json::from_value(s).map_err(|e| {
                Failure::failed(format!("subscribe {uri}: not a terminal snapshot: {e}"))
            })
        })?;
    conn.subscribed(uri, from_seq);
    Ok((state, from_seq))
}

/// The output stream a terminal's retained content stands for: every part's text in order
/// (a command part contributes its output; its command line was echoed in the part before).
pub fn replay(state: &TerminalState) -> String {
    let mut out = String::new();
    for part in &state.content {
        match part {
            TerminalContentPart::Unclassified(p) => out.push_str(&p.value),
            TerminalContentPart::Command(c) => out.push_str(&c.output),
            TerminalContentPart::Unknown(_) => {}
        }
    }
    out
}

/// Dispatches `action` to `uri` and waits until the daemon has judged it: `Ok` when it was
/// accepted, `Err(rejectionReason)` when it was rejected. (A rejection goes to the dispatcher
/// only and is sent before the answer to a `ping` sent after the action.)
pub async fn dispatch_checked(
    conn: &mut Conn,
    uri: &str,
    action: StateAction,
) -> Result<Result<(), String>, Failure> {
    let handle = conn
        .client
        .dispatch(uri.into(), action)
        .await
        .map_err(|_| Failure::lost())?;
    conn.request::<Value>("ping", json!({ "channel": ROOT }))
        .await?;
    let seq = handle.client_seq;
    let me = conn.client_id().to_string();
    Ok(
        match conn.take_buffered(|e| rejected(e, uri, &me, seq).is_some()) {
            Some(e) => Err(e.rejection_reason.unwrap_or_default()),
            None => Ok(()),
        },
    )
}

/// The `rejectionReason` if `e` is the rejection of the action `client_seq` that `me` (a
/// `clientId`) dispatched on `uri`.
fn rejected(e: &ActionEnvelope, uri: &str, me: &str, client_seq: i64) -> Option<String> {
    let ours = e.channel == uri
        && e.origin
            .as_ref()
            .is_some_and(|o| o.client_id == me && o.client_seq == client_seq);
    if ours {
        e.rejection_reason.clone()
    } else {
        None
    }
}

/// `terminal/input` with `data`.
pub fn input(data: impl Into<String>) -> StateAction {
    StateAction::TerminalInput(TerminalInputAction { data: data.into() })
}

/// `disposeTerminal`: the terminal is removed and its processes are killed.
pub async fn dispose(conn: &mut Conn, uri: &str) -> Result<(), Failure> {
    conn.request::<Value>("disposeTerminal", json!({ "channel": uri }))
        .await
        .map(|_| ())
}

/// Whether a `root/terminalsChanged` envelope no longer lists `uri` (it was disposed).
pub fn disposed(e: &ActionEnvelope, uri: &str) -> bool {
    match &e.action {
        StateAction::RootTerminalsChanged(c) => !c.terminals.iter().any(|t| t.resource == uri),
        _ => false,
    }
}
