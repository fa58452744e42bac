//! Terminals at the OS level: a pty process plus the tasks and the thread that move its bytes.
//!
//! [`start`] spawns the program (see [`process`]) and serves its pty from the async runtime
//! (`pty_io.rs`): a reader task (`reader.rs`) turns pty bytes into [`OutputItem`]s through the
//! [`output`] pipeline (UTF-8 assembly, shell-integration marks, terminal queries answered by
//! the [`model`]), a writer task writes input, and a waiter thread reports the exit status.
//! Everything arrives, in order, on one hand-off of [`TerminalEvent`]s bounded in bytes
//! ([`output::channel`]); when it is full the reader stops reading the pty, so a program that
//! floods output blocks in `write` as in a real terminal.
//! This module knows nothing of connections or `serverSeq`; the host consumes the events.
//!
//! May touch: the OS (ptys, threads, processes) and the event hand-off; nothing of AHP state.

pub(crate) mod escape;
#[cfg(test)]
pub(crate) mod fake;
pub(crate) mod model;
pub(crate) mod output;
pub(crate) mod process;
pub(crate) mod pty_io;
pub(crate) mod pty_master;
pub(crate) mod reader;
pub mod shell_integration;
pub(crate) mod utf8;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use ahp_types::actions::StateAction;

pub use output::{EventReceiver, EventSender, OutputPipeline, PipelineCarry};
pub use process::{InputError, PtyProcess, Reaping, SpawnRequest};
pub use pty_io::PtyReader;
pub use pty_master::PtyMaster;

/// Largest accepted `cols` or `rows` of a terminal (createTerminal, `terminal/resized`).
pub const MAX_DIMENSION: i64 = 4096;

/// File descriptors a running terminal keeps open: the pty master, which its reader and
/// writer tasks share through the runtime's epoll. Spawning briefly needs a few more (the pty
/// slave and its copies for the child's standard streams, an exec-status pipe).
pub const FDS_PER_TERMINAL: u64 = 1;

/// Size of one pty read, in bytes (one buffer per runtime worker thread, not per terminal).
pub const READ_BUFFER_BYTES: usize = 64 * 1024;

/// One item of a terminal's output, in stream order: text for `terminal/data`, or an action the
/// output pipeline derived from shell-integration marks. (The parser's own pieces are
/// [`shell_integration::Parsed`]; what reaches the host is a [`TerminalEvent`].)
#[derive(Debug, Clone, PartialEq)]
pub enum OutputItem {
    /// Output text: valid UTF-8, shell-integration sequences removed.
    Data(String),
    /// A server-originated terminal action derived from the output (command marks, cwd, title).
    Action(Box<StateAction>),
    /// The answer to a terminal query found (and removed) at this point of the output.
    Reply(model::Reply),
}

/// What a running terminal reports to the host, in order, through its hand-off
/// ([`output::channel`]): the one event type of the output path.
#[derive(Debug)]
pub enum TerminalEvent {
    /// Output of one pty read.
    Output(Vec<OutputItem>),
    /// The pty reported end of file: every process holding it has exited.
    Eof,
    /// The program exited with this code (`128 + signal` for a signal death, decision D5;
    /// `None` if unknown).
    Exited(Option<i64>),
    /// The reader stopped for a live upgrade: what its pipeline held back. The last event of
    /// the reader; nothing it read is lost.
    Suspended(Box<ReaderCarry>),
}

/// What a terminal's reader hands over at a live upgrade (docs/upgrade.md).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReaderCarry {
    /// The output pipeline between two reads.
    pub pipeline: PipelineCarry,
    /// The pty had reported end of file (nothing more will be read from it).
    #[serde(default)]
    pub eof: bool,
}

/// A terminal handed over by a live upgrade, to be restarted in this image.
pub struct Adopted {
    /// The program's pid (its session and process group id).
    pub pid: i32,
    /// The pty master, inherited across `execve`.
    pub master: PtyMaster,
    /// Input not yet written to the pty.
    pub input: Vec<u8>,
    /// The exit code if the old image had already reaped the process.
    pub exit: Reaping,
    /// The reader's state.
    pub carry: ReaderCarry,
}

/// A running terminal's pty as the host drives it: input, window size, and the end of its
/// session. [`PtyProcess`] is the real one; the host's unit tests put a stand-in behind it so
/// that the pump, flow control and reaping run under paused tokio time without processes.
pub trait Pty: Send + Sync {
    /// Process id of the program (also its session and process group id), for logs.
    fn pid(&self) -> i32;
    /// Queues input for the program; never blocks. Errors: [`InputError::QueueFull`] past
    /// [`process::MAX_PENDING_INPUT_BYTES`] waiting bytes, [`InputError::Closed`] once the pty
    /// is gone.
    fn write(&self, bytes: Vec<u8>) -> Result<(), InputError>;
    /// Whether `len` more bytes of input would fit in the queue.
    fn input_fits(&self, len: usize) -> bool;
    /// Sets the window size in cells; the foreground process group receives SIGWINCH.
    fn resize(&self, cols: u16, rows: u16) -> io::Result<()>;
    /// Ends every process of the session (SIGHUP, then SIGKILL after `grace`) and lets go of
    /// the pty. Blocking: call it from a blocking thread.
    fn kill_session(&self, grace: Duration);
    /// Whether the program was already reaped, and its exit code, for a live upgrade's
    /// hand-over.
    fn exit_status(&self) -> Reaping;
    /// Suspends the terminal for a live upgrade (docs/upgrade.md): stops its writer and
    /// reader (the reader's last event is [`TerminalEvent::Suspended`]) and returns a
    /// close-on-exec duplicate of the pty master and the input not yet written, in order. The
    /// program keeps running. Errors: the master cannot be duplicated, or this pty cannot be
    /// handed over. Blocking: waits for the writer until `deadline` at most (then its queued
    /// input is dropped, and logged).
    fn suspend(&self, deadline: std::time::Instant) -> io::Result<(std::os::fd::OwnedFd, Vec<u8>)>;
    /// Tells the reader and writer to stop for a live upgrade without waiting for them, so
    /// that the terminals of a host stop in parallel; [`Pty::suspend`] then collects each.
    /// Callable any number of times. The default does nothing.
    fn begin_suspend(&self) {}
}

/// How terminals are started: [`NativePtys`] in the daemon, a stand-in in unit tests.
pub trait PtySystem: Send + Sync {
    /// Spawns `request` on a new pty and returns it with the hand-off on which its output,
    /// EOF and exit status arrive, in order ([`TerminalEvent`]). Blocking (fork/exec).
    fn start(
        &self,
        request: SpawnRequest,
        pipeline: OutputPipeline,
    ) -> io::Result<(Arc<dyn Pty>, EventReceiver)>;
}

/// The operating system's ptys ([`start`]).
pub struct NativePtys;

impl PtySystem for NativePtys {
    fn start(
        &self,
        request: SpawnRequest,
        pipeline: OutputPipeline,
    ) -> io::Result<(Arc<dyn Pty>, EventReceiver)> {
        let (process, events) = start(request, pipeline)?;
        Ok((process, events))
    }
}

/// Spawns `request` on a new pty and starts its reader and writer tasks and its waiter
/// thread.
///
/// Errors: the pty cannot be opened, the program cannot be started, or no tokio runtime is
/// current. Blocking (fork/exec): call it from `spawn_blocking`.
pub fn start(
    request: SpawnRequest,
    pipeline: OutputPipeline,
) -> io::Result<(Arc<PtyProcess>, EventReceiver)> {
    let (process, reader) = PtyProcess::spawn(request).map_err(explain_exhaustion)?;
    run(process, reader, pipeline, false)
}

/// Restarts a terminal handed over by a live upgrade: its writer (with the input it had
/// not written), its reader (from the pipeline's carried state) and, unless the process was
/// already reaped, its waiter. Errors: no tokio runtime is current, or the waiter thread
/// cannot be started.
pub fn adopt(adopted: Adopted) -> io::Result<(Arc<PtyProcess>, EventReceiver)> {
    let (process, reader) =
        PtyProcess::adopt(adopted.pid, adopted.master, adopted.input, adopted.exit)?;
    let pipeline = OutputPipeline::resume(&adopted.carry.pipeline);
    run(process, reader, pipeline, adopted.carry.eof)
}

/// Starts the reader task and, for a process not yet reaped, the waiter thread. A runtime is
/// current: `process` registered its pty with it.
fn run(
    process: PtyProcess,
    reader: PtyReader,
    pipeline: OutputPipeline,
    eof: bool,
) -> io::Result<(Arc<PtyProcess>, EventReceiver)> {
    let pid = process.pid();
    let (tx, rx) = output::channel(output::PENDING_OUTPUT_BYTES);
    if process.exit_status() == Reaping::Pending {
        let slot = process.exit_slot();
        let waiter_tx = tx.clone();
        std::thread::Builder::new()
            .name(format!("pty-waiter-{pid}"))
            .spawn(move || {
                let code = process::wait_exit(pid, &slot);
                let _ = waiter_tx.blocking_send(TerminalEvent::Exited(code));
            })?;
    }
    tokio::spawn(reader::run(reader, pipeline, tx, eof));
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
