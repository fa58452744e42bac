//! The README's Rust example is docs/examples/hello.rs, byte for byte, and runs as written:
//! against a real daemon it prints the command's output and exit code, and leaves no terminal
//! behind (so it can run again).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::*;
use serde_json::json;

const README: &str = include_str!("../../README.md");
const EXAMPLE: &str = include_str!("../../docs/examples/hello.rs");

spec!(the_readme_shows_the_example_and_its_dependencies, {
    assert!(
        fenced(README, "rust").iter().any(|b| b == EXAMPLE),
        "README.md has no ```rust block equal to docs/examples/hello.rs (copy the file into it)"
    );
    let toml = fenced(README, "toml");
    let deps = toml
        .iter()
        .find(|b| b.contains("[dependencies]") && b.contains("ahp-ws"))
        .expect("README.md shows the example's [dependencies]");
    // Every crate the example uses is listed, with the features it needs.
    for (krate, line) in [
        ("ahp::", "ahp = "),
        ("ahp_ws::", "ahp-ws = "),
        ("serde_json::", "serde_json = "),
        ("tokio::", "tokio = "),
    ] {
        assert!(EXAMPLE.contains(krate), "{krate} unused: fix this test");
        assert!(
            deps.lines().any(|l| l.starts_with(line)),
            "{line}… missing:\n{deps}"
        );
    }
    assert!(
        deps.contains("\"macros\"") && deps.contains("\"rt-multi-thread\""),
        "{deps}"
    );
});

/// The built example: next to the test binaries, rebuilt with cargo when missing or older
/// than its source (as after `cargo test --test readme_example` alone, which builds no
/// examples).
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let bin = profile_dir.join("examples").join("hello");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples/hello.rs");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if modified(&bin) < modified(&source) {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let st = Command::new(cargo)
            .args(["build", "--quiet", "--example", "hello"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo");
        assert!(st.success(), "cargo build --example hello failed");
    }
    bin
}

spec!(the_example_runs_twice_and_leaves_no_terminal, async {
    let bin = example_binary();
    let d = Daemon::start();
    for run in 0..2 {
        let mut cmd = Command::new(&bin);
        cmd.arg(d.url())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn()
            .expect("run the example");
        let out = tokio::time::timeout(SHELL_TIMEOUT, child.wait_with_output())
            .await
            .unwrap_or_else(|_| {
                panic!("run {run}: the example did not finish within {SHELL_TIMEOUT:?}")
            })
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "run {run}: {}\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(stdout, "hello-42\nexit code: 0\n", "run {run}");
    }
    let c = Ahp::connect(&d.url(), "after-example", &[ROOT]).await;
    let root = serde_json::to_value(&c.init.snapshots[0].state).unwrap();
    assert_eq!(root["terminals"], json!([]), "{root}");
});
