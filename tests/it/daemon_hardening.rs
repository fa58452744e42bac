//! The daemon against its own neighbourhood: what a program in one of its terminals can read
//! of it (`/proc/PID/environ`), another user who got to the default socket's directory first,
//! a burst of handshakes beyond every limit (each one answered, 101 or 503, never a bare
//! close), and a second daemon told every conflict with the first at once.

use std::time::Instant;

use crate::support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

// ─── A burst of handshakes ──────────────────────────────────────────────────────────────

/// What a raw TCP handshake got back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Answer {
    /// HTTP status of the response.
    Status(u16),
    /// The connection closed with no byte of an answer.
    BareClose,
    /// The connection was reset (or failed otherwise) before an answer was read.
    Reset,
    /// No answer within the timeout.
    Silent,
}

const UPGRADE_REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n\
    Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
    Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";

/// Connects to `addr`, sends a WebSocket upgrade request and reads the status line. A 101
/// connection is returned open (so it keeps its place under the connection limit).
async fn handshake(addr: std::net::SocketAddr) -> (Answer, Option<tokio::net::TcpStream>) {
    let read = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(UPGRADE_REQUEST).await?;
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        Ok::<_, std::io::Error>((got, s))
    };
    match tokio::time::timeout(RPC_TIMEOUT, read).await {
        Err(_) => (Answer::Silent, None),
        Ok(Err(_)) => (Answer::Reset, None),
        Ok(Ok((got, _))) if got.is_empty() => (Answer::BareClose, None),
        Ok(Ok((got, s))) => {
            let text = String::from_utf8_lossy(&got);
            let status = text
                .strip_prefix("HTTP/1.1 ")
                .and_then(|t| t.get(..3))
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            (Answer::Status(status), (status == 101).then_some(s))
        }
    }
}

// Bursts of 300 handshakes at once against `--max-connections 8`, for a second or more:
// beyond the connection limit and the pending-handshake table alike, every one is answered,
// 101 or 503 (a client can tell "busy, retry" from a crash); none is closed bare or reset.
// A bystander's ping and keystroke echo stay fast meanwhile.
measured!(
    a_burst_of_handshakes_is_answered_101_or_503_every_time,
    async {
        const BURST: usize = 300;
        const MAX_CONNECTIONS: usize = 8;
        let d = Daemon::start_with(&["--max-connections", &MAX_CONNECTIONS.to_string()]);
        let addr: std::net::SocketAddr = d.addr().parse().unwrap();
        let bystander = Bystander::start_without_new_connections(&d.url());
        let t0 = Instant::now();
        let mut bursts = 0;
        while bursts < 3 || t0.elapsed() < std::time::Duration::from_secs(1) {
            bursts += 1;
            let started = Instant::now();
            let tasks: Vec<_> = (0..BURST).map(|_| tokio::spawn(handshake(addr))).collect();
            let mut answers = std::collections::HashMap::<Answer, usize>::new();
            let mut upgraded = Vec::new();
            for t in tasks {
                let (answer, open) = t.await.unwrap();
                *answers.entry(answer).or_default() += 1;
                upgraded.extend(open);
            }
            let count = |a: Answer| answers.get(&a).copied().unwrap_or(0);
            let (ok, busy) = (count(Answer::Status(101)), count(Answer::Status(503)));
            eprintln!(
                "burst {bursts}: {BURST} handshakes in {:?}: {answers:?}",
                started.elapsed()
            );
            assert_eq!(
                ok + busy,
                BURST,
                "burst {bursts}: every handshake must get 101 or 503: {answers:?}"
            );
            // The bystander holds one connection.
            assert!(ok < MAX_CONNECTIONS, "over the limit: {answers:?}");
        }
        let samples = bystander.finish().since(t0);
        samples.assert_fast(&format!("{bursts} bursts of {BURST} handshakes"), 5);
        assert!(!d.stderr().contains("panicked"), "{}", d.stderr());
    }
);

// ─── The token out of /proc/PID/environ ─────────────────────────────────────────────────

/// The daemon's own environment block as the kernel shows it to the same user's programs.
fn environ_of(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).expect("read /proc/PID/environ");
    String::from_utf8_lossy(&raw).replace('\0', "\n")
}

// A token given in $AHPTY_TOKEN works for connecting, but the daemon's /proc/PID/environ
// (readable by any program in one of its terminals) no longer holds it, neither after start
// nor after a live upgrade re-executed the daemon.
spec!(the_environment_token_is_not_in_proc_environ, async {
    let secret = "environ-token-0123456789-abcdef";
    let d = Daemon::bare()
        .args(&["--listen", "127.0.0.1:0", "--shell", "/bin/bash"])
        .env("AHPTY_TOKEN", secret)
        .start();
    let url = format!("{}?tkn={secret}", d.url());
    for when in ["after start", "after a live upgrade"] {
        if when == "after a live upgrade" {
            let out = crate::upgrade::upgrade(d.home()).await;
            assert_eq!(out.code, Some(0), "{out:?}");
        }
        let (mut raw, _) = Raw::connect_init(&url, "environ", &[]).await;
        let r = raw.request("ping", serde_json::json!({})).await;
        assert!(r.get("error").is_none(), "{when}: {r}");
        let environ = environ_of(d.pid());
        assert!(
            !environ.contains(secret),
            "{when}: the token is in /proc/{}/environ:\n{environ}",
            d.pid()
        );
    }
    assert!(!d.stderr().contains(secret), "{}", d.stderr());
});
