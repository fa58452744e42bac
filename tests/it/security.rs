//! Security controls on real sockets: token authentication (generated, file, environment),
//! the Origin/Host checks with the token dimension, start-up refusals, the Unix socket
//! listener, TLS, the connection limit, the handshake timeout and dead-peer pings.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

// ─── A daemon started with exactly the given arguments ──────────────────────────────────

/// `ahpty serve ARGS` (exactly these) with `env`, logging at trace level (where a leaked
/// secret would show).
fn serve(args: &[&str], env: &[(&str, &str)]) -> Daemon {
    let mut b = Daemon::bare().args(args).log("trace");
    for (k, v) in env {
        b = b.env(k, v);
    }
    b.spawn()
}

/// Runs `ahpty serve ARGS` expecting it to refuse to start; returns (exit code, stderr).
fn run_to_exit(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut b = Daemon::bare().args(args).log("trace");
    for (k, v) in env {
        b = b.env(k, v);
    }
    b.refused()
}

// ─── Upgrade helpers ────────────────────────────────────────────────────────────────────

/// Sends one request over any WebSocket and returns its response (skipping notifications).
async fn ws_request<S>(
    ws: &mut tokio_tungstenite::WebSocketStream<S>,
    id: u64,
    method: &str,
    params: Value,
) -> Value
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    ws.send(Message::Text(msg.to_string().into()))
        .await
        .unwrap();
    within(&format!("the response to {method}"), SHELL_TIMEOUT, async {
        loop {
            let m = ws
                .next()
                .await
                .expect("connection closed")
                .expect("ws error");
            if let Message::Text(t) = m {
                let v: Value = serde_json::from_str(t.as_str()).unwrap();
                if v.get("id") == Some(&json!(id)) {
                    return v;
                }
            }
        }
    })
    .await
}

fn init_params(client: &str) -> Value {
    json!({"channel": ROOT, "protocolVersions": ["1.0.0"], "clientId": client})
}

// ─── Tokens ─────────────────────────────────────────────────────────────────────────────

spec!(generated_token_is_printed_once_and_required, async {
    let p = serve(&["--listen", "127.0.0.1:0", "--shell", "/bin/bash"], &[]);
    let addr = p.addr().to_string();
    let line = p.stdout_line();
    // The form VS Code's SSH flow scrapes: no `/` before `?`.
    let prefix = format!("ws://{addr}?tkn=");
    assert!(line.starts_with(&prefix), "stdout line {line:?}");
    let token = line[prefix.len()..].to_string();
    assert_eq!(token.len(), 64, "{token}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
    let base = format!("ws://{addr}");
    let ok = format!("{base}/?tkn={token}");
    let mut wrong = token.clone();
    let last = wrong.pop().unwrap();
    wrong.push(if last == '0' { '1' } else { '0' });
    let bearer = format!("Bearer {token}");

    // Refusals, all before the upgrade.
    assert_eq!(upgrade_status(&base, &[]).await, Err(401), "no token");
    assert_eq!(
        upgrade_status(&format!("{base}/?tkn={wrong}"), &[]).await,
        Err(401)
    );
    assert_eq!(
        upgrade_status(&format!("{base}/?tkn="), &[]).await,
        Err(401)
    );
    assert_eq!(
        upgrade_status(&format!("{base}/?token={token}"), &[]).await,
        Err(401)
    );
    assert_eq!(
        upgrade_status(&format!("{base}/?TKN={token}"), &[]).await,
        Err(401)
    );
    assert_eq!(
        upgrade_status(&base, &[("Cookie", &format!("tkn={token}"))]).await,
        Err(401)
    );
    assert_eq!(
        upgrade_status(&base, &[("Authorization", &format!("Basic {token}"))]).await,
        Err(401)
    );
    assert_eq!(
        upgrade_status(&base, &[("Authorization", &format!("Bearer {wrong}"))]).await,
        Err(401)
    );
    // Cross-site checks stay on with a valid token.
    for origin in ["https://evil.example", "null", "http://localhost:5173"] {
        assert_eq!(
            upgrade_status(&ok, &[("Origin", origin)]).await,
            Err(403),
            "{origin}"
        );
    }
    assert_eq!(
        upgrade_status(&ok, &[("Host", "attacker.example")]).await,
        Err(403)
    );
    assert_eq!(
        upgrade_status(
            &ok,
            &[
                ("Host", "attacker.example:80"),
                ("Origin", "http://attacker.example")
            ]
        )
        .await,
        Err(403)
    );
    // A hostile Origin without a token is refused too (403 first).
    assert_eq!(
        upgrade_status(&base, &[("Origin", "https://evil.example")]).await,
        Err(403)
    );
    // Refusals never created a pty.
    assert!(
        children(p.pid() as i32).is_empty(),
        "{:?}",
        children(p.pid() as i32)
    );

    // Both accepted forms, with and without VS Code's Origin, with and without a path.
    assert_eq!(upgrade_status(&ok, &[]).await, Ok(()));
    assert_eq!(
        upgrade_status(&format!("{base}?tkn={token}"), &[]).await,
        Ok(())
    );
    assert_eq!(
        upgrade_status(&ok, &[("Origin", "vscode-file://vscode-app")]).await,
        Ok(())
    );
    assert_eq!(
        upgrade_status(&base, &[("Authorization", &bearer)]).await,
        Ok(())
    );
    assert_eq!(
        upgrade_status(
            &format!("{base}/some/path"),
            &[
                ("Authorization", &bearer),
                ("Origin", "vscode-file://vscode-app")
            ]
        )
        .await,
        Ok(())
    );

    // And the connection works end to end.
    let (mut raw, _) = Raw::connect_init(&format!("{base}?tkn={token}"), "tok", &[]).await;
    let t = term_uri("tok");
    raw.create_terminal(&t).await;
    raw.subscribe(&t).await;
    raw.type_text(&t, "echo ok-$((40+2))\r").await;
    raw.wait_data(&t, "ok-42", SHELL_TIMEOUT).await;

    // Printed once on stdout; never in the log (even at trace level).
    assert_eq!(p.stdout().matches(&token).count(), 1, "{}", p.stdout());
    let log = p.stderr();
    assert!(!log.contains(&token), "token in the log:\n{log}");
    assert!(
        !log.contains(&token[..16]),
        "token prefix in the log:\n{log}"
    );
    assert!(log.contains("WebSocket upgrade refused"), "{log}");
    assert!(log.contains("?<redacted>"), "{log}");
});

spec!(token_from_file_and_from_the_environment, async {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    let secret = "file-token-0123456789-abcdef";
    std::fs::write(&file, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let p = serve(
        &[
            "--listen",
            "127.0.0.1:0",
            "--shell",
            "/bin/bash",
            "--token-file",
            file.to_str().unwrap(),
        ],
        &[],
    );
    let addr = p.addr().to_string();
    // A configured token is not printed.
    assert_eq!(p.stdout_line(), format!("ws://{addr}"));
    let base = format!("ws://{addr}");
    assert_eq!(upgrade_status(&base, &[]).await, Err(401));
    assert_eq!(
        upgrade_status(&format!("{base}?tkn={secret}"), &[]).await,
        Ok(())
    );
    assert_eq!(
        upgrade_status(&format!("{base}?tkn={secret}x"), &[]).await,
        Err(401)
    );
    assert!(!p.stderr().contains(secret));
    drop(p);

    // $AHPTY_TOKEN: accepted, and never visible to the terminals.
    let secret = "env-token-0123456789-abcdef";
    let p = serve(
        &["--listen", "127.0.0.1:0", "--shell", "/bin/bash"],
        &[("AHPTY_TOKEN", secret)],
    );
    let addr = p.addr().to_string();
    let base = format!("ws://{addr}");
    assert_eq!(upgrade_status(&base, &[]).await, Err(401));
    assert_eq!(
        upgrade_status(&base, &[("Authorization", &format!("Bearer {secret}"))]).await,
        Ok(())
    );
    let (mut raw, _) = Raw::connect_init(&format!("{base}?tkn={secret}"), "env", &[]).await;
    let t = term_uri("env");
    raw.create_terminal(&t).await;
    raw.subscribe(&t).await;
    raw.type_text(
        &t,
        "echo \"tok=[${AHPTY_TOKEN-unset}]\"; env | grep -c '^AHPTY_TOKEN=' ; echo done-$((1+1))\r",
    )
    .await;
    raw.wait_data(&t, "done-2", SHELL_TIMEOUT).await;
    let data = raw.data(&t);
    assert!(data.contains("tok=[unset]"), "{data}");
    assert!(!data.contains(secret), "{data}");
    assert!(!p.stderr().contains(secret));
});

spec!(bad_token_configurations_are_refused_at_start, {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short");
    std::fs::write(&short, "abc\n").unwrap();
    let (code, err) = run_to_exit(
        &[
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            short.to_str().unwrap(),
        ],
        &[],
    );
    // Every settings refusal is exit status 2 (systemd does not restart on it).
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("too short"), "{err}");
    let (code, err) = run_to_exit(
        &[
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            "/nonexistent/token",
        ],
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("/nonexistent/token"), "{err}");
    let (code, err) = run_to_exit(
        &["--listen", "127.0.0.1:0", "--no-auth"],
        &[("AHPTY_TOKEN", "0123456789abcdef0123")],
    );
    // A contradiction in the settings themselves: exit status 2, like any invalid setting.
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--no-auth"), "{err}");
    assert!(!err.contains("0123456789abcdef0123"), "{err}");
});

spec!(non_loopback_bind_without_a_token_is_refused, {
    for args in [
        &["--listen", "0.0.0.0:0"][..],
        &["--listen", "[::]:0"][..],
        &["--listen", "0.0.0.0:0", "--no-auth"][..],
        &["--listen", "127.0.0.1:0", "--listen", "0.0.0.0:0"][..],
    ] {
        let (code, err) = run_to_exit(args, &[]);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{args:?}: expected one line: {err}");
        assert!(
            err.contains("--token-file") && err.contains("AHPTY_TOKEN"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("listening on"), "{err}");
    }
    // With a configured token it starts, warning about clear text.
    let mut p = serve(
        &["--listen", "0.0.0.0:0"],
        &[("AHPTY_TOKEN", "remote-token-0123456789")],
    );
    p.wait_log("listening on ws://0.0.0.0:");
    assert!(p.stderr().contains("without TLS"), "{}", p.stderr());
    assert_eq!(p.terminate().code(), Some(0));
});

// ─── Unix socket ────────────────────────────────────────────────────────────────────────

async fn unix_ws(path: &Path) -> tokio_tungstenite::WebSocketStream<tokio::net::UnixStream> {
    let stream = tokio::net::UnixStream::connect(path)
        .await
        .expect("connect");
    let (ws, _) = tokio_tungstenite::client_async("ws://localhost/", stream)
        .await
        .expect("upgrade over the Unix socket");
    ws
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

spec!(unix_socket_is_private_and_needs_no_token, async {
    let dir = tempfile::tempdir().unwrap();
    let sock_dir = dir.path().join("run").join("ahpty");
    let sock = sock_dir.join("ahpty.sock");
    let listen = format!("unix:{}", sock.display());
    let mut p = serve(
        &[
            "--listen",
            &listen,
            "--listen",
            "127.0.0.1:0",
            "--shell",
            "/bin/bash",
        ],
        &[],
    );
    let addr = p.addr().to_string();
    assert!(p
        .stderr()
        .contains(&format!("listening on unix:{}", sock.display())));
    assert_eq!(mode(&sock_dir), 0o700);
    assert_eq!(mode(sock_dir.parent().unwrap()), 0o700);
    assert_eq!(mode(&sock), 0o600);

    // TCP still needs the token; the Unix peer does not.
    assert_eq!(upgrade_status(&format!("ws://{addr}"), &[]).await, Err(401));
    let mut ws = unix_ws(&sock).await;
    let r = ws_request(&mut ws, 1, "initialize", init_params("unix")).await;
    assert!(r.get("result").is_some(), "{r}");
    let t = term_uri("unix");
    let r = ws_request(
        &mut ws,
        2,
        "createTerminal",
        json!({"channel": t, "claim": {"kind": "client", "clientId": "unix"}}),
    )
    .await;
    assert!(r.get("error").is_none(), "{r}");
    // Origin checks apply on the socket too (a forwarded port is reachable from a browser).
    let stream = tokio::net::UnixStream::connect(&sock).await.unwrap();
    let mut req = "ws://localhost/".into_client_request().unwrap();
    req.headers_mut().insert(
        "Origin",
        http::HeaderValue::from_static("https://evil.example"),
    );
    match tokio_tungstenite::client_async(req, stream).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status().as_u16(), 403)
        }
        other => panic!(
            "hostile Origin over the Unix socket: {:?}",
            other.map(|_| ())
        ),
    }

    // A second daemon on the same path refuses to start.
    let (code, err) = run_to_exit(&["--listen", &listen], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("in use"), "{err}");
    assert!(
        sock.exists(),
        "the second daemon removed the first one's socket"
    );

    drop(ws);
    assert_eq!(p.terminate().code(), Some(0));
    assert!(!sock.exists(), "socket file left behind after shutdown");
});

spec!(unix_socket_stale_file_replaced_other_files_kept, async {
    let dir = tempfile::tempdir().unwrap();
    let sock: PathBuf = dir.path().join("stale.sock");
    // A socket nobody listens on any more.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let listen = format!("unix:{}", sock.display());
    let mut p = serve(&["--listen", &listen, "--shell", "/bin/bash"], &[]);
    p.wait_log("listening on unix:");
    assert_eq!(mode(&sock), 0o600);
    let mut ws = unix_ws(&sock).await;
    let r = ws_request(&mut ws, 1, "initialize", init_params("stale")).await;
    assert!(r.get("result").is_some(), "{r}");
    drop(ws);
    assert_eq!(p.terminate().code(), Some(0));
    assert!(!sock.exists());

    // A regular file at PATH is never replaced.
    let file = dir.path().join("not-a-socket");
    std::fs::write(&file, "keep me").unwrap();
    let (code, err) = run_to_exit(&["--listen", &format!("unix:{}", file.display())], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("not a socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");

    // A directory owned by someone else (here: root-owned /proc... use /) is refused.
    if unsafe { libc::geteuid() } != 0 {
        let (code, err) = run_to_exit(&["--listen", "unix:/ahpty-test.sock"], &[]);
        assert_eq!(code, Some(1), "{err}");
    }
});

// ─── TLS ────────────────────────────────────────────────────────────────────────────────

spec!(tls_listener_serves_wss_with_the_token, async {
    let dir = tempfile::tempdir().unwrap();
    let ck =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.key_pair.serialize_pem()).unwrap();
    let p = serve(
        &[
            "--listen",
            "127.0.0.1:0",
            "--shell",
            "/bin/bash",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
        &[],
    );
    let addr = p.wait_log("listening on wss://");
    let line = p.stdout_line();
    let prefix = format!("wss://{addr}?tkn=");
    assert!(line.starts_with(&prefix), "{line}");
    let token = &line[prefix.len()..];

    let mut roots = rustls::RootCertStore::empty();
    roots.add(ck.cert.der().clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let connect = |url: String| {
        let connector = connector.clone();
        let addr = addr.clone();
        async move {
            let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            let tls = connector.connect(name, tcp).await.expect("TLS handshake");
            tokio_tungstenite::client_async(url, tls).await
        }
    };
    match connect(format!(
        "wss://localhost:{}/",
        addr.rsplit(':').next().unwrap()
    ))
    .await
    {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 401),
        other => panic!("no token over TLS: {:?}", other.map(|_| ())),
    }
    let (mut ws, _) = connect(format!(
        "wss://localhost:{}/?tkn={token}",
        addr.rsplit(':').next().unwrap()
    ))
    .await
    .expect("wss upgrade");
    let r = ws_request(&mut ws, 1, "initialize", init_params("tls")).await;
    assert!(r.get("result").is_some(), "{r}");

    // Plain WebSocket to the TLS port gets nothing.
    let plain = tokio::time::timeout(
        RPC_TIMEOUT,
        tokio_tungstenite::connect_async(format!("ws://{addr}/?tkn={token}")),
    )
    .await
    .expect("plain attempt hung");
    assert!(plain.is_err());
});

// ─── Resource limits ────────────────────────────────────────────────────────────────────

spec!(connections_beyond_the_limit_get_503, async {
    let p = serve(
        &[
            "--listen",
            "127.0.0.1:0",
            "--no-auth",
            "--max-connections",
            "2",
        ],
        &[],
    );
    let url = format!("ws://{}", p.addr());
    let (a, _) = Raw::connect_init(&url, "a", &[]).await;
    let (_b, _) = Raw::connect_init(&url, "b", &[]).await;
    assert_eq!(upgrade_status(&url, &[]).await, Err(503));
    // Refusals for other reasons keep their status.
    assert_eq!(
        upgrade_status(&url, &[("Origin", "https://evil.example")]).await,
        Err(403)
    );
    drop(a);
    // The slot is released once A's connection is gone.
    eventually(
        "a free slot after a disconnect",
        RPC_TIMEOUT,
        async || match upgrade_status(&url, &[]).await {
            Ok(()) => Ok(()),
            Err(503) => Err("503".to_string()),
            other => panic!("after a disconnect: {other:?}"),
        },
    )
    .await;
    assert!(p.stderr().contains("too many connections"));
});

spec!(silent_sockets_are_closed_by_the_handshake_timeout, async {
    let p = serve(
        &["--listen", "127.0.0.1:0", "--handshake-timeout", "500ms"],
        &[],
    );
    let addr = p.addr().to_string();
    let pid = p.pid();
    // The fd baseline, once the count is steady (start-up may still be opening files).
    let baseline = eventually(
        "a steady descriptor count",
        Duration::from_secs(5),
        async || {
            let before = open_fds(pid);
            // A sampling window: the count is steady when it did not change across it.
            tokio::time::sleep(Duration::from_millis(20)).await;
            (open_fds(pid) == before).then_some(before)
        },
    )
    .await;

    // One socket that sends nothing, one that stalls mid-request.
    let mut silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut partial = tokio::net::TcpStream::connect(&addr).await.unwrap();
    partial
        .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    for s in [&mut silent, &mut partial] {
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("socket not closed by the handshake timeout")
            .unwrap_or(0);
        assert_eq!(n, 0, "expected EOF");
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(400),
        "closed too early: {took:?}"
    );

    // A flood of silent connections is bounded and drained.
    let mut flood = Vec::new();
    for _ in 0..300 {
        if let Ok(s) = tokio::net::TcpStream::connect(&addr).await {
            flood.push(s);
        }
    }
    within(
        "every flood socket closed",
        Duration::from_secs(10),
        async {
            for s in flood.iter_mut() {
                let mut buf = [0u8; 8];
                let r = s.read(&mut buf).await;
                assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
            }
        },
    )
    .await;
    drop(flood);
    // A legitimate client still gets through.
    let line = p.stdout_line();
    let (_raw, _) = Raw::connect_init(&line, "after-flood", &[]).await;
    // The one live connection above may hold one descriptor.
    eventually(
        "the flood's descriptors closed",
        Duration::from_secs(5),
        async || {
            let now = open_fds(pid);
            if now <= baseline + 1 {
                Ok(())
            } else {
                Err(format!("fds: baseline {baseline}, now {now}"))
            }
        },
    )
    .await;
});

spec!(dead_peers_are_dropped_after_an_unanswered_ping, async {
    let p = serve(
        &[
            "--listen",
            "127.0.0.1:0",
            "--no-auth",
            "--ping-interval",
            "300ms",
            "--ping-timeout",
            "700ms",
        ],
        &[],
    );
    let url = format!("ws://{}", p.addr());
    // A: upgrades, then never reads again (so never answers a ping).
    let (mut dead, _) = tokio_tungstenite::connect_async(url.as_str())
        .await
        .unwrap();
    // B: an ordinary client that keeps reading (tungstenite answers pings while reading).
    let (mut live, _) = Raw::connect_init(&url, "live", &[]).await;
    // B's socket is read (answering pings) until the daemon has dropped A and B has
    // answered 10 pings (3 s of them).
    let (dropped_tx, mut dropped) = tokio::sync::oneshot::channel();
    let reader = tokio::spawn(async move {
        let mut pings = 0;
        let mut dropped_a = false;
        while pings < 10 || !dropped_a {
            tokio::select! {
                m = live.ws.next() => match m {
                    Some(Ok(Message::Ping(_))) => pings += 1,
                    Some(Ok(_)) => {}
                    other => panic!("B's connection ended after {pings} pings: {other:?}"),
                },
                _ = &mut dropped, if !dropped_a => dropped_a = true,
            }
        }
        live
    });
    let log = tokio::task::block_in_place(|| p.wait_log("peer did not answer a ping"));
    let _ = dropped_tx.send(log);
    let mut live = tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .expect("B did not see 10 pings")
        .unwrap();
    // A's socket was closed by the daemon: after the queued pings, a close or EOF.
    let mut pings = 0;
    within(
        "the dead peer's connection closed",
        Duration::from_secs(3),
        async {
            loop {
                match dead.next().await {
                    Some(Ok(Message::Ping(_))) => pings += 1,
                    Some(Ok(Message::Close(frame))) => {
                        if let Some(f) = frame {
                            assert_eq!(u16::from(f.code), 1001, "{f:?}");
                        }
                        break;
                    }
                    Some(Ok(other)) => panic!("unexpected {other:?}"),
                    Some(Err(_)) | None => break,
                }
            }
        },
    )
    .await;
    assert!(pings >= 1, "no ping was sent");
    // B is still served.
    let r = live.request("ping", json!({"channel": ROOT})).await;
    assert!(r.get("error").is_none(), "{r}");
});
