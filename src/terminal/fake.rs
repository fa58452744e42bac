//! A stand-in for the OS's ptys, for unit tests of what sits above the [`Pty`] trait (the
//! host's pump, flow control and reaping) under paused tokio time, without processes.
//!
//! [`FakePtys::start`] returns a [`FakePty`] and the real hand-off ([`output::channel`]); the
//! test plays the program: [`FakePty::output`] runs bytes through the real output pipeline,
//! [`FakePty::exit`] and [`FakePty::eof`] report what the waiter thread and the reader task would.
//! Everything the host does to the pty (input, resizes, the kill) is recorded. Touches no OS
//! resource.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::output::{self, EventSender, OutputPipeline};
use super::process::MAX_PENDING_INPUT_BYTES;
use super::{EventReceiver, InputError, Pty, PtySystem, SpawnRequest, TerminalEvent};

/// Starts [`FakePty`]s and keeps every one it started, in order.
#[derive(Default)]
pub(crate) struct FakePtys {
    started: Mutex<Vec<Arc<FakePty>>>,
}

impl FakePtys {
    /// The pty started last. Panics (a test failure) when none was.
    pub(crate) fn last(&self) -> Arc<FakePty> {
        self.started
            .lock()
            .last()
            .cloned()
            .expect("no terminal was started")
    }
}

impl PtySystem for FakePtys {
    fn start(
        &self,
        request: SpawnRequest,
        pipeline: OutputPipeline,
    ) -> io::Result<(Arc<dyn Pty>, EventReceiver)> {
        let (tx, rx) = output::channel(output::PENDING_OUTPUT_BYTES);
        let mut started = self.started.lock();
        let pty = Arc::new(FakePty {
            pid: 100_000 + started.len() as i32,
            request,
            pipeline: Mutex::new(pipeline),
            events: Mutex::new(Some(tx)),
            input: Mutex::new(Vec::new()),
            sizes: Mutex::new(Vec::new()),
            killed: Mutex::new(None),
        });
        started.push(pty.clone());
        Ok((pty, rx))
    }
}

/// One pretend terminal: see the module docs.
pub(crate) struct FakePty {
    pid: i32,
    /// What the host asked to run.
    pub(crate) request: SpawnRequest,
    pipeline: Mutex<OutputPipeline>,
    /// `None` once the "reader task and waiter thread" are gone (after the kill).
    events: Mutex<Option<EventSender>>,
    input: Mutex<Vec<u8>>,
    sizes: Mutex<Vec<(u16, u16)>>,
    killed: Mutex<Option<Duration>>,
}

impl FakePty {
    fn send(&self, event: TerminalEvent) {
        if let Some(tx) = self.events.lock().as_ref() {
            let _ = tx.blocking_send(event);
        }
    }

    /// The program prints `bytes` (one pty read). Output never blocks here while the hand-off
    /// has room; a test must not fill it from an async context.
    pub(crate) fn output(&self, bytes: &[u8]) {
        let items = self.pipeline.lock().feed(bytes);
        if !items.is_empty() {
            self.send(TerminalEvent::Output(items));
        }
    }

    /// The program exits with `code`; the pty stays open (as when a background job holds it).
    pub(crate) fn exit(&self, code: Option<i64>) {
        self.send(TerminalEvent::Exited(code));
    }

    /// The last process holding the pty is gone.
    pub(crate) fn eof(&self) {
        self.send(TerminalEvent::Eof);
    }

    /// Input written so far, in order.
    pub(crate) fn input(&self) -> Vec<u8> {
        self.input.lock().clone()
    }

    /// Window sizes set so far, in order, as `(cols, rows)`.
    pub(crate) fn sizes(&self) -> Vec<(u16, u16)> {
        self.sizes.lock().clone()
    }

    /// The grace `kill_session` was called with, if it was.
    pub(crate) fn killed(&self) -> Option<Duration> {
        *self.killed.lock()
    }
}

impl Pty for FakePty {
    fn pid(&self) -> i32 {
        self.pid
    }

    fn write(&self, bytes: Vec<u8>) -> Result<(), InputError> {
        if self.killed.lock().is_some() {
            return Err(InputError::Closed);
        }
        let mut input = self.input.lock();
        if input.len() + bytes.len() > MAX_PENDING_INPUT_BYTES {
            return Err(InputError::QueueFull);
        }
        input.extend_from_slice(&bytes);
        Ok(())
    }

    fn input_fits(&self, len: usize) -> bool {
        self.input.lock().len() + len <= MAX_PENDING_INPUT_BYTES
    }

    fn resize(&self, cols: u16, rows: u16) -> io::Result<()> {
        self.sizes.lock().push((cols, rows));
        Ok(())
    }

    /// Records the kill; the session ends as a real one does: the threads report EOF and the
    /// SIGHUP death (`128 + 1`), then let go of the hand-off.
    fn kill_session(&self, grace: Duration) {
        *self.killed.lock() = Some(grace);
        self.send(TerminalEvent::Eof);
        self.send(TerminalEvent::Exited(Some(129)));
        self.events.lock().take();
    }

    fn exit_status(&self) -> super::Reaping {
        super::Reaping::Pending
    }

    fn suspend(
        &self,
        _deadline: std::time::Instant,
    ) -> io::Result<(std::os::fd::OwnedFd, Vec<u8>)> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "a stand-in pty cannot be handed over",
        ))
    }
}
