//! The daemon as a process: a taken port is a one-line error, SIGTERM closes connections
//! (1001) and kills the terminals, and the upgrade checks Origin and Host.

use std::time::Duration;

use crate::support::*;
use serde_json::json;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

spec!(port_in_use_is_a_one_line_error, {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, stderr) = Daemon::bare()
        .args(&["--listen", &addr, "--shell", "/bin/bash"])
        .refused();
    assert_eq!(code, Some(1), "stderr: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line, got: {stderr}");
    assert!(
        lines[0].contains(&addr),
        "error should name {addr}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    drop(taken);
});

spec!(
    sigterm_closes_connections_with_1001_and_kills_shells,
    async {
        let mut d = Daemon::start();
        let (mut raw, _) = Raw::connect_init(&d.url(), "sigterm", &[]).await;
        let t = term_uri("sigterm");
        raw.create_terminal(&t).await;
        raw.subscribe(&t).await;
        raw.ready(&t).await;
        raw.type_text(&t, "echo shell=$$; sleep 1003 & echo job=$!\r")
            .await;
        raw.wait_until("pids", SHELL_TIMEOUT, |c| {
            find_number_after(c.data(&t), "job=").is_some()
        })
        .await;
        let data = raw.data(&t);
        let shell = find_number_after(data, "shell=").unwrap() as i32;
        let job = find_number_after(data, "job=").unwrap() as i32;
        assert!(!is_dead(shell) && !is_dead(job));

        d.signal(nix::sys::signal::Signal::SIGTERM);
        let frame = raw.wait_closed(Duration::from_secs(5)).await;
        let frame = frame.expect("no close frame (connection just dropped)");
        assert_eq!(frame.code, CloseCode::Away, "close frame {frame:?}");
        let status = tokio::task::spawn_blocking(move || {
            let st = d.wait_exit(Duration::from_secs(5));
            (st, d)
        })
        .await
        .unwrap();
        let (st, d) = status;
        let st =
            st.unwrap_or_else(|| panic!("daemon still running 5 s after SIGTERM:\n{}", d.stderr()));
        assert_eq!(
            st.code(),
            Some(0),
            "exit status {st:?}; stderr:\n{}",
            d.stderr()
        );
        wait_dead(
            &[shell, job],
            Duration::from_secs(3),
            "terminal processes after SIGTERM",
        );
    }
);

spec!(
    cross_site_origins_and_foreign_hosts_are_refused_before_the_upgrade,
    async {
        let d = Daemon::start();
        let url = d.url();
        assert_eq!(
            upgrade_status(&url, &[("Origin", "https://evil.example")]).await,
            Err(403)
        );
        assert_eq!(upgrade_status(&url, &[("Origin", "null")]).await, Err(403));
        assert_eq!(
            upgrade_status(&url, &[("Origin", "http://localhost:5173")]).await,
            Err(403)
        );
        assert_eq!(
            upgrade_status(&url, &[("Origin", "vscode-file://vscode-app")]).await,
            Ok(())
        );
        assert_eq!(upgrade_status(&url, &[]).await, Ok(()));
        assert_eq!(
            upgrade_status(&url, &[("Host", "attacker.example")]).await,
            Err(403)
        );
        assert_eq!(
            upgrade_status(
                &url,
                &[
                    ("Host", "attacker.example:80"),
                    ("Origin", "vscode-file://vscode-app")
                ]
            )
            .await,
            Err(403)
        );
        assert_eq!(
            upgrade_status(
                &url,
                &[(
                    "Host",
                    &format!("localhost:{}", url.rsplit(':').next().unwrap())
                )]
            )
            .await,
            Ok(())
        );
        // An accepted upgrade with VS Code's Origin serves AHP.
        let mut req = url.as_str().into_client_request().unwrap();
        req.headers_mut().insert(
            "Origin",
            http::HeaderValue::from_static("vscode-file://vscode-app"),
        );
        let mut raw = Raw::connect_with(req, Opts::default()).await;
        let r = raw.request("ping", json!({"channel": ROOT})).await;
        assert!(r["result"].is_null(), "{r}");
        // A refused upgrade created no terminal and the daemon is still serving.
        let c = Ahp::connect(&url, "after-refusals", &[ROOT]).await;
        let v = serde_json::to_value(&c.init.snapshots[0].state).unwrap();
        assert_eq!(v["terminals"], json!([]), "{v}");
    }
);

spec!(allow_origin_flag_admits_that_origin, async {
    let d = Daemon::start_with(&["--allow-origin", "http://localhost:5173"]);
    assert_eq!(
        upgrade_status(&d.url(), &[("Origin", "http://localhost:5173")]).await,
        Ok(())
    );
    assert_eq!(
        upgrade_status(&d.url(), &[("Origin", "http://localhost:3000")]).await,
        Err(403)
    );
});
