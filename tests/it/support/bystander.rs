//! The *bystander*: a client on a thread and runtime of its own that keeps measuring what a
//! user would feel while an attack runs against the same daemon — the round trip of a `ping`,
//! of a keystroke echo (`terminal/input` → pty → `terminal/data`) in a terminal running `cat`,
//! and, every twentieth round, of a new connection (TCP, WebSocket handshake, `initialize`).
//! [`Samples::assert_fast`] holds each kind to a 99th percentile and a ceiling: a daemon that
//! froze fails both, while a few round trips delayed by the shared machine's scheduler
//! (2 cores, other builds running: 400 ms has been seen) fail neither.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::*;

/// The latency 99 % of a bystander's round trips stay under while an attack runs.
pub const BOUND: Duration = Duration::from_millis(100);
/// The latency no round trip of a bystander's may reach while an attack runs.
pub const CEILING: Duration = Duration::from_secs(1);
/// The latency 99 % of a bystander's new connections (TCP, WebSocket handshake, `initialize`)
/// stay under while an attack runs.
pub const CONNECT_BOUND: Duration = Duration::from_millis(200);

/// Round trips measured by a bystander, in arrival order.
#[derive(Default)]
pub struct Samples {
    pub ping: Vec<Duration>,
    pub echo: Vec<Duration>,
    /// A new connection's TCP + WebSocket handshake + `initialize`, about every 200 ms.
    pub connect: Vec<Duration>,
    /// When each ping and each echo round trip started.
    pub ping_at: Vec<Instant>,
    pub echo_at: Vec<Instant>,
    pub connect_at: Vec<Instant>,
    /// When each of the slowest round trips started (ping or echo), for failure reports.
    pub slow: Vec<(Instant, &'static str, Duration)>,
}

/// The `q` quantile of `v` (nearest rank; zero for no samples).
pub fn quantile(v: &[Duration], q: f64) -> Duration {
    let mut s = v.to_vec();
    s.sort();
    if s.is_empty() {
        return Duration::ZERO;
    }
    s[((s.len() - 1) as f64 * q) as usize]
}

pub fn stats(v: &[Duration]) -> String {
    format!(
        "n={} p50={:?} p90={:?} p99={:?} max={:?}",
        v.len(),
        quantile(v, 0.5),
        quantile(v, 0.9),
        quantile(v, 0.99),
        quantile(v, 1.0)
    )
}

impl Samples {
    pub fn report(&self, what: &str) {
        eprintln!(
            "{what}: ping {}; echo {}; new connection {}",
            stats(&self.ping),
            stats(&self.echo),
            stats(&self.connect)
        );
    }

    /// Only the round trips that started at or after `t0`.
    pub fn since(self, t0: Instant) -> Samples {
        let keep = |v: Vec<Duration>, at: Vec<Instant>| -> (Vec<Duration>, Vec<Instant>) {
            v.into_iter().zip(at).filter(|(_, a)| *a >= t0).unzip()
        };
        let (ping, ping_at) = keep(self.ping, self.ping_at);
        let (echo, echo_at) = keep(self.echo, self.echo_at);
        let (connect, connect_at) = keep(self.connect, self.connect_at);
        Samples {
            ping,
            echo,
            connect,
            ping_at,
            echo_at,
            connect_at,
            slow: self.slow.into_iter().filter(|(a, _, _)| *a >= t0).collect(),
        }
    }

    /// The round trips over 20 ms, with their start relative to `t0`.
    pub fn slow_since(&self, t0: Instant) -> String {
        self.slow
            .iter()
            .map(|(at, what, d)| format!("{what} at {:?}: {d:?}", at.saturating_duration_since(t0)))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Both 99th percentiles under [`BOUND`] and both maxima under [`CEILING`], with at least
    /// `min` samples of each.
    pub fn assert_fast(&self, what: &str, min: usize) {
        self.report(what);
        assert!(
            self.ping.len() >= min && self.echo.len() >= min,
            "{what}: too few samples (ping {}, echo {})",
            self.ping.len(),
            self.echo.len()
        );
        for (kind, v, bound) in [
            ("ping", &self.ping, BOUND),
            ("echo", &self.echo, BOUND),
            ("new connection", &self.connect, CONNECT_BOUND),
        ] {
            let (p99, max) = (quantile(v, 0.99), quantile(v, 1.0));
            assert!(
                p99 < bound && max < CEILING,
                "{what}: the bystander's {kind} round trips: p99 {p99:?} (bound {bound:?}), \
                 max {max:?} (ceiling {CEILING:?}); ping {}; echo {}; new connection {}",
                stats(&self.ping),
                stats(&self.echo),
                stats(&self.connect)
            );
        }
    }
}

/// A client on its own thread and runtime (so the attacker's work in this process cannot
/// delay it) that pings and types into its own terminal until stopped.
pub struct Bystander {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Samples>,
}

impl Bystander {
    /// Connects to `url`, starts `cat` in a terminal and returns once it echoes; then measures
    /// in the background.
    pub fn start(url: &str) -> Bystander {
        Bystander::run(url, true)
    }

    /// [`Bystander::start`] without the new-connection round trips: for an attack that fills
    /// the connection limit on purpose, where a new connection is rightly refused (503).
    pub fn start_without_new_connections(url: &str) -> Bystander {
        Bystander::run(url, false)
    }

    fn run(url: &str, new_connections: bool) -> Bystander {
        let url = url.to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let (mut raw, _) = Raw::connect_init(&url, "bystander", &[]).await;
                let t = term_uri("bystander");
                raw.create_terminal(&t).await;
                raw.subscribe(&t).await;
                raw.ready(&t).await;
                raw.type_text(&t, "exec cat\r").await;
                raw.type_text(&t, "warm-up.\r").await;
                raw.wait_data(&t, "warm-up.", SHELL_TIMEOUT).await;
                let _ = ready_tx.send(());
                let mut samples = Samples::default();
                let mut n = 0u64;
                let mut tick = tokio::time::interval(Duration::from_millis(10));
                while !flag.load(Ordering::Acquire) {
                    tick.tick().await;
                    let t0 = Instant::now();
                    let r = raw.request("ping", json!({})).await;
                    assert!(r.get("error").is_none(), "{r}");
                    samples.ping.push(t0.elapsed());
                    samples.ping_at.push(t0);
                    if t0.elapsed() > Duration::from_millis(20) {
                        samples.slow.push((t0, "ping", t0.elapsed()));
                    }
                    n += 1;
                    let marker = format!("k{n}.");
                    let t0 = Instant::now();
                    raw.type_text(&t, &format!("{marker}\r")).await;
                    raw.wait_data(&t, &marker, Duration::from_secs(120)).await;
                    samples.echo.push(t0.elapsed());
                    samples.echo_at.push(t0);
                    if t0.elapsed() > Duration::from_millis(20) {
                        samples.slow.push((t0, "echo", t0.elapsed()));
                    }
                    // Keep the record small: only what is needed to find the next marker.
                    raw.forget();
                    if new_connections && n % 20 == 1 {
                        let t0 = Instant::now();
                        let (fresh, _) = Raw::connect_init(&url, &format!("probe-{n}"), &[]).await;
                        samples.connect.push(t0.elapsed());
                        samples.connect_at.push(t0);
                        if t0.elapsed() > Duration::from_millis(50) {
                            samples.slow.push((t0, "new connection", t0.elapsed()));
                        }
                        drop(fresh);
                    }
                }
                samples
            })
        });
        ready_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the bystander did not get ready");
        Bystander { stop, thread }
    }

    pub fn finish(self) -> Samples {
        self.stop.store(true, Ordering::Release);
        self.thread.join().expect("the bystander failed")
    }
}
