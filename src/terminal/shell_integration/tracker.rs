//! Command tracker: turns parser [`Mark`]s into AHP terminal actions.
//!
//! Job: keep the small per-terminal state needed to map shell-integration marks (OSC 633/133,
//! OSC 7, titles) to `terminal/commandDetectionAvailable`, `terminal/commandExecuted`,
//! `terminal/commandFinished`, `terminal/cwdChanged` and `terminal/titleChanged`, in mark order.
//! It touches nothing but its own state; time is passed in by the caller.

use ahp_types::actions::{
    StateAction, TerminalCommandDetectionAvailableAction, TerminalCommandExecutedAction,
    TerminalCommandFinishedAction, TerminalCwdChangedAction, TerminalTitleChangedAction,
};

use super::parser::Mark;

/// Current server time in Unix milliseconds (the `now_ms` argument of
/// [`CommandTracker::on_mark`] in production).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Running {
    command_id: String,
    started_ms: i64,
}

/// Per-terminal command state. Feed it every [`Mark`] in stream order. Serializable: it is
/// carried across a live upgrade (docs/upgrade.md).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CommandTracker {
    detection_available: bool,
    /// Command line from the last trusted `E` mark since the previous `C`.
    command_line: Option<String>,
    running: Option<Running>,
    /// Last reported cwd, as a `file://` URI.
    cwd: Option<String>,
}

impl CommandTracker {
    /// Creates a tracker. `initial_cwd` is the terminal's cwd as already reported to clients
    /// (a `file://` URI); a cwd mark equal to it produces no `cwdChanged`.
    pub fn new(initial_cwd: Option<String>) -> Self {
        CommandTracker {
            cwd: initial_cwd,
            ..Default::default()
        }
    }

    /// Whether `terminal/commandDetectionAvailable` has been emitted.
    pub fn detection_available(&self) -> bool {
        self.detection_available
    }

    /// `commandId` of the command between its `C` and `D` marks, if any.
    pub fn running_command_id(&self) -> Option<&str> {
        self.running.as_ref().map(|r| r.command_id.as_str())
    }

    /// Last cwd reported (or given to [`new`](Self::new)), as a `file://` URI.
    pub fn cwd(&self) -> Option<&str> {
        self.cwd.as_deref()
    }

    /// Maps one mark to zero or more actions, appended to `out` in order. `now_ms` is the
    /// server's current Unix time in milliseconds (see [`now_ms`]).
    ///
    /// * Any 633/133 mark (A, B, C, D, E, P) seen for the first time →
    ///   `terminal/commandDetectionAvailable`, before the mark's own action. Cwd and title marks
    ///   (which also come from OSC 7 / OSC 0/2 without shell integration) do not count.
    /// * `A` (PromptStart), `B` (CommandStart), other `P` properties → nothing more.
    /// * `E` (CommandLine) with `nonce_ok` → remembered as the next command's line; an `E`
    ///   without the terminal's nonce is ignored (a program can print anything).
    /// * `C` (CommandExecuted) → `terminal/commandExecuted {commandId: new UUID v4,
    ///   commandLine: last trusted E since the previous C (or ""), timestamp: now_ms}`. If a
    ///   command was still running (C without D), it is first finished with no exit code, so
    ///   no command part stays incomplete forever.
    /// * `D` (CommandFinished) with a running command → `terminal/commandFinished {commandId,
    ///   exitCode (absent if the mark had none), durationMs: now_ms − start, at least 0}`;
    ///   `D` with nothing running (empty Enter, Ctrl-C at the prompt) → nothing.
    /// * Cwd (633 `P;Cwd=`, OSC 7, OSC 1337 `CurrentDir=`) → `terminal/cwdChanged {cwd:
    ///   file:// URI}` when the URI differs from the last one reported; relative paths are
    ///   ignored.
    /// * Title (OSC 0/2) → `terminal/titleChanged {title}`.
    pub fn on_mark(&mut self, mark: Mark, now_ms: i64, out: &mut Vec<StateAction>) {
        let integration = !matches!(mark, Mark::Cwd(_) | Mark::Title(_));
        if integration && !self.detection_available {
            self.detection_available = true;
            out.push(StateAction::TerminalCommandDetectionAvailable(
                TerminalCommandDetectionAvailableAction {},
            ));
        }
        match mark {
            Mark::PromptStart | Mark::CommandStart | Mark::Property { .. } => {}
            Mark::CommandLine {
                command_line,
                nonce_ok,
            } => {
                if nonce_ok {
                    self.command_line = Some(command_line);
                }
            }
            Mark::CommandExecuted => {
                self.finish_running(None, now_ms, out);
                let command_id = uuid::Uuid::new_v4().to_string();
                self.running = Some(Running {
                    command_id: command_id.clone(),
                    started_ms: now_ms,
                });
                out.push(StateAction::TerminalCommandExecuted(
                    TerminalCommandExecutedAction {
                        command_id,
                        command_line: self.command_line.take().unwrap_or_default(),
                        timestamp: now_ms,
                    },
                ));
            }
            Mark::CommandFinished { exit_code } => self.finish_running(exit_code, now_ms, out),
            Mark::Cwd(path) => {
                if let Ok(url) = url::Url::from_file_path(&path) {
                    let uri = String::from(url);
                    if self.cwd.as_deref() != Some(uri.as_str()) {
                        self.cwd = Some(uri.clone());
                        out.push(StateAction::TerminalCwdChanged(TerminalCwdChangedAction {
                            cwd: uri,
                        }));
                    }
                }
            }
            Mark::Title(title) => {
                out.push(StateAction::TerminalTitleChanged(
                    TerminalTitleChangedAction { title },
                ));
            }
        }
    }

    fn finish_running(&mut self, exit_code: Option<i64>, now_ms: i64, out: &mut Vec<StateAction>) {
        if let Some(r) = self.running.take() {
            out.push(StateAction::TerminalCommandFinished(
                TerminalCommandFinishedAction {
                    command_id: r.command_id,
                    exit_code,
                    duration_ms: Some(now_ms.saturating_sub(r.started_ms).max(0)),
                },
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(tracker: &mut CommandTracker, marks: Vec<(Mark, i64)>) -> Vec<StateAction> {
        let mut out = Vec::new();
        for (m, t) in marks {
            tracker.on_mark(m, t, &mut out);
        }
        out
    }

    fn cl(s: &str, ok: bool) -> Mark {
        Mark::CommandLine {
            command_line: s.into(),
            nonce_ok: ok,
        }
    }

    #[test]
    fn full_cycle() {
        let mut t = CommandTracker::new(None);
        let out = run(
            &mut t,
            vec![
                (Mark::PromptStart, 1),
                (Mark::CommandStart, 2),
                (cl("echo hi", true), 3),
                (Mark::CommandExecuted, 10),
                (Mark::CommandFinished { exit_code: Some(0) }, 35),
            ],
        );
        assert_eq!(out.len(), 3);
        assert!(matches!(
            out[0],
            StateAction::TerminalCommandDetectionAvailable(_)
        ));
        let StateAction::TerminalCommandExecuted(e) = &out[1] else {
            panic!("{out:?}")
        };
        assert_eq!(e.command_line, "echo hi");
        assert_eq!(e.timestamp, 10);
        assert!(uuid::Uuid::parse_str(&e.command_id).is_ok());
        let StateAction::TerminalCommandFinished(f) = &out[2] else {
            panic!("{out:?}")
        };
        assert_eq!(f.command_id, e.command_id);
        assert_eq!(f.exit_code, Some(0));
        assert_eq!(f.duration_ms, Some(25));
        assert!(t.running_command_id().is_none());
    }

    #[test]
    fn untrusted_command_line_ignored_and_line_consumed_by_c() {
        let mut t = CommandTracker::new(None);
        let out = run(
            &mut t,
            vec![
                (cl("good", true), 0),
                (cl("spoofed", false), 0),
                (Mark::CommandExecuted, 0),
                (Mark::CommandFinished { exit_code: None }, 0),
                (Mark::CommandExecuted, 0),
            ],
        );
        let lines: Vec<_> = out
            .iter()
            .filter_map(|a| match a {
                StateAction::TerminalCommandExecuted(e) => Some(e.command_line.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(lines, vec!["good".to_string(), String::new()]);
        let StateAction::TerminalCommandFinished(f) = &out[2] else {
            panic!("{out:?}")
        };
        assert_eq!(f.exit_code, None);
    }

    #[test]
    fn d_without_c_is_ignored_and_c_twice_finishes_first() {
        let mut t = CommandTracker::new(None);
        let out = run(
            &mut t,
            vec![(Mark::CommandFinished { exit_code: Some(1) }, 0)],
        );
        assert_eq!(out.len(), 1); // only detection available
        let out = run(
            &mut t,
            vec![(Mark::CommandExecuted, 0), (Mark::CommandExecuted, 5)],
        );
        assert_eq!(out.len(), 3);
        assert!(
            matches!(&out[1], StateAction::TerminalCommandFinished(f) if f.exit_code.is_none())
        );
    }

    #[test]
    fn cwd_dedup_and_uri_encoding() {
        let mut t = CommandTracker::new(Some("file:///tmp".into()));
        let out = run(
            &mut t,
            vec![
                (Mark::Cwd("/tmp".into()), 0),
                (Mark::Cwd("/home/u/My Dir/✓".into()), 0),
                (Mark::Cwd("/home/u/My Dir/✓".into()), 0),
                (Mark::Cwd("relative".into()), 0),
                (Mark::Cwd("/srv/a=b".into()), 0),
                (Mark::Cwd("/srv/%ZZ".into()), 0),
            ],
        );
        let cwds: Vec<_> = out
            .iter()
            .map(|a| match a {
                StateAction::TerminalCwdChanged(c) => c.cwd.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            cwds,
            vec![
                "file:///home/u/My%20Dir/%E2%9C%93",
                "file:///srv/a=b",
                "file:///srv/%25ZZ"
            ]
        );
        assert!(!t.detection_available());
    }

    #[test]
    fn titles_pass() {
        let mut t = CommandTracker::new(None);
        let out = run(&mut t, vec![(Mark::Title("x".into()), 0)]);
        assert!(matches!(&out[..], [StateAction::TerminalTitleChanged(a)] if a.title == "x"));
    }
}
