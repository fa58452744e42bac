//! Shared harness for the black-box integration tests: start the `ahpty` binary on a free
//! port, connect official `ahp` clients or raw WebSocket clients, and wait for events with
//! timeouts (never fixed sleeps).

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ahp::ahp_types::actions::{ActionEnvelope, StateAction, TerminalInputAction};
use ahp::ahp_types::commands::InitializeResult;
use ahp::ahp_types::state::{Snapshot, SnapshotState, TerminalState};
use ahp::{Client, ClientConfig, ClientError, ClientEventStream, SubscriptionEvent};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub const ROOT: &str = "ahp-root://";
/// Timeout for a shell's first prompt / first command round trip.
pub const SHELL_TIMEOUT: Duration = Duration::from_secs(20);
/// Timeout for a plain request/response.
pub const RPC_TIMEOUT: Duration = Duration::from_secs(10);

// ─── The daemon process ──────────────────────────────────────────────────────

/// A running `ahpty serve` on 127.0.0.1 with a fresh `$HOME`; killed on drop.
pub struct Daemon {
    child: Option<Child>,
    addr: String,
    home: tempfile::TempDir,
    stderr: Arc<Mutex<Vec<String>>>,
}

/// The private `XDG_RUNTIME_DIR` of a daemon whose `$HOME` is `home` (created, mode 0700):
/// its default socket is `runtime_dir(home)/ahpty/ahpty.sock`, so no two tests share one.
pub fn runtime_dir(home: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    let dir = home.join(".run");
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    dir
}

/// `ahpty serve …` with a fresh HOME (and so no config file), a private XDG_RUNTIME_DIR (see
/// [`runtime_dir`]), XDG_STATE_HOME `HOME/.state` (so transcripts go to
/// `HOME/.state/ahpty`) and RUST_LOG=info, without the caller's `AHPTY_*` settings or systemd
/// variables; stdout/stderr piped.
pub fn daemon_command(home: &std::path::Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ahpty"));
    for (name, _) in std::env::vars_os() {
        let n = name.to_string_lossy();
        if n.starts_with("AHPTY_") || n == "NOTIFY_SOCKET" || n == "JOURNAL_STREAM" {
            cmd.env_remove(&name);
        }
    }
    cmd.arg("serve")
        .args(args)
        .env("HOME", home)
        .env("XDG_RUNTIME_DIR", runtime_dir(home))
        .env("XDG_CONFIG_HOME", home.join(".config"))
        // Transcripts and the serverSeq mark stay in the test's own HOME.
        .env("XDG_STATE_HOME", home.join(".state"))
        // AHPTY_TEST_LOG (e.g. `debug`) raises the daemons' log level when investigating.
        .env(
            "RUST_LOG",
            std::env::var("AHPTY_TEST_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

impl Daemon {
    /// `serve --listen 127.0.0.1:0 --shell /bin/bash --no-auth` (token authentication is
    /// covered by tests/security.rs).
    pub fn start() -> Daemon {
        Self::start_with(&[])
    }

    /// Like [`Daemon::start`] with extra arguments.
    pub fn start_with(extra: &[&str]) -> Daemon {
        Self::start_with_env(extra, &[])
    }

    /// Like [`Daemon::start_with`], with extra variables in the daemon's environment.
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let home = tempfile::tempdir().expect("tempdir");
        let mut args = vec![
            "--listen",
            "127.0.0.1:0",
            "--shell",
            "/bin/bash",
            "--no-auth",
        ];
        args.extend_from_slice(extra);
        let mut cmd = daemon_command(home.path(), &args);
        cmd.envs(env.iter().copied());
        Self::start_command(home, cmd)
    }

    /// Starts `cmd` (built with [`daemon_command`] on `home`, possibly wrapped, e.g. in
    /// `sh -c 'ulimit …; exec …'`) and waits for its `listening on ws://` line; `home` is kept
    /// until the daemon is dropped.
    pub fn start_command(home: tempfile::TempDir, mut cmd: Command) -> Daemon {
        let mut child = cmd.spawn().expect("spawn ahpty");
        let stderr = child.stderr.take().expect("stderr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std_mpsc::channel::<String>();
        let keep = lines.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                keep.lock().unwrap().push(line.clone());
                if let Some(t) = &tx {
                    if t.send(line).is_err() {
                        tx = None;
                    }
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let addr = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(i) = line.find("listening on ws://") {
                        let rest = &line[i + "listening on ws://".len()..];
                        let addr: String = rest
                            .chars()
                            .take_while(|c| !c.is_whitespace() && *c != '"')
                            .collect();
                        break addr;
                    }
                }
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "ahpty did not log `listening on ws://` within 20 s; stderr:\n{}",
                        lines.lock().unwrap().join("\n")
                    );
                }
            }
        };
        Daemon {
            child: Some(child),
            addr,
            home,
            stderr: lines,
        }
    }

    /// `ws://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("ws://{}", self.addr)
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The daemon's `$HOME`.
    pub fn home(&self) -> &std::path::Path {
        self.home.path()
    }

    /// The daemon's `XDG_RUNTIME_DIR`.
    pub fn runtime_dir(&self) -> std::path::PathBuf {
        runtime_dir(self.home.path())
    }

    /// The default socket this daemon listens on.
    pub fn socket(&self) -> std::path::PathBuf {
        self.runtime_dir().join("ahpty").join("ahpty.sock")
    }

    /// `ahpty ARGS…` as a client of this daemon: the same HOME and XDG_RUNTIME_DIR (so it
    /// finds the default socket with no flags), no `$AHPTY_*` from the test's environment,
    /// stdin null, stdout/stderr piped.
    pub fn cli(&self, args: &[&str]) -> Command {
        let mut cmd = cli_command(self.home.path(), args);
        cmd.env("XDG_RUNTIME_DIR", self.runtime_dir());
        cmd
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Everything the daemon wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    /// Sends `sig` to the daemon.
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.pid() as i32);
        nix::sys::signal::kill(pid, sig).expect("kill");
    }

    /// Waits up to `timeout` for the daemon to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(st)) = child.try_wait() {
                self.child = None;
                return Some(st);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- ahpty stderr ----\n{}\n----", self.stderr());
        }
        let Some(child) = self.child.as_mut() else {
            return;
        };
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

/// `ahpty ARGS…` with `HOME=home`, without the test's `$AHPTY_*`, `XDG_RUNTIME_DIR` and
/// `RUST_LOG`; stdin null, stdout/stderr piped.
pub fn cli_command(home: &std::path::Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ahpty"));
    cmd.args(args)
        .env("HOME", home)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for var in [
        "AHPTY_URL",
        "AHPTY_TOKEN",
        "AHPTY_TERMINAL",
        "AHPTY_HOST_ID",
        "AHPTY_EXE",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// What a finished CLI run printed.
#[derive(Debug)]
pub struct CliOutput {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` to completion (at most `timeout`; killed and panics after that).
pub fn run_cli(mut cmd: Command, timeout: Duration) -> CliOutput {
    let child = cmd.spawn().expect("spawn ahpty client");
    let pid = child.id();
    let (tx, rx) = std_mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(out) => {
            let out = out.expect("wait for ahpty client");
            CliOutput {
                code: out.status.code(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            }
        }
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            panic!("{cmd:?} did not finish within {timeout:?}");
        }
    }
}

type Pipe = Box<dyn tokio::io::AsyncRead + Unpin + Send>;

/// A CLI process still running, whose output is collected as it comes.
pub struct LiveCli {
    child: tokio::process::Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    progress: Arc<tokio::sync::Notify>,
    readers: Vec<tokio::task::JoinHandle<()>>,
}

impl LiveCli {
    /// Spawns `cmd` (its stdout and stderr must be piped) on the tokio runtime.
    pub fn spawn(cmd: Command) -> LiveCli {
        use tokio::io::AsyncReadExt;
        let mut child = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn ahpty client");
        let progress = Arc::new(tokio::sync::Notify::new());
        let (stdout, stderr) = (
            Arc::new(Mutex::new(String::new())),
            Arc::new(Mutex::new(String::new())),
        );
        let mut readers = Vec::new();
        let pipes: [(Pipe, Arc<Mutex<String>>); 2] = [
            (
                Box::new(child.stdout.take().expect("piped stdout")),
                stdout.clone(),
            ),
            (
                Box::new(child.stderr.take().expect("piped stderr")),
                stderr.clone(),
            ),
        ];
        for (mut pipe, buf) in pipes {
            let progress = progress.clone();
            readers.push(tokio::spawn(async move {
                let mut chunk = vec![0u8; 8192];
                while let Ok(n) = pipe.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                    buf.lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&chunk[..n]));
                    progress.notify_waiters();
                }
                progress.notify_waiters();
            }));
        }
        LiveCli {
            child,
            stdout,
            stderr,
            progress,
            readers,
        }
    }

    /// Stdout so far.
    pub fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// Stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until stdout (or stderr, with `on_stderr`) contains `needle`.
    pub async fn wait_for(&self, needle: &str, on_stderr: bool, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.progress.notified();
            let text = if on_stderr {
                self.stderr()
            } else {
                self.stdout()
            };
            if text.contains(needle) {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!(
                    "{needle:?} did not appear within {timeout:?}; stdout {:?}, stderr {:?}",
                    self.stdout(),
                    self.stderr()
                );
            }
        }
    }

    /// Waits for the process to exit and returns everything it printed.
    pub async fn finish(mut self, timeout: Duration) -> CliOutput {
        let status = tokio::time::timeout(timeout, self.child.wait())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the client did not exit within {timeout:?}; stdout {:?}, stderr {:?}",
                    self.stdout(),
                    self.stderr()
                )
            })
            .expect("wait");
        for r in self.readers.drain(..) {
            let _ = tokio::time::timeout(timeout, r).await;
        }
        CliOutput {
            code: status.code(),
            stdout: self.stdout(),
            stderr: self.stderr(),
        }
    }
}

// ─── Processes ───────────────────────────────────────────────────────────────

/// `Some(state letter)` of a live /proc entry, `None` when gone.
pub fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().next()?.chars().next()
}

/// Gone or a zombie.
pub fn is_dead(pid: i32) -> bool {
    matches!(proc_state(pid), None | Some('Z') | Some('X'))
}

/// Waits until every pid is gone or a zombie; panics naming the survivors.
pub fn wait_dead(pids: &[i32], timeout: Duration, what: &str) {
    let deadline = Instant::now() + timeout;
    loop {
        let alive: Vec<(i32, Option<char>, String)> = pids
            .iter()
            .filter(|&&p| !is_dead(p))
            .map(|&p| {
                let cmd = std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                    .unwrap_or_default()
                    .replace('\0', " ");
                (p, proc_state(p), cmd)
            })
            .collect();
        if alive.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            panic!("{what}: processes still alive after {timeout:?}: {alive:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Live (non-zombie) processes whose session id is `sid`.
pub fn session_members(sid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(i) = stat.rfind(')') else { continue };
        let f: Vec<&str> = stat[i + 1..].split_whitespace().collect();
        if f.len() > 3 && f[0] != "Z" && f[3].parse::<i32>().ok() == Some(sid) {
            out.push(pid);
        }
    }
    out
}

/// Finds `prefix` immediately followed by digits in `text` (skipping occurrences that are
/// not, such as the echo of the typed command line) and returns the number.
pub fn find_number_after(text: &str, prefix: &str) -> Option<i64> {
    let mut from = 0;
    while let Some(i) = text[from..].find(prefix) {
        let start = from + i + prefix.len();
        let digits: String = text[start..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        if !digits.is_empty() {
            return digits.parse().ok();
        }
        from = start;
    }
    None
}

/// Last `n` characters of a string, for failure messages.
pub fn tail(s: &str, n: usize) -> String {
    let count = s.chars().count();
    let t: String = s.chars().skip(count.saturating_sub(n)).collect();
    format!("{t:?}")
}

// ─── Official `ahp` client ───────────────────────────────────────────────────

/// An `ahp::Client` over `ahp-ws`, initialized, with a log of every action envelope received.
pub struct Ahp {
    pub client: Client,
    pub client_id: String,
    pub init: InitializeResult,
    events: ClientEventStream,
    /// Every action envelope received so far, in arrival order.
    pub log: Vec<ActionEnvelope>,
}

pub fn client_config() -> ClientConfig {
    ClientConfig {
        default_request_timeout: Some(Duration::from_secs(30)),
        subscription_buffer: 1 << 16,
    }
}

impl Ahp {
    /// Connects and initializes with `["1.0.0"]` and the given initial subscriptions.
    pub async fn connect(url: &str, client_id: &str, subs: &[&str]) -> Ahp {
        let transport = ahp_ws::WebSocketTransport::connect(url)
            .await
            .expect("ahp-ws connect");
        let client = Client::connect(transport, client_config())
            .await
            .expect("Client::connect");
        let events = client.events();
        let init = tokio::time::timeout(
            RPC_TIMEOUT,
            client.initialize(
                client_id.into(),
                vec!["1.0.0".into()],
                subs.iter().map(|s| s.to_string()).collect(),
            ),
        )
        .await
        .expect("initialize timed out")
        .expect("initialize failed");
        Ahp {
            client,
            client_id: client_id.into(),
            init,
            events,
            log: Vec::new(),
        }
    }

    /// A request with an untyped result.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        tokio::time::timeout(Duration::from_secs(35), self.client.request(method, params))
            .await
            .unwrap_or_else(|_| panic!("{method}: no answer within 35 s"))
    }

    /// `createTerminal` with a client claim held by this client.
    pub async fn create_terminal(&self, uri: &str, extra: Value) -> Result<Value, ClientError> {
        let mut params = json!({
            "channel": uri,
            "claim": {"kind": "client", "clientId": self.client_id},
        });
        if let Value::Object(m) = extra {
            for (k, v) in m {
                params[k] = v;
            }
        }
        self.call("createTerminal", params).await
    }

    /// `subscribe` and return the snapshot.
    pub async fn subscribe(&self, uri: &str) -> Result<Snapshot, ClientError> {
        let (res, _sub) = tokio::time::timeout(RPC_TIMEOUT, self.client.subscribe(uri.into()))
            .await
            .expect("subscribe timed out")?;
        Ok(res.snapshot.expect("subscribe result without snapshot"))
    }

    /// `subscribe` to a terminal and return its state.
    pub async fn subscribe_terminal(&self, uri: &str) -> (TerminalState, i64) {
        let snap = self.subscribe(uri).await.expect("subscribe terminal");
        assert_eq!(snap.resource, uri);
        (terminal_state(&snap), snap.from_seq)
    }

    /// `dispatchAction`; returns the clientSeq used.
    pub async fn dispatch(&self, uri: &str, action: StateAction) -> i64 {
        self.client
            .dispatch(uri.into(), action)
            .await
            .expect("dispatch")
            .client_seq
    }

    /// Types `text` into the terminal with `terminal/input`.
    pub async fn type_text(&self, uri: &str, text: &str) -> i64 {
        self.dispatch(
            uri,
            StateAction::TerminalInput(TerminalInputAction { data: text.into() }),
        )
        .await
    }

    /// Reads events until `pred(log)` holds; panics after `timeout` showing what was seen.
    pub async fn wait_for(
        &mut self,
        what: &str,
        timeout: Duration,
        mut pred: impl FnMut(&[ActionEnvelope]) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if pred(&self.log) {
                return;
            }
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(ev)) => {
                    if let SubscriptionEvent::Action(env) = ev.event {
                        self.log.push(env);
                    }
                }
                Ok(None) => panic!(
                    "waiting for {what}: connection closed; seen:\n{}",
                    self.describe_log()
                ),
                Err(_) => panic!(
                    "waiting for {what}: timed out after {timeout:?}; seen:\n{}",
                    self.describe_log()
                ),
            }
        }
    }

    /// Concatenated `terminal/data` of `uri`, as received so far.
    pub fn data(&self, uri: &str) -> String {
        data_of(&self.log, uri)
    }

    /// Waits until the concatenated data of `uri` contains `needle`.
    pub async fn wait_data(&mut self, uri: &str, needle: &str, timeout: Duration) {
        let u = uri.to_string();
        let n = needle.to_string();
        self.wait_for(
            &format!("{needle:?} in the data of {uri}"),
            timeout,
            |log| data_of(log, &u).contains(&n),
        )
        .await
    }

    /// Types a marker command and waits for its output: the shell is reading input.
    pub async fn ready(&mut self, uri: &str) {
        self.type_text(uri, "echo rdy-$((40+2))\r").await;
        self.wait_data(uri, "rdy-42", SHELL_TIMEOUT).await;
    }

    /// Waits for `terminal/exited` on `uri` and returns its envelope.
    pub async fn wait_exited(&mut self, uri: &str, timeout: Duration) -> ActionEnvelope {
        let u = uri.to_string();
        self.wait_for(&format!("terminal/exited on {uri}"), timeout, |log| {
            log.iter().any(|e| is_exited(e, &u))
        })
        .await;
        self.log.iter().find(|e| is_exited(e, uri)).unwrap().clone()
    }

    pub fn describe_log(&self) -> String {
        describe_envelopes(&self.log)
    }
}

/// An `agent` client of `d` watching a fresh terminal (URI tagged `tag`) whose shell is ready.
pub async fn agent_with_terminal(d: &Daemon, tag: &str) -> (Ahp, String) {
    let mut agent = Ahp::connect(&d.url(), "agent", &[]).await;
    let t = term_uri(tag);
    agent
        .create_terminal(&t, json!({}))
        .await
        .expect("createTerminal");
    agent.subscribe(&t).await.expect("subscribe");
    agent.ready(&t).await;
    (agent, t)
}

pub fn is_exited(e: &ActionEnvelope, uri: &str) -> bool {
    e.channel == uri && matches!(e.action, StateAction::TerminalExited(_))
}

pub fn data_of(log: &[ActionEnvelope], uri: &str) -> String {
    let mut s = String::new();
    for e in log {
        if e.channel == uri {
            if let StateAction::TerminalData(d) = &e.action {
                s.push_str(&d.data);
            }
        }
    }
    s
}

/// `s` cut to at most `max` bytes on a character boundary, with `…` when cut.
pub fn clip(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// Tries the WebSocket upgrade at `url` with extra headers: `Ok` if upgraded (then closed),
/// else the HTTP status.
pub async fn upgrade_status(url: &str, headers: &[(&str, &str)]) -> Result<(), u16> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut req = url.into_client_request().unwrap();
    for (k, v) in headers {
        req.headers_mut().insert(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            http::HeaderValue::from_str(v).unwrap(),
        );
    }
    match tokio::time::timeout(RPC_TIMEOUT, tokio_tungstenite::connect_async(req))
        .await
        .expect("upgrade timed out")
    {
        Ok((mut ws, _)) => {
            let _ = ws.close(None).await;
            Ok(())
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("unexpected upgrade error: {e}"),
    }
}

pub fn describe_envelopes(log: &[ActionEnvelope]) -> String {
    let mut out = String::new();
    let skip = log.len().saturating_sub(40);
    if skip > 0 {
        out.push_str(&format!("  … {skip} earlier envelopes\n"));
    }
    for e in &log[skip..] {
        out.push_str("  ");
        out.push_str(&clip(serde_json::to_string(e).unwrap_or_default(), 300));
        out.push('\n');
    }
    out
}

/// The terminal state of a snapshot (re-decoding from JSON if the untagged union chose
/// another variant).
pub fn terminal_state(snap: &Snapshot) -> TerminalState {
    match &snap.state {
        SnapshotState::Terminal(t) => (**t).clone(),
        other => serde_json::from_value(serde_json::to_value(other).unwrap())
            .expect("snapshot state is not a terminal state"),
    }
}

pub fn rpc_code(r: &Result<Value, ClientError>) -> Option<i32> {
    match r {
        Err(ClientError::Rpc(e)) => Some(e.code),
        _ => None,
    }
}

pub fn rpc_message(r: &Result<Value, ClientError>) -> String {
    match r {
        Err(ClientError::Rpc(e)) => e.message.clone(),
        other => format!("{other:?}"),
    }
}

/// A fresh terminal URI.
pub fn term_uri(tag: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1);
    format!(
        "ahp-terminal:/{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

// ─── Raw WebSocket client ────────────────────────────────────────────────────

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A raw JSON-RPC client over tokio-tungstenite: sends exact frames and records every
/// message received.
pub struct Raw {
    pub ws: Ws,
    next_id: u64,
    next_seq: i64,
    /// Every JSON message received, in order.
    pub received: Vec<Value>,
    /// Index into `received` of the next message not yet returned by [`Raw::next_message`].
    cursor: usize,
    /// Set when the server closed the connection (the close frame, if any).
    pub closed: Option<Option<tokio_tungstenite::tungstenite::protocol::CloseFrame>>,
    pub client_id: String,
}

impl Raw {
    pub async fn connect(url: &str) -> Raw {
        let (ws, _) = tokio::time::timeout(RPC_TIMEOUT, tokio_tungstenite::connect_async(url))
            .await
            .expect("ws connect timed out")
            .expect("ws connect");
        Raw {
            ws,
            next_id: 1000,
            next_seq: 1,
            received: Vec::new(),
            cursor: 0,
            closed: None,
            client_id: String::new(),
        }
    }

    /// Connects and initializes with `["1.0.0"]`.
    pub async fn connect_init(url: &str, client_id: &str, subs: &[&str]) -> (Raw, Value) {
        let mut raw = Raw::connect(url).await;
        let resp = raw
            .request(
                "initialize",
                json!({"channel": ROOT, "protocolVersions": ["1.0.0"], "clientId": client_id,
                       "initialSubscriptions": subs}),
            )
            .await;
        let result = resp
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("initialize failed: {resp}"));
        raw.client_id = client_id.into();
        (raw, result)
    }

    pub async fn send_text(&mut self, text: &str) {
        self.ws
            .send(Message::Text(text.into()))
            .await
            .expect("send text");
    }

    pub async fn send_json(&mut self, v: &Value) {
        self.send_text(&v.to_string()).await;
    }

    /// Reads one frame off the socket into `received`. Returns false when the connection
    /// closed (or errored), true otherwise. Panics on a frame that is not valid JSON text.
    async fn pump(&mut self, deadline: tokio::time::Instant) -> Result<bool, ()> {
        match tokio::time::timeout_at(deadline, self.ws.next()).await {
            Err(_) => Err(()),
            Ok(None) => {
                self.closed.get_or_insert(None);
                Ok(false)
            }
            Ok(Some(Err(e))) => {
                self.closed.get_or_insert(None);
                eprintln!("websocket error: {e}");
                Ok(false)
            }
            Ok(Some(Ok(msg))) => {
                match msg {
                    Message::Text(t) => {
                        let v: Value = serde_json::from_str(t.as_str()).unwrap_or_else(|e| {
                            panic!("server sent a text frame that is not JSON ({e}): {t}")
                        });
                        self.received.push(v);
                    }
                    Message::Binary(b) => {
                        panic!("server sent a binary frame ({} bytes)", b.len())
                    }
                    Message::Close(f) => {
                        self.closed = Some(f);
                        return Ok(false);
                    }
                    _ => {}
                }
                Ok(true)
            }
        }
    }

    /// The next JSON message (any kind), or panic after `timeout`.
    pub async fn next_message(&mut self, timeout: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.cursor >= self.received.len() {
            match self.pump(deadline).await {
                Ok(true) => {}
                Ok(false) => panic!(
                    "connection closed ({:?}) while waiting for a message; seen:\n{}",
                    self.closed,
                    self.describe()
                ),
                Err(()) => panic!("no message within {timeout:?}; seen:\n{}", self.describe()),
            }
        }
        self.cursor += 1;
        self.received[self.cursor - 1].clone()
    }

    /// Marks every message received so far as seen by [`Raw::next_message`].
    pub fn skip_seen(&mut self) {
        self.cursor = self.received.len();
    }

    /// The next message that is not an `action` notification (a response).
    pub async fn next_response(&mut self, timeout: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let m = self.next_message(left).await;
            if m.get("method").and_then(Value::as_str) != Some("action") {
                return m;
            }
        }
    }

    /// Sends a request with a fresh numeric id and returns the response with that id.
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send_json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        self.response_to(&json!(id), Duration::from_secs(35)).await
    }

    /// Reads until the response carrying `id` arrives.
    pub async fn response_to(&mut self, id: &Value, timeout: Duration) -> Value {
        let id = id.clone();
        let mut found = None;
        self.wait_until(&format!("response to id {id}"), timeout, |raw| {
            found = raw
                .received
                .iter()
                .find(|m| m.get("id") == Some(&id) && m.get("method").is_none())
                .cloned();
            found.is_some()
        })
        .await;
        found.unwrap()
    }

    /// The error code of a response.
    pub fn code(resp: &Value) -> Option<i64> {
        resp.pointer("/error/code").and_then(Value::as_i64)
    }

    /// Sends `dispatchAction` with the next clientSeq; returns it.
    pub async fn dispatch(&mut self, channel: &str, action: Value) -> i64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.send_json(&json!({"jsonrpc": "2.0", "method": "dispatchAction",
            "params": {"channel": channel, "clientSeq": seq, "action": action}}))
            .await;
        seq
    }

    pub async fn type_text(&mut self, channel: &str, text: &str) -> i64 {
        self.dispatch(channel, json!({"type": "terminal/input", "data": text}))
            .await
    }

    /// Reads messages until `pred(self)` holds; panics after `timeout` with what was seen.
    pub async fn wait_until(
        &mut self,
        what: &str,
        timeout: Duration,
        mut pred: impl FnMut(&Raw) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if pred(self) {
                return;
            }
            match self.pump(deadline).await {
                Ok(true) => {}
                Ok(false) => {
                    if pred(self) {
                        return;
                    }
                    panic!(
                        "waiting for {what}: connection closed ({:?}); seen:\n{}",
                        self.closed,
                        self.describe()
                    )
                }
                Err(()) => panic!(
                    "waiting for {what}: timed out after {timeout:?}; seen:\n{}",
                    self.describe()
                ),
            }
        }
    }

    /// All action envelopes (params of `action` notifications) received so far.
    pub fn envelopes(&self) -> Vec<&Value> {
        self.received
            .iter()
            .filter(|m| m.get("method").and_then(Value::as_str) == Some("action"))
            .filter_map(|m| m.get("params"))
            .collect()
    }

    /// Concatenated `terminal/data` of `channel`.
    pub fn data(&self, channel: &str) -> String {
        let mut s = String::new();
        for e in self.envelopes() {
            if e["channel"] == channel && e["action"]["type"] == "terminal/data" {
                s.push_str(e["action"]["data"].as_str().unwrap_or(""));
            }
        }
        s
    }

    pub async fn wait_data(&mut self, channel: &str, needle: &str, timeout: Duration) {
        let (c, n) = (channel.to_string(), needle.to_string());
        self.wait_until(
            &format!("{needle:?} in the data of {channel}"),
            timeout,
            |raw| raw.data(&c).contains(&n),
        )
        .await
    }

    pub async fn ready(&mut self, channel: &str) {
        self.type_text(channel, "echo rdy-$((40+2))\r").await;
        self.wait_data(channel, "rdy-42", SHELL_TIMEOUT).await;
    }

    /// Waits for an envelope matching `pred` and returns it.
    pub async fn wait_envelope(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let mut found = None;
        self.wait_until(what, timeout, |raw| {
            found = raw.envelopes().into_iter().find(|e| pred(e)).cloned();
            found.is_some()
        })
        .await;
        found.unwrap()
    }

    /// Waits until the server closes the connection; returns the close frame, if any.
    pub async fn wait_closed(
        &mut self,
        timeout: Duration,
    ) -> Option<tokio_tungstenite::tungstenite::protocol::CloseFrame> {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.closed.is_none() {
            if self.pump(deadline).await.is_err() {
                panic!(
                    "server did not close the connection within {timeout:?}; seen:\n{}",
                    self.describe()
                );
            }
        }
        self.closed.clone().unwrap()
    }

    pub fn describe(&self) -> String {
        let mut out = String::new();
        let skip = self.received.len().saturating_sub(40);
        if skip > 0 {
            out.push_str(&format!("  … {skip} earlier messages\n"));
        }
        for m in &self.received[skip..] {
            out.push_str("  ");
            out.push_str(&clip(m.to_string(), 300));
            out.push('\n');
        }
        out
    }
}

// ─── Documents ───────────────────────────────────────────────────────────────

/// The contents (ending in a newline) of every fenced block of the Markdown `doc` whose info
/// string is exactly `lang`, in order.
pub fn fenced(doc: &str, lang: &str) -> Vec<String> {
    let fence = format!("```{lang}");
    let mut out = Vec::new();
    let mut lines = doc.lines();
    while let Some(line) = lines.next() {
        if line.trim_end() == fence {
            let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            out.push(body.join("\n") + "\n");
        }
    }
    out
}
