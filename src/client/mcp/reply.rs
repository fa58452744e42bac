//! The one reply shape every tool returns: [`Reply`] as `structuredContent` and a short text
//! (`t3#17 [dev] $ npm test: exited 1 in 4.2 s`, then the output, then how to read what was
//! omitted); misuse as an `isError` result with a stable code and what to do.
//!
//! May touch: nothing but its arguments.

use rmcp::model::{CallToolResult, ContentBlock};
use serde::Serialize;

/// What was left out of `output` (bytes of rendered UTF-8 text, whole lines).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Omitted {
    pub bytes: u64,
    pub lines: u64,
}

/// Who holds a terminal: `kind` is `agent` or `human`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Holder {
    pub kind: String,
    pub name: String,
}

/// One command in one terminal. `status` is `running`, `exited`, `held_by_human` or
/// `killed`; `exit_code` is -1 when unknown, `duration_ms` in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Reply {
    pub terminal: String,
    pub id: u64,
    pub command: String,
    pub cwd: String,
    pub status: String,
    pub exit_code: i64,
    pub signal: String,
    pub duration_ms: u64,
    pub output: String,
    pub omitted: Omitted,
    pub cursor: u64,
    pub holder: Holder,
    pub attach: String,
}

impl Reply {
    /// The header line of the text form.
    pub fn header(&self) -> String {
        let secs = self.duration_ms as f64 / 1000.0;
        let state = match self.status.as_str() {
            "exited" => format!("exited {} in {secs:.1} s", self.exit_code),
            "running" => format!("running for {secs:.1} s (call wait to follow it)"),
            s => s.to_string(),
        };
        format!(
            "t{} [{}] $ {}: {state}",
            self.id, self.terminal, self.command
        )
    }

    /// The tool result: structured and text.
    pub fn into_result(self) -> CallToolResult {
        let mut text = self.header();
        if !self.output.is_empty() {
            text.push('\n');
            text.push_str(&self.output);
        }
        if self.omitted.lines > 0 {
            text.push_str(&format!(
                "\n({} lines omitted: read {{terminal: \"{}\", grep: …}} finds them)",
                self.omitted.lines, self.terminal
            ));
        }
        let value = serde_json::to_value(&self).unwrap_or_default();
        let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
        r.structured_content = Some(value);
        r
    }
}

/// Misuse (unknown terminal, a terminal a person holds): `isError` with `code` (stable, e.g.
/// `unknown_terminal`, `held_by_human`) and a sentence saying what to do.
pub fn misuse(code: &str, message: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!("{code}: {message}"))])
}
