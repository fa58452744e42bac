//! Bounded retained content ("scrollback") of a terminal state.
//!
//! The reducers only ever append to `TerminalState.content`. Snapshots carry at most the cap
//! ([`retained`] copies just the part that a trim would keep); in memory the host lets the
//! content grow to [`trim_threshold`] (twice the cap) before it calls [`trim`], so a flood
//! moves each byte at most once instead of moving the whole buffer on every append. Trimming
//! drops whole leading parts while what remains still holds at least the cap, then cuts the
//! head of the oldest remaining one, always on a character boundary and never inside an escape
//! sequence (as the output framer, `terminal::escape`, delimits them), preferring a line
//! start: so one command whose output alone exceeds the cap keeps the last cap bytes of it. A
//! running (incomplete) command part is never dropped (`terminal/commandFinished` finds it by
//! id); only the head of its output may be cut. A trim is not an action: it shows only in later
//! snapshots (docs/protocol.md, "Retained content").
//!
//! The number of parts is bounded too ([`MAX_PARTS`]): a program can print an empty command
//! cycle (OSC 133 `A`…`D`) in 40 bytes, and every walk over the parts (a trim, a snapshot, a
//! checkpoint, the model's bookkeeping) would otherwise grow with them. Past twice the bound,
//! [`merge_oldest`] folds the oldest completed parts into one unclassified part holding their
//! text, so each part is merged O(1) times and no text is lost. Pure functions on a
//! `TerminalState`.

use ahp_types::state::{
    TerminalCommandPart, TerminalContentPart, TerminalState, TerminalUnclassifiedPart,
};

use crate::terminal::escape::sequence_len;

/// How far past the byte cut [`trim`] looks for a newline to cut after, in bytes.
const LINE_SEARCH_BYTES: usize = 4096;

/// Most content parts a terminal keeps after [`merge_oldest`]; the content is merged once it
/// holds more than [`merge_threshold`] (twice as many).
pub const MAX_PARTS: usize = 1024;

/// Content parts above which the host merges the oldest ones: twice [`MAX_PARTS`].
pub fn merge_threshold() -> usize {
    2 * MAX_PARTS
}

/// Folds the oldest parts of `state.content` into one unclassified part so that at most
/// [`MAX_PARTS`] remain: its value is their text in order (the `value` of unclassified parts,
/// the `output` of command parts), so the text stream is unchanged and only the command
/// structure of old commands (id, command line, exit code) is lost. A running (incomplete)
/// command part and what follows it are never merged. Returns the bytes the merge took off
/// [`content_bytes`] (the merged command lines). Costs the merged parts' count plus the text
/// appended to the first one (a first unclassified part is extended in place).
pub fn merge_oldest(state: &mut TerminalState) -> usize {
    let len = state.content.len();
    if len <= MAX_PARTS {
        return 0;
    }
    let running = state
        .content
        .iter()
        .position(|p| matches!(p, TerminalContentPart::Command(c) if !c.is_complete))
        .unwrap_or(len);
    let n = (len - MAX_PARTS + 1).min(running);
    if n < 2 {
        return 0;
    }
    let before: usize = state.content[..n].iter().map(part_bytes).sum();
    let mut merged = state.content.drain(..n);
    let mut value = match merged.next() {
        Some(TerminalContentPart::Unclassified(u)) => u.value,
        Some(TerminalContentPart::Command(c)) => c.output,
        _ => String::new(),
    };
    for part in merged {
        match part {
            TerminalContentPart::Unclassified(u) => value.push_str(&u.value),
            TerminalContentPart::Command(c) => value.push_str(&c.output),
            TerminalContentPart::Unknown(_) => {}
        }
    }
    let removed = before - value.len();
    state.content.insert(
        0,
        TerminalContentPart::Unclassified(TerminalUnclassifiedPart { value }),
    );
    removed
}

/// `terminal/commandFinished` reduced as the official reducer does (the command part with
/// `commandId` completes, with the exit code and duration), but searched from the newest
/// part: the command that finishes is the last one, and the reducer's search from the oldest
/// would cost every part for every command. Command ids are UUIDs the daemon made, one per
/// part, so both searches find the same part. Returns whether one was found.
pub fn finish_command(
    state: &mut TerminalState,
    finished: &ahp_types::actions::TerminalCommandFinishedAction,
) -> bool {
    let part = state.content.iter_mut().rev().find_map(|p| match p {
        TerminalContentPart::Command(c) if c.command_id == finished.command_id => Some(c),
        _ => None,
    });
    let Some(c) = part else {
        return false;
    };
    c.is_complete = true;
    c.exit_code = finished.exit_code;
    c.duration_ms = finished.duration_ms;
    true
}

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

/// Retained content above which the host trims, for a cap of `cap` bytes: twice the cap.
pub fn trim_threshold(cap: usize) -> usize {
    cap.saturating_mul(2)
}

/// What trimming to `cap` removes: how many whole leading parts, how many bytes from the head
/// of the next one, and the total that remains.
fn plan(state: &TerminalState, cap: usize) -> (usize, usize, usize) {
    let mut total = content_bytes(state);
    let mut parts = 0;
    // Drop whole leading parts while the rest still holds the cap (a part that has no text to
    // cut, always), but never an incomplete command part.
    while total > cap && state.content.len() - parts > 1 {
        let first = &state.content[parts];
        if matches!(first, TerminalContentPart::Command(c) if !c.is_complete) {
            break;
        }
        let bytes = part_bytes(first);
        if total - bytes < cap && !matches!(first, TerminalContentPart::Unknown(_)) {
            break;
        }
        total -= bytes;
        parts += 1;
    }
    if total <= cap {
        return (parts, 0, total);
    }
    // Cut the head of the oldest remaining part.
    let cut = match state.content.get(parts) {
        Some(TerminalContentPart::Unclassified(u)) => cut_point(&u.value, total - cap),
        Some(TerminalContentPart::Command(c)) => cut_point(&c.output, total - cap),
        _ => 0,
    };
    (parts, cut, total - cut)
}

/// Where the content that [`trim`] to `cap` keeps begins: how many whole leading parts it
/// drops and how many bytes it cuts from the head of the next one.
pub fn retained_start(state: &TerminalState, cap: usize) -> (usize, usize) {
    let (parts, cut, _) = plan(state, cap);
    (parts, cut)
}

/// Trims `state.content` to at most `cap` bytes (plus at most the command line of the oldest
/// command part kept). Returns the new total.
pub fn trim(state: &mut TerminalState, cap: usize) -> usize {
    let (parts, cut, total) = plan(state, cap);
    state.content.drain(..parts);
    match state.content.first_mut() {
        Some(TerminalContentPart::Unclassified(u)) => cut_head(&mut u.value, cut),
        Some(TerminalContentPart::Command(c)) => cut_head(&mut c.output, cut),
        _ => {}
    }
    total
}

/// Removes the first `cut` bytes of `text` and gives back the memory a large append left
/// behind: a part that took one big batch of output (up to 256 KiB) and was trimmed to a small
/// cap would otherwise keep the batch's capacity for as long as the terminal lives. The
/// copy this costs is of at most the retained bytes, once per trim.
fn cut_head(text: &mut String, cut: usize) {
    text.drain(..cut);
    if text.capacity() > 2 * text.len() + 4096 {
        text.shrink_to(text.len() + text.len() / 4);
    }
}

/// A copy of `state` whose content is what [`trim`] to `cap` would keep, copying only that.
pub fn retained(state: &TerminalState, cap: usize) -> TerminalState {
    let (parts, cut, _) = plan(state, cap);
    let mut content: Vec<TerminalContentPart> = Vec::with_capacity(state.content.len() - parts);
    for (i, part) in state.content[parts..].iter().enumerate() {
        content.push(match part {
            TerminalContentPart::Unclassified(u) if i == 0 && cut > 0 => {
                TerminalContentPart::Unclassified(TerminalUnclassifiedPart {
                    value: u.value[cut..].to_string(),
                })
            }
            TerminalContentPart::Command(c) if i == 0 && cut > 0 => {
                TerminalContentPart::Command(TerminalCommandPart {
                    command_id: c.command_id.clone(),
                    command_line: c.command_line.clone(),
                    output: c.output[cut..].to_string(),
                    timestamp: c.timestamp,
                    is_complete: c.is_complete,
                    exit_code: c.exit_code,
                    duration_ms: c.duration_ms,
                })
            }
            other => other.clone(),
        });
    }
    with_content(state, content)
}

/// A copy of `state` with `content` in place of its content (which is not copied).
pub fn with_content(state: &TerminalState, content: Vec<TerminalContentPart>) -> TerminalState {
    let TerminalState {
        title,
        cwd,
        cols,
        rows,
        content: _,
        lifecycle,
        claim,
        supports_command_detection,
        is_pty,
    } = state;
    TerminalState {
        title: title.clone(),
        cwd: cwd.clone(),
        cols: *cols,
        rows: *rows,
        content,
        lifecycle: lifecycle.clone(),
        claim: claim.clone(),
        supports_command_detection: *supports_command_detection,
        is_pty: *is_pty,
    }
}

/// How far back from a cut [`trim`] looks for the start of an escape sequence, in bytes.
const SEQUENCE_SEARCH_BYTES: usize = 4096;

/// The smallest cut ≥ `at` that lies on a character boundary, moved to just after a newline
/// when one is within [`LINE_SEARCH_BYTES`], and past the end of an escape sequence it would
/// otherwise split (the sequence as the output framer delimits it, [`sequence_len`]).
fn cut_point(text: &str, at: usize) -> usize {
    if at >= text.len() {
        return text.len();
    }
    let bytes = text.as_bytes();
    let mut cut = at;
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    let window_end = (cut + LINE_SEARCH_BYTES).min(text.len());
    if let Some(nl) = bytes[cut..window_end].iter().position(|&b| b == b'\n') {
        cut += nl + 1;
    }
    let back = cut.saturating_sub(SEQUENCE_SEARCH_BYTES);
    if let Some(esc) = bytes[back..cut].iter().rposition(|&b| b == 0x1b) {
        let start = back + esc;
        if let Some(end) = sequence_len(&bytes[start..]).map(|n| start + n) {
            if end > cut {
                cut = end;
                while !text.is_char_boundary(cut) {
                    cut += 1;
                }
            }
        }
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::state::*;
    use ahp_types::state::{TerminalCommandPart, TerminalUnclassifiedPart};

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
    fn never_cuts_inside_an_escape_sequence() {
        // No newline near the cut: the cut lands inside a CSI, then inside an OSC title.
        let csi = format!("{}\x1b[38;5;196mred", "a".repeat(10));
        let mut s = state(vec![text(&csi)]);
        trim(&mut s, csi.len() - 12);
        let TerminalContentPart::Unclassified(u) = &s.content[0] else {
            panic!()
        };
        assert_eq!(u.value, "red");

        let osc = format!("{}\x1b]0;a long title\x1b\\after", "b".repeat(10));
        let mut s = state(vec![text(&osc)]);
        trim(&mut s, osc.len() - 14);
        let TerminalContentPart::Unclassified(u) = &s.content[0] else {
            panic!()
        };
        assert_eq!(u.value, "after");

        // A cut after a complete sequence is left alone.
        let done = format!("\x1b[0m{}", "c".repeat(20));
        let mut s = state(vec![text(&done)]);
        trim(&mut s, 10);
        let TerminalContentPart::Unclassified(u) = &s.content[0] else {
            panic!()
        };
        assert_eq!(u.value, "c".repeat(10));
    }

    #[test]
    fn a_snapshot_copy_keeps_what_a_trim_keeps() {
        let cmd = |done: bool| {
            TerminalContentPart::Command(TerminalCommandPart {
                command_id: "1".into(),
                command_line: "yes".into(),
                output: "y\n".repeat(100),
                timestamp: 0,
                is_complete: done,
                exit_code: None,
                duration_ms: None,
            })
        };
        for cap in [0, 10, 150, 250, 1000] {
            for parts in [
                vec![text(&"a\n".repeat(100)), cmd(false)],
                vec![cmd(true), text("line\nline\n"), cmd(false)],
                vec![text(&"é".repeat(300))],
            ] {
                let s = state(parts);
                let mut trimmed = s.clone();
                trim(&mut trimmed, cap);
                assert_eq!(retained(&s, cap), trimmed, "cap {cap}");
            }
        }
        assert_eq!(trim_threshold(1024), 2048);
    }

    fn command(id: &str, line: &str, output: &str, done: bool) -> TerminalContentPart {
        TerminalContentPart::Command(TerminalCommandPart {
            command_id: id.into(),
            command_line: line.into(),
            output: output.into(),
            timestamp: 0,
            is_complete: done,
            exit_code: done.then_some(0),
            duration_ms: None,
        })
    }

    fn output_of(part: &TerminalContentPart) -> &str {
        match part {
            TerminalContentPart::Unclassified(u) => &u.value,
            TerminalContentPart::Command(c) => &c.output,
            TerminalContentPart::Unknown(_) => "",
        }
    }

    #[test]
    fn a_part_beyond_the_cap_keeps_its_tail() {
        // One command whose output alone exceeds the cap, then a small prompt: the last cap
        // bytes stay (the tail of the output, from a line start), not just the prompt.
        let seq: String = (1..=2000).map(|i| format!("{i}\r\n")).collect();
        for done in [true, false] {
            let mut s = state(vec![
                text("$ seq 1 2000\r\n"),
                command("1", "seq 1 2000", &seq, done),
                text("\x1b[?2004h$ "),
            ]);
            let total = trim(&mut s, 1000);
            assert!((990..=1000).contains(&total), "{total}");
            assert_eq!(s.content.len(), 2, "{:?}", s.content);
            assert!(
                matches!(&s.content[0], TerminalContentPart::Command(c) if c.command_id == "1")
            );
            let out = output_of(&s.content[0]);
            assert!(out.ends_with("1999\r\n2000\r\n"), "{out:?}");
            assert!(seq.ends_with(out) && seq[..seq.len() - out.len()].ends_with('\n'));
            assert_eq!(output_of(&s.content[1]), "\x1b[?2004h$ ");
        }
        // The same with plain text, and with a running command after it.
        let big = "0123456789\n".repeat(300);
        for last in [text("$ "), command("2", "sleep 9", "", false)] {
            let mut s = state(vec![text("old\n"), text(&big), last.clone()]);
            let total = trim(&mut s, 1000);
            assert!(total > 980 && total <= 1000, "{total}");
            assert_eq!(s.content.len(), 2);
            assert!(big.ends_with(output_of(&s.content[0])));
            assert_eq!(s.content[1], last);
        }
        // A leading part is still dropped whole when the rest holds the cap.
        let mut s = state(vec![text(&big), text(&big)]);
        trim(&mut s, 3300);
        assert_eq!(s.content, vec![text(&big)]);
    }

    #[test]
    fn merging_keeps_the_text_and_the_running_command() {
        let mut parts = vec![text("start\n")];
        for i in 0..3 * MAX_PARTS {
            parts.push(command(&i.to_string(), "true", &format!("{i}\n"), true));
        }
        parts.push(command("run", "sleep 9", "z", false));
        let mut s = state(parts);
        let text_before: String = s.content.iter().map(output_of).collect();
        let bytes_before = content_bytes(&s);
        let removed = merge_oldest(&mut s);
        assert_eq!(s.content.len(), MAX_PARTS);
        assert_eq!(content_bytes(&s), bytes_before - removed);
        let text_after: String = s.content.iter().map(output_of).collect();
        assert_eq!(text_after, text_before);
        assert!(matches!(
            &s.content[0],
            TerminalContentPart::Unclassified(_)
        ));
        assert!(
            matches!(s.content.last(), Some(TerminalContentPart::Command(c)) if c.command_id == "run")
        );
        // Under the bound: nothing to do; a running command is never merged.
        assert_eq!(merge_oldest(&mut s), 0);
        let mut s = state(
            (0..MAX_PARTS + 10)
                .map(|i| command(&i.to_string(), "x", "o", i != 0))
                .collect(),
        );
        assert_eq!(merge_oldest(&mut s), 0);
        assert_eq!(s.content.len(), MAX_PARTS + 10);
    }

    #[test]
    fn finishing_from_the_newest_part_reduces_as_the_official_reducer() {
        use ahp_types::actions::{StateAction, TerminalCommandFinishedAction};
        let parts: Vec<_> = (0..5)
            .map(|i| command(&i.to_string(), "x", "o", i != 3))
            .chain([text("$ ")])
            .collect();
        for id in ["3", "1", "nope"] {
            let finished = TerminalCommandFinishedAction {
                command_id: id.into(),
                exit_code: Some(7),
                duration_ms: Some(12),
            };
            let mut ours = state(parts.clone());
            let found = finish_command(&mut ours, &finished);
            let mut official = state(parts.clone());
            ahp::reducers::apply_action_to_terminal(
                &mut official,
                &StateAction::TerminalCommandFinished(finished),
            );
            assert_eq!(ours, official, "{id}");
            assert_eq!(found, id != "nope");
        }
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
