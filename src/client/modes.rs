//! Terminal modes the remote program switched on in the local terminal, and the sequence that
//! switches them off again when `attach` ends.
//!
//! `attach` copies the remote output to the local terminal verbatim, so a full-screen program
//! can leave the local terminal in its alternate screen, with the cursor hidden, mouse
//! reporting or bracketed paste on, application cursor keys or keypad, a scrolling region or a
//! cursor shape. [`Modes`] watches the stream with the `vte` parser (DECSET/DECRST, DECKPAM,
//! DECSTBM, DECSCUSR) and [`Modes::reset`] undoes exactly what is still set — nothing else,
//! because some of these sequences have side effects (leaving an alternate screen that was
//! never entered would move the cursor).
//!
//! Pure state over the output stream; touches nothing (`attach` writes the reset).

use std::collections::BTreeSet;

/// DEC private modes that are off in a fresh terminal (and cursor visibility/autowrap, which
/// are on, tracked inverted below).
const TRACKED_ON: &[u16] = &[
    1,    // DECCKM application cursor keys
    9,    // X10 mouse
    1000, // mouse press/release
    1001, // highlight mouse
    1002, // button-event mouse
    1003, // any-event mouse
    1004, // focus events
    1005, // UTF-8 mouse
    1006, // SGR mouse
    1015, // urxvt mouse
    2004, // bracketed paste
];

/// Alternate-screen modes.
const ALT_SCREEN: &[u16] = &[47, 1047, 1049];

/// What the remote output left switched on.
#[derive(Default)]
pub struct Modes {
    parser: vte::Parser,
    state: State,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct State {
    on: BTreeSet<u16>,
    /// The alternate-screen mode in use, if any.
    alt_screen: Option<u16>,
    cursor_hidden: bool,
    autowrap_off: bool,
    keypad: bool,
    scroll_region: bool,
    cursor_shape: bool,
}

impl vte::Perform for State {
    fn csi_dispatch(
        &mut self,
        params: &vte::Params,
        intermediates: &[u8],
        _ignore: bool,
        action: char,
    ) {
        let first = |p: &vte::Params| p.iter().next().and_then(|s| s.first().copied());
        match (intermediates, action) {
            (b"?", 'h' | 'l') => {
                let set = action == 'h';
                for p in params.iter().filter_map(|s| s.first().copied()) {
                    match p {
                        25 => self.cursor_hidden = !set,
                        7 => self.autowrap_off = !set,
                        p if ALT_SCREEN.contains(&p) => {
                            self.alt_screen = if set { Some(p) } else { None };
                        }
                        p if TRACKED_ON.contains(&p) => {
                            if set {
                                self.on.insert(p);
                            } else {
                                self.on.remove(&p);
                            }
                        }
                        _ => {}
                    }
                }
            }
            (b"", 'r') => {
                // DECSTBM without parameters (or 0s) resets the region.
                let any = params.iter().any(|s| s.first().is_some_and(|&v| v != 0));
                self.scroll_region = any;
            }
            (b" ", 'q') => self.cursor_shape = first(params).unwrap_or(0) != 0,
            _ => {}
        }
    }

    fn esc_dispatch(&mut self, intermediates: &[u8], _ignore: bool, byte: u8) {
        match (intermediates, byte) {
            (b"", b'=') => self.keypad = true,
            (b"", b'>') => self.keypad = false,
            // RIS: a full reset puts everything back.
            (b"", b'c') => *self = State::default(),
            _ => {}
        }
    }
}

impl Modes {
    /// Nothing switched on yet.
    pub fn new() -> Modes {
        Modes::default()
    }

    /// Follows `text` as the local terminal sees it.
    pub fn track(&mut self, text: &str) {
        self.parser.advance(&mut self.state, text.as_bytes());
    }

    /// The sequence that switches off everything the stream left on, plus an SGR reset.
    pub fn reset(&self) -> String {
        let s = &self.state;
        let mut out = String::new();
        if let Some(m) = s.alt_screen {
            out.push_str(&format!("\x1b[?{m}l"));
        }
        if s.scroll_region {
            // DECSTBM homes the cursor: keep it where it is.
            out.push_str("\x1b7\x1b[r\x1b8");
        }
        for m in s.on.iter().rev() {
            out.push_str(&format!("\x1b[?{m}l"));
        }
        if s.keypad {
            out.push_str("\x1b>");
        }
        if s.cursor_shape {
            out.push_str("\x1b[0 q");
        }
        if s.autowrap_off {
            out.push_str("\x1b[?7h");
        }
        if s.cursor_hidden {
            out.push_str("\x1b[?25h");
        }
        out.push_str("\x1b[0m");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resets_only_what_is_on() {
        let mut m = Modes::new();
        m.track("plain text \x1b[1mbold");
        assert_eq!(m.reset(), "\x1b[0m");
        m.track("\x1b[?1049h\x1b[?25l\x1b[?1;2004h\x1b[?100");
        m.track("6h\x1b=\x1b[2;20r\x1b[5 q");
        assert_eq!(
            m.reset(),
            "\x1b[?1049l\x1b7\x1b[r\x1b8\x1b[?2004l\x1b[?1006l\x1b[?1l\x1b>\x1b[0 q\x1b[?25h\x1b[0m"
        );
        m.track("\x1b[?1049l\x1b[?25h\x1b[?2004l\x1b[?1l\x1b[?1006l\x1b>\x1b[r\x1b[0 q");
        assert_eq!(m.reset(), "\x1b[0m");
        m.track("\x1b[?1000h\x1bc");
        assert_eq!(m.reset(), "\x1b[0m");
    }
}
