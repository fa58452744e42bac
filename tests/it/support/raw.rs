//! One raw JSON-RPC client over tokio-tungstenite, for what the official client cannot do:
//! exact frames, malformed ones, reading the stream message by message, a small socket
//! receive buffer, not reading at all, or reading a flood without keeping it.
//!
//! By default every message is parsed and kept in [`Raw::received`], and the `terminal/data`
//! of every channel is also appended to [`Raw::data`]. A *lean* client ([`Opts::lean`]) takes
//! floods: `terminal/data` notifications are recognised without being parsed (the JSON tokens
//! `"terminal/data"` and `"method":"action"` cannot occur inside an escaped string), counted,
//! and decoded only for the channels in [`Raw::watch`]; they are not kept in `received`.

use std::collections::{HashMap, HashSet};
use std::net::ToSocketAddrs;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::{clip, unique, ROOT, RPC_TIMEOUT, SHELL_TIMEOUT};

pub type Ws = WebSocketStream<TcpStream>;

/// How a [`Raw`] client connects and what it keeps.
#[derive(Debug, Clone, Copy, Default)]
pub struct Opts {
    /// The socket's receive buffer (`SO_RCVBUF`, set before connecting so the TCP window
    /// stays small), for a client that stops reading.
    pub rcvbuf: Option<u32>,
    /// Keep `terminal/data` only for watched channels, unparsed otherwise.
    pub lean: bool,
}

impl Opts {
    pub fn lean() -> Opts {
        Opts {
            lean: true,
            ..Opts::default()
        }
    }

    pub fn rcvbuf(self, bytes: u32) -> Opts {
        Opts {
            rcvbuf: Some(bytes),
            ..self
        }
    }
}

/// What one read off the socket produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pumped {
    Frame,
    Closed,
    Timeout,
}

pub struct Raw {
    pub ws: Ws,
    next_id: u64,
    next_seq: i64,
    pub client_id: String,
    lean: bool,
    /// Every message received, parsed, in order (lean: all but `terminal/data`
    /// notifications).
    pub received: Vec<Value>,
    /// Index into `received` of the next message not yet returned by [`Raw::next_message`].
    cursor: usize,
    /// Lean: the channels whose `terminal/data` is decoded into `data`.
    pub watch: HashSet<String>,
    /// Decoded `terminal/data` per channel.
    pub data: HashMap<String, String>,
    /// With `Some(n)`, only the last `n` bytes (about) of each channel's data are kept in
    /// `data`; `data_len` still counts everything.
    pub keep_tail: Option<usize>,
    /// Decoded `terminal/data` bytes per channel.
    pub data_len: HashMap<String, usize>,
    /// Frame bytes and count of every `terminal/data` notification, all channels.
    pub data_frame_bytes: usize,
    pub data_frames: usize,
    /// Highest `serverSeq` seen in any frame (an envelope, or an `initialize` result).
    pub last_seq: u64,
    /// Set once the connection ended: `Some(frame)` for a close frame, `None` without one.
    pub closed: Option<Option<CloseFrame>>,
}

/// Reads `"serverSeq":<n>` out of a raw frame.
fn raw_server_seq(text: &str) -> Option<u64> {
    let i = text.find("\"serverSeq\":")? + "\"serverSeq\":".len();
    let digits: String = text[i..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

impl Raw {
    /// Connects to `url` (`ws://HOST:PORT…`), keeping everything.
    pub async fn connect(url: &str) -> Raw {
        Raw::connect_with(url, Opts::default()).await
    }

    /// Connects with `opts`; `request` may carry extra headers (an `Origin`, say).
    pub async fn connect_with(request: impl IntoClientRequest, opts: Opts) -> Raw {
        let request = request.into_client_request().expect("client request");
        let uri = request.uri();
        let host = uri.host().expect("host in the URL");
        let port = uri.port_u16().unwrap_or(80);
        let sa = (host, port)
            .to_socket_addrs()
            .expect("daemon address")
            .find(|a| a.is_ipv4())
            .expect("an IPv4 address");
        let sock = tokio::net::TcpSocket::new_v4().expect("socket");
        if let Some(n) = opts.rcvbuf {
            sock.set_recv_buffer_size(n).expect("SO_RCVBUF");
        }
        let stream = tokio::time::timeout(RPC_TIMEOUT, sock.connect(sa))
            .await
            .expect("tcp connect timed out")
            .expect("tcp connect");
        let _ = stream.set_nodelay(true);
        let config = WebSocketConfig::default()
            .max_message_size(Some(64 << 20))
            .max_frame_size(Some(64 << 20));
        let (ws, _) = tokio::time::timeout(
            RPC_TIMEOUT,
            tokio_tungstenite::client_async_with_config(request, stream, Some(config)),
        )
        .await
        .expect("ws handshake timed out")
        .expect("ws handshake");
        Raw {
            ws,
            next_id: 1000,
            next_seq: 1,
            client_id: String::new(),
            lean: opts.lean,
            received: Vec::new(),
            cursor: 0,
            watch: HashSet::new(),
            data: HashMap::new(),
            keep_tail: None,
            data_len: HashMap::new(),
            data_frame_bytes: 0,
            data_frames: 0,
            last_seq: 0,
            closed: None,
        }
    }

    /// Connects and initializes with `["1.0.0"]`; returns the result.
    pub async fn connect_init(url: &str, client_id: &str, subs: &[&str]) -> (Raw, Value) {
        Raw::connect_init_with(url, Opts::default(), client_id, subs).await
    }

    pub async fn connect_init_with(
        url: &str,
        opts: Opts,
        client_id: &str,
        subs: &[&str],
    ) -> (Raw, Value) {
        let mut raw = Raw::connect_with(url, opts).await;
        let result = raw.initialize(client_id, subs).await;
        (raw, result)
    }

    /// Sends `initialize` with `["1.0.0"]` and `subs`; returns the result (panics on an
    /// error).
    pub async fn initialize(&mut self, client_id: &str, subs: &[&str]) -> Value {
        self.watch.extend(subs.iter().map(|s| s.to_string()));
        let resp = self
            .request(
                "initialize",
                json!({"channel": ROOT, "protocolVersions": ["1.0.0"], "clientId": client_id,
                       "initialSubscriptions": subs}),
            )
            .await;
        self.client_id = client_id.into();
        resp.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("initialize failed: {resp}"))
    }

    /// A new socket whose first message is `reconnect`; returns it and the whole response.
    pub async fn reconnect(
        url: &str,
        client_id: &str,
        last_seen: i64,
        subs: &[&str],
    ) -> (Raw, Value) {
        Raw::reconnect_with(url, Opts::default(), client_id, last_seen, subs).await
    }

    pub async fn reconnect_with(
        url: &str,
        opts: Opts,
        client_id: &str,
        last_seen: i64,
        subs: &[&str],
    ) -> (Raw, Value) {
        let mut raw = Raw::connect_with(url, opts).await;
        raw.client_id = client_id.into();
        raw.watch.extend(subs.iter().map(|s| s.to_string()));
        let resp = raw
            .request(
                "reconnect",
                json!({"channel": ROOT, "clientId": client_id, "lastSeenServerSeq": last_seen,
                       "subscriptions": subs}),
            )
            .await;
        if let Some(actions) = resp.pointer("/result/actions").and_then(Value::as_array) {
            if let Some(s) = actions.iter().filter_map(|a| a["serverSeq"].as_u64()).max() {
                raw.last_seq = raw.last_seq.max(s);
            }
        }
        (raw, resp)
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

    /// Sends a request with a fresh numeric id; returns the id.
    pub async fn send_request(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.send_json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        id
    }

    /// Sends a request and returns the response with its id (reading, and keeping as usual,
    /// everything before it).
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params).await;
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
                .rev()
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

    /// `terminal/input` with `text`; returns the clientSeq.
    pub async fn type_text(&mut self, channel: &str, text: &str) -> i64 {
        self.dispatch(channel, json!({"type": "terminal/input", "data": text}))
            .await
    }

    /// `createTerminal` with a client claim held by this client; panics on an error.
    pub async fn create_terminal(&mut self, uri: &str) {
        let claim = json!({"kind": "client", "clientId": self.client_id});
        self.create_claimed(uri, claim).await
    }

    /// `createTerminal` with `claim`; panics on an error.
    pub async fn create_claimed(&mut self, uri: &str, claim: Value) {
        let r = self
            .request("createTerminal", json!({"channel": uri, "claim": claim}))
            .await;
        assert!(
            r.get("result").is_some() && r.get("error").is_none(),
            "createTerminal {uri}: {r}"
        );
    }

    /// `subscribe` (watching the channel's data); returns the snapshot.
    pub async fn subscribe(&mut self, uri: &str) -> Value {
        self.subscribe_at(uri).await.1
    }

    /// `subscribe`; returns the index of the response in `received`, and the snapshot.
    pub async fn subscribe_at(&mut self, uri: &str) -> (usize, Value) {
        self.watch.insert(uri.to_string());
        let r = self.request("subscribe", json!({"channel": uri})).await;
        let snap = r
            .pointer("/result/snapshot")
            .cloned()
            .unwrap_or_else(|| panic!("subscribe {uri}: {}", clip(r.to_string(), 300)));
        let pos = self
            .received
            .iter()
            .rposition(|m| m.get("id") == r.get("id") && m.get("method").is_none())
            .unwrap();
        (pos, snap)
    }

    /// `unsubscribe` (a notification: no answer to wait for); stops watching.
    pub async fn unsubscribe(&mut self, uri: &str) {
        self.send_json(&json!({"jsonrpc": "2.0", "method": "unsubscribe",
                               "params": {"channel": uri}}))
            .await;
        self.watch.remove(uri);
    }

    /// Handles one received text frame.
    fn take(&mut self, text: &str) {
        if let Some(s) = raw_server_seq(text) {
            self.last_seq = self.last_seq.max(s);
        }
        // Responses (a reconnect replay, say) may hold data envelopes too: only
        // notifications count here.
        let data = text.contains("\"terminal/data\"") && text.contains("\"method\":\"action\"");
        if data {
            self.data_frames += 1;
            self.data_frame_bytes += text.len();
        }
        if data && self.lean {
            let Some(w) = self
                .watch
                .iter()
                .find(|w| text.contains(&format!("\"{w}\"")))
                .cloned()
            else {
                return;
            };
            let v: Value = serde_json::from_str(text).expect("JSON frame");
            let d = v.pointer("/params/action/data").and_then(Value::as_str);
            self.add_data(&w, d.unwrap_or(""));
            return;
        }
        let v: Value = serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("server sent a text frame that is not JSON ({e}): {text}"));
        if data {
            let channel = v["params"]["channel"].as_str().unwrap_or("").to_string();
            let d = v.pointer("/params/action/data").and_then(Value::as_str);
            self.add_data(&channel, d.unwrap_or(""));
        }
        self.received.push(v);
    }

    fn add_data(&mut self, channel: &str, d: &str) {
        *self.data_len.entry(channel.to_string()).or_default() += d.len();
        let kept = self.data.entry(channel.to_string()).or_default();
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
    }

    /// Reads one frame (or times out at `deadline`). Panics on a binary frame or a text
    /// frame that is not JSON.
    pub async fn pump(&mut self, deadline: Instant) -> Pumped {
        if self.closed.is_some() {
            return Pumped::Closed;
        }
        match tokio::time::timeout_at(deadline, self.ws.next()).await {
            Err(_) => Pumped::Timeout,
            Ok(None) => {
                self.closed = Some(None);
                Pumped::Closed
            }
            Ok(Some(Err(e))) => {
                eprintln!("websocket error: {e}");
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
            Ok(Some(Ok(Message::Binary(b)))) => {
                panic!("server sent a binary frame ({} bytes)", b.len())
            }
            Ok(Some(Ok(_))) => Pumped::Frame,
        }
    }

    /// Reads messages until `pred(self)` holds; panics after `timeout` (or when the
    /// connection ends first) with what was seen.
    pub async fn wait_until(
        &mut self,
        what: &str,
        timeout: Duration,
        mut pred: impl FnMut(&Raw) -> bool,
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
                    panic!(
                        "waiting for {what}: connection closed ({:?}); seen:\n{}",
                        self.closed,
                        self.describe()
                    )
                }
                Pumped::Timeout => panic!(
                    "waiting for {what}: timed out after {timeout:?}; seen:\n{}",
                    self.describe()
                ),
            }
        }
    }

    /// The next kept message (any kind), or panic after `timeout`.
    pub async fn next_message(&mut self, timeout: Duration) -> Value {
        let cursor = self.cursor;
        self.wait_until("a message", timeout, |r| r.received.len() > cursor)
            .await;
        self.cursor += 1;
        self.received[cursor].clone()
    }

    /// Marks every message received so far as seen by [`Raw::next_message`].
    pub fn skip_seen(&mut self) {
        self.cursor = self.received.len();
    }

    /// Forgets everything received so far (a long-running client's record stays small).
    pub fn forget(&mut self) {
        self.received.clear();
        self.cursor = 0;
        self.data.clear();
    }

    /// The next message that is not an `action` notification (a response).
    pub async fn next_response(&mut self, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = self.next_message(left).await;
            if m.get("method").and_then(Value::as_str) != Some("action") {
                return m;
            }
        }
    }

    /// The action envelopes (params of `action` notifications) kept so far.
    pub fn envelopes(&self) -> impl DoubleEndedIterator<Item = &Value> {
        self.received
            .iter()
            .filter(|m| m.get("method").and_then(Value::as_str) == Some("action"))
            .filter_map(|m| m.get("params"))
    }

    /// The `serverSeq` of the last envelope kept (0 if none).
    pub fn last_envelope_seq(&self) -> u64 {
        self.envelopes()
            .last()
            .and_then(|e| e["serverSeq"].as_u64())
            .unwrap_or(0)
    }

    /// The decoded `terminal/data` of `channel` so far.
    pub fn data(&self, channel: &str) -> &str {
        self.data.get(channel).map(String::as_str).unwrap_or("")
    }

    /// Reads until the data of `channel` contains `needle` (each byte is searched once).
    pub async fn wait_data(&mut self, channel: &str, needle: &str, timeout: Duration) {
        let (c, n) = (channel.to_string(), needle.to_string());
        let mut from = 0;
        self.wait_until(
            &format!("{needle:?} in the data of {channel}"),
            timeout,
            |raw| {
                let d = raw.data(&c);
                if raw.keep_tail.is_some() || from > d.len() {
                    from = 0;
                }
                while !d.is_char_boundary(from) {
                    from -= 1;
                }
                let found = d[from..].contains(&n);
                from = d.len().saturating_sub(n.len());
                found
            },
        )
        .await
    }

    /// Types a marker command and waits for its output: the shell reads input.
    pub async fn ready(&mut self, channel: &str) {
        self.type_text(channel, "echo rdy-$((40+2))\r").await;
        self.wait_data(channel, "rdy-42", SHELL_TIMEOUT).await;
    }

    /// [`Raw::ready`], then also the marker's `terminal/commandFinished` (shell integration
    /// active), so that later waits see only later commands.
    pub async fn ready_for_commands(&mut self, channel: &str) {
        let seq0 = self.last_seq;
        self.ready(channel).await;
        self.wait_action(channel, "terminal/commandFinished", SHELL_TIMEOUT, |e| {
            e["serverSeq"].as_u64() > Some(seq0)
        })
        .await;
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
            found = raw.envelopes().find(|e| pred(e)).cloned();
            found.is_some()
        })
        .await;
        found.unwrap()
    }

    /// The first envelope on `channel` whose action type is `ty` and for which `pred` holds.
    pub fn find_action(
        &self,
        channel: &str,
        ty: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Option<Value> {
        self.envelopes()
            .find(|e| e["channel"] == channel && e["action"]["type"] == ty && pred(e))
            .cloned()
    }

    /// Waits for [`Raw::find_action`] to find one, and returns it.
    pub async fn wait_action(
        &mut self,
        channel: &str,
        ty: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        self.wait_envelope(&format!("{ty} on {channel}"), timeout, |e| {
            e["channel"] == channel && e["action"]["type"] == ty && pred(e)
        })
        .await
    }

    /// Waits until the server closes the connection; returns the close frame, if any.
    pub async fn wait_closed(&mut self, timeout: Duration) -> Option<CloseFrame> {
        assert!(
            self.read_to_close(timeout).await,
            "server did not close the connection within {timeout:?}; seen:\n{}",
            self.describe()
        );
        self.closed.clone().unwrap()
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

    /// Reads everything that arrives for `dur`; returns the `terminal/data` frame bytes read.
    pub async fn drain_for(&mut self, dur: Duration) -> usize {
        let before = self.data_frame_bytes;
        let deadline = Instant::now() + dur;
        while self.pump(deadline).await == Pumped::Frame {}
        self.data_frame_bytes - before
    }

    /// Reads for `dur` at about `bytes_per_sec` of frames (a reader on a slow link).
    pub async fn read_paced(&mut self, bytes_per_sec: usize, dur: Duration) {
        let start = Instant::now();
        let mut read = 0usize;
        while start.elapsed() < dur && self.closed.is_none() {
            let before = self.data_frame_bytes + self.received.len();
            let deadline = (Instant::now() + Duration::from_millis(50)).min(start + dur);
            if self.pump(deadline).await == Pumped::Frame {
                read += (self.data_frame_bytes + self.received.len()).saturating_sub(before);
            }
            // Not waiting for an event: this is the slow link's pace.
            let due = start + Duration::from_secs_f64(read as f64 / bytes_per_sec as f64);
            if due > Instant::now() {
                tokio::time::sleep_until(due.min(start + dur)).await;
            }
        }
    }

    /// A fresh snapshot of terminal `uri` taken by `fresh` (which subscribes), after which
    /// `typist` sets a marker title and every client in `viewers` waits for it: they have then
    /// received everything the snapshot holds. Returns the snapshot's content text.
    ///
    /// The terminal must have gone quiet: output between the snapshot and the marker (a prompt
    /// printed just after the line a test waited for) would be in the viewers' streams and not
    /// in the snapshot. So a second snapshot is taken once the viewers have the marker; until
    /// it equals the first, the round is done again from it (at most 20 rounds).
    pub async fn settle(
        fresh: &mut Raw,
        typist: &mut Raw,
        viewers: &mut [&mut Raw],
        uri: &str,
    ) -> String {
        let mut truth = super::snapshot_text(&fresh.subscribe(uri).await);
        for _ in 0..20 {
            let marker = unique("settled");
            typist
                .dispatch(
                    uri,
                    json!({"type": "terminal/titleChanged", "title": marker}),
                )
                .await;
            for v in viewers.iter_mut() {
                v.wait_action(uri, "terminal/titleChanged", RPC_TIMEOUT, |e| {
                    e["action"]["title"] == marker.as_str()
                })
                .await;
            }
            let again = super::snapshot_text(&fresh.subscribe(uri).await);
            if again == truth {
                return truth;
            }
            truth = again;
        }
        panic!(
            "terminal {uri} never went quiet: its content changed in 20 rounds; ends {}",
            super::tail(&truth, 200)
        );
    }

    /// Drops the connection abruptly (no WebSocket close frame), as a crash would.
    pub fn drop_abruptly(self) {
        drop(self.ws);
    }

    /// Types `echo pid-$$` and returns the shell's pid.
    pub async fn shell_pid(&mut self, uri: &str) -> i32 {
        self.type_text(uri, "echo pid-$$\r").await;
        let u = uri.to_string();
        self.wait_until("pid-<digits>", SHELL_TIMEOUT, |r| {
            super::find_number_after(r.data(&u), "pid-").is_some()
        })
        .await;
        super::find_number_after(self.data(uri), "pid-").unwrap() as i32
    }

    /// Does the latest `root/terminalsChanged` received list `uri`?
    pub fn root_lists(&self, uri: &str) -> Option<bool> {
        self.envelopes()
            .rev()
            .find(|e| e["channel"] == ROOT && e["action"]["type"] == "root/terminalsChanged")
            .map(|e| {
                e["action"]["terminals"]
                    .as_array()
                    .is_some_and(|rows| rows.iter().any(|r| r["resource"] == uri))
            })
    }

    /// Waits until the latest root update does (or does not) list `uri`.
    pub async fn wait_root_lists(&mut self, uri: &str, listed: bool, timeout: Duration) {
        let with = if listed { "with" } else { "without" };
        self.wait_until(
            &format!("root/terminalsChanged {with} {uri}"),
            timeout,
            |r| r.root_lists(uri) == Some(listed),
        )
        .await
    }

    /// The counts and the last 40 messages kept, for failure messages.
    pub fn describe(&self) -> String {
        let mut out = format!(
            "  ({} data frames, {} bytes; closed: {:?})\n",
            self.data_frames, self.data_frame_bytes, self.closed
        );
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

/// Two raw clients on one new terminal: `owner` (also subscribed to the root channel) creates
/// it with a client claim, then the observer (`<owner>-obs`) and the owner subscribe, and the
/// shell is ready. Returns (owner, observer, URI, owner's snapshot, observer's snapshot).
pub async fn owner_and_observer(
    url: &str,
    owner: &str,
    tag: &str,
) -> (Raw, Raw, String, Value, Value) {
    let (mut a, _) = Raw::connect_init(url, owner, &[ROOT]).await;
    let (mut obs, _) = Raw::connect_init(url, &format!("{owner}-obs"), &[]).await;
    let t = super::term_uri(tag);
    a.create_terminal(&t).await;
    let obs_snap = obs.subscribe(&t).await;
    let a_snap = a.subscribe(&t).await;
    a.ready(&t).await;
    (a, obs, t, a_snap, obs_snap)
}

/// Tries the WebSocket upgrade at `url` with extra headers: `Ok` if upgraded (then closed),
/// else the HTTP status.
pub async fn upgrade_status(url: &str, headers: &[(&str, &str)]) -> Result<(), u16> {
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

/// A bare WebSocket connection to `url` (for frames that [`Raw`] would not send).
pub async fn ws_connect(url: &str) -> Ws {
    Raw::connect(url).await.ws
}
