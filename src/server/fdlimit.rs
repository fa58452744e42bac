//! Descriptors for the configured limits: every terminal and every connection costs file
//! descriptors, and the common soft limit of 1024 is only just what the default limits need.
//! At start the soft open-file limit is raised to the hard limit
//! ([`crate::config::raise_open_file_limit`], the OS part), and [`capacity`] says how many
//! terminals fit next to the configured connections and this server's pending handshakes, so
//! the daemon can warn up front instead of failing at some terminal in the middle of the day.
//!
//! May touch: the open-file limit, only through config's raise (once, at start).

use super::pending::MAX_PENDING_HANDSHAKES;
use crate::config::{raise_open_file_limit, Config};
use crate::host::FDS_PER_TERMINAL;

/// Descriptors the daemon uses besides terminals and connections (standard streams, the
/// runtime's epoll and wake-ups, signal handling, listeners, files opened in passing), plus
/// room for the short-lived descriptors of terminals being spawned.
pub const BASE_FDS: u64 = 64;

/// Refused sockets being answered at once (see `pending`), each one descriptor.
const REFUSAL_FDS: u64 = 64;

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
    let limit = match raise_open_file_limit() {
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
