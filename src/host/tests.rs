//! The host above a stand-in pty ([`FakePtys`]) under paused tokio time: the pump's exit
//! ordering and orphan reaping, each shown to happen at its deadline and not before (paused
//! time makes "not before" an observation, not a sleep).
//!
//! Touches nothing outside the host and the stand-in.

use std::sync::Arc;
use std::time::Duration;

use ahp_types::commands::CreateTerminalParams;
use ahp_types::state::{TerminalClaim, TerminalClientClaim};
use serde_json::Value;
use tokio::time::Instant;

use super::pump::EXIT_DRAIN;
use super::{ConnId, Host, OutboxReceiver, Outgoing};
use crate::codec::Wire;
use crate::config::Config;
use crate::terminal::fake::{FakePty, FakePtys};

const URI: &str = "ahp-terminal:/t1";

/// One connection of a test client, straight on the host (no socket): it acknowledges every
/// frame as written, as a writer that keeps up would.
struct Client {
    conn: ConnId,
    rx: OutboxReceiver,
}

impl Client {
    fn connect(host: &Host, client_id: &str) -> Client {
        let (outbox, rx) = host.new_outbox();
        let conn = host.connect(outbox);
        host.initialize(conn, client_id.into(), &[], Wire::Current, |_, _| {
            "{}".into()
        })
        .unwrap();
        Client { conn, rx }
    }

    /// The next envelope's action, or `None` when none comes within `within`.
    async fn next_action(&mut self, within: Duration) -> Option<Value> {
        let deadline = Instant::now() + within;
        loop {
            let Outgoing::Text(frame) = tokio::time::timeout_at(deadline, self.rx.recv())
                .await
                .ok()??
            else {
                continue;
            };
            self.rx.written(frame.as_str().len());
            let message: Value = serde_json::from_str(frame.as_str()).unwrap();
            if message["method"] == "action" {
                return Some(message["params"]["action"].clone());
            }
        }
    }

    /// The next action of type `kind` (others are skipped); fails after `within`.
    async fn expect(&mut self, kind: &str, within: Duration) -> Value {
        loop {
            match self.next_action(within).await {
                Some(action) if action["type"] == kind => return action,
                Some(_) => {}
                None => panic!("no {kind} within {within:?}"),
            }
        }
    }
}

/// A host on fake ptys, client `c1` connected and subscribed to its terminal [`URI`].
async fn one_terminal(config: Config) -> (Arc<Host>, Client, Arc<FakePty>) {
    let ptys = Arc::new(FakePtys::default());
    let host = Host::with_ptys(
        &Config {
            shell_integration: false,
            ..config
        },
        ptys.clone(),
    );
    let client = Client::connect(&host, "c1");
    let params = CreateTerminalParams {
        channel: URI.into(),
        claim: TerminalClaim::Client(TerminalClientClaim {
            client_id: "c1".into(),
        }),
        name: None,
        cwd: None,
        cols: Some(100),
        rows: Some(30),
        meta: None,
    };
    host.create_terminal(client.conn, params, None)
        .await
        .unwrap();
    host.subscribe(client.conn, URI, |_| "{}".into());
    let pty = ptys.last();
    assert_eq!((pty.request.cols, pty.request.rows), (100, 30));
    (host, client, pty)
}

#[tokio::test(start_paused = true)]
async fn exited_waits_for_eof_or_the_exit_drain_after_the_output() {
    let (_host, mut client, pty) = one_terminal(Config::default()).await;
    pty.output(b"hello");
    let data = client.expect("terminal/data", Duration::from_secs(1)).await;
    assert_eq!(data["data"], "hello");

    // Exit while a background job still holds the pty: output keeps draining for EXIT_DRAIN.
    let exited_at = Instant::now();
    pty.exit(Some(3));
    let early = EXIT_DRAIN - Duration::from_millis(50);
    assert_eq!(
        client.next_action(early).await,
        None,
        "nothing before the drain ends"
    );
    pty.output(b" late");
    let data = client
        .expect("terminal/data", Duration::from_millis(10))
        .await;
    assert_eq!(data["data"], " late");
    let exited = client
        .expect("terminal/exited", Duration::from_secs(1))
        .await;
    assert_eq!(exited["exitCode"], 3);
    let waited = exited_at.elapsed();
    assert!(
        waited >= EXIT_DRAIN && waited < EXIT_DRAIN + Duration::from_millis(50),
        "terminal/exited {waited:?} after the exit (drain {EXIT_DRAIN:?})"
    );
}

#[tokio::test(start_paused = true)]
async fn exited_follows_eof_at_once() {
    let (_host, mut client, pty) = one_terminal(Config::default()).await;
    pty.output(b"bye");
    pty.eof();
    let at = Instant::now();
    pty.exit(Some(0));
    let data = client.expect("terminal/data", Duration::from_secs(1)).await;
    assert_eq!(data["data"], "bye");
    let exited = client
        .expect("terminal/exited", Duration::from_secs(1))
        .await;
    assert_eq!(exited["exitCode"], 0);
    assert!(
        at.elapsed() < Duration::from_millis(10),
        "{:?}",
        at.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn an_orphan_is_reaped_when_its_grace_ends_and_not_before() {
    let grace = Duration::from_secs(60);
    let kill_grace = Duration::from_millis(700);
    let config = Config {
        orphan_grace: Some(grace),
        kill_grace,
        ..Config::default()
    };
    let (host, client, pty) = one_terminal(config).await;
    let reaper = tokio::spawn(host.clone().reap_orphans());
    let mut watcher = Client::connect(&host, "c2");
    host.subscribe(watcher.conn, super::channel::ROOT, |_| "{}".into());

    tokio::time::sleep(grace * 2).await;
    assert_eq!(pty.killed(), None, "its holder is connected");
    host.disconnect(client.conn);
    let orphaned_at = Instant::now();
    tokio::time::sleep(grace - Duration::from_millis(10)).await;
    assert_eq!(pty.killed(), None, "reaped before the grace ended");
    let gone = watcher
        .expect("root/terminalsChanged", Duration::from_secs(1))
        .await;
    let waited = orphaned_at.elapsed();
    assert_eq!(gone["terminals"], serde_json::json!([]));
    // The kill runs on a blocking thread once the terminal is removed.
    let killed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(grace) = pty.killed() {
                return grace;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    assert_eq!(
        killed.await.ok(),
        Some(kill_grace),
        "killed with the kill grace"
    );
    assert!(
        waited >= grace && waited < grace + Duration::from_millis(20),
        "reaped {waited:?} after its holder left (grace {grace:?})"
    );
    reaper.abort();
}

#[tokio::test(start_paused = true)]
async fn the_holders_input_and_resizes_reach_the_pty_in_order_and_are_echoed() {
    let (host, mut client, pty) = one_terminal(Config::default()).await;
    let input = |data: &str| serde_json::json!({"type": "terminal/input", "data": data});
    host.dispatch(client.conn, URI, 1, input("ls"));
    host.dispatch(
        client.conn,
        URI,
        2,
        serde_json::json!({"type": "terminal/resized", "cols": 120, "rows": 40}),
    );
    host.dispatch(client.conn, URI, 3, input("\r"));
    let echo = client
        .expect("terminal/input", Duration::from_secs(1))
        .await;
    assert_eq!(echo["data"], "ls");
    client
        .expect("terminal/resized", Duration::from_secs(1))
        .await;
    client
        .expect("terminal/input", Duration::from_secs(1))
        .await;
    assert_eq!(pty.input(), b"ls\r");
    assert_eq!(pty.sizes(), [(120, 40)]);
}
