//! A mode tracker: the terminal modes a program sets with CSI `h`/`l`, keypad sequences and
//! resets, plus the scroll region and the OSC 0/2 title.
//!
//! Two instances exist per terminal. The *live* one rides on the output parser (it sees each
//! CSI and ESC sequence the parser already decodes, so it costs nothing per text byte) and
//! answers DECRQM mode reports. The *model's* one is fed the same text as the terminal model
//! and supplies what the model crate does not keep (bracketed paste, mouse reporting and
//! encoding, focus events, keypad mode, the title) to the snapshot prefix, and tells the
//! model's skip-ahead whether the scroll region is the full screen. Touches nothing else.

use std::fmt::Write;

/// Longest title kept, in bytes (longer titles are cut on a character boundary).
const MAX_TITLE_BYTES: usize = 4096;

/// The tracked modes, with xterm's power-on defaults.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Modes {
    /// DECCKM (`?1`): application cursor keys.
    pub app_cursor: bool,
    /// DECOM (`?6`): origin mode.
    pub origin: bool,
    /// DECAWM (`?7`): autowrap (on by default).
    pub autowrap: bool,
    /// DECTCEM (`?25`): cursor visible (on by default).
    pub cursor_visible: bool,
    /// The alternate screen is active (`?47`, `?1047` or `?1049`).
    pub alt_screen: bool,
    /// Bracketed paste (`?2004`).
    pub bracketed_paste: bool,
    /// Focus events (`?1004`).
    pub focus_events: bool,
    /// Mouse reporting mode: 9, 1000, 1002 or 1003.
    pub mouse: Option<u16>,
    /// Mouse encoding: 1005, 1006 or 1015.
    pub mouse_encoding: Option<u16>,
    /// DECKPAM (`ESC =`): application keypad.
    pub app_keypad: bool,
    /// IRM (`4`): insert mode.
    pub insert: bool,
    /// LNM (`20`): automatic newline.
    pub newline: bool,
    /// The scroll region (top, bottom; 1-based, inclusive) when it is not the full screen.
    pub margins: Option<(u16, u16)>,
    /// The last OSC 0/2 title (tracked only where asked for, see [`ModeTracker::new`]).
    pub title: Option<String>,
}

impl Default for Modes {
    fn default() -> Self {
        Modes {
            app_cursor: false,
            origin: false,
            autowrap: true,
            cursor_visible: true,
            alt_screen: false,
            bracketed_paste: false,
            focus_events: false,
            mouse: None,
            mouse_encoding: None,
            app_keypad: false,
            insert: false,
            newline: false,
            margins: None,
            title: None,
        }
    }
}

/// What a DECRQM report says of a mode (`CSI ? Ps ; Pm $ y`): 0 not recognised, 1 set,
/// 2 reset.
pub type ModeReport = u8;

impl Modes {
    /// The DECRQM state of DEC private mode `mode`.
    pub fn dec_report(&self, mode: u16) -> ModeReport {
        let set = match mode {
            1 => self.app_cursor,
            6 => self.origin,
            7 => self.autowrap,
            25 => self.cursor_visible,
            47 | 1047 | 1049 => self.alt_screen,
            1004 => self.focus_events,
            2004 => self.bracketed_paste,
            9 | 1000 | 1002 | 1003 => self.mouse == Some(mode),
            1005 | 1006 | 1015 => self.mouse_encoding == Some(mode),
            _ => return 0,
        };
        if set {
            1
        } else {
            2
        }
    }

    /// The DECRQM state of ANSI mode `mode`.
    pub fn ansi_report(&self, mode: u16) -> ModeReport {
        let set = match mode {
            4 => self.insert,
            20 => self.newline,
            _ => return 0,
        };
        if set {
            1
        } else {
            2
        }
    }

    /// Sequences that set, on a terminal in its default state, the modes the terminal model
    /// does not restore itself: bracketed paste, focus events, mouse mode and encoding,
    /// keypad mode and the title.
    pub fn fill(&self) -> String {
        let mut s = String::new();
        if self.bracketed_paste {
            s.push_str("\x1b[?2004h");
        }
        if self.focus_events {
            s.push_str("\x1b[?1004h");
        }
        if let Some(m) = self.mouse {
            let _ = write!(s, "\x1b[?{m}h");
        }
        if let Some(e) = self.mouse_encoding {
            let _ = write!(s, "\x1b[?{e}h");
        }
        if self.app_keypad {
            s.push_str("\x1b=");
        }
        if let Some(t) = &self.title {
            let _ = write!(s, "\x1b]2;{t}\x1b\\");
        }
        s
    }
}

/// Updates [`Modes`] from decoded sequences. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct ModeTracker {
    /// The current modes.
    pub modes: Modes,
    track_title: bool,
}

impl ModeTracker {
    /// A tracker in the power-on state; `track_title` keeps the OSC 0/2 title as well.
    pub fn new(track_title: bool) -> Self {
        ModeTracker {
            modes: Modes::default(),
            track_title,
        }
    }

    /// A tracker in the state `modes`.
    pub fn with_modes(modes: Modes, track_title: bool) -> Self {
        ModeTracker { modes, track_title }
    }

    /// A CSI sequence: its parameters (first sub-parameter of each; 0 where omitted), its
    /// private marker and intermediates, and its final byte. `rows` is the screen height (for
    /// DECSTBM).
    pub fn csi(&mut self, params: &[u16], intermediates: &[u8], action: u8, rows: u16) {
        let m = &mut self.modes;
        match (intermediates, action) {
            (b"?", b'h' | b'l') => {
                let on = action == b'h';
                for &p in params {
                    match p {
                        1 => m.app_cursor = on,
                        6 => m.origin = on,
                        7 => m.autowrap = on,
                        25 => m.cursor_visible = on,
                        47 | 1047 | 1049 => m.alt_screen = on,
                        1004 => m.focus_events = on,
                        2004 => m.bracketed_paste = on,
                        9 | 1000 | 1002 | 1003 => {
                            if on {
                                m.mouse = Some(p);
                            } else if m.mouse == Some(p) {
                                m.mouse = None;
                            }
                        }
                        1005 | 1006 | 1015 => {
                            if on {
                                m.mouse_encoding = Some(p);
                            } else if m.mouse_encoding == Some(p) {
                                m.mouse_encoding = None;
                            }
                        }
                        _ => {}
                    }
                }
            }
            (b"", b'h' | b'l') => {
                let on = action == b'h';
                for &p in params {
                    match p {
                        4 => m.insert = on,
                        20 => m.newline = on,
                        _ => {}
                    }
                }
            }
            (b"", b'r') => {
                // DECSTBM, with the model crate's rule: a region that is not at least two
                // rows inside the screen is ignored.
                let top = params.first().copied().filter(|&t| t > 0).unwrap_or(1);
                let bottom = params.get(1).copied().filter(|&b| b > 0).unwrap_or(rows);
                if top < bottom && bottom <= rows {
                    m.margins = (top > 1 || bottom < rows).then_some((top, bottom));
                }
            }
            (b"!", b'p') => self.soft_reset(),
            _ => {}
        }
    }

    /// An ESC sequence (`ESC` intermediates final).
    pub fn esc(&mut self, intermediates: &[u8], byte: u8) {
        if !intermediates.is_empty() {
            return;
        }
        match byte {
            b'=' => self.modes.app_keypad = true,
            b'>' => self.modes.app_keypad = false,
            b'c' => self.modes = Modes::default(),
            _ => {}
        }
    }

    /// An OSC sequence's parameters (split at `;`).
    pub fn osc(&mut self, params: &[&[u8]]) {
        if !self.track_title || params.len() < 2 || !matches!(params[0], b"0" | b"2") {
            return;
        }
        let raw = params[1..].join(&b';');
        let mut title: String = String::from_utf8_lossy(&raw)
            .chars()
            .filter(|c| !c.is_control())
            .collect();
        if title.len() > MAX_TITLE_BYTES {
            let mut cut = MAX_TITLE_BYTES;
            while !title.is_char_boundary(cut) {
                cut -= 1;
            }
            title.truncate(cut);
        }
        self.modes.title = Some(title);
    }

    /// The screen was resized; a change of height resets the scroll region to the full
    /// screen (as the model crate does).
    pub fn resized(&mut self, rows_changed: bool) {
        if rows_changed {
            self.modes.margins = None;
        }
    }

    /// DECSTR (`CSI ! p`).
    fn soft_reset(&mut self) {
        let m = &mut self.modes;
        m.cursor_visible = true;
        m.margins = None;
        m.insert = false;
        m.origin = false;
        m.app_keypad = false;
    }
}

/// Drives a [`ModeTracker`] from a `vte` parser (for text that is not already decoded).
pub struct Driver<'a> {
    /// The tracker to update.
    pub tracker: &'a mut ModeTracker,
    /// The screen height, for DECSTBM.
    pub rows: u16,
}

impl vte::Perform for Driver<'_> {
    fn csi_dispatch(&mut self, params: &vte::Params, intermediates: &[u8], ignore: bool, c: char) {
        if ignore || !c.is_ascii() {
            return;
        }
        let mut ps = [0u16; 16];
        let mut n = 0;
        for p in params.iter().take(ps.len()) {
            ps[n] = p.first().copied().unwrap_or(0);
            n += 1;
        }
        self.tracker
            .csi(&ps[..n], intermediates, c as u8, self.rows);
    }

    fn esc_dispatch(&mut self, intermediates: &[u8], ignore: bool, byte: u8) {
        if !ignore {
            self.tracker.esc(intermediates, byte);
        }
    }

    fn osc_dispatch(&mut self, params: &[&[u8]], _bell_terminated: bool) {
        self.tracker.osc(params);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(t: &mut ModeTracker, bytes: &[u8]) {
        let mut p = vte::Parser::new();
        p.advance(
            &mut Driver {
                tracker: t,
                rows: 24,
            },
            bytes,
        );
    }

    #[test]
    fn tracks_modes_and_reports_them() {
        let mut t = ModeTracker::new(true);
        feed(
            &mut t,
            b"\x1b[?2004h\x1b[?1000;1006h\x1b[?1049h\x1b=\x1b[4h\x1b]2;vim\x07\x1b[2;20r",
        );
        let m = &t.modes;
        assert!(m.bracketed_paste && m.alt_screen && m.app_keypad && m.insert);
        assert_eq!((m.mouse, m.mouse_encoding), (Some(1000), Some(1006)));
        assert_eq!(m.title.as_deref(), Some("vim"));
        assert_eq!(m.margins, Some((2, 20)));
        assert_eq!(m.dec_report(2004), 1);
        assert_eq!(m.dec_report(1002), 2);
        assert_eq!(m.dec_report(12345), 0);
        assert_eq!(m.ansi_report(4), 1);
        assert_eq!(m.ansi_report(20), 2);
        assert_eq!(
            m.fill(),
            "\x1b[?2004h\x1b[?1000h\x1b[?1006h\x1b=\x1b]2;vim\x1b\\"
        );
        // A full-screen region is no region; a reset clears everything.
        feed(&mut t, b"\x1b[1;24r");
        assert_eq!(t.modes.margins, None);
        feed(&mut t, b"\x1b[5;3r");
        assert_eq!(t.modes.margins, None);
        feed(&mut t, b"\x1bc");
        assert_eq!(t.modes, Modes::default());
    }
}
