//! One WebSocket connection: upgrade (with the [`UpgradePolicy`] checks), then a reader loop
//! feeding frames to the connection's [`RpcConnection`] and a writer task draining its
//! outbox onto the socket. One JSON-RPC message per frame; binary frames holding UTF-8 JSON
//! are accepted, only text frames are sent. Nothing a peer sends can affect another
//! connection: errors end this connection only.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::upgrade::UpgradePolicy;
use crate::host::{Host, OutboxReceiver, Outgoing};
use crate::rpc::error::RpcError;
use crate::rpc::{frame, Flow, RpcConnection};

/// A socket must complete the WebSocket upgrade within this time.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long to wait for the peer after sending a close frame.
const CLOSE_LINGER: Duration = Duration::from_secs(1);

type Sink = SplitSink<WebSocketStream<TcpStream>, Message>;

/// Serves one accepted TCP connection until either side closes it.
// The handshake callback's error type is fixed by tungstenite.
#[allow(clippy::result_large_err)]
pub async fn handle(
    stream: TcpStream,
    peer: SocketAddr,
    host: Arc<Host>,
    policy: Arc<UpgradePolicy>,
    max_message_bytes: usize,
) {
    let _ = stream.set_nodelay(true);
    let config = WebSocketConfig::default()
        .max_message_size(Some(max_message_bytes))
        .max_frame_size(Some(max_message_bytes));
    let callback = |request: &Request, response: Response| -> Result<Response, ErrorResponse> {
        match policy.check(request) {
            Ok(()) => Ok(response),
            Err(reason) => {
                tracing::warn!(%peer, %reason, "WebSocket upgrade refused");
                Err(UpgradePolicy::refusal(&reason))
            }
        }
    };
    let ws = match tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        tokio_tungstenite::accept_hdr_async_with_config(stream, callback, Some(config)),
    )
    .await
    {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "WebSocket handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "WebSocket handshake timed out");
            return;
        }
    };
    let (sink, mut source) = ws.split();
    let (outbox, outbox_rx) = host.new_outbox();
    let mut rpc = RpcConnection::new(host, outbox.clone());
    let conn = rpc.id();
    tracing::debug!(%peer, conn, "connection open");
    let mut writer = tokio::spawn(write_loop(sink, outbox_rx));
    let mut writer_done = false;
    loop {
        tokio::select! {
            message = source.next() => {
                let flow = match message {
                    Some(Ok(Message::Text(text))) => rpc.handle_text(text.as_str()).await,
                    Some(Ok(Message::Binary(bytes))) => match std::str::from_utf8(&bytes) {
                        Ok(text) => rpc.handle_text(text).await,
                        Err(_) => {
                            outbox.send(frame::error(
                                &serde_json::Value::Null,
                                &RpcError::parse_error("binary frame is not valid UTF-8 JSON"),
                            ));
                            Flow::Continue
                        }
                    },
                    Some(Ok(Message::Close(_))) | None => break,
                    Some(Ok(_)) => Flow::Continue, // ping/pong are answered by tungstenite
                    Some(Err(e)) => {
                        tracing::debug!(%peer, conn, error = %e, "connection error");
                        // e.g. a message over the size limit: tell the peer why.
                        if let tokio_tungstenite::tungstenite::Error::Capacity(c) = &e {
                            outbox.close(1009, format!("{c}"));
                            Flow::Close
                        } else {
                            break;
                        }
                    }
                };
                if flow == Flow::Close {
                    outbox.close(1000, "closing");
                    // Stop reading; let the writer flush the queue and the close frame.
                    let _ = tokio::time::timeout(CLOSE_LINGER * 2, &mut writer).await;
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

async fn write_loop(mut sink: Sink, mut rx: OutboxReceiver) {
    let kill = rx.kill_signal();
    let close = tokio::select! {
        close = write_queue(&mut sink, &mut rx) => close,
        killed = kill.killed() => Some(killed),
    };
    if let Some((code, reason)) = close {
        // A stalled peer may never read the close frame: do not wait for it forever.
        let _ = tokio::time::timeout(CLOSE_LINGER, send_close(&mut sink, code, reason)).await;
    }
}

/// Writes queued messages until a close is requested (returned) or the socket fails (`None`).
/// Whatever is already queued is sent in one batch before a flush, and reported to the outbox
/// as written once flushed.
async fn write_queue(sink: &mut Sink, rx: &mut OutboxReceiver) -> Option<(u16, String)> {
    loop {
        let first = rx.recv().await?;
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

async fn send_close(sink: &mut Sink, code: u16, mut reason: String) {
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
