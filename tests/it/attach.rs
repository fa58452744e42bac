//! `ahpty attach` with the test playing the human: the attach runs on a real pty (portable-pty)
//! inside `sh`, which records `stty -g` before and after it; the test types keys into that
//! pty, resizes it and reads what appears on it, while an official `ahp` client watches the
//! remote terminal.

use std::io::{Read, Write};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::support::*;
use ahp::ahp_types::actions::StateAction;
use portable_pty::{native_pty_system, CommandBuilder, MasterPty, PtySize};

const WAIT: Duration = Duration::from_secs(20);

/// The local terminal and the person at it.
struct Human {
    master: Box<dyn MasterPty + Send>,
    keys: Box<dyn Write + Send>,
    screen: Arc<(Mutex<Vec<u8>>, Condvar)>,
    child: Box<dyn portable_pty::Child + Send + Sync>,
    dir: tempfile::TempDir,
}

fn size(cols: u16, rows: u16) -> PtySize {
    PtySize {
        rows,
        cols,
        pixel_width: 0,
        pixel_height: 0,
    }
}

impl Human {
    /// `sh -c 'stty -g >before; ahpty attach URI; echo attach-rc=$?; stty -g >after; …'` on a
    /// fresh 80×24 pty, as a client of `d`.
    fn attach(d: &Daemon, uri: &str) -> Human {
        Human::attach_with(d, uri, "")
    }

    /// As [`Human::attach`], with `flags` (split on spaces) before the terminal.
    fn attach_with(d: &Daemon, uri: &str, flags: &str) -> Human {
        Human::run(d, uri, &format!("attach {flags}"))
    }

    /// As [`Human::attach`], with `ahpty SUBCOMMAND…` (split on spaces) instead of attach.
    fn run(d: &Daemon, uri: &str, subcommand: &str) -> Human {
        let pair = native_pty_system().openpty(size(80, 24)).expect("openpty");
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = CommandBuilder::new("/bin/sh");
        cmd.arg("-c");
        cmd.arg(
            "stty -g >before; \"$AHPTY_BIN\" $SUBCOMMAND \"$T\"; echo attach-rc=$?; stty -g >after; \
             echo script-done; exec sleep 60",
        );
        cmd.cwd(dir.path());
        cmd.env("AHPTY_BIN", env!("CARGO_BIN_EXE_ahpty"));
        cmd.env("T", uri);
        cmd.env("SUBCOMMAND", subcommand);
        cmd.env("HOME", d.home());
        cmd.env("XDG_RUNTIME_DIR", d.runtime_dir());
        cmd.env("TERM", "xterm-256color");
        for var in [
            "AHPTY_URL",
            "AHPTY_TOKEN",
            "AHPTY_TERMINAL",
            "AHPTY_HOST_ID",
            "RUST_LOG",
        ] {
            cmd.env_remove(var);
        }
        let child = pair.slave.spawn_command(cmd).expect("spawn sh on the pty");
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().expect("reader");
        let keys = pair.master.take_writer().expect("writer");
        let screen = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let s = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                s.0.lock().unwrap().extend_from_slice(&buf[..n]);
                s.1.notify_all();
            }
        });
        Human {
            master: pair.master,
            keys,
            screen,
            child,
            dir,
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.screen.0.lock().unwrap()).into_owned()
    }

    /// Waits (blocking) until the pty showed `needle`.
    fn wait_for(&self, needle: &str) {
        let deadline = Instant::now() + WAIT;
        let mut seen = self.screen.0.lock().unwrap();
        while !String::from_utf8_lossy(&seen).contains(needle) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "{needle:?} did not appear on the local terminal within {WAIT:?}; it shows {}",
                tail(&String::from_utf8_lossy(&seen), 1500)
            );
            seen = self.screen.1.wait_timeout(seen, left).unwrap().0;
        }
    }

    fn type_keys(&mut self, keys: &[u8]) {
        self.keys.write_all(keys).unwrap();
        self.keys.flush().unwrap();
    }

    /// The pid of `ahpty attach` (the child of the pty's `sh`).
    fn attach_pid(&self) -> i32 {
        let sh = self.child.process_id().expect("sh pid") as i32;
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .find(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                    stat.rfind(')').is_some_and(|i| {
                        stat[i + 1..].split_whitespace().nth(1) == Some(&sh.to_string())
                    })
                })
            })
            .expect("ahpty attach runs under sh")
    }

    /// The `stty -g` lines recorded before and after the attach.
    fn tty_modes(&self) -> (String, String) {
        let read = |f: &str| std::fs::read_to_string(self.dir.path().join(f)).unwrap();
        (read("before"), read("after"))
    }

    /// The text after the last occurrence of `marker`.
    fn after(&self, marker: &str) -> String {
        let t = self.text();
        t.rsplit_once(marker)
            .map(|(_, r)| r.to_string())
            .unwrap_or_default()
    }
}

/// A daemon, an `agent` client watching a fresh terminal whose shell is ready.
async fn setup(tag: &str) -> (Daemon, Ahp, String) {
    let d = Daemon::start();
    let (agent, t) = agent_with_terminal(&d, tag).await;
    (d, agent, t)
}

fn blocking<R>(f: impl FnOnce() -> R) -> R {
    tokio::task::block_in_place(f)
}

fn assert_modes_restored(human: &Human) {
    let (before, after) = human.tty_modes();
    assert!(!before.trim().is_empty());
    assert_eq!(
        before, after,
        "the local terminal's modes were not restored"
    );
}

spec!(
    keys_output_resize_and_detach_with_the_terminal_left_running,
    async {
        let (d, mut agent, t) = setup("human").await;
        let mut human = Human::attach(&d, &t);
        // Attached: the screen is cleared and repainted from the snapshot (our `rdy-42` is in it).
        blocking(|| human.wait_for("\x1b[H\x1b[2J"));
        blocking(|| human.wait_for("rdy-42"));

        // Keys reach the remote shell; its output appears here.
        human.type_keys(b"echo typed-$((6*7))\r");
        blocking(|| human.wait_for("typed-42"));
        let u = t.clone();
        agent
        .wait_for("the keys, typed by the CLI", RPC_TIMEOUT, |log| {
            log.iter().any(|e| {
                e.channel == u
                    && e.origin.as_ref().is_some_and(|o| o.client_id == "ahpty-cli")
                    && matches!(&e.action, StateAction::TerminalInput(i) if i.data.contains("typed"))
            })
        })
        .await;

        // A resize of the local terminal reaches the remote program.
        human.master.resize(size(100, 30)).unwrap();
        let u = t.clone();
        agent
        .wait_for("terminal/resized 100x30", RPC_TIMEOUT, |log| {
            log.iter().any(|e| {
                e.channel == u
                    && matches!(&e.action, StateAction::TerminalResized(r) if r.cols == 100 && r.rows == 30)
            })
        })
        .await;
        human.type_keys(b"stty size; echo sized-$((1+1))\r");
        blocking(|| human.wait_for("sized-2"));
        assert!(
            human.text().contains("30 100"),
            "{}",
            tail(&human.text(), 800)
        );

        // The remote program hides the cursor; detaching shows it again.
        human.type_keys(b"printf '\\033[?25l'; echo hidden-$((2+2))\r");
        blocking(|| human.wait_for("hidden-4"));
        human.type_keys(b"\x1c");
        blocking(|| human.wait_for("script-done"));
        let end = human.after("hidden-4");
        assert!(end.contains("\x1b[?25h"), "cursor not shown again: {end:?}");
        assert!(end.contains("attach-rc=0"), "{end:?}");
        assert!(
            end.contains(&format!(
                "ahpty: detached (Ctrl-\\) from {t}; it keeps running"
            )),
            "{end:?}"
        );
        assert_modes_restored(&human);

        // The terminal still runs: it answers its watcher.
        agent.type_text(&t, "echo still-$((3*3))\r").await;
        agent.wait_data(&t, "still-9", SHELL_TIMEOUT).await;
        assert!(!agent.log.iter().any(|e| is_exited(e, &t)));
    }
);

spec!(the_remote_exit_code_becomes_the_exit_status, async {
    let (d, _agent, t) = setup("exit").await;
    let mut human = Human::attach(&d, &t);
    blocking(|| human.wait_for("\x1b[H\x1b[2J"));
    human.type_keys(b"exit 7\r");
    blocking(|| human.wait_for("script-done"));
    let text = human.text();
    assert!(text.contains("attach-rc=7"), "{}", tail(&text, 600));
    assert!(
        text.contains(&format!("ahpty: {t} exited with code 7")),
        "{}",
        tail(&text, 600)
    );
    assert_modes_restored(&human);
});

spec!(
    a_killed_daemon_leaves_the_local_terminal_restored_and_one_line,
    async {
        let (mut d, _agent, t) = setup("sigkill").await;
        let human = Human::attach(&d, &t);
        blocking(|| human.wait_for("\x1b[H\x1b[2J"));
        blocking(|| human.wait_for("rdy-42"));
        d.signal(nix::sys::signal::Signal::SIGKILL);
        assert!(d.wait_exit(WAIT).is_some());
        blocking(|| human.wait_for("script-done"));
        let end = human.after("rdy-42");
        assert!(end.contains("attach-rc=255"), "{end:?}");
        assert_eq!(
            end.matches("ahpty: ").count(),
            1,
            "exactly one line from ahpty: {end:?}"
        );
        assert!(
            end.contains("ahpty: lost the connection to the daemon\r\n"),
            "{end:?}"
        );
        assert_modes_restored(&human);
    }
);

// An `ahpty attach` that stopped reading (SIGSTOP here; a stalled link does the same) while
// its terminal floods misses the close frame of a live upgrade: the daemon cannot send it
// behind the full socket buffers, and the connection just ends. Resumed anyway — one attempt
// finds the daemon still listening — the session goes on, without a line from ahpty.
spec!(a_live_upgrade_missed_close_frame_still_resumes, async {
    // No other viewer: a lagging one beside it would be closed with 4002 instead.
    let d = Daemon::start();
    let new = blocking(|| run_cli(d.cli(&["new"]), WAIT));
    assert_eq!(new.code, Some(0), "ahpty new: {new:?}");
    let t = new.stdout.trim().to_string();
    let mut human = Human::attach(&d, &t);
    human.type_keys(b"echo rdy-$((6*7))\r");
    blocking(|| human.wait_for("rdy-42"));
    human.type_keys(b"seq 1 400000; echo flood-$((2*3))\r");
    blocking(|| human.wait_for("\n1000\r\n"));
    let pid = nix::unistd::Pid::from_raw(human.attach_pid());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    // The daemon stopped reading the pty (its queue for the stopped client is full): `seq`
    // wrote nothing more (its `wchar` in /proc/PID/io unchanged) over 10 checks in a row.
    let written = || {
        descendants_named(d.pid(), "seq").first().and_then(|p| {
            let io = std::fs::read_to_string(format!("/proc/{p}/io")).ok()?;
            io.lines()
                .find_map(|l| l.strip_prefix("wchar:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
    };
    let mut in_a_row = 0;
    let mut last = None;
    let deadline = Instant::now() + WAIT;
    while in_a_row < 10 {
        assert!(Instant::now() < deadline, "seq never blocked on the pty");
        let now = written();
        in_a_row = if now.is_some() && now == last {
            in_a_row + 1
        } else {
            0
        };
        last = now;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let out = crate::upgrade::upgrade(d.home()).await;
    assert_eq!(out.code, Some(0), "ahpty upgrade: {out:?}\n{}", d.stderr());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    blocking(|| human.wait_for("flood-6"));
    human.type_keys(b"echo after-$((3+4))\r");
    blocking(|| human.wait_for("after-7"));
    human.type_keys(b"\x1c");
    blocking(|| human.wait_for("script-done"));
    let end = human.after("after-7");
    assert!(end.contains("attach-rc=0"), "{end:?}");
    assert_eq!(end.matches("ahpty: ").count(), 1, "one line: {end:?}");
    assert!(!human.text().contains("lost the connection"));
    assert_modes_restored(&human);
});

spec!(sigterm_detaches_and_restores_the_local_terminal, async {
    let (d, mut agent, t) = setup("sigterm").await;
    let human = Human::attach(&d, &t);
    blocking(|| human.wait_for("\x1b[H\x1b[2J"));
    let pid = nix::unistd::Pid::from_raw(human.attach_pid());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    blocking(|| human.wait_for("script-done"));
    let text = human.text();
    assert!(text.contains("attach-rc=143"), "{}", tail(&text, 600));
    assert!(
        text.contains(&format!("ahpty: SIGTERM received; detached from {t}")),
        "{}",
        tail(&text, 600)
    );
    assert_modes_restored(&human);
    agent.type_text(&t, "echo alive-$((5*5))\r").await;
    agent.wait_data(&t, "alive-25", SHELL_TIMEOUT).await;
});

// A live upgrade of the daemon in the middle of an attach session (a paced flood of numbered
// lines): closed with 1012, `ahpty attach` resumes by itself from the last serverSeq it
// received — no repaint, every line on the local terminal exactly once — and keys typed
// afterwards reach the same shell, now served by the new image.
spec!(
    a_live_upgrade_mid_session_goes_on_without_a_gap_or_a_duplicate,
    async {
        use crate::upgrade::{assert_contiguous, numbers_between_markers, paced_numbers, upgrade};
        const N: u64 = 40_000;
        let (d, _agent, t) = setup("upgrade").await;
        let mut human = Human::attach(&d, &t);
        blocking(|| human.wait_for("\x1b[H\x1b[2J"));
        blocking(|| human.wait_for("rdy-42"));
        human.type_keys(format!("{}\r", paced_numbers(N)).as_bytes());
        blocking(|| human.wait_for("\n1000\r\n"));
        let out = upgrade(d.home()).await;
        assert_eq!(out.code, Some(0), "ahpty upgrade: {out:?}\n{}", d.stderr());
        assert!(
            !human.text().contains("END-4"),
            "the numbers were all shown before the upgrade: not mid-session"
        );
        blocking(|| human.wait_for("END-4"));

        // The same shell, served by the new image, still gets the keys.
        human.type_keys(b"echo after-$((3+4))\r");
        blocking(|| human.wait_for("after-7"));
        human.type_keys(b"\x1c");
        blocking(|| human.wait_for("script-done"));
        let text = human.text();
        assert_eq!(
            text.matches("\x1b[H\x1b[2J").count(),
            1,
            "the screen was repainted: resumed from a snapshot, not a replay"
        );
        assert_contiguous(
            &numbers_between_markers(&text),
            N,
            "the local terminal across the upgrade",
        );
        let end = human.after("after-7");
        assert!(end.contains("attach-rc=0"), "{end:?}");
        assert_eq!(end.matches("ahpty: ").count(), 1, "one line: {end:?}");
        assert_modes_restored(&human);
    }
);

/// Has the remote shell print an OSC 52 clipboard write (split across two pty reads) and an
/// OSC 50 font query (split too), then a marker, and detaches; returns what the local terminal
/// showed after the shell was ready.
fn print_clipboard_and_font_query(human: &mut Human) -> String {
    // OSC 52 as emulators also read it: a C0 control inside the number (`5 SOH 2`, which they
    // skip), and leading zeros (`052`).
    human.type_keys(
        b"printf '\\033]52;c;aGVs'; sleep 0.3; printf 'bG8=\\007'; printf '\\033]5'; \
          sleep 0.3; printf '0;?\\007'; printf '\\033]5'; printf '\\001'; \
          printf '2;c;QzA=\\007'; printf '\\033]05'; sleep 0.3; printf '2;c;TFo=\\007'; \
          echo done-$((2*3))\r",
    );
    blocking(|| human.wait_for("done-6"));
    human.type_keys(b"\x1c");
    blocking(|| human.wait_for("script-done"));
    human.after("rdy-42")
}

// A program sharing a terminal with the person must not set their clipboard or make their
// terminal answer it: `attach` removes OSC 52 and OSC 50 (each split across chunks) from what
// reaches the local terminal.
spec!(
    clipboard_writes_and_queries_do_not_reach_the_local_terminal,
    async {
        let (d, _agent, t) = setup("osc52").await;
        let mut human = Human::attach(&d, &t);
        blocking(|| human.wait_for("rdy-42"));
        let shown = print_clipboard_and_font_query(&mut human);
        assert!(shown.contains("done-6"), "{shown:?}");
        assert!(
            !shown.contains("\x1b]52"),
            "OSC 52 reached the local terminal: {shown:?}"
        );
        assert!(
            !shown.contains("bG8=\x07"),
            "part of OSC 52 reached it: {shown:?}"
        );
        assert!(
            !shown.contains("\x1b]50"),
            "OSC 50 reached the local terminal: {shown:?}"
        );
        assert!(
            !shown.contains("0;?\x07"),
            "part of OSC 50 reached it: {shown:?}"
        );
        assert!(
            !shown.contains("QzA=\x07"),
            "OSC 52 with a C0 control in its number reached it: {shown:?}"
        );
        assert!(
            !shown.contains("TFo=\x07") && !shown.contains("\x1b]05"),
            "OSC 052 (a leading zero) reached it: {shown:?}"
        );
        assert!(shown.contains("attach-rc=0"), "{shown:?}");
        assert_modes_restored(&human);
    }
);

spec!(allow_clipboard_lets_clipboard_writes_through_only, async {
    let (d, _agent, t) = setup("osc52ok").await;
    let mut human = Human::attach_with(&d, &t, "--allow-clipboard");
    blocking(|| human.wait_for("rdy-42"));
    let shown = print_clipboard_and_font_query(&mut human);
    assert!(
        shown.contains("\x1b]52;c;aGVsbG8=\x07"),
        "the allowed OSC 52 did not arrive whole: {shown:?}"
    );
    assert!(
        shown.contains("\x1b]052;c;TFo=\x07"),
        "the allowed OSC 052 did not arrive whole: {shown:?}"
    );
    assert!(
        !shown.contains("\x1b]50"),
        "OSC 50 reached the local terminal: {shown:?}"
    );
    assert!(shown.contains("attach-rc=0"), "{shown:?}");
});

// What the terminal printed before the attach comes back in the repaint: filtered too.
spec!(the_repaint_carries_no_clipboard_write, async {
    let (d, mut agent, t) = setup("osc52old").await;
    agent
        .type_text(&t, "printf '\\033]52;c;b2xk\\007'; echo old-$((3*3))\r")
        .await;
    agent.wait_data(&t, "old-9", SHELL_TIMEOUT).await;
    let mut human = Human::attach(&d, &t);
    blocking(|| human.wait_for("old-9"));
    human.type_keys(b"\x1c");
    blocking(|| human.wait_for("script-done"));
    let shown = human.text();
    assert!(!shown.contains("\x1b]52"), "OSC 52 was replayed: {shown:?}");
});

// `ahpty logs` to a terminal filters the same way: a retained OSC 52 does not reach it.
spec!(logs_to_a_terminal_carries_no_clipboard_write, async {
    let (d, mut agent, t) = setup("osc52logs").await;
    agent
        .type_text(
            &t,
            "printf '\\033]52;c;b2xk\\007\\033]50;?\\007'; echo old-$((3*3))\r",
        )
        .await;
    agent.wait_data(&t, "old-9", SHELL_TIMEOUT).await;
    let human = Human::run(&d, &t, "logs");
    blocking(|| human.wait_for("script-done"));
    let shown = human.text();
    assert!(shown.contains("old-9"), "{shown:?}");
    assert!(shown.contains("attach-rc=0"), "{shown:?}");
    assert!(
        !shown.contains("\x1b]52"),
        "OSC 52 reached the terminal: {shown:?}"
    );
    assert!(
        !shown.contains("\x1b]50"),
        "OSC 50 reached the terminal: {shown:?}"
    );
});
