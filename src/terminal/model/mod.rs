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
    /// Its two texts (the dump and the client's text), which a live upgrade's hand-over
    /// carries as raw bytes rather than in its JSON.
    pub fn texts_mut(&mut self) -> [&mut String; 2] {
        [&mut self.raw, &mut self.client]
    }

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
/// become TBC and HTS (`CSI 3 g`, `ESC H`); truecolour (`38:2:R:G:B`, which xterm reads as
/// `38:2:<colour space>:R:G:B`) becomes `38;2;R;G;B`. avt's dump holds no text with an ESC in
/// it, so these rewrites touch only its own sequences (a test pins the shape).
fn client_dump(raw: &str) -> String {
    let mut d = match (raw.find("\x1b[?1047h"), raw.find("\x1b[?1047l")) {
        (Some(a), Some(b)) if a < b => {
            let mut d = raw.to_string();
            d.replace_range(a..b + "\x1b[?1047l".len(), "");
            d
        }
        (Some(a), _) => enter_alternate_as_xterm(raw, a),
        _ => raw.to_string(),
    };
    if d.contains('W') {
        d = d.replace("\x1b[5W", "\x1b[3g").replace("\x1b[0W", "\x1bH");
    }
    if d.contains(":2:") {
        d = truecolour_with_semicolons(&d);
    }
    d
}

/// Rewrites avt's switch to an active alternate screen (at byte `at`: the primary saved
/// cursor's DECSC, the primary cursor's position, SGR 0, `?1047h`) into `?1049h` issued where
/// the DECSC stood. xterm's `?1049h` saves the cursor itself, so it must run with the saved
/// position and pen in place; a program's `?1049l` then restores them as on the live screen.
fn enter_alternate_as_xterm(raw: &str, at: usize) -> String {
    let switch = at + "\x1b[?1047h".len();
    let mut d = String::with_capacity(raw.len() + 16);
    match raw[..at].rfind("\x1b7") {
        Some(sc) => {
            d.push_str(&raw[..sc]);
            d.push_str("\x1b[?1049h");
            // DECSC ran with autowrap off or origin mode on: put them back as avt did.
            let mut rest = &raw[sc + 2..at];
            for undo in ["\x1b[?7h", "\x1b[?6l"] {
                if let Some(r) = rest.strip_prefix(undo) {
                    d.push_str(undo);
                    rest = r;
                }
            }
        }
        // No saved cursor: xterm's must be the default one (home, default pen).
        None => {
            d.push_str(&raw[..at]);
            d.push_str("\x1b[H\x1b[0m\x1b[?1049h");
        }
    }
    d.push_str("\x1b[0m");
    d.push_str(&raw[switch..]);
    d
}

/// `38:2:R:G:B` and `48:2:R:G:B` inside SGR sequences become `38;2;R;G;B` and `48;2;R;G;B`.
fn truecolour_with_semicolons(d: &str) -> String {
    let mut out = String::with_capacity(d.len() + 16);
    let mut rest = d;
    while let Some(i) = rest.find("\x1b[") {
        out.push_str(&rest[..i + 2]);
        rest = &rest[i + 2..];
        let end = rest
            .find(|c: char| ('\x40'..='\x7e').contains(&c))
            .unwrap_or(rest.len());
        let params = &rest[..end];
        if rest[end..].starts_with('m') && params.contains(':') {
            let groups: Vec<String> = params
                .split(';')
                .map(|g| {
                    let parts: Vec<&str> = g.split(':').collect();
                    if parts.len() == 5 && (parts[0] == "38" || parts[0] == "48") && parts[1] == "2"
                    {
                        parts.join(";")
                    } else {
                        g.to_string()
                    }
                })
                .collect();
            out.push_str(&groups.join(";"));
        } else {
            out.push_str(params);
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// What the snapshot's synthesized prefix starts with: sequences that put a client emulator
/// of `cols` columns into its default state, whatever it showed before — primary screen, full
/// scroll region, no origin mode, autowrap on, insert and newline modes off, ASCII charsets,
/// normal cursor keys and keypad, cursor shown, mouse reporting, focus events and bracketed
/// paste off, default pen, a tab stop every 8 columns from the first, the cursor home on a
/// cleared screen.
pub fn preamble(cols: u16) -> String {
    let mut s = String::from(
        "\x1b[?1049l\x1b[r\x1b[?6l\x1b[?7h\x1b[4l\x1b[20l\x1b(B\x1b)B\x0f\x1b[?1l\x1b>\x1b[?25h\
         \x1b[?9l\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1005l\x1b[?1006l\x1b[?1015l\
         \x1b[?1004l\x1b[?2004l\x1b[0m\x1b[3g",
    );
    // xterm's power-on stops include the first column.
    let mut col = 1;
    while col <= cols {
        let _ = write!(s, "\x1b[{col}G\x1bH");
        col += 8;
    }
    s.push_str("\x1b[H\x1b[2J");
    s
}

#[cfg(test)]
mod tests;
