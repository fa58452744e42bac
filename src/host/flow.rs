//! Flow control on the host side: each connection's outbox counts the bytes it has not yet
//! written; terminals ask [`Host::pressure`] whether their subscribers are congested (the
//! pump pauses above the high watermark; it merges output while its own last update is
//! unsent, tracked with outbox tickets), and
//! [`Host::watch_stalls`] closes connections that stay congested too long. Touches only the
//! connection registry and the outboxes.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::outbox::{self, Outbox, OutboxReceiver};
use super::{ConnId, Host};

/// Close code for a connection that stopped reading its socket (see `--stall-timeout`).
pub const CLOSE_STALLED: u16 = 4001;

/// How congested the subscribers of one terminal are (see [`outbox`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Pressure {
    /// Some subscriber is above the high watermark: stop reading the pty.
    pub above_high: bool,
    /// Some subscriber is above the low watermark: a paused terminal stays paused.
    pub above_low: bool,
}

impl Host {
    /// A new outbound queue for a connection, wired to the host's progress signal.
    pub fn new_outbox(&self) -> (Outbox, OutboxReceiver) {
        Outbox::new(self.progress.clone())
    }

    /// Signalled whenever a connection's writer made progress (used by paused terminals).
    pub(crate) fn progress(&self) -> Arc<Notify> {
        self.progress.clone()
    }

    /// Congestion of terminal `id`'s subscribers; `None` if the terminal is gone.
    pub(crate) fn pressure(&self, uri: &str, id: u64) -> Option<Pressure> {
        let inner = self.lock();
        let t = inner.terminals.get(uri).filter(|t| t.id == id)?;
        let mut p = Pressure::default();
        for c in &t.subscribers {
            if let Some(conn) = inner.connections.get(c) {
                let queued = conn.outbox.queued_bytes();
                p.above_high |= queued > outbox::HIGH_WATERMARK_BYTES;
                p.above_low |= queued > outbox::LOW_WATERMARK_BYTES;
            }
        }
        Some(p)
    }

    /// Closes, every second, the connections that have been congested longer than the stall
    /// timeout (code [`CLOSE_STALLED`]), dropping their subscriptions at once so the terminals
    /// they held back resume. The client may `reconnect` and resume from history. Runs until
    /// the host shuts down.
    pub async fn watch_stalls(self: Arc<Self>) {
        let Some(timeout) = self.config.stall_timeout else {
            return;
        };
        let tick = (timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        let mut interval = tokio::time::interval(tick);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            let mut inner = self.lock();
            if inner.shutting_down {
                return;
            }
            let stalled: Vec<ConnId> = inner
                .connections
                .iter()
                .filter(|(_, c)| c.outbox.congested_for().is_some_and(|d| d >= timeout))
                .map(|(id, _)| *id)
                .collect();
            for conn in stalled {
                if let Some(c) = inner.connections.get(&conn) {
                    tracing::warn!(
                        conn,
                        client_id = c.client_id.as_deref().unwrap_or("?"),
                        queued_bytes = c.outbox.queued_bytes(),
                        "closing a stalled connection: it has not read its output for {:?}",
                        timeout
                    );
                    c.outbox.kill(
                        CLOSE_STALLED,
                        format!("stalled: output not read for {} s", timeout.as_secs()),
                    );
                }
                inner.drop_connection(conn);
            }
            drop(inner);
            // Terminals waiting on the dropped connections re-check their subscribers.
            self.progress.notify_waiters();
        }
    }
}
