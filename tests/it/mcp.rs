//! `ahpty mcp` driven by a real MCP client: the Python `mcp` package's stdio client runs
//! tests/mcp/drive.py against the built binary and a test daemon (bash with shell
//! integration). Without Python `mcp` the tests fail when `CI` is set and are skipped with a
//! loud message otherwise.

use std::process::Command;

use crate::support::Daemon;

/// Whether `python3 -c "import mcp"` works; panics under CI when it does not.
fn have_python_mcp() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import mcp"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 with the `mcp` package is needed (pip install mcp)"
        );
        eprintln!("SKIPPED: python3 with the `mcp` package is missing (pip install mcp)");
    }
    ok
}

/// Runs one scenario of drive.py against a fresh daemon; asserts it printed `ok`.
fn scenario(name: &str) {
    if !have_python_mcp() {
        return;
    }
    let daemon = Daemon::builder().shell("/bin/bash").start();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/drive.py");
    let out = Command::new("timeout")
        .args(["120", "python3", script, env!("CARGO_BIN_EXE_ahpty")])
        .arg(daemon.socket())
        .arg(name)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.trim_end().ends_with("ok"),
        "{name}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn exit_codes_progress_bar_background_stop_and_cut_output() {
    scenario("exit_codes");
}

#[test]
fn a_second_session_lists_a_background_job() {
    scenario("list_second_session");
}

#[test]
fn ten_runs_at_once_in_ten_terminals() {
    scenario("concurrent");
}
