//! A connection's writer task: drains its outbox onto the socket in batches (one flush per
//! batch, reported to the outbox as written once flushed — what flow control counts), sends
//! the close frame the connection or the watchdog asked for, and pings a peer that has been
//! silent for the ping interval, closing it (1001) when the ping goes unanswered.
//!
//! Touches only its socket's sending half, its outbox's receiving half and the [`Liveness`]
//! it shares with the reader.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::SplitSink;
use futures_util::SinkExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;

use super::connection::{Peer, CLOSE_LINGER};
use crate::codec::Frame;
use crate::host::{OutboxReceiver, Outgoing};

/// Close code sent to a peer that did not answer a ping in time.
pub const PING_TIMEOUT_CLOSE_CODE: u16 = crate::proto::close::CLOSE_GOING_AWAY;

type Sink<S> = SplitSink<WebSocketStream<S>, Message>;

/// When the peer was last heard from, shared by the reader (which records it) and the writer
/// (which pings a silent peer and gives up on a dead one).
pub(super) struct Liveness {
    base: Instant,
    /// Milliseconds since `base` at the last frame received.
    last_rx_ms: AtomicU64,
}

impl Liveness {
    pub(super) fn new() -> Liveness {
        Liveness {
            base: Instant::now(),
            last_rx_ms: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        self.base.elapsed().as_millis() as u64
    }

    pub(super) fn touch(&self) {
        self.last_rx_ms.store(self.now_ms(), Ordering::Release);
    }

    fn last_rx_ms(&self) -> u64 {
        self.last_rx_ms.load(Ordering::Acquire)
    }

    fn at(&self, ms: u64) -> Instant {
        self.base + Duration::from_millis(ms)
    }
}

/// A frame as tungstenite's text payload, without copying or checking it again.
fn text_message(frame: Frame) -> Message {
    // SAFETY: a `Frame` is valid UTF-8 by construction (it is built only from `str` and
    // `String`, see `codec::Frame`).
    Message::Text(unsafe { Utf8Bytes::from_bytes_unchecked(frame.into_bytes()) })
}

pub(super) async fn write_loop<S>(
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
        // A stalled peer may never read the close frame: do not wait for it forever, and say
        // in the log what the peer could not be told.
        let sent = tokio::time::timeout(CLOSE_LINGER, send_close(&mut sink, code, reason.clone()))
            .await
            .unwrap_or(false);
        if !sent {
            tracing::info!(%peer, code, reason, "close frame not delivered: the peer's socket stayed full");
        }
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
                    if sink.feed(text_message(text)).await.is_err() {
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

/// Sends a close frame and closes the sink; whether the frame was flushed.
async fn send_close<S>(sink: &mut Sink<S>, code: u16, mut reason: String) -> bool
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
    let sent = sink.send(Message::Close(Some(frame))).await.is_ok();
    let _ = sink.close().await;
    sent
}
