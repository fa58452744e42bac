//! The process and host facts the settings start from: the default Unix socket path, the
//! effective uid, and the open-file limit (raised once at start).
//!
//! May touch: the environment (`XDG_RUNTIME_DIR`), the process's `RLIMIT_NOFILE` and
//! `/proc/sys/fs/nr_open`; nothing else.

use std::path::PathBuf;

/// The Unix socket `ahpty serve` listens on by default and the client subcommands connect to
/// when neither `--url` nor `$AHPTY_URL` names a daemon:
///
/// - `$XDG_RUNTIME_DIR/ahpty/ahpty.sock` when `XDG_RUNTIME_DIR` is set to an absolute path
///   (the per-user runtime directory of systemd-logind: private, cleared at logout);
/// - otherwise `/tmp/ahpty-$UID/ahpty.sock` (`$UID` being the effective user id), the tmux
///   convention. `TMPDIR` is deliberately not consulted, so a daemon started by a service
///   manager and a client started from a login shell agree on the path.
///
/// Either directory is created with mode 0700 by the daemon and must belong to the daemon's
/// user (see `server::unix`); the client checks the daemon's uid on the socket itself
/// (`SO_PEERCRED`) before sending anything, so a socket planted by another user is refused.
pub fn default_socket_path() -> PathBuf {
    default_socket_path_from(std::env::var_os("XDG_RUNTIME_DIR"), effective_uid())
}

/// [`default_socket_path`] for a given `XDG_RUNTIME_DIR` value and uid (testable).
pub fn default_socket_path_from(runtime_dir: Option<std::ffi::OsString>, uid: u32) -> PathBuf {
    match runtime_dir.map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir.join("ahpty").join("ahpty.sock"),
        _ => PathBuf::from(format!("/tmp/ahpty-{uid}")).join("ahpty.sock"),
    }
}

/// The process's effective user id.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// This process's open-file limit (`RLIMIT_NOFILE`), in descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFileLimit {
    /// The limit in force.
    pub soft: u64,
    /// The most the soft limit can be raised to without privileges.
    pub hard: u64,
}

/// Raises the soft open-file limit to the hard limit (capped at the kernel's
/// `/proc/sys/fs/nr_open` when the hard limit is unlimited): every terminal and connection
/// costs descriptors, and the common soft limit of 1024 is far below what the default limits
/// need. Returns the limit in force afterwards; if raising fails, the limit as it was.
/// Errors: the limit cannot be read.
pub fn raise_open_file_limit() -> std::io::Result<OpenFileLimit> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource, RLIM_INFINITY};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    let target = if hard == RLIM_INFINITY {
        std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1 << 20)
    } else {
        hard
    };
    if soft >= target {
        return Ok(OpenFileLimit { soft, hard });
    }
    match setrlimit(Resource::RLIMIT_NOFILE, target, hard) {
        Ok(()) => {
            tracing::debug!(from = soft, to = target, "open-file limit raised");
            Ok(OpenFileLimit { soft: target, hard })
        }
        Err(e) => {
            tracing::debug!(error = %e, "cannot raise the open-file limit");
            Ok(OpenFileLimit { soft, hard })
        }
    }
}
