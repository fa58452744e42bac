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

// Bursts of 300 handshakes at once against `--max-connections 8`, for two seconds:
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
        // One burst every 250 ms (each takes tens of ms), so that the bystander measures the
        // attack rather than this process keeping the machine's two cores busy.
        let mut pace = tokio::time::interval(std::time::Duration::from_millis(250));
        while bursts < 4 || t0.elapsed() < std::time::Duration::from_secs(2) {
            pace.tick().await;
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

// ─── The default socket's directory taken by another user ───────────────────────────────

/// The default socket's directory of a daemon whose `$HOME` is `home`, created first by
/// "another user" (uid 65534, nobody) as a squatter would; returns it.
fn squatted_socket_dir(home: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    let dir = runtime_dir(home).join("ahpty");
    std::fs::DirBuilder::new().mode(0o777).create(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).expect("chown to nobody");
    dir
}

// Another user created the default socket's directory first: `ahpty serve` leaves the default
// socket out with a warning that says what to do, and serves on TCP; nothing is created in
// that directory. A socket named with --socket in it stays a refusal to start.
spec!(
    a_default_socket_dir_of_another_user_is_skipped_with_a_warning,
    async {
        let home = tempfile::tempdir().unwrap();
        let dir = squatted_socket_dir(home.path());
        let d = Daemon::builder().home_at(home.path()).start();
        let (mut raw, _) = Raw::connect_init(&d.url(), "squatted", &[]).await;
        let r = raw.request("ping", serde_json::json!({})).await;
        assert!(r.get("error").is_none(), "{r}");
        let log = d.stderr();
        let warning = log
            .lines()
            .find(|l| l.contains("WARN") && l.contains("without the default socket"))
            .unwrap_or_else(|| panic!("no warning about the default socket:\n{log}"));
        assert!(
            warning.contains(&dir.display().to_string())
                && warning.contains("uid 65534")
                && warning.contains("--socket PATH"),
            "{warning}"
        );
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "something was created in the other user's directory"
        );
        drop(raw);
        drop(d);

        let named = dir.join("mine.sock");
        let (code, err) = Daemon::builder()
            .home_at(home.path())
            .args(&["--socket", named.to_str().unwrap()])
            .refused();
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains(&dir.display().to_string()) && err.contains("uid 65534"),
            "{err}"
        );
    }
);

// ─── A second daemon ────────────────────────────────────────────────────────────────────

// A second `ahpty serve` that runs into the first one everywhere (the same TCP port, the same
// default socket, the same state directory) is told about all three in one go.
spec!(a_second_daemon_hears_every_conflict_at_once, async {
    let first = Daemon::start();
    let (code, err) = Daemon::bare()
        .args(&[
            "--listen",
            first.addr(),
            "--shell",
            "/bin/bash",
            "--no-auth",
        ])
        .home_of(&first)
        .refused();
    assert_eq!(code, Some(1), "{err}");
    let socket = first.socket().display().to_string();
    for (what, needle) in [
        (
            "the TCP port",
            format!("cannot listen on {}: address already in use", first.addr()),
        ),
        ("the socket", format!("cannot listen on unix:{socket}")),
        (
            "the socket's advice",
            "--socket PATH or --no-socket".to_string(),
        ),
        ("the state directory", format!("pid {}", first.pid())),
    ] {
        assert!(
            err.contains(&needle),
            "{what} is not reported ({needle}):\n{err}"
        );
    }
    // The first daemon is untouched and still serves on its socket.
    assert!(first.socket().exists());
    let (mut raw, _) = Raw::connect_init(&first.url(), "first", &[]).await;
    let r = raw.request("ping", serde_json::json!({})).await;
    assert!(r.get("error").is_none(), "{r}");
});
