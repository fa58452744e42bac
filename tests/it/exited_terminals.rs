//! Exited terminals — restored from transcripts after a restart, or whose shell exited — do
//! not lock out new ones and do not pile up: they never count toward `--max-terminals`, at
//! most `--max-exited-terminals` are kept (the one that exited first goes, with a log line),
//! `ahpty kill --exited` clears them, `ahpty new --name` takes over an exited terminal's name,
//! and `createTerminal` on an exited terminal's URI says it has exited and how to dispose of it.

use std::path::Path;

use crate::support::*;
use serde_json::{json, Value};

/// `ahpty serve` with `/bin/sh` (no shell integration) on `home`, where transcripts outlive
/// each daemon.
fn start(home: &Path, extra: &[&str]) -> Daemon {
    let mut args = vec!["--no-shell-integration"];
    args.extend_from_slice(extra);
    Daemon::builder()
        .shell("/bin/sh")
        .args(&args)
        .home_at(home)
        .start()
}

/// The URIs `ls --json` lists with `status`.
async fn listed(d: &Daemon, status: &str) -> Vec<String> {
    ls_json(d)
        .await
        .iter()
        .filter(|r| r["status"] == status)
        .map(|r| r["uri"].as_str().unwrap().to_string())
        .collect()
}

async fn create(raw: &mut Raw, uri: &str) -> Value {
    let claim = json!({"kind": "client", "clientId": raw.client_id});
    raw.request("createTerminal", json!({"channel": uri, "claim": claim}))
        .await
}

/// Makes the shell of `uri` exit and waits for its `terminal/exited`.
async fn exit_shell(raw: &mut Raw, uri: &str) {
    raw.subscribe(uri).await;
    raw.type_text(uri, "exit 3\r").await;
    let exited = |r: &Raw| {
        r.envelopes()
            .any(|e| e["channel"] == uri && e["action"]["type"] == "terminal/exited")
    };
    raw.wait_until(&format!("{uri} exited"), SHELL_TIMEOUT, exited)
        .await;
}

fn error_message(r: &Value) -> String {
    r.pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("not an error: {r}"))
        .to_string()
}

/// The `.log` transcripts under `home`'s state directory.
fn transcripts(home: &Path) -> usize {
    std::fs::read_dir(home.join(".state/ahpty/terminals"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
                .count()
        })
        .unwrap_or(0)
}

spec!(
    exited_terminals_restored_or_live_do_not_count_toward_max_terminals,
    async {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        let mut d = start(home, &["--max-terminals", "2"]);
        let (mut c, _) = Raw::connect_init(&d.url(), "limits", &[]).await;
        let r = create(&mut c, "ahp-terminal:/restored").await;
        assert!(r.get("result").is_some(), "{r}");
        d.terminate();

        let d = start(home, &["--max-terminals", "2"]);
        let (mut c, _) = Raw::connect_init(&d.url(), "limits", &[]).await;
        let r = create(&mut c, "ahp-terminal:/exits").await;
        assert!(r.get("result").is_some(), "{r}");
        exit_shell(&mut c, "ahp-terminal:/exits").await;
        assert_eq!(listed(&d, "exited").await.len(), 2);

        // Two exited terminals, and still room for two running ones.
        for uri in ["ahp-terminal:/run1", "ahp-terminal:/run2"] {
            let r = create(&mut c, uri).await;
            assert!(r.get("result").is_some(), "{uri} refused: {r}");
        }
        // The third running one is refused, saying how many run and what to do.
        let r = create(&mut c, "ahp-terminal:/run3").await;
        assert_eq!(Raw::code(&r), Some(-32603), "{r}");
        let msg = error_message(&r);
        eprintln!("{msg}");
        for needle in [
            "2 terminals are running",
            "--max-terminals (2)",
            "2 exited ones",
            "do not count",
            "ahpty kill",
        ] {
            assert!(msg.contains(needle), "{needle:?} missing from {msg:?}");
        }
    }
);

spec!(
    past_max_exited_terminals_only_the_newest_transcripts_come_back,
    async {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        let mut d = start(home, &[]);
        let (mut c, _) = Raw::connect_init(&d.url(), "many", &[]).await;
        let uris: Vec<String> = (0..5).map(|i| format!("ahp-terminal:/t{i}")).collect();
        for uri in &uris {
            let r = create(&mut c, uri).await;
            assert!(r.get("result").is_some(), "{r}");
        }
        d.terminate();
        assert_eq!(transcripts(home), 5);

        let d = start(home, &["--max-exited-terminals", "3"]);
        d.wait_log("over --max-exited-terminals");
        let log = d.stderr();
        assert!(
            log.contains("2 exited terminals restored from transcripts are over")
                && log.contains("ahp-terminal:/t0")
                && log.contains("ahp-terminal:/t1"),
            "{log}"
        );
        let mut kept = listed(&d, "exited").await;
        kept.sort();
        assert_eq!(kept, uris[2..].to_vec(), "the newest three come back");
        // The evicted ones' transcripts are deleted, so they stay gone.
        eventually(
            "the two oldest transcripts deleted",
            RPC_TIMEOUT,
            async || transcripts(home) == 3,
        )
        .await;
    }
);

spec!(
    past_max_exited_terminals_the_one_that_exited_first_is_disposed_of,
    async {
        let home = tempfile::tempdir().unwrap();
        let d = start(
            home.path(),
            &["--max-exited-terminals", "2", "--no-persist"],
        );
        let (mut c, _) = Raw::connect_init(&d.url(), "live", &[]).await;
        for uri in ["ahp-terminal:/a", "ahp-terminal:/b", "ahp-terminal:/c"] {
            let r = create(&mut c, uri).await;
            assert!(r.get("result").is_some(), "{r}");
        }
        // Exit order b, a, c: b exited first, so b goes (not a, created first).
        for uri in ["ahp-terminal:/b", "ahp-terminal:/a"] {
            exit_shell(&mut c, uri).await;
        }
        assert_eq!(listed(&d, "exited").await.len(), 2);
        exit_shell(&mut c, "ahp-terminal:/c").await;
        let mut left = eventually("b disposed of", RPC_TIMEOUT, async || {
            let l = listed(&d, "exited").await;
            (l.len() == 2).then_some(l)
        })
        .await;
        left.sort();
        assert_eq!(left, ["ahp-terminal:/a", "ahp-terminal:/c"]);
        d.wait_log("disposing of exited terminal");
        assert!(
            d.stderr()
                .lines()
                .any(|l| l.contains("disposing of exited terminal")
                    && l.contains("ahp-terminal:/b")
                    && l.contains("--max-exited-terminals (2)")),
            "{}",
            d.stderr()
        );
    }
);

spec!(
    kill_exited_lists_with_dry_run_and_then_disposes_of_them_all,
    async {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        let mut d = start(home, &[]);
        let (mut c, _) = Raw::connect_init(&d.url(), "clear", &[]).await;
        assert!(create(&mut c, "ahp-terminal:/old")
            .await
            .get("result")
            .is_some());
        d.terminate();

        let d = start(home, &[]);
        let (mut c, _) = Raw::connect_init(&d.url(), "clear", &[]).await;
        for uri in ["ahp-terminal:/done", "ahp-terminal:/busy"] {
            assert!(create(&mut c, uri).await.get("result").is_some());
        }
        exit_shell(&mut c, "ahp-terminal:/done").await;

        let out = cli(d.cli(&["kill", "--exited", "--dry-run"])).await;
        assert_eq!(out.code, Some(0), "{out:?}");
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(lines.len(), 2, "{out:?}");
        assert!(
            lines.iter().all(|l| l.starts_with("would dispose of "))
                && out.stdout.contains("ahp-terminal:/old")
                && out.stdout.contains("ahp-terminal:/done"),
            "{out:?}"
        );
        assert_eq!(listed(&d, "exited").await.len(), 2, "--dry-run keeps them");

        let out = cli(d.cli(&["kill", "--exited"])).await;
        assert_eq!(out.code, Some(0), "{out:?}");
        assert_eq!(out.stdout.lines().count(), 2, "{out:?}");
        assert!(
            out.stdout.lines().all(|l| l.starts_with("disposed of ")),
            "{out:?}"
        );
        assert!(listed(&d, "exited").await.is_empty());
        assert_eq!(listed(&d, "running").await, ["ahp-terminal:/busy"]);
        // Their transcripts are gone too: only the running terminal's is left.
        eventually("one transcript left", RPC_TIMEOUT, async || {
            transcripts(home) == 1
        })
        .await;

        // Nothing exited: nothing printed, success.
        let out = cli(d.cli(&["kill", "--exited"])).await;
        assert_eq!((out.code, out.stdout.as_str()), (Some(0), ""), "{out:?}");
    }
);

spec!(
    new_with_the_name_of_an_exited_terminal_takes_it_over,
    async {
        let home = tempfile::tempdir().unwrap();
        let d = start(home.path(), &["--no-persist"]);
        let out = cli(d.cli(&["new", "--name", "build"])).await;
        assert_eq!(out.code, Some(0), "{out:?}");
        let first = out.stdout.trim().to_string();
        let (mut c, _) = Raw::connect_init(&d.url(), "watch", &[]).await;
        exit_shell(&mut c, &first).await;

        let out = cli(d.cli(&["new", "--name", "build"])).await;
        assert_eq!(out.code, Some(0), "{out:?}");
        let second = out.stdout.trim().to_string();
        assert!(
            out.stderr.contains("disposed of exited terminal") && out.stderr.contains(&first),
            "{out:?}"
        );
        let rows = ls_json(&d).await;
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0]["uri"], second.as_str());
        assert_eq!(rows[0]["status"], "running");
        // The name selects it.
        let out = cli(d.cli(&["send", "build", "true", "--enter"])).await;
        assert_eq!(out.code, Some(0), "{out:?}");

        // A running namesake still refuses, and says it is running.
        let out = cli(d.cli(&["new", "--name", "build"])).await;
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(out.stderr.contains("is running"), "{out:?}");
    }
);

spec!(
    create_on_an_exited_terminals_uri_says_it_has_exited_and_how_to_dispose_of_it,
    async {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        let mut d = start(home, &[]);
        let (mut c, _) = Raw::connect_init(&d.url(), "agent", &[]).await;
        assert!(create(&mut c, "ahp-terminal:/agent-1")
            .await
            .get("result")
            .is_some());
        d.terminate();

        let d = start(home, &[]);
        let (mut c, _) = Raw::connect_init(&d.url(), "agent", &[]).await;
        let r = create(&mut c, "ahp-terminal:/agent-1").await;
        assert_eq!(Raw::code(&r), Some(-32010), "{r}");
        let msg = error_message(&r);
        eprintln!("{msg}");
        for needle in ["restored", "exited", "disposeTerminal", "`ahpty kill 1`"] {
            assert!(msg.contains(needle), "{needle:?} missing from {msg:?}");
        }

        // One that exited live says so as well; a running one says it runs.
        assert!(create(&mut c, "ahp-terminal:/agent-2")
            .await
            .get("result")
            .is_some());
        let r = create(&mut c, "ahp-terminal:/agent-2").await;
        assert!(error_message(&r).contains("it is running"), "{r}");
        exit_shell(&mut c, "ahp-terminal:/agent-2").await;
        let r = create(&mut c, "ahp-terminal:/agent-2").await;
        assert_eq!(Raw::code(&r), Some(-32010), "{r}");
        let msg = error_message(&r);
        assert!(
            msg.contains("has exited") && msg.contains("disposeTerminal"),
            "{msg}"
        );

        // However long the URI, the hint survives the 1 KiB clipping of error messages.
        let long = format!("ahp-terminal:/{}", "x".repeat(2000));
        assert!(create(&mut c, &long).await.get("result").is_some());
        exit_shell(&mut c, &long).await;
        let r = create(&mut c, &long).await;
        let msg = error_message(&r);
        assert!(
            msg.len() <= 1024 && msg.contains("disposeTerminal") && msg.contains("ahpty kill"),
            "{msg}"
        );

        // Once disposed of, the URI can be created again.
        let r = c
            .request(
                "disposeTerminal",
                json!({"channel": "ahp-terminal:/agent-1"}),
            )
            .await;
        assert!(r.get("result").is_some(), "{r}");
        assert!(create(&mut c, "ahp-terminal:/agent-1")
            .await
            .get("result")
            .is_some());
    }
);

spec!(kill_exited_usage_is_checked_and_documented, {
    let home = tempfile::tempdir().unwrap();
    for args in [
        &["kill", "--dry-run"][..],
        &["kill", "--dry-run", "3"],
        &["kill", "--exited", "3"],
        &["kill"],
    ] {
        let out = run_cli(cli_command(home.path(), args), CLI_TIMEOUT);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
    }
    let out = run_cli(cli_command(home.path(), &["kill", "--help"]), CLI_TIMEOUT);
    assert!(
        out.stdout.contains("--exited") && out.stdout.contains("--dry-run"),
        "{out:?}"
    );
    let out = run_cli(cli_command(home.path(), &["serve", "--help"]), CLI_TIMEOUT);
    assert!(out.stdout.contains("--max-exited-terminals"), "{out:?}");
});
