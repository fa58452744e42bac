//! The transcript store: what survives a restart, a crash or a reboot — each terminal's
//! retained content and metadata, one append-only file per terminal, and the high-water mark
//! of `serverSeq` — under the state directory (docs/store.md has the layout and the format).
//!
//! The host feeds it from under its lock, and nothing here does I/O there: [`Store::append`]
//! and friends only push the envelope bytes the host already encoded (a reference count) onto a
//! byte-bounded queue. One writer thread (`ahpty-store`) appends each terminal's records with
//! one `write` per batch — at most [`BATCH`] after the first record of the batch, earlier once
//! [`EARLY_BYTES`] wait — and makes what it wrote durable every [`SYNC_EVERY`] (`fdatasync`
//! per file, or one `syncfs` once several files were written). So a process
//! crash (`kill -9`, OOM, abort) loses at most the output of the last [`BATCH`] before it, a
//! machine crash about the last [`SYNC_EVERY`]. When the disk cannot keep up, a terminal's
//! records are dropped rather than the host blocked ([`MAX_QUEUE_BYTES`]); the terminal is then
//! rewritten whole from a checkpoint the host provides.
//!
//! Everything the writer knows is in the files (their names and lengths): a later process —
//! after a restart or a live upgrade — picks the store up from the directory alone.
//!
//! This is a bottom layer: it uses `config` and the AHP types, nothing else of the crate.
//!
//! May touch: the state directory (through `dir.rs` at start and the writer thread after);
//! from the host's side, only its queue.

mod dir;
mod files;
pub mod format;
mod writer;

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

pub use dir::{open, Opened, Restored};
pub use format::{Meta, Owner};

/// Longest a record waits in memory before the writer appends it (the loss bound of a process
/// crash). The writer is woken by the first record of a batch only, then sleeps until this
/// much later: one wake-up per batch, not per record.
pub const BATCH: Duration = Duration::from_millis(100);

/// Queued bytes at which the writer starts a batch without waiting for [`BATCH`] to pass.
pub const EARLY_BYTES: usize = 4 * 1024 * 1024;

/// How often written transcripts are synced to the disk (the loss bound of a machine crash):
/// by an `fdatasync` of each, or one `syncfs` of their filesystem once several were written
/// (why: `writer::SYNCFS_FROM`).
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
/// terminal's URI). Compared by name; hashed by a digest of the name taken once, so the
/// writer's tables ([`KeyMap`]) look a key up without hashing its 32 characters again.
#[derive(Debug, Clone)]
pub struct Key {
    name: Arc<str>,
    digest: u64,
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.name == other.name
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> std::cmp::Ordering {
        self.name.cmp(&other.name)
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.digest);
    }
}

impl Key {
    /// A fresh key.
    pub fn new() -> Key {
        Key::named(uuid::Uuid::new_v4().simple().to_string().into())
    }

    fn named(name: Arc<str>) -> Key {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        name.hash(&mut h);
        Key {
            digest: h.finish(),
            name,
        }
    }

    /// The file name stem.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The key named `stem` (a live upgrade's hand-over), if it is a valid one.
    pub fn parse(stem: &str) -> Option<Key> {
        Key::from_file_name(&format!("{stem}.log"))
    }

    /// The key of a transcript file name (`<key>.log`), if it is one.
    fn from_file_name(name: &str) -> Option<Key> {
        let stem = name.strip_suffix(".log")?;
        let valid = !stem.is_empty()
            && stem.len() <= 64
            && stem.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        valid.then(|| Key::named(stem.into()))
    }

    fn file_name(&self) -> String {
        format!("{}.log", self.name)
    }
}

/// Hashes a [`Key`] by its digest, as it is (a key writes nothing else).
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }
}

/// A table by [`Key`] (no hashing per lookup).
type KeyMap<V> = HashMap<Key, V, BuildHasherDefault<KeyHasher>>;

/// A set of [`Key`]s (no hashing per lookup).
type KeySet = HashSet<Key, BuildHasherDefault<KeyHasher>>;

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
    /// A restored terminal the host refused (`reason`): move its file to `corrupt/`.
    SetAside { key: Key, reason: String },
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
    lost: KeySet,
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

    /// Moves a restored terminal's transcript to `corrupt/` (queued, done at once), logging
    /// one warning that gives `reason` (what made the host refuse it, e.g. its URI) and where
    /// the file went. For a terminal the host does not restore; the key is then forgotten.
    pub fn set_aside(&self, key: &Key, reason: String) {
        let mut q = self.shared.lock();
        q.lost.remove(key);
        q.ops.push(Op::SetAside {
            key: key.clone(),
            reason,
        });
        q.urgent = true;
        self.shared.wake.notify_one();
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

    /// Blocks until everything queued so far is written and synced, and the byte and age
    /// bounds are applied (at most `timeout`); `false` on timeout.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Persist;
    use ahp_types::actions::{ActionEnvelope, StateAction, TerminalDataAction};
    use ahp_types::state::{
        TerminalClaim, TerminalClientClaim, TerminalContentPart, TerminalLifecycleState,
        TerminalRunningLifecycleState, TerminalState,
    };

    fn settings(dir: &Path, max_bytes: u64) -> Persist {
        Persist {
            dir: dir.to_path_buf(),
            explicit: true,
            max_bytes,
            max_age: None,
        }
    }

    fn meta(uri: &str) -> Meta {
        Meta {
            uri: uri.into(),
            created_at_ms: 1,
            holder: "c".into(),
            renamed_by_client: false,
            state: TerminalState {
                title: "sh".into(),
                cwd: None,
                cols: Some(80),
                rows: Some(24),
                content: Vec::new(),
                lifecycle: TerminalLifecycleState::Running(TerminalRunningLifecycleState {}),
                claim: TerminalClaim::Client(TerminalClientClaim {
                    client_id: "c".into(),
                }),
                supports_command_detection: None,
                is_pty: Some(true),
            },
        }
    }

    /// A `terminal/data` envelope as the host would hand it: inside a larger frame.
    fn data(uri: &str, text: &str) -> Payload {
        let envelope = serde_json::to_string(&ActionEnvelope {
            channel: uri.into(),
            action: StateAction::TerminalData(TerminalDataAction { data: text.into() }),
            server_seq: 7,
            origin: None,
            rejection_reason: None,
        })
        .unwrap();
        let frame = format!("[{envelope}]");
        Payload::new(Bytes::from(frame), 1..1 + envelope.len()).unwrap()
    }

    fn text_of(state: &TerminalState) -> String {
        state
            .content
            .iter()
            .map(|p| match p {
                TerminalContentPart::Unclassified(u) => u.value.clone(),
                _ => String::new(),
            })
            .collect()
    }

    #[tokio::test]
    async fn what_is_written_comes_back_and_the_directory_has_one_owner() {
        let dir = tempfile::tempdir().unwrap();
        let p = settings(dir.path(), 1 << 30);
        let clock = clock_seq_base();
        let first = open(&p).unwrap().unwrap();
        assert!(first.restored.is_empty());
        assert!(first.seq_base >= clock);
        let second = open(&p).map(|_| ()).unwrap_err().to_string();
        assert!(
            second.contains(&format!("another ahpty (pid {})", std::process::id()))
                && second.contains("--state-dir"),
            "{second}"
        );
        let (a, b) = (Key::new(), Key::new());
        let store = &first.store;
        assert!(store.checkpoint(&a, 100, || meta("t:/a")));
        assert!(store.checkpoint(&b, 100, || meta("t:/b")));
        for i in 0..3 {
            assert!(store.append(&a, data("t:/a", &format!("a{i} ")), false));
        }
        assert!(store.owner(
            &a,
            Owner {
                holder: "d".into(),
                renamed_by_client: true
            }
        ));
        assert!(store.append(&b, data("t:/b", "b0"), false));
        // Deleted before the removal is acknowledged.
        assert!(store.remove(&b).wait(Duration::from_secs(10)).await);
        assert!(!dir.path().join("terminals").join(b.file_name()).exists());
        store.reserve_seq(first.seq_base + 3 * SEQ_MARGIN);
        let mark = first.seq_base + 3 * SEQ_MARGIN;
        first.store.close(Duration::from_secs(10));
        drop(first);

        let again = open(&p).unwrap().unwrap();
        assert!(again.seq_base >= mark, "{} < {mark}", again.seq_base);
        assert_eq!(again.restored.len(), 1);
        let r = &again.restored[0];
        assert_eq!(r.key, a);
        assert_eq!(r.meta.uri, "t:/a");
        assert_eq!(r.meta.holder, "d");
        assert!(r.meta.renamed_by_client);
        assert_eq!(text_of(&r.meta.state), "a0 a1 a2 ");
        // Later records append to the restored file.
        assert!(again.store.append(&a, data("t:/a", "more"), true));
        assert!(again.store.flush(Duration::from_secs(10)));
        let bytes = std::fs::read(dir.path().join("terminals").join(a.file_name())).unwrap();
        let (t, damage) = format::decode(&bytes);
        assert!(damage.is_none());
        assert_eq!(text_of(&t.unwrap().meta.state), "a0 a1 a2 more");
    }

    #[tokio::test]
    async fn over_the_byte_budget_exited_terminals_go_first() {
        let dir = tempfile::tempdir().unwrap();
        let opened = open(&settings(dir.path(), 8 * 1024)).unwrap().unwrap();
        let store = &opened.store;
        let (done, running) = (Key::new(), Key::new());
        assert!(store.checkpoint(&done, 100, || meta("t:/done")));
        assert!(store.checkpoint(&running, 100, || meta("t:/running")));
        let line = "x".repeat(1000);
        for _ in 0..3 {
            assert!(store.append(&done, data("t:/done", &line), false));
        }
        assert!(store.append(&done, data("t:/done", ""), true));
        assert!(store.flush(Duration::from_secs(10)));
        for _ in 0..6 {
            assert!(store.append(&running, data("t:/running", &line), false));
        }
        assert!(store.flush(Duration::from_secs(10)));
        let path = |k: &Key| dir.path().join("terminals").join(k.file_name());
        assert!(
            !path(&done).exists(),
            "the exited terminal's transcript is deleted"
        );
        assert!(path(&running).exists());
        // Nothing more is written for an evicted terminal.
        assert!(store.append(&done, data("t:/done", "late"), false));
        assert!(store.flush(Duration::from_secs(10)));
        assert!(!path(&done).exists());
    }

    /// While running, transcripts of exited terminals past `persist_max_age` are deleted;
    /// those of running terminals stay, however old.
    #[tokio::test]
    async fn while_running_old_transcripts_of_exited_terminals_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let p = Persist {
            max_age: Some(Duration::from_millis(400)),
            ..settings(dir.path(), 1 << 30)
        };
        let opened = open(&p).unwrap().unwrap();
        let store = &opened.store;
        let (done, running) = (Key::new(), Key::new());
        assert!(store.checkpoint(&done, 100, || meta("t:/done")));
        assert!(store.checkpoint(&running, 100, || meta("t:/running")));
        assert!(store.append(&done, data("t:/done", "bye"), true));
        assert!(store.append(&running, data("t:/running", "hi"), false));
        assert!(store.flush(Duration::from_secs(10)));
        let path = |k: &Key| dir.path().join("terminals").join(k.file_name());
        assert!(path(&done).exists() && path(&running).exists());
        let deadline = Instant::now() + Duration::from_secs(20);
        while path(&done).exists() {
            assert!(
                Instant::now() < deadline,
                "the old transcript was not deleted"
            );
            // Wakes the writer (a flush waits for one round of its loop).
            store.flush(Duration::from_secs(10));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            path(&running).exists(),
            "a running terminal's transcript was deleted"
        );
    }

    #[tokio::test]
    async fn at_start_old_and_surplus_transcripts_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let opened = open(&settings(dir.path(), 1 << 30)).unwrap().unwrap();
        let keys: Vec<Key> = (0..3).map(|_| Key::new()).collect();
        for (i, k) in keys.iter().enumerate() {
            let uri = format!("t:/{i}");
            assert!(opened.store.checkpoint(k, 100, || meta(&uri)));
            assert!(opened.store.append(k, data(&uri, &"y".repeat(2000)), false));
        }
        opened.store.close(Duration::from_secs(10));
        drop(opened);
        let path = |k: &Key| dir.path().join("terminals").join(k.file_name());
        let set_age = |k: &Key, secs: u64| {
            let f = std::fs::File::options().write(true).open(path(k)).unwrap();
            f.set_modified(SystemTime::now() - Duration::from_secs(secs))
                .unwrap();
        };
        set_age(&keys[0], 30 * 24 * 3600);
        set_age(&keys[1], 60);
        set_age(&keys[2], 10);
        let len = std::fs::metadata(path(&keys[2])).unwrap().len();
        let p = Persist {
            max_age: Some(Duration::from_secs(7 * 24 * 3600)),
            max_bytes: len + 10,
            ..settings(dir.path(), 0)
        };
        let opened = open(&p).unwrap().unwrap();
        let uris: Vec<&str> = opened
            .restored
            .iter()
            .map(|r| r.meta.uri.as_str())
            .collect();
        assert_eq!(
            uris,
            ["t:/2"],
            "too old: t:/0; over the budget: t:/1 (older)"
        );
        assert!(!path(&keys[0]).exists() && !path(&keys[1]).exists());
    }

    /// The queue never blocks and never leaves a gap: once a terminal's record is dropped,
    /// its later ones are refused until a checkpoint is queued.
    #[test]
    fn keys_compare_and_hash_by_name() {
        let (a, b) = (Key::parse("abc").unwrap(), Key::parse("abc").unwrap());
        assert_eq!(a, b);
        assert_ne!(a, Key::parse("abd").unwrap());
        let mut set = KeySet::default();
        set.insert(a);
        assert!(set.contains(&b));
        assert!(!set.contains(&Key::parse("abd").unwrap()));
        let many: KeySet = (0..1000).map(|_| Key::new()).collect();
        assert_eq!(many.len(), 1000);
        assert!(many
            .iter()
            .all(|k| many.contains(&Key::parse(k.as_str()).unwrap())));
    }

    #[test]
    fn a_full_queue_drops_until_a_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            lost_wake: tokio::sync::Notify::new(),
        });
        // No writer thread: nothing drains.
        let store = Store {
            shared,
            dir: dir.path().to_path_buf(),
            thread: Mutex::new(None),
            lock: std::fs::File::open(dir.path()).unwrap(),
        };
        let (a, b) = (Key::new(), Key::new());
        let big = "z".repeat(1024 * 1024);
        let mut accepted = 0;
        while store.append(&a, data("t:/a", &big), false) {
            accepted += 1;
            assert!(accepted <= MAX_QUEUE_BYTES / big.len());
        }
        assert!(accepted >= MAX_QUEUE_BYTES / big.len() - 1);
        // Refused from now on, even a small one that would fit.
        assert!(!store.append(&a, data("t:/a", "x"), false));
        // Another terminal's small record still fits; a checkpoint does not, and costs nothing.
        assert!(store.append(&b, data("t:/b", "x"), false));
        let mut built = false;
        assert!(!store.checkpoint(&a, 2 * 1024 * 1024, || {
            built = true;
            meta("t:/a")
        }));
        assert!(!built);
        assert!(store.shared.lock().lost.contains(&a));
        // Once there is room, the checkpoint clears the mark and records flow again.
        {
            let mut q = store.shared.lock();
            q.ops.clear();
            q.bytes = 0;
        }
        assert!(!store.append(&a, data("t:/a", "x"), false));
        assert!(store.checkpoint(&a, 100, || meta("t:/a")));
        assert!(!store.shared.lock().lost.contains(&a));
        assert!(store.append(&a, data("t:/a", "x"), false));
    }
}
