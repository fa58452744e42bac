//! The official `ahp` client (over `ahp-ws`) as the tests drive it: initialized, with a log of
//! every action envelope it received and waits on that log.

use std::time::Duration;

use ahp::ahp_types::actions::{ActionEnvelope, StateAction, TerminalInputAction};
use ahp::ahp_types::commands::InitializeResult;
use ahp::ahp_types::state::{Snapshot, TerminalState};
use ahp::{Client, ClientConfig, ClientError, ClientEventStream, SubscriptionEvent};
use serde_json::{json, Value};

use super::{
    data_text, describe_envelopes, is_exited, term_uri, terminal_state, Daemon, RPC_TIMEOUT,
    SHELL_TIMEOUT,
};

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
        let (events, log) = (&mut self.events, &mut self.log);
        let arrived = tokio::time::timeout(timeout, async {
            while !pred(log) {
                match events.recv().await {
                    Some(ev) => {
                        if let SubscriptionEvent::Action(env) = ev.event {
                            log.push(env);
                        }
                    }
                    None => return false,
                }
            }
            true
        })
        .await;
        match arrived {
            Ok(true) => {}
            Ok(false) => panic!(
                "waiting for {what}: connection closed; seen:\n{}",
                self.describe_log()
            ),
            Err(_) => panic!(
                "waiting for {what}: timed out after {timeout:?}; seen:\n{}",
                self.describe_log()
            ),
        }
    }

    /// Concatenated `terminal/data` of `uri`, as received so far.
    pub fn data(&self, uri: &str) -> String {
        data_text(&self.log, uri)
    }

    /// Waits until the concatenated data of `uri` contains `needle`.
    pub async fn wait_data(&mut self, uri: &str, needle: &str, timeout: Duration) {
        let u = uri.to_string();
        let n = needle.to_string();
        self.wait_for(
            &format!("{needle:?} in the data of {uri}"),
            timeout,
            |log| data_text(log, &u).contains(&n),
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
