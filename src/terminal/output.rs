//! The output pipeline of one terminal: raw pty bytes in, [`OutputItem`]s out, in stream order,
//! and the hand-off of those events from the reader task to the host ([`channel`]).
//!
//! Runs in the terminal's reader task (`reader.rs`), or on its flood thread while it floods.
//! The shell-integration [`OutputParser`] assembles UTF-8 across reads (invalid bytes become
//! U+FFFD, no character is split between two events), removes every shell-integration
//! sequence and reports marks; the [`CommandTracker`] turns the marks into terminal actions.
//! Output written before a mark is emitted before the mark's action. Terminal queries the
//! parser removed become [`OutputItem::Reply`]s, in stream order, for the host to answer. Touches nothing outside the terminal it belongs to.
//!
//! The hand-off is bounded in bytes of output ([`PENDING_OUTPUT_BYTES`]; a mark's action or a
//! query's reply counts [`ITEM_BYTES`] plus its strings, [`batch_bytes`]): when that much is
//! waiting, the reader task stops reading the pty ([`EventSender::send`] waits), so the program
//! blocks in `write`. The
//! receiver is woken only when what it asked for is there — any event when it is idle, a
//! given amount of output while it is merging — never once per pty read, which is what keeps
//! a flood cheap (a pty read is at most about 4 KiB).

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, MutexGuard};

use tokio::sync::mpsc::error::{SendError, TryRecvError, TrySendError};
use tokio::sync::Notify;

use super::model::query;
use super::shell_integration::{now_ms, CommandTracker, OutputParser, Parsed, ParserCarry};
use super::{OutputItem, TerminalEvent};
use crate::config::ReportColors;

/// Output bytes that may wait in the hand-off before the reader task stops reading the pty.
pub const PENDING_OUTPUT_BYTES: usize = 128 * 1024;

/// Per-terminal output state, kept across reads.
pub struct OutputPipeline {
    nonce: String,
    injected: bool,
    parser: OutputParser,
    tracker: CommandTracker,
    scratch: Vec<Parsed>,
    colors: ReportColors,
}

impl std::fmt::Debug for OutputPipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputPipeline").finish_non_exhaustive()
    }
}

impl OutputPipeline {
    /// A pipeline for a terminal whose integration scripts (if any) carry `nonce`, starting in
    /// the directory `cwd_uri` (a `file://` URI, so the first cwd mark reporting the same
    /// directory produces no `terminal/cwdChanged`). With `injected`, the terminal runs
    /// ahpty's own scripts and only marks signed with the nonce are believed
    /// ([`OutputParser::signed`]); otherwise any OSC 633/133 mark the shell prints is.
    pub fn new(nonce: String, cwd_uri: Option<String>, injected: bool) -> Self {
        let parser = if injected {
            OutputParser::signed(nonce.clone())
        } else {
            OutputParser::new(nonce.clone())
        };
        OutputPipeline {
            nonce,
            injected,
            parser,
            tracker: CommandTracker::new(cwd_uri),
            scratch: Vec::new(),
            colors: ReportColors::default(),
        }
    }

    /// This pipeline's state between two reads, as data (for a live upgrade).
    pub fn suspend(&self) -> PipelineCarry {
        PipelineCarry {
            nonce: self.nonce.clone(),
            injected: self.injected,
            parser: self.parser.suspend(),
            tracker: self.tracker.clone(),
        }
    }

    /// A pipeline that goes on where the suspended one stopped.
    pub fn resume(carry: &PipelineCarry) -> Self {
        let mut p = OutputPipeline::new(carry.nonce.clone(), None, carry.injected);
        p.parser.resume(&carry.parser);
        p.tracker = carry.tracker.clone();
        p
    }

    /// Answers OSC 10/11/12 colour queries with `colors` (default: [`ReportColors::default`]).
    pub fn with_report_colors(mut self, colors: ReportColors) -> Self {
        self.colors = colors;
        self
    }

    /// Processes one read's bytes.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<OutputItem> {
        let mut scratch = std::mem::take(&mut self.scratch);
        self.parser.feed(bytes, &mut scratch);
        let out = self.convert(&mut scratch);
        self.scratch = scratch;
        out
    }

    /// End of stream: releases anything held back (a dangling partial character becomes
    /// one U+FFFD).
    pub fn finish(&mut self) -> Vec<OutputItem> {
        let mut scratch = std::mem::take(&mut self.scratch);
        self.parser.finish(&mut scratch);
        let out = self.convert(&mut scratch);
        self.scratch = scratch;
        out
    }

    fn convert(&mut self, events: &mut Vec<Parsed>) -> Vec<OutputItem> {
        let mut out = Vec::with_capacity(events.len());
        let mut actions = Vec::new();
        for ev in events.drain(..) {
            match ev {
                Parsed::Text(t) => match out.last_mut() {
                    Some(OutputItem::Data(d)) => d.push_str(&t),
                    _ => out.push(OutputItem::Data(t)),
                },
                Parsed::Mark(m) => {
                    self.tracker.on_mark(m, now_ms(), &mut actions);
                    out.extend(actions.drain(..).map(|a| OutputItem::Action(Box::new(a))));
                }
                Parsed::Query(q) => {
                    if let Some(reply) = query::answer(&q, &self.colors) {
                        out.push(OutputItem::Reply(reply));
                    }
                }
            }
        }
        out
    }
}

/// What an [`OutputPipeline`] carries across a live upgrade: the shell-integration nonce and
/// mode, the parser's held-back bytes and the command tracker (docs/upgrade.md).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PipelineCarry {
    /// The terminal's shell-integration nonce.
    pub nonce: String,
    /// Whether ahpty's own integration scripts run (only signed marks are believed).
    pub injected: bool,
    /// The parser's held-back bytes.
    pub parser: ParserCarry,
    /// Command state (running command, cwd, detection).
    #[serde(default)]
    pub tracker: CommandTracker,
}

/// What one action or query reply counts for in [`batch_bytes`], in bytes, besides the text it
/// carries: about what handling it costs the host next to output text (an envelope of its
/// own, encoded, fanned out, recorded and kept for replay, or a reply to write). So the
/// hand-off holds at most 256 of them, and one merged update of the pump (256 KiB,
/// `host::pump::COALESCE_BYTES`) at most 512, which bounds how long the host lock is held
/// for a burst of marks.
pub const ITEM_BYTES: usize = 512;

/// What one item counts for in [`batch_bytes`]: its text's bytes for output, and
/// [`ITEM_BYTES`] plus the bytes of the strings it carries for an action (command id and line,
/// cwd, title) or a reply.
pub fn item_bytes(item: &OutputItem) -> usize {
    use ahp_types::actions::StateAction as A;
    match item {
        OutputItem::Data(d) => d.len(),
        OutputItem::Action(a) => {
            ITEM_BYTES
                + match a.as_ref() {
                    A::TerminalCommandExecuted(e) => e.command_id.len() + e.command_line.len(),
                    A::TerminalCommandFinished(f) => f.command_id.len(),
                    A::TerminalCwdChanged(c) => c.cwd.len(),
                    A::TerminalTitleChanged(t) => t.title.len(),
                    _ => 0,
                }
        }
        OutputItem::Reply(r) => {
            ITEM_BYTES
                + match r {
                    query::Reply::Bytes(b) => b.len(),
                    _ => 0,
                }
        }
    }
}

/// Bytes a batch of events counts for in the hand-off and in the pump's merging: its output
/// text, plus [`item_bytes`] for each action and reply, so that output made only of marks or
/// terminal queries (which print no text) is bounded like text: the reader stops reading the
/// pty once the hand-off holds [`PENDING_OUTPUT_BYTES`] of them.
pub fn batch_bytes(batch: &[OutputItem]) -> usize {
    batch.iter().map(item_bytes).sum()
}

/// Bytes an event counts for in the hand-off ([`batch_bytes`]; 0 for EOF and exit).
pub fn output_bytes(event: &TerminalEvent) -> usize {
    match event {
        TerminalEvent::Output(batch) => batch_bytes(batch),
        _ => 0,
    }
}

struct State {
    queue: VecDeque<(TerminalEvent, usize)>,
    /// Output bytes in `queue`.
    bytes: usize,
    /// Events in `queue` that are not output (EOF, exit).
    others: usize,
    senders: usize,
    /// Senders blocked waiting for room.
    blocked: usize,
    receiver: bool,
    /// The receiver waits until `bytes >= want` (or a non-output event, or no sender is left).
    want: Option<usize>,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when output was taken below the capacity (a blocked sender thread may go on).
    room: Condvar,
    /// The same, for a sender task waiting in [`EventSender::send`].
    room_async: Notify,
    /// Signalled when what the receiver waits for is there.
    ready: Notify,
    capacity: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }
}

/// The sending half of a terminal's event hand-off (the reader task, the waiter thread).
pub struct EventSender {
    shared: Arc<Shared>,
}

/// The receiving half (the host's per-terminal task).
pub struct EventReceiver {
    shared: Arc<Shared>,
}

/// A hand-off holding at most `capacity` bytes of output (see the module docs). Events that
/// are not output (EOF, exit) never wait for room.
pub fn channel(capacity: usize) -> (EventSender, EventReceiver) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            queue: VecDeque::new(),
            bytes: 0,
            others: 0,
            senders: 1,
            blocked: 0,
            receiver: true,
            want: None,
        }),
        room: Condvar::new(),
        room_async: Notify::new(),
        ready: Notify::new(),
        capacity,
    });
    (
        EventSender {
            shared: shared.clone(),
        },
        EventReceiver { shared },
    )
}

impl EventSender {
    /// Queues an event, waiting (asynchronously) while the hand-off holds its capacity of
    /// output. Errors: the receiver is gone (the event is handed back). Cancel safe: a
    /// cancelled send queued nothing.
    pub async fn send(&self, event: TerminalEvent) -> Result<(), SendError<TerminalEvent>> {
        let is_output = matches!(event, TerminalEvent::Output(_));
        loop {
            let room = self.shared.room_async.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            {
                let s = self.shared.lock();
                if !(is_output && s.receiver && s.bytes >= self.shared.capacity) {
                    return self.push(s, event);
                }
            }
            room.await;
        }
    }

    /// Queues an event if there is room, without waiting: `Full` (the event handed back) while
    /// the hand-off holds `limit` bytes of output (a flood thread's limit, which may exceed the
    /// capacity [`send`](Self::send) waits at), `Closed` once the receiver is gone.
    pub fn try_send_within(
        &self,
        event: TerminalEvent,
        limit: usize,
    ) -> Result<(), TrySendError<TerminalEvent>> {
        let is_output = matches!(event, TerminalEvent::Output(_));
        let s = self.shared.lock();
        if is_output && s.receiver && s.bytes >= limit {
            return Err(TrySendError::Full(event));
        }
        self.push(s, event)
            .map_err(|SendError(event)| TrySendError::Closed(event))
    }

    /// Queues an event, blocking the calling thread while the hand-off holds its capacity of
    /// output. Errors: the receiver is gone (the event is handed back).
    pub fn blocking_send(&self, event: TerminalEvent) -> Result<(), SendError<TerminalEvent>> {
        let is_output = matches!(event, TerminalEvent::Output(_));
        let mut s = self.shared.lock();
        while is_output && s.receiver && s.bytes >= self.shared.capacity {
            s.blocked += 1;
            self.shared.room.wait(&mut s);
            s.blocked -= 1;
        }
        self.push(s, event)
    }

    /// Queues `event` (room was checked under the lock `s`) and wakes the receiver if it
    /// waits for what is now there.
    fn push(
        &self,
        mut s: MutexGuard<'_, State>,
        event: TerminalEvent,
    ) -> Result<(), SendError<TerminalEvent>> {
        if !s.receiver {
            return Err(SendError(event));
        }
        let n = output_bytes(&event);
        let is_output = matches!(event, TerminalEvent::Output(_));
        s.bytes += n;
        if !is_output {
            s.others += 1;
        }
        s.queue.push_back((event, n));
        let wake = s.want.is_some_and(|w| !is_output || s.bytes >= w);
        if wake {
            s.want = None;
        }
        drop(s);
        if wake {
            self.shared.ready.notify_one();
        }
        Ok(())
    }

    /// Whether the receiver is gone.
    pub fn is_closed(&self) -> bool {
        !self.shared.lock().receiver
    }
}

impl Clone for EventSender {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        EventSender {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for EventSender {
    fn drop(&mut self) {
        let mut s = self.shared.lock();
        s.senders -= 1;
        let last = s.senders == 0;
        drop(s);
        if last {
            self.shared.ready.notify_one();
        }
    }
}

impl EventReceiver {
    fn pop(&self, s: &mut State) -> Option<TerminalEvent> {
        let (event, n) = s.queue.pop_front()?;
        let was_full = s.bytes >= self.shared.capacity;
        s.bytes -= n;
        if !matches!(event, TerminalEvent::Output(_)) {
            s.others -= 1;
        }
        if was_full && s.bytes < self.shared.capacity {
            self.shared.room.notify_all();
            self.shared.room_async.notify_waiters();
        }
        Some(event)
    }

    /// The next event; `None` once every sender is gone and nothing is left.
    pub async fn recv(&mut self) -> Option<TerminalEvent> {
        loop {
            {
                let mut s = self.shared.lock();
                if let Some(event) = self.pop(&mut s) {
                    return Some(event);
                }
                if s.senders == 0 {
                    return None;
                }
                s.want = Some(0);
            }
            self.shared.ready.notified().await;
        }
    }

    /// The next event if one is waiting.
    pub fn try_recv(&mut self) -> Result<TerminalEvent, TryRecvError> {
        let mut s = self.shared.lock();
        match self.pop(&mut s) {
            Some(event) => Ok(event),
            None if s.senders == 0 => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    /// Completes once at least `bytes` of output, or an event that is not output, are waiting,
    /// or every sender is gone. Takes nothing.
    pub async fn ready(&self, bytes: usize) {
        loop {
            {
                let mut s = self.shared.lock();
                if s.bytes >= bytes || s.others > 0 || s.senders == 0 {
                    return;
                }
                s.want = Some(bytes);
            }
            self.shared.ready.notified().await;
        }
    }
}

#[cfg(test)]
impl EventReceiver {
    /// Bytes of output waiting in the hand-off.
    pub(crate) fn waiting_bytes(&self) -> usize {
        self.shared.lock().bytes
    }
}

impl Drop for EventReceiver {
    fn drop(&mut self) {
        let mut s = self.shared.lock();
        s.receiver = false;
        s.queue.clear();
        s.bytes = 0;
        drop(s);
        self.shared.room.notify_all();
        self.shared.room_async.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::actions::StateAction;

    fn data(n: usize) -> TerminalEvent {
        TerminalEvent::Output(vec![OutputItem::Data("x".repeat(n))])
    }

    #[tokio::test]
    async fn hand_off_wakes_only_for_what_was_asked() {
        let (tx, mut rx) = channel(100);
        tx.blocking_send(data(10)).unwrap();
        // 10 bytes waiting: `ready(20)` must not complete yet.
        {
            let ready = rx.ready(20);
            tokio::pin!(ready);
            use futures_util::FutureExt;
            assert!(ready.as_mut().now_or_never().is_none());
            tx.blocking_send(data(10)).unwrap();
            ready.await;
        }
        // A non-output event completes any wait.
        assert!(matches!(rx.try_recv(), Ok(TerminalEvent::Output(_))));
        tx.blocking_send(TerminalEvent::Eof).unwrap();
        rx.ready(1000).await;
        assert!(matches!(rx.recv().await, Some(TerminalEvent::Output(_))));
        assert!(matches!(rx.recv().await, Some(TerminalEvent::Eof)));
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
        drop(tx);
        assert!(rx.recv().await.is_none());
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Disconnected)));
    }

    #[test]
    fn a_full_hand_off_blocks_the_reader_until_output_is_taken() {
        let (tx, mut rx) = channel(100);
        tx.blocking_send(data(100)).unwrap();
        // Not output: never waits for room.
        tx.blocking_send(TerminalEvent::Exited(Some(0))).unwrap();
        let reader = std::thread::spawn(move || {
            let r = tx.blocking_send(data(1));
            (r.is_ok(), tx)
        });
        // Wait (bounded) until the reader is blocked on the full hand-off.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while rx.shared.lock().blocked == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the reader never blocked"
            );
            std::thread::yield_now();
        }
        assert!(!reader.is_finished());
        assert!(matches!(rx.try_recv(), Ok(TerminalEvent::Output(_))));
        let (sent, tx) = reader.join().unwrap();
        assert!(sent);
        // The receiver is gone: the reader is told at once.
        drop(rx);
        assert!(tx.blocking_send(data(1)).is_err());
        assert!(tx.is_closed());
    }

    #[tokio::test]
    async fn a_full_hand_off_holds_an_async_sender_until_output_is_taken() {
        use futures_util::FutureExt;
        let (tx, mut rx) = channel(100);
        tx.send(data(100)).await.unwrap();
        // Not output: never waits for room.
        tx.send(TerminalEvent::Exited(Some(0))).await.unwrap();
        let send = tx.send(data(1));
        tokio::pin!(send);
        assert!(send.as_mut().now_or_never().is_none());
        // Taking output below the capacity lets it go on.
        assert!(matches!(rx.try_recv(), Ok(TerminalEvent::Output(_))));
        tokio::time::timeout(std::time::Duration::from_secs(10), send)
            .await
            .expect("the sender was not woken")
            .unwrap();
        assert!(matches!(rx.try_recv(), Ok(TerminalEvent::Exited(_))));
        assert!(matches!(rx.try_recv(), Ok(TerminalEvent::Output(_))));
        // A sender waiting for room learns at once that the receiver is gone.
        tx.send(data(100)).await.unwrap();
        let send = tx.send(data(1));
        tokio::pin!(send);
        assert!(send.as_mut().now_or_never().is_none());
        drop(rx);
        assert!(send.await.is_err());
    }

    #[test]
    fn marks_become_actions_in_stream_order() {
        let mut p = OutputPipeline::new("n1".into(), None, false);
        let mut events = p.feed(b"$ \x1b]633;E;echo hi;n1\x07\x1b]633;C\x07hi\r\n");
        events.extend(p.feed(b"\x1b]633;D;0\x07$ "));
        let kinds: Vec<String> = events
            .iter()
            .map(|e| match e {
                OutputItem::Data(d) => format!("data:{d}"),
                OutputItem::Action(a) => match a.as_ref() {
                    StateAction::TerminalCommandDetectionAvailable(_) => "available".into(),
                    StateAction::TerminalCommandExecuted(c) => format!("exec:{}", c.command_line),
                    StateAction::TerminalCommandFinished(f) => format!("done:{:?}", f.exit_code),
                    other => format!("{other:?}"),
                },
                OutputItem::Reply(r) => format!("reply:{r:?}"),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "data:$ ",
                "available",
                "exec:echo hi",
                "data:hi\r\n",
                "done:Some(0)",
                "data:$ "
            ]
        );
    }
}
