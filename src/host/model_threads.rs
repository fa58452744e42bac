//! The terminal model's threads: [`MODEL_JOBS`](super::screen::MODEL_JOBS) threads of their
//! own that run the model's jobs, at a priority [`MODEL_NICE`] lower than the daemon's other
//! threads. A job is pure computation on a copy of the output; while many terminals flood,
//! jobs are always waiting, and at the same priority they kept a request or a new connection
//! waiting for a core (docs/performance.md, "Memory per flooding terminal"). A lower priority
//! counts only while the cores are busy: on an idle machine a job gets its core as before.
//! The threads start with the first job and live as long as the process; when they cannot
//! be started, jobs run on tokio's blocking pool as before.
//!
//! May touch: nothing but the jobs it is given.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

/// How much lower than the daemon's other threads a model thread runs (a nice increment).
pub const MODEL_NICE: i32 = crate::terminal::reader::FLOOD_NICE;

type Task = Box<dyn FnOnce() + Send>;

/// The queue to the model threads; `None` if none could be started.
static QUEUE: OnceLock<Option<mpsc::Sender<Task>>> = OnceLock::new();

fn start() -> Option<mpsc::Sender<Task>> {
    let (tx, rx) = mpsc::channel::<Task>();
    let rx = Arc::new(Mutex::new(rx));
    let mut started = 0;
    for i in 0..super::screen::MODEL_JOBS {
        let rx = rx.clone();
        let thread = std::thread::Builder::new()
            .name(format!("ahpty-model-{i}"))
            .spawn(move || {
                crate::terminal::reader::lower_priority(MODEL_NICE);
                loop {
                    let task = rx.lock().recv();
                    let Ok(task) = task else { return };
                    // A job that panics drops its result's sender (its terminal's model task
                    // ends, as with a panic on the blocking pool); the thread serves on.
                    let _ = std::panic::catch_unwind(AssertUnwindSafe(task));
                }
            });
        match thread {
            Ok(_) => started += 1,
            Err(e) => tracing::warn!(error = %e, "cannot start a model thread"),
        }
    }
    (started > 0).then_some(tx)
}

/// Runs `job` on a model thread (or, without one, on the blocking pool) and returns what it
/// returned; `None` if it panicked.
pub async fn run<T: Send + 'static>(job: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task: Task = Box::new(move || {
        let _ = tx.send(job());
    });
    let unsent = match QUEUE.get_or_init(start) {
        Some(queue) => queue.send(task).err().map(|e| e.0),
        None => Some(task),
    };
    if let Some(task) = unsent {
        tokio::task::spawn_blocking(task).await.ok()?;
    }
    rx.await.ok()
}
