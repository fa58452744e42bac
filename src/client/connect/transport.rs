//! The daemon's address ([`Target`]: `ws://`, `wss://` or `unix:`, from `--url`/`$AHPTY_URL`
//! or the default socket) and the WebSocket under the `ahp` client ([`WsTransport`]): opening
//! it with the token, and the one-line failures when nobody listens there.
//!
//! May touch: the socket it opens (TCP, TLS or Unix) and the environment (`$AHPTY_URL`,
//! `$AHPTY_TOKEN`, read).

use super::*;

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

/// What [`Conn::next`] yields.
// Nearly every event is an action: boxing it would cost an allocation each.
pub(crate) async fn connect_ws(
    url: &str,
    token: Option<&str>,
    target: &Target,
) -> Result<WsTransport<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>, Failure> {
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
        Ok((ws, _)) => Ok(WsTransport { ws }),
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

pub(crate) fn no_listener(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
    )
}

pub(crate) fn no_daemon(target: &Target, e: &io::Error) -> Failure {
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

// ─── The transport ───────────────────────────────────────────────────────────

/// An `ahp::Transport` over a WebSocket on any stream (TCP, TLS or a Unix socket): what
/// `ahp-ws` does for TCP, except that the code of the daemon's close frame is kept in
/// [`CLOSE_CODE`].
pub struct WsTransport<S> {
    ws: WebSocketStream<S>,
}

impl WsTransport<UnixStream> {
    /// Connects to the socket at `path`, checks that the daemon runs as this user (or root),
    /// and performs the WebSocket handshake (`Host: localhost`).
    pub async fn connect_unix(path: &Path) -> Result<WsTransport<UnixStream>, Failure> {
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
        Ok(WsTransport { ws })
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Transport for WsTransport<S> {
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
                        CLOSE_CODE.store(u16::from(f.code), Ordering::Relaxed);
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
}
