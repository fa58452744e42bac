//! Escape-sequence framing of a pty output stream: which bytes are text and where each escape
//! sequence starts and ends, across reads cut anywhere — and nothing else. Sequences are not
//! interpreted here; every byte is passed on verbatim (as UTF-8 text) except the sequences
//! the [`Perform`]er chooses to remove (shell-integration OSCs, terminal queries), which it
//! receives instead. The shell-integration parser
//! (`shell_integration::parser`) is its performer; the scrollback trim asks it where a
//! sequence ends ([`sequence_len`]) so that it never cuts one.
//!
//! Modelled on `vte`, which it drives: text between sequences is decoded by our streaming
//! UTF-8 decoder (maximal-subpart U+FFFD replacement, like `String::from_utf8_lossy`); from an
//! ESC on, the bytes go to a `vte` 0.15 state machine one piece at a time while the raw bytes
//! of the sequence in progress are kept, and when vte reports its end they are released or
//! handed to the performer. vte never sees plain text, so its loss of the character after a
//! code point split across `advance` calls cannot happen here. Three sequence ends are silent
//! in vte (a CSI that vte ignores, and an ESC that ends DCS-ignore or SOS/PM/APC); those are
//! recognised from the byte itself.
//!
//! # The grammar
//!
//! ECMA-48 (5th edition, 1991) §5.3–§5.6 and xterm's "Control Sequences" (ctlseqs):
//! - ESC sequences: `ESC`, intermediates 0x20–0x2F, a final byte 0x30–0x7E;
//! - control sequences (CSI): `ESC [`, parameters 0x30–0x3F, intermediates 0x20–0x2F, a final
//!   byte 0x40–0x7E (§5.4);
//! - control strings (§5.6): OSC (`ESC ]`), DCS (`ESC P`), SOS/PM/APC (`ESC X`, `ESC ^`,
//!   `ESC _`), ended by ST (`ESC \`);
//! - CAN (0x18) and SUB (0x1A) cancel a sequence in progress (§8.3.6, §8.3.148).
//!
//! Departures, as in xterm and vte:
//! - an OSC also ends at BEL (0x07), xterm's terminator;
//! - an ESC inside a sequence ends it; unless it is the first half of ST it starts the next
//!   sequence (a control string's bytes so far are released or dispatched first);
//! - 8-bit C1 introducers (0x9B CSI, 0x9D OSC, …) are not recognised: pty output is UTF-8, in
//!   which those bytes are continuation bytes;
//! - a sequence longer than [`MAX_SEQUENCE_BYTES`] is given up (see there): memory stays
//!   bounded whatever a program prints.
//!
//! Pure streaming state machine; touches nothing but its own buffers.

use std::mem;

use super::utf8::Utf8Decoder;

/// Largest number of raw bytes held for one escape sequence (OSC, DCS, SOS/PM/APC, CSI or ESC)
/// while waiting for its end: 1 MiB.
///
/// Give-up rule when a sequence grows past this many bytes without ending:
/// * an OSC the performer removes ([`Perform::removes_osc`], e.g. a shell-integration OSC),
///   or one it asks to drop when over-long ([`Perform::drops_overlong_osc`], e.g. a colour
///   query), is discarded: the held bytes and everything up to its terminator are dropped and
///   it is not dispatched, so such a sequence never reaches a client even in part;
/// * any other sequence is released verbatim as text, and the rest of it (up to its
///   terminator) streams through as text as it arrives, without being held.
///
/// Either way memory stays bounded by this constant and later output keeps flowing.
pub const MAX_SEQUENCE_BYTES: usize = 1 << 20;

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;
const CAN: u8 = 0x18;
const SUB: u8 = 0x1a;
const C1_ST: u8 = 0x9c;

/// Keep at most this much buffer capacity around after a large sequence.
const SHRINK_ABOVE: usize = 64 * 1024;

/// Kind of the escape sequence in progress, decided by the byte after ESC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum Kind {
    /// `ESC`, intermediates, a final byte.
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

/// Most CSI parameters recorded for the performer.
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
    /// final byte; or the dispatched ESC's intermediates and final byte (0: ignored by vte).
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
        // An ignored (overlong) or non-ASCII sequence is not reported to the performer.
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

/// What the framer asks of the code that interprets the stream (cf. `vte::Perform`): which
/// sequences to remove, and what to do with each complete one. In every method `text` is the
/// output framed so far and not yet taken ([`Framer::take_text`]): a performer that reports
/// something about a sequence it removes takes that text first, so the report follows it.
/// The defaults pass every sequence through.
pub trait Perform {
    /// Whether an OSC whose payload (the bytes after `ESC ]`) begins with `payload` is removed
    /// from the output instead of passed through. Asked with the complete payload when the OSC
    /// ends, and with what has arrived when it is cancelled (CAN/SUB), cut short by the end of
    /// the stream, or grows past [`MAX_SEQUENCE_BYTES`]: the answer must depend only on what
    /// starts the payload (its number, and for OSC 1337 its key).
    fn removes_osc(&self, payload: &[u8]) -> bool;

    /// A complete OSC (ended by BEL, ST, or an ESC that starts the next sequence), in stream
    /// order. `text` is the output framed so far and not yet taken ([`Framer::take_text`]),
    /// ending with this OSC's own bytes when it passes through: whatever the performer reports
    /// about the OSC should follow that text.
    fn osc_dispatch(&mut self, payload: &[u8], text: &mut String);

    /// Whether an OSC whose payload begins with `payload` is dropped whole (not released as
    /// text) once it grows past [`MAX_SEQUENCE_BYTES`]; like [`removes_osc`](Self::removes_osc),
    /// the answer must depend only on what starts the payload. Default: what `removes_osc`
    /// says.
    fn drops_overlong_osc(&self, payload: &[u8]) -> bool {
        self.removes_osc(payload)
    }

    /// A complete OSC that [`removes_osc`](Self::removes_osc) passes, before anything else is
    /// done with it (`bell`: ended by BEL rather than ST): `true` removes it (and it is not
    /// dispatched).
    fn takes_osc(&mut self, _payload: &[u8], _bell: bool, _text: &mut String) -> bool {
        false
    }

    /// A complete CSI: the first sub-parameter of each of its parameters (at most 16), its
    /// intermediates (at most 2) and its final byte. `true` removes it from the output; else
    /// it passes through. Not asked for a CSI vte ignores (overlong) or a cancelled one.
    fn csi_dispatch(
        &mut self,
        _params: &[u16],
        _intermediates: &[u8],
        _action: u8,
        _text: &mut String,
    ) -> bool {
        false
    }

    /// A complete ESC sequence: its intermediates and final byte (0 when vte ignored it).
    /// `true` removes it from the output.
    fn esc_dispatch(&mut self, _intermediates: &[u8], _action: u8, _text: &mut String) -> bool {
        false
    }

    /// A complete DCS (`sequence`: its raw bytes from `ESC P`, without the terminator).
    /// `true` removes it from the output.
    fn takes_dcs(&mut self, _sequence: &[u8], _text: &mut String) -> bool {
        false
    }
}

/// Passes every OSC through and ignores them.
struct PassAll;

impl Perform for PassAll {
    fn removes_osc(&self, _payload: &[u8]) -> bool {
        false
    }
    fn osc_dispatch(&mut self, _payload: &[u8], _text: &mut String) {}
}

/// What a [`Framer`] holds back between two reads, as data: the raw bytes of the sequence in
/// progress or of a partial UTF-8 character, and for an oversize sequence the mode it streams
/// or skips in. Carried across a live upgrade (docs/upgrade.md): a fresh framer resumed from
/// it behaves exactly as the suspended one would have.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FramerCarry {
    /// Raw bytes held back (at most [`MAX_SEQUENCE_BYTES`] + 1): fed again to the fresh framer.
    #[serde(default)]
    pub held: Vec<u8>,
    /// An oversize non-integration sequence of this kind streams through as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stream: Option<Kind>,
    /// An oversize integration OSC is being dropped (`true`: its last byte was ESC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    skip: Option<bool>,
}

/// The framing state of one stream, kept across reads.
pub struct Framer {
    vte: vte::Parser,
    rec: Recorder,
    mode: Mode,
    /// Raw bytes of the sequence in progress (at most [`MAX_SEQUENCE_BYTES`]).
    buf: Vec<u8>,
    decoder: Utf8Decoder,
    /// Text framed and not yet taken.
    text: String,
    /// Sequences started so far (for [`sequence_len`]).
    started: u64,
}

impl Default for Framer {
    fn default() -> Self {
        Framer::new()
    }
}

impl Framer {
    /// A framer at the start of a stream.
    pub fn new() -> Self {
        Framer {
            vte: vte::Parser::new(),
            rec: Recorder::default(),
            mode: Mode::Ground,
            buf: Vec::new(),
            decoder: Utf8Decoder::new(),
            text: String::new(),
            started: 0,
        }
    }

    /// Frames the next chunk of the stream: text and passed-through sequences are appended to
    /// the text ([`Framer::take_text`]), complete OSCs go to `perform`, in stream order.
    /// Incomplete UTF-8 tails and unfinished sequences are held (bounded by
    /// [`MAX_SEQUENCE_BYTES`]) until later calls or [`finish`](Self::finish).
    pub fn advance<P: Perform>(&mut self, bytes: &[u8], perform: &mut P) {
        let mut i = 0;
        while i < bytes.len() {
            i += self.step(&bytes[i..], perform);
        }
    }

    /// Ends the stream (EOF): releases anything held. An unfinished sequence is released
    /// verbatim unless it is an OSC the performer removes (then it is dropped); an OSC ended by
    /// a final ESC is dispatched and the ESC released; a dangling partial UTF-8 sequence
    /// becomes one U+FFFD. The framer is then at the start of a new stream.
    pub fn finish<P: Perform>(&mut self, perform: &mut P) {
        match self.mode {
            Mode::Ground | Mode::Stream { .. } => {}
            Mode::Seq { kind, .. } => {
                let buf = mem::take(&mut self.buf);
                if !(kind == Kind::Osc && perform.removes_osc(osc_payload(&buf))) {
                    self.decoder.decode_into(&buf, &mut self.text);
                }
            }
            Mode::AwaitSt { kind } => {
                let buf = mem::take(&mut self.buf);
                self.finalize(kind, buf, None, perform);
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
    }

    /// What this framer holds back (see [`FramerCarry`]); the framer itself is left as is.
    /// Called between two [`advance`](Self::advance)s, after [`take_text`](Self::take_text).
    pub fn suspend(&self) -> FramerCarry {
        let mut carry = FramerCarry::default();
        match self.mode {
            Mode::Ground => carry.held.extend_from_slice(self.decoder.pending()),
            Mode::Seq { .. } => carry.held.extend_from_slice(&self.buf),
            Mode::AwaitSt { .. } => {
                carry.held.extend_from_slice(&self.buf);
                carry.held.push(ESC);
            }
            Mode::Stream { kind } => {
                carry.stream = Some(kind);
                carry.held.extend_from_slice(self.decoder.pending());
            }
            Mode::Skip { after_esc } => carry.skip = Some(after_esc),
        }
        carry
    }

    /// Restores the state [`suspend`](Self::suspend) described into this framer, which must be
    /// fresh. Frames nothing: the carried bytes were held back, not yet framed.
    pub fn resume<P: Perform>(&mut self, carry: &FramerCarry, perform: &mut P) {
        if let Some(kind) = carry.stream {
            self.mode = Mode::Stream { kind };
        } else if let Some(after_esc) = carry.skip {
            self.mode = Mode::Skip { after_esc };
        }
        self.advance(&carry.held, perform);
        // Held bytes complete nothing; anything else would be a carry from another framer.
        debug_assert!(self.text.is_empty());
    }

    /// The text framed since the last call (valid UTF-8, never ending inside a character),
    /// or `None` if there is none.
    pub fn take_text(&mut self) -> Option<String> {
        (!self.text.is_empty()).then(|| mem::take(&mut self.text))
    }

    /// Raw bytes held for the sequence in progress.
    #[cfg(test)]
    pub(crate) fn held_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Starts a new sequence at an ESC (already consumed by the caller).
    fn begin_escape(&mut self) {
        // An ESC ends any partial character written before it.
        self.decoder.finish_into(&mut self.text);
        self.started += 1;
        self.buf.clear();
        self.buf.push(ESC);
        self.rec.reset();
        self.vte.advance(&mut self.rec, &[ESC]);
        self.mode = Mode::Seq {
            kind: Kind::Esc,
            esc_intermediate: false,
        };
    }

    /// Releases the held sequence bytes verbatim as text.
    fn release_held(&mut self) {
        let buf = mem::take(&mut self.buf);
        self.decoder.decode_into(&buf, &mut self.text);
        self.recycle(buf);
    }

    /// Forgets the held sequence bytes (a removed sequence).
    fn drop_held(&mut self) {
        let buf = mem::take(&mut self.buf);
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
    fn step<P: Perform>(&mut self, bytes: &[u8], perform: &mut P) -> usize {
        match self.mode {
            Mode::Ground => {
                // The fast path: plain text up to the next ESC, and every whole CSI that no
                // performer acts on (SGR, cursor moves, erasing), is text as it is. The run
                // is decoded in one call: an ESC in it ends a partial character before it
                // with one U+FFFD, as `begin_escape` does.
                let mut n = 0;
                loop {
                    let Some(at) = memchr::memchr(ESC, &bytes[n..]) else {
                        n = bytes.len();
                        break;
                    };
                    n += at;
                    let Some(len) = inert_csi_len(&bytes[n..]) else {
                        break;
                    };
                    self.started += 1;
                    n += len;
                }
                self.decoder.decode_into(&bytes[..n], &mut self.text);
                if n == bytes.len() {
                    return n;
                }
                self.begin_escape();
                n + 1
            }
            Mode::Seq {
                kind,
                esc_intermediate,
            } => self.step_seq(kind, esc_intermediate, bytes, perform),
            Mode::AwaitSt { kind } => {
                let b = bytes[0];
                self.rec.reset();
                self.vte.advance(&mut self.rec, &[b]);
                let buf = mem::take(&mut self.buf);
                if b == b'\\' && self.rec.esc {
                    self.finalize(kind, buf, Some(&[ESC, b'\\']), perform);
                    self.mode = Mode::Ground;
                    if kind == Kind::Osc && self.buf.capacity() == 0 {
                        // A large OSC may have left vte with a large buffer.
                        self.vte = vte::Parser::new();
                    }
                } else {
                    self.finalize(kind, buf, None, perform);
                    // The ESC starts a new sequence; vte already saw ESC and `b`.
                    self.start_seq_after_esc();
                    self.after_esc_byte(b, false, perform);
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

    fn step_seq<P: Perform>(
        &mut self,
        kind: Kind,
        esc_intermediate: bool,
        bytes: &[u8],
        perform: &mut P,
    ) -> usize {
        // Inside string sequences, feed runs of bytes that cannot end the sequence at once.
        if matches!(kind, Kind::Osc | Kind::Dcs | Kind::Str) {
            let room = (MAX_SEQUENCE_BYTES + 1)
                .saturating_sub(self.buf.len())
                .max(1);
            let limit = bytes.len().min(room);
            let n = bytes[..limit]
                .iter()
                .position(|&b| matches!(b, BEL | CAN | SUB | ESC | C1_ST))
                .unwrap_or(limit);
            if n > 0 {
                self.rec.reset();
                self.vte.advance(&mut self.rec, &bytes[..n]);
                self.buf.extend_from_slice(&bytes[..n]);
                self.check_overflow(kind, perform);
                return n;
            }
        }
        let b = bytes[0];
        self.rec.reset();
        self.vte.advance(&mut self.rec, &[b]);
        match kind {
            Kind::Esc => self.after_esc_byte(b, esc_intermediate, perform),
            Kind::Csi => {
                if b == ESC {
                    self.release_held();
                    self.start_seq_after_esc();
                } else {
                    self.buf.push(b);
                    if self.rec.csi && !self.rec.cancel && self.rec.action != 0 {
                        let rec = &self.rec;
                        let params = &rec.params[..rec.n];
                        if perform.csi_dispatch(
                            params,
                            rec.intermediates(),
                            rec.action,
                            &mut self.text,
                        ) {
                            self.drop_held();
                        } else {
                            self.release_held();
                        }
                        self.mode = Mode::Ground;
                    } else if self.rec.csi || self.rec.cancel || (0x40..=0x7e).contains(&b) {
                        self.release_held();
                        self.mode = Mode::Ground;
                    } else {
                        self.check_overflow(kind, perform);
                    }
                }
            }
            Kind::Osc => {
                if self.rec.osc {
                    match b {
                        ESC => self.mode = Mode::AwaitSt { kind },
                        BEL => {
                            let buf = mem::take(&mut self.buf);
                            self.finalize(kind, buf, Some(&[BEL]), perform);
                            self.mode = Mode::Ground;
                        }
                        _ => {
                            // CAN/SUB: the OSC is cancelled.
                            let buf = mem::take(&mut self.buf);
                            if perform.removes_osc(osc_payload(&buf)) {
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
                    self.check_overflow(kind, perform);
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
                        self.check_overflow(kind, perform);
                    }
                }
            }
        }
        1
    }

    /// ESC was seen and fed to vte in a context that starts a new sequence.
    fn start_seq_after_esc(&mut self) {
        self.decoder.finish_into(&mut self.text);
        self.started += 1;
        self.buf.clear();
        self.buf.push(ESC);
        self.mode = Mode::Seq {
            kind: Kind::Esc,
            esc_intermediate: false,
        };
    }

    /// Handles byte `b` (already fed to vte) of an ESC-kind sequence.
    fn after_esc_byte<P: Perform>(&mut self, b: u8, esc_intermediate: bool, perform: &mut P) {
        if b == ESC {
            // vte restarts the escape; release what we had and start over.
            self.release_held();
            self.start_seq_after_esc();
            return;
        }
        self.buf.push(b);
        if self.rec.esc && !self.rec.cancel {
            let rec = &self.rec;
            if perform.esc_dispatch(rec.intermediates(), rec.action, &mut self.text) {
                self.drop_held();
            } else {
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
            self.check_overflow(Kind::Esc, perform);
        }
    }

    /// Applies the give-up rule of [`MAX_SEQUENCE_BYTES`] when the held sequence is too long.
    fn check_overflow<P: Perform>(&mut self, kind: Kind, perform: &P) {
        if self.buf.len() <= MAX_SEQUENCE_BYTES {
            return;
        }
        self.vte = vte::Parser::new();
        if kind == Kind::Osc && perform.drops_overlong_osc(osc_payload(&self.buf)) {
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
    /// terminator bytes if they belong to it (BEL or ESC `\`). An OSC the performer does not
    /// remove is released verbatim first; then it is dispatched, with its text in front of it.
    fn finalize<P: Perform>(
        &mut self,
        kind: Kind,
        mut buf: Vec<u8>,
        terminator: Option<&[u8]>,
        perform: &mut P,
    ) {
        if kind == Kind::Dcs && perform.takes_dcs(&buf, &mut self.text) {
            self.recycle(buf);
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
        // `buf` holds `ESC ] payload`: the terminator is not in it yet.
        let end = buf.len();
        let removed = perform.removes_osc(osc_payload(&buf));
        let bell = terminator == Some(&[BEL][..]);
        if !removed && perform.takes_osc(osc_payload(&buf), bell, &mut self.text) {
            self.recycle(buf);
            return;
        }
        if !removed {
            if let Some(t) = terminator {
                buf.extend_from_slice(t);
            }
            self.decoder.decode_into(&buf, &mut self.text);
        }
        perform.osc_dispatch(osc_payload(&buf[..end]), &mut self.text);
        self.recycle(buf);
    }
}

/// Bytes after `ESC ]`.
fn osc_payload(buf: &[u8]) -> &[u8] {
    buf.get(2..).unwrap_or_default()
}

/// Longest CSI taken by the sequence fast path ([`inert_csi_len`]), in bytes.
const INERT_CSI_BYTES: usize = 64;

/// The length of the CSI at the start of `b` if it is complete there, short, and of a kind no
/// [`Perform`]er acts on: parameters only (digits, `;`, `:`; no private marker, no
/// intermediate) and a final byte that is neither a query (`n`, `c`, `t`) nor a mode or
/// margin change (`h`, `l`, `r`) — SGR, cursor movement, erasing, scrolling, which make up most
/// of a full-screen program's output. The slow path would hand such a CSI to
/// [`Perform::csi_dispatch`], which passes it through; the output is the same bytes.
fn inert_csi_len(b: &[u8]) -> Option<usize> {
    if b.get(1) != Some(&b'[') {
        return None;
    }
    let limit = b.len().min(INERT_CSI_BYTES);
    let params = b[2..limit]
        .iter()
        .position(|&c| !matches!(c, b'0'..=b'9' | b';' | b':'))?;
    let end = 2 + params;
    match b[end] {
        b'n' | b'c' | b't' | b'h' | b'l' | b'r' => None,
        0x40..=0x7e => Some(end + 1),
        _ => None,
    }
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

/// The length in bytes of the escape sequence at the start of `bytes` (which starts with ESC),
/// as [`Framer`] delimits it: up to its end, or up to the ESC that starts the next sequence,
/// or up to where it was given up for being longer than [`MAX_SEQUENCE_BYTES`]. `None` if it
/// does not end within `bytes`, or `bytes` does not start with ESC.
pub fn sequence_len(bytes: &[u8]) -> Option<usize> {
    if bytes.first() != Some(&ESC) {
        return None;
    }
    let mut framer = Framer::new();
    let mut pass = PassAll;
    let mut i = 0;
    while i < bytes.len() {
        let (started, mode) = (framer.started, framer.mode);
        i += framer.step(&bytes[i..=i], &mut pass);
        if i > 1 && framer.started != started {
            // Another sequence started: at the byte just taken (an ESC), or — when a control
            // string had ended on an ESC that this byte shows is not ST — at that ESC.
            return Some(if matches!(mode, Mode::AwaitSt { .. }) {
                i - 2
            } else {
                i - 1
            });
        }
        if matches!(
            framer.mode,
            Mode::Ground | Mode::Stream { .. } | Mode::Skip { .. }
        ) {
            return Some(i);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    //! The framing on its own; the shell-integration parser's tests
    //! (`shell_integration::parser::tests`) run it over many more streams.
    use super::*;

    /// Records what it is given; removes OSCs whose payload starts with `9;`.
    #[derive(Default)]
    struct Record {
        dispatched: Vec<(Vec<u8>, String)>,
    }

    impl Perform for Record {
        fn removes_osc(&self, payload: &[u8]) -> bool {
            payload.starts_with(b"9;")
        }
        fn osc_dispatch(&mut self, payload: &[u8], text: &mut String) {
            self.dispatched.push((payload.to_vec(), text.clone()));
        }
    }

    #[test]
    fn osc_payloads_are_dispatched_after_their_text_and_removed_on_request() {
        let mut f = Framer::new();
        let mut r = Record::default();
        f.advance(b"a\x1b]0;t\x07b\x1b]9;x\x1b\\c\x1b[1m", &mut r);
        f.finish(&mut r);
        assert_eq!(f.take_text().as_deref(), Some("a\x1b]0;t\x07bc\x1b[1m"));
        assert_eq!(
            r.dispatched,
            [
                (b"0;t".to_vec(), "a\x1b]0;t\x07".to_string()),
                (b"9;x".to_vec(), "a\x1b]0;t\x07b".to_string()),
            ]
        );
        assert_eq!(f.take_text(), None);
    }

    /// Pieces of pty output: what the fast path takes (text, SGR and other inert CSIs, whole
    /// or cut, one longer than it takes), UTF-8 cut into bytes, and what ends or breaks a
    /// sequence.
    fn piece() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let long = format!("\x1b[{}m", "1;".repeat(40)).into_bytes();
        prop_oneof![
            20 => proptest::sample::select(vec![
                &b"\x1b[1m"[..], b"\x1b[0;31m", b"\x1b[K", b"\x1b[12;40H", b"\x1b[38:5:1m",
                b"\x1b[", b"\x1b[1", b"\x1b[?25h", b"\x1b[6n", b"\x1b]0;t\x07", b"\x1b]0;",
                b"\x1bP1$q", b"\x1b\\", b"\x1b", b"\x1b(B", b"\x18", b"\x07", b"\x9c", b"\xe2",
                b"\x94", b"\x80", b"\xc3\xa9", b"\xf0\x9f", b"\xff", b"a", b"text ", b"\r\n",
            ])
            .prop_map(<[u8]>::to_vec),
            1 => Just(long),
        ]
    }

    /// The text a framer that removes nothing gives for `input` cut into reads at `cuts`.
    fn pass_through(input: &[u8], cuts: &[usize]) -> String {
        let mut f = Framer::new();
        let mut last = 0;
        for &c in cuts.iter().chain([&input.len()]) {
            let c = c.clamp(last, input.len());
            f.advance(&input[last..c], &mut PassAll);
            last = c;
        }
        f.finish(&mut PassAll);
        f.take_text().unwrap_or_default()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

        /// A framer that removes nothing passes every byte through as the lossy UTF-8 decoding
        /// of the whole stream (a partial character before an ESC is one U+FFFD), however the
        /// stream is cut into reads: in one, at random points, or a byte at a time (where no
        /// whole CSI is ever seen at once).
        #[test]
        fn framing_without_removals_is_lossy_decoding_however_cut(
            pieces in proptest::collection::vec(piece(), 0..40),
            mut cuts in proptest::collection::vec(0usize..400, 0..6),
        ) {
            let input = pieces.concat();
            let want = String::from_utf8_lossy(&input).into_owned();
            proptest::prop_assert_eq!(&pass_through(&input, &[]), &want);
            cuts.sort_unstable();
            proptest::prop_assert_eq!(&pass_through(&input, &cuts), &want);
            let bytes: Vec<usize> = (1..input.len()).collect();
            proptest::prop_assert_eq!(&pass_through(&input, &bytes), &want);
        }
    }

    #[test]
    fn sequence_lengths() {
        let len = |b: &[u8]| sequence_len(b);
        assert_eq!(len(b"\x1b[38;5;196mred"), Some(11));
        assert_eq!(len(b"\x1b]0;title\x07after"), Some(10));
        assert_eq!(len(b"\x1b]0;title\x1b\\after"), Some(11));
        assert_eq!(len(b"\x1bP1$r0m\x1b\\x"), Some(9));
        assert_eq!(len(b"\x1b(Bx"), Some(3));
        assert_eq!(len(b"\x1b7x"), Some(2));
        // Interrupted by the next sequence: up to its ESC.
        assert_eq!(len(b"\x1b[12\x1b[m"), Some(4));
        assert_eq!(len(b"\x1b]0;t\x1b[m"), Some(5));
        // Cancelled by CAN: up to and with it.
        assert_eq!(len(b"\x1b[1\x18x"), Some(4));
        // Unfinished, or not a sequence.
        assert_eq!(len(b"\x1b]0;still going"), None);
        assert_eq!(len(b"x\x1b[m"), None);
        assert_eq!(len(b""), None);
    }
}
