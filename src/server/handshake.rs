//! From an accepted socket to a WebSocket connection: the TLS handshake (TCP listeners with
//! `--tls-cert`), the request-line fix ([`super::request_line`]), and the WebSocket upgrade
//! with the [`UpgradePolicy`] checks (Origin, Host, token) and the connection limit — all
//! within the handshake timeout, and only while the socket keeps its pre-authentication slot
//! ([`super::pending`]). Then the connection is served ([`super::connection::run`]).
//!
//! Touches only this socket, its slot and a connection permit; nothing of AHP.

use std::net::SocketAddr;
use std::sync::Arc;

use http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use super::auth::redacted_target;
use super::connection::{self, Context, Peer};
use super::pending::{Slot, FIRST_BYTE_TIMEOUT};
use super::upgrade::{Refusal, UpgradePolicy};

/// Read buffer of a WebSocket connection, in bytes.
const READ_BUFFER_BYTES: usize = 16 * 1024;

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
        None => upgrade(stream, peer, ctx, policy, started, pending).await,
        Some(acceptor) => {
            let accept = tokio::time::timeout_at(deadline, acceptor.accept(stream));
            match guarded(&pending, started, &ctx, peer, accept).await {
                Some(Ok(Ok(stream))) => upgrade(stream, peer, ctx, policy, started, pending).await,
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
    upgrade(
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
async fn upgrade<S>(
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
    connection::run(ws, peer, ctx).await;
}
