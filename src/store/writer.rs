//! The writer thread (`ahpty-store`): takes the queued ops in batches, appends each terminal's
//! records with one `write` per batch, rewrites a file from a checkpoint (temporary file,
//! `fdatasync`, `rename`), deletes disposed terminals' files before their removal is
//! acknowledged, syncs written files every [`SYNC_EVERY`] (see [`SYNCFS_FROM`]), raises the `serverSeq`
//! high-water mark, and keeps the total under `persist_max_bytes` by deleting the files of
//! exited terminals, least recently written first, and deletes those of exited terminals not
//! written to for `persist_max_age` (checked every [`AGE_CHECK_EVERY`]).
//!
//! Every file is opened through `files.rs` (no symbolic link followed, temporary files
//! created with `O_EXCL`). Its per-file state is a cache of the directory (open descriptor,
//! length): nothing it knows is missing from the files themselves.
//!
//! May touch: the files under the state directory (transcripts, the `serverSeq` mark) and
//! the queue the host fills; never the host lock.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ahp_types::state::TerminalLifecycleState;

use super::format::{self, Kind, Meta};
use super::{dir, files, Key, KeyMap, KeySet, Op, Shared, BATCH, EARLY_BYTES, SYNC_EVERY};

/// Written files from which a sync is one `syncfs(2)` of the filesystem instead of an
/// `fdatasync(2)` of each file.
///
/// Every second ([`SYNC_EVERY`]) the files written since the last sync must reach the disk.
/// An `fdatasync` of a file that grew commits the filesystem's journal for its new size, and
/// each of those is a round trip to the disk: measured on this project's ext4 VM, 256 files
/// with a line each took 750 ms of waiting and 22 ms of CPU, so the writer spent most of every
/// second blocked (its next batches waiting longer than [`BATCH`](super::BATCH)) and a fifth
/// of the daemon's CPU with 256 chatty terminals was its thread. One `syncfs` writes the same
/// pages and commits the journal once: 10–13 ms and under 1 ms of CPU for the 256 files. Its
/// cost: it also writes back whatever other programs left dirty on that filesystem (earlier
/// than the kernel would, within its 30 s expiry), and takes longer when that is a lot. Below
/// a few files the `fdatasync`s cost about the same as one `syncfs` (1–12 ms for 1–4 files), so
/// they stay, touching nothing but ahpty's files. Either way the bound is the same: what was
/// written a second ago is on the disk.
const SYNCFS_FROM: usize = 4;

/// How often, at most, the same kind of warning is logged.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// How often the writer looks for transcripts of exited terminals older than
/// `persist_max_age` (or every half of that age, if shorter).
pub(super) const AGE_CHECK_EVERY: Duration = Duration::from_secs(60);

fn age_check_every(age: Duration) -> Duration {
    AGE_CHECK_EVERY.min(age / 2).max(Duration::from_millis(10))
}

/// A transcript found at start.
pub(super) struct Existing {
    pub key: Key,
    pub len: u64,
    pub written_at: SystemTime,
}

struct Transcript {
    /// Opened for appending on first use.
    file: Option<File>,
    len: u64,
    /// The terminal exited (or was restored): its file may be deleted to stay in budget.
    exited: bool,
    written_at: SystemTime,
    /// Deleted to stay in budget: nothing more is written for it in this process.
    evicted: bool,
}

struct Batch {
    ops: Vec<Op>,
    flushes: Vec<std::sync::mpsc::Sender<()>>,
    closing: bool,
    seq: u64,
}

pub(super) struct Writer {
    shared: Arc<Shared>,
    state_dir: PathBuf,
    terminals: PathBuf,
    files: KeyMap<Transcript>,
    total: u64,
    max_bytes: u64,
    max_age: Option<Duration>,
    next_age_check: Option<Instant>,
    seq_written: u64,
    unsynced: KeySet,
    dir_unsynced: bool,
    /// The terminals directory, open for the writer's life: [`syncfs`] goes through it (and
    /// reports every writeback error since it was opened).
    dir_handle: Option<File>,
    next_sync: Option<Instant>,
    /// Terminals whose records this thread had to drop (a failed write, no file yet): their
    /// queued records are skipped until a checkpoint of theirs arrives.
    failed: KeySet,
    newly_lost: KeySet,
    lost_noticed: Option<Instant>,
    warned_io: Option<Instant>,
    warned_budget: Option<Instant>,
}

impl Writer {
    pub(super) fn new(
        shared: Arc<Shared>,
        state_dir: PathBuf,
        existing: Vec<Existing>,
        max_bytes: u64,
        max_age: Option<Duration>,
        seq_written: u64,
    ) -> Writer {
        let terminals = state_dir.join(dir::TERMINALS);
        let dir_handle = File::open(&terminals).ok();
        let mut files = KeyMap::default();
        let mut total = 0;
        for e in existing {
            total += e.len;
            files.insert(
                e.key,
                Transcript {
                    file: None,
                    len: e.len,
                    exited: true,
                    written_at: e.written_at,
                    evicted: false,
                },
            );
        }
        Writer {
            shared,
            state_dir,
            terminals,
            files,
            total,
            max_bytes,
            max_age,
            next_age_check: max_age.map(|a| Instant::now() + age_check_every(a)),
            seq_written,
            unsynced: KeySet::default(),
            dir_unsynced: false,
            dir_handle,
            next_sync: None,
            failed: KeySet::default(),
            newly_lost: KeySet::default(),
            lost_noticed: None,
            warned_io: None,
            warned_budget: None,
        }
    }

    pub(super) fn run(mut self) {
        loop {
            let batch = self.next_batch();
            if batch.seq > self.seq_written {
                if let Err(e) = dir::write_seq(&self.state_dir, batch.seq) {
                    self.warn_io(&format!(
                        "cannot raise the serverSeq high-water mark in {}: {e}",
                        self.state_dir.display()
                    ));
                }
                self.seq_written = batch.seq;
            }
            self.apply(batch.ops);
            // Bounds first, so that a flush answered below has them applied.
            self.enforce_budget();
            self.enforce_age();
            let due = self.next_sync.is_some_and(|t| Instant::now() >= t);
            if due || batch.closing || !batch.flushes.is_empty() {
                self.sync();
            }
            for f in batch.flushes {
                let _ = f.send(());
            }
            self.report_lost();
            if batch.closing {
                return;
            }
        }
    }

    /// Waits for the next batch: until [`BATCH`] after its first op, [`EARLY_BYTES`], an
    /// urgent op, a due sync or a due notice of lost terminals.
    fn next_batch(&mut self) -> Batch {
        let mut q = self.shared.lock();
        loop {
            let now = Instant::now();
            let batch_due = q.first_at.map(|t| t + BATCH);
            if q.closing
                || q.urgent
                || q.bytes >= EARLY_BYTES
                || batch_due.is_some_and(|t| now >= t)
            {
                break;
            }
            let lost_due = (!q.lost.is_empty() || !self.newly_lost.is_empty())
                .then(|| self.lost_noticed.map_or(now, |t| t + SYNC_EVERY));
            let deadline = [batch_due, self.next_sync, lost_due, self.next_age_check]
                .into_iter()
                .flatten()
                .min();
            q = match deadline {
                Some(d) if d <= now => break,
                Some(d) => match self.shared.wake.wait_timeout(q, d - now) {
                    Ok((q, _)) => q,
                    Err(p) => p.into_inner().0,
                },
                None => match self.shared.wake.wait(q) {
                    Ok(q) => q,
                    Err(p) => p.into_inner(),
                },
            };
        }
        q.bytes = 0;
        q.first_at = None;
        q.urgent = false;
        Batch {
            ops: std::mem::take(&mut q.ops),
            flushes: std::mem::take(&mut q.flushes),
            closing: q.closing,
            seq: q.seq_wanted,
        }
    }

    fn apply(&mut self, ops: Vec<Op>) {
        // One buffer per file, written once at the end (a checkpoint or removal of the same
        // terminal in between discards what was buffered before it).
        let mut order: Vec<Key> = Vec::new();
        let mut buffers: KeyMap<Vec<u8>> = KeyMap::default();
        let mut removals = Vec::new();
        for op in ops {
            match op {
                Op::Append {
                    key,
                    payload,
                    exited,
                } => {
                    if !self.writable(&key) {
                        continue;
                    }
                    if exited {
                        if let Some(t) = self.files.get_mut(&key) {
                            t.exited = true;
                        }
                    }
                    let buf = buffer(&mut order, &mut buffers, &key);
                    format::push_record(buf, Kind::Action, payload.as_slice());
                }
                Op::Owner { key, owner } => {
                    if !self.writable(&key) {
                        continue;
                    }
                    format::owner_record(buffer(&mut order, &mut buffers, &key), &owner);
                }
                Op::Checkpoint { key, meta } => {
                    buffers.remove(&key);
                    self.failed.remove(&key);
                    if self.files.get(&key).is_some_and(|t| t.evicted) {
                        continue;
                    }
                    self.write_checkpoint(&key, &meta);
                }
                Op::SetAside { key, reason } => {
                    buffers.remove(&key);
                    self.failed.remove(&key);
                    self.newly_lost.remove(&key);
                    self.set_aside(&key, &reason);
                }
                Op::Remove { key, done } => {
                    buffers.remove(&key);
                    self.failed.remove(&key);
                    self.newly_lost.remove(&key);
                    self.delete(&key, true);
                    removals.push(done);
                }
            }
        }
        for key in order {
            if let Some(buf) = buffers.remove(&key) {
                self.append(&key, &buf);
            }
        }
        if !removals.is_empty() {
            self.sync_dir();
            for done in removals {
                let _ = done.send(());
            }
        }
    }

    /// Whether records of `key` can be appended now; if it has no file yet (its first
    /// checkpoint was dropped), it is marked for one.
    fn writable(&mut self, key: &Key) -> bool {
        if self.failed.contains(key) {
            return false;
        }
        match self.files.get(key) {
            Some(t) => !t.evicted,
            None => {
                self.lose(key);
                false
            }
        }
    }

    fn path(&self, key: &Key) -> PathBuf {
        self.terminals.join(key.file_name())
    }

    fn append(&mut self, key: &Key, buf: &[u8]) {
        let Some(t) = self.files.get_mut(key) else {
            return;
        };
        if t.file.is_none() {
            let path = self.terminals.join(key.file_name());
            match files::open_regular(&path, OpenOptions::new().append(true)) {
                Ok(f) => t.file = Some(f),
                Err(e) => {
                    let msg = format!("cannot open transcript {}: {e}", path.display());
                    self.warn_io(&msg);
                    self.lose(key);
                    return;
                }
            }
        }
        let Some(file) = t.file.as_mut() else {
            return;
        };
        match file.write_all(buf) {
            Ok(()) => {
                t.len += buf.len() as u64;
                t.written_at = SystemTime::now();
                self.total += buf.len() as u64;
                self.unsynced.insert(key.clone());
                self.next_sync
                    .get_or_insert_with(|| Instant::now() + SYNC_EVERY);
            }
            Err(e) => {
                // Cut a partial write off, so that later records follow a complete one.
                let _ = file.set_len(t.len);
                t.file = None;
                let msg = format!("cannot write transcript {}: {e}", self.path(key).display());
                self.warn_io(&msg);
                self.lose(key);
            }
        }
    }

    /// Rewrites `key`'s file from `meta`: a temporary file, synced, renamed over the old one.
    fn write_checkpoint(&mut self, key: &Key, meta: &Meta) {
        let checkpoint = format::Checkpoint::new(meta);
        let path = self.path(key);
        let tmp = self.terminals.join(format!("{}.tmp", key.file_name()));
        let written = (|| -> io::Result<()> {
            let mut f = files::create_temp(&tmp)?;
            checkpoint.write_to(&mut f)?;
            f.sync_data()?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            let msg = format!("cannot write transcript {}: {e}", path.display());
            self.warn_io(&msg);
            self.lose(key);
            return;
        }
        let exited = matches!(meta.state.lifecycle, TerminalLifecycleState::Exited(_));
        let len = checkpoint.len() as u64;
        let old = self.files.insert(
            key.clone(),
            Transcript {
                file: None,
                len,
                exited,
                written_at: SystemTime::now(),
                evicted: false,
            },
        );
        self.total = self.total - old.map_or(0, |t| t.len) + len;
        self.unsynced.remove(key);
        self.dir_unsynced = true;
        self.next_sync
            .get_or_insert_with(|| Instant::now() + SYNC_EVERY);
    }

    /// Moves `key`'s file to `corrupt/` and forgets it (a restored terminal the host refused
    /// for `reason`).
    fn set_aside(&mut self, key: &Key, reason: &str) {
        let path = self.path(key);
        self.total -= self.files.remove(key).map_or(0, |t| t.len);
        self.unsynced.remove(key);
        if let Some(aside) = dir::set_aside(&self.state_dir, &path) {
            self.dir_unsynced = true;
            tracing::warn!(
                "transcript {}: {reason}, so its terminal is not restored; set aside as {}",
                path.display(),
                aside.display()
            );
        }
    }

    /// Deletes `key`'s file; `forget` drops it from the table (a removal), else it stays
    /// marked evicted.
    fn delete(&mut self, key: &Key, forget: bool) {
        let path = self.path(key);
        let len = if forget {
            self.files.remove(key).map_or(0, |t| t.len)
        } else {
            match self.files.get_mut(key) {
                Some(t) => {
                    t.evicted = true;
                    t.file = None;
                    std::mem::take(&mut t.len)
                }
                None => 0,
            }
        };
        self.total -= len;
        self.unsynced.remove(key);
        match std::fs::remove_file(&path) {
            Ok(()) => self.dir_unsynced = true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                let msg = format!("cannot delete transcript {}: {e}", path.display());
                self.warn_io(&msg);
            }
        }
    }

    /// Makes everything written so far durable: the files appended to since the last sync,
    /// and the directory if a checkpoint was renamed or a file deleted. Below
    /// [`SYNCFS_FROM`] files, an `fdatasync` of each (and of the directory); from there on,
    /// one `syncfs` of the filesystem instead (see there), falling back to the former if it
    /// fails.
    fn sync(&mut self) {
        if self.unsynced.len() >= SYNCFS_FROM {
            if let Some(d) = &self.dir_handle {
                match syncfs(d) {
                    Ok(()) => {
                        self.unsynced.clear();
                        self.dir_unsynced = false;
                        self.next_sync = None;
                        return;
                    }
                    Err(e) => {
                        let msg = format!(
                            "cannot sync the filesystem of {}: {e}",
                            self.terminals.display()
                        );
                        self.warn_io(&msg);
                    }
                }
            }
        }
        for key in std::mem::take(&mut self.unsynced) {
            if let Some(f) = self.files.get(&key).and_then(|t| t.file.as_ref()) {
                if let Err(e) = f.sync_data() {
                    let msg = format!("cannot sync transcript {}: {e}", self.path(&key).display());
                    self.warn_io(&msg);
                }
            }
        }
        if self.dir_unsynced {
            self.sync_dir();
        }
        self.next_sync = None;
    }

    fn sync_dir(&mut self) {
        self.dir_unsynced = false;
        if let Err(e) = File::open(&self.terminals).and_then(|d| d.sync_all()) {
            let msg = format!("cannot sync {}: {e}", self.terminals.display());
            self.warn_io(&msg);
        }
    }

    /// Deletes the files of exited terminals, least recently written first, while the total is
    /// over `persist_max_bytes`.
    fn enforce_budget(&mut self) {
        if self.total <= self.max_bytes {
            return;
        }
        let mut victims: Vec<(SystemTime, Key)> = self
            .files
            .iter()
            .filter(|(_, t)| t.exited && !t.evicted)
            .map(|(k, t)| (t.written_at, k.clone()))
            .collect();
        victims.sort();
        let mut deleted = 0;
        for (_, key) in victims {
            if self.total <= self.max_bytes {
                break;
            }
            self.delete(&key, false);
            deleted += 1;
        }
        if deleted > 0 {
            tracing::warn!(
                "transcripts passed persist_max_bytes ({} bytes): deleted those of {deleted} \
                 exited terminals, least recently written first; they stay listed until \
                 disposed but will not come back after a restart",
                self.max_bytes
            );
        }
        if self.total > self.max_bytes
            && self
                .warned_budget
                .is_none_or(|t| t.elapsed() >= WARN_EVERY * 60)
        {
            self.warned_budget = Some(Instant::now());
            tracing::warn!(
                "the transcripts of running terminals alone take {} bytes, more than \
                 persist_max_bytes ({} bytes): they are kept",
                self.total,
                self.max_bytes
            );
        }
    }

    /// Every [`AGE_CHECK_EVERY`] (or half the age, if shorter): deletes the files of exited (and restored) terminals not
    /// written to for `persist_max_age`, as a start would. They stay listed until disposed.
    fn enforce_age(&mut self) {
        let (Some(age), Some(due)) = (self.max_age, self.next_age_check) else {
            return;
        };
        if Instant::now() < due {
            return;
        }
        self.next_age_check = Some(Instant::now() + age_check_every(age));
        let now = SystemTime::now();
        let old: Vec<Key> = self
            .files
            .iter()
            .filter(|(_, t)| {
                t.exited && !t.evicted && now.duration_since(t.written_at).is_ok_and(|d| d > age)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in &old {
            self.delete(key, false);
        }
        if !old.is_empty() {
            tracing::info!(
                "deleted the transcripts of {} exited terminals not written to for \
                 persist_max_age ({} s); they stay listed until disposed but will not come \
                 back after a restart",
                old.len(),
                age.as_secs()
            );
        }
    }

    fn lose(&mut self, key: &Key) {
        self.failed.insert(key.clone());
        self.newly_lost.insert(key.clone());
    }

    /// Hands newly lost terminals to the queue and wakes the host's repair task (at most once
    /// per [`SYNC_EVERY`]).
    fn report_lost(&mut self) {
        let mut q = self.shared.lock();
        q.lost.extend(self.newly_lost.drain());
        if q.lost.is_empty() || self.lost_noticed.is_some_and(|t| t.elapsed() < SYNC_EVERY) {
            return;
        }
        self.lost_noticed = Some(Instant::now());
        drop(q);
        self.shared.lost_wake.notify_one();
    }

    fn warn_io(&mut self, msg: &str) {
        if self.warned_io.is_none_or(|t| t.elapsed() >= WARN_EVERY) {
            self.warned_io = Some(Instant::now());
            tracing::warn!("{msg} (the terminal's transcript is rewritten once the disk lets it)");
        }
    }
}

/// `syncfs(2)` of the filesystem holding `f`: writes back every dirty file of it and commits
/// its journal once; its error is a writeback error on that filesystem since `f` was opened.
fn syncfs(f: &File) -> io::Result<()> {
    // SAFETY: syncfs on a descriptor we own; it reads no memory; the result is checked.
    if unsafe { libc::syncfs(f.as_raw_fd()) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn buffer<'a>(
    order: &mut Vec<Key>,
    buffers: &'a mut KeyMap<Vec<u8>>,
    key: &Key,
) -> &'a mut Vec<u8> {
    if !buffers.contains_key(key) {
        order.push(key.clone());
    }
    buffers.entry(key.clone()).or_default()
}
