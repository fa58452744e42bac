//! Checks on the HTTP upgrade request, before any AHP traffic and before any pty exists:
//! cross-site protection (403) and the token (401, see [`super::auth`]).
//!
//! A browser page can open a WebSocket to localhost; these checks stop it (docs/security.md):
//! - an `Origin` header not in the allow-list → 403 (VS Code desktop's
//!   `vscode-file://vscode-app` is allowed by default; clients that send no `Origin`, such as
//!   the Rust SDK or websocat, are unaffected);
//! - when bound to loopback, a `Host` header that is not a loopback name or address → 403
//!   (DNS rebinding).
//!
//! - on TCP listeners with authentication, a request without the token → 401.
//!
//! Order: Origin, Host, token. Pure: reads headers, touches no state.

use std::net::IpAddr;

use http::StatusCode;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request};

use super::auth;
use crate::config::{Token, VSCODE_DESKTOP_ORIGIN};

/// What the upgrade request must satisfy.
#[derive(Debug, Clone)]
pub struct UpgradePolicy {
    allowed_origins: Vec<String>,
    check_host: bool,
    token: Option<Token>,
}

/// Why an upgrade is refused, and with which HTTP status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// 403 (Origin/Host), 401 (token) or 503 (too many connections).
    pub status: StatusCode,
    /// One line for the peer and the log; never holds a token.
    pub reason: String,
}

impl Refusal {
    /// A 403 refusal.
    pub fn forbidden(reason: impl Into<String>) -> Refusal {
        Refusal {
            status: StatusCode::FORBIDDEN,
            reason: reason.into(),
        }
    }

    /// The HTTP answer for this refusal (401 carries `WWW-Authenticate: Bearer`).
    pub fn response(&self) -> ErrorResponse {
        let mut response = ErrorResponse::new(Some(format!("{}\n", self.reason)));
        *response.status_mut() = self.status;
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                http::header::WWW_AUTHENTICATE,
                http::HeaderValue::from_static("Bearer realm=\"ahpty\""),
            );
        }
        response
    }
}

impl UpgradePolicy {
    /// Allows [`VSCODE_DESKTOP_ORIGIN`] plus `extra_origins`; checks `Host` when `check_host`
    /// (loopback TCP listeners and Unix sockets); requires `token` when given.
    pub fn new(extra_origins: &[String], check_host: bool, token: Option<Token>) -> Self {
        let mut allowed_origins = vec![VSCODE_DESKTOP_ORIGIN.to_string()];
        allowed_origins.extend(
            extra_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase()),
        );
        UpgradePolicy {
            allowed_origins,
            check_host,
            token,
        }
    }

    /// `Ok` to accept the upgrade, or the refusal.
    pub fn check(&self, request: &Request) -> Result<(), Refusal> {
        // Every copy of a repeated header is checked, not just the first.
        for origin in request.headers().get_all(http::header::ORIGIN) {
            let origin = origin
                .to_str()
                .map_err(|_| Refusal::forbidden("Origin header is not valid text"))?;
            let normalized = origin.trim_end_matches('/').to_ascii_lowercase();
            if !self.allowed_origins.contains(&normalized) {
                return Err(Refusal::forbidden(format!(
                    "Origin {origin:?} is not allowed (allow it with --allow-origin)"
                )));
            }
        }
        if self.check_host {
            for host in request.headers().get_all(http::header::HOST) {
                let host = host
                    .to_str()
                    .map_err(|_| Refusal::forbidden("Host header is not valid text"))?;
                if !is_loopback_host(host) {
                    return Err(Refusal::forbidden(format!(
                        "Host {host:?} is not a loopback name or address"
                    )));
                }
            }
            // An absolute-form request target (`GET http://name/ …`) names a host too.
            if let Some(authority) = request.uri().authority() {
                if !is_loopback_host(authority.as_str()) {
                    return Err(Refusal::forbidden(format!(
                        "request target host {:?} is not a loopback name or address",
                        authority.as_str()
                    )));
                }
            }
        }
        if let Some(token) = &self.token {
            auth::check_token(token, request).map_err(|f| Refusal {
                status: StatusCode::UNAUTHORIZED,
                reason: f.reason().to_string(),
            })?;
        }
        Ok(())
    }
}

/// `localhost`, `*.localhost`, 127.0.0.0/8 or `::1`, with an optional port; also the
/// unspecified addresses `0.0.0.0` and `[::]`, which some local clients send (websocat over a
/// Unix socket) and which no DNS-rebinding page can present as its own host.
pub fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((addr, port)) if port.is_empty() || is_port(port) => addr,
            _ => return false,
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if is_port(port) => name,
            Some(_) => return false,
            None => host,
        }
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    name.parse::<IpAddr>()
        .is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified())
}

fn is_port(s: &str) -> bool {
    s.strip_prefix(':')
        .unwrap_or(s)
        .bytes()
        .all(|b| b.is_ascii_digit())
        && !s.trim_start_matches(':').is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for ok in [
            "localhost",
            "localhost:8765",
            "127.0.0.1",
            "127.0.0.1:1",
            "127.1.2.3:80",
            "[::1]",
            "[::1]:8765",
            "0.0.0.0",
            "[::]:80",
            "LOCALHOST:1",
            "app.localhost:3",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "attacker.example",
            "attacker.example:8765",
            "10.0.0.1:80",
            "[::2]:1",
            "localhost.evil.com",
            "127.0.0.1:x",
            "[::1]x",
            "",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }

    fn request(headers: &[(&str, &str)]) -> Request {
        let mut b = Request::builder().uri("/");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn repeated_headers_and_absolute_targets() {
        let listen_loopback = true;
        let p = UpgradePolicy::new(&[], listen_loopback, None);
        let mut b = Request::builder().uri("/");
        b = b.header("Origin", "vscode-file://vscode-app");
        b = b.header("Origin", "https://evil.example");
        assert!(p.check(&b.body(()).unwrap()).is_err());
        let mut b = Request::builder().uri("/");
        b = b.header("Host", "localhost");
        b = b.header("Host", "attacker.example");
        assert!(p.check(&b.body(()).unwrap()).is_err());
        let r = Request::builder()
            .uri("http://attacker.example/?tkn=x")
            .header("Host", "localhost")
            .body(())
            .unwrap();
        assert!(p.check(&r).is_err());
        let r = Request::builder()
            .uri("http://127.0.0.1:8765/")
            .body(())
            .unwrap();
        assert!(p.check(&r).is_ok());
    }

    #[test]
    fn origins() {
        let p = UpgradePolicy::new(&["http://localhost:5173".into()], true, None);
        assert!(p.check(&request(&[])).is_ok());
        assert!(p
            .check(&request(&[("Origin", "vscode-file://vscode-app")]))
            .is_ok());
        assert!(p
            .check(&request(&[("Origin", "http://LOCALHOST:5173/")]))
            .is_ok());
        assert!(p
            .check(&request(&[("Origin", "https://evil.example")]))
            .is_err());
        assert!(p.check(&request(&[("Origin", "null")])).is_err());
        assert!(p
            .check(&request(&[("Origin", "http://localhost:3000")]))
            .is_err());
        assert!(p.check(&request(&[("Host", "attacker.example")])).is_err());
        assert!(p.check(&request(&[("Host", "localhost:8765")])).is_ok());
    }

    #[test]
    fn token_after_origin() {
        let t = Token::new("abcdefghijklmnopqrstuvwxyz".into()).unwrap();
        let p = UpgradePolicy::new(&[], true, Some(t));
        let status = |r: Request| p.check(&r).err().map(|e| e.status.as_u16());
        assert_eq!(status(request(&[])), Some(401));
        assert_eq!(
            status(request(&[("Origin", "https://evil.example")])),
            Some(403)
        );
        assert_eq!(
            status(request(&[(
                "Authorization",
                "Bearer abcdefghijklmnopqrstuvwxyz"
            )])),
            None
        );
        assert_eq!(
            status(request(&[(
                "Authorization",
                "Bearer abcdefghijklmnopqrstuvwxyZ"
            )])),
            Some(401)
        );
        let r = p.check(&request(&[])).unwrap_err().response();
        assert!(r.headers().contains_key(http::header::WWW_AUTHENTICATE));
    }
}
