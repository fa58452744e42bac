//! One connection's task, once its WebSocket upgrade is done ([`super::handshake`]): it
//! registers the connection with the host (its [`RpcConnection`] and outbox), spawns the writer
//! task ([`super::writer`]), runs the reader ([`super::reader`]) until either side closes, and
//! then closes the writer. Nothing a peer sends can affect another connection: errors end this
//! connection only; the terminals it watched are not affected.
//!
//! May touch: its socket, its [`RpcConnection`] and outbox.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_tungstenite::WebSocketStream;

use super::{reader, writer};
use crate::config::Config;
use crate::host::{Host, Outbox};
use crate::rpc::RpcConnection;

/// How long to wait for the peer after sending a close frame.
pub(super) const CLOSE_LINGER: Duration = Duration::from_secs(1);

/// Who is on the other end, for logs.
#[derive(Debug, Clone, Copy)]
pub enum Peer {
    /// A TCP peer.
    Tcp(SocketAddr),
    /// A Unix-socket peer, with its uid.
    Unix(Option<u32>),
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Tcp(addr) => write!(f, "{addr}"),
            Peer::Unix(Some(uid)) => write!(f, "unix(uid {uid})"),
            Peer::Unix(None) => write!(f, "unix(uid ?)"),
        }
    }
}

/// What every connection of a server shares.
pub struct Context {
    /// The shared host.
    pub host: Arc<Host>,
    /// One permit per open WebSocket connection ([`Config::max_connections`]).
    pub slots: Arc<Semaphore>,
    /// Largest incoming message and frame.
    pub max_message_bytes: usize,
    /// Time from accept to a completed (TLS and) WebSocket handshake.
    pub handshake_timeout: Duration,
    /// `(interval, timeout)` of WebSocket pings; `None` disables them.
    pub ping: Option<(Duration, Duration)>,
}

impl Context {
    /// The limits of `config`, for connections to `host`.
    pub fn new(host: Arc<Host>, config: &Config) -> Context {
        Context {
            host,
            slots: Arc::new(Semaphore::new(config.max_connections)),
            max_message_bytes: config.max_message_bytes,
            handshake_timeout: config.handshake_timeout,
            ping: config.ping_interval.map(|i| (i, config.ping_timeout)),
        }
    }
}

/// Serves an upgraded connection until either side closes it.
pub(super) async fn run<S>(ws: WebSocketStream<S>, peer: Peer, ctx: Arc<Context>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sink, source) = ws.split();
    let (outbox, outbox_rx) = ctx.host.new_outbox();
    let mut rpc = RpcConnection::new(ctx.host.clone(), outbox.clone());
    let conn = rpc.id();
    tracing::debug!(%peer, conn, "connection open");
    let live = Arc::new(writer::Liveness::new());
    let mut writer = tokio::spawn(writer::write_loop(
        sink,
        outbox_rx,
        live.clone(),
        ctx.ping,
        peer,
    ));
    let writer_done =
        reader::read_frames(source, &mut rpc, &outbox, &mut writer, &live, peer, conn).await;
    drop(rpc);
    if !writer_done {
        outbox.close(1000, "");
        if tokio::time::timeout(CLOSE_LINGER, &mut writer)
            .await
            .is_err()
        {
            writer.abort();
        }
    }
    tracing::debug!(%peer, conn, "connection closed");
}

/// Queues a close frame after whatever is queued and lets the writer send both, waiting a
/// bounded time.
pub(super) async fn close_after_flush(
    outbox: &Outbox,
    writer: &mut JoinHandle<()>,
    code: u16,
    reason: String,
) {
    outbox.close(code, reason);
    let _ = tokio::time::timeout(CLOSE_LINGER * 2, writer).await;
}
