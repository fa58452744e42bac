//! The daemon as a process: bind errors, graceful SIGTERM, and the upgrade checks on
//! Origin and Host.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

#[test]
fn port_in_use_is_a_one_line_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let home = tempfile::tempdir().unwrap();
    let mut child = daemon_command(home.path(), &["--listen", &addr, "--shell", "/bin/bash"])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ahpty kept running although {addr} is taken");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(1), "stderr: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line, got: {stderr}");
    assert!(
        lines[0].contains(&addr),
        "error should name {addr}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    drop(taken);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_connections_with_1001_and_kills_shells() {
    let mut d = Daemon::start();
    let (mut raw, _) = Raw::connect_init(&d.url(), "sigterm", &[]).await;
    let t = term_uri("sigterm");
    let r = raw
        .request(
            "createTerminal",
            json!({"channel": t, "claim": {"kind": "client", "clientId": "sigterm"}}),
        )
        .await;
    assert!(r.get("error").is_none(), "{r}");
    raw.request("subscribe", json!({"channel": t})).await;
    raw.ready(&t).await;
    raw.type_text(&t, "echo shell=$$; sleep 1003 & echo job=$!\r")
        .await;
    raw.wait_until("pids", SHELL_TIMEOUT, |c| {
        find_number_after(&c.data(&t), "job=").is_some()
    })
    .await;
    let data = raw.data(&t);
    let shell = find_number_after(&data, "shell=").unwrap() as i32;
    let job = find_number_after(&data, "job=").unwrap() as i32;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_and_host_checks() {
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
    let (ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    let mut raw = Raw::connect(&url).await;
    raw.ws = ws;
    let r = raw.request("ping", json!({"channel": ROOT})).await;
    assert!(r["result"].is_null(), "{r}");
    // A refused upgrade created no terminal and the daemon is still serving.
    let c = Ahp::connect(&url, "after-refusals", &[ROOT]).await;
    let v = serde_json::to_value(&c.init.snapshots[0].state).unwrap();
    assert_eq!(v["terminals"], json!([]), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_origin_flag_admits_that_origin() {
    let d = Daemon::start_with(&["--allow-origin", "http://localhost:5173"]);
    assert_eq!(
        upgrade_status(&d.url(), &[("Origin", "http://localhost:5173")]).await,
        Ok(())
    );
    assert_eq!(
        upgrade_status(&d.url(), &[("Origin", "http://localhost:3000")]).await,
        Err(403)
    );
}
