//! The output pipeline of one terminal: raw pty bytes in, [`PtyEvent`]s out, in stream order.
//!
//! Runs on the terminal's reader thread. The shell-integration [`OutputParser`] assembles
//! UTF-8 across reads (invalid bytes become U+FFFD, no character is split between two events),
//! removes every shell-integration sequence and reports marks; the [`CommandTracker`] turns
//! the marks into terminal actions. Output written before a mark is emitted before the
//! mark's action. Touches nothing outside the terminal it belongs to.

use super::shell_integration::{now_ms, CommandTracker, OutputEvent, OutputParser};
use super::PtyEvent;

/// Per-terminal output state, kept across reads.
pub struct OutputPipeline {
    parser: OutputParser,
    tracker: CommandTracker,
    scratch: Vec<OutputEvent>,
}

impl std::fmt::Debug for OutputPipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputPipeline").finish_non_exhaustive()
    }
}

impl OutputPipeline {
    /// A pipeline for a terminal whose integration scripts (if any) carry `nonce`, starting in
    /// the directory `cwd_uri` (a `file://` URI, so the first cwd mark reporting the same
    /// directory produces no `terminal/cwdChanged`). With `injected`, the terminal runs
    /// ahpty's own scripts and only marks signed with the nonce are believed
    /// ([`OutputParser::signed`]); otherwise any OSC 633/133 mark the shell prints is.
    pub fn new(nonce: String, cwd_uri: Option<String>, injected: bool) -> Self {
        let parser = if injected {
            OutputParser::signed(nonce)
        } else {
            OutputParser::new(nonce)
        };
        OutputPipeline {
            parser,
            tracker: CommandTracker::new(cwd_uri),
            scratch: Vec::new(),
        }
    }

    /// Processes one read's bytes.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<PtyEvent> {
        let mut scratch = std::mem::take(&mut self.scratch);
        self.parser.feed(bytes, &mut scratch);
        let out = self.convert(&mut scratch);
        self.scratch = scratch;
        out
    }

    /// End of stream: releases anything held back (a dangling partial character becomes
    /// one U+FFFD).
    pub fn finish(&mut self) -> Vec<PtyEvent> {
        let mut scratch = std::mem::take(&mut self.scratch);
        self.parser.finish(&mut scratch);
        let out = self.convert(&mut scratch);
        self.scratch = scratch;
        out
    }

    fn convert(&mut self, events: &mut Vec<OutputEvent>) -> Vec<PtyEvent> {
        let mut out = Vec::with_capacity(events.len());
        let mut actions = Vec::new();
        for ev in events.drain(..) {
            match ev {
                OutputEvent::Text(t) => match out.last_mut() {
                    Some(PtyEvent::Data(d)) => d.push_str(&t),
                    _ => out.push(PtyEvent::Data(t)),
                },
                OutputEvent::Mark(m) => {
                    self.tracker.on_mark(m, now_ms(), &mut actions);
                    out.extend(actions.drain(..).map(|a| PtyEvent::Action(Box::new(a))));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::actions::StateAction;

    #[test]
    fn marks_become_actions_in_stream_order() {
        let mut p = OutputPipeline::new("n1".into(), None, false);
        let mut events = p.feed(b"$ \x1b]633;E;echo hi;n1\x07\x1b]633;C\x07hi\r\n");
        events.extend(p.feed(b"\x1b]633;D;0\x07$ "));
        let kinds: Vec<String> = events
            .iter()
            .map(|e| match e {
                PtyEvent::Data(d) => format!("data:{d}"),
                PtyEvent::Action(a) => match a.as_ref() {
                    StateAction::TerminalCommandDetectionAvailable(_) => "available".into(),
                    StateAction::TerminalCommandExecuted(c) => format!("exec:{}", c.command_line),
                    StateAction::TerminalCommandFinished(f) => format!("done:{:?}", f.exit_code),
                    other => format!("{other:?}"),
                },
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "data:$ ",
                "available",
                "exec:echo hi",
                "data:hi\r\n",
                "done:Some(0)",
                "data:$ "
            ]
        );
    }
}
