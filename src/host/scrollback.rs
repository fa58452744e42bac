//! Bounded retained content ("scrollback") of a terminal state.
//!
//! The reducers only ever append to `TerminalState.content`; after each append the host calls
//! [`trim`] so a chatty terminal cannot grow memory without limit. Trimming drops whole leading
//! parts first, then cuts the head of the oldest remaining one, always on a character
//! boundary, preferring a line start. A running (incomplete) command part is never dropped
//! (`terminal/commandFinished` finds it by id); only the head of its output may be cut.
//! A trim is not an action: it shows only in later snapshots (notes §9.7).

use ahp_types::state::{TerminalContentPart, TerminalState};

/// How far past the byte cut [`trim`] looks for a newline to cut after, in bytes.
const LINE_SEARCH_BYTES: usize = 4096;

/// Bytes of text in one part.
pub fn part_bytes(part: &TerminalContentPart) -> usize {
    match part {
        TerminalContentPart::Unclassified(u) => u.value.len(),
        TerminalContentPart::Command(c) => c.output.len() + c.command_line.len(),
        TerminalContentPart::Unknown(v) => v.to_string().len(),
    }
}

/// Bytes of text in the whole content.
pub fn content_bytes(state: &TerminalState) -> usize {
    state.content.iter().map(part_bytes).sum()
}

/// Trims `state.content` to at most `cap` bytes (plus at most the command line of a running
/// command). Returns the new total.
pub fn trim(state: &mut TerminalState, cap: usize) -> usize {
    let mut total = content_bytes(state);
    // Drop whole leading parts, but never an incomplete command part.
    while total > cap && state.content.len() > 1 {
        let first = &state.content[0];
        if matches!(first, TerminalContentPart::Command(c) if !c.is_complete) {
            break;
        }
        total -= part_bytes(first);
        state.content.remove(0);
    }
    if total <= cap {
        return total;
    }
    // Cut the head of the oldest remaining part.
    let excess = total - cap;
    if let Some(part) = state.content.first_mut() {
        let text = match part {
            TerminalContentPart::Unclassified(u) => &mut u.value,
            TerminalContentPart::Command(c) => &mut c.output,
            TerminalContentPart::Unknown(_) => return total,
        };
        let cut = cut_point(text, excess);
        text.drain(..cut);
        total -= cut;
    }
    total
}

/// The smallest cut ≥ `at` that lies on a character boundary, moved to just after a newline
/// when one is within [`LINE_SEARCH_BYTES`].
fn cut_point(text: &str, at: usize) -> usize {
    if at >= text.len() {
        return text.len();
    }
    let mut cut = at;
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    let window_end = (cut + LINE_SEARCH_BYTES).min(text.len());
    if let Some(nl) = text.as_bytes()[cut..window_end]
        .iter()
        .position(|&b| b == b'\n')
    {
        cut += nl + 1;
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::state::*;

    fn state(parts: Vec<TerminalContentPart>) -> TerminalState {
        TerminalState {
            title: "t".into(),
            cwd: None,
            cols: None,
            rows: None,
            content: parts,
            lifecycle: TerminalLifecycleState::Running(TerminalRunningLifecycleState {}),
            claim: TerminalClaim::Client(TerminalClientClaim {
                client_id: "c".into(),
            }),
            supports_command_detection: None,
            is_pty: Some(true),
        }
    }

    fn text(s: &str) -> TerminalContentPart {
        TerminalContentPart::Unclassified(TerminalUnclassifiedPart { value: s.into() })
    }

    #[test]
    fn trims_on_char_and_line_boundaries() {
        let mut s = state(vec![text(&"é".repeat(1000))]);
        let total = trim(&mut s, 999);
        assert!(total <= 999);
        let TerminalContentPart::Unclassified(u) = &s.content[0] else {
            panic!()
        };
        assert!(u.value.chars().all(|c| c == 'é'));

        let mut s = state(vec![text("line one\nline two\nline three\n")]);
        trim(&mut s, 20);
        let TerminalContentPart::Unclassified(u) = &s.content[0] else {
            panic!()
        };
        assert_eq!(u.value, "line three\n");
    }

    #[test]
    fn keeps_running_command() {
        let cmd = TerminalContentPart::Command(TerminalCommandPart {
            command_id: "1".into(),
            command_line: "yes".into(),
            output: "y\n".repeat(100),
            timestamp: 0,
            is_complete: false,
            exit_code: None,
            duration_ms: None,
        });
        let mut s = state(vec![text(&"a".repeat(100)), cmd]);
        trim(&mut s, 50);
        assert_eq!(s.content.len(), 1);
        assert!(matches!(&s.content[0], TerminalContentPart::Command(c) if c.command_id == "1"));
        assert!(content_bytes(&s) <= 50);
    }
}
