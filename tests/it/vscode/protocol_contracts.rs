//! Ports of VS Code's `protocolContractsSuite.ts` (src/vs/platform/agentHost/test/node/e2e/
//! suites/) that apply to a host without agents. Session and chat channels of the original
//! are replaced by terminal channels where the check itself is about channels in general;
//! docs/protocol.md ("VS Code's conformance suite") lists every upstream test and why the
//! others do not apply.

use ahp::ahp_types::actions::{StateAction, TerminalInputAction, TerminalTitleChangedAction};
use serde_json::{json, Value};

use super::harness::*;
use crate::support::*;

/// `triggerServerActivity`: a failing `createSession`, then a `ping` (a barrier for anything
/// the server would push).
async fn trigger_server_activity(raw: &mut Raw, marker: &str) {
    let r = raw
        .request(
            "createSession",
            json!({"channel": format!("missing-provider:/{marker}"), "provider": "missing-provider"}),
        )
        .await;
    assert!(r.get("error").is_some(), "{r}");
    let r = raw.request("ping", json!({"channel": ROOT})).await;
    assert_eq!(r["result"], Value::Null);
}

fn otlp_exports(raw: &Raw) -> usize {
    raw.received
        .iter()
        .filter(|m| m["method"] == "otlp/exportLogs")
        .count()
}

/// `initializeAdditionalClient(prefix)`: a raw connection initialized as `<prefix>-copilotcli`.
async fn additional(d: &Daemon, prefix: &str) -> Raw {
    Raw::connect_init(&d.url(), &format!("{prefix}-copilotcli"), &[])
        .await
        .0
}

/// A terminal created by the shared client, which stays subscribed to it.
async fn shared_with_terminal(d: &Daemon, prefix: &str) -> (Ahp, Term) {
    with_terminal(d, prefix).await
}

fn title(title: &str) -> StateAction {
    StateAction::TerminalTitleChanged(TerminalTitleChangedAction {
        title: title.into(),
    })
}

/// `dispatchAndWaitOnShared(channel, action)`: dispatch, then wait for the echo carrying this
/// clientSeq.
async fn dispatch_and_wait_on_shared(shared: &mut Ahp, channel: &str, action: StateAction) -> i64 {
    let seq = shared.dispatch(channel, action).await;
    let ch = channel.to_string();
    shared
        .wait_for("the shared client's echo", RPC_TIMEOUT, |log| {
            log.iter()
                .any(|e| e.channel == ch && e.origin.as_ref().is_some_and(|o| o.client_seq == seq))
        })
        .await;
    seq
}

// VS Code: 'ping answers while the connection is live'
spec!(ping_answers_while_the_connection_is_live, async {
    let d = Daemon::start();
    let shared = uninitialized(&d.url()).await;
    tokio::time::timeout(RPC_TIMEOUT, shared.ping())
        .await
        .expect("ping timed out")
        .expect("ping resolves");
});

// VS Code: 'ping answers before the client initializes'
spec!(ping_answers_before_the_client_initializes, async {
    let d = Daemon::start();
    let mut raw = Raw::connect(&d.url()).await;
    let r = raw.request("ping", json!({"channel": ROOT})).await;
    assert_eq!(r.get("result"), Some(&Value::Null), "{r}");
});

// VS Code: 'initialize ignores an unknown OTLP log level'
spec!(initialize_ignores_an_unknown_otlp_log_level, async {
    let d = Daemon::start();
    let mut raw = Raw::connect(&d.url()).await;
    let r = raw
        .request(
            "initialize",
            init_params(
                "otlp-invalid-initial-copilotcli",
                json!({"initialSubscriptions": ["ahp-otlp://logs/verbose"]}),
            ),
        )
        .await;
    raw.skip_seen();
    let before = raw.received.len();
    trigger_server_activity(&mut raw, "otlp-invalid-initial").await;
    assert_eq!(r["result"]["snapshots"], json!([]), "{r}");
    assert_eq!(otlp_exports(&raw), 0);
    assert_eq!(raw.received.len() - before, 2, "{}", raw.describe());
});

// VS Code: 'subscribe acknowledges an unknown OTLP log level without installing it'
spec!(
    subscribe_acknowledges_an_unknown_otlp_log_level_without_installing_it,
    async {
        let d = Daemon::start();
        let mut raw = additional(&d, "otlp-invalid-subscribe").await;
        let r = raw
            .request("subscribe", json!({"channel": "ahp-otlp://logs/verbose"}))
            .await;
        trigger_server_activity(&mut raw, "otlp-invalid-subscribe").await;
        assert_eq!(r.get("result"), Some(&json!({})), "{r}");
        assert_eq!(otlp_exports(&raw), 0);
    }
);

// VS Code: 'initialize rejects incompatible protocol versions'
spec!(initialize_rejects_incompatible_protocol_versions, async {
    let d = Daemon::start();
    let mut raw = Raw::connect(&d.url()).await;
    let r = raw
        .request(
            "initialize",
            json!({"channel": ROOT, "protocolVersions": ["999.0.0"],
                   "clientId": "incompatible-version-copilotcli"}),
        )
        .await;
    assert_eq!(Raw::code(&r), Some(-32005), "{r}");
});

// VS Code: 'initialize rejects an empty protocol version list'
spec!(initialize_rejects_an_empty_protocol_version_list, async {
    let d = Daemon::start();
    let mut raw = Raw::connect(&d.url()).await;
    let r = raw
        .request(
            "initialize",
            json!({"channel": ROOT, "protocolVersions": [], "clientId": "empty-versions-copilotcli"}),
        )
        .await;
    assert_eq!(Raw::code(&r), Some(-32005), "{r}");
});

// VS Code: 'initialize without subscriptions returns no snapshots'
spec!(
    initialize_without_subscriptions_returns_no_snapshots,
    async {
        let d = Daemon::start();
        let client = uninitialized(&d.url()).await;
        let r = client
            .request::<_, Value>(
                "initialize",
                init_params("no-initial-subscriptions-copilotcli", json!({})),
            )
            .await
            .expect("initialize");
        assert_eq!(r.get("snapshots"), Some(&json!([])), "{r}");
    }
);

/// One `initialize` with `extra` params on a fresh official client; returns the result.
async fn initialize_with(d: &Daemon, client_id: &str, extra: Value) -> Value {
    let client = uninitialized(&d.url()).await;
    client
        .request::<_, Value>("initialize", init_params(client_id, extra))
        .await
        .expect("initialize")
}

// VS Code: 'initialize reports the negotiated protocol and sequence'
spec!(
    initialize_reports_the_negotiated_protocol_and_sequence,
    async {
        let d = Daemon::start();
        let r = initialize_with(
            &d,
            "server-identity-copilotcli",
            json!({"clientInfo": {"name": "agent-host-e2e", "version": "1.0.0"}}),
        )
        .await;
        assert_eq!(r["protocolVersion"], PV);
        assert!(r["serverSeq"].as_i64().is_some_and(|s| s >= 0), "{r}");
    }
);

// VS Code: 'initialize selects a supported fallback protocol version'
spec!(
    initialize_selects_a_supported_fallback_protocol_version,
    async {
        let d = Daemon::start();
        let r = initialize_with(
            &d,
            "fallback-version-copilotcli",
            json!({"protocolVersions": ["999.0.0", PV]}),
        )
        .await;
        assert_eq!(r["protocolVersion"], PV);
    }
);

// VS Code: 'initialize accepts informational client identity'
spec!(initialize_accepts_informational_client_identity, async {
    let d = Daemon::start();
    let r = initialize_with(
        &d,
        "client-info-copilotcli",
        json!({"clientInfo": {"name": "agent-host-e2e", "version": "1.2.3", "title": "Agent Host E2E"}}),
    )
    .await;
    assert_eq!(r["protocolVersion"], PV);
});

// VS Code: 'initialize accepts locale metadata'
spec!(initialize_accepts_locale_metadata, async {
    let d = Daemon::start();
    let r = initialize_with(&d, "locale-copilotcli", json!({"locale": "ja-JP"})).await;
    assert_eq!(r["protocolVersion"], PV);
});

// VS Code: 'initialize accepts declared client capabilities'
spec!(initialize_accepts_declared_client_capabilities, async {
    let d = Daemon::start();
    let r = initialize_with(
        &d,
        "capabilities-copilotcli",
        json!({"capabilities": {"mcpApps": {}}}),
    )
    .await;
    assert_eq!(r["protocolVersion"], PV);
});

// VS Code: 'initialize cannot be repeated after the handshake'
spec!(initialize_cannot_be_repeated_after_the_handshake, async {
    let d = Daemon::start();
    let c = Ahp::connect(&d.url(), "repeat-initialize-copilotcli", &[]).await;
    let r = c
        .call(
            "initialize",
            init_params("repeat-initialize-again-copilotcli", json!({})),
        )
        .await;
    assert_eq!(code(&r), -32601);
});

// VS Code: 'fetchTurns rejects an unknown chat channel'
spec!(fetch_turns_rejects_an_unknown_chat_channel, async {
    let d = Daemon::start();
    let c = Ahp::connect(&d.url(), "fetch-turns-missing-copilotcli", &[]).await;
    let missing = chat_uri(&session_uri(), "missing");
    let r = c.call("fetchTurns", json!({"channel": missing})).await;
    assert!(r.is_err(), "{r:?}");
});

// VS Code: 'initialize returns snapshots for initial subscriptions' (a terminal and the root
// channel stand in for the session and its chat)
spec!(
    initialize_returns_snapshots_for_initial_subscriptions,
    async {
        let d = Daemon::start();
        let (_shared, t) = shared_with_terminal(&d, "initial-subscriptions").await;
        let r = initialize_with(
            &d,
            "initial-subscriptions-copilotcli",
            json!({"initialSubscriptions": [t.uri, ROOT]}),
        )
        .await;
        let mut resources: Vec<&str> = r["snapshots"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["resource"].as_str().unwrap())
            .collect();
        resources.sort();
        let mut want = vec![t.uri.as_str(), ROOT];
        want.sort();
        assert_eq!(resources, want);
    }
);

// VS Code: 'a session action is broadcast to every subscribed client' (terminal/titleChanged
// on a terminal)
spec!(
    a_session_action_is_broadcast_to_every_subscribed_client,
    async {
        let d = Daemon::start();
        let (shared, t) = shared_with_terminal(&d, "multi-client-session-action").await;
        let mut client = Ahp::connect(&d.url(), "multi-client-session-action-b", &[]).await;
        client.subscribe(&t.uri).await.unwrap();
        client.log.clear();
        let sequence = shared.dispatch(&t.uri, title("Shared Title")).await;
        let u = t.uri.clone();
        client
            .wait_for("terminal/titleChanged", RPC_TIMEOUT, |log| {
                log.iter()
                    .any(|e| e.channel == u && action_type(e) == "terminal/titleChanged")
            })
            .await;
        let observed = client
            .log
            .iter()
            .find(|e| action_type(e) == "terminal/titleChanged")
            .unwrap();
        let state = terminal_snapshot(&client, &t.uri).await;
        assert_eq!(jv(observed)["action"]["title"], "Shared Title");
        assert_eq!(observed.origin.as_ref().unwrap().client_seq, sequence);
        assert_eq!(state.title, "Shared Title");
    }
);

// VS Code: 'an unsubscribed client stops receiving channel actions' (disabled upstream; a
// terminal stands in for the session)
spec!(
    an_unsubscribed_client_stops_receiving_channel_actions,
    async {
        let d = Daemon::start();
        let (mut shared, t) = shared_with_terminal(&d, "multi-client-unsubscribe").await;
        let mut client = additional(&d, "multi-client-unsubscribe").await;
        raw_subscribe_from(&mut client, &t.uri).await;
        client
            .send_json(
                &json!({"jsonrpc": "2.0", "method": "unsubscribe", "params": {"channel": t.uri}}),
            )
            .await;
        client.request("ping", json!({"channel": ROOT})).await;
        client.received.clear();
        client.skip_seen();
        dispatch_and_wait_on_shared(&mut shared, &t.uri, title("After Unsubscribe")).await;
        // The echo reached the shared client, so anything for B was queued before this answer.
        client.request("ping", json!({"channel": ROOT})).await;
        let got: Vec<&Value> = client
            .envelopes()
            .filter(|e| e["action"]["type"] == "terminal/titleChanged" && e["channel"] == t.uri)
            .collect();
        assert!(got.is_empty(), "{got:?}");
    }
);

// VS Code: 'initial subscriptions include current session and chat state' (the terminal's
// title)
spec!(
    initial_subscriptions_include_current_session_and_chat_state,
    async {
        let d = Daemon::start();
        let (mut shared, t) = shared_with_terminal(&d, "multi-client-initial-state").await;
        dispatch_and_wait_on_shared(&mut shared, &t.uri, title("Initial Snapshot Title")).await;
        let r = initialize_with(
            &d,
            "multi-client-initial-state-copilotcli",
            json!({"initialSubscriptions": [t.uri]}),
        )
        .await;
        let snap = r["snapshots"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["resource"] == t.uri)
            .unwrap_or_else(|| panic!("{r}"));
        assert_eq!(snap["state"]["title"], "Initial Snapshot Title");
    }
);

// VS Code: 'terminal output is streamed to every subscribed client' (disabled upstream; the
// session claim carries the chat that AHP 1.0 requires)
spec!(
    terminal_output_is_streamed_to_every_subscribed_client,
    async {
        let d = Daemon::start();
        let mut shared = Ahp::connect(&d.url(), "multi-client-terminal-shared", &[]).await;
        let mut client = Ahp::connect(&d.url(), "multi-client-terminal-copilotcli", &[]).await;
        let ws = workspace("multi-client-terminal");
        let session = session_uri();
        let uri = format!(
            "agenthost-terminal://e2e/{}",
            session.rsplit('/').next().unwrap()
        );
        let r = shared
            .call(
                "createTerminal",
                json!({"channel": uri,
                   "claim": {"kind": "session", "session": session, "chat": default_chat(&session)},
                   "name": "Multi-client Terminal", "cwd": file_uri(ws.path()),
                   "cols": 90, "rows": 30}),
            )
            .await;
        assert_eq!(r.expect("createTerminal"), Value::Null);
        shared.subscribe(&uri).await.unwrap();
        client.subscribe(&uri).await.unwrap();
        shared.log.clear();
        client.log.clear();
        shared
            .dispatch(
                &uri,
                StateAction::TerminalInput(TerminalInputAction {
                    data: "node -p \"'MULTI_CLIENT_OUTPUT'\"\r".into(),
                }),
            )
            .await;
        // The echo of the typed line holds `'MULTI_CLIENT_OUTPUT'` in quotes (all upstream checks);
        // node's output is the bare word.
        let printed = |s: &str| {
            s.match_indices("MULTI_CLIENT_OUTPUT")
                .any(|(i, _)| !s[..i].ends_with('\''))
        };
        wait_streamed(&mut shared, &uri, "MULTI_CLIENT_OUTPUT (shared)", printed).await;
        wait_streamed(
            &mut client,
            &uri,
            "MULTI_CLIENT_OUTPUT (additional)",
            printed,
        )
        .await;
        let r = shared
            .call("disposeTerminal", json!({"channel": uri}))
            .await;
        assert_eq!(r.expect("disposeTerminal"), Value::Null);
    }
);

// VS Code: 'session disposal invalidates another client subscription' (disposeTerminal
// invalidates another client's terminal subscription)
spec!(
    session_disposal_invalidates_another_client_subscription,
    async {
        let d = Daemon::start();
        let (shared, t) = shared_with_terminal(&d, "multi-client-dispose").await;
        let client = Ahp::connect(&d.url(), "multi-client-dispose-b", &[]).await;
        client.subscribe(&t.uri).await.unwrap();
        let r = shared
            .call("disposeTerminal", json!({"channel": t.uri}))
            .await;
        assert_eq!(r.expect("disposeTerminal"), Value::Null);
        let again = client.subscribe(&t.uri).await;
        assert!(again.is_err(), "{again:?}");
    }
);

// VS Code: 'reconnect replays only the actions a dropped client missed' (a terminal's title
// stands in for the chat draft)
spec!(
    reconnect_replays_only_the_actions_a_dropped_client_missed,
    async {
        let d = Daemon::start();
        let (mut shared, t) = shared_with_terminal(&d, "reconnect").await;
        let id = "reconnect-dropped-copilotcli";
        let seen = dropped_after_subscribing(&d.url(), id, &[&t.uri]).await;
        dispatch_and_wait_on_shared(&mut shared, &t.uri, title("missed while disconnected")).await;
        let (_revived, result) = revive(&d.url(), id, seen, &[&t.uri]).await;
        assert_eq!(result["type"], "replay", "{result}");
        let seqs: Vec<i64> = result["actions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["serverSeq"].as_i64().unwrap())
            .collect();
        assert!(
            !seqs.iter().any(|&s| s <= seen),
            "replayed already seen: {result}"
        );
        assert!(seqs.iter().any(|&s| s > seen), "no gap replayed: {result}");
    }
);

/// A daemon whose terminals run `cat`: quiet until typed into, as the original's chats are.
fn quiet_daemon() -> Daemon {
    Daemon::start_with(&["--shell", "/bin/cat"])
}

// VS Code: 'reconnect with no missed actions returns an empty replay' (a quiet terminal)
spec!(
    reconnect_with_no_missed_actions_returns_an_empty_replay,
    async {
        let d = quiet_daemon();
        let (_shared, t) = shared_with_terminal(&d, "reconnect-empty").await;
        let id = "reconnect-empty-dropped-copilotcli";
        let seen = dropped_after_subscribing(&d.url(), id, &[&t.uri]).await;
        let (_revived, result) = revive(&d.url(), id, seen, &[&t.uri]).await;
        assert_eq!(
            result,
            json!({"type": "replay", "actions": [], "missing": []})
        );
    }
);

// VS Code: 'reconnect excludes actions from channels the client did not restore' (two quiet
// terminals)
spec!(
    reconnect_excludes_actions_from_channels_the_client_did_not_restore,
    async {
        let d = quiet_daemon();
        let (mut shared, first_t) = shared_with_terminal(&d, "reconnect-filter-first").await;
        let second_t = create_terminal(&shared, "reconnect-filter-second").await;
        let id = "reconnect-filter-copilotcli";
        let seen = dropped_after_subscribing(&d.url(), id, &[&first_t.uri]).await;
        dispatch_and_wait_on_shared(&mut shared, &first_t.uri, title("included")).await;
        dispatch_and_wait_on_shared(&mut shared, &second_t.uri, title("excluded")).await;
        let (_revived, result) = revive(&d.url(), id, seen, &[&first_t.uri]).await;
        assert_eq!(
            replayed(&result),
            vec![json!({"channel": first_t.uri, "type": "terminal/titleChanged"})]
        );
    }
);

// VS Code: 'reconnect replays missed session and chat actions together' (two quiet terminals)
spec!(
    reconnect_replays_missed_session_and_chat_actions_together,
    async {
        let d = quiet_daemon();
        let (mut shared, a) = shared_with_terminal(&d, "reconnect-state-snapshots-a").await;
        let b = create_terminal(&shared, "reconnect-state-snapshots-b").await;
        let id = "reconnect-state-snapshots-dropped-copilotcli";
        let seen = dropped_after_subscribing(&d.url(), id, &[&a.uri, &b.uri]).await;
        dispatch_and_wait_on_shared(&mut shared, &a.uri, title("Replay Session")).await;
        dispatch_and_wait_on_shared(&mut shared, &b.uri, title("replay draft")).await;
        let (_revived, result) = revive(&d.url(), id, seen, &[&a.uri, &b.uri]).await;
        assert_eq!(
            replayed(&result),
            vec![
                json!({"channel": a.uri, "type": "terminal/titleChanged"}),
                json!({"channel": b.uri, "type": "terminal/titleChanged"}),
            ]
        );
    }
);

// VS Code: 'reconnected state subscriptions receive subsequent live actions'
spec!(
    reconnected_state_subscriptions_receive_subsequent_live_actions,
    async {
        let d = quiet_daemon();
        let (shared, a) = shared_with_terminal(&d, "reconnect-live-a").await;
        let b = create_terminal(&shared, "reconnect-live-b").await;
        let id = "reconnect-live-dropped-copilotcli";
        let seen = dropped_after_subscribing(&d.url(), id, &[&a.uri, &b.uri]).await;
        let (mut revived, _) = revive(&d.url(), id, seen, &[&a.uri, &b.uri]).await;
        shared.dispatch(&a.uri, title("Reconnected Live")).await;
        shared.dispatch(&b.uri, title("live")).await;
        for (uri, want) in [(&a.uri, "Reconnected Live"), (&b.uri, "live")] {
            let e = revived
                .wait_envelope(&format!("title on {uri}"), RPC_TIMEOUT, |e| {
                    e["channel"] == *uri && e["action"]["type"] == "terminal/titleChanged"
                })
                .await;
            assert_eq!(e["action"]["title"], want);
        }
    }
);

// VS Code: 'reconnect reports a subscription it cannot resume as missing'
spec!(
    reconnect_reports_a_subscription_it_cannot_resume_as_missing,
    async {
        let d = Daemon::start();
        let (_shared, t) = shared_with_terminal(&d, "reconnect-missing").await;
        let id = "reconnect-missing-dropped-copilotcli";
        let gone = "agenthost-terminal://e2e/never-existed";
        let seen = dropped_after_subscribing(&d.url(), id, &[&t.uri]).await;
        let (_revived, result) = revive(&d.url(), id, seen, &[&t.uri, gone]).await;
        assert_eq!(result["type"], "replay", "{result}");
        assert_eq!(result["missing"], json!([gone]));
    }
);

// VS Code: 'resource requests before initialize are rejected'
spec!(resource_requests_before_initialize_are_rejected, async {
    let d = Daemon::start();
    let client = uninitialized(&d.url()).await;
    let r = client
        .request::<_, Value>(
            "resourceResolve",
            json!({"channel": ROOT, "uri": file_uri(&std::env::temp_dir())}),
        )
        .await;
    assert_eq!(code(&r), -32601);
});

// VS Code: 'unknown requests after initialize are rejected'
spec!(unknown_requests_after_initialize_are_rejected, async {
    let d = Daemon::start();
    let c = Ahp::connect(&d.url(), "unknown-request-copilotcli", &[]).await;
    let r = c
        .call("agentHostE2E/unknownRequest", json!({"channel": ROOT}))
        .await;
    assert_eq!(code(&r), -32601);
});

// VS Code: 'reconnect rejects an unknown client'
spec!(reconnect_rejects_an_unknown_client, async {
    let d = Daemon::start();
    let client = uninitialized(&d.url()).await;
    let r = client
        .request::<_, Value>(
            "reconnect",
            json!({"channel": ROOT, "clientId": "unknown-reconnect-copilotcli",
                   "lastSeenServerSeq": 0, "subscriptions": []}),
        )
        .await;
    assert_eq!(code(&r), -32008);
});

// VS Code: 'creating a session with an unknown provider is rejected'
spec!(
    creating_a_session_with_an_unknown_provider_is_rejected,
    async {
        let d = Daemon::start();
        let c = Ahp::connect(&d.url(), "unknown-provider-copilotcli", &[]).await;
        let r = c
            .call(
                "createSession",
                json!({"channel": "missing-provider:/session", "provider": "missing-provider"}),
            )
            .await;
        assert_eq!(code(&r), -32002);
    }
);

// VS Code: 'creating a chat for a missing session is rejected'
spec!(creating_a_chat_for_a_missing_session_is_rejected, async {
    let d = Daemon::start();
    let c = Ahp::connect(&d.url(), "missing-chat-session-copilotcli", &[]).await;
    let session = "copilotcli:/missing-chat-session";
    let r = c
        .call(
            "createChat",
            json!({"channel": session, "chat": chat_uri(session, "peer")}),
        )
        .await;
    assert_eq!(code(&r), -32001);
});

// VS Code: 'subscribing twice does not duplicate action delivery' (a terminal's title)
spec!(
    subscribing_twice_does_not_duplicate_action_delivery,
    async {
        let d = quiet_daemon();
        let (_owner, t) = shared_with_terminal(&d, "duplicate-subscription").await;
        let mut shared = additional(&d, "duplicate-subscription-shared").await;
        raw_subscribe_from(&mut shared, &t.uri).await;
        raw_subscribe_from(&mut shared, &t.uri).await;
        shared.received.clear();
        shared.skip_seen();
        let seq = shared
            .dispatch(
                &t.uri,
                json!({"type": "terminal/titleChanged", "title": "single delivery"}),
            )
            .await;
        let mine = |e: &Value| e["channel"] == t.uri && e["origin"]["clientSeq"] == seq;
        shared
            .wait_envelope("the echo", RPC_TIMEOUT, |e| mine(e))
            .await;
        shared.request("ping", json!({"channel": ROOT})).await;
        let deliveries = shared.envelopes().filter(|e| mine(e)).count();
        assert_eq!(deliveries, 1, "{}", shared.describe());
    }
);

// VS Code: 'resubscribing receives state changed while unsubscribed' (a terminal's title)
spec!(
    resubscribing_receives_state_changed_while_unsubscribed,
    async {
        let d = Daemon::start();
        let (shared, t) = shared_with_terminal(&d, "resubscribe-snapshot").await;
        shared.client.unsubscribe(t.uri.clone()).await.unwrap();
        shared
            .dispatch(&t.uri, title("changed while unsubscribed"))
            .await;
        shared.client.ping().await.unwrap();
        let state = terminal_snapshot(&shared, &t.uri).await;
        assert_eq!(state.title, "changed while unsubscribed");
    }
);
