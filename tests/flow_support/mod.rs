//! Helpers for the flow-control tests and benchmarks (on top of `tests/common`): a lean raw
//! WebSocket client that can take floods of output without keeping or parsing all of it,
//! can be connected with a small receive buffer, and can simply stop reading its socket;
//! plus `/proc` readers (RSS, CPU ticks, finding a process by its command line).

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

pub const ROOT_URI: &str = "ahp-root://";

/// What one read off the socket produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pumped {
    Frame,
    Closed,
    Timeout,
}

/// A raw JSON-RPC client for floods. `terminal/data` notifications are recognised without
/// being parsed (the JSON tokens `"terminal/data"` and `"method":"action"` cannot occur inside
/// an escaped string); only the
/// channels in `watch` have their data decoded and kept. Every other message is parsed and
/// kept in `others`.
pub struct Lean {
    pub ws: WebSocketStream<TcpStream>,
    next_id: u64,
    next_seq: i64,
    pub client_id: String,
    /// Channels whose `terminal/data` is decoded and appended to `data`.
    pub watch: HashSet<String>,
    pub data: HashMap<String, String>,
    /// With `Some(n)`, only the last `n` bytes (about) of each watched channel's data are
    /// kept in `data`; `data_len` still counts everything.
    pub keep_tail: Option<usize>,
    /// Decoded `terminal/data` bytes per watched channel.
    pub data_len: HashMap<String, usize>,
    /// `terminal/data` envelopes per watched channel.
    pub data_envelopes: HashMap<String, usize>,
    /// Frame bytes and count of every `terminal/data` envelope, all channels.
    pub data_frame_bytes: usize,
    pub data_frames: usize,
    /// Every other message, parsed, in arrival order.
    pub others: Vec<Value>,
    /// Highest `serverSeq` seen on any envelope.
    pub last_seq: u64,
    /// Set once the connection ended: `Some(frame)` for a close frame, `None` without one.
    pub closed: Option<Option<CloseFrame>>,
}

/// Reads `"serverSeq":<n>` out of a raw envelope.
pub fn raw_server_seq(text: &str) -> Option<u64> {
    let i = text.find("\"serverSeq\":")? + "\"serverSeq\":".len();
    let digits: String = text[i..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

impl Lean {
    /// Connects to the daemon at `addr` (`127.0.0.1:PORT`); with `rcvbuf`, the socket's
    /// receive buffer is set (before connecting, so the TCP window stays small).
    pub async fn connect(addr: &str, rcvbuf: Option<u32>) -> Lean {
        let sa: SocketAddr = addr.parse().expect("daemon address");
        let sock = tokio::net::TcpSocket::new_v4().expect("socket");
        if let Some(n) = rcvbuf {
            sock.set_recv_buffer_size(n).expect("SO_RCVBUF");
        }
        let stream = tokio::time::timeout(Duration::from_secs(10), sock.connect(sa))
            .await
            .expect("tcp connect timed out")
            .expect("tcp connect");
        let _ = stream.set_nodelay(true);
        let config = WebSocketConfig::default()
            .max_message_size(Some(64 << 20))
            .max_frame_size(Some(64 << 20));
        let (ws, _) = tokio::time::timeout(
            Duration::from_secs(10),
            tokio_tungstenite::client_async_with_config(
                format!("ws://{addr}/"),
                stream,
                Some(config),
            ),
        )
        .await
        .expect("ws handshake timed out")
        .expect("ws handshake");
        Lean {
            ws,
            next_id: 1,
            next_seq: 1,
            client_id: String::new(),
            watch: HashSet::new(),
            data: HashMap::new(),
            keep_tail: None,
            data_len: HashMap::new(),
            data_envelopes: HashMap::new(),
            data_frame_bytes: 0,
            data_frames: 0,
            others: Vec::new(),
            last_seq: 0,
            closed: None,
        }
    }

    /// Connects and sends `initialize` with `["1.0.0"]`; returns the result.
    pub async fn connect_init(addr: &str, client_id: &str, rcvbuf: Option<u32>) -> (Lean, Value) {
        let mut c = Lean::connect(addr, rcvbuf).await;
        c.client_id = client_id.into();
        let r = c
            .request(
                "initialize",
                json!({"channel": ROOT_URI, "protocolVersions": ["1.0.0"], "clientId": client_id,
                       "initialSubscriptions": []}),
            )
            .await;
        let result = r
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("initialize failed: {r}"));
        (c, result)
    }

    pub async fn send_json(&mut self, v: &Value) {
        self.ws
            .send(Message::Text(v.to_string().into()))
            .await
            .expect("send");
    }

    /// Sends a request; returns its id.
    pub async fn send_request(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.send_json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        id
    }

    /// Sends a request and reads (keeping everything else as usual) until its response.
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params).await;
        self.wait_response(id, Duration::from_secs(30)).await
    }

    pub async fn wait_response(&mut self, id: u64, timeout: Duration) -> Value {
        let idv = json!(id);
        self.wait(&format!("response to {id}"), timeout, |c| {
            c.response(&idv).is_some()
        })
        .await;
        self.response(&idv).unwrap()
    }

    fn response(&self, id: &Value) -> Option<Value> {
        self.others
            .iter()
            .rev()
            .find(|m| m.get("id") == Some(id) && m.get("method").is_none())
            .cloned()
    }

    /// `createTerminal` with a client claim held by this client; panics on an error.
    pub async fn create_terminal(&mut self, uri: &str) {
        let r = self
            .request(
                "createTerminal",
                json!({"channel": uri, "claim": {"kind": "client", "clientId": self.client_id}}),
            )
            .await;
        assert!(r.get("error").is_none(), "createTerminal {uri}: {r}");
    }

    /// `subscribe`, watching the channel's data; returns the snapshot.
    pub async fn subscribe(&mut self, uri: &str) -> Value {
        self.watch.insert(uri.to_string());
        let r = self.request("subscribe", json!({"channel": uri})).await;
        r.pointer("/result/snapshot")
            .cloned()
            .unwrap_or_else(|| panic!("subscribe {uri}: {r}"))
    }

    /// `dispatchAction`; returns the clientSeq.
    pub async fn dispatch(&mut self, channel: &str, action: Value) -> i64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.send_json(&json!({"jsonrpc": "2.0", "method": "dispatchAction",
            "params": {"channel": channel, "clientSeq": seq, "action": action}}))
            .await;
        seq
    }

    pub async fn input(&mut self, channel: &str, text: &str) -> i64 {
        self.dispatch(channel, json!({"type": "terminal/input", "data": text}))
            .await
    }

    /// Handles one received text frame.
    fn take(&mut self, text: &str) {
        if let Some(s) = raw_server_seq(text) {
            self.last_seq = self.last_seq.max(s);
        }
        // Responses (e.g. a reconnect replay) may hold data envelopes too: only notifications
        // count here.
        if text.contains("\"terminal/data\"") && text.contains("\"method\":\"action\"") {
            self.data_frames += 1;
            self.data_frame_bytes += text.len();
            if let Some(w) = self
                .watch
                .iter()
                .find(|w| text.contains(&format!("\"{w}\"")))
                .cloned()
            {
                let v: Value = serde_json::from_str(text).expect("JSON frame");
                let d = v
                    .pointer("/params/action/data")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                *self.data_len.entry(w.clone()).or_default() += d.len();
                let kept = self.data.entry(w.clone()).or_default();
                kept.push_str(d);
                if let Some(n) = self.keep_tail {
                    if kept.len() > 2 * n + 4 {
                        let mut cut = kept.len() - n;
                        while !kept.is_char_boundary(cut) {
                            cut += 1;
                        }
                        kept.drain(..cut);
                    }
                }
                *self.data_envelopes.entry(w).or_default() += 1;
            }
            return;
        }
        let v: Value = serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("server sent a frame that is not JSON ({e}): {text}"));
        self.others.push(v);
    }

    /// Reads one frame (or times out at `deadline`).
    pub async fn pump(&mut self, deadline: Instant) -> Pumped {
        if self.closed.is_some() {
            return Pumped::Closed;
        }
        match tokio::time::timeout_at(deadline, self.ws.next()).await {
            Err(_) => Pumped::Timeout,
            Ok(None) | Ok(Some(Err(_))) => {
                self.closed = Some(None);
                Pumped::Closed
            }
            Ok(Some(Ok(Message::Text(t)))) => {
                self.take(t.as_str());
                Pumped::Frame
            }
            Ok(Some(Ok(Message::Close(f)))) => {
                self.closed = Some(f);
                Pumped::Closed
            }
            Ok(Some(Ok(Message::Binary(b)))) => panic!("binary frame ({} bytes)", b.len()),
            Ok(Some(Ok(_))) => Pumped::Frame,
        }
    }

    /// Reads until `pred` holds; panics on timeout or close.
    pub async fn wait(
        &mut self,
        what: &str,
        timeout: Duration,
        mut pred: impl FnMut(&Lean) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        loop {
            if pred(self) {
                return;
            }
            match self.pump(deadline).await {
                Pumped::Frame => {}
                Pumped::Closed => {
                    if pred(self) {
                        return;
                    }
                    panic!("waiting for {what}: connection closed ({:?})", self.closed)
                }
                Pumped::Timeout => panic!(
                    "waiting for {what}: timed out after {timeout:?}; last messages:\n{}",
                    self.describe()
                ),
            }
        }
    }

    /// Reads everything that arrives for `dur`; returns the `terminal/data` frame bytes read.
    pub async fn drain_for(&mut self, dur: Duration) -> usize {
        let before = self.data_frame_bytes;
        let deadline = Instant::now() + dur;
        while self.pump(deadline).await == Pumped::Frame {}
        self.data_frame_bytes - before
    }

    /// The decoded data of a watched channel.
    pub fn data_of(&self, uri: &str) -> &str {
        self.data.get(uri).map(String::as_str).unwrap_or("")
    }

    pub async fn wait_data(&mut self, uri: &str, needle: &str, timeout: Duration) {
        let (u, n) = (uri.to_string(), needle.to_string());
        // Only the tail can newly contain the needle.
        self.wait(&format!("{needle:?} in {uri}"), timeout, |c| {
            let d = c.data_of(&u);
            let from = d.len().saturating_sub(n.len() + 256 * 1024);
            let mut from = from;
            while !d.is_char_boundary(from) {
                from -= 1;
            }
            d[from..].contains(&n)
        })
        .await
    }

    /// Types a marker command and waits for its output (any shell, no integration needed).
    pub async fn ready_plain(&mut self, uri: &str) {
        self.input(uri, "echo rdy-$((40+2))\r").await;
        self.wait_data(uri, "rdy-42", Duration::from_secs(20)).await;
    }

    /// Types a marker command and waits for its output and its `terminal/commandFinished`
    /// (shell integration active), so later waits see only later commands.
    pub async fn ready(&mut self, uri: &str) {
        let seq0 = self.last_seq;
        self.ready_plain(uri).await;
        self.wait_envelope(
            uri,
            "terminal/commandFinished",
            Duration::from_secs(20),
            |e| e["serverSeq"].as_u64() > Some(seq0),
        )
        .await;
    }

    /// Action envelopes (params of `action` notifications) among `others`.
    pub fn envelopes(&self) -> impl Iterator<Item = &Value> {
        self.others
            .iter()
            .filter(|m| m.get("method").and_then(Value::as_str) == Some("action"))
            .filter_map(|m| m.get("params"))
    }

    /// The first envelope on `channel` whose action type is `ty` and for which `pred` holds.
    pub fn find_envelope(
        &self,
        channel: &str,
        ty: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Option<Value> {
        self.envelopes()
            .find(|e| e["channel"] == channel && e["action"]["type"] == ty && pred(e))
            .cloned()
    }

    pub async fn wait_envelope(
        &mut self,
        channel: &str,
        ty: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        self.wait(&format!("{ty} on {channel}"), timeout, |c| {
            c.find_envelope(channel, ty, &pred).is_some()
        })
        .await;
        self.find_envelope(channel, ty, &pred).unwrap()
    }

    pub fn describe(&self) -> String {
        let mut out = format!(
            "  ({} data frames, {} bytes; closed: {:?})\n",
            self.data_frames, self.data_frame_bytes, self.closed
        );
        for m in self.others.iter().rev().take(20).rev() {
            out.push_str("  ");
            out.push_str(&crate::common::clip(m.to_string(), 300));
            out.push('\n');
        }
        out
    }
}

// ─── resuming and checking a view ────────────────────────────────────────────

impl Lean {
    /// A new connection that sends `reconnect` for `client_id` with `last_seen` and
    /// `subscriptions`, watching them; returns it and the result (`{"type":…}`).
    pub async fn reconnect(
        addr: &str,
        client_id: &str,
        last_seen: u64,
        subscriptions: &[&str],
    ) -> (Lean, Value) {
        let mut c = Lean::connect(addr, None).await;
        c.client_id = client_id.into();
        for s in subscriptions {
            c.watch.insert(s.to_string());
        }
        let r = c
            .request(
                "reconnect",
                json!({"channel": ROOT_URI, "clientId": client_id,
                       "lastSeenServerSeq": last_seen, "subscriptions": subscriptions}),
            )
            .await;
        let result = r
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("reconnect failed: {r}"));
        if let Some(actions) = result["actions"].as_array() {
            if let Some(s) = actions.iter().filter_map(|a| a["serverSeq"].as_u64()).max() {
                c.last_seq = c.last_seq.max(s);
            }
        }
        (c, result)
    }

    /// Reads until the connection ends (close frame or EOF) or `timeout` passes; returns
    /// whether it ended.
    pub async fn read_to_close(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            match self.pump(deadline).await {
                Pumped::Frame => {}
                Pumped::Closed => return true,
                Pumped::Timeout => return false,
            }
        }
    }

    /// Reads for `dur` at about `bytes_per_sec` of frames (a reader on a slow link).
    pub async fn read_paced(&mut self, bytes_per_sec: usize, dur: Duration) {
        let start = Instant::now();
        let mut read = 0usize;
        while start.elapsed() < dur && self.closed.is_none() {
            let before = self.data_frame_bytes + self.others.len();
            let deadline = (Instant::now() + Duration::from_millis(50)).min(start + dur);
            if self.pump(deadline).await == Pumped::Frame {
                read += (self.data_frame_bytes + self.others.len()).saturating_sub(before);
            }
            // Not waiting for an event: this is the slow link's pace.
            let due = start + Duration::from_secs_f64(read as f64 / bytes_per_sec as f64);
            if due > Instant::now() {
                tokio::time::sleep_until(due.min(start + dur)).await;
            }
        }
    }
}

/// The `terminal/data` of `channel` in a `reconnect` replay result, concatenated.
pub fn replayed_data(result: &Value, channel: &str) -> String {
    result["actions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|e| e["channel"] == channel && e["action"]["type"] == "terminal/data")
                .filter_map(|e| e["action"]["data"].as_str())
                .collect()
        })
        .unwrap_or_default()
}

/// How the synthesized prefix of a snapshot (its own first part, there when the terminal's
/// output was trimmed) begins: the preamble that resets the client's emulator.
pub const SYNTHESIZED_START: &str = "\x1b[?1049l\x1b[r\x1b[?6l";

/// Whether content part `p` is a snapshot's synthesized prefix.
pub fn is_synthesized(p: &Value) -> bool {
    p["type"] == "unclassified"
        && p["value"]
            .as_str()
            .is_some_and(|v| v.starts_with(SYNTHESIZED_START))
}

/// The text of a terminal snapshot's retained content (values and command outputs, in order),
/// without the synthesized prefix: the tail of the output stream.
pub fn snapshot_text(snapshot: &Value) -> String {
    snapshot["state"]["content"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter(|p| !is_synthesized(p))
                .filter_map(|p| p["value"].as_str().or_else(|| p["output"].as_str()))
                .collect()
        })
        .unwrap_or_default()
}

/// The numbers of the lines of `text` that are nothing but a number (`seq` output through a
/// tty: `N\r\n`; of a line the shell rewrote with `\r`, what follows the last `\r`), in order.
pub fn numbered_lines(text: &str) -> Vec<u64> {
    text.split("\r\n")
        .map(|l| l.rsplit('\r').next().unwrap_or(l))
        .filter(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()))
        .filter_map(|l| l.parse().ok())
        .collect()
}

impl Lean {
    /// A fresh snapshot of terminal `uri` taken by `fresh` (which subscribes), after which
    /// `typist` sets a marker title and every client in `viewers` waits for it: they have then
    /// received everything the snapshot holds. Returns the snapshot's content text.
    pub async fn settle(
        fresh: &mut Lean,
        typist: &mut Lean,
        viewers: &mut [&mut Lean],
        uri: &str,
    ) -> String {
        let truth = snapshot_text(&fresh.subscribe(uri).await);
        let marker = unique("settled");
        typist
            .dispatch(
                uri,
                json!({"type": "terminal/titleChanged", "title": marker}),
            )
            .await;
        for v in viewers.iter_mut() {
            v.wait_envelope(uri, "terminal/titleChanged", Duration::from_secs(10), |e| {
                e["action"]["title"] == marker.as_str()
            })
            .await;
        }
        truth
    }
}

/// Checks that `nums` is exactly `first..=last`: no number twice, none missing.
pub fn assert_consecutive(nums: &[u64], first: u64, last: u64, who: &str) {
    let mut expected = first;
    for (i, &n) in nums.iter().enumerate() {
        assert_eq!(
            n,
            expected,
            "{who}: line {i} is {n}, expected {expected} (a line {} across the cut); around it: {:?}",
            if n < expected { "twice" } else { "missing" },
            &nums[i.saturating_sub(3)..(i + 3).min(nums.len())]
        );
        expected += 1;
    }
    assert_eq!(
        expected,
        last + 1,
        "{who}: lines end at {}, expected {last}",
        expected - 1
    );
}

// ─── /proc ───────────────────────────────────────────────────────────────────

/// Resident set size of `pid` in bytes (VmRSS).
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("VmRSS value");
    kb * 1024
}

/// utime + stime of `pid`, in clock ticks; `None` once it is gone.
pub fn cpu_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    // After the name: state(0) ppid pgrp session tty tpgid flags minflt cminflt majflt
    // cmajflt utime(11) stime(12).
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Clock ticks per second.
pub fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// Pids of every live process.
pub fn proc_pids() -> impl Iterator<Item = i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
}

/// Pids of the processes named `comm` among the descendants of `root`.
pub fn descendants_named(root: u32, comm: &str) -> Vec<i32> {
    let mut parent = HashMap::new();
    let mut names = HashMap::new();
    for pid in proc_pids() {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let ppid = stat[close + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse::<i32>().ok())
            .unwrap_or(0);
        parent.insert(pid, ppid);
        names.insert(pid, stat[open + 1..close].to_string());
    }
    let descends = |mut p: i32| {
        for _ in 0..16 {
            match parent.get(&p) {
                Some(&pp) if pp == root as i32 => return true,
                Some(&pp) if pp > 1 => p = pp,
                _ => return false,
            }
        }
        false
    };
    names
        .iter()
        .filter(|(pid, name)| name.as_str() == comm && descends(**pid))
        .map(|(pid, _)| *pid)
        .collect()
}

/// Pids of live processes whose command line contains `needle` (arguments joined by spaces).
pub fn pids_with_cmdline(needle: &str) -> Vec<i32> {
    let mut out = Vec::new();
    let me = std::process::id() as i32;
    for pid in proc_pids() {
        if pid == me {
            continue;
        }
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(needle) {
            out.push(pid);
        }
    }
    out
}

/// Waits (polling /proc) for exactly one process whose command line contains `needle`.
pub async fn wait_pid_of(needle: &str, timeout: Duration) -> i32 {
    let deadline = Instant::now() + timeout;
    loop {
        let pids = pids_with_cmdline(needle);
        if pids.len() == 1 {
            return pids[0];
        }
        if Instant::now() >= deadline {
            panic!("no single process with {needle:?} in its command line: {pids:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A unique tag for command lines and file names.
pub fn unique(tag: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1);
    format!(
        "{tag}{}x{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
