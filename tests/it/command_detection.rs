//! Shell integration end to end, over WebSocket with the official `ahp` client: real bash,
//! zsh and fish started by the daemon with its injected scripts report command boundaries
//! (`terminal/commandExecuted` / `commandFinished`), cwd changes and detection availability,
//! snapshots hold command parts as the reducers build them, and no integration sequence ever
//! reaches `terminal/data`.

use std::path::Path;

use crate::support::*;
use ahp::ahp_types::actions::{ActionEnvelope, StateAction};
use ahp::ahp_types::state::TerminalContentPart;
use serde_json::json;

/// The shell's path; under CI (which installs all three) a missing shell fails the test.
fn shell(name: &str) -> Option<String> {
    let found = ["/bin", "/usr/bin"]
        .iter()
        .map(|d| format!("{d}/{name}"))
        .find(|p| Path::new(p).is_file());
    if found.is_none() {
        if std::env::var_os("CI").is_some() {
            panic!("{name} is not installed; .ci/run installs it");
        }
        eprintln!("{name} is not installed: test skipped");
    }
    found
}

/// (commandId, commandLine) of every `terminal/commandExecuted` on `uri`.
fn executed(log: &[ActionEnvelope], uri: &str) -> Vec<(String, String)> {
    log.iter()
        .filter(|e| e.channel == uri)
        .filter_map(|e| match &e.action {
            StateAction::TerminalCommandExecuted(c) => {
                Some((c.command_id.clone(), c.command_line.clone()))
            }
            _ => None,
        })
        .collect()
}

/// (commandId, exitCode) of every `terminal/commandFinished` on `uri`.
fn finished(log: &[ActionEnvelope], uri: &str) -> Vec<(String, Option<i64>)> {
    log.iter()
        .filter(|e| e.channel == uri)
        .filter_map(|e| match &e.action {
            StateAction::TerminalCommandFinished(c) => Some((c.command_id.clone(), c.exit_code)),
            _ => None,
        })
        .collect()
}

/// Types `line` + Enter and waits for the command it produces to finish; returns
/// (commandId, commandLine, exitCode).
async fn run(c: &mut Ahp, uri: &str, line: &str) -> (String, String, Option<i64>) {
    let before = executed(&c.log, uri).len();
    c.type_text(uri, &format!("{line}\r")).await;
    let u = uri.to_string();
    c.wait_for(&format!("{line:?} to finish"), SHELL_TIMEOUT, |log| {
        let ex = executed(log, &u);
        ex.len() > before && finished(log, &u).iter().any(|(id, _)| *id == ex[before].0)
    })
    .await;
    let (id, cmd) = executed(&c.log, uri)[before].clone();
    let code = finished(&c.log, uri)
        .into_iter()
        .find(|(f, _)| *f == id)
        .and_then(|(_, code)| code);
    (id, cmd, code)
}

/// The first command produced after `before` earlier ones, once it finished.
async fn wait_next_command(c: &mut Ahp, uri: &str, before: usize) -> (String, String) {
    let u = uri.to_string();
    c.wait_for("a multi-line command to finish", SHELL_TIMEOUT, |log| {
        let ex = executed(log, &u);
        ex.len() > before && finished(log, &u).iter().any(|(id, _)| *id == ex[before].0)
    })
    .await;
    executed(&c.log, uri)[before].clone()
}

fn assert_no_integration_sequences(c: &Ahp, uri: &str) {
    let data = c.data(uri);
    for bad in ["\x1b]633", "\x1b]133", "\x1b]1337;CurrentDir"] {
        assert!(
            !data.contains(bad),
            "{bad:?} leaked into terminal/data: {:?}",
            tail(&data, 400)
        );
    }
}

/// The scenario shared by every shell.
async fn scenario(shell_path: &str, exit7: &str, multi: &[&str], multi_expected: &str) {
    let daemon = Daemon::start_with(&["--shell", shell_path]);
    let mut c = Ahp::connect(&daemon.url(), "si-client", &[ROOT]).await;
    let uri = term_uri("si");
    c.create_terminal(&uri, json!({"cwd": "/"}))
        .await
        .expect("createTerminal");
    let (state, _) = c.subscribe_terminal(&uri).await;
    assert_eq!(state.cwd.as_deref(), Some("file:///"));
    // Detection becomes available with the first prompt (before or after the snapshot).
    if state.supports_command_detection != Some(true) {
        let u = uri.clone();
        c.wait_for("commandDetectionAvailable", SHELL_TIMEOUT, |log| {
            log.iter().any(|e| {
                e.channel == u
                    && matches!(e.action, StateAction::TerminalCommandDetectionAvailable(_))
            })
        })
        .await;
    }

    let (hi_id, line, code) = run(&mut c, &uri, "echo hi").await;
    assert_eq!((line.as_str(), code), ("echo hi", Some(0)));
    let (_, line, code) = run(&mut c, &uri, "false").await;
    assert_eq!((line.as_str(), code), ("false", Some(1)));
    let (_, line, code) = run(&mut c, &uri, exit7).await;
    assert_eq!((line.as_str(), code), (exit7, Some(7)));

    let tricky = r#"echo 'a;b' "c\d" \"q\" ünï ✓;  echo   x"#;
    let (_, line, code) = run(&mut c, &uri, tricky).await;
    assert_eq!(line, tricky);
    assert_eq!(code, Some(0));

    let (_, line, code) = run(&mut c, &uri, "cd /tmp").await;
    assert_eq!((line.as_str(), code), ("cd /tmp", Some(0)));
    let u = uri.clone();
    c.wait_for("cwdChanged file:///tmp", SHELL_TIMEOUT, |log| {
        log.iter().any(|e| {
            e.channel == u
                && matches!(&e.action, StateAction::TerminalCwdChanged(cw) if cw.cwd == "file:///tmp")
        })
    })
    .await;

    let before = executed(&c.log, &uri).len();
    for part in multi {
        c.type_text(&uri, &format!("{part}\r")).await;
    }
    let (_, line) = wait_next_command(&mut c, &uri, before).await;
    assert_eq!(line, multi_expected);

    // The snapshot holds the command parts exactly as the reducers build them.
    let snap = c.subscribe(&uri).await.expect("subscribe");
    let state = terminal_state(&snap);
    assert_eq!(state.supports_command_detection, Some(true));
    assert_eq!(state.cwd.as_deref(), Some("file:///tmp"));
    let hi = state
        .content
        .iter()
        .find_map(|p| match p {
            TerminalContentPart::Command(cmd) if cmd.command_id == hi_id => Some(cmd.clone()),
            _ => None,
        })
        .expect("the `echo hi` command part");
    assert_eq!(hi.command_line, "echo hi");
    assert!(hi.is_complete);
    assert_eq!(hi.exit_code, Some(0));
    assert!(hi.duration_ms.is_some());
    assert!(
        hi.output.contains("hi\r\n"),
        "output of `echo hi`: {:?}",
        hi.output
    );
    assert!(!hi.output.contains("\x1b]633"));
    assert_no_integration_sequences(&c, &uri);
}

spec!(bash_reports_command_lines_exit_codes_and_cwd, async {
    let Some(bash) = shell("bash") else { return };
    scenario(
        &bash,
        "(exit 7)",
        &["for i in 1 2", "do echo L$i", "done"],
        // bash reports the line as it stores it in history.
        "for i in 1 2; do echo L$i; done",
    )
    .await;
});

spec!(zsh_reports_command_lines_exit_codes_and_cwd, async {
    let Some(zsh) = shell("zsh") else { return };
    scenario(
        &zsh,
        "(exit 7)",
        &["for i in 1 2", "do echo L$i", "done"],
        "for i in 1 2\ndo echo L$i\ndone",
    )
    .await;
});

spec!(fish_reports_command_lines_exit_codes_and_cwd, async {
    let Some(fish) = shell("fish") else { return };
    scenario(
        &fish,
        "sh -c 'exit 7'",
        &["for i in 1 2", "echo L$i", "end"],
        "for i in 1 2\necho L$i\nend",
    )
    .await;
});

// A user's own bash rc with `set -u`, its own PROMPT_COMMAND and DEBUG trap keeps working,
// and the marks still arrive.
spec!(user_bashrc_hooks_keep_working, async {
    let daemon = Daemon::start();
    std::fs::write(
        daemon.home().join(".bashrc"),
        "set -u\nPROMPT_COMMAND='echo \"USERHOOK:$?\"'\ntrap '__user_debug=1' DEBUG\n",
    )
    .expect("write .bashrc");
    let mut c = Ahp::connect(&daemon.url(), "rc-client", &[]).await;
    let uri = term_uri("rc");
    c.create_terminal(&uri, json!({})).await.expect("create");
    c.subscribe_terminal(&uri).await;
    let (_, line, code) = run(&mut c, &uri, "(exit 5)").await;
    assert_eq!((line.as_str(), code), ("(exit 5)", Some(5)));
    c.wait_data(&uri, "USERHOOK:5", SHELL_TIMEOUT).await;
    let (_, _, code) = run(&mut c, &uri, "trap -p DEBUG | grep -c __user_debug").await;
    assert_eq!(code, Some(0), "the user's DEBUG trap is still set");
    assert_no_integration_sequences(&c, &uri);
});

// A program printing a forged command-line mark is not believed, and the mark is stripped.
spec!(spoofed_marks_are_stripped_and_not_trusted, async {
    let daemon = Daemon::start();
    let mut c = Ahp::connect(&daemon.url(), "spoof-client", &[]).await;
    let uri = term_uri("spoof");
    c.create_terminal(&uri, json!({})).await.expect("create");
    c.subscribe_terminal(&uri).await;
    let forged = r"printf 'x\033]633;E;rm -rf /;bogus\007y\033]133;D;99\007z\n'";
    let (_, line, code) = run(&mut c, &uri, forged).await;
    assert_eq!(line, forged);
    assert_eq!(code, Some(0));
    c.wait_data(&uri, "xyz", SHELL_TIMEOUT).await;
    assert!(executed(&c.log, &uri).iter().all(|(_, l)| l != "rm -rf /"));
    assert_no_integration_sequences(&c, &uri);
});

// `--no-shell-integration` injects nothing: no detection, plain output still flows.
spec!(no_shell_integration_injects_nothing, async {
    let daemon = Daemon::start_with(&["--no-shell-integration"]);
    let mut c = Ahp::connect(&daemon.url(), "plain-client", &[]).await;
    let uri = term_uri("plain");
    c.create_terminal(&uri, json!({})).await.expect("create");
    c.subscribe_terminal(&uri).await;
    c.ready(&uri).await;
    assert!(executed(&c.log, &uri).is_empty());
    let snap = c.subscribe(&uri).await.expect("subscribe");
    assert_eq!(terminal_state(&snap).supports_command_detection, None);
});

// Programs started from the shell cannot learn the nonce: it arrives in a one-shot file that
// the script deletes before the user's startup files run, so even the shell's original
// environment (`/proc/<pid>/environ`) only names a file that is gone.
spec!(the_nonce_is_not_readable_by_programs, async {
    let daemon = Daemon::start();
    let mut c = Ahp::connect(&daemon.url(), "nonce-client", &[]).await;
    let uri = term_uri("nonce");
    c.create_terminal(&uri, json!({})).await.expect("create");
    c.subscribe_terminal(&uri).await;
    let probe = r#"f=$(tr '\0' '\n' < /proc/$$/environ | sed -n 's/^AHPTY_SI_NONCE_FILE=//p'); if [ -n "$f" ] && [ ! -e "$f" ] && ! tr '\0' '\n' < /proc/$$/environ | grep -q '^AHPTY_SI_NONCE=' && ! env | grep -q AHPTY_SI; then echo nonce-safe-$((1+1)); fi"#;
    let (_, line, code) = run(&mut c, &uri, probe).await;
    assert_eq!(line, probe);
    assert_eq!(code, Some(0));
    c.wait_data(&uri, "nonce-safe-2", SHELL_TIMEOUT).await;
});
