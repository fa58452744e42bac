//! The network face: TCP listeners (plain or TLS, token-authenticated by default) and Unix
//! socket listeners, the WebSocket upgrade (with the [`upgrade`] checks), and one task per
//! connection ([`connection`]). Owns no AHP state: every connection talks to the shared
//! [`Host`]. On shutdown it disposes every terminal, closes every connection with a WebSocket
//! close frame (1001) and removes its Unix socket files.
//!
//! Security decisions live in [`auth`] (token, start-up checks), [`upgrade`] (Origin, Host),
//! [`unix`] (socket file, peer uid) and [`tls`]; docs/security.md explains them.
//!
//! May touch: listening sockets, socket files, accepted sockets; the host only through its API
//! (shutdown, the reaper and watchdog it spawns).

pub(crate) mod auth;
mod connection;
pub mod environ;
pub mod fdlimit;
pub mod handover;
mod handshake;
pub(crate) mod pending;
mod reader;
pub(crate) mod request_line;
pub(crate) mod tls;
pub(crate) mod unix;
pub(crate) mod upgrade;
mod writer;

use std::future::Future;

use futures_util::FutureExt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::config::{Auth, Config, Listen, Token};
use crate::host::Host;
use connection::Context;
use pending::{Full, PeerKey, Pending};
use unix::UnixSocket;
use upgrade::UpgradePolicy;

/// How long connections get to flush their close frame at shutdown.
const SHUTDOWN_FLUSH: Duration = Duration::from_secs(2);

pub use pending::{MAX_PENDING_HANDSHAKES, MAX_PENDING_PER_ADDRESS};

/// How often, at most, a warning about refused handshakes or failing accepts is logged.
const WARN_EVERY: Duration = Duration::from_secs(1);

/// Counts events and logs a warning about them at most every [`WARN_EVERY`].
struct Throttled {
    what: &'static str,
    count: u64,
    last: Option<std::time::Instant>,
}

impl Throttled {
    fn new(what: &'static str) -> Self {
        Throttled {
            what,
            count: 0,
            last: None,
        }
    }

    fn note(&mut self, detail: &dyn std::fmt::Display) {
        self.count += 1;
        if self.last.is_none_or(|t| t.elapsed() >= WARN_EVERY) {
            tracing::warn!(count = self.count, "{}: {detail}", self.what);
            self.count = 0;
            self.last = Some(std::time::Instant::now());
        }
    }
}

enum Listener {
    Tcp {
        listener: TcpListener,
        addr: SocketAddr,
        tls: Option<TlsAcceptor>,
        policy: Arc<UpgradePolicy>,
    },
    Unix {
        socket: UnixSocket,
        policy: Arc<UpgradePolicy>,
    },
}

impl Listener {
    /// A TCP listener at `addr`: the Host check on when the address is loopback, and `token`
    /// required when there is one.
    fn tcp(
        listener: TcpListener,
        addr: SocketAddr,
        tls: Option<TlsAcceptor>,
        config: &Config,
        token: Option<Token>,
    ) -> Listener {
        let policy = UpgradePolicy::new(&config.allow_origins, addr.ip().is_loopback(), token);
        Listener::Tcp {
            listener,
            addr,
            tls,
            policy: Arc::new(policy),
        }
    }

    /// The Unix socket. Its peers are the daemon's own user: no token. The Host check stays
    /// on because a `ssh -L PORT:SOCKET` forward makes the socket a local TCP port.
    fn unix(socket: UnixSocket, config: &Config) -> Listener {
        let policy = UpgradePolicy::new(&config.allow_origins, true, None);
        Listener::Unix {
            socket,
            policy: Arc::new(policy),
        }
    }
}

enum Accepted {
    Tcp(TcpStream, SocketAddr),
    Unix(UnixStream, Option<u32>),
}

impl Accepted {
    /// Closes the socket, first answering HTTP 503 without waiting if `plain` (not TLS), see
    /// [`pending::refuse_at_once`].
    fn refuse_now(self, plain: bool) {
        if !plain {
            return;
        }
        match &self {
            Accepted::Tcp(s, _) => pending::refuse_at_once(s),
            Accepted::Unix(s, _) => pending::refuse_at_once(s),
        }
    }
}

/// `EMFILE` or `ENFILE`: no descriptor for a new connection.
fn is_out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

impl Listener {
    async fn accept(&self) -> io::Result<Accepted> {
        match self {
            Listener::Tcp { listener, .. } => {
                let (s, peer) = listener.accept().await?;
                Ok(Accepted::Tcp(s, peer))
            }
            Listener::Unix { socket, .. } => {
                let (s, uid) = socket.accept().await?;
                Ok(Accepted::Unix(s, uid))
            }
        }
    }

    /// `ws://ADDR` (`wss://` with TLS) or `unix:PATH`: what `listening on …` prints.
    fn url(&self) -> String {
        match self {
            Listener::Tcp { addr, tls, .. } => {
                format!("{}://{addr}", if tls.is_some() { "wss" } else { "ws" })
            }
            Listener::Unix { socket, .. } => format!("unix:{}", socket.path().display()),
        }
    }
}

/// The start-time checks `serve` makes before binding, for `ahpty config` to run too: the
/// token and loopback rules ([`auth::check_config`]: `no_auth` only on loopback, a readable
/// token file) and, with TLS, that the certificate and key load. `Ok` carries the warnings
/// (one line each); `Err` the refusal as one line (the CLI exits with status 2).
pub fn check_settings(config: &Config) -> Result<Vec<String>, String> {
    let warnings = auth::check_config(config)?;
    if let Some(files) = &config.tls {
        tls::acceptor(files).map_err(|e| e.to_string())?;
    }
    Ok(warnings)
}

/// A live-upgrade mechanism for the accept loop to serve. `crate::upgrade` implements it: it
/// sits above the server and takes the server's state through [`handover`], so the server
/// only knows this trait. The loop waits for [`requested`](Self::requested) beside its
/// accepts, then runs [`perform`](Self::perform) with no accept in progress (connections
/// wait in the backlog).
pub trait LiveUpgrades: Send {
    /// Resolves once an upgrade that passed its pre-flight waits to be performed (never, if
    /// none comes). Cancel-safe: the request stays waiting.
    fn requested(&mut self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;

    /// Performs the waiting upgrade (returns at once if none waits). `stop_requested` tells
    /// whether a shutdown was asked for meanwhile. Returns only if the old image serves on.
    fn perform<'a>(
        &'a mut self,
        server: &'a Server,
        stop_requested: &'a mut dyn FnMut() -> bool,
    ) -> Pin<Box<dyn Future<Output = ()> + 'a>>;
}

/// The next upgrade request (never, without an upgrade mechanism).
async fn upgrade_requested(upgrader: &mut Option<Box<dyn LiveUpgrades>>) {
    match upgrader {
        Some(u) => u.requested().await,
        None => std::future::pending().await,
    }
}

/// A bound, not yet running, daemon.
pub struct Server {
    listeners: Vec<Listener>,
    host: Arc<Host>,
    ctx: Arc<Context>,
    token: Option<Token>,
    generated_token: bool,
    /// Live upgrades on SIGUSR2 (see [`Server::with_upgrades`]).
    upgrader: Option<Box<dyn LiveUpgrades>>,
    /// The connect URLs with the generated token were withheld (stdout is the journal).
    token_withheld: bool,
}

impl Server {
    /// Serves live upgrades: on SIGUSR2 the daemon re-executes its binary in place and hands
    /// its state over (`crate::upgrade` implements [`LiveUpgrades`]).
    pub fn with_upgrades(mut self, upgrader: impl LiveUpgrades + 'static) -> Self {
        self.upgrader = Some(Box::new(upgrader));
        self
    }

    /// The shared host.
    pub fn host(&self) -> &Arc<Host> {
        &self.host
    }

    /// Checks the security settings ([`auth::check_config`]; its warnings are logged), opens
    /// the transcript store (restoring the terminals it holds; see [`crate::store::open`]),
    /// loads TLS, resolves the token (generating one for [`Auth::Generate`]) and binds every
    /// listener. Errors name the listener, file or state directory at fault; when several
    /// are taken (a second daemon: its state directory, TCP port and socket), the error names
    /// every one, one per line ([`Conflicts`]), so one try tells them all. A default socket
    /// ([`Config::socket_is_default`]) that cannot be made for another reason than a daemon
    /// listening on it (e.g. its directory belongs to another user) is left out with a
    /// warning.
    pub async fn bind(config: &Config) -> io::Result<Server> {
        let warnings = auth::check_config(config)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let tls = config.tls.as_ref().map(tls::acceptor).transpose()?;
        let (token, generated_token) = match &config.auth {
            Auth::Disabled => (None, false),
            Auth::Generate => (
                Some(Token::generate().map_err(|e| {
                    io::Error::new(e.kind(), format!("cannot generate a token: {e}"))
                })?),
                true,
            ),
            Auth::Token { token, .. } => (Some(token.clone()), false),
        };
        let mut conflicts = Conflicts::default();
        let store = match &config.persist {
            Some(p) => crate::store::open(p).unwrap_or_else(|e| {
                conflicts.push(e);
                None
            }),
            None => None,
        };
        let mut listeners = Vec::new();
        let mut left_out = None;
        for listen in &config.listen {
            match listen {
                Listen::Tcp(addr) => {
                    let bound = listen_tcp(*addr).and_then(|l| Ok((l.local_addr()?, l)));
                    match bound {
                        Ok((addr, listener)) => {
                            pending::defer_accept(&listener);
                            listeners.push(Listener::tcp(
                                listener,
                                addr,
                                tls.clone(),
                                config,
                                token.clone(),
                            ));
                        }
                        Err(e) => conflicts.push(io::Error::new(
                            e.kind(),
                            format!("cannot listen on {addr}: {}", bind_error(&e)),
                        )),
                    }
                }
                Listen::Unix(path) => match UnixSocket::bind(path) {
                    Ok(socket) => listeners.push(Listener::unix(socket, config)),
                    Err(e) => {
                        let default = config.socket_is_default
                            && config.socket.as_deref() == Some(path.as_path());
                        let in_use = e.kind() == io::ErrorKind::AddrInUse;
                        let hint = if in_use && config.socket.as_deref() == Some(path.as_path()) {
                            "; to run a second daemon, give it --socket PATH or --no-socket"
                        } else {
                            ""
                        };
                        let e = io::Error::new(
                            e.kind(),
                            format!("cannot listen on unix:{}: {e}{hint}", path.display()),
                        );
                        if default && !in_use {
                            left_out = Some(e);
                        } else {
                            conflicts.push(e);
                        }
                    }
                },
            }
        }
        match left_out {
            // Nothing else to serve on: the default socket was the daemon's only way in.
            Some(e) if listeners.is_empty() => conflicts.push(e),
            Some(e) => tracing::warn!(
                "{e}; serving without the default socket meanwhile: the client subcommands \
                 need --url (or $AHPTY_URL) to reach this daemon"
            ),
            None => {}
        }
        conflicts.into_result()?;
        // Only a daemon that starts warns about its settings: a refusal says only why.
        for w in warnings {
            tracing::warn!("{w}");
        }
        let host = Host::with_store(config, store);
        Ok(Server {
            listeners,
            ctx: Arc::new(Context::new(host.clone(), config)),
            host,
            token,
            generated_token,
            upgrader: None,
            token_withheld: false,
        })
    }

    /// The first TCP address actually bound (useful with port 0), if there is a TCP listener.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.tcp_addrs().into_iter().next()
    }

    /// Every TCP address bound.
    pub fn tcp_addrs(&self) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .filter_map(|l| match l {
                Listener::Tcp { addr, .. } => Some(*addr),
                Listener::Unix { .. } => None,
            })
            .collect()
    }

    /// The token TCP peers must present (`None` with `--no-auth`).
    pub fn token(&self) -> Option<&Token> {
        self.token.as_ref()
    }

    /// Whether the token was generated at start (and so must be shown to the user once).
    pub fn token_generated(&self) -> bool {
        self.generated_token
    }

    /// Tells the server its generated token was not printed, so its log does not point to
    /// stdout for it.
    pub fn withhold_token(&mut self) {
        self.token_withheld = true;
    }

    /// One connect URL per TCP listener, `ws://ADDR?tkn=TOKEN` (no `/` before `?`, the form
    /// VS Code scrapes) when the token was generated, else `ws://ADDR` (`wss://` with TLS).
    pub fn connect_urls(&self) -> Vec<String> {
        self.listeners
            .iter()
            .filter_map(|l| match l {
                Listener::Tcp { .. } => Some(match (&self.token, self.generated_token) {
                    (Some(t), true) => format!("{}?tkn={}", l.url(), t.expose()),
                    _ => l.url(),
                }),
                Listener::Unix { .. } => None,
            })
            .collect()
    }

    /// Accepts connections until `shutdown` completes, then disposes every terminal (process
    /// groups killed), closes every connection with code 1001 and removes socket files.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        for l in &self.listeners {
            // Tests and scripts parse `listening on ws://ADDR`: keep this format.
            tracing::info!("listening on {}", l.url());
        }
        let has_tcp = self
            .listeners
            .iter()
            .any(|l| matches!(l, Listener::Tcp { .. }));
        match (&self.token, self.generated_token) {
            _ if !has_tcp => {}
            (None, _) => {}
            (Some(_), true) if self.token_withheld => tracing::info!(
                "TCP peers need the token generated at start, which nobody was shown: they \
                 cannot connect (the Unix socket needs no token)"
            ),
            (Some(_), true) => tracing::info!(
                "TCP peers need the token generated at start (connect URL printed on stdout)"
            ),
            (Some(_), false) => tracing::info!("TCP peers need the configured token"),
        }
        let reaper = tokio::spawn(self.host.clone().reap_orphans());
        let stall_watch = tokio::spawn(self.host.clone().watch_stalls());
        let repair = tokio::spawn(self.host.clone().repair_transcripts());
        let pending = Pending::new();
        let mut refused = Throttled::new("too many handshakes in progress; refusing with 503");
        let mut out_of_fds = Throttled::new(
            "out of file descriptors (open-file limit): closing new connections; dispose \
             terminals or raise the limit",
        );
        let mut accept_failed = Throttled::new("accept failed");
        // One descriptor kept in reserve, released to take a connection off the queue when
        // the daemon runs out of descriptors.
        let mut reserve = std::fs::File::open("/dev/null").ok();
        let mut connections = JoinSet::new();
        let mut upgrader = self.upgrader.take();
        tokio::pin!(shutdown);
        loop {
            let accepts = self.listeners.iter().enumerate().map(|(i, l)| {
                Box::pin(async move { (i, l.accept().await) })
                    as Pin<Box<dyn Future<Output = (usize, io::Result<Accepted>)> + Send + '_>>
            });
            let any_accept = futures_util::future::select_all(accepts);
            tokio::select! {
                _ = &mut shutdown => break,
                // No accept runs while an upgrade quiesces: connections wait in the backlog.
                _ = upgrade_requested(&mut upgrader) => {
                    if let Some(u) = upgrader.as_mut() {
                        let mut stop = || shutdown.as_mut().now_or_never().is_some();
                        u.perform(&self, &mut stop).await;
                    }
                }
                ((i, accepted), _, _) = any_accept => match accepted {
                    Ok(accepted) => {
                        let (key, fd) = match &accepted {
                            Accepted::Tcp(s, peer) => (PeerKey::Ip(peer.ip()), s.as_raw_fd()),
                            Accepted::Unix(s, uid) => {
                                // Checked before taking a slot: another user's peer must not
                                // even evict a pending handshake.
                                if !unix::peer_allowed(*uid) {
                                    tracing::warn!(
                                        uid = ?uid,
                                        "Unix socket peer runs as another user; refused"
                                    );
                                    continue;
                                }
                                (PeerKey::Unix, s.as_raw_fd())
                            }
                        };
                        let permit = match pending.admit(key, Some(fd)) {
                            Ok(slot) => slot,
                            Err(Full) => {
                                match (accepted, &self.listeners[i]) {
                                    (Accepted::Tcp(s, peer), Listener::Tcp { tls: None, .. }) => {
                                        refused.note(&peer);
                                        pending.refuse(s);
                                    }
                                    (Accepted::Tcp(_, peer), _) => refused.note(&peer),
                                    (Accepted::Unix(s, _), _) => {
                                        refused.note(&"unix");
                                        pending.refuse(s);
                                    }
                                }
                                continue;
                            }
                        };
                        let ctx = self.ctx.clone();
                        match (accepted, &self.listeners[i]) {
                            (Accepted::Tcp(stream, peer), Listener::Tcp { tls, policy, .. }) => {
                                connections.spawn(handshake::handle_tcp(
                                    stream,
                                    peer,
                                    ctx,
                                    policy.clone(),
                                    tls.clone(),
                                    permit,
                                ));
                            }
                            (Accepted::Unix(stream, uid), Listener::Unix { policy, .. }) => {
                                connections.spawn(handshake::handle_unix(
                                    stream,
                                    uid,
                                    ctx,
                                    policy.clone(),
                                    permit,
                                ));
                            }
                            _ => {}
                        }
                    }
                    Err(e) if is_out_of_descriptors(&e) => {
                        // The waiting connection cannot be accepted, so the listener stays
                        // readable: without taking it off the queue this would spin. Free the
                        // reserve descriptor, accept it, tell it 503 and close it, then take
                        // the reserve back.
                        out_of_fds.note(&e);
                        drop(reserve.take());
                        let listener = &self.listeners[i];
                        if let Some(Ok(accepted)) = listener.accept().now_or_never() {
                            let tls = matches!(listener, Listener::Tcp { tls: Some(_), .. });
                            accepted.refuse_now(!tls);
                        }
                        reserve = std::fs::File::open("/dev/null").ok();
                        if reserve.is_none() {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                    Err(e) => {
                        // Keep serving the others.
                        accept_failed.note(&e);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        tracing::info!("shutting down");
        // Dropping the listeners removes the Unix socket files.
        drop(self.listeners);
        reaper.abort();
        stall_watch.abort();
        repair.abort();
        self.host.shutdown().await;
        let drained = tokio::time::timeout(SHUTDOWN_FLUSH, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            connections.shutdown().await;
        }
        tracing::info!("stopped");
    }
}

/// Binds every listener of `config`, logs `listening on ws://ADDR` and serves until
/// `shutdown`. With a generated token nobody learns it: use [`Server`] to read it.
pub async fn serve(config: &Config, shutdown: impl Future<Output = ()>) -> io::Result<()> {
    let server = Server::bind(config).await?;
    server.run(shutdown).await;
    Ok(())
}

/// Every reason binding failed (a taken port, a socket in use, a locked state directory), so
/// that one error reports them all.
#[derive(Default)]
struct Conflicts(Vec<io::Error>);

impl Conflicts {
    fn push(&mut self, e: io::Error) {
        self.0.push(e);
    }

    /// `Ok` if nothing failed; else the one error, or for several an error whose message
    /// names each on a line of its own (kind `AddrInUse` if one of them is).
    fn into_result(self) -> io::Result<()> {
        let mut all = self.0;
        match all.len() {
            0 => Ok(()),
            1 => Err(all.remove(0)),
            n => {
                let kind = all
                    .iter()
                    .map(|e| e.kind())
                    .find(|k| *k == io::ErrorKind::AddrInUse)
                    .unwrap_or(all[0].kind());
                let lines: Vec<String> = all.iter().map(|e| format!("  {e}")).collect();
                Err(io::Error::new(
                    kind,
                    format!("cannot start, {n} problems:\n{}", lines.join("\n")),
                ))
            }
        }
    }
}

/// Connections the kernel may hold for a TCP listener before `accept` (`listen(2)` backlog,
/// capped by `net.core.somaxconn`). Large, because with `TCP_DEFER_ACCEPT` idle sockets wait
/// in this queue instead of in a pending-handshake slot.
const LISTEN_BACKLOG: u32 = 4096;

/// A TCP listener on `addr` (`SO_REUSEADDR`, like the standard library's) with a
/// [`LISTEN_BACKLOG`] backlog.
fn listen_tcp(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Why binding a TCP listener failed, in a few words.
fn bind_error(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::AddrInUse => "address already in use".into(),
        io::ErrorKind::PermissionDenied => "permission denied".into(),
        io::ErrorKind::AddrNotAvailable => "address not available on this machine".into(),
        _ => e.to_string(),
    }
}
