//! Ports of VS Code's `terminalResilienceSuite.ts`: real child processes (`node -e`) in
//! client-claimed terminals created like upstream's `withTerminals` (cwd = a fresh
//! workspace, 90×30). Upstream polls the snapshot until a marker shows; here the test waits
//! for the marker in the streamed `terminal/data`, then checks the snapshot holds it too.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use ahp::ahp_types::state::TerminalState;
use serde_json::{json, Value};

use super::harness::*;
use crate::support::*;

struct Resilient {
    uri: String,
    workspace: tempfile::TempDir,
}

/// `withTerminals(n)`: the shared client initializes as `terminal-resilience-<k>` and creates
/// `n` terminals, each subscribed.
async fn with_terminals(d: &Daemon, k: usize, n: usize) -> (Ahp, Vec<Resilient>) {
    let client_id = format!("terminal-resilience-{k}");
    let c = Ahp::connect(&d.url(), &client_id, &[]).await;
    let mut terms = Vec::new();
    for _ in 0..n {
        let workspace = workspace("terminal-resilience");
        let uri = terminal_uri();
        let r = c
            .call(
                "createTerminal",
                json!({"channel": uri, "claim": {"kind": "client", "clientId": client_id},
                       "cwd": file_uri(workspace.path()), "cols": 90, "rows": 30}),
            )
            .await;
        assert_eq!(r.expect("createTerminal"), Value::Null);
        c.subscribe(&uri).await.expect("subscribe");
        terms.push(Resilient { uri, workspace });
    }
    (c, terms)
}

/// `input(terminal, script)`: types `node -e "<script>"` and Enter.
async fn input(c: &Ahp, uri: &str, script: &str) {
    c.type_text(uri, &format!("node -e \"{script}\"\r")).await;
}

/// `output(terminal, marker)`: waits for `marker` in the terminal's output and returns the
/// snapshot's text, which must hold it.
async fn output(c: &mut Ahp, uri: &str, marker: &str) -> String {
    wait_streamed(c, uri, marker, |s| s.contains(marker)).await;
    let text = terminal_text(&terminal_snapshot(c, uri).await);
    assert!(
        text.contains(marker),
        "{marker} not in the snapshot: {}",
        tail(&text, 300)
    );
    text
}

/// Waits (polling the file system: there is no event for it) until `path` exists.
async fn wait_file(path: &Path) {
    eventually(
        &format!("{} to appear", path.display()),
        TERMINAL_TIMEOUT,
        async || path.exists(),
    )
    .await;
}

async fn dispose(c: &Ahp, terms: &[Resilient]) {
    for t in terms {
        let r = c.call("disposeTerminal", json!({"channel": t.uri})).await;
        assert_eq!(r.expect("disposeTerminal"), Value::Null);
    }
}

// VS Code: 'regression coverage: a client-owned terminal launches in its requested working
// directory'
spec!(
    a_client_owned_terminal_launches_in_its_requested_working_directory,
    async {
        let d = Daemon::start();
        let (mut c, terms) = with_terminals(&d, 0, 1).await;
        let t = &terms[0];
        input(
            &c,
            &t.uri,
            "require('fs').writeFileSync('cwd.txt',process.cwd());console.log('CWD_'+'READY')",
        )
        .await;
        output(&mut c, &t.uri, "CWD_READY").await;
        let reported = std::fs::read_to_string(t.workspace.path().join("cwd.txt")).unwrap();
        let actual = std::fs::metadata(reported).unwrap();
        let requested = std::fs::metadata(t.workspace.path()).unwrap();
        assert_eq!(
            (actual.dev(), actual.ino()),
            (requested.dev(), requested.ino())
        );
        dispose(&c, &terms).await;
    }
);

// VS Code: 'regression coverage: terminal input preserves UTF-8 bytes for a running child
// process'
spec!(
    terminal_input_preserves_utf8_bytes_for_a_running_child_process,
    async {
        let d = Daemon::start();
        let (mut c, terms) = with_terminals(&d, 1, 1).await;
        let t = &terms[0];
        // `\\n` on the wire, which the shell's double quotes turn into node's `'\n'`.
        input(
        &c,
        &t.uri,
        r"const fs=require('fs');let text='';process.stdin.setEncoding('utf8');process.stdin.on('data',chunk=>{text+=chunk;if(text.includes('\\n')===false)return;fs.writeFileSync('unicode.txt',text.trim());process.stdin.pause();console.log('UNICODE_'+'DONE')});console.log('INPUT_'+'READY')",
    )
    .await;
        output(&mut c, &t.uri, "INPUT_READY").await;
        c.type_text(&t.uri, "caf\u{e9}\r").await;
        output(&mut c, &t.uri, "UNICODE_DONE").await;
        let written = std::fs::read_to_string(t.workspace.path().join("unicode.txt")).unwrap();
        assert_eq!(written, "caf\u{e9}");
        dispose(&c, &terms).await;
    }
);

// VS Code: 'regression coverage: terminal resizing reaches the real child process'
spec!(terminal_resizing_reaches_the_real_child_process, async {
    let d = Daemon::start();
    let (mut c, terms) = with_terminals(&d, 2, 1).await;
    let t = &terms[0];
    dispatch_and_wait(
        &mut c,
        &t.uri,
        json!({"type": "terminal/resized", "cols": 73, "rows": 19}),
    )
    .await;
    let state: TerminalState = terminal_snapshot(&c, &t.uri).await;
    assert_eq!((state.cols, state.rows), (Some(73), Some(19)));
    input(
        &c,
        &t.uri,
        "console.log('SIZE_'+process.stdout.columns+'x'+process.stdout.rows)",
    )
    .await;
    output(&mut c, &t.uri, "SIZE_73x19").await;
    dispose(&c, &terms).await;
});

// VS Code: 'regression coverage: terminal scrollback preserves a large fragmented process
// output'
spec!(
    terminal_scrollback_preserves_a_large_fragmented_process_output,
    async {
        let d = Daemon::start();
        let (mut c, terms) = with_terminals(&d, 3, 1).await;
        let t = &terms[0];
        input(&c, &t.uri, "console.log('x'.repeat(40000)+'LONG_'+'DONE')").await;
        output(&mut c, &t.uri, "LONG_DONE").await;
        let text = terminal_text(&terminal_snapshot(&c, &t.uri).await);
        // Upstream renders the content in a headless xterm and sums the runs of at least 20 `x`
        // on each line; the pty inserts nothing into a long line, so the raw runs add up alike.
        let runs: usize = text
            .split(|ch| ch != 'x')
            .map(str::len)
            .filter(|&n| n >= 20)
            .sum();
        assert_eq!(runs, 40000);
        dispose(&c, &terms).await;
    }
);

// VS Code: 'regression coverage: terminal input and output stay isolated between two claimed
// processes'
spec!(
    terminal_input_and_output_stay_isolated_between_two_claimed_processes,
    async {
        let d = Daemon::start();
        let (mut c, terms) = with_terminals(&d, 4, 2).await;
        let (first, second) = (&terms[0], &terms[1]);
        input(
            &c,
            &first.uri,
            "require('fs').writeFileSync('owner.txt','first');console.log('FIRST_'+'DONE')",
        )
        .await;
        output(&mut c, &first.uri, "FIRST_DONE").await;
        assert!(!second.workspace.path().join("owner.txt").exists());
        let second_text = terminal_text(&terminal_snapshot(&c, &second.uri).await);
        assert!(!second_text.contains("FIRST_DONE"));
        input(
            &c,
            &second.uri,
            "require('fs').writeFileSync('owner.txt','second');console.log('SECOND_'+'DONE')",
        )
        .await;
        output(&mut c, &second.uri, "SECOND_DONE").await;
        let read = |t: &Resilient| std::fs::read_to_string(t.workspace.path().join("owner.txt"));
        assert_eq!(read(first).unwrap(), "first");
        assert_eq!(read(second).unwrap(), "second");
        let first_text = terminal_text(&terminal_snapshot(&c, &first.uri).await);
        assert!(!first_text.contains("SECOND_DONE"));
        dispose(&c, &terms).await;
    }
);

// VS Code: 'regression coverage: terminal process output remains readable after an
// unsubscribed interval'
spec!(
    terminal_process_output_remains_readable_after_an_unsubscribed_interval,
    async {
        let d = Daemon::start();
        let (mut c, terms) = with_terminals(&d, 5, 1).await;
        let t = &terms[0];
        let ws = t.workspace.path();
        std::fs::write(ws.join("trigger.txt"), "before").unwrap();
        input(
        &c,
        &t.uri,
        "const fs=require('fs');fs.watchFile('trigger.txt',{interval:50},()=>{fs.unwatchFile('trigger.txt');fs.writeFileSync('witness.txt','done');console.log('LATER_'+'OUTPUT')});console.log('WAIT_'+'READY')",
    )
    .await;
        output(&mut c, &t.uri, "WAIT_READY").await;
        c.client.unsubscribe(t.uri.clone()).await.unwrap();
        let r = c.call("listSessions", json!({"channel": ROOT})).await;
        assert_eq!(r.expect("listSessions"), json!({"items": []}));
        c.log.clear();
        std::fs::write(ws.join("trigger.txt"), "after").unwrap();
        wait_file(&ws.join("witness.txt")).await;
        // Re-subscribe: the snapshot plus what follows it must show the output produced while
        // nobody was subscribed (it may still be on its way through the pty when the file shows).
        let snapshot = terminal_text(&terminal_snapshot(&c, &t.uri).await);
        let u = t.uri.clone();
        c.wait_for(
            "LATER_OUTPUT after re-subscribing",
            TERMINAL_TIMEOUT,
            |log| snapshot.contains("LATER_OUTPUT") || data_text(log, &u).contains("LATER_OUTPUT"),
        )
        .await;
        let restored = terminal_text(&terminal_snapshot(&c, &t.uri).await);
        assert!(restored.contains("LATER_OUTPUT") && restored.contains("WAIT_READY"));
        dispose(&c, &terms).await;
    }
);
