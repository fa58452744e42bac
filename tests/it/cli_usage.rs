//! The CLI as a new user meets it: names that stick, `run` taking stdin and long argvs
//! without leaving shell history behind, usage errors, help that keeps secrets, and `ahpty
//! config` refusing what `serve` would refuse. Each test drives the `ahpty` binary against a
//! real daemon (private HOME and runtime directory) with real shells on real ptys.

use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use crate::support::*;
use ahp::ahp_types::actions::StateAction;
use serde_json::Value;

/// Runs `cmd` with `input` on its stdin (then closed).
async fn cli_with_stdin(mut cmd: std::process::Command, input: Vec<u8>) -> CliOutput {
    tokio::task::spawn_blocking(move || {
        cmd.stdin(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn ahpty");
        let mut stdin = child.stdin.take().expect("stdin");
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let pid = child.id() as i32;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let out = match rx.recv_timeout(CLI_TIMEOUT) {
            Ok(out) => out.expect("wait"),
            Err(_) => {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
                panic!("ahpty with piped stdin did not finish within {CLI_TIMEOUT:?}");
            }
        };
        let _ = writer.join();
        CliOutput {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    })
    .await
    .expect("cli task")
}

/// The title of `uri` in the last `root/terminalsChanged` seen.
fn title_in(log: &[ahp::ahp_types::actions::ActionEnvelope], uri: &str) -> Option<String> {
    log.iter().rev().find_map(|e| match &e.action {
        StateAction::RootTerminalsChanged(c) => c
            .terminals
            .iter()
            .find(|t| t.resource == uri)
            .map(|t| t.title.clone()),
        _ => None,
    })
}

spec!(
    a_given_name_survives_osc_titles_and_is_not_given_twice,
    async {
        let d = Daemon::start();
        let mut watcher = Ahp::connect(&d.url(), "watcher", &[ROOT]).await;
        let named = cli(d.cli(&["new", "--name", "build"])).await;
        assert_eq!(named.code, Some(0), "{named:?}");
        let named = named.stdout.trim().to_string();
        let plain = cli(d.cli(&["new"])).await;
        assert_eq!(plain.code, Some(0), "{plain:?}");
        let plain = plain.stdout.trim().to_string();

        watcher.subscribe(&named).await.expect("subscribe");
        // What a stock PS1 does: set the window title with OSC 0 (and OSC 2), at every prompt.
        let osc = r"printf '\033]0;user@host: ~\007\033]2;user@host: ~\033\\'; echo osc-$((6*7))";
        for uri in [&plain, &named] {
            let out = cli(d.cli(&["send", uri, osc, "--enter"])).await;
            assert_eq!(out.code, Some(0), "{out:?}");
        }
        // The unnamed terminal takes the program's title…
        let p = plain.clone();
        watcher
            .wait_for("the unnamed terminal's OSC title", SHELL_TIMEOUT, |log| {
                title_in(log, &p).as_deref() == Some("user@host: ~")
            })
            .await;
        // …the named one has printed it too (titles are applied in output order), and keeps
        // its name.
        watcher.wait_data(&named, "osc-42", SHELL_TIMEOUT).await;
        let rows = ls_json(&d).await;
        let row = rows
            .iter()
            .find(|r| r["uri"] == named.as_str())
            .expect("row");
        assert_eq!(row["title"], "build", "{rows:?}");
        let sent = cli(d.cli(&["send", "build", "true", "--enter"])).await;
        assert_eq!(sent.code, Some(0), "{sent:?}");

        // A second terminal of the same name: refused in one line, unless --force.
        let again = cli(d.cli(&["new", "--name", "build"])).await;
        assert_eq!(again.code, Some(1), "{again:?}");
        assert_eq!(again.stdout, "", "{again:?}");
        assert!(
            again.stderr.starts_with("ahpty: ")
                && again.stderr.lines().count() == 1
                && again.stderr.contains("already named \"build\"")
                && again.stderr.contains("--force"),
            "{again:?}"
        );
        assert_eq!(ls_json(&d).await.len(), 2, "nothing was created");
        let forced = cli(d.cli(&["new", "--name", "build", "--force"])).await;
        assert_eq!(forced.code, Some(0), "{forced:?}");
        assert_eq!(ls_json(&d).await.len(), 3);

        // The CLI's own terminals are not shown as held by an absent client.
        let table = cli(d.cli(&["ls"])).await;
        assert!(
            table.stdout.contains("ahpty-cli") && !table.stdout.contains("(away)"),
            "{table:?}"
        );
    }
);

spec!(run_forwards_stdin_and_ends_it_with_eof, async {
    let d = Daemon::start();
    let (piped, partial, empty, lines) = tokio::join!(
        cli_with_stdin(d.cli(&["run", "--", "cat"]), b"one\ntwo\n".to_vec()),
        // The last line has no newline: it still arrives, then EOF.
        cli_with_stdin(d.cli(&["run", "--", "cat"]), b"a\nb".to_vec()),
        // stdin is /dev/null (the harness default): an immediate EOF.
        cli(d.cli(&["run", "--", "cat"])),
        cli_with_stdin(
            d.cli(&["run", "--", "sh", "-c", "read x; echo got=$x; wc -l"]),
            b"abc\n1\n2\n3\n".to_vec()
        ),
    );
    assert_eq!(
        (piped.code, piped.stdout.as_str()),
        (Some(0), "one\ntwo\n"),
        "{piped:?}"
    );
    assert_eq!(
        (partial.code, partial.stdout.as_str()),
        (Some(0), "a\nb"),
        "{partial:?}"
    );
    assert_eq!(
        (empty.code, empty.stdout.as_str()),
        (Some(0), ""),
        "{empty:?}"
    );
    assert_eq!(lines.code, Some(0), "{lines:?}");
    assert_eq!(lines.stdout.replace(' ', ""), "got=abc\n3\n", "{lines:?}");
});

spec!(
    run_carries_a_large_argv_and_leaves_no_shell_history,
    async {
        let d = Daemon::start();
        // 8 arguments of 100 000 bytes each (one argument may be at most 128 KiB on Linux): what
        // a typed command line could not carry (a terminal line holds 4095 bytes, and line
        // editors slow down quadratically).
        let big: Vec<String> = (0..8)
            .map(|i| char::from(b'a' + i).to_string().repeat(100_000))
            .collect();
        let mut argv = vec!["run", "--", "printf", "%s\\n"];
        argv.extend(big.iter().map(String::as_str));
        let out = cli(d.cli(&argv)).await;
        assert_eq!(out.code, Some(0), "{}", clip(out.stderr.clone(), 500));
        let want: String = big.iter().map(|a| format!("{a}\n")).collect();
        assert!(
            out.stdout == want,
            "output differs: {} bytes, want {}",
            out.stdout.len(),
            want.len()
        );

        // bash writes its history when it execs the wrapper: nothing of it may end up there.
        // Input the command does not read (and stdin's EOF) never reaches the shell that stays.
        let kept = cli_with_stdin(
            d.cli(&["run", "--keep", "--", "true"]),
            b"echo leaked-$((2+2))\n".to_vec(),
        )
        .await;
        assert_eq!(kept.code, Some(0), "{kept:?}");
        // The kept terminal is named on stderr.
        let rows = ls_json(&d).await;
        assert_eq!(rows.len(), 1, "{rows:?}");
        let uri = rows[0]["uri"].as_str().expect("uri");
        assert_eq!(
            kept.stderr,
            format!("ahpty: kept terminal {} ({uri})\n", rows[0]["index"]),
            "{kept:?}"
        );
        // The kept shell exits (and writes its history) through a line of our own.
        let mut watcher = Ahp::connect(&d.url(), "watcher", &[]).await;
        watcher.subscribe(uri).await.expect("subscribe");
        watcher.ready(uri).await;
        let rows = ls_json(&d).await;
        assert_eq!(rows[0]["status"], "running", "{rows:?}");
        let shown = cli(d.cli(&["logs", uri])).await.stdout;
        assert!(!shown.contains("leaked-4"), "{shown}");
        watcher.type_text(uri, "exit\r").await;
        watcher.wait_exited(uri, SHELL_TIMEOUT).await;
        let history = std::fs::read_to_string(d.home().join(".bash_history")).unwrap_or_default();
        assert!(!history.contains("__run"), "{history}");
    }
);

spec!(run_with_a_mistyped_option_runs_nothing, async {
    let d = Daemon::start();
    for args in [
        &["run", "--kep", "--", "echo", "x"][..],
        &["run", "-V"][..],
        &["run", "--nope", "echo"][..],
    ] {
        let out = cli(d.cli(args)).await;
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(
            out.stderr.contains("unexpected argument"),
            "{args:?}: {out:?}"
        );
        assert_eq!(out.stdout, "", "{args:?}: {out:?}");
    }
    // Options after the command are the command's.
    let out = cli(d.cli(&["run", "echo", "-n", "--keep"])).await;
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (Some(0), "--keep"),
        "{out:?}"
    );
    assert_eq!(
        ls_json(&d).await,
        Vec::<Value>::new(),
        "no terminal is left"
    );
});

spec!(
    help_completions_and_man_pages_show_no_secret_and_no_internal_command,
    {
        let home = tempfile::tempdir().unwrap();
        let run = |args: &[&str], env: &[(&str, &str)]| {
            let mut cmd = cli_command(home.path(), args);
            cmd.envs(env.iter().copied());
            run_cli(cmd, CLI_TIMEOUT)
        };
        let url = [("AHPTY_URL", "ws://127.0.0.1:1?tkn=SECRET123")];
        for sub in ["ls", "attach", "run", "logs"] {
            let out = run(&[sub, "--help"], &url);
            assert_eq!(out.code, Some(0), "{out:?}");
            assert!(out.stdout.contains("AHPTY_URL"), "{out:?}");
            assert!(
                !out.stdout.contains("SECRET123"),
                "{sub} --help: {}",
                out.stdout
            );
        }
        for shell in ["bash", "zsh", "fish"] {
            let out = run(&["completions", shell], &[]);
            assert_eq!(out.code, Some(0));
            assert!(
                !out.stdout.contains("'__run'") && !out.stdout.contains(" __run "),
                "{shell}"
            );
        }
        let out = run(&["man", "bogus"], &[]);
        assert_eq!(out.code, Some(2), "{out:?}");
        assert!(
            out.stderr.contains("run, logs, mcp)") && !out.stderr.contains("__run"),
            "{out:?}"
        );
        // The hidden upgrade-check is the daemon's own: not offered.
        assert!(
            out.stderr.contains("upgrade,") && !out.stderr.contains("upgrade-check"),
            "{out:?}"
        );
        let page = run(&["man"], &[]);
        assert!(page.stdout.contains("ahpty\\-run(1)"), "{}", page.stdout);
        assert!(!page.stdout.contains("ahpty\\-help"), "{}", page.stdout);
        assert!(!page.stdout.contains("__run"));
        assert!(!page.stdout.contains("check"), "{}", page.stdout);
        for (sub, sections) in [
            (
                None,
                &["EXIT STATUS", "EXAMPLES", "ENVIRONMENT", "FILES"][..],
            ),
            (
                Some("serve"),
                &["EXIT STATUS", "EXAMPLES", "ENVIRONMENT", "FILES"][..],
            ),
            (Some("run"), &["EXIT STATUS", "EXAMPLES", "ENVIRONMENT"][..]),
            (Some("kill"), &["EXIT STATUS", "EXAMPLES"][..]),
        ] {
            let mut args = vec!["man"];
            args.extend(sub);
            let page = run(&args, &[]);
            assert_eq!(page.code, Some(0), "{page:?}");
            for section in sections {
                assert!(
                    page.stdout.contains(&format!(".SH \"{section}\""))
                        || page.stdout.contains(&format!(".SH {section}")),
                    "{sub:?} has no {section}: {}",
                    page.stdout
                );
            }
            assert!(page.stdout.contains("verbose"), "{sub:?}: -v is listed");
            if sub.is_some() {
                // Subcommands take no --version.
                assert!(
                    !page.stdout.contains("\\-\\-version"),
                    "{sub:?}: {}",
                    page.stdout
                );
            }
        }
    }
);

spec!(config_refuses_what_serve_refuses_and_both_exit_2, {
    let home = tempfile::tempdir().unwrap();
    let token = home.path().join("token");
    std::fs::write(&token, "0123456789abcdef0123456789abcdef\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let token = token.to_str().unwrap();
    let cases: [(&[&str], &str); 3] = [
        (&["--no-auth", "--listen", "0.0.0.0:0"], "loopback"),
        (
            &[
                "--token-file",
                "/nonexistent/token",
                "--listen",
                "127.0.0.1:0",
            ],
            "/nonexistent/token",
        ),
        (
            &[
                "--token-file",
                token,
                "--listen",
                "127.0.0.1:0",
                "--tls-cert",
                "/nonexistent/c",
                "--tls-key",
                "/nonexistent/k",
            ],
            "/nonexistent/c",
        ),
    ];
    for (args, needle) in cases {
        for sub in ["config", "serve"] {
            let mut argv = vec![sub, "--no-socket"];
            argv.extend_from_slice(args);
            let out = run_cli(cli_command(home.path(), &argv), CLI_TIMEOUT);
            assert_eq!(out.code, Some(2), "{argv:?}: {out:?}");
            let lines: Vec<&str> = out.stderr.lines().collect();
            assert_eq!(lines.len(), 1, "{argv:?}: {out:?}");
            assert!(
                lines[0].starts_with("ahpty: ") && lines[0].contains(needle),
                "{argv:?}: {out:?}"
            );
        }
    }
    // A setting serve accepts with a warning: config shows the warning.
    let args = [
        "config",
        "--no-socket",
        "--token-file",
        token,
        "--listen",
        "0.0.0.0:0",
    ];
    let out = run_cli(cli_command(home.path(), &args), CLI_TIMEOUT);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout
            .contains("# warning: listening on 0.0.0.0:0 without TLS"),
        "{}",
        out.stdout
    );

    // `localhost` is loopback; an orphan_grace under 1 s is raised (a CLI-made terminal
    // would otherwise be disposed as soon as the CLI disconnects).
    let args = [
        "config",
        "--no-socket",
        "--listen",
        "localhost:0",
        "--orphan-grace",
        "1ms",
    ];
    let out = run_cli(cli_command(home.path(), &args), CLI_TIMEOUT);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout.contains("listen = [\"127.0.0.1:0\"]"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("orphan_grace = \"1s\""),
        "{}",
        out.stdout
    );
});

spec!(
    the_cli_names_itself_and_its_connections_log_at_debug_only,
    async {
        let d = Daemon::builder().log("info,ahpty::rpc=debug").start();
        let quiet = Daemon::start();
        assert_eq!(cli(d.cli(&["ls"])).await.code, Some(0));
        assert_eq!(cli(quiet.cli(&["ls"])).await.code, Some(0));
        // The debug daemon logs the client's name; the line is written before the answer.
        let log = d.stderr();
        let line = log
            .lines()
            .find(|l| l.contains("client initialized") && l.contains("client_id=ahpty-cli"))
            .unwrap_or_else(|| panic!("{log}"));
        let version = concat!("client_version=", env!("CARGO_PKG_VERSION"));
        assert!(
            line.contains("client=ahpty ") && line.contains(version),
            "{line}"
        );
        assert!(
            !quiet.stderr().contains("client initialized"),
            "{}",
            quiet.stderr()
        );
    }
);

spec!(
    the_vscode_ssh_command_works_beside_a_running_daemon_with_a_token_file,
    {
        // The remote runs ahpty already (on its default socket), configured with a token file.
        let d = Daemon::start();
        let config = d.home().join(".config/ahpty");
        std::fs::create_dir_all(&config).unwrap();
        let token = config.join("token");
        std::fs::write(&token, "0123456789abcdef0123456789abcdef\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(config.join("config.toml"), "token_file = \"token\"\n").unwrap();

        // The command as docs/vscode.md gives it, run through a shell as VS Code does.
        let doc = include_str!("../../docs/vscode.md");
        let key = "\"chat.sshRemoteAgentHostCommand\": \"";
        let at = doc.find(key).expect("the setting in docs/vscode.md") + key.len();
        let command = &doc[at..at + doc[at..].find('"').expect("closing quote")];
        let command = command.replace("~/.cargo/bin/ahpty", env!("CARGO_BIN_EXE_ahpty"));
        let mut child = std::process::Command::new("sh")
            .args(["-c", &format!("exec {command}")])
            .env("HOME", d.home())
            .env("XDG_RUNTIME_DIR", runtime_dir(d.home()))
            .env("XDG_CONFIG_HOME", d.home().join(".config"))
            .env_remove("AHPTY_TOKEN")
            .env_remove("AHPTY_TOKEN_FILE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the documented command");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let line = rx.recv_timeout(Duration::from_secs(20));
        let _ = child.kill();
        let out = child.wait_with_output().expect("wait");
        let line = line.unwrap_or_else(|_| {
            panic!(
                "no URL on stdout; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        // What VS Code scrapes: ws://127.0.0.1:PORT?tkn=TOKEN, a generated token (not the file's).
        let rest = line.strip_prefix("ws://127.0.0.1:").expect(&line);
        let (port, tkn) = rest.split_once("?tkn=").expect(&line);
        assert!(port.parse::<u16>().is_ok_and(|p| p > 0), "{line}");
        assert!(
            tkn.len() >= 16 && !tkn.contains("0123456789abcdef"),
            "{line}"
        );
        // The running daemon kept its socket.
        assert!(d.socket().exists());
    }
);

spec!(
    a_daemon_that_shuts_down_is_not_reported_as_a_lost_connection,
    async {
        let d = Daemon::start();
        let t = cli(d.cli(&["new", "--name", "follow-me"])).await;
        assert_eq!(t.code, Some(0), "{t:?}");
        let mut watcher = Ahp::connect(&d.url(), "watcher", &[]).await;
        let uri = t.stdout.trim().to_string();
        watcher.subscribe(&uri).await.expect("subscribe");
        watcher.ready(&uri).await;
        let follow = LiveCli::spawn(d.cli(&["logs", "-f", "follow-me"]));
        // The retained output is printed first: then it follows.
        follow.wait_for("rdy-42", false, SHELL_TIMEOUT).await;
        d.signal(nix::sys::signal::Signal::SIGTERM);
        let out = follow.finish(CLI_TIMEOUT).await;
        assert_eq!(out.code, Some(255), "{out:?}");
        assert_eq!(
            out.stderr,
            "ahpty: the daemon shut down (close code 1001): its terminals were stopped\n",
            "{out:?}"
        );
    }
);

spec!(connection_errors_say_what_is_likely_wrong, async {
    let d = Daemon::start();
    // wss:// to a daemon without TLS.
    let wss = format!("wss://{}", d.addr());
    let out = cli(d.cli(&["ls", "--url", &wss])).await;
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("does the daemon serve TLS?"), "{out:?}");
    // A plain HTTP server, not a WebSocket one.
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("ws://{}", http.local_addr().unwrap());
    std::thread::spawn(move || {
        use std::io::Read;
        for stream in http.incoming().take(1) {
            let Ok(mut s) = stream else { return };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi");
        }
    });
    let out = cli(d.cli(&["ls", "--url", &url])).await;
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("not an ahpty daemon"), "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
});

spec!(settings_mistakes_are_named_precisely, {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("c.toml");
    std::fs::write(
        &file,
        "kill_grace = \"1s\"\nmax_terminals = 5\nkill_grace = \"2s\"\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let out = run_cli(
        cli_command(home.path(), &["config", "--config", file]),
        CLI_TIMEOUT,
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr
            .contains(":3: duplicate key `kill_grace` (first set on line 1)"),
        "{out:?}"
    );
    let mut cmd = cli_command(home.path(), &["config"]);
    cmd.env("AHPTY_KILL_GRACE", "abc");
    let out = run_cli(cmd, CLI_TIMEOUT);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.contains("\"abc\" is not a duration") && !out.stderr.contains("at 0"),
        "{out:?}"
    );
    let mut cmd = cli_command(home.path(), &["config", "--orphan-grace", "90s"]);
    cmd.env("AHPTY_MAX_TERMINAL", "4");
    let out = run_cli(cmd, CLI_TIMEOUT);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout
            .contains("# note: $AHPTY_MAX_TERMINAL is not an ahpty setting and is ignored (did you mean $AHPTY_MAX_TERMINALS?)"),
        "{}",
        out.stdout
    );
    // Durations as the docs write them.
    assert!(
        out.stdout.contains("orphan_grace = \"90s\""),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("kill_grace = \"500ms\""),
        "{}",
        out.stdout
    );
    // Whole days beyond one as days (the docs' `7d`); one day stays `24h`.
    assert!(
        out.stdout.contains("persist_max_age = \"7d\""),
        "{}",
        out.stdout
    );
    let mut cmd = cli_command(home.path(), &["config", "--persist-max-age", "36h"]);
    cmd.env("AHPTY_ORPHAN_GRACE", "2d");
    let out = run_cli(cmd, CLI_TIMEOUT);
    assert!(
        out.stdout.contains("persist_max_age = \"36h\"")
            && out.stdout.contains("orphan_grace = \"2d\""),
        "{}",
        out.stdout
    );
    let help = run_cli(cli_command(home.path(), &["serve", "--help"]), CLI_TIMEOUT);
    assert!(help.stdout.contains("[default: 24h]"), "{}", help.stdout);
    assert!(help.stdout.contains("[default: 7d]"), "{}", help.stdout);
    assert!(!help.stdout.contains("168h"), "{}", help.stdout);
});

spec!(send_dash_types_stdin_of_any_size, async {
    let d = Daemon::start();
    let t = cli(d.cli(&["new", "--name", "typed"])).await;
    assert_eq!(t.code, Some(0), "{t:?}");
    let uri = t.stdout.trim().to_string();
    let mut watcher = Ahp::connect(&d.url(), "watcher", &[]).await;
    watcher.subscribe(&uri).await.expect("subscribe");
    // 40 kB of text (a here-document of 400 lines; more than one input action carries).
    let lines = format!("{}\n", "z".repeat(99)).repeat(400);
    let text = format!("cat > /dev/null <<'EOF'\n{lines}EOF\necho sent-$((6*7))\n");
    let out = cli_with_stdin(d.cli(&["send", "typed", "-"]), text.into_bytes()).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    // bash's line editor takes its time over 400 lines on a loaded machine.
    watcher
        .wait_data(&uri, "sent-42", Duration::from_secs(60))
        .await;
    let inputs: usize = watcher
        .log
        .iter()
        .filter_map(|e| match &e.action {
            StateAction::TerminalInput(i) => Some(i.data.len()),
            _ => None,
        })
        .sum();
    assert!(inputs > 40_000, "{inputs} bytes of input seen");
});
