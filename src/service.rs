//! Running as a systemd user service: the unit file (the one shipped as `docs/ahpty.service`,
//! with `ExecStart` pointing at the running binary), `ahpty service install|uninstall|status`,
//! and recognising the journal on stdout/stderr (`$JOURNAL_STREAM`).
//!
//! `install` first checks that a systemd user manager runs (its socket in `$XDG_RUNTIME_DIR`)
//! and, without one, writes nothing and says how to run `ahpty serve` instead.
//!
//! Touches only the unit file under `$XDG_CONFIG_HOME/systemd/user/` and runs `systemctl
//! --user`; reads whether the manager's socket and `/run/systemd/system` exist; uses nothing
//! else of the crate but [`crate::config`].

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::config::{config_home, is_executable};

/// The unit's name.
pub const UNIT_NAME: &str = "ahpty.service";

/// The unit shipped in the repository, `ExecStart` pointing at `~/.cargo/bin/ahpty`.
pub const UNIT_TEMPLATE: &str = include_str!("../docs/ahpty.service");

fn env(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}

/// `$XDG_CONFIG_HOME/systemd/user/ahpty.service` (else under `~/.config`); `None` without
/// either variable.
pub fn unit_path() -> Option<PathBuf> {
    config_home(&env).map(|d| d.join("systemd").join("user").join(UNIT_NAME))
}

/// The unit file for the binary `exe`: [`UNIT_TEMPLATE`] with `ExecStart=EXE serve`, the path
/// escaped for systemd (`%` → `%%`, `$` → `$$`, quoted when it holds spaces or quotes).
pub fn unit_text(exe: &Path) -> String {
    let mut path = exe
        .display()
        .to_string()
        .replace('%', "%%")
        .replace('$', "$$");
    if path.contains(|c: char| c.is_whitespace() || c == '"' || c == '\'' || c == '\\') {
        path = format!("\"{}\"", path.replace('\\', "\\\\").replace('"', "\\\""));
    }
    UNIT_TEMPLATE
        .lines()
        .map(|line| {
            if line.starts_with("ExecStart=") {
                format!("ExecStart={path} serve")
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// `systemctl` on `$PATH`, if any.
fn systemctl() -> Option<PathBuf> {
    let path = env("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("systemctl"))
        .find(|p| is_executable(p))
}

/// Runs `systemctl --user ARGS`, telling `out` first; its own output goes to the terminal.
/// `Ok(false)` when it failed (its exit status is reported on `out`).
fn run(out: &mut dyn Write, systemctl: &Path, args: &[&str]) -> io::Result<bool> {
    writeln!(out, "$ systemctl --user {}", args.join(" "))?;
    out.flush()?;
    let status = Command::new(systemctl).arg("--user").args(args).status()?;
    if !status.success() {
        writeln!(
            out,
            "systemctl --user {} failed ({status}): see its message above",
            args.join(" ")
        )?;
    }
    Ok(status.success())
}

/// The socket a running systemd user manager listens on: `$XDG_RUNTIME_DIR/systemd/private`
/// (`/run/user/UID/…` when `XDG_RUNTIME_DIR` is unset or relative).
pub fn user_manager_socket() -> PathBuf {
    let runtime = env("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from(format!("/run/user/{}", crate::config::effective_uid())));
    runtime.join("systemd").join("private")
}

/// Why no systemd user manager can take the unit, in one line that says what to do instead;
/// `None` when one runs (its socket, [`user_manager_socket`], is there).
fn no_user_manager() -> Option<String> {
    use std::os::unix::fs::FileTypeExt;
    let socket = user_manager_socket();
    let running = std::fs::metadata(&socket).is_ok_and(|m| m.file_type().is_socket());
    if running {
        return None;
    }
    let serve = "start the daemon with `ahpty serve` instead (e.g. `nohup ahpty serve \
                 >>~/ahpty.log 2>&1 &`: the log's first line is the connect URL with its token; \
                 the CLI needs none, it uses the Unix socket)";
    // `/run/systemd/system` exists exactly when systemd is the init system (sd_booted).
    Some(if Path::new("/run/systemd/system").exists() {
        format!(
            "no systemd user manager runs for you here (no {}): nothing installed; log in \
             through a session that starts one (`loginctl enable-linger $USER` keeps one \
             running), or {serve}",
            socket.display()
        )
    } else {
        format!("systemd is not running on this machine: nothing installed; {serve}")
    })
}

fn no_unit_path() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        "neither XDG_CONFIG_HOME nor HOME is set: cannot tell where user units go",
    )
}

/// `ahpty service install`: writes the unit for the running binary, then `systemctl --user
/// daemon-reload` and `enable --now`. Returns the exit status: 0 done; 1 systemctl failed;
/// 2 no systemd user manager runs (one line says so and how to run `ahpty serve` instead;
/// nothing is written), or systemctl is not on `$PATH` (the unit is written and the two
/// commands to run are printed).
pub fn install(out: &mut dyn Write) -> io::Result<u8> {
    let exe = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .map_err(|e| io::Error::new(e.kind(), format!("cannot find this binary: {e}")))?;
    let path = unit_path().ok_or_else(no_unit_path)?;
    if let Some(why) = no_user_manager() {
        eprintln!("ahpty: {why}");
        return Ok(2);
    }
    let text = unit_text(&exe);
    let before = std::fs::read_to_string(&path).ok();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
    }
    if before.as_deref() != Some(text.as_str()) {
        std::fs::write(&path, &text)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    }
    let what = match before {
        None => "wrote",
        Some(b) if b == text => "unchanged",
        Some(_) => "replaced",
    };
    writeln!(
        out,
        "{what} {} (ExecStart={} serve)",
        path.display(),
        exe.display()
    )?;
    if exe.components().any(|c| c.as_os_str() == "target") {
        writeln!(
            out,
            "note: {} is a build output; `cargo install --locked --path .` puts a binary in \
             ~/.cargo/bin that `cargo clean` does not remove (then run this again)",
            exe.display()
        )?;
    }
    let Some(systemctl) = systemctl() else {
        writeln!(
            out,
            "systemctl is not on PATH; where systemd runs, finish with:\n  \
             systemctl --user daemon-reload\n  systemctl --user enable --now {UNIT_NAME}"
        )?;
        return Ok(2);
    };
    for args in [&["daemon-reload"][..], &["enable", "--now", UNIT_NAME][..]] {
        if !run(out, &systemctl, args)? {
            return Ok(1);
        }
    }
    writeln!(
        out,
        "ahpty now runs at every login: `ahpty service status`; logs: `journalctl --user -u ahpty`"
    )?;
    Ok(0)
}

/// `ahpty service uninstall`: `systemctl --user disable --now`, removes the unit file, then
/// `daemon-reload`. Exit status as for [`install`]; 0 also when nothing was installed.
pub fn uninstall(out: &mut dyn Write) -> io::Result<u8> {
    let path = unit_path().ok_or_else(no_unit_path)?;
    if !path.exists() {
        writeln!(out, "{} does not exist: nothing to remove", path.display())?;
        return Ok(0);
    }
    let systemctl = systemctl();
    // The file goes whatever systemd says (e.g. no user manager in a container): the
    // command must be able to undo its own install.
    let disabled = match &systemctl {
        Some(sc) => run(out, sc, &["disable", "--now", UNIT_NAME])?,
        None => false,
    };
    std::fs::remove_file(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    writeln!(out, "removed {}", path.display())?;
    match &systemctl {
        Some(sc) => {
            let reloaded = run(out, sc, &["daemon-reload"])?;
            if !disabled {
                writeln!(
                    out,
                    "systemd could not disable the service (no systemd user manager?): the unit \
                     file is removed anyway; where the manager runs, `systemctl --user stop \
                     {UNIT_NAME}` stops a running daemon"
                )?;
            }
            Ok(if disabled && reloaded { 0 } else { 1 })
        }
        None => {
            writeln!(
                out,
                "systemctl is not on PATH, so nothing was stopped or disabled; if a systemd user \
                 manager had the service enabled, clean up there with:\n  \
                 systemctl --user disable --now {UNIT_NAME}\n  systemctl --user daemon-reload"
            )?;
            Ok(2)
        }
    }
}

/// `ahpty service status`: the unit file's path and `ExecStart`, then `systemctl --user
/// status` (whose exit status is returned: 0 running, 3 stopped, 4 unknown unit); 2 when
/// systemctl is not on `$PATH`.
pub fn status(out: &mut dyn Write) -> io::Result<u8> {
    let path = unit_path().ok_or_else(no_unit_path)?;
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let exec = text
                .lines()
                .find_map(|l| l.strip_prefix("ExecStart="))
                .unwrap_or("?");
            writeln!(out, "unit file: {} (ExecStart={exec})", path.display())?;
        }
        Err(_) => writeln!(
            out,
            "unit file: {} (not installed: `ahpty service install`)",
            path.display()
        )?,
    }
    let Some(systemctl) = systemctl() else {
        writeln!(out, "systemctl is not on PATH: cannot ask systemd")?;
        return Ok(2);
    };
    out.flush()?;
    let status = Command::new(systemctl)
        .args(["--user", "status", UNIT_NAME])
        .status()?;
    let code = status
        .code()
        .and_then(|c| u8::try_from(c).ok())
        .unwrap_or(1);
    if !matches!(code, 0 | 3 | 4) {
        writeln!(
            out,
            "systemctl --user status failed (exit status {code}): no systemd user manager is \
             reachable from here (it needs a login session: XDG_RUNTIME_DIR and its bus)"
        )?;
    }
    Ok(code)
}

/// Whether `stream` is the systemd journal: `$JOURNAL_STREAM` (`DEVICE:INODE`) names the
/// file it is open on.
pub fn is_journal(stream: &impl AsFd) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(value) = env("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = value.to_str().and_then(|v| v.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    let Ok(fd) = stream.as_fd().try_clone_to_owned() else {
        return false;
    };
    match std::fs::File::from(fd).metadata() {
        Ok(meta) => meta.dev() == dev && meta.ino() == ino,
        Err(_) => false,
    }
}
