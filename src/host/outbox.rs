//! A connection's outbound queue, as seen by the host, with byte accounting for backpressure.
//!
//! The host pushes encoded messages (responses and action envelopes) here while holding its
//! lock, which is what keeps every connection's envelopes in `serverSeq` order and a
//! `subscribe` response ahead of the actions that follow its snapshot. The connection's writer
//! task drains it onto the socket and reports what it has really written
//! ([`OutboxReceiver::written`]). The queued byte count drives backpressure: above
//! [`HIGH_WATERMARK_BYTES`] the terminals feeding the connection stop reading their pty until
//! it is back under [`LOW_WATERMARK_BYTES`], and a connection that stays congested longer than
//! the stall timeout is closed ([`Outbox::kill`]). Envelopes are encoded once and shared by all
//! subscribers (reference-counted bytes).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Notify};
use tokio_tungstenite::tungstenite::Utf8Bytes;

/// Queued bytes above which a connection is congested: the terminals it watches pause.
pub const HIGH_WATERMARK_BYTES: usize = 1024 * 1024;

/// Queued bytes under which a congested connection lets paused terminals resume.
pub const LOW_WATERMARK_BYTES: usize = 256 * 1024;

/// Queued bytes at which a connection's socket is no longer read at all, and input to the
/// terminals it watches is refused: output is paused at the high watermark, so only echoes of
/// other clients' input (or answers to its own requests) can push a queue this far.
pub const HARD_LIMIT_BYTES: usize = 4 * 1024 * 1024;

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

#[derive(Debug)]
struct Shared {
    /// Bytes queued and not yet written to the socket.
    queued: AtomicUsize,
    /// Bytes ever queued, and ever written: a message queued when `enqueued_total` reached
    /// `t` has been written once `written_total >= t` (messages are written in order).
    enqueued_total: AtomicU64,
    written_total: AtomicU64,
    /// Since when `queued` has been above the high watermark.
    congested_since: Mutex<Option<Instant>>,
    /// Set by [`Outbox::kill`]: the writer stops writing data and closes.
    killed: AtomicBool,
    kill: Notify,
    kill_frame: Mutex<Option<(u16, String)>>,
    /// Shared by every outbox of the host: signalled whenever a writer made progress.
    progress: Arc<Notify>,
}

/// Sending half of a connection's queue.
#[derive(Debug, Clone)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Outgoing>,
    shared: Arc<Shared>,
}

/// Receiving half, owned by the connection's writer.
#[derive(Debug)]
pub struct OutboxReceiver {
    rx: mpsc::UnboundedReceiver<Outgoing>,
    shared: Arc<Shared>,
}

impl Outbox {
    /// A new queue whose writer signals `progress` whenever it has written something.
    pub fn new(progress: Arc<Notify>) -> (Outbox, OutboxReceiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            queued: AtomicUsize::new(0),
            enqueued_total: AtomicU64::new(0),
            written_total: AtomicU64::new(0),
            congested_since: Mutex::new(None),
            killed: AtomicBool::new(false),
            kill: Notify::new(),
            kill_frame: Mutex::new(None),
            progress,
        });
        (
            Outbox {
                tx,
                shared: shared.clone(),
            },
            OutboxReceiver { rx, shared },
        )
    }

    /// Queues a message; silently dropped if the connection is gone.
    pub fn send(&self, text: impl Into<Utf8Bytes>) {
        let text = text.into();
        let len = text.len();
        // Count the bytes before queueing them: the writer may write and report them
        // (`written`) before `send` returns, which would otherwise underflow the counter.
        let queued = self.shared.queued.fetch_add(len, Ordering::AcqRel) + len;
        self.shared
            .enqueued_total
            .fetch_add(len as u64, Ordering::AcqRel);
        if self.tx.send(Outgoing::Text(text)).is_err() {
            self.shared.queued.fetch_sub(len, Ordering::AcqRel);
            return;
        }
        if queued > HIGH_WATERMARK_BYTES {
            let mut since = lock(&self.shared.congested_since);
            since.get_or_insert_with(Instant::now);
        }
    }

    /// Queues a close frame after whatever is queued.
    pub fn close(&self, code: u16, reason: impl Into<String>) {
        let _ = self.tx.send(Outgoing::Close {
            code,
            reason: reason.into(),
        });
    }

    /// Closes the connection without flushing its queue (a stalled peer): the writer drops
    /// pending data, tries to send a close frame for a moment, and stops.
    pub fn kill(&self, code: u16, reason: impl Into<String>) {
        *lock(&self.shared.kill_frame) = Some((code, reason.into()));
        self.shared.killed.store(true, Ordering::Release);
        self.shared.kill.notify_one();
    }

    /// A ticket for everything queued so far: see [`Outbox::is_written`].
    pub fn ticket(&self) -> u64 {
        self.shared.enqueued_total.load(Ordering::Acquire)
    }

    /// Whether everything queued before [`Outbox::ticket`] returned `ticket` has been written to
    /// the socket (or dropped because the connection is gone).
    pub fn is_written(&self, ticket: u64) -> bool {
        self.shared.written_total.load(Ordering::Acquire) >= ticket
    }

    /// Bytes queued and not yet written to the socket.
    pub fn queued_bytes(&self) -> usize {
        self.shared.queued.load(Ordering::Acquire)
    }

    /// Whether the queue is above the high watermark.
    pub fn is_congested(&self) -> bool {
        self.queued_bytes() > HIGH_WATERMARK_BYTES
    }

    /// How long the queue has been above the high watermark without getting back under the
    /// low one; `None` if it is not congested.
    pub fn congested_for(&self) -> Option<Duration> {
        lock(&self.shared.congested_since).map(|s| s.elapsed())
    }
}

impl OutboxReceiver {
    /// The next message, or `None` once every sender is gone.
    pub async fn recv(&mut self) -> Option<Outgoing> {
        self.rx.recv().await
    }

    /// The next message if one is queued.
    pub fn try_recv(&mut self) -> Option<Outgoing> {
        self.rx.try_recv().ok()
    }

    /// Reports `bytes` of queued text as written to the socket.
    pub fn written(&self, bytes: usize) {
        // Saturating: the total is u64::MAX once the receiver is gone.
        let _ = self
            .shared
            .written_total
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                Some(w.saturating_add(bytes as u64))
            });
        let before = self.shared.queued.fetch_sub(bytes, Ordering::AcqRel);
        let after = before.saturating_sub(bytes);
        if after <= LOW_WATERMARK_BYTES {
            *lock(&self.shared.congested_since) = None;
        }
        self.shared.progress.notify_waiters();
    }

    /// A handle that completes once [`Outbox::kill`] was called.
    pub fn kill_signal(&self) -> KillSignal {
        KillSignal {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for OutboxReceiver {
    /// The connection is gone: nothing queued will ever be written, so every ticket counts as
    /// written (no terminal waits for it) and waiting terminals re-check.
    fn drop(&mut self) {
        self.shared.written_total.store(u64::MAX, Ordering::Release);
        self.shared.progress.notify_waiters();
    }
}

/// See [`OutboxReceiver::kill_signal`].
#[derive(Debug)]
pub struct KillSignal {
    shared: Arc<Shared>,
}

impl KillSignal {
    /// Completes once [`Outbox::kill`] was called; yields its close code and reason.
    pub async fn killed(&self) -> (u16, String) {
        loop {
            let notified = self.shared.kill.notified();
            if self.shared.killed.load(Ordering::Acquire) {
                return lock(&self.shared.kill_frame)
                    .clone()
                    .unwrap_or((1008, String::new()));
            }
            notified.await;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accounting_and_congestion() {
        let (outbox, mut rx) = Outbox::new(Arc::new(Notify::new()));
        outbox.send("x".repeat(HIGH_WATERMARK_BYTES));
        assert!(!outbox.is_congested());
        assert!(outbox.congested_for().is_none());
        outbox.send("y".repeat(10));
        assert!(outbox.is_congested());
        assert!(outbox.congested_for().is_some());
        let Some(Outgoing::Text(t)) = rx.recv().await else {
            panic!()
        };
        rx.written(t.len());
        assert_eq!(outbox.queued_bytes(), 10);
        assert!(!outbox.is_congested());
        assert!(outbox.congested_for().is_none());
    }

    #[tokio::test]
    async fn kill_wakes_the_writer() {
        let (outbox, rx) = Outbox::new(Arc::new(Notify::new()));
        let signal = rx.kill_signal();
        outbox.kill(4001, "stalled");
        assert_eq!(signal.killed().await, (4001, "stalled".to_string()));
    }
}
