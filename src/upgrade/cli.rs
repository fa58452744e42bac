//! `ahpty upgrade`: asks the local daemon for a live upgrade (SIGUSR2) and reports the
//! outcome it writes to its status file (see [`super::status_path`]).
//!
//! May touch: the daemon's Unix socket (to learn its pid, `SO_PEERCRED`), a signal to that
//! pid, its status file (read), stdout and stderr.

use std::io;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use super::{read_status, status_path, Stage, Status};

/// How often the status file is read while waiting.
const POLL: Duration = Duration::from_millis(20);

/// Exit status of `ahpty upgrade`: 0 upgraded, 1 failed (the old version serves), 2 no
/// answer in time, 3 the daemon exited during the upgrade without an outcome (a new image
/// that ended before it took over: the case docs/upgrade.md says cannot be caught).
pub fn run(pid: Option<u32>, socket: &Path, timeout: Duration, out: &mut dyn io::Write) -> u8 {
    let pid = match pid {
        Some(p) => match is_daemon(p) {
            Ok(()) => p,
            Err(why) => {
                eprintln!(
                    "ahpty: pid {p} is not an ahpty daemon of this user ({why}); not signalled: \
                     give the pid of `ahpty serve`, or leave --pid out to find it on its socket"
                );
                return 1;
            }
        },
        None => match socket_peer_pid(socket) {
            Ok(p) => p,
            Err(e) => {
                eprintln!(
                    "ahpty: cannot find the daemon at unix:{}: {e} (is it running? give --pid \
                     PID or --socket PATH)",
                    socket.display()
                );
                return 1;
            }
        },
    };
    let before = read_status(pid).map_or(0, |s| s.attempt);
    if let Err(e) = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGUSR2,
    ) {
        eprintln!("ahpty: cannot signal pid {pid}: {e}");
        return 1;
    }
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = read_status(pid).filter(|s| s.attempt > before) {
            let _ = writeln!(out, "{}", describe(&status));
            return if status.ok { 0 } else { 1 };
        }
        // Checked after the status, which a failing image writes before it exits.
        if gone(pid) && read_status(pid).filter(|s| s.attempt > before).is_none() {
            eprintln!(
                "ahpty: the daemon (pid {pid}) exited during the upgrade without an outcome \
                 (most likely the new binary ran in its place and ended before taking over) and \
                 the terminals' programs ended with it; see its log, and start it again: the \
                 transcripts come back unless it ran with --no-persist"
            );
            return 3;
        }
        if Instant::now() >= deadline {
            eprintln!(
                "ahpty: no upgrade outcome from pid {pid} within {} s (see its log; the \
                 outcome is written to {})",
                timeout.as_secs(),
                status_path(pid).display()
            );
            return 2;
        }
        std::thread::sleep(POLL);
    }
}

/// Whether `pid` is an ahpty daemon of this user, which handles SIGUSR2 (to any other
/// process the signal's default action is death): a process of this user that holds the lock
/// of an ahpty state directory naming it (`daemon.lock`, see `store/dir.rs`), or whose
/// executable is named `ahpty…` and whose argv is the daemon's ([`daemon_argv`]). Errors say
/// which check failed.
fn is_daemon(pid: u32) -> Result<(), String> {
    let id = i32::try_from(pid).map_err(|_| "no such process".to_string())?;
    let process = procfs::process::Process::new(id).map_err(|e| match e {
        procfs::ProcError::NotFound(_) => "no such process".to_string(),
        e => format!("cannot inspect it: {e}"),
    })?;
    // SAFETY: getuid has no preconditions and cannot fail.
    let me = unsafe { libc::getuid() };
    match process.uid() {
        Ok(uid) if uid == me => {}
        Ok(uid) => return Err(format!("it belongs to uid {uid}")),
        Err(e) => return Err(format!("cannot inspect it: {e}")),
    }
    if holds_state_lock(&process, pid) {
        return Ok(());
    }
    let exe = process
        .exe()
        .map_err(|e| format!("cannot read its executable: {e}"))?;
    let shown = exe.to_string_lossy();
    let shown = shown.strip_suffix(" (deleted)").unwrap_or(&shown);
    let named = std::path::Path::new(shown)
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("ahpty"));
    if !named {
        return Err(format!("its executable is {shown}"));
    }
    let args = process
        .cmdline()
        .map_err(|e| format!("cannot read its arguments: {e}"))?;
    if !daemon_argv(&args) {
        return Err(format!(
            "{shown} runs `{}`, not `ahpty [-v…] serve …`",
            crate::codec::clip(args.join(" "), 200)
        ));
    }
    Ok(())
}

/// Whether `args` (argv, program first) is the daemon's form: `serve` as the subcommand, after
/// only the global flags (`-v`, `-vv`, …, `--verbose`). A client with `serve` among its
/// arguments (`ahpty run -- sh -c … serve`) is not.
fn daemon_argv(args: &[String]) -> bool {
    let is_global = |a: &str| {
        a == "--verbose" || (a.len() > 1 && a.starts_with('-') && a[1..].bytes().all(|b| b == b'v'))
    };
    args.iter()
        .skip(1)
        .find(|a| !is_global(a))
        .is_some_and(|a| a == "serve")
}

/// Whether `process` has a `daemon.lock` open whose content is `pid` (the lock of the state
/// directory it uses).
fn holds_state_lock(process: &procfs::process::Process, pid: u32) -> bool {
    let Ok(fds) = process.fd() else {
        return false;
    };
    fds.flatten().any(|fd| match fd.target {
        procfs::process::FDTarget::Path(path) => {
            path.file_name() == Some(std::ffi::OsStr::new("daemon.lock"))
                && std::fs::read_to_string(&path).is_ok_and(|t| t.trim() == pid.to_string())
        }
        _ => false,
    })
}

/// `pid` has exited: no such process, or a zombie its parent has not reaped yet.
fn gone(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    match procfs::process::Process::new(pid).and_then(|p| p.stat()) {
        Ok(stat) => matches!(stat.state, 'Z' | 'X'),
        Err(procfs::ProcError::NotFound(_)) => true,
        Err(_) => false,
    }
}

/// The one line `ahpty upgrade` prints for an outcome.
pub fn describe(s: &Status) -> String {
    if s.ok {
        format!(
            "upgraded ahpty {} → {} in {:.1} ms (pid {}, {} terminal{} kept)",
            s.from,
            s.to,
            s.switch_ms.unwrap_or(0.0),
            s.pid,
            s.terminals,
            if s.terminals == 1 { "" } else { "s" }
        )
    } else {
        let back = match s.stage {
            Stage::Preflight | Stage::Quiesce | Stage::Handover => "still serving",
            _ => "went back to",
        };
        format!(
            "upgrade failed ({}): {}; {back} {}",
            s.stage,
            s.reason.as_deref().unwrap_or("no reason given"),
            s.from
        )
    }
}

/// The pid of the process listening on the Unix socket `path` (`SO_PEERCRED`).
fn socket_peer_pid(path: &Path) -> io::Result<u32> {
    use std::os::fd::AsRawFd;
    let stream = UnixStream::connect(path)?;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(cred.pid).map_err(|_| io::Error::other("no peer pid"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_lines() {
        let mut s = Status {
            attempt: 1,
            ok: true,
            stage: Stage::Done,
            reason: None,
            from: "0.1.0".into(),
            to: "0.2.0".into(),
            pid: 42,
            switch_ms: Some(31.25),
            total_ms: Some(40.0),
            terminals: 3,
        };
        assert_eq!(
            describe(&s),
            "upgraded ahpty 0.1.0 → 0.2.0 in 31.2 ms (pid 42, 3 terminals kept)"
        );
        s.ok = false;
        s.stage = Stage::Preflight;
        s.reason = Some("/x upgrade-check exited with status 3".into());
        assert_eq!(
            describe(&s),
            "upgrade failed (pre-flight): /x upgrade-check exited with status 3; still serving 0.1.0"
        );
    }

    #[test]
    fn only_the_daemon_argv_is_the_daemons() {
        let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(daemon_argv(&argv(&["ahpty", "serve"])));
        assert!(daemon_argv(&argv(&[
            "/x/ahpty",
            "-vv",
            "--verbose",
            "serve",
            "--no-auth"
        ])));
        assert!(!daemon_argv(&argv(&[
            "ahpty", "run", "--", "sh", "-c", "sleep 9", "serve"
        ])));
        assert!(!daemon_argv(&argv(&["ahpty", "--url", "serve", "serve"])));
        assert!(!daemon_argv(&argv(&["ahpty", "-x", "serve"])));
        assert!(!daemon_argv(&argv(&["ahpty"])));
    }
}
