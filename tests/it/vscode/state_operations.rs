//! Ports of the terminal tests of VS Code's `stateOperationsSuite.ts`. Upstream, each test
//! first creates a real agent session (`createRealSession`); here the client only initializes
//! under the same clientId, and the session its claims name is an opaque URI with its default
//! chat (decision D6). One difference is kept on purpose: VS Code expects `cwd` as a plain
//! path, the AHP spec types it as a URI, and the spec wins (docs/protocol.md).

use ahp::ahp_types::state::{TerminalClaim, TerminalLifecycleState};
use serde_json::{json, Value};

use super::harness::*;
use crate::support::*;

fn claim_json(claim: &TerminalClaim) -> Value {
    serde_json::to_value(claim).unwrap()
}

/// `cwd` as ahpty reports it: the workspace's `file://` URI, which decodes to the workspace
/// (VS Code's `URI.file(workspace).fsPath` is the decoded form).
fn assert_cwd(cwd: Option<&str>, t: &Term) {
    let cwd = cwd.expect("cwd");
    assert_eq!(cwd, file_uri(t.workspace.path()));
    let decoded = url::Url::parse(cwd).unwrap().to_file_path().unwrap();
    assert_eq!(decoded, t.workspace.path());
}

/// `dispatchAndWait(terminal, {type: 'terminal/claimed', claim})`.
async fn claim_terminal(c: &mut Ahp, t: &Term, claim: &Value) {
    dispatch_and_wait(
        c,
        &t.uri,
        json!({"type": "terminal/claimed", "claim": claim}),
    )
    .await;
}

fn session_claim(t: &Term, extra: Value) -> Value {
    let mut c = json!({"kind": "session", "session": t.session, "chat": default_chat(&t.session)});
    if let Value::Object(m) = extra {
        for (k, v) in m {
            c[k] = v;
        }
    }
    c
}

// VS Code: 'createTerminal exposes requested dimensions cwd and claim'
spec!(
    create_terminal_exposes_requested_dimensions_cwd_and_claim,
    async {
        let d = Daemon::start();
        let (c, t) = with_terminal(&d, "terminal-create").await;
        let state = terminal_snapshot(&c, &t.uri).await;
        assert_cwd(state.cwd.as_deref(), &t);
        assert_eq!((state.cols, state.rows), (Some(90), Some(30)));
        assert_eq!(
            claim_json(&state.claim),
            json!({"kind": "client", "clientId": t.client_id})
        );
    }
);

// VS Code: 'terminal resize updates terminal dimensions'
spec!(terminal_resize_updates_terminal_dimensions, async {
    let d = Daemon::start();
    let (mut c, t) = with_terminal(&d, "terminal-resize").await;
    dispatch_and_wait(
        &mut c,
        &t.uri,
        json!({"type": "terminal/resized", "cols": 120, "rows": 40}),
    )
    .await;
    let state = terminal_snapshot(&c, &t.uri).await;
    assert_eq!((state.cols, state.rows), (Some(120), Some(40)));
});

// VS Code: 'successive terminal resizes retain the latest dimensions'
spec!(
    successive_terminal_resizes_retain_the_latest_dimensions,
    async {
        let d = Daemon::start();
        let (mut c, t) = with_terminal(&d, "terminal-resize-latest").await;
        for (cols, rows) in [(100, 35), (140, 50)] {
            dispatch_and_wait(
                &mut c,
                &t.uri,
                json!({"type": "terminal/resized", "cols": cols, "rows": rows}),
            )
            .await;
        }
        let state = terminal_snapshot(&c, &t.uri).await;
        assert_eq!((state.cols, state.rows), (Some(140), Some(50)));
    }
);

// VS Code: 'terminal claim transfer preserves dimensions and cwd'
spec!(
    terminal_claim_transfer_preserves_dimensions_and_cwd,
    async {
        let d = Daemon::start();
        let (mut c, t) = with_terminal(&d, "terminal-claim-metadata").await;
        let claim = session_claim(&t, json!({}));
        claim_terminal(&mut c, &t, &claim).await;
        let state = terminal_snapshot(&c, &t.uri).await;
        assert_cwd(state.cwd.as_deref(), &t);
        assert_eq!((state.cols, state.rows), (Some(90), Some(30)));
    }
);

// VS Code: 'terminal title change is broadcast'
spec!(terminal_title_change_is_broadcast, async {
    let d = Daemon::start();
    let (mut c, t) = with_terminal(&d, "terminal-title").await;
    c.log.clear();
    let action = serde_json::from_value(
        json!({"type": "terminal/titleChanged", "title": "Renamed Terminal"}),
    )
    .unwrap();
    c.dispatch(&t.uri, action).await;
    let u = t.uri.clone();
    c.wait_for("the title change", RPC_TIMEOUT, |log| {
        log.iter().any(|e| {
            e.channel == u
                && action_type(e) == "terminal/titleChanged"
                && jv(e)["action"]["title"] == "Renamed Terminal"
        })
    })
    .await;
});

// VS Code: 'terminal claim can transfer from the client to the session'
spec!(
    terminal_claim_can_transfer_from_the_client_to_the_session,
    async {
        let d = Daemon::start();
        let (mut c, t) = with_terminal(&d, "terminal-claim").await;
        let claim = session_claim(&t, json!({}));
        claim_terminal(&mut c, &t, &claim).await;
        assert_eq!(
            claim_json(&terminal_snapshot(&c, &t.uri).await.claim),
            claim
        );
    }
);

// VS Code: 'terminal claim can transfer back to the client'
spec!(terminal_claim_can_transfer_back_to_the_client, async {
    let d = Daemon::start();
    let (mut c, t) = with_terminal(&d, "terminal-claim-return").await;
    let claim = session_claim(&t, json!({}));
    claim_terminal(&mut c, &t, &claim).await;
    let client_claim = json!({"kind": "client", "clientId": t.client_id});
    claim_terminal(&mut c, &t, &client_claim).await;
    assert_eq!(
        claim_json(&terminal_snapshot(&c, &t.uri).await.claim),
        client_claim
    );
});

// VS Code: 'session terminal claims preserve turn and tool identifiers'
spec!(
    session_terminal_claims_preserve_turn_and_tool_identifiers,
    async {
        let d = Daemon::start();
        let (mut c, t) = with_terminal(&d, "terminal-session-claim").await;
        let claim = session_claim(
            &t,
            json!({"turnId": "turn-claim", "toolCallId": "tool-claim"}),
        );
        claim_terminal(&mut c, &t, &claim).await;
        assert_eq!(
            claim_json(&terminal_snapshot(&c, &t.uri).await.claim),
            claim
        );
    }
);

/// Types `data`, then waits until the streamed output satisfies `pred`.
async fn type_and_wait(c: &mut Ahp, uri: &str, data: &str, pred: impl Fn(&str) -> bool) {
    c.log.clear();
    c.type_text(uri, data).await;
    wait_streamed(c, uri, &format!("the output of {data:?}"), pred).await;
}

// VS Code: 'terminal input reaches the shell and produces output'
spec!(
    terminal_input_reaches_the_shell_and_produces_output,
    async {
        let d = Daemon::start();
        let (mut c, t) = with_terminal(&d, "terminal-input").await;
        type_and_wait(&mut c, &t.uri, "node -p \"40+2\"\r", has_lone_42).await;
        let output = terminal_text(&terminal_snapshot(&c, &t.uri).await);
        assert!(has_lone_42(&output), "{}", tail(&output, 300));
    }
);

// VS Code: 'terminal input preserves Unicode output'
spec!(terminal_input_preserves_unicode_output, async {
    let d = Daemon::start();
    let (mut c, t) = with_terminal(&d, "terminal-unicode").await;
    let input = "node -e \"console.log('SNOWMAN_'+String.fromCodePoint(0x2603))\"\r";
    type_and_wait(&mut c, &t.uri, input, |s| s.contains("SNOWMAN_\u{2603}")).await;
    let output = terminal_text(&terminal_snapshot(&c, &t.uri).await);
    assert!(
        output.contains("SNOWMAN_\u{2603}"),
        "{}",
        tail(&output, 300)
    );
});

// VS Code: 'clearing a terminal drops the scrollback the client already saw'
spec!(
    clearing_a_terminal_drops_the_scrollback_the_client_already_saw,
    async {
        let d = Daemon::start();
        let (mut c, t) = with_terminal(&d, "terminal-clear").await;
        let input = "node -p \"'CLEAR_'+'MARKER'\"\r";
        type_and_wait(&mut c, &t.uri, input, |s| s.contains("CLEAR_MARKER")).await;
        let before = terminal_text(&terminal_snapshot(&c, &t.uri).await);
        dispatch_and_wait(&mut c, &t.uri, json!({"type": "terminal/cleared"})).await;
        let after = terminal_text(&terminal_snapshot(&c, &t.uri).await);
        assert!(before.contains("CLEAR_MARKER"), "{}", tail(&before, 300));
        assert!(!after.contains("CLEAR_MARKER"), "{}", tail(&after, 300));
    }
);

// VS Code: 'clearing a terminal preserves dimensions and claim'
spec!(clearing_a_terminal_preserves_dimensions_and_claim, async {
    let d = Daemon::start();
    let (mut c, t) = with_terminal(&d, "terminal-clear-metadata").await;
    dispatch_and_wait(
        &mut c,
        &t.uri,
        json!({"type": "terminal/resized", "cols": 111, "rows": 37}),
    )
    .await;
    dispatch_and_wait(&mut c, &t.uri, json!({"type": "terminal/cleared"})).await;
    let state = terminal_snapshot(&c, &t.uri).await;
    assert_eq!((state.cols, state.rows), (Some(111), Some(37)));
    assert_eq!(
        claim_json(&state.claim),
        json!({"kind": "client", "clientId": t.client_id})
    );
});

/// Types `exit` and returns the exit code `terminal/exited` reported.
async fn exit_shell(c: &mut Ahp, uri: &str) -> i64 {
    c.log.clear();
    c.type_text(uri, "exit\r").await;
    let exited = c.wait_exited(uri, TERMINAL_TIMEOUT).await;
    jv(&exited)["action"]["exitCode"]
        .as_i64()
        .unwrap_or_else(|| panic!("exitCode is not a number: {}", jv(&exited)))
}

// VS Code: 'a terminal whose shell exits reports its exit code'
spec!(a_terminal_whose_shell_exits_reports_its_exit_code, async {
    let d = Daemon::start();
    let (mut c, t) = with_terminal(&d, "terminal-exit").await;
    let code = exit_shell(&mut c, &t.uri).await;
    let state = terminal_snapshot(&c, &t.uri).await;
    match state.lifecycle {
        TerminalLifecycleState::Exited(e) => assert_eq!(e.exit_code, Some(code)),
        other => panic!("not exited: {other:?}"),
    }
});

/// The terminal URIs listed by a `root/terminalsChanged` envelope (`None` for other actions).
fn listed(e: &ahp::ahp_types::actions::ActionEnvelope) -> Option<Vec<Value>> {
    (action_type(e) == "root/terminalsChanged")
        .then(|| jv(e)["action"]["terminals"].as_array().unwrap().clone())
}

// VS Code: 'root state tracks terminals as they appear and disappear'
spec!(
    root_state_tracks_terminals_as_they_appear_and_disappear,
    async {
        let d = Daemon::start();
        let (mut c, t) = with_terminal(&d, "terminal-root").await;
        c.subscribe(ROOT).await.unwrap();
        c.log.clear();
        let observed = terminal_uri();
        let r = c
            .call(
                "createTerminal",
                json!({"channel": observed, "claim": {"kind": "client", "clientId": t.client_id},
                   "name": "E2E terminal-root-observed", "cwd": file_uri(t.workspace.path()),
                   "cols": 90, "rows": 30}),
            )
            .await;
        assert_eq!(r.expect("createTerminal"), Value::Null);
        let has = |rows: &[Value]| rows.iter().any(|r| r["resource"] == observed);
        c.wait_for("a root list with the new terminal", RPC_TIMEOUT, |log| {
            log.iter().filter_map(listed).any(|rows| has(&rows))
        })
        .await;
        // Only a list after the one that showed it counts (upstream any list without it would).
        let shown = c
            .log
            .iter()
            .position(|e| listed(e).is_some_and(|rows| has(&rows)))
            .unwrap();
        let r = c
            .call("disposeTerminal", json!({"channel": observed}))
            .await;
        assert_eq!(r.expect("disposeTerminal"), Value::Null);
        c.wait_for("a root list without it", RPC_TIMEOUT, |log| {
            log[shown + 1..]
                .iter()
                .filter_map(listed)
                .any(|rows| !has(&rows))
        })
        .await;
    }
);

// VS Code: 'root terminal metadata reflects title changes'
spec!(root_terminal_metadata_reflects_title_changes, async {
    let d = Daemon::start();
    let (mut c, t) = with_terminal(&d, "terminal-root-title").await;
    c.subscribe(ROOT).await.unwrap();
    c.log.clear();
    let action = serde_json::from_value(
        json!({"type": "terminal/titleChanged", "title": "Root Metadata Title"}),
    )
    .unwrap();
    c.dispatch(&t.uri, action).await;
    let u = t.uri.clone();
    c.wait_for("the title in the root list", RPC_TIMEOUT, |log| {
        log.iter().filter_map(listed).any(|rows| {
            rows.iter()
                .any(|r| r["resource"] == u && r["title"] == "Root Metadata Title")
        })
    })
    .await;
});

// VS Code: 'root terminal metadata reflects claim transfers'
spec!(root_terminal_metadata_reflects_claim_transfers, async {
    let d = Daemon::start();
    let (mut c, t) = with_terminal(&d, "terminal-root-claim").await;
    c.subscribe(ROOT).await.unwrap();
    let claim = session_claim(&t, json!({"turnId": "turn-root-claim"}));
    c.log.clear();
    let action =
        serde_json::from_value(json!({"type": "terminal/claimed", "claim": claim})).unwrap();
    c.dispatch(&t.uri, action).await;
    let u = t.uri.clone();
    c.wait_for("the claim in the root list", RPC_TIMEOUT, |log| {
        log.iter().filter_map(listed).any(|rows| {
            rows.iter().any(|r| {
                r["resource"] == u
                    && r["claim"]["kind"] == "session"
                    && r["claim"]["session"] == claim["session"]
                    && r["claim"]["turnId"] == "turn-root-claim"
            })
        })
    })
    .await;
});

// VS Code: 'an exited terminal remains discoverable with its exit code until disposal'
spec!(
    an_exited_terminal_remains_discoverable_with_its_exit_code_until_disposal,
    async {
        let d = Daemon::start();
        let (mut c, t) = with_terminal(&d, "terminal-root-exit").await;
        let code = exit_shell(&mut c, &t.uri).await;
        let root = c.subscribe(ROOT).await.unwrap();
        let root = state_json(&root);
        let row = root["terminals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == t.uri)
            .unwrap_or_else(|| panic!("not listed: {root}"));
        assert_eq!(
            row["lifecycle"],
            json!({"status": "exited", "exitCode": code})
        );
    }
);

// VS Code: 'disposeTerminal removes the terminal from root state'
spec!(
    dispose_terminal_removes_the_terminal_from_root_state,
    async {
        let d = Daemon::start();
        let (c, t) = with_terminal(&d, "terminal-dispose").await;
        let r = c.call("disposeTerminal", json!({"channel": t.uri})).await;
        assert_eq!(r.expect("disposeTerminal"), Value::Null);
        let root = state_json(&c.subscribe(ROOT).await.unwrap());
        let rows = root["terminals"].as_array().cloned().unwrap_or_default();
        assert!(!rows.iter().any(|r| r["resource"] == t.uri), "{root}");
    }
);

// VS Code: 'creating a duplicate terminal resource is rejected'
spec!(creating_a_duplicate_terminal_resource_is_rejected, async {
    let d = Daemon::start();
    let (c, t) = with_terminal(&d, "terminal-duplicate").await;
    let r = c
        .call(
            "createTerminal",
            json!({"channel": t.uri, "claim": {"kind": "client", "clientId": t.client_id}}),
        )
        .await;
    assert!(r.is_err(), "{r:?}");
});

// VS Code: 'subscribing to an unknown terminal is rejected'
spec!(subscribing_to_an_unknown_terminal_is_rejected, async {
    let d = Daemon::start();
    let c = Ahp::connect(&d.url(), "terminal-unknown-copilotcli", &[]).await;
    let r = c.subscribe(&terminal_uri()).await;
    assert!(r.is_err(), "{r:?}");
});
