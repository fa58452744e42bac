//! One connection: (TLS, then) the WebSocket upgrade with the [`UpgradePolicy`] checks and the
//! connection limit, then a reader loop feeding frames to the connection's [`RpcConnection`]
//! and a writer task draining its outbox onto the socket and pinging a silent peer. One
//! JSON-RPC message per frame; binary frames holding UTF-8 JSON are accepted, only text frames
//! are sent. Nothing a peer sends can affect another connection: errors end this connection
//! only.

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::auth::redacted_target;
use super::pending::{Slot, FIRST_BYTE_TIMEOUT};
use super::upgrade::{Refusal, UpgradePolicy};
use crate::config::Config;
use crate::host::outbox::{HARD_LIMIT_BYTES, HIGH_WATERMARK_BYTES, LOW_WATERMARK_BYTES};
use crate::host::{Host, OutboxReceiver, Outgoing};
use crate::rpc::error::RpcError;
use crate::rpc::frame::{self, Incoming};
use crate::rpc::{Flow, RpcConnection};
use serde_json::value::RawValue;

/// Default time a socket gets to complete the WebSocket upgrade
/// ([`Config::handshake_timeout`] overrides it).
pub const HANDSHAKE_TIMEOUT: Duration = crate::config::DEFAULT_HANDSHAKE_TIMEOUT;

/// Read buffer of a WebSocket connection, in bytes.
const READ_BUFFER_BYTES: usize = 16 * 1024;

/// How long to wait for the peer after sending a close frame.
const CLOSE_LINGER: Duration = Duration::from_secs(1);

/// How often a connection whose reading is paused (see [`run`]) looks at its queue again.
const INPUT_PAUSE_POLL: Duration = Duration::from_millis(20);

/// Requests a congested connection may hold back (see [`run`]) before its socket is no longer
/// read at all.
const MAX_DEFERRED_FRAMES: usize = 256;

/// Close code sent to a peer that did not answer a ping in time.
pub const PING_TIMEOUT_CLOSE_CODE: u16 = 1001;

type Sink<S> = SplitSink<WebSocketStream<S>, Message>;

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

/// Serves one accepted TCP connection, doing the TLS handshake first if `tls` is set.
pub async fn handle_tcp(
    stream: TcpStream,
    peer: SocketAddr,
    ctx: Arc<Context>,
    policy: Arc<UpgradePolicy>,
    tls: Option<TlsAcceptor>,
    pending: Slot,
) {
    let _ = stream.set_nodelay(true);
    let peer = Peer::Tcp(peer);
    let started = Instant::now();
    let deadline = started + ctx.handshake_timeout;
    let stream = pending.watch(stream);
    match tls {
        None => serve(stream, peer, ctx, policy, started, pending).await,
        Some(acceptor) => {
            let accept = tokio::time::timeout_at(deadline, acceptor.accept(stream));
            match guarded(&pending, started, &ctx, peer, accept).await {
                Some(Ok(Ok(stream))) => serve(stream, peer, ctx, policy, started, pending).await,
                Some(Ok(Err(e))) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Some(Err(_)) => tracing::debug!(%peer, "TLS handshake timed out"),
                None => {}
            }
        }
    }
}

/// Serves one accepted Unix-socket connection (the caller checked the peer's uid).
pub async fn handle_unix(
    stream: UnixStream,
    uid: Option<u32>,
    ctx: Arc<Context>,
    policy: Arc<UpgradePolicy>,
    pending: Slot,
) {
    let stream = pending.watch(stream);
    serve(
        stream,
        Peer::Unix(uid),
        ctx,
        policy,
        Instant::now(),
        pending,
    )
    .await
}

/// Runs `fut`, a step of the handshake of a pending socket accepted at `started`, unless the
/// socket is evicted for a newcomer or has sent nothing within the first-byte timeout (then
/// `None`: the caller drops, and so closes, the socket).
async fn guarded<F: std::future::Future>(
    slot: &Slot,
    started: Instant,
    ctx: &Context,
    peer: Peer,
    fut: F,
) -> Option<F::Output> {
    let first_byte = started + FIRST_BYTE_TIMEOUT.min(ctx.handshake_timeout);
    tokio::select! {
        out = fut => Some(out),
        _ = slot.evicted() => {
            tracing::debug!(%peer, "pending handshake evicted for a newer one");
            None
        }
        _ = slot.silent_at(first_byte) => {
            tracing::debug!(%peer, "socket sent nothing; closed");
            None
        }
    }
}

/// Upgrades `stream` (accepted at `started`, within the handshake timeout) and serves it until
/// either side closes it. `pending` (a slot among the handshakes in progress) is released once
/// the upgrade is over.
// The handshake callback's error type is fixed by tungstenite.
#[allow(clippy::result_large_err)]
pub async fn serve<S>(
    stream: S,
    peer: Peer,
    ctx: Arc<Context>,
    policy: Arc<UpgradePolicy>,
    started: Instant,
    pending: Slot,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let deadline = started + ctx.handshake_timeout;
    // Clients send small messages (input, requests): a 16 KiB read buffer (tungstenite's
    // default is 128 KiB, allocated and zeroed per connection) keeps connections cheap; large
    // messages are still read whole.
    let config = WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER_BYTES)
        .max_message_size(Some(ctx.max_message_bytes))
        .max_frame_size(Some(ctx.max_message_bytes));
    let mut slot: Option<OwnedSemaphorePermit> = None;
    let slots = ctx.slots.clone();
    let slot_ref = &mut slot;
    let callback = move |request: &Request,
                         response: Response|
          -> Result<Response, ErrorResponse> {
        let target = redacted_target(request);
        if let Err(refusal) = policy.check(request) {
            tracing::warn!(
                %peer,
                %target,
                status = refusal.status.as_u16(),
                reason = %refusal.reason,
                "WebSocket upgrade refused"
            );
            return Err(refusal.response());
        }
        match slots.try_acquire_owned() {
            Ok(permit) => {
                *slot_ref = Some(permit);
                Ok(response)
            }
            Err(_) => {
                let refusal = Refusal {
                    status: StatusCode::SERVICE_UNAVAILABLE,
                    reason: "too many connections (--max-connections); try again later".into(),
                };
                tracing::warn!(%peer, %target, "WebSocket upgrade refused: too many connections");
                Err(refusal.response())
            }
        }
    };
    let accepted = tokio::time::timeout_at(deadline, async move {
        let stream = super::request_line::fix_request_line(stream)
            .await
            .map_err(tokio_tungstenite::tungstenite::Error::Io)?;
        tokio_tungstenite::accept_hdr_async_with_config(stream, callback, Some(config)).await
    });
    let accepted = guarded(&pending, started, &ctx, peer, accepted).await;
    drop(pending);
    let ws = match accepted {
        Some(Ok(Ok(ws))) => ws,
        Some(Ok(Err(e))) => {
            tracing::debug!(%peer, error = %e, "WebSocket handshake failed");
            return;
        }
        Some(Err(_)) => {
            tracing::debug!(%peer, "WebSocket handshake timed out");
            return;
        }
        None => return,
    };
    let Some(_slot) = slot else {
        return;
    };
    run(ws, peer, ctx).await;
}

/// When the peer was last heard from, shared by the reader (which records it) and the writer
/// (which pings a silent peer and gives up on a dead one).
struct Liveness {
    base: Instant,
    /// Milliseconds since `base` at the last frame received.
    last_rx_ms: AtomicU64,
}

impl Liveness {
    fn new() -> Liveness {
        Liveness {
            base: Instant::now(),
            last_rx_ms: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        self.base.elapsed().as_millis() as u64
    }

    fn touch(&self) {
        self.last_rx_ms.store(self.now_ms(), Ordering::Release);
    }

    fn last_rx_ms(&self) -> u64 {
        self.last_rx_ms.load(Ordering::Acquire)
    }

    fn at(&self, ms: u64) -> Instant {
        self.base + Duration::from_millis(ms)
    }
}

async fn run<S>(ws: WebSocketStream<S>, peer: Peer, ctx: Arc<Context>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sink, mut source) = ws.split();
    let (outbox, outbox_rx) = ctx.host.new_outbox();
    let mut rpc = RpcConnection::new(ctx.host.clone(), outbox.clone());
    let conn = rpc.id();
    tracing::debug!(%peer, conn, "connection open");
    let live = Arc::new(Liveness::new());
    let mut writer = tokio::spawn(write_loop(sink, outbox_rx, live.clone(), ctx.ping, peer));
    let mut writer_done = false;
    // Requests held back while this connection's own queue is congested (see below).
    let mut deferred: VecDeque<String> = VecDeque::new();
    let mut paused = false;
    let mut queued_at_pause = 0;
    loop {
        // Request backpressure: while this connection's own queue is above the high watermark
        // (it is not reading what it asked for, e.g. thousands of snapshot-sized `subscribe`
        // answers), its requests are held back until the queue is under the low watermark —
        // except `ping` and, when nothing is held back, `dispatchAction`/`unsubscribe`, so
        // input such as Ctrl-C never waits behind output. Once MAX_DEFERRED_FRAMES are held
        // back, or the queue reaches HARD_LIMIT_BYTES (only echoes of input can push it there:
        // output is paused at the high watermark), the socket is not read at all. A peer that keeps draining its queue counts as
        // alive for the ping check; one that does not is closed by the stall timeout.
        let queued = outbox.queued_bytes();
        if !paused && queued > HIGH_WATERMARK_BYTES {
            paused = true;
            queued_at_pause = queued;
        } else if paused && queued <= LOW_WATERMARK_BYTES {
            paused = false;
        }
        if paused && queued < queued_at_pause {
            live.touch();
            queued_at_pause = queued;
        }
        if !paused {
            if let Some(text) = deferred.pop_front() {
                if rpc.handle_text(&text).await == Flow::Close {
                    close_after_flush(&outbox, &mut writer, 1000, "closing".into()).await;
                    writer_done = true;
                    break;
                }
                continue;
            }
        }
        let can_read =
            deferred.len() < MAX_DEFERRED_FRAMES && outbox.queued_bytes() < HARD_LIMIT_BYTES;
        tokio::select! {
            _ = tokio::time::sleep(INPUT_PAUSE_POLL), if paused && (!deferred.is_empty() || !can_read) => continue,
            message = source.next(), if can_read => {
                if let Some(Ok(_)) = &message {
                    live.touch();
                }
                let text = match message {
                    Some(Ok(Message::Text(text))) => text.as_str().to_owned(),
                    Some(Ok(Message::Binary(bytes))) => match String::from_utf8(bytes.to_vec()) {
                        Ok(text) => text,
                        Err(_) => {
                            outbox.send(frame::error(
                                RawValue::NULL,
                                &RpcError::parse_error("binary frame is not valid UTF-8 JSON"),
                            ));
                            continue;
                        }
                    },
                    Some(Ok(Message::Close(_))) | None => break,
                    Some(Ok(_)) => continue, // ping/pong are answered by tungstenite
                    Some(Err(e)) => {
                        tracing::debug!(%peer, conn, error = %e, "connection error");
                        // Tell the peer why, with the RFC 6455 close code: 1009 for a message
                        // over the size limit, 1007 for invalid UTF-8 in a text frame, 1002 for
                        // other protocol violations.
                        use tokio_tungstenite::tungstenite::Error as WsError;
                        let code = match &e {
                            WsError::Capacity(_) => Some(1009),
                            WsError::Utf8(_) => Some(1007),
                            WsError::Protocol(_) => Some(1002),
                            _ => None,
                        };
                        if let Some(code) = code {
                            close_after_flush(&outbox, &mut writer, code, e.to_string()).await;
                            writer_done = true;
                        }
                        break;
                    }
                };
                if paused && !jumps_the_queue(&text, deferred.is_empty()) {
                    deferred.push_back(text);
                    continue;
                }
                if rpc.handle_text(&text).await == Flow::Close {
                    close_after_flush(&outbox, &mut writer, 1000, "closing".into()).await;
                    writer_done = true;
                    break;
                }
            }
            _ = &mut writer => {
                writer_done = true;
                break;
            }
        }
    }
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

/// Whether a frame received while its connection is congested is handled at once rather than
/// held back: `ping` always (it has no ordering), `dispatchAction` and `unsubscribe` when no
/// earlier request is held back (so they keep their order relative to other requests).
fn jumps_the_queue(text: &str, nothing_deferred: bool) -> bool {
    let big = text.len() >= crate::rpc::dispatch::BIG_FRAME_BYTES;
    match crate::rpc::dispatch::offload(big, || frame::parse(text)) {
        Incoming::Request { method, .. } => method == "ping",
        Incoming::Notification { method, .. } => {
            nothing_deferred && (method == "dispatchAction" || method == "unsubscribe")
        }
        _ => nothing_deferred,
    }
}

/// Queues a close frame after whatever is queued and lets the writer send both, waiting a
/// bounded time.
async fn close_after_flush<T>(
    outbox: &crate::host::Outbox,
    writer: &mut tokio::task::JoinHandle<T>,
    code: u16,
    reason: String,
) {
    outbox.close(code, reason);
    let _ = tokio::time::timeout(CLOSE_LINGER * 2, writer).await;
}

async fn write_loop<S>(
    mut sink: Sink<S>,
    mut rx: OutboxReceiver,
    live: Arc<Liveness>,
    ping: Option<(Duration, Duration)>,
    peer: Peer,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let kill = rx.kill_signal();
    let close = tokio::select! {
        close = write_queue(&mut sink, &mut rx, &live, ping, peer) => close,
        killed = kill.killed() => Some(killed),
    };
    if let Some((code, reason)) = close {
        // A stalled peer may never read the close frame: do not wait for it forever.
        let _ = tokio::time::timeout(CLOSE_LINGER, send_close(&mut sink, code, reason)).await;
    }
}

/// Writes queued messages until a close is requested (returned), the peer is found dead (a
/// close is returned) or the socket fails (`None`). Whatever is already queued is sent in one
/// batch before a flush, and reported to the outbox as written once flushed. With `ping`
/// = `(interval, timeout)`, a peer silent for `interval` is sent a WebSocket ping (measured
/// from when the ping was flushed), and one that then stays silent for `timeout` is dropped.
async fn write_queue<S>(
    sink: &mut Sink<S>,
    rx: &mut OutboxReceiver,
    live: &Liveness,
    ping: Option<(Duration, Duration)>,
    peer: Peer,
) -> Option<(u16, String)>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // When the outstanding ping was flushed (ms since `live.base`).
    let mut pinged_ms: Option<u64> = None;
    loop {
        let first = match ping {
            None => rx.recv().await?,
            Some((interval, timeout)) => {
                let last = live.last_rx_ms();
                let unanswered = pinged_ms.filter(|&p| last < p);
                let wake = match unanswered {
                    Some(p) => live.at(p) + timeout,
                    None => live.at(last) + interval,
                };
                tokio::select! {
                    out = rx.recv() => out?,
                    _ = tokio::time::sleep_until(wake) => {
                        let last = live.last_rx_ms();
                        let now = live.now_ms();
                        match pinged_ms.filter(|&p| last < p) {
                            Some(p) => {
                                if now >= p + timeout.as_millis() as u64 {
                                    tracing::info!(%peer, "peer did not answer a ping; closing");
                                    return Some((
                                        PING_TIMEOUT_CLOSE_CODE,
                                        "no answer to ping".into(),
                                    ));
                                }
                            }
                            None => {
                                if now >= last + interval.as_millis() as u64 {
                                    if sink.send(Message::Ping(Default::default())).await.is_err() {
                                        return None;
                                    }
                                    pinged_ms = Some(live.now_ms());
                                }
                            }
                        }
                        continue;
                    }
                }
            }
        };
        let mut batch_bytes = 0;
        let mut next = Some(first);
        let mut closing = None;
        while let Some(out) = next.take() {
            match out {
                Outgoing::Text(text) => {
                    batch_bytes += text.len();
                    if sink.feed(Message::Text(text)).await.is_err() {
                        return None;
                    }
                }
                Outgoing::Close { code, reason } => {
                    closing = Some((code, reason));
                    break;
                }
            }
            next = rx.try_recv();
        }
        if sink.flush().await.is_err() {
            return None;
        }
        rx.written(batch_bytes);
        if closing.is_some() {
            return closing;
        }
    }
}

async fn send_close<S>(sink: &mut Sink<S>, code: u16, mut reason: String)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // A close reason is limited to 123 bytes on the wire.
    while reason.len() > 123 {
        reason.pop();
    }
    let frame = CloseFrame {
        code: CloseCode::from(code),
        reason: reason.into(),
    };
    let _ = sink.send(Message::Close(Some(frame))).await;
    let _ = sink.close().await;
}
