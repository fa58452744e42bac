//! A connection's outbound queue, as seen by the host: the messages waiting for the socket,
//! with the byte accounting and the wake-ups that flow control ([`super::flow`]) is built on.
//!
//! The host pushes encoded messages (responses and action envelopes) here while holding its
//! lock, which is what keeps every connection's envelopes in `serverSeq` order and a
//! `subscribe` response ahead of the actions that follow its snapshot. The connection's writer
//! task drains it onto the socket and reports what it has really written
//! ([`OutboxReceiver::written`]). Envelopes are encoded once and shared by every subscriber
//! and by the channel's history (reference-counted bytes), so a long queue costs little more
//! than the history already holds.
//!
//! What this module keeps per connection — the policy deciding what to do with it lives in
//! `flow.rs`:
//! - the queued byte count and the *congestion episode*: it starts when the queue passes the
//!   high watermark and ends when it is back under the low one;
//! - whether the connection is *lagging* (it fell behind while other viewers kept up);
//! - who to wake: a terminal paused for this connection registers to be woken when the episode
//!   ends ([`OutboxRef::wake_on_drain`]); a terminal merging output registers to be woken when
//!   its last update has been written ([`OutboxRef::wake_when_written`]). Nothing else wakes.
//!
//! May touch: its own queue and counters, and the wake-ups registered on it; no socket (the
//! server's writer drains it).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use super::flow::Flow;
pub use super::flow::{HARD_LIMIT_BYTES, HIGH_WATERMARK_BYTES, LOW_WATERMARK_BYTES};
use crate::codec::Frame;

/// One message for the socket.
#[derive(Debug, Clone)]
pub enum Outgoing {
    /// A complete JSON-RPC message, sent as one text frame.
    Text(Frame),
    /// Send a close frame with this code and reason, then stop.
    Close {
        /// WebSocket close code (e.g. 1000, 1001).
        code: u16,
        /// Human-readable reason (at most 123 bytes on the wire).
        reason: String,
    },
}

/// The congestion state of a connection (see the module docs), guarded by `Shared::flow`.
#[derive(Debug)]
pub(super) struct FlowState {
    /// Start of the current congestion episode (queue above the high watermark and not yet
    /// back under the low one).
    pub congested_since: Option<Instant>,
    /// When the connection last had a queue under the low watermark: the end of the previous
    /// episode, or when it was created.
    pub calm_since: Instant,
    /// Since when the connection has been lagging (ends with the episode).
    pub lagging_since: Option<Instant>,
    /// Terminals to wake when the episode ends (or the connection goes away).
    drain_waiters: Vec<Arc<Notify>>,
    /// Terminals to wake once `written_total` reaches the ticket.
    written_waiters: Vec<(u64, Arc<Notify>)>,
}

#[derive(Debug)]
struct Shared {
    /// Bytes queued and not yet written to the socket.
    queued: AtomicUsize,
    /// Bytes ever queued, and ever written: a message queued when `enqueued_total` reached
    /// `t` has been written once `written_total >= t` (messages are written in order).
    enqueued_total: AtomicU64,
    written_total: AtomicU64,
    /// Mirrors `flow.congested_since.is_some()`, readable without the lock.
    congested: AtomicBool,
    /// Mirrors `flow.lagging_since.is_some()`.
    lagging: AtomicBool,
    /// A lagging connection's queue passed `lag_limit`: the watchdog closes it.
    over_limit: AtomicBool,
    /// Some `written_waiters` are registered.
    written_armed: AtomicBool,
    flow: Mutex<FlowState>,
    /// Bytes a lagging connection may queue before it is closed.
    lag_limit: usize,
    /// Set by [`Outbox::kill`]: the writer stops writing data and closes.
    killed: AtomicBool,
    kill: Notify,
    kill_frame: Mutex<Option<(u16, String)>>,
    /// The host's flow control: its watchdog is woken when an episode starts, lagging starts
    /// or a limit is hit.
    flow_control: Arc<Flow>,
}

/// Sending half of a connection's queue.
#[derive(Debug, Clone)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Outgoing>,
    watch: OutboxRef,
}

/// A handle on a connection's queue that cannot send: what terminals keep to watch it.
#[derive(Debug, Clone)]
pub struct OutboxRef {
    shared: Arc<Shared>,
}

/// Receiving half, owned by the connection's writer.
#[derive(Debug)]
pub struct OutboxReceiver {
    rx: mpsc::UnboundedReceiver<Outgoing>,
    shared: Arc<Shared>,
}

impl Outbox {
    /// A new queue under the host's flow control `flow` (its watchdog, its lag limit).
    pub(super) fn new(flow: Arc<Flow>) -> (Outbox, OutboxReceiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            queued: AtomicUsize::new(0),
            enqueued_total: AtomicU64::new(0),
            written_total: AtomicU64::new(0),
            congested: AtomicBool::new(false),
            lagging: AtomicBool::new(false),
            over_limit: AtomicBool::new(false),
            written_armed: AtomicBool::new(false),
            flow: Mutex::new(FlowState {
                congested_since: None,
                calm_since: Instant::now(),
                lagging_since: None,
                drain_waiters: Vec::new(),
                written_waiters: Vec::new(),
            }),
            lag_limit: flow.policy.lag_limit,
            killed: AtomicBool::new(false),
            kill: Notify::new(),
            kill_frame: Mutex::new(None),
            flow_control: flow,
        });
        (
            Outbox {
                tx,
                watch: OutboxRef {
                    shared: shared.clone(),
                },
            },
            OutboxReceiver { rx, shared },
        )
    }

    /// Queues a message; silently dropped if the connection is gone or being closed.
    pub fn send(&self, text: impl Into<Frame>) {
        let shared = &*self.watch.shared;
        if shared.killed.load(Ordering::Acquire) {
            return;
        }
        let text = text.into();
        let len = text.len();
        // Count the bytes before queueing them: the writer may write and report them
        // (`written`) before `send` returns, which would otherwise underflow the counter.
        let queued = shared.queued.fetch_add(len, Ordering::AcqRel) + len;
        if self.push_counted(text) {
            self.queued_now(queued);
        }
    }

    /// Counts `len` bytes of a message the host holds back behind an answer it is encoding
    /// outside its lock (`Host::answer`) as queued, so that flow control sees them as it sees
    /// the queue: a terminal flooding a connection whose `subscribe` or `reconnect` answer is
    /// being encoded is paused at the high watermark like any other, instead of piling up
    /// envelopes behind the answer. [`Outbox::send_held`] queues the message once the answer
    /// is out.
    pub fn hold(&self, len: usize) {
        let queued = self.watch.shared.queued.fetch_add(len, Ordering::AcqRel) + len;
        self.queued_now(queued);
    }

    /// Queues a message that [`Outbox::hold`] counted (the count never dips in between, so a
    /// write reported meanwhile cannot end a congestion episode early).
    pub fn send_held(&self, text: impl Into<Frame>) {
        self.push_counted(text.into());
    }

    /// Queues a message whose bytes are already counted in `queued`; uncounts them if the
    /// connection is gone or being closed. Whether it was queued.
    fn push_counted(&self, text: Frame) -> bool {
        let shared = &*self.watch.shared;
        let len = text.len();
        if shared.killed.load(Ordering::Acquire) {
            shared.queued.fetch_sub(len, Ordering::AcqRel);
            return false;
        }
        shared
            .enqueued_total
            .fetch_add(len as u64, Ordering::AcqRel);
        if self.tx.send(Outgoing::Text(text)).is_err() {
            shared.queued.fetch_sub(len, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Starts a congestion episode if `queued` (the count just after adding to it) passed the
    /// high watermark, and flags a lagging connection over its lag limit.
    fn queued_now(&self, queued: usize) {
        let shared = &*self.watch.shared;
        if queued > HIGH_WATERMARK_BYTES && !shared.congested.load(Ordering::Acquire) {
            let mut flow = shared.flow.lock();
            if flow.congested_since.is_none()
                && shared.queued.load(Ordering::Acquire) > HIGH_WATERMARK_BYTES
            {
                flow.congested_since = Some(Instant::now());
                shared.congested.store(true, Ordering::Release);
                drop(flow);
                shared.flow_control.watchdog.notify_one();
            }
        }
        if queued > shared.lag_limit && shared.lagging.load(Ordering::Acquire) {
            self.watch.flag_over_limit();
        }
    }

    /// Queues a close frame after whatever is queued.
    pub fn close(&self, code: u16, reason: impl Into<String>) {
        let _ = self.tx.send(Outgoing::Close {
            code,
            reason: reason.into(),
        });
    }

    /// Closes the connection without flushing its queue (a stalled or lagging peer): the
    /// writer drops pending data, tries to send a close frame for a moment, and stops. Nothing
    /// more is queued; terminals waiting for it are woken.
    pub fn kill(&self, code: u16, reason: impl Into<String>) {
        let shared = &self.watch.shared;
        *shared.kill_frame.lock() = Some((code, reason.into()));
        shared.killed.store(true, Ordering::Release);
        shared.kill.notify_one();
        self.watch.release_waiters();
    }

    /// A ticket for everything queued so far: see [`OutboxRef::is_written`].
    pub fn ticket(&self) -> u64 {
        self.watch.ticket()
    }

    /// Bytes queued and not yet written to the socket.
    pub fn queued_bytes(&self) -> usize {
        self.watch.queued_bytes()
    }

    /// Whether the connection is in a congestion episode: see [`OutboxRef::is_congested`].
    pub fn is_congested(&self) -> bool {
        self.watch.is_congested()
    }

    /// The handle terminals and flow control use to watch this queue.
    pub fn watch(&self) -> &OutboxRef {
        &self.watch
    }
}

impl OutboxRef {
    /// A ticket for everything queued so far: see [`OutboxRef::is_written`].
    pub fn ticket(&self) -> u64 {
        self.shared.enqueued_total.load(Ordering::Acquire)
    }

    /// Whether everything queued before [`OutboxRef::ticket`] returned `ticket` has been
    /// written to the socket (or dropped because the connection is gone).
    pub fn is_written(&self, ticket: u64) -> bool {
        self.shared.written_total.load(Ordering::Acquire) >= ticket
    }

    /// Bytes queued and not yet written to the socket.
    pub fn queued_bytes(&self) -> usize {
        self.shared.queued.load(Ordering::Acquire)
    }

    /// Whether the connection is in a congestion episode (its queue passed the high watermark
    /// and is not yet back under the low one).
    pub fn is_congested(&self) -> bool {
        self.shared.congested.load(Ordering::Acquire)
    }

    /// Whether the connection is lagging (see `flow.rs`).
    pub fn is_lagging(&self) -> bool {
        self.shared.lagging.load(Ordering::Acquire)
    }

    /// Whether the connection is being closed ([`Outbox::kill`]) or its writer is gone.
    pub fn is_killed(&self) -> bool {
        self.shared.killed.load(Ordering::Acquire)
    }

    /// Whether a lagging connection passed its queue limit (the watchdog closes it).
    pub(super) fn is_over_limit(&self) -> bool {
        self.shared.over_limit.load(Ordering::Acquire)
    }

    /// Runs `f` on the congestion state under its lock.
    pub(super) fn with_flow<R>(&self, f: impl FnOnce(&FlowState) -> R) -> R {
        f(&self.shared.flow.lock())
    }

    /// Registers `wake` to be notified once this connection's congestion episode ends (or it
    /// goes away), and returns the episode's state; `None` (and nothing registered) if the
    /// connection is not congested.
    pub(super) fn wake_on_drain<R>(
        &self,
        wake: &Arc<Notify>,
        f: impl FnOnce(&FlowState) -> R,
    ) -> Option<R> {
        let mut flow = self.shared.flow.lock();
        flow.congested_since?;
        if self.is_killed() {
            return None;
        }
        if !flow.drain_waiters.iter().any(|w| Arc::ptr_eq(w, wake)) {
            flow.drain_waiters.push(wake.clone());
        }
        Some(f(&flow))
    }

    /// Registers `wake` to be notified once everything queued before `ticket` has been
    /// written; returns `false` (and registers nothing) if it already has been. One
    /// registration per `wake`: a later ticket replaces an earlier one.
    pub fn wake_when_written(&self, ticket: u64, wake: &Arc<Notify>) -> bool {
        if self.is_written(ticket) {
            return false;
        }
        let mut flow = self.shared.flow.lock();
        match flow
            .written_waiters
            .iter_mut()
            .find(|(_, w)| Arc::ptr_eq(w, wake))
        {
            Some(entry) => entry.0 = entry.0.max(ticket),
            None => flow.written_waiters.push((ticket, wake.clone())),
        }
        self.shared.written_armed.store(true, Ordering::Release);
        drop(flow);
        // The writer may have passed the ticket before the registration was visible.
        if self.is_written(ticket) {
            self.fire_written();
        }
        true
    }

    /// Marks the connection as lagging from `now` (no-op if it already is or is not
    /// congested); wakes the watchdog, and flags it at once if it is already over its limit.
    pub(super) fn mark_lagging(&self, now: Instant) {
        if self.is_lagging() {
            return;
        }
        let mut flow = self.shared.flow.lock();
        if flow.congested_since.is_none() || flow.lagging_since.is_some() {
            return;
        }
        flow.lagging_since = Some(now);
        self.shared.lagging.store(true, Ordering::Release);
        drop(flow);
        if self.queued_bytes() > self.shared.lag_limit {
            self.flag_over_limit();
        } else {
            self.shared.flow_control.watchdog.notify_one();
        }
    }

    fn flag_over_limit(&self) {
        if !self.shared.over_limit.swap(true, Ordering::AcqRel) {
            self.shared.flow_control.watchdog.notify_one();
        }
    }

    /// Wakes every registered terminal (the connection is going away).
    fn release_waiters(&self) {
        let mut flow = self.shared.flow.lock();
        let drain = std::mem::take(&mut flow.drain_waiters);
        let written = std::mem::take(&mut flow.written_waiters);
        drop(flow);
        for w in drain.iter().chain(written.iter().map(|(_, w)| w)) {
            w.notify_one();
        }
    }

    /// Wakes the terminals whose ticket has been written.
    fn fire_written(&self) {
        let done = self.shared.written_total.load(Ordering::Acquire);
        let mut flow = self.shared.flow.lock();
        let mut fired = Vec::new();
        flow.written_waiters.retain(|(t, w)| {
            if *t <= done {
                fired.push(w.clone());
                false
            } else {
                true
            }
        });
        if flow.written_waiters.is_empty() {
            self.shared.written_armed.store(false, Ordering::Release);
        }
        drop(flow);
        for w in fired {
            w.notify_one();
        }
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

    /// Reports `bytes` of queued text as written to the socket: ends a congestion episode once
    /// the queue is back under the low watermark (waking the terminals paused for it), and
    /// wakes the terminals whose last update is now written.
    pub fn written(&self, bytes: usize) {
        let shared = &*self.shared;
        // Saturating: the total is u64::MAX once the receiver is gone.
        let _ = shared
            .written_total
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                Some(w.saturating_add(bytes as u64))
            });
        let before = shared.queued.fetch_sub(bytes, Ordering::AcqRel);
        let after = before.saturating_sub(bytes);
        if after <= LOW_WATERMARK_BYTES && shared.congested.load(Ordering::Acquire) {
            let mut flow = shared.flow.lock();
            if flow.congested_since.is_some()
                && shared.queued.load(Ordering::Acquire) <= LOW_WATERMARK_BYTES
            {
                flow.congested_since = None;
                flow.lagging_since = None;
                flow.calm_since = Instant::now();
                shared.congested.store(false, Ordering::Release);
                shared.lagging.store(false, Ordering::Release);
                shared.over_limit.store(false, Ordering::Release);
                let drain = std::mem::take(&mut flow.drain_waiters);
                drop(flow);
                for w in drain {
                    w.notify_one();
                }
            }
        }
        if shared.written_armed.load(Ordering::Acquire) {
            OutboxRef {
                shared: self.shared.clone(),
            }
            .fire_written();
        }
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
    /// written (no terminal waits for it), nothing more is queued, and waiting terminals
    /// re-check.
    fn drop(&mut self) {
        self.shared.written_total.store(u64::MAX, Ordering::Release);
        self.shared.killed.store(true, Ordering::Release);
        OutboxRef {
            shared: self.shared.clone(),
        }
        .release_waiters();
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
            if let Some(frame) = self.shared.kill_frame.lock().clone() {
                return frame;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbox() -> (Outbox, OutboxReceiver) {
        Outbox::new(Flow::new(&crate::config::Config::default()))
    }

    #[tokio::test]
    async fn accounting_and_congestion_episodes() {
        let (outbox, mut rx) = outbox();
        outbox.send("x".repeat(HIGH_WATERMARK_BYTES));
        assert!(!outbox.is_congested());
        outbox.send("y".repeat(10));
        assert!(outbox.is_congested());
        let Some(Outgoing::Text(t)) = rx.recv().await else {
            panic!()
        };
        rx.written(t.len());
        assert_eq!(outbox.queued_bytes(), 10);
        assert!(!outbox.is_congested());
        assert!(outbox.watch().with_flow(|f| f.congested_since.is_none()));
    }

    #[tokio::test]
    async fn messages_held_behind_an_answer_count_as_queued() {
        let (outbox, mut rx) = outbox();
        // Envelopes held back while an answer is encoded congest the connection as queued ones
        // do, before anything reached the outbox itself.
        let held = "h".repeat(HIGH_WATERMARK_BYTES);
        outbox.hold(held.len());
        outbox.hold(1);
        assert_eq!(outbox.queued_bytes(), HIGH_WATERMARK_BYTES + 1);
        assert!(outbox.is_congested());
        // The answer, then the held messages: each counted once.
        outbox.send("answer");
        outbox.send_held(held);
        outbox.send_held("z");
        assert_eq!(
            outbox.queued_bytes(),
            HIGH_WATERMARK_BYTES + 1 + "answer".len()
        );
        let mut order = Vec::new();
        for _ in 0..3 {
            let Some(Outgoing::Text(t)) = rx.recv().await else {
                panic!()
            };
            rx.written(t.len());
            order.push(t.len());
        }
        assert_eq!(order, ["answer".len(), HIGH_WATERMARK_BYTES, 1]);
        assert_eq!(outbox.queued_bytes(), 0);
        assert!(!outbox.is_congested());
    }

    #[tokio::test]
    async fn waiters_wake_on_drain_and_on_written_tickets() {
        let (outbox, mut rx) = outbox();
        let w = outbox.watch();
        let wake = Arc::new(Notify::new());
        assert!(w.wake_on_drain(&wake, |_| ()).is_none(), "not congested");
        outbox.send("x".repeat(HIGH_WATERMARK_BYTES + 1));
        let ticket = outbox.ticket();
        assert!(w.wake_on_drain(&wake, |_| ()).is_some());
        assert!(w.wake_when_written(ticket, &wake));
        let Some(Outgoing::Text(t)) = rx.recv().await else {
            panic!()
        };
        rx.written(t.len());
        // Both registrations fired; one stored permit wakes the terminal once.
        wake.notified().await;
        assert!(!w.wake_when_written(ticket, &wake), "already written");
    }

    #[tokio::test]
    async fn kill_wakes_the_writer_and_drops_later_messages() {
        let (outbox, rx) = outbox();
        let signal = rx.kill_signal();
        outbox.kill(4001, "stalled");
        assert_eq!(signal.killed().await, (4001, "stalled".to_string()));
        outbox.send("late");
        assert_eq!(outbox.queued_bytes(), 0);
    }
}
