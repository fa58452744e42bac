//! Terminals at the OS level: a pty process plus the threads that move its bytes.
//!
//! [`start`] spawns the program (see [`process`]), a reader thread that turns pty bytes into
//! [`PtyEvent`]s through the [`output`] pipeline (UTF-8 assembly, shell-integration marks,
//! terminal queries),
//! and a waiter thread that reports the exit status. Everything arrives, in order, on one
//! hand-off of [`TerminalEvent`]s bounded in bytes ([`output::channel`]); when it is full the
//! reader stops reading the pty, so a program that floods output blocks in `write` as in a
//! real terminal.
//! This module knows nothing of connections or `serverSeq`; the host consumes the events.

pub mod model;
pub mod output;
pub mod process;
pub mod shell_integration;
pub mod utf8;

use std::io::{self, Read};
use std::sync::Arc;

use ahp_types::actions::StateAction;

pub use output::{EventReceiver, EventSender, OutputPipeline};
pub use process::{PtyProcess, SpawnRequest};

/// Largest accepted `cols` or `rows` of a terminal (createTerminal, `terminal/resized`).
pub const MAX_DIMENSION: i64 = 4096;

/// File descriptors a running terminal keeps open: the pty master, the duplicate its reader
/// and writer threads share, and their stop signal (an eventfd). Spawning briefly needs a few
/// more (the pty slave and its copies for the child's standard streams, an exec-status pipe).
pub const FDS_PER_TERMINAL: u64 = 3;

/// Size of one pty read, in bytes.
pub const READ_BUFFER_BYTES: usize = 64 * 1024;

/// One item of pty output, in stream order.
#[derive(Debug, Clone, PartialEq)]
pub enum PtyEvent {
    /// Output text: valid UTF-8, shell-integration sequences removed.
    Data(String),
    /// A server-originated terminal action derived from the output (command marks, cwd, title).
    Action(Box<StateAction>),
    /// The answer to a terminal query found (and removed) at this point of the output.
    Reply(model::Reply),
}

/// What a running terminal reports to the host.
#[derive(Debug)]
pub enum TerminalEvent {
    /// Output of one pty read.
    Output(Vec<PtyEvent>),
    /// The pty reported end of file: every process holding it has exited.
    Eof,
    /// The program exited with this code (`128 + signal` for a signal death; `None` if
    /// unknown).
    Exited(Option<i64>),
}

/// Spawns `request` on a new pty and starts its reader and waiter threads.
///
/// Errors: the pty cannot be opened or the program cannot be started. Blocking (fork/exec).
pub fn start(
    request: SpawnRequest,
    pipeline: OutputPipeline,
) -> io::Result<(Arc<PtyProcess>, EventReceiver)> {
    let (process, reader) = PtyProcess::spawn(request).map_err(explain_exhaustion)?;
    let pid = process.pid();
    let (tx, rx) = output::channel(output::PENDING_OUTPUT_BYTES);
    let reader_tx = tx.clone();
    std::thread::Builder::new()
        .name(format!("pty-reader-{pid}"))
        .spawn(move || reader_loop(reader, pipeline, reader_tx))?;
    std::thread::Builder::new()
        .name(format!("pty-waiter-{pid}"))
        .spawn(move || {
            let code = process::wait_exit(pid);
            let _ = tx.blocking_send(TerminalEvent::Exited(code));
        })?;
    Ok((Arc::new(process), rx))
}

/// `e`, explained as running out of file descriptors when this process is within a few of its
/// open-file limit (the likely cause of a failure to open a pty or a pipe).
fn explain_exhaustion(e: io::Error) -> io::Error {
    match process::open_file_limit() {
        Ok((soft, _)) if process::open_descriptors() + 16 >= soft => io::Error::new(
            e.kind(),
            format!(
                "out of file descriptors (the open-file limit is {soft}): dispose terminals \
                 or raise the limit ({e})"
            ),
        ),
        _ => e,
    }
}

fn reader_loop(mut reader: Box<dyn Read + Send>, mut pipeline: OutputPipeline, tx: EventSender) {
    let mut buf = vec![0u8; READ_BUFFER_BYTES];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let events = pipeline.feed(&buf[..n]);
                if !events.is_empty() && tx.blocking_send(TerminalEvent::Output(events)).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // EIO is how Linux reports that the last process holding the pty slave is gone.
            Err(_) => break,
        }
    }
    let events = pipeline.finish();
    if !events.is_empty() {
        let _ = tx.blocking_send(TerminalEvent::Output(events));
    }
    let _ = tx.blocking_send(TerminalEvent::Eof);
}
