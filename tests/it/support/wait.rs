//! Waiting, in two forms and nowhere else by hand:
//!
//! - a condition that nothing announces (a process gone, a file written, a count reached):
//!   [`eventually`] checks it every [`POLL`] until it holds, and fails after a timeout naming
//!   what it waited for and how things stood at the last check;
//! - something that *is* announced (a frame, an envelope, a log line, a child's exit): the test
//!   reads the events in a loop, and [`within`] gives the whole wait one timeout.

use std::time::{Duration, Instant};

/// How often [`eventually`] checks its condition.
pub const POLL: Duration = Duration::from_millis(10);

/// What a condition returns: `bool`, `Option<T>` (the value once there), or
/// `Result<T, String>` (the error describing how things stand, for the failure message).
pub trait Outcome {
    type Out;
    fn settle(self) -> Result<Self::Out, Option<String>>;
}

impl Outcome for bool {
    type Out = ();
    fn settle(self) -> Result<(), Option<String>> {
        if self {
            Ok(())
        } else {
            Err(None)
        }
    }
}

impl<T> Outcome for Option<T> {
    type Out = T;
    fn settle(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T> Outcome for Result<T, String> {
    type Out = T;
    fn settle(self) -> Result<T, Option<String>> {
        self.map_err(Some)
    }
}

fn give_up(what: &str, timeout: Duration, last: Option<String>) -> ! {
    match last {
        Some(last) => panic!("{what}: not within {timeout:?}; last: {last}"),
        None => panic!("{what}: not within {timeout:?}"),
    }
}

/// Checks `condition` until it holds (returning its value) or `timeout` passes (panicking).
pub async fn eventually<R: Outcome>(
    what: &str,
    timeout: Duration,
    mut condition: impl AsyncFnMut() -> R,
) -> R::Out {
    let deadline = Instant::now() + timeout;
    loop {
        match condition().await.settle() {
            Ok(v) => return v,
            Err(last) if Instant::now() >= deadline => give_up(what, timeout, last),
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// Runs `wait` (typically a loop reading events until the awaited one) with one overall
/// `timeout`; panics naming `what` when it runs out.
pub async fn within<T>(
    what: &str,
    timeout: Duration,
    wait: impl std::future::Future<Output = T>,
) -> T {
    match tokio::time::timeout(timeout, wait).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: not within {timeout:?}"),
    }
}

/// [`eventually`] for a test without a runtime (or a blocking section).
pub fn eventually_blocking<R: Outcome>(
    what: &str,
    timeout: Duration,
    condition: impl FnMut() -> R,
) -> R::Out {
    match poll_blocking(timeout, condition) {
        Ok(v) => v,
        Err(last) => give_up(what, timeout, last),
    }
}

/// Checks `condition` every [`POLL`] (blocking the thread) until it holds or `timeout`
/// passes; the error is how things stood at the last check. For a caller that has a
/// fallback instead of a failure (a harness cleaning up).
pub fn poll_blocking<R: Outcome>(
    timeout: Duration,
    mut condition: impl FnMut() -> R,
) -> Result<R::Out, Option<String>> {
    let deadline = Instant::now() + timeout;
    loop {
        match condition().settle() {
            Ok(v) => return Ok(v),
            Err(last) if Instant::now() >= deadline => return Err(last),
            Err(_) => std::thread::sleep(POLL),
        }
    }
}
