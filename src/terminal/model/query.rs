//! Terminal queries: sequences by which a program asks its terminal something and waits for a
//! reply on its input. The output parser recognises them, removes them from what clients
//! receive (so no client's emulator answers too, and no replay or snapshot ever asks a client
//! anything) and reports each as a [`Query`], in stream order; [`answer`] builds the replies
//! the host writes to the pty.
//!
//! Answered: DSR `CSI 5 n`, CPR `CSI 6 n`, DECXCPR `CSI ? 6 n`, DA1 (`CSI c`, `CSI 0 c`,
//! `ESC Z`), DA2 (`CSI > c`), XTVERSION (`CSI > q`), DECRQM (`CSI Ps $ p`, `CSI ? Ps $ p`),
//! XTWINOPS 18/19 (`CSI 18 t`, `CSI 19 t`) and OSC 10/11/12 `?`. Removed without an answer
//! (as by a terminal without the feature): every other DSR (`CSI ? Ps n`), DA3, the other
//! XTWINOPS reports, the kitty keyboard query `CSI ? u`, XTQMODKEYS `CSI ? Ps m`, OSC 4 and
//! OSC 52 queries, DECRQSS (`DCS $ q`) and XTGETTCAP (`DCS + q`).
//!
//! Pure functions and values; touches nothing.

use crate::config::{ReportColors, Rgb};

/// One query found in the output. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Query {
    /// DSR `CSI 5 n`: "are you OK?".
    Status,
    /// CPR `CSI 6 n`, or DECXCPR `CSI ? 6 n` when `extended`.
    CursorPosition {
        /// DECXCPR (the reply carries the page).
        extended: bool,
    },
    /// DA1 (`CSI c`, `CSI 0 c`, `ESC Z`).
    PrimaryAttributes,
    /// DA2 (`CSI > c`, `CSI > 0 c`).
    SecondaryAttributes,
    /// XTVERSION (`CSI > q`, `CSI > 0 q`).
    Version,
    /// DECRQM for `mode` (DEC private when `private`), with the report the live mode tracker
    /// gave at this point of the stream (0 not recognised, 1 set, 2 reset).
    Mode {
        /// DEC private mode (`CSI ? Ps $ p`) rather than ANSI (`CSI Ps $ p`).
        private: bool,
        /// The mode number.
        mode: u16,
        /// 0, 1 or 2.
        report: u8,
    },
    /// XTWINOPS `CSI 18 t` (text area) or `CSI 19 t` (screen), in characters.
    WindowSize {
        /// 18 or 19.
        op: u16,
    },
    /// OSC 10 (foreground), 11 (background) or 12 (cursor colour) `?`, terminated by BEL
    /// (`bell`) or ST.
    Color {
        /// 10, 11 or 12.
        which: u16,
        /// The query ended with BEL (the reply does too).
        bell: bool,
    },
    /// A query ahpty removes but does not answer.
    Unanswered,
}

/// How a query is answered (see [`answer`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Reply {
    /// These bytes, written to the pty in turn.
    Bytes(Vec<u8>),
    /// The cursor position at the query's point of the stream (from the terminal model).
    CursorPosition {
        /// DECXCPR form.
        extended: bool,
    },
    /// The terminal's size in characters: `CSI 8 ; rows ; cols t` (op 18) or `CSI 9 ; …`
    /// (op 19).
    WindowSize {
        /// 18 or 19.
        op: u16,
    },
}

/// DA1 reply: a VT100 with advanced video (what xterm.js, VS Code's emulator, answers).
pub const PRIMARY_ATTRIBUTES: &[u8] = b"\x1b[?1;2c";

/// DA2 reply (xterm.js's).
pub const SECONDARY_ATTRIBUTES: &[u8] = b"\x1b[>0;276;0c";

/// The reply to `query`, if it has one; `colors` answers OSC 10/11/12.
pub fn answer(query: &Query, colors: &ReportColors) -> Option<Reply> {
    let bytes = match query {
        Query::Status => b"\x1b[0n".to_vec(),
        Query::CursorPosition { extended } => {
            return Some(Reply::CursorPosition {
                extended: *extended,
            })
        }
        Query::WindowSize { op } => return Some(Reply::WindowSize { op: *op }),
        Query::PrimaryAttributes => PRIMARY_ATTRIBUTES.to_vec(),
        Query::SecondaryAttributes => SECONDARY_ATTRIBUTES.to_vec(),
        Query::Version => format!("\x1bP>|ahpty {}\x1b\\", env!("CARGO_PKG_VERSION")).into_bytes(),
        Query::Mode {
            private,
            mode,
            report,
        } => format!("\x1b[{}{mode};{report}$y", if *private { "?" } else { "" }).into_bytes(),
        Query::Color { which, bell } => {
            let c = match which {
                10 => colors.foreground,
                11 => colors.background,
                _ => colors.cursor,
            };
            let end = if *bell { "\x07" } else { "\x1b\\" };
            format!("\x1b]{which};{}{end}", xparse(c)).into_bytes()
        }
        Query::Unanswered => return None,
    };
    Some(Reply::Bytes(bytes))
}

/// `rgb:RRRR/GGGG/BBBB`, the form xterm answers colour queries in.
fn xparse(c: Rgb) -> String {
    let w = |v: u8| u16::from(v) * 257;
    format!("rgb:{:04x}/{:04x}/{:04x}", w(c.0), w(c.1), w(c.2))
}

/// The query a CSI sequence is, if it is one. `params` holds the first sub-parameter of each
/// parameter (0 where omitted), `intermediates` the private marker and intermediates.
/// DECRQM comes back with a report of 0; the caller fills it in from its mode tracker.
pub fn csi(params: &[u16], intermediates: &[u8], action: u8) -> Option<Query> {
    let first = params.first().copied().unwrap_or(0);
    let single = params.len() <= 1;
    Some(match (intermediates, action) {
        (b"", b'n') if single && first == 5 => Query::Status,
        (b"", b'n') if single && first == 6 => Query::CursorPosition { extended: false },
        (b"?", b'n') if single && first == 6 => Query::CursorPosition { extended: true },
        (b"?", b'n') => Query::Unanswered,
        (b"", b'c') if single && first == 0 => Query::PrimaryAttributes,
        (b">", b'c') if single && first == 0 => Query::SecondaryAttributes,
        (b"=", b'c') => Query::Unanswered,
        (b">", b'q') if single && first == 0 => Query::Version,
        (b"$", b'p') | (b"?$", b'p') if single => Query::Mode {
            private: intermediates.first() == Some(&b'?'),
            mode: first,
            report: 0,
        },
        (b"", b't') if matches!(first, 18 | 19) => Query::WindowSize { op: first },
        (b"", b't') if matches!(first, 11 | 13 | 14 | 15 | 16 | 20 | 21) => Query::Unanswered,
        (b"?", b'u') | (b"?", b'm') => Query::Unanswered,
        _ => return None,
    })
}

/// The queries an OSC payload (the bytes after `ESC ]`, without the terminator) holds, if it
/// is a query: one [`Query::Color`] per `?` of an OSC 10/11/12 (`OSC 10;?;?` asks for the
/// foreground and the background), or [`Query::Unanswered`] for OSC 4 and 52 queries. Such an
/// OSC is removed whole, together with any colour it also sets.
pub fn osc(payload: &[u8], bell: bool) -> Option<Vec<Query>> {
    let mut fields = payload.split(|&b| b == b';');
    let num = fields.next()?;
    let rest: Vec<&[u8]> = fields.collect();
    if !rest.contains(&&b"?"[..]) {
        return None;
    }
    match num {
        b"10" | b"11" | b"12" => {
            let base: u16 = if num == b"10" {
                10
            } else if num == b"11" {
                11
            } else {
                12
            };
            // Only the fields up to OSC 12 name a colour: a payload of any length yields at
            // most three queries, and the fields after those are never looked at.
            let fields = usize::from(13 - base);
            Some(
                rest.iter()
                    .take(fields)
                    .zip(base..)
                    .filter(|(f, _)| **f == b"?")
                    .map(|(_, which)| Query::Color { which, bell })
                    .collect(),
            )
        }
        b"4" | b"52" => Some(vec![Query::Unanswered]),
        _ => None,
    }
}

/// Whether an OSC payload (possibly incomplete) is a colour sequence: OSC 4 (palette), 5
/// (special colours) or 10–19 (dynamic colours), which set or query colours. None is ever
/// near [`MAX_SEQUENCE_BYTES`](crate::terminal::escape::MAX_SEQUENCE_BYTES) long, so an
/// over-long one is dropped whole rather than released as text: its tail is a query a
/// client's emulator would answer.
pub fn is_colour_osc(payload: &[u8]) -> bool {
    let num = payload.split(|&b| b == b';').next().unwrap_or_default();
    matches!(
        num,
        b"4" | b"5" | b"10" | b"11" | b"12" | b"13" | b"14" | b"15" | b"16" | b"17" | b"18" | b"19"
    ) && payload.len() > num.len()
}

/// Whether a DCS (`buf` holds `ESC P` and what follows, without the terminator) is a query:
/// DECRQSS `DCS $ q` or XTGETTCAP `DCS + q`.
pub fn dcs(buf: &[u8]) -> bool {
    let body = buf.get(2..).unwrap_or_default();
    body.starts_with(b"$q") || body.starts_with(b"+q")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_queries_and_leaves_the_rest() {
        assert_eq!(
            csi(&[6], b"", b'n'),
            Some(Query::CursorPosition { extended: false })
        );
        assert_eq!(
            csi(&[6], b"?", b'n'),
            Some(Query::CursorPosition { extended: true })
        );
        assert_eq!(csi(&[5], b"", b'n'), Some(Query::Status));
        assert_eq!(csi(&[], b"", b'c'), Some(Query::PrimaryAttributes));
        assert_eq!(csi(&[0], b">", b'c'), Some(Query::SecondaryAttributes));
        assert_eq!(
            csi(&[2004], b"?$", b'p'),
            Some(Query::Mode {
                private: true,
                mode: 2004,
                report: 0
            })
        );
        assert_eq!(csi(&[18], b"", b't'), Some(Query::WindowSize { op: 18 }));
        assert_eq!(csi(&[4], b"?", b'm'), Some(Query::Unanswered));
        // Not queries: SGR, a resize request, a cursor move, a DSR reply.
        assert_eq!(csi(&[1], b"", b'm'), None);
        assert_eq!(csi(&[8, 24, 80], b"", b't'), None);
        assert_eq!(csi(&[3], b"", b'H'), None);
        assert_eq!(csi(&[0], b"", b'n'), None);
        assert_eq!(csi(&[4, 2], b">", b'm'), None);
    }

    #[test]
    fn osc_colour_queries() {
        assert_eq!(
            osc(b"10;?;?", true),
            Some(vec![
                Query::Color {
                    which: 10,
                    bell: true
                },
                Query::Color {
                    which: 11,
                    bell: true
                }
            ])
        );
        assert_eq!(osc(b"11;#000000", false), None);
        assert_eq!(osc(b"4;1;?", false), Some(vec![Query::Unanswered]));
        assert_eq!(osc(b"52;c;?", false), Some(vec![Query::Unanswered]));
        assert_eq!(osc(b"0;what?", false), None);
        assert!(dcs(b"\x1bP$qm") && dcs(b"\x1bP+q544e") && !dcs(b"\x1bPq#0"));
    }

    #[test]
    fn a_colour_query_of_any_length_asks_at_most_three_colours() {
        let mut payload = b"10".to_vec();
        for _ in 0..100_000 {
            payload.extend_from_slice(b";?");
        }
        let asked = osc(&payload, true).unwrap_or_default();
        let which: Vec<u16> = asked
            .iter()
            .map(|q| match q {
                Query::Color { which, .. } => *which,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(which, [10, 11, 12]);
        assert!(is_colour_osc(b"11;?") && is_colour_osc(b"4;1;?") && is_colour_osc(b"19;"));
        assert!(!is_colour_osc(b"11") && !is_colour_osc(b"110;") && !is_colour_osc(b"52;c;?"));
    }

    #[test]
    fn answers() {
        let colors = ReportColors::default();
        let bytes = |q| match answer(&q, &colors) {
            Some(Reply::Bytes(b)) => String::from_utf8(b).unwrap(),
            other => panic!("{other:?}"),
        };
        assert_eq!(bytes(Query::Status), "\x1b[0n");
        assert_eq!(bytes(Query::PrimaryAttributes), "\x1b[?1;2c");
        assert_eq!(
            bytes(Query::Mode {
                private: true,
                mode: 1049,
                report: 1
            }),
            "\x1b[?1049;1$y"
        );
        assert_eq!(
            bytes(Query::Color {
                which: 11,
                bell: false
            }),
            "\x1b]11;rgb:0000/0000/0000\x1b\\"
        );
        assert_eq!(
            bytes(Query::Color {
                which: 10,
                bell: true
            }),
            "\x1b]10;rgb:ffff/ffff/ffff\x07"
        );
        assert_eq!(answer(&Query::Unanswered, &colors), None);
    }
}
