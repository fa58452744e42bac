//! Names and text: fresh terminal URIs and tags, numbers in terminal output, and clipping for
//! failure messages; the fenced blocks of a Markdown document.

use std::sync::atomic::{AtomicU64, Ordering};

static N: AtomicU64 = AtomicU64::new(1);

/// A fresh terminal URI, `ahp-terminal:/<tag>-<pid>-<n>`.
pub fn term_uri(tag: &str) -> String {
    format!(
        "ahp-terminal:/{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A unique tag for command lines and file names.
pub fn unique(tag: &str) -> String {
    format!(
        "{tag}{}x{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Finds `prefix` immediately followed by digits in `text` (skipping occurrences that are
/// not, such as the echo of the typed command line) and returns the number.
pub fn find_number_after(text: &str, prefix: &str) -> Option<i64> {
    let mut from = 0;
    while let Some(i) = text[from..].find(prefix) {
        let start = from + i + prefix.len();
        let digits: String = text[start..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        if !digits.is_empty() {
            return digits.parse().ok();
        }
        from = start;
    }
    None
}

/// The numbers of the lines of `text` that are nothing but a number (`seq` output through a
/// tty: `N\r\n`; of a line the shell rewrote with `\r`, what follows the last `\r`), in order.
pub fn number_lines(text: &str) -> Vec<u64> {
    text.split('\n')
        .map(|l| l.trim_end_matches('\r'))
        .map(|l| l.rsplit('\r').next().unwrap_or(l))
        .filter(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()))
        .filter_map(|l| l.parse().ok())
        .collect()
}

/// Last `n` characters of a string, quoted, for failure messages.
pub fn tail(s: &str, n: usize) -> String {
    let count = s.chars().count();
    let t: String = s.chars().skip(count.saturating_sub(n)).collect();
    format!("{t:?}")
}

/// `s` cut to at most `max` bytes on a character boundary, with `…` when cut.
pub fn clip(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// The contents (ending in a newline) of every fenced block of the Markdown `doc` whose info
/// string is exactly `lang`, in order.
pub fn fenced(doc: &str, lang: &str) -> Vec<String> {
    let fence = format!("```{lang}");
    let mut out = Vec::new();
    let mut lines = doc.lines();
    while let Some(line) = lines.next() {
        if line.trim_end() == fence {
            let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            out.push(body.join("\n") + "\n");
        }
    }
    out
}
