//! What every specification module shares: the [`spec!`] and [`measured!`] test macros, the
//! suite lock that keeps measuring tests alone, and the helpers below, one job each.
//!
//! - [`bystander`]: a client that measures ping, echo and new-connection round trips during an
//!   attack.
//! - [`daemon`]: a real `ahpty serve` on a free port (one builder for every variant).
//! - [`cli`]: running `ahpty` client subcommands to completion or while they run.
//! - [`procfs`]: what `/proc` says about the daemon and its terminals' processes.
//! - [`typed`]: the official `ahp` client, with a log of the envelopes it received.
//! - [`raw`]: one raw JSON-RPC WebSocket client, for exact frames and for floods.
//! - [`check`]: folding envelopes with the official reducers, and the assertions on streams.
//! - [`text`]: small text helpers (numbers in output, clipping for failure messages, docs).
//! - [`wait`]: [`eventually`], the one way to wait for a condition nobody announces.

// The benchmarks include this module too and use only part of it.
#![allow(dead_code, unused_imports)]

pub mod bystander;
pub mod check;
pub mod cli;
pub mod daemon;
pub mod procfs;
pub mod raw;
pub mod text;
pub mod typed;
pub mod wait;

pub use bystander::*;
pub use check::*;
pub use cli::*;
pub use daemon::*;
pub use procfs::*;
pub use raw::*;
pub use text::*;
pub use typed::*;
pub use wait::*;

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

pub const ROOT: &str = "ahp-root://";
/// Timeout for a shell's first prompt / first command round trip.
pub const SHELL_TIMEOUT: Duration = Duration::from_secs(20);
/// Timeout for a plain request/response.
pub const RPC_TIMEOUT: Duration = Duration::from_secs(10);

/// Every test of the binary holds this lock: ordinary tests share it (libtest runs them in
/// parallel), tests that measure latency, CPU, memory or rates take it alone, so that no other
/// test's daemon is their background load. (The lock prefers writers: once a measuring test
/// waits for it, no new ordinary test starts.)
static SUITE: RwLock<()> = RwLock::new(());

/// The suite lock as an ordinary test holds it. A test that panicked while holding it says
/// nothing about the others: the poison is ignored.
pub fn shared() -> RwLockReadGuard<'static, ()> {
    SUITE.read().unwrap_or_else(|e| e.into_inner())
}

/// The suite lock as a measuring test holds it: no other test runs meanwhile.
pub fn exclusive() -> RwLockWriteGuard<'static, ()> {
    SUITE.write().unwrap_or_else(|e| e.into_inner())
}

/// The runtime a [`spec!`] or [`measured!`] test body runs on: multi-threaded, `threads`
/// workers, I/O and time enabled.
pub fn runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("a tokio runtime for the test")
}

/// An ordinary test, run beside the others: `spec!(name, async { … })` (a multi-thread tokio
/// runtime with 2 workers; `threads = N` before the body for more) or `spec!(name, { … })`
/// (a plain `#[test]`). The suite lock is taken before the runtime starts and released after
/// it has shut down, so it is never held across an `.await`.
#[allow(unused_macros)]
macro_rules! spec {
    ($name:ident, async $body:block) => {
        spec!($name, threads = 2, async $body);
    };
    ($name:ident, threads = $n:literal, async $body:block) => {
        #[test]
        fn $name() {
            let _suite = $crate::support::shared();
            $crate::support::runtime($n).block_on(async $body);
        }
    };
    ($name:ident, $body:block) => {
        #[test]
        fn $name() {
            let _suite = $crate::support::shared();
            $body
        }
    };
}

/// A test that measures (latency, CPU, memory, rates) or loads the machine enough to disturb
/// one that does: like [`spec!`], but it runs alone.
#[allow(unused_macros)]
macro_rules! measured {
    ($name:ident, async $body:block) => {
        measured!($name, threads = 2, async $body);
    };
    ($name:ident, threads = $n:literal, async $body:block) => {
        #[test]
        fn $name() {
            let _suite = $crate::support::exclusive();
            $crate::support::runtime($n).block_on(async $body);
        }
    };
    ($name:ident, $body:block) => {
        #[test]
        fn $name() {
            let _suite = $crate::support::exclusive();
            $body
        }
    };
}
