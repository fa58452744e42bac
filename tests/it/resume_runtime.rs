//! The official reconnecting runtime (`ahp::hosts`, `MultiHostClient::single`) resumes
//! against ahpty with `reconnect` — not by falling back to `initialize` — after its
//! connection is cut by a TCP proxy, and its state keeps up with the terminal. After a daemon
//! restart (a new process behind the same address) its `reconnect` is refused with -32008 and
//! it initializes afresh.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use ahp::ahp_types::actions::ActionEnvelope;
use ahp::hosts::{Backoff, HostConfig, HostId, HostState, MultiHostClient, ReconnectPolicy};
use ahp::{apply_action_to_terminal, BoxedTransport, SubscriptionEvent, TransportError};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A TCP proxy in front of the daemon whose connections can be severed at will.
struct Proxy {
    addr: String,
    /// Where new connections go (switched to stand in for a restarted daemon).
    target: Arc<Mutex<String>>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    async fn start(target: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let target = Arc::new(Mutex::new(target.to_string()));
        let keep = conns.clone();
        let current = target.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = current.lock().unwrap().clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                keep.lock().unwrap().push(task);
            }
        });
        Proxy {
            addr,
            target,
            conns,
            accept,
        }
    }

    fn url(&self) -> String {
        format!("ws://{}", self.addr)
    }

    /// New connections go to `target` from now on.
    fn retarget(&self, target: &str) {
        *self.target.lock().unwrap() = target.to_string();
    }

    /// Drops every proxied connection (both sockets), as a network failure would.
    fn sever(&self) -> usize {
        let tasks: Vec<_> = self.conns.lock().unwrap().drain(..).collect();
        let n = tasks.iter().filter(|t| !t.is_finished()).count();
        for t in tasks {
            t.abort();
        }
        n
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.sever();
    }
}

/// Terminal envelopes delivered by the runtime's fan-in stream, in order.
struct Seen {
    events: ahp::hosts::HostSubscriptionStream,
    log: Vec<ActionEnvelope>,
}

impl Seen {
    async fn wait(&mut self, what: &str, mut pred: impl FnMut(&[ActionEnvelope]) -> bool) {
        let (events, log) = (&mut self.events, &mut self.log);
        let arrived = tokio::time::timeout(SHELL_TIMEOUT, async {
            while !pred(log) {
                match events.recv().await {
                    Some(ev) => {
                        if let SubscriptionEvent::Action(env) = ev.event {
                            log.push(env);
                        }
                    }
                    None => panic!("runtime event stream ended while waiting for {what}"),
                }
            }
        })
        .await;
        assert!(
            arrived.is_ok(),
            "waiting for {what} from the runtime: timed out; seen:\n{}",
            describe_envelopes(&self.log)
        );
    }
}

async fn wait_generation(multi: &MultiHostClient, id: &HostId, generation: u64) {
    eventually(
        &format!("the runtime connected (generation {generation})"),
        SHELL_TIMEOUT,
        async || match multi.host(id).await {
            Some(h) if h.generation >= generation && matches!(h.state, HostState::Connected) => {
                Ok(())
            }
            Some(h) => Err(format!(
                "{:?} gen {} err {:?}",
                h.state, h.generation, h.last_error
            )),
            None => Err("no host".into()),
        },
    )
    .await
}

/// The runtime behind `proxy`, with client id `rt-client` and a quick constant backoff.
async fn runtime(proxy: &Proxy) -> (MultiHostClient, HostId) {
    let url = proxy.url();
    let factory = move |_host: HostId| {
        let url = url.clone();
        async move {
            let t = ahp_ws::WebSocketTransport::connect(&url)
                .await
                .map_err(|e| TransportError::Io(e.to_string()))?;
            Ok::<_, TransportError>(BoxedTransport::new(t))
        }
    };
    let policy = ReconnectPolicy {
        backoff: Backoff::Constant {
            delay: Duration::from_millis(100),
        },
        jitter: 0.0,
        max_attempts: None,
        reset_on_success: true,
    };
    let config = HostConfig::new("ahpty", "ahpty", factory)
        .with_client_id("rt-client")
        .with_client_config(client_config())
        .with_reconnect_policy(policy);
    let (multi, _) = MultiHostClient::single(config).await.expect("add host");
    (multi, HostId::new("ahpty"))
}

spec!(official_runtime_resumes_with_reconnect_after_a_cut, async {
    // `client initialized` is a debug line.
    let d = Daemon::builder()
        .args(&["--history-bytes", "67108864"])
        .log("info,ahpty::rpc=debug")
        .start();
    let proxy = Proxy::start(d.addr()).await;
    let (multi, id) = runtime(&proxy).await;
    let mut seen = Seen {
        events: multi.events(),
        log: Vec::new(),
    };
    wait_generation(&multi, &id, 1).await;

    let (mut helper, _) = Raw::connect_init(&d.url(), "rt-helper", &[]).await;
    let t = term_uri("runtime");
    helper.create_claimed(&t, client_claim("rt-client")).await;
    let snap = multi
        .subscribe(&id, t.clone())
        .await
        .expect("runtime subscribe")
        .snapshot
        .expect("snapshot");
    let mut state = terminal_state(&snap);
    let from = snap.from_seq as u64;
    helper.subscribe_at(&t).await;
    helper.ready(&t).await;
    let u = t.clone();
    seen.wait("rdy-42", |l| data_text(l, &u).contains("rdy-42"))
        .await;

    // Cut the connection; the terminal keeps producing output meanwhile.
    assert_eq!(proxy.sever(), 1, "one proxied connection");
    helper
        .type_text(&t, "seq 1 3000; echo gap-$((3+3))\r")
        .await;
    helper.wait_data(&t, "gap-6", SHELL_TIMEOUT).await;
    wait_generation(&multi, &id, 2).await;
    let u = t.clone();
    seen.wait("gap-6 (output while cut)", |l| {
        data_text(l, &u).contains("gap-6")
    })
    .await;
    helper.type_text(&t, "echo after-$((4+4))\r").await;
    let u = t.clone();
    seen.wait("after-8 (live after the resume)", |l| {
        data_text(l, &u).contains("after-8")
    })
    .await;

    let log = d.stderr();
    let mine = |needle: &str| {
        log.lines()
            .filter(|l| l.contains(needle) && l.contains("client_id=rt-client"))
            .count()
    };
    assert_eq!(
        mine("client initialized"),
        1,
        "the runtime initialized again:\n{log}"
    );
    assert_eq!(
        mine("client reconnected: replay of"),
        1,
        "the runtime did not resume by replay:\n{log}"
    );

    // The runtime's terminal state keeps up: fold everything up to a fresh snapshot's
    // fromSeq (waiting for one envelope past it) and compare.
    let fresh = multi
        .subscribe(&id, t.clone())
        .await
        .expect("resubscribe")
        .snapshot
        .expect("snapshot");
    let fence = fresh.from_seq as u64;
    helper.type_text(&t, "echo fence-$((5+5))\r").await;
    let u = t.clone();
    seen.wait("an envelope after the fresh snapshot", |l| {
        l.iter().any(|e| e.channel == u && e.server_seq > fence)
    })
    .await;
    let on_t: Vec<ActionEnvelope> = seen
        .log
        .iter()
        .filter(|e| e.channel == t && e.server_seq > from)
        .cloned()
        .collect();
    assert_increasing(&on_t, "the runtime's delivery");
    for e in on_t.iter().filter(|e| e.server_seq <= fence) {
        assert!(e.rejection_reason.is_none());
        apply_action_to_terminal(&mut state, &e.action);
    }
    assert_eq!(
        serde_json::to_value(&state).unwrap(),
        serde_json::to_value(terminal_state(&fresh)).unwrap(),
        "runtime-side fold differs from a fresh snapshot"
    );
    let text = data_text(&on_t, &t);
    let start = text.find("gap-$((3+3))").expect("command echo");
    let end = text.rfind("gap-6").unwrap();
    assert_consecutive(
        &number_lines(&text[start..end]),
        1,
        3000,
        "output across the cut",
    );
});

// A daemon restart: the same address now leads to a new process that has never seen
// `rt-client`. Its `reconnect` (the runtime has a cursor and a subscription) is answered with
// -32008, not with snapshots from a foreign sequence; the runtime initializes afresh and works
// against the new daemon.
spec!(official_runtime_initializes_after_a_daemon_restart, async {
    // `client initialized` is a debug line.
    let old = Daemon::builder().log("info,ahpty::rpc=debug").start();
    let proxy = Proxy::start(old.addr()).await;
    let (multi, id) = runtime(&proxy).await;
    let mut seen = Seen {
        events: multi.events(),
        log: Vec::new(),
    };
    wait_generation(&multi, &id, 1).await;
    let (mut helper, _) = Raw::connect_init(&old.url(), "rt-helper", &[]).await;
    let t = term_uri("before-restart");
    helper.create_claimed(&t, client_claim("rt-client")).await;
    multi
        .subscribe(&id, t.clone())
        .await
        .expect("runtime subscribe");
    helper.subscribe_at(&t).await;
    helper.ready(&t).await;
    let u = t.clone();
    seen.wait("rdy-42 from the old daemon", |l| {
        data_text(l, &u).contains("rdy-42")
    })
    .await;

    // `client initialized` is a debug line.
    let new = Daemon::builder().log("info,ahpty::rpc=debug").start();
    proxy.retarget(new.addr());
    assert_eq!(proxy.sever(), 1, "one proxied connection");
    drop(helper);
    drop(old);
    wait_generation(&multi, &id, 2).await;
    let log = new.stderr();
    let mine = |needle: &str| {
        log.lines()
            .filter(|l| l.contains(needle) && l.contains("client_id=rt-client"))
            .count()
    };
    assert_eq!(mine("reconnect refused: unknown client"), 1, "{log}");
    assert_eq!(mine("client initialized"), 1, "{log}");
    assert_eq!(mine("client reconnected"), 0, "{log}");

    // The runtime is live on the new daemon.
    let (mut helper, _) = Raw::connect_init(&new.url(), "rt-helper", &[]).await;
    let t2 = term_uri("after-restart");
    helper.create_claimed(&t2, client_claim("rt-client")).await;
    multi
        .subscribe(&id, t2.clone())
        .await
        .expect("subscribe on the new daemon");
    helper.subscribe_at(&t2).await;
    helper.type_text(&t2, "echo new-$((6*7))\r").await;
    let u = t2.clone();
    seen.wait("new-42 from the new daemon", |l| {
        data_text(l, &u).contains("new-42")
    })
    .await;
});
