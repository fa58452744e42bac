//! Hostile program output hurts nobody else: a program printing shell-integration marks by
//! the ten thousand, one asking the terminal questions (cursor position, colours, device
//! attributes) in a loop without ever reading the answers, and one sending colour queries of
//! hundreds of kilobytes. Each attack runs while a bystander (another client, its own
//! terminal) measures its round trips, which must stay fast; the daemon's CPU and memory must
//! grow no faster than the attack's bytes, and nothing of a removed sequence may reach a
//! client as text.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::*;

/// One empty command cycle with a prompt, as a FinalTerm-style prompt prints it (40 bytes).
const CYCLE: &str = "\x1b]133;A\x07$ \x1b]133;B\x07\x1b]133;C\x07\x1b]133;D;0\x07";

/// Writes `body` to `name` under `dir`.
fn write_file(dir: &Path, name: &str, body: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

/// Daemon CPU (clock ticks) for `cat`ting `file` in the terminal `t` until its output ended,
/// as the subscriber `raw` sees it.
async fn cpu_to_cat(d: &Daemon, raw: &mut Raw, t: &str, file: &Path, tag: &str) -> u64 {
    raw.forget();
    let before = cpu_ticks(d.pid() as i32).unwrap_or(0);
    raw.type_text(
        t,
        &format!("cat {}; echo {tag}-$((40+2))\r", file.display()),
    )
    .await;
    raw.wait_data(t, &format!("{tag}-42"), Duration::from_secs(60))
        .await;
    let used = cpu_ticks(d.pid() as i32).unwrap_or(0) - before;
    raw.forget();
    used
}

// 20 000 empty command cycles (OSC 133 A, B, C, D around a prompt) cost the daemon about four
// times what 5 000 do, not sixteen: the work per mark does not grow with the marks before it
// (the content keeps at most 2 × 1 024 parts, the oldest merged into one; a command is
// finished from the newest part). A bystander stays fast meanwhile, and a new subscriber's
// snapshot holds at most that many parts.
measured!(shell_integration_marks_cost_linear_time, async {
    let d = Daemon::start_with(&["--no-shell-integration"]);
    let dir = tempfile::tempdir().unwrap();
    let small = write_file(dir.path(), "small", CYCLE.repeat(5_000).as_bytes());
    let large = write_file(dir.path(), "large", CYCLE.repeat(20_000).as_bytes());
    let (mut raw, _) = Raw::connect_init(&d.url(), "marks", &[]).await;
    let t = term_uri("marks");
    raw.create_terminal(&t).await;
    raw.subscribe(&t).await;
    raw.ready(&t).await;
    // Warm up (the shell, `cat`, the daemon's first terminal/command* envelopes).
    cpu_to_cat(&d, &mut raw, &t, &small, "warm").await;

    let by = Bystander::start(&d.url());
    let t0 = Instant::now();
    let cpu_small = cpu_to_cat(&d, &mut raw, &t, &small, "small").await;
    let cpu_large = cpu_to_cat(&d, &mut raw, &t, &large, "large").await;
    let attack = t0.elapsed();
    let samples = by.finish();
    let hz = ticks_per_second() as f64;
    eprintln!(
        "daemon CPU: 5 000 cycles {:.2} s, 20 000 cycles {:.2} s (ratio {:.1}); attack {attack:?}",
        cpu_small as f64 / hz,
        cpu_large as f64 / hz,
        cpu_large as f64 / cpu_small.max(1) as f64
    );
    samples.assert_fast("while a program prints 25 000 command cycles", 10);
    // Linear is 4; quadratic 16. Slack for the scheduler of a shared 2-core machine.
    assert!(
        cpu_large <= 8 * cpu_small.max(hz as u64 / 20),
        "20 000 cycles cost {cpu_large} ticks, 5 000 cost {cpu_small}: more than linear"
    );

    let (mut other, _) = Raw::connect_init(&d.url(), "late", &[]).await;
    let snap = other.subscribe(&t).await;
    let parts = terminal_of(&snap).content.len();
    assert!(
        parts <= 2 * 1024 + 1,
        "a snapshot after 30 000 command cycles holds {parts} parts"
    );
});

/// A program that asks the terminal `ESC[6n`, `OSC 11 ?` and `ESC[c` (14 bytes) in a loop for
/// 3 s (or 200 000 times) without reading, prints `flood-done`, waits for the file `go` beside
/// it, then reads its input until 500 ms pass without any (at most 5 s, 64 MiB) and prints
/// `query-result <queries written> <answer bytes read> end`. Raw mode without echo, so the
/// answers stay on its input.
const ASKER: &str = r#"
import os, sys, time, termios, tty, select
saved = termios.tcgetattr(0)
tty.setraw(0)
chunk = b"\x1b[6n\x1b]11;?\x07\x1b[c" * 64
asked, end = 0, time.monotonic() + 3
while time.monotonic() < end and asked < 200000:
    os.write(1, chunk)
    asked += 64
os.write(1, b"flood-" + b"done\r\n")
while not os.path.exists("go"):
    time.sleep(0.02)
got, end = 0, time.monotonic() + 5
while time.monotonic() < end and got < 64 << 20:
    if not select.select([0], [], [], 0.5)[0]:
        break
    got += len(os.read(0, 65536))
termios.tcsetattr(0, termios.TCSANOW, saved)
print("query-result", asked, got, "end")
"#;

/// Largest daemon RSS (KiB) seen while `raw` reads the data of `t` until it contains `needle`
/// (at most `timeout`), sampled every 50 ms (sampling a counter is the measurement itself).
async fn peak_rss_until(pid: u32, raw: &mut Raw, t: &str, needle: &str, timeout: Duration) -> u64 {
    let mut peak = rss_kib(pid);
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        raw.drain_for(Duration::from_millis(50)).await;
        peak = peak.max(rss_kib(pid));
        if raw.data(t).contains(needle) {
            return peak;
        }
    }
    panic!("{needle:?} not in the data of {t} within {timeout:?}");
}

// A program that floods the terminal with queries (cursor position, background colour,
// device attributes) and does not read its input gets no more answers than the few KiB the
// daemon lets wait (plus what the pty itself buffers): once it reads, after the daemon has
// seen every query, it finds at most that much, not an answer for each query it asked. The
// daemon's memory stays bounded, a bystander stays fast, and the shell is usable at once
// afterwards — no megabytes of stale answers are typed into it.
measured!(unread_terminal_queries_stay_bounded, async {
    let d = Daemon::start();
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "asker.py", ASKER.as_bytes());
    let (mut raw, _) = Raw::connect_init(&d.url(), "queries", &[]).await;
    let t = term_uri("queries");
    raw.create_terminal(&t).await;
    raw.subscribe(&t).await;
    raw.ready(&t).await;
    raw.keep_tail = Some(4096);
    let by = Bystander::start(&d.url());
    let rss_before = rss_kib(d.pid());
    let cpu_before = cpu_ticks(d.pid() as i32).unwrap_or(0);
    raw.type_text(
        &t,
        &format!("cd {}; python3 asker.py\r", dir.path().display()),
    )
    .await;
    // Every query has reached the daemon once the program's mark after them has.
    let peak = peak_rss_until(d.pid(), &mut raw, &t, "flood-done", Duration::from_secs(30)).await;
    let cpu = cpu_ticks(d.pid() as i32).unwrap_or(0) - cpu_before;
    std::fs::write(dir.path().join("go"), b"").unwrap();
    raw.wait_data(&t, " end", Duration::from_secs(20)).await;
    let data = raw.data(&t);
    let result = &data[data.rfind("query-result ").expect("the asker's result")..];
    let numbers: Vec<u64> = result
        .split_whitespace()
        .skip(1)
        .take(2)
        .map(|n| n.parse().expect("a count"))
        .collect();
    let (asked, answered) = (numbers[0], numbers[1]);
    eprintln!(
        "query flood: {asked} × 3 queries asked, {answered} bytes of answers read afterwards; \
         daemon RSS {rss_before} KiB before, peak {peak} KiB; CPU {:.2} s",
        cpu as f64 / ticks_per_second() as f64
    );
    let killed = Instant::now();
    let mut n = 0;
    eventually(
        "the shell to answer after the flood",
        Duration::from_secs(20),
        async || {
            n += 1;
            raw.type_text(&t, &format!("\x15echo after-{n}-$((6*7))\r"))
                .await;
            let needle = format!("after-{n}-42");
            tokio::time::timeout(
                Duration::from_millis(500),
                raw.wait_data(&t, &needle, Duration::from_secs(1)),
            )
            .await
            .is_ok()
        },
    )
    .await;
    eprintln!("the shell answered {:?} after the flood", killed.elapsed());
    by.finish().assert_fast(
        "while a program floods the terminal with unread queries",
        10,
    );
    // Each round's answers are about 40 bytes: the flood must have asked for far more than
    // the bound, or the test could not fail.
    assert!(
        asked >= 20_000,
        "the flood did not run: {asked} rounds of queries asked"
    );
    // 4 KiB waiting in the daemon, the pty's own buffer (up to 64 KiB + 4 KiB on Linux) and
    // the at most 256 answers waiting for the model.
    assert!(
        answered <= 96 * 1024,
        "a program that did not read found {answered} bytes of answers once it read \
         ({asked} rounds of queries asked)"
    );
    assert!(
        peak < rss_before + 48 * 1024,
        "daemon RSS grew from {rss_before} KiB to {peak} KiB during the query flood"
    );
});

// An OSC 11 colour query of 100 000 `;?` fields (200 KB) and one of 600 000 (1.2 MB, past the
// longest sequence the daemon holds) are removed whole: not one byte of either reaches a
// client as text, the output after them does, the daemon answers each at most twice (after
// OSC 11 only 12 names a colour), and a bystander stays fast.
measured!(overlong_colour_queries_are_swallowed_whole, async {
    let d = Daemon::start();
    let dir = tempfile::tempdir().unwrap();
    let mut body = Vec::new();
    for (fields, tag) in [(100_000, "first"), (600_000, "second")] {
        body.extend_from_slice(b"\x1b]11");
        body.extend_from_slice(";?".repeat(fields).as_bytes());
        body.extend_from_slice(format!("\x07after-{tag}.\r\n").as_bytes());
    }
    let file = write_file(dir.path(), "osc", &body);
    let (mut raw, _) = Raw::connect_init(&d.url(), "osc", &[]).await;
    let t = term_uri("osc");
    raw.create_terminal(&t).await;
    raw.subscribe(&t).await;
    raw.ready(&t).await;
    let by = Bystander::start(&d.url());
    raw.forget();
    let rss_before = rss_kib(d.pid());
    // `cat` does not read the answers: the shell gets them once it is back at its prompt,
    // and `read` takes what came (each answer ends with BEL).
    raw.type_text(
        &t,
        &format!(
            "stty -echo -icanon; cat {}; n=0; while read -r -t 1 -d $'\\a' a; do n=$((n+1)); \
             done; stty sane; echo answers=$n.$((6*7))\r",
            file.display()
        ),
    )
    .await;
    raw.wait_data(&t, ".42", Duration::from_secs(30)).await;
    let peak = rss_kib(d.pid());
    by.finish()
        .assert_fast("while a program prints over-long colour queries", 10);
    let data = raw.data(&t).to_string();
    let answers: usize = data
        .rsplit("answers=")
        .next()
        .and_then(|s| s.split(".42").next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no answer count in {}", clip(data.clone(), 400)));
    eprintln!("over-long OSC 11: {answers} answers; daemon RSS {rss_before} → {peak} KiB");
    assert!(
        !data.contains(";?;?") && !data.contains("\x1b]11"),
        "a colour query reached the client as text: {}",
        clip(data.clone(), 400)
    );
    assert!(
        data.contains("after-first.") && data.contains("after-second."),
        "the output after the queries is missing: {}",
        clip(data.clone(), 400)
    );
    // `11;?;?` asks for the background and the cursor colour: two answers for the first
    // query, none for the one given up.
    assert!(answers <= 4, "{answers} answers to two OSC 11 queries");
});
