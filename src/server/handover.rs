//! The server's side of a live upgrade: its listeners and token as data, and a [`Server`]
//! rebuilt around inherited listening sockets.
//!
//! The listening sockets stay open across `execve`, so connection attempts made during the
//! switch wait in the kernel's backlog and are accepted by the new image: none is refused.
//! A [`UnixSocket`] is never dropped on this path (its `Drop` removes the socket file).
//!
//! May touch: the listening sockets it is given (their descriptor numbers and addresses) and
//! the host it wraps; it accepts nothing before the server runs.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;

use super::connection::Context;
use super::unix::UnixSocket;
use super::{tls, Listener, Server};
use crate::config::{Config, Token};
use crate::host::Host;

/// One listening socket of a [`ServerImage`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ListenerImage {
    /// A TCP listener (`tls`: wss://).
    #[serde(rename_all = "camelCase")]
    Tcp {
        /// Index of its descriptor in the hand-over's list.
        fd: usize,
        addr: SocketAddr,
        tls: bool,
    },
    /// A Unix socket listener, with the identity (device, inode) of its socket file.
    #[serde(rename_all = "camelCase")]
    Unix {
        fd: usize,
        path: PathBuf,
        dev: u64,
        ino: u64,
    },
}

/// The server's state as data (part of the hand-over, docs/upgrade.md).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerImage {
    pub listeners: Vec<ListenerImage>,
    /// The token TCP peers present (a generated one must not change across an upgrade).
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub token_generated: bool,
}

impl Server {
    /// The listeners and token as data; listener descriptors are appended to `fds` (their raw
    /// numbers: the sockets stay owned by this server).
    pub fn image(&self, fds: &mut Vec<RawFd>) -> ServerImage {
        let listeners = self
            .listeners
            .iter()
            .map(|l| match l {
                Listener::Tcp {
                    listener,
                    addr,
                    tls,
                    ..
                } => {
                    fds.push(listener.as_raw_fd());
                    ListenerImage::Tcp {
                        fd: fds.len() - 1,
                        addr: *addr,
                        tls: tls.is_some(),
                    }
                }
                Listener::Unix { socket, .. } => {
                    fds.push(socket.as_raw_fd());
                    let (dev, ino) = socket.identity();
                    ListenerImage::Unix {
                        fd: fds.len() - 1,
                        path: socket.path().to_path_buf(),
                        dev,
                        ino,
                    }
                }
            })
            .collect();
        ServerImage {
            listeners,
            token: self.token.as_ref().map(|t| t.expose().to_string()),
            token_generated: self.generated_token,
        }
    }

    /// A server around inherited listening sockets and a host rebuilt by
    /// [`Host::resume`]. TLS certificates are loaded again from `config`; the token is the
    /// image's. Must run inside the tokio runtime.
    ///
    /// Errors: a descriptor is missing or is not a listening socket; TLS files cannot be
    /// loaded; the token is not valid.
    pub fn adopt(
        config: &Config,
        image: ServerImage,
        fds: &mut [Option<OwnedFd>],
        host: Arc<Host>,
    ) -> io::Result<Server> {
        let tls = config.tls.as_ref().map(tls::acceptor).transpose()?;
        let token = match image.token {
            Some(t) => Some(Token::new(t).map_err(io::Error::other)?),
            None => None,
        };
        let mut take = |i: usize| {
            fds.get_mut(i)
                .and_then(Option::take)
                .ok_or_else(|| io::Error::other(format!("no listener descriptor #{i}")))
        };
        let mut listeners = Vec::new();
        for l in image.listeners {
            match l {
                ListenerImage::Tcp { fd, addr, tls: _ } => {
                    let fd = take(fd)?;
                    check_listening(&fd)?;
                    let std = std::net::TcpListener::from(fd);
                    std.set_nonblocking(true)?;
                    let listener = TcpListener::from_std(std)?;
                    listeners.push(Listener::tcp(
                        listener,
                        addr,
                        tls.clone(),
                        config,
                        token.clone(),
                    ));
                }
                ListenerImage::Unix { fd, path, dev, ino } => {
                    let fd = take(fd)?;
                    check_listening(&fd)?;
                    let socket = UnixSocket::adopt(fd, path, (dev, ino))?;
                    listeners.push(Listener::unix(socket, config));
                }
            }
        }
        Ok(Server {
            listeners,
            ctx: Arc::new(Context::new(host.clone(), config)),
            host,
            token,
            generated_token: image.token_generated,
            upgrader: None,
            token_withheld: false,
        })
    }
}

/// Errors unless `fd` is a listening socket (`SO_ACCEPTCONN`).
pub fn check_listening(fd: &OwnedFd) -> io::Result<()> {
    let mut on: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `on`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&mut on as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if on == 0 {
        return Err(io::Error::other("descriptor is not a listening socket"));
    }
    Ok(())
}
