//! `ahpty attach TERMINAL`: use a remote terminal from the local one, like `tmux attach`.
//!
//! With a terminal on stdin: raw mode ([`super::tty`]); the screen is cleared and repainted
//! from the snapshot's retained output, then live output follows; keys go to the remote
//! program as `terminal/input`; the local window size is sent on attach and on every
//! SIGWINCH. The detach key (default Ctrl-\, `--detach-key`) returns to the local shell with
//! the terminal still running. `--read-only` sends nothing (no keys, no size). `--take` asks
//! for the claim first (refused — holder named — when the holder is connected; then attach
//! continues as a viewer). Without `--take` the claim is left alone.
//!
//! Whatever ends it — detach, remote exit (attach exits with the remote exit code), disposal,
//! a lost connection, SIGTERM/SIGHUP/SIGINT, a panic — the local terminal gets its termios
//! back and every mode the remote output switched on is switched off ([`super::modes`]);
//! then one line on stderr says what happened.
//!
//! With stdin not a terminal (pipe mode), stdin is copied to the terminal as input and live
//! output to stdout, until the terminal exits (stdin's end stops only the input).
//!
//! What reaches a local terminal (a tty session, or pipe mode with stdout a terminal) goes
//! through [`super::filter`]: the program's clipboard writes (unless `--allow-clipboard`) and
//! every query the local terminal would answer into the remote pty (colour, font, DSR, DA,
//! DECRQSS, XTGETTCAP …) are removed.
//!
//! A live upgrade of the daemon (close code 1012) does not end the session: the connection is
//! resumed ([`super::connect`]) and output goes on from the last `serverSeq`, with no gap and
//! no duplicate; keys typed meanwhile are sent once it is back. Resumed with a snapshot
//! instead (see [`Event::Snapshot`]), the screen is repainted from it (in pipe mode, one line
//! on stderr says output may be missing).
//!
//! Attaching to the terminal `ahpty` itself runs in is refused (`$AHPTY_TERMINAL` and
//! `$AHPTY_HOST_ID` name it).
//!
//! May touch: its one daemon connection, the local terminal (stdin, stdout, termios through
//! [`super::tty`]), the SIGWINCH/SIGTERM/SIGHUP/SIGINT handlers it installs, stderr.

use std::cell::Cell;
use std::io::{Read, Write};

use ahp::ahp_types::actions::{StateAction, TerminalClaimedAction, TerminalResizedAction};
use ahp::ahp_types::state::{TerminalClaim, TerminalClientClaim, TerminalLifecycleState};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use super::connect::{Event, CLIENT_ID, ROOT};
use super::filter::QueryFilter;
use super::modes::Modes;
use super::{remote, tty, Conn, Failure, Outcome, Target, EXIT_LOST};
use crate::config::{HOST_ID_ENV, TERMINAL_ENV};
use crate::terminal::utf8::Utf8Decoder;
use crate::terminal::MAX_DIMENSION;

/// The default detach key: Ctrl-\ (0x1c).
pub const DEFAULT_DETACH_KEY: u8 = 0x1c;

/// How `attach` behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachOptions {
    /// The byte that detaches (`None`: no detach key).
    pub detach_key: Option<u8>,
    /// Send nothing: no keys, no window size.
    pub read_only: bool,
    /// Take the claim before attaching.
    pub take: bool,
    /// Let the program's clipboard writes (OSC 52 …) reach the local terminal
    /// ([`super::filter`]).
    pub allow_clipboard: bool,
}

impl Default for AttachOptions {
    fn default() -> Self {
        AttachOptions {
            detach_key: Some(DEFAULT_DETACH_KEY),
            read_only: false,
            take: false,
            allow_clipboard: false,
        }
    }
}

/// A `--detach-key` value: the byte, or `None` for no detach key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DetachKey(pub Option<u8>);

impl std::str::FromStr for DetachKey {
    type Err = String;
    fn from_str(s: &str) -> Result<DetachKey, String> {
        parse_detach_key(s).map(DetachKey)
    }
}

/// Parses `--detach-key`: `ctrl-X` / `^X` for X in `a`–`z`, `@`, `[`, `\`, `]`, `^`, `_`
/// (case-insensitive), or `none`.
pub(crate) fn parse_detach_key(s: &str) -> Result<Option<u8>, String> {
    let t = s.trim().to_ascii_lowercase();
    if t == "none" {
        return Ok(None);
    }
    let rest = t
        .strip_prefix("ctrl-")
        .or_else(|| t.strip_prefix("ctrl+"))
        .or_else(|| t.strip_prefix('^'));
    match rest.map(str::as_bytes) {
        Some([c @ b'a'..=b'z']) => Ok(Some(c - b'a' + 1)),
        Some([b'@']) => Ok(Some(0)),
        Some([b'[']) => Ok(Some(0x1b)),
        Some([b'\\']) => Ok(Some(0x1c)),
        Some([b']']) => Ok(Some(0x1d)),
        Some([b'^']) => Ok(Some(0x1e)),
        Some([b'_']) => Ok(Some(0x1f)),
        _ => Err(format!(
            "{s:?} is not a detach key: use ctrl-a … ctrl-z, ctrl-\\, ctrl-], ctrl-^, ctrl-_, \
             ctrl-@ (or ^X), or none"
        )),
    }
}

/// How a key is written in messages: `Ctrl-\`.
pub(crate) fn key_name(key: u8) -> String {
    match key {
        0 => "Ctrl-@".into(),
        1..=26 => format!("Ctrl-{}", char::from(b'A' + key - 1)),
        0x1b => "Ctrl-[".into(),
        0x1c => "Ctrl-\\".into(),
        0x1d => "Ctrl-]".into(),
        0x1e => "Ctrl-^".into(),
        0x1f => "Ctrl-_".into(),
        k => format!("0x{k:02x}"),
    }
}

/// `ahpty attach TERMINAL`.
pub async fn attach(
    target: &Target,
    token: Option<&str>,
    query: &str,
    opts: &AttachOptions,
) -> Outcome {
    let mut conn = Conn::open(target, token, &[ROOT]).await?;
    let (t, host_id) = remote::find(&mut conn, query).await?;
    refuse_self(&t.resource, &host_id)?;
    attach_to(conn, &t.resource, &t.holder, opts).await
}

/// Refuses to attach the terminal this process runs in to itself.
pub(crate) fn refuse_self(uri: &str, host_id: &str) -> Result<(), Failure> {
    let mine = std::env::var(TERMINAL_ENV).ok();
    let my_host = std::env::var(HOST_ID_ENV).ok();
    if mine.as_deref() == Some(uri) && my_host.as_deref() == Some(host_id) {
        return Err(Failure::failed(format!(
            "refusing to attach {uri} to itself: this command runs inside that terminal"
        )));
    }
    Ok(())
}

/// Attaches `conn` (initialized with the root subscription) to `uri`, whose claim `holder`
/// holds.
pub(crate) async fn attach_to(
    mut conn: Conn,
    uri: &str,
    holder: &str,
    opts: &AttachOptions,
) -> Outcome {
    let mut notice = None;
    if opts.take && holder != CLIENT_ID {
        let claim = TerminalClaim::Client(TerminalClientClaim {
            client_id: CLIENT_ID.into(),
        });
        let action = StateAction::TerminalClaimed(TerminalClaimedAction { claim });
        notice = Some(
            match remote::dispatch_checked(&mut conn, uri, action).await? {
                Ok(()) => format!("took the claim from {holder:?}"),
                Err(reason) => format!("cannot take the claim: {reason}; attached as a viewer"),
            },
        );
    }
    let (state, from_seq) = remote::subscribe(&mut conn, uri).await?;
    conn.resume_on_restart();
    let exited = match &state.lifecycle {
        TerminalLifecycleState::Exited(e) => Some(e.exit_code),
        TerminalLifecycleState::Running(_) => None,
    };
    let size = (state.cols, state.rows);
    let session = Session {
        uri: uri.to_string(),
        from_seq: Cell::new(from_seq),
        opts: opts.clone(),
        tty: tty::stdin_is_tty(),
    };
    let end = if session.tty {
        session
            .run_tty(&mut conn, &remote::replay(&state), size, exited, notice)
            .await?
    } else {
        if let Some(n) = &notice {
            eprintln!("ahpty: {n}");
        }
        session.run_pipe(&mut conn, exited).await?
    };
    conn.close().await;
    Ok(end.report(uri, opts.detach_key))
}

/// Why a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    Detached,
    Exited(Option<i64>),
    Disposed,
    Lost(Failure),
    Signal(i32),
    StdoutClosed,
}

impl End {
    /// Prints the one line and returns the exit status.
    fn report(&self, uri: &str, key: Option<u8>) -> u8 {
        let (line, code) = match self {
            End::Detached => {
                let how = key
                    .map(|k| format!(" ({})", key_name(k)))
                    .unwrap_or_default();
                (
                    Some(format!("detached{how} from {uri}; it keeps running")),
                    0,
                )
            }
            End::Exited(Some(c)) => (
                Some(format!("{uri} exited with code {c}")),
                u8::try_from(*c).unwrap_or(1),
            ),
            End::Exited(None) => (
                Some(format!(
                    "{uri} has exited; its exit code was not recorded (see `ahpty logs {uri}`)"
                )),
                1,
            ),
            End::Disposed => (Some(format!("{uri} was disposed")), 1),
            End::Lost(f) => (Some(f.message.clone()), EXIT_LOST),
            End::Signal(s) => {
                let name = nix::sys::signal::Signal::try_from(*s)
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_else(|_| format!("signal {s}"));
                (
                    Some(format!("{name} received; detached from {uri}")),
                    u8::try_from(128 + s).unwrap_or(1),
                )
            }
            End::StdoutClosed => (None, 0),
        };
        if let Some(l) = line {
            eprintln!("ahpty: {l}");
        }
        code
    }
}

struct Session {
    uri: String,
    /// Live actions with a larger `serverSeq` follow the snapshot shown (a resume with a
    /// snapshot moves it).
    from_seq: Cell<u64>,
    opts: AttachOptions,
    tty: bool,
}

/// What the loop hears from stdin.
pub(super) enum Input {
    Bytes(Vec<u8>),
    Eof,
}

/// Copies stdin to a channel from a plain thread (a blocked read cannot be cancelled; the
/// thread simply ends with the process).
pub(super) fn spawn_stdin_reader() -> mpsc::Receiver<Input> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = tx.blocking_send(Input::Eof);
                    return;
                }
                Ok(n) => {
                    if tx.blocking_send(Input::Bytes(buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}

/// Writes to stdout from a plain thread, so a slow terminal blocks neither keys nor signals.
/// The sender fails once stdout is closed.
fn spawn_stdout_writer() -> (mpsc::Sender<Vec<u8>>, std::thread::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(16);
    let handle = std::thread::spawn(move || {
        let mut out = std::io::stdout().lock();
        while let Some(bytes) = rx.blocking_recv() {
            if out.write_all(&bytes).and_then(|_| out.flush()).is_err() {
                return;
            }
        }
    });
    (tx, handle)
}

/// The signals that end a session.
struct Signals {
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Signals, Failure> {
        let s = |k: SignalKind| {
            signal(k).map_err(|e| Failure::failed(format!("cannot handle signals: {e}")))
        };
        Ok(Signals {
            term: s(SignalKind::terminate())?,
            hup: s(SignalKind::hangup())?,
            int: s(SignalKind::interrupt())?,
        })
    }

    async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
            _ = self.int.recv() => libc::SIGINT,
        }
    }
}

impl Session {
    /// What a live envelope means for the session: output to show, or the end.
    fn classify(&self, e: &ahp::ahp_types::actions::ActionEnvelope) -> Option<Result<String, End>> {
        if e.server_seq <= self.from_seq.get() {
            return None;
        }
        if e.channel == self.uri {
            return match &e.action {
                StateAction::TerminalData(d) => Some(Ok(d.data.clone())),
                StateAction::TerminalExited(x) => Some(Err(End::Exited(x.exit_code))),
                _ => None,
            };
        }
        (e.channel == ROOT && remote::disposed(e, &self.uri)).then_some(Err(End::Disposed))
    }

    /// What a resume found about this session's terminal: its fresh snapshot (`Ok`: the
    /// output to show in place of the screen, with the new `from_seq` set), or the end.
    /// `None`: nothing for this terminal.
    fn resumed(&self, ev: &Event) -> Option<Result<String, End>> {
        match ev {
            Event::Snapshot {
                channel,
                state,
                from_seq,
            } if *channel == self.uri => {
                self.from_seq.set(*from_seq);
                let exited = match &state.lifecycle {
                    TerminalLifecycleState::Exited(e) => Some(e.exit_code),
                    TerminalLifecycleState::Running(_) => None,
                };
                Some(match exited {
                    Some(code) => Err(End::Exited(code)),
                    None => Ok(remote::replay(state)),
                })
            }
            Event::Missing(channel) if *channel == self.uri => Some(Err(End::Disposed)),
            _ => None,
        }
    }

    async fn send_input(
        &self,
        conn: &mut Conn,
        decoder: &mut Utf8Decoder,
        bytes: &[u8],
    ) -> Result<(), End> {
        if self.opts.read_only || bytes.is_empty() {
            return Ok(());
        }
        let mut text = String::new();
        decoder.decode_into(bytes, &mut text);
        if text.is_empty() {
            return Ok(());
        }
        conn.dispatch(&self.uri, remote::input(text))
            .await
            .map_err(End::Lost)
    }

    async fn send_size(&self, conn: &mut Conn, size: (u16, u16)) -> Result<(), End> {
        let clamp = |v: u16| i64::from(v).clamp(1, MAX_DIMENSION);
        let action = StateAction::TerminalResized(TerminalResizedAction {
            cols: clamp(size.0),
            rows: clamp(size.1),
        });
        conn.dispatch(&self.uri, action).await.map_err(End::Lost)
    }

    /// The interactive session: raw mode, repaint, keys, SIGWINCH, detach key.
    async fn run_tty(
        &self,
        conn: &mut Conn,
        replay: &str,
        remote_size: (Option<i64>, Option<i64>),
        exited: Option<Option<i64>>,
        notice: Option<String>,
    ) -> Result<End, Failure> {
        let mut signals = Signals::install()?;
        let mut winch = signal(SignalKind::window_change())
            .map_err(|e| Failure::failed(format!("cannot handle SIGWINCH: {e}")))?;
        let raw = tty::RawMode::enter()
            .map_err(|e| Failure::failed(format!("cannot switch the terminal to raw mode: {e}")))?;
        let (out, writer) = spawn_stdout_writer();
        let mut filter = QueryFilter::new(self.opts.allow_clipboard);
        let replay = filter.filter(replay);
        let mut modes = Modes::new();
        modes.track(&replay);
        let mut first = format!("\x1b[H\x1b[2J{replay}");
        if let Some(n) = notice {
            first.push_str(&format!("\r\n[ahpty: {n}]\r\n"));
        }
        let end = 'session: {
            if out.send(first.into_bytes()).await.is_err() {
                break 'session End::StdoutClosed;
            }
            if let Some(code) = exited {
                break 'session End::Exited(code);
            }
            let mut size = tty::window_size();
            if let (Some(s), false) = (size, self.opts.read_only) {
                if (Some(i64::from(s.0)), Some(i64::from(s.1))) != remote_size {
                    if let Err(e) = self.send_size(conn, s).await {
                        break 'session e;
                    }
                }
            }
            let mut stdin = spawn_stdin_reader();
            let mut decoder = Utf8Decoder::new();
            loop {
                tokio::select! {
                    ev = conn.next() => {
                        let Some(ev) = ev else { break 'session End::Lost(conn.lost_failure()) };
                        let shown = match &ev {
                            Event::Action(e) => self.classify(e),
                            // Resumed with a snapshot: the screen is drawn again from it.
                            ev => self.resumed(ev).map(|r| r.map(|replay| {
                                let repaint = format!("{}\x1b[H\x1b[2J{replay}", modes.reset());
                                modes = Modes::new();
                                filter.reset();
                                repaint
                            })),
                        };
                        match shown {
                            Some(Ok(data)) => {
                                let data = filter.filter(&data);
                                modes.track(&data);
                                if out.send(data.into_bytes()).await.is_err() {
                                    break 'session End::StdoutClosed;
                                }
                            }
                            Some(Err(end)) => break 'session end,
                            None => {}
                        }
                    }
                    input = stdin.recv() => match input {
                        Some(Input::Bytes(b)) => {
                            let cut = self.opts.detach_key.and_then(|k| b.iter().position(|&x| x == k));
                            let keys = &b[..cut.unwrap_or(b.len())];
                            if let Err(e) = self.send_input(conn, &mut decoder, keys).await {
                                break 'session e;
                            }
                            if cut.is_some() {
                                break 'session End::Detached;
                            }
                        }
                        Some(Input::Eof) | None => break 'session End::Detached,
                    },
                    _ = winch.recv() => {
                        let now = tty::window_size();
                        if now != size && !self.opts.read_only {
                            if let Some(s) = now {
                                if let Err(e) = self.send_size(conn, s).await {
                                    break 'session e;
                                }
                            }
                        }
                        size = now;
                    }
                    sig = signals.recv() => break 'session End::Signal(sig),
                }
            }
        };
        // Everything queued is written before the modes are reset and the termios restored.
        drop(out);
        let _ = writer.join();
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(format!("{}\r\n", modes.reset()).as_bytes());
        let _ = stdout.flush();
        drop(stdout);
        drop(raw);
        Ok(end)
    }

    /// Pipe mode: stdin → input, live output → stdout, until the terminal ends.
    async fn run_pipe(&self, conn: &mut Conn, exited: Option<Option<i64>>) -> Result<End, Failure> {
        if let Some(code) = exited {
            return Ok(End::Exited(code));
        }
        let mut signals = Signals::install()?;
        let (out, writer) = spawn_stdout_writer();
        let mut stdin = Some(spawn_stdin_reader());
        let mut decoder = Utf8Decoder::new();
        // Output copied to a terminal is filtered as in a tty session; to a file or a pipe it
        // stays verbatim.
        let mut filter = tty::stdout_is_tty().then(|| QueryFilter::new(self.opts.allow_clipboard));
        let end = loop {
            tokio::select! {
                ev = conn.next() => {
                    let Some(ev) = ev else { break End::Lost(conn.lost_failure()) };
                    let shown = match &ev {
                        Event::Action(e) => self.classify(e),
                        // Resumed with a snapshot: only live output is copied, so say so.
                        ev => self.resumed(ev).map(|r| r.map(|_| {
                            eprintln!(
                                "ahpty: the daemon restarted and could not replay {}'s output \
                                 meanwhile; some may be missing",
                                self.uri
                            );
                            String::new()
                        })),
                    };
                    match shown {
                        Some(Ok(data)) if data.is_empty() => {}
                        Some(Ok(data)) => {
                            let data = match filter.as_mut() {
                                Some(f) => f.filter(&data),
                                None => data,
                            };
                            let sent = out.send(data.into_bytes()).await;
                            if sent.is_err() {
                                break End::StdoutClosed;
                            }
                        }
                        Some(Err(end)) => break end,
                        _ => {}
                    }
                }
                input = async { stdin.as_mut()?.recv().await }, if stdin.is_some() => match input {
                    Some(Input::Bytes(b)) => {
                        if let Err(e) = self.send_input(conn, &mut decoder, &b).await {
                            break e;
                        }
                    }
                    Some(Input::Eof) | None => {
                        let mut rest = String::new();
                        decoder.finish_into(&mut rest);
                        if !rest.is_empty() && !self.opts.read_only {
                            let _ = conn.dispatch(&self.uri, remote::input(rest)).await;
                        }
                        stdin = None;
                    }
                },
                sig = signals.recv() => break End::Signal(sig),
            }
        };
        drop(out);
        let _ = writer.join();
        Ok(end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detach_keys() {
        assert_eq!(parse_detach_key("ctrl-\\"), Ok(Some(0x1c)));
        assert_eq!(parse_detach_key("Ctrl-]"), Ok(Some(0x1d)));
        assert_eq!(parse_detach_key("^A"), Ok(Some(1)));
        assert_eq!(parse_detach_key("ctrl+q"), Ok(Some(17)));
        assert_eq!(parse_detach_key("none"), Ok(None));
        assert!(parse_detach_key("x").is_err());
        assert!(parse_detach_key("ctrl-1").is_err());
        assert_eq!(key_name(0x1c), "Ctrl-\\");
        assert_eq!(key_name(17), "Ctrl-Q");
    }
}
