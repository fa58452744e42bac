//! What a terminal read back from its transcript must satisfy before the host restores it.
//! A transcript is a file on disk, so it gets no more trust than the wire: the URI must be
//! one `createTerminal` accepts ([`channel::check_new_terminal_uri`]: an absolute URI of at
//! most [`MAX_URI_BYTES`](validate::MAX_URI_BYTES) bytes with a non-reserved scheme — a
//! terminal that could not be named could not be disposed of either), the holder and claim
//! pass the wire's length caps, and the state is brought within what a live terminal can
//! hold: the title sanitised as a client's is ([`sanitize_title`]), out-of-range sizes and
//! unusable working directories dropped, unknown content parts dropped, and at most
//! [`MAX_RESTORED_PARTS`] content parts (adjacent unclassified parts joined, then the oldest
//! joined into one), command lines cut to [`MAX_COMMAND_LINE_BYTES`] and running commands
//! marked finished (a restored terminal has no process, so the scrollback trim may drop them
//! like any other), so a snapshot of a restored terminal stays within the bound docs/store.md
//! gives. Pure functions.

use ahp_types::state::{TerminalContentPart, TerminalState, TerminalUnclassifiedPart};

use super::channel::{self, MAX_CWD_BYTES};
use super::validate::{self, MAX_ID_BYTES};
use crate::store::Meta;
use crate::terminal::escape::MAX_SEQUENCE_BYTES;
use crate::terminal::shell_integration::sanitize_title;
use crate::terminal::MAX_DIMENSION;

/// Longest `commandLine` a restored command part keeps, in bytes: what a live one can be, the
/// longest OSC 633;E the output framer holds ([`MAX_SEQUENCE_BYTES`], 1 MiB). A longer one is
/// cut at a character boundary.
pub const MAX_COMMAND_LINE_BYTES: usize = MAX_SEQUENCE_BYTES;

/// Most content parts a restored terminal keeps. Adjacent unclassified parts are joined
/// first (that changes nothing a client sees in the text); past the bound, the oldest parts
/// are joined into one unclassified part holding their output (their command lines, ids and
/// times are dropped). Each part costs a snapshot at most about 0.5 KiB of JSON besides its
/// text (a command part with a 256-byte id), so the parts add at most about 512 KiB.
pub const MAX_RESTORED_PARTS: usize = 1024;

/// Checks and sanitises `meta` in place. `Err` (the reason, one line): it cannot be restored
/// (its URI, holder or claim is not one the wire accepts) and should be set aside. `Ok`: what
/// was changed, in words (empty if nothing).
pub(super) fn check(meta: &mut Meta) -> Result<Vec<String>, String> {
    channel::check_new_terminal_uri(&meta.uri)
        .map_err(|e| format!("its URI is not one createTerminal accepts ({e})"))?;
    validate::check_len("its holder", &meta.holder, MAX_ID_BYTES)?;
    let claim = serde_json::to_value(&meta.state.claim).map_err(|e| e.to_string())?;
    validate::parse_claim(&claim).map_err(|e| format!("its claim: {e}"))?;
    Ok(sanitise(&mut meta.state))
}

/// Brings `state` within what a live terminal holds (see the module); returns what changed.
fn sanitise(state: &mut TerminalState) -> Vec<String> {
    let mut fixes = Vec::new();
    let title = sanitize_title(&state.title);
    if title != state.title {
        state.title = title;
        fixes.push("its title had control characters or was too long: sanitised".to_string());
    }
    for (name, d) in [("cols", &mut state.cols), ("rows", &mut state.rows)] {
        if d.is_some_and(|n| !(1..=MAX_DIMENSION).contains(&n)) {
            *d = None;
            fixes.push(format!("its {name} was out of range: dropped"));
        }
    }
    if state.cwd.as_ref().is_some_and(|c| !usable_cwd(c)) {
        state.cwd = None;
        fixes.push("its cwd was not a file:// URI of a usable length: dropped".to_string());
    }
    let (cut, finished) = commands(&mut state.content);
    if cut > 0 {
        fixes.push(format!(
            "{cut} command lines over {MAX_COMMAND_LINE_BYTES} bytes: cut"
        ));
    }
    if finished > 0 {
        fixes.push(format!(
            "{finished} running commands (its process is gone): marked finished"
        ));
    }
    let before = state.content.len();
    let (content, unknown) = bounded(std::mem::take(&mut state.content));
    state.content = content;
    if unknown > 0 {
        fixes.push(format!("{unknown} content parts of unknown types dropped"));
    }
    if state.content.len() + unknown < before {
        fixes.push(format!(
            "its {before} content parts joined into {} (at most {MAX_RESTORED_PARTS})",
            state.content.len()
        ));
    }
    fixes
}

/// Cuts command lines to [`MAX_COMMAND_LINE_BYTES`] and marks running command parts finished
/// (no exit code, no duration): with no process nothing would finish them, and the scrollback
/// trim never drops a running part, so without this their command lines would escape the
/// `--scrollback-bytes` bound. Returns how many lines were cut and how many parts finished.
fn commands(parts: &mut [TerminalContentPart]) -> (usize, usize) {
    let (mut cut, mut finished) = (0, 0);
    for part in parts {
        let TerminalContentPart::Command(c) = part else {
            continue;
        };
        if c.command_line.len() > MAX_COMMAND_LINE_BYTES {
            let mut end = MAX_COMMAND_LINE_BYTES;
            while !c.command_line.is_char_boundary(end) {
                end -= 1;
            }
            c.command_line.truncate(end);
            c.command_line.shrink_to_fit();
            cut += 1;
        }
        if !c.is_complete {
            c.is_complete = true;
            finished += 1;
        }
    }
    (cut, finished)
}

/// A `file://` URI no longer than a percent-encoded `PATH_MAX` path can be.
fn usable_cwd(cwd: &str) -> bool {
    cwd.len() <= 3 * MAX_CWD_BYTES + 16 && url::Url::parse(cwd).is_ok_and(|u| u.scheme() == "file")
}

/// `parts` without unknown parts (and command parts whose id is over [`MAX_ID_BYTES`] turned
/// into unclassified ones), adjacent unclassified parts joined, and at most
/// [`MAX_RESTORED_PARTS`]; with the number of unknown parts dropped. Linear in the text.
fn bounded(parts: Vec<TerminalContentPart>) -> (Vec<TerminalContentPart>, usize) {
    let mut unknown = 0;
    let mut out: Vec<TerminalContentPart> = Vec::new();
    for part in parts {
        let part = match part {
            TerminalContentPart::Unknown(_) => {
                unknown += 1;
                continue;
            }
            TerminalContentPart::Command(c) if c.command_id.len() > MAX_ID_BYTES => {
                unclassified(c.output)
            }
            other => other,
        };
        push_joined(&mut out, part);
    }
    if out.len() > MAX_RESTORED_PARTS {
        let rest = out.split_off(out.len() - (MAX_RESTORED_PARTS - 1));
        let mut text = String::new();
        for part in out {
            match part {
                TerminalContentPart::Unclassified(u) => text.push_str(&u.value),
                TerminalContentPart::Command(c) => text.push_str(&c.output),
                TerminalContentPart::Unknown(_) => {}
            }
        }
        out = Vec::with_capacity(MAX_RESTORED_PARTS);
        out.push(unclassified(text));
        for part in rest {
            push_joined(&mut out, part);
        }
    }
    (out, unknown)
}

fn unclassified(value: String) -> TerminalContentPart {
    TerminalContentPart::Unclassified(TerminalUnclassifiedPart { value })
}

/// Appends `part`, joining it to the last one when both are unclassified.
fn push_joined(out: &mut Vec<TerminalContentPart>, part: TerminalContentPart) {
    if let (Some(TerminalContentPart::Unclassified(last)), TerminalContentPart::Unclassified(u)) =
        (out.last_mut(), &part)
    {
        last.value.push_str(&u.value);
        return;
    }
    out.push(part);
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::state::TerminalCommandPart;

    fn command(i: usize) -> TerminalContentPart {
        TerminalContentPart::Command(TerminalCommandPart {
            command_id: format!("c{i}"),
            command_line: "ls".into(),
            output: "o".into(),
            timestamp: 0,
            is_complete: true,
            exit_code: Some(0),
            duration_ms: Some(1),
        })
    }

    #[test]
    fn parts_are_joined_and_bounded_and_no_text_is_lost() {
        let mut parts = Vec::new();
        for i in 0..100_000 {
            parts.push(unclassified("u".into()));
            parts.push(unclassified("v".into()));
            parts.push(command(i));
        }
        parts.push(TerminalContentPart::Unknown(
            serde_json::json!({"type": "x"}),
        ));
        let (out, unknown) = bounded(parts);
        assert_eq!(unknown, 1);
        assert_eq!(out.len(), MAX_RESTORED_PARTS);
        let text: String = out
            .iter()
            .map(|p| match p {
                TerminalContentPart::Unclassified(u) => u.value.clone(),
                TerminalContentPart::Command(c) => c.output.clone(),
                TerminalContentPart::Unknown(_) => String::new(),
            })
            .collect();
        assert_eq!(text, "uvo".repeat(100_000));
        // The newest commands keep their shape.
        assert!(
            matches!(out.last(), Some(TerminalContentPart::Command(c)) if c.command_id == "c99999")
        );
    }

    #[test]
    fn command_lines_are_cut_and_running_commands_finished() {
        let mut long = command(0);
        if let TerminalContentPart::Command(c) = &mut long {
            // A 3-byte character straddles the cut.
            c.command_line = format!("a{}", "é€".repeat(MAX_COMMAND_LINE_BYTES));
            c.is_complete = false;
            c.exit_code = None;
        }
        let mut parts = vec![long, command(1)];
        assert_eq!(commands(&mut parts), (1, 1));
        let TerminalContentPart::Command(c) = &parts[0] else {
            panic!("not a command part")
        };
        assert!(c.command_line.len() <= MAX_COMMAND_LINE_BYTES);
        assert!(c.command_line.len() > MAX_COMMAND_LINE_BYTES - 4);
        assert!(c.is_complete && c.exit_code.is_none());
        assert_eq!(commands(&mut parts), (0, 0));
    }
}
