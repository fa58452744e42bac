//! Agent terminals (docs/protocol.md, "Agent terminals"): a terminal created with a session
//! claim gets the non-interactive environment, so `git log` over a long history prints and
//! returns instead of waiting in a pager; a terminal created with a client claim keeps the
//! daemon's environment; `--agent-env` / `--no-agent-env` change the set.
//!
//! The daemon runs with a pager that waits for a key from the terminal (`cat; read … </dev/tty`,
//! like `less` but installed everywhere), so a terminal that pages blocks for certain.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::*;
use serde_json::{json, Value};

/// Pages like `less`: shows everything, then waits for a key on the terminal.
const WAITING_PAGER: &str = "cat; read _ </dev/tty";

const VARS: &[&str] = &[
    "PAGER",
    "GIT_PAGER",
    "GH_PAGER",
    "GIT_TERMINAL_PROMPT",
    "DEBIAN_FRONTEND",
    "LC_ALL",
    "AI_AGENT",
    "EXTRA",
];

/// A repository with `n` commits (`commit 1` … `commit n`), written by `git fast-import`.
fn repo_with_commits(dir: &Path, n: usize) {
    let git = |args: &[&str]| {
        let st = Command::new("git")
            .args(args)
            .current_dir(dir)
            .status()
            .expect("git");
        assert!(st.success(), "git {args:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    let mut stream = String::new();
    for i in 1..=n {
        let msg = format!("commit {i}\n");
        stream.push_str(&format!(
            "commit refs/heads/main\nmark :{i}\ncommitter T <t@example.com> {} +0000\ndata {}\n{msg}",
            1_700_000_000 + i,
            msg.len()
        ));
        if i > 1 {
            stream.push_str(&format!("from :{}\n", i - 1));
        }
        stream.push('\n');
    }
    let mut child = Command::new("git")
        .args(["fast-import", "--quiet"])
        .current_dir(dir)
        .stdin(Stdio::piped())
        .spawn()
        .expect("git fast-import");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stream.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
}

/// A daemon whose own environment pages through [`WAITING_PAGER`].
fn daemon(extra: &[&str]) -> Daemon {
    Daemon::builder()
        .args(extra)
        .env("PAGER", WAITING_PAGER)
        .env("GIT_PAGER", WAITING_PAGER)
        .start()
}

fn session_claim() -> Value {
    json!({"kind": "session", "session": "copilotcli:/agent", "chat": "ahp-chat:/agent",
           "turnId": "turn-1", "toolCallId": "tool-1"})
}

/// Creates a terminal in `cwd` with `claim`, subscribes, and waits until the shell reads.
async fn terminal(c: &mut Ahp, tag: &str, claim: Value, cwd: &Path) -> String {
    let uri = term_uri(tag);
    c.call(
        "createTerminal",
        json!({"channel": uri, "claim": claim, "cwd": cwd.to_str().unwrap(),
               "cols": 90, "rows": 30}),
    )
    .await
    .expect("createTerminal");
    c.subscribe_terminal(&uri).await;
    c.ready(&uri).await;
    uri
}

/// Each of [`VARS`] as the terminal's shell sees it (`None` = unset).
async fn environment(c: &mut Ahp, uri: &str) -> Vec<(String, Option<String>)> {
    let probe: String = VARS
        .iter()
        .map(|v| format!("${{{v}+set}}:${{{v}}}|"))
        .collect();
    let before = c.data(uri).len();
    c.type_text(uri, &format!("printf 'ENV<%s>ENV\\n' \"{probe}\"\r"))
        .await;
    let u = uri.to_string();
    c.wait_for("the environment line", SHELL_TIMEOUT, |log| {
        data_text(log, &u)[before..].contains(">ENV\r\n")
    })
    .await;
    let data = c.data(uri)[before..].to_string();
    let start = data.rfind("ENV<").unwrap() + 4;
    let end = data[start..].find(">ENV").unwrap() + start;
    let fields: Vec<&str> = data[start..end].trim_end_matches('|').split('|').collect();
    assert_eq!(fields.len(), VARS.len(), "{data:?}");
    VARS.iter()
        .zip(fields)
        .map(|(k, f)| {
            let (set, value) = f.split_once(':').unwrap();
            (k.to_string(), (set == "set").then(|| value.to_string()))
        })
        .collect()
}

fn get<'a>(env: &'a [(String, Option<String>)], key: &str) -> Option<&'a str> {
    env.iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| v.as_deref())
}

/// What the daemon itself has (it inherits the test's environment plus [`daemon`]'s pagers).
fn daemon_value(key: &str) -> Option<String> {
    match key {
        "PAGER" | "GIT_PAGER" => Some(WAITING_PAGER.into()),
        k => std::env::var(k).ok(),
    }
}

spec!(git_log_in_an_agent_terminal_finishes_without_input, async {
    let repo = tempfile::tempdir().unwrap();
    repo_with_commits(repo.path(), 200);
    let d = daemon(&[]);
    let mut c = Ahp::connect(&d.url(), "agent", &[]).await;
    let uri = terminal(&mut c, "agent-git", session_claim(), repo.path()).await;
    let env = environment(&mut c, &uri).await;
    assert_eq!(get(&env, "PAGER"), Some(""));
    assert_eq!(get(&env, "GIT_PAGER"), Some(""));
    assert_eq!(get(&env, "GH_PAGER"), Some(""));
    assert_eq!(get(&env, "GIT_TERMINAL_PROMPT"), Some("0"));
    assert_eq!(get(&env, "DEBIAN_FRONTEND"), Some("noninteractive"));
    assert_eq!(get(&env, "LC_ALL"), Some("C.UTF-8"));
    assert_eq!(get(&env, "AI_AGENT"), Some("ahpty"));
    // 200 commits on a 30-row terminal: without the agent environment git would page and
    // wait for a key; with it, the log prints and the next command runs.
    c.type_text(&uri, "git log --oneline; echo log-done-$((6*7))\r")
        .await;
    c.wait_data(&uri, "log-done-42", SHELL_TIMEOUT).await;
    let out = c.data(&uri);
    assert!(
        out.contains(" commit 200\r\n") && out.contains(" commit 1\r\n"),
        "{}",
        tail(&out, 500)
    );
});

spec!(a_client_terminal_keeps_the_daemon_environment, async {
    let d = daemon(&[]);
    let mut c = Ahp::connect(&d.url(), "person", &[]).await;
    let home = d.home().to_path_buf();
    let claim = json!({"kind": "client", "clientId": "person"});
    let uri = terminal(&mut c, "person", claim, &home).await;
    let env = environment(&mut c, &uri).await;
    for key in VARS {
        assert_eq!(
            get(&env, key).map(str::to_string),
            daemon_value(key),
            "{key} in a client-claimed terminal"
        );
    }
});

spec!(agent_env_is_configurable, async {
    let home = tempfile::tempdir().unwrap();
    // Override one, leave one out, add one.
    let d = daemon(&[
        "--agent-env",
        "PAGER=cat",
        "--agent-env",
        "LC_ALL",
        "--agent-env",
        "EXTRA=a=b",
    ]);
    let mut c = Ahp::connect(&d.url(), "agent", &[]).await;
    let uri = terminal(&mut c, "agent-cfg", session_claim(), home.path()).await;
    let env = environment(&mut c, &uri).await;
    assert_eq!(get(&env, "PAGER"), Some("cat"));
    assert_eq!(get(&env, "GIT_PAGER"), Some(""));
    assert_eq!(
        get(&env, "LC_ALL").map(str::to_string),
        daemon_value("LC_ALL")
    );
    assert_eq!(get(&env, "EXTRA"), Some("a=b"));
    drop(c);
    drop(d);
    // No defaults: only what is given.
    let d = daemon(&["--no-agent-env", "--agent-env", "EXTRA="]);
    let mut c = Ahp::connect(&d.url(), "agent", &[]).await;
    let uri = terminal(&mut c, "agent-none", session_claim(), home.path()).await;
    let env = environment(&mut c, &uri).await;
    for key in VARS.iter().filter(|k| **k != "EXTRA") {
        assert_eq!(
            get(&env, key).map(str::to_string),
            daemon_value(key),
            "{key} with --no-agent-env"
        );
    }
    assert_eq!(get(&env, "EXTRA"), Some(""));
});

spec!(agent_env_arguments_are_checked, {
    let out = Daemon::bare()
        .args(&["--agent-env", "=x"])
        .command()
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("KEY=VALUE"), "{err}");
});
