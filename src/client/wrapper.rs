//! The program `ahpty run` starts inside a fresh terminal (`ahpty __run`, recognised before
//! the argument parser and listed nowhere), and the line `ahpty run` types to start it.
//!
//! Typing a command line into an unknown shell would need that shell's quoting rules (fish
//! and POSIX shells disagree on backslashes), its output would be mixed with the prompt and
//! the echo of the line, and a long line costs the shell's line editor time quadratic in its
//! length. Instead `ahpty run` types one short line, the same whatever the command:
//!
//! ```text
//!  test -n "$FISH_VERSION" || unset HISTFILE; exec "$AHPTY_EXE" __run 2 NONCE
//! ```
//!
//! The leading space keeps it out of the history of shells that honour that (fish always,
//! bash with `HISTCONTROL=ignorespace`, zsh with `HIST_IGNORE_SPACE`); `unset HISTFILE`
//! stops bash and zsh from writing their history at all (bash writes it on `exec`). In fish
//! the `test` is true and nothing is unset (fish has no `unset`). `$AHPTY_EXE` is the
//! daemon's own executable, exported into each terminal. The shell is replaced by the wrapper,
//! which:
//!
//! 1. switches the terminal's echo, canonical mode and LF→CRLF output translation off, and
//!    prints the ready marker `ESC ] 6973 ; ahpty-run ; ready ; NONCE BEL`;
//! 2. reads one line from the terminal: `NONCE CWD ARG…`, every word base64url (no padding;
//!    `-` for an empty one), which `ahpty run` types on seeing the ready marker — with
//!    canonical mode off the line has no length limit, and nothing is echoed;
//! 3. switches canonical mode back on (echo and output translation stay off, so the output
//!    is the command's bytes exactly, and input typed to the command is not echoed) and
//!    prints the start marker `ESC ] 6973 ; ahpty-run ; start ; NONCE BEL` — everything
//!    before it (prompt, echoed line) is not the command's;
//! 4. changes to CWD (the shell's startup files may have moved elsewhere), runs ARG… as an
//!    argv (no shell), waits for it — ignoring SIGINT and SIGQUIT itself, so Ctrl-C reaches
//!    the command and the wrapper still reports how it ended;
//! 5. switches canonical mode off again, prints the end marker `ESC ] 6973 ; ahpty-run ; exit
//!    ; NONCE ; CODE BEL`, then reads and drops input until `ahpty run` types the NONCE back
//!    (a fence: stdin's EOF or lines the command did not read must not reach the shell of a
//!    `--keep` terminal), restores the terminal and exits with CODE: the command's status,
//!    128+N for a signal N, 127 when the program is not found, 126 when it cannot be
//!    executed.
//!
//! With `--keep` the line has no `exec`, so the shell stays after the command and the
//! terminal keeps running.
//!
//! May touch: the terminal it runs in (its termios, stdin, stdout), its working directory, and
//! the command it runs; no daemon connection.

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

/// Version of the word list after [`SUBCOMMAND`] and of the line read from the terminal.
const VERSION: &str = "2";

/// Longest line the wrapper reads from the terminal (the base64 of an argv near Linux's
/// largest, 32 pages × 128 KiB per argument… in practice `ARG_MAX`, 2 MiB by default).
pub(crate) const MAX_PAYLOAD_BYTES: usize = 16 << 20;

/// Time the wrapper waits for its line.
const PAYLOAD_TIMEOUT_MS: u16 = 30_000;

/// The OSC number of the markers.
const OSC: &str = "6973";

/// The ready marker for `nonce`: the wrapper now reads its line.
pub(crate) fn ready_marker(nonce: &str) -> String {
    format!("\x1b]{OSC};ahpty-run;ready;{nonce}\x07")
}

/// The start marker for `nonce`.
pub(crate) fn start_marker(nonce: &str) -> String {
    format!("\x1b]{OSC};ahpty-run;start;{nonce}\x07")
}

/// The end marker for `nonce` up to the exit code (then the code and BEL follow).
pub(crate) fn end_prefix(nonce: &str) -> String {
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

/// The line `ahpty run` types (without the final Enter). `keep`: no `exec`, the shell
/// survives the command.
pub(crate) fn typed_line(nonce: &str, keep: bool) -> String {
    let exec = if keep { "" } else { "exec " };
    format!(
        " test -n \"$FISH_VERSION\" || unset HISTFILE; {exec}\"${EXE_ENV}\" {SUBCOMMAND} {VERSION} \
         {nonce}"
    )
}

/// The line `ahpty run` types once it sees the ready marker (without the final Enter): the
/// nonce, `cwd` (empty = stay where the shell is) and `argv`, as words.
pub(crate) fn payload(nonce: &str, cwd: &Path, argv: &[OsString]) -> String {
    let mut line =
        String::with_capacity(64 + argv.iter().map(|a| a.len() * 4 / 3 + 2).sum::<usize>());
    line.push_str(nonce);
    line.push(' ');
    line.push_str(&word(cwd.as_os_str().as_bytes()));
    for a in argv {
        line.push(' ');
        line.push_str(&word(a.as_bytes()));
    }
    line
}

/// The nonce of the wrapper's arguments (`VERSION NONCE`).
fn decode_args(args: &[OsString]) -> Option<String> {
    let [version, nonce] = args else {
        return None;
    };
    let nonce = nonce.to_str()?;
    if version != VERSION || nonce.is_empty() || !nonce.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    Some(nonce.to_string())
}

/// Decoded payload: cwd (empty = none) and argv.
type Decoded = (OsString, Vec<OsString>);

fn decode_payload(nonce: &str, line: &[u8]) -> Option<Decoded> {
    let mut words = line.split(|&b| b == b' ');
    if words.next()? != nonce.as_bytes() {
        return None;
    }
    let cwd = OsString::from_vec(unword(OsStr::from_bytes(words.next()?))?);
    let argv = words
        .map(|w| unword(OsStr::from_bytes(w)).map(OsString::from_vec))
        .collect::<Option<Vec<_>>>()?;
    if argv.is_empty() {
        return None;
    }
    Some((cwd, argv))
}

extern "C" fn ignore(_: libc::c_int) {}

/// Runs the wrapper with the words after [`SUBCOMMAND`]; returns the exit status.
pub fn run_wrapper(args: &[OsString]) -> u8 {
    let Some(nonce) = decode_args(args) else {
        eprintln!(
            "ahpty {SUBCOMMAND}: malformed arguments (this command is typed by `ahpty run` into \
             a terminal of the same ahpty version)"
        );
        return 2;
    };
    let saved = quiet_terminal();
    let mut out = std::io::stdout();
    let _ = out.write_all(ready_marker(&nonce).as_bytes());
    let _ = out.flush();
    let line = read_payload();
    if let Some(t) = &saved {
        // Canonical mode back on, echo and output translation still off.
        let mut t = t.clone();
        use nix::sys::termios::{LocalFlags, OutputFlags};
        t.local_flags.remove(LocalFlags::ECHO);
        t.output_flags.remove(OutputFlags::ONLCR);
        let _ =
            nix::sys::termios::tcsetattr(std::io::stdin(), nix::sys::termios::SetArg::TCSANOW, &t);
    }
    let Some((cwd, argv)) = line.as_deref().and_then(|l| decode_payload(&nonce, l)) else {
        restore(saved.as_ref());
        eprintln!(
            "ahpty {SUBCOMMAND}: no valid command line arrived from `ahpty run` within {} s",
            PAYLOAD_TIMEOUT_MS / 1000
        );
        return 2;
    };
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
    let _ = out.write_all(start_marker(&nonce).as_bytes());
    let _ = out.flush();
    let code = run_command(&cwd, &argv);
    let _ = std::io::stderr().flush();
    // Input typed for the command but not read by it (stdin's end, lines it did not want)
    // must not reach the shell after us: raw mode, then everything up to the fence `ahpty
    // run` types on seeing the end marker is read and dropped.
    if let Some(t) = &saved {
        raw(t);
    }
    let _ = out.write_all(format!("{}{code}\x07", end_prefix(&nonce)).as_bytes());
    let _ = out.flush();
    if saved.is_some() {
        drain_until(nonce.as_bytes());
    }
    restore(saved.as_ref());
    code
}

/// Reads and drops terminal input until `fence` has been read, for at most
/// [`PAYLOAD_TIMEOUT_MS`]; then drops whatever else is queued.
fn drain_until(fence: &[u8]) {
    let mut tail: Vec<u8> = Vec::new();
    read_input(|chunk| {
        tail.extend_from_slice(chunk);
        if tail.windows(fence.len()).any(|w| w == fence) {
            return true;
        }
        let keep = tail.len().saturating_sub(fence.len());
        tail.drain(..keep);
        false
    });
    let _ = nix::sys::termios::tcflush(std::io::stdin(), nix::sys::termios::FlushArg::TCIFLUSH);
}

/// Echo, canonical mode and LF→CRLF off on the terminal (reads return each byte as it
/// comes); returns the termios to restore.
fn quiet_terminal() -> Option<nix::sys::termios::Termios> {
    let saved = nix::sys::termios::tcgetattr(std::io::stdout()).ok()?;
    raw(&saved).then_some(saved)
}

/// `saved` with echo, canonical mode and LF→CRLF off, applied; whether that worked.
fn raw(saved: &nix::sys::termios::Termios) -> bool {
    use nix::sys::termios::{tcsetattr, LocalFlags, OutputFlags, SetArg, SpecialCharacterIndices};
    let stdout = std::io::stdout();
    let mut t = saved.clone();
    t.local_flags.remove(LocalFlags::ECHO | LocalFlags::ICANON);
    t.output_flags.remove(OutputFlags::ONLCR);
    t.control_chars[SpecialCharacterIndices::VMIN as usize] = 1;
    t.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
    tcsetattr(&stdout, SetArg::TCSADRAIN, &t).is_ok()
}

fn restore(saved: Option<&nix::sys::termios::Termios>) {
    if let Some(t) = saved {
        let _ = nix::sys::termios::tcsetattr(
            std::io::stdout(),
            nix::sys::termios::SetArg::TCSADRAIN,
            t,
        );
    }
}

/// Reads stdin up to the first CR or LF (not included); `None` on EOF, an error, a line over
/// [`MAX_PAYLOAD_BYTES`], or no input for [`PAYLOAD_TIMEOUT_MS`]. `ahpty run` types nothing
/// more until the start marker, so nothing after the line is read.
fn read_payload() -> Option<Vec<u8>> {
    let mut line = Vec::new();
    let mut complete = false;
    read_input(|chunk| {
        if let Some(end) = chunk.iter().position(|&b| b == b'\r' || b == b'\n') {
            line.extend_from_slice(&chunk[..end]);
            complete = true;
            return true;
        }
        line.extend_from_slice(chunk);
        line.len() > MAX_PAYLOAD_BYTES
    });
    complete.then_some(line)
}

/// Reads stdin chunk by chunk into `done` until it returns true, stdin ends or fails, or no
/// input comes for [`PAYLOAD_TIMEOUT_MS`].
fn read_input(mut done: impl FnMut(&[u8]) -> bool) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::io::Read;
    use std::os::fd::AsFd;
    let stdin = std::io::stdin();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(PAYLOAD_TIMEOUT_MS)) {
            Ok(0) => return,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
        }
        let n = match stdin.lock().read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        if done(&buf[..n]) {
            return;
        }
    }
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
        let line = typed_line("abc123", false);
        assert!(
            line.starts_with(
                " test -n \"$FISH_VERSION\" || unset HISTFILE; exec \"$AHPTY_EXE\" __run 2 abc123"
            ),
            "{line}"
        );
        assert!(!typed_line("abc123", true).contains("exec"));
        let words: Vec<OsString> = ["2", "abc123"].iter().map(OsString::from).collect();
        assert_eq!(decode_args(&words).as_deref(), Some("abc123"));
        assert!(decode_args(&words[..1]).is_none());
        let p = payload("abc123", Path::new("/tmp/a b"), &argv);
        assert!(p
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b' '));
        let (cwd, back) = decode_payload("abc123", p.as_bytes()).unwrap();
        assert_eq!(cwd, OsString::from("/tmp/a b"));
        assert_eq!(back, argv);
        assert!(decode_payload("other", p.as_bytes()).is_none());
    }
}
