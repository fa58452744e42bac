//! Flow control (docs/protocol.md "Flow control" and "Limits"): bounded memory and real
//! backpressure under floods and stalled clients, Ctrl-C through a flood, large pastes, the
//! input-queue bound, scrollback trimming boundaries, the message size limit and coalescing.
//! Real daemon, real bash, real WebSocket; every wait has a timeout.

use std::time::Duration;

use crate::support::*;
use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio::time::Instant;

/// Daemon RSS bound asserted while a client is stalled under a flood (a debug build). The
/// daemon's allocator keeps pages freed in the last second for reuse (jemalloc's dirty decay,
/// `src/main.rs`): under a debug build's flood that is 10–30 MiB on top of 40–50 MiB in use.
/// A queue that grew with the flood instead of being bounded would pass this within seconds.
const RSS_BOUND: u64 = 96 * 1024 * 1024;

/// A small receive buffer for clients that stop reading, so the kernel holds little.
const SMALL_RCVBUF: u32 = 16 * 1024;

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// Whether `pid` is asleep (state `S`) and used no CPU for `window`, sampled while `client`
/// keeps reading. Returns (all samples sleeping, CPU ticks used, data bytes the client read).
async fn blocked_for(pid: i32, client: &mut Raw, window: Duration) -> (bool, u64, usize) {
    let t0 = cpu_ticks(pid).expect("process alive");
    let mut sleeping = true;
    let mut bytes = 0;
    let steps = 5;
    for _ in 0..steps {
        bytes += client.drain_for(window / steps).await;
        sleeping &= proc_state(pid) == Some('S');
    }
    let used = cpu_ticks(pid).expect("process alive") - t0;
    (sleeping, used, bytes)
}

/// Waits until `pid` is blocked writing to its paused pty: asleep, and no CPU used over a
/// 300 ms window (the window is the measurement).
async fn wait_paused(pid: i32, what: &str) {
    eventually(
        &format!("{what} to block"),
        Duration::from_secs(20),
        async || {
            let used = cpu_over(pid, Duration::from_millis(300)).await;
            if used == 0 && proc_state(pid) == Some('S') {
                Ok(())
            } else {
                Err(format!(
                    "{used} ticks in 300 ms, state {:?}",
                    proc_state(pid)
                ))
            }
        },
    )
    .await
}

/// Whether the daemon logged closing a connection of `client_id` as `kind` ("stalled" or
/// "lagging").
fn closed_as(d: &Daemon, kind: &str, client_id: &str) -> bool {
    d.stderr().lines().any(|l| {
        l.contains(&format!("closing a {kind} connection"))
            && l.contains(&format!("\"{client_id}\""))
    })
}

/// A lean client of `d` (see `support::raw`), initialized as `id`.
async fn lean(d: &Daemon, id: &str, rcvbuf: Option<u32>) -> (Raw, Value) {
    let opts = Opts {
        rcvbuf,
        ..Opts::lean()
    };
    Raw::connect_init_with(&d.url(), opts, id, &[]).await
}

/// A lean client's `reconnect` as `id`: the new connection and the result.
async fn resume(d: &Daemon, id: &str, last_seen: u64, subs: &[&str]) -> (Raw, Value) {
    let (c, resp) = Raw::reconnect_with(&d.url(), Opts::lean(), id, last_seen as i64, subs).await;
    let result = resp
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("reconnect failed: {resp}"));
    (c, result)
}

// Its only subscriber stalled, a `yes` flood pauses (the program blocks), memory stays
// bounded, another terminal stays responsive; after `--stall-timeout` the connection is
// closed (4001, never as lagging: nobody else kept up) and can reconnect and resume.
measured!(
    the_only_subscriber_stalled_pauses_the_pty_until_the_stall_timeout,
    async {
        const STALL: Duration = Duration::from_secs(3);
        let d = Daemon::start_with(&["--stall-timeout", "3s"]);
        let pid = d.pid();
        let mut max_rss = rss_bytes(pid);
        let (mut h, _) = lean(&d, "typist", None).await;
        let t = term_uri("flood");
        let quiet = term_uri("quiet");
        h.create_terminal(&t).await;
        h.create_terminal(&quiet).await;
        h.subscribe(&t).await;
        h.subscribe(&quiet).await;
        h.ready_for_commands(&t).await;
        h.ready_for_commands(&quiet).await;
        // The typist only types into the flood: the stalled client is its one subscriber.
        h.unsubscribe(&t).await;

        let (mut s, _) = lean(&d, "stalled", Some(SMALL_RCVBUF)).await;
        s.subscribe(&t).await;
        let tag = unique("stall");
        let started = Instant::now();
        h.type_text(&t, &format!("yes {tag}\r")).await;
        let yes = wait_pid_of(d.pid(), &format!("yes {tag}"), Duration::from_secs(10)).await;

        // The pause: `yes` sleeps, blocked in write, and uses no CPU.
        eventually(
            "the pty paused while its only subscriber is stalled",
            Duration::from_secs(4),
            async || {
                max_rss = max_rss.max(rss_bytes(pid));
                let (sleeping, used, _) =
                    blocked_for(yes, &mut h, Duration::from_millis(500)).await;
                if sleeping && used <= 1 {
                    Ok(())
                } else {
                    Err(format!(
                        "yes sleeping in every sample: {sleeping}, CPU ticks used in 500 ms: {used}"
                    ))
                }
            },
        )
        .await;
        assert!(
            !d.stderr().contains("closing a"),
            "closed before the pause could be observed:\n{}",
            d.stderr()
        );

        // Another terminal stays responsive while the flood is paused.
        for i in 0..3 {
            let t0 = Instant::now();
            h.type_text(&quiet, &format!("echo rt$((1000+{i}))\r"))
                .await;
            h.wait_data(&quiet, &format!("rt{}", 1000 + i), Duration::from_secs(5))
                .await;
            let rtt = t0.elapsed();
            assert!(
                rtt < Duration::from_millis(500),
                "echo round trip on another terminal took {rtt:?} while the flood is paused"
            );
        }

        // After the stall timeout the connection is closed as stalled.
        eventually(
            "the stalled connection closed as stalled",
            STALL + Duration::from_secs(5),
            async || {
                max_rss = max_rss.max(rss_bytes(pid));
                // The typist keeps reading meanwhile.
                h.drain_for(Duration::from_millis(50)).await;
                closed_as(&d, "stalled", "stalled")
            },
        )
        .await;
        let closed_after = started.elapsed();
        assert!(
            closed_after >= STALL,
            "closed after {closed_after:?}, before the stall timeout"
        );
        assert!(!closed_as(&d, "lagging", "stalled"), "{}", d.stderr());
        assert!(
            max_rss < RSS_BOUND,
            "daemon RSS reached {:.1} MiB (bound {:.0} MiB)",
            mib(max_rss),
            mib(RSS_BOUND)
        );

        // It reads again: what the kernel held, then the end of the connection.
        assert!(
            s.read_to_close(Duration::from_secs(10)).await,
            "the stalled connection was not closed"
        );
        if let Some(Some(frame)) = &s.closed {
            assert_eq!(u16::from(frame.code), 4001, "close frame: {frame:?}");
            assert!(frame.reason.contains("stalled"), "close reason: {frame:?}");
        }

        // It reconnects and resumes: a replay or snapshot, then live data again.
        let (mut s2, r) = resume(&d, "stalled", s.last_seq, &[&t]).await;
        assert!(
            matches!(r["type"].as_str(), Some("replay") | Some("snapshot")),
            "reconnect: {r}"
        );
        s2.wait_until("live data after reconnect", Duration::from_secs(10), |c| {
            c.data_len.get(&t).copied().unwrap_or(0) > 64 * 1024
        })
        .await;
        // Input is refused while the resumed client's queue (the replay first) is over the hard
        // limit: Ctrl-C is sent again, as the rejection says to, until the command finishes.
        let interrupted = |c: &Raw| {
            c.find_action(&t, "terminal/commandFinished", |e| {
                e["action"]["exitCode"] == 130
            })
            .is_some()
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut seq = h.type_text(&t, "\u{3}").await;
        let mut sent = Instant::now();
        while !interrupted(&s2) {
            assert!(
                Instant::now() < deadline,
                "Ctrl-C did not end `yes` within 20 s"
            );
            s2.drain_for(Duration::from_millis(200)).await;
            h.drain_for(Duration::from_millis(20)).await;
            let refused = h.received.iter().any(|v| {
                v["params"]["origin"]["clientSeq"] == seq
                    && v["params"]["rejectionReason"]
                        .as_str()
                        .is_some_and(|r| r.starts_with("input refused"))
            });
            if refused || sent.elapsed() > Duration::from_secs(3) {
                seq = h.type_text(&t, "\u{3}").await;
                sent = Instant::now();
            }
        }
        let final_rss = rss_bytes(pid);
        assert!(
            final_rss < RSS_BOUND,
            "daemon RSS {:.1} MiB",
            mib(final_rss)
        );
        eprintln!(
            "only subscriber stalled: closed after {closed_after:?}, max daemon RSS {:.1} MiB, \
             {:.1} MiB after the resumed flood",
            mib(max_rss),
            mib(final_rss)
        );
    }
);

// Two clients on a `yes` flood, one stops reading: the reading one keeps receiving output
// (the terminal is held at most for the grace), its Ctrl-C and a following `echo` show within
// 1 s; the stopped one is closed as lagging (4002) within the documented time, reconnects and
// ends with a state equal to a fresh snapshot.
measured!(
    a_stalled_viewer_never_freezes_the_terminal_for_a_reading_one,
    async {
        // The documented bound: the grace, then at most the lag timeout (the lag limit is usually
        // hit much sooner on a flood).
        let cut_bound =
            Duration::from_millis(250) + Duration::from_secs(10) + Duration::from_secs(1);
        let d = Daemon::start();
        let pid = d.pid();
        let (mut h, _) = lean(&d, "reader", None).await;
        let t = term_uri("shared");
        h.create_terminal(&t).await;
        h.subscribe(&t).await;
        h.ready_for_commands(&t).await;
        let (mut s, _) = lean(&d, "stopped", Some(SMALL_RCVBUF)).await;
        let snap0 = s.subscribe(&t).await;

        let tag = unique("lag");
        h.type_text(&t, &format!("yes {tag}\r")).await;
        h.wait_data(&t, &format!("{tag}\r\n{tag}\r\n"), Duration::from_secs(10))
            .await;
        h.watch.remove(&t);
        // From here on `s` reads nothing; `h` reads everything, in 500 ms windows.
        let flood = Instant::now();
        let mut max_rss = 0;
        let mut windows = Vec::new();
        let mut cut_at = None;
        while cut_at.is_none() || windows.len() < 4 {
            let got = h.drain_for(Duration::from_millis(500)).await;
            windows.push(got);
            max_rss = max_rss.max(rss_bytes(pid));
            if cut_at.is_none() && closed_as(&d, "lagging", "stopped") {
                cut_at = Some(flood.elapsed());
            }
            assert!(
                flood.elapsed() < cut_bound + Duration::from_secs(2),
                "the stopped client was not closed within {cut_bound:?}; stderr:\n{}",
                d.stderr()
            );
        }
        let cut_at = cut_at.unwrap_or_default();
        assert!(
        windows.iter().all(|&w| w > 0),
        "the reading client went 500 ms without output while the other one stalled: {windows:?}"
    );
        let total: usize = windows.iter().sum();
        assert!(
            total > 4 << 20,
            "the reading client got only {total} bytes: {windows:?}"
        );
        assert!(!d.stderr().contains("closing a stalled"), "{}", d.stderr());
        eprintln!("daemon RSS peak {:.1} MiB", mib(max_rss));
        assert!(max_rss < RSS_BOUND, "daemon RSS {:.1} MiB", mib(max_rss));

        // Ctrl-C, then `echo`: the echoed line within 1 s.
        let sent = Instant::now();
        h.type_text(&t, "\u{3}").await;
        h.wait_action(
            &t,
            "terminal/commandFinished",
            Duration::from_secs(5),
            |e| e["action"]["exitCode"] == 130,
        )
        .await;
        h.watch.insert(t.clone());
        h.data.remove(&t);
        h.type_text(&t, "echo after-$((6*7))\r").await;
        h.wait_data(&t, "after-42", Duration::from_secs(5)).await;
        let echoed = sent.elapsed();
        assert!(
            echoed < Duration::from_secs(1),
            "Ctrl-C + echo took {echoed:?} beside a stalled viewer"
        );

        // The stopped client reads what the kernel held, then the end of its connection.
        assert!(
            s.read_to_close(Duration::from_secs(10)).await,
            "the stopped client's connection did not end"
        );
        if let Some(Some(frame)) = &s.closed {
            assert_eq!(u16::from(frame.code), 4002, "close frame: {frame:?}");
            assert!(frame.reason.contains("lagging"), "close reason: {frame:?}");
        }
        // It reconnects: replay (its view goes on) or snapshot (its view starts over).
        let (mut s2, r) = resume(&d, "stopped", s.last_seq, &[&t]).await;
        let mut view = match r["type"].as_str() {
            Some("replay") => snapshot_text(&snap0) + s.data(&t) + &replayed_data(&r, &t),
            Some("snapshot") => snapshot_text(&r["snapshots"][0]),
            _ => panic!("reconnect: {r}"),
        };
        h.type_text(&t, "echo done-$((6*7))\r").await;
        s2.wait_data(&t, "done-42", Duration::from_secs(10)).await;
        let (mut fresh, _) = lean(&d, "fresh", None).await;
        let truth = Raw::settle(&mut fresh, &mut h, &mut [&mut s2], &t).await;
        view.push_str(s2.data(&t));
        assert!(
            view.ends_with(&truth),
            "after reconnecting ({}), the client's view does not end with a fresh snapshot's \
         content: view {} … truth {}",
            r["type"],
            tail(&view, 200),
            tail(&truth, 200)
        );
        eprintln!(
            "stalled viewer: cut loose after {cut_at:?}; reader got {total} bytes in {} windows; \
         Ctrl-C + echo in {echoed:?}; reconnect answer {}",
            windows.len(),
            r["type"]
        );
    }
);

// A numbered flood (`seq`) watched by a fast reader, a reader that stops and one on a
// ~200 KB/s link: the fast one gets every line without a freeze; the other two are cut loose
// (4002) — or, for the slow one, keep up within the limits — and resume with `reconnect` (a
// replay: the history covers the flood here) without a line twice or missing across the cut,
// ending with a state equal to a fresh snapshot.
measured!(
    cut_loose_viewers_resume_without_a_line_twice_or_missing,
    async {
        const N: u64 = 600_000; // about 5 MB through the tty, 2.5 times the lag limit
        let d = Daemon::start_with(&[
            "--history-bytes",
            "67108864",
            "--lag-limit-bytes",
            "2097152",
        ]);
        let (mut fast, _) = lean(&d, "fast", None).await;
        let t = term_uri("numbered");
        fast.create_terminal(&t).await;
        fast.subscribe(&t).await;
        fast.ready_for_commands(&t).await;
        let (mut stopped, _) = lean(&d, "stopped", Some(SMALL_RCVBUF)).await;
        let snap_stopped = stopped.subscribe(&t).await;
        let (mut slow, _) = lean(&d, "slow", Some(SMALL_RCVBUF)).await;
        let snap_slow = slow.subscribe(&t).await;
        fast.data.remove(&t);
        let seq0 = fast.last_seq;
        fast.type_text(&t, &format!("seq 1 {N}\r")).await;
        let slow_task = tokio::spawn(async move {
            slow.read_paced(200_000, Duration::from_secs(3)).await;
            slow
        });
        // The fast reader: everything, and never a freeze.
        let mut longest = Duration::ZERO;
        let mut last = Instant::now();
        let deadline = Instant::now() + Duration::from_secs(60);
        while fast
            .find_action(&t, "terminal/commandFinished", |e| {
                e["serverSeq"].as_u64() > Some(seq0)
            })
            .is_none()
        {
            assert_eq!(
                fast.pump(deadline).await,
                Pumped::Frame,
                "{}",
                fast.describe()
            );
            longest = longest.max(last.elapsed());
            last = Instant::now();
        }
        assert_consecutive(&number_lines(fast.data(&t)), 1, N, "fast reader");
        assert!(
            longest < Duration::from_secs(1),
            "the fast reader waited {longest:?} for a frame"
        );
        let mut slow = slow_task.await.unwrap();

        // Each view: the snapshot at `subscribe`, what the connection read, and — once cut loose
        // — the replay and what the new connection reads.
        let mut views = Vec::new();
        for (c, snap, who) in [
            (&mut stopped, snap_stopped, "stopped"),
            (&mut slow, snap_slow, "slow"),
        ] {
            let cut = closed_as(&d, "lagging", who);
            assert!(
                cut || who == "slow",
                "{who}: not cut loose:\n{}",
                d.stderr()
            );
            let mut view = snapshot_text(&snap);
            if cut {
                assert!(
                    c.read_to_close(Duration::from_secs(10)).await,
                    "{who}: not closed"
                );
                if let Some(Some(frame)) = &c.closed {
                    assert_eq!(u16::from(frame.code), 4002, "{who}: close frame: {frame:?}");
                }
                view.push_str(c.data(&t));
                let (c2, r) = resume(&d, who, c.last_seq, &[&t]).await;
                assert_eq!(
                    r["type"],
                    "replay",
                    "{who}: the history covers the flood: {}",
                    clip(r.to_string(), 300)
                );
                view.push_str(&replayed_data(&r, &t));
                *c = c2;
            }
            views.push((who, view));
        }
        // A fresh snapshot, once everybody has received everything it holds.
        let (mut fresh, _) = lean(&d, "fresh", None).await;
        let truth = Raw::settle(&mut fresh, &mut fast, &mut [&mut stopped, &mut slow], &t).await;
        let mut checked = Vec::new();
        for (c, (who, mut view)) in [&stopped, &slow].into_iter().zip(views) {
            view.push_str(c.data(&t));
            checked.push((who, view));
        }
        for (who, view) in &checked {
            assert_consecutive(&number_lines(view), 1, N, who);
            assert!(
                view.ends_with(&truth),
                "{who}: the view does not end with a fresh snapshot's content: {} … {}",
                tail(view, 200),
                tail(&truth, 200)
            );
        }
        eprintln!(
            "numbered flood: fast reader's longest wait {longest:?}; slow reader cut loose: {}",
            closed_as(&d, "lagging", "slow")
        );
    }
);

// Ctrl-C under a flood: first with a client reading as fast as it can, then with the only
// subscriber not reading at all (output paused): `yes` dies within 1 s either way, and
// `commandFinished` (exitCode 130) and the prompt follow.
measured!(ctrl_c_stops_a_flood_within_a_second, async {
    let d = Daemon::start();
    let (mut c, _) = lean(&d, "ctrl-c", Some(SMALL_RCVBUF)).await;
    let t = term_uri("ctrlc");
    c.create_terminal(&t).await;
    c.subscribe(&t).await;
    c.ready_for_commands(&t).await;

    for reading in [true, false] {
        let tag = unique("cc");
        c.watch.insert(t.clone());
        c.type_text(&t, &format!("yes {tag}\r")).await;
        let yes = wait_pid_of(d.pid(), &format!("yes {tag}"), Duration::from_secs(10)).await;
        c.wait_data(&t, &format!("{tag}\r\n{tag}\r\n"), Duration::from_secs(10))
            .await;
        c.watch.remove(&t);
        let seq_before = c.last_seq;
        if reading {
            // A fast reader: output flows at full speed.
            assert!(
                c.drain_for(Duration::from_millis(500)).await > 256 * 1024,
                "yes is not flooding"
            );
        } else {
            // Stop reading until the pty is paused: yes sleeps and uses no CPU.
            wait_paused(yes, "yes, its only subscriber not reading").await;
        }
        let sent = Instant::now();
        c.type_text(&t, "\u{3}").await;
        if reading {
            // Keep reading; yes must be gone within a second.
            while !is_dead(yes) {
                assert!(
                    sent.elapsed() < Duration::from_secs(1),
                    "yes still running 1 s after Ctrl-C (reading client)"
                );
                c.drain_for(Duration::from_millis(10)).await;
            }
        } else {
            // Not reading at all: the input must not wait behind the paused output.
            wait_dead(
                &[yes],
                Duration::from_secs(1),
                "yes after Ctrl-C (paused output)",
            );
        }
        let died = sent.elapsed();
        let fin = c
            .wait_action(
                &t,
                "terminal/commandFinished",
                Duration::from_secs(10),
                |e| e["serverSeq"].as_u64() > Some(seq_before),
            )
            .await;
        assert_eq!(fin["action"]["exitCode"], 130, "{fin}");
        // The prompt is back: the shell runs the next command.
        c.watch.insert(t.clone());
        c.data.remove(&t);
        c.type_text(&t, &format!("echo after-$((6*7))-{reading}\r"))
            .await;
        c.wait_data(&t, &format!("after-42-{reading}"), Duration::from_secs(10))
            .await;
        eprintln!("Ctrl-C (reading: {reading}): yes gone after {died:?}");
    }
});

// One `terminal/input` of ~2 MB (30 000 lines of 70 characters) into `cat > file`, then
// Ctrl-D: the file is complete and in order (the tty turns each `\r` into `\n`).
measured!(large_paste_arrives_complete_and_in_order, async {
    let d = Daemon::start();
    let (mut c, _) = lean(&d, "paste", None).await;
    let t = term_uri("paste");
    c.create_terminal(&t).await;
    c.subscribe(&t).await;
    c.ready_for_commands(&t).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(unique("paste"));
    let seq0 = c.last_seq;
    c.type_text(&t, &format!("cat > {}\r", file.display()))
        .await;
    c.wait_action(
        &t,
        "terminal/commandExecuted",
        Duration::from_secs(10),
        |e| e["serverSeq"].as_u64() > Some(seq0),
    )
    .await;

    let lines: Vec<String> = (0..30_000)
        .map(|i| {
            let head = format!("{i:06}:");
            let fill: String = (0..70 - head.len())
                .map(|k| (b'a' + ((i + k) % 26) as u8) as char)
                .collect();
            head + &fill
        })
        .collect();
    let paste: String = lines.iter().map(|l| format!("{l}\r")).collect();
    assert!(paste.len() > 2_000_000);
    let expected: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let t0 = Instant::now();
    let seq1 = c.last_seq;
    let paste_seq = c.type_text(&t, &paste).await;
    c.type_text(&t, "\u{4}").await;
    let fin = c
        .wait_action(
            &t,
            "terminal/commandFinished",
            Duration::from_secs(30),
            |e| e["serverSeq"].as_u64() > Some(seq1),
        )
        .await;
    assert_eq!(fin["action"]["exitCode"], 0, "{fin}");
    let took = t0.elapsed();
    assert!(
        c.envelopes()
            .all(|e| e["rejectionReason"].is_null() || e["origin"]["clientSeq"] != paste_seq),
        "the paste was rejected"
    );
    let got = std::fs::read_to_string(&file).expect("pasted file");
    if got != expected {
        let at = got
            .bytes()
            .zip(expected.bytes())
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(expected.len()));
        panic!(
            "pasted file differs at byte {at} (got {} bytes, expected {}): got {:?}, expected {:?}",
            got.len(),
            expected.len(),
            &got[at.saturating_sub(40)..(at + 40).min(got.len())],
            &expected[at.saturating_sub(40)..(at + 40).min(expected.len())]
        );
    }
    // The tty echoed the paste back while it was being written (output kept flowing).
    // (The kernel drops echo when the pty's output buffer is full, so not every line comes
    // back; what matters is that output was read while the input was being written.)
    let echoed = c.data(&t).len();
    assert!(
        echoed > 100_000,
        "only {echoed} bytes of echo came back during the paste"
    );
    eprintln!("paste of {} bytes: done in {took:?}", paste.len());
});

// Input beyond the 8 MiB pending-input bound is rejected, with a reason naming the input
// queue, to the dispatcher only.
spec!(
    input_beyond_the_queue_bound_is_rejected_to_the_dispatcher_only,
    async {
        const MB: usize = 1024 * 1024;
        let d = Daemon::start();
        let (mut a, _) = lean(&d, "typist", None).await;
        let (mut b, _) = lean(&d, "watcher", None).await;
        let t = term_uri("inq");
        a.create_terminal(&t).await;
        a.subscribe(&t).await;
        b.subscribe(&t).await;
        a.ready_for_commands(&t).await;
        let seq0 = a.last_seq;
        a.type_text(&t, "sleep 60\r").await;
        a.wait_action(
            &t,
            "terminal/commandExecuted",
            Duration::from_secs(10),
            |e| e["serverSeq"].as_u64() > Some(seq0),
        )
        .await;
        a.watch.remove(&t);
        b.watch.remove(&t);

        // 12 inputs of 1 MiB (complete lines, so the line discipline fills up and blocks
        // instead of discarding): 12 MiB > 8 MiB, while sleep reads nothing.
        let line = format!("{}\r", "x".repeat(99));
        let chunk = line.repeat(MB / line.len());
        let mut seqs = Vec::new();
        // One input at a time, both clients reading each answer: a client that let megabytes of
        // echoes pile up unread would hit the per-connection hard limit instead (tests/limits.rs).
        for _ in 0..12 {
            let seq = a.type_text(&t, &chunk).await;
            seqs.push(seq);
            let is_this = move |e: &Value| {
                e["origin"]["clientId"] == "typist"
                    && e["origin"]["clientSeq"].as_i64() == Some(seq)
            };
            let answer = a
                .wait_action(&t, "terminal/input", Duration::from_secs(30), is_this)
                .await;
            if answer["rejectionReason"].is_null() {
                b.wait_action(&t, "terminal/input", Duration::from_secs(30), is_this)
                    .await;
            }
        }
        // A marker after the inputs (not an input: the input queue may be full).
        a.dispatch(
            &t,
            json!({"type": "terminal/titleChanged", "title": "marker"}),
        )
        .await;
        let is_marker = |e: &Value| e["action"]["title"] == "marker";
        a.wait_action(
            &t,
            "terminal/titleChanged",
            Duration::from_secs(30),
            is_marker,
        )
        .await;
        b.wait_action(
            &t,
            "terminal/titleChanged",
            Duration::from_secs(30),
            is_marker,
        )
        .await;

        let first_seq = seqs[0];
        let mine = |e: &&Value| {
            e["channel"] == t
                && e["action"]["type"] == "terminal/input"
                && e["origin"]["clientSeq"].as_i64() >= Some(first_seq)
        };
        let mut accepted = Vec::new();
        let mut rejected = Vec::new();
        for e in a.envelopes().filter(mine) {
            let seq = e["origin"]["clientSeq"].as_i64().unwrap();
            match e["rejectionReason"].as_str() {
                Some(r) => rejected.push((seq, r.to_string())),
                None => accepted.push(seq),
            }
        }
        assert_eq!(
            accepted.len() + rejected.len(),
            seqs.len(),
            "every input is answered"
        );
        assert!(
            !rejected.is_empty(),
            "12 MiB of unread input were all accepted"
        );
        for (_, r) in &rejected {
            assert!(
                r.to_lowercase().contains("input queue"),
                "rejectionReason does not mention the input queue: {r:?}"
            );
        }
        let accepted_bytes = accepted.len() * chunk.len();
        // 8 MiB pending, plus what the kernel took off the queue (tty buffers, well under 1 MiB).
        assert!(
            (7 * MB..=9 * MB).contains(&accepted_bytes),
            "{} MiB accepted before rejections",
            accepted_bytes as f64 / MB as f64
        );
        // Inputs are answered in order: once rejected, the later ones are rejected too.
        let first_rejected = rejected.iter().map(|r| r.0).min().unwrap();
        assert!(
            accepted.iter().all(|&s| s < first_rejected),
            "accepted {accepted:?}, rejected from {first_rejected}"
        );
        // The watcher sees the accepted inputs with their origin, never the rejected ones.
        let seen_by_b: Vec<&Value> = b.envelopes().filter(mine).collect();
        assert!(
            seen_by_b.iter().all(|e| e["rejectionReason"].is_null()),
            "a rejected input reached another client"
        );
        let b_seqs: Vec<i64> = seen_by_b
            .iter()
            .filter(|e| e["origin"]["clientId"] == "typist")
            .map(|e| e["origin"]["clientSeq"].as_i64().unwrap())
            .collect();
        assert_eq!(
            b_seqs, accepted,
            "the watcher's view of the accepted inputs"
        );
    }
);

/// The text of a content part (`value` or command `output`) and its byte count as the host
/// counts it (a command part also counts its command line).
fn part_text(p: &Value) -> (&str, usize) {
    let text = p["value"]
        .as_str()
        .or_else(|| p["output"].as_str())
        .unwrap_or("");
    let line = p["commandLine"].as_str().map_or(0, str::len);
    (text, text.len() + line)
}

// One command whose output alone exceeds the scrollback cap (default flags: 1 MiB), then a
// prompt: the snapshot keeps the last cap bytes of that command's output, in its command part,
// cut at a line start — not just the prompt after it.
spec!(
    one_command_beyond_the_cap_keeps_the_tail_of_its_output,
    async {
        const CAP: usize = 1024 * 1024;
        let d = Daemon::start();
        let (mut c, _) = lean(&d, "big", None).await;
        let t = term_uri("big-command");
        c.create_terminal(&t).await;
        c.subscribe(&t).await;
        c.ready_for_commands(&t).await;
        c.type_text(&t, "seq 1 200000\r").await;
        c.wait_data(&t, "199999\r\n200000\r\n", Duration::from_secs(60))
            .await;
        c.ready_for_commands(&t).await;
        let (mut v, _) = lean(&d, "big-viewer", None).await;
        let snap = v.subscribe(&t).await;
        let content = snap["state"]["content"].as_array().unwrap();
        let retained = snapshot_text(&snap);
        assert!(
            retained.len() > CAP - 8192 && retained.len() <= CAP,
            "retained {} bytes, cap {CAP}: {:?}",
            retained.len(),
            clip(retained.clone(), 200)
        );
        let seq = content
            .iter()
            .find(|p| p["commandLine"] == "seq 1 200000")
            .unwrap_or_else(|| {
                panic!(
                    "the command's part is gone: {}",
                    clip(snap.to_string(), 300)
                )
            });
        assert_eq!(seq["isComplete"], true);
        let out = seq["output"].as_str().unwrap();
        assert!(out.len() > CAP - 8192, "{} bytes of its output", out.len());
        // The tail of the output, every line whole and none missing.
        let nums = number_lines(out);
        let first = nums[0];
        assert!(
            out.starts_with(&format!("{first}\r\n")),
            "cut mid-line: {:?}",
            clip(out.to_string(), 40)
        );
        assert_consecutive(&nums, first, 200000, "the command's retained output");
    }
);

// With `--scrollback-bytes 65536`, lots of colored multibyte output: the snapshot holds at
// most the cap (plus the running command's line), starts on a character and escape-sequence
// boundary, and keeps the running command's part.
spec!(
    scrollback_trim_keeps_boundaries_and_the_running_command,
    async {
        const CAP: usize = 65536;
        let d = Daemon::start_with(&["--scrollback-bytes", "65536"]);
        let (mut c, _) = lean(&d, "trim", None).await;
        // Lines (a newline is always near the cut) and one long line (none is).
        let lines = term_uri("trim-lines");
        let long = term_uri("trim-long");
        let cmd_lines =
            "for i in $(seq 1 4000); do printf '\\e[1;3%dm行%05d é😀\\e[0m \\e[4mu\\e[0m\\n' \
                     $((i%8)) $i; done; printf 'END-%d\\n' 41; sleep 30";
        let cmd_long = "for i in $(seq 1 20000); do printf '\\e[3%dm€' $((i%8)); done; \
                    printf '\\nEND-%d\\n' 42; sleep 30";
        for (uri, cmd, end) in [(&lines, cmd_lines, "END-41"), (&long, cmd_long, "END-42")] {
            c.create_terminal(uri).await;
            c.subscribe(uri).await;
            c.ready_for_commands(uri).await;
            c.type_text(uri, &format!("{cmd}\r")).await;
            c.wait_data(uri, end, Duration::from_secs(30)).await;
        }
        let (mut v, _) = lean(&d, "trim-viewer", None).await;
        for (uri, cmd, starts) in [
            (&lines, cmd_lines, &["\u{1b}[1;3"][..]),
            (&long, cmd_long, &["\u{1b}[3", "€"][..]),
        ] {
            let snap = v.subscribe(uri).await;
            let content = snap["state"]["content"]
                .as_array()
                .unwrap_or_else(|| panic!("no content in {snap}"));
            // The output was trimmed: the snapshot starts with the synthesized prefix that
            // rebuilds the screen, then the retained parts.
            assert!(is_synthesized(&content[0]), "{uri}: no synthesized prefix");
            let content = &content[1..];
            let total: usize = content.iter().map(|p| part_text(p).1).sum();
            assert!(
                total <= CAP + cmd.len(),
                "{uri}: retained {total} bytes, cap {CAP}"
            );
            assert!(total > CAP / 2, "{uri}: only {total} bytes retained");
            let last = content.last().unwrap();
            assert_eq!(last["type"], "command", "{uri}: last part {last}");
            assert_eq!(last["commandLine"], cmd, "{uri}: running command part");
            assert_eq!(last["isComplete"], false, "{uri}: running command part");
            let out = last["output"].as_str().unwrap();
            assert!(
                out.ends_with("\r\n") && out.contains("END-4"),
                "{uri}: the running command's latest output is missing: {}",
                tail(out, 80)
            );
            let (first, _) = part_text(&content[0]);
            let head: String = first.chars().take(40).collect();
            assert!(
                starts.iter().any(|s| first.starts_with(s)),
                "{uri}: retained content starts inside a character or escape sequence: {head:?}"
            );
            for p in content {
                let (text, _) = part_text(p);
                assert!(
                    !text.contains('\u{fffd}'),
                    "{uri}: U+FFFD in retained content"
                );
            }
        }
    }
);

// A message larger than `--max-message-bytes` closes that connection with 1009 and a
// reason; one just under the limit is served; other connections are unaffected.
spec!(
    oversized_message_closes_with_1009_and_others_keep_working,
    async {
        const LIMIT: usize = 1024 * 1024;
        let d = Daemon::start_with(&["--max-message-bytes", "1048576"]);
        let (mut a, _) = lean(&d, "bystander", None).await;
        let t = term_uri("limit");
        a.create_terminal(&t).await;
        a.subscribe(&t).await;
        a.ready_for_commands(&t).await;

        let (mut b, _) = lean(&d, "big-sender", None).await;
        let ping_of = |id: u64, size: usize| -> String {
            let head = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping","params":{{"pad":""#);
            let tail = r#""}}"#;
            format!("{head}{}{tail}", "p".repeat(size - head.len() - tail.len()))
        };
        // Just under the limit: answered.
        let under = ping_of(77, LIMIT - 16);
        b.ws.send(tokio_tungstenite::tungstenite::Message::Text(under.into()))
            .await
            .expect("send");
        let r = b.response_to(&json!(77), Duration::from_secs(10)).await;
        assert_eq!(r["result"], Value::Null, "{r}");
        assert!(r.get("error").is_none(), "{r}");

        // Over the limit: the connection is closed with 1009. (The send itself may fail once
        // the daemon has closed.)
        let over = ping_of(78, LIMIT + 512 * 1024);
        let _ =
            b.ws.send(tokio_tungstenite::tungstenite::Message::Text(over.into()))
                .await;
        let frame = b
            .wait_closed(Duration::from_secs(10))
            .await
            .expect("closed without a close frame");
        assert_eq!(u16::from(frame.code), 1009, "{frame:?}");
        assert!(!frame.reason.is_empty(), "close 1009 without a reason");
        assert!(
            b.received.iter().all(|m| m.get("id") != Some(&json!(78))),
            "the oversized request was answered"
        );

        // The daemon keeps serving the other connection and new ones.
        let r = a.request("ping", json!({})).await;
        assert_eq!(r["result"], Value::Null, "{r}");
        a.type_text(&t, "echo ok-$((2+3))\r").await;
        a.wait_data(&t, "ok-5", Duration::from_secs(10)).await;
        let (mut n, _) = lean(&d, "newcomer", None).await;
        let r = n.request("ping", json!({})).await;
        assert_eq!(r["result"], Value::Null, "{r}");
    }
);

/// Output produced while a client does not read is merged into few large envelopes, and
/// the data stays complete and contiguous. The client stops reading until the pty is paused
/// (so its queue really holds unsent output), then reads slowly.
/// Returns the data bytes of each envelope.
async fn slow_reader_run() -> Vec<usize> {
    const N: u32 = 1_000_003;
    let d = Daemon::start();
    let (mut c, _) = lean(&d, "slow", Some(SMALL_RCVBUF)).await;
    let t = term_uri("coalesce");
    c.create_terminal(&t).await;
    c.subscribe(&t).await;
    c.ready_for_commands(&t).await;
    c.data.remove(&t);
    let seq0 = c.last_seq;
    c.type_text(&t, &format!("seq 1 {N}\r")).await;
    // Not reading: wait (polling /proc, not the socket) until seq blocks in write.
    let seq_pid = wait_pid_of(d.pid(), &format!("seq 1 {N}"), Duration::from_secs(10)).await;
    wait_paused(seq_pid, "seq, its only subscriber not reading").await;
    // Read slowly: one frame, then a short pause.
    let mut sizes = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while c
        .find_action(&t, "terminal/commandFinished", |e| {
            e["serverSeq"].as_u64() > Some(seq0)
        })
        .is_none()
    {
        let before = c.data_len.get(&t).copied().unwrap_or(0);
        assert_eq!(c.pump(deadline).await, Pumped::Frame, "{}", c.describe());
        let got = c.data_len.get(&t).copied().unwrap_or(0) - before;
        if got > 0 {
            sizes.push(got);
        }
        // Not waiting for an event: the reader's slow pace.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let envelopes = sizes.len();
    let data = c.data(&t);
    let nums: Vec<u32> = data
        .split("\r\n")
        .map(|l| l.rsplit('\r').next().unwrap_or(l))
        .filter_map(|l| l.parse().ok())
        .collect();
    assert_eq!(
        nums.len(),
        N as usize,
        "numbers missing or extra: {:?} … {}",
        data.chars().take(200).collect::<String>(),
        tail(data, 200)
    );
    assert!(
        nums.iter().zip(1..).all(|(&a, b)| a == b),
        "seq output not contiguous"
    );
    let avg = data.len() / envelopes.max(1);
    let small = sizes.iter().filter(|&&s| s < 16 * 1024).count();
    eprintln!(
        "coalescing: {} bytes in {envelopes} terminal/data envelopes (avg {avg} bytes, {small} under 16 KiB, largest {})",
        data.len(),
        sizes.iter().max().unwrap_or(&0)
    );
    sizes
}

/// The two coalescing tests below judge the same run (a million lines read slowly takes
/// seconds): whichever runs first makes it, the other reuses its envelope sizes.
async fn slow_reader_sizes() -> &'static [usize] {
    static SIZES: tokio::sync::OnceCell<Vec<usize>> = tokio::sync::OnceCell::const_new();
    SIZES.get_or_init(slow_reader_run).await
}

// While the pty is paused, the connection's queue holds more than the high watermark
// (1 MiB) of output: that part must arrive merged into large envelopes (≤ 256 KiB each).
measured!(output_queued_behind_a_stalled_socket_is_merged, async {
    let sizes = slow_reader_sizes().await;
    let large: usize = sizes.iter().filter(|&&s| s >= 64 * 1024).sum();
    assert!(
        large >= 1024 * 1024,
        "only {large} bytes arrived in envelopes of 64 KiB or more"
    );
    assert!(
        sizes.iter().all(|&s| s <= 1024 * 1024),
        "an envelope carries more than 1 MiB"
    );
});

// The issue's stronger promise: for a slow reader, envelopes average far more than one pty
// read (typically 2.5–4 KB).
measured!(a_slow_reader_gets_few_large_envelopes, async {
    let sizes = slow_reader_sizes().await;
    let total: usize = sizes.iter().sum();
    let avg = total / sizes.len().max(1);
    assert!(
        avg >= 16 * 1024,
        "{} envelopes for {total} bytes (avg {avg} bytes): output not coalesced",
        sizes.len()
    );
});
