//! Transcripts that outlive the daemon: after a `kill -9` while output flows, a clean stop, or
//! with damaged files, a restarted daemon on the same state directory serves every terminal
//! that existed (exited, without a process) with the content a client had received — up to
//! the documented loss bound — and a `serverSeq` above every value seen before; disposed
//! terminals stay gone; `--no-persist` writes nothing; two daemons never share a directory.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::*;
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// What a process crash may lose: the writer's batch window (docs/store.md) …
const LOSS_BOUND: Duration = Duration::from_millis(100);
/// … plus scheduling slack on a loaded 2-core test machine (the writer thread, the client).
const SLACK: Duration = Duration::from_millis(900);

fn state_dir(home: &Path) -> PathBuf {
    home.join(".state").join("ahpty")
}

/// The transcripts under `home`'s default state directory.
fn transcripts(home: &Path) -> Vec<PathBuf> {
    logs_in(&state_dir(home))
}

/// The `.log` files under `dir/terminals`.
fn logs_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("terminals"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|e| e == "log"));
    v
}

/// The transcript holding `uri` (its metadata names it).
fn transcript_of(home: &Path, uri: &str) -> PathBuf {
    let needle = serde_json::to_string(uri).unwrap();
    transcripts(home)
        .into_iter()
        .find(|p| {
            let bytes = std::fs::read(p).unwrap();
            bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
        })
        .unwrap_or_else(|| panic!("no transcript names {uri}"))
}

async fn create(raw: &mut Raw, uri: &str) {
    let claim = json!({"kind": "client", "clientId": raw.client_id});
    let r = raw
        .request("createTerminal", json!({"channel": uri, "claim": claim}))
        .await;
    assert!(r.get("error").is_none(), "{r}");
}

async fn subscribe(raw: &mut Raw, uri: &str) -> Value {
    let r = raw.request("subscribe", json!({"channel": uri})).await;
    r.pointer("/result/snapshot")
        .cloned()
        .unwrap_or_else(|| panic!("subscribe {uri}: {r}"))
}

/// The root catalogue row of `uri` in an `initialize` result subscribed to the root.
fn root_row(init: &Value, uri: &str) -> Option<Value> {
    init["snapshots"][0]["state"]["terminals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["resource"] == uri)
        .cloned()
}

fn max_seq(raw: &Raw) -> u64 {
    raw.envelopes()
        .filter_map(|e| e["serverSeq"].as_u64())
        .max()
        .unwrap_or(0)
}

/// The numbers of the `line N` lines of `text`, which must be 1, 2, 3, … with no gap.
fn check_numbered(text: &str, what: &str) -> u64 {
    let mut last = 0;
    for line in text.split("\r\n") {
        if let Some(n) = line
            .strip_prefix("line ")
            .and_then(|n| n.parse::<u64>().ok())
        {
            assert_eq!(n, last + 1, "{what}: line {n} after line {last}");
            last = n;
        }
    }
    last
}

spec!(
    a_crash_keeps_what_clients_received_up_to_the_loss_bound,
    async {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        let clock0 = ahpty::store::clock_seq_base();
        let mut d = Daemon::on_home(home, &[]).start();
        let (mut c, init) = Raw::connect_init(&d.url(), "crash", &[ROOT]).await;
        let mut seen = init["serverSeq"].as_u64().unwrap();
        assert!(
            seen >= clock0,
            "serverSeq {seen} below the clock's {clock0}"
        );

        // Disposed before the crash: must not come back.
        let gone = term_uri("gone");
        create(&mut c, &gone).await;
        let r = c.request("disposeTerminal", json!({"channel": gone})).await;
        assert!(r.get("error").is_none(), "{r}");
        assert!(transcripts(home).is_empty(), "{:?}", transcripts(home));

        let t = term_uri("flood");
        create(&mut c, &t).await;
        let snap = subscribe(&mut c, &t).await;
        let mut view = state_text(&snap["state"]);
        // Every data envelope: (end offset in `view`, when it was read).
        let mut marks: Vec<(usize, Instant)> = vec![(view.len(), Instant::now())];
        c.type_text(
        &t,
        "printf 'pid=%s\\n' $$; i=0; while [ $i -lt 100000 ]; do i=$((i+1)); echo \"line $i\"; \
         sleep 0.002; done\r",
    )
    .await;
        // Read until 400 lines arrived, timestamping each envelope as it is read.
        let mut pid = None;
        let read = tokio::time::timeout(SHELL_TIMEOUT, async {
            while !view.contains("line 400\r\n") {
                let msg = tokio::time::timeout(RPC_TIMEOUT, c.ws.next())
                    .await
                    .expect("output")
                    .expect("open")
                    .expect("frame");
                let Message::Text(text) = msg else { continue };
                let v: Value = serde_json::from_str(text.as_str()).unwrap();
                if let Some(s) = v.pointer("/params/serverSeq").and_then(Value::as_u64) {
                    seen = seen.max(s);
                }
                if v["params"]["channel"] == t.as_str()
                    && v["params"]["action"]["type"] == "terminal/data"
                {
                    view.push_str(v["params"]["action"]["data"].as_str().unwrap());
                    marks.push((view.len(), Instant::now()));
                }
                if pid.is_none() {
                    pid = find_number_after(&view, "pid=");
                }
            }
        })
        .await;
        assert!(read.is_ok(), "no 400 lines: {}", tail(&view, 300));
        let pid = pid.expect("the shell's pid") as i32;
        let killed_at = Instant::now();
        d.signal(nix::sys::signal::Signal::SIGKILL);
        assert!(d.wait_exit(Duration::from_secs(10)).is_some());
        // What the daemon sent before it died and the socket still holds counts as received
        // (read now, so timestamped late: that only makes the check below stricter).
        while let Ok(Some(Ok(Message::Text(text)))) =
            tokio::time::timeout(Duration::from_secs(2), c.ws.next()).await
        {
            let v: Value = serde_json::from_str(text.as_str()).unwrap();
            if v["params"]["channel"] == t.as_str()
                && v["params"]["action"]["type"] == "terminal/data"
            {
                view.push_str(v["params"]["action"]["data"].as_str().unwrap());
                marks.push((view.len(), Instant::now()));
            }
        }
        // The shell lost its pty; make sure its loop is gone too.
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        wait_dead(
            &[pid],
            Duration::from_secs(10),
            "the crashed daemon's shell",
        );

        let mut d2 = Daemon::on_home(home, &[]).start();
        // The previous process's client resuming: not known here, so -32008 (fall back to
        // initialize); its cursor counts the old process's sequence.
        let mut again = Raw::connect(&d2.url()).await;
        let resp = again
            .request(
                "reconnect",
                json!({"channel": ROOT, "clientId": c.client_id, "lastSeenServerSeq": seen,
                   "subscriptions": [ROOT, t]}),
            )
            .await;
        assert_eq!(Raw::code(&resp), Some(-32008), "{resp}");
        drop(again);
        let (mut c2, init2) = Raw::connect_init(&d2.url(), "crash", &[ROOT]).await;
        let seq2 = init2["serverSeq"].as_u64().unwrap();
        assert!(seq2 > seen, "restarted serverSeq {seq2} not above {seen}");
        assert!(
            root_row(&init2, &gone).is_none(),
            "the disposed terminal came back"
        );
        let row = root_row(&init2, &t).expect("the terminal is back in the catalogue");
        assert_eq!(row["lifecycle"]["status"], "exited", "{row}");
        assert!(
            row["lifecycle"].get("exitCode").is_none_or(Value::is_null),
            "{row}"
        );
        let snap2 = subscribe(&mut c2, &t).await;
        assert!(snap2["fromSeq"].as_u64().unwrap() >= seq2);
        let restored = state_text(&snap2["state"]);
        let last = check_numbered(&restored, "restored");
        if restored.len() <= view.len() {
            assert!(
                view.starts_with(&restored),
                "restored content is not what the client received:\n{}\n---\n{}",
                tail(&restored, 200),
                tail(&view, 200)
            );
            // Only whole envelopes, and only a suffix received within the bound before the kill.
            let cut = marks
                .iter()
                .position(|(end, _)| *end == restored.len())
                .unwrap_or_else(|| panic!("restored content ends inside an envelope"));
            if let Some((_, read_at)) = marks.get(cut + 1) {
                let age = killed_at.saturating_duration_since(*read_at);
                eprintln!(
                    "lost {} bytes (lines {}..): the first arrived {age:?} before the kill",
                    view.len() - restored.len(),
                    last + 1
                );
                assert!(
                    age <= LOSS_BOUND + SLACK,
                    "output received {age:?} before the kill was lost ({} bytes)",
                    view.len() - restored.len()
                );
            }
        } else {
            // The daemon had persisted more than the client read: more of the same stream.
            assert!(restored.starts_with(&view), "{}", tail(&restored, 200));
        }
        assert!(last >= 300, "only {last} lines restored");

        // No process: input is rejected, saying why; a resize is accepted.
        c2.type_text(&t, "echo hello\r").await;
        let rejected = c2
            .wait_envelope("the input's rejection", RPC_TIMEOUT, |e| {
                e["channel"] == t.as_str() && e["rejectionReason"].is_string()
            })
            .await;
        assert!(
            rejected["rejectionReason"]
                .as_str()
                .unwrap()
                .contains("restored"),
            "{rejected}"
        );
        c2.dispatch(
            &t,
            json!({"type": "terminal/resized", "cols": 100, "rows": 30}),
        )
        .await;
        let resized = c2
            .wait_envelope("the resize", RPC_TIMEOUT, |e| {
                e["action"]["type"] == "terminal/resized"
            })
            .await;
        assert!(resized.get("rejectionReason").is_none(), "{resized}");

        // The CLI sees it.
        let url = d2.url();
        let ls = run_cli(
            cli_command(home, &["ls", "--json", "--url", &url]),
            RPC_TIMEOUT,
        );
        let rows: Value = serde_json::from_str(&ls.stdout).unwrap_or_else(|_| panic!("{ls:?}"));
        let row = rows
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["uri"] == t.as_str())
            .unwrap_or_else(|| panic!("{ls:?}"));
        assert_eq!(row["status"], "exited");
        assert!(
            row["exitCode"].is_null() && row["restored"] == true,
            "{row}"
        );
        let logs = run_cli(cli_command(home, &["logs", &t, "--url", &url]), RPC_TIMEOUT);
        assert_eq!(logs.code, Some(0), "{logs:?}");
        assert!(
            logs.stdout.contains("line 300\r\n"),
            "{}",
            tail(&logs.stdout, 200)
        );

        // disposeTerminal removes it for good, across a clean restart.
        let r = c2.request("disposeTerminal", json!({"channel": t})).await;
        assert!(r.get("error").is_none(), "{r}");
        assert!(transcripts(home).is_empty(), "{:?}", transcripts(home));
        let seen2 = max_seq(&c2).max(seq2);
        d2.signal(nix::sys::signal::Signal::SIGTERM);
        assert!(d2.wait_exit(Duration::from_secs(10)).is_some());
        let d3 = Daemon::on_home(home, &[]).start();
        let (_c3, init3) = Raw::connect_init(&d3.url(), "crash", &[ROOT]).await;
        assert!(root_row(&init3, &t).is_none(), "{init3}");
        assert!(init3["serverSeq"].as_u64().unwrap() > seen2);
    }
);

/// A few random-ish numbers from a printed seed (xorshift).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

spec!(
    damaged_transcripts_are_set_aside_and_their_valid_prefix_kept,
    async {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        let d = Daemon::on_home(home, &[]).start();
        let (mut c, _) = Raw::connect_init(&d.url(), "damage", &[]).await;
        let names = ["cut", "tail", "flip"];
        let mut uris = Vec::new();
        for name in names {
            let t = term_uri(name);
            create(&mut c, &t).await;
            subscribe(&mut c, &t).await;
            let script = format!(
                "PS1='P> '; i=0; while [ $i -lt 200 ]; do i=$((i+1)); echo \"{name} $i\"; done; \
             echo {name}-$((40+2))\r"
            );
            c.type_text(&t, &script).await;
            // Up to the prompt after it: nothing more comes.
            c.wait_data(&t, &format!("{name}-42\r\nP> "), SHELL_TIMEOUT)
                .await;
            uris.push(t);
        }
        // Each snapshot now: the content a clean restart must give back.
        let mut originals = Vec::new();
        for t in &uris {
            originals.push(state_text(&subscribe(&mut c, t).await["state"]));
        }
        drop(c);
        d.stop();

        // A clean stop keeps every transcript.
        let d = Daemon::on_home(home, &[]).start();
        let (mut c, _) = Raw::connect_init(&d.url(), "damage", &[]).await;
        for (t, original) in uris.iter().zip(&originals) {
            let restored = state_text(&subscribe(&mut c, t).await["state"]);
            assert_eq!(&restored, original, "{t} after a clean restart");
        }
        drop(c);
        d.stop();

        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1;
        eprintln!("damage seed {seed}");
        let mut rng = Rng(seed);
        let files: Vec<PathBuf> = uris.iter().map(|t| transcript_of(home, t)).collect();
        let mut full = Vec::new();
        for f in &files {
            full.push(std::fs::read(f).unwrap());
        }
        // Truncated at a random offset; garbage appended; one byte flipped in the second half.
        let cut = 1 + rng.below(full[0].len() - 1);
        std::fs::write(&files[0], &full[0][..cut]).unwrap();
        let mut tail_bytes = full[1].clone();
        tail_bytes.extend((0..100).map(|_| rng.below(256) as u8));
        std::fs::write(&files[1], &tail_bytes).unwrap();
        let flip = full[2].len() / 2 + rng.below(full[2].len() / 2);
        let mut flipped = full[2].clone();
        flipped[flip] ^= 1 << rng.below(8);
        std::fs::write(&files[2], &flipped).unwrap();
        eprintln!(
            "cut {} at {cut}, flipped {} at {flip}",
            files[0].display(),
            files[2].display()
        );

        let d = Daemon::on_home(home, &[]).start();
        let log = d.stderr();
        for f in &files {
            let name = f.display().to_string();
            let line = log
                .lines()
                .find(|l| l.contains("WARN") && l.contains(&name))
                .unwrap_or_else(|| panic!("nothing said about {name}:\n{log}"));
            assert!(line.contains("corrupt/"), "{line}");
        }
        let aside = std::fs::read_dir(state_dir(home).join("corrupt"))
            .unwrap()
            .count();
        assert_eq!(aside, 3, "originals set aside");
        let (mut c, init) = Raw::connect_init(&d.url(), "damage", &[ROOT]).await;
        // The cut one: a prefix of its content, or gone when the cut fell in its metadata.
        match root_row(&init, &uris[0]) {
            Some(_) => {
                let text = state_text(&subscribe(&mut c, &uris[0]).await["state"]);
                assert!(originals[0].starts_with(&text), "{}", tail(&text, 200));
            }
            None => assert!(
                log.contains("does not come back"),
                "the cut terminal vanished silently:\n{log}"
            ),
        }
        // Garbage after the end: everything kept.
        let text = state_text(&subscribe(&mut c, &uris[1]).await["state"]);
        assert_eq!(text, originals[1]);
        // A flipped byte: what precedes the damaged record.
        if root_row(&init, &uris[2]).is_some() {
            let text = state_text(&subscribe(&mut c, &uris[2]).await["state"]);
            assert!(originals[2].starts_with(&text), "{}", tail(&text, 200));
        }
        // And it serves.
        let t = term_uri("after");
        create(&mut c, &t).await;
        subscribe(&mut c, &t).await;
        c.type_text(&t, "echo fine-$((40+2))\r").await;
        c.wait_data(&t, "fine-42", SHELL_TIMEOUT).await;
        drop(c);
        d.stop();

        // The valid prefixes were written back clean: the next start says nothing.
        let d = Daemon::on_home(home, &[]).start();
        assert!(!d.stderr().contains("WARN ahpty::store"), "{}", d.stderr());
        d.stop();
    }
);

spec!(
    without_persistence_nothing_is_written_and_serverseq_follows_the_clock,
    async {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        let before = ahpty::store::clock_seq_base();
        let d = Daemon::on_home(home, &["--no-persist"]).start();
        let after = ahpty::store::clock_seq_base();
        let (mut c, init) = Raw::connect_init(&d.url(), "np", &[]).await;
        let seq = init["serverSeq"].as_u64().unwrap();
        assert!(
            (before..=after).contains(&seq),
            "{seq} not between {before} and {after}"
        );
        assert!(seq < (1 << 53));
        let t = term_uri("np");
        create(&mut c, &t).await;
        subscribe(&mut c, &t).await;
        c.type_text(&t, "echo np-$((40+2))\r").await;
        c.wait_data(&t, "np-42", SHELL_TIMEOUT).await;
        drop(c);
        d.stop();
        assert!(!home.join(".state").exists());
        assert!(!home.join(".local").exists());
    }
);

spec!(
    a_second_daemon_on_the_same_state_directory_is_refused,
    async {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        let d = Daemon::on_home(home, &[]).start();
        let args = ["--listen", "127.0.0.1:0", "--no-auth", "--no-socket"];
        let cmd = Daemon::bare().args(&args).home_at(home).command();
        let out = run_cli(cmd, Duration::from_secs(20));
        assert_eq!(out.code, Some(1), "{out:?}");
        let dir = state_dir(home).display().to_string();
        let err = out.stderr.trim();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(&dir)
                && err.contains(&format!("pid {}", d.pid()))
                && err.contains("--state-dir")
                && err.contains("--no-persist"),
            "{err}"
        );
        d.stop();
    }
);

spec!(
    a_long_transcript_stays_within_its_bound_and_the_whole_state_comes_back,
    async {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        let state = tempfile::tempdir().unwrap();
        let dir = state.path().join("state");
        let cap = 8192;
        let cap_arg = cap.to_string();
        let args = [
            "--state-dir",
            dir.to_str().unwrap(),
            "--scrollback-bytes",
            &cap_arg,
        ];
        let d = Daemon::on_home(home, &args).start();
        let (mut c, _) = Raw::connect_init(&d.url(), "bound", &[]).await;
        let t = term_uri("bound");
        let claim = json!({"kind": "client", "clientId": c.client_id});
        let cwd = home.to_str().unwrap();
        let r = c
            .request(
                "createTerminal",
                json!({"channel": t, "claim": claim, "cwd": cwd}),
            )
            .await;
        assert!(r.get("error").is_none(), "{r}");
        subscribe(&mut c, &t).await;
        c.dispatch(
            &t,
            json!({"type": "terminal/titleChanged", "title": "renamed"}),
        )
        .await;
        c.dispatch(
            &t,
            json!({"type": "terminal/resized", "cols": 100, "rows": 30}),
        )
        .await;
        // About 700 KB of output, then the shell exits with status 3.
        c.type_text(
        &t,
        "i=0; while [ $i -lt 10000 ]; do i=$((i+1)); echo \"line $i of a long build log, padded \
         to about seventy bytes\"; done; exit 3\r",
    )
    .await;
        c.wait_envelope("the exit", SHELL_TIMEOUT * 4, |e| {
            e["channel"] == t.as_str() && e["action"]["type"] == "terminal/exited"
        })
        .await;
        let output = c.data(&t).len();
        assert!(output > 600_000, "only {output} bytes of output");
        let before = subscribe(&mut c, &t).await["state"].clone();
        assert_eq!(before["lifecycle"]["exitCode"], 3, "{before}");
        assert_eq!(before["title"], "renamed");
        drop(c);
        d.stop();

        // Checkpoint (≤ the scrollback, as JSON: `\r\n` takes 4 characters) + records until the
        // next one is due + one envelope (≤ 64 KiB).
        let files = logs_in(&dir);
        assert_eq!(files.len(), 1, "{files:?}");
        let len = std::fs::metadata(&files[0]).unwrap().len() as usize;
        let bound = 2 * cap + 4096 + ahpty::host::compact_after(cap) + 64 * 1024;
        eprintln!("{output} bytes of output, a transcript of {len} bytes (bound {bound})");
        assert!(len <= bound, "transcript of {len} bytes, bound {bound}");
        assert!(
            !home.join(".state").exists(),
            "--state-dir was not used alone"
        );

        let d = Daemon::on_home(home, &args).start();
        let (mut c, init) = Raw::connect_init(&d.url(), "bound", &[ROOT]).await;
        let row = root_row(&init, &t).expect("restored");
        assert_eq!(row["lifecycle"]["exitCode"], 3, "{row}");
        let after = subscribe(&mut c, &t).await["state"].clone();
        // The terminal model is not persisted: the restored snapshot is the live one without its
        // synthesized prefix (docs/protocol.md, "Terminals restored after a restart").
        let mut expected = before.clone();
        if let Some(parts) = expected["content"].as_array_mut() {
            parts.retain(|p| {
                !p["value"]
                    .as_str()
                    .is_some_and(|v| v.starts_with("\x1b[?1049l\x1b[r\x1b[?6l"))
            });
        }
        assert_ne!(
            expected, before,
            "the live snapshot had no synthesized prefix"
        );
        assert_eq!(after, expected, "the restored state differs");
        assert!(state_text(&after).contains("line 10000 of"));
        drop(c);
        d.stop();
    }
);
