//! The terminal model: a headless emulator that knows what a terminal's screen looks like at
//! a given point of its output, so that a snapshot can rebuild that screen and a cursor
//! position report can be answered without any client.
//!
//! The emulator is `avt` (asciinema's virtual terminal; docs/architecture.md says why). This
//! module is the glue around it:
//! - [`Model`] feeds it client-visible text: combining marks are composed (NFC) and the
//!   zero-width characters that remain are kept out, because avt would give each one a cell of
//!   its own where every client attaches it to the previous one; a run of plain lines long
//!   enough to scroll the whole screen is skipped ahead (see [`Model::feed`]); and a
//!   [`ModeTracker`] is fed the same text for what avt does not keep (bracketed paste, mouse
//!   modes and encoding, focus events, keypad mode, the title).
//! - [`Frozen`] is a model at rest: avt's own dump (which restores both screens, the scroll
//!   region, saved cursors, charsets, tab stops and pending wrap exactly), the tracked modes,
//!   and the text a client replays to reach that screen ([`Frozen::client`]: avt's dump with
//!   the two sequences clients do not implement rewritten, plus the tracked modes). An idle
//!   terminal keeps only that (a few KiB), not avt's grids (about 156 KiB at 120×40).
//! - [`PREAMBLE`](preamble) puts any client emulator into a known state first.
//!
//! Runs wherever it is called (the host calls it off its lock); touches nothing else.

pub mod modes;
pub mod query;

use std::fmt::Write;

use unicode_normalization::UnicodeNormalization;
use unicode_width::UnicodeWidthChar;

pub use modes::{ModeTracker, Modes};
pub use query::{Query, Reply};

/// Largest width or height the model is given (larger terminals are modelled at this size).
pub const MAX_MODEL_DIMENSION: u16 = 1024;

/// A model at rest. See the module docs. Serializable: carried across a live upgrade.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Frozen {
    /// avt's dump: fed to a fresh avt of the same size it restores this state exactly.
    raw: String,
    /// The tracked modes at this point.
    modes: Modes,
    cols: u16,
    rows: u16,
    /// What a client replays, after [`preamble`], to reach this screen.
    client: String,
}

impl Frozen {
    /// The state of a terminal that has printed nothing yet.
    pub fn fresh(cols: u16, rows: u16) -> Frozen {
        let (cols, rows) = clamp_size(cols, rows);
        Frozen {
            raw: String::new(),
            modes: Modes::default(),
            cols,
            rows,
            client: String::new(),
        }
    }

    /// The text that rebuilds this screen on a client emulator put in its default state by
    /// [`preamble`] (bytes of UTF-8; typically 2–10 KiB).
    pub fn client(&self) -> &str {
        &self.client
    }

    /// Heap bytes held.
    #[cfg(test)]
    pub fn heap_bytes(&self) -> usize {
        self.raw.capacity() + self.client.capacity()
    }
}

/// A live model (see the module docs).
pub struct Model {
    vt: avt::Terminal,
    tracker: ModeTracker,
    vte: vte::Parser,
    cols: u16,
    rows: u16,
}

fn clamp_size(cols: u16, rows: u16) -> (u16, u16) {
    (
        cols.clamp(1, MAX_MODEL_DIMENSION),
        rows.clamp(1, MAX_MODEL_DIMENSION),
    )
}

impl Model {
    /// A model in the state `frozen` describes (about 150 µs at 120×40).
    pub fn thaw(frozen: &Frozen) -> Model {
        let cols = usize::from(frozen.cols);
        let rows = usize::from(frozen.rows);
        let mut vt = match avt::Terminal::new(cols, rows) {
            Ok(vt) => vt,
            // Unreachable: the size is clamped to at least 1×1.
            Err(_) => avt::Terminal::new(80, 24).unwrap_or_else(|_| unreachable!()),
        };
        vt.feed(frozen.raw.as_str());
        Model {
            vt,
            tracker: ModeTracker::with_modes(frozen.modes.clone(), true),
            vte: vte::Parser::new(),
            cols: frozen.cols,
            rows: frozen.rows,
        }
    }

    /// The model at rest, with the client's replay text built.
    pub fn freeze(&self) -> Frozen {
        let raw = self.vt.dump();
        let mut client = client_dump(&raw);
        client.push_str(&self.tracker.modes.fill());
        Frozen {
            raw,
            modes: self.tracker.modes.clone(),
            cols: self.cols,
            rows: self.rows,
            client,
        }
    }

    /// The tracked modes.
    #[cfg(test)]
    pub fn modes(&self) -> &Modes {
        &self.tracker.modes
    }

    /// Resizes the model as the pty was resized (the primary screen reflows).
    pub fn resize(&mut self, cols: u16, rows: u16) {
        let (cols, rows) = clamp_size(cols, rows);
        if (cols, rows) == (self.cols, self.rows) {
            return;
        }
        self.tracker.resized(rows != self.rows);
        self.vt.resize(usize::from(cols), usize::from(rows));
        self.cols = cols;
        self.rows = rows;
    }

    /// The reply to a cursor position report at this point: `CSI row ; col R` (DECXCPR:
    /// `CSI ? row ; col ; 1 R`), 1-based, the column clamped to the last one while a wrap is
    /// pending, the row relative to the scroll region's top in origin mode.
    pub fn cursor_report(&self, extended: bool) -> Vec<u8> {
        let c = self.vt.cursor();
        let col = c.col.min(usize::from(self.cols) - 1) + 1;
        let mut row = c.row + 1;
        let modes = &self.tracker.modes;
        if modes.origin {
            if let Some((top, _)) = modes.margins {
                row = row.saturating_sub(usize::from(top) - 1).max(1);
            }
        }
        if extended {
            format!("\x1b[?{row};{col};1R").into_bytes()
        } else {
            format!("\x1b[{row};{col}R").into_bytes()
        }
    }

    /// Feeds client-visible text that starts on a sequence boundary (as every position the
    /// host models from does).
    ///
    /// Skip-ahead: when the text ends in a run of "simple" output — printable text, CR, LF,
    /// BS, HT, plain SGR (`CSI … m`) and EL (`CSI … K`) — and the scroll region is the full
    /// screen, everything in that run before its last CR LF that is still followed by twice
    /// the screen height of line feeds cannot show on the screen any more: the first `rows`
    /// line feeds bring the cursor to the bottom from anywhere, the next `rows` scroll every
    /// row in fresh. Of that part only the SGRs (the pen) are applied. This keeps a flood of
    /// plain lines cheap, and the state is exactly what a full feed gives.
    pub fn feed(&mut self, text: &str) {
        let bytes = text.as_bytes();
        let start = simple_suffix_start(bytes);
        self.feed_exact(&text[..start]);
        if self.tracker.modes.margins.is_none() {
            if let Some(cut) = skip_cut(&bytes[start..], 2 * usize::from(self.rows)) {
                let skipped = &text[start..start + cut];
                let mut pen = String::new();
                for_each_sgr(skipped, |sgr| pen.push_str(sgr));
                pen.push('\r');
                self.feed_exact(&pen);
                self.feed_exact(&text[start + cut..]);
                return;
            }
        }
        self.feed_exact(&text[start..]);
    }

    /// Feeds text without skipping.
    fn feed_exact(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.vte.advance(
            &mut modes::Driver {
                tracker: &mut self.tracker,
                rows: self.rows,
            },
            text.as_bytes(),
        );
        if text.is_ascii() {
            self.vt.feed(text);
            return;
        }
        // Compose what composes; keep the remaining zero-width characters out (line by line,
        // so plain lines go straight through).
        for line in text.split_inclusive('\n') {
            if line.is_ascii() {
                self.vt.feed(line);
            } else {
                let kept: String = line.nfc().filter(|&c| !is_zero_width(c)).collect();
                self.vt.feed(kept.as_str());
            }
        }
    }
}

/// A character clients attach to the previous cell instead of giving it one.
fn is_zero_width(c: char) -> bool {
    c >= '\u{300}' && c.width() == Some(0)
}

/// Where the longest run of simple output (see [`Model::feed`]) at the end of `b` starts: a
/// sequence boundary.
fn simple_suffix_start(b: &[u8]) -> usize {
    let mut i = b.len();
    while i > 0 {
        let c = b[i - 1];
        if c == b'm' || c == b'K' {
            let mut j = i - 1;
            while j > 0
                && (b[j - 1].is_ascii_digit() || (c == b'm' && matches!(b[j - 1], b';' | b':')))
            {
                j -= 1;
            }
            if j >= 2 && b[j - 1] == b'[' && b[j - 2] == 0x1b {
                i = j - 2;
                continue;
            }
            i -= 1;
            continue;
        }
        let simple = c >= 0x20 && c != 0x7f || matches!(c, b'\r' | b'\n' | b'\t' | 0x08);
        if !simple {
            // `c` may begin (ESC) or end (BEL, …) a sequence: the run starts after the whole
            // token `c` belongs to.
            return token_end(b, i - 1);
        }
        i -= 1;
    }
    0
}

/// The end of the token that starts at `at`: after an escape sequence that begins there (the
/// end of `b` when it is unterminated), else just after the byte.
fn token_end(b: &[u8], at: usize) -> usize {
    if b[at] != 0x1b {
        return at + 1;
    }
    let Some(&kind) = b.get(at + 1) else {
        return b.len();
    };
    let body = at + 2;
    match kind {
        b'[' => b[body.min(b.len())..]
            .iter()
            .position(|x| (0x40..=0x7e).contains(x))
            .map_or(b.len(), |i| body + i + 1),
        b']' | b'P' | b'X' | b'^' | b'_' => {
            let mut i = body;
            while i < b.len() {
                match b[i] {
                    0x07 if kind == b']' => return i + 1,
                    0x1b if b.get(i + 1) == Some(&b'\\') => return i + 2,
                    // Another ESC ends the string (and starts a sequence of its own).
                    0x1b => return token_end(b, i),
                    0x18 | 0x1a => return i + 1,
                    _ => i += 1,
                }
            }
            b.len()
        }
        _ => b[at + 1..]
            .iter()
            .position(|x| (0x30..=0x7e).contains(x))
            .map_or(b.len(), |i| at + 1 + i + 1),
    }
}

/// In a simple run, the last point right after a CR LF that is followed by at least `need`
/// line feeds.
fn skip_cut(b: &[u8], need: usize) -> Option<usize> {
    let mut lfs = 0;
    let mut k = b.len();
    while k >= 2 {
        if b[k - 1] == b'\n' {
            if lfs >= need && b[k - 2] == b'\r' {
                return Some(k);
            }
            lfs += 1;
        }
        k -= 1;
    }
    None
}

/// Calls `f` with each `CSI … m` of a simple run, in order.
fn for_each_sgr(text: &str, mut f: impl FnMut(&str)) {
    let b = text.as_bytes();
    let mut p = 0;
    while let Some(e) = memchr::memchr(0x1b, &b[p..]) {
        let s = p + e;
        let end = token_end(b, s);
        if b[end - 1] == b'm' {
            f(&text[s..end]);
        }
        p = end;
    }
}

/// avt's dump in the form clients implement: `?1047` (which alacritty and some others
/// ignore) becomes `?1049`, or is dropped where it only brackets the alternate screen's saved
/// cursor while the primary screen is active; tab stops set with CTC (`CSI 5 W`, `CSI 0 W`)
/// become TBC and HTS (`CSI 3 g`, `ESC H`). avt's dump holds no text with an ESC in it, so
/// these rewrites touch only its own sequences (a test pins the shape).
fn client_dump(raw: &str) -> String {
    let mut d = match (raw.find("\x1b[?1047h"), raw.find("\x1b[?1047l")) {
        (Some(a), Some(b)) if a < b => {
            let mut d = raw.to_string();
            d.replace_range(a..b + "\x1b[?1047l".len(), "");
            d
        }
        _ => raw.replace("\x1b[?1047h", "\x1b[?1049h"),
    };
    if d.contains("W") {
        d = d.replace("\x1b[5W", "\x1b[3g").replace("\x1b[0W", "\x1bH");
    }
    d
}

/// What the snapshot's synthesized prefix starts with: sequences that put a client emulator
/// of `cols` columns into its default state, whatever it showed before — primary screen, full
/// scroll region, no origin mode, autowrap on, insert and newline modes off, ASCII charsets,
/// normal cursor keys and keypad, cursor shown, mouse reporting, focus events and bracketed
/// paste off, default pen, a tab stop every 8 columns, the cursor home on a cleared screen.
pub fn preamble(cols: u16) -> String {
    let mut s = String::from(
        "\x1b[?1049l\x1b[r\x1b[?6l\x1b[?7h\x1b[4l\x1b[20l\x1b(B\x1b)B\x0f\x1b[?1l\x1b>\x1b[?25h\
         \x1b[?9l\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1005l\x1b[?1006l\x1b[?1015l\
         \x1b[?1004l\x1b[?2004l\x1b[0m\x1b[3g",
    );
    let mut col = 9;
    while col <= cols {
        let _ = write!(s, "\x1b[{col}G\x1bH");
        col += 8;
    }
    s.push_str("\x1b[H\x1b[2J");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(cols: u16, rows: u16) -> Model {
        Model::thaw(&Frozen::fresh(cols, rows))
    }

    fn screen(m: &Model) -> (Vec<String>, avt::Cursor) {
        (m.vt.screen().text(), m.vt.cursor())
    }

    /// A model rebuilt from its frozen form is the same model.
    fn roundtrip(m: &Model) -> Model {
        Model::thaw(&m.freeze())
    }

    #[test]
    fn skip_ahead_gives_the_state_of_a_full_feed() {
        let mut lines = String::from("\x1b[31mstart\r\n");
        for i in 0..500 {
            let _ = write!(lines, "\x1b[3{}mline {i}\x1b[K\x1b[0m\ttab\r\n", i % 8);
        }
        lines.push_str("\x1b[1mlast, no newline");
        for prefix in [
            "",
            "\x1b[?1049h\x1b[5;10Hx",
            "\x1b[2;5r",
            "\x1b]0;t\x07",
            "\x1b[?1h",
        ] {
            let text = format!("{prefix}{lines}");
            let mut skipping = model(40, 10);
            skipping.feed(&text);
            let mut full = model(40, 10);
            full.feed_exact(&text);
            assert_eq!(screen(&skipping), screen(&full), "{prefix:?}");
            assert_eq!(skipping.vt.dump(), full.vt.dump(), "{prefix:?}");
        }
        assert!(simple_suffix_start(b"\x1b[1;5Habc") == "\x1b[1;5H".len());
        // An unterminated OSC swallows the rest.
        assert_eq!(simple_suffix_start(b"\x1b]0;abc\r\nxyz"), 12);
        assert_eq!(simple_suffix_start(b"\x1b]0;abc\x07\r\nxyz"), 8);
        assert_eq!(simple_suffix_start(b"ab\x1b[1mcd"), 0);
        assert_eq!(simple_suffix_start(b"ab\x07cd"), 3);
    }

    #[test]
    fn frozen_models_thaw_exactly() {
        let mut m = model(30, 8);
        m.feed("\x1b[?2004h\x1b[?1000h\x1b[?1006h\x1b]2;t\x07hello\r\nwide 日本\r\n");
        m.feed("\x1b[?1049h\x1b[2;6r\x1b[3;3H\x1b[7mdraw\x1b7\x1b[1;1H\x1b(0lqk\x1b(B");
        let back = roundtrip(&m);
        assert_eq!(screen(&back), screen(&m));
        assert_eq!(back.vt.dump(), m.vt.dump());
        assert_eq!(back.modes(), m.modes());
        // Output after the restore lands the same way (the scroll region, saved cursor and
        // pen survived).
        let mut a = m;
        let mut b = back;
        for x in [&mut a, &mut b] {
            x.feed("\x1b8more\r\n\r\n\r\n\r\n\r\n\x1b[?1049l after");
        }
        assert_eq!(screen(&a), screen(&b));
    }

    #[test]
    fn the_client_dump_uses_sequences_clients_implement() {
        // The shape avt 0.19.0 dumps in (the rewrites depend on it).
        let mut m = model(20, 5);
        m.feed("\x1b[3g\x1b[5G\x1bHa\x1b[?1049hb");
        let f = m.freeze();
        assert!(f.raw.contains("\x1b[?1047h") && f.raw.contains("\x1b[5W"));
        assert!(!f.client.contains("1047") && f.client.contains("\x1b[?1049h"));
        assert!(f.client.contains("\x1b[3g") && !f.client.contains("\x1b[5W"));
        // In the primary screen with a saved alternate cursor, the bracket is dropped.
        let mut m = model(20, 5);
        m.feed("\x1b[?1049h\x1b[2;2H\x1b7\x1b[?1049lx");
        let f = m.freeze();
        assert!(f.raw.contains("\x1b[?1047l"));
        assert!(!f.client.contains("1047") && !f.client.contains("1049"));
    }

    #[test]
    fn combining_marks_compose_and_zero_width_characters_stay_out() {
        let mut m = model(20, 3);
        m.feed("e\u{301}x a\u{20d7}b 👍\u{1f3fd}!");
        let (text, cursor) = screen(&m);
        assert_eq!(text[0], "éx ab 👍🏽!");
        // é, x, space, a, b, space, the emoji (2) and its modifier (2), !
        assert_eq!(cursor.col, 11);
    }

    #[test]
    fn cursor_reports() {
        let mut m = model(10, 5);
        m.feed("\x1b[3;4H");
        assert_eq!(m.cursor_report(false), b"\x1b[3;4R");
        assert_eq!(m.cursor_report(true), b"\x1b[?3;4;1R");
        m.feed("\x1b[1;10Hx");
        assert_eq!(m.cursor_report(false), b"\x1b[1;10R");
        m.feed("\x1b[2;4r\x1b[?6h\x1b[2;1H");
        assert_eq!(m.cursor_report(false), b"\x1b[2;1R");
    }

    #[test]
    fn a_frozen_model_is_a_few_kib() {
        // A full 120×40 screen of coloured text in the alternate screen, with the primary one
        // full too: what an idle terminal keeps is the dump, not avt's grids (156 KiB).
        let mut m = model(120, 40);
        let mut text = String::new();
        for screen in ["", "\x1b[?1049h"] {
            text.push_str(screen);
            for i in 0..40 {
                let _ = write!(
                    text,
                    "\x1b[3{}m{:<119}\x1b[0m\r\n",
                    i % 8,
                    format!("row {i} é 日本")
                );
            }
        }
        m.feed(&text);
        let f = m.freeze();
        assert!(f.heap_bytes() < 48 * 1024, "{} bytes", f.heap_bytes());
        assert!(f.client().contains("row 39"));
    }

    #[test]
    fn preamble_sets_default_tab_stops() {
        let p = preamble(20);
        assert!(p.ends_with("\x1b[9G\x1bH\x1b[17G\x1bH\x1b[H\x1b[2J"));
    }
}
