//! The per-terminal task that moves [`TerminalEvent`]s from the pty threads into the host.
//!
//! It coalesces output that queued up while the host was busy (so a flood becomes few large
//! envelopes while an idle terminal's first byte goes out at once), and orders the exit:
//! `terminal/exited` is emitted only after the output has been drained, i.e. after EOF, or
//! [`EXIT_DRAIN`] after the process exited if a background job keeps the pty open. Output
//! arriving after that is still delivered, until the terminal is disposed.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::Host;
use crate::terminal::{PtyEvent, TerminalEvent};

/// How long after the process exits its output may still drain before `terminal/exited`.
pub const EXIT_DRAIN: Duration = Duration::from_millis(500);

/// Output merged into one host update, in bytes.
const COALESCE_BYTES: usize = 256 * 1024;

pub(super) async fn run(
    host: Arc<Host>,
    uri: String,
    id: u64,
    mut events: mpsc::Receiver<TerminalEvent>,
) {
    let mut pending: Option<TerminalEvent> = None;
    let mut exit: Option<Option<i64>> = None;
    let mut exit_reported = false;
    let mut eof = false;
    let mut deadline: Option<Instant> = None;
    loop {
        let event = match pending.take() {
            Some(e) => Some(e),
            None => match deadline {
                Some(d) => match tokio::time::timeout_at(d, events.recv()).await {
                    Ok(e) => e,
                    Err(_) => {
                        deadline = None;
                        if let (Some(code), false) = (exit, exit_reported) {
                            host.apply_exited(&uri, id, code);
                            exit_reported = true;
                        }
                        continue;
                    }
                },
                None => events.recv().await,
            },
        };
        let Some(event) = event else { break };
        match event {
            TerminalEvent::Output(mut batch) => {
                let mut bytes = batch_bytes(&batch);
                while bytes < COALESCE_BYTES {
                    match events.try_recv() {
                        Ok(TerminalEvent::Output(more)) => {
                            bytes += batch_bytes(&more);
                            batch.extend(more);
                        }
                        Ok(other) => {
                            pending = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                host.apply_output(&uri, id, batch);
            }
            TerminalEvent::Eof => {
                eof = true;
                if let (Some(code), false) = (exit, exit_reported) {
                    host.apply_exited(&uri, id, code);
                    exit_reported = true;
                    deadline = None;
                }
            }
            TerminalEvent::Exited(code) => {
                exit = Some(code);
                if eof {
                    host.apply_exited(&uri, id, code);
                    exit_reported = true;
                } else {
                    deadline = Some(Instant::now() + EXIT_DRAIN);
                }
            }
        }
    }
    if let (Some(code), false) = (exit, exit_reported) {
        host.apply_exited(&uri, id, code);
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
