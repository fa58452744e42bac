//! The local terminal: whether stdin/stdout are terminals, the window size, and raw mode with
//! a guaranteed way back.
//!
//! [`RawMode::enter`] saves stdin's termios and switches it to raw mode (no echo, no line
//! editing, no signals from keys, no output processing — every key goes to the remote
//! program). The saved termios is put back when the guard is dropped (detach, remote exit,
//! lost connection, SIGTERM/SIGHUP handled by the caller) and by a panic hook installed on
//! the first `enter`, so a panic anywhere restores the terminal before the message prints.
//! Only a SIGKILL of `ahpty` itself leaves the terminal raw (`stty sane` or `reset` repairs
//! it).
//!
//! May touch: stdin's termios (saved and put back), the window size of stdout or stdin
//! (`TIOCGWINSZ`), and the process's panic hook (installed once).

use std::io::{self, IsTerminal};
use std::os::fd::AsRawFd;
use std::sync::Once;

use nix::sys::termios::{self, SetArg, Termios};
use parking_lot::Mutex;

/// The termios to put back, while raw mode is on.
static SAVED: Mutex<Option<Termios>> = Mutex::new(None);
static PANIC_HOOK: Once = Once::new();

/// Whether stdin is a terminal.
pub fn stdin_is_tty() -> bool {
    io::stdin().is_terminal()
}

/// Whether stdout is a terminal.
pub fn stdout_is_tty() -> bool {
    io::stdout().is_terminal()
}

/// The local window size `(cols, rows)`: of stdout, else of stdin; `None` when neither is a
/// terminal (or the size is unknown, 0×0).
pub fn window_size() -> Option<(u16, u16)> {
    [io::stdout().as_raw_fd(), io::stdin().as_raw_fd()]
        .into_iter()
        .find_map(size_of_fd)
}

fn size_of_fd(fd: i32) -> Option<(u16, u16)> {
    // SAFETY: `winsize` is plain old data, valid when zeroed.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes one `winsize` through the pointer, which is valid for writes;
    // on a descriptor that is not a terminal it fails with ENOTTY and writes nothing.
    let r = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) };
    (r == 0 && ws.ws_col > 0 && ws.ws_row > 0).then_some((ws.ws_col, ws.ws_row))
}

/// Raw mode on stdin, undone on drop.
pub struct RawMode {
    _private: (),
}

impl RawMode {
    /// Saves stdin's termios and switches it to raw mode.
    pub fn enter() -> io::Result<RawMode> {
        let stdin = io::stdin();
        let original = termios::tcgetattr(&stdin).map_err(io::Error::from)?;
        let mut raw = original.clone();
        termios::cfmakeraw(&mut raw);
        *SAVED.lock() = Some(original);
        PANIC_HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                previous(info);
            }));
        });
        termios::tcsetattr(&stdin, SetArg::TCSADRAIN, &raw).map_err(io::Error::from)?;
        Ok(RawMode { _private: () })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        restore();
    }
}

/// Puts the saved termios back (once; later calls do nothing).
pub fn restore() {
    let saved = SAVED.lock().take();
    if let Some(t) = saved {
        let _ = termios::tcsetattr(io::stdin(), SetArg::TCSADRAIN, &t);
    }
}
