//! The per-terminal task that moves [`TerminalEvent`]s from the pty threads into the host.
//!
//! Three jobs:
//! - **Backpressure.** When a subscriber's outbound queue passes the high watermark, the pump
//!   stops taking events; the bounded event channel fills, the reader thread stops reading the
//!   pty, and the program blocks in `write` as in a real terminal. It resumes once every
//!   subscriber is back under the low watermark (or was closed as stalled).
//! - **Coalescing.** Output that arrives while this terminal's previous envelope is still
//!   waiting to be written to a subscriber is merged into the next one (up to
//!   [`COALESCE_BYTES`]). The
//!   kernel's socket buffer hides most of that wait on a fast link, so while a terminal
//!   floods — its last update carried at least [`FLOOD_BYTES`] — output is also merged for
//!   [`MERGE_WINDOW`] after each update. A flood thus becomes few large envelopes, while an
//!   idle terminal's first byte, and every keystroke echo, goes out at once.
//! - **Exit ordering.** `terminal/exited` is emitted only after the output has been drained:
//!   after EOF, or [`EXIT_DRAIN`] after the process exited if a background job keeps the pty
//!   open. Output arriving after that is still delivered, until the terminal is disposed.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use super::{Host, Outbox};
use crate::terminal::{PtyEvent, TerminalEvent};

/// How long after the process exits its output may still drain before `terminal/exited`.
pub const EXIT_DRAIN: Duration = Duration::from_millis(500);

/// Most output merged into one host update, in bytes (one `terminal/data` per update unless
/// shell-integration marks split it).
pub const COALESCE_BYTES: usize = 256 * 1024;

/// An update with at least this many bytes of output marks the terminal as flooding.
pub const FLOOD_BYTES: usize = 2048;

/// While a terminal floods, output is merged for this long after each update.
pub const MERGE_WINDOW: Duration = Duration::from_millis(2);

/// How often a paused or merging pump re-checks its subscribers even without progress
/// (subscribers may unsubscribe or disconnect).
const RECHECK: Duration = Duration::from_millis(100);

struct Pump {
    host: Arc<Host>,
    uri: String,
    id: u64,
    events: mpsc::Receiver<TerminalEvent>,
    progress: Arc<Notify>,
    /// An event taken from the channel while merging output, handled next.
    pending: Option<TerminalEvent>,
    exit: Option<Option<i64>>,
    exit_reported: bool,
    eof: bool,
    deadline: Option<Instant>,
    /// End of the merge window opened by the last update, if that update was a flood's.
    merge_until: Option<Instant>,
    /// Each subscriber's outbox with the ticket of the last update sent to it: while one of
    /// them is not yet written, this terminal's next output is merged.
    in_flight: Vec<(Outbox, u64)>,
}

pub(super) async fn run(
    host: Arc<Host>,
    uri: String,
    id: u64,
    events: mpsc::Receiver<TerminalEvent>,
) {
    let progress = host.progress();
    let mut pump = Pump {
        host,
        uri,
        id,
        events,
        progress,
        pending: None,
        exit: None,
        exit_reported: false,
        eof: false,
        deadline: None,
        merge_until: None,
        in_flight: Vec::new(),
    };
    pump.run().await;
}

impl Pump {
    async fn run(&mut self) {
        loop {
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
                    let batch = self.merge(batch).await;
                    let flooding = batch_bytes(&batch) >= FLOOD_BYTES;
                    self.in_flight = self.host.apply_output(&self.uri, self.id, batch);
                    self.merge_until = flooding.then(|| Instant::now() + MERGE_WINDOW);
                }
                TerminalEvent::Eof => {
                    self.eof = true;
                    if self.exit.is_some() {
                        self.deadline = None;
                        self.report_exit();
                    }
                }
                TerminalEvent::Exited(code) => {
                    self.exit = Some(code);
                    if self.eof {
                        self.report_exit();
                    } else {
                        self.deadline = Some(Instant::now() + EXIT_DRAIN);
                    }
                }
            }
        }
        self.report_exit();
    }

    fn report_exit(&mut self) {
        if let (Some(code), false) = (self.exit, self.exit_reported) {
            self.host.apply_exited(&self.uri, self.id, code);
            self.exit_reported = true;
        }
    }

    /// Waits while a subscriber is congested: above the high watermark, until every
    /// subscriber is under the low one.
    async fn wait_for_room(&mut self) {
        let mut paused = false;
        loop {
            let notified = self.progress.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let Some(p) = self.host.pressure(&self.uri, self.id) else {
                return;
            };
            let wait = if paused { p.above_low } else { p.above_high };
            if !wait {
                if paused {
                    tracing::debug!(terminal = %self.uri, "output resumed");
                }
                return;
            }
            if !paused {
                tracing::debug!(terminal = %self.uri, "output paused: a subscriber is congested");
                paused = true;
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep(RECHECK) => {}
            }
        }
    }

    /// Merges further output into `batch` while this terminal's last update has not reached
    /// every subscriber's socket or the flood merge window is open, up to [`COALESCE_BYTES`]. A non-output event ends the merge
    /// and is kept for later.
    async fn merge(&mut self, mut batch: Vec<PtyEvent>) -> Vec<PtyEvent> {
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
                        return batch;
                    }
                    Err(_) => break,
                }
            }
            if bytes >= COALESCE_BYTES {
                return batch;
            }
            let notified = self.progress.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // This terminal's own last update, not other terminals' output on a shared
            // connection: a quiet terminal never waits behind a noisy one.
            let unsent = self.in_flight.iter().any(|(o, t)| !o.is_written(*t))
                && !self.in_flight.iter().any(|(o, _)| o.is_congested());
            let window = self.merge_until.filter(|&end| Instant::now() < end);
            if !unsent && window.is_none() {
                return batch;
            }
            let window_end = window.unwrap_or_else(|| Instant::now() + RECHECK);
            tokio::select! {
                _ = &mut notified, if unsent => {}
                _ = tokio::time::sleep(RECHECK) => {}
                _ = tokio::time::sleep_until(window_end), if window.is_some() => {
                    self.merge_until = None;
                }
                event = self.events.recv() => match event {
                    Some(TerminalEvent::Output(more)) => {
                        bytes += batch_bytes(&more);
                        batch.extend(more);
                    }
                    Some(other) => {
                        self.pending = Some(other);
                        return batch;
                    }
                    None => return batch,
                },
            }
        }
    }
}

fn batch_bytes(batch: &[PtyEvent]) -> usize {
    batch
        .iter()
        .map(|e| match e {
            PtyEvent::Data(d) => d.len(),
            PtyEvent::Action(_) => 0,
        })
        .sum()
}
