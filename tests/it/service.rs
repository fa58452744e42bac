//! Running as a systemd user service: `ahpty service install|uninstall|status` against a
//! fake `systemctl` (a script recording its arguments) and without one, readiness through a
//! real `$NOTIFY_SOCKET` datagram socket, and log output when stderr is the journal.

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::support::*;

const SHIPPED_UNIT: &str = include_str!("../../docs/ahpty.service");

struct Env {
    dir: tempfile::TempDir,
    /// The socket standing in for a running systemd user manager's
    /// (`$XDG_RUNTIME_DIR/systemd/private`), while it is bound.
    _manager: Option<std::os::unix::net::UnixListener>,
}

impl Env {
    /// A home with a systemd user manager (its socket only: `systemctl` is faked or absent).
    fn new() -> Env {
        let env = Env::without_manager();
        std::fs::create_dir_all(env.path("run/systemd")).unwrap();
        let manager = std::os::unix::net::UnixListener::bind(env.path("run/systemd/private"))
            .expect("bind the manager's socket");
        Env {
            _manager: Some(manager),
            ..env
        }
    }

    /// A home where no systemd user manager runs.
    fn without_manager() -> Env {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        Env {
            dir,
            _manager: None,
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// A `systemctl` on PATH that appends its arguments to `systemctl.log` and exits `code`.
    fn fake_systemctl(&self, code: i32) {
        use std::os::unix::fs::PermissionsExt;
        let script = self.path("bin/systemctl");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\necho \"$*\" >> '{}'\nexit {code}\n",
                self.path("systemctl.log").display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn systemctl_log(&self) -> String {
        std::fs::read_to_string(self.path("systemctl.log")).unwrap_or_default()
    }

    /// `ahpty service ACTION` with PATH = only our bin directory.
    fn service(&self, action: &str) -> Output {
        Command::new(env!("CARGO_BIN_EXE_ahpty"))
            .args(["service", action])
            .env_clear()
            .env("HOME", self.dir.path())
            .env("XDG_CONFIG_HOME", self.path("cfg"))
            .env("XDG_RUNTIME_DIR", self.path("run"))
            .env("PATH", self.path("bin"))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn unit(&self) -> PathBuf {
        self.path("cfg/systemd/user/ahpty.service")
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn exe() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_ahpty"))
        .canonicalize()
        .unwrap()
}

spec!(install_status_uninstall_with_systemctl, {
    let env = Env::new();
    env.fake_systemctl(0);
    let out = env.service("install");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    // The shipped unit, ExecStart pointing at this binary.
    let unit = std::fs::read_to_string(env.unit()).unwrap();
    let want: Vec<String> = SHIPPED_UNIT
        .lines()
        .map(|l| {
            if l.starts_with("ExecStart=") {
                format!("ExecStart={} serve", exe().display())
            } else {
                l.to_string()
            }
        })
        .collect();
    assert_eq!(unit.lines().collect::<Vec<_>>(), want);
    for line in [
        "Type=notify",
        "Restart=on-failure",
        "WantedBy=default.target",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line} missing:\n{unit}");
    }
    assert_eq!(
        env.systemctl_log(),
        "--user daemon-reload\n--user enable --now ahpty.service\n"
    );
    assert!(
        stdout.contains(&format!("wrote {}", env.unit().display()))
            && stdout.contains("$ systemctl --user daemon-reload")
            && stdout.contains("$ systemctl --user enable --now ahpty.service"),
        "{stdout}"
    );
    // Again: nothing to rewrite.
    let out = env.service("install");
    assert!(
        text(&out.stdout).starts_with("unchanged "),
        "{}",
        text(&out.stdout)
    );

    std::fs::remove_file(env.path("systemctl.log")).unwrap();
    let out = env.service("status");
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out.stdout).contains(&format!("unit file: {}", env.unit().display())),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(env.systemctl_log(), "--user status ahpty.service\n");

    std::fs::remove_file(env.path("systemctl.log")).unwrap();
    let out = env.service("uninstall");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(!env.unit().exists());
    assert_eq!(
        env.systemctl_log(),
        "--user disable --now ahpty.service\n--user daemon-reload\n"
    );
    assert!(
        text(&out.stdout).contains(&format!("removed {}", env.unit().display())),
        "{}",
        text(&out.stdout)
    );
});

spec!(a_failing_systemctl_is_reported, {
    let env = Env::new();
    env.fake_systemctl(1);
    let out = env.service("install");
    assert_eq!(out.status.code(), Some(1));
    assert!(env.unit().exists());
    assert_eq!(env.systemctl_log(), "--user daemon-reload\n");
    assert!(
        text(&out.stdout).contains("systemctl --user daemon-reload failed"),
        "{}",
        text(&out.stdout)
    );
});

spec!(uninstall_removes_the_unit_even_when_systemd_refuses, {
    let env = Env::new();
    env.fake_systemctl(1);
    let _ = env.service("install");
    assert!(env.unit().exists());
    let out = env.service("uninstall");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(!env.unit().exists(), "{stdout}");
    assert!(stdout.contains("removed anyway"), "{stdout}");
    let out = env.service("status");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("no systemd user manager"), "{stdout}");
});

spec!(
    without_systemctl_the_commands_are_printed_and_the_status_is_2,
    {
        let env = Env::new();
        let out = env.service("install");
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(2), "{stdout}");
        assert!(env.unit().exists());
        assert!(
            stdout.contains("systemctl is not on PATH")
                && stdout.contains("\n  systemctl --user daemon-reload\n")
                && stdout.contains("\n  systemctl --user enable --now ahpty.service\n"),
            "{stdout}"
        );
        let out = env.service("uninstall");
        assert_eq!(out.status.code(), Some(2));
        assert!(!env.unit().exists());
        assert!(
            text(&out.stdout).contains("systemctl --user disable --now ahpty.service"),
            "{}",
            text(&out.stdout)
        );
    }
);

// Without a systemd user manager (as on this machine, or in a container) `install` writes
// nothing, calls no systemctl, and says in one line how to run the daemon instead.
spec!(
    install_without_a_systemd_user_manager_leaves_nothing_behind,
    {
        let env = Env::without_manager();
        env.fake_systemctl(0);
        let out = env.service("install");
        let stdout = text(&out.stderr);
        assert!(
            out.stdout.is_empty(),
            "nothing on stdout: {}",
            text(&out.stdout)
        );
        assert_eq!(out.status.code(), Some(2), "{stdout}");
        assert_eq!(stdout.lines().count(), 1, "one line: {stdout}");
        assert!(stdout.starts_with("ahpty: "), "{stdout}");
        assert!(
            !stdout.contains("/dev/null"),
            "the URL must not be thrown away: {stdout}"
        );
        assert!(
            stdout.contains("nothing installed") && stdout.contains("`ahpty serve`"),
            "{stdout}"
        );
        assert!(
            !env.path("cfg").exists(),
            "something was written under XDG_CONFIG_HOME"
        );
        assert_eq!(env.systemctl_log(), "", "systemctl was run");
        // No systemd at all: no hint about lingering, which needs it.
        if !Path::new("/run/systemd/system").exists() {
            assert!(stdout.contains("systemd is not running"), "{stdout}");
            assert!(!stdout.contains("linger"), "{stdout}");
        }
    }
);

/// Kills the child on drop.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

spec!(ready_is_notified_once_every_listener_is_bound, async {
    let home = tempfile::tempdir().unwrap();
    let notify_path = home.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let unix = home.path().join("run/ahpty.sock");
    let mut daemon = Daemon::bare()
        .args(&[
            "--listen",
            "127.0.0.1:0",
            "--listen",
            &format!("unix:{}", unix.display()),
            "--no-auth",
            "--shell",
            "/bin/bash",
        ])
        .env("NOTIFY_SOCKET", &notify_path);
    let mut cmd = daemon.command();
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = Guard(cmd.spawn().unwrap());

    let mut buf = [0u8; 4096];
    let n = notify.recv(&mut buf).expect("no READY=1 within 20 s");
    let msg = text(&buf[..n]);
    let lines: Vec<&str> = msg.lines().collect();
    assert_eq!(lines[0], "READY=1", "{msg}");
    let status = lines
        .iter()
        .find_map(|l| l.strip_prefix("STATUS=listening on "))
        .unwrap_or_else(|| panic!("no STATUS: {msg}"));
    // The TCP listener, the --listen socket, then the default client socket.
    let listeners: Vec<&str> = status.split(", ").collect();
    assert_eq!(listeners.len(), 3, "{msg}");
    let addr = listeners[0].strip_prefix("ws://").expect("ws://ADDR");
    assert_eq!(listeners[1], format!("unix:{}", unix.display()));
    assert!(listeners[2].ends_with("/ahpty/ahpty.sock"), "{msg}");
    // Both listeners accept at the moment READY=1 arrives.
    std::net::TcpStream::connect(addr).expect("TCP listener bound before READY=1");
    std::os::unix::net::UnixStream::connect(&unix).expect("Unix listener bound before READY=1");

    // Terminals do not inherit the daemon's NOTIFY_SOCKET.
    let (mut raw, _) = Raw::connect_init(&format!("ws://{addr}"), "notify", &[]).await;
    let t = term_uri("notify");
    raw.create_terminal(&t).await;
    raw.subscribe(&t).await;
    raw.type_text(&t, "echo \"ns=[${NOTIFY_SOCKET-unset}]\"\r")
        .await;
    raw.wait_data(&t, "ns=[unset]", SHELL_TIMEOUT).await;

    let pid = nix::unistd::Pid::from_raw(child.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let n = notify.recv(&mut buf).expect("no STOPPING=1 after SIGTERM");
    assert_eq!(text(&buf[..n]).trim(), "STOPPING=1");
    let status = tokio::task::spawn_blocking(move || child.0.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0));
});

spec!(in_the_journal_no_timestamps_colours_or_token, {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let (reader, writer) = std::io::pipe().unwrap();
    let meta = std::fs::File::from(reader.as_fd().try_clone_to_owned().unwrap())
        .metadata()
        .unwrap();
    let mut daemon = Daemon::bare().args(&["--listen", "127.0.0.1:0", "--shell", "/bin/bash"]);
    let mut cmd = daemon.command();
    cmd.env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))
        .stdout(writer.try_clone().unwrap())
        .stderr(writer);
    let _child = Guard(cmd.spawn().unwrap());
    drop(cmd);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    // Up to the line on what TCP peers need, which follows the listeners.
    while !seen.iter().any(|l: &String| l.contains("TCP peers need")) {
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no `TCP peers need` within 20 s: {seen:#?}"));
        seen.push(line);
    }
    for line in &seen {
        assert!(
            !line.contains('\x1b'),
            "colour code in the journal: {line:?}"
        );
        assert!(!line.contains("tkn="), "token in the journal: {line:?}");
    }
    // Log lines: the syslog priority, the level, no timestamp. (stdout has the bare address.)
    for line in seen.iter().filter(|l| !l.starts_with("ws://")) {
        let rest = line
            .strip_prefix("<6>")
            .or_else(|| line.strip_prefix("<4>"))
            .unwrap_or_else(|| panic!("no priority prefix: {line:?}"));
        let rest = rest.trim_start();
        assert!(
            rest.starts_with("INFO") || rest.starts_with("WARN"),
            "timestamp or other prefix in the journal: {line:?}"
        );
    }
    assert!(
        seen.iter()
            .any(|l| l.starts_with("<4>") && l.contains("the generated token is not printed")),
        "{seen:#?}"
    );
    assert!(
        seen.iter().any(|l| l.starts_with("ws://127.0.0.1:")),
        "{seen:#?}"
    );
    // The log does not contradict itself by pointing to stdout for the token.
    assert!(
        !seen.iter().any(|l| l.contains("printed on stdout")),
        "{seen:#?}"
    );
});
