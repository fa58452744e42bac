//! Finding and connecting to a daemon.
//!
//! Which daemon: `--url` / `$AHPTY_URL` (`ws://HOST:PORT?tkn=TOKEN`, `wss://…`, or
//! `unix:PATH`), else the default socket ([`crate::config::default_socket_path`]). How:
//! tokio-tungstenite's client handshake, over TCP (TLS for `wss://`; a token not in the URL
//! is taken from `$AHPTY_TOKEN` and sent as `Authorization: Bearer`) or over a `UnixStream`
//! (after checking with `SO_PEERCRED` that the daemon runs as this user, or root), wrapped in
//! [`WsTransport`], an implementation of `ahp::Transport` that, unlike `ahp-ws`'s, keeps the
//! close frame's code ([`CLOSE_CODE`]: 1001 shutdown, 1012 restart, 4000 superseded). Then the
//! official `ahp::Client` does everything else (`initialize` with the client id
//! [`CLIENT_ID`] and `clientInfo {name: "ahpty", version}`).
//!
//! Resuming ([`Conn::resume_on_restart`], for `attach` and `logs --follow`): when the daemon
//! closes the connection with 1012 ("service restart": a live upgrade, docs/upgrade.md),
//! [`Conn::next`] connects again — at once, then with a backoff from 50 ms doubling to 1 s, for
//! at most [`RESUME_WITHIN`] — and sends `reconnect {clientId, lastSeenServerSeq,
//! subscriptions}` with the highest `serverSeq` received: the replay continues the stream
//! with no gap and no duplicate. An answer with snapshots (the history no longer covers the
//! gap), a daemon that no longer knows the client (`-32008`: another process), or a close with
//! 4000 (another `ahpty` process resumed as [`CLIENT_ID`] and superseded this connection)
//! resume with fresh snapshots instead ([`Event::Snapshot`]); actions dispatched meanwhile
//! ([`Conn::dispatch`]) are sent once the connection is back. A connection that ends without
//! a close frame (the daemon was killed, or during a live upgrade could not send its 1012 in
//! time to a client that stopped reading) is tried again once, at once: a daemon still
//! listening (upgrading) takes it back the same way; a dead one ends the session.
//!
//! Its parts: `transport.rs` (the address and the WebSocket), `gate.rs` (the read-ahead
//! bound); this file holds the connection, `initialize` and the resume after a restart.
//!
//! Flow control: [`Gated`] lets at most [`MAX_UNREAD_EVENTS`] action notifications be read off
//! the socket ahead of the subcommand consuming them (see [`Conn::next_event`]); past that the
//! socket is not read, so a slow stdout slows the terminal down through the daemon's own
//! flow control instead of overflowing the client's event buffer (which would drop output).
//!
//! Failures become one line each: no daemon (exit 2, with how to start one), a token refused,
//! a host that is not ahpty, a lost connection (255).
//!
//! May touch: the socket it opens (TCP, TLS or Unix) and the environment (`$AHPTY_URL`,
//! `$AHPTY_TOKEN`, read); nothing of the local terminal.

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use ahp::ahp_types::actions::{ActionEnvelope, StateAction};
use ahp::ahp_types::commands::{
    Implementation, InitializeParams, InitializeResult, ReconnectParams, ReconnectResult,
    ReconnectSnapshotResult,
};
use ahp::ahp_types::state::{SnapshotState, TerminalState};
use ahp::{Client, ClientConfig, ClientError, ClientEventStream, SubscriptionEvent};
use ahp::{Transport, TransportError, TransportMessage};
use futures_util::{SinkExt, StreamExt};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::UnixStream;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::WebSocketStream;

use super::Failure;
mod gate;
mod transport;

use crate::config::{default_socket_path, effective_uid, TOKEN_ENV, URL_ENV};
use crate::proto::catalog::{TerminalListing, LIST_TERMINALS};
pub use crate::proto::close::{CLOSE_RESTART, CLOSE_SUPERSEDED};
use crate::proto::codes::{CONNECTION_LOST, NOT_FOUND as UNKNOWN_CLIENT};
pub use crate::proto::ROOT;
pub use gate::Gated;
use transport::connect_ws;
pub use transport::{Target, WsTransport};

/// The `clientId` every `ahpty` client subcommand presents. Terminals created by `ahpty new`
/// and `ahpty run` are claimed by it, so any later `ahpty` command is their holder.
pub const CLIENT_ID: &str = "ahpty-cli";

/// The close code of the last WebSocket close frame the daemon sent (0: none since the last
/// connection was opened): a CLI process has one connection at a time; a lost connection is
/// reported as a shutdown when the daemon said `1001 going away`, and resumed after `1012`.
pub static CLOSE_CODE: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);

/// How long a connection closed with [`CLOSE_RESTART`] is tried again before the command
/// gives up (exit 255): the longest hand-over (`--upgrade-timeout` is at most 60 s) and an
/// execution of the old image after it, with room to spare.
pub const RESUME_WITHIN: Duration = Duration::from_secs(90);

/// First and longest pause between two resume attempts (the first is made at once).
const RESUME_BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(1));

/// Actions dispatched while the connection is being resumed, kept at most; one more fails.
const MAX_HELD_ACTIONS: usize = 4096;

/// Action notifications read off the socket but not yet consumed, at most.
pub const MAX_UNREAD_EVENTS: usize = 64;

/// Time allowed for connecting and `initialize`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Event {
    /// An action envelope, in `serverSeq` order.
    Action(ActionEnvelope),
    /// The connection was resumed with a fresh snapshot of `channel` (a terminal): its actions
    /// up to `from_seq` may be missing; later ones follow.
    Snapshot {
        channel: String,
        state: Box<TerminalState>,
        from_seq: u64,
    },
    /// The connection was resumed and `channel` no longer exists (disposed meanwhile).
    Missing(String),
}

/// A connection that was lost and is being resumed.
struct Lost {
    /// Give up after this.
    deadline: Instant,
    /// The next attempt not before this.
    next_at: Instant,
    /// Pause after the next failed attempt.
    backoff: Duration,
    /// Resume with `reconnect` (a restart) or with `initialize` (superseded).
    replay: bool,
    /// The connection ended without a close frame: one attempt only, whose failure is
    /// reported as the lost connection it then was ([`Failure::lost`]).
    once: bool,
    /// Why the last attempt failed.
    last_error: String,
}

/// One connection to a daemon, initialized.
pub struct Conn {
    /// The official client.
    pub client: Client,
    events: ClientEventStream,
    credits: Arc<Semaphore>,
    /// Events read while waiting for an answer or given by a resume, for [`Conn::next`].
    pending: VecDeque<Event>,
    /// Envelopes are no longer wanted (see [`Conn::discard_events`]).
    discard: bool,
    target: Target,
    token: Option<String>,
    /// The channels subscribed (`initialize` and [`Conn::subscribed`]), for a resume.
    channels: Vec<String>,
    /// The highest `serverSeq` received (envelopes, snapshots, `initialize`).
    last_seq: u64,
    /// Resume after [`CLOSE_RESTART`] (see [`Conn::resume_on_restart`]).
    resumable: bool,
    /// Set while the connection is lost and being resumed.
    lost: Option<Lost>,
    /// Why the last resume gave up.
    gave_up: Option<String>,
    /// Actions dispatched while the connection was lost, to send once it is back.
    held: VecDeque<(String, StateAction)>,
    /// The `clientId` presented ([`CLIENT_ID`] unless opened with [`Conn::open_as`]).
    client_id: String,
}

impl Conn {
    /// Connects to `target` and initializes as [`CLIENT_ID`], subscribing to `subscriptions`
    /// (e.g. `[ROOT]`). `token` is the `$AHPTY_TOKEN` value for a `ws://` URL without one.
    pub async fn open(
        target: &Target,
        token: Option<&str>,
        subscriptions: &[&str],
    ) -> Result<Conn, Failure> {
        Conn::open_as(target, token, subscriptions, CLIENT_ID).await
    }

    /// [`Conn::open`] presenting `client_id` instead of [`CLIENT_ID`] (`ahpty mcp`: one
    /// `clientId` per agent session); a resume presents it too.
    pub async fn open_as(
        target: &Target,
        token: Option<&str>,
        subscriptions: &[&str],
        client_id: &str,
    ) -> Result<Conn, Failure> {
        let timeout = |_| {
            Failure::unreachable(format!(
                "the daemon at {} did not answer within {} s",
                target.describe(),
                CONNECT_TIMEOUT.as_secs()
            ))
        };
        tokio::time::timeout(
            CONNECT_TIMEOUT,
            Conn::open_inner(target, token, subscriptions, client_id),
        )
        .await
        .map_err(timeout)?
    }

    async fn open_inner(
        target: &Target,
        token: Option<&str>,
        subscriptions: &[&str],
        client_id: &str,
    ) -> Result<Conn, Failure> {
        let (client, events, credits) = connect_client(target, token).await?;
        let channels: Vec<String> = subscriptions.iter().map(|s| s.to_string()).collect();
        let init = initialize(&client, target, &channels, client_id).await?;
        let name = init.server_info.as_ref().map(|i| i.name.as_str());
        if name != Some("ahpty") {
            return Err(Failure::unreachable(format!(
                "{} is an AHP host but not ahpty (serverInfo.name {:?}); the ahpty client \
                 subcommands need an ahpty daemon",
                target.describe(),
                name.unwrap_or("")
            )));
        }
        Ok(Conn {
            client,
            events,
            credits,
            pending: VecDeque::new(),
            discard: false,
            target: target.clone(),
            token: token.map(str::to_string),
            channels,
            last_seq: u64::try_from(init.server_seq).unwrap_or(0),
            resumable: false,
            lost: None,
            gave_up: None,
            held: VecDeque::new(),
            client_id: client_id.to_string(),
        })
    }

    /// The `clientId` this connection presents.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    /// From now on a connection closed with [`CLOSE_RESTART`] (or superseded with
    /// [`CLOSE_SUPERSEDED`]) is resumed by [`Conn::next`] instead of ending it.
    pub fn resume_on_restart(&mut self) {
        self.resumable = true;
    }

    /// Records a `subscribe` to `channel` answered with a snapshot at `from_seq` (a resume
    /// restores it).
    pub fn subscribed(&mut self, channel: &str, from_seq: u64) {
        if !self.channels.iter().any(|c| c == channel) {
            self.channels.push(channel.to_string());
        }
        self.last_seq = self.last_seq.max(from_seq);
    }

    /// Why the connection ended, as one line (exit 255): [`Failure::lost`], or why a resume
    /// gave up.
    pub fn lost_failure(&self) -> Failure {
        match &self.gave_up {
            Some(why) => Failure {
                code: super::EXIT_LOST,
                message: why.clone(),
            },
            None => Failure::lost(),
        }
    }

    /// The next event: an action envelope (any channel), or what a resume found. `None` once
    /// the connection is gone for good: not resumable, or the resume gave up
    /// ([`Conn::lost_failure`] says why). Cancel-safe: a resume attempt cut short is made
    /// again at the next call, and nothing received is lost.
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Some(e);
            }
            if self.lost.is_none() {
                if let Some(e) = self.recv_event().await {
                    return Some(Event::Action(e));
                }
                let code = CLOSE_CODE.load(Ordering::Relaxed);
                // 0: no close frame (killed, or a 1012 that could not be sent in time).
                if !self.resumable || !matches!(code, 0 | CLOSE_RESTART | CLOSE_SUPERSEDED) {
                    return None;
                }
                let now = Instant::now();
                self.lost = Some(Lost {
                    deadline: now + RESUME_WITHIN,
                    next_at: now,
                    backoff: RESUME_BACKOFF.0,
                    replay: code != CLOSE_SUPERSEDED,
                    once: code == 0,
                    last_error: format!("closed with code {code}"),
                });
            }
            if !self.resume_attempt().await {
                return None;
            }
        }
    }

    /// One attempt at resuming a lost connection, after the pause the backoff asks for.
    /// Returns `false` when the resume gives up.
    async fn resume_attempt(&mut self) -> bool {
        let Some(lost) = &self.lost else {
            return true;
        };
        if Instant::now() >= lost.deadline {
            let what = if lost.replay {
                format!("the daemon restarted (close code {CLOSE_RESTART}) and")
            } else {
                format!(
                    "another ahpty process resumed as {CLIENT_ID} (close code \
                     {CLOSE_SUPERSEDED}); the connection"
                )
            };
            self.gave_up = Some(format!(
                "{what} could not be reached again within {} s: {}",
                RESUME_WITHIN.as_secs(),
                lost.last_error
            ));
            self.lost = None;
            return false;
        }
        tokio::time::sleep_until(lost.next_at).await;
        let replay = lost.replay;
        let result = tokio::time::timeout(CONNECT_TIMEOUT, self.resume_once(replay))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())));
        match result {
            Ok(()) => {
                self.lost = None;
                self.release_held().await;
            }
            Err(_) if self.lost.as_ref().is_some_and(|l| l.once) => {
                // Nobody took the connection back: it was lost, not restarted.
                self.lost = None;
                return false;
            }
            Err(e) => {
                if let Some(lost) = &mut self.lost {
                    lost.last_error = e;
                    lost.next_at = Instant::now() + lost.backoff;
                    lost.backoff = (lost.backoff * 2).min(RESUME_BACKOFF.1);
                }
            }
        }
        true
    }

    /// Connects again and resumes: `reconnect` from the last `serverSeq` when `replay`, else
    /// (or when the daemon does not know the client) `initialize` with fresh snapshots. What
    /// it yields is queued for [`Conn::next`]; nothing changes unless it succeeds.
    async fn resume_once(&mut self, replay: bool) -> Result<(), String> {
        CLOSE_CODE.store(0, Ordering::Relaxed);
        let (client, events, credits) = connect_client(&self.target, self.token.as_deref())
            .await
            .map_err(|f| f.message)?;
        let mut found = if replay {
            let params = ReconnectParams {
                channel: ROOT.into(),
                meta: None,
                client_id: self.client_id.clone(),
                last_seen_server_seq: i64::try_from(self.last_seq).unwrap_or(i64::MAX),
                subscriptions: self.channels.clone(),
            };
            match client
                .request::<_, ReconnectResult>("reconnect", params)
                .await
            {
                Ok(answer) => Some(resumed(answer, self.last_seq, &self.channels)),
                Err(ClientError::Rpc(e)) if e.code == UNKNOWN_CLIENT => None,
                Err(e) => return Err(format!("reconnect: {e}")),
            }
        } else {
            None
        };
        if found.is_none() {
            let init = initialize(&client, &self.target, &self.channels, &self.client_id)
                .await
                .map_err(|f| f.message)?;
            let answer = ReconnectResult::Snapshot(ReconnectSnapshotResult {
                snapshots: init.snapshots,
            });
            // Counted from the answer: after a real restart the sequence is another process's.
            let base = u64::try_from(init.server_seq).unwrap_or(0);
            found = Some(resumed(answer, base, &self.channels));
        }
        let Some((found, last_seq)) = found else {
            return Err("no answer".into());
        };
        // Committed: the old client is gone, everything it had received was taken.
        self.client = client;
        self.events = events;
        self.credits = credits;
        self.last_seq = last_seq;
        for e in found {
            if let Event::Missing(m) = &e {
                self.channels.retain(|c| c != m);
            }
            if !self.discard {
                self.pending.push_back(e);
            }
        }
        Ok(())
    }

    /// Dispatches `action` to `channel`. While a resumable connection is lost the action is
    /// held and sent once it is back. Errors: the connection is gone (not resumable), or too
    /// many actions are held.
    pub async fn dispatch(&mut self, channel: &str, action: StateAction) -> Result<(), Failure> {
        if self.lost.is_none() {
            match self
                .client
                .dispatch(channel.to_string(), action.clone())
                .await
            {
                Ok(_) => return Ok(()),
                Err(_) if !self.resumable => return Err(self.lost_failure()),
                // The stream ends too: `next` resumes (or gives up), then this is sent.
                Err(_) => {}
            }
        }
        if self.held.len() >= MAX_HELD_ACTIONS {
            return Err(Failure {
                code: super::EXIT_LOST,
                message: format!(
                    "the daemon is restarting and {MAX_HELD_ACTIONS} actions are waiting for it"
                ),
            });
        }
        self.held.push_back((channel.to_string(), action));
        Ok(())
    }

    /// Sends the actions held while the connection was lost, in order; stops at the first that
    /// fails (the connection is lost again) and keeps it.
    async fn release_held(&mut self) {
        while let Some((channel, action)) = self.held.pop_front() {
            if self
                .client
                .dispatch(channel.clone(), action.clone())
                .await
                .is_err()
            {
                self.held.push_front((channel, action));
                return;
            }
        }
    }

    /// The next action envelope (any channel), `None` once the connection is gone (see
    /// [`Conn::next`], whose other events this skips).
    pub async fn next_event(&mut self) -> Option<ActionEnvelope> {
        loop {
            if let Event::Action(e) = self.next().await? {
                return Some(e);
            }
        }
    }

    async fn recv_event(&mut self) -> Option<ActionEnvelope> {
        loop {
            let ev = self.events.recv().await?;
            self.credits.add_permits(1);
            if let SubscriptionEvent::Action(env) = ev.event {
                self.last_seq = self.last_seq.max(env.server_seq);
                return Some(env);
            }
        }
    }

    /// Takes every envelope already received into the buffer, then removes and returns the
    /// first one matching `pred`.
    pub fn take_buffered(
        &mut self,
        pred: impl Fn(&ActionEnvelope) -> bool,
    ) -> Option<ActionEnvelope> {
        while let Some(Some(e)) = futures_util::FutureExt::now_or_never(self.recv_event()) {
            if !self.discard {
                self.pending.push_back(Event::Action(e));
            }
        }
        let i = self
            .pending
            .iter()
            .position(|e| matches!(e, Event::Action(a) if pred(a)))?;
        match self.pending.remove(i)? {
            Event::Action(a) => Some(a),
            _ => None,
        }
    }

    /// From now on, envelopes that arrive while waiting for an answer are dropped (the caller
    /// is done with the stream, e.g. disposing of the terminal it watched).
    pub fn discard_events(&mut self) {
        self.discard = true;
        self.pending.clear();
    }

    /// A request. Envelopes arriving meanwhile are kept for [`Conn::next_event`] (so the flow
    /// gate never holds the answer back behind them).
    pub async fn call<R: DeserializeOwned>(
        &mut self,
        method: &str,
        params: Value,
    ) -> Result<R, ClientError> {
        let client = self.client.clone();
        let method = method.to_string();
        let answer = async move { client.request::<_, R>(&method, params).await };
        tokio::pin!(answer);
        loop {
            tokio::select! {
                biased;
                r = &mut answer => return r,
                ev = self.recv_event() => match ev {
                    Some(e) if !self.discard => self.pending.push_back(Event::Action(e)),
                    Some(_) => {}
                    // The answer fails too now.
                    None => return answer.await,
                },
            }
        }
    }

    /// [`Conn::call`] with an error response as a one-line [`Failure`] (exit 1) carrying the
    /// daemon's message, a lost connection [`Failure::lost`].
    pub async fn request<R: DeserializeOwned>(
        &mut self,
        method: &str,
        params: Value,
    ) -> Result<R, Failure> {
        self.call(method, params).await.map_err(request_failure)
    }

    /// `ahpty/listTerminals`.
    pub async fn list(&mut self) -> Result<TerminalListing, Failure> {
        self.request(LIST_TERMINALS, json!({ "channel": ROOT }))
            .await
    }

    /// Closes the connection cleanly (a WebSocket close frame).
    pub async fn close(self) {
        let _ = tokio::time::timeout(Duration::from_secs(2), self.client.shutdown()).await;
    }
}

/// Opens a transport to `target` and starts an `ahp::Client` on it (not initialized), with
/// its event stream attached before anything is sent and a fresh flow gate.
async fn connect_client(
    target: &Target,
    token: Option<&str>,
) -> Result<(Client, ClientEventStream, Arc<Semaphore>), Failure> {
    let credits = Arc::new(Semaphore::new(MAX_UNREAD_EVENTS));
    let config = ClientConfig {
        default_request_timeout: Some(Duration::from_secs(60)),
        subscription_buffer: 4 * MAX_UNREAD_EVENTS,
    };
    let client = match target {
        Target::Unix(path) => {
            let transport = WsTransport::connect_unix(path).await?;
            Client::connect(Gated::new(transport, credits.clone()), config).await
        }
        Target::Ws(url) => {
            let transport = connect_ws(url, token, target).await?;
            Client::connect(Gated::new(transport, credits.clone()), config).await
        }
    }
    .map_err(|e| Failure::unreachable(format!("{}: {e}", target.describe())))?;
    let events = client.events();
    Ok((client, events, credits))
}

/// `initialize` as `client_id` with `subscriptions`.
async fn initialize(
    client: &Client,
    target: &Target,
    subscriptions: &[String],
    client_id: &str,
) -> Result<InitializeResult, Failure> {
    let params = InitializeParams {
        channel: ROOT.into(),
        meta: None,
        protocol_versions: vec!["1.0.0".into()],
        client_id: client_id.into(),
        initial_subscriptions: (!subscriptions.is_empty()).then(|| subscriptions.to_vec()),
        locale: None,
        capabilities: None,
        client_info: Some(Implementation {
            name: "ahpty".into(),
            version: Some(env!("CARGO_PKG_VERSION").into()),
            title: None,
        }),
    };
    client
        .request("initialize", params)
        .await
        .map_err(|e| match e {
            ClientError::Rpc(e) if e.code != CONNECTION_LOST => Failure::unreachable(format!(
                "the daemon at {} refused to initialize: {}",
                target.describe(),
                e.message
            )),
            _ => Failure::unreachable(format!(
                "the daemon at {} closed the connection during initialize",
                target.describe()
            )),
        })
}

/// What a `reconnect` answer means for a client subscribed to `channels` that had received
/// everything up to `last_seq`: the events to yield, and the new highest `serverSeq`. A
/// replay's envelopes at or below `last_seq` are left out (they were received); a channel a
/// snapshot answer has no snapshot for is missing.
fn resumed(answer: ReconnectResult, last_seq: u64, channels: &[String]) -> (Vec<Event>, u64) {
    let mut events = Vec::new();
    let mut seq = last_seq;
    match answer {
        ReconnectResult::Replay(replay) => {
            for a in replay.actions {
                if a.server_seq > seq {
                    seq = a.server_seq;
                    events.push(Event::Action(a));
                }
            }
            events.extend(replay.missing.into_iter().map(Event::Missing));
        }
        ReconnectResult::Snapshot(answer) => {
            for c in channels {
                if !answer.snapshots.iter().any(|s| s.resource == *c) {
                    events.push(Event::Missing(c.clone()));
                }
            }
            for snap in answer.snapshots {
                let from_seq = u64::try_from(snap.from_seq).unwrap_or(0);
                seq = seq.max(from_seq);
                if let SnapshotState::Terminal(state) = snap.state {
                    events.push(Event::Snapshot {
                        channel: snap.resource,
                        state,
                        from_seq,
                    });
                }
            }
        }
    }
    (events, seq)
}

/// Maps a failed request to its one line.
pub fn request_failure(e: ClientError) -> Failure {
    match e {
        // What `ahp::Client` answers pending requests with when the connection ends (ahpty
        // itself never sends -32000).
        ClientError::Rpc(e) if e.code == CONNECTION_LOST => Failure::lost(),
        ClientError::Rpc(e) => Failure::failed(e.message),
        ClientError::Deserialization(e) => {
            Failure::failed(format!("unexpected answer from the daemon: {e}"))
        }
        ClientError::Cancelled => Failure::failed("the daemon did not answer in time"),
        _ => Failure::lost(),
    }
}

// ─── WebSocket over TCP ──────────────────────────────────────────────────────

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(seq: u64, channel: &str) -> Value {
        json!({"channel": channel, "serverSeq": seq,
               "action": {"type": "terminal/data", "data": format!("d{seq}")}})
    }

    fn answer(v: Value) -> ReconnectResult {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_replay_continues_after_what_was_received() {
        let t = "ahp-terminal:/t".to_string();
        let channels = vec![ROOT.to_string(), t.clone(), "ahp-terminal:/gone".into()];
        let replay = json!({"type": "replay",
            "actions": [envelope(7, &t), envelope(8, &t), envelope(9, &t)],
            "missing": ["ahp-terminal:/gone"]});
        let (events, seq) = resumed(answer(replay), 7, &channels);
        assert_eq!(seq, 9);
        let seqs: Vec<u64> = events
            .iter()
            .filter_map(|e| match e {
                Event::Action(a) => Some(a.server_seq),
                _ => None,
            })
            .collect();
        assert_eq!(seqs, [8, 9], "what was received is not yielded again");
        assert!(matches!(events.last(), Some(Event::Missing(m)) if m == "ahp-terminal:/gone"));

        // Nothing missed: an empty replay leaves the position where it was.
        let empty = json!({"type": "replay", "actions": [], "missing": []});
        let (events, seq) = resumed(answer(empty), 12, &channels);
        assert!(events.is_empty());
        assert_eq!(seq, 12);
    }

    #[test]
    fn snapshots_replace_the_stream_and_name_what_is_gone() {
        let t = "ahp-terminal:/t".to_string();
        let channels = vec![ROOT.to_string(), t.clone(), "ahp-terminal:/gone".into()];
        let state = json!({"title": "sh", "content": [], "lifecycle": {"status": "running"},
            "claim": {"kind": "client", "clientId": "x"}});
        let snapshots = json!({"type": "snapshot", "snapshots": [
            {"resource": ROOT, "state": {"agents": []}, "fromSeq": 40},
            {"resource": t, "state": state, "fromSeq": 41}]});
        let (events, seq) = resumed(answer(snapshots), 3, &channels);
        assert_eq!(seq, 41);
        assert_eq!(events.len(), 2, "{events:?}");
        assert!(matches!(&events[0], Event::Missing(m) if m == "ahp-terminal:/gone"));
        assert!(matches!(&events[1],
            Event::Snapshot { channel, from_seq: 41, .. } if *channel == t));
    }
}
