//! Output shaping for a model: a command's raw pty output replayed line by line through the
//! terminal model (`avt`), so escape sequences vanish and carriage-return progress bars keep
//! only their last state, then cut to a byte budget as head + tail with what was left out
//! counted ([`Shaped::omitted_bytes`], [`Shaped::omitted_lines`]).
//!
//! May touch: nothing but its arguments.

/// Columns of the one-row model each line is replayed on; longer lines are replayed in
/// pieces of this many characters.
const COLS: usize = 1000;

/// Renders raw terminal output as plain text lines (cost linear in the input).
pub fn render(raw: &str) -> Vec<String> {
    let Ok(mut vt) = avt::Terminal::new(COLS, 1) else {
        return raw.lines().map(str::to_string).collect();
    };
    let mut out = Vec::new();
    let mut pieces = raw.split('\n').peekable();
    while let Some(line) = pieces.next() {
        if pieces.peek().is_none() && line.is_empty() {
            break;
        }
        let mut text = String::new();
        let chars: Vec<char> = line.chars().collect();
        for chunk in chars.chunks(COLS) {
            let piece: String = chunk.iter().collect();
            vt.feed("\x1b[2K\r");
            vt.feed(piece.as_str());
            if let Some(row) = vt.screen().text().into_iter().next() {
                text.push_str(row.trim_end());
            }
        }
        out.push(text);
    }
    out
}

/// Lines cut to a budget.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shaped {
    /// The kept text: head, a marker line, tail.
    pub text: String,
    /// Bytes of rendered text left out.
    pub omitted_bytes: u64,
    /// Whole lines left out.
    pub omitted_lines: u64,
}

/// Keeps whole lines from the head (up to half of `max_bytes`) and the tail (the rest),
/// counting what falls between. `max_bytes` is in bytes of UTF-8 text.
pub fn cut(lines: &[String], max_bytes: usize) -> Shaped {
    let total: usize = lines.iter().map(|l| l.len() + 1).sum();
    if total <= max_bytes {
        return Shaped {
            text: lines.join("\n"),
            ..Shaped::default()
        };
    }
    let half = max_bytes / 2;
    let (mut head, mut used) = (0, 0);
    while head < lines.len() && used + lines[head].len() < half {
        used += lines[head].len() + 1;
        head += 1;
    }
    let (mut tail, mut tail_used) = (lines.len(), 0);
    while tail > head && used + tail_used + lines[tail - 1].len() < max_bytes {
        tail_used += lines[tail - 1].len() + 1;
        tail -= 1;
    }
    let omitted = &lines[head..tail];
    let omitted_bytes: usize = omitted.iter().map(|l| l.len() + 1).sum();
    let mut text = lines[..head].join("\n");
    text.push_str(&format!(
        "\n[… {} lines, {} bytes omitted: use read with grep or cursor …]\n",
        omitted.len(),
        omitted_bytes
    ));
    text.push_str(&lines[tail..].join("\n"));
    Shaped {
        text,
        omitted_bytes: omitted_bytes as u64,
        omitted_lines: omitted.len() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_bar_collapses_and_escapes_vanish() {
        let lines = render("a\r\n10%\r50%\r100%\r\n\x1b[31mred\x1b[0m\r\n");
        assert_eq!(lines, vec!["a", "100%", "red"]);
    }

    #[test]
    fn cut_counts_what_it_leaves_out() {
        let lines: Vec<String> = (0..1000).map(|i| format!("line {i}")).collect();
        let s = cut(&lines, 200);
        let kept = s.text.lines().filter(|l| l.starts_with("line")).count() as u64;
        assert_eq!(kept + s.omitted_lines, 1000);
        assert!(s.text.len() < 300);
    }
}
