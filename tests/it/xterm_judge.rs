//! The xterm.js judge: a late subscriber, a client reconnecting after its history was
//! trimmed, and a late subscriber that kept watching must reach the screen a watcher saw from
//! the start, as VS Code's own emulator (`@xterm/headless` 6 with Unicode 11 widths and 1000
//! lines of scrollback, tests/xterm/judge.js) draws it.
//!
//! This file is the harness the `xterm_judge_*` modules share: [`Scene`] (a daemon with small
//! `--scrollback-bytes`/`--history-bytes`, so the model's dump and not raw replay carries the
//! state; a bash terminal watched from its creation; a client that saw its start and went
//! away), [`Judge`] (one `node judge.js --batch` process per test) and the comparison
//! ([`differences`]): every cell (character, width, colours, attributes, underline style and
//! colour), the cursor, the active buffer, the primary screen under the alternate one, the
//! modes, the state later output depends on (pen, saved cursors, scroll region, tab stops,
//! charsets, pending wrap), and the scrollback rows the viewer got, which must be the newest
//! rows of the live scrollback.
//!
//! Where the model cannot hold a state (`avt` 0.19: docs/architecture.md, "The judge"), a check
//! names the difference classes it expects ([`Known`]); an expected class that does not show
//! fails the check as surely as an unexpected one, so the lists only shrink. Without node or
//! the judge's packages (`cd tests/xterm && npm ci`) the tests fail under `CI` and are skipped
//! loudly otherwise.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use crate::support::*;
use ahp::ahp_types::actions::{ActionEnvelope, StateAction, TerminalResizedAction};
use ahp::ahp_types::state::{TerminalContentPart, TerminalState};
use serde_json::{json, Value};

/// Small caps: a few KiB of output trim the content, and a reconnect finds its history gone.
pub const FLAGS: &[&str] = &["--scrollback-bytes", "4096", "--history-bytes", "1024"];

/// Where the judge lives.
const JUDGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/xterm/judge.js");

/// What the snapshot of a terminal whose history was trimmed starts with (the preamble).
const PREFIX: &str = "\x1b[?1049l\x1b[r";

// ─── The judge process ───────────────────────────────────────────────────────

/// One `node judge.js --batch` process: a case in, a screen (JSON) out.
pub struct Judge {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// A step of a case: text fed to the emulator, or a resize.
#[derive(Debug, Clone)]
pub enum Step {
    Text(String),
    Resize(u16, u16),
}

impl Judge {
    /// The judge, or `None` (after a loud message) when node or the packages are missing;
    /// panics instead under `CI`, where .ci/run installs them.
    pub fn start() -> Option<Judge> {
        let ok = Command::new("node")
            .args([JUDGE, "--help"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let why = "node with the judge's packages is needed (cd tests/xterm && npm ci)";
            assert!(std::env::var_os("CI").is_none(), "{why}");
            eprintln!("SKIPPED: {why}");
            return None;
        }
        let mut child = Command::new("node")
            .args([JUDGE, "--batch"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("node judge.js --batch starts");
        let stdin = child.stdin.take().expect("judge stdin");
        let stdout = BufReader::new(child.stdout.take().expect("judge stdout"));
        Some(Judge {
            child,
            stdin,
            stdout,
        })
    }

    /// The screen of an emulator of `cols`×`rows` fed `steps`.
    pub fn screen(&mut self, cols: u16, rows: u16, steps: &[Step]) -> Value {
        let mut merged: Vec<Value> = Vec::new();
        let mut text = String::new();
        for s in steps {
            match s {
                Step::Text(t) => text.push_str(t),
                Step::Resize(c, r) => {
                    if !text.is_empty() {
                        merged.push(json!({ "text": std::mem::take(&mut text) }));
                    }
                    merged.push(json!({ "resize": [c, r] }));
                }
            }
        }
        if !text.is_empty() {
            merged.push(json!({ "text": text }));
        }
        let case = json!({"cols": cols, "rows": rows, "steps": merged});
        let line = tokio::task::block_in_place(|| {
            writeln!(self.stdin, "{case}").expect("writing to the judge");
            self.stdin.flush().expect("writing to the judge");
            let mut line = String::new();
            self.stdout.read_line(&mut line).expect("reading the judge");
            line
        });
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the judge answered {line:?}: {e}"));
        assert!(v.get("error").is_none(), "the judge failed: {v}");
        v
    }
}

impl Drop for Judge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ─── The comparison ──────────────────────────────────────────────────────────

/// Difference classes a check expects, each with the reason (what the model cannot hold).
pub type Known = &'static [(&'static str, &'static str)];

/// No difference expected.
pub const EXACT: Known = &[];

/// The differences of `got` from `live`: class → the first instance, described.
pub fn differences(live: &Value, got: &Value) -> BTreeMap<String, String> {
    let mut d = BTreeMap::new();
    let mut note = |class: String, what: String| {
        d.entry(class).or_insert(what);
    };
    for key in ["cols", "rows", "buffer"] {
        if live[key] != got[key] {
            note(key.into(), format!("live {} got {}", live[key], got[key]));
        }
    }
    let (lc, gc) = (&live["cursor"], &got["cursor"]);
    if lc["x"] != gc["x"] || lc["y"] != gc["y"] {
        note(
            "cursor position".into(),
            format!(
                "live ({}, {}) got ({}, {})",
                lc["x"], lc["y"], gc["x"], gc["y"]
            ),
        );
    }
    for (key, a) in lc.as_object().into_iter().flatten() {
        if key != "x" && key != "y" && *a != gc[key] {
            note(format!("cursor {key}"), format!("live {a} got {}", gc[key]));
        }
    }
    for (key, a) in live["modes"].as_object().into_iter().flatten() {
        let b = &got["modes"][key];
        if a != b {
            note(format!("mode {key}"), format!("live {a} got {b}"));
        }
    }
    rows(&mut note, "screen", &live["screen"], &got["screen"]);
    rows(&mut note, "primary", &live["primary"], &got["primary"]);
    if live["primarySaved"] != got["primarySaved"] {
        note(
            "primary saved cursor".into(),
            format!("live {} got {}", live["primarySaved"], got["primarySaved"]),
        );
    }
    for (key, a) in live["hidden"].as_object().into_iter().flatten() {
        let b = &got["hidden"][key];
        if a != b {
            note(key.to_string(), format!("live {a} got {b}"));
        }
    }
    // The scrollback the viewer got must be the newest rows of the live one.
    let (ls, gs) = (array(&live["scrollback"]), array(&got["scrollback"]));
    if gs.len() > ls.len() {
        note(
            "scrollback longer".into(),
            format!("live {} rows got {}", ls.len(), gs.len()),
        );
    }
    let n = gs.len().min(ls.len());
    rows(
        &mut note,
        "scrollback",
        &Value::Array(ls[ls.len() - n..].to_vec()),
        &Value::Array(gs[gs.len() - n..].to_vec()),
    );
    d
}

fn array(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// A blank cell in the default pen, as the judge describes one.
fn blank() -> Value {
    json!({"ch": "", "w": 1})
}

/// A written space and an erased cell look the same (xterm keeps them apart: `" "` and `""`).
fn erased(mut c: Value) -> Value {
    if c["ch"] == " " {
        c["ch"] = json!("");
    }
    c
}

fn rows(note: &mut impl FnMut(String, String), area: &str, live: &Value, got: &Value) {
    let (l, g) = (array(live), array(got));
    if l.len() != g.len() {
        note(
            format!("{area} rows"),
            format!("live {} got {}", l.len(), g.len()),
        );
    }
    for (y, (a, b)) in l.iter().zip(g).enumerate() {
        if a["wrapped"] != b["wrapped"] {
            note(
                format!("{area} wrapped"),
                format!("row {y}: live {} got {}", a["wrapped"], b["wrapped"]),
            );
        }
        let (ac, bc) = (array(&a["cells"]), array(&b["cells"]));
        for x in 0..ac.len().max(bc.len()) {
            let ca = erased(ac.get(x).cloned().unwrap_or_else(blank));
            let cb = erased(bc.get(x).cloned().unwrap_or_else(blank));
            if ca == cb {
                continue;
            }
            for key in ["ch", "w", "fg", "bg", "underline"] {
                if ca[key] != cb[key] {
                    note(
                        format!("{area} {key}"),
                        format!("row {y} col {x}: live {ca} got {cb}"),
                    );
                }
            }
            let flags = |c: &Value| -> Vec<String> {
                array(&c["attrs"])
                    .iter()
                    .filter_map(|f| f.as_str().map(String::from))
                    .collect()
            };
            let (fa, fb) = (flags(&ca), flags(&cb));
            for f in fa.iter().filter(|f| !fb.contains(f)) {
                note(
                    format!("{area} {f} lost"),
                    format!("row {y} col {x}: live {ca} got {cb}"),
                );
            }
            for f in fb.iter().filter(|f| !fa.contains(f)) {
                note(
                    format!("{area} {f} added"),
                    format!("row {y} col {x}: live {ca} got {cb}"),
                );
            }
        }
    }
}

/// A screen's text, row by row, for failure messages.
pub fn screen_text(v: &Value, area: &str) -> String {
    array(&v[area])
        .iter()
        .map(|r| {
            array(&r["cells"])
                .iter()
                .map(|c| c["ch"].as_str().unwrap_or("?").to_string())
                .map(|s| if s.is_empty() { " ".into() } else { s })
                .collect::<String>()
                .trim_end()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

// ─── Clients ─────────────────────────────────────────────────────────────────

/// The text a client feeds its emulator from a snapshot: every part's text, in order.
pub fn snapshot_text(state: &TerminalState) -> String {
    state
        .content
        .iter()
        .map(|p| match p {
            TerminalContentPart::Unclassified(u) => u.value.as_str(),
            TerminalContentPart::Command(c) => c.output.as_str(),
            _ => "",
        })
        .collect()
}

/// The steps of `uri`'s stream in `log` after `after` up to `until` (serverSeqs).
fn stream(log: &[ActionEnvelope], uri: &str, after: i64, until: i64) -> Vec<Step> {
    log.iter()
        .filter(|e| e.channel == uri && e.server_seq as i64 > after && e.server_seq as i64 <= until)
        .filter_map(|e| match &e.action {
            StateAction::TerminalData(d) => Some(Step::Text(d.data.clone())),
            StateAction::TerminalResized(r) => Some(Step::Resize(r.cols as u16, r.rows as u16)),
            _ => None,
        })
        .collect()
}

/// A late subscriber that stays: its snapshot and what it received since.
struct Watcher {
    client: Ahp,
    state: TerminalState,
    from: i64,
    /// The check that subscribed it.
    since: String,
}

/// A terminal watched from its creation by `live`, a client that saw its start and went away,
/// and the judge. See the module docs.
pub struct Scene {
    pub d: Daemon,
    pub live: Ahp,
    pub uri: String,
    away: (String, i64),
    size: (u16, u16),
    /// The size the terminal was created with.
    created: (u16, u16),
    /// The live watcher's snapshot at subscribe time, and its `fromSeq`.
    initial: (String, i64),
    watchers: Vec<Watcher>,
    judge: Judge,
}

impl Scene {
    /// A bash terminal of `cols`×`rows`, ready for commands; `None` without the judge.
    pub async fn new(tag: &str, cols: u16, rows: u16) -> Option<Scene> {
        let judge = Judge::start()?;
        let d = Daemon::start_with(FLAGS);
        let mut live = Ahp::connect(&d.url(), "live", &[]).await;
        let uri = term_uri(tag);
        live.create_terminal(&uri, json!({"cols": cols, "rows": rows}))
            .await
            .expect("createTerminal");
        let snap = live.subscribe(&uri).await.expect("subscribe");
        let initial = (snapshot_text(&terminal_state(&snap)), snap.from_seq);
        live.ready(&uri).await;
        let (raw, init) = Raw::connect_init(&d.url(), "away", &[ROOT, &uri]).await;
        let seen = init["serverSeq"].as_i64().expect("serverSeq");
        drop(raw);
        Some(Scene {
            d,
            live,
            uri,
            away: ("away".into(), seen),
            size: (cols, rows),
            created: (cols, rows),
            initial,
            watchers: Vec::new(),
            judge,
        })
    }

    /// Types `command` and waits for `marker` in the live stream.
    pub async fn run(&mut self, command: &str, marker: &str) {
        self.live.type_text(&self.uri, command).await;
        self.live
            .wait_data(&self.uri, marker, Duration::from_secs(30))
            .await;
    }

    /// A reconnecting client's snapshot (its history is gone) and its `fromSeq`.
    async fn reconnected(&self) -> (TerminalState, i64) {
        let mut raw = Raw::connect(&self.d.url()).await;
        let resp = raw
            .request(
                "reconnect",
                json!({"channel": ROOT, "clientId": self.away.0,
                       "lastSeenServerSeq": self.away.1, "subscriptions": [ROOT, &self.uri]}),
            )
            .await;
        let result = &resp["result"];
        assert_eq!(result["type"], "snapshot", "history should be gone: {resp}");
        let snap = array(&result["snapshots"])
            .iter()
            .find(|s| s["resource"] == self.uri.as_str())
            .unwrap_or_else(|| panic!("no snapshot of the terminal: {resp}"));
        let state: TerminalState =
            serde_json::from_value(snap["state"].clone()).expect("a terminal state");
        (state, snap["fromSeq"].as_i64().expect("fromSeq"))
    }

    /// Makes every client receive everything up to `seq`: a resize to the current size
    /// (which changes nothing) is echoed after all of it.
    async fn everyone_past(&mut self, seq: i64) {
        let (cols, rows) = self.size;
        self.live
            .dispatch(
                &self.uri,
                StateAction::TerminalResized(TerminalResizedAction {
                    cols: cols.into(),
                    rows: rows.into(),
                }),
            )
            .await;
        let uri = self.uri.clone();
        let past = |log: &[ActionEnvelope]| {
            log.iter()
                .any(|e| e.channel == uri && e.server_seq as i64 > seq)
        };
        self.live
            .wait_for(&format!("serverSeq past {seq}"), RPC_TIMEOUT, past)
            .await;
        for w in &mut self.watchers {
            w.client
                .wait_for(&format!("serverSeq past {seq}"), RPC_TIMEOUT, past)
                .await;
        }
    }

    /// The live screen at `until`: the live watcher's first snapshot, then its stream.
    fn live_screen(&mut self, until: i64) -> Value {
        let mut steps = vec![Step::Text(self.initial.0.clone())];
        steps.extend(stream(&self.live.log, &self.uri, self.initial.1, until));
        let (cols, rows) = self.created;
        self.judge.screen(cols, rows, &steps)
    }

    /// Checks every viewer against the live screen: a late subscriber (which then stays,
    /// for the checks that follow), a reconnecting client, and the late subscribers of
    /// earlier checks fed their snapshot and everything since. `known` are the difference
    /// classes expected, each of which must show in at least one viewer. The snapshots must
    /// start with the synthesized prefix (the model carried the state).
    pub async fn check(&mut self, what: &str, known: Known) {
        let late = Ahp::connect(&self.d.url(), &format!("late-{}", self.watchers.len()), &[]).await;
        let (state, from) = late.subscribe_terminal(&self.uri).await;
        let reconnected = self.reconnected().await;
        let text = snapshot_text(&state);
        assert!(
            text.starts_with(PREFIX),
            "{what}: the late subscriber's snapshot has no synthesized prefix (the history \
             was not trimmed): {:?}",
            clip(text, 200)
        );
        let mut viewers: Vec<(String, i64, u16, u16, Vec<Step>)> = Vec::new();
        let size = |s: &TerminalState| (s.cols.unwrap_or(80) as u16, s.rows.unwrap_or(24) as u16);
        let (c, r) = size(&state);
        viewers.push((
            "late subscriber".into(),
            from,
            c,
            r,
            vec![Step::Text(snapshot_text(&state))],
        ));
        let (c, r) = size(&reconnected.0);
        viewers.push((
            "reconnected client".into(),
            reconnected.1,
            c,
            r,
            vec![Step::Text(snapshot_text(&reconnected.0))],
        ));
        let newest = viewers.iter().map(|v| v.1).max().unwrap_or(from);
        self.everyone_past(newest).await;
        for w in &self.watchers {
            let (c, r) = size(&w.state);
            let mut steps = vec![Step::Text(snapshot_text(&w.state))];
            steps.extend(stream(&w.client.log, &self.uri, w.from, from));
            viewers.push((
                format!("subscriber since {:?}, with the output since", w.since),
                from,
                c,
                r,
                steps,
            ));
        }
        self.watchers.push(Watcher {
            client: late,
            state,
            from,
            since: what.into(),
        });
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        let mut failures = Vec::new();
        for (who, until, cols, rows, steps) in viewers {
            let live = self.live_screen(until);
            let got = self.judge.screen(cols, rows, &steps);
            let diff = differences(&live, &got);
            let unexpected: Vec<_> = diff
                .iter()
                .filter(|(k, _)| !known.iter().any(|(c, _)| c == k))
                .collect();
            if !unexpected.is_empty() {
                failures.push(format!(
                    "the {who} differs from the live screen:\n{}\n--- {who}:\n{}\n--- live:\n{}",
                    unexpected
                        .iter()
                        .map(|(k, v)| format!("  {k}: {}", clip(v.to_string(), 400)))
                        .collect::<Vec<_>>()
                        .join("\n"),
                    screen_text(&got, "screen"),
                    screen_text(&live, "screen"),
                ));
            }
            for (k, v) in diff {
                seen.entry(k).or_insert(format!("{who}: {v}"));
            }
        }
        for (class, why) in known {
            if !seen.contains_key(*class) {
                failures.push(format!(
                    "the known difference {class:?} ({why}) no longer shows: take it off the list"
                ));
            }
        }
        assert!(failures.is_empty(), "{what}:\n{}", failures.join("\n\n"));
    }
}
