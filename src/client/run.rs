//! `ahpty run [--cwd DIR] [--keep] -- CMD ARG…`: run one command in a fresh terminal, stream
//! its output to stdout, forward stdin to it, exit with its exit status, dispose of the
//! terminal (unless `--keep`).
//!
//! The command is started through the [`super::wrapper`]: a short fixed line typed into the
//! terminal's shell starts `ahpty __run`, which prints a ready marker; then the command line
//! itself (cwd and argv, base64url words) is typed as one line the wrapper reads with echo and
//! canonical mode off — so the cost is linear in the argv's size and nothing of it is echoed.
//! The wrapper runs exactly that argv and brackets its output with markers: stdout gets the
//! bytes between them — not the prompt, not the echoed line — and the exit status comes from
//! the end marker.
//!
//! Why the wrapper and not `terminal/commandFinished`: the shell is replaced by the wrapper
//! (`exec`), so no shell is left to report the command, and shells without integration (or
//! with `--no-shell-integration`) report nothing; the wrapper's status is the command's own
//! (128+N for a signal) in every shell. When the wrapper is killed before writing the end
//! marker, the terminal's own exit code (`terminal/exited`, 128+N for a signal) is used.
//!
//! Stdin: once the command runs, stdin is typed into the terminal as it comes (like `ssh host
//! cmd`); its end is sent as the EOF character (Ctrl-D, twice when the last line has no
//! newline), so `run -- wc -l < file` ends and `</dev/null` gives the command an immediate
//! EOF. It goes through the terminal's line discipline like typed input: not echoed, lines of
//! at most 4095 bytes, control characters acting as keys. Ctrl-C (SIGINT) is passed on to the
//! command as a Ctrl-C typed into the terminal; SIGTERM or SIGHUP disposes of the terminal and
//! exits with 128+N.
//!
//! The command's stdout and stderr share the terminal, so both arrive on stdout. It runs with
//! the daemon's environment as a new shell sees it, not the caller's. With `--keep`, the kept
//! terminal's number and URI are printed on stderr at the end.
//!
//! May touch: its one daemon connection, stdin (typed as input), stdout, stderr, the current
//! directory (read) and the SIGINT/SIGTERM/SIGHUP handlers it installs.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use ahp::ahp_types::actions::StateAction;
use ahp::ahp_types::errors::ahp_error_codes;
use ahp::ClientError;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::signal::unix::{signal, SignalKind};

use super::attach::{spawn_stdin_reader, Input};
use super::connect::{request_failure, CLIENT_ID, ROOT};
use super::{remote, tty, wrapper, Conn, Failure, Outcome, Target, EXIT_LOST};
use crate::terminal::utf8::Utf8Decoder;

/// How long `run` waits for the shell's first output before typing its line anyway.
const PROMPT_WAIT: Duration = Duration::from_secs(1);

/// Largest `terminal/input` action sent (every daemon accepts messages of 64 KiB).
const INPUT_CHUNK_BYTES: usize = 32 * 1024;

/// Time the shell gets to start the wrapper (startup files included).
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// What `run` was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOptions {
    /// Working directory (default: the current one).
    pub cwd: Option<PathBuf>,
    /// Keep the terminal afterwards.
    pub keep: bool,
    /// The command and its arguments.
    pub argv: Vec<OsString>,
}

/// Finds the output between the wrapper's markers in a stream cut anywhere.
#[derive(Debug)]
pub(crate) struct Scanner {
    ready: String,
    ready_seen: bool,
    start: String,
    end: String,
    buf: String,
    state: ScanState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ScanState {
    Ready,
    Before,
    Output,
    Done(u8),
}

impl Scanner {
    /// A scanner for the markers of `nonce`.
    pub fn new(nonce: &str) -> Scanner {
        Scanner {
            ready: wrapper::ready_marker(nonce),
            ready_seen: false,
            start: wrapper::start_marker(nonce),
            end: wrapper::end_prefix(nonce),
            buf: String::new(),
            state: ScanState::Ready,
        }
    }

    /// Whether the ready marker was seen since the last call.
    pub fn take_ready(&mut self) -> bool {
        std::mem::take(&mut self.ready_seen)
    }

    /// Whether the start marker was seen.
    pub fn started(&self) -> bool {
        !matches!(self.state, ScanState::Ready | ScanState::Before)
    }

    /// The exit status once the end marker was seen.
    pub fn exit_code(&self) -> Option<u8> {
        match self.state {
            ScanState::Done(c) => Some(c),
            _ => None,
        }
    }

    /// Feeds stream text; returns the command output it completes.
    pub fn push(&mut self, text: &str) -> String {
        self.buf.push_str(text);
        let mut out = String::new();
        loop {
            match self.state {
                ScanState::Done(_) => {
                    self.buf.clear();
                    return out;
                }
                ScanState::Ready => match self.buf.find(&self.ready) {
                    Some(i) => {
                        self.buf.drain(..i + self.ready.len());
                        self.ready_seen = true;
                        self.state = ScanState::Before;
                    }
                    None => {
                        keep_tail(&mut self.buf, self.ready.len());
                        return out;
                    }
                },
                ScanState::Before => match self.buf.find(&self.start) {
                    Some(i) => {
                        self.buf.drain(..i + self.start.len());
                        self.state = ScanState::Output;
                    }
                    None => {
                        keep_tail(&mut self.buf, self.start.len());
                        return out;
                    }
                },
                ScanState::Output => match self.buf.find(&self.end) {
                    Some(i) => {
                        out.push_str(&self.buf[..i]);
                        let rest = &self.buf[i + self.end.len()..];
                        match rest.find('\x07') {
                            Some(j) => {
                                let code = rest[..j].parse::<u8>().unwrap_or(1);
                                self.state = ScanState::Done(code);
                            }
                            None if rest.len() < 8 => {
                                self.buf.drain(..i);
                                return out;
                            }
                            // Not a marker after all.
                            None => {
                                let upto = i + self.end.len();
                                out.push_str(&self.buf[i..upto]);
                                self.buf.drain(..upto);
                            }
                        }
                    }
                    None => {
                        let hold = partial_suffix(&self.buf, &self.end);
                        let cut = self.buf.len() - hold;
                        out.push_str(&self.buf[..cut]);
                        self.buf.drain(..cut);
                        return out;
                    }
                },
            }
        }
    }
}

/// Keeps at most the last `n` bytes of `s` (on a character boundary).
fn keep_tail(s: &mut String, n: usize) {
    if s.len() > n {
        let mut cut = s.len() - n;
        while !s.is_char_boundary(cut) {
            cut += 1;
        }
        s.drain(..cut);
    }
}

/// Length of the longest suffix of `s` that is a proper prefix of `marker`.
fn partial_suffix(s: &str, marker: &str) -> usize {
    let max = marker.len().saturating_sub(1).min(s.len());
    (1..=max)
        .rev()
        .find(|&k| s.is_char_boundary(s.len() - k) && marker.starts_with(&s[s.len() - k..]))
        .unwrap_or(0)
}

/// How a run ended.
enum End {
    Finished(u8),
    Failed(Failure),
    Signal(i32),
    StdoutClosed,
}

/// `ahpty run`.
pub async fn run(target: &Target, token: Option<&str>, opts: &RunOptions) -> Outcome {
    if opts.argv.is_empty() {
        return Err(Failure::failed(
            "nothing to run: ahpty run -- COMMAND [ARG…]",
        ));
    }
    let cwd = match &opts.cwd {
        Some(d) => std::path::absolute(d),
        None => std::env::current_dir(),
    }
    .map_err(|e| Failure::failed(format!("cannot determine the working directory: {e}")))?;
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let line = wrapper::typed_line(&nonce, opts.keep);
    let payload = wrapper::payload(&nonce, &cwd, &opts.argv);
    if payload.len() > wrapper::MAX_PAYLOAD_BYTES {
        return Err(Failure::failed(format!(
            "the command line is {} bytes once encoded, over the {} MiB `ahpty run` carries: \
             put the command in a script",
            payload.len(),
            wrapper::MAX_PAYLOAD_BYTES >> 20
        )));
    }
    let mut conn = Conn::open(target, token, &[ROOT]).await?;
    let uri = format!("ahp-terminal:/run-{}", uuid::Uuid::new_v4());
    let mut params = json!({
        "channel": uri,
        "claim": {"kind": "client", "clientId": CLIENT_ID},
        "name": title(&opts.argv),
        "cwd": cwd.display().to_string(),
    });
    if let Some((cols, rows)) = tty::stdout_is_tty().then(tty::window_size).flatten() {
        params["cols"] = json!(cols);
        params["rows"] = json!(rows);
    }
    create(&mut conn, params, &cwd, opts.cwd.is_some()).await?;
    let end = drive(&mut conn, &uri, &nonce, &line, &payload).await;
    if opts.keep && matches!(end, End::Finished(_)) {
        // The fence: the wrapper drops input up to it, so nothing meant for the command
        // reaches the shell that stays.
        let _ = type_text(&conn, &uri, nonce.clone()).await;
    }
    conn.discard_events();
    if !opts.keep {
        let _ = remote::dispose(&mut conn, &uri).await;
    } else if let Ok(listing) = conn.list().await {
        if let Some(t) = listing.terminals.iter().find(|t| t.resource == uri) {
            eprintln!("ahpty: kept terminal {} ({uri})", t.id);
        }
    }
    conn.close().await;
    match end {
        End::Finished(code) => Ok(code),
        End::Failed(f) => Err(f),
        End::Signal(s) => Ok(u8::try_from(128 + s).unwrap_or(1)),
        End::StdoutClosed => Ok(u8::try_from(128 + libc::SIGPIPE).unwrap_or(1)),
    }
}

/// `createTerminal`, with a missing cwd explained; `given`: the cwd came from `--cwd` (else
/// it is the current directory).
pub(crate) async fn create(
    conn: &mut Conn,
    params: Value,
    cwd: &std::path::Path,
    given: bool,
) -> Result<(), Failure> {
    match conn.call::<Value>("createTerminal", params).await {
        Ok(_) => Ok(()),
        Err(ClientError::Rpc(e)) if e.code == ahp_error_codes::NOT_FOUND => {
            Err(Failure::failed(if given {
                format!(
                    "directory {} does not exist on the daemon's machine",
                    cwd.display()
                )
            } else {
                format!(
                    "the current directory, {}, does not exist on the daemon's machine: pass \
                     --cwd DIR",
                    cwd.display()
                )
            }))
        }
        Err(e) => Err(request_failure(e)),
    }
}

/// The terminal's title: the command line, at most 80 characters.
fn title(argv: &[OsString]) -> String {
    let text = argv
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let clean = super::one_line(&text);
    if clean.chars().count() > 80 {
        let mut t: String = clean.chars().take(79).collect();
        t.push('…');
        t
    } else {
        clean
    }
}

async fn drive(conn: &mut Conn, uri: &str, nonce: &str, line: &str, payload: &str) -> End {
    let (state, from_seq) = match remote::subscribe(conn, uri).await {
        Ok(x) => x,
        Err(f) => return End::Failed(f),
    };
    let (mut int, mut term, mut hup) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) {
        (Ok(a), Ok(b), Ok(c)) => (a, b, c),
        _ => return End::Failed(Failure::failed("cannot handle signals")),
    };
    let mut scanner = Scanner::new(nonce);
    let mut stdout = tokio::io::stdout();
    let mut stdin: Option<tokio::sync::mpsc::Receiver<Input>> = None;
    let mut decoder = Utf8Decoder::new();
    // The last byte typed from stdin, to end a last line without newline.
    let mut last_input: Option<u8> = None;
    // Text still to type, sent a piece at a time between events (the daemon echoes each
    // `terminal/input` to us: reading those keeps its queue for us short).
    let mut outbox = String::new();
    let mut typed = 0;
    // The line is typed once the shell has printed something (its prompt: then its line
    // editor echoes the line once, where typing ahead would have the terminal echo it too),
    // or after PROMPT_WAIT of silence.
    let mut line_typed = false;
    if !state.content.is_empty() {
        line_typed = true;
        outbox.push_str(line);
        outbox.push('\r');
    }
    let prompt_wait = tokio::time::sleep(PROMPT_WAIT);
    tokio::pin!(prompt_wait);
    let start_deadline = tokio::time::sleep(START_TIMEOUT);
    tokio::pin!(start_deadline);
    loop {
        tokio::select! {
            ev = conn.next_event() => {
                let Some(e) = ev else {
                    return End::Failed(Failure::lost());
                };
                if e.server_seq <= from_seq {
                    continue;
                }
                if e.channel == ROOT && remote::disposed(&e, uri) {
                    return End::Failed(Failure::failed(format!("{uri} was disposed before the command finished")));
                }
                if e.channel != uri {
                    continue;
                }
                match &e.action {
                    StateAction::TerminalData(d) => {
                        if !line_typed {
                            line_typed = true;
                            outbox.push_str(line);
                            outbox.push('\r');
                        }
                        let was_started = scanner.started();
                        let out = scanner.push(&d.data);
                        if scanner.take_ready() {
                            outbox.push_str(payload);
                            outbox.push('\r');
                        }
                        if !out.is_empty() {
                            let w = stdout.write_all(out.as_bytes()).await;
                            if w.and(stdout.flush().await).is_err() {
                                return End::StdoutClosed;
                            }
                        }
                        if let Some(code) = scanner.exit_code() {
                            return End::Finished(code);
                        }
                        // The command runs: its input may come now.
                        if !was_started && scanner.started() {
                            stdin = Some(spawn_stdin_reader());
                        }
                    }
                    // Shell integration saw our line finish before the wrapper started.
                    StateAction::TerminalCommandFinished(f) if !scanner.started() => {
                        return End::Failed(Failure::failed(format!(
                            "the terminal's shell could not start the command (exit code {}): \
                             is the daemon's shell a POSIX shell or fish?",
                            f.exit_code.map_or("unknown".into(), |c| c.to_string())
                        )));
                    }
                    StateAction::TerminalExited(x) => {
                        return if scanner.started() {
                            End::Finished(x.exit_code.and_then(|c| u8::try_from(c).ok()).unwrap_or(EXIT_LOST))
                        } else {
                            End::Failed(Failure::failed(format!(
                                "the terminal's shell exited (code {}) before starting the command",
                                x.exit_code.map_or("unknown".into(), |c| c.to_string())
                            )))
                        };
                    }
                    _ => {}
                }
            }
            _ = std::future::ready(()), if typed < outbox.len() => {
                let rest = &outbox[typed..];
                let mut cut = rest.len().min(INPUT_CHUNK_BYTES);
                while !rest.is_char_boundary(cut) {
                    cut -= 1;
                }
                if let Err(f) = type_text(conn, uri, rest[..cut].to_string()).await {
                    return End::Failed(f);
                }
                typed += cut;
                if typed == outbox.len() {
                    outbox.clear();
                    typed = 0;
                }
            }
            input = async { stdin.as_mut()?.recv().await }, if stdin.is_some() && outbox.is_empty() => {
                let text = match input {
                    Some(Input::Bytes(b)) => {
                        last_input = b.last().copied().or(last_input);
                        let mut text = String::new();
                        decoder.decode_into(&b, &mut text);
                        text
                    }
                    Some(Input::Eof) | None => {
                        stdin = None;
                        let mut text = String::new();
                        decoder.finish_into(&mut text);
                        // EOF at the start of a line; a partial line needs one more first.
                        if last_input.is_some_and(|b| b != b'\n') {
                            text.push('\x04');
                        }
                        text.push('\x04');
                        text
                    }
                };
                outbox.push_str(&text);
            }
            _ = &mut prompt_wait, if !line_typed => {
                line_typed = true;
                outbox.push_str(line);
                outbox.push('\r');
            }
            _ = &mut start_deadline, if !scanner.started() => {
                return End::Failed(Failure::failed(format!(
                    "the terminal's shell did not start the command within {} s",
                    START_TIMEOUT.as_secs()
                )));
            }
            _ = int.recv() => {
                if !scanner.started() {
                    return End::Signal(libc::SIGINT);
                }
                if type_text(conn, uri, "\x03".into()).await.is_err() {
                    return End::Failed(Failure::lost());
                }
            }
            _ = term.recv() => return End::Signal(libc::SIGTERM),
            _ = hup.recv() => return End::Signal(libc::SIGHUP),
        }
    }
}

async fn type_text(conn: &Conn, uri: &str, text: String) -> Result<(), Failure> {
    conn.client
        .dispatch(uri.into(), remote::input(text))
        .await
        .map(|_| ())
        .map_err(|_| Failure::lost())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scanner_finds_output_between_markers_cut_anywhere() {
        let nonce = "n0nce";
        let stream = format!(
            "$ exec x __run …\r\n{}{}out put\n\x1b[31mé\x1b[0m\x1b]6973;other\x07\n{}7\x07$ prompt",
            wrapper::ready_marker(nonce),
            wrapper::start_marker(nonce),
            wrapper::end_prefix(nonce)
        );
        let want = "out put\n\x1b[31mé\x1b[0m\x1b]6973;other\x07\n";
        let chars: Vec<usize> = (0..=stream.len())
            .filter(|&i| stream.is_char_boundary(i))
            .collect();
        for &a in &chars {
            for &b in chars.iter().filter(|&&b| b >= a).step_by(7) {
                let mut s = Scanner::new(nonce);
                let mut out = s.push(&stream[..a]);
                out += &s.push(&stream[a..b]);
                out += &s.push(&stream[b..]);
                assert_eq!(out, want, "cuts {a} {b}");
                assert_eq!(s.exit_code(), Some(7));
            }
        }
        let mut s = Scanner::new(nonce);
        assert_eq!(s.push("no markers at all"), "");
        assert!(!s.started());
    }

    #[test]
    fn titles() {
        let argv: Vec<OsString> = ["make", "test"].iter().map(OsString::from).collect();
        assert_eq!(title(&argv), "make test");
    }
}
