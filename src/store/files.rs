//! How the store opens the files in its state directory, so that nothing planted there can
//! redirect a write: every open uses `O_NOFOLLOW` (a symbolic link is refused, never followed)
//! and `O_NONBLOCK` (a FIFO cannot stall the daemon), and is checked to be a regular file;
//! temporary files are created with `O_EXCL` after removing whatever had their name. Anything
//! that is not a regular file is reported as [`NotRegular`] so the caller can set it aside as
//! damage, with a warning.
//!
//! May touch: the one path it is given.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The error kind-and-message of a path that is not a regular file: a symbolic link, a FIFO,
/// a socket, a device or a directory. Test with [`is_not_regular`].
#[derive(Debug)]
pub(super) struct NotRegular(pub &'static str);

impl std::fmt::Display for NotRegular {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "it is {}, not a regular file", self.0)
    }
}

impl std::error::Error for NotRegular {}

/// Whether `e` says the path is not a regular file (see [`NotRegular`]).
pub(super) fn is_not_regular(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<NotRegular>())
}

/// What a file of type `t` is, in words ("a symbolic link", …).
pub(super) fn kind_of(t: std::fs::FileType) -> &'static str {
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "a regular file"
    }
}

fn not_regular(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, NotRegular(what))
}

/// Opens `path` with `options` (whose flags are kept) plus `O_NOFOLLOW | O_NONBLOCK`, and
/// checks that it is a regular file. Errors: [`NotRegular`] for a symbolic link (`ELOOP`) or
/// anything else that is not a regular file; otherwise the `open`/`fstat` error.
pub(super) fn open_regular(path: &Path, options: &mut OpenOptions) -> io::Result<File> {
    let f = match options
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(not_regular("a symbolic link"))
        }
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => return Err(not_regular("a socket")),
        Err(e) if e.raw_os_error() == Some(libc::EISDIR) => return Err(not_regular("a directory")),
        Err(e) => return Err(e),
    };
    let t = f.metadata()?.file_type();
    if !t.is_file() {
        return Err(not_regular(kind_of(t)));
    }
    Ok(f)
}

/// Opens `path` for reading (see [`open_regular`]).
pub(super) fn open_read(path: &Path) -> io::Result<File> {
    open_regular(path, OpenOptions::new().read(true))
}

/// Creates `path` afresh (mode 0600, `O_EXCL | O_NOFOLLOW`), for writing a temporary file to
/// rename into place. Whatever had the name is removed first (a crash's leftover, as expected;
/// anything else — a symbolic link, a FIFO — costs a warning; the file a link pointed to is
/// never touched). A directory of that name is an error.
pub(super) fn create_temp(path: &Path) -> io::Result<File> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => {
            let t = m.file_type();
            if t.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} is a directory: remove it", path.display()),
                ));
            }
            if !t.is_file() {
                tracing::warn!(
                    "{} was {}, not a regular file: removed it (what it pointed to is left \
                     alone)",
                    path.display(),
                    kind_of(t)
                );
            }
            match std::fs::remove_file(path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn links_and_fifos_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = open_regular(&link, OpenOptions::new().append(true)).unwrap_err();
        assert!(is_not_regular(&e), "{e}");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; the result is checked.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = open_read(&fifo).unwrap_err();
        assert!(is_not_regular(&e) && e.to_string().contains("FIFO"), "{e}");
        let mut f = create_temp(&link).unwrap();
        f.write_all(b"new").unwrap();
        let mut s = String::new();
        File::open(&victim).unwrap().read_to_string(&mut s).unwrap();
        assert_eq!(s, "precious");
        assert!(std::fs::symlink_metadata(&link).unwrap().is_file());
        let mut s = String::new();
        open_read(&link).unwrap().read_to_string(&mut s).unwrap();
        assert_eq!(s, "new");
    }
}
