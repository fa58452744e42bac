//! Flow-control benchmarks for ahpty (not run by `cargo test`): throughput against a raw pty,
//! echo latency, memory under a stalled flood and per idle terminal, fan-out, and CPU with
//! many chatty terminals. Results and how to read them: docs/performance.md.
//!
//! ```text
//! cargo bench --bench flow                      # everything
//! cargo bench --bench flow -- throughput latency memory idle fanout scale
//! ```
//! Environment: `FLOW_BENCH_FILE_MIB` (default 256), `FLOW_BENCH_STALL_SECS` (60),
//! `FLOW_BENCH_IDLE_TERMINALS` (100), `FLOW_BENCH_FANOUT` (32), `FLOW_BENCH_SCALE` (256).

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/flow_support/mod.rs"]
mod flow_support;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{term_uri, Daemon};
use flow_support::*;
use futures_util::StreamExt;
use serde_json::json;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn mb_per_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

/// A file of printable lines (100 bytes each incl. `\n`), `mib` MiB long.
fn make_file(dir: &std::path::Path, mib: u64) -> std::path::PathBuf {
    let path = dir.join("flow-bench.txt");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let mut line = [0u8; 100];
    let total = mib * 1024 * 1024;
    let mut written = 0;
    let mut i = 0u64;
    while written < total {
        for (k, b) in line.iter_mut().enumerate().take(99) {
            *b = b'!' + ((i as usize + k) % 94) as u8;
        }
        line[99] = b'\n';
        f.write_all(&line).unwrap();
        written += 100;
        i += 1;
    }
    f.flush().unwrap();
    path
}

/// Spawns `argv` on a fresh pty (portable-pty) and reads everything with a 64 KiB buffer.
/// Returns (bytes, reads, elapsed).
fn raw_pty_read(argv: &[&str]) -> (u64, u64, Duration) {
    use portable_pty::{native_pty_system, CommandBuilder, PtySize};
    let pair = native_pty_system()
        .openpty(PtySize {
            rows: 24,
            cols: 80,
            pixel_width: 0,
            pixel_height: 0,
        })
        .unwrap();
    let mut cmd = CommandBuilder::new(argv[0]);
    cmd.args(&argv[1..]);
    let t0 = std::time::Instant::now();
    let mut child = pair.slave.spawn_command(cmd).unwrap();
    drop(pair.slave);
    let mut reader = pair.master.try_clone_reader().unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let (mut bytes, mut reads) = (0u64, 0u64);
    loop {
        match reader.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                bytes += n as u64;
                reads += 1;
            }
        }
    }
    let el = t0.elapsed();
    let _ = child.wait();
    (bytes, reads, el)
}

/// Creates a terminal, subscribes and waits for the shell.
async fn terminal(c: &mut Lean, tag: &str, integration: bool) -> String {
    let t = term_uri(tag);
    c.create_terminal(&t).await;
    c.subscribe(&t).await;
    if integration {
        c.ready(&t).await;
    } else {
        c.ready_plain(&t).await;
    }
    t
}

// ─── throughput ──────────────────────────────────────────────────────────────

async fn throughput() {
    let size = env_num("FLOW_BENCH_FILE_MIB", 256);
    let dir = tempfile::tempdir().unwrap();
    let file = make_file(dir.path(), size);
    let path = file.to_str().unwrap().to_string();
    println!("\n## throughput: `cat` of a {size} MiB file\n");
    println!("| run | bytes | time | MB/s | ratio to raw pty | notes |");
    println!("|---|---|---|---|---|---|");
    let mut rows = Vec::new();
    for round in 0..2 {
        let (raw_bytes, reads, raw_t) = raw_pty_read(&["cat", &path]);
        let raw = mb_per_s(raw_bytes, raw_t);
        println!(
            "| raw pty #{round} | {raw_bytes} | {:.2} s | {raw:.1} | 1.00 | {reads} reads, avg {} B |",
            raw_t.as_secs_f64(),
            raw_bytes / reads.max(1)
        );
        for integration in [true, false] {
            let args: &[&str] = if integration {
                &[]
            } else {
                &["--no-shell-integration"]
            };
            let d = Daemon::start_with(args);
            let (mut c, _) = Lean::connect_init(d.addr(), "tp", None).await;
            c.keep_tail = Some(4096);
            let t = terminal(&mut c, "tp", integration).await;
            let before = c.data_len.get(&t).copied().unwrap_or(0);
            let frames0 = c.data_frames;
            let t0 = Instant::now();
            c.input(&t, &format!("cat {path}; echo tp-end-$((40+2))\r"))
                .await;
            c.wait_data(&t, "tp-end-42", Duration::from_secs(600)).await;
            let el = t0.elapsed();
            let bytes = (c.data_len[&t] - before) as u64;
            let frames = (c.data_frames - frames0) as u64;
            let rate = mb_per_s(bytes, el);
            let cpu = cpu_ticks(d.pid() as i32).unwrap_or(0);
            println!(
                "| ahpty #{round}, integration {} | {bytes} | {:.2} s | {rate:.1} | **{:.2}** | {frames} envelopes, avg {} B; daemon CPU {:.1} s total |",
                if integration { "on" } else { "off" },
                el.as_secs_f64(),
                rate / raw,
                bytes / frames.max(1),
                cpu as f64 / ticks_per_second() as f64
            );
            rows.push(rate / raw);
        }
    }
}

// ─── echo latency ────────────────────────────────────────────────────────────

async fn latency() {
    const N: usize = 1000;
    println!("\n## echo latency: {N} keystrokes into `cat` (kernel echo), one at a time\n");
    let d = Daemon::start_with(&["--no-shell-integration"]);
    let (mut c, _) = Lean::connect_init(d.addr(), "lat", None).await;
    let t = terminal(&mut c, "lat", false).await;
    c.input(&t, "cat\r").await;
    // Let cat start: its first keystroke echo proves the line discipline is in cooked mode.
    c.input(&t, "#").await;
    c.wait_data(&t, "#", Duration::from_secs(10)).await;
    let mut samples = Vec::with_capacity(N);
    for i in 0..N + 50 {
        let ch = (b'a' + (i % 26) as u8) as char;
        let before = c.data_len.get(&t).copied().unwrap_or(0);
        let t0 = Instant::now();
        c.input(&t, &ch.to_string()).await;
        c.wait("echo", Duration::from_secs(5), |c| {
            c.data_len.get(&t).copied().unwrap_or(0) > before
        })
        .await;
        let el = t0.elapsed();
        if i >= 50 {
            samples.push(el); // the first 50 warm up
        }
        if i % 60 == 59 {
            // Keep the line short (canonical mode holds at most 4095 characters).
            c.input(&t, "\u{15}").await; // ^U: kill the line
            c.drain_for(Duration::from_millis(5)).await;
        }
    }
    samples.sort();
    // The same round trip on a bare pty: write one byte, read its echo.
    let raw = raw_pty_echo(N);
    println!("| path | p50 | p90 | p99 | max |");
    println!("|---|---|---|---|---|");
    for (name, s) in [
        ("ahpty (WebSocket → pty → WebSocket)", &samples),
        ("bare pty (write → echo read)", &raw),
    ] {
        println!(
            "| {name} | {} | {} | **{}** | {} |",
            us(percentile(s, 0.5)),
            us(percentile(s, 0.9)),
            us(percentile(s, 0.99)),
            us(*s.last().unwrap())
        );
    }
}

fn raw_pty_echo(n: usize) -> Vec<Duration> {
    use portable_pty::{native_pty_system, CommandBuilder, PtySize};
    let pair = native_pty_system()
        .openpty(PtySize {
            rows: 24,
            cols: 80,
            pixel_width: 0,
            pixel_height: 0,
        })
        .unwrap();
    let mut child = pair
        .slave
        .spawn_command(CommandBuilder::new("cat"))
        .unwrap();
    drop(pair.slave);
    let mut reader = pair.master.try_clone_reader().unwrap();
    let mut writer = pair.master.take_writer().unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Vec::with_capacity(n);
    std::thread::sleep(Duration::from_millis(200)); // cat starting; not a measured wait
    for i in 0..n + 50 {
        let t0 = std::time::Instant::now();
        writer.write_all(b"x").unwrap();
        let _ = reader.read(&mut buf).unwrap();
        if i >= 50 {
            out.push(t0.elapsed());
        }
        if i % 60 == 59 {
            writer.write_all(b"\x15").unwrap();
            let _ = reader.read(&mut buf);
        }
    }
    let _ = child.kill();
    out.sort();
    out
}

// ─── memory ──────────────────────────────────────────────────────────────────

async fn memory() {
    let secs = env_num("FLOW_BENCH_STALL_SECS", 60);
    println!("\n## memory: a stalled subscriber on a `yes` flood for {secs} s\n");
    let d = Daemon::start_with(&["--stall-timeout", "1h"]);
    let pid = d.pid();
    let (mut h, _) = Lean::connect_init(d.addr(), "mem-h", None).await;
    let t = terminal(&mut h, "mem", true).await;
    let (mut s, _) = Lean::connect_init(d.addr(), "mem-stalled", Some(16 * 1024)).await;
    s.subscribe(&t).await;
    let rss0 = rss_bytes(pid);
    h.watch.remove(&t);
    h.input(&t, "yes\r").await;
    let mut samples = Vec::new();
    let mut healthy = Vec::new();
    for _ in 0..secs {
        let got = h.drain_for(Duration::from_secs(1)).await;
        samples.push(rss_bytes(pid));
        healthy.push(got as u64);
    }
    let max = *samples.iter().max().unwrap();
    let min = *samples.iter().min().unwrap();
    let ten = samples.len().min(10);
    let first = samples[ten - 1];
    let last = *samples.last().unwrap();
    let moved: u64 = healthy.iter().sum();
    println!("| measure | value |");
    println!("|---|---|");
    println!("| RSS before the flood | {:.1} MiB |", mib(rss0));
    println!(
        "| RSS min / max during the flood | {:.1} / **{:.1} MiB** |",
        mib(min),
        mib(max)
    );
    println!(
        "| RSS at 10 s → at {secs} s | {:.1} → {:.1} MiB |",
        mib(first),
        mib(last)
    );
    println!(
        "| data frames read by the healthy client over {secs} s | {} bytes (paused) |",
        moved
    );
    println!(
        "| RSS per second | {} |",
        samples
            .iter()
            .map(|b| format!("{:.1}", mib(*b)))
            .collect::<Vec<_>>()
            .join(" ")
    );
    h.input(&t, "\u{3}").await;
    drop(s);
}

async fn idle() {
    let n = env_num("FLOW_BENCH_IDLE_TERMINALS", 100) as usize;
    println!("\n## idle cost: {n} idle terminals\n");
    println!("| shell integration | RSS before | RSS after | per terminal | + subscribed and one prompt each |");
    println!("|---|---|---|---|---|");
    for integration in [true, false] {
        let args: &[&str] = if integration {
            &[]
        } else {
            &["--no-shell-integration"]
        };
        let d = Daemon::start_with(args);
        let pid = d.pid();
        let (mut c, _) = Lean::connect_init(d.addr(), "idle", None).await;
        // One terminal first, so one-time costs (threads of the runtime, script files) are in
        // the baseline.
        let first = terminal(&mut c, "idle0", integration).await;
        let _ = first;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = rss_bytes(pid);
        let mut uris = Vec::new();
        for i in 0..n {
            let t = term_uri(&format!("idle{i}"));
            c.create_terminal(&t).await;
            uris.push(t);
        }
        // Give every shell time to print its prompt (output the daemon retains).
        tokio::time::sleep(Duration::from_secs(3)).await;
        let after = rss_bytes(pid);
        for t in &uris {
            c.subscribe(t).await;
        }
        for t in &uris {
            c.input(t, "\r").await;
        }
        c.drain_for(Duration::from_secs(2)).await;
        let subscribed = rss_bytes(pid);
        println!(
            "| {} | {:.1} MiB | {:.1} MiB | **{:.0} KiB** | {:.0} KiB |",
            if integration { "on" } else { "off" },
            mib(before),
            mib(after),
            (after.saturating_sub(before)) as f64 / 1024.0 / n as f64,
            (subscribed.saturating_sub(before)) as f64 / 1024.0 / n as f64
        );
    }
}

// ─── fan-out ─────────────────────────────────────────────────────────────────

/// Counts the text bytes a connection receives until `stop`.
fn spawn_counter(
    mut c: Lean,
    counter: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            match tokio::time::timeout(Duration::from_millis(100), c.ws.next()).await {
                Ok(Some(Ok(Message::Text(t)))) => {
                    counter.fetch_add(t.len() as u64, Ordering::Relaxed);
                }
                Ok(Some(Ok(_))) | Err(_) => {}
                Ok(None) | Ok(Some(Err(_))) => break,
            }
        }
    })
}

/// Per-client receive rate (MB/s of frames) of `clients` subscribers of one `yes` flood.
async fn fan(d: &Daemon, clients: usize, window: Duration) -> (Vec<f64>, f64) {
    let (mut ctl, _) = Lean::connect_init(d.addr(), &format!("fan-ctl-{clients}"), None).await;
    let t = term_uri("fan");
    ctl.create_terminal(&t).await;
    ctl.subscribe(&t).await;
    ctl.ready(&t).await;
    let mut counters = Vec::new();
    let mut tasks = Vec::new();
    let stop = Arc::new(AtomicBool::new(false));
    for i in 0..clients {
        let (mut c, _) = Lean::connect_init(d.addr(), &format!("fan-{clients}-{i}"), None).await;
        c.subscribe(&t).await;
        let n = Arc::new(AtomicU64::new(0));
        counters.push(n.clone());
        tasks.push(spawn_counter(c, n, stop.clone()));
    }
    // The controller stops being a subscriber that could slow the flood down.
    ctl.send_json(&json!({"jsonrpc": "2.0", "method": "unsubscribe", "params": {"channel": t}}))
        .await;
    ctl.input(&t, "yes\r").await;
    tokio::time::sleep(Duration::from_secs(1)).await; // warm-up, not a wait for an event
    let cpu0 = cpu_ticks(d.pid() as i32).unwrap();
    let start: Vec<u64> = counters.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    tokio::time::sleep(window).await;
    let end: Vec<u64> = counters.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    let cpu = (cpu_ticks(d.pid() as i32).unwrap() - cpu0) as f64 / ticks_per_second() as f64;
    ctl.input(&t, "\u{3}").await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let rates = start
        .iter()
        .zip(&end)
        .map(|(a, b)| mb_per_s(b - a, window))
        .collect();
    (rates, cpu / window.as_secs_f64())
}

async fn fanout() {
    let n = env_num("FLOW_BENCH_FANOUT", 32) as usize;
    let window = Duration::from_secs(5);
    println!(
        "\n## fan-out: {n} clients on one `yes` flood ({}-s window)\n",
        window.as_secs()
    );
    let d1 = Daemon::start();
    let (single, cpu1) = fan(&d1, 1, window).await;
    drop(d1);
    let dn = Daemon::start();
    let (mut many, cpun) = fan(&dn, n, window).await;
    many.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let s = single[0];
    let sum: f64 = many.iter().sum();
    println!("| clients | per-client MB/s (min / median / max) | per-client ÷ single | aggregate MB/s | daemon CPU |");
    println!("|---|---|---|---|---|");
    println!("| 1 | {s:.1} | 1.00 | {s:.1} | {:.0} % |", cpu1 * 100.0);
    println!(
        "| {n} | {:.1} / {:.1} / {:.1} | {:.3} / **{:.3}** / {:.3} | {sum:.1} | {:.0} % |",
        many[0],
        many[n / 2],
        many[n - 1],
        many[0] / s,
        many[n / 2] / s,
        many[n - 1] / s,
        cpun * 100.0
    );
}

// ─── scale ───────────────────────────────────────────────────────────────────

async fn scale() {
    let n = env_num("FLOW_BENCH_SCALE", 256) as usize;
    let window = Duration::from_secs(10);
    println!(
        "\n## scale: {n} terminals printing a line every 100 ms, one client subscribed to all\n"
    );
    println!("| loop | daemon CPU (% of one core) | envelopes/s received | lines/s expected |");
    println!("|---|---|---|---|");
    for (name, cmd) in [
        (
            "`while :; do echo x; sleep 0.1; done`",
            "while :; do echo x; sleep 0.1; done\r",
        ),
        (
            "`while :; do echo x; read -t 0.1; done` (no fork)",
            "while :; do echo x; read -t 0.1; done\r",
        ),
    ] {
        let d = Daemon::start_with(&["--no-shell-integration"]);
        let (mut c, _) = Lean::connect_init(d.addr(), "scale", None).await;
        let mut uris = Vec::new();
        for i in 0..n {
            let t = term_uri(&format!("scale{i}"));
            c.create_terminal(&t).await;
            c.subscribe(&t).await;
            c.watch.remove(&t);
            uris.push(t);
        }
        for t in &uris {
            c.input(t, cmd).await;
        }
        c.drain_for(Duration::from_secs(2)).await;
        let cpu0 = cpu_ticks(d.pid() as i32).unwrap();
        let f0 = c.data_frames;
        c.drain_for(window).await;
        let cpu = (cpu_ticks(d.pid() as i32).unwrap() - cpu0) as f64 / ticks_per_second() as f64;
        let frames = c.data_frames - f0;
        println!(
            "| {name} | **{:.1} %** | {:.0} | {} |",
            cpu / window.as_secs_f64() * 100.0,
            frames as f64 / window.as_secs_f64(),
            n * 10
        );
    }
}

fn main() {
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let all = ["throughput", "latency", "memory", "idle", "fanout", "scale"];
    let run: Vec<&str> = if wanted.is_empty() {
        all.to_vec()
    } else {
        all.iter()
            .copied()
            .filter(|b| wanted.iter().any(|w| w == b))
            .collect()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "ahpty flow benchmarks — {} — {} CPUs",
        std::process::Command::new("date")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    rt.block_on(async {
        for b in run {
            match b {
                "throughput" => throughput().await,
                "latency" => latency().await,
                "memory" => memory().await,
                "idle" => idle().await,
                "fanout" => fanout().await,
                "scale" => scale().await,
                _ => unreachable!(),
            }
        }
    });
}
