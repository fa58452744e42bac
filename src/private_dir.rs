//! Whether a directory the daemon keeps its own files in is private to the daemon's user:
//! no other user may create, replace or rename entries in it, nor in any directory above it
//! (who could write to an ancestor could swap the whole directory for one of theirs).
//!
//! The rule is OpenSSH's for the files it trusts (`safe_path`), with the sticky exception that
//! lets a private directory live under `/tmp`: the directory itself must belong to this user
//! and be writable by no one else (no `g+w`, no `o+w`); each directory above it must belong to
//! root or to this user and be writable by no one else, unless it has the sticky bit (`/tmp`,
//! mode 1777), where others may add entries but not rename or delete ours. Symbolic links in
//! the path are resolved first and the directories they lead through are the ones checked.
//!
//! Used for the state directory (`store`) and shareable with the socket directory. Pure
//! inspection: reads metadata, changes nothing.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::config::effective_uid;

/// Checks that `dir` (an existing directory) and every directory above it are private to this
/// user, as the module says.
///
/// Errors (kind `PermissionDenied`), one line that speaks of `dir` as "it" (the caller names
/// it) and says what to do: it belongs to another user; it is writable by its group or by
/// others (`chmod 700`); a directory above it belongs to a user other than root and this one,
/// or is writable by others without the sticky bit (`chmod go-w`). Errors of
/// `canonicalize`/`stat` come back with the path; a `dir` that is not a directory is
/// `InvalidInput`.
pub fn check(dir: &Path) -> io::Result<()> {
    let real = std::fs::canonicalize(dir)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot resolve {}: {e}", dir.display())))?;
    let me = effective_uid();
    let meta = stat(&real)?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it is not a directory".to_string(),
        ));
    }
    if meta.uid() != me {
        return Err(denied(format!(
            "it belongs to uid {}, not to this user (uid {me}): use a directory of your own",
            meta.uid()
        )));
    }
    if let Some(who) = writers(meta.mode()) {
        return Err(denied(format!(
            "it is writable by {who} (mode {:04o}): make it private with chmod 700 {}",
            meta.mode() & 0o7777,
            dir.display()
        )));
    }
    for above in real.ancestors().skip(1) {
        let meta = stat(above)?;
        let owner = meta.uid();
        if owner != 0 && owner != me {
            return Err(denied(format!(
                "it is inside {}, which belongs to uid {owner} (neither root nor this user), \
                 who could replace it: choose a directory elsewhere",
                above.display()
            )));
        }
        let sticky = meta.mode() & libc::S_ISVTX != 0;
        if let (Some(who), false) = (writers(meta.mode()), sticky) {
            return Err(denied(format!(
                "it is inside {}, which is writable by {who} without the sticky bit (mode \
                 {:04o}): chmod go-w {}, or choose a directory elsewhere",
                above.display(),
                meta.mode() & 0o7777,
                above.display()
            )));
        }
    }
    Ok(())
}

/// Who besides the owner may write to a file of `mode`: `None`, or "its group", "others",
/// "its group and others".
fn writers(mode: u32) -> Option<&'static str> {
    match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (false, false) => None,
        (true, false) => Some("its group"),
        (false, true) => Some("others"),
        (true, true) => Some("its group and others"),
    }
}

fn stat(path: &Path) -> io::Result<std::fs::Metadata> {
    std::fs::symlink_metadata(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot inspect {}: {e}", PathBuf::from(path).display()),
        )
    })
}

fn denied(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn private_group_writable_and_ancestors() {
        // Under the temporary directory (root's /tmp: sticky, so acceptable above).
        let top = tempfile::tempdir().unwrap();
        let dir = top.path().join("state");
        std::fs::create_dir(&dir).unwrap();
        chmod(&dir, 0o700);
        check(&dir).unwrap();
        chmod(&dir, 0o770);
        let e = check(&dir).unwrap_err().to_string();
        assert!(
            e.contains("writable by its group") && e.contains("chmod 700"),
            "{e}"
        );
        chmod(&dir, 0o755);
        check(&dir).unwrap();
        chmod(top.path(), 0o777);
        let e = check(&dir).unwrap_err().to_string();
        assert!(
            e.contains("without the sticky bit") && e.contains("chmod go-w"),
            "{e}"
        );
        chmod(top.path(), 0o1777);
        check(&dir).unwrap();
        // A symbolic link is judged by where it leads.
        let link = top.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        check(&link).unwrap();
        chmod(&dir, 0o702);
        let e = check(&link).unwrap_err().to_string();
        assert!(e.contains("writable by others"), "{e}");
        chmod(top.path(), 0o700);
    }
}
