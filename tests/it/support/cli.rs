//! Running `ahpty` client subcommands (`ls`, `run`, `logs`, `attach`, …): to completion with a
//! timeout, or live, reading their output as it comes.

use std::process::{Command, Stdio};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `ahpty ARGS…` with `HOME=home`, without the test's `$AHPTY_*`, `XDG_RUNTIME_DIR` and
/// `RUST_LOG`; stdin null, stdout/stderr piped.
pub fn cli_command(home: &std::path::Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ahpty"));
    cmd.args(args)
        .env("HOME", home)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for var in [
        "AHPTY_URL",
        "AHPTY_TOKEN",
        "AHPTY_TERMINAL",
        "AHPTY_HOST_ID",
        "AHPTY_EXE",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// What a finished CLI run printed.
#[derive(Debug)]
pub struct CliOutput {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Time one CLI invocation gets in the specification modules.
pub const CLI_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `cmd` to completion (at most [`CLI_TIMEOUT`]) off the async runtime.
pub async fn cli(cmd: Command) -> CliOutput {
    tokio::task::spawn_blocking(move || run_cli(cmd, CLI_TIMEOUT))
        .await
        .expect("cli task")
}

/// `ahpty ls --json` against `d`, parsed: one JSON object a terminal (panics unless it exits 0
/// and prints an array).
pub async fn ls_json(d: &super::Daemon) -> Vec<serde_json::Value> {
    let out = cli(d.cli(&["ls", "--json"])).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let v: serde_json::Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    v.as_array().expect("ls --json prints an array").clone()
}

/// Runs `cmd` to completion (at most `timeout`; killed and panics after that).
pub fn run_cli(mut cmd: Command, timeout: Duration) -> CliOutput {
    let child = cmd.spawn().expect("spawn ahpty client");
    let pid = child.id();
    let (tx, rx) = std_mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(out) => {
            let out = out.expect("wait for ahpty client");
            CliOutput {
                code: out.status.code(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            }
        }
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            panic!("{cmd:?} did not finish within {timeout:?}");
        }
    }
}

type Pipe = Box<dyn tokio::io::AsyncRead + Unpin + Send>;

/// A CLI process still running, whose output is collected as it comes.
pub struct LiveCli {
    child: tokio::process::Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    progress: Arc<tokio::sync::Notify>,
    readers: Vec<tokio::task::JoinHandle<()>>,
}

impl LiveCli {
    /// Spawns `cmd` (its stdout and stderr must be piped) on the tokio runtime.
    pub fn spawn(cmd: Command) -> LiveCli {
        use tokio::io::AsyncReadExt;
        let mut child = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn ahpty client");
        let progress = Arc::new(tokio::sync::Notify::new());
        let (stdout, stderr) = (
            Arc::new(Mutex::new(String::new())),
            Arc::new(Mutex::new(String::new())),
        );
        let mut readers = Vec::new();
        let pipes: [(Pipe, Arc<Mutex<String>>); 2] = [
            (
                Box::new(child.stdout.take().expect("piped stdout")),
                stdout.clone(),
            ),
            (
                Box::new(child.stderr.take().expect("piped stderr")),
                stderr.clone(),
            ),
        ];
        for (mut pipe, buf) in pipes {
            let progress = progress.clone();
            readers.push(tokio::spawn(async move {
                let mut chunk = vec![0u8; 8192];
                while let Ok(n) = pipe.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                    buf.lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&chunk[..n]));
                    progress.notify_waiters();
                }
                progress.notify_waiters();
            }));
        }
        LiveCli {
            child,
            stdout,
            stderr,
            progress,
            readers,
        }
    }

    /// Stdout so far.
    pub fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// Stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until stdout (or stderr, with `on_stderr`) contains `needle`.
    pub async fn wait_for(&self, needle: &str, on_stderr: bool, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.progress.notified();
            let text = if on_stderr {
                self.stderr()
            } else {
                self.stdout()
            };
            if text.contains(needle) {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!(
                    "{needle:?} did not appear within {timeout:?}; stdout {:?}, stderr {:?}",
                    self.stdout(),
                    self.stderr()
                );
            }
        }
    }

    /// Waits for the process to exit and returns everything it printed.
    pub async fn finish(mut self, timeout: Duration) -> CliOutput {
        let status = tokio::time::timeout(timeout, self.child.wait())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the client did not exit within {timeout:?}; stdout {:?}, stderr {:?}",
                    self.stdout(),
                    self.stderr()
                )
            })
            .expect("wait");
        for r in self.readers.drain(..) {
            let _ = tokio::time::timeout(timeout, r).await;
        }
        CliOutput {
            code: status.code(),
            stdout: self.stdout(),
            stderr: self.stderr(),
        }
    }
}
