//! Shell integration for ahpty terminals.
//!
//! Job: make bash, zsh and fish report command boundaries (OSC 633) out of the box, strip every
//! shell-integration escape sequence from pty output before it reaches clients (every other
//! byte passes through exactly as written), and turn the marks into AHP terminal actions.
//! May touch: its own private script directory under the temp dir (see [`scripts`]); it reads
//! the process environment but never the user's dotfiles, and performs no other I/O.
//!
//! * [`parser`]: raw pty bytes → UTF-8 text + [`Mark`]s, in stream order (the OSC payloads the
//!   escape-sequence framer, `terminal::escape`, delimits).
//! * [`tracker`]: [`Mark`]s → `StateAction`s (`terminal/commandExecuted`, …).
//! * [`scripts`]: the integration scripts and the spawn-time [`Injection`].

pub(crate) mod parser;
pub(crate) mod scripts;
pub(crate) mod tracker;

pub use parser::{sanitize_title, Mark, OutputParser, Parsed, ParserCarry, MAX_TITLE_CHARS};
pub use scripts::{
    adopt_script_dir, current_script_dir, new_nonce, prepare, prepare_with_env, remove_script_dir,
    shell_kind, Injection, ShellKind, NONCE_ENV,
};
pub use tracker::{now_ms, CommandTracker};
