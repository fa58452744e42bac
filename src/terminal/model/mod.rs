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
mod skip;

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
    /// Whether the text fed so far ends between sequences (its last ESC starts a sequence
    /// that is complete), so that the parsers are in their ground state and a thawed copy of
    /// [`Model::freeze`] is this very model (see [`Model::thaws_exactly`]).
    between_sequences: bool,
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
            between_sequences: true,
        }
    }

    /// Whether [`Model::thaw`] of [`Model::freeze`] gives back a model that behaves as this one
    /// on any further text. Not when the text fed so far ends inside a sequence (an ESC whose
    /// sequence the text does not complete): avt's dump carries its parser's state, but the
    /// mode tracker's parser starts a thawed model in its ground state, so the rest of that
    /// sequence would be text to one model and a mode change to the other. Conservative: a
    /// malformed last sequence counts as unfinished.
    pub fn thaws_exactly(&self) -> bool {
        self.between_sequences
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
    /// host models from does), skipping what later output in it overwrites in full
    /// ([`skip`]): a flood of plain lines or of full-screen redraws costs a scan of the bytes
    /// and the emulation of the last screenful, and the state is exactly what a full feed
    /// gives.
    pub fn feed(&mut self, text: &str) {
        if skip::has_c1_control(text.as_bytes()) || skip::has_mark_after_sequence(text) {
            // avt reads C1 controls (U+0080–U+009F: CSI as U+009B, …) as controls, which
            // neither skip-ahead follows, and a sequence a combining mark directly follows
            // as the composed character makes it: no skipping in such a batch.
            self.feed_exact(text);
            return;
        }
        let start = skip::simple_suffix_start(text.as_bytes());
        self.feed_repainting(&text[..start]);
        let simple = &text[start..];
        if self.region_is_full(simple.as_bytes()) {
            if let Some((cut, col, autowrap)) = self.simple_cut(simple.as_bytes()) {
                let (cols, rows) = (usize::from(self.cols), usize::from(self.rows));
                self.feed_exact(&skip::net_pen(&simple[..cut]));
                let mut restore = String::new();
                skip::restore_cursor(&mut restore, col, cols, rows, autowrap);
                // CUP, a space and autowrap as it was: nothing the mode tracker follows.
                self.vt.feed(restore.as_str());
                self.feed_exact(&simple[cut..]);
                return;
            }
        }
        self.feed_exact(simple);
    }

    /// Whether the scroll region is the whole screen, where a cut in the simple run `b` may be
    /// taken (it has twice the height of line feeds): the mode tracker's word, then avt's own
    /// (its dump), as avt can hold a region the tracker missed (it keeps parameters in 16
    /// bits; a C1 CSI in an earlier feed).
    fn region_is_full(&self, b: &[u8]) -> bool {
        self.tracker.modes.margins.is_none()
            && memchr::memchr_iter(b'\n', b).count() >= 2 * usize::from(self.rows)
            && !skip::dump_sets_margins(&self.vt.dump())
    }

    /// Where to cut the simple run `b` about to be fed ([`skip::skip_cut`]), the cursor's
    /// column there and whether autowrap is on. The column after a bare line feed depends on
    /// autowrap and LNM, which avt can hold otherwise than the mode tracker says (a cursor
    /// restore brings back the saved autowrap, avt keeps parameters in 16 bits, a C1 CSI in an
    /// earlier feed): where the modes matter they are read off avt itself by a probe on the
    /// bottom row, which a cut lets the line feeds after it scroll away (a cut is only taken
    /// after enough line feeds to bring the cursor there, and twice the height follow it).
    fn simple_cut(&mut self, b: &[u8]) -> Option<(usize, usize, bool)> {
        let cursor = self.vt.cursor();
        let (cols, rows) = (usize::from(self.cols), usize::from(self.rows));
        let need = 2 * rows;
        let cut = |autowrap, newline| {
            let start = skip::RunStart {
                col: cursor.col,
                row: cursor.row,
                cols,
                rows,
                newline,
                autowrap,
            };
            skip::skip_cut(b, need, start)
        };
        // Whether a column can be counted does not depend on autowrap: with either, there is
        // a cut (and one with LNM on too) or there is none.
        let wrapping = cut(true, false)?;
        let clipping = cut(false, false)?;
        let lnm = cut(false, true)?;
        if wrapping == clipping && clipping == lnm {
            return Some((wrapping.0, wrapping.1, self.tracker.modes.autowrap));
        }
        // LNM is seen only at a line feed from a column other than 0: on one column, only
        // after a pending wrap, which needs autowrap.
        if cols == 1 && clipping != lnm {
            return None;
        }
        self.vt.feed(format!("\x1b[{rows};{cols}H ").as_str());
        let autowrap = self.vt.cursor().col == cols;
        if cols > 1 {
            self.vt.feed(format!("\x1b[{rows};2H").as_str());
        }
        self.vt.feed("\n");
        let newline = self.vt.cursor().col == 0;
        let (cut, col) = match (newline, autowrap) {
            (true, _) => lnm,
            (false, true) => wrapping,
            (false, false) => clipping,
        };
        Some((cut, col, autowrap))
    }

    /// Feeds text, skipping the part of each repaint run that the run paints over (see
    /// [`skip::next_repaint`]) where the modes let a CUP and printing behave as it assumes.
    fn feed_repainting(&mut self, text: &str) {
        let (cols, rows) = (usize::from(self.cols), usize::from(self.rows));
        // The scan's per-row bookkeeping, shared by the runs of this feed.
        let (mut painted, mut generation) = (Vec::new(), 0);
        let mut at = 0;
        while let Some((start, cut)) =
            skip::next_repaint(text, at, cols, rows, &mut painted, &mut generation)
        {
            self.feed_exact(&text[at..start]);
            let m = &self.tracker.modes;
            if m.origin || m.insert || !m.autowrap {
                self.feed_exact(&text[start..cut]);
            } else {
                self.feed_exact(&skip::net_pen(&text[start..cut]));
            }
            at = cut;
        }
        self.feed_exact(&text[at..]);
    }

    /// Feeds text without skipping.
    fn feed_exact(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        // vte leaves its ground state only at an ESC (it reads U+0080–U+009F as text).
        if let Some(e) = memchr::memrchr(0x1b, text.as_bytes()) {
            self.between_sequences = skip::well_formed_end(text.as_bytes(), e).is_some();
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
    cells(c).is_none()
}

/// The cells avt gives a character the model feeds it (1 or 2); `None` for one it keeps out
/// ([`is_zero_width`]: zero width, from U+0300 on).
fn cells(c: char) -> Option<usize> {
    match c.width() {
        Some(0) if c >= '\u{300}' => None,
        Some(2) => Some(2),
        _ => Some(1),
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
        use skip::simple_suffix_start;
        assert!(simple_suffix_start(b"\x1b[1;5Habc") == "\x1b[1;5H".len());
        // An unterminated OSC swallows the rest.
        assert_eq!(simple_suffix_start(b"\x1b]0;abc\r\nxyz"), 12);
        assert_eq!(simple_suffix_start(b"\x1b]0;abc\x07\r\nxyz"), 8);
        assert_eq!(simple_suffix_start(b"ab\x1b[1mcd"), 0);
        assert_eq!(simple_suffix_start(b"ab\x07cd"), 3);
    }

    /// Pieces of output: what full-screen programs draw with, and what breaks a repaint run.
    #[test]
    fn bare_line_feeds_are_skipped_with_the_column_they_leave() {
        // Lines longer than the screen is wide, LF without CR (the pty's LF → CR LF
        // translation off): the cursor's column moves on from line to line and a wrap is
        // pending whenever a line ends in the last column.
        for (len, prefix) in [
            (57, ""),
            (40, ""),
            (80, "\x1b[5;7Hx"),
            (13, "\x1b[?1049h"),
            (57, "\x1b[4h"),
            (57, "\x1b[20h"),
            (57, "\x1b[?7l"),
        ] {
            let mut lines = String::from(prefix);
            for i in 0..300 {
                let body: String = (0..len)
                    .map(|k| char::from(b'a' + ((i + k) % 26) as u8))
                    .collect();
                let _ = writeln!(lines, "\x1b[3{}m{body}\x1b[m", i % 8);
            }
            lines.push_str("tail");
            let start = skip::RunStart {
                col: 0,
                row: 0,
                cols: 40,
                rows: 10,
                newline: false,
                autowrap: true,
            };
            if prefix.is_empty() {
                // Counted, not given up on: the cut is a bare LF's.
                let (cut, _) = skip::skip_cut(lines.as_bytes(), 20, start).expect("a cut");
                assert_ne!(lines.as_bytes()[cut - 2], b'\r');
            }
            let mut skipping = model(40, 10);
            skipping.feed(&lines);
            let mut full = model(40, 10);
            full.feed_exact(&lines);
            assert_eq!(screen(&skipping), screen(&full), "{len} {prefix:?}");
            assert_eq!(skipping.vt.dump(), full.vt.dump(), "{len} {prefix:?}");
        }
    }

    #[test]
    fn a_cut_leaves_the_cursor_on_the_bottom_row_as_a_full_feed_does() {
        // A full feed reaches the bottom row (row 4) with the fourth LF, prints a line that
        // fills the width (a wrap pending) and scrolls on, keeping the wrap pending. Skipping
        // the first CR LF without moving the cursor would leave the model a row higher: its
        // line would be printed on row 3 and the next LF, which moves down instead of
        // scrolling, would end the wrap.
        let text = format!("\r\n\n\n\n{}{}", "a".repeat(12), "\n".repeat(7));
        let mut skipping = model(12, 5);
        skipping.feed(&text);
        let mut full = model(12, 5);
        full.feed_exact(&text);
        assert_eq!(full.vt.cursor().col, 12, "a wrap is pending");
        assert_eq!(skipping.vt.cursor(), full.vt.cursor());
        assert_eq!(skipping.vt.dump(), full.vt.dump());
    }

    /// A model of `cols` × `rows` fed `text` with skipping, in one feed and in two split at a
    /// sequence boundary (before an ESC, where the host may end a batch) near `split`, ends in
    /// the state of a full feed: the same cursor, dump and modes.
    fn skipping_matches_a_full_feed(
        cols: u16,
        rows: u16,
        text: &str,
        split: usize,
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        let mut at = split % (text.len() + 1);
        while at < text.len() && text.as_bytes()[at] != 0x1b {
            at += 1;
        }
        let mut full = model(cols, rows);
        full.feed_exact(text);
        let mut whole = model(cols, rows);
        whole.feed(text);
        let mut split = model(cols, rows);
        split.feed(&text[..at]);
        split.feed(&text[at..]);
        for skipping in [&whole, &split] {
            proptest::prop_assert_eq!(skipping.vt.cursor(), full.vt.cursor());
            proptest::prop_assert_eq!(skipping.vt.dump(), full.vt.dump());
            proptest::prop_assert_eq!(skipping.modes(), full.modes());
        }
        Ok(())
    }

    /// Simple output (no cursor addressing, no scroll region) with bare line feeds, lines of
    /// every length around the screen's width, and what the column count gives up on.
    fn simple_piece() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            6 => Just("\n".to_string()),
            1 => Just("\r\n".to_string()),
            1 => Just("\r".to_string()),
            4 => "[a-z ]{0,13}",
            2 => (11usize..14).prop_map(|n| "w".repeat(n)),
            1 => prop::sample::select(vec!["\t", "\x08", "é", "日本", "x\u{301}"])
                .prop_map(str::to_string),
            2 => prop::sample::select(vec!["\x1b[K", "\x1b[2K", "\x1b[1K", "\x1b[31m", "\x1b[m"])
                .prop_map(str::to_string),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(600))]

        /// Skipping ahead over bare line feeds gives the state a full feed gives, from any
        /// cursor position and modes, in one feed or two.
        #[test]
        fn skipping_bare_line_feeds_is_exact(
            before in proptest::collection::vec(piece(), 0..12),
            mode in proptest::sample::select(vec!["", "\x1b[20h", "\x1b[?7l", "\x1b[4h", "\x1b[?1049h"]),
            pieces in proptest::collection::vec(simple_piece(), 0..160),
            split in 0usize..10_000,
        ) {
            let text = format!("{}{mode}{}", before.concat(), pieces.concat());
            skipping_matches_a_full_feed(12, 5, &text, split)?;
        }
    }

    /// Simple output for small screens: bare line feeds most of all, lines up to twice a
    /// width, and what the column count gives up on.
    fn small_simple_piece() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            8 => Just("\n".to_string()),
            1 => Just("\r\n".to_string()),
            1 => Just("\r".to_string()),
            4 => "[a-z]{0,3}",
            3 => (1usize..12).prop_map(|n| "w".repeat(n)),
            1 => prop::sample::select(vec![
                "\t", "\x08", "é", "日本", "日", "x\u{301}", "\u{301}", "a\u{200b}", "│",
            ])
            .prop_map(str::to_string),
            1 => prop::sample::select(vec![
                "\x1b[K", "\x1b[2K", "\x1b[1K", "\x1b[31m", "\x1b[m", "\x1b[44m",
            ])
            .prop_map(str::to_string),
        ]
    }

    /// What comes before a simple run: cursor moves, modes set the ways avt reads them (some
    /// the mode tracker does not follow), saved and restored cursors, both screens.
    fn mode_piece() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            3 => (0u16..6, 0u16..7).prop_map(|(r, c)| format!("\x1b[{r};{c}H")),
            3 => "[a-z]{0,7}",
            1 => prop::sample::select(vec!["日本", "日", "é"]).prop_map(str::to_string),
            // Modes avt holds otherwise than the mode tracker says.
            2 => prop::sample::select(vec![
                "\x1b[?7l\x1b7\x1b[?7h\x1b8", "\x1b7\x1b[?7l\x1b8", "\x1b[?7l\x1b[s\x1b[?7h\x1b[u",
                "\x1b[20h\x1b[65556l", "\x1b[65556h", "\x1b[?65543l", "\x1b[?7h\u{9b}?7l",
                "\x1b[20h\u{9b}20l",
            ])
            .prop_map(str::to_string),
            4 => prop::sample::select(vec![
                "\r\n", "\n", "\r", "\x08", "\t", "\x1b[2;3r", "\x1b[r", "\x1b[?6h", "\x1b[?6l",
                "\x1b[4h", "\x1b[4l", "\x1b[?7l", "\x1b[?7h", "\x1b[?1049h", "\x1b[?1049l",
                "\x1b[20h", "\x1b[20l", "\x1b[?25l", "\x1b[44m", "\x1b[m", "\x1b7", "\x1b8",
                "\x1b[s", "\x1b[u", "\x1b[?1048h", "\x1b[?1048l", "\x1b[65543l", "\x1b[?65543l",
                "\x1b[65556h", "\x1b[65556l", "\x1b[!p", "\x1bc", "\u{9b}?7l", "\u{9b}20h",
                "\x1b[2;65539r", "\u{9b}2;3r", "\x1b[2;3\u{200b}r",
                "\x1b[S", "\x1b[L", "\x1b(0", "\x1b(B", "\x1bM", "\x1bD", "\x1bE", "\x1b[5W",
                "\x1b[3g", "\x1bH", "\x1b[2J", "\x1b[?47h", "\x1b[?47l",
            ])
            .prop_map(str::to_string),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(600))]

        /// Skipping ahead is exact on any screen size down to 1×1, whatever modes avt holds
        /// (whether or not the mode tracker knows them), in one feed or two.
        #[test]
        fn skipping_is_exact_on_small_screens_in_any_mode(
            cols in 1u16..6,
            rows in 1u16..5,
            before in proptest::collection::vec(mode_piece(), 0..10),
            pieces in proptest::collection::vec(small_simple_piece(), 0..80),
            split in 0usize..10_000,
        ) {
            let text = format!("{}{}", before.concat(), pieces.concat());
            skipping_matches_a_full_feed(cols, rows, &text, split)?;
        }
    }

    fn piece() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0u16..8, 0u16..3).prop_map(|(r, c)| match c {
                0 => format!("\x1b[{r};1H"),
                1 => format!("\x1b[{r}H"),
                _ => format!("\x1b[{r};{}H", r + 2),
            }),
            4 => "[a-z ]{0,9}",
            2 => "[a-z]{8,14}",
            2 => prop::sample::select(vec!["日本", "é", "│─┼", "x\u{301}", "😀", "\u{200b}"])
                .prop_map(str::to_string),
            2 => prop::sample::select(vec![
                "\x1b[K", "\x1b[0K", "\x1b[2K", "\x1b[1K", "\x1b[31m", "\x1b[0;44m", "\x1b[m",
                "\x1b[1;4m", "\x1b[38;5;200m", "\x1b[7m",
            ])
            .prop_map(str::to_string),
            1 => prop::sample::select(vec![
                "\r\n", "\n", "\r", "\x08", "\t", "\x1b[2;4r", "\x1b[r", "\x1b[?6h", "\x1b[?6l",
                "\x1b[4h", "\x1b[4l", "\x1b[?7l", "\x1b[?7h", "\x1b[?1049h", "\x1b[?1049l",
                "\x1b7", "\x1b8", "\x1b[S", "\x1b[L", "\x1b[2P", "\x1b[3@", "\x1b(0", "\x1b(B",
                "\x1b]0;t\x07", "\x1b[", "\x1b[5;",
            ])
            .prop_map(str::to_string),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]

        /// Whatever the output, skipping ahead gives the state a full feed gives, in one feed
        /// or split into two at a sequence boundary (where the host's batches end).
        #[test]
        fn skipping_ahead_is_exact(
            before in proptest::collection::vec(piece(), 0..40),
            frames in proptest::collection::vec(piece(), 0..200),
            repeat in 1usize..4,
            split in 0usize..10_000,
        ) {
            let mut text = before.concat();
            // Repaints of the whole screen, so runs to skip occur often.
            for f in 0..repeat {
                for k in 0..5 {
                    let r = 1 + (k + f + split) % 5;
                    let fill = "-".repeat((r * f + split) % 12);
                    text.push_str(&format!("\x1b[{r};1H\x1b[3{f}mr{r}f{f}{fill}\x1b[K"));
                }
                text.push_str(&frames.concat());
            }
            skipping_matches_a_full_feed(12, 5, &text, split)?;
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

        /// Where a model says a thaw reproduces it, a thawed copy of its frozen state goes on
        /// exactly as it does, whatever follows (the split falls anywhere, inside sequences
        /// too).
        #[test]
        fn a_model_that_thaws_exactly_goes_on_as_its_thawed_copy(
            pieces in proptest::collection::vec(piece(), 1..60),
            split in 0usize..10_000,
        ) {
            let text = pieces.concat();
            let mut at = split % (text.len() + 1);
            while !text.is_char_boundary(at) {
                at += 1;
            }
            let mut live = model(12, 5);
            live.feed_exact(&text[..at]);
            if live.thaws_exactly() {
                let mut thawed = roundtrip(&live);
                live.feed_exact(&text[at..]);
                thawed.feed_exact(&text[at..]);
                let (a, b) = (live.freeze(), thawed.freeze());
                proptest::prop_assert_eq!(&a.raw, &b.raw);
                proptest::prop_assert_eq!(&a.modes, &b.modes);
                proptest::prop_assert_eq!(a.client(), b.client());
            }
        }
    }

    #[test]
    fn a_model_inside_a_sequence_does_not_thaw_exactly() {
        let mut m = model(12, 5);
        assert!(m.thaws_exactly());
        for (text, exact) in [
            ("a\x1b[?20", false),
            // Known only at the next ESC (the model does not follow a sequence's bytes).
            ("04h", false),
            ("x\x1b[m", true),
            ("\x1b]0;title", false),
            ("\x1b\\b", true),
            ("\x1b", false),
            ("\x1b(B", true),
            ("plain text", true),
        ] {
            m.feed_exact(text);
            assert_eq!(m.thaws_exactly(), exact, "after {text:?}");
        }
    }

    /// Feeds `text` with skipping and without, and compares avt's dumps.
    fn assert_skip_exact(cols: u16, rows: u16, text: &str) {
        let mut skipping = model(cols, rows);
        skipping.feed(text);
        let mut full = model(cols, rows);
        full.feed_exact(text);
        assert_eq!(skipping.vt.dump(), full.vt.dump(), "{text:?}");
    }

    fn plain_lines(n: usize) -> String {
        (0..n).map(|i| format!("line{i}\r\n")).collect::<String>() + "end"
    }

    #[test]
    fn skip_is_exact_a_skipped_reset_clears_the_pen_set_before_it() {
        // The pen is set before the stretch (the CSI after it ends the simple run), the only
        // reset is in the skipped stretch, and nothing after it sets the pen: what is drawn
        // after the cut shows whether the skip applied that reset.
        let pen = "\x1b[1;4;7;44m\x1b[?1h";
        assert_skip_exact(
            20,
            3,
            &format!("{pen}\x1b[0;32mgreen\r\n{}", plain_lines(10)),
        );
        let frame = |n: usize, sgr: &str| {
            (1..=3)
                .map(|r| format!("\x1b[{r};1H{sgr}frame {n}\x1b[K"))
                .collect::<String>()
        };
        let repaints = format!("{pen}{}{}", frame(1, "\x1b[m"), frame(2, ""));
        assert_skip_exact(20, 3, &format!("{repaints}\x1b[1;1H"));
    }

    #[test]
    fn skip_is_exact_c1_csi_sgr_in_scrolled_away_lines() {
        // U+009B is CSI to avt; the simple run takes its bytes for text and net_pen misses it.
        assert_skip_exact(20, 3, &format!("\u{9b}1m{}", plain_lines(10)));
    }

    #[test]
    fn skip_is_exact_c1_csi_cursor_up_in_scrolled_away_lines() {
        // A C1 CUU inside the "simple" run moves the cursor up, so later lines land elsewhere.
        // Six line feeds follow the cut, but each comes after a C1 CUU to the top row, so the
        // skipped lines stay on the screen in a full feed.
        let text = format!("pre0\r\npre1\r\npre2\r\n{}", "\u{9b}9A\r\n".repeat(6));
        assert_skip_exact(20, 3, &text);
    }

    #[test]
    fn skip_is_exact_c1_decstbm_unseen_by_the_tracker() {
        // avt sets a scroll region from a C1 CSI; the mode tracker (vte) does not see it, so the
        // scroll-away skip drops a line above the region that a full feed keeps.
        assert_skip_exact(20, 5, &format!("\u{9b}2;4r\x1b[1;1H{}", plain_lines(12)));
    }

    #[test]
    fn skip_is_exact_esc_esc_csi_before_scrolled_away_lines() {
        // token_end takes `ESC ESC [` for one whole sequence; avt is in a CSI after it, so the
        // "simple" run starts inside a CSI (`31m` is its end, an SGR).
        assert_skip_exact(20, 3, &format!("\x1b\x1b[31m{}", plain_lines(10)));
    }

    #[test]
    fn skip_is_exact_cup_param_wrapping_in_avt() {
        // CUP 65537 is row 1 to avt (u16 wrap), the last row to the repaint scan.
        let f1 = "\x1b[1;1Hold1\x1b[K\x1b[2;1Hold2\x1b[K\x1b[3;1Hold3\x1b[K";
        let f2 = "\x1b[1;1Hnew1\x1b[K\x1b[2;1Hnew2\x1b[K\x1b[65537;1Hnew3\x1b[K";
        // (A final CUP keeps the last row's painting out of the scroll-away suffix.)
        assert_skip_exact(12, 3, &format!("{f1}{f2}\x1b[1;1H"));
    }

    #[test]
    fn skip_is_exact_combining_mark_after_a_csi_final() {
        // feed_exact composes "A\u{301}" into "Á", which ends the CSI as an unknown final; the
        // skipping feed cuts the text between them (the simple suffix starts at U+0301), so
        // avt runs CUU 3.
        assert_skip_exact(10, 5, "\x1b[5;1H\x1b[3A\u{301}");
    }

    #[test]
    fn skip_is_exact_unterminated_csi_then_sgr_before_scrolled_away_lines() {
        // token_end reads past the ESC that ends `ESC [ 5 ;` up to the next `[`, so the simple
        // run starts inside the SGR `ESC [ 0 ; 44 m` and its pen is lost.
        assert_skip_exact(20, 3, &format!("\x1b[5;\x1b[0;44m{}", plain_lines(10)));
    }

    #[test]
    fn skip_is_exact_c0_inside_a_csi_before_scrolled_away_lines() {
        // VT (executed inside a CSI) is the last non-simple byte: the simple run starts inside
        // the CSI, whose final is then a letter of the first line after the cut.
        assert_skip_exact(20, 3, &format!("\x1b[\x0b31m{}", plain_lines(10)));
    }

    #[test]
    fn skip_is_exact_c0_inside_an_unterminated_osc_before_plain_lines() {
        // The simple run starts inside the OSC (after the NUL): the skipped lines are missing
        // from the OSC avt holds (its dump carries the parser state).
        assert_skip_exact(20, 3, &format!("\x1b]2;\x00{}", plain_lines(10)));
    }

    /// Lines of bare line feeds whose cursor column depends on autowrap, then empty ones (which
    /// keep the column) and a character printed where the cursor is left.
    fn bare_lines_after(prefix: &str) -> String {
        format!(
            "{prefix}{}{}tail",
            "abcdefghijklmno\n".repeat(30),
            "\n".repeat(10)
        )
    }

    #[test]
    fn skip_is_exact_autowrap_restored_by_a_cursor_restore() {
        // DECRC, SCORC and ?1049l restore the autowrap DECSC saved; the mode tracker does not
        // follow them, so it says autowrap is on where avt has it off.
        for prefix in [
            "\x1b[?7l\x1b7\x1b[?7h\x1b8",
            "\x1b[?7l\x1b[s\x1b[?7h\x1b[u",
            "\x1b[?7l\x1b[?1049h\x1b[?7h\x1b[?1049l",
        ] {
            assert_skip_exact(12, 5, &bare_lines_after(prefix));
        }
    }

    #[test]
    fn skip_is_exact_modes_the_tracker_reads_otherwise() {
        // avt keeps a parameter in 16 bits (65556 is 20 to it) where vte saturates it, and
        // reads up to 32 parameters where the tracker reads 16.
        assert_skip_exact(12, 5, &bare_lines_after("\x1b[20h\x1b[65556l"));
        assert_skip_exact(
            12,
            5,
            &bare_lines_after(&format!("\x1b[?{}7l", "1;".repeat(16))),
        );
    }

    #[test]
    fn skip_is_exact_after_a_c1_control_in_an_earlier_feed() {
        // A feed with a C1 control is fed in full, but the tracker (vte) never saw the C1 CSI
        // that turned autowrap off; the next feed skips with the tracker's modes.
        let lines = bare_lines_after("");
        let mut skipping = model(12, 5);
        skipping.feed("\u{9b}?7l");
        skipping.feed(&lines);
        let mut full = model(12, 5);
        full.feed_exact("\u{9b}?7l");
        full.feed_exact(&lines);
        assert_eq!(skipping.vt.cursor(), full.vt.cursor());
        assert_eq!(skipping.vt.dump(), full.vt.dump());
    }

    #[test]
    fn skip_is_exact_combining_mark_after_a_skipped_sgr() {
        // feed_exact composes `m` and U+0301 into `ḿ`, so avt never applies the SGR; the
        // skipped stretch's net pen has it.
        assert_skip_exact(12, 5, &format!("\x1b[31m\u{301}{}", plain_lines(30)));
        assert_skip_exact(1, 1, "\x1b[31m\u{301}\r\n\n\n");
    }

    #[test]
    fn skip_is_exact_scroll_regions_the_tracker_misses() {
        // avt keeps a parameter in 16 bits (65541 is 5 to it) where vte saturates it, so the
        // tracker ignores a region avt sets; a line above the region stays on the screen.
        assert_skip_exact(20, 5, &format!("\x1b[2;65541rtop{}", plain_lines(30)));
        // A C1 CSI sets a region in an earlier feed (fed in full), which vte never sees.
        let lines = format!("top{}", plain_lines(30));
        let mut skipping = model(20, 5);
        skipping.feed("\u{9b}2;5r");
        skipping.feed(&lines);
        let mut full = model(20, 5);
        full.feed_exact("\u{9b}2;5r");
        full.feed_exact(&lines);
        assert_eq!(skipping.vt.dump(), full.vt.dump());
    }

    #[test]
    fn avt_dumps_a_scroll_region_only_when_it_is_not_the_whole_screen() {
        // The shape avt 0.19.0 dumps in (the skip-ahead reads it).
        let mut m = model(20, 5);
        m.feed_exact("\x1b[1;5r\x1b[?1049h\x1b[1;1Hx\x1b7\x1b[2;2H\x1b]0;a\x07\x1b[3g");
        assert!(!skip::dump_sets_margins(&m.vt.dump()));
        m.feed_exact("\x1b[2;4r");
        assert!(m.vt.dump().contains("\x1b[2;4r"));
        assert!(skip::dump_sets_margins(&m.vt.dump()));
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
