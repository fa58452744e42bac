//! Shell-integration scripts and their injection at spawn.
//!
//! Job: ship the bash, zsh and fish integration scripts inside the binary, write them once per
//! process into a private directory under the temp dir, and tell the spawner which arguments
//! and environment variables make a shell load them, without touching the user's dotfiles.
//! Touches only that directory (mode 0700, files 0600) and the process environment (read-only).

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

/// Environment variable naming a one-shot file holding the terminal's nonce; the script reads
/// the file into a shell variable, deletes it and unsets the variable before running any of the
/// user's startup files, so programs started from the shell cannot learn the nonce from the
/// environment or the file.
pub const NONCE_ENV: &str = "AHPTY_SI_NONCE_FILE";
/// zsh: the user's own ZDOTDIR (set only if the daemon's environment had one; the scripts
/// default to `$HOME`).
pub const USER_ZDOTDIR_ENV: &str = "USER_ZDOTDIR";
/// fish: the XDG_DATA_DIRS value to restore after startup (empty = it was unset).
pub const FISH_XDG_RESTORE_ENV: &str = "AHPTY_SI_XDG_DATA_DIRS";

const BASH_RC: &str = include_str!("scripts/ahpty.bash");
const ZSH_ENV: &str = include_str!("scripts/zshenv.zsh");
const ZSH_PROFILE: &str = include_str!("scripts/zprofile.zsh");
const ZSH_RC: &str = include_str!("scripts/zshrc.zsh");
const ZSH_LOGIN: &str = include_str!("scripts/zlogin.zsh");
const FISH_CONF: &str = include_str!("scripts/ahpty.fish");

/// Files written into the script directory: (relative path, contents).
const FILES: [(&str, &str); 6] = [
    ("bash/ahpty.bash", BASH_RC),
    ("zsh/.zshenv", ZSH_ENV),
    ("zsh/.zprofile", ZSH_PROFILE),
    ("zsh/.zshrc", ZSH_RC),
    ("zsh/.zlogin", ZSH_LOGIN),
    ("fish/vendor_conf.d/ahpty.fish", FISH_CONF),
];

/// Shells with built-in integration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShellKind {
    Bash,
    Zsh,
    Fish,
}

/// What to add to a shell's spawn so it loads the integration.
///
/// `args` go first on the shell's command line, before any other argument (for bash they are
/// `--rcfile <file> -i`; zsh and fish need none). `env` entries are set in the child's
/// environment, overriding the same names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Injection {
    pub args: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
}

/// Recognises bash, zsh and fish by the file name of `shell` (a leading `-`, as in login
/// shells' argv\[0\], is ignored). Any other shell → `None`.
pub fn shell_kind(shell: &Path) -> Option<ShellKind> {
    let name = shell.file_name()?.to_str()?;
    match name.trim_start_matches('-') {
        "bash" => Some(ShellKind::Bash),
        "zsh" => Some(ShellKind::Zsh),
        "fish" => Some(ShellKind::Fish),
        _ => None,
    }
}

/// A fresh random nonce for one terminal (32 lowercase hex digits).
pub fn new_nonce() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Injection for spawning `shell` with integration for a terminal whose nonce is `nonce`,
/// based on this process's environment. Other shells get an empty [`Injection`].
/// Errors only when the script directory cannot be written.
pub fn prepare(shell: &Path, nonce: &str) -> io::Result<Injection> {
    prepare_with_env(shell, nonce, |k| std::env::var_os(k))
}

/// Like [`prepare`], reading `ZDOTDIR` and `XDG_DATA_DIRS` of the environment the child would
/// otherwise get through `base_env`.
pub fn prepare_with_env(
    shell: &Path,
    nonce: &str,
    base_env: impl Fn(&str) -> Option<OsString>,
) -> io::Result<Injection> {
    let Some(kind) = shell_kind(shell) else {
        return Ok(Injection::default());
    };
    let dir = script_dir()?;
    let mut inj = Injection::default();
    inj.env.push((
        NONCE_ENV.into(),
        write_nonce_file(&dir, nonce)?.into_os_string(),
    ));
    match kind {
        ShellKind::Bash => {
            inj.args.push("--rcfile".into());
            inj.args.push(dir.join("bash/ahpty.bash").into_os_string());
            inj.args.push("-i".into());
        }
        ShellKind::Zsh => {
            if let Some(user) = base_env("ZDOTDIR").filter(|v| !v.is_empty()) {
                inj.env.push((USER_ZDOTDIR_ENV.into(), user));
            }
            inj.env
                .push(("ZDOTDIR".into(), dir.join("zsh").into_os_string()));
        }
        ShellKind::Fish => {
            let orig = base_env("XDG_DATA_DIRS").unwrap_or_default();
            // fish reads <entry>/fish/vendor_conf.d for each XDG_DATA_DIRS entry.
            let mut value = dir.clone().into_os_string();
            value.push(":");
            if orig.is_empty() {
                // The XDG default, so system vendor directories are still searched.
                value.push("/usr/local/share:/usr/share");
            } else {
                value.push(&orig);
            }
            inj.env.push(("XDG_DATA_DIRS".into(), value));
            inj.env.push((FISH_XDG_RESTORE_ENV.into(), orig));
        }
    }
    Ok(inj)
}

/// Writes `nonce` to a fresh file (mode 0600) in the private script directory and returns its
/// path. The script reads and deletes it first thing, before any of the user's startup files
/// run: a nonce passed in the environment would stay readable in `/proc/<shell>/environ` by
/// every program the shell starts.
fn write_nonce_file(dir: &Path, nonce: &str) -> io::Result<PathBuf> {
    let path = dir.join(format!("nonce-{}", new_nonce()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    file.write_all(nonce.as_bytes())?;
    Ok(path)
}

static SCRIPT_DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

/// The per-process script directory (`$TMPDIR/ahpty-<pid>-<random>/`, mode 0700), created on
/// first use and re-created if it was removed; files whose contents differ are rewritten.
pub fn script_dir() -> io::Result<PathBuf> {
    let mut guard = SCRIPT_DIR.lock();
    if let Some(dir) = guard.as_ref() {
        if write_files(dir).is_ok() {
            return Ok(dir.clone());
        }
    }
    let dir = std::env::temp_dir().join(format!(
        "ahpty-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    // A fresh random name, created exclusively: nobody else can have prepared it.
    fs::DirBuilder::new().mode(0o700).create(&dir)?;
    write_files(&dir)?;
    *guard = Some(dir.clone());
    Ok(dir)
}

/// The script directory, if this process created or adopted one (a live upgrade hands it to
/// the new image).
pub fn current_script_dir() -> Option<PathBuf> {
    SCRIPT_DIR.lock().clone()
}

/// Goes on with the script directory `dir` of the image before a live upgrade (same process):
/// used, rewritten where its files differ, and removed at shutdown like one created here.
/// A `dir` that is not a directory of this process's (`ahpty-PID-…`) is ignored.
pub fn adopt_script_dir(dir: &Path) {
    let ours = format!("ahpty-{}-", std::process::id());
    let named = dir
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(&ours));
    let owned = fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && m.uid() == effective_uid());
    if named && owned {
        *SCRIPT_DIR.lock() = Some(dir.to_path_buf());
    }
}

/// This process's effective user id.
fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Removes the script directory (call at daemon shutdown; running shells have already read
/// their scripts).
pub fn remove_script_dir() -> io::Result<()> {
    let mut guard = SCRIPT_DIR.lock();
    if let Some(dir) = guard.take() {
        fs::remove_dir_all(dir)?;
    }
    Ok(())
}

fn write_files(dir: &Path) -> io::Result<()> {
    if !fs::symlink_metadata(dir)?.is_dir() {
        return Err(io::Error::other("script dir is not a directory"));
    }
    for (rel, contents) in FILES {
        let path = dir.join(rel);
        if fs::read(&path).ok().as_deref() == Some(contents.as_bytes()) {
            continue;
        }
        if let Some(parent) = path.parent() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)?;
        }
        let tmp = path.with_extension(OsStr::new("tmp"));
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(contents.as_bytes())?;
        drop(f);
        fs::rename(&tmp, &path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn kinds() {
        assert_eq!(shell_kind(Path::new("/bin/bash")), Some(ShellKind::Bash));
        assert_eq!(shell_kind(Path::new("-zsh")), Some(ShellKind::Zsh));
        assert_eq!(
            shell_kind(Path::new("/usr/local/bin/fish")),
            Some(ShellKind::Fish)
        );
        assert_eq!(shell_kind(Path::new("/bin/sh")), None);
        assert_eq!(shell_kind(Path::new("/bin/dash")), None);
    }

    #[test]
    fn other_shells_get_nothing() {
        let inj = prepare(Path::new("/bin/sh"), "n").unwrap();
        assert_eq!(inj, Injection::default());
    }

    #[test]
    fn bash_injection_and_private_dir() {
        let inj = prepare(Path::new("/bin/bash"), "abc").unwrap();
        assert_eq!(inj.args.len(), 3);
        assert_eq!(inj.args[0], "--rcfile");
        assert_eq!(inj.args[2], "-i");
        let rc = PathBuf::from(&inj.args[1]);
        assert_eq!(fs::read_to_string(&rc).unwrap(), BASH_RC);
        let (_, nonce_file) = inj
            .env
            .iter()
            .find(|(k, _)| k == NONCE_ENV)
            .expect("nonce file variable");
        assert_eq!(fs::read_to_string(nonce_file).unwrap(), "abc");
        let mode = fs::metadata(nonce_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let dir = script_dir().unwrap();
        assert!(rc.starts_with(&dir));
        let mode = fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        // Reused across terminals.
        let again = prepare(Path::new("bash"), "def").unwrap();
        assert_eq!(again.args[1], inj.args[1]);
    }

    #[test]
    fn zsh_and_fish_env() {
        let env = |k: &str| match k {
            "ZDOTDIR" => Some(OsString::from("/home/u/.config/zsh")),
            "XDG_DATA_DIRS" => Some(OsString::from("/opt/share")),
            _ => None,
        };
        let z = prepare_with_env(Path::new("zsh"), "n", env).unwrap();
        assert!(z.args.is_empty());
        assert!(z
            .env
            .contains(&(USER_ZDOTDIR_ENV.into(), "/home/u/.config/zsh".into())));
        let zdot = z.env.iter().find(|(k, _)| k == "ZDOTDIR").unwrap();
        assert!(Path::new(&zdot.1).join(".zshrc").is_file());
        let f = prepare_with_env(Path::new("fish"), "n", env).unwrap();
        let xdg = f.env.iter().find(|(k, _)| k == "XDG_DATA_DIRS").unwrap();
        let xdg = xdg.1.to_str().unwrap();
        assert!(xdg.ends_with(":/opt/share"));
        let first = xdg.split(':').next().unwrap();
        assert!(Path::new(first)
            .join("fish/vendor_conf.d/ahpty.fish")
            .is_file());
        let f = prepare_with_env(Path::new("fish"), "n", |_| None).unwrap();
        let xdg = f.env.iter().find(|(k, _)| k == "XDG_DATA_DIRS").unwrap();
        assert!(xdg
            .1
            .to_str()
            .unwrap()
            .ends_with(":/usr/local/share:/usr/share"));
    }
}
