//! Client-dispatched actions (`dispatchAction`): validated on the raw JSON, checked against
//! the claim policy (D6), then reduced, echoed with `origin` to every subscriber and applied to
//! the pty — or rejected to the dispatcher only, with a `rejectionReason` (D3).
//!
//! May touch: the store (through the host lock), subscribers' outboxes, the terminal's `Pty`
//! (input and resize, after the lock is released).

use ahp_types::actions::{ActionEnvelope, ActionOrigin, StateAction};
use ahp_types::state::{TerminalClaim, TerminalLifecycleState};
use serde_json::Value;

use super::channel::{self, ChannelKind};
use super::{flow, validate, ConnId, Host, Inner};
use crate::codec::{self, version, Frame};
use crate::terminal;

/// Inputs of at least this many bytes are encoded before the host lock is taken.
const PRE_ENCODE_BYTES: usize = 16 * 1024;

impl Host {
    /// `dispatchAction`: validates a client action; accepted ones are reduced,
    /// echoed with `origin` to every subscriber and then take effect (pty write, resize);
    /// rejected ones go back, with a `rejectionReason`, to the dispatching connection only
    /// (D3; the action is echoed as [`validate::rejection_echo`] keeps it). Actions for
    /// channels that do not exist are ignored. Validation runs before the host lock is taken.
    pub fn dispatch(&self, conn: ConnId, channel: &str, client_seq: i64, action: Value) {
        let kind = channel::classify(channel);
        let verdict = match kind {
            ChannelKind::Root => Err(validate::root_action_rejection(&action)),
            ChannelKind::Terminal => validate::terminal_action(&action),
            _ => {
                tracing::debug!("action for an unknown channel ignored");
                return;
            }
        };
        // A claim (bounded in size) is kept whole: a pre-0.9 client's may need upgrading below.
        let claim_raw = (action.get("type").and_then(Value::as_str) == Some("terminal/claimed"))
            .then(|| action.clone());
        let action = validate::rejection_echo(action);
        // A large input is encoded here, not under the lock (its echo goes to every subscriber).
        let encoded = match &verdict {
            Ok(a @ StateAction::TerminalInput(i)) if i.data.len() >= PRE_ENCODE_BYTES => {
                serde_json::to_string(a).ok()
            }
            _ => None,
        };
        let mut inner = self.lock();
        let Some(client_id) = inner
            .connections
            .get(&conn)
            .and_then(|c| c.client_id.clone())
        else {
            return;
        };
        let origin = ActionOrigin {
            client_id,
            client_seq,
        };
        match (kind, verdict) {
            (ChannelKind::Root, Err(reason)) => inner.reject(conn, channel, action, origin, reason),
            (ChannelKind::Terminal, verdict) if inner.terminals.contains_key(channel) => {
                // A pre-0.9 client's chat-less session claim gets its chat (docs/protocol.md),
                // which depends on the current claim: upgraded and validated again here.
                let (action, verdict) = match (claim_raw, inner.terminals.get(channel)) {
                    (Some(mut raw), Some(t)) if !inner.wire_of(conn).is_current() => {
                        version::upgrade_action(&mut raw, &t.state.claim);
                        let verdict = validate::terminal_action(&raw);
                        (validate::rejection_echo(raw), verdict)
                    }
                    _ => (action, verdict),
                };
                match verdict {
                    Err(reason) => inner.reject(conn, channel, action, origin, reason),
                    Ok(typed) => {
                        inner.apply_client_action(conn, channel, typed, action, origin, encoded)
                    }
                }
            }
            _ => tracing::debug!(%channel, "action for an unknown channel ignored"),
        }
    }
}

impl Inner {
    /// Applies a validated client action (`raw` is what a rejection echoes of it; `encoded`
    /// its JSON if already encoded).
    pub(super) fn apply_client_action(
        &mut self,
        conn: ConnId,
        uri: &str,
        action: StateAction,
        raw: Value,
        origin: ActionOrigin,
        encoded: Option<String>,
    ) {
        let holder_connected = self
            .terminals
            .get(uri)
            .is_some_and(|t| self.clients.contains_key(&t.holder));
        let Some(t) = self.terminals.get_mut(uri) else {
            return;
        };
        match &action {
            StateAction::TerminalInput(input) => {
                let Some(process) = t.process.clone() else {
                    self.reject(conn, uri, raw, origin, super::RESTORED_INPUT.into());
                    return;
                };
                if matches!(t.state.lifecycle, TerminalLifecycleState::Exited(_)) {
                    self.reject(conn, uri, raw, origin, "terminal has exited".into());
                    return;
                }
                let connections = &self.connections;
                let queues = t
                    .subscribers
                    .iter()
                    .filter_map(|c| connections.get(c))
                    .map(|c| c.outbox.watch());
                if let Some(queued) =
                    flow::input_blocker(&self.flow.policy, tokio::time::Instant::now(), queues)
                {
                    let reason = format!(
                        "input refused: a subscriber of this terminal is not reading its output \
                         ({queued} bytes queued); retry once it catches up or is disconnected"
                    );
                    self.reject(conn, uri, raw, origin, reason);
                    return;
                }
                if !process.input_fits(input.data.len()) {
                    let reason = format!(
                        "input queue full: more than {} bytes are waiting for the program to \
                         read them",
                        terminal::process::MAX_PENDING_INPUT_BYTES
                    );
                    self.reject(conn, uri, raw, origin, reason);
                    return;
                }
                let bytes = input.data.clone().into_bytes();
                self.emit_terminal_encoded(uri, action, Some(origin), encoded);
                // Checked above; only the pty vanishing can fail here, and then the exit
                // follows on its own.
                let _ = process.write(bytes);
            }
            StateAction::TerminalResized(r) => {
                // Validated to 1..=MAX_DIMENSION, so the conversions cannot fail.
                let cols = u16::try_from(r.cols).unwrap_or(u16::MAX);
                let rows = u16::try_from(r.rows).unwrap_or(u16::MAX);
                // A restored terminal has no pty: only its recorded size changes.
                if let Some(Err(e)) = t.process.as_ref().map(|p| p.resize(cols, rows)) {
                    tracing::debug!(terminal = %uri, error = %e, "pty resize failed");
                }
                t.screen.resized(cols, rows);
                self.emit_terminal(uri, action, Some(origin));
            }
            StateAction::TerminalTitleChanged(_) => {
                t.renamed_by_client = true;
                self.emit_terminal(uri, action, Some(origin));
                self.emit_root_terminals();
            }
            StateAction::TerminalClaimed(c) => {
                let dispatcher = origin.client_id.as_str();
                if let Err(reason) = validate::check_claim_transfer(
                    &t.state.claim,
                    &t.holder,
                    holder_connected,
                    dispatcher,
                    &c.claim,
                ) {
                    self.reject(conn, uri, raw, origin, reason);
                    return;
                }
                // The holder's transfer, and a take-over of an absent holder's claim, move the
                // holding; a narrowing by another client (detach) leaves it with the holder.
                if dispatcher == t.holder || !holder_connected {
                    t.holder = match &c.claim {
                        TerminalClaim::Client(cc) => cc.client_id.clone(),
                        TerminalClaim::Session(_) => dispatcher.to_string(),
                    };
                }
                self.emit_terminal(uri, action, Some(origin));
                self.emit_root_terminals();
                self.refresh_orphans();
            }
            _ => self.emit_terminal(uri, action, Some(origin)),
        }
    }

    /// Sends a rejected action back to its dispatcher only (decision D3). `raw` is what
    /// [`validate::rejection_echo`] kept of the action; the reason is clipped to
    /// [`codec::MAX_MESSAGE_BYTES`].
    pub(super) fn reject(
        &mut self,
        conn: ConnId,
        channel: &str,
        raw: Value,
        origin: ActionOrigin,
        reason: String,
    ) {
        let reason = codec::clip(reason, codec::MAX_MESSAGE_BYTES);
        let seq = self.next_seq();
        tracing::debug!(%channel, %reason, "action rejected");
        let envelope = ActionEnvelope {
            channel: channel.to_string(),
            action: StateAction::Unknown(raw),
            server_seq: seq,
            origin: Some(origin),
            rejection_reason: Some(reason),
        };
        let text: Frame = codec::action(&envelope).into();
        let wire = self.wire_of(conn);
        let sent = if wire.is_current() {
            text.clone()
        } else {
            version::action_text(&envelope, wire).into()
        };
        if let Some(c) = self.connections.get_mut(&conn) {
            c.deliver(sent);
        }
        // Kept for a replay to the same client (decision D3 applies there too).
        let dispatcher = envelope.origin.map(|o| o.client_id);
        if channel == channel::ROOT {
            self.root_history.push(seq, text, dispatcher);
        } else if let Some(t) = self.terminals.get_mut(channel) {
            t.history.push(seq, text, dispatcher);
        }
    }
}
