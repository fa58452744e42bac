//! One hostile or broken peer cannot freeze, lock out or bloat the daemon. Each attack runs
//! against a real daemon on 127.0.0.1 while a *bystander* (`support::bystander`) on another
//! connection keeps measuring what a user would feel: ping, keystroke echo and new-connection
//! round trips, held to the bounds that module states. The attacks are bounded in count and
//! time.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// A request frame's text.
fn request_text(id: u64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// Sends a prepared request and waits for its answer without decoding large frames; returns
/// the answer's text (the attacker reads its answers, but should not spend this process's CPU
/// on them while the bystander measures).
async fn call_raw(ws: &mut Ws, id: u64, text: &str) -> String {
    ws.send(Message::Text(text.into())).await.unwrap();
    let prefix = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},");
    within(
        &format!("the answer to request {id}"),
        Duration::from_secs(60),
        async {
            loop {
                let m = ws
                    .next()
                    .await
                    .expect("connection closed")
                    .expect("connection failed");
                if let Message::Text(t) = m {
                    if t.as_str().starts_with(&prefix) {
                        return t.as_str().to_string();
                    }
                }
            }
        },
    )
    .await
}

fn long_uri(tag: &str, k: usize) -> String {
    let head = format!("ahp-terminal:/{tag}-{k}-");
    let pad = 2048 - head.len();
    format!("{head}{}", "u".repeat(pad))
}

// ─── 1. Requests whose cost could grow faster than their size ───────────────────────────

// `reconnect` and `initialize` with huge or maximal channel lists, snapshots of a full
// scrollback, a maximal `missing` list, and title changes that rebuild a catalogue of long
// URIs and titles: every request costs time linear in its size, answers are encoded outside
// the host lock, and the bystander's round trips stay fast (see the module's bounds).
measured!(huge_requests_do_not_freeze_the_daemon, async {
    let d = Daemon::start();
    let url = d.url();

    // The attacker's set-up: a terminal with a full scrollback (1 MB) and eight terminals
    // with the longest URIs and titles accepted.
    let (mut a, init) = Raw::connect_init(&url, "attacker", &[]).await;
    let big = term_uri("big");
    a.create_terminal(&big).await;
    a.subscribe(&big).await;
    a.ready(&big).await;
    // Filled without a subscriber (this process need not decode the megabyte); a file says
    // when it is done.
    a.request("unsubscribe", json!({"channel": big})).await;
    let filled = d.home().join("filled");
    a.type_text(
        &big,
        &format!(
            "head -c 1000000 /dev/zero | tr '\\0' x; echo; touch {}\r",
            filled.display()
        ),
    )
    .await;
    eventually("the scrollback filled", SHELL_TIMEOUT, async || {
        filled.exists()
    })
    .await;
    let long_title = "\u{1F600}".repeat(4096);
    let mut named = Vec::new();
    for k in 0..8 {
        let uri = long_uri("named", k);
        let r = a
            .request(
                "createTerminal",
                json!({"channel": uri, "name": long_title,
                       "claim": {"kind": "client", "clientId": "attacker"}}),
            )
            .await;
        assert!(r.get("result").is_some(), "{}", clip(r.to_string(), 300));
        named.push(uri);
    }
    a.received.clear();
    a.skip_seen();
    let known_seq = init["serverSeq"].as_i64().unwrap();

    // Every request prepared beforehand: encoding megabytes of JSON in this (debug) process
    // would compete with the bystander for the two CPUs.
    let unknown: Vec<String> = (0..2046).map(|k| long_uri("gone", k)).collect();
    let mut listed = vec![ROOT.to_string(), big.clone()];
    listed.extend(unknown.iter().cloned());
    let huge: Vec<String> = (0..80_000)
        .map(|k| format!("ahp-terminal:/x-{k}"))
        .collect();
    let rounds: Vec<[String; 4]> = (0..1)
        .map(|round| {
            [
                request_text(
                    1,
                    "reconnect",
                    json!({"channel": ROOT,
                    "clientId": format!("huge-{round}"), "lastSeenServerSeq": 0,
                    "subscriptions": huge}),
                ),
                request_text(
                    2,
                    "initialize",
                    json!({"channel": ROOT,
                    "protocolVersions": ["1.0.0"], "clientId": format!("init-{round}"),
                    "initialSubscriptions": listed}),
                ),
                request_text(
                    3,
                    "reconnect",
                    json!({"channel": ROOT,
                    "clientId": "attacker", "lastSeenServerSeq": -1,
                    "subscriptions": listed}),
                ),
                request_text(
                    4,
                    "reconnect",
                    json!({"channel": ROOT, "clientId": "attacker",
                    "lastSeenServerSeq": known_seq, "subscriptions": unknown}),
                ),
            ]
        })
        .collect();
    let subscribe = request_text(10, "subscribe", json!({"channel": big}));
    let renames: Vec<String> = (0..200)
        .map(|k| {
            let title: String = format!("{k}")
                .chars()
                .chain(long_title.chars())
                .take(4096)
                .collect();
            json!({"jsonrpc": "2.0", "method": "dispatchAction", "params": {
                "channel": named[k % named.len()], "clientSeq": k,
                "action": {"type": "terminal/titleChanged", "title": title}}})
            .to_string()
        })
        .collect();

    let by = Bystander::start(&url);
    let started = Instant::now();
    let mut log: Vec<(&str, Duration, usize)> = Vec::new();
    for [huge, init, fresh, known] in &rounds {
        // Far beyond the bound: refused at once.
        let mut ws = ws_connect(&url).await;
        let t0 = Instant::now();
        let r = call_raw(&mut ws, 1, huge).await;
        assert!(r.contains("-32602"), "{}", clip(r, 300));
        log.push(("reconnect with 80 000 entries", t0.elapsed(), r.len()));
        // The most `initialize` accepts: the root, the full terminal, 2 046 unknown URIs.
        let mut ws = ws_connect(&url).await;
        let t0 = Instant::now();
        let r = call_raw(&mut ws, 2, init).await;
        log.push(("initialize with 2 048 entries", t0.elapsed(), r.len()));
        // The same as a known client's reconnect that cannot replay (snapshots) …
        let mut ws = ws_connect(&url).await;
        let t0 = Instant::now();
        let r = call_raw(&mut ws, 3, fresh).await;
        assert!(r.contains("\"snapshot\""), "{}", clip(r, 300));
        log.push(("reconnect → snapshots", t0.elapsed(), r.len()));
        // … and as a known client's (a replay whose `missing` lists 2 046 long URIs).
        let mut ws = ws_connect(&url).await;
        let t0 = Instant::now();
        let r = call_raw(&mut ws, 4, known).await;
        assert!(r.contains("\"replay\""), "{}", clip(r, 300));
        log.push(("reconnect → replay", t0.elapsed(), r.len()));
        // Snapshots of the full terminal, one after another.
        let t0 = Instant::now();
        for _ in 0..3 {
            call_raw(&mut ws, 10, &subscribe).await;
        }
        log.push(("3 subscribes", t0.elapsed(), 0));
    }
    // Renames that rebuild the root catalogue (8 terminals with 2 KiB URIs, 16 KiB titles).
    let (mut r, _) = Raw::connect_init(&url, "renamer", &[]).await;
    let t0 = Instant::now();
    for text in &renames {
        r.send_text(text).await;
    }
    r.request("ping", json!({})).await;
    log.push(("200 renames", t0.elapsed(), 0));
    let samples = by.finish();
    eprintln!("attack took {:?}:", started.elapsed());
    for (what, took, bytes) in &log {
        eprintln!("  {what}: {took:?}, answer {bytes} bytes");
    }
    eprintln!("slow: {}", samples.slow_since(started));
    samples.assert_fast("huge requests", 5);
});

// ─── 2. Sockets that never authenticate ─────────────────────────────────────────────────

/// Holds `n` idle TCP connections to `addr` (sending nothing), opening a new one whenever
/// the daemon closes one, until told to stop or after `max_opens` per socket. Returns how
/// many are open now, how many were ever opened, and the tasks (each returns its opens).
#[allow(clippy::type_complexity)]
fn idle_flood(
    addr: &str,
    n: usize,
    max_opens: usize,
    stop: tokio::sync::watch::Receiver<bool>,
) -> (
    Arc<std::sync::atomic::AtomicUsize>,
    Arc<std::sync::atomic::AtomicUsize>,
    tokio::task::JoinSet<usize>,
) {
    use std::sync::atomic::AtomicUsize;
    let open = Arc::new(AtomicUsize::new(0));
    let total = Arc::new(AtomicUsize::new(0));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let addr = addr.to_string();
        let open = open.clone();
        let total = total.clone();
        let mut stop = stop.clone();
        set.spawn(async move {
            let mut opened = 0;
            while opened < max_opens && !*stop.borrow() {
                let Ok(mut s) = tokio::net::TcpStream::connect(&addr).await else {
                    break;
                };
                opened += 1;
                total.fetch_add(1, Ordering::AcqRel);
                open.fetch_add(1, Ordering::AcqRel);
                let mut buf = [0u8; 256];
                tokio::select! {
                    _ = tokio::io::AsyncReadExt::read(&mut s, &mut buf) => {}
                    _ = stop.changed() => {}
                }
                open.fetch_sub(1, Ordering::AcqRel);
            }
            opened
        });
    }
    (open, total, set)
}

// While 500 idle sockets are held open (re-opened if the daemon closes them), legitimate
// clients still connect (upgrade and `initialize`) within a second each, with and without
// token authentication, and a connected bystander is not slowed down. (The kernel holds the
// idle sockets back, `TCP_DEFER_ACCEPT`; the eviction behind it is tested below and in
// `server::pending`.)
measured!(idle_sockets_do_not_lock_clients_out, threads = 4, async {
    let token = "hostile-peers-token-0123456789";
    for with_token in [false, true] {
        let d = if with_token {
            Daemon::builder().token(token).start()
        } else {
            Daemon::start()
        };
        let url = if with_token {
            format!("{}/?tkn={token}", d.url())
        } else {
            d.url()
        };
        let by = Bystander::start(&url);
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let (open, opened, mut flood) = idle_flood(d.addr(), 500, 400, stop_rx);
        // Wait until each of the 500 sockets has been opened (from then on they are re-opened
        // as fast as the daemon closes them).
        eventually(
            "the flood to open 500 sockets",
            Duration::from_secs(20),
            async || opened.load(Ordering::Acquire) >= 500,
        )
        .await;
        // At first they cost the daemon nothing: the kernel holds them back.
        let daemon_fds = open_fds(d.pid());
        // Legitimate clients every 450 ms, for 1.8 s: also while the kernel hands the idle
        // sockets over (after about a second) and they are evicted and re-opened.
        let mut took = Vec::new();
        let mut every = tokio::time::interval(Duration::from_millis(450));
        for k in 0..5 {
            every.tick().await;
            let t0 = Instant::now();
            let id = format!("legit-{k}");
            let connect = Raw::connect_init(&url, &id, &[]);
            let (mut raw, _) = tokio::time::timeout(Duration::from_secs(10), connect)
                .await
                .expect("a legitimate client could not connect within 10 s");
            took.push(t0.elapsed());
            let r = raw.request("ping", json!({})).await;
            assert!(r.get("error").is_none(), "{r}");
        }
        let still_open = open.load(Ordering::Acquire);
        let _ = stop_tx.send(true);
        let mut reopened = 0;
        while let Some(r) = flood.join_next().await {
            reopened += r.unwrap_or(0);
        }
        let samples = by.finish();
        let what = if with_token {
            "with a token"
        } else {
            "without a token"
        };
        eprintln!(
            "{what}: legitimate connects took {took:?}; {reopened} idle connects, {still_open} \
             held open at the end; the daemon had {daemon_fds} descriptors open"
        );
        assert!(
            took.iter().all(|t| *t < Duration::from_secs(1)),
            "{what}: a legitimate connect took over 1 s: {took:?}"
        );
        assert!(
            daemon_fds < 64,
            "{what}: the daemon holds {daemon_fds} descriptors with 500 idle sockets open"
        );
        samples.assert_fast(&format!("idle sockets, {what}"), 5);
        assert!(!d.stderr().contains("panicked"), "{}", d.stderr());
    }
});

// When every pending slot of an address is held by handshakes in progress, a newcomer from
// that address gets an HTTP 503 answer (not a bare close), while another address still
// connects.
spec!(a_full_address_gets_503_and_others_still_connect, async {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let d = Daemon::start();
    let addr: std::net::SocketAddr = d.addr().parse().unwrap();
    let from = |last: u8| {
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.bind(std::net::SocketAddr::from(([127, 0, 0, last], 0)))
            .unwrap();
        s
    };
    // 32 handshakes in progress from 127.0.0.2: each sent half a request.
    let mut partial = Vec::new();
    for _ in 0..32 {
        let mut s = from(2).connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .await
            .unwrap();
        partial.push(s);
    }
    // Give the daemon the time to read them: wait until a ping on another connection has
    // been answered after they were all sent (the accept loop took them in order before).
    let (mut probe, _) = Raw::connect_init(&d.url(), "probe", &[]).await;
    probe.request("ping", json!({})).await;
    let mut s = from(2).connect(addr).await.unwrap();
    s.write_all(
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    )
    .await
    .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(RPC_TIMEOUT, s.read_to_end(&mut answer))
        .await
        .expect("no answer")
        .expect("read");
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 503"),
        "expected a 503, got {answer:?}"
    );
    // Another address is not crowded out.
    let s = from(3).connect(addr).await.unwrap();
    let (mut ws, _) = tokio::time::timeout(
        RPC_TIMEOUT,
        tokio_tungstenite::client_async(format!("ws://{addr}/"), s),
    )
    .await
    .expect("upgrade from 127.0.0.3 timed out")
    .expect("upgrade from 127.0.0.3");
    ws.close(None).await.unwrap();
    drop(partial);
    assert!(d.stderr().contains("too many handshakes in progress"));
});

// ─── 5. A process that escaped the terminal's session ───────────────────────────────────

/// Kills a process on drop (the escapee must not outlive a failed test).
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

// `setsid yes` run in a terminal leaves its session but keeps writing to the pty. After
// `disposeTerminal` the daemon stops reading it and closes the pty: its CPU use drops to
// near zero within a second, it holds no descriptor of that pty, and the escapee gets EIO.
measured!(an_escaped_process_does_not_keep_the_daemon_busy, async {
    let d = Daemon::start();
    let pid = d.pid();
    let (mut a, _) = Raw::connect_init(&d.url(), "escaper", &[]).await;
    let t = term_uri("escape");
    a.create_terminal(&t).await;
    a.subscribe(&t).await;
    a.ready(&t).await;
    let pidfile = d.home().join("escapee.pid");
    a.type_text(&t, "echo shell=$$ tty=$(tty)\r").await;
    a.wait_data(&t, "tty=/dev/pts/", SHELL_TIMEOUT).await;
    let data = a.data(&t);
    let shell = find_number_after(data, "shell=").expect("shell pid") as i32;
    let index = find_number_after(data, "tty=/dev/pts/").expect("pty number") as u32;
    let held = pty_master_fds(pid, index);
    assert!(held > 0, "no descriptor of the terminal's pty master found");
    a.type_text(
        &t,
        &format!(
            "setsid sh -c 'echo $$ > {}; exec yes' &\r",
            pidfile.display()
        ),
    )
    .await;
    // Nobody reads the flood: the daemon still has to read it from the pty.
    a.request("unsubscribe", json!({"channel": t})).await;
    let escapee = eventually("the escapee to start", SHELL_TIMEOUT, async || {
        std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
    })
    .await;
    let _guard = KillOnDrop(escapee);
    // It really left the session, and writes to the terminal's pty.
    let sid = session_of(escapee);
    assert!(
        sid.is_some_and(|s| s != shell),
        "escapee session {sid:?}, shell {shell}"
    );
    let out = std::fs::read_link(format!("/proc/{escapee}/fd/1")).unwrap();
    assert_eq!(out, std::path::PathBuf::from(format!("/dev/pts/{index}")));

    // The bystander is judged from the dispose on: before it, `yes` is an ordinary flood in
    // the attacker's own terminal (the flow_control module is about those).
    let by = Bystander::start(&d.url());
    // The control, over a second (the machine is shared: the daemon gets its share of it).
    let busy = cpu_over(pid as i32, Duration::from_secs(1)).await;
    let dispose_sent = Instant::now();
    let r = a.request("disposeTerminal", json!({"channel": t})).await;
    assert!(r.get("error").is_none(), "{r}");
    let disposed = Instant::now();
    // A window of bystander samples after the dispose (a measurement window, not a wait).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let samples = by.finish().since(dispose_sent);
    // Within a second of the answer, a quiet window of 200 ms (at most 1 tick: 5 %, half the
    // control's least).
    let mut quiet = None;
    while quiet.is_none() && disposed.elapsed() < Duration::from_secs(1) {
        let used = cpu_over(pid as i32, Duration::from_millis(200)).await;
        if used <= 1 {
            quiet = Some(disposed.elapsed());
        }
    }
    eprintln!(
        "daemon CPU with the escapee: {busy} ticks in 1 s; after dispose: quiet by \
         {quiet:?}; pty master descriptors {held} before"
    );
    assert!(
        busy >= 10,
        "the escapee did not load the daemon ({busy} ticks in 1 s): the test proves nothing"
    );
    assert!(
        quiet.is_some(),
        "the daemon's CPU did not return to near zero within a second of the dispose"
    );
    assert_eq!(
        pty_master_fds(pid, index),
        0,
        "the daemon still holds the disposed terminal's pty"
    );
    wait_dead(
        &[escapee],
        Duration::from_secs(5),
        "the escapee after its pty closed",
    );
    samples.assert_fast("escaped process", 5);
});

// ─── 4. File descriptors ────────────────────────────────────────────────────────────────

/// `ahpty serve ARGS` started by `sh -c '<ulimit>; exec ahpty …'` (so the limits apply to the
/// daemon itself), with `/bin/cat` as the cheapest "shell".
fn daemon_with_ulimit(ulimit: &str, args: &[&str]) -> Daemon {
    Daemon::builder()
        .shell("/bin/cat")
        .ulimit(ulimit)
        .args(args)
        .start()
}

/// Creates `n` terminals over `conns` connections at once; returns how many were created and
/// the first error.
async fn create_many(url: &str, n: usize, conns: usize) -> (usize, Option<String>) {
    let mut set = tokio::task::JoinSet::new();
    for c in 0..conns {
        let url = url.to_string();
        let count = n / conns + usize::from(c < n % conns);
        set.spawn(async move {
            let id = format!("many-{c}");
            let (mut raw, _) = Raw::connect_init(&url, &id, &[]).await;
            let mut made = 0;
            let mut error = None;
            for k in 0..count {
                let r = raw
                    .request(
                        "createTerminal",
                        json!({"channel": format!("ahp-terminal:/many-{c}-{k}"),
                               "claim": {"kind": "client", "clientId": id}}),
                    )
                    .await;
                match r.get("error") {
                    None => made += 1,
                    Some(e) => {
                        error.get_or_insert_with(|| e.to_string());
                    }
                }
            }
            (made, error, raw)
        });
    }
    let mut made = 0;
    let mut error = None;
    let mut keep = Vec::new();
    while let Some(r) = set.join_next().await {
        let (m, e, raw) = r.unwrap();
        made += m;
        if error.is_none() {
            error = e;
        }
        keep.push(raw);
    }
    (made, error)
}

/// Kills the daemon and waits until its terminals' programs are gone (disposing hundreds of
/// terminals one by one is not what these tests are about).
fn kill_with_terminals(d: &mut Daemon) {
    let kids = children(d.pid() as i32);
    d.signal(nix::sys::signal::Signal::SIGKILL);
    d.wait_exit(Duration::from_secs(10));
    wait_dead(
        &kids,
        Duration::from_secs(20),
        "terminal programs of a killed daemon",
    );
}

// Under the common soft limit of 1024 open files with a higher hard limit, the daemon raises
// its soft limit and starts 600 terminals; with the hard limit at 1024 too it says at start
// how many terminals it can serve, and that many do start.
measured!(
    terminals_are_not_limited_by_the_soft_open_file_limit,
    threads = 4,
    async {
        // The test's own hard limit must leave room above 1024 (root may raise it).
        let own_hard: u64 = nofile("self").1.parse().unwrap_or(0);
        let raise_hard = if own_hard < 4096 {
            "ulimit -Hn 4096 && "
        } else {
            ""
        };
        let mut d = daemon_with_ulimit(
            &format!("{raise_hard}ulimit -Sn 1024"),
            &["--max-terminals", "600"],
        );
        let (soft, hard) = nofile(&d.pid().to_string());
        eprintln!("open-file limit of the daemon: soft {soft}, hard {hard}");
        assert_eq!(
            soft, hard,
            "the soft limit was not raised to the hard limit"
        );
        assert!(!d.stderr().contains("open-file limit"), "{}", d.stderr());
        let before = open_fds(d.pid());
        let t0 = Instant::now();
        let (made, error) = create_many(&d.url(), 600, 12).await;
        let took = t0.elapsed();
        let per_terminal = (open_fds(d.pid()) - before) as f64 / made.max(1) as f64;
        eprintln!("600 terminals: {made} created in {took:?}; {per_terminal:.2} descriptors each");
        assert_eq!(made, 600, "first error: {error:?}");
        // The pty master only (its reader and writer tasks share it through the runtime's
        // epoll).
        assert!(
            per_terminal <= 1.1,
            "{per_terminal} descriptors per terminal"
        );
        kill_with_terminals(&mut d);

        // Hard limit 700 as well (1024 is just enough for the default 512 terminals): a
        // warning up front with the number, and that many start.
        let mut d = daemon_with_ulimit("ulimit -n 700", &[]);
        let log = d.stderr();
        let line = log
            .lines()
            .find(|l| l.contains("open-file limit"))
            .unwrap_or_else(|| panic!("no warning about the open-file limit:\n{log}"));
        eprintln!("{line}");
        assert!(
            line.contains("WARN") && line.contains("--max-terminals 512"),
            "{line}"
        );
        let fits =
            find_number_after(line, "enough for about ").expect("a number of terminals") as usize;
        assert!((100..512).contains(&fits), "{line}");
        let (made, error) = create_many(&d.url(), fits, 8).await;
        assert_eq!(
            made, fits,
            "the daemon promised {fits} terminals; first error: {error:?}"
        );
        kill_with_terminals(&mut d);
    }
);

// With every descriptor in use, new connections are answered 503 and closed at once (no
// busy loop, no hang), and the daemon serves again as soon as descriptors free up.
measured!(running_out_of_descriptors_neither_spins_nor_hangs, async {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let d = daemon_with_ulimit("ulimit -n 64", &[]);
    let pid = d.pid();
    let addr: std::net::SocketAddr = d.addr().parse().unwrap();
    // Stalled requests from four addresses (32 pending slots each) use up the descriptors.
    let mut held = Vec::new();
    for k in 0..128u8 {
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.bind(std::net::SocketAddr::from(([127, 0, 0, 2 + k % 4], 0)))
            .unwrap();
        let mut s = s.connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        held.push(s);
    }
    // A client now gets an answer, not a hang.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = s
        .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(RPC_TIMEOUT, s.read_to_end(&mut answer))
        .await
        .expect("a connection was neither answered nor closed while out of descriptors");
    let answer = String::from_utf8_lossy(&answer).to_string();
    let busy = cpu_over(pid as i32, Duration::from_millis(500)).await;
    eprintln!("out of descriptors: answer {answer:?}; daemon CPU {busy} ticks in 500 ms");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    assert!(
        busy <= 10,
        "the daemon used {busy} ticks in 500 ms while out of descriptors"
    );
    assert!(
        d.stderr().contains("out of file descriptors"),
        "{}",
        d.stderr()
    );
    drop(held);
    // Once the idle sockets are gone, clients connect again.
    eventually(
        "a connection after the descriptors freed up",
        Duration::from_secs(10),
        async || {
            let attempt = tokio::time::timeout(
                Duration::from_secs(2),
                tokio_tungstenite::connect_async(d.url()),
            )
            .await;
            match attempt {
                Ok(Ok((mut ws, _))) => {
                    ws.close(None).await.unwrap();
                    true
                }
                _ => false,
            }
        },
    )
    .await;
});

// ─── 3. Memory a peer could make the daemon keep ────────────────────────────────────────

/// A WebSocket client frame holding `text` (masked with the all-zero key, which leaves the
/// payload as it is).
fn client_text_frame(text: &str) -> Vec<u8> {
    let mut f = vec![0x81];
    let n = text.len();
    if n < 126 {
        f.push(0x80 | n as u8);
    } else if n < 65536 {
        f.push(0x80 | 126);
        f.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        f.push(0x80 | 127);
        f.extend_from_slice(&(n as u64).to_be_bytes());
    }
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend_from_slice(text.as_bytes());
    f
}

/// Upgrades a raw TCP connection, sends `frame` (from [`client_text_frame`], a request with
/// id 1) and waits for its answer (whatever it is); the connection is then dropped without a
/// close handshake. The cheapest way to send one request, also for this (debug) process.
fn one_request(addr: &str, frame: &[u8]) -> Vec<u8> {
    use std::io::{Read, Write};
    let upgrade = format!(
        "GET / HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(RPC_TIMEOUT)).unwrap();
    s.write_all(upgrade.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let answered = |got: &[u8], upgraded: bool| {
        if upgraded {
            got.windows(8).any(|w| w == b"\"id\":1,\"") || got.windows(7).any(|w| w == b"\"id\":1}")
        } else {
            got.windows(4).any(|w| w == b"\r\n\r\n")
        }
    };
    for upgraded in [false, true] {
        if upgraded {
            s.write_all(frame).unwrap();
        }
        while !answered(&got, upgraded) {
            let n = s.read(&mut buf).expect("no answer within the timeout");
            if n == 0 {
                return got;
            }
            got.extend_from_slice(&buf[..n]);
        }
    }
    got
}

// 10 000 distinct client ids leave the daemon's memory flat (remembered ids are bounded).
// (Its own daemon's memory is what it measures, and no bystander: it runs beside other tests.)
spec!(
    ten_thousand_client_ids_leave_the_daemons_memory_flat,
    async {
        let d = Daemon::start();
        let pid = d.pid();
        let addr = d.addr().to_string();
        // Blocking sockets on 8 threads: this (debug) process must not be the bottleneck.
        let ids = |from: usize, to: usize| {
            let addr = addr.clone();
            async move {
                let mut set = tokio::task::JoinSet::new();
                for w in 0..8 {
                    let addr = addr.clone();
                    set.spawn_blocking(move || {
                        for k in (from + w..to).step_by(8) {
                            // 200-byte ids: remembering 10 000 of them would be visible.
                            let init = request_text(
                                1,
                                "initialize",
                                json!({"channel": ROOT,
                            "protocolVersions": ["1.0.0"], "clientId": format!("{k:0>200}")}),
                            );
                            let answer = one_request(&addr, &client_text_frame(&init));
                            assert!(
                                answer.windows(15).any(|w| w == b"protocolVersion"),
                                "{}",
                                String::from_utf8_lossy(&answer)
                            );
                        }
                    });
                }
                while let Some(r) = set.join_next().await {
                    r.unwrap();
                }
            }
        };
        // Warm up (allocator arenas, the table of remembered ids filled to its bound).
        ids(0, 1_000).await;
        let warm = rss_kib(pid);
        let t0 = Instant::now();
        ids(1_000, 11_000).await;
        let after_ids = rss_kib(pid);
        eprintln!(
            "10 000 client ids in {:?}: RSS {warm} KiB → {after_ids} KiB",
            t0.elapsed()
        );
        assert!(
            after_ids < warm + 2 * 1024,
            "RSS grew from {warm} KiB to {after_ids} KiB over 10 000 client ids"
        );
        // The bound is real: the oldest ids were forgotten (their reconnect gets -32008, as an
        // unknown client's), the latest are remembered (a replay).
        for (k, expect) in [(0, "-32008"), (10_999, "\"replay\"")] {
            let text = request_text(
                1,
                "reconnect",
                json!({"channel": ROOT,
            "clientId": format!("{k:0>200}"), "lastSeenServerSeq": 0, "subscriptions": []}),
            );
            let answer = one_request(&addr, &client_text_frame(&text));
            let answer = String::from_utf8_lossy(&answer);
            assert!(answer.contains(expect), "client {k}: {answer}");
        }
    }
);

// Oversized client ids, URIs, claim fields and titles are refused, naming the field and the
// limit, without the daemon keeping their memory or a bystander waiting.
measured!(
    oversized_fields_are_refused_without_the_daemon_keeping_them,
    async {
        let d = Daemon::start();
        let pid = d.pid();
        let addr = d.addr().to_string();
        let by = Bystander::start(&d.url());
        let before = rss_kib(pid);
        let huge_id = "i".repeat(8 << 20);
        let mb = "u".repeat(1 << 20);
        let attempts = [
            request_text(
                1,
                "initialize",
                json!({"channel": ROOT,
            "protocolVersions": ["1.0.0"], "clientId": huge_id}),
            ),
            request_text(
                1,
                "reconnect",
                json!({"channel": ROOT, "clientId": huge_id,
            "lastSeenServerSeq": 0, "subscriptions": []}),
            ),
        ];
        for text in &attempts {
            let frame = client_text_frame(text);
            let answer = tokio::task::block_in_place(|| one_request(&addr, &frame));
            let r = String::from_utf8_lossy(&answer);
            assert!(
                r.contains("-32602") && r.contains("clientId is longer than 256 bytes"),
                "{}",
                clip(r.to_string(), 300)
            );
            assert!(r.len() < 2048, "the error echoes {} bytes", r.len());
        }
        let (mut a, _) = Raw::connect_init(&d.url(), "fields", &[]).await;
        let t = term_uri("fields");
        a.create_terminal(&t).await;
        let claim = |c: Value| json!({"channel": term_uri("c"), "claim": c});
        let cases: Vec<(&str, Value, &str)> = vec![
            (
                "channel",
                json!({"channel": format!("ahp-terminal:/{mb}"),
            "claim": {"kind": "client", "clientId": "fields"}}),
                "2048 bytes",
            ),
            (
                "claim.clientId",
                claim(json!({"kind": "client", "clientId": mb})),
                "claim.clientId",
            ),
            (
                "claim.session",
                claim(json!({"kind": "session", "session": mb, "chat": "c:/1"})),
                "claim.session",
            ),
            (
                "claim.chat",
                claim(json!({"kind": "session", "session": "s:/1", "chat": mb})),
                "claim.chat",
            ),
            (
                "claim.turnId",
                claim(json!({"kind": "session", "session": "s:/1", "chat": "c:/1",
            "turnId": mb})),
                "claim.turnId",
            ),
            (
                "claim.toolCallId",
                claim(json!({"kind": "session", "session": "s:/1", "chat": "c:/1",
            "turnId": "t", "toolCallId": mb})),
                "claim.toolCallId",
            ),
            (
                "name",
                json!({"channel": term_uri("n"), "name": mb,
            "claim": {"kind": "client", "clientId": "fields"}}),
                "4096 characters",
            ),
            (
                "cwd",
                json!({"channel": term_uri("d"), "cwd": format!("/{mb}"),
            "claim": {"kind": "client", "clientId": "fields"}}),
                "4096 bytes",
            ),
        ];
        for (field, params, expect) in &cases {
            for _ in 0..3 {
                let r = a.request("createTerminal", params.clone()).await;
                let text = r.to_string();
                assert_eq!(
                    Raw::code(&r),
                    Some(-32602),
                    "{field}: {}",
                    clip(text.clone(), 300)
                );
                assert!(
                    text.contains(expect),
                    "{field}: {}",
                    clip(text.clone(), 300)
                );
                assert!(
                    text.len() < 2048,
                    "{field}: the error echoes {} bytes",
                    text.len()
                );
            }
        }
        for _ in 0..3 {
            let r = a
                .request("subscribe", json!({"channel": format!("x:{mb}")}))
                .await;
            assert_eq!(Raw::code(&r), Some(-32602), "{}", clip(r.to_string(), 300));
            assert!(r.to_string().len() < 2048);
        }
        // Actions: a 1 MiB title, a 1 MiB claim field; rejected, echoed as their type only.
        a.subscribe(&t).await;
        let title = a
            .dispatch(&t, json!({"type": "terminal/titleChanged", "title": mb}))
            .await;
        let claimed = a
            .dispatch(
                &t,
                json!({"type": "terminal/claimed", "claim": {"kind": "client", "clientId": mb}}),
            )
            .await;
        for seq in [title, claimed] {
            let e = a
                .wait_envelope("the rejection", RPC_TIMEOUT, |e| {
                    e["origin"]["clientSeq"] == seq && e["rejectionReason"].is_string()
                })
                .await;
            let text = e.to_string();
            assert!(
                text.len() < 2048,
                "the rejection echoes {} bytes",
                text.len()
            );
            assert!(e["action"]["type"].is_string(), "{text}");
        }
        let root = a.request("subscribe", json!({"channel": ROOT})).await;
        assert!(
            root.to_string().len() < 4096,
            "the catalogue grew: {}",
            clip(root.to_string(), 300)
        );
        let samples = by.finish();
        let after = rss_kib(pid);
        eprintln!("after the oversized fields: RSS {after} KiB (before {before} KiB)");
        assert!(
            after < before + 48 * 1024,
            "RSS grew from {before} KiB to {after} KiB after the oversized fields"
        );
        samples.assert_fast("oversized fields", 5);
    }
);

// ─── 6. Smaller ones ────────────────────────────────────────────────────────────────────

// Client titles lose their control characters like shell titles; a lone surrogate in
// `terminal/input` becomes U+FFFD instead of losing the message; an input rejected for its
// size is not echoed back in full.
measured!(small_hostile_inputs_are_defused, async {
    let d = Daemon::start();
    let by = Bystander::start(&d.url());
    let (mut a, _) = Raw::connect_init(&d.url(), "small", &[ROOT]).await;
    let t = term_uri("small");
    let r = a
        .request(
            "createTerminal",
            json!({"channel": t, "name": "n\u{1b}]0;x\u{7}me\u{9b}31m",
                   "claim": {"kind": "client", "clientId": "small"}}),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    let (state, _) = {
        let snap = a.request("subscribe", json!({"channel": t})).await;
        (snap["result"]["snapshot"]["state"].clone(), ())
    };
    assert_eq!(state["title"], "n]0;xme31m", "{state}");
    a.ready(&t).await;

    // A rename carrying ESC and BEL: stored and broadcast without them.
    let seq = a
        .dispatch(
            &t,
            json!({"type": "terminal/titleChanged", "title": "\u{1b}]2;pwn\u{7}ok\u{7f}"}),
        )
        .await;
    let echo = a
        .wait_envelope("the rename", RPC_TIMEOUT, |e| {
            e["origin"]["clientSeq"] == seq
        })
        .await;
    assert_eq!(echo["action"]["title"], "]2;pwnok", "{echo}");
    let root = a
        .wait_envelope("the catalogue after the rename", RPC_TIMEOUT, |e| {
            e["action"]["type"] == "root/terminalsChanged"
                && e["action"]["terminals"]
                    .as_array()
                    .is_some_and(|l| l.iter().any(|r| r["title"] == "]2;pwnok"))
        })
        .await;
    assert!(!root.to_string().contains("\\u001b"), "{root}");

    // A lone surrogate: the input arrives with U+FFFD in its place.
    a.type_text(&t, "stty -echo; cat -v\r").await;
    a.wait_envelope("cat to start", SHELL_TIMEOUT, |e| {
        e["action"]["type"] == "terminal/commandExecuted"
    })
    .await;
    a.send_text(&format!(
        r#"{{"jsonrpc":"2.0","method":"dispatchAction","params":{{"channel":"{t}","clientSeq":900,"action":{{"type":"terminal/input","data":"lone\ud800one\r"}}}}}}"#
    ))
    .await;
    let echo = a
        .wait_envelope("the input echo", RPC_TIMEOUT, |e| {
            e["origin"]["clientSeq"] == 900
        })
        .await;
    assert_eq!(echo["action"]["data"], "lone\u{fffd}one\r", "{echo}");
    assert!(echo["rejectionReason"].is_null(), "{echo}");
    // cat -v shows the three bytes of U+FFFD.
    a.wait_data(&t, "loneM-oM-?M-=one", SHELL_TIMEOUT).await;

    // 9 MiB of input (more than the 8 MiB a terminal queues): rejected, echoed as its type.
    let big = format!(
        r#"{{"jsonrpc":"2.0","method":"dispatchAction","params":{{"channel":"{t}","clientSeq":901,"action":{{"type":"terminal/input","data":"{}"}}}}}}"#,
        "z".repeat(9 << 20)
    );
    a.send_text(&big).await;
    let rejected = a
        .wait_envelope("the rejection", RPC_TIMEOUT, |e| {
            e["origin"]["clientSeq"] == 901
        })
        .await;
    let text = rejected.to_string();
    assert!(
        text.len() < 2048,
        "the rejection echoes {} bytes",
        text.len()
    );
    assert_eq!(
        rejected["action"],
        json!({"type": "terminal/input"}),
        "{text}"
    );
    assert!(
        rejected["rejectionReason"]
            .as_str()
            .is_some_and(|r| r.contains("input queue full")),
        "{text}"
    );
    by.finish().assert_fast("small hostile inputs", 5);
});

// Limits of 0 are refused at start with one line and exit status 2; a `cwd` the daemon may
// not enter is a -32602 naming it, not "cannot start the shell".
spec!(zero_limits_and_forbidden_directories_are_named, async {
    for flag in [
        "--max-terminals",
        "--max-subscriptions",
        "--max-connections",
    ] {
        let (code, err) = Daemon::bare()
            .args(&["--listen", "127.0.0.1:0", "--no-auth", flag, "0"])
            .refused();
        assert_eq!(code, Some(2), "{flag} 0: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{flag} 0: {err}");
        assert!(err.contains(&format!("{flag} 0")), "{err}");
    }

    // A directory the daemon's user may not enter: as root, run the daemon as nobody.
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let home = tempfile::tempdir().unwrap();
    let locked = home.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        &locked,
        std::fs::Permissions::from_mode(if root { 0o700 } else { 0o000 }),
    )
    .unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Its HOME is readable by nobody; the default socket (in a directory nobody may not
    // enter) is off.
    let mut daemon = Daemon::builder()
        .shell("/bin/sh")
        .args(&["--no-shell-integration", "--no-socket"])
        .home(home);
    if root {
        daemon = daemon.wrapper(&[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
        ]);
    }
    let d = daemon.start();
    let (mut a, _) = Raw::connect_init(&d.url(), "cwd", &[]).await;
    let r = a
        .request(
            "createTerminal",
            json!({"channel": term_uri("cwd"), "cwd": locked.to_str().unwrap(),
                   "claim": {"kind": "client", "clientId": "cwd"}}),
        )
        .await;
    let msg = r["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(Raw::code(&r), Some(-32602), "{r}");
    assert!(
        msg.contains(locked.to_str().unwrap()) && msg.contains("may not enter"),
        "{msg}"
    );
    // Readable directories still work.
    let ok = a
        .request(
            "createTerminal",
            json!({"channel": term_uri("cwd-ok"), "cwd": "/",
                   "claim": {"kind": "client", "clientId": "cwd"}}),
        )
        .await;
    assert!(ok.get("result").is_some(), "{ok}");
});
