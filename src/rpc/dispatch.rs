//! The method table: one connection's view of AHP methods (docs/protocol.md, "Methods").
//!
//! Before `initialize` only `ping`, `initialize` and `reconnect` are served; other requests,
//! and a second handshake, get -32601 as from the reference host. Results and envelopes are
//! encoded for the negotiated protocol version ([`crate::codec::version`]).
//! Requests take effect in the order they arrive (a `subscribe` sent right after
//! `createTerminal` finds the terminal). The only wait inline is spawning a shell (a fork/exec);
//! `disposeTerminal` removes the terminal inline and waits for its processes to die in a
//! separate task, so a `ping` is never stuck behind it.
//!
//! May touch: the host's API and this connection's outbox; nothing of the socket.

use std::sync::Arc;

use ahp_types::commands::{
    CreateTerminalParams, DisposeTerminalParams, Implementation, InitializeParams,
    InitializeResult, ReconnectParams, SubscribeParams, UnsubscribeParams,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::error::RpcError;
use super::frame::{self, Incoming, RequestId};
use super::params;
use crate::codec::{self, version, Wire};
use crate::host::channel::{self, ChannelKind};
use crate::host::{ConnId, Host, Outbox};
use crate::proto::catalog;

/// Frames at least this large (bytes) are parsed and handled off the async worker threads
/// (see [`offload`]).
const BIG_FRAME_BYTES: usize = 64 * 1024;

/// Runs `f`, which may be CPU-heavy (parsing a large frame, encoding a large answer), with
/// [`tokio::task::block_in_place`] when `heavy` and on a multi-threaded runtime, so the other
/// tasks of the worker thread move to another thread instead of waiting for it.
fn offload<R>(heavy: bool, f: impl FnOnce() -> R) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let multi =
        Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if heavy && multi {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

/// What the connection does after a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Keep reading.
    Continue,
    /// Flush what is queued, then close (e.g. after -32005).
    Close,
}

/// One frame, parsed ([`RpcConnection::parse`]) and waiting to be handled
/// ([`RpcConnection::handle`]). A frame is parsed once, when it arrives, even if its
/// connection then holds it back (see [`Message::jumps_the_queue`]).
#[derive(Debug)]
pub struct Message {
    incoming: Incoming,
    /// At least [`BIG_FRAME_BYTES`]: handled off the async worker threads.
    big: bool,
}

impl Message {
    /// Whether this message, received while its connection's own queue is congested, is
    /// handled at once rather than held back behind the requests already held back: `ping`
    /// always (it has no ordering); `dispatchAction` and `unsubscribe` notifications (input
    /// such as Ctrl-C), and frames that only get an error or nothing, when nothing is held
    /// back (so they keep their order relative to other requests). Other requests wait.
    pub fn jumps_the_queue(&self, nothing_held_back: bool) -> bool {
        match &self.incoming {
            Incoming::Request { method, .. } => method == "ping",
            Incoming::Notification { method, .. } => {
                nothing_held_back && (method == "dispatchAction" || method == "unsubscribe")
            }
            _ => nothing_held_back,
        }
    }
}

/// One connection's RPC state.
pub struct RpcConnection {
    host: Arc<Host>,
    conn: ConnId,
    outbox: Outbox,
    initialized: bool,
    /// The negotiated protocol version's wire shapes.
    wire: Wire,
}

/// `dispatchAction` params, read raw so malformed actions can be rejected with a reason.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DispatchParams {
    channel: String,
    client_seq: i64,
    action: Value,
}

impl RpcConnection {
    /// Registers a connection with the host.
    pub fn new(host: Arc<Host>, outbox: Outbox) -> Self {
        let conn = host.connect(outbox.clone());
        RpcConnection {
            host,
            conn,
            outbox,
            initialized: false,
            wire: Wire::Current,
        }
    }

    /// This connection's id in the host.
    pub fn id(&self) -> ConnId {
        self.conn
    }

    /// Parses one frame's text ([`frame::parse`]); a frame of [`BIG_FRAME_BYTES`] or more off
    /// the async worker threads.
    pub fn parse(text: &str) -> Message {
        let big = text.len() >= BIG_FRAME_BYTES;
        Message {
            incoming: offload(big, || frame::parse(text)),
            big,
        }
    }

    /// Handles one parsed frame. A big frame's notification is handled off the async worker
    /// threads, as are the requests whose answers can be large (`subscribe`, and
    /// `initialize`/`reconnect` listing channels).
    pub async fn handle(&mut self, message: Message) -> Next {
        let big = message.big;
        match message.incoming {
            Incoming::Invalid { id, error } => {
                self.outbox.send(frame::error(&id, &error));
                Next::Continue
            }
            Incoming::Response => Next::Continue,
            Incoming::MalformedNotification { method, error } => {
                tracing::debug!(method, %error, "malformed notification dropped");
                Next::Continue
            }
            Incoming::Notification { method, params } => {
                offload(big, || self.notification(&method, params));
                Next::Continue
            }
            Incoming::Request { id, method, params } => {
                self.request(id, &method, params, big).await
            }
        }
    }

    /// [`RpcConnection::parse`], then [`RpcConnection::handle`].
    pub async fn handle_text(&mut self, text: &str) -> Next {
        self.handle(Self::parse(text)).await
    }

    fn reply(&self, id: &RawValue, result: Result<Value, RpcError>) {
        let text = match result {
            Ok(v) => codec::success(id, v),
            Err(e) => frame::error(id, &e),
        };
        self.outbox.send(text);
    }

    fn notification(&mut self, method: &str, params: Value) {
        if !self.initialized {
            tracing::debug!(method, "notification before initialize ignored");
            return;
        }
        match method {
            "dispatchAction" => {
                if let Err(e) = self.dispatch_action(params) {
                    tracing::debug!(error = %e, "malformed dispatchAction dropped");
                }
            }
            "unsubscribe" => {
                if let Ok(p) = params::decode::<UnsubscribeParams>(&params) {
                    self.host.unsubscribe(self.conn, &p.channel);
                }
            }
            _ => tracing::debug!(method, "unknown notification ignored"),
        }
    }

    fn dispatch_action(&mut self, params: Value) -> Result<(), RpcError> {
        let p: DispatchParams = params::decode(&params)?;
        self.host
            .dispatch(self.conn, &p.channel, p.client_seq, p.action);
        Ok(())
    }

    async fn request(&mut self, id: RequestId, method: &str, params: Value, big: bool) -> Next {
        match method {
            "ping" => {
                self.reply(&id, Ok(Value::Null));
                return Next::Continue;
            }
            "initialize" => {
                let heavy = big || has_entries(&params, "initialSubscriptions");
                return offload(heavy, || self.initialize(id, params));
            }
            "reconnect" if !self.initialized => {
                let heavy = big || has_entries(&params, "subscriptions");
                offload(heavy, || self.reconnect(id, params));
                return Next::Continue;
            }
            _ => {}
        }
        if !self.initialized {
            self.reply(
                &id,
                Err(RpcError::method_unavailable(format!(
                    "{method} is not available before initialize (or reconnect)"
                ))),
            );
            return Next::Continue;
        }
        match method {
            "subscribe" => offload(true, || self.subscribe(id, params)),
            "createTerminal" => self.create_terminal(id, params, big).await,
            "disposeTerminal" => self.dispose_terminal(id, params),
            // ahpty's extension: the terminal list with sizes, cwds, ages and holder presence.
            catalog::LIST_TERMINALS => {
                let listing = self.host.list_terminals(self.conn);
                self.reply(
                    &id,
                    serde_json::to_value(listing).map_err(|e| RpcError::internal(e.to_string())),
                );
            }
            "dispatchAction" => {
                let r = offload(big, || self.dispatch_action(params).map(|_| Value::Null));
                self.reply(&id, r);
            }
            "unsubscribe" => {
                let r = params::decode::<UnsubscribeParams>(&params).map(|p| {
                    self.host.unsubscribe(self.conn, &p.channel);
                    Value::Null
                });
                self.reply(&id, r);
            }
            "reconnect" => self.reply(
                &id,
                Err(RpcError::method_unavailable(
                    "reconnect must be the first message on a connection; open a new one",
                )),
            ),
            other => {
                let r = no_agents_answer(other, &params);
                self.reply(&id, r);
            }
        }
        Next::Continue
    }

    fn initialize(&mut self, id: RequestId, params: Value) -> Next {
        if self.initialized {
            self.reply(
                &id,
                Err(RpcError::method_unavailable(
                    "initialize was already called on this connection; open a new one",
                )),
            );
            return Next::Continue;
        }
        let p: InitializeParams = match params::decode(&params) {
            Ok(p) => p,
            Err(e) => {
                self.reply(&id, Err(e));
                return Next::Continue;
            }
        };
        let (version, wire) = match version::negotiate(&p.protocol_versions) {
            Ok(Some(v)) => v,
            Ok(None) => {
                self.reply(
                    &id,
                    Err(RpcError::unsupported_version(
                        version::SUPPORTED_VERSION_RANGES,
                    )),
                );
                return Next::Close;
            }
            Err(msg) => {
                self.reply(
                    &id,
                    Err(RpcError::invalid_params(format!("protocolVersions: {msg}"))),
                );
                return Next::Continue;
            }
        };
        let subscriptions = p.initial_subscriptions.unwrap_or_default();
        let client = p
            .client_info
            .as_ref()
            .map(|c| codec::clip(c.name.clone(), 64))
            .unwrap_or_else(|| "?".into());
        let client_version = p
            .client_info
            .as_ref()
            .and_then(|c| c.version.clone())
            .map(|v| codec::clip(v, 64))
            .unwrap_or_else(|| "?".into());
        let client_id = p.client_id;
        let default_directory = self.host.default_directory();
        let logged = (self.conn, client_id.clone(), version.clone());
        let initialized = self.host.initialize(
            self.conn,
            client_id,
            &subscriptions,
            wire,
            |server_seq, snapshots| {
                let result = InitializeResult {
                    protocol_version: version,
                    server_seq,
                    server_info: Some(Implementation {
                        name: "ahpty".into(),
                        version: Some(env!("CARGO_PKG_VERSION").into()),
                        title: None,
                    }),
                    meta: None,
                    snapshots,
                    default_directory: Some(default_directory),
                    completion_trigger_characters: None,
                    terminal_command_prefix: None,
                    telemetry: None,
                    automations: None,
                };
                version::initialize_response(&id, &result, wire)
            },
        );
        match initialized {
            Ok(()) => {
                self.initialized = true;
                self.wire = wire;
                let (conn, client_id, version) = logged;
                tracing::debug!(
                    conn,
                    %client_id,
                    %client,
                    %client_version,
                    %version,
                    "client initialized"
                );
            }
            Err(e) => self.reply(&id, Err(e.into())),
        }
        Next::Continue
    }

    /// `reconnect {clientId, lastSeenServerSeq, subscriptions}`; a missing `channel` is
    /// tolerated (VS Code omits it). The connection counts as initialized after it, unless it
    /// was refused (-32008 for a client this process does not know: `initialize` may follow),
    /// or its `clientId` or `subscriptions` were out of bounds (-32602; see
    /// [`Host::reconnect`]).
    fn reconnect(&mut self, id: RequestId, mut params: Value) {
        if let Value::Object(m) = &mut params {
            m.entry("channel")
                .or_insert_with(|| Value::String(channel::ROOT.into()));
        }
        let p: ReconnectParams = match params::decode(&params) {
            Ok(p) => p,
            Err(e) => return self.reply(&id, Err(e)),
        };
        let resumed = self.host.reconnect(
            self.conn,
            p.client_id,
            p.last_seen_server_seq,
            &p.subscriptions,
            |result| match result {
                Ok((json, _)) => codec::success_raw(&id, json),
                Err(e) => frame::error(&id, &e.into()),
            },
        );
        match resumed {
            Ok(Some(wire)) => {
                self.initialized = true;
                self.wire = wire;
            }
            Ok(None) => {}
            Err(e) => self.reply(&id, Err(e.into())),
        }
    }

    fn subscribe(&mut self, id: RequestId, params: Value) {
        let p: SubscribeParams = match params::decode(&params) {
            Ok(p) => p,
            Err(e) => return self.reply(&id, Err(e)),
        };
        if channel::is_otlp(&p.channel) {
            // A stateless telemetry channel (no snapshot); ahpty exports no telemetry, so
            // nothing is installed and nothing will arrive (the reference host answers so too).
            return self.reply(&id, Ok(json!({})));
        }
        let wire = self.wire;
        self.host
            .subscribe(self.conn, &p.channel, |result| match result {
                Ok(snapshot) => version::subscribe_response(&id, snapshot, wire),
                Err(e) => frame::error(&id, &e.into()),
            });
    }

    async fn create_terminal(&mut self, id: RequestId, mut params: Value, big: bool) {
        if !self.wire.is_current() {
            version::upgrade_create_terminal(&mut params);
        }
        let p: CreateTerminalParams = match offload(big, || params::decode(&params)) {
            Ok(p) => p,
            Err(e) => return self.reply(&id, Err(e)),
        };
        let result = self
            .host
            .create_terminal(self.conn, p, params.get("claim"))
            .await;
        self.reply(&id, result.map(|()| Value::Null).map_err(RpcError::from));
    }

    fn dispose_terminal(&mut self, id: RequestId, params: Value) {
        let p: DisposeTerminalParams = match params::decode(&params) {
            Ok(p) => p,
            Err(e) => return self.reply(&id, Err(e)),
        };
        let removed = match self.host.remove_terminal(&p.channel) {
            Ok(p) => p,
            Err(e) => return self.reply(&id, Err(e.into())),
        };
        let host = self.host.clone();
        let outbox = self.outbox.clone();
        tokio::spawn(async move {
            host.kill(removed).await;
            outbox.send(codec::success(&id, Value::Null));
        });
    }
}

impl Drop for RpcConnection {
    fn drop(&mut self) {
        self.host.disconnect(self.conn);
    }
}

/// Whether `params[field]` is a non-empty array (answers with snapshots may then be large).
fn has_entries(params: &Value, field: &str) -> bool {
    params
        .get(field)
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
}

/// What a host with no agents answers (docs/protocol.md, "Methods": the session and agent rows).
fn no_agents_answer(method: &str, params: &Value) -> Result<Value, RpcError> {
    let channel = params.get("channel").and_then(Value::as_str).unwrap_or("");
    let addressed_to_session = channel::classify(channel) == ChannelKind::Session;
    match method {
        // Whatever the URI's scheme (VS Code's sessions are `<provider>:/<id>`): no session
        // exists here, as the reference host answers for a session it has no state of.
        "createChat" | "fetchTurns" => Err(RpcError::session_not_found(channel)),
        "listSessions" => Ok(json!({ "items": [] })),
        "createSession" | "resolveSessionConfig" | "sessionConfigCompletions" => {
            Err(RpcError::provider_not_found())
        }
        "disposeSession" => Err(RpcError::session_not_found(channel)),
        "disposeChat" | "moveChat" | "completions" | "invokeChangesetOperation"
            if addressed_to_session =>
        {
            Err(RpcError::session_not_found(channel))
        }
        "authenticate" => Err(RpcError::invalid_params(
            "authenticate: ahpty has no protected resources; authenticate on the WebSocket \
             upgrade instead",
        )),
        other => Err(RpcError::method_not_found(other)),
    }
}
