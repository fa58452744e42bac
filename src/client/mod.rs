//! The CLI's side: the client subcommands (`ls`, `attach`, `new`, `send`, `kill`, `run`,
//! `logs`) talking to a running daemon through the official `ahp` client over `ahp-ws` (or a
//! WebSocket over the Unix socket, [`connect`]), plus the small program `ahpty run` starts
//! inside the terminal ([`wrapper`]).
//!
//! Each subcommand is one async function returning an exit status; every failure is one line
//! on stderr (`ahpty: …`). Exit statuses (docs/cli.md):
//!
//! | status | meaning |
//! |---|---|
//! | 0 | done |
//! | 1 | the daemon refused or could not do it; no terminal matches; ambiguous selection |
//! | 2 | no daemon reachable (none running, wrong URL or token, not an ahpty daemon); usage |
//! | 255 | the connection was lost in the middle of `attach`, `run` or `logs --follow` |
//! | other | `attach` and `run`: the remote program's exit status |
//!
//! Imports: `config` (the default socket, environment names), `host::catalog` (the listing's
//! wire type), `terminal::MAX_DIMENSION` and `terminal::utf8`; nothing of the server.
//!
//! The public surface is what `main.rs` calls: [`run_command`], [`Target`], [`one_line`] and
//! each subcommand's entry point and options; everything below is `pub(crate)`.
//!
//! May touch: stderr (the failure line) and the runtime [`run_command`] starts; each module
//! below says what else it touches.

pub mod attach;
pub(crate) mod connect;
pub(crate) mod filter;
pub mod kill;
pub mod logs;
pub mod ls;
pub mod mcp;
pub(crate) mod modes;
pub mod new;
pub(crate) mod plain;
pub(crate) mod remote;
pub mod run;
pub(crate) mod select;
pub mod send;
pub(crate) mod tty;
pub mod wrapper;

use std::fmt;

pub(crate) use connect::Conn;
pub use connect::Target;

/// Exit status: the daemon refused or could not do it, or the selection failed.
pub const EXIT_FAILED: u8 = 1;
/// Exit status: no daemon could be reached.
pub const EXIT_UNREACHABLE: u8 = 2;
/// Exit status: the connection was lost mid-way.
pub const EXIT_LOST: u8 = 255;

/// A failed subcommand: the exit status and the one line printed as `ahpty: {message}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Process exit status.
    pub code: u8,
    /// One line, without the `ahpty: ` prefix.
    pub message: String,
}

impl Failure {
    /// Exit status 1.
    pub fn failed(message: impl Into<String>) -> Failure {
        Failure {
            code: EXIT_FAILED,
            message: message.into(),
        }
    }

    /// Exit status 2.
    pub fn unreachable(message: impl Into<String>) -> Failure {
        Failure {
            code: EXIT_UNREACHABLE,
            message: message.into(),
        }
    }

    /// Exit status 255: the connection ended; a daemon that said it was shutting down (close
    /// code 1001) is named as such.
    pub fn lost() -> Failure {
        let going_away = connect::CLOSE_CODE.load(std::sync::atomic::Ordering::Relaxed)
            == crate::proto::close::CLOSE_GOING_AWAY;
        Failure {
            code: EXIT_LOST,
            message: if going_away {
                format!(
                    "the daemon shut down (close code {}): its terminals were stopped",
                    crate::proto::close::CLOSE_GOING_AWAY
                )
            } else {
                "lost the connection to the daemon".into()
            },
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// What a subcommand returns: the exit status, or a failure to print.
pub type Outcome = Result<u8, Failure>;

/// Runs a client subcommand on a fresh single-purpose runtime and turns its outcome into an
/// exit status, printing a failure as one line on stderr.
pub fn run_command<F>(fut: F) -> u8
where
    F: std::future::Future<Output = Outcome>,
{
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ahpty: cannot start the async runtime: {e}");
            return EXIT_FAILED;
        }
    };
    let outcome = runtime.block_on(fut);
    // Threads blocked on stdin (attach) must not keep the process alive.
    runtime.shutdown_background();
    match outcome {
        Ok(code) => code,
        Err(f) => {
            eprintln!("ahpty: {}", one_line(&f.message));
            f.code
        }
    }
}

/// `text` on one line and safe to print: C0 and C1 controls (newlines, ESC …), DEL and the
/// bidirectional controls (U+061C, U+200E/U+200F, U+202A–U+202E, U+2066–U+2069), which would
/// reorder what follows on the line, become spaces.
pub fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if is_unsafe(c) { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_string()
}

/// Whether `c` is a control or a bidirectional control (see [`one_line`]).
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}
