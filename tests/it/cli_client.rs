//! The client subcommands as a user runs them: the `ahpty` binary against a real daemon found
//! through its default socket (each daemon has a private `XDG_RUNTIME_DIR`), with an official
//! `ahp` client on the side to set terminals up and to see what reached them.

use crate::support::*;
use ahp::ahp_types::actions::StateAction;
use serde_json::{json, Value};

fn assert_one_line(what: &str, out: &CliOutput) {
    assert_eq!(
        out.stderr.lines().count(),
        1,
        "{what}: stderr must be exactly one line: {out:?}"
    );
    assert!(out.stderr.starts_with("ahpty: "), "{what}: {out:?}");
}

spec!(
    without_a_daemon_each_client_subcommand_says_so_in_one_line_and_exits_2,
    {
        let home = tempfile::tempdir().unwrap();
        let rt = runtime_dir(home.path());
        let socket = rt.join("ahpty").join("ahpty.sock");
        let commands: [&[&str]; 7] = [
            &["ls"],
            &["attach", "1"],
            &["new"],
            &["send", "1", "x"],
            &["kill", "1"],
            &["run", "--", "true"],
            &["logs", "1"],
        ];
        for args in commands {
            let mut cmd = cli_command(home.path(), args);
            cmd.env("XDG_RUNTIME_DIR", &rt);
            let out = run_cli(cmd, CLI_TIMEOUT);
            assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
            assert_one_line(&format!("{args:?}"), &out);
            assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
            for needle in [
                "no ahpty daemon is running",
                &socket.display().to_string(),
                "ahpty serve",
            ] {
                assert!(
                    out.stderr.contains(needle),
                    "{args:?}: {needle:?} missing: {out:?}"
                );
            }
        }
        // A URL nobody listens on: the same, naming the URL.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cmd = cli_command(home.path(), &["ls"]);
        cmd.env(
            "AHPTY_URL",
            format!("ws://127.0.0.1:{port}?tkn=0123456789abcdef0123"),
        );
        let out = run_cli(cmd, CLI_TIMEOUT);
        assert_eq!(out.code, Some(2), "{out:?}");
        assert_one_line("AHPTY_URL", &out);
        assert!(
            out.stderr
                .contains(&format!("nothing listens at ws://127.0.0.1:{port}")),
            "{out:?}"
        );
        assert!(
            !out.stderr.contains("0123456789abcdef0123"),
            "the token must not be shown: {out:?}"
        );
    }
);

spec!(
    ls_json_shape_and_selection_by_number_title_and_prefix,
    async {
        let d = Daemon::start();
        let mut agent = Ahp::connect(&d.url(), "agent", &[]).await;
        let alpha = term_uri("alpha");
        let one = term_uri("t-one");
        let two = term_uri("t-two");
        for (uri, name) in [(&alpha, "alpha"), (&one, "twin"), (&two, "twin")] {
            agent
                .create_terminal(uri, json!({"name": name, "cwd": "/tmp"}))
                .await
                .expect("create");
            agent.subscribe(uri).await.expect("subscribe");
        }
        let rows = ls_json(&d).await;
        assert_eq!(rows.len(), 3, "{rows:?}");
        let mut last_index = 0;
        for (row, (uri, title)) in
            rows.iter()
                .zip([(&alpha, "alpha"), (&one, "twin"), (&two, "twin")])
        {
            let index = row["index"].as_u64().expect("index");
            assert!(
                index > last_index,
                "indexes increase in creation order: {rows:?}"
            );
            last_index = index;
            assert_eq!(row["uri"], uri.as_str());
            assert_eq!(row["title"], title);
            assert_eq!(row["status"], "running");
            assert_eq!(row["exitCode"], Value::Null);
            assert_eq!(row["holder"], "agent");
            assert_eq!(row["holderConnected"], true);
            assert_eq!(row["claim"], json!({"kind": "client", "clientId": "agent"}));
            assert_eq!(row["cwd"], "/tmp");
            assert_eq!(
                (row["cols"].as_i64(), row["rows"].as_i64()),
                (Some(80), Some(24))
            );
            assert!(
                row["createdAt"].as_i64().unwrap() > 1_600_000_000_000,
                "{row}"
            );
            assert!(row["ageSeconds"].as_i64().unwrap() >= 0, "{row}");
            assert!(row["commandDetection"].is_boolean(), "{row}");
            assert_eq!(row["restored"], false, "{row}");
            let keys: Vec<&String> = row.as_object().unwrap().keys().collect();
            assert_eq!(keys.len(), 15, "{keys:?}");
        }
        let table = cli(d.cli(&["ls"])).await;
        assert_eq!(table.code, Some(0));
        assert!(table.stdout.starts_with("#  TITLE"), "{table:?}");
        assert_eq!(table.stdout.lines().count(), 4, "{table:?}");

        // Each way of naming a terminal reaches exactly that one.
        let two_index = rows[2]["index"].as_u64().unwrap().to_string();
        let cases = [
            (two_index.as_str(), &two),
            ("alpha", &alpha),
            ("alp", &alpha),
            ("t-o", &one),
            (one.as_str(), &one),
        ];
        for (i, (query, uri)) in cases.iter().enumerate() {
            let mark = format!("mark-{i}");
            let out = cli(d.cli(&["send", query, &mark])).await;
            assert_eq!(out.code, Some(0), "send {query}: {out:?}");
            let (u, m) = (uri.to_string(), mark.clone());
            agent
                .wait_for(&format!("{mark} typed into {uri}"), RPC_TIMEOUT, |log| {
                    log.iter().any(|e| {
                        e.channel == u
                            && e.origin
                                .as_ref()
                                .is_some_and(|o| o.client_id == "ahpty-cli")
                            && matches!(&e.action, StateAction::TerminalInput(x) if x.data == m)
                    })
                })
                .await;
            let elsewhere = agent.log.iter().any(|e| {
                e.channel != **uri
                    && matches!(&e.action, StateAction::TerminalInput(x) if x.data == mark)
            });
            assert!(!elsewhere, "{mark} reached another terminal than {uri}");
        }

        let out = cli(d.cli(&["send", "twin", "x"])).await;
        assert_eq!(out.code, Some(1), "{out:?}");
        assert_one_line("ambiguous", &out);
        assert!(
            out.stderr.contains("\"twin\" matches 2 terminals"),
            "{out:?}"
        );
        let out = cli(d.cli(&["kill", "nope"])).await;
        assert_eq!(out.code, Some(1), "{out:?}");
        assert_one_line("no match", &out);
        assert!(
            out.stderr.contains("no terminal matches \"nope\""),
            "{out:?}"
        );
        assert_eq!(
            ls_json(&d).await.len(),
            3,
            "a failed selection kills nothing"
        );

        // kill: gone from the list.
        let out = cli(d.cli(&["kill", "alpha"])).await;
        assert_eq!(out.code, Some(0), "{out:?}");
        let left: Vec<Value> = ls_json(&d)
            .await
            .into_iter()
            .map(|r| r["uri"].clone())
            .collect();
        assert_eq!(left, vec![json!(one), json!(two)]);
    }
);

spec!(
    run_prints_only_the_output_and_exits_with_the_status,
    async {
        let d = Daemon::start();
        let simple = cli(d.cli(&["run", "--", "sh", "-c", "echo x; exit 3"]));
        let args = [
            "a b",
            "$HOME",
            "it's",
            "q\"uote",
            "back\\slash",
            "*",
            "",
            "--flag",
            "é ✓",
            "$(id)",
            "`id`",
            "; exit 9",
        ];
        let mut argv = vec!["run", "--", "printf", "[%s]\\n"];
        argv.extend(args);
        let exact = cli(d.cli(&argv));
        let signalled = cli(d.cli(&["run", "--", "sh", "-c", "kill -TERM $$"]));
        let missing = cli(d.cli(&["run", "--", "no-such-program-here"]));
        let (simple, exact, signalled, missing) = tokio::join!(simple, exact, signalled, missing);

        assert_eq!(simple.code, Some(3), "{simple:?}");
        assert_eq!(simple.stdout, "x\n", "{simple:?}");
        assert_eq!(simple.stderr, "", "{simple:?}");

        assert_eq!(exact.code, Some(0), "{exact:?}");
        let want: String = args.iter().map(|a| format!("[{a}]\n")).collect();
        assert_eq!(exact.stdout, want, "{exact:?}");

        assert_eq!(signalled.code, Some(128 + 15), "{signalled:?}");
        assert_eq!(missing.code, Some(127), "{missing:?}");
        assert!(
            missing
                .stdout
                .contains("no-such-program-here: command not found"),
            "{missing:?}"
        );

        // Disposed afterwards…
        assert_eq!(ls_json(&d).await, Vec::<Value>::new());
        // …unless --keep: then the terminal stays, at its shell.
        let kept = cli(d.cli(&["run", "--keep", "--cwd", "/tmp", "--", "pwd"])).await;
        assert_eq!(
            (kept.code, kept.stdout.as_str()),
            (Some(0), "/tmp\n"),
            "{kept:?}"
        );
        let rows = ls_json(&d).await;
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0]["status"], "running");
        assert_eq!(rows[0]["title"], "pwd");
    }
);

spec!(
    logs_plain_is_the_text_without_escapes_and_follow_ends_at_exit,
    async {
        let d = Daemon::start();
        let (mut agent, t) = agent_with_terminal(&d, "colour").await;
        agent
            .type_text(
                &t,
                "printf '\\033[1;31mred\\033[0m and \\033[38;5;42mgreen\\033[m %s\\n' done\r",
            )
            .await;
        agent
            .wait_data(&t, "\x1b[38;5;42mgreen\x1b[m done", SHELL_TIMEOUT)
            .await;

        let raw = cli(d.cli(&["logs", &t])).await;
        assert_eq!(raw.code, Some(0), "{raw:?}");
        assert!(raw.stdout.contains("\x1b[1;31mred\x1b[0m and"), "{raw:?}");
        let plain = cli(d.cli(&["logs", &t, "--plain"])).await;
        assert_eq!(plain.code, Some(0), "{plain:?}");
        assert!(
            !plain.stdout.contains('\x1b') && !plain.stdout.contains('\r'),
            "{plain:?}"
        );
        // The output follows its command line directly: bash (≥ 5.1) writes `ESC[?2004l CR`
        // after the line it read, and a CR at the start of a line makes no blank line. The last
        // copy of the command line is bash's own: the tty may have echoed it once before, when
        // it was typed ahead of the prompt.
        let lines: Vec<&str> = plain.stdout.lines().collect();
        let typed = lines
            .iter()
            .rposition(|l| l.ends_with("%s\\n' done"))
            .unwrap_or_else(|| panic!("no command line in {plain:?}"));
        assert_eq!(
            lines.get(typed + 1),
            Some(&"red and green done"),
            "{plain:?}"
        );

        // --follow: the retained output, then live output until the terminal exits.
        let follower = LiveCli::spawn(d.cli(&["logs", &t, "--follow", "--plain"]));
        follower
            .wait_for("red and green done", false, CLI_TIMEOUT)
            .await;
        agent.type_text(&t, "echo live-$((40+2)); exit 4\r").await;
        let out = follower.finish(CLI_TIMEOUT).await;
        assert_eq!(out.code, Some(0), "{out:?}");
        assert!(out.stdout.contains("\nlive-42\n"), "{out:?}");

        // Input to an exited terminal is rejected, in one line.
        agent.wait_exited(&t, SHELL_TIMEOUT).await;
        let out = cli(d.cli(&["send", &t, "x", "--enter"])).await;
        assert_eq!(out.code, Some(1), "{out:?}");
        assert_one_line("send to exited", &out);
        assert!(out.stderr.contains("terminal has exited"), "{out:?}");
    }
);

spec!(
    attach_take_refused_while_the_holder_is_connected_allowed_once_it_is_gone,
    async {
        let d = Daemon::start();
        let mut agent = Ahp::connect(&d.url(), "agent", &[]).await;
        let busy = term_uri("busy");
        let left = term_uri("left");
        for t in [&busy, &left] {
            agent.create_terminal(t, json!({})).await.expect("create");
        }
        agent.subscribe(&busy).await.expect("subscribe");

        // The holder is connected: refused, the holder named, attached as a viewer (pipe mode:
        // stdin is not a terminal) until the terminal exits with its code.
        let viewer = LiveCli::spawn(d.cli(&["attach", &busy, "--take"]));
        viewer
            .wait_for("cannot take the claim", true, CLI_TIMEOUT)
            .await;
        assert!(viewer.stderr().contains("\"agent\""), "{}", viewer.stderr());
        agent.ready(&busy).await;
        agent
            .type_text(&busy, "echo viewer-sees-$((6*7)); exit 5\r")
            .await;
        let out = viewer.finish(CLI_TIMEOUT).await;
        assert_eq!(out.code, Some(5), "{out:?}");
        assert!(out.stdout.contains("viewer-sees-42"), "{out:?}");
        assert!(
            out.stderr.contains(&format!("{busy} exited with code 5")),
            "{out:?}"
        );
        let rows = ls_json(&d).await;
        let busy_row = rows.iter().find(|r| r["uri"] == busy.as_str()).unwrap();
        assert_eq!(busy_row["holder"], "agent", "{rows:?}");

        // The holder went away: any client may take the claim.
        let mut watch = Ahp::connect(&d.url(), "watch", &[]).await;
        watch.subscribe(&left).await.expect("subscribe");
        drop(agent);
        eventually("the agent to count as gone", RPC_TIMEOUT, async || {
            ls_json(&d)
                .await
                .iter()
                .any(|r| r["uri"] == left.as_str() && r["holderConnected"] == false)
        })
        .await;
        let taker = LiveCli::spawn(d.cli(&["attach", &left, "--take"]));
        let l = left.clone();
        watch
            .wait_for("the CLI's claim", RPC_TIMEOUT, |log| {
                log.iter().any(|e| {
                    e.channel == l
                        && e.rejection_reason.is_none()
                        && matches!(&e.action, StateAction::TerminalClaimed(c)
                        if serde_json::to_value(&c.claim).unwrap()
                            == json!({"kind": "client", "clientId": "ahpty-cli"}))
                })
            })
            .await;
        let rows = ls_json(&d).await;
        let row = rows.iter().find(|r| r["uri"] == left.as_str()).unwrap();
        assert_eq!(row["holder"], "ahpty-cli", "{rows:?}");
        let out = cli(d.cli(&["send", &left, "exit 0", "--enter"])).await;
        assert_eq!(out.code, Some(0), "{out:?}");
        let out = taker.finish(CLI_TIMEOUT).await;
        assert_eq!(out.code, Some(0), "{out:?}");
        assert!(!out.stderr.contains("cannot take"), "{out:?}");
    }
);

spec!(attaching_a_terminal_to_itself_is_refused, async {
    let d = Daemon::start();
    let (mut agent, t) = agent_with_terminal(&d, "self").await;
    agent
        .type_text(
            &t,
            "\"$AHPTY_EXE\" attach \"$AHPTY_TERMINAL\" </dev/null; echo self-rc=$?\r",
        )
        .await;
    agent.wait_data(&t, "self-rc=1", SHELL_TIMEOUT).await;
    assert!(
        agent.data(&t).contains("refusing to attach"),
        "{}",
        tail(&agent.data(&t), 600)
    );
});

spec!(
    run_stops_when_its_stdout_is_closed_in_the_middle_of_a_flood,
    {
        use std::io::Read;
        let d = Daemon::start();
        let mut child = d.cli(&["run", "--", "yes", "flood"]).spawn().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let mut first = [0u8; 6];
        stdout.read_exact(&mut first).unwrap();
        assert_eq!(&first, b"flood\n");
        drop(stdout);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(child.wait()));
        let status = rx
            .recv_timeout(CLI_TIMEOUT)
            .expect("run kept going with its stdout closed")
            .unwrap();
        assert_eq!(status.code(), Some(128 + 13), "SIGPIPE's status");
        let out = run_cli(d.cli(&["ls", "--json"]), CLI_TIMEOUT);
        assert_eq!(
            out.stdout.trim(),
            "[]",
            "the flooding terminal was disposed: {out:?}"
        );
    }
);

spec!(
    serve_listens_on_the_default_socket_unless_moved_or_turned_off,
    {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        let d = Daemon::start();
        let meta = std::fs::symlink_metadata(d.socket()).expect("the default socket exists");
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let dir = std::fs::metadata(d.socket().parent().unwrap()).unwrap();
        assert_eq!(dir.permissions().mode() & 0o777, 0o700);

        // A second daemon on the same default socket: refused, saying how to run one anyway
        // (without transcripts, so that the socket is what it runs into, not the state
        // directory).
        let second = run_cli(
            Daemon::bare()
                .args(&["--listen", "127.0.0.1:0", "--no-auth", "--no-persist"])
                .home_of(&d)
                .command(),
            CLI_TIMEOUT,
        );
        assert_eq!(second.code, Some(1), "{second:?}");
        assert!(second.stderr.contains("is in use"), "{second:?}");
        assert!(
            second.stderr.contains("--socket PATH or --no-socket"),
            "{second:?}"
        );

        // --socket moves it (clients then name it), --no-socket turns it off.
        let elsewhere = d.home().join("other.sock");
        let moved = Daemon::start_with(&["--socket", elsewhere.to_str().unwrap()]);
        assert!(
            !moved.socket().exists(),
            "--socket PATH replaces the default socket"
        );
        let mut ls = moved.cli(&["ls"]);
        ls.env("AHPTY_URL", format!("unix:{}", elsewhere.display()));
        assert_eq!(run_cli(ls, CLI_TIMEOUT).code, Some(0));
        let off = Daemon::start_with(&["--no-socket"]);
        assert!(!off.socket().exists());
        assert_eq!(run_cli(off.cli(&["ls"]), CLI_TIMEOUT).code, Some(2));
    }
);

// A program sets its title (OSC 0) to text with a right-to-left override, a bidi isolate and
// a right-to-left mark (the daemon keeps them; it drops C0 and C1 controls from titles
// itself): `ahpty ls` prints none of them (each shows as a space); `--json` keeps the title
// exact.
spec!(ls_prints_no_control_or_bidi_characters_from_titles, async {
    let d = Daemon::start();
    let (mut agent, t) = agent_with_terminal(&d, "bidi").await;
    agent
        .type_text(
            &t,
            "printf '\\033]0;evil\\342\\200\\256gpj.exe\\342\\201\\246x\\342\\200\\217y\\007'; \
             echo set-$((4*4))\r",
        )
        .await;
    agent.wait_data(&t, "set-16", SHELL_TIMEOUT).await;
    let title = "evil\u{202e}gpj.exe\u{2066}x\u{200f}y";
    let rows = eventually("the title reaches ls --json", RPC_TIMEOUT, async || {
        let rows = ls_json(&d).await;
        (rows.iter().any(|r| r["title"] == title)).then_some(rows)
    })
    .await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let table = cli(d.cli(&["ls"])).await;
    assert_eq!(table.code, Some(0), "{table:?}");
    assert!(
        table.stdout.contains("evil gpj.exe x y"),
        "the title, its bidi controls as spaces: {:?}",
        table.stdout
    );
    let bidi = |c: char| matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    for c in table.stdout.chars() {
        assert!(
            c == '\n' || !(c.is_control() || bidi(c)),
            "ls printed {c:?}: {:?}",
            table.stdout
        );
    }
});

// The README's bounds for client libraries' message limits (Python websockets' `max_size`):
// with the default settings, the snapshot of a terminal whose retained output is all control
// characters (six bytes each once JSON-escaped) is well over the 1 MiB Python's websockets
// accepts by default, and once the screen model caught up with the flood under 6.5 MiB (right
// after it, with the model behind, it is larger: no bound is asserted for that).
spec!(
    the_largest_default_snapshot_is_within_the_documented_bound,
    async {
        let d = Daemon::start();
        let (mut raw, _) = Raw::connect_init(&d.url(), "size", &[]).await;
        let t = term_uri("size");
        raw.create_terminal(&t).await;
        raw.subscribe(&t).await;
        raw.type_text(
            &t,
            "stty -echo; yes $'\\001\\002\\003\\004\\006\\016\\017\\020' | head -c 3000000; \
         echo; echo filled-$((5*5))\r",
        )
        .await;
        raw.wait_data(&t, "filled-25", SHELL_TIMEOUT).await;
        raw.forget();
        let mut sizes = Vec::new();
        let at_rest = eventually(
            "the snapshot shrinks to its bound at rest",
            SHELL_TIMEOUT,
            async || {
                let r = raw.request("subscribe", json!({ "channel": t })).await;
                let bytes = serde_json::to_string(&r).unwrap().len();
                raw.forget();
                sizes.push(bytes);
                (bytes <= (6 << 20) + (1 << 19)).then_some(bytes)
            },
        )
        .await;
        eprintln!("snapshot messages: {sizes:?} bytes");
        assert!(at_rest > 4 << 20, "not control-dense: {sizes:?}");
    }
);
