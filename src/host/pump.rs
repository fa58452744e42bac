//! The per-terminal task that moves [`TerminalEvent`]s from the terminal's reader and waiter into the host.
//!
//! Three jobs:
//! - **Backpressure.** Before taking more output it asks the flow-control policy
//!   (`flow.rs`) whether the terminal may read on. When it may not, the pump stops taking
//!   events; the hand-off from the reader task fills, the reader stops reading the pty, and
//!   the program blocks in `write` as in a real terminal. It sleeps until one of *its own*
//!   subscribers drains, its subscribers change, or a grace period ends — never on a timer
//!   tick or on another terminal's progress.
//! - **Coalescing.** Output that arrives while this terminal's previous envelope is still
//!   waiting to be written to a subscriber that keeps up is merged into the next one (up to
//!   [`COALESCE_BYTES`]). The kernel's socket buffer hides most of that wait on a fast link,
//!   so while a terminal floods — its last update carried at least [`FLOOD_BYTES`] — output
//!   is also merged for [`MERGE_WINDOW`] after each update. A flood thus becomes few large
//!   envelopes, while an idle terminal's first byte, and every keystroke echo, goes out at
//!   once. While merging, the pump is woken by its own last update being written, by the end
//!   of the window, or by [`WAKE_BYTES`] more output — not by every pty read.
//! - **The model's pace.** In the rare case that the terminal model falls more than
//!   1 MiB of trimmed output behind (a full-screen program redrawing faster than it can be
//!   emulated), the pump waits for it before taking more output (see `screen.rs`).
//! - **Exit ordering.** `terminal/exited` is emitted only after the output has been drained:
//!   after EOF, or [`EXIT_DRAIN`] after the process exited if a background job keeps the pty
//!   open. Output arriving after that is still delivered, until the terminal is disposed.
//!
//! May touch: its terminal's event hand-off and, through the host, the store and the
//! subscribers' outboxes; sleeps only on its own wake-ups and deadlines.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::flow::Gate;
use super::outbox::OutboxRef;
use super::Host;
use crate::terminal::output::batch_bytes;
use crate::terminal::{EventReceiver, OutputItem, ReaderCarry, TerminalEvent};

/// How long after the process exits its output may still drain before `terminal/exited`.
pub const EXIT_DRAIN: Duration = Duration::from_millis(500);

/// Most output merged into one host update, in bytes (one `terminal/data` per update unless
/// shell-integration marks split it).
pub const COALESCE_BYTES: usize = 256 * 1024;

/// An update with at least this many bytes of output marks the terminal as flooding.
pub const FLOOD_BYTES: usize = 2048;

/// While a terminal floods, output is merged for this long after each update.
pub const MERGE_WINDOW: Duration = Duration::from_millis(2);

/// While merging, the pump takes waiting output once this much is there (well under the
/// hand-off's capacity, so the reader task never waits for a merging pump).
pub const WAKE_BYTES: usize = 32 * 1024;

/// Where the terminal's program is, as far as `terminal/exited` is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
    /// It runs (no exit status yet).
    Running,
    /// It exited with this code (`None`: unknown) and `terminal/exited` is not sent yet: the
    /// pump waits for EOF, or for [`EXIT_DRAIN`].
    Draining(Option<i64>),
    /// `terminal/exited` was sent.
    Reported,
}

struct Pump {
    host: Arc<Host>,
    uri: String,
    serial: u64,
    events: EventReceiver,
    /// This terminal's wake-up: its subscribers drained, changed, or wrote its last update.
    wake: Arc<Notify>,
    /// An event taken from the hand-off while merging output, handled next.
    pending: Option<TerminalEvent>,
    /// The gate computed with the last update, used once before asking again.
    gate: Option<Gate>,
    exit: Exit,
    /// The pty reported end of file.
    eof: bool,
    /// When a draining exit is reported even without EOF.
    deadline: Option<Instant>,
    /// End of the merge window opened by the last update, if that update was a flood's.
    merge_until: Option<Instant>,
    /// Each subscriber's queue with the ticket of the last update sent to it: while one that
    /// keeps up has not written it, this terminal's next output is merged.
    in_flight: Vec<(OutboxRef, u64)>,
}

/// A pump's own state, carried across a live upgrade (docs/upgrade.md).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PumpState {
    /// The process's exit was received (its code is `exit_code`).
    pub exited: bool,
    pub exit_code: Option<i64>,
    /// `terminal/exited` was emitted.
    pub exit_reported: bool,
    /// The pty reported end of file.
    pub eof: bool,
}

/// What a suspended pump leaves for the hand-over: the reader's carry and its own state.
pub(super) struct Parked {
    pub reader: ReaderCarry,
    pub state: PumpState,
}

/// Runs the pump of the terminal at `uri` numbered `serial` until its events end (the reader and
/// waiter are gone) — see the module docs.
pub(super) async fn run(
    host: Arc<Host>,
    uri: String,
    serial: u64,
    events: EventReceiver,
    wake: Arc<Notify>,
) {
    resume(host, uri, serial, events, wake, PumpState::default()).await
}

/// [`run`] for a terminal handed over by a live upgrade, with its pump's state.
pub(super) async fn resume(
    host: Arc<Host>,
    uri: String,
    serial: u64,
    events: EventReceiver,
    wake: Arc<Notify>,
    state: PumpState,
) {
    let exit = match (state.exit_reported, state.exited) {
        (true, _) => Exit::Reported,
        (false, true) => Exit::Draining(state.exit_code),
        (false, false) => Exit::Running,
    };
    // An exit waiting for the output to drain gets its full drain time again.
    let deadline =
        (matches!(exit, Exit::Draining(_)) && !state.eof).then(|| Instant::now() + EXIT_DRAIN);
    let mut pump = Pump {
        host,
        uri,
        serial,
        events,
        wake,
        pending: None,
        gate: None,
        exit,
        eof: state.eof,
        deadline,
        merge_until: None,
        in_flight: Vec::new(),
    };
    pump.run().await;
}

impl Pump {
    async fn run(&mut self) {
        loop {
            self.wait_for_model().await;
            self.wait_for_room().await;
            let event = match self.pending.take() {
                Some(e) => Some(e),
                None => match self.deadline {
                    Some(d) => match tokio::time::timeout_at(d, self.events.recv()).await {
                        Ok(e) => e,
                        Err(_) => {
                            self.deadline = None;
                            self.report_exit();
                            continue;
                        }
                    },
                    None => self.events.recv().await,
                },
            };
            let Some(event) = event else { break };
            match event {
                TerminalEvent::Output(batch) => {
                    let (batch, bytes) = self.merge(batch).await;
                    let mut in_flight = std::mem::take(&mut self.in_flight);
                    self.gate =
                        self.host
                            .apply_output(&self.uri, self.serial, batch, &mut in_flight);
                    self.in_flight = in_flight;
                    self.merge_until =
                        (bytes >= FLOOD_BYTES).then(|| Instant::now() + MERGE_WINDOW);
                }
                TerminalEvent::Eof => {
                    self.eof = true;
                    if self.exit != Exit::Running {
                        self.deadline = None;
                        self.report_exit();
                    }
                }
                TerminalEvent::Exited(code) => {
                    self.exit = Exit::Draining(code);
                    if self.eof {
                        self.report_exit();
                    } else {
                        self.deadline = Some(Instant::now() + EXIT_DRAIN);
                    }
                }
                TerminalEvent::Suspended(carry) => {
                    // A live upgrade: everything read before it has been applied.
                    let (exited, exit_code) = match self.exit {
                        Exit::Running => (false, None),
                        Exit::Draining(code) => (true, code),
                        Exit::Reported => (true, None),
                    };
                    let state = PumpState {
                        exited,
                        exit_code,
                        exit_reported: self.exit == Exit::Reported,
                        eof: self.eof,
                    };
                    self.host.park(
                        self.serial,
                        Parked {
                            reader: *carry,
                            state,
                        },
                    );
                    return;
                }
            }
        }
        self.report_exit();
    }

    /// Sends `terminal/exited` if the program exited and it was not sent yet.
    fn report_exit(&mut self) {
        if let Exit::Draining(code) = self.exit {
            self.host.apply_exited(&self.uri, self.serial, code);
            self.exit = Exit::Reported;
        }
    }

    /// Waits while the terminal model is too far behind (see `screen.rs`).
    async fn wait_for_model(&self) {
        while let Some(caught_up) = self.host.model_backlog(&self.uri, self.serial) {
            let notified = caught_up.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.host.model_backlog(&self.uri, self.serial).is_none() {
                return;
            }
            notified.await;
        }
    }

    /// Waits while the flow-control policy holds the terminal (see `flow.rs`).
    async fn wait_for_room(&mut self) {
        let mut paused = false;
        loop {
            let gate = match self.gate.take() {
                Some(g) => g,
                None => match self.host.gate(&self.uri, self.serial) {
                    Some(g) => g,
                    None => return,
                },
            };
            let until = match gate {
                Gate::Open => {
                    if paused {
                        tracing::debug!(terminal = %self.uri, "output resumed");
                    }
                    return;
                }
                Gate::Shut { until } => until,
            };
            if !paused {
                tracing::debug!(terminal = %self.uri, "output paused: its subscribers are congested");
                paused = true;
            }
            match until {
                Some(at) => {
                    tokio::select! {
                        _ = self.wake.notified() => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => self.wake.notified().await,
            }
        }
    }

    /// Merges further output into `batch` while this terminal's last update has not reached
    /// the socket of every subscriber that keeps up, or the flood merge window is open, up to
    /// [`COALESCE_BYTES`]. A non-output event ends the merge and is kept for later. Returns the
    /// batch and its output bytes.
    async fn merge(&mut self, mut batch: Vec<OutputItem>) -> (Vec<OutputItem>, usize) {
        let mut bytes = batch_bytes(&batch);
        loop {
            while bytes < COALESCE_BYTES {
                match self.events.try_recv() {
                    Ok(TerminalEvent::Output(more)) => {
                        bytes += batch_bytes(&more);
                        batch.extend(more);
                    }
                    Ok(other) => {
                        self.pending = Some(other);
                        return (batch, bytes);
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return (batch, bytes),
                }
            }
            // Full, or a subscriber this terminal waits for is now congested: the gate is about
            // to close, so stop taking output (it stays in the bounded hand-off and the pty).
            if bytes >= COALESCE_BYTES
                || self
                    .in_flight
                    .iter()
                    .any(|(q, _)| q.is_congested() && !q.is_lagging() && !q.is_killed())
            {
                return (batch, bytes);
            }
            // This terminal's own last update, to subscribers that keep up (a congested one is
            // flow control's business): a quiet terminal never waits behind a noisy one.
            let mut unsent = false;
            for (q, ticket) in &self.in_flight {
                if !q.is_congested() && !q.is_killed() && q.wake_when_written(*ticket, &self.wake) {
                    unsent = true;
                }
            }
            let window = self.merge_until.filter(|&end| Instant::now() < end);
            if !unsent && window.is_none() {
                return (batch, bytes);
            }
            let want = (COALESCE_BYTES - bytes).min(WAKE_BYTES);
            tokio::select! {
                _ = self.wake.notified(), if unsent => {}
                _ = sleep_until_opt(window) => {
                    self.merge_until = None;
                }
                _ = self.events.ready(want) => {}
            }
        }
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
