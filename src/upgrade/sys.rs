//! The system calls a live upgrade needs: an in-memory file for the hand-over, descriptor
//! flags, the signal mask, `execve`/`fexecve` and a clock that survives `execve`.
//!
//! Thin wrappers over the system calls: each touches only the descriptor, mask or program it
//! is given.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The signals that control the daemon (upgrade, stop). Blocked across `execve`: their
/// handlers are reset by it and SIGUSR2's default action would kill the daemon; they stay
/// pending until the new image has installed its handlers.
const CONTROL_SIGNALS: [libc::c_int; 4] =
    [libc::SIGUSR2, libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// `CLOCK_MONOTONIC` in nanoseconds: the same clock before and after `execve`.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// An anonymous in-memory file (close-on-exec) holding `bytes`.
pub fn memfd(bytes: &[u8]) -> io::Result<OwnedFd> {
    // SAFETY: memfd_create with a valid NUL-terminated name; the result is checked.
    let fd = unsafe { libc::memfd_create(c"ahpty-handover".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut off = 0;
    while off < bytes.len() {
        // SAFETY: writes at most the rest of `bytes`.
        let n = unsafe {
            libc::pwrite(
                fd.as_raw_fd(),
                bytes[off..].as_ptr().cast(),
                bytes.len() - off,
                off as libc::off_t,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        off += n as usize;
    }
    Ok(fd)
}

/// The whole content of `fd`, read with `pread` from offset 0 (the file offset is shared
/// with whoever else holds the file), at most `limit` bytes.
pub fn read_all(fd: RawFd, limit: usize) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: reads at most buf.len() bytes into buf.
        let n = unsafe {
            libc::pread(
                fd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                out.len() as libc::off_t,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n as usize]);
        if out.len() > limit {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("larger than {limit} bytes"),
            ));
        }
    }
}

/// Sets or clears `FD_CLOEXEC` on `fd`.
pub fn set_cloexec(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor number; the results are checked.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        let flags = if on {
            flags | libc::FD_CLOEXEC
        } else {
            flags & !libc::FD_CLOEXEC
        };
        if libc::fcntl(fd, libc::F_SETFD, flags) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether `fd` is an open descriptor.
pub fn is_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD only reads the descriptor's flags.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

fn control_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a local sigset_t.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in CONTROL_SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Blocks the control signals in the calling thread (inherited by threads it creates, and
/// kept across `execve`).
pub fn block_control_signals() {
    let set = control_set();
    // SAFETY: pthread_sigmask with a valid set.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// Blocks exactly the control signals in the calling thread: an image executed from a
/// signal handler (see `rollback.rs`) inherits that signal blocked too.
pub fn set_control_mask() {
    let set = control_set();
    // SAFETY: pthread_sigmask with a valid set.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) };
}

/// Unblocks the control signals in the calling thread (their handlers are installed).
pub fn unblock_control_signals() {
    let set = control_set();
    // SAFETY: pthread_sigmask with a valid set.
    unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
}

/// Opens this process's executable (close-on-exec), so that it can be executed again even
/// after the file was replaced on disk.
pub fn open_own_exe() -> io::Result<OwnedFd> {
    let f = std::fs::File::open("/proc/self/exe")?;
    Ok(OwnedFd::from(f))
}

fn cstring(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in an argument"))
}

/// NUL-terminated argument and environment arrays for exec.
struct ExecArgs {
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

fn exec_args(argv: &[OsString], env: &[(OsString, OsString)]) -> io::Result<ExecArgs> {
    let mut strings = Vec::new();
    for a in argv {
        strings.push(cstring(a)?);
    }
    for (k, v) in env {
        let mut kv = k.clone();
        kv.push("=");
        kv.push(v);
        strings.push(cstring(&kv)?);
    }
    let ptrs: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
    let (a, e) = ptrs.split_at(argv.len());
    let mut argv_p = a.to_vec();
    argv_p.push(std::ptr::null());
    let mut envp_p = e.to_vec();
    envp_p.push(std::ptr::null());
    Ok(ExecArgs {
        _strings: strings,
        argv: argv_p,
        envp: envp_p,
    })
}

/// `execve(path, argv, env)`: returns only on failure, with the error.
pub fn execve(path: &Path, argv: &[OsString], env: &[(OsString, OsString)]) -> io::Error {
    let (path, args) = match (cstring(path.as_os_str()), exec_args(argv, env)) {
        (Ok(p), Ok(a)) => (p, a),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    // SAFETY: every pointer points into CStrings owned by `args` and `path`, alive for the
    // call; both arrays are NULL-terminated.
    unsafe { libc::execve(path.as_ptr(), args.argv.as_ptr(), args.envp.as_ptr()) };
    io::Error::last_os_error()
}

/// `fexecve(fd, argv, env)`: returns only on failure, with the error.
pub fn fexecve(fd: RawFd, argv: &[OsString], env: &[(OsString, OsString)]) -> io::Error {
    let args = match exec_args(argv, env) {
        Ok(a) => a,
        Err(e) => return e,
    };
    // SAFETY: as in `execve`.
    unsafe { libc::fexecve(fd, args.argv.as_ptr(), args.envp.as_ptr()) };
    io::Error::last_os_error()
}
