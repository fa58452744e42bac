//! The state directory is opened safely and what it holds is trusted no more than the wire:
//! a directory others can write to (or one under such a directory) is refused with what to
//! do; symbolic links planted for `daemon.lock`, `server-seq.tmp`, `KEY.log.tmp` or `KEY.log`
//! are never followed (the file they point to is untouched, and the daemon says so); a
//! crafted transcript comes back sanitised (title, part count) or is set aside (a URI
//! `createTerminal` would refuse), and a restored snapshot stays within the documented bound.

use std::os::unix::fs::{symlink, DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::*;
use serde_json::{json, Value};

/// The default state directory of `home`, created (with `terminals/`) mode 0700.
fn state_dir(home: &Path) -> PathBuf {
    let dir = home.join(".state").join("ahpty");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir.join("terminals"))
        .unwrap();
    dir
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn is_link(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
}

fn is_file(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_file())
}

/// The one `.log` in `dir/terminals`, once there is one (the writer's batch window).
fn only_log(dir: &Path) -> PathBuf {
    eventually_blocking("one transcript", RPC_TIMEOUT, || {
        let logs: Vec<PathBuf> = std::fs::read_dir(dir.join("terminals"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        match logs.as_slice() {
            [one] => Ok(one.clone()),
            _ => Err(format!("{logs:?}")),
        }
    })
}

fn corrupt_entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir.join("corrupt"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

spec!(
    a_state_directory_others_can_write_to_is_refused_with_what_to_do,
    {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        // Group-writable, named by --state-dir: the daemon stops, in one line, saying chmod.
        let dir = home.join("state");
        std::fs::create_dir(&dir).unwrap();
        chmod(&dir, 0o770);
        let arg = dir.display().to_string();
        let (code, err) = Daemon::on_home(home, &["--state-dir", &arg]).refused();
        assert_eq!(code, Some(1), "{err}");
        let err = err.trim();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(&arg)
                && err.contains("writable by its group")
                && err.contains(&format!("chmod 700 {arg}")),
            "{err}"
        );
        assert!(!dir.join("daemon.lock").exists());

        // Private, but inside a directory anyone can write to (no sticky bit): refused too.
        let open = home.join("open");
        let inner = open.join("state");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&inner)
            .unwrap();
        chmod(&open, 0o777);
        let arg = inner.display().to_string();
        let (code, err) = Daemon::on_home(home, &["--state-dir", &arg]).refused();
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains(&format!("chmod go-w {}", open.display()))
                && err.contains("without the sticky bit"),
            "{err}"
        );
        // With the sticky bit (as /tmp has), it is accepted.
        chmod(&open, 0o1777);
        let d = Daemon::on_home(home, &["--state-dir", &arg]).start();
        d.stop();
        assert!(is_file(&inner.join("daemon.lock")));

        // The default directory, group-writable: a warning saying chmod, and no transcripts.
        let default = state_dir(home);
        chmod(&default, 0o770);
        let d = Daemon::on_home(home, &[]).start();
        let warned = d.wait_log("transcripts are not kept");
        let _ = warned;
        let log = d.stop();
        assert!(log.contains("chmod 700"), "{log}");
        assert!(!default.join("daemon.lock").exists());
    }
);

spec!(
    links_planted_in_the_state_directory_are_never_followed,
    async {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        let dir = state_dir(home);
        let victim = home.join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let untouched = |what: &str| {
            assert_eq!(
                std::fs::read_to_string(&victim).unwrap(),
                "precious\n",
                "{what}: the file a planted link points to was written"
            );
        };
        symlink(&victim, dir.join("daemon.lock")).unwrap();
        symlink(&victim, dir.join("server-seq.tmp")).unwrap();

        // Start: neither link is followed; each is reported.
        let d = Daemon::on_home(home, &["--scrollback-bytes", "4096"]).start();
        untouched("daemon.lock, server-seq.tmp");
        d.wait_log("daemon.lock: it is a symbolic link");
        d.wait_log("server-seq.tmp was a symbolic link");
        assert!(is_file(&dir.join("daemon.lock")));
        assert!(is_file(&dir.join("server-seq")));
        assert!(corrupt_entries(&dir)
            .iter()
            .any(|n| n.starts_with("daemon.lock.")));

        // A checkpoint while a link waits at KEY.log.tmp: the link is replaced, not followed.
        let (mut c, _) = Raw::connect_init(&d.url(), "links", &[]).await;
        let t = term_uri("links");
        c.create_terminal(&t).await;
        c.subscribe(&t).await;
        let log = only_log(&dir);
        let tmp = log.with_extension("log.tmp");
        symlink(&victim, &tmp).unwrap();
        // More than 2 × 4096 + 64 KiB of records: the next change is a checkpoint.
        c.type_text(
            &t,
            "head -c 150000 /dev/zero | tr '\\0' x; echo; echo flood-$((6*7))\r",
        )
        .await;
        c.wait_data(&t, "flood-42", SHELL_TIMEOUT).await;
        eventually_blocking("the checkpoint is renamed into place", RPC_TIMEOUT, || {
            std::fs::symlink_metadata(&tmp).is_err()
        });
        untouched("KEY.log.tmp");
        assert!(is_file(&log), "{} is not a regular file", log.display());
        d.wait_log(&format!("{}.tmp was a symbolic link", log.display()));
        drop(c);
        d.stop();

        // At start, a link named like a transcript is set aside, not read.
        let planted = dir
            .join("terminals")
            .join("0123456789abcdef0123456789abcdef.log");
        symlink(&victim, &planted).unwrap();
        let d = Daemon::on_home(home, &[]).start();
        d.wait_log(&format!("{}: it is a symbolic link", planted.display()));
        assert!(!is_link(&planted));
        untouched("a planted KEY.log at start");

        // A restored terminal's KEY.log swapped for a link: its next record is not written
        // through it; the file is rewritten in place of the link from the terminal's state.
        std::fs::remove_file(&log).unwrap();
        symlink(&victim, &log).unwrap();
        let (mut c, _) = Raw::connect_init(&d.url(), "links2", &[]).await;
        c.subscribe(&t).await;
        c.dispatch(
            &t,
            json!({"type": "terminal/titleChanged", "title": "renamed"}),
        )
        .await;
        eventually_blocking(
            "the transcript is rewritten",
            Duration::from_secs(10),
            || is_file(&log) || std::fs::read_to_string(&victim).unwrap() != "precious\n",
        );
        untouched("a restored terminal's KEY.log");
        d.wait_log(&format!(
            "cannot open transcript {}: it is a symbolic link",
            log.display()
        ));
        drop(c);
        d.stop();
        untouched("the end");
    }
);

/// Writes a transcript of `meta` (JSON of `ahpty::store::Meta`) into `dir/terminals`.
fn plant_transcript(dir: &Path, key: &str, meta: Value) -> PathBuf {
    let meta: ahpty::store::Meta = serde_json::from_value(meta).unwrap();
    let path = dir.join("terminals").join(format!("{key}.log"));
    let mut f = std::fs::File::create(&path).unwrap();
    ahpty::store::format::Checkpoint::new(&meta)
        .write_to(&mut f)
        .unwrap();
    path
}

fn meta(uri: &str, title: &str, content: Vec<Value>) -> Value {
    json!({
        "uri": uri,
        "createdAtMs": 1_700_000_000_000i64,
        "holder": "crafted",
        "renamedByClient": false,
        "state": {
            "title": title,
            "cols": 80,
            "rows": 24,
            "content": content,
            "lifecycle": {"status": "exited", "exitCode": 0},
            "claim": {"kind": "client", "clientId": "crafted"},
        }
    })
}

/// Most bytes of a restored snapshot's JSON beyond its text: [`MAX_RESTORED_PARTS`] parts of
/// about 0.5 KiB each, plus the rest of the state (docs/store.md, "After a restart").
const SNAPSHOT_OVERHEAD: usize = 1024 * 512 + 64 * 1024;

spec!(
    a_crafted_transcript_is_restored_sanitised_or_set_aside,
    async {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        let dir = state_dir(home);
        let reserved = "ahp-session:/not-a-terminal";
        let long = format!("ahp-terminal:/{}", "x".repeat(3000));
        plant_transcript(&dir, &"a".repeat(32), meta(reserved, "r", vec![]));
        plant_transcript(&dir, &"b".repeat(32), meta(&long, "l", vec![]));
        let titled = "ahp-terminal:/crafted-title";
        let evil = "\u{1b}]0;owned\u{7}\u{1b}[31mred\u{9b}2J\r\nnext";
        plant_transcript(&dir, &"c".repeat(32), meta(titled, evil, vec![]));
        let parted = "ahp-terminal:/crafted-parts";
        let parts: Vec<Value> = (0..100_000)
            .map(|i| {
                json!({"type": "command", "commandId": format!("c{i}"), "commandLine": "",
                    "output": "x", "timestamp": 0, "isComplete": true, "exitCode": 0,
                    "durationMs": 1})
            })
            .collect();
        plant_transcript(&dir, &"d".repeat(32), meta(parted, "p", parts));
        // Command lines count against the scrollback too: one huge one (cut to what a live
        // OSC 633;E can carry), and many running commands with long ones (a restored terminal
        // has no process, so they are finished and trimmed like any other).
        let lined = "ahp-terminal:/crafted-line";
        let one = vec![json!({"type": "command", "commandId": "c", "output": "out",
            "commandLine": "y".repeat(16 << 20), "timestamp": 0, "isComplete": false})];
        plant_transcript(&dir, &"e".repeat(32), meta(lined, "e", one));
        let running = "ahp-terminal:/crafted-running";
        let many: Vec<Value> = (0..300)
            .map(|i| {
                json!({"type": "command", "commandId": format!("r{i}"), "output": "o",
                    "commandLine": "z".repeat(60_000), "timestamp": 0, "isComplete": false})
            })
            .collect();
        plant_transcript(&dir, &"f".repeat(32), meta(running, "f", many));

        let d = Daemon::on_home(home, &[]).start();
        let (mut c, init) = Raw::connect_init(&d.url(), "crafted", &[ROOT]).await;
        let rows: Vec<String> = init["snapshots"][0]["state"]["terminals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["resource"].as_str().unwrap().to_string())
            .collect();
        assert!(
            rows.contains(&titled.to_string()) && rows.contains(&parted.to_string()),
            "{rows:?}"
        );
        assert!(
            !rows.iter().any(|r| r == reserved || r == &long),
            "{rows:?}"
        );
        d.wait_log("its URI is not one createTerminal accepts");
        let aside = corrupt_entries(&dir);
        assert_eq!(aside.len(), 2, "{aside:?}");
        let log = d.stderr();
        assert_eq!(
            log.matches("so its terminal is not restored; set aside as")
                .count(),
            2,
            "{log}"
        );

        let snap = c.subscribe(titled).await;
        let title = snap["state"]["title"].as_str().unwrap().to_string();
        assert!(
            !title
                .chars()
                .any(|ch| ch < ' ' || ('\u{7f}'..='\u{9f}').contains(&ch)),
            "{title:?}"
        );
        assert!(title.contains("red") && title.contains("next"), "{title:?}");
        assert!(log.contains("its title had control characters"), "{log}");

        let r = c.request("subscribe", json!({"channel": parted})).await;
        let size = r.to_string().len();
        let snap = &r["result"]["snapshot"];
        let content = snap["state"]["content"].as_array().unwrap();
        let text = state_text(&snap["state"]);
        assert_eq!(text, "x".repeat(100_000), "no text is lost");
        assert!(content.len() <= 1024, "{} parts", content.len());
        assert!(
            size <= text.len() + SNAPSHOT_OVERHEAD,
            "a snapshot of {size} bytes for {} bytes of text",
            text.len()
        );

        // Within the scrollback (the default 1 MiB) plus one command line (at most
        // 1 MiB, the longest OSC the output framer holds), and `ahpty logs` reads them.
        for uri in [lined, running] {
            let r = c.request("subscribe", json!({"channel": uri})).await;
            let size = r.to_string().len();
            assert!(
                size <= (2 << 20) + SNAPSHOT_OVERHEAD,
                "{uri}: a snapshot of {size} bytes"
            );
            let logs = cli(d.cli(&["logs", "--url", &d.url(), uri, "--plain"])).await;
            assert_eq!(logs.code, Some(0), "{uri}: {}", logs.stderr);
        }
        assert!(log.contains("command line"), "{log}");

        // Every restored terminal can be disposed of.
        for uri in [titled, parted, lined, running] {
            let r = c.request("disposeTerminal", json!({"channel": uri})).await;
            assert!(r.get("error").is_none(), "{r}");
        }
        drop(c);
        d.stop();
    }
);
