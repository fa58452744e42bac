//! Finding and connecting to a daemon.
//!
//! Which daemon: `--url` / `$AHPTY_URL` (`ws://HOST:PORT?tkn=TOKEN`, `wss://…`, or
//! `unix:PATH`), else the default socket ([`crate::config::default_socket_path`]). How:
//! `ahp-ws` for `ws://`/`wss://` (a token not in the URL is taken from `$AHPTY_TOKEN` and sent
//! as `Authorization: Bearer`); for a Unix socket, tokio-tungstenite's client handshake over a
//! `UnixStream` — after checking with `SO_PEERCRED` that the daemon runs as this user (or
//! root) — wrapped in [`UnixTransport`], an implementation of `ahp::Transport`. Then the
//! official `ahp::Client` does everything else (`initialize` with the client id
//! [`CLIENT_ID`] and `clientInfo {name: "ahpty", version}`).
//!
//! Flow control: [`Gated`] lets at most [`MAX_UNREAD_EVENTS`] action notifications be read off
//! the socket ahead of the subcommand consuming them (see [`Conn::next_event`]); past that the
//! socket is not read, so a slow stdout slows the terminal down through the daemon's own
//! flow control instead of overflowing the client's event buffer (which would drop output).
//!
//! Failures become one line each: no daemon (exit 2, with how to start one), a token refused,
//! a host that is not ahpty, a lost connection (255).
//!
//! May touch: the socket it opens (TCP, TLS or Unix) and the environment (`$AHPTY_URL`,
//! `$AHPTY_TOKEN`, read); nothing of the local terminal.

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ahp::ahp_types::actions::ActionEnvelope;
use ahp::ahp_types::commands::{Implementation, InitializeParams, InitializeResult};
use ahp::{Client, ClientConfig, ClientError, ClientEventStream, SubscriptionEvent};
use ahp::{Transport, TransportError, TransportMessage};
use futures_util::{SinkExt, StreamExt};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::net::UnixStream;
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::WebSocketStream;

use super::Failure;
use crate::config::{default_socket_path, effective_uid, TOKEN_ENV, URL_ENV};
use crate::host::catalog::{TerminalListing, LIST_TERMINALS};

/// The `clientId` every `ahpty` client subcommand presents. Terminals created by `ahpty new`
/// and `ahpty run` are claimed by it, so any later `ahpty` command is their holder.
pub const CLIENT_ID: &str = "ahpty-cli";

/// The close code of the last WebSocket close frame the daemon sent over the Unix socket (0:
/// none): a CLI process has one connection at a time, and a lost connection is reported as
/// a shutdown when the daemon said `1001 going away`.
pub static CLOSE_CODE: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);

/// The root channel.
pub const ROOT: &str = "ahp-root://";

/// Action notifications read off the socket but not yet consumed, at most.
pub const MAX_UNREAD_EVENTS: usize = 64;

/// Time allowed for connecting and `initialize`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the daemon is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A `ws://` or `wss://` URL (with its `?tkn=` token, if any).
    Ws(String),
    /// A Unix socket path.
    Unix(PathBuf),
}

impl Target {
    /// `--url` (clap also fills it from `$AHPTY_URL`), else the default socket.
    pub fn resolve(url: Option<&str>) -> Result<Target, Failure> {
        match url.map(str::trim).filter(|u| !u.is_empty()) {
            Some(u) => Target::parse(u),
            None => Ok(Target::Unix(default_socket_path())),
        }
    }

    /// Parses `ws://…`, `wss://…` or `unix:PATH`.
    pub(crate) fn parse(url: &str) -> Result<Target, Failure> {
        if let Some(path) = url.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(Failure::unreachable(
                    "unix: needs a path, e.g. unix:/tmp/ahpty.sock",
                ));
            }
            return Ok(Target::Unix(PathBuf::from(path)));
        }
        match url::Url::parse(url) {
            Ok(u) if u.scheme() == "ws" || u.scheme() == "wss" => Ok(Target::Ws(url.to_string())),
            _ => Err(Failure::unreachable(format!(
                "--url / ${URL_ENV} {url:?} is not a ws://HOST:PORT, wss://HOST:PORT or \
                 unix:PATH address"
            ))),
        }
    }

    /// For messages: the URL without its token, or `unix:PATH`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Target::Unix(p) => format!("unix:{}", p.display()),
            Target::Ws(u) => match url::Url::parse(u) {
                Ok(mut parsed) => {
                    let kept: Vec<(String, String)> = parsed
                        .query_pairs()
                        .filter(|(k, _)| k != "tkn")
                        .map(|(k, v)| (k.into_owned(), v.into_owned()))
                        .collect();
                    parsed.set_query(None);
                    if !kept.is_empty() {
                        parsed.query_pairs_mut().extend_pairs(kept);
                    }
                    parsed.to_string()
                }
                Err(_) => u.clone(),
            },
        }
    }
}

/// One connection to a daemon, initialized.
pub struct Conn {
    /// The official client.
    pub client: Client,
    events: ClientEventStream,
    credits: Arc<Semaphore>,
    /// Envelopes read while waiting for an answer, for [`Conn::next_event`].
    pending: VecDeque<ActionEnvelope>,
    /// Envelopes are no longer wanted (see [`Conn::discard_events`]).
    discard: bool,
}

impl Conn {
    /// Connects to `target` and initializes as [`CLIENT_ID`], subscribing to `subscriptions`
    /// (e.g. `[ROOT]`). `token` is the `$AHPTY_TOKEN` value for a `ws://` URL without one.
    pub async fn open(
        target: &Target,
        token: Option<&str>,
        subscriptions: &[&str],
    ) -> Result<Conn, Failure> {
        let timeout = |_| {
            Failure::unreachable(format!(
                "the daemon at {} did not answer within {} s",
                target.describe(),
                CONNECT_TIMEOUT.as_secs()
            ))
        };
        tokio::time::timeout(
            CONNECT_TIMEOUT,
            Conn::open_inner(target, token, subscriptions),
        )
        .await
        .map_err(timeout)?
    }

    async fn open_inner(
        target: &Target,
        token: Option<&str>,
        subscriptions: &[&str],
    ) -> Result<Conn, Failure> {
        let credits = Arc::new(Semaphore::new(MAX_UNREAD_EVENTS));
        let config = ClientConfig {
            default_request_timeout: Some(Duration::from_secs(60)),
            subscription_buffer: 4 * MAX_UNREAD_EVENTS,
        };
        let client = match target {
            Target::Unix(path) => {
                let transport = UnixTransport::connect(path).await?;
                Client::connect(Gated::new(transport, credits.clone()), config).await
            }
            Target::Ws(url) => {
                let transport = connect_ws(url, token, target).await?;
                Client::connect(Gated::new(transport, credits.clone()), config).await
            }
        }
        .map_err(|e| Failure::unreachable(format!("{}: {e}", target.describe())))?;
        let events = client.events();
        let params = InitializeParams {
            channel: ROOT.into(),
            meta: None,
            protocol_versions: vec!["1.0.0".into()],
            client_id: CLIENT_ID.into(),
            initial_subscriptions: (!subscriptions.is_empty())
                .then(|| subscriptions.iter().map(|s| s.to_string()).collect()),
            locale: None,
            capabilities: None,
            client_info: Some(Implementation {
                name: "ahpty".into(),
                version: Some(env!("CARGO_PKG_VERSION").into()),
                title: None,
            }),
        };
        let init: InitializeResult =
            client
                .request("initialize", params)
                .await
                .map_err(|e| match e {
                    ClientError::Rpc(e) if e.code != -32000 => Failure::unreachable(format!(
                        "the daemon at {} refused to initialize: {}",
                        target.describe(),
                        e.message
                    )),
                    _ => Failure::unreachable(format!(
                        "the daemon at {} closed the connection during initialize",
                        target.describe()
                    )),
                })?;
        let name = init.server_info.as_ref().map(|i| i.name.as_str());
        if name != Some("ahpty") {
            return Err(Failure::unreachable(format!(
                "{} is an AHP host but not ahpty (serverInfo.name {:?}); the ahpty client \
                 subcommands need an ahpty daemon",
                target.describe(),
                name.unwrap_or("")
            )));
        }
        Ok(Conn {
            client,
            events,
            credits,
            pending: VecDeque::new(),
            discard: false,
        })
    }

    /// The next action envelope (any channel), `None` once the connection is gone.
    pub async fn next_event(&mut self) -> Option<ActionEnvelope> {
        if let Some(e) = self.pending.pop_front() {
            return Some(e);
        }
        self.recv_event().await
    }

    async fn recv_event(&mut self) -> Option<ActionEnvelope> {
        loop {
            let ev = self.events.recv().await?;
            self.credits.add_permits(1);
            if let SubscriptionEvent::Action(env) = ev.event {
                return Some(env);
            }
        }
    }

    /// Takes every envelope already received into the buffer, then removes and returns the
    /// first one matching `pred`.
    pub fn take_buffered(
        &mut self,
        pred: impl Fn(&ActionEnvelope) -> bool,
    ) -> Option<ActionEnvelope> {
        while let Some(Some(e)) = futures_util::FutureExt::now_or_never(self.recv_event()) {
            if !self.discard {
                self.pending.push_back(e);
            }
        }
        let i = self.pending.iter().position(pred)?;
        self.pending.remove(i)
    }

    /// From now on, envelopes that arrive while waiting for an answer are dropped (the caller
    /// is done with the stream, e.g. disposing of the terminal it watched).
    pub fn discard_events(&mut self) {
        self.discard = true;
        self.pending.clear();
    }

    /// A request. Envelopes arriving meanwhile are kept for [`Conn::next_event`] (so the flow
    /// gate never holds the answer back behind them).
    pub async fn call<R: DeserializeOwned>(
        &mut self,
        method: &str,
        params: Value,
    ) -> Result<R, ClientError> {
        let client = self.client.clone();
        let method = method.to_string();
        let answer = async move { client.request::<_, R>(&method, params).await };
        tokio::pin!(answer);
        loop {
            tokio::select! {
                biased;
                r = &mut answer => return r,
                ev = self.recv_event() => match ev {
                    Some(e) if !self.discard => self.pending.push_back(e),
                    Some(_) => {}
                    // The answer fails too now.
                    None => return answer.await,
                },
            }
        }
    }

    /// [`Conn::call`] with an error response as a one-line [`Failure`] (exit 1) carrying the
    /// daemon's message, a lost connection [`Failure::lost`].
    pub async fn request<R: DeserializeOwned>(
        &mut self,
        method: &str,
        params: Value,
    ) -> Result<R, Failure> {
        self.call(method, params).await.map_err(request_failure)
    }

    /// `ahpty/listTerminals`.
    pub async fn list(&mut self) -> Result<TerminalListing, Failure> {
        self.request(LIST_TERMINALS, json!({ "channel": ROOT }))
            .await
    }

    /// Closes the connection cleanly (a WebSocket close frame).
    pub async fn close(self) {
        let _ = tokio::time::timeout(Duration::from_secs(2), self.client.shutdown()).await;
    }
}

/// Maps a failed request to its one line.
pub fn request_failure(e: ClientError) -> Failure {
    match e {
        // What `ahp::Client` answers pending requests with when the connection ends (ahpty
        // itself never sends -32000).
        ClientError::Rpc(e) if e.code == -32000 => Failure::lost(),
        ClientError::Rpc(e) => Failure::failed(e.message),
        ClientError::Deserialization(e) => {
            Failure::failed(format!("unexpected answer from the daemon: {e}"))
        }
        ClientError::Cancelled => Failure::failed("the daemon did not answer in time"),
        _ => Failure::lost(),
    }
}

// ─── WebSocket over TCP ──────────────────────────────────────────────────────

async fn connect_ws(
    url: &str,
    token: Option<&str>,
    target: &Target,
) -> Result<ahp_ws::WebSocketTransport, Failure> {
    let mut request = url
        .into_client_request()
        .map_err(|e| Failure::unreachable(format!("{}: {e}", target.describe())))?;
    let has_token = url::Url::parse(url)
        .map(|u| u.query_pairs().any(|(k, _)| k == "tkn"))
        .unwrap_or(false);
    if let (false, Some(t)) = (has_token, token.map(str::trim).filter(|t| !t.is_empty())) {
        let value = http::HeaderValue::from_str(&format!("Bearer {t}")).map_err(|_| {
            Failure::unreachable(format!(
                "${TOKEN_ENV} is not a valid token (control characters)"
            ))
        })?;
        request
            .headers_mut()
            .insert(http::header::AUTHORIZATION, value);
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((ws, _)) => Ok(ahp_ws::WebSocketTransport::from_stream(ws)),
        Err(tungstenite::Error::Io(e)) if no_listener(&e) => Err(no_daemon(target, &e)),
        Err(tungstenite::Error::Http(resp)) => {
            let status = resp.status();
            let hint = match status.as_u16() {
                401 => format!(
                    ": the token is missing or wrong (put it in the URL as ?tkn=TOKEN or in \
                     ${TOKEN_ENV})"
                ),
                403 => ": the upgrade was refused (Origin or Host not allowed)".into(),
                503 => ": the daemon is at its connection limit".into(),
                _ => " (not an ahpty daemon?)".into(),
            };
            Err(Failure::unreachable(format!(
                "{} answered HTTP {status}{hint}",
                target.describe()
            )))
        }
        Err(e) => {
            let hint = match &e {
                tungstenite::Error::Tls(_) | tungstenite::Error::Io(_)
                    if url.starts_with("wss://") =>
                {
                    " (does the daemon serve TLS? Without --tls-cert it speaks plain ws://)"
                }
                tungstenite::Error::Protocol(_) | tungstenite::Error::HttpFormat(_) => {
                    " (this is not a WebSocket server, so not an ahpty daemon)"
                }
                _ => "",
            };
            Err(Failure::unreachable(format!(
                "cannot connect to {}: {e}{hint}",
                target.describe()
            )))
        }
    }
}

fn no_listener(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
    )
}

fn no_daemon(target: &Target, e: &io::Error) -> Failure {
    let what = match (target, e.kind()) {
        (Target::Unix(p), io::ErrorKind::NotFound) => format!("no socket at {}", p.display()),
        (_, io::ErrorKind::ConnectionRefused) => {
            format!("nothing listens at {}", target.describe())
        }
        _ => format!("{}: {e}", target.describe()),
    };
    let hint = match target {
        Target::Unix(p) if *p == default_socket_path() => {
            "start one with `ahpty serve`, or point --url / $AHPTY_URL at a running daemon"
        }
        _ => "start one with `ahpty serve`, or check --url / $AHPTY_URL",
    };
    Failure::unreachable(format!("no ahpty daemon is running ({what}); {hint}"))
}

// ─── WebSocket over a Unix socket ────────────────────────────────────────────

/// An `ahp::Transport` over a WebSocket on a Unix socket (what `ahp-ws` does for TCP).
pub struct UnixTransport {
    ws: WebSocketStream<UnixStream>,
}

impl UnixTransport {
    /// Connects to the socket at `path`, checks that the daemon runs as this user (or root),
    /// and performs the WebSocket handshake (`Host: localhost`).
    pub async fn connect(path: &Path) -> Result<UnixTransport, Failure> {
        let target = Target::Unix(path.to_path_buf());
        let stream = UnixStream::connect(path).await.map_err(|e| {
            if no_listener(&e) {
                no_daemon(&target, &e)
            } else if e.kind() == io::ErrorKind::PermissionDenied {
                Failure::unreachable(format!(
                    "cannot open {}: permission denied (the socket belongs to another user)",
                    path.display()
                ))
            } else {
                Failure::unreachable(format!("cannot connect to {}: {e}", path.display()))
            }
        })?;
        let me = effective_uid();
        match stream.peer_cred().map(|c| c.uid()) {
            Ok(uid) if uid == me || uid == 0 => {}
            Ok(uid) => {
                return Err(Failure::unreachable(format!(
                    "refusing {}: the process listening on it runs as uid {uid}, not as this \
                     user (uid {me})",
                    path.display()
                )))
            }
            Err(e) => {
                return Err(Failure::unreachable(format!(
                    "cannot check who listens on {}: {e}",
                    path.display()
                )))
            }
        }
        let (ws, _) = tokio_tungstenite::client_async("ws://localhost/", stream)
            .await
            .map_err(|e| match e {
                tungstenite::Error::Http(resp) => Failure::unreachable(format!(
                    "{} refused the WebSocket upgrade (HTTP {})",
                    target.describe(),
                    resp.status()
                )),
                e => Failure::unreachable(format!(
                    "{}: WebSocket handshake failed: {e}",
                    target.describe()
                )),
            })?;
        Ok(UnixTransport { ws })
    }
}

impl Transport for UnixTransport {
    async fn send(&mut self, msg: TransportMessage) -> Result<(), TransportError> {
        let frame = match msg {
            TransportMessage::Parsed(m) => Message::Text(
                serde_json::to_string(&m)
                    .map_err(|e| TransportError::Protocol(e.to_string()))?
                    .into(),
            ),
            TransportMessage::Text(s) => Message::Text(s.into()),
            TransportMessage::Binary(b) => Message::Binary(b.into()),
        };
        self.ws
            .send(frame)
            .await
            .map_err(|e| TransportError::Io(e.to_string()))
    }

    async fn recv(&mut self) -> Result<Option<TransportMessage>, TransportError> {
        loop {
            match self.ws.next().await {
                Some(Ok(Message::Close(frame))) => {
                    if let Some(f) = frame {
                        CLOSE_CODE.store(u16::from(f.code), std::sync::atomic::Ordering::Relaxed);
                    }
                    return Ok(None);
                }
                None => return Ok(None),
                Some(Err(e)) => return Err(TransportError::Io(e.to_string())),
                Some(Ok(Message::Text(s))) => {
                    return Ok(Some(TransportMessage::Text(s.to_string())))
                }
                Some(Ok(Message::Binary(b))) => {
                    return Ok(Some(TransportMessage::Binary(b.to_vec())))
                }
                // Pings are answered by tungstenite itself.
                Some(Ok(_)) => continue,
            }
        }
    }

    async fn close(&mut self) -> Result<(), TransportError> {
        self.ws
            .close(None)
            .await
            .map_err(|e| TransportError::Io(e.to_string()))
    }
}

// ─── Flow control ────────────────────────────────────────────────────────────

/// Wraps a transport so that every notification the `ahp` client fans out to its event
/// streams takes a credit from `credits` when read; [`Conn::next_event`] returns one per event
/// consumed. With no credit left, `recv` waits before reading the socket (cancel-safe: a
/// credit is only kept once a message was read).
pub struct Gated<T> {
    inner: T,
    credits: Arc<Semaphore>,
}

impl<T> Gated<T> {
    /// Wraps `inner`.
    pub fn new(inner: T, credits: Arc<Semaphore>) -> Gated<T> {
        Gated { inner, credits }
    }
}

/// The notification methods `ahp::Client` delivers to its event streams.
const FANNED_OUT: &[&str] = &[
    "action",
    "root/sessionAdded",
    "root/sessionRemoved",
    "root/sessionSummaryChanged",
    "auth/required",
];

fn is_event(msg: &TransportMessage) -> bool {
    #[derive(Deserialize)]
    struct Probe<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
        id: Option<serde::de::IgnoredAny>,
    }
    let probe = match msg {
        TransportMessage::Text(s) => serde_json::from_str::<Probe>(s).ok(),
        TransportMessage::Binary(b) => serde_json::from_slice::<Probe>(b).ok(),
        TransportMessage::Parsed(_) => None,
    };
    probe.is_some_and(|p| p.id.is_none() && p.method.is_some_and(|m| FANNED_OUT.contains(&&*m)))
}

impl<T: Transport> Transport for Gated<T> {
    async fn send(&mut self, msg: TransportMessage) -> Result<(), TransportError> {
        self.inner.send(msg).await
    }

    async fn recv(&mut self) -> Result<Option<TransportMessage>, TransportError> {
        let permit = self
            .credits
            .acquire()
            .await
            .map_err(|_| TransportError::Closed)?;
        let msg = self.inner.recv().await?;
        if msg.as_ref().is_some_and(is_event) {
            permit.forget();
        }
        Ok(msg)
    }

    async fn close(&mut self) -> Result<(), TransportError> {
        self.inner.close().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(
            Target::parse("unix:/tmp/x.sock").unwrap(),
            Target::Unix("/tmp/x.sock".into())
        );
        assert!(matches!(
            Target::parse("ws://127.0.0.1:8765?tkn=abc").unwrap(),
            Target::Ws(_)
        ));
        assert!(Target::parse("http://x").is_err());
        assert!(Target::parse("unix:").is_err());
        assert_eq!(
            Target::parse("ws://127.0.0.1:8765/?tkn=secret&x=1")
                .unwrap()
                .describe(),
            "ws://127.0.0.1:8765/?x=1"
        );
        assert!(!Target::parse("ws://h:1?tkn=secret")
            .unwrap()
            .describe()
            .contains("secret"));
    }

    #[test]
    fn events_are_recognised() {
        let text = |s: &str| TransportMessage::Text(s.into());
        assert!(is_event(&text(
            r#"{"jsonrpc":"2.0","method":"action","params":{"channel":"x"}}"#
        )));
        assert!(!is_event(&text(
            r#"{"jsonrpc":"2.0","id":1,"result":null}"#
        )));
        assert!(!is_event(&text(
            r#"{"jsonrpc":"2.0","id":1,"method":"resourceRead","params":{}}"#
        )));
        assert!(!is_event(&text(r#"{"jsonrpc":"2.0","method":"other"}"#)));
    }
}
