//! The program `ahpty run` starts inside a fresh terminal (the hidden `ahpty __run`
//! subcommand), and the line `ahpty run` types to start it.
//!
//! Typing a command line into an unknown shell would need that shell's quoting rules (fish
//! and POSIX shells disagree on backslashes), and its output would be mixed with the prompt
//! and the echo of the line. Instead `ahpty run` types
//!
//! ```text
//!  exec "$AHPTY_EXE" __run 1 NONCE CWD ARG…
//! ```
//!
//! (leading space: kept out of shell history where the shell honours that), in which every
//! word after `__run` is base64url (no padding) — letters, digits, `-` and `_`, the same in
//! every shell. `$AHPTY_EXE` is the daemon's own executable, exported into each terminal. The
//! shell is replaced by the wrapper, which:
//!
//! 1. switches the terminal's echo and LF→CRLF output translation off, so the output is the
//!    command's bytes exactly;
//! 2. prints the start marker `ESC ] 6973 ; ahpty-run ; start ; NONCE BEL` — everything
//!    before it (prompt, echoed line) is not the command's;
//! 3. changes to CWD (the shell's startup files may have moved elsewhere), runs ARG… as an
//!    argv (no shell), waits for it — ignoring SIGINT and SIGQUIT itself, so Ctrl-C reaches
//!    the command and the wrapper still reports how it ended;
//! 4. restores the terminal, prints the end marker `ESC ] 6973 ; ahpty-run ; exit ; NONCE ;
//!    CODE BEL` and exits with CODE: the command's status, 128+N for a signal N, 127 when
//!    the program is not found, 126 when it cannot be executed.
//!
//! With `--keep` the line has no `exec`, so the shell stays after the command and the
//! terminal keeps running.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

use crate::config::EXE_ENV;

/// The hidden subcommand's name.
pub const SUBCOMMAND: &str = "__run";

/// Version of the word list after [`SUBCOMMAND`].
const VERSION: &str = "1";

/// The OSC number of the markers.
const OSC: &str = "6973";

/// The start marker for `nonce`.
pub fn start_marker(nonce: &str) -> String {
    format!("\x1b]{OSC};ahpty-run;start;{nonce}\x07")
}

/// The end marker for `nonce` up to the exit code (then the code and BEL follow).
pub fn end_prefix(nonce: &str) -> String {
    format!("\x1b]{OSC};ahpty-run;exit;{nonce};")
}

fn word(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        // base64 of nothing is an empty word, which a shell would drop.
        "-".into()
    } else {
        URL_SAFE_NO_PAD.encode(bytes)
    }
}

fn unword(w: &OsStr) -> Option<Vec<u8>> {
    match w.as_bytes() {
        b"-" => Some(Vec::new()),
        b => URL_SAFE_NO_PAD.decode(b).ok(),
    }
}

/// The line `ahpty run` types (without the final Enter). `cwd` empty = stay where the shell
/// is. `keep`: no `exec`, the shell survives the command.
pub fn typed_line(nonce: &str, cwd: &Path, argv: &[OsString], keep: bool) -> String {
    let mut line = String::from(if keep { " " } else { " exec " });
    line.push_str(&format!("\"${EXE_ENV}\" {SUBCOMMAND} {VERSION} {nonce} "));
    line.push_str(&word(cwd.as_os_str().as_bytes()));
    for a in argv {
        line.push(' ');
        line.push_str(&word(a.as_bytes()));
    }
    line
}

/// Decoded wrapper arguments: nonce, cwd (empty = none) and argv.
type Decoded = (String, OsString, Vec<OsString>);

fn decode(args: &[OsString]) -> Option<Decoded> {
    let (version, rest) = args.split_first()?;
    if version != VERSION {
        return None;
    }
    let (nonce, rest) = rest.split_first()?;
    let nonce = nonce.to_str()?;
    if nonce.is_empty() || !nonce.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    let (cwd, argv) = rest.split_first()?;
    let cwd = OsString::from_vec(unword(cwd)?);
    let argv = argv
        .iter()
        .map(|a| unword(a).map(OsString::from_vec))
        .collect::<Option<Vec<_>>>()?;
    if argv.is_empty() {
        return None;
    }
    Some((nonce.to_string(), cwd, argv))
}

extern "C" fn ignore(_: libc::c_int) {}

/// Runs the wrapper with the words after [`SUBCOMMAND`]; returns the exit status.
pub fn run_wrapper(args: &[OsString]) -> u8 {
    let Some((nonce, cwd, argv)) = decode(args) else {
        eprintln!(
            "ahpty {SUBCOMMAND}: malformed arguments (this command is typed by `ahpty run` into \
             a terminal of the same ahpty version)"
        );
        return 2;
    };
    let saved = quiet_terminal();
    // A handler (unlike SIG_IGN) is reset to the default in the child at exec: Ctrl-C
    // interrupts the command, not the wrapper.
    for sig in [
        nix::sys::signal::Signal::SIGINT,
        nix::sys::signal::Signal::SIGQUIT,
    ] {
        let action = nix::sys::signal::SigAction::new(
            nix::sys::signal::SigHandler::Handler(ignore),
            nix::sys::signal::SaFlags::SA_RESTART,
            nix::sys::signal::SigSet::empty(),
        );
        // SAFETY: the handler does nothing, so it is async-signal-safe.
        let _ = unsafe { nix::sys::signal::sigaction(sig, &action) };
    }
    let mut out = std::io::stdout();
    let _ = out.write_all(start_marker(&nonce).as_bytes());
    let _ = out.flush();
    let code = run_command(&cwd, &argv);
    let _ = std::io::stderr().flush();
    if let Some(t) = saved {
        let _ = nix::sys::termios::tcsetattr(
            std::io::stdout(),
            nix::sys::termios::SetArg::TCSADRAIN,
            &t,
        );
    }
    let _ = out.write_all(format!("{}{code}\x07", end_prefix(&nonce)).as_bytes());
    let _ = out.flush();
    code
}

/// Echo and LF→CRLF off on stdout's terminal; returns the termios to restore.
fn quiet_terminal() -> Option<nix::sys::termios::Termios> {
    use nix::sys::termios::{tcgetattr, tcsetattr, LocalFlags, OutputFlags, SetArg};
    let stdout = std::io::stdout();
    let saved = tcgetattr(&stdout).ok()?;
    let mut t = saved.clone();
    t.local_flags.remove(LocalFlags::ECHO);
    t.output_flags.remove(OutputFlags::ONLCR);
    tcsetattr(&stdout, SetArg::TCSADRAIN, &t).ok()?;
    Some(saved)
}

fn run_command(cwd: &OsStr, argv: &[OsString]) -> u8 {
    let program = Path::new(&argv[0]).display().to_string();
    if !cwd.is_empty() {
        if let Err(e) = std::env::set_current_dir(cwd) {
            eprintln!("ahpty run: cd {}: {e}", Path::new(cwd).display());
            return 1;
        }
    }
    match std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .status()
    {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(c), _) => u8::try_from(c & 0xff).unwrap_or(1),
            (None, Some(s)) => u8::try_from(128 + s).unwrap_or(1),
            (None, None) => 1,
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("ahpty run: {program}: command not found");
            127
        }
        Err(e) => {
            eprintln!("ahpty run: {program}: {e}");
            126
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_round_trip() {
        let argv: Vec<OsString> = ["sh", "-c", "echo \"$HOME\" 'a b' \\ `x`; exit 3", ""]
            .iter()
            .map(OsString::from)
            .collect();
        let line = typed_line("abc123", Path::new("/tmp/a b"), &argv, false);
        assert!(
            line.starts_with(" exec \"$AHPTY_EXE\" __run 1 abc123 "),
            "{line}"
        );
        let words: Vec<OsString> = line
            .split_whitespace()
            .skip(3)
            .map(OsString::from)
            .collect();
        assert!(line.split_whitespace().skip(3).all(|w| w
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')));
        let (nonce, cwd, back) = decode(&words).unwrap();
        assert_eq!(nonce, "abc123");
        assert_eq!(cwd, OsString::from("/tmp/a b"));
        assert_eq!(back, argv);
        assert!(typed_line("n", Path::new(""), &argv, true).starts_with(" \"$AHPTY_EXE\""));
        assert!(decode(&[OsString::from("2")]).is_none());
    }
}
