//! The system calls a live upgrade needs: an in-memory file for the hand-over, descriptor
//! flags, the signal mask, `execve`/`fexecve` and a clock that survives `execve`.
//!
//! Thin wrappers over the system calls: each touches only the descriptor, mask or program it
//! is given.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
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

/// An empty anonymous in-memory file (close-on-exec).
pub fn memfd() -> io::Result<OwnedFd> {
    // SAFETY: memfd_create with a valid NUL-terminated name; the result is checked.
    let fd = unsafe { libc::memfd_create(c"ahpty-handover".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One `pwrite` of `buf` at `offset`, retried on `EINTR`: how many bytes were written.
pub fn pwrite(fd: RawFd, buf: &[u8], offset: u64) -> io::Result<usize> {
    let offset = libc::off_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
    loop {
        // SAFETY: writes at most buf.len() bytes from buf.
        let n = unsafe { libc::pwrite(fd, buf.as_ptr().cast(), buf.len(), offset) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Writes all of `buf` at `offset`.
pub fn pwrite_all(fd: RawFd, buf: &[u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match pwrite(fd, &buf[done..], offset + done as u64)? {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            n => done += n,
        }
    }
    Ok(())
}

/// One `pread` into `buf` at `offset`, retried on `EINTR`: how many bytes were read (0 at
/// the end of the file).
pub fn pread(fd: RawFd, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let offset = libc::off_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
    loop {
        // SAFETY: reads at most buf.len() bytes into buf.
        let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), offset) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reads into `buf` at `offset` until it is full or the file ends: how many bytes were read.
pub fn pread_full(fd: RawFd, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match pread(fd, &mut buf[done..], offset + done as u64)? {
            0 => break,
            n => done += n,
        }
    }
    Ok(done)
}

/// The size of the file `fd` in bytes (`fstat`).
pub fn file_size(fd: RawFd) -> io::Result<u64> {
    // SAFETY: fstat writes one stat struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.st_size as u64)
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
