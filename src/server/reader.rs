//! A connection's reader: frames from the socket to its [`RpcConnection`], in order, with
//! request backpressure. One JSON-RPC message per frame; binary frames holding UTF-8 JSON are
//! accepted. Each frame is parsed once, when it arrives.
//!
//! Backpressure: while this connection's own queue is above the high watermark (it is not
//! reading what it asked for, e.g. thousands of snapshot-sized `subscribe` answers), its
//! requests are held back until the queue is under the low watermark — except `ping` and, when
//! nothing is held back, `dispatchAction`/`unsubscribe`, so input such as Ctrl-C never waits
//! behind output ([`Message::jumps_the_queue`](crate::rpc::dispatch::Message::jumps_the_queue)).
//! Once [`MAX_DEFERRED_FRAMES`] are held back, or the queue reaches [`HARD_LIMIT_BYTES`] (only
//! echoes of input can push it there: output is paused at the high watermark), the socket is
//! not read at all. A peer that keeps draining its queue counts as alive for the ping check;
//! one that does not is closed by the stall timeout.
//!
//! Touches only its socket's receiving half, its connection's RPC state and outbox, and the
//! [`Liveness`] it shares with the writer.

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::stream::SplitStream;
use futures_util::StreamExt;
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::connection::{close_after_flush, Peer};
use super::writer::Liveness;
use crate::host::outbox::{HARD_LIMIT_BYTES, HIGH_WATERMARK_BYTES, LOW_WATERMARK_BYTES};
use crate::host::{ConnId, Outbox};
use crate::rpc::error::RpcError;
use crate::rpc::frame;
use crate::rpc::{Next, RpcConnection};

/// How often a connection whose reading is paused looks at its queue again.
const INPUT_PAUSE_POLL: Duration = Duration::from_millis(20);

/// Requests a congested connection may hold back before its socket is no longer read at all.
const MAX_DEFERRED_FRAMES: usize = 256;

/// Reads and handles frames until the peer closes, the socket fails, the writer stops, or a
/// message asks to close. Returns whether the writer is already done (it was awaited, after a
/// close frame was queued or because it stopped), so the caller knows whether to close it.
pub(super) async fn read_frames<S>(
    mut source: SplitStream<WebSocketStream<S>>,
    rpc: &mut RpcConnection,
    outbox: &Outbox,
    writer: &mut JoinHandle<()>,
    live: &Liveness,
    peer: Peer,
    conn: ConnId,
) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // Requests held back while this connection's own queue is congested (see the module docs).
    let mut deferred: VecDeque<crate::rpc::dispatch::Message> = VecDeque::new();
    let mut paused = false;
    let mut queued_at_pause = 0;
    loop {
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
            if let Some(message) = deferred.pop_front() {
                if rpc.handle(message).await == Next::Close {
                    close_after_flush(outbox, writer, 1000, "closing".into()).await;
                    return true;
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
                let message = match message {
                    Some(Ok(Message::Text(text))) => RpcConnection::parse(text.as_str()),
                    Some(Ok(Message::Binary(bytes))) => match std::str::from_utf8(&bytes) {
                        Ok(text) => RpcConnection::parse(text),
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
                            close_after_flush(outbox, writer, code, e.to_string()).await;
                            return true;
                        }
                        break;
                    }
                };
                if paused && !message.jumps_the_queue(deferred.is_empty()) {
                    deferred.push_back(message);
                    continue;
                }
                if rpc.handle(message).await == Next::Close {
                    close_after_flush(outbox, writer, 1000, "closing".into()).await;
                    return true;
                }
            }
            _ = &mut *writer => return true,
        }
    }
    false
}
