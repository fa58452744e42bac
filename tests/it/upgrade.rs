//! Live upgrade (docs/upgrade.md): `ahpty upgrade` re-executes the daemon in place during a
//! flood — same pid, shells kept, clients closed with 1012 resume by `reconnect` with every
//! line exactly once — and a new binary that cannot take over leaves the old one serving.
//!
//! Each test runs the daemon from a hard link in a private directory (its install path), so
//! that another file can be renamed over it as a package manager would.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::*;
use ahp::ahp_types::commands::ReconnectResult;
use ahp::ahp_types::state::TerminalContentPart;
use serde_json::{json, Value};

const BIG: &str = "67108864"; // 64 MiB
const FLOOD_TIMEOUT: Duration = Duration::from_secs(60);
const UPGRADE_TIMEOUT: Duration = Duration::from_secs(60);
/// Lines of the flood; paced (2000 lines every 20 ms) so that it lasts at least 1 s.
const LINES: u64 = 100_000;

/// A private directory holding `ahpty` (a hard link to the tested binary) as install path.
pub(crate) struct Install {
    dir: tempfile::TempDir,
}

impl Install {
    pub(crate) fn new() -> Install {
        let dir = tempfile::Builder::new()
            .prefix("upgrade-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("tempdir");
        let i = Install { dir };
        i.put_real();
        i
    }

    pub(crate) fn exe(&self) -> PathBuf {
        self.dir.path().join("ahpty")
    }

    /// Renames a fresh link to the tested binary over the install path.
    pub(crate) fn put_real(&self) {
        let tmp = self.dir.path().join("ahpty.new");
        let _ = std::fs::remove_file(&tmp);
        if std::fs::hard_link(env!("CARGO_BIN_EXE_ahpty"), &tmp).is_err() {
            std::fs::copy(env!("CARGO_BIN_EXE_ahpty"), &tmp).expect("copy ahpty");
        }
        std::fs::rename(&tmp, self.exe()).expect("rename");
    }

    /// Renames an executable shell script over the install path.
    pub(crate) fn put_script(&self, body: &str) {
        use std::os::unix::fs::PermissionsExt;
        let tmp = self.dir.path().join("ahpty.new");
        std::fs::write(&tmp, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&tmp, self.exe()).expect("rename");
    }

    pub(crate) fn remove(&self) {
        std::fs::remove_file(self.exe()).unwrap();
    }

    pub(crate) fn start(&self) -> Daemon {
        self.start_with_env(&[])
    }

    pub(crate) fn start_with_env(&self, env: &[(&str, &str)]) -> Daemon {
        self.start_with(&[], env)
    }

    /// The daemon with `args` on top of the big buffers, and `env`.
    pub(crate) fn start_with(&self, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let mut all = vec!["--history-bytes", BIG, "--scrollback-bytes", BIG];
        all.extend_from_slice(args);
        let mut b = Daemon::builder().exe(&self.exe()).args(&all);
        for (k, v) in env {
            b = b.env(k, v);
        }
        b.start()
    }
}

/// `ahpty upgrade` against the daemon of `home` (found through its default socket).
pub(crate) async fn upgrade(home: &Path) -> CliOutput {
    let mut cmd = cli_command(home, &["upgrade", "--timeout", "50s"]);
    cmd.env("XDG_RUNTIME_DIR", runtime_dir(home));
    tokio::task::spawn_blocking(move || run_cli(cmd, UPGRADE_TIMEOUT))
        .await
        .unwrap()
}

/// The daemon's last upgrade outcome (its status file).
pub(crate) fn status(d: &Daemon) -> Value {
    let path = d
        .runtime_dir()
        .join(format!("ahpty/upgrade-{}.json", d.pid()));
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

/// The parent pid of `pid`, from `/proc/PID/stat`.
pub(crate) fn ppid(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 1..];
    after.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A client `id` of `d` with one terminal `name` it claimed, subscribed and ready: the client,
/// the terminal's URI and its shell's pid.
pub(crate) async fn claimed_shell(d: &Daemon, id: &str, name: &str) -> (Raw, String, i32) {
    let (mut a, _) = Raw::connect_init(&d.url(), id, &[ROOT]).await;
    let t = term_uri(name);
    a.create_claimed(&t, client_claim(id)).await;
    a.subscribe_at(&t).await;
    a.ready(&t).await;
    let pid = a.shell_pid(&t).await;
    (a, t, pid)
}

/// After an upgrade that went back to the old image: client `a` (id `id`) was closed with 1012
/// and resumes by replay, and terminal `t` still runs the shell `pid`, a child of the daemon.
async fn resumed_on_the_old_image(d: &Daemon, a: &mut Raw, id: &str, t: &str, pid: i32) {
    let close = a.wait_closed(Duration::from_secs(20)).await;
    assert_eq!(close.map(|c| u16::from(c.code)), Some(1012));
    let (mut r, resp) =
        Raw::reconnect(&d.url(), id, a.last_envelope_seq() as i64, &[ROOT, t]).await;
    assert_eq!(
        resp.pointer("/result/type"),
        Some(&json!("replay")),
        "{resp}"
    );
    assert_eq!(r.shell_pid(t).await, pid);
    assert_eq!(ppid(pid), d.pid() as i32);
}

/// `ahpty upgrade` failed (status 1) and said each of `expect`.
fn failed_saying(out: &CliOutput, expect: &[&str], d: &Daemon) {
    assert_eq!(out.code, Some(1), "{out:?}\n{}", d.stderr());
    for e in expect {
        assert!(out.stdout.contains(e), "no {e:?} in {out:?}");
    }
}

/// The `ts SECONDS.MICROS` stamps of the ticker, in seconds.
fn stamps(text: &str) -> Vec<f64> {
    text.split('\n')
        .filter_map(|l| l.trim_end_matches('\r').strip_prefix("ts "))
        .filter_map(|v| v.trim().parse().ok())
        .collect()
}

/// Wall-clock time in seconds (the ticker's `$EPOCHREALTIME` clock).
fn wall_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Connects to 127.0.0.1:PORT every 2 ms until stopped; counts attempts and refusals.
fn hammer(addr: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<(u64, u64)> {
    std::thread::spawn(move || {
        let (mut tries, mut refused) = (0, 0);
        while !stop.load(Ordering::Relaxed) {
            tries += 1;
            if std::net::TcpStream::connect(&addr).is_err() {
                refused += 1;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        (tries, refused)
    })
}

measured!(
    upgrade_during_a_flood_keeps_every_shell_and_every_line,
    async {
        let install = Install::new();
        let d = install.start();
        let (mut a, _) = Raw::connect_init(&d.url(), "up-a", &[ROOT]).await;
        let t1 = term_uri("flood");
        let t2 = term_uri("ticker");
        a.create_claimed(&t1, client_claim("up-a")).await;
        a.create_claimed(&t2, client_claim("up-a")).await;
        let (_, snap1) = a.subscribe_at(&t1).await;
        a.subscribe_at(&t2).await;
        a.ready(&t1).await;
        a.ready(&t2).await;
        let pid1 = a.shell_pid(&t1).await;
        let pid2 = a.shell_pid(&t2).await;
        a.type_text(
            &t2,
            "while :; do echo \"ts $EPOCHREALTIME\"; sleep 0.02; done\r",
        )
        .await;
        // The flood's command is defined first: its echo may wrap, and only what follows the
        // rdy marker is counted.
        a.type_text(
            &t1,
            "f() { awk -v n=$1 'BEGIN{for(i=1;i<=n;i++){print i; if(i%2000==0){fflush(); \
         system(\"sleep 0.02\")}}}'; }\r",
        )
        .await;
        a.type_text(
            &t1,
            &format!("echo rdy-$((40+2)); f {LINES}; echo END-$((1+1))\r"),
        )
        .await;
        a.wait_data(&t1, "\n4000\r", FLOOD_TIMEOUT).await;

        let stop = Arc::new(AtomicBool::new(false));
        let connects = hammer(d.addr().to_string(), stop.clone());
        let window_start = wall_seconds();
        let out = upgrade(d.home()).await;
        let window_end = wall_seconds();
        assert_eq!(out.code, Some(0), "ahpty upgrade: {out:?}\n{}", d.stderr());
        assert!(out.stdout.contains("upgraded ahpty"), "{out:?}");
        let close = a.wait_closed(Duration::from_secs(20)).await;
        assert_eq!(close.map(|c| u16::from(c.code)), Some(1012));
        stop.store(true, Ordering::Relaxed);
        let (tries, refused) = connects.join().unwrap();
        assert_eq!(
            refused, 0,
            "{refused} of {tries} connects refused during the switch"
        );
        let st = status(&d);
        assert_eq!(st["ok"], json!(true), "{st}");
        assert_eq!(st["stage"], json!("done"), "{st}");
        assert_eq!(st["terminals"], json!(2), "{st}");
        let switch_ms = st["switchMs"].as_f64().unwrap();
        eprintln!(
            "switch (quiesced → serving): {switch_ms:.1} ms; SIGUSR2 → serving: {:.1} ms; {tries} \
         connects during it, none refused",
            st["totalMs"].as_f64().unwrap()
        );

        let last_seen = a.last_envelope_seq();
        let before = envelopes_of(&a.received);
        assert!(
            !data_text(&before, &t1).contains("END-2"),
            "the flood was over before the switch: not an upgrade during a flood"
        );
        let (mut r, resp) =
            Raw::reconnect(&d.url(), "up-a", last_seen as i64, &[ROOT, &t1, &t2]).await;
        assert_eq!(
            resp.pointer("/result/type"),
            Some(&json!("replay")),
            "{resp}"
        );
        let replay: ReconnectResult =
            serde_json::from_value(resp["result"].clone()).expect("reconnect result");
        let ReconnectResult::Replay(replay) = replay else {
            unreachable!()
        };
        assert!(replay.missing.is_empty(), "missing: {:?}", replay.missing);
        r.wait_data(&t1, "END-2", FLOOD_TIMEOUT).await;
        // The ticker goes on after the switch.
        let u2 = t2.clone();
        r.wait_until("10 ticks after the reconnect", FLOOD_TIMEOUT, |c| {
            stamps(c.data(&u2)).len() >= 10
        })
        .await;
        r.type_text(&t1, "echo FIN-$((2+3))\r").await;
        r.wait_data(&t1, "FIN-5", SHELL_TIMEOUT).await;
        let (pos, fresh) = r.subscribe_at(&t1).await;

        let mut story = before.clone();
        story.extend(replay.actions.iter().cloned());
        story.extend(envelopes_of(&r.received[..pos]));
        assert_increasing(&story, "before + replay + live");
        let text = data_text(&story, &t1);
        let start = text.find("rdy-42").unwrap();
        let end = text.find("END-2").unwrap();
        assert_contiguous(
            &number_lines(&text[start..end]),
            LINES,
            "the flood across the upgrade",
        );

        // Folded state = a fresh snapshot.
        let from = snap1["fromSeq"].as_u64().unwrap();
        let mut state = terminal_of(&snap1);
        let after: Vec<_> = story
            .iter()
            .filter(|e| e.server_seq > from)
            .cloned()
            .collect();
        fold_terminal(&mut state, &after, &t1);
        assert_eq!(
            serde_json::to_value(&state).unwrap(),
            serde_json::to_value(terminal_of(&fresh)).unwrap(),
            "snapshot + every envelope folded differs from a fresh snapshot"
        );

        // The other terminal's program never noticed: no gap in its stamps beyond the switch.
        // Compared with its largest gap elsewhere (this machine's scheduling noise, under the
        // same flood).
        let ticks = stamps(&data_text(&story, &t2));
        assert!(ticks.len() > 20, "too few ticks: {}", ticks.len());
        let (mut during, mut elsewhere) = (0.0f64, 0.0f64);
        for w in ticks.windows(2) {
            let gap = (w[1] - w[0]) * 1000.0;
            if w[1] >= window_start && w[0] <= window_end {
                during = during.max(gap);
            } else {
                elsewhere = elsewhere.max(gap);
            }
        }
        eprintln!(
            "ticker (20 ms period, {} ticks): largest gap {during:.1} ms around the upgrade, \
         {elsewhere:.1} ms elsewhere",
            ticks.len()
        );
        assert!(
            during <= switch_ms + elsewhere.max(20.0) + 250.0,
            "the ticker stalled {during:.1} ms around the upgrade (switch {switch_ms:.1} ms, \
         {elsewhere:.1} ms elsewhere)"
        );

        // Same shells, still the daemon's children; the same daemon process.
        for pid in [pid1, pid2] {
            assert_eq!(
                ppid(pid),
                d.pid() as i32,
                "shell {pid} is not the daemon's child"
            );
        }
        assert_eq!(r.shell_pid(&t1).await, pid1);
        assert!(
            d.stderr().contains("upgraded in place"),
            "{}",
            tail(&d.stderr(), 2000)
        );
    }
);

spec!(
    a_new_binary_that_cannot_take_over_leaves_the_old_one_serving,
    async {
        let install = Install::new();
        let d = install.start();
        let (mut a, t, pid) = claimed_shell(&d, "stay-a", "stay").await;
        let attempts = AtomicU64::new(0);

        let cases: [(&str, Option<&str>, &[&str]); 3] = [
            (
                "exits at once",
                Some("echo 'ahpty: broken build' >&2\nexit 3"),
                &[
                    "pre-flight",
                    "exited with status 3",
                    "broken build",
                    "still serving",
                ],
            ),
            (
                "missing",
                None,
                &["pre-flight", "cannot start", "No such file"],
            ),
            (
                "reads another format",
                Some("echo '{\"version\":\"9.0.0\",\"handoverFormats\":[99]}'"),
                &["pre-flight", "version 9.0.0", "[99]", "writes [3]"],
            ),
        ];
        for (what, script, expect) in cases {
            match script {
                Some(body) => install.put_script(body),
                None => install.remove(),
            }
            let started = Instant::now();
            let out = upgrade(d.home()).await;
            attempts.fetch_add(1, Ordering::Relaxed);
            assert_eq!(out.code, Some(1), "{what}: {out:?}");
            for e in expect {
                assert!(out.stdout.contains(e), "{what}: no {e:?} in {out:?}");
            }
            eprintln!(
                "{what}: reported in {:?}: {}",
                started.elapsed(),
                out.stdout.trim()
            );
            // The connection was never closed: the shell still answers on it.
            a.type_text(&t, &format!("echo still-{}-$((1+1))\r", what.len()))
                .await;
            a.wait_data(&t, &format!("still-{}-2", what.len()), SHELL_TIMEOUT)
                .await;
            // New clients are served, by the old version.
            let (_, init) = Raw::connect_init(&d.url(), "stay-b", &[ROOT]).await;
            assert_eq!(
                init.pointer("/serverInfo/version"),
                Some(&json!(env!("CARGO_PKG_VERSION"))),
                "{init}"
            );
            assert_eq!(status(&d)["ok"], json!(false));
            assert_eq!(
                status(&d)["attempt"],
                json!(attempts.load(Ordering::Relaxed))
            );
        }
        assert!(a.closed.is_none(), "the client was closed");
        assert_eq!(ppid(pid), d.pid() as i32);

        // A good binary again: the next upgrade works from there.
        install.put_real();
        let out = upgrade(d.home()).await;
        assert_eq!(out.code, Some(0), "{out:?}\n{}", d.stderr());
        assert_eq!(status(&d)["attempt"], json!(4));
        let close = a.wait_closed(Duration::from_secs(20)).await;
        assert_eq!(close.map(|c| u16::from(c.code)), Some(1012));
        let (mut r, resp) = Raw::reconnect(
            &d.url(),
            "stay-a",
            a.last_envelope_seq() as i64,
            &[ROOT, &t],
        )
        .await;
        assert_eq!(
            resp.pointer("/result/type"),
            Some(&json!("replay")),
            "{resp}"
        );
        assert_eq!(r.shell_pid(&t).await, pid);
    }
);

spec!(
    a_new_binary_that_ends_before_taking_over_is_reported_at_once,
    async {
        // Not ahpty: a wrapper that passes the pre-flight (the real binary answers it) and
        // then exits where the new image should take over. The daemon's process ends with it.
        let install = Install::new();
        let d = install.start();
        let (_a, _t, _pid) = claimed_shell(&d, "gone-a", "gone").await;
        let real = env!("CARGO_BIN_EXE_ahpty");
        install.put_script(&format!(
            "[ \"$1\" = upgrade-check ] && exec '{real}' \"$@\"\nexit 0"
        ));
        let started = Instant::now();
        let out = upgrade(d.home()).await;
        assert_eq!(out.code, Some(3), "{out:?}");
        assert!(
            out.stderr
                .contains("exited during the upgrade without an outcome"),
            "{out:?}"
        );
        // Said once the process is gone, not after `--timeout` (50 s here).
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
    }
);

// `--upgrade-timeout` bounds both waits on the new binary (1 s here, against the default 5 s):
// a pre-flight that never answers is given up after it with the old version serving on, and a
// new image that never commits is given up after it by going back to the old image, which
// serves the same terminals again.
spec!(
    the_upgrade_timeout_bounds_the_pre_flight_and_the_take_over,
    async {
        const LIMIT: Duration = Duration::from_secs(1);
        // Well under the default 5 s, well over the 1 s given.
        const BOUND: Duration = Duration::from_secs(4);
        let install = Install::new();
        let d = install.start_with(
            &["--upgrade-timeout", "1s"],
            &[("AHPTY_TEST_ADOPT_FAULT", "hang")],
        );
        let (mut a, t, pid) = claimed_shell(&d, "slow-a", "slow").await;

        // A new binary whose pre-flight never answers.
        install.put_script("exec sleep 30");
        let started = Instant::now();
        let out = upgrade(d.home()).await;
        let took = started.elapsed();
        failed_saying(
            &out,
            &["pre-flight", "did not answer within 1 s", "still serving"],
            &d,
        );
        assert!(
            took >= LIMIT && took < BOUND,
            "the pre-flight was given up after {took:?}"
        );
        assert!(a.closed.is_none(), "the client was closed");

        // A new image that never commits (the test fault): the old one is executed again.
        install.put_real();
        let out = upgrade(d.home()).await;
        failed_saying(
            &out,
            &[
                "upgrade failed (adopt)",
                "did not take over within 1 s",
                "went back to",
            ],
            &d,
        );
        // From the quiesce to serving again: the deadline plus two executions.
        let st = status(&d);
        let switch = Duration::from_secs_f64(st["switchMs"].as_f64().unwrap_or(0.0) / 1000.0);
        assert!(
            switch >= LIMIT && switch < BOUND,
            "went back after {switch:?}: {st}"
        );
        resumed_on_the_old_image(&d, &mut a, "slow-a", &t, pid).await;
        eprintln!("upgrade timeout 1 s: pre-flight given up after {took:?}, back after {switch:?}");
    }
);

spec!(
    a_new_image_that_crashes_before_taking_over_hands_back_to_the_old_one,
    async {
        let install = Install::new();
        // Test-only fault: an image adopting a hand-over aborts (an image executed again after a
        // failure ignores it).
        let d = install.start_with_env(&[("AHPTY_TEST_ADOPT_FAULT", "abort")]);
        let (mut a, t, pid) = claimed_shell(&d, "crash-a", "crash").await;
        a.type_text(&t, "echo before-$((1+1))\r").await;
        a.wait_data(&t, "before-2", SHELL_TIMEOUT).await;

        let out = upgrade(d.home()).await;
        failed_saying(
            &out,
            &[
                "upgrade failed (adopt)",
                "crashed (SIGABRT)",
                "went back to",
            ],
            &d,
        );
        let st = status(&d);
        assert_eq!(
            (&st["ok"], &st["stage"]),
            (&json!(false), &json!("adopt")),
            "{st}"
        );
        // The old image took the hand-over back: same shell, resumable without a gap.
        resumed_on_the_old_image(&d, &mut a, "crash-a", &t, pid).await;
        assert!(d.stderr().contains("the previous version serves again"));
    }
);

spec!(
    a_trimmed_terminal_snapshots_the_same_screen_after_an_upgrade,
    async {
        let install = Install::new();
        let d = Daemon::builder()
            .exe(&install.exe())
            .args(&["--scrollback-bytes", "4096"])
            .start();
        let (mut a, _) = Raw::connect_init(&d.url(), "screen-a", &[ROOT]).await;
        let t = term_uri("screen");
        a.create_claimed(&t, client_claim("screen-a")).await;
        a.subscribe_at(&t).await;
        a.ready(&t).await;
        // A top line drawn once, then far more than the scrollback inside a scroll region below
        // it: the line's bytes are trimmed long before it leaves the screen, so only the terminal
        // model (carried across the upgrade) still knows it.
        a.type_text(
            &t,
            "printf '\\e[2J\\e[HTOP-MARK\\e[5;20r\\e[5;1H'; for i in $(seq 1 3000); do \
         printf '\\e[3%dmline %d\\e[0m\\n' $((i%7)) $i; done; printf '\\e[r\\e[22;1H'; \
         echo FIN-$((2+3)); exec sleep 600\r",
        )
        .await;
        // No prompt follows (the shell became `sleep`): the screen is final.
        a.wait_data(&t, "FIN-5", SHELL_TIMEOUT).await;
        let before = terminal_of(&a.subscribe_at(&t).await.1);
        let out = upgrade(d.home()).await;
        assert_eq!(out.code, Some(0), "{out:?}\n{}", d.stderr());
        let (mut b, _) = Raw::connect_init(&d.url(), "screen-b", &[]).await;
        let after = terminal_of(&b.subscribe_at(&t).await.1);
        // The same screen, as a client's emulator draws it.
        let draw = |state: &ahp::ahp_types::state::TerminalState| {
            let mut vt = avt::Terminal::new(80, 24).expect("80x24 is a valid size");
            vt.feed(content_text(state).as_str());
            // The visible text, then the whole state (colours, cursor) as avt would redraw it.
            format!("{}\n{}", vt.screen().text().join("\n"), vt.dump())
        };
        let (was, is) = (draw(&before), draw(&after));
        // The output was trimmed: the snapshot starts with the model's synthesized screen.
        let first = |state: &ahp::ahp_types::state::TerminalState| match state.content.first() {
            Some(TerminalContentPart::Unclassified(u)) => u.value.starts_with("\x1b[?1049l"),
            _ => false,
        };
        assert!(
            first(&before) && first(&after),
            "no synthesized screen: nothing trimmed"
        );
        assert!(
            was.contains("TOP-MARK"),
            "not on the screen before: {was:?}"
        );
        assert_eq!(is, was, "the screen changed across the upgrade");
    }
);

spec!(
    the_transcript_goes_on_in_the_same_file_across_an_upgrade,
    async {
        let install = Install::new();
        let mut d = install.start();
        let (mut a, _) = Raw::connect_init(&d.url(), "log-a", &[ROOT]).await;
        let t = term_uri("log");
        a.create_claimed(&t, client_claim("log-a")).await;
        a.subscribe_at(&t).await;
        a.ready(&t).await;
        a.type_text(&t, "echo before-$((1+1))\r").await;
        a.wait_data(&t, "before-2", SHELL_TIMEOUT).await;
        let out = upgrade(d.home()).await;
        assert_eq!(out.code, Some(0), "{out:?}\n{}", d.stderr());
        let (mut r, _) =
            Raw::reconnect(&d.url(), "log-a", a.last_envelope_seq() as i64, &[ROOT, &t]).await;
        r.type_text(&t, "echo after-$((2+2))\r").await;
        r.wait_data(&t, "after-4", SHELL_TIMEOUT).await;
        let files = |home: &Path| -> Vec<PathBuf> {
            let dir = home.join(".state/ahpty/terminals");
            let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
                .map(|d| d.flatten().map(|e| e.path()).collect())
                .unwrap_or_default();
            v.retain(|p| p.extension().is_some_and(|e| e == "log"));
            v
        };
        assert_eq!(files(d.home()).len(), 1, "one transcript for one terminal");
        // A clean stop writes everything; a new daemon on the same state directory restores it.
        d.signal(nix::sys::signal::Signal::SIGTERM);
        assert!(d.wait_exit(Duration::from_secs(20)).is_some());
        let home = d.home().to_path_buf();
        let d2 = Daemon::builder()
            .exe(&install.exe())
            .home_of(&d)
            .arg("--no-socket")
            .start();
        let (mut c, _) = Raw::connect_init(&d2.url(), "log-c", &[]).await;
        let text = content_text(&terminal_of(&c.subscribe_at(&t).await.1));
        for line in ["before-2", "after-4"] {
            assert_eq!(
                text.matches(line).count(),
                1,
                "{line} not exactly once in the restored transcript: {text:?}"
            );
        }
        assert_eq!(files(&home).len(), 1);
    }
);

/// The shell command that prints the numbers 1 to `n`, one a line, paced (200 lines every
/// 20 ms) so that a live upgrade lands in the middle, between the markers `go-2` and `END-4`.
pub(crate) fn paced_numbers(n: u64) -> String {
    format!(
        "f() {{ awk -v n=$1 'BEGIN{{for(i=1;i<=n;i++){{print i; if(i%200==0){{fflush(); \
         system(\"sleep 0.02\")}}}}}}'; }}; echo go-$((1+1)); f {n}; echo END-$((2+2))"
    )
}

/// The numbers printed between the markers of [`paced_numbers`] in `text` (CRs ignored).
pub(crate) fn numbers_between_markers(text: &str) -> Vec<u64> {
    let start = text.find("go-2").expect("no go-2 marker");
    let end = text[start..].find("END-4").expect("no END-4 marker") + start;
    number_lines(&text[start..end])
}

/// `ahpty logs --follow` of one terminal by as many followers as `over_tcp` has entries (over
/// ws:// where `true`, else the default Unix socket) while it prints [`paced_numbers`] and
/// exits, with `ahpty upgrade` run mid-stream: what each follower printed, once it ended.
async fn followers_across_an_upgrade(tag: &str, n: u64, over_tcp: &[bool]) -> Vec<CliOutput> {
    let d = Daemon::start();
    let (agent, t) = agent_with_terminal(&d, tag).await;
    let url = d.url();
    let followers: Vec<LiveCli> = over_tcp
        .iter()
        .map(|&tcp| {
            let mut args = vec!["logs", t.as_str(), "--follow"];
            if tcp {
                args.extend(["--url", url.as_str()]);
            }
            LiveCli::spawn(d.cli(&args))
        })
        .collect();
    for f in &followers {
        f.wait_for("rdy-42", false, SHELL_TIMEOUT).await;
    }
    agent
        .type_text(&t, &format!("{}; exit 3\r", paced_numbers(n)))
        .await;
    for f in &followers {
        f.wait_for("\n1000\r\n", false, SHELL_TIMEOUT).await;
    }
    let out = upgrade(d.home()).await;
    assert_eq!(out.code, Some(0), "ahpty upgrade: {out:?}\n{}", d.stderr());
    eprintln!("{tag}: switch {} ms", status(&d)["switchMs"]);
    assert!(
        followers.iter().all(|f| !f.stdout().contains("END-4")),
        "the numbers were all printed before the upgrade: not mid-stream"
    );
    let mut done = Vec::new();
    for f in followers {
        let out = f.finish(UPGRADE_TIMEOUT).await;
        assert_eq!(out.code, Some(0), "{out:?}\n{}", d.stderr());
        done.push(out);
    }
    done
}

// `ahpty logs --follow` over ws:// across a live upgrade: closed with 1012, it resumes by
// itself (`reconnect` from the last serverSeq it received) and prints every line exactly once,
// with nothing said on stderr, until the terminal exits.
spec!(
    logs_follow_resumes_across_an_upgrade_without_a_gap_or_a_duplicate,
    async {
        const N: u64 = 40_000;
        let done = followers_across_an_upgrade("follow-up", N, &[true]).await;
        assert_eq!(
            done[0].stderr, "",
            "logs --follow said something: {:?}",
            done[0]
        );
        assert_contiguous(
            &numbers_between_markers(&done[0].stdout),
            N,
            "logs --follow across the upgrade",
        );
    }
);

// Two `ahpty logs --follow` across one upgrade. Both are `ahpty-cli`, so the second to resume
// with `reconnect` closes the first one's new connection with 4000; that one resumes again
// from a fresh snapshot (no second `reconnect`, which would close the other in turn) and says
// on stderr that some output may be missing. Both follow to the end, never printing a line
// twice.
spec!(
    two_followers_across_an_upgrade_both_go_on_one_from_a_snapshot,
    async {
        const N: u64 = 40_000;
        let mut noted = 0;
        for done in followers_across_an_upgrade("two-follow", N, &[true, false]).await {
            let nums = numbers_between_markers(&done.stdout);
            assert!(
                nums.windows(2).all(|w| w[0] < w[1]),
                "a line printed twice or out of order"
            );
            if done.stderr.is_empty() {
                assert_contiguous(&nums, N, "the follower that resumed by replay");
            } else {
                assert!(
                    done.stderr.contains("some may be missing"),
                    "{:?}",
                    done.stderr
                );
                assert_eq!(done.stderr.lines().count(), 1, "{:?}", done.stderr);
                noted += 1;
            }
        }
        assert_eq!(noted, 1, "exactly one follower was superseded");
    }
);

/// An `ahp-ws` transport to `url`, for the official runtime's factory.
async fn ws_transport(url: String) -> Result<ahp::BoxedTransport, ahp::TransportError> {
    match ahp_ws::WebSocketTransport::connect(&url).await {
        Ok(t) => Ok(ahp::BoxedTransport::new(t)),
        Err(e) => Err(ahp::TransportError::Io(e.to_string())),
    }
}

/// Lines of `log` that contain `needle` and name `client_id=ID`.
fn client_lines(log: &str, needle: &str, id: &str) -> usize {
    let tag = format!("client_id={id}");
    log.lines()
        .filter(|l| l.contains(needle) && l.split_whitespace().any(|w| w == tag))
        .count()
}

// The official SDK's reconnecting runtime (`ahp::hosts`, default `ReconnectPolicy`) across a
// live upgrade: closed with 1012 it connects again by itself and resumes with `reconnect` —
// a replay, not a second `initialize` — and delivers every line exactly once.
spec!(
    the_official_runtime_resumes_by_replay_across_an_upgrade,
    async {
        use ahp::hosts::{HostConfig, HostId, HostState, MultiHostClient};
        use ahp::SubscriptionEvent;
        const N: u64 = 20_000;
        let d = Daemon::builder().log("info,ahpty::rpc=debug").start();
        let url = d.url();
        let config = HostConfig::new("ahpty", "ahpty", move |_| ws_transport(url.clone()))
            .with_client_id("rt-up")
            .with_client_config(client_config());
        let (multi, _) = MultiHostClient::single(config).await.expect("add host");
        let id = HostId::new("ahpty");
        let mut events = multi.events();
        let (mut helper, t, _) = claimed_shell(&d, "up-helper", "runtime-up").await;
        multi.subscribe(&id, t.clone()).await.expect("subscribe");
        helper.type_text(&t, &paced_numbers(N)).await;
        helper.type_text(&t, "\r").await;
        let mut log = Vec::new();
        let mut text = String::new();
        let mut upgraded = false;
        let deadline = Instant::now() + UPGRADE_TIMEOUT;
        while !text.contains("END-4") {
            let left = deadline.saturating_duration_since(Instant::now());
            let ev = tokio::time::timeout(left, events.recv())
                .await
                .expect("the runtime delivered END-4 in time")
                .expect("the runtime's event stream ended");
            if let SubscriptionEvent::Action(env) = ev.event {
                log.push(env);
                text = data_text(&log, &t);
            }
            if !upgraded && text.contains("\n1000\r\n") {
                upgraded = true;
                let out = upgrade(d.home()).await;
                assert_eq!(out.code, Some(0), "ahpty upgrade: {out:?}\n{}", d.stderr());
                assert!(!text.contains("END-4"), "not mid-stream");
            }
        }
        assert!(upgraded);
        let host = multi.host(&id).await.expect("the host");
        assert!(
            host.generation >= 2 && matches!(host.state, HostState::Connected),
            "{:?} generation {}",
            host.state,
            host.generation
        );
        assert_increasing(&log, "the runtime's delivery");
        assert_contiguous(
            &numbers_between_markers(&text),
            N,
            "the runtime across the upgrade",
        );
        let log = d.stderr();
        let once = |needle: &str| client_lines(&log, needle, "rt-up") == 1;
        assert!(once("client initialized"), "initialized again:\n{log}");
        assert!(once("client reconnected: replay of"), "no replay:\n{log}");
    }
);

/// Asserts that `nums` is exactly `1..=n`, naming the first gap or duplicate.
pub(crate) fn assert_contiguous(nums: &[u64], n: u64, what: &str) {
    for (i, &x) in nums.iter().enumerate() {
        let want = i as u64 + 1;
        if x != want {
            let around = &nums[i.saturating_sub(3)..(i + 4).min(nums.len())];
            panic!(
                "{what}: line #{i} is {x}, expected {want} (a {}); around it: {around:?}",
                if x < want { "duplicate" } else { "gap" }
            );
        }
    }
    assert_eq!(
        nums.len() as u64,
        n,
        "{what}: {} numbers, expected {n}",
        nums.len()
    );
}

// `ahpty upgrade --pid` signals only a daemon: an ahpty client with `serve` among its
// arguments (here the `$0` of the command it runs) is refused and not signalled (SIGUSR2
// would kill it).
spec!(
    upgrade_pid_of_a_client_with_serve_among_its_args_refuses,
    async {
        let d = Daemon::start();
        let mut client = d
            .cli(&["run", "--", "sh", "-c", "sleep 60", "serve"])
            .spawn()
            .expect("ahpty run");
        let pid = client.id();
        let cmdline = format!("/proc/{pid}/cmdline");
        eventually("the client runs", Duration::from_secs(10), async || {
            std::fs::read(&cmdline).is_ok_and(|c| c.ends_with(b"serve\0"))
        })
        .await;
        let cmd = cli_command(
            d.home(),
            &["upgrade", "--pid", &pid.to_string(), "--timeout", "5s"],
        );
        let out = tokio::task::spawn_blocking(move || run_cli(cmd, Duration::from_secs(20)))
            .await
            .unwrap();
        let alive = client.try_wait().unwrap().is_none();
        let _ = client.kill();
        let _ = client.wait();
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(
            out.stderr.contains("is not an ahpty daemon of this user")
                && out.stderr.contains("not `ahpty [-v…] serve …`")
                && out.stderr.lines().count() == 1,
            "{out:?}"
        );
        assert!(alive, "the client was signalled");
    }
);
