//! The open-file limit (`RLIMIT_NOFILE`): every terminal and every connection costs file
//! descriptors, and the common soft limit of 1024 is only just what the default limits need.
//! At start the soft limit is raised to the hard limit ([`raise`]), and [`capacity`] says how
//! many terminals fit next to the configured connections, so the daemon can warn up front
//! instead of failing at some terminal in the middle of the day.
//!
//! May touch: this process's RLIMIT_NOFILE (raised once at start) and reads
//! `/proc/sys/fs/nr_open`.

use std::io;

use super::pending::MAX_PENDING_HANDSHAKES;
use crate::config::Config;
use crate::terminal::process::open_file_limit;
use crate::terminal::FDS_PER_TERMINAL;

/// Descriptors the daemon uses besides terminals and connections (standard streams, the
/// runtime's epoll and wake-ups, signal handling, listeners, files opened in passing), plus
/// room for the short-lived descriptors of terminals being spawned.
pub const BASE_FDS: u64 = 64;

/// Refused sockets being answered at once (see `pending`), each one descriptor.
const REFUSAL_FDS: u64 = 64;

/// The open-file limit after [`raise`]: `(soft, hard)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// The limit in force.
    pub soft: u64,
    /// The most the soft limit can be raised to without privileges.
    pub hard: u64,
}

fn get() -> io::Result<libc::rlimit> {
    let (soft, hard) = open_file_limit()?;
    Ok(libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    })
}

/// Raises the soft open-file limit to the hard limit (capped at the kernel's `nr_open` when
/// the hard limit is unlimited). Returns the limit in force afterwards; if raising fails, the
/// limit as it was.
pub fn raise() -> io::Result<Limit> {
    let mut l = get()?;
    let mut target = l.rlim_max;
    if target == libc::RLIM_INFINITY {
        target = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1 << 20);
    }
    if l.rlim_cur < target {
        let old = l.rlim_cur;
        l.rlim_cur = target;
        // SAFETY: setrlimit reads one rlimit struct.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) } != 0 {
            let e = io::Error::last_os_error();
            tracing::debug!(error = %e, "cannot raise the open-file limit");
            l.rlim_cur = old;
        } else {
            tracing::debug!(from = old, to = target, "open-file limit raised");
        }
    }
    Ok(Limit {
        soft: l.rlim_cur,
        hard: l.rlim_max,
    })
}

/// How many terminals an open-file limit of `soft` descriptors leaves room for, next to
/// `--max-connections` connections and every pending handshake.
pub fn capacity(soft: u64, config: &Config) -> u64 {
    let others =
        BASE_FDS + config.max_connections as u64 + MAX_PENDING_HANDSHAKES as u64 + REFUSAL_FDS;
    soft.saturating_sub(others) / FDS_PER_TERMINAL
}

/// Raises the limit and returns a one-line warning when it does not leave room for
/// `--max-terminals` terminals (see [`capacity`]).
pub fn prepare(config: &Config) -> Option<String> {
    let limit = match raise() {
        Ok(l) => l,
        Err(e) => return Some(format!("cannot read the open-file limit: {e}")),
    };
    let fits = capacity(limit.soft, config);
    (fits < config.max_terminals as u64).then(|| {
        format!(
            "the open-file limit ({} descriptors, hard limit {}) is enough for about {fits} \
             terminals next to {} connections, not --max-terminals {}: raise the hard limit \
             (ulimit -Hn, systemd LimitNOFILE=) or lower --max-terminals",
            limit.soft, limit.hard, config.max_connections, config.max_terminals
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_leaves_room_for_connections() {
        let config = Config::default();
        assert_eq!(capacity(100, &config), 0);
        let others = BASE_FDS + 256 + 128 + REFUSAL_FDS;
        assert_eq!(capacity(others + 30, &config), 30 / FDS_PER_TERMINAL);
        assert!(capacity(768, &config) < config.max_terminals as u64);
        assert!(capacity(1 << 20, &config) >= config.max_terminals as u64);
    }
}
