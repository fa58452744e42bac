//! The pty process: spawn a program on a fresh pseudo-terminal, write input, resize, wait for
//! its exit status, and kill every process of its session.
//!
//! Uses `portable-pty` to open the pty and spawn (the child becomes a session leader with the
//! pty as its controlling terminal). Input goes through a dedicated writer thread so a pty
//! whose input buffer is full never blocks the async runtime. Exit statuses come from
//! `waitpid` directly, so a signal death is reported as `128 + signal` (project decision D5).
//! The reader and writer threads share one non-blocking duplicate of the pty master and wait
//! in `poll(2)` on it together with a stop signal (an eventfd), so that killing the terminal
//! makes them let go of the pty even while a process that left the session still holds it.
//! Touches only the OS (pty, signals, `/proc`); knows nothing of AHP.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use portable_pty::{native_pty_system, CommandBuilder, MasterPty, PtySize};

/// What to run and how.
#[derive(Debug, Clone)]
pub struct SpawnRequest {
    /// Program to execute (absolute path or a name looked up on `PATH`).
    pub program: PathBuf,
    /// Arguments after the program name.
    pub args: Vec<OsString>,
    /// Working directory; must be an existing directory (validated by the caller).
    pub cwd: PathBuf,
    /// Initial width in columns (1..=[`crate::terminal::MAX_DIMENSION`]).
    pub cols: u16,
    /// Initial height in rows (1..=[`crate::terminal::MAX_DIMENSION`]).
    pub rows: u16,
    /// Variables set on top of the daemon's own environment.
    pub env: Vec<(OsString, OsString)>,
    /// Variables removed from the inherited environment.
    pub env_remove: Vec<OsString>,
}

/// Input accepted for a terminal but not yet written to its pty, in bytes, beyond which more
/// input is refused (the program is not reading its input).
pub const MAX_PENDING_INPUT_BYTES: usize = 8 * 1024 * 1024;

/// Why input was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputError {
    /// [`MAX_PENDING_INPUT_BYTES`] would be exceeded.
    QueueFull,
    /// The pty is gone.
    Closed,
}

/// A running (or exited, not yet disposed) pty process.
pub struct PtyProcess {
    pid: i32,
    master: Mutex<Box<dyn MasterPty + Send>>,
    input: Mutex<Option<std_mpsc::Sender<Vec<u8>>>>,
    pending_input: Arc<AtomicUsize>,
    io: Arc<PtyIo>,
}

/// The reader and writer threads' handle on the pty master: a non-blocking duplicate of it
/// and a stop signal both wait on.
struct PtyIo {
    fd: OwnedFd,
    stop: OwnedFd,
}

impl PtyIo {
    /// Duplicates `master` (close-on-exec), makes it non-blocking and creates the stop
    /// signal.
    fn new(master: RawFd) -> io::Result<PtyIo> {
        // SAFETY: plain fcntl/eventfd calls on a descriptor we own; results are checked and
        // wrapped in OwnedFd at once.
        unsafe {
            let dup = libc::fcntl(master, libc::F_DUPFD_CLOEXEC, 3);
            if dup < 0 {
                return Err(io::Error::last_os_error());
            }
            let fd = OwnedFd::from_raw_fd(dup);
            let flags = libc::fcntl(dup, libc::F_GETFL);
            if flags < 0 || libc::fcntl(dup, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
                return Err(io::Error::last_os_error());
            }
            let stop = libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK);
            if stop < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(PtyIo {
                fd,
                stop: OwnedFd::from_raw_fd(stop),
            })
        }
    }

    /// Tells the reader and writer to stop (they then drop their handle on the pty).
    fn stop(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
        let _ = unsafe {
            libc::write(
                self.stop.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }

    /// Waits until the pty is ready for `events` (`POLLIN`/`POLLOUT`, or hung up): `Ok(true)`;
    /// or until stopped: `Ok(false)`.
    fn wait(&self, events: libc::c_short) -> io::Result<bool> {
        let mut fds = [
            libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events,
                revents: 0,
            },
            libc::pollfd {
                fd: self.stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        loop {
            // SAFETY: `fds` is a valid array of two pollfd for the duration of the call.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if fds[1].revents != 0 {
                return Ok(false);
            }
            if fds[0].revents != 0 {
                return Ok(true);
            }
        }
    }
}

/// Reads pty output; returns end of file once stopped.
struct Reader(Arc<PtyIo>);

impl Read for Reader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            // SAFETY: reads at most buf.len() bytes into buf.
            let n =
                unsafe { libc::read(self.0.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => {
                    if !self.0.wait(libc::POLLIN)? {
                        return Ok(0);
                    }
                }
                io::ErrorKind::Interrupted => {}
                _ => return Err(e),
            }
        }
    }
}

/// Writes pty input; fails once stopped.
struct Writer(Arc<PtyIo>);

impl Write for Writer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            // SAFETY: writes at most buf.len() bytes from buf.
            let n = unsafe { libc::write(self.0.fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => {
                    if !self.0.wait(libc::POLLOUT)? {
                        return Err(io::Error::new(
                            io::ErrorKind::BrokenPipe,
                            "the terminal is being disposed",
                        ));
                    }
                }
                io::ErrorKind::Interrupted => {}
                _ => return Err(e),
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl std::fmt::Debug for PtyProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtyProcess")
            .field("pid", &self.pid)
            .finish()
    }
}

/// The read side of the pty master: raw output bytes of everything running on the pty.
pub type PtyReader = Box<dyn Read + Send>;

impl PtyProcess {
    /// Opens a pty of the requested size and spawns the program on it.
    ///
    /// Errors: the pty cannot be opened, or the program cannot be executed (the message names
    /// the program). Blocking (fork/exec): call from a blocking context.
    pub fn spawn(req: SpawnRequest) -> io::Result<(PtyProcess, PtyReader)> {
        let pty_system = native_pty_system();
        let pair = pty_system
            .openpty(PtySize {
                rows: req.rows,
                cols: req.cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .map_err(|e| io::Error::other(format!("cannot open a pty: {e}")))?;
        let mut cmd = CommandBuilder::new(&req.program);
        cmd.args(&req.args);
        cmd.cwd(&req.cwd);
        for key in &req.env_remove {
            cmd.env_remove(key);
        }
        for (k, v) in &req.env {
            cmd.env(k, v);
        }
        let child = pair.slave.spawn_command(cmd).map_err(|e| {
            io::Error::other(format!("cannot start {}: {e}", req.program.display()))
        })?;
        // Close our copy of the slave so that EOF arrives once every process on it is gone.
        drop(pair.slave);
        let pid = child
            .process_id()
            .ok_or_else(|| io::Error::other("spawned process has no pid"))?
            as i32;
        // Exit statuses are collected with waitpid (see `wait_exit`), not through `child`.
        drop(child);
        let master_fd = pair
            .master
            .as_raw_fd()
            .ok_or_else(|| io::Error::other("the pty has no file descriptor"))?;
        let io = Arc::new(
            PtyIo::new(master_fd)
                .map_err(|e| io::Error::new(e.kind(), format!("cannot use the pty: {e}")))?,
        );
        let reader: PtyReader = Box::new(Reader(io.clone()));
        let writer = Box::new(Writer(io.clone()));
        let (tx, rx) = std_mpsc::channel::<Vec<u8>>();
        let pending_input = Arc::new(AtomicUsize::new(0));
        let pending = pending_input.clone();
        std::thread::Builder::new()
            .name(format!("pty-writer-{pid}"))
            .spawn(move || writer_loop(writer, rx, pending))?;
        Ok((
            PtyProcess {
                pid,
                master: Mutex::new(pair.master),
                input: Mutex::new(Some(tx)),
                pending_input,
                io,
            },
            reader,
        ))
    }

    /// Process id of the program, which is also its session id and process group id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Queues bytes for the pty; never blocks. Bytes are written in order, unmodified, by the
    /// terminal's writer thread. Errors: [`InputError::QueueFull`] when more than
    /// [`MAX_PENDING_INPUT_BYTES`] would be waiting; [`InputError::Closed`] when the pty is gone.
    pub fn write(&self, bytes: Vec<u8>) -> Result<(), InputError> {
        let guard = match self.input.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let Some(tx) = guard.as_ref() else {
            return Err(InputError::Closed);
        };
        let len = bytes.len();
        if self.pending_input.load(Ordering::Acquire) + len > MAX_PENDING_INPUT_BYTES {
            return Err(InputError::QueueFull);
        }
        self.pending_input.fetch_add(len, Ordering::AcqRel);
        tx.send(bytes).map_err(|_| InputError::Closed)
    }

    /// Would `len` more bytes of input fit in the queue?
    pub fn input_fits(&self, len: usize) -> bool {
        self.pending_input.load(Ordering::Acquire) + len <= MAX_PENDING_INPUT_BYTES
    }

    /// Sets the pty window size; the foreground process group receives SIGWINCH.
    pub fn resize(&self, cols: u16, rows: u16) -> io::Result<()> {
        let master = match self.master.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        master
            .resize(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .map_err(|e| io::Error::other(e.to_string()))
    }

    /// Kills every process of the terminal's session: SIGHUP (and SIGCONT, so stopped jobs
    /// see it) to every process group in the session, then SIGKILL to whatever is still alive
    /// after `grace`. Returns once no process of the session is left or after `grace` plus one
    /// second. Processes that left the session (`setsid`) are out of reach, but the reader and
    /// writer threads stop at once and let go of the pty, which is closed when this
    /// `PtyProcess` is dropped: such a process then gets EIO on the pty. Blocking.
    pub fn kill_session(&self, grace: Duration) {
        // Stop accepting input so the writer thread ends, and stop reading output.
        if let Ok(mut g) = self.input.lock() {
            g.take();
        }
        self.io.stop();
        kill_session(self.pid, grace);
    }
}

impl Drop for PtyProcess {
    fn drop(&mut self) {
        // The threads must not keep the pty open once nobody can use the terminal.
        self.io.stop();
    }
}

fn writer_loop(
    mut writer: Box<dyn Write + Send>,
    rx: std_mpsc::Receiver<Vec<u8>>,
    pending: Arc<AtomicUsize>,
) {
    while let Ok(bytes) = rx.recv() {
        let result = writer.write_all(&bytes).and_then(|_| writer.flush());
        pending.fetch_sub(bytes.len(), Ordering::AcqRel);
        if let Err(e) = result {
            tracing::debug!(error = %e, "pty writer stopped");
            return;
        }
    }
}

/// Blocks until the process `pid` (a child of this daemon) exits; returns its exit code,
/// `128 + signal` for a signal death (decision D5). `None` if it cannot be waited for.
pub fn wait_exit(pid: i32) -> Option<i64> {
    loop {
        match waitpid(Pid::from_raw(pid), None) {
            Ok(WaitStatus::Exited(_, code)) => return Some(i64::from(code)),
            Ok(WaitStatus::Signaled(_, sig, _)) => return Some(128 + sig as i64),
            Ok(_) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                tracing::warn!(pid, error = %e, "waitpid failed");
                return None;
            }
        }
    }
}

/// Process ids and process group ids of every live process whose session id is `sid`,
/// read from `/proc/<pid>/stat`.
pub fn session_members(sid: i32) -> Vec<(i32, i32)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name is in parentheses and may itself hold spaces or parentheses.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = after.split_whitespace().collect();
        // After the name: state, ppid, pgrp, session.
        if fields.len() < 4 || fields[0] == "Z" {
            continue;
        }
        let (Ok(pgrp), Ok(session)) = (fields[2].parse::<i32>(), fields[3].parse::<i32>()) else {
            continue;
        };
        if session == sid {
            out.push((pid, pgrp));
        }
    }
    out
}

fn signal_all(members: &[(i32, i32)], sig: Signal) {
    let mut groups: Vec<i32> = members.iter().map(|&(_, g)| g).collect();
    groups.sort_unstable();
    groups.dedup();
    for g in groups {
        let _ = killpg(Pid::from_raw(g), sig);
    }
    for &(p, _) in members {
        let _ = kill(Pid::from_raw(p), sig);
    }
}

/// See [`PtyProcess::kill_session`].
pub fn kill_session(sid: i32, grace: Duration) {
    let members = session_members(sid);
    if members.is_empty() {
        return;
    }
    signal_all(&members, Signal::SIGHUP);
    signal_all(&members, Signal::SIGCONT);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if session_members(sid).is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let left = session_members(sid);
        if left.is_empty() || Instant::now() >= deadline {
            return;
        }
        signal_all(&left, Signal::SIGKILL);
        std::thread::sleep(Duration::from_millis(10));
    }
}
