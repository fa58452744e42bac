//! Waiting for a condition that nothing announces (a process gone, a file written, a count
//! reached): [`eventually`] checks it every [`POLL`] until it holds, and fails after a
//! timeout naming what it waited for and how things stood at the last check. Waits for
//! something that *is* announced (a frame, a log line, a child's exit) use that event instead.

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

/// [`eventually`] for a test without a runtime (or a blocking section).
pub fn eventually_blocking<R: Outcome>(
    what: &str,
    timeout: Duration,
    mut condition: impl FnMut() -> R,
) -> R::Out {
    let deadline = Instant::now() + timeout;
    loop {
        match condition().settle() {
            Ok(v) => return v,
            Err(last) if Instant::now() >= deadline => give_up(what, timeout, last),
            Err(_) => std::thread::sleep(POLL),
        }
    }
}
