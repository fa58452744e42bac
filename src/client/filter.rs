//! What `attach` keeps from the person's terminal: the remote program's clipboard writes and
//! every query the person's terminal would answer.
//!
//! `attach` copies the remote output to the local terminal, and the local terminal's answers
//! arrive on stdin, which `attach` types into the remote pty. A program could thus read the
//! person's clipboard, font, colours or terminal identity, or set the person's clipboard
//! (OSC 52), from a terminal it shares with them. [`QueryFilter`] removes from the stream,
//! whole:
//!
//! - clipboard writes: OSC 52, OSC 5522 (kitty) and iTerm2's `OSC 1337;Copy=` — kept with
//!   `--allow-clipboard`; clipboard reads (`OSC 52;c;?`, kitty's `type=read`) always go;
//! - OSC queries: any OSC but the titles (0, 1, 2) with a `?` field (OSC 4/5/10–19/104 colour
//!   queries …), OSC 50 (font, set or query), OSC 60/61 (allowed features), iTerm2's
//!   `OSC 1337;Report…` and `RequestUpload`, kitty's OSC 99 (notifications) and OSC 21
//!   (colours) with a `?` value (`p=?`, `foreground=?`);
//! - an OSC whose number is not a decimal integer. The number is read as emulators read it:
//!   without the C0 controls they skip inside a string (0x00–0x06, 0x08–0x17, 0x19,
//!   0x1C–0x1F), as an integer (`052` is 52), so `ESC ] 5 \x01 2 ;` is OSC 52;
//! - DCS requests: DECRQSS (`DCS $ q`), XTGETTCAP (`DCS + q`), XTGETXRES (`DCS + Q`), and
//!   tmux passthrough (`DCS tmux;`), which would carry any of these to an outer terminal;
//! - APC: kitty graphics commands that are not quiet (the last `q` key is not 2), since the
//!   terminal answers them;
//! - CSI reports: DSR and DECXCPR (`n`, `?n`), DA1/DA2/DA3 (`c`, `>c`, `=c`), XTVERSION
//!   (`>q`), DECRQM (`$p`, `?$p`), XTWINOPS reports (`11/13/14/15/16/18/19/20/21 t`),
//!   DECREQTPARM (`x`), XTQMODKEYS (`?m`), the kitty keyboard query (`?u`), XTSMGRAPHICS
//!   (`?S`), DECRQPSR (`$w`), DECRQTSR (`$u`), DECRQUPSS (`&u`), DECRQDE (`"v`), DECRQCRA
//!   (`*y`), XTREPORTCOLORS (`#R`), DECRQLP (`'|`);
//! - DECID (`ESC Z`) and ENQ (0x05, answered with the answerback string).
//!
//! Everything else passes unchanged. Both 7-bit (`ESC ]`) and 8-bit (U+009D …) introducers
//! count; inside a string (OSC, DCS, APC, PM, SOS) an ESC not followed by `\`, CAN, SUB or
//! any C1 introducer ends it, as the DEC parser has it, so what follows is judged afresh.
//! Sequences may be split anywhere across chunks: the part of a sequence not yet judged is
//! held (at most [`CSI_MAX`] bytes of a CSI, [`STRING_HEAD`] bytes of a string), and a string
//! is judged on its first [`STRING_HEAD`] bytes when it is longer, then streamed or dropped
//! to its end. A CSI longer than [`CSI_MAX`] is dropped (terminals ignore them). Memory is
//! thus bounded whatever the program prints, and each byte is looked at once.
//!
//! Pure state over the output stream; touches nothing.

/// Longest CSI held to be judged, in bytes; a longer one is dropped.
pub const CSI_MAX: usize = 256;

/// Bytes of a string (OSC, DCS, APC, PM, SOS) held before it is judged on them.
pub const STRING_HEAD: usize = 1024;

/// Longest ESC sequence (ESC, intermediates, final) held, in bytes; a longer one is dropped.
const ESC_MAX: usize = 16;

const ESC: char = '\x1b';
const BEL: char = '\x07';
const ENQ: char = '\x05';
const CAN: char = '\x18';
const SUB: char = '\x1a';
const C1_ST: char = '\u{9c}';

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Osc,
    Dcs,
    Apc,
    /// A tmux passthrough DCS (`DCS tmux; … ST`, its ESCs doubled): dropped.
    Tmux,
    /// PM and SOS: nothing answers them; they pass.
    Other,
}

/// A string of `kind` whose head is being held.
fn str_state(kind: Kind) -> State {
    State::Str { kind, pass: None }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ground,
    /// After ESC (and perhaps intermediates), in `held`.
    Esc,
    /// In a CSI, held.
    Csi,
    /// In a CSI too long to hold: dropped to its final byte.
    CsiDrop,
    /// In a string: `pass` is `None` while its head is held, then whether it is copied.
    Str {
        kind: Kind,
        pass: Option<bool>,
    },
    /// An ESC inside a string: `\` ends the string, anything else aborts it.
    StrEsc {
        kind: Kind,
        pass: Option<bool>,
    },
}

/// Removes clipboard writes and queries from a stream of terminal output (see the module
/// documentation for what goes).
#[derive(Debug)]
pub struct QueryFilter {
    allow_clipboard: bool,
    state: State,
    /// The sequence being judged, introducer included (ESC, CSI or the string's head).
    held: String,
}

impl QueryFilter {
    /// A filter at the start of a stream; `allow_clipboard` keeps clipboard writes.
    pub fn new(allow_clipboard: bool) -> QueryFilter {
        QueryFilter {
            allow_clipboard,
            state: State::Ground,
            held: String::new(),
        }
    }

    /// Starts over at the start of a stream (a repaint), dropping any sequence held.
    pub fn reset(&mut self) {
        self.state = State::Ground;
        self.held.clear();
    }

    /// `text` without what the filter removes; a sequence `text` ends inside of is held for
    /// the next call.
    pub fn filter(&mut self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while !rest.is_empty() {
            if self.state == State::Ground {
                // Plain text up to the next ESC, ENQ or (in UTF-8) C1 control.
                let n = rest
                    .bytes()
                    .position(|b| matches!(b, 0x1b | 0x05 | 0xc2))
                    .unwrap_or(rest.len());
                out.push_str(&rest[..n]);
                rest = &rest[n..];
            }
            let mut chars = rest.chars();
            let Some(c) = chars.next() else { break };
            rest = chars.as_str();
            self.step(c, &mut out);
        }
        out
    }

    fn step(&mut self, c: char, out: &mut String) {
        match self.state {
            State::Ground => self.ground(c, out),
            State::Esc => self.esc(c, out),
            State::Csi | State::CsiDrop => self.csi(c, out),
            State::Str { kind, pass } => self.string(kind, pass, c, out),
            State::StrEsc { kind, pass } => {
                if c == ESC && kind == Kind::Tmux {
                    // A doubled ESC: the string goes on.
                    self.state = State::Str { kind, pass };
                } else if c == '\\' {
                    self.end_string(kind, pass, "\x1b\\", out);
                } else {
                    // Aborted: judged as it stands, and the ESC begins a new sequence.
                    self.end_string(kind, pass, "", out);
                    self.begin(ESC, State::Esc);
                    self.esc(c, out);
                }
            }
        }
    }

    fn begin(&mut self, introducer: char, state: State) {
        self.held.clear();
        self.held.push(introducer);
        self.state = state;
    }

    /// A character outside any sequence, or one that ended a sequence without belonging to it.
    fn ground(&mut self, c: char, out: &mut String) {
        self.state = State::Ground;
        match c {
            ESC => self.begin(c, State::Esc),
            '\u{9b}' => self.begin(c, State::Csi),
            '\u{9d}' => self.begin_string(c, Kind::Osc),
            '\u{90}' => self.begin_string(c, Kind::Dcs),
            '\u{9f}' => self.begin_string(c, Kind::Apc),
            '\u{98}' | '\u{9e}' => self.begin_string(c, Kind::Other),
            ENQ => {}
            c => out.push(c),
        }
    }

    fn begin_string(&mut self, introducer: char, kind: Kind) {
        self.begin(introducer, str_state(kind));
    }

    /// Controls met inside an escape or control sequence: executed by the terminal as they
    /// come (so copied), except ESC, CAN and SUB, which end the sequence, and ENQ.
    /// `true` when `c` was one of them.
    fn control_inside(&mut self, c: char, out: &mut String) -> bool {
        match c {
            ESC => self.begin(c, State::Esc),
            CAN | SUB => {
                self.reset();
                out.push(c);
            }
            ENQ => {}
            '\x00'..='\x1f' => out.push(c),
            '\x7f' => {}
            _ => return false,
        }
        true
    }

    fn esc(&mut self, c: char, out: &mut String) {
        if self.control_inside(c, out) {
            return;
        }
        let intermediates = self.held.len() > 1;
        let into = match c {
            '[' if !intermediates => Some(State::Csi),
            ']' if !intermediates => Some(str_state(Kind::Osc)),
            'P' if !intermediates => Some(str_state(Kind::Dcs)),
            '_' if !intermediates => Some(str_state(Kind::Apc)),
            'X' | '^' if !intermediates => Some(str_state(Kind::Other)),
            _ => None,
        };
        if let Some(state) = into {
            // The held text keeps its `ESC`: it is copied whole when it passes.
            self.held.push(c);
            self.state = state;
            return;
        }
        match c {
            // DECID: answered like DA1.
            'Z' if !intermediates => {
                self.reset();
            }
            ' '..='/' => {
                self.held.push(c);
                if self.held.len() > ESC_MAX {
                    self.reset();
                }
            }
            '0'..='~' => self.finish(true, c.encode_utf8(&mut [0; 4]), out),
            // Not an escape sequence: dropped, and `c` is read afresh.
            _ => {
                self.held.clear();
                self.ground(c, out);
            }
        }
    }

    fn csi(&mut self, c: char, out: &mut String) {
        if self.control_inside(c, out) {
            return;
        }
        match c {
            ' '..='?' => {
                if self.state == State::Csi {
                    self.held.push(c);
                    if self.held.len() > CSI_MAX {
                        self.held.clear();
                        self.state = State::CsiDrop;
                    }
                }
            }
            '@'..='~' => {
                let pass = self.state == State::Csi && !is_csi_query(csi_body(&self.held), c);
                self.finish(pass, c.encode_utf8(&mut [0; 4]), out);
            }
            // Not a control sequence: dropped, and `c` is read afresh.
            _ => {
                self.held.clear();
                self.ground(c, out);
            }
        }
    }

    fn string(&mut self, kind: Kind, pass: Option<bool>, c: char, out: &mut String) {
        match c {
            ESC => self.state = State::StrEsc { kind, pass },
            BEL if kind == Kind::Osc => self.end_string(kind, pass, "\x07", out),
            C1_ST => self.end_string(kind, pass, "\u{9c}", out),
            CAN | SUB | '\u{80}'..='\u{9f}' => {
                self.end_string(kind, pass, "", out);
                self.ground(c, out);
            }
            ENQ => {}
            c => match pass {
                None => {
                    self.held.push(c);
                    if self.held.len() >= STRING_HEAD {
                        let pass = self.judge(kind, false);
                        if pass {
                            out.push_str(&self.held);
                        }
                        self.held.clear();
                        self.state = State::Str {
                            kind,
                            pass: Some(pass),
                        };
                    }
                }
                Some(true) => out.push(c),
                Some(false) => {}
            },
        }
        if kind == Kind::Dcs && pass.is_none() && string_body(&self.held) == "tmux;" {
            self.held.clear();
            self.state = State::Str {
                kind: Kind::Tmux,
                pass: Some(false),
            };
        }
    }

    /// The end of a string, by `terminator` (empty when aborted).
    fn end_string(&mut self, kind: Kind, pass: Option<bool>, terminator: &str, out: &mut String) {
        let pass = pass.unwrap_or_else(|| self.judge(kind, true));
        self.finish(pass, terminator, out);
    }

    /// The end of the sequence held, by `last`: both go out when `pass`; back to ground.
    fn finish(&mut self, pass: bool, last: &str, out: &mut String) {
        if pass {
            out.push_str(&self.held);
            out.push_str(last);
        }
        self.reset();
    }

    /// Whether the held string passes; `complete` when it ended (else only its head is held).
    fn judge(&self, kind: Kind, complete: bool) -> bool {
        let body = string_body(&self.held);
        match kind {
            Kind::Osc => osc_passes(body, complete, self.allow_clipboard),
            Kind::Dcs => dcs_passes(body),
            Kind::Apc => apc_passes(body),
            Kind::Tmux => false,
            Kind::Other => true,
        }
    }
}

/// A held CSI without its introducer (`ESC [` or U+009B).
fn csi_body(held: &str) -> &str {
    held.strip_prefix("\x1b[")
        .or_else(|| held.strip_prefix('\u{9b}'))
        .unwrap_or(held)
}

/// A held string without its introducer (`ESC ]`, `ESC P` … or its C1 form).
fn string_body(held: &str) -> &str {
    let mut chars = held.chars();
    if chars.next() == Some(ESC) {
        chars.next();
    }
    chars.as_str()
}

/// Whether the CSI with parameter and intermediate bytes `body` and final byte `fin` asks the
/// terminal for an answer.
fn is_csi_query(body: &str, fin: char) -> bool {
    let (prefix, rest) = match body.chars().next() {
        Some(p @ '<'..='?') => (Some(p), &body[1..]),
        _ => (None, body),
    };
    let split = rest
        .find(|c: char| (' '..='/').contains(&c))
        .unwrap_or(rest.len());
    let (params, intermediates) = rest.split_at(split);
    let first = params
        .split([';', ':'])
        .next()
        .and_then(|p| p.parse::<u32>().ok())
        .unwrap_or(0);
    match (prefix, intermediates, fin) {
        (None | Some('?'), "", 'n') => true,
        (None | Some('>') | Some('='), "", 'c') => true,
        (Some('>'), "", 'q') => true,
        (None | Some('?'), "$", 'p') => true,
        (None, "", 't') => matches!(first, 11 | 13 | 14 | 15 | 16 | 18 | 19 | 20 | 21),
        (None, "", 'x') => true,
        (Some('?'), "", 'm' | 'u' | 'S') => true,
        (None, "$", 'w' | 'u') => true,
        (None, "&", 'u') => true,
        (None, "\"", 'v') => true,
        (None, "*", 'y') => true,
        // XTREPORTCOLORS, DECRQLP.
        (None, "#", 'R') => true,
        (None, "'", '|') => true,
        _ => false,
    }
}

/// Whether `c` is a C0 control that emulators (xterm, VTE, alacritty, wezterm) skip inside a
/// string: 0x00–0x06, 0x08–0x17, 0x19, 0x1C–0x1F. (BEL ends an OSC; CAN, SUB and ESC end any
/// string; ENQ never reaches the held text.)
fn ignored_in_string(c: char) -> bool {
    matches!(c, '\x00'..='\x06' | '\x08'..='\x17' | '\x19' | '\x1c'..='\x1f')
}

/// The OSC number the way an emulator reads it: the decimal digits before the first `;` as an
/// integer, leading zeros allowed; `None` when they are no such number (judged a drop).
fn osc_number(number: &str) -> Option<u32> {
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    number.parse().ok()
}

/// Whether an OSC with text `body` (`NUMBER;…`) passes. It is judged as the emulator sees it:
/// without the C0 controls it skips, and on the integer value of its number.
fn osc_passes(body: &str, complete: bool, allow_clipboard: bool) -> bool {
    let seen: String = body.chars().filter(|&c| !ignored_in_string(c)).collect();
    if !complete && !seen.contains(';') {
        // The number goes on past the head (`0000…052`): not known, so dropped.
        return false;
    }
    let (number, payload) = seen.split_once(';').unwrap_or((&seen, ""));
    // The fields known whole: all when the string ended, else those a `;` closed.
    let mut fields: Vec<&str> = payload.split(';').collect();
    if !complete {
        fields.pop();
    }
    // A `?` value of a `key=value` (or `:`-separated) field: kitty's queries.
    let asks = |f: &&str| f.contains("=?") || f.contains(":?");
    let Some(number) = osc_number(number) else {
        // Not a number an emulator acts on — or one the head was too short to show: dropped.
        return false;
    };
    match number {
        0..=2 => true,
        50 | 60 | 61 => false,
        // Pc;Pd: Pd `?` reads the clipboard.
        52 => allow_clipboard && payload.split_once(';').is_some_and(|(_, d)| d != "?"),
        // metadata;payload: `type=read` reads it.
        5522 => allow_clipboard && !fields.first().is_some_and(|m| m.contains("type=read")),
        1337 => {
            if payload.starts_with("Copy=") {
                allow_clipboard
            } else {
                !(payload.starts_with("Report") || payload.starts_with("RequestUpload"))
            }
        }
        // kitty notifications (`99;i=1:p=?;`): the metadata, judged once known whole.
        99 => {
            let metadata = if complete || payload.contains(';') {
                payload.split(';').next()
            } else {
                None
            };
            metadata.is_some_and(|m| !asks(&m) && m != "?")
        }
        // kitty colour control (`21;foreground=?`): judged whole, else dropped.
        21 => complete && !fields.iter().any(|f| asks(f) || *f == "?"),
        _ => !fields.contains(&"?"),
    }
}

/// Whether a DCS with text `body` (parameters, intermediates, final, data) passes.
fn dcs_passes(body: &str) -> bool {
    let header: String = body
        .chars()
        .filter(|c| !c.is_ascii_control())
        .skip_while(|c| ('0'..='?').contains(c))
        .take_while(|c| (' '..='/').contains(c))
        .collect();
    let fin = body
        .chars()
        .filter(|c| !c.is_ascii_control())
        .find(|c| !(' '..='?').contains(c));
    // DECRQSS (`$q`), XTGETTCAP (`+q`), XTGETXRES (`+Q`).
    !matches!(
        (header.as_str(), fin),
        ("$" | "+", Some('q')) | ("+", Some('Q'))
    )
}

/// Whether an APC with text `body` passes: kitty graphics (`G…`) only when quiet, that is when
/// the last `q` key of its control data is 2 (kitty takes the last of a repeated key).
fn apc_passes(body: &str) -> bool {
    let seen: String = body.chars().filter(|&c| !ignored_in_string(c)).collect();
    match seen.strip_prefix('G') {
        Some(rest) => {
            let control = rest.split(';').next().unwrap_or("");
            let quiet = control
                .split(',')
                .filter_map(|kv| kv.strip_prefix("q="))
                .next_back();
            quiet.and_then(|q| q.parse::<u32>().ok()) == Some(2)
        }
        None => true,
    }
}

#[cfg(test)]
mod tests;
