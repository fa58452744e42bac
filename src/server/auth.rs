//! Token authentication on the WebSocket upgrade, and the start-up checks that decide which
//! listeners may run without one.
//!
//! A TCP peer must present the token either as the `tkn` query parameter (what VS Code sends:
//! `ws://127.0.0.1:8765?tkn=TOKEN`) or as `Authorization: Bearer TOKEN` (what a reverse proxy
//! should use: proxies log query strings). Candidates are compared with the token in constant
//! time (only the length can leak). Anything else — a cookie, another query key, a fragment —
//! is not looked at. The token's value is never logged.
//!
//! Pure checks on values; touches nothing.

use std::borrow::Cow;
use std::net::SocketAddr;

use percent_encoding::percent_decode_str;
use subtle::ConstantTimeEq;
use tokio_tungstenite::tungstenite::handshake::server::Request;

use crate::config::{Auth, Config, Listen, Token};

/// Why a request carries no acceptable token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthFailure {
    /// Neither `?tkn=` nor `Authorization: Bearer` is present.
    Missing,
    /// A token was presented and none matched.
    Wrong,
}

impl AuthFailure {
    /// The reason given to the peer (and logged); never contains a token.
    pub fn reason(self) -> &'static str {
        match self {
            AuthFailure::Missing => {
                "a token is required: connect with ?tkn=TOKEN or send Authorization: Bearer TOKEN"
            }
            AuthFailure::Wrong => "wrong token",
        }
    }
}

/// Checks that `request` presents `token` (in constant time per candidate).
pub fn check_token(token: &Token, request: &Request) -> Result<(), AuthFailure> {
    let expected = token.expose().as_bytes();
    let mut presented = false;
    let mut ok = subtle::Choice::from(0u8);
    for candidate in presented_tokens(request) {
        presented = true;
        ok |= expected.ct_eq(candidate.as_bytes());
    }
    if bool::from(ok) {
        Ok(())
    } else if presented {
        Err(AuthFailure::Wrong)
    } else {
        Err(AuthFailure::Missing)
    }
}

/// Every token the request presents: each `tkn` query value (percent-decoded; `+` is kept as
/// is) and each `Authorization: Bearer` credential.
pub fn presented_tokens(request: &Request) -> Vec<Cow<'_, str>> {
    let mut out = Vec::new();
    if let Some(query) = request.uri().query() {
        for pair in query.split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if key == "tkn" {
                out.push(percent_decode_str(value).decode_utf8_lossy());
            }
        }
    }
    for value in request.headers().get_all(http::header::AUTHORIZATION) {
        let Ok(value) = value.to_str() else { continue };
        let value = value.trim();
        let Some((scheme, credential)) = value.split_once(' ') else {
            continue;
        };
        if scheme.eq_ignore_ascii_case("bearer") {
            out.push(Cow::Borrowed(credential.trim()));
        }
    }
    out
}

/// What a request line may show in a log: the path, never the query (it may hold the token).
pub fn redacted_target(request: &Request) -> String {
    let uri = request.uri();
    match uri.query() {
        Some(_) => format!("{}?<redacted>", uri.path()),
        None => uri.path().to_string(),
    }
}

/// Checks the listener/authentication combination before anything is bound. Returns the
/// warnings to log, or the reason to refuse to start.
///
/// - `--no-auth` is refused unless every TCP listener is on a loopback address;
/// - a non-loopback TCP listener needs a configured token (`--token-file` or `AHPTY_TOKEN`):
///   a generated one would be printed on stdout and change at every start;
/// - a plain (non-TLS) non-loopback listener is allowed with a warning;
/// - TLS files without any TCP listener are refused.
pub fn check_config(config: &Config) -> Result<Vec<String>, String> {
    if config.listen.is_empty() {
        return Err("nothing to listen on: give at least one --listen".into());
    }
    let tcp: Vec<SocketAddr> = config
        .listen
        .iter()
        .filter_map(|l| match l {
            Listen::Tcp(a) => Some(*a),
            Listen::Unix(_) => None,
        })
        .collect();
    let mut warnings = Vec::new();
    for addr in tcp.iter().filter(|a| !a.ip().is_loopback()) {
        match &config.auth {
            Auth::Disabled => {
                return Err(format!(
                    "--no-auth is only allowed on loopback addresses, and {addr} is reachable \
                     from other machines: give a token with --token-file PATH or AHPTY_TOKEN"
                ))
            }
            Auth::Generate => {
                return Err(format!(
                    "refusing to listen on {addr} without a configured token: a non-loopback \
                     address is reachable from other machines. Give a token with --token-file \
                     PATH or AHPTY_TOKEN, and use --tls-cert/--tls-key (or an SSH tunnel to a \
                     Unix socket, see docs/security.md)"
                ))
            }
            Auth::Token { .. } => {}
        }
        if config.tls.is_none() {
            warnings.push(format!(
                "listening on {addr} without TLS: the token and all terminal traffic cross the \
                 network in clear text; use --tls-cert/--tls-key or an SSH tunnel"
            ));
        }
    }
    if config.tls.is_some() && tcp.is_empty() {
        return Err("--tls-cert/--tls-key apply to TCP listeners, and there is none".into());
    }
    if config.auth == Auth::Disabled && !tcp.is_empty() {
        warnings.push(
            "authentication is disabled (--no-auth): every local user and process can open a \
             shell through the TCP listener"
                .into(),
        );
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(uri: &str, headers: &[(&str, &str)]) -> Request {
        let mut b = Request::builder().uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap()
    }

    fn token() -> Token {
        Token::new("0123456789abcdef-+/=".into()).unwrap()
    }

    #[test]
    fn accepted_forms() {
        let t = token();
        assert_eq!(
            check_token(&t, &request("/?tkn=0123456789abcdef-+/=", &[])),
            Ok(())
        );
        assert_eq!(
            check_token(&t, &request("/?tkn=0123456789abcdef-%2B%2F%3D", &[])),
            Ok(())
        );
        assert_eq!(
            check_token(&t, &request("/x?a=1&tkn=0123456789abcdef-+/=&b", &[])),
            Ok(())
        );
        assert_eq!(
            check_token(
                &t,
                &request("/", &[("Authorization", "Bearer 0123456789abcdef-+/=")])
            ),
            Ok(())
        );
        assert_eq!(
            check_token(
                &t,
                &request("/", &[("Authorization", "bearer  0123456789abcdef-+/= ")])
            ),
            Ok(())
        );
    }

    #[test]
    fn refused_forms() {
        let t = token();
        assert_eq!(
            check_token(&t, &request("/", &[])),
            Err(AuthFailure::Missing)
        );
        assert_eq!(
            check_token(&t, &request("/?token=0123456789abcdef-+/=", &[])),
            Err(AuthFailure::Missing)
        );
        assert_eq!(
            check_token(&t, &request("/", &[("Cookie", "tkn=0123456789abcdef-+/=")])),
            Err(AuthFailure::Missing)
        );
        assert_eq!(
            check_token(
                &t,
                &request("/", &[("Authorization", "Basic 0123456789abcdef-+/=")])
            ),
            Err(AuthFailure::Missing)
        );
        assert_eq!(
            check_token(&t, &request("/?tkn=0123456789abcdef-+/-", &[])),
            Err(AuthFailure::Wrong)
        );
        assert_eq!(
            check_token(&t, &request("/?tkn=", &[])),
            Err(AuthFailure::Wrong)
        );
        assert_eq!(
            check_token(&t, &request("/?TKN=0123456789abcdef-+/=", &[])),
            Err(AuthFailure::Missing)
        );
    }

    #[test]
    fn redaction() {
        assert_eq!(
            redacted_target(&request("/a?tkn=secret", &[])),
            "/a?<redacted>"
        );
        assert_eq!(redacted_target(&request("/a", &[])), "/a");
        assert!(!format!("{:?}", token()).contains("0123"));
    }

    #[test]
    fn start_up_checks() {
        let mut c = Config {
            listen: vec![Listen::Tcp("0.0.0.0:0".parse().unwrap())],
            ..Config::default()
        };
        assert!(check_config(&c).unwrap_err().contains("--token-file"));
        c.auth = Auth::Disabled;
        assert!(check_config(&c).unwrap_err().contains("--no-auth"));
        c.auth = Auth::Token {
            token: token(),
            source: "test".into(),
        };
        assert_eq!(check_config(&c).unwrap().len(), 1);
        c.listen = vec![Listen::Tcp("127.0.0.1:0".parse().unwrap())];
        c.auth = Auth::Disabled;
        assert_eq!(check_config(&c).unwrap().len(), 1);
        c.listen = vec![Listen::Unix("/tmp/x.sock".into())];
        assert!(check_config(&c).unwrap().is_empty());
        c.listen.clear();
        assert!(check_config(&c).is_err());
    }
}
