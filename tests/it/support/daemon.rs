//! The daemon under test: a real `ahpty serve` process with a fresh `$HOME`, its output
//! collected line by line, SIGTERMed (then killed) on drop. [`Daemon::start`] is the usual
//! one (127.0.0.1:0, bash, no token); [`Daemon::builder`] and [`Daemon::bare`] build every
//! other variant: extra flags, environment, a token, resource limits, a wrapper program, an
//! exact argument list, or a process expected to refuse to start.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a daemon may take to say it listens.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The private `XDG_RUNTIME_DIR` of a daemon whose `$HOME` is `home` (created, mode 0700):
/// its default socket is `runtime_dir(home)/ahpty/ahpty.sock`, so no two tests share one.
pub fn runtime_dir(home: &Path) -> PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    let dir = home.join(".run");
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    dir
}

/// Lines a process writes to one pipe, collected by a thread; waiters are woken per line.
#[derive(Default)]
struct Lines {
    state: Mutex<(Vec<String>, bool)>,
    more: Condvar,
}

impl Lines {
    fn collect(pipe: impl Read + Send + 'static) -> Arc<Lines> {
        let lines = Arc::new(Lines::default());
        let keep = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                keep.state.lock().unwrap().0.push(line);
                keep.more.notify_all();
            }
            keep.state.lock().unwrap().1 = true;
            keep.more.notify_all();
        });
        lines
    }

    fn text(&self) -> String {
        self.state.lock().unwrap().0.join("\n")
    }

    /// Waits until `pick` finds something in the lines so far (or the pipe ends: `None`).
    fn wait<T>(
        &self,
        timeout: Duration,
        mut pick: impl FnMut(&[String]) -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + timeout;
        let mut state = self.state.lock().unwrap();
        loop {
            if let Some(v) = pick(&state.0) {
                return Some(v);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if state.1 || left.is_zero() {
                return None;
            }
            state = self.more.wait_timeout(state, left).unwrap().0;
        }
    }

    /// Waits (at most `timeout`) until the pipe is closed.
    fn wait_closed(&self, timeout: Duration) {
        self.wait(timeout, |_| None::<()>);
    }
}

/// A daemon's `$HOME`: its own temporary directory, or another daemon's.
enum Home {
    Owned(tempfile::TempDir),
    Shared(PathBuf),
}

impl Home {
    fn path(&self) -> &Path {
        match self {
            Home::Owned(dir) => dir.path(),
            Home::Shared(path) => path,
        }
    }
}

/// A running (or finished) `ahpty serve`.
pub struct Daemon {
    child: Option<Child>,
    home: Home,
    stdout: Arc<Lines>,
    stderr: Arc<Lines>,
    addr: OnceLock<String>,
}

/// How to start a [`Daemon`]; see [`Daemon::builder`].
pub struct DaemonBuilder {
    defaults: bool,
    shell: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    clear_env: bool,
    log: String,
    ulimit: Option<String>,
    wrapper: Vec<String>,
    home: Option<Home>,
    /// The binary to run instead of the tested one (e.g. a link a test renames over).
    exe: Option<PathBuf>,
}

impl DaemonBuilder {
    /// Runs the binary at `exe` instead of the tested one (e.g. a link that a live-upgrade
    /// test replaces).
    pub fn exe(mut self, exe: &Path) -> Self {
        self.exe = Some(exe.to_path_buf());
        self
    }

    /// One more argument after `serve` (and the defaults).
    pub fn arg(mut self, arg: impl AsRef<str>) -> Self {
        self.args.push(arg.as_ref().to_string());
        self
    }

    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// The default shell instead of `/bin/bash`.
    pub fn shell(mut self, shell: &str) -> Self {
        self.shell = shell.into();
        self
    }

    /// A variable in the daemon's environment.
    pub fn env(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Self {
        self.env
            .push((key.into(), value.as_ref().to_string_lossy().into_owned()));
        self
    }

    /// Starts from an empty environment (then HOME, the XDG directories and RUST_LOG, and
    /// whatever [`DaemonBuilder::env`] adds).
    pub fn clear_env(mut self) -> Self {
        self.clear_env = true;
        self
    }

    /// `RUST_LOG` of the daemon (default `info`, or `$AHPTY_TEST_LOG` when investigating).
    pub fn log(mut self, filter: &str) -> Self {
        self.log = filter.into();
        self
    }

    /// Runs the daemon under `sh -c '<ulimit> && exec ahpty …'`, so the limits apply to it.
    pub fn ulimit(mut self, ulimit: &str) -> Self {
        self.ulimit = Some(ulimit.into());
        self
    }

    /// Runs the daemon as an argument of `program` (e.g. `setpriv … --`).
    pub fn wrapper(mut self, program: &[&str]) -> Self {
        self.wrapper = program.iter().map(|a| a.to_string()).collect();
        self
    }

    /// The daemon's `$HOME` (default: a fresh temporary directory).
    pub fn home(mut self, home: tempfile::TempDir) -> Self {
        self.home = Some(Home::Owned(home));
        self
    }

    /// The `$HOME` (and so the default socket) of another daemon.
    pub fn home_of(mut self, other: &Daemon) -> Self {
        self.home = Some(Home::Shared(other.home().to_path_buf()));
        self
    }

    /// A `$HOME` the caller keeps (state that outlives each daemon started on it).
    pub fn home_at(mut self, home: &Path) -> Self {
        self.home = Some(Home::Shared(home.to_path_buf()));
        self
    }

    fn home_path(&mut self) -> PathBuf {
        self.home
            .get_or_insert_with(|| Home::Owned(tempfile::tempdir().unwrap()))
            .path()
            .to_path_buf()
    }

    /// Token authentication with `token` written to a file (`--token-file`), instead of
    /// `--no-auth`.
    pub fn token(mut self, token: &str) -> Self {
        let file = self.home_path().join("token");
        std::fs::write(&file, token).unwrap();
        self.defaults = false;
        let shell = self.shell.clone();
        let mut args: Vec<String> = ["--listen", "127.0.0.1:0", "--shell", &shell, "--token-file"]
            .iter()
            .map(|a| a.to_string())
            .collect();
        args.push(file.to_string_lossy().into_owned());
        args.append(&mut self.args);
        self.args = args;
        self
    }

    /// The whole command line and environment, not started: for a test that runs the
    /// process itself (and for [`DaemonBuilder::spawn`]). Stdout and stderr are piped. The
    /// builder owns the daemon's `$HOME`: keep it while the process runs.
    pub fn command(&mut self) -> Command {
        let home = self.home_path();
        let exe = match &self.exe {
            Some(p) => p.display().to_string(),
            None => env!("CARGO_BIN_EXE_ahpty").into(),
        };
        let mut argv: Vec<String> = vec![exe, "serve".into()];
        if self.defaults {
            argv.extend(
                [
                    "--listen",
                    "127.0.0.1:0",
                    "--shell",
                    &self.shell,
                    "--no-auth",
                ]
                .iter()
                .map(|a| a.to_string()),
            );
        }
        argv.extend(self.args.iter().cloned());
        if let Some(ulimit) = &self.ulimit {
            let mut wrapped = vec![
                "sh".to_string(),
                "-c".into(),
                format!("{ulimit} && exec \"$0\" \"$@\""),
            ];
            wrapped.append(&mut argv);
            argv = wrapped;
        }
        let mut wrapped = self.wrapper.clone();
        wrapped.append(&mut argv);
        let mut cmd = Command::new(&wrapped[0]);
        cmd.args(&wrapped[1..]);
        if self.clear_env {
            cmd.env_clear();
        } else {
            // Nothing of the caller's own settings, service manager or shell start-up.
            for (name, _) in std::env::vars_os() {
                let n = name.to_string_lossy();
                if n.starts_with("AHPTY_")
                    || [
                        "NOTIFY_SOCKET",
                        "JOURNAL_STREAM",
                        "BASH_ENV",
                        "ENV",
                        "ZDOTDIR",
                    ]
                    .contains(&n.as_ref())
                {
                    cmd.env_remove(&name);
                }
            }
        }
        cmd.env("HOME", &home)
            .env("XDG_RUNTIME_DIR", runtime_dir(&home))
            .env("XDG_CONFIG_HOME", home.join(".config"))
            // Transcripts and the serverSeq mark stay in the test's own HOME.
            .env("XDG_STATE_HOME", home.join(".state"))
            .env("RUST_LOG", &self.log)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Starts the process without waiting for anything.
    pub fn spawn(mut self) -> Daemon {
        let mut cmd = self.command();
        let mut child = cmd.spawn().expect("spawn ahpty");
        let stdout = Lines::collect(child.stdout.take().expect("piped stdout"));
        let stderr = Lines::collect(child.stderr.take().expect("piped stderr"));
        Daemon {
            child: Some(child),
            home: self.home.take().expect("home"),
            stdout,
            stderr,
            addr: OnceLock::new(),
        }
    }

    /// Starts the daemon and waits until it listens on TCP.
    pub fn start(self) -> Daemon {
        let d = self.spawn();
        d.addr();
        d
    }

    /// Runs a daemon expected to refuse to start: its exit code and stderr.
    pub fn refused(self) -> (Option<i32>, String) {
        let mut d = self.spawn();
        let st = d
            .wait_exit(Duration::from_secs(10))
            .unwrap_or_else(|| panic!("ahpty kept running; stderr:\n{}", d.stderr()));
        (st.code(), d.stderr())
    }
}

impl Daemon {
    /// `serve --listen 127.0.0.1:0 --shell /bin/bash --no-auth` and these arguments, with a
    /// fresh HOME (so no config file and no user rc files), a private XDG_RUNTIME_DIR (see
    /// [`runtime_dir`]), XDG_STATE_HOME `HOME/.state` (so transcripts stay in the test's HOME),
    /// without the caller's `AHPTY_*` settings, systemd variables or shell start-up variables.
    pub fn builder() -> DaemonBuilder {
        DaemonBuilder {
            defaults: true,
            shell: "/bin/bash".into(),
            args: Vec::new(),
            env: Vec::new(),
            clear_env: false,
            log: std::env::var("AHPTY_TEST_LOG").unwrap_or_else(|_| "info".into()),
            ulimit: None,
            wrapper: Vec::new(),
            home: None,
            exe: None,
        }
    }

    /// Like [`Daemon::builder`] but `serve` gets exactly the arguments given.
    pub fn bare() -> DaemonBuilder {
        DaemonBuilder {
            defaults: false,
            ..Daemon::builder()
        }
    }

    /// The usual daemon: [`Daemon::builder`] as it is.
    pub fn start() -> Daemon {
        Daemon::builder().start()
    }

    /// The usual daemon with extra arguments.
    pub fn start_with(extra: &[&str]) -> Daemon {
        Daemon::builder().args(extra).start()
    }

    /// `serve --listen 127.0.0.1:0 --no-auth --shell /bin/sh --no-shell-integration
    /// --no-socket` and `extra`, exactly, on `home` (its HOME; XDG_STATE_HOME `home/.state`),
    /// so that transcripts outlive each daemon started there.
    pub fn on_home(home: &Path, extra: &[&str]) -> DaemonBuilder {
        let mut args = vec![
            "--listen",
            "127.0.0.1:0",
            "--no-auth",
            "--shell",
            "/bin/sh",
            "--no-shell-integration",
            "--no-socket",
        ];
        args.extend_from_slice(extra);
        Daemon::bare().args(&args).home_at(home)
    }

    /// Waits for the stderr line holding `needle`; returns what follows it up to a space or
    /// a quote. Panics if the daemon ends its output without it or after 20 s.
    pub fn wait_log(&self, needle: &str) -> String {
        self.stderr
            .wait(START_TIMEOUT, |lines| {
                lines.iter().find_map(|line| {
                    let i = line.find(needle)?;
                    Some(
                        line[i + needle.len()..]
                            .chars()
                            .take_while(|c| !c.is_whitespace() && *c != '"')
                            .collect(),
                    )
                })
            })
            .unwrap_or_else(|| panic!("no `{needle}` in the log; stderr:\n{}", self.stderr()))
    }

    /// `127.0.0.1:PORT` of the (first) plain TCP listener; waits for it to listen.
    pub fn addr(&self) -> &str {
        self.addr
            .get_or_init(|| self.wait_log("listening on ws://"))
    }

    /// `ws://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("ws://{}", self.addr())
    }

    /// The daemon's `$HOME`.
    pub fn home(&self) -> &Path {
        self.home.path()
    }

    /// The daemon's `XDG_RUNTIME_DIR`.
    pub fn runtime_dir(&self) -> PathBuf {
        runtime_dir(self.home.path())
    }

    /// The default socket this daemon listens on.
    pub fn socket(&self) -> PathBuf {
        self.runtime_dir().join("ahpty").join("ahpty.sock")
    }

    /// `ahpty ARGS…` as a client of this daemon: the same HOME and XDG_RUNTIME_DIR (so it
    /// finds the default socket with no flags).
    pub fn cli(&self, args: &[&str]) -> Command {
        let mut cmd = super::cli_command(self.home.path(), args);
        cmd.env("XDG_RUNTIME_DIR", self.runtime_dir());
        cmd
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Everything the daemon wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.text()
    }

    /// Everything the daemon wrote to stdout so far.
    pub fn stdout(&self) -> String {
        self.stdout.text()
    }

    /// The first line on stdout (the URL to connect to), once it is there.
    pub fn stdout_line(&self) -> String {
        self.stdout
            .wait(START_TIMEOUT, |lines| lines.first().cloned())
            .unwrap_or_else(|| panic!("nothing on stdout; stderr:\n{}", self.stderr()))
    }

    /// Sends `sig` to the daemon.
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.pid() as i32);
        nix::sys::signal::kill(pid, sig).expect("kill");
    }

    /// Waits up to `timeout` for the daemon to exit (then for its output to be read).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        // Nothing announces the exit to this thread (the pipes may outlive it): poll.
        let status = super::poll_blocking(timeout, || child.try_wait().ok().flatten()).ok()?;
        self.child = None;
        // The pipes close once the daemon and its terminals' programs are gone.
        self.stdout.wait_closed(Duration::from_secs(2));
        self.stderr.wait_closed(Duration::from_secs(2));
        Some(status)
    }

    /// SIGTERM, then the exit status (panics after 10 s).
    pub fn terminate(&mut self) -> ExitStatus {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        self.wait_exit(Duration::from_secs(10))
            .unwrap_or_else(|| panic!("still running 10 s after SIGTERM:\n{}", self.stderr()))
    }

    /// SIGTERM (the clean path: the daemon kills every terminal), then its stderr once it has
    /// exited (panics after 10 s).
    pub fn stop(mut self) -> String {
        self.terminate();
        self.stderr()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- ahpty stdout ----\n{}\n---- ahpty stderr ----\n{}\n----",
                self.stdout(),
                self.stderr()
            );
        }
        let Some(child) = self.child.as_mut() else {
            return;
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let gone = super::poll_blocking(Duration::from_secs(5), || {
            matches!(child.try_wait(), Ok(Some(_)))
        });
        if gone.is_err() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
