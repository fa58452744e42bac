//! The shell-integration parser: pty bytes in, text and [`Mark`]s out, in stream order.
//!
//! Job: interpret the OSC payloads that the escape-sequence framer ([`crate::terminal::escape`],
//! whose [`Perform`] this implements) delimits. Shell-integration OSCs are removed from the
//! output and become marks: OSC 633 (VS Code's shell integration: `A` prompt start, `B`
//! command start, `C` executed, `D[;exit]` finished, `E;cmdline[;nonce]`, `P;key=value`),
//! OSC 133 (FinalTerm's semantic prompts: `A`–`D`) and OSC 1337 `CurrentDir`,
//! `ShellIntegrationVersion` and `RemoteHost` (iTerm2's proprietary codes). Titles (OSC 0 and
//! 2, xterm ctlseqs) and OSC 7 cwd reports (`file://host/path`) pass through *and* are
//! reported as marks. Every other byte passes through unchanged. Touches nothing but its own
//! state.
//!
//! Departures from what a terminal emulator would do with the same sequences:
//! - with [`OutputParser::signed`], only OSC 633 marks that end with the terminal's nonce are
//!   believed (any program can print a mark); OSC 133 and 1337 are then stripped and ignored;
//! - an `E` command line is trusted only with the nonce as its last field, which is removed;
//! - exit codes outside the 32-bit signed range are reported as unknown;
//! - the host of an OSC 7 URL is not checked (the path is what matters here);
//! - titles lose their control characters and are cut to [`MAX_TITLE_CHARS`] characters.
//!
//! Terminal queries (cursor position, device attributes, mode and colour reports, …; see
//! [`crate::terminal::model::query`]) are removed too and reported as [`Parsed::Query`], so
//! that the host answers them and no client ever sees one. A live [`ModeTracker`] follows the
//! modes set by the sequences going through, for DECRQM reports.

use std::mem;

use crate::terminal::escape::{Framer, FramerCarry, Perform};

/// What an [`OutputParser`] holds back between two reads (its framer's state); carried across a
/// live upgrade (docs/upgrade.md).
pub type ParserCarry = FramerCarry;
use crate::terminal::model::{query, ModeTracker, Query};

/// Longest title reported by [`Mark::Title`], in chars (Unicode scalar values), after control
/// characters have been removed. Longer titles are cut to this length.
pub const MAX_TITLE_CHARS: usize = 4096;

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
pub enum Parsed {
    /// Output for clients: valid UTF-8, never holding a shell-integration sequence, never ending
    /// inside a character.
    Text(String),
    /// A mark found at this point of the stream.
    Mark(Mark),
    /// A terminal query found (and removed) at this point of the stream.
    Query(Query),
}

/// Streaming parser for one terminal's pty output. See the module docs.
pub struct OutputParser {
    nonce: String,
    /// Marks are trusted only when signed with the nonce (see [`OutputParser::signed`]).
    require_nonce: bool,
    framer: Framer,
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
            framer: Framer::new(),
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
    /// Consecutive text is merged into one [`Parsed::Text`] per call where possible.
    /// Incomplete UTF-8 tails and unfinished sequences are held (bounded by
    /// [`MAX_SEQUENCE_BYTES`](crate::terminal::escape::MAX_SEQUENCE_BYTES)) until later calls
    /// or [`finish`](Self::finish).
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<Parsed>) {
        let mut marks = Marks {
            nonce: &self.nonce,
            require_nonce: self.require_nonce,
            modes: &mut self.modes,
            out,
        };
        self.framer.advance(bytes, &mut marks);
        if let Some(text) = self.framer.take_text() {
            marks.out.push(Parsed::Text(text));
        }
    }

    /// What this parser holds back (see [`ParserCarry`]); the parser itself is left as is.
    /// Called between two [`feed`](Self::feed)s.
    pub fn suspend(&self) -> ParserCarry {
        self.framer.suspend()
    }

    /// Restores the state [`suspend`](Self::suspend) described into this parser, which must be
    /// fresh. Emits nothing: the carried bytes were held back, not yet emitted.
    pub fn resume(&mut self, carry: &ParserCarry) {
        let mut out = Vec::new();
        let mut marks = Marks {
            nonce: &self.nonce,
            require_nonce: self.require_nonce,
            modes: &mut self.modes,
            out: &mut out,
        };
        self.framer.resume(carry, &mut marks);
        debug_assert!(out.is_empty());
    }

    /// Ends the stream (EOF): releases anything held. An unfinished non-integration sequence is
    /// released verbatim, an unfinished integration OSC is dropped, and a dangling partial UTF-8
    /// sequence becomes one U+FFFD.
    pub fn finish(&mut self, out: &mut Vec<Parsed>) {
        let mut marks = Marks {
            nonce: &self.nonce,
            require_nonce: self.require_nonce,
            modes: &mut self.modes,
            out,
        };
        self.framer.finish(&mut marks);
        if let Some(text) = self.framer.take_text() {
            marks.out.push(Parsed::Text(text));
        }
    }
}

/// The framer's performer during one `feed`: removes the integration OSCs and turns OSCs into
/// marks, removes terminal queries and reports them, each after the text that precedes it,
/// and follows the modes the other sequences set.
struct Marks<'a> {
    nonce: &'a str,
    require_nonce: bool,
    modes: &'a mut ModeTracker,
    out: &'a mut Vec<Parsed>,
}

impl Marks<'_> {
    /// Reports `query` after the text framed so far.
    fn query(&mut self, query: Query, text: &mut String) {
        if !text.is_empty() {
            self.out.push(Parsed::Text(mem::take(text)));
        }
        self.out.push(Parsed::Query(query));
    }
}

impl Perform for Marks<'_> {
    fn removes_osc(&self, payload: &[u8]) -> bool {
        is_integration_osc(payload)
    }

    fn drops_overlong_osc(&self, payload: &[u8]) -> bool {
        is_integration_osc(payload) || query::is_colour_osc(payload)
    }

    fn osc_dispatch(&mut self, payload: &[u8], text: &mut String) {
        if let Some(mark) = osc_mark(payload, self.nonce, self.require_nonce) {
            if !text.is_empty() {
                self.out.push(Parsed::Text(mem::take(text)));
            }
            self.out.push(Parsed::Mark(mark));
        }
    }

    fn takes_osc(&mut self, payload: &[u8], bell: bool, text: &mut String) -> bool {
        let Some(queries) = query::osc(payload, bell) else {
            return false;
        };
        for q in queries {
            self.query(q, text);
        }
        true
    }

    fn csi_dispatch(
        &mut self,
        params: &[u16],
        intermediates: &[u8],
        action: u8,
        text: &mut String,
    ) -> bool {
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
                self.query(q, text);
                true
            }
            None => {
                self.modes.csi(params, intermediates, action, 0);
                false
            }
        }
    }

    fn esc_dispatch(&mut self, intermediates: &[u8], action: u8, text: &mut String) -> bool {
        if intermediates.is_empty() && action == b'Z' {
            // DECID: the old form of DA1.
            self.query(Query::PrimaryAttributes, text);
            return true;
        }
        self.modes.esc(intermediates, action);
        false
    }

    fn takes_dcs(&mut self, sequence: &[u8], text: &mut String) -> bool {
        if !query::dcs(sequence) {
            return false;
        }
        self.query(Query::Unanswered, text);
        true
    }
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

/// The mark a complete OSC reports, if any: a shell-integration mark (for the signed parser,
/// only signed OSC 633 ones), a title or a cwd.
fn osc_mark(payload: &[u8], nonce: &str, require_nonce: bool) -> Option<Mark> {
    let (num, rest) = split_once(payload, b';');
    match num {
        b"633" if require_nonce => rest.and_then(|r| parse_signed_633(r, nonce)),
        // Unsigned marks are believed here, but a signature, if present, is not data.
        b"633" => rest.and_then(|r| parse_signed_633(r, nonce).or_else(|| parse_633(r, nonce))),
        b"133" if require_nonce => None,
        b"133" => rest.and_then(parse_133),
        b"1337" if require_nonce => None,
        b"1337" => match split_once(rest.unwrap_or_default(), b'=') {
            (b"CurrentDir", Some(v)) if !v.is_empty() => {
                Some(Mark::Cwd(String::from_utf8_lossy(v).into_owned()))
            }
            _ => None,
        },
        b"0" | b"2" => rest.map(|t| Mark::Title(clean_title(t))),
        b"7" => rest.and_then(parse_osc7).map(Mark::Cwd),
        _ => None,
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
mod tests;
