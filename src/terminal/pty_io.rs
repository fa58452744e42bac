//! A running terminal's pty master inside the async runtime: one non-blocking descriptor
//! registered with tokio's reactor (`AsyncFd`, epoll), shared by the terminal's reader task
//! ([`PtyReader`], see `reader.rs`) and its writer task ([`write_input`]), and their stop signal.
//!
//! No thread waits on a quiet pty: a task that waits for output, or for room to write input,
//! sleeps in the runtime's one `epoll_wait` together with every other terminal and socket, so
//! the output of many terminals costs one wake-up of a worker thread instead of one wake-up of
//! a thread per terminal (docs/performance.md, "Scale"). Only a flooding terminal is read on a
//! thread of its own for a while ([`PtyReader::read_blocking_with`], `reader.rs`); it waits in
//! `poll(2)` on the same descriptor, which stays non-blocking and registered. A stop — the
//! terminal is killed, disposed, or suspended for a live upgrade — ends both tasks even while
//! the pty stays readable: a process that left the session may hold the pty and keep
//! writing, and the tasks must let go of it so that it can be closed. A suspension is told
//! apart from a kill ([`PtyIo::is_suspending`]): the reader then hands over what its pipeline
//! holds back and the writer what it did not write.
//!
//! Touches only the pty master it owns; knows nothing of AHP.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;

use nix::poll::{PollFd, PollFlags, PollTimeout};
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, watch};

use super::pty_master::PtyMaster;
use super::READ_BUFFER_BYTES;

thread_local! {
    /// The read buffer of the readers running on this thread: the reader tasks of a runtime
    /// worker ([`PtyReader::read_with`]), or a flood thread
    /// ([`PtyReader::read_blocking_with`]).
    static READ_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The pty master registered with the runtime, and the stop signal of the tasks using it.
pub(crate) struct PtyIo {
    fd: AsyncFd<PtyMaster>,
    stop: watch::Sender<bool>,
    /// The stop is a suspension for a live upgrade, not a kill.
    suspending: AtomicBool,
    /// How many times the reader moved to a flood thread (`reader.rs`, "Floods").
    floods: AtomicUsize,
}

impl PtyIo {
    /// Makes `master` non-blocking and registers it with the current tokio runtime.
    /// Errors: no runtime is running on this thread (or the one it is a blocking thread of),
    /// or the descriptor cannot be registered.
    pub(crate) fn new(master: PtyMaster) -> io::Result<Arc<PtyIo>> {
        master.set_nonblocking()?;
        // `AsyncFd::register` would panic outside a runtime.
        tokio::runtime::Handle::try_current()
            .map_err(|_| io::Error::other("no async runtime to serve the pty from"))?;
        // SAFETY: `PtyMaster` owns its descriptor, which stays open and unchanged until the
        // `AsyncFd` (its only owner) is dropped.
        let fd = unsafe { AsyncFd::register(master) }.map_err(|e| e.into_parts().1)?;
        Ok(Arc::new(PtyIo {
            fd,
            stop: watch::Sender::new(false),
            suspending: AtomicBool::new(false),
            floods: AtomicUsize::new(0),
        }))
    }

    /// The pty master (for resizing and duplicating it).
    pub(crate) fn master(&self) -> &PtyMaster {
        self.fd.get_ref()
    }

    /// Tells the reader and writer tasks to stop (they then drop their handle on the pty).
    /// Callable from any thread, any number of times.
    pub(crate) fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Stops the tasks for a live upgrade: the reader hands over its pipeline's state, the
    /// writer the input it did not write.
    pub(crate) fn suspend(&self) {
        self.suspending.store(true, Ordering::Release);
        self.stop();
    }

    /// Whether the stop is a suspension for a live upgrade rather than a kill.
    pub(crate) fn is_suspending(&self) -> bool {
        self.suspending.load(Ordering::Acquire)
    }

    /// How many times this terminal's reader moved to a flood thread.
    #[cfg(test)]
    pub(crate) fn floods(&self) -> usize {
        self.floods.load(Ordering::Relaxed)
    }

    /// A reader of this pty's output.
    pub(crate) fn reader(self: &Arc<Self>) -> PtyReader {
        PtyReader {
            stop: self.stop.subscribe(),
            io: self.clone(),
        }
    }

    /// Writes all of `bytes`, waiting for room in the pty's input queue whenever it is full.
    /// Returns how many bytes were written and, if not all, why.
    async fn write_all(
        &self,
        bytes: &[u8],
        stop: &mut watch::Receiver<bool>,
    ) -> (usize, Option<WriteEnd>) {
        let mut written = 0;
        while written < bytes.len() {
            let mut guard = tokio::select! {
                biased;
                _ = stopped(stop) => return (written, Some(WriteEnd::Stopped)),
                guard = self.fd.writable() => match guard {
                    Ok(g) => g,
                    Err(e) => return (written, Some(WriteEnd::Failed(e))),
                },
            };
            let rest = &bytes[written..];
            match guard.try_io(|m| {
                // SAFETY: writes at most rest.len() bytes from rest.
                let n = unsafe {
                    libc::write(m.get_ref().as_raw_fd(), rest.as_ptr().cast(), rest.len())
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            }) {
                Ok(Ok(0)) => {
                    return (
                        written,
                        Some(WriteEnd::Failed(io::ErrorKind::WriteZero.into())),
                    )
                }
                Ok(Ok(n)) => written += n,
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return (written, Some(WriteEnd::Failed(e))),
                // Would block: the readiness was cleared; wait for the next edge.
                Err(_) => {}
            }
        }
        (written, None)
    }
}

/// Completes once `stop` is set (or its sender is gone, which cannot happen while a task
/// holds the [`PtyIo`]).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// One `read(2)` of the pty master into this thread's read buffer (at most
/// [`READ_BUFFER_BYTES`]): `Some` with what `parse` makes of the bytes, `None` at end of file.
/// Errors: those of `read(2)` (`EAGAIN` when it has nothing, `EIO` once the last process
/// holding the slave is gone).
/// What [`PtyReader::read_with`] came to.
pub enum Read<R> {
    /// What the read bytes were parsed into.
    Parsed(R),
    /// End of file: the pty's slave side is closed.
    Eof,
    /// The terminal was stopped (killed or suspended) before a read.
    Stopped,
}

/// Why a pty write did not write everything.
enum WriteEnd {
    /// The terminal was stopped (killed or suspended).
    Stopped,
    /// `write(2)` or the wait for room failed.
    Failed(io::Error),
}

fn read_once<R>(master: &PtyMaster, parse: impl FnOnce(&[u8]) -> R) -> io::Result<Option<R>> {
    READ_BUFFER.with_borrow_mut(|buf| {
        if buf.len() < READ_BUFFER_BYTES {
            buf.resize(READ_BUFFER_BYTES, 0);
        }
        // SAFETY: reads at most buf.len() bytes into buf; `master` owns the open descriptor.
        let n = unsafe { libc::read(master.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        match n {
            n if n < 0 => Err(io::Error::last_os_error()),
            0 => Ok(None),
            n => Ok(Some(parse(&buf[..n as usize]))),
        }
    })
}

/// How long [`PtyReader::read_blocking_with`] waits in `poll(2)` before it looks at the stop
/// signal again: the most a stop waits for a reader that waits for output on a thread.
pub(crate) const STOP_CHECK: std::time::Duration = std::time::Duration::from_millis(10);

/// What a blocking read came to ([`PtyReader::read_blocking_with`]).
pub(crate) enum BlockingRead<R> {
    /// Output was read: what the parser made of it.
    Read(R),
    /// End of file.
    Eof,
    /// The terminal was stopped (killed, or suspended).
    Stopped,
    /// No output came for as long as the caller would wait.
    Idle,
}

/// The reading end: one per terminal, owned by its reader task.
pub struct PtyReader {
    io: Arc<PtyIo>,
    stop: watch::Receiver<bool>,
}

impl PtyReader {
    /// Whether the stop that ended reading is a suspension for a live upgrade rather than
    /// the terminal being killed.
    pub fn is_suspending(&self) -> bool {
        self.io.is_suspending()
    }

    /// Counts a move of the reading to a flood thread ([`PtyIo::floods`]).
    pub(crate) fn count_flood(&self) {
        self.io.floods.fetch_add(1, Ordering::Relaxed);
    }

    /// Completes once the terminal is stopped (killed or suspended).
    pub async fn stopped(&mut self) {
        stopped(&mut self.stop).await
    }

    /// Waits for output, reads it (at most [`READ_BUFFER_BYTES`]) into this thread's read
    /// buffer and returns what `parse` makes of the bytes ([`Read::Parsed`]), [`Read::Eof`] at
    /// end of file, or [`Read::Stopped`] once stopped — checked before every read, so a pty that never runs dry
    /// does not keep a stopped reader going. The buffer belongs to the worker thread, not to
    /// the terminal (a read and `parse` never wait in between), so idle terminals hold none.
    /// Errors: `read(2)` failed; `EIO` is how Linux reports that the last process holding
    /// the pty slave is gone.
    pub async fn read_with<R>(&mut self, mut parse: impl FnMut(&[u8]) -> R) -> io::Result<Read<R>> {
        loop {
            let mut guard = tokio::select! {
                biased;
                _ = stopped(&mut self.stop) => return Ok(Read::Stopped),
                guard = self.io.fd.readable() => guard?,
            };
            let read = guard.try_io(|m| read_once(m.get_ref(), &mut parse));
            match read {
                Ok(Ok(Some(r))) => return Ok(Read::Parsed(r)),
                Ok(Ok(None)) => return Ok(Read::Eof),
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Err(e),
                // Would block: the readiness was cleared; wait for the next edge.
                Err(_) => {}
            }
        }
    }

    /// Reads like [`read_with`](Self::read_with), but blocking the calling thread, which must
    /// not be a runtime worker (see `reader.rs`, "Floods"): `Read(r)` with what `parse` makes of
    /// the bytes, `Eof` at end of file, `Stopped` once stopped (checked before every read and
    /// every [`STOP_CHECK`] while waiting), `Idle` if no output came for `idle`. The
    /// descriptor stays non-blocking and registered with the runtime; this waits in `poll(2)`.
    /// Errors: `read(2)` failed (`EIO`: the last process holding the pty slave is gone).
    pub(crate) fn read_blocking_with<R>(
        &mut self,
        idle: std::time::Duration,
        mut parse: impl FnMut(&[u8]) -> R,
    ) -> io::Result<BlockingRead<R>> {
        // Since when the pty has been dry (set at the first EAGAIN).
        let mut dry_since: Option<std::time::Instant> = None;
        loop {
            if *self.stop.borrow() {
                return Ok(BlockingRead::Stopped);
            }
            match read_once(self.io.master(), &mut parse) {
                Ok(Some(r)) => return Ok(BlockingRead::Read(r)),
                Ok(None) => return Ok(BlockingRead::Eof),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            let since = *dry_since.get_or_insert_with(std::time::Instant::now);
            let waited = since.elapsed();
            if waited >= idle {
                return Ok(BlockingRead::Idle);
            }
            // Measured, not counted: a `poll` that says readable while `read` finds nothing
            // still ends in `Idle`.
            let slice = STOP_CHECK.min(idle - waited);
            let mut fds = [PollFd::new(self.io.master().as_fd(), PollFlags::POLLIN)];
            let timeout = PollTimeout::try_from(slice).unwrap_or(PollTimeout::MAX);
            // Readable, hung up (the next read says so), timed out, interrupted or failed: read
            // (or look at the stop) again either way.
            let _ = nix::poll::poll(&mut fds, timeout);
        }
    }

    /// Runs `send` (handing an event to the host, which waits while the hand-off is full)
    /// until it completes — `Some(result)` — or the terminal is killed meanwhile: `None`. A
    /// suspension does not interrupt it (the pump drains the hand-off for it).
    pub async fn until_killed<R>(
        &mut self,
        send: impl std::future::Future<Output = R>,
    ) -> Option<R> {
        tokio::pin!(send);
        tokio::select! {
            r = &mut send => return Some(r),
            _ = stopped(&mut self.stop) => {}
        }
        if self.is_suspending() {
            Some(send.await)
        } else {
            None
        }
    }
}

/// The writer task: writes queued input to the pty in order, never blocking a thread on a
/// full pty. Ends when the input queue closes, on a write error, or at a stop; then sends on
/// `done` what it did not write — for a suspension, the rest of the chunk in progress and
/// every queued one, in order; otherwise nothing. `pending` counts queued bytes.
pub(crate) async fn write_input(
    io: Arc<PtyIo>,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    pending: Arc<AtomicUsize>,
    done: std_mpsc::SyncSender<Vec<u8>>,
) {
    let mut stop = io.stop.subscribe();
    let mut left = Vec::new();
    loop {
        let bytes = tokio::select! {
            biased;
            _ = stopped(&mut stop) => break,
            bytes = rx.recv() => match bytes {
                Some(b) => b,
                None => break,
            },
        };
        let (written, failed) = io.write_all(&bytes, &mut stop).await;
        pending.fetch_sub(bytes.len(), Ordering::AcqRel);
        if let Some(failed) = failed {
            if let WriteEnd::Failed(e) = failed {
                tracing::debug!(error = %e, "pty writer stopped");
            }
            left.extend_from_slice(&bytes[written..]);
            break;
        }
    }
    while let Ok(more) = rx.try_recv() {
        pending.fetch_sub(more.len(), Ordering::AcqRel);
        left.extend_from_slice(&more);
    }
    if !io.is_suspending() {
        left = Vec::new();
    }
    let _ = done.send(left);
}
