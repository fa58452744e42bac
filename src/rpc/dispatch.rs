//! The method table: one connection's view of AHP methods (notes §3, §5, §11).
//!
//! Before `initialize` only `ping`, `initialize` and `reconnect` are served (others → -32600).
//! Requests take effect in the order they arrive (a `subscribe` sent right after
//! `createTerminal` finds the terminal). The only wait inline is spawning a shell (a fork/exec);
//! `disposeTerminal` removes the terminal inline and waits for its processes to die in a
//! separate task, so a `ping` is never stuck behind it.

use std::sync::Arc;

use ahp_types::commands::{
    CreateTerminalParams, DisposeTerminalParams, Implementation, InitializeParams,
    InitializeResult, ReconnectParams, SubscribeParams, SubscribeResult, UnsubscribeParams,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::error::RpcError;
use super::frame::{self, Incoming, RequestId};
use super::params;
use crate::host::channel::{self, ChannelKind};
use crate::host::{ConnId, Host, Outbox};

/// Protocol baselines ahpty speaks, as advertised in `-32005`'s `data.supportedVersions`.
pub const SUPPORTED_VERSION_RANGES: &[&str] = &["^1.0.0", ">=0.9.0 <0.10.0"];

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
        }
    }

    /// This connection's id in the host.
    pub fn id(&self) -> ConnId {
        self.conn
    }

    /// Handles one frame's text.
    pub async fn handle_text(&mut self, text: &str) -> Flow {
        match frame::parse(text) {
            Incoming::Invalid { id, error } => {
                self.outbox.send(frame::error(&id, &error));
                Flow::Continue
            }
            Incoming::Response => Flow::Continue,
            Incoming::Notification { method, params } => {
                self.notification(&method, params);
                Flow::Continue
            }
            Incoming::Request { id, method, params } => self.request(id, &method, params).await,
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

    async fn request(&mut self, id: RequestId, method: &str, params: Value) -> Flow {
        match method {
            "ping" => {
                self.reply(&id, Ok(Value::Null));
                return Flow::Continue;
            }
            "initialize" => return self.initialize(id, params),
            "reconnect" if !self.initialized => {
                self.reconnect(id, params);
                return Flow::Continue;
            }
            _ => {}
        }
        if !self.initialized {
            self.reply(
                &id,
                Err(RpcError::invalid_request(format!(
                    "{method} is not allowed before initialize"
                ))),
            );
            return Flow::Continue;
        }
        match method {
            "subscribe" => self.subscribe(id, params),
            "createTerminal" => self.create_terminal(id, params).await,
            "disposeTerminal" => self.dispose_terminal(id, params),
            "dispatchAction" => {
                let r = self.dispatch_action(params).map(|_| Value::Null);
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
                Err(RpcError::invalid_request(
                    "reconnect must be the first message on a connection",
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
                Err(RpcError::invalid_request("initialize was already called")),
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
        let version = match ahp_types::negotiate_protocol_version(&p.protocol_versions) {
            Ok(Some(v)) => v.to_string(),
            Ok(None) => {
                self.reply(
                    &id,
                    Err(RpcError::unsupported_version(SUPPORTED_VERSION_RANGES)),
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
        self.initialized = true;
        tracing::info!(
            conn = self.conn,
            client_id = %p.client_id,
            client = p.client_info.as_ref().map(|c| c.name.as_str()).unwrap_or("?"),
            %version,
            "client initialized"
        );
        let default_directory = self.host.default_directory();
        let subscriptions = p.initial_subscriptions.unwrap_or_default();
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
                frame::success(&id, result)
            },
        );
        Flow::Continue
    }

    /// `reconnect {clientId, lastSeenServerSeq, subscriptions}`; a missing `channel` is
    /// tolerated (some VS Code builds omit it). The connection counts as initialized after it.
    fn reconnect(&mut self, id: RequestId, mut params: Value) {
        if let Value::Object(m) = &mut params {
            m.entry("channel")
                .or_insert_with(|| Value::String(channel::ROOT.into()));
        }
        let p: ReconnectParams = match params::decode(&params) {
            Ok(p) => p,
            Err(e) => return self.reply(&id, Err(e)),
        };
        self.initialized = true;
        self.host.reconnect(
            self.conn,
            p.client_id,
            p.last_seen_server_seq,
            &p.subscriptions,
            |result| frame::success_raw(&id, result),
        );
    }

    fn subscribe(&mut self, id: RequestId, params: Value) {
        let p: SubscribeParams = match params::decode(&params) {
            Ok(p) => p,
            Err(e) => return self.reply(&id, Err(e)),
        };
        self.host
            .subscribe(self.conn, &p.channel, |result| match result {
                Ok(snapshot) => frame::success(
                    &id,
                    SubscribeResult {
                        snapshot: Some(snapshot),
                    },
                ),
                Err(e) => frame::error(&id, &e),
            });
    }

    async fn create_terminal(&mut self, id: RequestId, params: Value) {
        let p: CreateTerminalParams = match params::decode(&params) {
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
        let process = match self.host.remove_terminal(&p.channel) {
            Ok(p) => p,
            Err(e) => return self.reply(&id, Err(e)),
        };
        let host = self.host.clone();
        let outbox = self.outbox.clone();
        tokio::spawn(async move {
            host.kill(process).await;
            outbox.send(frame::success(&id, Value::Null));
        });
    }
}

impl Drop for RpcConnection {
    fn drop(&mut self) {
        self.host.disconnect(self.conn);
    }
}

/// What a host with no agents answers (notes §11).
fn no_agents_answer(method: &str, params: &Value) -> Result<Value, RpcError> {
    let channel = params.get("channel").and_then(Value::as_str).unwrap_or("");
    let addressed_to_session = channel::classify(channel) == ChannelKind::Session;
    match method {
        "listSessions" => Ok(json!({ "items": [] })),
        "createSession" | "resolveSessionConfig" | "sessionConfigCompletions" => {
            Err(RpcError::provider_not_found())
        }
        "disposeSession" => Err(RpcError::session_not_found(channel)),
        "createChat"
        | "disposeChat"
        | "moveChat"
        | "fetchTurns"
        | "completions"
        | "invokeChangesetOperation"
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
