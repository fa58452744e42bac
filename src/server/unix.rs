//! The Unix domain socket listener (`--listen unix:PATH`).
//!
//! - The socket's directory is created with mode 0700 if missing; an existing one must belong
//!   to the daemon's user (a warning is logged if other users can enter it).
//! - The socket file gets mode 0600, and every accepted peer must run as the daemon's user
//!   (or root), checked with `SO_PEERCRED`: peers need no token.
//! - An existing PATH that still accepts connections is in use: refuse to start. A stale socket
//!   (nobody listening) is replaced. Anything else at PATH is never touched.
//! - The socket file is removed when the listener is dropped (shutdown), if it is still ours.

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::{UnixListener, UnixStream};

use crate::config::effective_uid as euid;

/// A bound Unix socket; removes its file on drop.
pub struct UnixSocket {
    listener: UnixListener,
    path: PathBuf,
    /// (device, inode) of the socket file we created.
    identity: (u64, u64),
}

impl UnixSocket {
    /// Prepares the directory, replaces a stale socket, binds and restricts the file to 0600.
    pub fn bind(path: &Path) -> io::Result<UnixSocket> {
        let ctx = |e: io::Error, what: &str| {
            io::Error::new(e.kind(), format!("{}: {what}: {e}", path.display()))
        };
        prepare_dir(path)?;
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_socket() => {
                match std::os::unix::net::UnixStream::connect(path) {
                    Ok(_) => {
                        return Err(io::Error::new(
                            io::ErrorKind::AddrInUse,
                            format!(
                                "{} is in use (another daemon is listening on it)",
                                path.display()
                            ),
                        ))
                    }
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                        std::fs::remove_file(path)
                            .map_err(|e| ctx(e, "cannot remove the stale socket"))?;
                        tracing::info!(path = %path.display(), "removed a stale socket");
                    }
                    Err(e) => return Err(ctx(e, "exists and cannot be probed")),
                }
            }
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{} exists and is not a socket; refusing to replace it",
                        path.display()
                    ),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(ctx(e, "cannot inspect")),
        }
        let listener = UnixListener::bind(path).map_err(|e| ctx(e, "cannot bind"))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| ctx(e, "cannot set mode 0600"))?;
        let meta = std::fs::symlink_metadata(path).map_err(|e| ctx(e, "cannot inspect"))?;
        Ok(UnixSocket {
            listener,
            path: path.to_path_buf(),
            identity: (meta.dev(), meta.ino()),
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The (device, inode) of the socket file this listener created.
    pub fn identity(&self) -> (u64, u64) {
        self.identity
    }

    /// A listener around an inherited, listening Unix socket `fd` bound at `path`, whose
    /// socket file had `identity` (a live upgrade: nothing is bound or removed).
    pub fn adopt(
        fd: std::os::fd::OwnedFd,
        path: PathBuf,
        identity: (u64, u64),
    ) -> io::Result<Self> {
        let std = std::os::unix::net::UnixListener::from(fd);
        std.set_nonblocking(true)?;
        Ok(UnixSocket {
            listener: UnixListener::from_std(std)?,
            path,
            identity,
        })
    }

    /// Accepts the next peer; returns it with its uid (`None` if the kernel would not say).
    pub async fn accept(&self) -> io::Result<(UnixStream, Option<u32>)> {
        let (stream, _) = self.listener.accept().await?;
        let uid = stream.peer_cred().ok().map(|c| c.uid());
        Ok((stream, uid))
    }
}

impl std::os::fd::AsRawFd for UnixSocket {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.listener.as_raw_fd()
    }
}

impl Drop for UnixSocket {
    fn drop(&mut self) {
        if let Ok(meta) = std::fs::symlink_metadata(&self.path) {
            if (meta.dev(), meta.ino()) == self.identity {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// Whether a peer with `uid` may use the socket: the daemon's own user, or root.
pub fn peer_allowed(uid: Option<u32>) -> bool {
    let me = euid();
    matches!(uid, Some(u) if u == me || u == 0)
}

/// Creates the parent directory (0700) if missing; refuses one owned by another user.
fn prepare_dir(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot create directory {}: {e}", dir.display()),
                )
            }),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("cannot inspect directory {}: {e}", dir.display()),
        )),
        Ok(meta) if !meta.is_dir() => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a directory", dir.display()),
        )),
        Ok(meta) => {
            let me = euid();
            if meta.uid() != me {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "the socket's directory {} belongs to uid {}, not to this user: put \
                         the socket in a directory of your own (--socket PATH)",
                        dir.display(),
                        meta.uid()
                    ),
                ));
            }
            if meta.mode() & 0o077 != 0 {
                tracing::warn!(
                    dir = %dir.display(),
                    mode = format!("{:o}", meta.mode() & 0o777),
                    "the socket's directory is accessible to other users; the socket itself is \
                     0600 and peers are checked by uid, but a private (0700) directory is safer"
                );
            }
            Ok(())
        }
    }
}
