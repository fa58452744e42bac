//! Flow-control benchmarks for ahpty (not run by `cargo test`): throughput and CPU per MB
//! against a raw pty, echo latency, memory under a stalled flood and per idle terminal, a fast
//! viewer beside a stalled one, fan-out (with and without a stalled viewer), CPU with many
//! chatty terminals and with many paused ones, what the terminal model costs (throughput of
//! escape-heavy output and of lines ending in bare LFs, snapshot time, idle memory), what the
//! transcript store costs (throughput, CPU and disk bytes with persistence on and off) and how
//! long a live upgrade stops the daemon. Results and how to read them: docs/performance.md.
//!
//! ```text
//! cargo bench --bench flow                      # everything
//! cargo bench --bench flow -- throughput latency memory idle stalled fanout scale paused model persist upgrade
//! ```
//! Environment: `FLOW_BENCH_FILE_MIB` (default 256), `FLOW_BENCH_STALL_SECS` (60),
//! `FLOW_BENCH_STALLED_SECS` (60), `FLOW_BENCH_IDLE_TERMINALS` (100), `FLOW_BENCH_FANOUT` (32),
//! `FLOW_BENCH_SCALE` (256), `FLOW_BENCH_PAUSED` (256), `FLOW_BENCH_MODEL_MIB` (64),
//! `FLOW_BENCH_MODEL_TERMINALS` (50), `FLOW_BENCH_SNAPSHOTS` (30), `FLOW_BENCH_MODEL_ONLY`
//! (every output; a part of an output's name, such as `full-screen`, runs only that one),
//! `FLOW_BENCH_PERSIST_CHATTY` (64), `FLOW_BENCH_UPGRADE_TERMINALS` (16),
//! `FLOW_BENCH_UPGRADES` (10), `FLOW_BENCH_ROUNDS` (2: rounds of `throughput`, `model` and
//! `persist`, whose medians they print at the end). Each benchmark prints the daemon's pid on
//! stderr (`daemon pid N: …`), so a profiler can be attached to it. The daemons run with their
//! default settings, so with transcripts on, in the benchmark's temporary `$HOME`, unless a
//! case says otherwise.

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use support::*;
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

/// Rounds of the throughput cases (`FLOW_BENCH_ROUNDS`, default 2): on 2 shared cores one
/// round's ratio moves by ±0.3, so the cases print the median of every round at the end.
fn rounds() -> u64 {
    env_num("FLOW_BENCH_ROUNDS", 2).max(1)
}

/// Figures collected over the rounds, by name in first-seen order, printed as medians.
#[derive(Default)]
struct Medians(Vec<(String, Vec<f64>)>);

impl Medians {
    fn add(&mut self, name: &str, value: f64) {
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some((_, values)) => values.push(value),
            None => self.0.push((name.to_string(), vec![value])),
        }
    }

    fn print(&mut self) {
        let rounds = self.0.first().map_or(0, |(_, v)| v.len());
        println!("\n| over {rounds} rounds | median | min | max |");
        println!("|---|---|---|---|");
        for (name, values) in &mut self.0 {
            values.sort_by(f64::total_cmp);
            let n = values.len();
            let median = if n % 2 == 1 {
                values[n / 2]
            } else {
                (values[n / 2 - 1] + values[n / 2]) / 2.0
            };
            println!(
                "| {name} | **{median:.2}** | {:.2} | {:.2} |",
                values[0],
                values[n - 1]
            );
        }
    }
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

/// (user, system) CPU seconds of all threads of `pid`.
fn cpu_secs(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<&str> = stat[stat.rfind(')').map_or(0, |i| i + 1)..]
        .split_whitespace()
        .collect();
    let tick = ticks_per_second() as f64;
    let field = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / tick;
    (field(11), field(12))
}

/// The machine's CPU time so far, (busy, all), in `/proc/stat` ticks summed over its cores:
/// the difference of two readings over the elapsed ticks of one core is how many cores were
/// busy in between.
fn machine_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let all: u64 = ticks.iter().sum();
    // idle and iowait
    let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
    (all - idle, all)
}

/// Cores busy between two [`machine_ticks`] readings (0 to the number of cores).
fn cores_busy(a: (u64, u64), b: (u64, u64)) -> f64 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    (b.0 - a.0) as f64 / (b.1 - a.1).max(1) as f64 * cores
}

/// (user, system) CPU seconds used by the calling thread so far.
fn thread_cpu() -> (f64, f64) {
    // SAFETY: getrusage writes into the struct we pass and has no other preconditions.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

fn announce(d: &Daemon, what: &str) {
    eprintln!("daemon pid {}: {what}", d.pid());
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

/// Runs `argv` on a fresh 80×24 pty of this process (portable-pty): its master side and the
/// child.
fn spawn_on_pty(
    argv: &[&str],
) -> (
    Box<dyn portable_pty::MasterPty + Send>,
    Box<dyn portable_pty::Child + Send + Sync>,
) {
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
    let child = pair.slave.spawn_command(cmd).unwrap();
    drop(pair.slave);
    (pair.master, child)
}

/// Spawns `argv` on a fresh pty (portable-pty) and reads everything with a 64 KiB buffer.
/// Returns (bytes, reads, elapsed).
fn raw_pty_read(argv: &[&str]) -> (u64, u64, Duration) {
    let t0 = std::time::Instant::now();
    let (master, mut child) = spawn_on_pty(argv);
    let mut reader = master.try_clone_reader().unwrap();
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

/// The least work an AHP host can do with a pty's output, as a floor under ahpty's figures:
/// `argv` runs on a fresh pty; its output is read with a 64 KiB buffer, cut at the last whole
/// UTF-8 character, JSON-escaped into a `terminal/data` action envelope and sent as a
/// WebSocket text frame over loopback TCP. No reducer, history, flow control, model or
/// transcript. `pipelined`: one thread only reads (and hands each read to the next thread,
/// through a queue of at most 64 reads), the other coalesces what is queued (up to 64 KiB),
/// encodes and sends, so the pty is read while a frame is being sent — as ahpty's reader and
/// pump are; otherwise one thread does it all, taking whatever more is already readable (up
/// to 64 KiB) before each frame. The client decodes every frame as the benchmark's clients do
/// (`serde_json` into a `Value`, then the action's `data`). Returns (text bytes delivered,
/// elapsed, the forwarding threads' CPU seconds, user + sys).
async fn forward_floor(argv: &[&str], pipelined: bool) -> (u64, Duration, f64) {
    use std::os::fd::BorrowedFd;
    use std::sync::mpsc;
    use tokio_tungstenite::tungstenite;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
    let t0 = std::time::Instant::now();
    let forwarder = std::thread::spawn(move || {
        let (tcp, _) = listener.accept().unwrap();
        tcp.set_nodelay(true).unwrap();
        let mut ws = tungstenite::accept(tcp).unwrap();
        let cpu0 = thread_cpu();
        let args: Vec<&str> = argv.iter().map(String::as_str).collect();
        let (master, mut child) = spawn_on_pty(&args);
        let mut reader = master.try_clone_reader().unwrap();
        let fd = master.as_raw_fd().unwrap();
        // Reads: from the pty itself, or (pipelined) from the reading thread's queue. `None`
        // at end of file.
        let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(64);
        let reading = pipelined.then(|| {
            let mut reader = master.try_clone_reader().unwrap();
            std::thread::spawn(move || {
                let cpu0 = thread_cpu();
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n @ 1..) = reader.read(&mut buf) {
                    if tx.send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
                let cpu1 = thread_cpu();
                cpu1.0 - cpu0.0 + cpu1.1 - cpu0.1
            })
        });
        let mut buf = vec![0u8; 64 * 1024];
        let mut pending: Vec<u8> = Vec::new();
        let mut seq = 0u64;
        'read: loop {
            if pipelined {
                let Ok(first) = rx.recv() else { break };
                pending.extend_from_slice(&first);
                while pending.len() < 64 * 1024 {
                    match rx.try_recv() {
                        Ok(more) => pending.extend_from_slice(&more),
                        Err(_) => break,
                    }
                }
            } else {
                loop {
                    match reader.read(&mut buf) {
                        Ok(0) | Err(_) => break 'read,
                        Ok(n) => pending.extend_from_slice(&buf[..n]),
                    }
                    // SAFETY: `master` keeps the descriptor open for the whole loop.
                    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
                    let mut p = [nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN)];
                    let more =
                        matches!(nix::poll::poll(&mut p, nix::poll::PollTimeout::ZERO), Ok(1));
                    if pending.len() >= 64 * 1024 || !more {
                        break;
                    }
                }
            }
            let whole = match std::str::from_utf8(&pending) {
                Ok(s) => s.len(),
                Err(e) => e.valid_up_to(),
            };
            let text = std::str::from_utf8(&pending[..whole]).unwrap();
            seq += 1;
            let mut frame = Vec::with_capacity(text.len() + text.len() / 4 + 160);
            frame.extend_from_slice(
                br#"{"jsonrpc":"2.0","method":"action","params":{"channel":"ahpty:/terminal/floor","serverSeq":"#,
            );
            frame.extend_from_slice(seq.to_string().as_bytes());
            frame.extend_from_slice(br#","action":{"type":"terminal/data","data":"#);
            serde_json::to_writer(&mut frame, text).unwrap();
            frame.extend_from_slice(b"}}}");
            ws.send(tungstenite::Message::text(
                String::from_utf8(frame).unwrap(),
            ))
            .unwrap();
            pending.drain(..whole);
        }
        let _ = child.wait();
        let cpu1 = thread_cpu();
        let reader_cpu = reading.map_or(0.0, |r| r.join().unwrap());
        let _ = ws.close(None);
        while ws.read().is_ok() {}
        cpu1.0 - cpu0.0 + cpu1.1 - cpu0.1 + reader_cpu
    });
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}"))
        .await
        .unwrap();
    let mut bytes = 0u64;
    while let Some(Ok(m)) = ws.next().await {
        match m {
            Message::Text(t) => {
                let v: serde_json::Value = serde_json::from_str(&t).unwrap();
                let d = v.pointer("/params/action/data");
                bytes += d.and_then(|d| d.as_str()).map_or(0, |d| d.len()) as u64;
            }
            Message::Close(_) => break,
            _ => {}
        }
    }
    let el = t0.elapsed();
    drop(ws);
    let cpu = tokio::task::spawn_blocking(move || forwarder.join().unwrap())
        .await
        .unwrap();
    (bytes, el, cpu)
}

/// Creates a terminal, subscribes and waits for the shell.
async fn terminal(c: &mut Raw, tag: &str, integration: bool) -> String {
    terminal_sized(c, tag, integration, 80, 24).await
}

/// [`terminal`] of `cols` × `rows`.
async fn terminal_sized(c: &mut Raw, tag: &str, integration: bool, cols: u16, rows: u16) -> String {
    let t = term_uri(tag);
    let claim = json!({"kind": "client", "clientId": c.client_id});
    let r = c
        .request(
            "createTerminal",
            json!({"channel": t, "claim": claim, "cols": cols, "rows": rows}),
        )
        .await;
    assert!(r.get("result").is_some(), "createTerminal {t}: {r}");
    c.subscribe(&t).await;
    if integration {
        c.ready_for_commands(&t).await;
    } else {
        c.ready(&t).await;
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
    println!(
        "| run | bytes | time | MB/s | ratio to raw pty | CPU ms per MB (user + sys) | notes |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut medians = Medians::default();
    for round in 0..rounds() {
        let cpu0 = thread_cpu();
        let (raw_bytes, reads, raw_t) = raw_pty_read(&["cat", &path]);
        let cpu1 = thread_cpu();
        let raw = mb_per_s(raw_bytes, raw_t);
        let raw_mb = raw_bytes as f64 / 1e6;
        println!(
            "| raw pty #{round} | {raw_bytes} | {:.2} s | {raw:.1} | 1.00 | {:.2} ({:.2} + {:.2}), the reading thread | {reads} reads, avg {} B |",
            raw_t.as_secs_f64(),
            (cpu1.0 - cpu0.0 + cpu1.1 - cpu0.1) * 1e3 / raw_mb,
            (cpu1.0 - cpu0.0) * 1e3 / raw_mb,
            (cpu1.1 - cpu0.1) * 1e3 / raw_mb,
            raw_bytes / reads.max(1)
        );
        for pipelined in [false, true] {
            let (floor_bytes, floor_t, floor_cpu) = forward_floor(&["cat", &path], pipelined).await;
            let floor = mb_per_s(floor_bytes, floor_t);
            println!(
                "| floor #{round}, {}: pty → JSON → WebSocket | {floor_bytes} | {:.2} s | {floor:.1} | {:.2} | {:.2}, the forwarding threads | see `forward_floor` |",
                if pipelined { "pipelined" } else { "one thread" },
                floor_t.as_secs_f64(),
                floor / raw,
                floor_cpu * 1e3 / (floor_bytes as f64 / 1e6),
            );
            let which = if pipelined { "pipelined" } else { "one thread" };
            medians.add(&format!("floor, {which}: ratio to raw pty"), floor / raw);
        }
        for integration in [true, false] {
            let args: &[&str] = if integration {
                &[]
            } else {
                &["--no-shell-integration"]
            };
            let d = Daemon::start_with(args);
            announce(
                &d,
                &format!("throughput #{round}, integration {integration}"),
            );
            let (mut c, _) = Raw::connect_init_with(&d.url(), Opts::lean(), "tp", &[]).await;
            c.keep_tail = Some(4096);
            let t = terminal(&mut c, "tp", integration).await;
            let before = c.data_len.get(&t).copied().unwrap_or(0);
            let frames0 = c.data_frames;
            let (u0, s0) = cpu_secs(d.pid());
            let t0 = Instant::now();
            c.type_text(&t, &format!("cat {path}; echo tp-end-$((40+2))\r"))
                .await;
            c.wait_data(&t, "tp-end-42", Duration::from_secs(600)).await;
            let el = t0.elapsed();
            let (u1, s1) = cpu_secs(d.pid());
            let bytes = (c.data_len[&t] - before) as u64;
            let frames = (c.data_frames - frames0) as u64;
            let rate = mb_per_s(bytes, el);
            let mb = bytes as f64 / 1e6;
            println!(
                "| ahpty #{round}, integration {} | {bytes} | {:.2} s | {rate:.1} | **{:.2}** | **{:.2}** ({:.2} + {:.2}) | {frames} envelopes, avg {} B |",
                if integration { "on" } else { "off" },
                el.as_secs_f64(),
                rate / raw,
                (u1 - u0 + s1 - s0) * 1e3 / mb,
                (u1 - u0) * 1e3 / mb,
                (s1 - s0) * 1e3 / mb,
                bytes / frames.max(1),
            );
            let which = if integration { "on" } else { "off" };
            medians.add(
                &format!("ahpty, integration {which}: ratio to raw pty"),
                rate / raw,
            );
            medians.add(
                &format!("ahpty, integration {which}: CPU ms per MB"),
                (u1 - u0 + s1 - s0) * 1e3 / mb,
            );
        }
    }
    medians.print();
}

// ─── the terminal model ──────────────────────────────────────────────────────

/// A file of `mib` MiB of output like `ls --color` (an SGR pair around every name, 100-byte
/// lines): the model's skip-ahead applies, but it parses every SGR.
fn make_coloured(dir: &std::path::Path, mib: u64) -> std::path::PathBuf {
    let path = dir.join("model-coloured.txt");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let total = mib * 1024 * 1024;
    let (mut written, mut i) = (0u64, 0u64);
    while written < total {
        let mut line = String::new();
        while line.len() < 90 {
            line.push_str(&format!("\x1b[01;3{}mn{:05}\x1b[0m ", i % 8, i % 100_000));
            i += 1;
        }
        line.push('\n');
        f.write_all(line.as_bytes()).unwrap();
        written += line.len() as u64;
    }
    f.flush().unwrap();
    path
}

/// A file of `mib` MiB of full-screen redraws (120×40, cursor addressing and colours, no line
/// feeds, inside the alternate screen with a scroll region): nothing can be skipped, the model
/// parses every byte.
fn make_tui(dir: &std::path::Path, mib: u64) -> std::path::PathBuf {
    let path = dir.join("model-tui.txt");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    f.write_all(b"\x1b[?1049h\x1b[2;39r").unwrap();
    let total = mib * 1024 * 1024;
    let (mut written, mut i) = (0u64, 0u64);
    while written < total {
        let row = 1 + i % 40;
        let text = format!(
            "\x1b[{row};1H\x1b[3{}m\x1b[4{}m{:<100}\x1b[0m\x1b[K",
            i % 8,
            (i / 8) % 8,
            format!("row {row} frame {} │ ─ ┼ é", i / 40)
        );
        f.write_all(text.as_bytes()).unwrap();
        written += text.len() as u64;
        i += 1;
    }
    f.write_all(b"\x1b[r\x1b[?1049l").unwrap();
    f.flush().unwrap();
    path
}

async fn model() {
    let size = env_num("FLOW_BENCH_MODEL_MIB", 64);
    let dir = tempfile::tempdir().unwrap();
    // (name, file, bare): with `bare`, the pty's LF → CR LF translation is off (`stty -onlcr`,
    // as under `ahpty run` or in a raw-mode program), so lines end in a bare LF.
    let files = [
        ("coloured", make_coloured(dir.path(), size), false),
        ("full-screen", make_tui(dir.path(), size), false),
        ("bare line feeds", make_file(dir.path(), size), true),
    ];
    // FLOW_BENCH_MODEL_ONLY=full-screen (a substring of an output's name): only that output's
    // transfers, for profiling one kind of output.
    let only = std::env::var("FLOW_BENCH_MODEL_ONLY").unwrap_or_default();
    println!("\n## model: throughput of escape-heavy output and of bare line feeds ({size} MiB, default flags)\n");
    // Cores busy: how much of the machine's CPU was in use during the transfer (everything
    // that ran: the program, the kernel's tty work, the reader, the daemon, the client).
    println!("| run | output | raw pty MB/s (cores busy) | floor, one thread: MB/s (ratio; CPU ms per MB) | floor, pipelined | ahpty MB/s (cores busy) | ratio | daemon CPU ms per MB |");
    println!("|---|---|---|---|---|---|---|---|");
    let d = Daemon::start();
    announce(&d, "model");
    let (mut c, _) = Raw::connect_init_with(&d.url(), Opts::lean(), "model", &[]).await;
    c.keep_tail = Some(4096);
    // The size the full-screen file is drawn for (the raw pty's size does not matter to it).
    let t = terminal_sized(&mut c, "model", true, 120, 40).await;
    let mut medians = Medians::default();
    for round in 0..rounds() {
        for (name, file, bare) in &files {
            if !name.contains(only.as_str()) {
                continue;
            }
            let path = file.to_str().unwrap();
            let bare_cat = format!("stty -onlcr; exec cat {path}");
            let argv: &[&str] = if *bare {
                &["sh", "-c", &bare_cat]
            } else {
                &["cat", path]
            };
            let m0 = machine_ticks();
            let (raw_bytes, _, raw_t) = raw_pty_read(argv);
            let raw_busy = cores_busy(m0, machine_ticks());
            let raw = mb_per_s(raw_bytes, raw_t);
            medians.add(&format!("{name}: raw pty: cores busy"), raw_busy);
            let mut floors = String::new();
            for pipelined in [false, true] {
                let (b, el, cpu) = forward_floor(argv, pipelined).await;
                let floor = mb_per_s(b, el);
                floors += &format!(
                    " {floor:.1} ({:.2}; {:.2}) |",
                    floor / raw,
                    cpu * 1e3 / (b as f64 / 1e6)
                );
                let which = if pipelined { "pipelined" } else { "one thread" };
                medians.add(&format!("{name}: floor, {which}: ratio"), floor / raw);
            }
            let before = c.data_len.get(&t).copied().unwrap_or(0);
            let (u0, s0) = cpu_secs(d.pid());
            let m0 = machine_ticks();
            let t0 = Instant::now();
            let marker = format!("m-end-{round}{name}");
            let command = if *bare {
                format!("stty -onlcr; cat {path}; stty onlcr; echo {marker}-$((40+2))\r")
            } else {
                format!("cat {path}; echo {marker}-$((40+2))\r")
            };
            c.type_text(&t, &command).await;
            c.wait_data(&t, &format!("{marker}-42"), Duration::from_secs(600))
                .await;
            let el = t0.elapsed();
            let busy = cores_busy(m0, machine_ticks());
            let (u1, s1) = cpu_secs(d.pid());
            let bytes = (c.data_len[&t] - before) as u64;
            let rate = mb_per_s(bytes, el);
            println!(
                "| #{round} | {name} | {raw:.1} ({raw_busy:.2}) |{floors} {rate:.1} ({busy:.2}) | **{:.2}** | {:.2} |",
                rate / raw,
                (u1 - u0 + s1 - s0) * 1e3 / (bytes as f64 / 1e6)
            );
            medians.add(&format!("{name}: ahpty: cores busy"), busy);
            medians.add(&format!("{name}: ahpty: ratio"), rate / raw);
            medians.add(
                &format!("{name}: ahpty: CPU ms per MB"),
                (u1 - u0 + s1 - s0) * 1e3 / (bytes as f64 / 1e6),
            );
        }
    }
    medians.print();
    // Snapshot time: the terminal's content is full (1 MiB retained, the model far behind the
    // first byte), the last output a full-screen program's. A second client subscribes over and
    // over; the time is from sending `subscribe` to having its whole response.
    let path = files[1].1.to_str().unwrap();
    c.type_text(
        &t,
        &format!("head -c 3000000 {path}; echo snap-ready-$((40+2))\r"),
    )
    .await;
    c.wait_data(&t, "snap-ready-42", Duration::from_secs(600))
        .await;
    let (mut v, _) = Raw::connect_init_with(&d.url(), Opts::lean(), "model-viewer", &[]).await;
    // Delivered: from sending `subscribe` to having the response's frame (the daemon builds the
    // snapshot, encodes and sends it; the frame is not parsed). Round trip: the same with the
    // client decoding its JSON, as a client must.
    let mut delivered = Vec::new();
    let mut times = Vec::new();
    let mut snapshot_bytes = 0;
    let rounds = env_num("FLOW_BENCH_SNAPSHOTS", 30);
    for _ in 0..rounds {
        let t0 = Instant::now();
        let id = v.send_request("subscribe", json!({"channel": t})).await;
        let tag = format!("\"id\":{id},");
        let frame = loop {
            match v.ws.next().await {
                Some(Ok(Message::Text(m))) if m.contains(&tag) => break m,
                Some(Ok(_)) => {}
                other => panic!("subscribe: {other:?}"),
            }
        };
        delivered.push(t0.elapsed());
        let snap: serde_json::Value = serde_json::from_str(&frame).unwrap();
        times.push(t0.elapsed());
        snapshot_bytes = frame.len();
        assert!(snap.pointer("/result/snapshot").is_some());
        v.send_json(&json!({"jsonrpc": "2.0", "method": "unsubscribe", "params": {"channel": t}}))
            .await;
    }
    delivered.sort();
    times.sort();
    println!(
        "\n| snapshot of a full scrollback (subscribe, 30 times) | p50 | max | snapshot JSON |"
    );
    println!("|---|---|---|---|");
    println!(
        "| delivered: 1 MiB retained, full-screen program | **{}** | {} | {:.2} MiB |",
        us(percentile(&delivered, 0.5)),
        us(*delivered.last().unwrap()),
        mib(snapshot_bytes as u64)
    );
    println!(
        "| round trip, the client decoding the JSON | {} | {} | |",
        us(percentile(&times, 0.5)),
        us(*times.last().unwrap()),
    );
    drop(v);
    drop(c);
    drop(d);

    // Idle memory of terminals whose model exists (each printed well past its scrollback),
    // against the same number of terminals that only printed a prompt.
    let n = env_num("FLOW_BENCH_MODEL_TERMINALS", 50) as usize;
    let small = ["--scrollback-bytes", "16384", "--history-bytes", "16384"];
    println!("\n| {n} idle terminals, `--scrollback-bytes 16384 --history-bytes 16384` | RSS per terminal |");
    println!("|---|---|");
    for modelled in [false, true] {
        let d = Daemon::start_with(&small);
        let pid = d.pid();
        let (mut c, _) = Raw::connect_init_with(&d.url(), Opts::lean(), "idle-model", &[]).await;
        let first = terminal_sized(&mut c, "im0", true, 120, 40).await;
        c.type_text(
            &first,
            &format!("head -c 400000 {path}; echo im-ready-$((40+2))\r"),
        )
        .await;
        c.wait_data(&first, "im-ready-42", Duration::from_secs(60))
            .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = rss_bytes(pid);
        let mut uris = Vec::new();
        for i in 0..n {
            let t = terminal_sized(&mut c, &format!("im{}", i + 1), true, 120, 40).await;
            if modelled {
                c.type_text(
                    &t,
                    &format!("head -c 400000 {path}; echo im-ready-$((40+2))\r"),
                )
                .await;
            } else {
                c.type_text(&t, "echo im-ready-$((40+2))\r").await;
            }
            uris.push(t);
        }
        for t in &uris {
            c.wait_data(t, "im-ready-42", Duration::from_secs(120))
                .await;
        }
        // Idle: the models have caught up and rest in their frozen form.
        c.drain_for(Duration::from_secs(2)).await;
        let after = rss_bytes(pid);
        println!(
            "| {} | **{:.0} KiB** |",
            if modelled {
                "each printed 400 KB of full-screen output (model created, advanced, frozen)"
            } else {
                "each printed one line (no model state beyond the fresh one)"
            },
            after.saturating_sub(before) as f64 / 1024.0 / n as f64
        );
    }
}

// ─── echo latency ────────────────────────────────────────────────────────────

async fn latency() {
    const N: usize = 1000;
    println!("\n## echo latency: {N} keystrokes into `cat` (kernel echo), one at a time\n");
    let d = Daemon::start_with(&["--no-shell-integration"]);
    announce(&d, "latency");
    let (mut c, _) = Raw::connect_init_with(&d.url(), Opts::lean(), "lat", &[]).await;
    let t = terminal(&mut c, "lat", false).await;
    c.type_text(&t, "cat\r").await;
    // Let cat start: its first keystroke echo proves the line discipline is in cooked mode.
    c.type_text(&t, "#").await;
    c.wait_data(&t, "#", Duration::from_secs(10)).await;
    let alone = echoes(&mut c, &t, N).await;
    // Another terminal floods, unwatched (its creator unsubscribes): its output is still read,
    // kept and fed to its model, beside the keystrokes being measured.
    let (mut f, _) = Raw::connect_init_with(&d.url(), Opts::lean(), "flood", &[]).await;
    let ft = terminal(&mut f, "lat-flood", false).await;
    f.type_text(&ft, "yes\r").await;
    f.wait_data(&ft, "y\r\ny\r\n", Duration::from_secs(10))
        .await;
    f.unsubscribe(&ft).await;
    let beside = echoes(&mut c, &t, N).await;
    // The same round trip on a bare pty: write one byte, read its echo.
    let raw = raw_pty_echo(N);
    println!("| path | p50 | p90 | p99 | max |");
    println!("|---|---|---|---|---|");
    for (name, s) in [
        ("ahpty (WebSocket → pty → WebSocket)", &alone),
        (
            "… while another terminal floods (`yes`, unwatched)",
            &beside,
        ),
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
    f.type_text(&ft, "\u{3}").await;
}

/// `n` keystroke round trips into the `cat` running in `t` (after 50 that warm up), sorted.
async fn echoes(c: &mut Raw, t: &str, n: usize) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 50 {
        let ch = (b'a' + (i % 26) as u8) as char;
        let before = c.data_len.get(t).copied().unwrap_or(0);
        let t0 = Instant::now();
        c.type_text(t, &ch.to_string()).await;
        c.wait_until("echo", Duration::from_secs(5), |c| {
            c.data_len.get(t).copied().unwrap_or(0) > before
        })
        .await;
        let el = t0.elapsed();
        if i >= 50 {
            samples.push(el); // the first 50 warm up
        }
        if i % 60 == 59 {
            // Keep the line short (canonical mode holds at most 4095 characters).
            c.type_text(t, "\u{15}").await; // ^U: kill the line
            c.drain_for(Duration::from_millis(5)).await;
        }
    }
    samples.sort();
    samples
}

fn raw_pty_echo(n: usize) -> Vec<Duration> {
    let (master, mut child) = spawn_on_pty(&["cat"]);
    let mut reader = master.try_clone_reader().unwrap();
    let mut writer = master.take_writer().unwrap();
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

/// CPU ticks used by `pids` in total (gone processes count 0).
fn ticks_of(pids: &[i32]) -> u64 {
    pids.iter().filter_map(|&p| cpu_ticks(p)).sum()
}

async fn memory() {
    let secs = env_num("FLOW_BENCH_STALL_SECS", 30);
    println!("\n## memory: the only subscriber stalled on a `yes` flood for {secs} s\n");
    let d = Daemon::start_with(&["--stall-timeout", "1h"]);
    announce(&d, "memory");
    let pid = d.pid();
    let (mut h, _) = Raw::connect_init_with(&d.url(), Opts::lean(), "mem-h", &[]).await;
    let t = terminal(&mut h, "mem", true).await;
    // The controller only types: the stalled client is the terminal's one subscriber.
    h.send_json(&json!({"jsonrpc": "2.0", "method": "unsubscribe", "params": {"channel": t}}))
        .await;
    let (mut s, _) =
        Raw::connect_init_with(&d.url(), Opts::lean().rcvbuf(16 * 1024), "mem-stalled", &[]).await;
    s.subscribe(&t).await;
    let rss0 = rss_bytes(pid);
    h.type_text(&t, "yes\r").await;
    let mut samples = Vec::new();
    tokio::time::sleep(Duration::from_secs(2)).await; // the queue fills; not a wait for an event
    let yes = descendants_named(pid, "yes");
    let yes0 = ticks_of(&yes);
    let cpu0 = cpu_ticks(pid as i32).unwrap_or(0);
    for _ in 0..secs {
        tokio::time::sleep(Duration::from_secs(1)).await;
        samples.push(rss_bytes(pid));
    }
    let yes_cpu = (ticks_of(&yes) - yes0) as f64 / ticks_per_second() as f64;
    let cpu = (cpu_ticks(pid as i32).unwrap_or(0) - cpu0) as f64 / ticks_per_second() as f64;
    let max = *samples.iter().max().unwrap();
    let min = *samples.iter().min().unwrap();
    let ten = samples.len().min(10);
    println!("| measure | value |");
    println!("|---|---|");
    println!("| RSS before the flood | {:.1} MiB |", mib(rss0));
    println!(
        "| RSS min / max over {secs} s | {:.1} / **{:.1} MiB** |",
        mib(min),
        mib(max)
    );
    println!(
        "| RSS at 10 s → at {secs} s | {:.1} → {:.1} MiB |",
        mib(samples[ten - 1]),
        mib(*samples.last().unwrap())
    );
    println!(
        "| CPU of `yes` / of the daemon over {secs} s | {:.2} s / {:.2} s (paused: both ≈ 0) |",
        yes_cpu, cpu
    );
    h.type_text(&t, "\u{3}").await;
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
        let (mut c, _) = Raw::connect_init_with(&d.url(), Opts::lean(), "idle", &[]).await;
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
            c.type_text(t, "\r").await;
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

/// A viewer in its own task: counts the text-frame bytes it receives, stops polling its
/// socket while `stall` is set, and hands its connection back once `stop` is set.
struct Viewer {
    bytes: Arc<AtomicU64>,
    stall: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Raw>,
}

impl Viewer {
    fn spawn(mut c: Raw) -> Viewer {
        let bytes = Arc::new(AtomicU64::new(0));
        let stall = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (b, st, sp) = (bytes.clone(), stall.clone(), stop.clone());
        let task = tokio::spawn(async move {
            while !sp.load(Ordering::Relaxed) {
                if st.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                match tokio::time::timeout(Duration::from_millis(50), c.ws.next()).await {
                    Ok(Some(Ok(Message::Text(t)))) => {
                        b.fetch_add(t.len() as u64, Ordering::Relaxed);
                    }
                    Ok(Some(Ok(_))) | Err(_) => {}
                    Ok(None) | Ok(Some(Err(_))) => break,
                }
            }
            c
        });
        Viewer {
            bytes,
            stall,
            stop,
            task,
        }
    }

    fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    async fn finish(self) -> Option<Raw> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.ok()
    }
}

/// Lines of the daemon's log that report closing a connection of `client_id`.
fn cuts_of(d: &Daemon, client_id: &str) -> usize {
    d.stderr()
        .lines()
        .filter(|l| l.contains("closing a") && l.contains(client_id))
        .count()
}

/// The close reasons logged for `client_id` (the words after "closing a").
fn cut_kinds(d: &Daemon, client_id: &str) -> String {
    let mut kinds: Vec<String> = d
        .stderr()
        .lines()
        .filter(|l| l.contains("closing a") && l.contains(client_id))
        .filter_map(|l| {
            let i = l.find("closing a")?;
            Some(l[i..].split(':').next()?.to_string())
        })
        .collect();
    kinds.dedup();
    kinds.join(", ")
}

/// A terminal running nothing yet, created by a controller that then unsubscribes (so it
/// never paces the terminal); returns the controller and the terminal's URI.
async fn flood_terminal(d: &Daemon, tag: &str) -> (Raw, String) {
    let (mut ctl, _) =
        Raw::connect_init_with(&d.url(), Opts::lean(), &format!("{tag}-ctl"), &[]).await;
    let t = term_uri(tag);
    ctl.create_terminal(&t).await;
    ctl.subscribe(&t).await;
    ctl.ready_for_commands(&t).await;
    ctl.send_json(&json!({"jsonrpc": "2.0", "method": "unsubscribe", "params": {"channel": t}}))
        .await;
    (ctl, t)
}

async fn viewer(d: &Daemon, client_id: &str, t: &str) -> Viewer {
    let (mut c, _) = Raw::connect_init_with(&d.url(), Opts::lean(), client_id, &[]).await;
    c.subscribe(t).await;
    c.watch.remove(t);
    Viewer::spawn(c)
}

/// Per-viewer rates (MB/s of frames) over `window`.
async fn rates(viewers: &[Viewer], window: Duration) -> Vec<f64> {
    let start: Vec<u64> = viewers.iter().map(Viewer::bytes).collect();
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let el = t0.elapsed();
    viewers
        .iter()
        .zip(start)
        .map(|(v, a)| mb_per_s(v.bytes() - a, el))
        .collect()
}

/// Per-client receive rates (MB/s of frames) of `clients` subscribers of one `yes` flood,
/// measured over `window` after a 1 s warm-up, and the daemon's CPU (fraction of one core).
async fn fan(d: &Daemon, clients: usize, window: Duration) -> (Vec<f64>, f64) {
    let (mut ctl, t) = flood_terminal(d, "fan").await;
    let mut viewers = Vec::new();
    for i in 0..clients {
        viewers.push(viewer(d, &format!("fan-{clients}-{i}"), &t).await);
    }
    ctl.type_text(&t, "yes\r").await;
    tokio::time::sleep(Duration::from_secs(1)).await; // warm-up, not a wait for an event
    let cpu0 = cpu_ticks(d.pid() as i32).unwrap();
    let t0 = Instant::now();
    let r = rates(&viewers, window).await;
    let cpu = (cpu_ticks(d.pid() as i32).unwrap() - cpu0) as f64 / ticks_per_second() as f64;
    let cpu = cpu / t0.elapsed().as_secs_f64();
    ctl.type_text(&t, "\u{3}").await;
    for v in viewers {
        let _ = v.finish().await;
    }
    (r, cpu)
}

/// `clients` viewers of one `yes` flood plus one more that reads, then stops reading: the
/// others' rates over `window` before it stops, while it is stalled (from the moment it
/// stops), and after; and when the daemon cut it loose.
async fn fan_with_stalled(
    d: &Daemon,
    clients: usize,
    window: Duration,
) -> ([Vec<f64>; 3], Option<Duration>) {
    let (mut ctl, t) = flood_terminal(d, "fans").await;
    let mut viewers = Vec::new();
    for i in 0..clients {
        viewers.push(viewer(d, &format!("fans-{i}"), &t).await);
    }
    let slow = viewer(d, "fan-stalled", &t).await;
    ctl.type_text(&t, "yes\r").await;
    tokio::time::sleep(Duration::from_secs(1)).await; // warm-up, not a wait for an event
    let before = rates(&viewers, window).await;
    slow.stall.store(true, Ordering::Relaxed);
    let start: Vec<u64> = viewers.iter().map(Viewer::bytes).collect();
    let t0 = Instant::now();
    let mut cut = None;
    while t0.elapsed() < window {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if cut.is_none() && cuts_of(d, "fan-stalled") > 0 {
            cut = Some(t0.elapsed());
        }
    }
    let el = t0.elapsed();
    let during = viewers
        .iter()
        .zip(start)
        .map(|(v, a)| mb_per_s(v.bytes() - a, el))
        .collect();
    let after = rates(&viewers, window).await;
    ctl.type_text(&t, "\u{3}").await;
    for v in viewers {
        let _ = v.finish().await;
    }
    let _ = slow.finish().await;
    ([before, during, after], cut)
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v
}

fn median(v: &[f64]) -> f64 {
    sorted(v.to_vec())[v.len() / 2]
}

async fn fanout() {
    let n = env_num("FLOW_BENCH_FANOUT", 32) as usize;
    let window = Duration::from_secs(5);
    println!(
        "\n## fan-out: clients on one `yes` flood ({}-s windows)\n",
        window.as_secs()
    );
    let d = Daemon::start();
    announce(&d, "fanout 1");
    let (single, cpu1) = fan(&d, 1, window).await;
    drop(d);
    let d = Daemon::start();
    announce(&d, &format!("fanout {n}"));
    let (many, cpun) = fan(&d, n, window).await;
    drop(d);
    let many = sorted(many);
    let s = single[0];
    let sum: f64 = many.iter().sum();
    println!("| clients | per-client MB/s (min / median / max) | per-client ÷ one client alone (median) | aggregate MB/s | daemon CPU |");
    println!("|---|---|---|---|---|");
    println!("| 1 | {s:.1} | 1.00 | {s:.1} | {:.0} % |", cpu1 * 100.0);
    println!(
        "| {n} | {:.1} / {:.1} / {:.1} | {:.3} | {sum:.1} | {:.0} % |",
        many[0],
        many[n / 2],
        many[n - 1],
        many[n / 2] / s,
        cpun * 100.0
    );

    let d = Daemon::start();
    announce(&d, &format!("fanout {} + 1 stalled", n - 1));
    let ([before, during, after], cut) = fan_with_stalled(&d, n - 1, window).await;
    let kinds = cut_kinds(&d, "fan-stalled");
    drop(d);
    let reference = median(&before);
    println!(
        "\n{} viewers beside one more that stops reading (one daemon; each window {} s; the \
         reference is the median rate while all 32 read):\n",
        n - 1,
        window.as_secs()
    );
    println!(
        "| window | per-viewer MB/s (min / median / max) | min ÷ reference | median ÷ reference |"
    );
    println!("|---|---|---|---|");
    for (name, r) in [
        ("all 32 reading", &before),
        ("one stalled, from the moment it stops", &during),
        ("after", &after),
    ] {
        let r = sorted(r.clone());
        println!(
            "| {name} | {:.1} / {:.1} / {:.1} | **{:.3}** | {:.3} |",
            r[0],
            r[r.len() / 2],
            r[r.len() - 1],
            r[0] / reference,
            r[r.len() / 2] / reference
        );
    }
    println!(
        "\nThe stalled viewer was {}.",
        match cut {
            Some(at) => format!(
                "closed {} ms after it stopped reading ({kinds})",
                at.as_millis()
            ),
            None => "not closed within the window".into(),
        }
    );
}

// ─── a fast viewer beside a stalled one ─────────────────────────────────────────

/// One fast viewer on a `yes` flood, first alone (10 s), then beside a viewer that reads for
/// 2 s, stops reading, and — once the daemon has closed it — comes back with `reconnect`
/// after 1 s and does the same again, for `FLOW_BENCH_STALLED_SECS` (default 60).
async fn stalled() {
    let secs = env_num("FLOW_BENCH_STALLED_SECS", 60);
    println!("\n## a fast viewer beside a stalled one, {secs} s\n");
    let d = Daemon::start();
    announce(&d, "stalled");
    let pid = d.pid();
    let (mut ctl, t) = flood_terminal(&d, "st").await;
    let fast = viewer(&d, "st-fast", &t).await;
    ctl.type_text(&t, "yes\r").await;
    tokio::time::sleep(Duration::from_secs(1)).await; // warm-up, not a wait for an event
    let alone_window = Duration::from_secs(10);
    let b0 = fast.bytes();
    tokio::time::sleep(alone_window).await;
    let alone = mb_per_s(fast.bytes() - b0, alone_window);

    let rss0 = rss_bytes(pid);
    let mut rss_max = rss0;
    let mut slow = Some(viewer(&d, "st-slow", &t).await);
    let mut phase_start = Instant::now();
    let mut cuts = 0;
    let mut reconnects = 0;
    let mut stalling = false;
    let mut back_at = None;
    let mut last_seq = 0;
    let (mut longest_gap, mut gap) = (Duration::ZERO, Duration::ZERO);
    let step = Duration::from_millis(50);
    let b0 = fast.bytes();
    let mut last = b0;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(secs) {
        tokio::time::sleep(step).await;
        rss_max = rss_max.max(rss_bytes(pid));
        let now = fast.bytes();
        if now == last {
            gap += step;
            longest_gap = longest_gap.max(gap);
        } else {
            gap = Duration::ZERO;
        }
        last = now;
        if let Some(s) = &slow {
            if !stalling && phase_start.elapsed() >= Duration::from_secs(2) {
                s.stall.store(true, Ordering::Relaxed);
                stalling = true;
            }
            if stalling && cuts_of(&d, "st-slow") > cuts {
                cuts += 1;
                if let Some(c) = slow.take().unwrap().finish().await {
                    last_seq = last_seq.max(c.last_seq);
                }
                back_at = Some(Instant::now() + Duration::from_secs(1));
            }
        } else if back_at.is_some_and(|b| Instant::now() >= b) {
            let mut c = Raw::connect_with(&d.url(), Opts::lean()).await;
            c.client_id = "st-slow".into();
            let r = c
                .request(
                    "reconnect",
                    json!({"channel": ROOT, "clientId": "st-slow",
                           "lastSeenServerSeq": last_seq, "subscriptions": [t]}),
                )
                .await;
            assert!(r.get("result").is_some(), "reconnect: {r}");
            reconnects += 1;
            slow = Some(Viewer::spawn(c));
            stalling = false;
            back_at = None;
            phase_start = Instant::now();
        }
    }
    let el = t0.elapsed();
    let beside = mb_per_s(fast.bytes() - b0, el);
    ctl.type_text(&t, "\u{3}").await;
    let _ = fast.finish().await;
    if let Some(s) = slow {
        let _ = s.finish().await;
    }
    println!("| measure | value |");
    println!("|---|---|");
    println!("| fast viewer alone (10 s) | {alone:.1} MB/s |");
    println!(
        "| fast viewer beside the stalling one ({secs} s) | {beside:.1} MB/s: **{:.2}×** alone |",
        beside / alone
    );
    println!(
        "| longest time the fast viewer received nothing | {} ms |",
        longest_gap.as_millis()
    );
    println!(
        "| stalled viewer closed by the daemon / reconnected | {cuts} / {reconnects} ({}) |",
        cut_kinds(&d, "st-slow")
    );
    println!(
        "| daemon RSS before → peak | {:.1} → **{:.1} MiB** |",
        mib(rss0),
        mib(rss_max)
    );
}

// ─── scale ───────────────────────────────────────────────────────────────────

/// `n` terminals created and subscribed to by `c` (their data counted, not kept).
async fn many_terminals(c: &mut Raw, tag: &str, n: usize) -> Vec<String> {
    let mut uris = Vec::new();
    for i in 0..n {
        let t = term_uri(&format!("{tag}{i}"));
        c.create_terminal(&t).await;
        c.subscribe(&t).await;
        c.watch.remove(&t);
        uris.push(t);
    }
    uris
}

/// The floor for [`scale`]: `n` ptys running the same loop, read by this thread, which waits
/// on all of them with `epoll`, reads each ready pty until it would block and sends what it
/// read on a loopback TCP socket (drained by another thread). No JSON, no WebSocket framing,
/// no state: the least any host does per line. Returns this thread's CPU (user, system) in
/// seconds over `window`, after 2 s to settle (as in [`scale`]), and the reads it made.
fn raw_chatty(n: usize, window: Duration) -> ((f64, f64), u64) {
    use std::time::Instant;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut out = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut sink, _) = listener.accept().unwrap();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while matches!(sink.read(&mut buf), Ok(n) if n > 0) {}
    });
    // SAFETY: epoll_create1 has no preconditions; the fd is closed at the end.
    let ep = unsafe { libc::epoll_create1(0) };
    let loop_argv = [
        "/bin/bash",
        "--norc",
        "--noprofile",
        "-c",
        "while :; do echo x; read -t 0.1; done",
    ];
    let ptys: Vec<_> = (0..n)
        .map(|i| {
            let (master, child) = spawn_on_pty(&loop_argv);
            let fd = master.as_raw_fd().unwrap();
            // SAFETY: fcntl and epoll_ctl on a descriptor this function owns (the master).
            unsafe {
                let fl = libc::fcntl(fd, libc::F_GETFL);
                libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
                let mut ev = libc::epoll_event {
                    events: (libc::EPOLLIN | libc::EPOLLET) as u32,
                    u64: i as u64,
                };
                libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev);
            }
            (master, child, fd)
        })
        .collect();
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 64];
    let mut buf = vec![0u8; 64 * 1024];
    let mut reads = 0u64;
    let mut forward_ready = |reads: &mut u64| {
        // SAFETY: epoll_wait writes at most events.len() entries into events.
        let k = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, 100) };
        for e in events.iter().take(k.max(0) as usize) {
            let fd = ptys[e.u64 as usize].2;
            loop {
                // SAFETY: reads at most buf.len() bytes into buf.
                let r = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
                if r <= 0 {
                    break;
                }
                out.write_all(&buf[..r as usize]).unwrap();
                *reads += 1;
            }
        }
    };
    let settle = Instant::now() + Duration::from_secs(2);
    while Instant::now() < settle {
        forward_ready(&mut reads);
    }
    let (cpu0, t0, reads0) = (thread_cpu(), Instant::now(), reads);
    while t0.elapsed() < window {
        forward_ready(&mut reads);
    }
    let cpu1 = thread_cpu();
    for (_, mut child, _) in ptys {
        let _ = child.kill();
        let _ = child.wait();
    }
    // SAFETY: closes the epoll descriptor created above.
    unsafe { libc::close(ep) };
    ((cpu1.0 - cpu0.0, cpu1.1 - cpu0.1), reads - reads0)
}

async fn scale() {
    let n = env_num("FLOW_BENCH_SCALE", 256) as usize;
    let window = Duration::from_secs(10);
    println!(
        "\n## scale: {n} terminals printing a line every 100 ms (`while :; do echo x; read -t 0.1; done`), one client subscribed to all\n"
    );
    println!("| transcripts | daemon CPU (% of one core; user + sys) | per envelope | envelopes/s received | lines/s expected |");
    println!("|---|---|---|---|---|");
    let ((u, sy), lines) = raw_chatty(n, window);
    println!(
        "| (floor: one thread, epoll + read + send, no daemon) | **{:.1} %** ({:.1} + {:.1}) | {:.0} µs per read | {:.0} reads/s | {} |",
        (u + sy) / window.as_secs_f64() * 100.0,
        u / window.as_secs_f64() * 100.0,
        sy / window.as_secs_f64() * 100.0,
        (u + sy) / (lines.max(1) as f64) * 1e6,
        lines as f64 / window.as_secs_f64(),
        n * 10
    );
    for persist in [true, false] {
        let mut args = vec!["--no-shell-integration"];
        if !persist {
            args.push("--no-persist");
        }
        let d = Daemon::start_with(&args);
        announce(&d, &format!("scale, transcripts {persist}"));
        let (mut c, _) = Raw::connect_init_with(&d.url(), Opts::lean(), "scale", &[]).await;
        let uris = many_terminals(&mut c, "scale", n).await;
        for t in &uris {
            c.type_text(t, "while :; do echo x; read -t 0.1; done\r")
                .await;
        }
        c.drain_for(Duration::from_secs(2)).await;
        let (u0, s0) = cpu_secs(d.pid());
        let f0 = c.data_frames;
        c.drain_for(window).await;
        let (u1, s1) = cpu_secs(d.pid());
        let frames = (c.data_frames - f0) as f64;
        let cpu = u1 - u0 + s1 - s0;
        println!(
            "| {} | **{:.1} %** ({:.1} + {:.1}) | {:.0} µs | {:.0} | {} |",
            if persist { "on (default)" } else { "off" },
            cpu / window.as_secs_f64() * 100.0,
            (u1 - u0) / window.as_secs_f64() * 100.0,
            (s1 - s0) / window.as_secs_f64() * 100.0,
            cpu / frames.max(1.0) * 1e6,
            frames / window.as_secs_f64(),
            n * 10
        );
    }
}

// ─── persistence ─────────────────────────────────────────────────────────────

/// What the daemon `pid` wrote: bytes its threads caused to be sent to storage
/// (`/proc/PID/io` `write_bytes`, counted when a page is dirtied), and bytes its `ahpty-store`
/// thread passed to `write(2)` (`wchar` of that thread).
fn disk_writes(pid: u32) -> (u64, u64) {
    let field = |text: &str, name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    let mut store = 0;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if comm.trim() == "ahpty-store" {
                let io = std::fs::read_to_string(t.path().join("io")).unwrap_or_default();
                store += field(&io, "wchar:");
            }
        }
    }
    (field(&io, "write_bytes:"), store)
}

/// CPU seconds (user + sys) of the daemon `pid`'s `ahpty-store` thread.
fn store_cpu(pid: u32) -> f64 {
    let tick = ticks_per_second() as f64;
    let mut total = 0.0;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if comm.trim() != "ahpty-store" {
                continue;
            }
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            let f: Vec<&str> = stat[stat.rfind(')').map_or(0, |i| i + 1)..]
                .split_whitespace()
                .collect();
            let field = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            total += (field(11) + field(12)) / tick;
        }
    }
    total
}

/// Bytes of the transcripts under a daemon's `$HOME` (the harness's XDG_STATE_HOME).
fn transcript_bytes(home: &std::path::Path) -> u64 {
    std::fs::read_dir(home.join(".state/ahpty/terminals"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// The transcript store's cost: a `cat` flood with persistence off and on against the raw pty
/// in the same round, then many chatty terminals with it off and on.
async fn persist() {
    let size = env_num("FLOW_BENCH_FILE_MIB", 256);
    let dir = tempfile::tempdir().unwrap();
    let file = make_file(dir.path(), size);
    let path = file.to_str().unwrap().to_string();
    println!("\n## persist: `cat` of a {size} MiB file, transcripts off and on\n");
    println!(
        "| run | MB/s | ratio to raw pty | daemon CPU ms per MB (user + sys) | … of which the store thread | store `write` bytes per MB | storage bytes per MB (`write_bytes`) | transcript on disk |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut medians = Medians::default();
    for round in 0..rounds() {
        let (raw_bytes, _, raw_t) = raw_pty_read(&["cat", &path]);
        let raw = mb_per_s(raw_bytes, raw_t);
        println!("| raw pty #{round} | {raw:.1} | 1.00 | | | | | |");
        for on in [false, true] {
            let mut args = vec!["--no-shell-integration"];
            if !on {
                args.push("--no-persist");
            }
            let d = Daemon::start_with(&args);
            announce(&d, &format!("persist #{round}, transcripts {on}"));
            let (mut c, _) = Raw::connect_init_with(&d.url(), Opts::lean(), "pe", &[]).await;
            c.keep_tail = Some(4096);
            let t = terminal(&mut c, "pe", false).await;
            let before = c.data_len.get(&t).copied().unwrap_or(0);
            let (u0, s0) = cpu_secs(d.pid());
            let (w0, st0) = disk_writes(d.pid());
            let sc0 = store_cpu(d.pid());
            let t0 = Instant::now();
            c.type_text(&t, &format!("cat {path}; echo pe-end-$((40+2))\r"))
                .await;
            c.wait_data(&t, "pe-end-42", Duration::from_secs(600)).await;
            let el = t0.elapsed();
            let (u1, s1) = cpu_secs(d.pid());
            let sc1 = store_cpu(d.pid());
            // The last batch and its sync are at most 1.1 s behind.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let (w1, st1) = disk_writes(d.pid());
            let bytes = (c.data_len[&t] - before) as u64;
            let mb = bytes as f64 / 1e6;
            let rate = mb_per_s(bytes, el);
            println!(
                "| ahpty #{round}, transcripts {} | {rate:.1} | **{:.2}** | **{:.2}** ({:.2} + {:.2}) | {:.2} | **{:.0}** | {:.0} | {:.2} MiB |",
                if on { "on" } else { "off" },
                rate / raw,
                (u1 - u0 + s1 - s0) * 1e3 / mb,
                (u1 - u0) * 1e3 / mb,
                (s1 - s0) * 1e3 / mb,
                (sc1 - sc0) * 1e3 / mb,
                (st1 - st0) as f64 / mb,
                (w1 - w0) as f64 / mb,
                mib(transcript_bytes(d.home())),
            );
            let which = if on { "on" } else { "off" };
            medians.add(
                &format!("transcripts {which}: ratio to raw pty"),
                rate / raw,
            );
            medians.add(
                &format!("transcripts {which}: CPU ms per MB"),
                (u1 - u0 + s1 - s0) * 1e3 / mb,
            );
        }
    }
    medians.print();
    let n = env_num("FLOW_BENCH_PERSIST_CHATTY", 64) as usize;
    let window = Duration::from_secs(10);
    println!(
        "\n{n} terminals printing a 64-character line every 100 ms, one client subscribed to all, {} s:\n",
        window.as_secs()
    );
    println!("| transcripts | daemon CPU (% of one core; user + sys) | per line | … of which the store thread | output bytes per s (envelopes × 65 B) | store `write` bytes per s | storage bytes per s | storage bytes per byte of output |");
    println!("|---|---|---|---|---|---|---|---|");
    for on in [false, true] {
        let mut args = vec!["--no-shell-integration"];
        if !on {
            args.push("--no-persist");
        }
        let d = Daemon::start_with(&args);
        announce(&d, &format!("persist chatty, transcripts {on}"));
        let (mut c, _) = Raw::connect_init_with(&d.url(), Opts::lean(), "pc", &[]).await;
        // One envelope per line (a terminal prints one every 100 ms), `LINE` and CR LF.
        const LINE: &str = "a line of chatty output, like a build log or a dev server, 70 b";
        let uris = many_terminals(&mut c, "pc", n).await;
        for t in &uris {
            c.type_text(
                t,
                &format!("while :; do echo '{LINE}'; read -t 0.1; done\r"),
            )
            .await;
        }
        c.drain_for(Duration::from_secs(2)).await;
        let (u0, s0) = cpu_secs(d.pid());
        let (w0, st0) = disk_writes(d.pid());
        let sc0 = store_cpu(d.pid());
        let f0 = c.data_frames;
        c.drain_for(window).await;
        let (u1, s1) = cpu_secs(d.pid());
        let (w1, st1) = disk_writes(d.pid());
        let sc1 = store_cpu(d.pid());
        let frames = (c.data_frames - f0).max(1) as f64;
        let out = frames * (LINE.len() + 2) as f64;
        let secs = window.as_secs_f64();
        println!(
            "| {} | **{:.1} %** ({:.1} + {:.1}) | {:.0} µs | {:.1} % ({:.0} µs per line) | {:.0} | {:.0} | {:.0} | **{:.1}** |",
            if on { "on" } else { "off" },
            (u1 - u0 + s1 - s0) / secs * 100.0,
            (u1 - u0) / secs * 100.0,
            (s1 - s0) / secs * 100.0,
            (u1 - u0 + s1 - s0) / frames * 1e6,
            (sc1 - sc0) / secs * 100.0,
            (sc1 - sc0) / frames * 1e6,
            out / secs,
            (st1 - st0) as f64 / secs,
            (w1 - w0) as f64 / secs,
            (w1 - w0) as f64 / out,
        );
    }
}

// ─── paused terminals ────────────────────────────────────────────────────────

/// Many terminals flooding with `yes` whose one subscriber never reads: every terminal is
/// paused; what does the daemon spend while nothing drains?
async fn paused() {
    let n = env_num("FLOW_BENCH_PAUSED", 256) as usize;
    let window = Duration::from_secs(10);
    println!("\n## paused: {n} terminals running `yes`, their one subscriber not reading\n");
    let d = Daemon::start_with(&["--no-shell-integration", "--stall-timeout", "1h"]);
    announce(&d, "paused");
    let pid = d.pid();
    let (mut c, _) =
        Raw::connect_init_with(&d.url(), Opts::lean().rcvbuf(16 * 1024), "paused", &[]).await;
    let uris = many_terminals(&mut c, "paused", n).await;
    // From here on the client never reads; input still goes through.
    for t in &uris {
        c.type_text(t, "yes\r").await;
    }
    // Every terminal runs `yes` (polling /proc), then the queue and the pty buffers fill.
    let deadline = Instant::now() + Duration::from_secs(120);
    while descendants_named(pid, "yes").len() < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Then until they are all blocked: their CPU time stops growing (or 60 s pass).
    let yes = descendants_named(pid, "yes");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut before = ticks_of(&yes);
    let mut settled_after = Duration::ZERO;
    let t0 = Instant::now();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = ticks_of(&yes);
        if now == before {
            settled_after = t0.elapsed();
            break;
        }
        before = now;
    }
    let yes0 = ticks_of(&yes);
    let (u0, s0) = cpu_secs(pid);
    tokio::time::sleep(window).await;
    let (u1, s1) = cpu_secs(pid);
    let yes_cpu = (ticks_of(&yes) - yes0) as f64 / ticks_per_second() as f64;
    println!(
        "| daemon CPU (% of one core; user + sys) | CPU of the {} `yes` processes | daemon RSS | all blocked after |",
        yes.len()
    );
    println!("|---|---|---|---|");
    println!(
        "| **{:.2} %** ({:.2} + {:.2}) | {:.2} s in {} s | {:.1} MiB | {:.0} s |",
        (u1 - u0 + s1 - s0) / window.as_secs_f64() * 100.0,
        (u1 - u0) / window.as_secs_f64() * 100.0,
        (s1 - s0) / window.as_secs_f64() * 100.0,
        yes_cpu,
        window.as_secs(),
        mib(rss_bytes(pid)),
        settled_after.as_secs_f64()
    );
}

// ─── live upgrade ────────────────────────────────────────────────────────────

/// `ahpty upgrade` of a daemon with terminals holding history, one of them a ticker writing a
/// timestamp every 20 ms: the switch (quiesced → serving) and SIGUSR2 → serving as the daemon
/// reports them, and the ticker's largest gap around each upgrade against elsewhere.
async fn upgrade() {
    let n = env_num("FLOW_BENCH_UPGRADE_TERMINALS", 16) as usize;
    let rounds = env_num("FLOW_BENCH_UPGRADES", 10) as usize;
    println!(
        "\n## upgrade: `ahpty upgrade` ×{rounds}, {n} terminals with ~110 KB of history each, one ticking every 20 ms\n"
    );
    let d = Daemon::start();
    announce(&d, "upgrade");
    let (mut c, _) = Raw::connect_init(&d.url(), "upgrade", &[]).await;
    let uris = many_terminals(&mut c, "up", n).await;
    for t in &uris[1..] {
        c.type_text(t, "seq 1 20000; echo done-$((1+1))\r").await;
    }
    for t in &uris[1..] {
        c.watch.insert(t.clone());
        c.wait_data(t, "done-2", Duration::from_secs(60)).await;
    }
    let ticker = &uris[0];
    c.type_text(
        ticker,
        "while :; do echo \"ts $EPOCHREALTIME\"; sleep 0.02; done\r",
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    };
    let status = d
        .runtime_dir()
        .join(format!("ahpty/upgrade-{}.json", d.pid()));
    let (mut switch, mut total, mut windows) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let mut cmd = cli_command(d.home(), &["upgrade", "--timeout", "50s"]);
        cmd.env("XDG_RUNTIME_DIR", d.runtime_dir());
        let start = now();
        let out = tokio::task::spawn_blocking(move || run_cli(cmd, Duration::from_secs(60)))
            .await
            .unwrap();
        windows.push((start, now()));
        assert_eq!(out.code, Some(0), "ahpty upgrade: {out:?}\n{}", d.stderr());
        let st: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&status).unwrap()).unwrap();
        switch.push(st["switchMs"].as_f64().unwrap_or(f64::NAN));
        total.push(st["totalMs"].as_f64().unwrap_or(f64::NAN));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (mut r, _) = Raw::connect_init(&d.url(), "upgrade-read", &[]).await;
    let text = content_text(&terminal_of(&r.subscribe(ticker).await));
    let ticks: Vec<f64> = text
        .split('\n')
        .filter_map(|l| l.trim_end_matches('\r').strip_prefix("ts "))
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    let (mut during, mut elsewhere) = (0.0f64, 0.0f64);
    for w in ticks.windows(2) {
        let gap = (w[1] - w[0]) * 1000.0;
        if windows.iter().any(|&(a, b)| w[1] >= a && w[0] <= b) {
            during = during.max(gap);
        } else {
            elsewhere = elsewhere.max(gap);
        }
    }
    let stats = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    let (sm, s0, s1) = stats(&mut switch);
    let (tm, t0, t1) = stats(&mut total);
    println!("| measure | median | min | max |");
    println!("|---|---|---|---|");
    println!("| switch (quiesced → serving) | **{sm:.1} ms** | {s0:.1} ms | {s1:.1} ms |");
    println!("| SIGUSR2 → serving (pre-flight included) | {tm:.1} ms | {t0:.1} ms | {t1:.1} ms |");
    println!(
        "\nticker: {} ticks; largest gap {during:.1} ms around the upgrades, {elsewhere:.1} ms elsewhere",
        ticks.len()
    );
}

fn main() {
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let all = [
        "throughput",
        "latency",
        "memory",
        "idle",
        "stalled",
        "fanout",
        "scale",
        "paused",
        "model",
        "persist",
        "upgrade",
    ];
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
                "stalled" => stalled().await,
                "fanout" => fanout().await,
                "scale" => scale().await,
                "paused" => paused().await,
                "model" => model().await,
                "persist" => persist().await,
                "upgrade" => upgrade().await,
                _ => unreachable!(),
            }
        }
    });
}
