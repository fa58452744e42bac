//! The method table: one connection's view of AHP methods (notes §3, §5, §11).
//!
//! Before `initialize` only `ping`, `initialize` and `reconnect` are served; other requests,
//! and a second handshake, get -32601 as from the reference host. Results and envelopes are
//! encoded for the negotiated protocol version ([`super::version`]).
//! Requests take effect in the order they arrive (a `subscribe` sent right after
//! `createTerminal` finds the terminal). The only wait inline is spawning a shell (a fork/exec);
//! `disposeTerminal` removes the terminal inline and waits for its processes to die in a
//! separate task, so a `ping` is never stuck behind it.

use std::sync::Arc;

use ahp_types::commands::{
    CreateTerminalParams, DisposeTerminalParams, Implementation, InitializeParams,
    InitializeResult, ReconnectParams, SubscribeParams, UnsubscribeParams,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::error::{self, RpcError};
use super::frame::{self, Incoming, RequestId};
use super::params;
use super::version::{self, Wire};
use crate::host::channel::{self, ChannelKind};
use crate::host::validate;
use crate::host::{ConnId, Host, Outbox};

/// Frames at least this large (bytes) are parsed and handled off the async worker threads
/// (see [`offload`]).
pub const BIG_FRAME_BYTES: usize = 64 * 1024;

/// Runs `f`, which may be CPU-heavy (parsing a large frame, encoding a large answer), with
/// [`tokio::task::block_in_place`] when `heavy` and on a multi-threaded runtime, so the other
/// tasks of the worker thread move to another thread instead of waiting for it.
pub fn offload<R>(heavy: bool, f: impl FnOnce() -> R) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let multi =
        Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if heavy && multi {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

/// What the connection should do after a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Keep reading.
    Continue,
    /// Flush what is queued, then close (e.g. after -32005).
    Close,
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

    /// Handles one frame's text. A frame of [`BIG_FRAME_BYTES`] or more is parsed and handled
    /// off the async worker threads, as are the requests whose answers can be large
    /// (`subscribe`, and `initialize`/`reconnect` listing channels).
    pub async fn handle_text(&mut self, text: &str) -> Flow {
        let big = text.len() >= BIG_FRAME_BYTES;
        match offload(big, || frame::parse(text)) {
            Incoming::Invalid { id, error } => {
                self.outbox.send(frame::error(&id, &error));
                Flow::Continue
            }
            Incoming::Response => Flow::Continue,
            Incoming::Notification { method, params } => {
                offload(big, || self.notification(&method, params));
                Flow::Continue
            }
            Incoming::Request { id, method, params } => {
                self.request(id, &method, params, big).await
            }
        }
    }

    fn reply(&self, id: &RawValue, result: Result<Value, RpcError>) {
        let text = match result {
            Ok(v) => frame::success(id, v),
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

    async fn request(&mut self, id: RequestId, method: &str, params: Value, big: bool) -> Flow {
        match method {
            "ping" => {
                self.reply(&id, Ok(Value::Null));
                return Flow::Continue;
            }
            "initialize" => {
                let heavy = big || has_entries(&params, "initialSubscriptions");
                return offload(heavy, || self.initialize(id, params));
            }
            "reconnect" if !self.initialized => {
                let heavy = big || has_entries(&params, "subscriptions");
                offload(heavy, || self.reconnect(id, params));
                return Flow::Continue;
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
            return Flow::Continue;
        }
        match method {
            "subscribe" => offload(true, || self.subscribe(id, params)),
            "createTerminal" => self.create_terminal(id, params, big).await,
            "disposeTerminal" => self.dispose_terminal(id, params),
            // ahpty's extension: the terminal list with sizes, cwds, ages and holder presence.
            crate::host::catalog::LIST_TERMINALS => {
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
        Flow::Continue
    }

    fn initialize(&mut self, id: RequestId, params: Value) -> Flow {
        if self.initialized {
            self.reply(
                &id,
                Err(RpcError::method_unavailable(
                    "initialize was already called on this connection; open a new one",
                )),
            );
            return Flow::Continue;
        }
        let p: InitializeParams = match params::decode(&params) {
            Ok(p) => p,
            Err(e) => {
                self.reply(&id, Err(e));
                return Flow::Continue;
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
                return Flow::Close;
            }
            Err(msg) => {
                self.reply(
                    &id,
                    Err(RpcError::invalid_params(format!("protocolVersions: {msg}"))),
                );
                return Flow::Continue;
            }
        };
        let subscriptions = p.initial_subscriptions.unwrap_or_default();
        let subscriptions = match check_client(&p.client_id).and_then(|()| {
            validate::channel_list(
                "initialSubscriptions",
                &subscriptions,
                self.host.max_channel_list(),
            )
            .map_err(RpcError::invalid_params)
        }) {
            Ok(list) => list,
            Err(e) => {
                self.reply(&id, Err(e));
                return Flow::Continue;
            }
        };
        self.initialized = true;
        self.wire = wire;
        self.host.set_wire(self.conn, &p.client_id, wire);
        let client = p
            .client_info
            .as_ref()
            .map(|c| c.name.as_str())
            .unwrap_or("?");
        let client_version = p
            .client_info
            .as_ref()
            .and_then(|c| c.version.as_deref())
            .unwrap_or("?");
        tracing::debug!(
            conn = self.conn,
            client_id = %p.client_id,
            client = %error::clip(client.to_string(), 64),
            client_version = %error::clip(client_version.to_string(), 64),
            %version,
            "client initialized"
        );
        let default_directory = self.host.default_directory();
        self.host.initialize(
            self.conn,
            p.client_id,
            &subscriptions,
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
        Flow::Continue
    }

    /// `reconnect {clientId, lastSeenServerSeq, subscriptions}`; a missing `channel` is
    /// tolerated (VS Code omits it). The connection counts as initialized after it, unless it
    /// was refused (-32008 for a client this process does not know: `initialize` may follow).
    /// A `clientId` over [`validate::MAX_ID_BYTES`], or `subscriptions` over
    /// [`Host::max_channel_list`] entries or with an entry over [`validate::MAX_URI_BYTES`] →
    /// -32602 (and the connection stays uninitialized).
    fn reconnect(&mut self, id: RequestId, mut params: Value) {
        if let Value::Object(m) = &mut params {
            m.entry("channel")
                .or_insert_with(|| Value::String(channel::ROOT.into()));
        }
        let p: ReconnectParams = match params::decode(&params) {
            Ok(p) => p,
            Err(e) => return self.reply(&id, Err(e)),
        };
        let checked = check_client(&p.client_id).and_then(|()| {
            validate::channel_list(
                "subscriptions",
                &p.subscriptions,
                self.host.max_channel_list(),
            )
            .map_err(RpcError::invalid_params)
        });
        let subscriptions = match checked {
            Ok(list) => list,
            Err(e) => return self.reply(&id, Err(e)),
        };
        let resumed = self.host.reconnect(
            self.conn,
            p.client_id,
            p.last_seen_server_seq,
            &subscriptions,
            |result| match result {
                Ok((json, _)) => frame::success_raw(&id, json),
                Err(e) => frame::error(&id, &e),
            },
        );
        if let Some(wire) = resumed {
            self.initialized = true;
            self.wire = wire;
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
                Err(e) => frame::error(&id, &e),
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
        // The claim's shape is checked on the raw JSON too (the typed decoder is lenient
        // about some malformed claims).
        if let Some(raw) = params.get("claim") {
            if let Err(msg) = crate::host::validate::parse_claim(raw) {
                return self.reply(&id, Err(RpcError::invalid_params(format!("claim: {msg}"))));
            }
        }
        let result = self.host.create_terminal(self.conn, p).await;
        self.reply(&id, result.map(|()| Value::Null));
    }

    fn dispose_terminal(&mut self, id: RequestId, params: Value) {
        let p: DisposeTerminalParams = match params::decode(&params) {
            Ok(p) => p,
            Err(e) => return self.reply(&id, Err(e)),
        };
        let removed = match self.host.remove_terminal(&p.channel) {
            Ok(p) => p,
            Err(e) => return self.reply(&id, Err(e)),
        };
        let host = self.host.clone();
        let outbox = self.outbox.clone();
        tokio::spawn(async move {
            host.kill(removed).await;
            outbox.send(frame::success(&id, Value::Null));
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

/// A `clientId` (initialize, reconnect): at most [`validate::MAX_ID_BYTES`] → else -32602.
fn check_client(client_id: &str) -> Result<(), RpcError> {
    validate::check_len("clientId", client_id, validate::MAX_ID_BYTES)
        .map_err(RpcError::invalid_params)
}

/// What a host with no agents answers (notes §11).
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
