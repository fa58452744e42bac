//! Terminal lifecycle driven with the official `ahp` client crate (docs/protocol.md, "Terminals").

mod common;

use std::time::Duration;

use ahp::ahp_types::actions::{
    ActionEnvelope, StateAction, TerminalResizedAction, TerminalTitleChangedAction,
};
use common::*;
use serde_json::{json, Value};

fn jv(e: &ActionEnvelope) -> Value {
    serde_json::to_value(e).unwrap()
}

fn seq_of(e: &ActionEnvelope) -> u64 {
    e.server_seq
}

/// The root row of `uri` in a `root/terminalsChanged` envelope, if any.
fn root_row(e: &ActionEnvelope, uri: &str) -> Option<Value> {
    if e.channel != ROOT {
        return None;
    }
    let v = jv(e);
    if v["action"]["type"] != "root/terminalsChanged" {
        return None;
    }
    v["action"]["terminals"]
        .as_array()?
        .iter()
        .find(|r| r["resource"] == uri)
        .cloned()
}

/// Checks exit ordering: `terminal/exited` with `code` after every data envelope, then a
/// root row saying exited with `code`.
async fn expect_exit(c: &mut Ahp, uri: &str, code: i64) {
    let exited = c.wait_exited(uri, SHELL_TIMEOUT).await;
    assert_eq!(
        jv(&exited)["action"],
        json!({"type": "terminal/exited", "exitCode": code}),
        "{}",
        c.describe_log()
    );
    assert!(
        exited.origin.is_none(),
        "server action with origin: {:?}",
        exited
    );
    let exit_seq = seq_of(&exited);
    for e in &c.log {
        if e.channel == uri && matches!(e.action, StateAction::TerminalData(_)) {
            assert!(
                seq_of(e) < exit_seq,
                "data envelope {} after terminal/exited {}: {}",
                seq_of(e),
                exit_seq,
                c.describe_log()
            );
        }
    }
    let u = uri.to_string();
    let want = json!({"status": "exited", "exitCode": code});
    c.wait_for("root row with lifecycle exited", SHELL_TIMEOUT, |log| {
        log.iter()
            .any(|e| root_row(e, &u).is_some_and(|r| r["lifecycle"] == want))
    })
    .await;
    let root = c
        .log
        .iter()
        .find(|e| root_row(e, uri).is_some_and(|r| r["lifecycle"] == want))
        .unwrap();
    assert!(
        seq_of(root) > exit_seq,
        "root update ({}) before terminal/exited ({exit_seq})",
        seq_of(root)
    );
    // Data arriving after exit would be a bug too (nothing runs any more).
    let (state, _) = c.subscribe_terminal(uri).await;
    assert_eq!(
        serde_json::to_value(&state.lifecycle).unwrap(),
        want,
        "snapshot lifecycle"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn type_resize_and_exit_code() {
    let d = Daemon::start();
    let mut c = Ahp::connect(&d.url(), "alice", &[ROOT]).await;
    let t = term_uri("basic");
    let dir = d.home().join("work dir");
    std::fs::create_dir(&dir).unwrap();
    let cwd_uri = format!("file://{}", dir.display()).replace(' ', "%20");
    let r = c.create_terminal(&t, json!({"cwd": cwd_uri})).await;
    assert_eq!(r.expect("createTerminal"), Value::Null);
    // The root catalogue got the new row.
    let u = t.clone();
    c.wait_for("root row for the new terminal", RPC_TIMEOUT, |log| {
        log.iter().any(|e| root_row(e, &u).is_some())
    })
    .await;
    let row = c.log.iter().find_map(|e| root_row(e, &t)).unwrap();
    assert_eq!(row["title"], "bash", "{row}");
    assert_eq!(
        row["claim"],
        json!({"kind": "client", "clientId": "alice"}),
        "{row}"
    );
    assert_eq!(row["lifecycle"], json!({"status": "running"}), "{row}");

    let (state, _) = c.subscribe_terminal(&t).await;
    assert_eq!(state.title, "bash");
    assert_eq!(state.cwd.as_deref(), Some(cwd_uri.as_str()));
    assert_eq!((state.cols, state.rows), (Some(80), Some(24)));
    assert_eq!(state.is_pty, Some(true));

    c.type_text(&t, "echo hello-$((6*7))\r").await;
    c.wait_data(&t, "hello-42", SHELL_TIMEOUT).await;
    c.type_text(&t, "echo cwd-$((1+8)):$(pwd)\r").await;
    c.wait_data(&t, &format!("cwd-9:{}\r\n", dir.display()), SHELL_TIMEOUT)
        .await;

    let seq = c
        .dispatch(
            &t,
            StateAction::TerminalResized(TerminalResizedAction { cols: 73, rows: 19 }),
        )
        .await;
    let (u, me) = (t.clone(), c.client_id.clone());
    c.wait_for("resize echo with origin", RPC_TIMEOUT, |log| {
        log.iter().any(|e| {
            e.channel == u
                && matches!(&e.action, StateAction::TerminalResized(r) if r.cols == 73 && r.rows == 19)
                && e.origin.as_ref().is_some_and(|o| o.client_id == me && o.client_seq == seq)
                && e.rejection_reason.is_none()
        })
    })
    .await;
    c.type_text(&t, "echo sz-$((2+2)) $(stty size)\r").await;
    c.wait_data(&t, "sz-4 19 73", SHELL_TIMEOUT).await;
    let (state, _) = c.subscribe_terminal(&t).await;
    assert_eq!((state.cols, state.rows), (Some(73), Some(19)));

    c.type_text(&t, "exit 3\r").await;
    expect_exit(&mut c, &t, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cwd_as_absolute_path_is_reported_as_file_uri() {
    let d = Daemon::start();
    let mut c = Ahp::connect(&d.url(), "cwd", &[]).await;
    let t = term_uri("cwd");
    let dir = d.home().join("My Dir");
    std::fs::create_dir(&dir).unwrap();
    c.create_terminal(&t, json!({"cwd": dir.to_str().unwrap()}))
        .await
        .expect("createTerminal with a plain path");
    let (state, _) = c.subscribe_terminal(&t).await;
    let want = format!("file://{}/My%20Dir", d.home().display());
    assert_eq!(state.cwd.as_deref(), Some(want.as_str()));
    c.type_text(&t, "echo cwd-$((3+3)):$(pwd)\r").await;
    c.wait_data(&t, &format!("cwd-6:{}\r\n", dir.display()), SHELL_TIMEOUT)
        .await;

    let t2 = term_uri("cwd-uri");
    c.create_terminal(&t2, json!({"cwd": "file:///usr"}))
        .await
        .expect("createTerminal with file:///usr");
    let (state, _) = c.subscribe_terminal(&t2).await;
    assert_eq!(state.cwd.as_deref(), Some("file:///usr"));
    c.type_text(&t2, "echo cwd-$((3+4)):$(pwd)\r").await;
    c.wait_data(&t2, "cwd-7:/usr\r\n", SHELL_TIMEOUT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_death_is_128_plus_n() {
    let d = Daemon::start();
    let mut c = Ahp::connect(&d.url(), "killer", &[ROOT]).await;
    let t = term_uri("kill9");
    c.create_terminal(&t, json!({})).await.expect("create");
    c.subscribe_terminal(&t).await;
    c.ready(&t).await;
    c.type_text(&t, "kill -9 $$\r").await;
    expect_exit(&mut c, &t, 137).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispose_removes_terminal_and_kills_its_session() {
    let d = Daemon::start();
    let mut c = Ahp::connect(&d.url(), "disposer", &[ROOT]).await;
    let t = term_uri("dispose");
    c.create_terminal(&t, json!({})).await.expect("create");
    c.subscribe_terminal(&t).await;
    c.ready(&t).await;
    c.type_text(&t, "echo shell=$$\r").await;
    c.type_text(&t, "sleep 1001 & echo pid1=$!\r").await;
    c.type_text(&t, "(trap '' HUP; sleep 1002) & echo pid2=$!\r")
        .await;
    c.type_text(&t, "echo started-$((5+5))\r").await;
    c.wait_data(&t, "started-10", SHELL_TIMEOUT).await;
    let data = c.data(&t);
    let shell = find_number_after(&data, "shell=").expect("shell pid") as i32;
    let pid1 = find_number_after(&data, "pid1=").expect("pid1") as i32;
    let pid2 = find_number_after(&data, "pid2=").expect("pid2") as i32;
    // Wait until the subshell has started its sleep (its own child).
    let mut members = Vec::new();
    let mut has_1002 = false;
    for _ in 0..500 {
        members = session_members(shell);
        has_1002 = members.iter().any(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.starts_with("sleep\u{0}1002"))
        });
        if has_1002 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(has_1002, "sleep 1002 never started: {members:?}");
    assert!(
        members.contains(&shell),
        "shell not in its own session: {members:?}"
    );
    assert!(
        members.contains(&pid1) && members.contains(&pid2),
        "{members:?}"
    );

    let before = c.log.len();
    let r = c.call("disposeTerminal", json!({"channel": t})).await;
    assert_eq!(r.expect("disposeTerminal"), Value::Null);
    wait_dead(
        &members,
        Duration::from_secs(3),
        "session of the disposed terminal",
    );

    // Removed from the root catalogue.
    c.wait_for("root update without the terminal", RPC_TIMEOUT, |log| {
        log[before..].iter().any(|e| {
            e.channel == ROOT && {
                let v = jv(e);
                v["action"]["type"] == "root/terminalsChanged"
                    && !v["action"]["terminals"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|r| r["resource"] == t)
            }
        })
    })
    .await;
    let err = c.subscribe(&t).await.unwrap_err();
    assert!(
        matches!(&err, ahp::ClientError::Rpc(e) if e.code == -32008),
        "{err:?}"
    );
    let r = c.call("disposeTerminal", json!({"channel": t})).await;
    assert_eq!(rpc_code(&r), Some(-32008), "{r:?}");
    // No action on the channel after dispose (no terminal/exited either): sync with a
    // fresh terminal's output.
    let t2 = term_uri("after-dispose");
    c.create_terminal(&t2, json!({})).await.expect("create");
    c.subscribe_terminal(&t2).await;
    c.ready(&t2).await;
    let removed_at = c.log[before..]
        .iter()
        .find(|e| {
            let v = jv(e);
            e.channel == ROOT
                && v["action"]["type"] == "root/terminalsChanged"
                && !v["action"]["terminals"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r["resource"] == t)
        })
        .map(|e| e.server_seq)
        .unwrap();
    let late: Vec<&ActionEnvelope> = c
        .log
        .iter()
        .filter(|e| e.channel == t && e.server_seq > removed_at)
        .collect();
    assert!(late.is_empty(), "actions after dispose: {late:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_terminal_errors() {
    let d = Daemon::start();
    let c = Ahp::connect(&d.url(), "errs", &[ROOT]).await;
    let t = term_uri("dup");
    c.create_terminal(&t, json!({})).await.expect("create");
    let r = c.create_terminal(&t, json!({})).await;
    assert_eq!(rpc_code(&r), Some(-32010), "{r:?}");

    for bad in ["ahp-session:/x", "ahp-root://x", "relative/t1", "t1", ""] {
        let r = c.create_terminal(bad, json!({})).await;
        assert_eq!(rpc_code(&r), Some(-32602), "channel {bad:?}: {r:?}");
    }
    let missing = d.home().join("definitely/not/here");
    let missing_s = missing.to_str().unwrap().to_string();
    for cwd in [missing_s.clone(), format!("file://{missing_s}")] {
        let r = c
            .create_terminal(&term_uri("nocwd"), json!({"cwd": cwd}))
            .await;
        assert_eq!(rpc_code(&r), Some(-32008), "cwd {cwd}: {r:?}");
        assert!(rpc_message(&r).contains(&missing_s), "{r:?}");
    }
    let r = c
        .create_terminal(&term_uri("filecwd"), json!({"cwd": "/etc/passwd"}))
        .await;
    assert_eq!(rpc_code(&r), Some(-32602), "{r:?}");
    assert!(rpc_message(&r).contains("/etc/passwd"), "{r:?}");
    let r = c
        .create_terminal(&term_uri("relcwd"), json!({"cwd": "tmp"}))
        .await;
    assert_eq!(rpc_code(&r), Some(-32602), "{r:?}");
    for (k, v) in [("cols", json!(0)), ("rows", json!(0)), ("cols", json!(-5))] {
        let mut extra = json!({});
        extra[k] = v.clone();
        let r = c.create_terminal(&term_uri("size"), extra).await;
        assert_eq!(rpc_code(&r), Some(-32602), "{k}={v}: {r:?}");
    }
    let r = c
        .call(
            "createTerminal",
            json!({"channel": term_uri("badclaim"),
                   "claim": {"kind": "session", "session": "ahp-session:/s"}}),
        )
        .await;
    assert_eq!(
        rpc_code(&r),
        Some(-32602),
        "session claim without chat: {r:?}"
    );

    // Nothing but the first terminal was registered.
    let snap = c.subscribe(ROOT).await.expect("root");
    let v = serde_json::to_value(&snap.state).unwrap();
    let rows: Vec<&Value> = v["terminals"].as_array().unwrap().iter().collect();
    assert_eq!(rows.len(), 1, "{v}");
    assert_eq!(rows[0]["resource"], json!(t), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vscode_uri_default_title_and_rename() {
    let d = Daemon::start();
    let mut c = Ahp::connect(&d.url(), "vscode-window", &[ROOT]).await;
    let t = "agenthost-terminal:/5f0c3e2a-9b1d-4c1e-8f00-1234567890ab".to_string();
    c.create_terminal(&t, json!({"cols": 120, "rows": 40}))
        .await
        .expect("create with a VS Code URI");
    let (state, _) = c.subscribe_terminal(&t).await;
    assert_eq!(state.title, "bash");
    assert_eq!((state.cols, state.rows), (Some(120), Some(40)));
    c.ready(&t).await;
    // Exact-string channel on the envelopes.
    assert!(c.log.iter().any(|e| e.channel == t));

    let seq = c
        .dispatch(
            &t,
            StateAction::TerminalTitleChanged(TerminalTitleChangedAction {
                title: "build ✓".into(),
            }),
        )
        .await;
    let u = t.clone();
    c.wait_for("title echo and root update", RPC_TIMEOUT, |log| {
        let echo = log.iter().position(|e| {
            e.channel == u
                && matches!(&e.action, StateAction::TerminalTitleChanged(a) if a.title == "build ✓")
                && e.origin.as_ref().is_some_and(|o| o.client_seq == seq)
        });
        let root = log
            .iter()
            .position(|e| root_row(e, &u).is_some_and(|r| r["title"] == "build ✓"));
        matches!((echo, root), (Some(a), Some(b)) if a < b)
    })
    .await;
    let (state, _) = c.subscribe_terminal(&t).await;
    assert_eq!(state.title, "build ✓");
    let snap = c.subscribe(ROOT).await.unwrap();
    let v = serde_json::to_value(&snap.state).unwrap();
    assert_eq!(v["terminals"][0]["title"], "build ✓", "{v}");

    // A named terminal uses its name as title.
    let t2 = term_uri("named");
    c.create_terminal(&t2, json!({"name": "dev server"}))
        .await
        .expect("create named");
    let (state, _) = c.subscribe_terminal(&t2).await;
    assert_eq!(state.title, "dev server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_is_reported_after_all_output() {
    let d = Daemon::start();
    let mut c = Ahp::connect(&d.url(), "t19", &[ROOT]).await;
    let t = term_uri("t19");
    c.create_terminal(&t, json!({})).await.expect("create");
    c.subscribe_terminal(&t).await;
    c.ready(&t).await;
    c.type_text(
        &t,
        "exec sh -c \"printf 'A%.0s' \\$(seq 1 200000); exit 3\"\r",
    )
    .await;
    expect_exit(&mut c, &t, 3).await;
    let data = c.data(&t);
    let longest = data.split(|ch| ch != 'A').map(str::len).max().unwrap_or(0);
    let total = data.matches('A').count();
    assert_eq!(
        longest,
        200_000,
        "longest run of A (total A: {total}); tail: {}",
        tail(&data, 300)
    );
}
