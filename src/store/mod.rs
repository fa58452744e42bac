//! The transcript store: what survives a restart, a crash or a reboot — each terminal's
//! retained content and metadata, one append-only file per terminal, and the high-water mark
//! of `serverSeq` — under the state directory (docs/store.md has the layout and the format).
//!
//! The host feeds it from under its lock, and nothing here does I/O there: [`Store::append`]
//! and friends only push the envelope bytes the host already encoded (a reference count) onto a
//! byte-bounded queue. One writer thread (`ahpty-store`) appends each terminal's records with
//! one `write` per batch — at most [`BATCH`] after the first record of the batch, earlier once
//! [`EARLY_BYTES`] wait — and `fdatasync`s what it wrote every [`SYNC_EVERY`]. So a process
//! crash (`kill -9`, OOM, abort) loses at most the output of the last [`BATCH`] before it, a
//! machine crash about the last [`SYNC_EVERY`]. When the disk cannot keep up, a terminal's
//! records are dropped rather than the host blocked ([`MAX_QUEUE_BYTES`]); the terminal is then
//! rewritten whole from a checkpoint the host provides.
//!
//! Everything the writer knows is in the files (their names and lengths): a later process —
//! after a restart or a live upgrade — picks the store up from the directory alone.
//!
//! This is a bottom layer: it uses `config` and the AHP types, nothing else of the crate.

mod dir;
pub mod format;
mod writer;

use std::collections::HashSet;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

pub use dir::{open, Opened, Restored};
pub use format::{Meta, Owner};

/// Longest a record waits in memory before the writer appends it (the loss bound of a process
/// crash).
pub const BATCH: Duration = Duration::from_millis(100);

/// Queued bytes at which the writer starts a batch without waiting for [`BATCH`] to pass.
pub const EARLY_BYTES: usize = 4 * 1024 * 1024;

/// How often written transcripts are `fdatasync`ed (the loss bound of a machine crash).
pub const SYNC_EVERY: Duration = Duration::from_secs(1);

/// Most bytes waiting for the writer; past it a terminal's records are dropped and the
/// terminal is marked for a checkpoint (the host never waits for the disk).
pub const MAX_QUEUE_BYTES: usize = 32 * 1024 * 1024;

/// How far ahead of the `serverSeq` handed out the high-water mark on disk is kept: a new
/// process starts at the mark, which is always above every value an earlier one used.
pub const SEQ_MARGIN: u64 = 1 << 24;

/// Highest `serverSeq` a process starts at (2^53 − 2^44): every value stays exactly
/// representable as a JavaScript number for 2^44 envelopes after the start.
pub const MAX_SEQ_START: u64 = (1 << 53) - (1 << 44);

/// The `serverSeq` a process starts from when no high-water mark says more: the Unix time in
/// milliseconds × 1000 (about 1.7 × 10^15 in 2024; capped at [`MAX_SEQ_START`], reached in
/// the year 2255). A process that handed out fewer than 1000 values per millisecond since
/// it started, on a clock that did not step back, stayed below the next one's start.
pub fn clock_seq_base() -> u64 {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    ms.saturating_mul(1000).min(MAX_SEQ_START)
}

/// Names one terminal's transcript, `terminals/<key>.log` (a random UUID, independent of the
/// terminal's URI).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(Arc<str>);

impl Key {
    /// A fresh key.
    pub fn new() -> Key {
        Key(uuid::Uuid::new_v4().simple().to_string().into())
    }

    /// The file name stem.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key of a transcript file name (`<key>.log`), if it is one.
    fn from_file_name(name: &str) -> Option<Key> {
        let stem = name.strip_suffix(".log")?;
        let valid = !stem.is_empty()
            && stem.len() <= 64
            && stem.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        valid.then(|| Key(stem.into()))
    }

    fn file_name(&self) -> String {
        format!("{}.log", self.0)
    }
}

impl Default for Key {
    fn default() -> Self {
        Key::new()
    }
}

/// An envelope as the host sent it: shared bytes (e.g. the whole `action` notification) and
/// where the envelope's JSON lies in them. Holding one costs a reference count, not a copy.
#[derive(Debug, Clone)]
pub struct Payload {
    bytes: Bytes,
    range: Range<usize>,
}

impl Payload {
    /// The JSON at `range` of `bytes`; `None` if the range is out of bounds.
    pub fn new(bytes: Bytes, range: Range<usize>) -> Option<Payload> {
        (range.start <= range.end && range.end <= bytes.len()).then_some(Payload { bytes, range })
    }

    /// The envelope's JSON.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[self.range.clone()]
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.range.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }
}

/// A `disposeTerminal`'s wait for its transcript to be deleted.
pub struct Removal(tokio::sync::oneshot::Receiver<()>);

impl Removal {
    /// Waits until the file is gone (and the directory synced), at most `timeout`; `false` if
    /// that took longer (or the writer is gone).
    pub async fn wait(self, timeout: Duration) -> bool {
        matches!(tokio::time::timeout(timeout, self.0).await, Ok(Ok(())))
    }
}

/// One unit of work for the writer thread, in the order the host queued it.
enum Op {
    /// One envelope appended as a [`format::Kind::Action`] record.
    Append {
        key: Key,
        payload: Payload,
        exited: bool,
    },
    /// The host's own fields changed.
    Owner { key: Key, owner: Owner },
    /// The terminal's whole state: the file is rewritten from it (created for a new terminal,
    /// compacted for a long-lived one, repaired after dropped records).
    Checkpoint { key: Key, meta: Box<Meta> },
    /// The terminal was disposed: delete its file, then answer.
    Remove {
        key: Key,
        done: tokio::sync::oneshot::Sender<()>,
    },
}

#[derive(Default)]
struct Queue {
    ops: Vec<Op>,
    bytes: usize,
    /// When the first op of this batch was queued.
    first_at: Option<Instant>,
    /// Something that must not wait for the batch window (a removal, a flush, a new mark).
    urgent: bool,
    closing: bool,
    /// Terminals whose records were dropped since their last checkpoint.
    lost: HashSet<Key>,
    /// Flushes waiting for everything queued before them to be written and synced.
    flushes: Vec<std::sync::mpsc::Sender<()>>,
    /// The `serverSeq` high-water mark to write.
    seq_wanted: u64,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Wakes the host's repair task: some terminals need a checkpoint.
    lost_wake: tokio::sync::Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        match self.queue.lock() {
            Ok(q) => q,
            Err(p) => p.into_inner(),
        }
    }
}

/// The open store: the queue to the writer thread and the lock on the state directory (held
/// until the process exits). Every method is cheap and non-blocking unless it says otherwise.
pub struct Store {
    shared: Arc<Shared>,
    dir: PathBuf,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// `daemon.lock`, `flock`ed for the life of the process.
    lock: std::fs::File,
}

impl Store {
    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The locked `daemon.lock` (a live upgrade hands this descriptor to the new image).
    pub fn lock_file(&self) -> &std::fs::File {
        &self.lock
    }

    /// Queues `payload` (an accepted envelope of the terminal's channel) for the terminal's
    /// transcript; `exited` marks a `terminal/exited`. `false`: dropped, because the queue is
    /// full or earlier records of this terminal were — the caller then sends a
    /// [`Store::checkpoint`] instead.
    pub fn append(&self, key: &Key, payload: Payload, exited: bool) -> bool {
        let bytes = payload.len();
        let op = Op::Append {
            key: key.clone(),
            payload,
            exited,
        };
        self.push(key, op, bytes, false)
    }

    /// Queues a change of the claim holder or of the client-renamed flag; `false` as for
    /// [`Store::append`].
    pub fn owner(&self, key: &Key, owner: Owner) -> bool {
        let bytes = owner.holder.len() + 64;
        let op = Op::Owner {
            key: key.clone(),
            owner,
        };
        self.push(key, op, bytes, false)
    }

    /// Queues the terminal's whole state, built by `build` only if about `estimate` bytes fit
    /// in the queue (so a full queue costs no copy). The transcript is rewritten from it and
    /// later records append to it. `false`: no room; try again later ([`Store::lost`] says
    /// when).
    pub fn checkpoint(&self, key: &Key, estimate: usize, build: impl FnOnce() -> Meta) -> bool {
        {
            // A checkpoint larger than the whole queue still goes into an empty one.
            let mut q = self.shared.lock();
            if q.bytes + estimate > MAX_QUEUE_BYTES && !q.ops.is_empty() {
                q.lost.insert(key.clone());
                return false;
            }
        }
        let op = Op::Checkpoint {
            key: key.clone(),
            meta: Box::new(build()),
        };
        self.push(key, op, estimate, true)
    }

    /// Deletes the terminal's transcript: queued after its records, and done at once (not at
    /// the end of a batch). Await the result before answering `disposeTerminal`.
    pub fn remove(&self, key: &Key) -> Removal {
        let (done, wait) = tokio::sync::oneshot::channel();
        let mut q = self.shared.lock();
        q.lost.remove(key);
        q.ops.push(Op::Remove {
            key: key.clone(),
            done,
        });
        q.urgent = true;
        self.shared.wake.notify_one();
        Removal(wait)
    }

    /// Asks for the `serverSeq` high-water mark on disk to be raised to `mark` (written by the
    /// writer at once, ahead of any other work).
    pub fn reserve_seq(&self, mark: u64) {
        let mut q = self.shared.lock();
        if mark > q.seq_wanted {
            q.seq_wanted = mark;
            q.urgent = true;
            self.shared.wake.notify_one();
        }
    }

    /// Waits until the writer reports terminals that need a checkpoint (their records were
    /// dropped; at most once per [`SYNC_EVERY`]) and returns them. They stay marked until a
    /// checkpoint of theirs is queued (or [`Store::forget`] is called for them).
    pub async fn lost(&self) -> Vec<Key> {
        loop {
            self.shared.lost_wake.notified().await;
            let q = self.shared.lock();
            if !q.lost.is_empty() {
                return q.lost.iter().cloned().collect();
            }
        }
    }

    /// Stops asking for a checkpoint of `key` (its terminal is gone).
    pub fn forget(&self, key: &Key) {
        self.shared.lock().lost.remove(key);
    }

    /// Blocks until everything queued so far is written and synced (at most `timeout`);
    /// `false` on timeout.
    pub fn flush(&self, timeout: Duration) -> bool {
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let mut q = self.shared.lock();
            if q.closing {
                return true;
            }
            q.flushes.push(tx);
            q.urgent = true;
            self.shared.wake.notify_one();
        }
        rx.recv_timeout(timeout).is_ok()
    }

    /// Writes and syncs everything queued, then stops the writer (blocking, at most
    /// `timeout`); later records are ignored. The files stay for the next start.
    pub fn close(&self, timeout: Duration) {
        let done = self.flush(timeout);
        {
            let mut q = self.shared.lock();
            q.closing = true;
            self.shared.wake.notify_one();
        }
        let thread = match self.thread.lock() {
            Ok(mut t) => t.take(),
            Err(p) => p.into_inner().take(),
        };
        if !done {
            tracing::warn!(
                dir = %self.dir.display(),
                "the transcript writer did not finish within {} ms; the last records may be lost",
                timeout.as_millis()
            );
            return;
        }
        if let Some(t) = thread {
            let _ = t.join();
        }
    }

    fn push(&self, key: &Key, op: Op, bytes: usize, checkpoint: bool) -> bool {
        let mut q = self.shared.lock();
        if q.closing {
            return true;
        }
        if checkpoint {
            q.lost.remove(key);
        } else if q.lost.contains(key) {
            return false;
        } else if q.bytes + bytes > MAX_QUEUE_BYTES {
            q.lost.insert(key.clone());
            return false;
        }
        let before = q.bytes;
        q.ops.push(op);
        q.bytes += bytes;
        if q.first_at.is_none() {
            q.first_at = Some(Instant::now());
            self.shared.wake.notify_one();
        } else if before < EARLY_BYTES && q.bytes >= EARLY_BYTES {
            self.shared.wake.notify_one();
        }
        true
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let mut q = self.shared.lock();
        q.closing = true;
        self.shared.wake.notify_one();
    }
}
