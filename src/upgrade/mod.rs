//! Live upgrade: on SIGUSR2 the daemon re-executes its binary in place — same pid, so the
//! shells stay its children and every pty stays open — and hands its state to the new image.
//!
//! The steps (docs/upgrade.md has the whole story and the hand-over format):
//! 1. **Pre-flight**, still serving: the binary at the install path runs `upgrade-check` with
//!    the daemon's arguments and answers with its version and the hand-over formats it reads
//!    (within `--upgrade-timeout`, default 5 s). A failure is reported and nothing else
//!    happens.
//! 2. **Quiesce**: no accepts (connections wait in the listen backlog), no new terminals,
//!    every client closed with 1012; every terminal suspended (the programs run on, their
//!    output waits in the ptys) and reaping frozen ([`crate::host::handover`]).
//! 3. **Hand-over**: the state as JSON streamed into an in-memory file ([`format`]); the ptys, listeners,
//!    that file and a descriptor of the running executable are kept across `execve`; the
//!    control signals are blocked; `execve(install path)`. If `execve` fails, this image is
//!    executed again (from the saved descriptor) with the same hand-over.
//! 4. **Adopt** in the new image, before any thread exists ([`take_inherited`]): read and
//!    check the hand-over; on an error the old image is executed again from the descriptor it
//!    passed ([`ROLLBACK_FD_ENV`]), as it is when the new image crashes or does not commit
//!    within the old one's `--upgrade-timeout` ([`Handover::adopt_timeout_ms`]). Then commit
//!    (descriptors back to close-on-exec), rebuild the host and server, serve, and report.
//!
//! The outcome of every attempt is written to [`status_path`] (`ahpty upgrade` waits for it).
//!
//! May touch: the process itself (signal handlers and mask, descriptors' close-on-exec,
//! `execve`), the status file, the new binary it runs for the pre-flight, and the host and
//! server only through their hand-over APIs ([`crate::host::handover`],
//! [`crate::server::handover`]).

pub mod cli;
mod format;
mod rollback;
mod sys;

pub use format::{Handover, FORMAT, READABLE_FORMATS};

use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::server::handover::ListenerImage;
use crate::Server;

/// Names the descriptor of the hand-over file in the new image's environment.
pub const HANDOVER_FD_ENV: &str = "AHPTY_HANDOVER_FD";

/// Names a descriptor of the old image's executable, to go back to before the commit.
pub const ROLLBACK_FD_ENV: &str = "AHPTY_ROLLBACK_FD";

/// Set when an image is executed again because the upgrade failed: the reason.
pub const FAILED_ENV: &str = "AHPTY_UPGRADE_FAILED";

/// Test-only fault injection in an image adopting a hand-over (never in one executed again
/// after a failure): `abort` (crash), `hang` (never commits), `error` (rejects the hand-over);
/// and in an image writing one: `write` (the write fails as with no memory left).
pub const TEST_FAULT_ENV: &str = "AHPTY_TEST_ADOPT_FAULT";

/// How long this image took to read its hand-over, ms (logged once the log exists).
static READ_MS: AtomicU64 = AtomicU64::new(0);

/// The adopt deadline of a hand-over that names none (one written by an older version):
/// how long the new image may take to commit before the old one is executed again.
const DEFAULT_ADOPT_TIMEOUT: Duration = crate::config::DEFAULT_UPGRADE_TIMEOUT;

/// How long clients get to receive their close frame before the switch.
const CLOSE_FLUSH: Duration = Duration::from_secs(2);

/// What the new image reports about the hand-over it took.
#[derive(Debug, Clone)]
pub struct Adoption {
    from_version: String,
    attempt: u64,
    signalled_at_ns: u64,
    quiesced_at_ns: u64,
}

impl Adoption {
    /// The report's part of `h`.
    pub fn of(h: &Handover) -> Adoption {
        Adoption {
            from_version: h.from_version.clone(),
            attempt: h.attempt,
            signalled_at_ns: h.signalled_at_ns,
            quiesced_at_ns: h.quiesced_at_ns,
        }
    }
}

// ─── The outcome of an attempt ────────────────────────────────────────────────────────────

/// How far an upgrade attempt got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// The new binary's `upgrade-check` (nothing was changed).
    Preflight,
    /// Stopping the host (nothing was changed).
    Quiesce,
    /// Writing the hand-over (this image was executed again, without the histories).
    Handover,
    /// `execve` of the new binary (this image was executed again).
    Exec,
    /// The new image could not read or take the hand-over (the old image was executed again).
    Adopt,
    /// The new image serves.
    Done,
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stage::Preflight => "pre-flight",
            Stage::Quiesce => "quiesce",
            Stage::Handover => "hand-over",
            Stage::Exec => "exec",
            Stage::Adopt => "adopt",
            Stage::Done => "done",
        })
    }
}

/// The outcome of one upgrade attempt, as written to [`status_path`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// Attempts so far, this one included (1 for the first).
    pub attempt: u64,
    /// The new image serves.
    pub ok: bool,
    pub stage: Stage,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The version serving before, and after (the same on a failure).
    pub from: String,
    pub to: String,
    pub pid: u32,
    /// Quiesced → serving, and SIGUSR2 → serving, in milliseconds (after an exec).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_ms: Option<f64>,
    /// Terminals kept.
    #[serde(default)]
    pub terminals: usize,
}

/// Where the daemon with `pid` reports its upgrades: `upgrade-PID.json` in the directory of
/// the default socket (`$XDG_RUNTIME_DIR/ahpty`, else `/tmp/ahpty-$UID`).
pub fn status_path(pid: u32) -> PathBuf {
    let socket = crate::config::default_socket_path();
    let dir = socket.parent().unwrap_or(Path::new("/tmp"));
    dir.join(format!("upgrade-{pid}.json"))
}

/// Reads the status file of `pid`, if there is a valid one.
pub fn read_status(pid: u32) -> Option<Status> {
    let text = std::fs::read(status_path(pid)).ok()?;
    serde_json::from_slice(&text).ok()
}

fn write_status(status: &Status) {
    let path = status_path(status.pid);
    let write = || -> io::Result<()> {
        if let Some(dir) = path.parent() {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec(status).map_err(io::Error::other)?)?;
        std::fs::rename(&tmp, &path)
    };
    if let Err(e) = write() {
        tracing::warn!(path = %path.display(), error = %e, "cannot write the upgrade status");
    }
}

fn ms_since(ns: u64) -> f64 {
    sys::monotonic_ns().saturating_sub(ns) as f64 / 1e6
}

// ─── The new image ─────────────────────────────────────────────────────────────────────────

/// A hand-over inherited across `execve`, read and checked, not yet committed.
pub struct Inherited {
    pub handover: Handover,
    memfd: OwnedFd,
    rollback: Option<OwnedFd>,
    /// This image was executed again because the upgrade failed: why.
    pub failed: Option<String>,
}

/// Takes the hand-over this process inherited, if it was executed by a live upgrade: reads
/// and removes the `AHPTY_HANDOVER_FD` family of variables, reads the hand-over and checks
/// every descriptor it names. Call first thing in `main`, before any thread exists.
///
/// If the hand-over cannot be taken and the old image left a way back, this does not
/// return: the old image is executed again with the reason. Errors: the hand-over cannot be
/// taken and there is no way back.
pub fn take_inherited() -> Option<Result<Inherited, String>> {
    let fd = std::env::var(HANDOVER_FD_ENV).ok()?;
    // The control signals stay blocked until their handlers exist; any other signal that
    // was blocked when the previous image executed this one is unblocked.
    sys::set_control_mask();
    let rollback = std::env::var(ROLLBACK_FD_ENV).ok();
    let failed = std::env::var(FAILED_ENV).ok();
    // Before any thread exists (see the caller): nothing reads the environment concurrently.
    for name in [HANDOVER_FD_ENV, ROLLBACK_FD_ENV, FAILED_ENV] {
        std::env::remove_var(name);
    }
    let fd_of = |v: &str| {
        v.parse::<RawFd>()
            .ok()
            .filter(|&fd| fd > 2 && sys::is_open(fd))
    };
    let Some(memfd) = fd_of(&fd) else {
        return Some(Err(format!(
            "{HANDOVER_FD_ENV}={fd}: not an open descriptor"
        )));
    };
    // SAFETY: the descriptor was inherited for this purpose and nothing else owns it.
    let memfd = unsafe { OwnedFd::from_raw_fd(memfd) };
    let rollback = rollback.as_deref().and_then(fd_of).map(|fd| {
        // SAFETY: as above.
        unsafe { OwnedFd::from_raw_fd(fd) }
    });
    let reading = Instant::now();
    let checked = format::read(memfd.as_raw_fd())
        .inspect(|_| READ_MS.store(reading.elapsed().as_millis() as u64, Ordering::Relaxed))
        .and_then(|h| check_descriptors(&h).map(|()| h));
    match checked {
        Ok(handover) => {
            if let (None, Some(back)) = (&failed, &rollback) {
                let deadline = handover
                    .adopt_timeout_ms
                    .map_or(DEFAULT_ADOPT_TIMEOUT, Duration::from_millis);
                rollback::arm(back.as_raw_fd(), memfd.as_raw_fd(), deadline);
                // A panic before the commit aborts, which goes back (see `rollback.rs`).
                let default = std::panic::take_hook();
                std::panic::set_hook(Box::new(move |info| {
                    default(info);
                    std::process::abort();
                }));
                match std::env::var(TEST_FAULT_ENV).as_deref() {
                    Ok("abort") => std::process::abort(),
                    Ok("hang") => loop {
                        std::thread::sleep(Duration::from_secs(1));
                    },
                    Ok("error") => roll_back(&memfd, back, "stage=adopt: rejected (test fault)"),
                    _ => {}
                }
            }
            Some(Ok(Inherited {
                handover,
                memfd,
                rollback,
                failed,
            }))
        }
        Err(reason) => {
            if failed.is_none() {
                if let Some(back) = &rollback {
                    roll_back(&memfd, back, &format!("stage=adopt: {reason}"));
                }
            }
            Some(Err(reason))
        }
    }
}

/// Every descriptor the hand-over names is open, every pty is a pty master and every
/// listener a listening socket.
fn check_descriptors(h: &Handover) -> Result<(), String> {
    for &fd in &h.fds {
        if !sys::is_open(fd) {
            return Err(format!("descriptor {fd} of the hand-over is not open"));
        }
    }
    let fd_at = |i: usize| h.fds.get(i).copied().ok_or(format!("no descriptor #{i}"));
    for t in &h.host.terminals {
        let Some(pty) = t.pty else { continue };
        let fd = fd_at(pty)?;
        let mut n: libc::c_uint = 0;
        // SAFETY: TIOCGPTN writes one unsigned int.
        if unsafe { libc::ioctl(fd, libc::TIOCGPTN, &mut n) } != 0 {
            return Err(format!(
                "terminal {}: descriptor {fd} is not a pty master: {}",
                t.uri,
                io::Error::last_os_error()
            ));
        }
    }
    for l in &h.server.listeners {
        let i = match l {
            ListenerImage::Tcp { fd, .. } | ListenerImage::Unix { fd, .. } => *fd,
        };
        let fd = fd_at(i)?;
        // SAFETY: borrowed only for the check; ownership stays with the hand-over.
        let borrowed = std::mem::ManuallyDrop::new(unsafe { OwnedFd::from_raw_fd(fd) });
        crate::server::handover::check_listening(&borrowed)
            .map_err(|e| format!("listener descriptor {fd}: {e}"))?;
    }
    Ok(())
}

/// Executes the old image again (from `back`) with the untouched hand-over and `reason`.
/// Returns only if that fails (then the caller reports the error).
fn roll_back(memfd: &OwnedFd, back: &OwnedFd, reason: &str) {
    let mut env = inherited_env();
    env.push((HANDOVER_FD_ENV.into(), memfd.as_raw_fd().to_string().into()));
    env.push((FAILED_ENV.into(), reason.into()));
    let _ = sys::set_cloexec(memfd.as_raw_fd(), false);
    let args: Vec<OsString> = std::env::args_os().collect();
    let e = sys::fexecve(back.as_raw_fd(), &args, &env);
    eprintln!("ahpty: cannot go back to the previous image ({e}) after: {reason}");
}

/// This process's environment without the hand-over variables.
fn inherited_env() -> Vec<(OsString, OsString)> {
    std::env::vars_os()
        .filter(|(k, _)| k != HANDOVER_FD_ENV && k != ROLLBACK_FD_ENV && k != FAILED_ENV)
        .collect()
}

impl Inherited {
    /// Gives up on the hand-over before the commit: executes the old image again with
    /// `reason` if there is one to go back to (then this does not return).
    pub fn abandon(&self, reason: &str) {
        if self.failed.is_none() {
            if let Some(back) = &self.rollback {
                roll_back(&self.memfd, back, &format!("stage=adopt: {reason}"));
            }
        }
    }

    /// The commit point: closes the way back and the hand-over file, and makes every inherited
    /// descriptor close-on-exec again. Returns the hand-over and its descriptors (by index).
    pub fn commit(self) -> (Handover, Vec<Option<OwnedFd>>, Option<String>) {
        rollback::disarm();
        // The default panic hook again (the one set in `take_inherited` aborts).
        let _ = std::panic::take_hook();
        drop(self.rollback);
        drop(self.memfd);
        let fds = self
            .handover
            .fds
            .iter()
            .map(|&fd| {
                let _ = sys::set_cloexec(fd, true);
                // SAFETY: checked open by `take_inherited`; each number is taken once.
                Some(unsafe { OwnedFd::from_raw_fd(fd) })
            })
            .collect();
        (self.handover, fds, self.failed)
    }
}

// ─── The old image ─────────────────────────────────────────────────────────────────────────

/// Serves live upgrades: a task waits for SIGUSR2 and runs the pre-flight (while the daemon
/// serves on); the server's accept loop takes each [`Request`] that passed it and performs
/// the switch (`Upgrader::switch`, through [`crate::server::LiveUpgrades`]).
pub struct Upgrader {
    requests: tokio::sync::mpsc::Receiver<Request>,
    /// A request taken off `requests`, to perform.
    waiting: Option<Request>,
    install_path: PathBuf,
    args: Vec<OsString>,
    own_exe: Option<OwnedFd>,
    version: String,
    /// `--upgrade-timeout`: the pre-flight's and the adopt deadline.
    timeout: Duration,
}

/// An upgrade that passed its pre-flight.
pub struct Request {
    attempt: u64,
    to: String,
    signalled_at_ns: u64,
    started: Instant,
    /// Dropped when the attempt is over (the watcher then waits for the next signal).
    _done: tokio::sync::oneshot::Sender<()>,
}

/// What the SIGUSR2 watcher task owns.
struct Watcher {
    signal: Signal,
    install_path: PathBuf,
    args: Vec<OsString>,
    attempt: u64,
    version: String,
    /// How long the pre-flight may take.
    timeout: Duration,
    requests: tokio::sync::mpsc::Sender<Request>,
}

impl Watcher {
    /// Waits for SIGUSR2 and runs the pre-flight, one attempt at a time: a failure is reported
    /// here, a success is handed to the accept loop and waited for.
    async fn run(mut self) {
        while self.signal.recv().await.is_some() {
            let signalled_at_ns = sys::monotonic_ns();
            let started = Instant::now();
            self.attempt += 1;
            tracing::info!(
                attempt = self.attempt,
                exe = %self.install_path.display(),
                "SIGUSR2: upgrading in place"
            );
            match preflight(&self.install_path, &self.args, self.timeout).await {
                Ok(answer) => {
                    let (done, over) = tokio::sync::oneshot::channel();
                    let request = Request {
                        attempt: self.attempt,
                        to: answer.version,
                        signalled_at_ns,
                        started,
                        _done: done,
                    };
                    if self.requests.send(request).await.is_err() {
                        return;
                    }
                    let _ = over.await;
                }
                Err(reason) => {
                    report_failure(self.attempt, &self.version, Stage::Preflight, reason)
                }
            }
        }
    }
}

fn report_failure(attempt: u64, version: &str, stage: Stage, reason: String) {
    tracing::warn!(stage = %stage, "upgrade failed, still serving: {reason}");
    write_status(&Status {
        attempt,
        ok: false,
        stage,
        reason: Some(reason),
        from: version.into(),
        to: version.into(),
        pid: std::process::id(),
        switch_ms: None,
        total_ms: None,
        terminals: 0,
    });
}

/// `INSTALL_PATH upgrade-check -- ARGS…`: the new binary parses this daemon's arguments
/// and names the hand-over formats it reads, within `timeout`.
async fn preflight(
    install_path: &Path,
    args: &[OsString],
    timeout: Duration,
) -> Result<CheckAnswer, String> {
    let exe = install_path.display();
    let child = tokio::process::Command::new(install_path)
        .arg("upgrade-check")
        .arg("--")
        .args(args.iter().skip(1))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {exe}: {e}"))?;
    let out = tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .map_err(|_| {
            format!(
                "{exe} upgrade-check did not answer within {}",
                seconds(timeout)
            )
        })?
        .map_err(|e| format!("{exe} upgrade-check: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let line = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        let status = match out.status.code() {
            Some(code) => format!("exited with status {code}"),
            None => format!("was killed ({})", out.status),
        };
        let mut reason = format!("{exe} upgrade-check {status}");
        if !line.is_empty() {
            reason.push_str(": ");
            reason.push_str(line);
        }
        return Err(reason);
    }
    let answer: CheckAnswer = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("{exe} upgrade-check answered something else than a version ({e})"))?;
    if !answer.handover_formats.contains(&FORMAT) {
        return Err(format!(
            "{exe} (version {}) reads hand-over formats {:?}, this daemon writes [{FORMAT}]",
            answer.version, answer.handover_formats
        ));
    }
    Ok(answer)
}

/// The new binary's answer to `upgrade-check`.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckAnswer {
    pub version: String,
    pub handover_formats: Vec<u32>,
}

impl CheckAnswer {
    /// This binary's answer.
    pub fn own() -> CheckAnswer {
        CheckAnswer {
            version: env!("CARGO_PKG_VERSION").into(),
            handover_formats: READABLE_FORMATS.to_vec(),
        }
    }
}

impl Upgrader {
    /// Installs the SIGUSR2 handler (before the daemon announces itself: the signal's default
    /// action would end it). `inherited` is the hand-over this image started from, if any;
    /// `timeout` is `--upgrade-timeout`, the time a new binary gets for its pre-flight and
    /// again to take over.
    pub fn install(inherited: Option<&Handover>, timeout: Duration) -> io::Result<Upgrader> {
        let signal = signal(SignalKind::user_defined2())?;
        let install_path = match inherited {
            Some(h) => h.install_path.clone(),
            None => own_executable()?,
        };
        let own_exe = match sys::open_own_exe() {
            Ok(fd) => Some(fd),
            Err(e) => {
                tracing::warn!(error = %e, "cannot open /proc/self/exe: a failed upgrade cannot go back");
                None
            }
        };
        if inherited.is_none() {
            // A status file of an earlier process with the same pid.
            let _ = std::fs::remove_file(status_path(std::process::id()));
        }
        let args: Vec<OsString> = std::env::args_os().collect();
        let version: String = env!("CARGO_PKG_VERSION").into();
        let (tx, requests) = tokio::sync::mpsc::channel(1);
        tokio::spawn(
            Watcher {
                signal,
                install_path: install_path.clone(),
                args: args.clone(),
                attempt: inherited.map_or(0, |h| h.attempt),
                version: version.clone(),
                timeout,
                requests: tx,
            }
            .run(),
        );
        Ok(Upgrader {
            requests,
            waiting: None,
            install_path,
            args,
            own_exe,
            version,
            timeout,
        })
    }

    /// The control signals can be delivered now (their handlers are installed): unblocks them
    /// in the calling thread, which an image started by an upgrade inherited blocked.
    pub fn signals_ready(&self) {
        sys::unblock_control_signals();
    }

    /// Reports how the adoption of a hand-over went (in the new image, once it serves).
    pub fn report_adopted(&self, handover: &Adoption, failed: Option<String>, terminals: usize) {
        let switch_ms = ms_since(handover.quiesced_at_ns);
        let total_ms = ms_since(handover.signalled_at_ns);
        let (ok, stage, reason) = match failed {
            None => (true, Stage::Done, None),
            Some(r) => {
                let (stage, reason) = match r.split_once(": ") {
                    Some(("stage=exec", rest)) => (Stage::Exec, rest.to_string()),
                    Some(("stage=handover", rest)) => (Stage::Handover, rest.to_string()),
                    Some(("stage=adopt", rest)) => (Stage::Adopt, rest.to_string()),
                    _ => (Stage::Adopt, r.clone()),
                };
                (false, stage, Some(reason))
            }
        };
        match &reason {
            None => tracing::info!(
                from = %handover.from_version,
                read_ms = READ_MS.load(Ordering::Relaxed),
                switch_ms = format!("{switch_ms:.1}"),
                total_ms = format!("{total_ms:.1}"),
                terminals,
                "upgraded in place"
            ),
            Some(r) => tracing::warn!(
                stage = %stage,
                "upgrade failed, the previous version serves again: {r}"
            ),
        }
        write_status(&Status {
            attempt: handover.attempt,
            ok,
            stage,
            reason,
            from: handover.from_version.clone(),
            to: self.version.clone(),
            pid: std::process::id(),
            switch_ms: Some(switch_ms),
            total_ms: Some(total_ms),
            terminals,
        });
    }

    /// Quiesces the host and executes the new image with the hand-over. Returns only if
    /// nothing was changed yet (the failure is reported and the daemon serves on).
    ///
    /// `stop_requested` tells whether SIGTERM or SIGINT arrived meanwhile (the old image's
    /// handler took it, so it is raised again, blocked, for the new image to stop on).
    async fn switch(
        &mut self,
        server: &Server,
        request: Request,
        stop_requested: &mut dyn FnMut() -> bool,
    ) {
        let host = server.host().clone();
        tracing::info!(
            elapsed_ms = request.started.elapsed().as_millis() as u64,
            "pre-flight passed: quiescing"
        );
        if let Err(reason) = host.begin_upgrade(self.timeout).await {
            report_failure(request.attempt, &self.version, Stage::Quiesce, reason);
            return;
        }
        let flush_until = Instant::now() + CLOSE_FLUSH;
        while host.connection_count() > 0 && Instant::now() < flush_until {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let quiesced_at_ns = sys::monotonic_ns();
        tracing::info!(
            elapsed_ms = request.started.elapsed().as_millis() as u64,
            "connections closed: suspending the terminals"
        );
        // From here on the terminals are suspended: the way out is an exec, of the new image
        // or, failing that, of this one.
        // One deadline for the whole pause, from SIGUSR2: the terminals stop by then.
        let (mut image, ptys) = host.suspend(request.started + self.timeout).await;
        let mut fds = Vec::new();
        let server_image = server.image(&mut fds);
        let base = fds.len();
        for t in &mut image.terminals {
            if let Some(pty) = &mut t.pty {
                *pty += base;
            }
        }
        fds.extend(ptys.iter().map(|p| p.as_raw_fd()));
        let mut handover = Handover {
            from_version: self.version.clone(),
            attempt: request.attempt,
            signalled_at_ns: request.signalled_at_ns,
            quiesced_at_ns,
            install_path: self.install_path.clone(),
            fds,
            adopt_timeout_ms: Some(self.timeout.as_millis() as u64),
            server: server_image,
            host: image,
        };
        tracing::info!(
            to = %request.to,
            terminals = handover.host.terminals.len(),
            elapsed_ms = request.started.elapsed().as_millis() as u64,
            "executing the new image"
        );
        let stop = stop_requested();
        if stop {
            tracing::info!("a stop was requested during the upgrade: the new image stops");
        }
        let failure = self.exec(&mut handover, stop);
        // Still here: not even this image could be executed again.
        tracing::error!("live upgrade failed and this image cannot be executed again: {failure}");
        std::process::exit(1);
    }

    /// Writes the hand-over, keeps its descriptors across exec, blocks the control signals
    /// and executes the install path, then (if that fails) this image. A hand-over that cannot
    /// be written (no memory for the in-memory file) is written again without the histories
    /// and executes this image, not the new one. Returns the error of the last attempt.
    fn exec(&self, handover: &mut Handover, stop: bool) -> String {
        let started = Instant::now();
        let (memfd, failed) = match format::write(handover, test_write_fault()) {
            Ok((fd, len)) => {
                tracing::info!(
                    bytes = len,
                    ms = started.elapsed().as_millis() as u64,
                    "hand-over written"
                );
                (fd, None)
            }
            Err(e) => {
                let reason = format!(
                    "stage=handover: cannot write the hand-over ({e}): the terminals were kept \
                     without their histories (clients resume with a snapshot)"
                );
                tracing::warn!("{reason}; executing this image again");
                handover.host.forget_histories();
                match format::write(handover, None) {
                    Ok((fd, _)) => (fd, Some(reason)),
                    Err(e) => {
                        return format!("{reason}; without the histories either: {e}");
                    }
                }
            }
        };
        let mut keep: Vec<RawFd> = handover.fds.clone();
        keep.push(memfd.as_raw_fd());
        if let Some(exe) = &self.own_exe {
            keep.push(exe.as_raw_fd());
        }
        for fd in keep {
            if let Err(e) = sys::set_cloexec(fd, false) {
                return format!("cannot keep descriptor {fd} across exec: {e}");
            }
        }
        let mut env = inherited_env();
        env.push((HANDOVER_FD_ENV.into(), memfd.as_raw_fd().to_string().into()));
        sys::block_control_signals();
        if stop {
            // Pending (blocked) across exec, delivered once the new image's handlers exist.
            // SAFETY: kill has no memory effects.
            unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
        }
        let reason = match failed {
            Some(reason) => reason,
            None => {
                if let Some(exe) = &self.own_exe {
                    env.push((ROLLBACK_FD_ENV.into(), exe.as_raw_fd().to_string().into()));
                }
                let e = sys::execve(&self.install_path, &self.args, &env);
                let reason = format!(
                    "stage=exec: cannot execute {}: {e}",
                    self.install_path.display()
                );
                tracing::warn!("{reason}; executing this image again");
                env.retain(|(k, _)| k != ROLLBACK_FD_ENV);
                reason
            }
        };
        let Some(exe) = &self.own_exe else {
            return reason;
        };
        env.push((FAILED_ENV.into(), reason.clone().into()));
        let e = sys::fexecve(exe.as_raw_fd(), &self.args, &env);
        format!("{reason}; then fexecve of this image: {e}")
    }
}

/// The test fault of [`TEST_FAULT_ENV`]`=write`: the hand-over's write fails after 64 KiB,
/// as it would with no memory left.
fn test_write_fault() -> Option<format::WriteFault> {
    (std::env::var(TEST_FAULT_ENV).as_deref() == Ok("write"))
        .then_some(format::WriteFault(64 << 10))
}

impl Drop for Upgrader {
    /// The daemon stops (its server is done with upgrades): its status file goes with it.
    /// Never reached across `execve`, which replaces the process image without unwinding.
    fn drop(&mut self) {
        let path = status_path(std::process::id());
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove the upgrade status")
            }
        }
    }
}

impl crate::server::LiveUpgrades for Upgrader {
    fn requested(&mut self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            if self.waiting.is_some() {
                return;
            }
            // Cancel-safe: `recv` is, and the request is kept in the same poll it arrives in.
            match self.requests.recv().await {
                Some(r) => self.waiting = Some(r),
                None => std::future::pending().await,
            }
        })
    }

    fn perform<'a>(
        &'a mut self,
        server: &'a Server,
        stop_requested: &'a mut dyn FnMut() -> bool,
    ) -> Pin<Box<dyn Future<Output = ()> + 'a>> {
        Box::pin(async move {
            if let Some(request) = self.waiting.take() {
                self.switch(server, request, stop_requested).await;
            }
        })
    }
}

/// A timeout as the failure reasons name it: `5 s`, `1.5 s`.
pub(crate) use crate::host::handover::seconds;

/// The daemon's executable path, without the ` (deleted)` Linux appends once the file was
/// replaced.
fn own_executable() -> io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let text = exe.to_string_lossy();
    Ok(match text.strip_suffix(" (deleted)") {
        Some(path) => PathBuf::from(path),
        None => exe,
    })
}
