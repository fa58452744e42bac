//! Settings from flags, `AHPTY_*` variables and `config.toml`: precedence, `ahpty config`,
//! one-line errors with exit status 2, and the generated completions and man pages.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::support::*;
use serde_json::json;

/// `ahpty ARGS` with only HOME (a config dir beneath it), PATH and `env` set.
fn ahpty(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ahpty"));
    cmd.env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("SHELL", "/bin/sh")
        .args(args)
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run ahpty")
}

fn write_config(home: &Path, text: &str) -> std::path::PathBuf {
    let dir = home.join(".config").join("ahpty");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The `key = value  # origin` line of `ahpty config` output for `key`.
fn line<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no {key} in:\n{out}"))
}

spec!(flag_beats_environment_beats_file_beats_default, {
    let home = tempfile::tempdir().unwrap();
    let file = write_config(
        home.path(),
        "# four settings\nmax_terminals = 5\nmax_subscriptions = 6\nmax_connections = 7\n\
         kill_grace = \"2s\"\n",
    );
    let f = file.display();
    let out = ahpty(
        home.path(),
        &["config", "--max-connections", "9"],
        &[
            ("AHPTY_MAX_SUBSCRIPTIONS", "8"),
            ("AHPTY_MAX_CONNECTIONS", "10"),
        ],
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        text.contains(&format!("# config file: {f} (read)")),
        "{text}"
    );
    // file only
    let l = line(&text, "max_terminals");
    assert!(
        l.starts_with("max_terminals = 5 ") && l.ends_with(&format!("# {f}:2")),
        "{l}"
    );
    let l = line(&text, "kill_grace");
    assert!(
        l.contains("\"2s\"") && l.ends_with(&format!("# {f}:5")),
        "{l}"
    );
    // environment over file
    let l = line(&text, "max_subscriptions");
    assert!(
        l.starts_with("max_subscriptions = 8 ") && l.ends_with("# env AHPTY_MAX_SUBSCRIPTIONS"),
        "{l}"
    );
    // flag over environment over file
    let l = line(&text, "max_connections");
    assert!(
        l.starts_with("max_connections = 9 ") && l.ends_with("# flag --max-connections"),
        "{l}"
    );
    // nothing sets it
    let l = line(&text, "scrollback_bytes");
    assert!(
        l.starts_with("scrollback_bytes = 1048576 ") && l.ends_with("# default"),
        "{l}"
    );
    // Every key of the table is printed.
    let keys = text
        .lines()
        .filter(|l| !l.starts_with("# ") || l.contains(" (not set)"))
        .count();
    assert_eq!(keys, ahpty::config::KEYS.len(), "{text}");
    // The deprecated --kill-grace-ms still works, and says where it came from.
    let out = ahpty(home.path(), &["config", "--kill-grace-ms", "1500"], &[]);
    let l = line(&stdout(&out), "kill_grace").to_string();
    assert!(
        l.contains("\"1500ms\"") && l.ends_with("# flag --kill-grace-ms"),
        "{l}"
    );
    // --config and $AHPTY_CONFIG pick another file.
    let other = home.path().join("other.toml");
    std::fs::write(&other, "max_terminals = 3\n").unwrap();
    for (args, env) in [
        (vec!["config", "--config", other.to_str().unwrap()], vec![]),
        (
            vec!["config"],
            vec![("AHPTY_CONFIG", other.to_str().unwrap())],
        ),
    ] {
        let out = ahpty(home.path(), &args, &env);
        let l = line(&stdout(&out), "max_terminals").to_string();
        assert!(l.starts_with("max_terminals = 3 "), "{args:?} {env:?}: {l}");
    }
});

spec!(the_daemon_uses_the_file_and_the_environment, async {
    // The file chooses the listener and the shell; the environment's max_terminals = 1
    // overrides the file's 5: a second terminal is refused.
    let home = tempfile::tempdir().unwrap();
    write_config(
        home.path(),
        "listen = [\"127.0.0.1:0\"]\nno_auth = true\nshell = \"/bin/bash\"\nmax_terminals = 5\n",
    );
    let d = Daemon::bare()
        .clear_env()
        .home(home)
        .env("PATH", "/usr/bin:/bin")
        .env("AHPTY_MAX_TERMINALS", "1")
        .start();
    assert!(d.stderr().contains("settings from"), "{}", d.stderr());
    let (mut raw, _) = Raw::connect_init(&d.url(), "cfg", &[]).await;
    let claim = json!({"kind": "client", "clientId": "cfg"});
    let r = raw
        .request(
            "createTerminal",
            json!({"channel": "ahp-terminal:/cfg1", "claim": claim}),
        )
        .await;
    assert!(r.get("error").is_none(), "{r}");
    let r = raw
        .request(
            "createTerminal",
            json!({"channel": "ahp-terminal:/cfg2", "claim": claim}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32603, "{r}");
    raw.request("disposeTerminal", json!({"channel": "ahp-terminal:/cfg1"}))
        .await;
});

/// Runs `ahpty serve` expecting an immediate refusal; returns its one stderr line.
fn refused(home: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut all = vec!["serve", "--listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let out = ahpty(home, &all, env);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{args:?} {env:?}: expected one line: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("listening"),
        "{err}"
    );
    lines[0].to_string()
}

spec!(invalid_settings_are_one_line_and_exit_status_2, {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    // A bad value in the file: the file, the line and the key.
    let file = write_config(h, "max_terminals = 4\n\nkill_grace = 5\n");
    let e = refused(h, &[], &[]);
    assert!(
        e.contains(&format!("{}:3: kill_grace", file.display())) && e.contains("duration"),
        "{e}"
    );
    let file = write_config(h, "ping_interval = \"soon\"\n");
    let e = refused(h, &[], &[]);
    assert!(
        e.contains(&format!("{}:1: ping_interval", file.display())),
        "{e}"
    );
    // TOML syntax.
    write_config(h, "max_terminals = \n");
    let e = refused(h, &[], &[]);
    assert!(e.contains("config.toml:1:"), "{e}");
    // An unknown key (a typo) names the key and suggests the right one.
    let file = write_config(h, "max_terminals = 4\nmax_subscription = 4\n");
    let e = refused(h, &[], &[]);
    assert!(
        e.contains(&format!(
            "{}:2: unknown key `max_subscription`",
            file.display()
        )) && e.contains("did you mean `max_subscriptions`?"),
        "{e}"
    );
    let e = refused(h, &["--config", "/nonexistent/ahpty.toml"], &[]);
    assert!(
        e.contains("/nonexistent/ahpty.toml") && e.contains("not found"),
        "{e}"
    );
    std::fs::remove_file(&file).unwrap();
    // Zero limits make no sense, from any source.
    let e = refused(h, &["--max-terminals", "0"], &[]);
    assert_eq!(e, "ahpty: --max-terminals 0: must be at least 1");
    let e = refused(h, &[], &[("AHPTY_MAX_SUBSCRIPTIONS", "0")]);
    assert_eq!(e, "ahpty: $AHPTY_MAX_SUBSCRIPTIONS=0: must be at least 1");
    let file = write_config(h, "max_connections = 0\n");
    let e = refused(h, &[], &[]);
    assert_eq!(
        e,
        format!(
            "ahpty: {}:1: max_connections = 0: must be at least 1",
            file.display()
        )
    );
    std::fs::remove_file(&file).unwrap();
    // A bad variable.
    let e = refused(h, &[], &[("AHPTY_NO_AUTH", "perhaps")]);
    assert!(
        e.contains("$AHPTY_NO_AUTH=perhaps") && e.contains("true or false"),
        "{e}"
    );
    // Contradictions within one source.
    write_config(h, "no_auth = true\ntoken_file = \"/x\"\n");
    let e = refused(h, &[], &[]);
    assert!(e.contains("no_auth") && e.contains("token_file"), "{e}");
    write_config(h, "tls_cert = \"/c.pem\"\n");
    let e = refused(h, &[], &[]);
    assert!(e.contains("tls_cert") && e.contains("tls_key"), "{e}");
});

spec!(values_below_a_minimum_are_raised_and_said_so, {
    let home = tempfile::tempdir().unwrap();
    let file = write_config(home.path(), "scrollback_bytes = 10\n");
    let out = ahpty(home.path(), &["config", "--stall-timeout", "5ms"], &[]);
    let text = stdout(&out);
    assert!(
        line(&text, "scrollback_bytes").starts_with("scrollback_bytes = 1024 "),
        "{text}"
    );
    assert!(
        line(&text, "stall_timeout").starts_with("stall_timeout = \"100ms\" "),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "# note: {}:1: scrollback_bytes = 10: below the minimum 1024, raised to 1024",
            file.display()
        )),
        "{text}"
    );
});

// `--upgrade-timeout` is a duration like the others: taken from the flag, the variable and the
// file, raised to 1 s, lowered to 60 s (each with a note), and refused when it is no duration.
spec!(the_upgrade_timeout_is_a_duration_between_1s_and_60s, {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    // (flags, variables, the config file, the value `ahpty config` shows, the end of its line
    // or the note it prints; FILE stands for the file's path).
    type Case<'a> = (
        &'a [&'a str],
        &'a [(&'a str, &'a str)],
        Option<&'a str>,
        &'a str,
        &'a str,
    );
    let cases: [Case; 5] = [
        (&[], &[], None, "5s", "# default"),
        (
            &["--upgrade-timeout", "1500ms"],
            &[],
            None,
            "1500ms",
            "# flag --upgrade-timeout",
        ),
        (
            &[],
            &[("AHPTY_UPGRADE_TIMEOUT", "20s")],
            None,
            "20s",
            "# env AHPTY_UPGRADE_TIMEOUT",
        ),
        (
            &["--upgrade-timeout", "200ms"],
            &[],
            None,
            "1s",
            "# note: --upgrade-timeout 200ms: below the minimum 1s, raised to \"1s\"",
        ),
        (
            &[],
            &[],
            Some("upgrade_timeout = \"5m\"\n"),
            "1m",
            "# note: FILE:1: upgrade_timeout = \"5m\": above the maximum 60s, lowered to \"1m\"",
        ),
    ];
    for (flags, env, file, value, said) in cases {
        let file = file.map(|text| write_config(h, text));
        let text = stdout(&ahpty(h, &[&["config"], flags].concat(), env));
        let l = line(&text, "upgrade_timeout");
        let said = said.replace(
            "FILE",
            &file
                .as_ref()
                .map(|f| f.display().to_string())
                .unwrap_or_default(),
        );
        assert!(
            l.starts_with(&format!("upgrade_timeout = \"{value}\" "))
                && if said.starts_with("# note: ") {
                    text.lines().any(|n| n == said)
                } else {
                    l.ends_with(&said)
                },
            "{flags:?} {env:?}: expected {value} and {said:?} in:\n{text}"
        );
        if let Some(f) = file {
            std::fs::remove_file(f).unwrap();
        }
    }
    let e = refused(h, &[], &[("AHPTY_UPGRADE_TIMEOUT", "soon")]);
    assert!(
        e.contains("$AHPTY_UPGRADE_TIMEOUT") && e.contains("not a duration"),
        "{e}"
    );
    let out = ahpty(h, &["serve", "--upgrade-timeout", "soon"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--upgrade-timeout") && stderr(&out).contains("not a duration"),
        "{}",
        stderr(&out)
    );
    // The help says what it is, with its default and limits.
    let help = stdout(&ahpty(h, &["serve", "--help"], &[]));
    assert!(
        help.contains("--upgrade-timeout <DURATION>") && help.contains("(1s to 60s)"),
        "{help}"
    );
});

spec!(relative_and_home_paths_in_the_file, {
    let home = tempfile::tempdir().unwrap();
    let file = write_config(
        home.path(),
        "token_file = \"token\"\ntls_cert = \"~/c.pem\"\ntls_key = \"/k.pem\"\n",
    );
    let out = ahpty(home.path(), &["config"], &[]);
    let text = stdout(&out);
    let dir = file.parent().unwrap().display().to_string();
    assert!(
        line(&text, "token_file").contains(&format!("\"{dir}/token\"")),
        "{text}"
    );
    let h = home.path().display().to_string();
    assert!(
        line(&text, "tls_cert").contains(&format!("\"{h}/c.pem\"")),
        "{text}"
    );
    assert!(
        text.contains(&format!("# auth: token from {dir}/token")),
        "{text}"
    );
});

spec!(completions_and_man_pages_are_generated, {
    let home = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish"] {
        let out = ahpty(home.path(), &["completions", shell], &[]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let text = stdout(&out);
        for word in ["serve", "max-terminals", "kill-grace", "completions"] {
            assert!(text.contains(word), "{shell} completions lack {word}");
        }
    }
    let out = ahpty(home.path(), &["man"], &[]);
    let page = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        page.contains(".TH ahpty 1") && page.contains("serve"),
        "{page}"
    );
    let out = ahpty(home.path(), &["man", "serve"], &[]);
    let page = stdout(&out);
    assert!(page.contains(".TH ahpty-serve 1"), "{page}");
    assert!(
        page.contains("max\\-terminals") && page.contains("AHPTY_MAX_TERMINALS"),
        "{page}"
    );
    let out = ahpty(home.path(), &["man", "nonsense"], &[]);
    assert_eq!(out.status.code(), Some(2));
});

spec!(the_readme_config_example_is_valid, {
    let readme = include_str!("../../README.md");
    let mut checked = 0;
    for body in fenced(readme, "toml") {
        if body.contains("[dependencies]") {
            continue;
        }
        let home = tempfile::tempdir().unwrap();
        let file = write_config(home.path(), &body);
        // The token file it names must exist and be readable, as `serve` needs it.
        if body.contains("token_file = \"token\"") {
            use std::os::unix::fs::PermissionsExt;
            let token = file.parent().unwrap().join("token");
            std::fs::write(&token, "0123456789abcdef0123456789abcdef\n").unwrap();
            std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let out = ahpty(home.path(), &["config"], &[]);
        assert!(out.status.success(), "{body}\n{}", stderr(&out));
        assert!(stdout(&out).contains("config.toml:"), "{}", stdout(&out));
        checked += 1;
    }
    assert_eq!(checked, 1, "the README's config.toml example");
});

spec!(the_readme_options_table_matches_the_defaults, {
    use ahpty::config::{default_text, KEYS};
    let readme = include_str!("../../README.md");
    let mut seen = Vec::new();
    for row in readme.lines().filter(|l| l.starts_with("| `--")) {
        let cells: Vec<&str> = row
            .split(" | ")
            .map(|c| c.trim_matches(|c| c == '|' || c == ' '))
            .collect();
        let readme_default = cells[1].trim_matches('`');
        for flag in cells[0].split(", ") {
            let key = flag
                .trim_matches('`')
                .trim_start_matches("--")
                .replace('-', "_");
            let Some(default) = default_text(&key) else {
                panic!("README documents {flag}, which is no setting");
            };
            let ok = match default.as_str() {
                "" | "[]" => {
                    readme_default == "—"
                        || ["shell", "socket", "agent_env", "state_dir"].contains(&key.as_str())
                }
                "false" => readme_default == "off",
                d if d.starts_with('"') => {
                    let parse = |s: &str| humantime::parse_duration(s.trim_matches('"')).ok();
                    match parse(d) {
                        Some(_) => parse(d) == parse(readme_default),
                        // A string that is no duration (the report colours).
                        None => d.trim_matches('"') == readme_default,
                    }
                }
                d if d.starts_with('[') => d == format!("[\"{readme_default}\"]"),
                d => d == readme_default,
            };
            assert!(
                ok,
                "README says {flag} defaults to {readme_default:?}; config.rs: {default}"
            );
            seen.push(key);
        }
    }
    for key in KEYS {
        assert!(
            seen.iter().any(|k| k == key.name),
            "README's table lacks --{}",
            key.name
        );
    }
});
