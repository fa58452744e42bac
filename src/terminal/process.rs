//! The pty process: spawn a program on a fresh pseudo-terminal, write input, resize, wait for
//! its exit status, and kill every process of its session.
//!
//! Uses `portable-pty` to open the pty and spawn (the child becomes a session leader with the
//! pty as its controlling terminal). The pty master is then served from the async runtime
//! (`pty_io.rs`): input goes through the terminal's writer task, which waits for room in the
//! pty without blocking any thread, and output is read by its reader task (`reader.rs`).
//! Exit statuses come from `waitpid` directly, on a waiter thread, so a signal death is
//! reported as `128 + signal` (project decision D5). Killing the terminal stops both tasks,
//! so they let go of the pty even while a process that left the session still holds it.
//! Touches only the OS (pty, signals, `/proc`); knows nothing of AHP.

use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use parking_lot::Mutex;
use portable_pty::{native_pty_system, CommandBuilder, PtySize};

use super::pty_io::{self, PtyIo, PtyReader};
use super::pty_master::PtyMaster;
use tokio::sync::mpsc;

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

/// How long a suspension waits for the writer task to hand back the input it did not write.
const WRITER_STOP_TIMEOUT: Duration = Duration::from_secs(5);

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
    input: Mutex<Option<mpsc::UnboundedSender<Vec<u8>>>>,
    pending_input: Arc<AtomicUsize>,
    io: Arc<PtyIo>,
    /// Where the writer task leaves, once it ends, the input it did not write (only a
    /// suspension hands any back).
    writer_done: Mutex<Option<std_mpsc::Receiver<Vec<u8>>>>,
    /// The exit code once the waiter reaped the process (`Some(None)`: unknown).
    exit: ExitSlot,
}

/// Whether a terminal's program has been reaped, and with what exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reaping {
    /// Not reaped yet: it runs, or it exited and its waiter has not reaped it.
    Pending,
    /// Reaped; `code` is its exit code (`128 + signal` for a signal death), `None` if the
    /// status could not be read.
    Reaped { code: Option<i64> },
}

/// Where a terminal's waiter records the [`Reaping`] of its program.
pub type ExitSlot = Arc<Mutex<Reaping>>;

/// Held for reading while a waiter reaps a child and records its status; taken for writing,
/// for good, by a live upgrade just before `execve`, so that no status is reaped and then
/// lost with the old image (the new image's waiters reap it instead).
static REAP_GUARD: RwLock<()> = RwLock::new(());

/// Stops every waiter from reaping from now on (see [`REAP_GUARD`]); waits for a reap in
/// progress to be recorded. For a live upgrade only: nothing is reaped again in this image.
pub fn freeze_reaping() {
    let guard = match REAP_GUARD.write() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    std::mem::forget(guard);
}

impl std::fmt::Debug for PtyProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtyProcess")
            .field("pid", &self.pid)
            .finish()
    }
}

impl PtyProcess {
    /// How many times this terminal's reader moved to a flood thread (`reader.rs`).
    #[cfg(test)]
    pub(crate) fn floods(&self) -> usize {
        self.io.floods()
    }

    /// Opens a pty of the requested size and spawns the program on it.
    ///
    /// Errors: the pty cannot be opened, or the program cannot be executed (the message names
    /// the program), or no tokio runtime is current. Blocking (fork/exec): call from a
    /// blocking context of the runtime (`spawn_blocking`).
    pub fn spawn(req: SpawnRequest) -> io::Result<(PtyProcess, PtyReader)> {
        // The pty is served from the async runtime (`pty_io.rs`): check before starting.
        tokio::runtime::Handle::try_current()
            .map_err(|_| io::Error::other("no async runtime to serve the pty from"))?;
        let pty_system = native_pty_system();
        let pair = pty_system
            .openpty(PtySize {
                rows: req.rows,
                cols: req.cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .map_err(|e| io::Error::other(format!("cannot open a pty: {e}")))?;
        let spawned = match pair.master.tty_name() {
            Some(tty) => spawn_on_tty(&req, &tty),
            None => None,
        };
        let pid = match spawned {
            Some(Ok(pid)) => pid,
            Some(Err(e)) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot start {}: {e}", req.program.display()),
                ))
            }
            // No posix_spawn extensions in this C library: fork through portable-pty.
            None => {
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
                // Exit statuses are collected with waitpid (see `wait_exit`), not `child`.
                child
                    .process_id()
                    .ok_or_else(|| io::Error::other("spawned process has no pid"))?
                    as i32
            }
        };
        // Close our copy of the slave so that EOF arrives once every process on it is gone.
        drop(pair.slave);
        let master_fd = pair
            .master
            .as_raw_fd()
            .ok_or_else(|| io::Error::other("the pty has no file descriptor"))?;
        let master = PtyMaster::dup_from(master_fd)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot use the pty: {e}")))?;
        drop(pair.master);
        Self::with_master(pid, master, Vec::new(), Reaping::Pending)
    }

    /// A process this daemon already runs on the pty `master`, handed over by a live
    /// upgrade: `input` is the input its writer had not written yet, `exit` its exit code if
    /// it was already reaped. Starts the writer task; the caller starts the reader and, for
    /// a process not yet reaped, the waiter.
    pub fn adopt(
        pid: i32,
        master: PtyMaster,
        input: Vec<u8>,
        exit: Reaping,
    ) -> io::Result<(PtyProcess, PtyReader)> {
        Self::with_master(pid, master, input, exit)
    }

    fn with_master(
        pid: i32,
        master: PtyMaster,
        input: Vec<u8>,
        exit: Reaping,
    ) -> io::Result<(PtyProcess, PtyReader)> {
        let io = PtyIo::new(master)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot use the pty: {e}")))?;
        let (tx, rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let pending_input = Arc::new(AtomicUsize::new(input.len()));
        if !input.is_empty() {
            // The receiver is alive: it is moved into the writer task below.
            let _ = tx.send(input);
        }
        let reader = io.reader();
        let (done_tx, done_rx) = std_mpsc::sync_channel(1);
        // `PtyIo::new` succeeded, so a runtime is current here.
        tokio::spawn(pty_io::write_input(
            io.clone(),
            rx,
            pending_input.clone(),
            done_tx,
        ));
        Ok((
            PtyProcess {
                pid,
                input: Mutex::new(Some(tx)),
                pending_input,
                writer_done: Mutex::new(Some(done_rx)),
                io,
                exit: Arc::new(Mutex::new(exit)),
            },
            reader,
        ))
    }
}

impl PtyProcess {
    /// The slot the waiter records the exit code in (see [`wait_exit`]).
    pub fn exit_slot(&self) -> ExitSlot {
        self.exit.clone()
    }
}

impl super::Pty for PtyProcess {
    /// The exit code if the process was reaped (`Some(None)`: status unknown).
    fn exit_status(&self) -> Reaping {
        *self.exit.lock()
    }

    /// Suspends the terminal for a live upgrade: stops the writer and the reader (which then
    /// hands over its pipeline's state, see [`PtyReader::is_suspending`]) and returns a
    /// duplicate of the pty master (close-on-exec) and the input not yet written, in order.
    /// The process keeps running; its output waits in the pty. Blocking: waits for the writer
    /// until `deadline` at most (then, or after [`WRITER_STOP_TIMEOUT`], its queued input is
    /// dropped and logged).
    fn suspend(&self, deadline: Instant) -> io::Result<(OwnedFd, Vec<u8>)> {
        let fd = self.io.master().try_clone()?;
        self.begin_suspend();
        let done = self.writer_done.lock().take();
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .min(WRITER_STOP_TIMEOUT);
        let left = match done.map(|d| d.recv_timeout(wait)) {
            Some(Ok(left)) => left,
            // The task is gone (it always answers before it ends): nothing was left.
            Some(Err(std_mpsc::RecvTimeoutError::Disconnected)) | None => Vec::new(),
            Some(Err(std_mpsc::RecvTimeoutError::Timeout)) => {
                tracing::warn!(
                    pid = self.pid,
                    "the pty writer did not stop: its queued input is dropped"
                );
                Vec::new()
            }
        };
        Ok((fd, left))
    }

    /// Closes the input queue and tells the reader and writer to stop (see [`PtyIo::suspend`]).
    fn begin_suspend(&self) {
        self.input.lock().take();
        self.io.suspend();
    }

    /// Process id of the program, which is also its session id and process group id.
    fn pid(&self) -> i32 {
        self.pid
    }

    /// Queues bytes for the pty; never blocks. Bytes are written in order, unmodified, by the
    /// terminal's writer task. Errors: [`InputError::QueueFull`] when more than
    /// [`MAX_PENDING_INPUT_BYTES`] would be waiting; [`InputError::Closed`] when the pty is gone.
    fn write(&self, bytes: Vec<u8>) -> Result<(), InputError> {
        let guard = self.input.lock();
        let Some(tx) = guard.as_ref() else {
            return Err(InputError::Closed);
        };
        let len = bytes.len();
        if self.pending_input.load(Ordering::Acquire) + len > MAX_PENDING_INPUT_BYTES {
            return Err(InputError::QueueFull);
        }
        self.pending_input.fetch_add(len, Ordering::AcqRel);
        tx.send(bytes).map_err(|_| {
            self.pending_input.fetch_sub(len, Ordering::AcqRel);
            InputError::Closed
        })
    }

    /// Would `len` more bytes of input fit in the queue?
    fn input_fits(&self, len: usize) -> bool {
        self.pending_input.load(Ordering::Acquire) + len <= MAX_PENDING_INPUT_BYTES
    }

    /// Sets the pty window size; the foreground process group receives SIGWINCH.
    fn resize(&self, cols: u16, rows: u16) -> io::Result<()> {
        self.io.master().resize(cols, rows)
    }

    /// Kills every process of the terminal's session: SIGHUP (and SIGCONT, so stopped jobs
    /// see it) to every process group in the session, then SIGKILL to whatever is still alive
    /// after `grace`. Returns once no process of the session is left or after `grace` plus one
    /// second. Processes that left the session (`setsid`) are out of reach, but the reader and
    /// writer tasks stop at once and let go of the pty, which is closed when this
    /// `PtyProcess` is dropped: such a process then gets EIO on the pty. Blocking.
    fn kill_session(&self, grace: Duration) {
        // Stop accepting input so the writer task ends, and stop reading output.
        self.input.lock().take();
        self.io.stop();
        kill_session(self.pid, grace);
    }
}

impl Drop for PtyProcess {
    fn drop(&mut self) {
        // The tasks must not keep the pty open once nobody can use the terminal.
        self.io.stop();
    }
}

/// `posix_spawn_file_actions_addchdir_np` (glibc 2.29) and `…_addclosefrom_np` (2.34), looked
/// up at run time so that the daemon still runs (forking instead) on an older C library.
type AddChdir =
    unsafe extern "C" fn(*mut libc::posix_spawn_file_actions_t, *const libc::c_char) -> libc::c_int;
type AddClosefrom =
    unsafe extern "C" fn(*mut libc::posix_spawn_file_actions_t, libc::c_int) -> libc::c_int;

fn spawn_extensions() -> Option<(AddChdir, AddClosefrom)> {
    static FOUND: std::sync::OnceLock<Option<(usize, usize)>> = std::sync::OnceLock::new();
    let (chdir, closefrom) = (*FOUND.get_or_init(|| {
        // SAFETY: dlsym with valid NUL-terminated names; a null result means "absent".
        let find =
            |name: &std::ffi::CStr| unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
        let chdir = find(c"posix_spawn_file_actions_addchdir_np");
        let closefrom = find(c"posix_spawn_file_actions_addclosefrom_np");
        (!chdir.is_null() && !closefrom.is_null()).then_some((chdir as usize, closefrom as usize))
    }))?;
    // SAFETY: the symbols have these C signatures (glibc's posix_spawn.h).
    unsafe {
        Some((
            std::mem::transmute::<usize, AddChdir>(chdir),
            std::mem::transmute::<usize, AddClosefrom>(closefrom),
        ))
    }
}

/// Starts `req` with `posix_spawn` in a new session whose controlling terminal is the pty
/// slave at `tty` (a session leader opening a terminal acquires it), standard streams on it,
/// every other descriptor closed, an empty signal mask and default signal dispositions.
/// `posix_spawn` does not copy the daemon's address space (unlike `fork`, whose cost — and
/// the time it stalls every other thread — grows with each terminal's threads), so the 500th
/// terminal starts as fast as the first. `None` when the C library lacks the extensions used.
fn spawn_on_tty(req: &SpawnRequest, tty: &std::path::Path) -> Option<io::Result<i32>> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let (addchdir, addclosefrom) = spawn_extensions()?;
    let c = |s: &std::ffi::OsStr| {
        CString::new(s.as_bytes()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "an argument or variable holds a NUL byte",
            )
        })
    };
    let prepared = (|| {
        let program = c(req.program.as_os_str())?;
        let mut argv = vec![program.clone()];
        for a in &req.args {
            argv.push(c(a)?);
        }
        let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(k, _)| !req.env_remove.contains(k) && !req.env.iter().any(|(o, _)| o == k))
            .collect();
        env.extend(req.env.iter().cloned());
        // Like portable-pty's spawn: SHELL names the user's shell when the daemon has none.
        if !env.iter().any(|(k, _)| k == "SHELL") {
            if let Some(shell) = login_shell() {
                env.push(("SHELL".into(), shell));
            }
        }
        let mut envp = Vec::with_capacity(env.len());
        for (k, v) in &env {
            let mut kv = k.clone();
            kv.push("=");
            kv.push(v);
            envp.push(c(&kv)?);
        }
        Ok::<_, io::Error>((
            program,
            argv,
            envp,
            c(req.cwd.as_os_str())?,
            c(tty.as_os_str())?,
        ))
    })();
    let (program, argv, envp, cwd, tty) = match prepared {
        Ok(p) => p,
        Err(e) => return Some(Err(e)),
    };
    let mut argv_p: Vec<*mut libc::c_char> = argv.iter().map(|a| a.as_ptr() as *mut _).collect();
    argv_p.push(std::ptr::null_mut());
    let mut envp_p: Vec<*mut libc::c_char> = envp.iter().map(|a| a.as_ptr() as *mut _).collect();
    envp_p.push(std::ptr::null_mut());
    // SAFETY: the attribute and file-action objects are initialised before use and destroyed
    // after; every pointer handed to posix_spawn points into CStrings and vectors that live
    // until it returns.
    unsafe {
        let mut fa: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        if libc::posix_spawn_file_actions_init(&mut fa) != 0 {
            return Some(Err(io::Error::last_os_error()));
        }
        if libc::posix_spawnattr_init(&mut attr) != 0 {
            libc::posix_spawn_file_actions_destroy(&mut fa);
            return Some(Err(io::Error::last_os_error()));
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        let mut defaults: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut defaults);
        for sig in [
            libc::SIGCHLD,
            libc::SIGHUP,
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGTERM,
            libc::SIGALRM,
            libc::SIGPIPE,
        ] {
            libc::sigaddset(&mut defaults, sig);
        }
        let flags = libc::POSIX_SPAWN_SETSID as libc::c_int
            | libc::POSIX_SPAWN_SETSIGMASK
            | libc::POSIX_SPAWN_SETSIGDEF;
        let mut rc = libc::posix_spawnattr_setflags(&mut attr, flags as libc::c_short);
        if rc == 0 {
            rc = libc::posix_spawnattr_setsigmask(&mut attr, &empty);
        }
        if rc == 0 {
            rc = libc::posix_spawnattr_setsigdefault(&mut attr, &defaults);
        }
        if rc == 0 {
            rc = addchdir(&mut fa, cwd.as_ptr());
        }
        if rc == 0 {
            rc = libc::posix_spawn_file_actions_addopen(&mut fa, 0, tty.as_ptr(), libc::O_RDWR, 0);
        }
        if rc == 0 {
            rc = libc::posix_spawn_file_actions_adddup2(&mut fa, 0, 1);
        }
        if rc == 0 {
            rc = libc::posix_spawn_file_actions_adddup2(&mut fa, 0, 2);
        }
        if rc == 0 {
            rc = addclosefrom(&mut fa, 3);
        }
        let mut pid: libc::pid_t = 0;
        if rc == 0 {
            rc = libc::posix_spawnp(
                &mut pid,
                program.as_ptr(),
                &fa,
                &attr,
                argv_p.as_mut_ptr(),
                envp_p.as_mut_ptr(),
            );
        }
        libc::posix_spawn_file_actions_destroy(&mut fa);
        libc::posix_spawnattr_destroy(&mut attr);
        Some(if rc == 0 {
            Ok(pid)
        } else {
            Err(io::Error::from_raw_os_error(rc))
        })
    }
}

/// The login shell of this process's user, from the password database.
fn login_shell() -> Option<OsString> {
    use std::os::unix::ffi::OsStrExt;
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: getpwuid_r fills `pw` with pointers into `buf`, which outlives their use here.
    unsafe {
        let mut pw: libc::passwd = std::mem::zeroed();
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            libc::geteuid(),
            &mut pw,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        );
        if rc != 0 || found.is_null() || pw.pw_shell.is_null() {
            return None;
        }
        let shell = std::ffi::CStr::from_ptr(pw.pw_shell).to_bytes();
        (!shell.is_empty()).then(|| std::ffi::OsStr::from_bytes(shell).to_owned())
    }
}

/// This process's open-file limit (`RLIMIT_NOFILE`): `(soft, hard)`.
pub fn open_file_limit() -> io::Result<(u64, u64)> {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((l.rlim_cur, l.rlim_max))
}

/// File descriptors this process has open now (from `/proc/self/fd`; 0 if unreadable).
pub fn open_descriptors() -> u64 {
    procfs::process::Process::myself()
        .and_then(|me| me.fd_count())
        .map_or(0, |n| n as u64)
}

/// Blocks until the process `pid` (a child of this daemon) exits, reaps it and records its
/// exit code in `slot`; returns the code, `128 + signal` for a signal death (decision D5).
/// `None` if it cannot be waited for. Waits without reaping (`WNOWAIT`) first and reaps only
/// under [`REAP_GUARD`], so a live upgrade never loses a status between reaping and recording.
pub fn wait_exit(pid: i32, slot: &ExitSlot) -> Option<i64> {
    loop {
        // SAFETY: waitid writes one siginfo_t.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc == 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            tracing::warn!(pid, error = %e, "waitid failed");
            return None;
        }
    }
    let _guard = match REAP_GUARD.read() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    let code = reap(pid);
    *slot.lock() = Reaping::Reaped { code };
    code
}

/// Reaps the exited child `pid`: its exit code (see [`wait_exit`]).
fn reap(pid: i32) -> Option<i64> {
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

/// Process ids and process group ids of every live (not zombie) process whose session id is
/// `sid`, from `/proc/<pid>/stat`. Processes that vanish while the list is read are skipped.
pub fn session_members(sid: i32) -> Vec<(i32, i32)> {
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    all.flatten()
        .filter_map(|p| p.stat().ok())
        .filter(|stat| stat.session == sid && stat.state != 'Z')
        .map(|stat| (stat.pid, stat.pgrp))
        .collect()
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

/// Whether the process `pid` is alive (not a zombie) and still in session `sid`, from its
/// `/proc/<pid>/stat` alone.
fn still_member(pid: i32, sid: i32) -> bool {
    procfs::process::Process::new(pid)
        .and_then(|p| p.stat())
        .is_ok_and(|stat| stat.session == sid && stat.state != 'Z')
}

/// The members of session `sid` left after a signal: while some of `known` are alive, only
/// they are read (one `/proc/<pid>/stat` each); once none is, one scan of all of `/proc`
/// catches any process forked into the session meanwhile. So waiting out a grace period costs
/// a few reads per 10 ms step, not a scan of every process on the machine per step (which,
/// with hundreds of terminals ending at once at shutdown, took seconds of CPU).
fn members_left(sid: i32, known: &[(i32, i32)]) -> Vec<(i32, i32)> {
    let alive: Vec<(i32, i32)> = known
        .iter()
        .copied()
        .filter(|&(pid, _)| still_member(pid, sid))
        .collect();
    if alive.is_empty() {
        session_members(sid)
    } else {
        alive
    }
}

/// See [`Pty::kill_session`](super::Pty::kill_session).
pub fn kill_session(sid: i32, grace: Duration) {
    let mut members = session_members(sid);
    if members.is_empty() {
        return;
    }
    signal_all(&members, Signal::SIGHUP);
    signal_all(&members, Signal::SIGCONT);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        members = members_left(sid, &members);
        if members.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        members = members_left(sid, &members);
        if members.is_empty() || Instant::now() >= deadline {
            return;
        }
        signal_all(&members, Signal::SIGKILL);
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::terminal::Pty;

    #[test]
    fn a_suspended_writer_hands_back_exactly_what_it_did_not_write() {
        use std::os::fd::AsRawFd;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        let (process, _reader) = PtyProcess::spawn(SpawnRequest {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), "stty raw -echo; exec sleep 30".into()],
            cwd: "/".into(),
            cols: 80,
            rows: 24,
            env: Vec::new(),
            env_remove: Vec::new(),
        })
        .unwrap();
        // In raw mode (no line editing, nothing dropped) and never read: the pty's input
        // queue fills and the writer task waits for room.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut t: libc::termios = unsafe { std::mem::zeroed() };
            assert_eq!(
                unsafe { libc::tcgetattr(process.io.master().as_raw_fd(), &mut t) },
                0
            );
            if t.c_lflag & libc::ICANON == 0 {
                break;
            }
            assert!(Instant::now() < deadline, "stty raw never took effect");
            std::thread::sleep(Duration::from_millis(5));
        }
        let input: Vec<u8> = (0..256 * 1024u32)
            .map(|i| b'a' + (i % 23) as u8 + if i % 97 == 0 { 1 } else { 0 })
            .collect();
        for chunk in input.chunks(10_000) {
            process.write(chunk.to_vec()).unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut last = usize::MAX;
        loop {
            std::thread::sleep(Duration::from_millis(50));
            let now = process.pending_input.load(Ordering::Acquire);
            if now == last || Instant::now() > deadline {
                break;
            }
            last = now;
        }
        let (fd, left) = process
            .suspend(Instant::now() + Duration::from_secs(10))
            .unwrap();
        drop(fd);
        assert!(
            !left.is_empty() && left.len() < input.len(),
            "{} left",
            left.len()
        );
        assert_eq!(&input[input.len() - left.len()..], &left[..]);
        let _ = kill(Pid::from_raw(process.pid()), Signal::SIGKILL);
        let _ = waitpid(Pid::from_raw(process.pid()), None);
    }
}
