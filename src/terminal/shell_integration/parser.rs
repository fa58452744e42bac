//! Streaming pty-output parser.
//!
//! Job: take raw pty bytes (cut at arbitrary read boundaries), remove every shell-integration
//! escape sequence (OSC 633, OSC 133, and OSC 1337 `CurrentDir`/`ShellIntegrationVersion`/
//! `RemoteHost`), turn them into [`Mark`]s, and pass every other byte through unchanged as valid
//! UTF-8 text, in stream order. Titles (OSC 0/2) and OSC 7 cwd reports pass through *and* are
//! reported as marks.
//!
//! How: text between sequences is decoded by our own streaming UTF-8 decoder (maximal-subpart
//! U+FFFD replacement, the same as `String::from_utf8_lossy`). From an ESC onwards the bytes go
//! to a `vte` 0.15 state machine one piece at a time while we keep the raw bytes of the sequence
//! in progress; when vte reports the end of the sequence we either drop the raw bytes (shell
//! integration) or release them verbatim. vte never sees plain text, so its known loss of the
//! character after a code point split across `advance` calls cannot happen here.
//! Three sequence ends are silent in vte (a CSI that vte ignores, and an ESC that ends
//! DCS-ignore or SOS/PM/APC); those are recognised from the byte itself.
//!
//! Terminal queries (cursor position, device attributes, mode and colour reports, …; see
//! [`crate::terminal::model::query`]) are removed too and reported as [`OutputEvent::Query`],
//! so that the host answers them and no client ever sees one. A live [`ModeTracker`] follows
//! the modes set by the sequences going through, for DECRQM reports.

use crate::terminal::model::{query, ModeTracker, Query};
use crate::terminal::utf8::Utf8Decoder;
use std::mem;

/// Largest number of raw bytes held for one escape sequence (OSC, DCS, SOS/PM/APC, CSI or ESC)
/// while waiting for its terminator: 1 MiB.
///
/// Give-up rule when a sequence grows past this many bytes without a terminator:
/// * a shell-integration OSC (633, 133, or 1337 with an integration key) is discarded: the held
///   bytes and everything up to its terminator are dropped and no mark is reported, so an
///   integration sequence never reaches a client even in part;
/// * any other sequence is released verbatim as text, and the rest of it (up to its
///   terminator) streams through as text as it arrives, without being held.
///
/// Either way memory stays bounded by this constant and later output keeps flowing.
pub const MAX_OSC_BYTES: usize = 1 << 20;

/// Longest title reported by [`Mark::Title`], in chars (Unicode scalar values), after control
/// characters have been removed. Longer titles are cut to this length.
pub const MAX_TITLE_CHARS: usize = 4096;

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;
const CAN: u8 = 0x18;
const SUB: u8 = 0x1a;
const C1_ST: u8 = 0x9c;

/// Keep at most this much buffer capacity around after a large sequence.
const SHRINK_ABOVE: usize = 64 * 1024;

/// A shell-integration event (or a title/cwd report) found in the output stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mark {
    /// OSC 633 `A` / OSC 133 `A`: the prompt starts.
    PromptStart,
    /// OSC 633 `B` / OSC 133 `B`: the prompt ended, user input starts.
    CommandStart,
    /// OSC 633 `C` / OSC 133 `C`: the command's output starts.
    CommandExecuted,
    /// OSC 633 `D[;<exit>]` / OSC 133 `D[;<exit>[;…]]`: the command finished.
    /// `exit_code` is the first field after `D` when it is an integer within the 32-bit signed
    /// range (`-1` is kept as `Some(-1)`); absent, empty, non-numeric or out of range → `None`.
    CommandFinished { exit_code: Option<i64> },
    /// OSC 633 `E;<cmdline>[;<nonce>]`: the command line about to run, unescaped (`\\` → `\`,
    /// `\xHH` → byte, one pass, then UTF-8 with U+FFFD for invalid bytes). `nonce_ok` is true
    /// only when the trailing field equalled this terminal's nonce (that field is removed).
    CommandLine {
        command_line: String,
        nonce_ok: bool,
    },
    /// OSC 633 `P;<key>=<value>` for keys other than `Cwd` (split at the first `=`, value
    /// unescaped like `E`).
    Property { key: String, value: String },
    /// Working directory as an absolute path (not a URI), from OSC 633 `P;Cwd=`, OSC 7
    /// `file://host/path` (percent-decoded) or OSC 1337 `CurrentDir=`.
    Cwd(String),
    /// OSC 0 or OSC 2 window title, control characters removed, at most [`MAX_TITLE_CHARS`] chars.
    Title(String),
}

/// One piece of parser output, in stream order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputEvent {
    /// Output for clients: valid UTF-8, never holding a shell-integration sequence, never ending
    /// inside a character.
    Text(String),
    /// A mark found at this point of the stream.
    Mark(Mark),
    /// A terminal query found (and removed) at this point of the stream.
    Query(Query),
}

/// Kind of the escape sequence in progress, decided by the byte after ESC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `ESC` [intermediates] final.
    Esc,
    /// `ESC [` …
    Csi,
    /// `ESC ]` … (BEL | ST)
    Osc,
    /// `ESC P` … ST
    Dcs,
    /// SOS / PM / APC: `ESC X`, `ESC ^`, `ESC _` … ST
    Str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Plain text; vte is in its ground state.
    Ground,
    /// Inside a sequence; `buf` holds its raw bytes.
    Seq { kind: Kind, esc_intermediate: bool },
    /// A string sequence ended on ESC (held in `buf`, without that ESC); the next byte tells
    /// whether the ESC was the first half of ST (`ESC \`). vte has seen the ESC.
    AwaitSt { kind: Kind },
    /// An oversize non-integration sequence: bytes stream through as text up to its end.
    Stream { kind: Kind },
    /// An oversize integration OSC: bytes are dropped up to its end.
    Skip { after_esc: bool },
}

/// Most CSI parameters recorded for query recognition and mode tracking.
const MAX_PARAMS: usize = 16;

/// Records which vte callbacks fired for the bytes just fed (and what the last CSI or ESC
/// sequence was).
#[derive(Default)]
struct Recorder {
    csi: bool,
    esc: bool,
    osc: bool,
    unhook: bool,
    cancel: bool,
    /// The dispatched CSI's first sub-parameters (`n` of them), intermediates (`ni`) and
    /// final byte; or the dispatched ESC's intermediates and final byte.
    params: [u16; MAX_PARAMS],
    n: usize,
    inter: [u8; 2],
    ni: usize,
    action: u8,
}

impl Recorder {
    fn reset(&mut self) {
        self.csi = false;
        self.esc = false;
        self.osc = false;
        self.unhook = false;
        self.cancel = false;
    }

    fn intermediates(&self) -> &[u8] {
        &self.inter[..self.ni]
    }

    fn record_intermediates(&mut self, intermediates: &[u8]) {
        self.ni = intermediates.len().min(self.inter.len());
        self.inter[..self.ni].copy_from_slice(&intermediates[..self.ni]);
    }
}

impl vte::Perform for Recorder {
    fn execute(&mut self, byte: u8) {
        if byte == CAN || byte == SUB {
            self.cancel = true;
        }
    }
    fn unhook(&mut self) {
        self.unhook = true;
    }
    fn osc_dispatch(&mut self, _params: &[&[u8]], _bell_terminated: bool) {
        self.osc = true;
    }
    fn csi_dispatch(&mut self, params: &vte::Params, intermediates: &[u8], ignore: bool, c: char) {
        self.csi = true;
        // An ignored (overlong) or non-ASCII sequence is neither a query nor a mode change.
        self.action = if ignore || !c.is_ascii() { 0 } else { c as u8 };
        self.n = 0;
        for p in params.iter().take(MAX_PARAMS) {
            self.params[self.n] = p.first().copied().unwrap_or(0);
            self.n += 1;
        }
        self.record_intermediates(intermediates);
    }
    fn esc_dispatch(&mut self, intermediates: &[u8], ignore: bool, byte: u8) {
        self.esc = true;
        self.action = if ignore { 0 } else { byte };
        self.n = 0;
        self.record_intermediates(intermediates);
    }
}

/// Streaming parser for one terminal's pty output. See the module docs.
pub struct OutputParser {
    nonce: String,
    /// Marks are trusted only when signed with the nonce (see [`OutputParser::signed`]).
    require_nonce: bool,
    vte: vte::Parser,
    rec: Recorder,
    mode: Mode,
    /// Raw bytes of the sequence in progress (at most [`MAX_OSC_BYTES`]).
    buf: Vec<u8>,
    decoder: Utf8Decoder,
    /// Text decoded during the current `feed`, not yet pushed as an event.
    text: String,
    /// The modes set by the output so far (for DECRQM reports).
    modes: ModeTracker,
}

impl OutputParser {
    /// Creates a parser for a terminal whose shell-integration nonce is `nonce` (an OSC 633 `E`
    /// mark is trusted only when it ends with this nonce; an empty nonce trusts nothing).
    pub fn new(nonce: String) -> Self {
        OutputParser {
            nonce,
            require_nonce: false,
            vte: vte::Parser::new(),
            rec: Recorder::default(),
            mode: Mode::Ground,
            buf: Vec::new(),
            decoder: Utf8Decoder::new(),
            text: String::new(),
            modes: ModeTracker::new(false),
        }
    }

    /// Creates a parser for a terminal running ahpty's injected integration scripts, which sign
    /// every mark with the terminal's nonce as a trailing field (`633;A;<nonce>`,
    /// `633;D;<exit>;<nonce>`, `633;P;Cwd=<dir>;<nonce>`, `633;E;<cmdline>;<nonce>`). Only
    /// signed OSC 633 marks are reported; unsigned 633 marks, OSC 133 and OSC 1337
    /// `CurrentDir` — which any program can print, e.g. `cat` of a recorded session — are
    /// still stripped but ignored, so they cannot end a command early or forge its exit code.
    /// Titles and OSC 7 are reported as with [`OutputParser::new`].
    pub fn signed(nonce: String) -> Self {
        OutputParser {
            require_nonce: !nonce.is_empty(),
            ..OutputParser::new(nonce)
        }
    }

    /// Parses the next chunk of pty output and appends events to `out` in stream order.
    /// Consecutive text is merged into one [`OutputEvent::Text`] per call where possible.
    /// Incomplete UTF-8 tails and unfinished sequences are held (bounded by
    /// [`MAX_OSC_BYTES`]) until later calls or [`finish`](Self::finish).
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<OutputEvent>) {
        let mut i = 0;
        while i < bytes.len() {
            i += self.step(&bytes[i..], out);
        }
        self.flush_text(out);
    }

    /// Ends the stream (EOF): releases anything held. An unfinished non-integration sequence is
    /// released verbatim, an unfinished integration OSC is dropped, and a dangling partial UTF-8
    /// sequence becomes one U+FFFD.
    pub fn finish(&mut self, out: &mut Vec<OutputEvent>) {
        match self.mode {
            Mode::Ground | Mode::Stream { .. } => {}
            Mode::Seq { kind, .. } => {
                let buf = mem::take(&mut self.buf);
                if !(kind == Kind::Osc && is_integration_osc(osc_payload(&buf))) {
                    self.decoder.decode_into(&buf, &mut self.text);
                }
            }
            Mode::AwaitSt { kind } => {
                let buf = mem::take(&mut self.buf);
                self.finalize(kind, buf, None, out);
                self.decoder.decode_into(&[ESC], &mut self.text);
            }
            Mode::Skip { after_esc } => {
                if after_esc {
                    self.decoder.decode_into(&[ESC], &mut self.text);
                }
            }
        }
        self.buf = Vec::new();
        self.mode = Mode::Ground;
        self.vte = vte::Parser::new();
        self.decoder.finish_into(&mut self.text);
        self.flush_text(out);
    }

    fn flush_text(&mut self, out: &mut Vec<OutputEvent>) {
        if !self.text.is_empty() {
            out.push(OutputEvent::Text(mem::take(&mut self.text)));
        }
    }

    fn emit_mark(&mut self, mark: Mark, out: &mut Vec<OutputEvent>) {
        self.flush_text(out);
        out.push(OutputEvent::Mark(mark));
    }

    /// Starts a new sequence at an ESC (already consumed by the caller).
    fn begin_escape(&mut self) {
        // An ESC ends any partial character written before it.
        self.decoder.finish_into(&mut self.text);
        self.buf.clear();
        self.buf.push(ESC);
        self.rec.reset();
        self.vte.advance(&mut self.rec, &[ESC]);
        self.mode = Mode::Seq {
            kind: Kind::Esc,
            esc_intermediate: false,
        };
    }

    fn emit_query(&mut self, query: Query, out: &mut Vec<OutputEvent>) {
        self.flush_text(out);
        out.push(OutputEvent::Query(query));
    }

    /// Forgets the held sequence bytes (a query: never passed on).
    fn drop_held(&mut self) {
        let buf = mem::take(&mut self.buf);
        self.recycle(buf);
    }

    /// A CSI sequence (held in `buf`) was dispatched: a query is removed and reported, any
    /// other sequence passes (and may change a tracked mode).
    fn csi_done(&mut self, out: &mut Vec<OutputEvent>) {
        let params = &self.rec.params[..self.rec.n];
        let intermediates = self.rec.intermediates();
        let action = self.rec.action;
        if action == 0 {
            self.release_held();
            return;
        }
        match query::csi(params, intermediates, action) {
            Some(mut q) => {
                if let Query::Mode {
                    private,
                    mode,
                    report,
                } = &mut q
                {
                    let modes = &self.modes.modes;
                    *report = if *private {
                        modes.dec_report(*mode)
                    } else {
                        modes.ansi_report(*mode)
                    };
                }
                self.drop_held();
                self.emit_query(q, out);
            }
            None => {
                self.modes.csi(params, intermediates, action, 0);
                self.release_held();
            }
        }
    }

    /// Releases the held sequence bytes verbatim as text.
    fn release_held(&mut self) {
        let buf = mem::take(&mut self.buf);
        self.decoder.decode_into(&buf, &mut self.text);
        self.recycle(buf);
    }

    fn recycle(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() > SHRINK_ABOVE {
            self.buf = Vec::new();
        } else {
            buf.clear();
            self.buf = buf;
        }
    }

    /// Consumes a prefix of `bytes` (at least one byte) and returns its length.
    fn step(&mut self, bytes: &[u8], out: &mut Vec<OutputEvent>) -> usize {
        match self.mode {
            Mode::Ground => {
                // The text fast path: everything up to the next ESC is plain text.
                let n = memchr::memchr(ESC, bytes).unwrap_or(bytes.len());
                self.decoder.decode_into(&bytes[..n], &mut self.text);
                if n < bytes.len() {
                    self.begin_escape();
                    n + 1
                } else {
                    n
                }
            }
            Mode::Seq {
                kind,
                esc_intermediate,
            } => self.step_seq(kind, esc_intermediate, bytes, out),
            Mode::AwaitSt { kind } => {
                let b = bytes[0];
                self.rec.reset();
                self.vte.advance(&mut self.rec, &[b]);
                let buf = mem::take(&mut self.buf);
                if b == b'\\' && self.rec.esc {
                    self.finalize(kind, buf, Some(&[ESC, b'\\']), out);
                    self.mode = Mode::Ground;
                    if kind == Kind::Osc && self.buf.capacity() == 0 {
                        // A large OSC may have left vte with a large buffer.
                        self.vte = vte::Parser::new();
                    }
                } else {
                    self.finalize(kind, buf, None, out);
                    // The ESC starts a new sequence; vte already saw ESC and `b`.
                    self.decoder.finish_into(&mut self.text);
                    self.buf.clear();
                    self.buf.push(ESC);
                    self.mode = Mode::Seq {
                        kind: Kind::Esc,
                        esc_intermediate: false,
                    };
                    self.after_esc_byte(b, false, out);
                }
                1
            }
            Mode::Stream { kind } => {
                let n = bytes
                    .iter()
                    .position(|&b| stream_ends_at(kind, b))
                    .unwrap_or(bytes.len());
                self.decoder.decode_into(&bytes[..n], &mut self.text);
                if n == bytes.len() {
                    return n;
                }
                let b = bytes[n];
                if b == ESC {
                    self.begin_escape();
                } else {
                    self.decoder.decode_into(&[b], &mut self.text);
                    self.mode = Mode::Ground;
                }
                n + 1
            }
            Mode::Skip { after_esc: true } => {
                let b = bytes[0];
                self.mode = Mode::Ground;
                if b == b'\\' {
                    return 1;
                }
                self.begin_escape();
                // Process `b` as the byte after this ESC.
                0
            }
            Mode::Skip { after_esc: false } => {
                let n = bytes
                    .iter()
                    .position(|&b| matches!(b, BEL | CAN | SUB | ESC))
                    .unwrap_or(bytes.len());
                if n == bytes.len() {
                    return n;
                }
                match bytes[n] {
                    ESC => self.mode = Mode::Skip { after_esc: true },
                    BEL => self.mode = Mode::Ground,
                    b => {
                        // CAN/SUB cancel the sequence; the control itself is passed on.
                        self.decoder.decode_into(&[b], &mut self.text);
                        self.mode = Mode::Ground;
                    }
                }
                n + 1
            }
        }
    }

    fn step_seq(
        &mut self,
        kind: Kind,
        esc_intermediate: bool,
        bytes: &[u8],
        out: &mut Vec<OutputEvent>,
    ) -> usize {
        // Inside string sequences, feed runs of bytes that cannot end the sequence at once.
        if matches!(kind, Kind::Osc | Kind::Dcs | Kind::Str) {
            let room = (MAX_OSC_BYTES + 1).saturating_sub(self.buf.len()).max(1);
            let limit = bytes.len().min(room);
            let n = bytes[..limit]
                .iter()
                .position(|&b| matches!(b, BEL | CAN | SUB | ESC | C1_ST))
                .unwrap_or(limit);
            if n > 0 {
                self.rec.reset();
                self.vte.advance(&mut self.rec, &bytes[..n]);
                self.buf.extend_from_slice(&bytes[..n]);
                self.check_overflow(kind);
                return n;
            }
        }
        let b = bytes[0];
        self.rec.reset();
        self.vte.advance(&mut self.rec, &[b]);
        match kind {
            Kind::Esc => self.after_esc_byte(b, esc_intermediate, out),
            Kind::Csi => {
                if b == ESC {
                    self.release_held();
                    self.start_seq_after_esc();
                } else {
                    self.buf.push(b);
                    if self.rec.csi && !self.rec.cancel {
                        self.csi_done(out);
                        self.mode = Mode::Ground;
                    } else if self.rec.csi || self.rec.cancel || (0x40..=0x7e).contains(&b) {
                        self.release_held();
                        self.mode = Mode::Ground;
                    } else {
                        self.check_overflow(kind);
                    }
                }
            }
            Kind::Osc => {
                if self.rec.osc {
                    match b {
                        ESC => self.mode = Mode::AwaitSt { kind },
                        BEL => {
                            let buf = mem::take(&mut self.buf);
                            self.finalize(kind, buf, Some(&[BEL]), out);
                            self.mode = Mode::Ground;
                        }
                        _ => {
                            // CAN/SUB: the OSC is cancelled.
                            let buf = mem::take(&mut self.buf);
                            if is_integration_osc(osc_payload(&buf)) {
                                self.recycle(buf);
                            } else {
                                self.decoder.decode_into(&buf, &mut self.text);
                                self.recycle(buf);
                            }
                            self.decoder.decode_into(&[b], &mut self.text);
                            self.mode = Mode::Ground;
                        }
                    }
                } else {
                    self.buf.push(b);
                    self.check_overflow(kind);
                }
            }
            Kind::Dcs | Kind::Str => {
                if b == ESC {
                    self.mode = Mode::AwaitSt { kind };
                } else {
                    self.buf.push(b);
                    if self.rec.cancel || self.rec.unhook {
                        self.release_held();
                        self.mode = Mode::Ground;
                    } else {
                        self.check_overflow(kind);
                    }
                }
            }
        }
        1
    }

    /// ESC was seen and fed to vte in a context that starts a new sequence.
    fn start_seq_after_esc(&mut self) {
        self.decoder.finish_into(&mut self.text);
        self.buf.clear();
        self.buf.push(ESC);
        self.mode = Mode::Seq {
            kind: Kind::Esc,
            esc_intermediate: false,
        };
    }

    /// Handles byte `b` (already fed to vte) of an ESC-kind sequence.
    fn after_esc_byte(&mut self, b: u8, esc_intermediate: bool, out: &mut Vec<OutputEvent>) {
        if b == ESC {
            // vte restarts the escape; release what we had and start over.
            self.release_held();
            self.start_seq_after_esc();
            return;
        }
        self.buf.push(b);
        if self.rec.esc && !self.rec.cancel {
            let intermediates = self.rec.intermediates();
            if intermediates.is_empty() && self.rec.action == b'Z' {
                // DECID: the old form of DA1.
                self.drop_held();
                self.emit_query(Query::PrimaryAttributes, out);
            } else {
                self.modes.esc(intermediates, self.rec.action);
                self.release_held();
            }
            self.mode = Mode::Ground;
            return;
        }
        if self.rec.esc || self.rec.cancel {
            self.release_held();
            self.mode = Mode::Ground;
            return;
        }
        let next = if esc_intermediate {
            None
        } else {
            match b {
                b'[' => Some(Kind::Csi),
                b']' => Some(Kind::Osc),
                b'P' => Some(Kind::Dcs),
                b'X' | b'^' | b'_' => Some(Kind::Str),
                _ => None,
            }
        };
        if let Some(kind) = next {
            self.mode = Mode::Seq {
                kind,
                esc_intermediate: false,
            };
        } else {
            self.mode = Mode::Seq {
                kind: Kind::Esc,
                esc_intermediate: esc_intermediate || (0x20..=0x2f).contains(&b),
            };
            self.check_overflow(Kind::Esc);
        }
    }

    /// Applies the give-up rule of [`MAX_OSC_BYTES`] when the held sequence is too long.
    fn check_overflow(&mut self, kind: Kind) {
        if self.buf.len() <= MAX_OSC_BYTES {
            return;
        }
        self.vte = vte::Parser::new();
        if kind == Kind::Osc && is_integration_osc(osc_payload(&self.buf)) {
            self.buf = Vec::new();
            self.mode = Mode::Skip { after_esc: false };
        } else {
            let buf = mem::take(&mut self.buf);
            self.decoder.decode_into(&buf, &mut self.text);
            self.mode = match kind {
                Kind::Esc => Mode::Ground,
                _ => Mode::Stream { kind },
            };
        }
    }

    /// Completes a string sequence held in `buf` (without terminator); `terminator` holds the
    /// terminator bytes if they belong to it (BEL or ESC `\`).
    fn finalize(
        &mut self,
        kind: Kind,
        mut buf: Vec<u8>,
        terminator: Option<&[u8]>,
        out: &mut Vec<OutputEvent>,
    ) {
        if kind == Kind::Dcs && query::dcs(&buf) {
            self.recycle(buf);
            self.emit_query(Query::Unanswered, out);
            return;
        }
        if kind != Kind::Osc {
            if let Some(t) = terminator {
                buf.extend_from_slice(t);
            }
            self.decoder.decode_into(&buf, &mut self.text);
            self.recycle(buf);
            return;
        }
        // For BEL the terminator was pushed into nothing yet: buf holds ESC ] payload.
        let payload = osc_payload(&buf);
        if let Some(queries) = query::osc(payload, terminator == Some(&[BEL][..])) {
            self.recycle(buf);
            for q in queries {
                self.emit_query(q, out);
            }
            return;
        }
        match classify_osc(payload, &self.nonce, self.require_nonce) {
            Osc::Integration(mark) => {
                self.recycle(buf);
                if let Some(mark) = mark {
                    self.emit_mark(mark, out);
                }
            }
            Osc::Pass(mark) => {
                if let Some(t) = terminator {
                    buf.extend_from_slice(t);
                }
                self.decoder.decode_into(&buf, &mut self.text);
                self.recycle(buf);
                if let Some(mark) = mark {
                    self.emit_mark(mark, out);
                }
            }
        }
    }
}

/// Bytes after `ESC ]`.
fn osc_payload(buf: &[u8]) -> &[u8] {
    buf.get(2..).unwrap_or_default()
}

fn stream_ends_at(kind: Kind, b: u8) -> bool {
    match b {
        ESC | CAN | SUB => true,
        BEL => kind == Kind::Osc,
        C1_ST => kind == Kind::Dcs,
        0x40..=0x7e => kind == Kind::Csi,
        _ => false,
    }
}

enum Osc {
    /// Shell integration: dropped from the output.
    Integration(Option<Mark>),
    /// Passed through to clients.
    Pass(Option<Mark>),
}

fn split_once(s: &[u8], sep: u8) -> (&[u8], Option<&[u8]>) {
    match s.iter().position(|&b| b == sep) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    }
}

/// OSC 1337 keys that belong to shell integration and are stripped.
const ITERM_INTEGRATION_KEYS: [&[u8]; 3] =
    [b"CurrentDir", b"ShellIntegrationVersion", b"RemoteHost"];

/// Whether an OSC payload (possibly incomplete) is shell integration.
fn is_integration_osc(payload: &[u8]) -> bool {
    let (num, rest) = split_once(payload, b';');
    match num {
        b"633" | b"133" => true,
        b"1337" => {
            let key = split_once(rest.unwrap_or_default(), b'=').0;
            ITERM_INTEGRATION_KEYS.contains(&key)
        }
        _ => false,
    }
}

fn classify_osc(payload: &[u8], nonce: &str, require_nonce: bool) -> Osc {
    let (num, rest) = split_once(payload, b';');
    match num {
        b"633" if require_nonce => Osc::Integration(rest.and_then(|r| parse_signed_633(r, nonce))),
        // Unsigned marks are believed here, but a signature, if present, is not data.
        b"633" => Osc::Integration(
            rest.and_then(|r| parse_signed_633(r, nonce).or_else(|| parse_633(r, nonce))),
        ),
        b"133" if require_nonce => Osc::Integration(None),
        b"133" => Osc::Integration(rest.and_then(parse_133)),
        b"1337"
            if require_nonce
                && ITERM_INTEGRATION_KEYS
                    .contains(&split_once(rest.unwrap_or_default(), b'=').0) =>
        {
            Osc::Integration(None)
        }
        b"1337" => {
            let (key, value) = split_once(rest.unwrap_or_default(), b'=');
            if !ITERM_INTEGRATION_KEYS.contains(&key) {
                return Osc::Pass(None);
            }
            let mark = match (key, value) {
                (b"CurrentDir", Some(v)) if !v.is_empty() => {
                    Some(Mark::Cwd(String::from_utf8_lossy(v).into_owned()))
                }
                _ => None,
            };
            Osc::Integration(mark)
        }
        b"0" | b"2" => Osc::Pass(rest.map(|t| Mark::Title(clean_title(t)))),
        b"7" => Osc::Pass(rest.and_then(parse_osc7).map(Mark::Cwd)),
        _ => Osc::Pass(None),
    }
}

fn parse_633(rest: &[u8], nonce: &str) -> Option<Mark> {
    let (letter, args) = split_once(rest, b';');
    match letter {
        b"A" => Some(Mark::PromptStart),
        b"B" => Some(Mark::CommandStart),
        b"C" => Some(Mark::CommandExecuted),
        b"D" => Some(Mark::CommandFinished {
            exit_code: parse_exit(args),
        }),
        b"E" => Some(parse_command_line(args.unwrap_or_default(), nonce)),
        b"P" => {
            let (key, value) = split_once(args?, b'=');
            let key = String::from_utf8_lossy(key).into_owned();
            let value = unescape(value.unwrap_or_default());
            if key == "Cwd" {
                Some(Mark::Cwd(value))
            } else {
                Some(Mark::Property { key, value })
            }
        }
        // F, G, H, I, SetMark, EnvJson, EnvSingle*, …: stripped, not reported.
        _ => None,
    }
}

/// A 633 mark that must end with `;<nonce>` (the field is removed before parsing). `E`
/// carries its nonce the same way and is checked by [`parse_command_line`].
fn parse_signed_633(rest: &[u8], nonce: &str) -> Option<Mark> {
    if rest.first() == Some(&b'E') {
        return parse_633(rest, nonce);
    }
    let i = rest.iter().rposition(|&b| b == b';')?;
    if &rest[i + 1..] != nonce.as_bytes() {
        return None;
    }
    parse_633(&rest[..i], nonce)
}

fn parse_133(rest: &[u8]) -> Option<Mark> {
    let (letter, args) = split_once(rest, b';');
    match letter {
        b"A" => Some(Mark::PromptStart),
        b"B" => Some(Mark::CommandStart),
        b"C" => Some(Mark::CommandExecuted),
        b"D" => Some(Mark::CommandFinished {
            exit_code: parse_exit(args),
        }),
        _ => None,
    }
}

/// First field of `args` as an exit code within the i32 range.
fn parse_exit(args: Option<&[u8]>) -> Option<i64> {
    let field = split_once(args?, b';').0;
    let n: i64 = std::str::from_utf8(field).ok()?.parse().ok()?;
    i32::try_from(n).ok().map(i64::from)
}

/// `E` arguments: `<cmdline>[;<nonce>]`; unescaped `;` inside the command line are kept.
fn parse_command_line(args: &[u8], nonce: &str) -> Mark {
    let mut cmd = args;
    let mut nonce_ok = false;
    if !nonce.is_empty() {
        if let Some(i) = args.iter().rposition(|&b| b == b';') {
            if &args[i + 1..] == nonce.as_bytes() {
                cmd = &args[..i];
                nonce_ok = true;
            }
        }
    }
    Mark::CommandLine {
        command_line: unescape(cmd),
        nonce_ok,
    }
}

/// Decodes `\\` → `\` and `\xHH` (either case) → byte in one left-to-right pass; any other
/// backslash is kept literally. The bytes are then read as UTF-8 (invalid → U+FFFD).
pub(crate) fn unescape(s: &[u8]) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'\\' {
            if s.get(i + 1) == Some(&b'\\') {
                out.push(b'\\');
                i += 2;
                continue;
            }
            if s.get(i + 1) == Some(&b'x') {
                if let (Some(h), Some(l)) = (
                    s.get(i + 2).copied().and_then(hex),
                    s.get(i + 3).copied().and_then(hex),
                ) {
                    out.push(h << 4 | l);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(s[i]);
        i += 1;
    }
    match String::from_utf8(out) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

/// Title text: UTF-8 (lossy), then [`sanitize_title`].
fn clean_title(raw: &[u8]) -> String {
    sanitize_title(&String::from_utf8_lossy(raw))
}

/// A title as it may be stored and shown: C0/C1 control characters (ESC, BEL, …) and DEL
/// removed, cut to [`MAX_TITLE_CHARS`] chars. Applied to titles from escape sequences and to
/// titles set by clients alike.
pub fn sanitize_title(title: &str) -> String {
    title
        .chars()
        .filter(|&c| !(c < ' ' || ('\u{7f}'..='\u{9f}').contains(&c)))
        .take(MAX_TITLE_CHARS)
        .collect()
}

/// OSC 7 `file://<host>/<path>` → the percent-decoded path. The host is not checked: a report
/// naming another host still yields its path (the shell may run on this machine under another
/// name). `+` is never a space; invalid UTF-8 after decoding becomes U+FFFD; malformed `%`
/// escapes are kept literally. Other schemes are ignored.
fn parse_osc7(rest: &[u8]) -> Option<String> {
    const SCHEME: &[u8] = b"file://";
    if rest.len() < SCHEME.len() || !rest[..SCHEME.len()].eq_ignore_ascii_case(SCHEME) {
        return None;
    }
    let after = &rest[SCHEME.len()..];
    let slash = after.iter().position(|&b| b == b'/')?;
    let path = &after[slash..];
    let decoded = percent_encoding::percent_decode(path).decode_utf8_lossy();
    Some(decoded.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_parser_trusts_only_marks_with_the_nonce() {
        let mut p = OutputParser::signed("n0nce".into());
        let mut out = Vec::new();
        p.feed(
            b"a\x1b]633;C\x07b\x1b]133;D;99\x07c\x1b]633;D;98\x07d\x1b]1337;CurrentDir=/x\x07e\
              \x1b]633;C;n0nce\x07f\x1b]633;D;3;n0nce\x07g\x1b]633;P;Cwd=/tmp;n0nce\x07h\
              \x1b]633;E;ls;n0nce\x07\x1b]633;A;n0nce\x07",
            &mut out,
        );
        let marks: Vec<Mark> = out
            .iter()
            .filter_map(|e| match e {
                OutputEvent::Mark(m) => Some(m.clone()),
                OutputEvent::Text(_) | OutputEvent::Query(_) => None,
            })
            .collect();
        assert_eq!(
            marks,
            [
                Mark::CommandExecuted,
                Mark::CommandFinished { exit_code: Some(3) },
                Mark::Cwd("/tmp".into()),
                Mark::CommandLine {
                    command_line: "ls".into(),
                    nonce_ok: true
                },
                Mark::PromptStart,
            ]
        );
        let text: String = out
            .iter()
            .filter_map(|e| match e {
                OutputEvent::Text(t) => Some(t.as_str()),
                OutputEvent::Mark(_) | OutputEvent::Query(_) => None,
            })
            .collect();
        assert_eq!(text, "abcdefgh");
    }

    const NONCE: &str = "n0nce";

    /// Feeds `chunks` and returns merged events (adjacent texts joined) after `finish`.
    fn run(chunks: &[&[u8]]) -> Vec<OutputEvent> {
        let mut p = OutputParser::new(NONCE.to_string());
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, &mut out);
        }
        p.finish(&mut out);
        normalize(out)
    }

    fn normalize(events: Vec<OutputEvent>) -> Vec<OutputEvent> {
        let mut v: Vec<OutputEvent> = Vec::new();
        for e in events {
            match (v.last_mut(), e) {
                (_, OutputEvent::Text(t)) if t.is_empty() => panic!("empty Text event"),
                (Some(OutputEvent::Text(a)), OutputEvent::Text(b)) => a.push_str(&b),
                (_, e) => v.push(e),
            }
        }
        v
    }

    fn text_of(events: &[OutputEvent]) -> String {
        events
            .iter()
            .filter_map(|e| match e {
                OutputEvent::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    fn marks_of(events: &[OutputEvent]) -> Vec<Mark> {
        events
            .iter()
            .filter_map(|e| match e {
                OutputEvent::Mark(m) => Some(m.clone()),
                _ => None,
            })
            .collect()
    }

    /// Unsplit, every two-way split and one byte per feed must agree.
    fn check_splits(input: &[u8]) -> Vec<OutputEvent> {
        let whole = run(&[input]);
        for cut in 0..=input.len() {
            let (a, b) = input.split_at(cut);
            assert_eq!(run(&[a, b]), whole, "split at {cut} of {input:?}");
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(run(&bytes), whole, "byte at a time {input:?}");
        whole
    }

    fn osc633(body: &str) -> String {
        format!("\x1b]633;{body}\x07")
    }

    #[test]
    fn plain_text_and_utf8_splits() {
        let ev = check_splits("aé😀─中".as_bytes());
        assert_eq!(ev, vec![OutputEvent::Text("aé😀─中".into())]);
    }

    #[test]
    fn t02_char_after_split_sequence_survives() {
        let ev = run(&[&[0x42, 0xcc], &[0x81, 0x43, 0xe2, 0x94, 0x80]]);
        assert_eq!(text_of(&ev), "B\u{301}C─");
        let ev = run(&[&[0xc3], &[0xa9, 0x21]]);
        assert_eq!(text_of(&ev), "é!");
        check_splits(&[0x42, 0xcc, 0x81, 0x43, 0xe2, 0x94, 0x80]);
    }

    #[test]
    fn t03_invalid_utf8_maximal_subparts() {
        let input = b"a\xffb\xc0\x80c\xed\xa0\x80d\x9be\n";
        let ev = check_splits(input);
        assert_eq!(text_of(&ev), String::from_utf8_lossy(input));
        assert_eq!(
            text_of(&ev),
            "a\u{FFFD}b\u{FFFD}\u{FFFD}c\u{FFFD}\u{FFFD}\u{FFFD}d\u{FFFD}e\n"
        );
    }

    #[test]
    fn t04_partial_cut_by_esc_and_eof() {
        let ev = check_splits(b"\xd8\x1b[0m12\n");
        assert_eq!(text_of(&ev), "\u{FFFD}\x1b[0m12\n");
        let ev = run(&[b"\xe2\x94"]);
        assert_eq!(ev, vec![OutputEvent::Text("\u{FFFD}".into())]);
        // A partial char before a stripped sequence is not glued to bytes after it.
        let ev = check_splits(b"\xe2\x94\x1b]633;A\x07\x80");
        assert_eq!(text_of(&ev), "\u{FFFD}\u{FFFD}");
    }

    #[test]
    fn t05_sequences_split_with_delays() {
        let ev = run(&[
            b"\x1b]63",
            b"3;D;1",
            b"30\x07",
            b"\x1b[",
            b"31mred\x1b[0m\n",
        ]);
        assert_eq!(
            ev,
            vec![
                OutputEvent::Mark(Mark::CommandFinished {
                    exit_code: Some(130)
                }),
                OutputEvent::Text("\x1b[31mred\x1b[0m\n".into()),
            ]
        );
        check_splits(b"\x1b]633;D;130\x07\x1b[31mred\x1b[0m\n");
    }

    #[test]
    fn t05_full_cycle_byte_at_a_time() {
        let input = format!(
            "{}$ {}{}{}out\r\n{}",
            osc633("A"),
            osc633("B"),
            osc633(&format!("E;ls\\x20-l;{NONCE}")),
            osc633("C"),
            osc633("D;0")
        );
        let ev = check_splits(input.as_bytes());
        assert_eq!(
            ev,
            vec![
                OutputEvent::Mark(Mark::PromptStart),
                OutputEvent::Text("$ ".into()),
                OutputEvent::Mark(Mark::CommandStart),
                OutputEvent::Mark(Mark::CommandLine {
                    command_line: "ls -l".into(),
                    nonce_ok: true
                }),
                OutputEvent::Mark(Mark::CommandExecuted),
                OutputEvent::Text("out\r\n".into()),
                OutputEvent::Mark(Mark::CommandFinished { exit_code: Some(0) }),
            ]
        );
    }

    #[test]
    fn t06_bel_and_st_terminators() {
        for input in [
            &b"\x1b]633;A\x07X"[..],
            b"\x1b]633;A\x1b\\X",
            b"\x1b]133;A\x1b\\X",
        ] {
            let ev = check_splits(input);
            assert_eq!(
                ev,
                vec![
                    OutputEvent::Mark(Mark::PromptStart),
                    OutputEvent::Text("X".into())
                ]
            );
        }
        let ev = run(&[b"\x1b]633;A\x1b", b"\\X"]);
        assert_eq!(
            ev,
            vec![
                OutputEvent::Mark(Mark::PromptStart),
                OutputEvent::Text("X".into())
            ]
        );
        // Mixed terminators in one stream.
        let ev = check_splits(b"\x1b]633;A\x07p\x1b]633;B\x1b\\q\x1b]133;C\x07r\x1b]633;D;2\x1b\\");
        assert_eq!(text_of(&ev), "pqr");
        assert_eq!(marks_of(&ev).len(), 4);
    }

    #[test]
    fn osc_ended_by_esc_without_backslash() {
        // ESC ends the OSC (as in vte); the ESC starts the next sequence.
        let ev = check_splits(b"\x1b]633;A\x1b[1mB");
        assert_eq!(
            ev,
            vec![
                OutputEvent::Mark(Mark::PromptStart),
                OutputEvent::Text("\x1b[1mB".into())
            ]
        );
        let ev = check_splits(b"\x1b]0;t\x1b[1mB");
        assert_eq!(text_of(&ev), "\x1b]0;t\x1b[1mB");
        assert_eq!(marks_of(&ev), vec![Mark::Title("t".into())]);
    }

    #[test]
    fn t07_unterminated_and_oversize() {
        // Unterminated title at EOF is released verbatim.
        let ev = run(&[b"\x1b]0;abc", b"hello"]);
        assert_eq!(text_of(&ev), "\x1b]0;abchello");
        // A title absorbs text until its BEL, then output continues.
        let ev = run(&[b"\x1b]0;abc", b"hello", b"\x07after"]);
        assert_eq!(text_of(&ev), "\x1b]0;abchello\x07after");
        // Unterminated integration OSC at EOF is dropped.
        let ev = run(&[b"x\x1b]633;E;abc"]);
        assert_eq!(text_of(&ev), "x");
    }

    #[test]
    fn t07_oversize_integration_osc_is_skipped() {
        let mut p = OutputParser::new(NONCE.into());
        let mut out = Vec::new();
        p.feed(b"\x1b]633;E;", &mut out);
        let chunk = vec![b'a'; 64 * 1024];
        for _ in 0..40 {
            p.feed(&chunk, &mut out);
            assert!(p.buf.len() <= MAX_OSC_BYTES + 1);
        }
        p.feed(b"\x07visible\n", &mut out);
        p.finish(&mut out);
        let ev = normalize(out);
        assert_eq!(ev, vec![OutputEvent::Text("visible\n".into())]);
        // ST-terminated variant, terminator split.
        let mut p = OutputParser::new(NONCE.into());
        let mut out = Vec::new();
        p.feed(b"\x1b]133;A", &mut out);
        p.feed(&vec![b'z'; MAX_OSC_BYTES + 10], &mut out);
        p.feed(b"\x1b", &mut out);
        p.feed(b"\\ok", &mut out);
        p.finish(&mut out);
        assert_eq!(normalize(out), vec![OutputEvent::Text("ok".into())]);
    }

    #[test]
    fn t07_oversize_foreign_osc_streams_through() {
        let mut p = OutputParser::new(NONCE.into());
        let mut out = Vec::new();
        let mut expected = b"\x1b]1337;File=x:".to_vec();
        p.feed(&expected.clone(), &mut out);
        let chunk = vec![b'Q'; 100_000];
        for _ in 0..30 {
            p.feed(&chunk, &mut out);
            expected.extend_from_slice(&chunk);
            assert!(p.buf.len() <= MAX_OSC_BYTES + 1);
        }
        p.feed(b"\x07\x1b]633;A\x07tail", &mut out);
        expected.extend_from_slice(b"\x07tail");
        p.finish(&mut out);
        let ev = normalize(out);
        assert_eq!(text_of(&ev).as_bytes(), &expected[..]);
        assert_eq!(marks_of(&ev), vec![Mark::PromptStart]);
    }

    #[test]
    fn oversize_dcs_and_csi() {
        let mut input = b"\x1bPq".to_vec();
        input.extend(std::iter::repeat_n(b'#', MAX_OSC_BYTES + 5));
        input.extend_from_slice(b"\x1b\\done");
        let ev = run(&[&input]);
        assert_eq!(text_of(&ev).as_bytes(), &input[..]);
        let mut input = b"\x1b[".to_vec();
        input.extend(std::iter::repeat_n(b'1', MAX_OSC_BYTES + 5));
        input.extend_from_slice(b"mdone");
        let ev = run(&[&input]);
        assert_eq!(text_of(&ev).as_bytes(), &input[..]);
    }

    #[test]
    fn t08_semicolons_and_many_fields() {
        let ev = check_splits(osc633(&format!("E;a;b;c;{NONCE}")).as_bytes());
        assert_eq!(
            marks_of(&ev),
            vec![Mark::CommandLine {
                command_line: "a;b;c".into(),
                nonce_ok: true
            }]
        );
        let fields: Vec<String> = (0..20).map(|i| i.to_string()).collect();
        let line = fields.join(";");
        let ev = run(&[osc633(&format!("E;{line}")).as_bytes()]);
        assert_eq!(
            marks_of(&ev),
            vec![Mark::CommandLine {
                command_line: line.clone(),
                nonce_ok: false
            }]
        );
        let ev = run(&[osc633(&format!("E;{line};{NONCE}")).as_bytes()]);
        assert_eq!(
            marks_of(&ev),
            vec![Mark::CommandLine {
                command_line: line,
                nonce_ok: true
            }]
        );
    }

    #[test]
    fn t09_escapes_one_pass() {
        let cases = [
            ("E;echo\\x20a\\x3bb", "echo a;b"),
            ("E;a\\\\x3bb", "a\\x3bb"),
            ("E;C:\\x5cUsers\\x5calice", "C:\\Users\\alice"),
            ("E;x\\x3Bz", "x;z"),
            ("E;bad\\xZZ", "bad\\xZZ"),
            ("E;tail\\", "tail\\"),
            ("E;\\xe2\\x9c\\x93 \\xff", "✓ \u{FFFD}"),
        ];
        for (body, want) in cases {
            let ev = run(&[osc633(body).as_bytes()]);
            assert_eq!(
                marks_of(&ev),
                vec![Mark::CommandLine {
                    command_line: want.into(),
                    nonce_ok: false
                }],
                "{body}"
            );
        }
        let ev = run(&[osc633("P;Cwd=/srv/a=b").as_bytes()]);
        assert_eq!(marks_of(&ev), vec![Mark::Cwd("/srv/a=b".into())]);
        let ev = run(&[osc633("P;Cwd=/srv/semi\\x3bcolon").as_bytes()]);
        assert_eq!(marks_of(&ev), vec![Mark::Cwd("/srv/semi;colon".into())]);
        let ev = run(&[osc633("P;HasRichCommandDetection=True").as_bytes()]);
        assert_eq!(
            marks_of(&ev),
            vec![Mark::Property {
                key: "HasRichCommandDetection".into(),
                value: "True".into()
            }]
        );
    }

    #[test]
    fn t10_exit_codes() {
        let cases: [(&str, Option<i64>); 7] = [
            ("D", None),
            ("D;130", Some(130)),
            ("D;abc", None),
            ("D;-1", Some(-1)),
            ("D;1;aid=42", Some(1)),
            ("D;99999999999", None),
            ("D;", None),
        ];
        for (body, want) in cases {
            for num in ["633", "133"] {
                let seq = format!("\x1b]{num};{body}\x07");
                let ev = run(&[seq.as_bytes()]);
                assert_eq!(
                    ev,
                    vec![OutputEvent::Mark(Mark::CommandFinished { exit_code: want })],
                    "{seq:?}"
                );
            }
        }
    }

    #[test]
    fn t11_osc7_and_cwd_properties() {
        let cases = [
            (
                "\x1b]7;file://myhost/home/u/My%20Dir/%E2%9C%93\x1b\\",
                "/home/u/My Dir/✓",
            ),
            ("\x1b]7;file:///srv/a+b\x07", "/srv/a+b"),
            ("\x1b]7;file://host/srv/%ZZ\x07", "/srv/%ZZ"),
            ("\x1b]7;file:///srv/%FF\x07", "/srv/\u{FFFD}"),
            ("\x1b]1337;CurrentDir=/x/y\x07", "/x/y"),
        ];
        for (seq, want) in cases {
            let ev = check_splits(seq.as_bytes());
            assert_eq!(marks_of(&ev), vec![Mark::Cwd(want.into())], "{seq:?}");
            let passes = seq.starts_with("\x1b]7;");
            assert_eq!(text_of(&ev), if passes { seq } else { "" }, "{seq:?}");
        }
        // Not a file URI: passed, no mark.
        let ev = run(&[b"\x1b]7;http://x/y\x07"]);
        assert!(marks_of(&ev).is_empty());
    }

    #[test]
    fn t12_titles() {
        let input = b"\x1b]0;quote\" back\\ ctl\x01 bad\xff\x07";
        let ev = check_splits(input);
        assert_eq!(
            marks_of(&ev),
            vec![Mark::Title("quote\" back\\ ctl bad\u{FFFD}".into())]
        );
        assert_eq!(text_of(&ev), String::from_utf8_lossy(input));
        let long = format!("\x1b]2;{}\x07", "t".repeat(100_000));
        let ev = run(&[long.as_bytes()]);
        assert_eq!(
            marks_of(&ev),
            vec![Mark::Title("t".repeat(MAX_TITLE_CHARS))]
        );
        assert_eq!(text_of(&ev), long);
        let ev = check_splits(b"\x1b]112\x07next");
        assert_eq!(ev, vec![OutputEvent::Text("\x1b]112\x07next".into())]);
        // OSC 1 (icon name) is not a title.
        let ev = run(&[b"\x1b]1;icon\x07"]);
        assert!(marks_of(&ev).is_empty());
    }

    #[test]
    fn foreign_sequences_untouched() {
        let inputs: [&[u8]; 12] = [
            b"\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\",
            b"\x1b]52;c;aGVsbG8=\x07",
            b"\x1b]1337;SetUserVar=a=b\x07",
            b"\x1bP1$r0m\x1b\\",
            b"\x1b_Gf=100;AAAA\x1b\\",
            b"\x1b^pm\x1b\\\x1bXsos\x1b\\",
            b"\x1b7\x1b8\x1b(B\x1b#8\x1bc",
            b"\x1b[?1049h\x1b[2J\x1b[1;1H\x1b[38;2;1;2;3m\x1b[>4;2m",
            b"\x1b[1\n2m",
            b"\x1b[1$}x\x1b[?1;2;3;4;5;6;7;8;9;10;11;12;13;14;15;16;17;18;19;20;21;22;23;24;25;26;27;28;29;30;31;32;33h",
            b"\r\n\t\x08\x07\x00\x7f\x1b\x1b[A\x1b\x18x\x1b]0;a\x18b",
            b"\x1b]6330;x\x07\x1b]13;y\x07\x1b]1337;CurrentDirX=1\x07",
        ];
        for input in inputs {
            let ev = check_splits(input);
            assert_eq!(text_of(&ev).as_bytes(), input, "{input:?}");
        }
    }

    fn queries_of(ev: &[OutputEvent]) -> Vec<Query> {
        ev.iter()
            .filter_map(|e| match e {
                OutputEvent::Query(q) => Some(q.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn queries_are_cut_and_reported_in_order() {
        let input = b"a\x1b[6nb\x1b[?6nc\x1b[cd\x1b[>0ce\x1b]11;?\x1b\\f\x1b]10;?\x07g\x1bZh\
                      \x1b[5ni\x1bP$qm\x1b\\j\x1b[18tk\x1b[?u\x1b]4;1;?\x07l";
        let ev = check_splits(input);
        assert_eq!(text_of(&ev), "abcdefghijkl");
        assert_eq!(
            queries_of(&ev),
            [
                Query::CursorPosition { extended: false },
                Query::CursorPosition { extended: true },
                Query::PrimaryAttributes,
                Query::SecondaryAttributes,
                Query::Color {
                    which: 11,
                    bell: false
                },
                Query::Color {
                    which: 10,
                    bell: true
                },
                Query::PrimaryAttributes,
                Query::Status,
                Query::Unanswered,
                Query::WindowSize { op: 18 },
                Query::Unanswered,
                Query::Unanswered,
            ]
        );
        // Text before a query comes before it.
        assert_eq!(
            run(&[b"ab\x1b[6", b"ncd"]),
            vec![
                OutputEvent::Text("ab".into()),
                OutputEvent::Query(Query::CursorPosition { extended: false }),
                OutputEvent::Text("cd".into()),
            ]
        );
    }

    #[test]
    fn mode_reports_follow_the_output() {
        let ev = check_splits(b"\x1b[?2004$p\x1b[?2004h\x1b[?2004$p\x1b[4h\x1b[4$p\x1b[?77$p");
        assert_eq!(text_of(&ev), "\x1b[?2004h\x1b[4h");
        let reports: Vec<u8> = queries_of(&ev)
            .iter()
            .map(|q| match q {
                Query::Mode { report, .. } => *report,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(reports, [2, 1, 1, 0]);
    }

    #[test]
    fn integration_osc_cancelled_by_can() {
        let ev = check_splits(b"a\x1b]633;A\x18b");
        assert_eq!(ev, vec![OutputEvent::Text("a\x18b".into())]);
    }

    #[test]
    fn other_integration_letters_stripped() {
        let input = b"1\x1b]633;F\x072\x1b]633;SetMark;Id=3\x073\x1b]633;EnvJson;{}\x07\x1b]1337;ShellIntegrationVersion=5\x07\x1b]1337;RemoteHost=a@b\x074\x1b]133;L\x07";
        let ev = check_splits(input);
        assert_eq!(ev, vec![OutputEvent::Text("1234".into())]);
    }

    #[test]
    fn spoofed_command_line_not_trusted() {
        // What `cat` of a file holding a forged E mark would print.
        let ev = run(&[osc633("E;rm -rf /;wrongnonce").as_bytes()]);
        assert_eq!(
            marks_of(&ev),
            vec![Mark::CommandLine {
                command_line: "rm -rf /;wrongnonce".into(),
                nonce_ok: false
            }]
        );
        // An empty nonce never trusts.
        let mut p = OutputParser::new(String::new());
        let mut out = Vec::new();
        p.feed(b"\x1b]633;E;x;\x07", &mut out);
        assert_eq!(
            out,
            vec![OutputEvent::Mark(Mark::CommandLine {
                command_line: "x;".into(),
                nonce_ok: false
            })]
        );
    }

    #[test]
    fn text_before_mark_comes_first_within_one_feed() {
        let mut p = OutputParser::new(NONCE.into());
        let mut out = Vec::new();
        p.feed(b"abc\x1b]633;C\x07def", &mut out);
        assert_eq!(
            out,
            vec![
                OutputEvent::Text("abc".into()),
                OutputEvent::Mark(Mark::CommandExecuted),
                OutputEvent::Text("def".into()),
            ]
        );
    }

    /// Removes integration OSCs from `input` by a naive independent method, for comparison.
    fn reference_strip(input: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < input.len() {
            let rest = &input[i..];
            let is_si = [&b"\x1b]633;"[..], b"\x1b]133;"]
                .iter()
                .any(|p| rest.starts_with(p));
            if is_si {
                // Find BEL or ESC; ESC \ is consumed whole.
                let body = &rest[2..];
                match body.iter().position(|&b| b == BEL || b == ESC) {
                    Some(j) if body[j] == BEL => i += 2 + j + 1,
                    Some(j) if body.get(j + 1) == Some(&b'\\') => i += 2 + j + 2,
                    Some(j) => i += 2 + j,
                    None => break,
                }
            } else {
                out.push(input[i]);
                i += 1;
            }
        }
        out
    }

    #[test]
    fn byte_exact_over_many_vectors() {
        let pieces: [&[u8]; 14] = [
            b"hello ",
            "wörld ✓ ".as_bytes(),
            b"\x1b[31m",
            b"\x1b[0m",
            b"\x1b]0;title\x07",
            b"\x1b]2;t2\x1b\\",
            b"\x1b]633;A\x07",
            b"\x1b]633;B\x1b\\",
            b"\x1b]633;E;ls\\x20-la;n0nce\x07",
            b"\x1b]133;C\x07",
            b"\x1b]633;D;0\x1b\\",
            b"\x1b]7;file:///tmp\x07",
            b"\x1bPq#0;2;0;0;0\x1b\\",
            b"\r\n",
        ];
        // Deterministic pseudo-random concatenations.
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..60 {
            let mut input = Vec::new();
            for _ in 0..8 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                input.extend_from_slice(pieces[(seed % pieces.len() as u64) as usize]);
            }
            let ev = check_splits(&input);
            assert_eq!(
                text_of(&ev).as_bytes(),
                &reference_strip(&input)[..],
                "{input:?}"
            );
            assert!(!text_of(&ev).contains("\x1b]633"));
            assert!(!text_of(&ev).contains("\x1b]133"));
        }
    }

    #[test]
    fn random_bytes_never_panic_and_splits_agree() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let alphabet: &[u8] =
            b"\x1b\x07\x18\x9c\\[]P_X^;0123456789ABCDE:?$ a\xc3\xa9\xe2\x94\x80\xff";
        for _ in 0..200 {
            let mut input = Vec::new();
            for _ in 0..40 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                input.push(alphabet[(seed % alphabet.len() as u64) as usize]);
            }
            let ev = check_splits(&input);
            for e in &ev {
                if let OutputEvent::Text(t) = e {
                    assert!(!t.contains("\x1b]633;") && !t.contains("\x1b]133;"));
                }
            }
        }
    }
}
