//! `--plain`: terminal output as plain text, for reading or piping into another tool.
//!
//! The `vte` parser splits the stream into printable characters and control functions; every
//! escape sequence (CSI, OSC, DCS, SOS/PM/APC, ESC) is dropped, and of the C0 controls only
//! line feed and tab are kept. Carriage returns are resolved the way a log reader wants them:
//! CR LF (and CR CR LF) become one LF; a CR followed by more text (a progress bar redrawing
//! its line) also starts a new line, so every state stays readable; a CR at the start of a
//! line moves nothing (bash ≥ 5.1 writes `ESC[?2004l CR` after every command line it reads).
//! Backspace, BEL and other controls are dropped. State carries across [`Plain::push`] calls,
//! so chunks may be cut anywhere between characters.
//!
//! Pure streaming state; touches nothing.

/// A streaming escape-sequence stripper.
pub struct Plain {
    parser: vte::Parser,
    sink: Sink,
}

struct Sink {
    out: String,
    /// A CR was seen and not yet resolved (by an LF, more text, or the end).
    pending_cr: bool,
    /// Nothing was printed since the last line feed (or the start).
    line_start: bool,
}

impl Default for Sink {
    fn default() -> Self {
        Sink {
            out: String::new(),
            pending_cr: false,
            line_start: true,
        }
    }
}

impl vte::Perform for Sink {
    fn print(&mut self, c: char) {
        if self.pending_cr {
            self.pending_cr = false;
            self.out.push('\n');
        }
        self.out.push(c);
        self.line_start = false;
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' => {
                self.pending_cr = false;
                self.line_start = true;
                self.out.push('\n');
            }
            // At the start of a line a CR goes nowhere.
            b'\r' => self.pending_cr = !self.line_start,
            b'\t' => self.print('\t'),
            _ => {}
        }
    }
}

impl Default for Plain {
    fn default() -> Self {
        Plain::new()
    }
}

impl Plain {
    /// A stripper at the start of a stream.
    pub fn new() -> Plain {
        Plain {
            parser: vte::Parser::new(),
            sink: Sink::default(),
        }
    }

    /// Feeds `text` and returns the plain text it completes.
    pub fn push(&mut self, text: &str) -> String {
        self.parser.advance(&mut self.sink, text.as_bytes());
        std::mem::take(&mut self.sink.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `text` without escape sequences, in one go.
    fn strip(text: &str) -> String {
        Plain::new().push(text)
    }

    #[test]
    fn strips_sequences_and_resolves_carriage_returns() {
        assert_eq!(
            strip("\x1b[1;31mred\x1b[0m plain\r\n\x1b]0;title\x07ok\ttab\r\n"),
            "red plain\nok\ttab\n"
        );
        assert_eq!(strip("10%\r20%\r\r\n"), "10%\n20%\n");
        assert_eq!(strip("a\x08b\x07c\x1bPq#0;1\x1b\\d"), "abcd");
        assert_eq!(strip("é ✓ \x1b[38;2;1;2;3m日本\x1b[m"), "é ✓ 日本");
        // A CR at the start of a line moves nothing: bash ≥ 5.1 after a command line, a
        // CR CR LF, a CR first thing.
        assert_eq!(
            strip("$ echo hi2\r\n\x1b[?2004l\rhi2\r\n$ "),
            "$ echo hi2\nhi2\n$ "
        );
        assert_eq!(strip("\ra\r\r\nb\n\r\rc"), "a\nb\nc");
        assert_eq!(strip("a\r\x1b[Kb"), "a\nb");
        // Split anywhere between characters, even inside a sequence or a CR LF.
        let text = "\x1b[32mgreen\x1b[0m\r\nnext\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\\r\n";
        for cut in 0..text.len() {
            if !text.is_char_boundary(cut) {
                continue;
            }
            let mut p = Plain::new();
            let joined = p.push(&text[..cut]) + &p.push(&text[cut..]);
            assert_eq!(joined, "green\nnextlink\n", "cut at {cut}");
        }
        let text = "x\r\n\x1b[?2004l\ry\r\n";
        for cut in 0..=text.len() {
            let mut p = Plain::new();
            let joined = p.push(&text[..cut]) + &p.push(&text[cut..]);
            assert_eq!(joined, "x\ny\n", "cut at {cut}");
        }
    }
}
