//! The state directory at start: create it (mode 0700), lock it for this process, raise the
//! `serverSeq` high-water mark, apply the age and byte bounds, read every transcript back,
//! set damaged ones aside in `corrupt/` (keeping their valid prefix), and start the writer.
//!
//! ```text
//! STATE_DIR/daemon.lock          flock'ed by the daemon using the directory; holds its pid
//! STATE_DIR/server-seq           the serverSeq high-water mark (decimal text)
//! STATE_DIR/terminals/KEY.log    one transcript per terminal (format.rs)
//! STATE_DIR/corrupt/KEY.log.MS   damaged transcripts, as found (MS: Unix ms when set aside)
//! ```
//!
//! May touch: the state directory and the files in it; nothing else.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use ahp_types::state::{TerminalContentPart, TerminalState};

use super::files;
use super::format::{self, Meta};
use super::writer::{Existing, Writer};
use super::{clock_seq_base, Key, Queue, Shared, Store, SEQ_MARGIN};
use crate::config::Persist;

/// Subdirectory of the transcripts.
pub(super) const TERMINALS: &str = "terminals";
/// Subdirectory of damaged transcripts.
pub(super) const CORRUPT: &str = "corrupt";
/// The lock file.
pub(super) const LOCK: &str = "daemon.lock";
/// The high-water mark file.
pub(super) const SEQ: &str = "server-seq";

/// The store, opened: the handle, the terminals to restore and where `serverSeq` starts.
pub struct Opened {
    /// The store (its writer thread is running).
    pub store: Arc<Store>,
    /// Every transcript read back, oldest terminal first.
    pub restored: Vec<Restored>,
    /// The first `serverSeq` this process may use (above every value an earlier process with
    /// this directory handed out, and at least [`clock_seq_base`]).
    pub seq_base: u64,
    /// Bytes of the transcripts read back.
    pub bytes: u64,
    /// How long opening took (reading the transcripts, mostly).
    pub took: std::time::Duration,
}

/// One terminal read back from its transcript.
pub struct Restored {
    /// Its transcript.
    pub key: Key,
    /// Its identity, owner and state as the transcript left them.
    pub meta: Meta,
    /// The transcript's length in bytes.
    pub file_len: u64,
}

/// Opens the store of `p`. Errors (one line each): another live process holds the directory;
/// a directory named by `state_dir` cannot be created or used. The default directory failing
/// only costs a warning (`Ok(None)`: no persistence). Damaged transcripts are never an error.
pub fn open(p: &Persist) -> io::Result<Option<Opened>> {
    let dir = &p.dir;
    if let Err(e) = prepare(dir) {
        if p.explicit {
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "cannot use the state directory {} (state_dir): {e}",
                    dir.display()
                ),
            ));
        }
        tracing::warn!(
            "cannot use the state directory {}: {e}; transcripts are not kept (give \
             --state-dir DIR, or --no-persist to silence this)",
            dir.display()
        );
        return Ok(None);
    }
    let lock = lock(dir)?;
    let started = Instant::now();
    let seq_base = read_seq(dir).max(clock_seq_base());
    let mark = seq_base.saturating_add(SEQ_MARGIN);
    if let Err(e) = write_seq(dir, mark) {
        tracing::warn!(
            "cannot write the serverSeq high-water mark in {}: {e}",
            dir.display()
        );
    }
    let found = prune(p);
    let restored = read_all(dir, found);
    let existing = restored
        .iter()
        .map(|(r, written_at)| Existing {
            key: r.key.clone(),
            len: r.file_len,
            written_at: *written_at,
        })
        .collect();
    let restored: Vec<Restored> = restored.into_iter().map(|(r, _)| r).collect();
    let bytes: u64 = restored.iter().map(|r| r.file_len).sum();
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue {
            seq_wanted: mark,
            ..Queue::default()
        }),
        wake: Condvar::new(),
        lost_wake: tokio::sync::Notify::new(),
    });
    let writer = Writer::new(
        shared.clone(),
        dir.clone(),
        existing,
        p.max_bytes,
        p.max_age,
        mark,
    );
    let thread = std::thread::Builder::new()
        .name("ahpty-store".into())
        .spawn(move || writer.run())?;
    Ok(Some(Opened {
        store: Arc::new(Store {
            shared,
            dir: dir.clone(),
            thread: Mutex::new(Some(thread)),
            lock,
        }),
        restored,
        seq_base,
        bytes,
        took: started.elapsed(),
    }))
}

/// Creates the directory and its `terminals/` (mode 0700) and checks that both, and
/// `corrupt/` if it exists, are real directories private to the daemon's user, and that no
/// other user can write to a directory above them ([`crate::private_dir`]).
fn prepare(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir.join(TERMINALS))?;
    crate::private_dir::check(dir)?;
    for sub in [TERMINALS, CORRUPT] {
        let path = dir.join(sub);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => crate::private_dir::check(&path)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?,
            Ok(m) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} is {}, not a directory: remove it",
                        path.display(),
                        files::kind_of(m.file_type())
                    ),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Takes `daemon.lock` (an exclusive `flock`, released when the process ends, however it
/// ends) and writes this process's pid into it.
/// Anything at `daemon.lock` that is not a regular file (a symbolic link planted there) is
/// set aside in `corrupt/`, with a warning, and never followed.
fn lock(dir: &Path) -> io::Result<File> {
    let path = dir.join(LOCK);
    let open = || {
        files::open_regular(
            &path,
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600),
        )
    };
    let opened = match open() {
        Err(e) if files::is_not_regular(&e) && set_aside_stray(dir, &path, &e) => open(),
        other => other,
    };
    let mut f = opened
        .map_err(|e| io::Error::new(e.kind(), format!("cannot open {}: {e}", path.display())))?;
    // SAFETY: flock on a descriptor we own; the result is checked.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(io::Error::new(
                e.kind(),
                format!("cannot lock {}: {e}", path.display()),
            ));
        }
        let mut text = String::new();
        let _ = f.read_to_string(&mut text);
        let who = match text.trim() {
            pid if !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) => {
                format!("another ahpty (pid {pid})")
            }
            _ => "another ahpty".into(),
        };
        return Err(io::Error::other(format!(
            "{who} is using the state directory {}: stop it, or give this daemon its own \
             with --state-dir DIR (or --no-persist)",
            dir.display()
        )));
    }
    f.set_len(0)?;
    f.rewind()?;
    f.write_all(format!("{}\n", std::process::id()).as_bytes())?;
    Ok(f)
}

/// The high-water mark on disk (0 if there is none or it cannot be read).
fn read_seq(dir: &Path) -> u64 {
    let path = dir.join(SEQ);
    let read = files::open_read(&path).and_then(|mut f| {
        let mut text = String::new();
        // The mark is a number: 64 bytes hold any u64 with room to spare.
        (&mut f).take(64).read_to_string(&mut text).map(|_| text)
    });
    match read {
        Ok(text) => match text.trim().parse::<u64>() {
            Ok(n) => n,
            Err(_) => {
                tracing::warn!(
                    "{} does not hold a number; serverSeq starts from the clock",
                    path.display()
                );
                0
            }
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
        Err(e) if files::is_not_regular(&e) => {
            set_aside_stray(dir, &path, &e);
            0
        }
        Err(e) => {
            tracing::warn!(
                "cannot read {}: {e}; serverSeq starts from the clock",
                path.display()
            );
            0
        }
    }
}

/// Replaces the high-water mark with `mark`, durably (temporary file, sync, rename, sync of
/// the directory).
pub(super) fn write_seq(dir: &Path, mark: u64) -> io::Result<()> {
    let tmp = dir.join(format!("{SEQ}.tmp"));
    let mut f = files::create_temp(&tmp)?;
    f.write_all(format!("{mark}\n").as_bytes())?;
    f.sync_data()?;
    std::fs::rename(&tmp, dir.join(SEQ))?;
    File::open(dir)?.sync_all()
}

/// A transcript file found at start.
struct Found {
    key: Key,
    path: PathBuf,
    len: u64,
    written_at: SystemTime,
}

/// Lists the transcripts, deleting leftovers of interrupted checkpoints, those not written to
/// for `persist_max_age`, then the least recently written while the total is over
/// `persist_max_bytes`; prunes `corrupt/` by age. Returns the rest.
fn prune(p: &Persist) -> Vec<Found> {
    let dir = p.dir.join(TERMINALS);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(
                "cannot list {}: {e}; no terminal is restored",
                dir.display()
            );
            return Vec::new();
        }
    };
    let now = SystemTime::now();
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        // `DirEntry::metadata` does not follow a symbolic link.
        let Ok(meta) = entry.metadata() else { continue };
        if name.ends_with(".tmp") {
            if !meta.is_file() {
                tracing::warn!(
                    "{} was {}, not a regular file: removed it (what it pointed to is left \
                     alone)",
                    path.display(),
                    files::kind_of(meta.file_type())
                );
            }
            let _ = std::fs::remove_file(&path);
            continue;
        }
        let Some(key) = Key::from_file_name(&name) else {
            continue;
        };
        if !meta.is_file() {
            let why = files::NotRegular(files::kind_of(meta.file_type()));
            set_aside_stray(
                &p.dir,
                &path,
                &io::Error::new(io::ErrorKind::InvalidData, why),
            );
            continue;
        }
        found.push(Found {
            key,
            path,
            len: meta.len(),
            written_at: meta.modified().unwrap_or(now),
        });
    }
    let old = |at: SystemTime| {
        p.max_age
            .is_some_and(|age| now.duration_since(at).is_ok_and(|d| d > age))
    };
    let mut aged = 0;
    found.retain(|f| {
        let keep = !old(f.written_at) || std::fs::remove_file(&f.path).is_err();
        aged += usize::from(!keep);
        keep
    });
    found.sort_by_key(|f| std::cmp::Reverse(f.written_at));
    let mut total = 0u64;
    let mut over = 0;
    found.retain(|f| {
        if total + f.len <= p.max_bytes || std::fs::remove_file(&f.path).is_err() {
            total += f.len;
            true
        } else {
            over += 1;
            false
        }
    });
    if aged > 0 || over > 0 {
        tracing::info!(
            "deleted {aged} transcripts not written to for persist_max_age and {over} over \
             persist_max_bytes ({} bytes)",
            p.max_bytes
        );
    }
    if let (Some(_), Ok(entries)) = (p.max_age, std::fs::read_dir(p.dir.join(CORRUPT))) {
        for entry in entries.flatten() {
            let at = entry.metadata().and_then(|m| m.modified()).unwrap_or(now);
            if old(at) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    found
}

/// Reads every transcript; damaged ones are set aside (and their valid prefix, if any, written
/// back in their place). Of two transcripts of one URI the newer terminal's is kept.
fn read_all(dir: &Path, found: Vec<Found>) -> Vec<(Restored, SystemTime)> {
    let mut restored: Vec<(Restored, SystemTime)> = Vec::new();
    for f in found {
        let read = files::open_read(&f.path).and_then(|mut file| {
            let mut b = Vec::with_capacity(usize::try_from(f.len).unwrap_or(0));
            file.read_to_end(&mut b).map(|_| b)
        });
        let bytes = match read {
            Ok(b) => b,
            Err(e) if files::is_not_regular(&e) => {
                set_aside_stray(dir, &f.path, &e);
                continue;
            }
            Err(e) => {
                tracing::warn!(
                    "cannot read transcript {}: {e}; left as it is",
                    f.path.display()
                );
                continue;
            }
        };
        let (transcript, damage) = format::decode(&bytes);
        let Some(damage) = damage else {
            if let Some(t) = transcript {
                restored.push((
                    Restored {
                        key: f.key,
                        meta: t.meta,
                        file_len: bytes.len() as u64,
                    },
                    f.written_at,
                ));
            }
            continue;
        };
        let Some(aside) = set_aside(dir, &f.path) else {
            continue;
        };
        match transcript {
            Some(t) => {
                let kept = &bytes[..t.valid_len];
                if let Err(e) = replace(&f.path, kept) {
                    tracing::warn!(
                        "transcript {}: {damage}; cannot write back its valid prefix ({e}), so \
                         its terminal does not come back; the original is now {}",
                        f.path.display(),
                        aside.display()
                    );
                    continue;
                }
                tracing::warn!(
                    "transcript {}: {damage}; kept its first {} of {} bytes ({} bytes of \
                     output), set aside the other {} bytes; the original is now {}",
                    f.path.display(),
                    t.valid_len,
                    bytes.len(),
                    text_bytes(&t.meta.state),
                    bytes.len() - t.valid_len,
                    aside.display()
                );
                restored.push((
                    Restored {
                        key: f.key,
                        meta: t.meta,
                        file_len: t.valid_len as u64,
                    },
                    SystemTime::now(),
                ));
            }
            None => tracing::warn!(
                "transcript {}: {damage}; nothing in it could be read, so its terminal does not \
                 come back; set aside all {} bytes as {}",
                f.path.display(),
                bytes.len(),
                aside.display()
            ),
        }
    }
    restored.sort_by_key(|(r, _)| r.meta.created_at_ms);
    let mut kept: Vec<(Restored, SystemTime)> = Vec::with_capacity(restored.len());
    for (r, at) in restored.into_iter().rev() {
        if kept.iter().any(|(k, _)| k.meta.uri == r.meta.uri) {
            let path = dir.join(TERMINALS).join(r.key.file_name());
            if let Some(aside) = set_aside(dir, &path) {
                tracing::warn!(
                    "transcript {}: a newer terminal with the same URI {} has one; set aside as {}",
                    path.display(),
                    r.meta.uri,
                    aside.display()
                );
            }
            continue;
        }
        kept.push((r, at));
    }
    kept.reverse();
    kept
}

/// Moves `path` into `corrupt/` (as `NAME.<unix-ms>`); `None` (with a warning) if it cannot.
pub(super) fn set_aside(dir: &Path, path: &Path) -> Option<PathBuf> {
    let corrupt = dir.join(CORRUPT);
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let name = path.file_name()?.to_string_lossy().into_owned();
    let aside = corrupt.join(format!("{name}.{ms}"));
    let moved = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&corrupt)
        .and_then(|()| match std::fs::symlink_metadata(&corrupt) {
            // Never move anything through a symbolic link planted as `corrupt`.
            Ok(m) if m.is_dir() => std::fs::rename(path, &aside),
            Ok(m) => Err(io::Error::other(format!(
                "it is {}, not a directory",
                files::kind_of(m.file_type())
            ))),
            Err(e) => Err(e),
        });
    match moved {
        Ok(()) => Some(aside),
        Err(e) => {
            tracing::warn!(
                "{} is damaged but cannot be moved to {}: {e}; left as it is (a transcript \
                 left there does not come back)",
                path.display(),
                corrupt.display()
            );
            None
        }
    }
}

/// Sets aside `path`, which is not a regular file (`why`: [`files::NotRegular`]), with a
/// warning that says so; `true` if it was moved.
pub(super) fn set_aside_stray(dir: &Path, path: &Path, why: &io::Error) -> bool {
    let Some(aside) = set_aside(dir, path) else {
        return false;
    };
    tracing::warn!(
        "{}: {why}, so it was not used (what it points to is left alone); set aside as {}",
        path.display(),
        aside.display()
    );
    true
}

/// Writes `bytes` as `path` (temporary file, sync, rename).
fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("log.tmp");
    let mut f = files::create_temp(&tmp)?;
    f.write_all(bytes)?;
    f.sync_data()?;
    std::fs::rename(&tmp, path)
}

/// Bytes of text in a state's content.
fn text_bytes(state: &TerminalState) -> usize {
    state
        .content
        .iter()
        .map(|p| match p {
            TerminalContentPart::Unclassified(u) => u.value.len(),
            TerminalContentPart::Command(c) => c.output.len() + c.command_line.len(),
            TerminalContentPart::Unknown(_) => 0,
        })
        .sum()
}
