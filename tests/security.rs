//! Security controls on real sockets: token authentication (generated, file, environment),
//! the Origin/Host checks with the token dimension, start-up refusals, the Unix socket
//! listener, TLS, the connection limit, the handshake timeout and dead-peer pings.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

// ─── A daemon started with exactly the given arguments ──────────────────────────────────

/// `ahpty serve ARGS` with stdout and stderr captured; SIGTERMed (then killed) on drop.
struct Proc {
    child: Option<Child>,
    _home: tempfile::TempDir,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<Vec<String>>>,
    stderr_rx: std_mpsc::Receiver<String>,
}

impl Proc {
    fn spawn(args: &[&str], env: &[(&str, &str)]) -> Proc {
        let home = tempfile::tempdir().unwrap();
        let mut cmd = daemon_command(home.path(), args);
        cmd.stdout(Stdio::piped()).env("RUST_LOG", "trace");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn ahpty");
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let keep = stdout.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                keep.lock().unwrap().push(line);
            }
        });
        let err = child.stderr.take().unwrap();
        let keep = stderr.clone();
        let (tx, stderr_rx) = std_mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                keep.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        });
        Proc {
            child: Some(child),
            _home: home,
            stdout,
            stderr,
            stderr_rx,
        }
    }

    /// Waits for the stderr line holding `needle`; returns what follows it up to a space.
    fn wait_log(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr_rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(i) = line.find(needle) {
                        return line[i + needle.len()..]
                            .chars()
                            .take_while(|c| !c.is_whitespace() && *c != '"')
                            .collect();
                    }
                }
                Err(_) => panic!("no `{needle}` in the log; stderr:\n{}", self.stderr()),
            }
        }
    }

    /// `127.0.0.1:PORT` of the (first) plain TCP listener.
    fn tcp_addr(&self) -> String {
        self.wait_log("listening on ws://")
    }

    /// Waits for the first stdout line.
    fn stdout_line(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(l) = self.stdout.lock().unwrap().first() {
                return l.clone();
            }
            assert!(Instant::now() < deadline, "nothing on stdout");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn stdout(&self) -> String {
        self.stdout.lock().unwrap().join("\n")
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let child = self.child.as_mut().unwrap();
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                self.child = None;
                // Let the reader threads drain the pipes.
                std::thread::sleep(Duration::from_millis(50));
                return st;
            }
            assert!(Instant::now() < deadline, "ahpty still running");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn terminate(&mut self) -> ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.pid());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        self.wait_exit(Duration::from_secs(10))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- ahpty stdout ----\n{}\n---- ahpty stderr ----\n{}\n----",
                self.stdout(),
                self.stderr()
            );
        }
        if let Some(mut child) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs `ahpty serve ARGS` expecting it to exit at once; returns (exit code, stderr).
fn run_to_exit(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut p = Proc::spawn(args, env);
    let st = p.wait_exit(Duration::from_secs(10));
    (st.code(), p.stderr())
}

/// Direct child processes of `pid` (ptys' shells).
fn children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(s.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
            }
        }
    }
    out
}

fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
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
    let deadline = tokio::time::Instant::now() + SHELL_TIMEOUT;
    loop {
        let m = tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("no response")
            .expect("connection closed")
            .expect("ws error");
        if let Message::Text(t) = m {
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v.get("id") == Some(&json!(id)) {
                return v;
            }
        }
    }
}

fn init_params(client: &str) -> Value {
    json!({"channel": ROOT, "protocolVersions": ["1.0.0"], "clientId": client})
}

// ─── Tokens ─────────────────────────────────────────────────────────────────────────────

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_token_is_printed_once_and_required() {
    let p = Proc::spawn(&["--listen", "127.0.0.1:0", "--shell", "/bin/bash"], &[]);
    let addr = p.tcp_addr();
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
    assert!(children(p.pid()).is_empty(), "{:?}", children(p.pid()));

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
    let r = raw
        .request(
            "createTerminal",
            json!({"channel": t, "claim": {"kind": "client", "clientId": "tok"}}),
        )
        .await;
    assert!(r.get("error").is_none(), "{r}");
    raw.request("subscribe", json!({"channel": t})).await;
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_from_file_and_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    let secret = "file-token-0123456789-abcdef";
    std::fs::write(&file, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let p = Proc::spawn(
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
    let addr = p.tcp_addr();
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
    let p = Proc::spawn(
        &["--listen", "127.0.0.1:0", "--shell", "/bin/bash"],
        &[("AHPTY_TOKEN", secret)],
    );
    let addr = p.tcp_addr();
    let base = format!("ws://{addr}");
    assert_eq!(upgrade_status(&base, &[]).await, Err(401));
    assert_eq!(
        upgrade_status(&base, &[("Authorization", &format!("Bearer {secret}"))]).await,
        Ok(())
    );
    let (mut raw, _) = Raw::connect_init(&format!("{base}?tkn={secret}"), "env", &[]).await;
    let t = term_uri("env");
    let r = raw
        .request(
            "createTerminal",
            json!({"channel": t, "claim": {"kind": "client", "clientId": "env"}}),
        )
        .await;
    assert!(r.get("error").is_none(), "{r}");
    raw.request("subscribe", json!({"channel": t})).await;
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
}

#[test]
fn bad_token_configurations_are_refused_at_start() {
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
}

#[test]
fn non_loopback_bind_without_a_token_is_refused() {
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
    let mut p = Proc::spawn(
        &["--listen", "0.0.0.0:0"],
        &[("AHPTY_TOKEN", "remote-token-0123456789")],
    );
    p.wait_log("listening on ws://0.0.0.0:");
    assert!(p.stderr().contains("without TLS"), "{}", p.stderr());
    assert_eq!(p.terminate().code(), Some(0));
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_is_private_and_needs_no_token() {
    let dir = tempfile::tempdir().unwrap();
    let sock_dir = dir.path().join("run").join("ahpty");
    let sock = sock_dir.join("ahpty.sock");
    let listen = format!("unix:{}", sock.display());
    let mut p = Proc::spawn(
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
    let addr = p.tcp_addr();
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_stale_file_replaced_other_files_kept() {
    let dir = tempfile::tempdir().unwrap();
    let sock: PathBuf = dir.path().join("stale.sock");
    // A socket nobody listens on any more.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let listen = format!("unix:{}", sock.display());
    let mut p = Proc::spawn(&["--listen", &listen, "--shell", "/bin/bash"], &[]);
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
}

// ─── TLS ────────────────────────────────────────────────────────────────────────────────

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_listener_serves_wss_with_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let ck =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.key_pair.serialize_pem()).unwrap();
    let p = Proc::spawn(
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
}

// ─── Resource limits ────────────────────────────────────────────────────────────────────

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_get_503() {
    let p = Proc::spawn(
        &[
            "--listen",
            "127.0.0.1:0",
            "--no-auth",
            "--max-connections",
            "2",
        ],
        &[],
    );
    let url = format!("ws://{}", p.tcp_addr());
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
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match upgrade_status(&url, &[]).await {
            Ok(()) => break,
            Err(503) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            other => panic!("after a disconnect: {other:?}"),
        }
    }
    assert!(p.stderr().contains("too many connections"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_sockets_are_closed_by_the_handshake_timeout() {
    let p = Proc::spawn(
        &["--listen", "127.0.0.1:0", "--handshake-timeout", "500ms"],
        &[],
    );
    let addr = p.tcp_addr();
    let pid = p.pid();
    // The fd baseline, once the count is steady (start-up may still be opening files).
    let mut baseline = open_fds(pid);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = open_fds(pid);
        if now == baseline || std::time::Instant::now() > deadline {
            break;
        }
        baseline = now;
    }

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
    let deadline = Instant::now() + Duration::from_secs(10);
    for s in flood.iter_mut() {
        let mut buf = [0u8; 8];
        let left = deadline.saturating_duration_since(Instant::now());
        let r = tokio::time::timeout(left, s.read(&mut buf))
            .await
            .expect("flood socket still open");
        assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
    }
    drop(flood);
    // A legitimate client still gets through.
    let line = p.stdout_line();
    let (_raw, _) = Raw::connect_init(&line, "after-flood", &[]).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = open_fds(pid);
        // The one live connection above may hold one descriptor.
        if now <= baseline + 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "fds: baseline {baseline}, now {now}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_peers_are_dropped_after_an_unanswered_ping() {
    let p = Proc::spawn(
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
    let url = format!("ws://{}", p.tcp_addr());
    // A: upgrades, then never reads again (so never answers a ping).
    let (mut dead, _) = tokio_tungstenite::connect_async(url.as_str())
        .await
        .unwrap();
    // B: an ordinary client that keeps reading (tungstenite answers pings while reading).
    let (mut live, _) = Raw::connect_init(&url, "live", &[]).await;
    let reader = tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        // Pump B's socket (answering pings) for 3 s.
        while tokio::time::Instant::now() < deadline {
            let _ = tokio::time::timeout(Duration::from_millis(100), live.ws.next()).await;
        }
        live
    });
    let mut live = reader.await.unwrap();
    assert!(
        p.stderr().contains("peer did not answer a ping"),
        "{}",
        p.stderr()
    );
    // A's socket was closed by the daemon: after the queued pings, a close or EOF.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    let mut pings = 0;
    loop {
        match tokio::time::timeout_at(deadline, dead.next()).await {
            Ok(Some(Ok(Message::Ping(_)))) => pings += 1,
            Ok(Some(Ok(Message::Close(frame)))) => {
                if let Some(f) = frame {
                    assert_eq!(u16::from(f.code), 1001, "{f:?}");
                }
                break;
            }
            Ok(Some(Ok(other))) => panic!("unexpected {other:?}"),
            Ok(Some(Err(_))) | Ok(None) => break,
            Err(_) => panic!("the dead peer's connection is still open"),
        }
    }
    assert!(pings >= 1, "no ping was sent");
    // B is still served.
    let r = live.request("ping", json!({"channel": ROOT})).await;
    assert!(r.get("error").is_none(), "{r}");
}
