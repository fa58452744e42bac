//! A connection's outbound queue, as seen by the host.
//!
//! The host pushes encoded messages (responses and action envelopes) here while holding its
//! lock, which is what keeps every connection's envelopes in `serverSeq` order and a
//! `subscribe` response ahead of the actions that follow its snapshot. The connection's writer
//! task drains it onto the socket. Envelopes are encoded once and shared by all subscribers (reference-counted bytes).

use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Utf8Bytes;

/// One message for the socket.
#[derive(Debug, Clone)]
pub enum Outgoing {
    /// A complete JSON-RPC message, sent as one text frame.
    Text(Utf8Bytes),
    /// Send a close frame with this code and reason, then stop.
    Close {
        /// WebSocket close code (e.g. 1000, 1001).
        code: u16,
        /// Human-readable reason (at most 123 bytes on the wire).
        reason: String,
    },
}

/// Sending half of a connection's queue.
#[derive(Debug, Clone)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Outgoing>,
}

/// Receiving half, owned by the connection's writer.
pub type OutboxReceiver = mpsc::UnboundedReceiver<Outgoing>;

impl Outbox {
    /// A new queue.
    pub fn new() -> (Outbox, OutboxReceiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Outbox { tx }, rx)
    }

    /// Queues a message; silently dropped if the connection is gone.
    pub fn send(&self, text: impl Into<Utf8Bytes>) {
        let _ = self.tx.send(Outgoing::Text(text.into()));
    }

    /// Queues a close frame.
    pub fn close(&self, code: u16, reason: impl Into<String>) {
        let _ = self.tx.send(Outgoing::Close {
            code,
            reason: reason.into(),
        });
    }
}
