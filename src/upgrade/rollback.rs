//! The way back from a new image that crashes or hangs before it committed to a hand-over.
//!
//! Armed in the new image before anything else runs: a fatal signal (SIGSEGV, SIGBUS,
//! SIGILL, SIGFPE, SIGABRT — a panic that aborts) or the adopt deadline (SIGALRM) executes
//! the old image again from the descriptor it passed, with the untouched hand-over and the
//! reason. The handler only calls `fexecve` and `_exit` (async-signal-safe); the argument and
//! environment arrays it uses are built when arming. Disarmed at the commit.
//!
//! May touch: the process's dispositions of those signals and its real-time interval timer
//! (`ITIMER_REAL`), both set back at the commit.

use std::ffi::{CString, OsString};
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Duration;

use super::{FAILED_ENV, HANDOVER_FD_ENV};

/// The signals that mean the new image crashed, and the deadline's.
const FATAL: [libc::c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
];

fn name(sig: libc::c_int) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        _ => "SIGABRT",
    }
}

/// Everything the handler needs, built in advance (never freed once armed: a handler may
/// still be running on another thread when it is disarmed).
struct Prepared {
    exe: RawFd,
    argv: Vec<*const libc::c_char>,
    /// One environment per signal, each naming it in [`FAILED_ENV`].
    envps: Vec<(libc::c_int, Vec<*const libc::c_char>)>,
    _strings: Vec<CString>,
}

static PREPARED: AtomicPtr<Prepared> = AtomicPtr::new(std::ptr::null_mut());

extern "C" fn on_fault(sig: libc::c_int) {
    let p = PREPARED.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: `p` was leaked by `arm` and is never freed; its arrays are NULL-terminated
        // and point into its own CStrings.
        unsafe {
            let p = &*p;
            if let Some((_, envp)) = p.envps.iter().find(|(s, _)| *s == sig) {
                libc::fexecve(p.exe, p.argv.as_ptr(), envp.as_ptr());
            }
        }
    }
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(70) }
}

/// Arms the way back: `exe` is the old image, `memfd` the hand-over (both kept across the
/// `fexecve`), `deadline` the adopt deadline (`ITIMER_REAL`, so SIGALRM, at its end).
pub(super) fn arm(exe: RawFd, memfd: RawFd, deadline: Duration) {
    let _ = super::sys::set_cloexec(memfd, false);
    let _ = super::sys::set_cloexec(exe, false);
    let cs = |s: &[u8]| CString::new(s.to_vec()).ok();
    let mut strings: Vec<CString> = std::env::args_os()
        .filter_map(|a| cs(a.as_bytes()))
        .collect();
    let argc = strings.len();
    let base: Vec<(OsString, OsString)> = super::inherited_env();
    let mut env_ranges = Vec::new();
    let reasons: Vec<(libc::c_int, String)> = FATAL
        .iter()
        .map(|&s| {
            (
                s,
                format!("stage=adopt: the new image crashed ({})", name(s)),
            )
        })
        .chain(std::iter::once((
            libc::SIGALRM,
            format!(
                "stage=adopt: the new image did not take over within {}",
                super::seconds(deadline)
            ),
        )))
        .collect();
    for (sig, reason) in &reasons {
        let start = strings.len();
        for (k, v) in &base {
            let mut kv = k.clone();
            kv.push("=");
            kv.push(v);
            if let Some(c) = cs(kv.as_bytes()) {
                strings.push(c);
            }
        }
        strings.extend(cs(format!("{HANDOVER_FD_ENV}={memfd}").as_bytes()));
        strings.extend(cs(format!("{FAILED_ENV}={reason}").as_bytes()));
        env_ranges.push((*sig, start, strings.len()));
    }
    let ptr = |c: &CString| c.as_ptr();
    let mut argv: Vec<*const libc::c_char> = strings[..argc].iter().map(ptr).collect();
    argv.push(std::ptr::null());
    let envps = env_ranges
        .into_iter()
        .map(|(sig, a, b)| {
            let mut v: Vec<*const libc::c_char> = strings[a..b].iter().map(ptr).collect();
            v.push(std::ptr::null());
            (sig, v)
        })
        .collect();
    let prepared = Box::new(Prepared {
        exe,
        argv,
        envps,
        _strings: strings,
    });
    PREPARED.store(Box::into_raw(prepared), Ordering::Release);
    for sig in FATAL.iter().chain(&[libc::SIGALRM]) {
        // SAFETY: installs a handler that only calls async-signal-safe functions.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_fault as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(*sig, &sa, std::ptr::null_mut());
        }
    }
    set_timer(deadline);
}

/// Sets the process's real-time interval timer to fire once after `after` (zero: cancels it).
fn set_timer(after: Duration) {
    let value = libc::itimerval {
        it_interval: libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        },
        it_value: libc::timeval {
            tv_sec: after.as_secs() as libc::time_t,
            tv_usec: after.subsec_micros() as libc::suseconds_t,
        },
    };
    // SAFETY: setitimer reads `value` and writes nothing (no old value asked for).
    unsafe { libc::setitimer(libc::ITIMER_REAL, &value, std::ptr::null_mut()) };
}

/// The commit: no deadline, default dispositions again.
pub(super) fn disarm() {
    set_timer(Duration::ZERO);
    // SAFETY: signal has no memory effects; the prepared arrays stay leaked.
    unsafe {
        for sig in FATAL.iter().chain(&[libc::SIGALRM]) {
            libc::signal(*sig, libc::SIG_DFL);
        }
    }
    PREPARED.store(std::ptr::null_mut(), Ordering::Release);
}
