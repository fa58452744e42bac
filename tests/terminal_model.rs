//! The terminal model, black-box: a late subscriber and a client reconnecting after its
//! history was trimmed reach the screen a live watcher sees, and terminal queries get exactly
//! one answer, from the host, whether or not anyone watches.
//!
//! Screens are judged with `alacritty_terminal`, an emulator independent of the daemon's
//! (`avt`): the live watcher's judge is fed every `terminal/data` (and resized at every
//! `terminal/resized`) up to the snapshot's `fromSeq`; the other judges are fed the text of
//! every part of their snapshot. alacritty answers queries itself, so each judge also shows
//! that replaying the stream or a snapshot makes a client answer nothing.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ahp::ahp_types::actions::{ActionEnvelope, StateAction, TerminalResizedAction};
use ahp::ahp_types::state::{TerminalContentPart, TerminalState};
use alacritty_terminal::event::{Event, EventListener};
use alacritty_terminal::grid::Dimensions;
use alacritty_terminal::index::{Column, Line};
use alacritty_terminal::term::cell::Flags;
use alacritty_terminal::term::{Config, Term, TermMode};
use alacritty_terminal::vte::ansi;
use common::*;
use serde_json::json;
use unicode_normalization::UnicodeNormalization;

/// Small caps, so that a few hundred KiB of output trims the content many times and a
/// reconnect finds its history gone.
const FLAGS: &[&str] = &["--scrollback-bytes", "16384", "--history-bytes", "1024"];

const COLS: u16 = 100;
const ROWS: u16 = 30;

// ─── The judge ───────────────────────────────────────────────────────────────

#[derive(Clone, Default)]
struct Listener(Arc<Mutex<(Option<String>, Vec<String>)>>);

impl EventListener for Listener {
    fn send_event(&self, e: Event) {
        let mut l = self.0.lock().unwrap();
        match e {
            Event::Title(t) => l.0 = Some(t),
            Event::ResetTitle => l.0 = None,
            Event::PtyWrite(s) => l.1.push(format!("PtyWrite({s:?})")),
            Event::ColorRequest(i, _) => l.1.push(format!("ColorRequest({i})")),
            Event::TextAreaSizeRequest(_) => l.1.push("TextAreaSizeRequest".into()),
            _ => {}
        }
    }
}

struct Size(usize, usize);

impl Dimensions for Size {
    fn total_lines(&self) -> usize {
        self.1
    }
    fn screen_lines(&self) -> usize {
        self.1
    }
    fn columns(&self) -> usize {
        self.0
    }
}

struct Judge {
    term: Term<Listener>,
    parser: ansi::Processor,
    listener: Listener,
}

/// What a person sees (and what the program's input will look like).
#[derive(Debug, PartialEq)]
struct Screen {
    /// Each row: per cell, its text (NFC) and, unless blank, its colours and flags.
    rows: Vec<String>,
    cursor: (i32, usize),
    alt_screen: bool,
    modes: Vec<(&'static str, bool)>,
    title: Option<String>,
}

const MODES: &[(&str, TermMode)] = &[
    ("cursor shown", TermMode::SHOW_CURSOR),
    ("app cursor", TermMode::APP_CURSOR),
    ("app keypad", TermMode::APP_KEYPAD),
    ("mouse click", TermMode::MOUSE_REPORT_CLICK),
    ("mouse drag", TermMode::MOUSE_DRAG),
    ("mouse motion", TermMode::MOUSE_MOTION),
    ("mouse sgr", TermMode::SGR_MOUSE),
    ("bracketed paste", TermMode::BRACKETED_PASTE),
    ("focus", TermMode::FOCUS_IN_OUT),
    ("autowrap", TermMode::LINE_WRAP),
    ("origin", TermMode::ORIGIN),
    ("insert", TermMode::INSERT),
];

impl Judge {
    fn new(cols: u16, rows: u16) -> Judge {
        let listener = Listener::default();
        let term = Term::new(
            Config::default(),
            &Size(cols.into(), rows.into()),
            listener.clone(),
        );
        Judge {
            term,
            parser: ansi::Processor::new(),
            listener,
        }
    }

    fn feed(&mut self, text: &str) {
        self.parser.advance(&mut self.term, text.as_bytes());
    }

    fn resize(&mut self, cols: u16, rows: u16) {
        self.term.resize(Size(cols.into(), rows.into()));
    }

    /// What the emulator would have written to the pty (answers to queries).
    fn answers(&self) -> Vec<String> {
        self.listener.0.lock().unwrap().1.clone()
    }

    fn screen(&self) -> Screen {
        let g = self.term.grid();
        let mut rows = Vec::new();
        for r in 0..g.screen_lines() {
            let row = &g[Line(r as i32)];
            let mut line = String::new();
            for c in 0..g.columns() {
                let cell = &row[Column(c)];
                if cell.flags.contains(Flags::WIDE_CHAR_SPACER) {
                    continue;
                }
                let mut t = cell.c.to_string();
                if let Some(z) = cell.zerowidth() {
                    t.extend(z.iter());
                }
                let t: String = t.nfc().collect();
                let f = cell.flags - Flags::WRAPLINE - Flags::LEADING_WIDE_CHAR_SPACER;
                if t == " " && !f.intersects(Flags::INVERSE | Flags::ALL_UNDERLINES) {
                    line.push_str(&format!("[ {:?}]", cell.bg));
                } else {
                    line.push_str(&format!("[{t} {:?} {:?} {:x}]", cell.fg, cell.bg, f.bits()));
                }
            }
            rows.push(line);
        }
        let m = *self.term.mode();
        Screen {
            rows,
            cursor: (g.cursor.point.line.0, g.cursor.point.column.0),
            alt_screen: m.contains(TermMode::ALT_SCREEN),
            modes: MODES.iter().map(|(n, f)| (*n, m.contains(*f))).collect(),
            title: self.listener.0.lock().unwrap().0.clone(),
        }
    }

    /// The screen's text, for failure messages.
    fn text(&self) -> String {
        let g = self.term.grid();
        (0..g.screen_lines())
            .map(|r| {
                let row = &g[Line(r as i32)];
                let mut s = String::new();
                for c in 0..g.columns() {
                    s.push(row[Column(c)].c);
                    if let Some(z) = row[Column(c)].zerowidth() {
                        s.extend(z.iter());
                    }
                }
                s.nfc().collect::<String>().trim_end().to_string()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The text a client feeds its emulator from a snapshot: every part's text, in order.
fn snapshot_text(state: &TerminalState) -> String {
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

/// A judge that saw the live stream of `uri` up to `until` (a `fromSeq`), after the content
/// of the watcher's first snapshot (`initial`).
fn live_judge(initial: &str, log: &[ActionEnvelope], uri: &str, until: i64) -> Judge {
    let mut j = Judge::new(COLS, ROWS);
    j.feed(initial);
    for e in log
        .iter()
        .filter(|e| e.channel == uri && e.server_seq as i64 <= until)
    {
        match &e.action {
            StateAction::TerminalData(d) => j.feed(&d.data),
            StateAction::TerminalResized(r) => j.resize(r.cols as u16, r.rows as u16),
            _ => {}
        }
    }
    j
}

fn snapshot_judge(state: &TerminalState) -> Judge {
    let mut j = Judge::new(
        state.cols.unwrap_or(80) as u16,
        state.rows.unwrap_or(24) as u16,
    );
    j.feed(&snapshot_text(state));
    j
}

// ─── Clients ─────────────────────────────────────────────────────────────────

/// A terminal of `COLS`×`ROWS` watched from the start by `live`, and a `reconnector` client
/// that saw its creation and then went away.
struct Scene {
    d: Daemon,
    live: Ahp,
    uri: String,
    /// (client id, last serverSeq seen) of the client that will reconnect.
    away: (String, i64),
    size: (i64, i64),
    /// The text of the live watcher's snapshot at subscribe time.
    initial: String,
}

async fn scene(tag: &str) -> Scene {
    let d = Daemon::start_with(FLAGS);
    let mut live = Ahp::connect(&d.url(), "live", &[]).await;
    let uri = term_uri(tag);
    live.create_terminal(&uri, json!({"cols": COLS, "rows": ROWS}))
        .await
        .expect("createTerminal");
    let initial = snapshot_text(&terminal_state(
        &live.subscribe(&uri).await.expect("subscribe"),
    ));
    live.ready(&uri).await;
    let (raw, init) = Raw::connect_init(&d.url(), "away", &[ROOT, &uri]).await;
    let seen = init["serverSeq"].as_i64().unwrap();
    drop(raw);
    Scene {
        d,
        live,
        uri,
        away: ("away".into(), seen),
        size: (COLS.into(), ROWS.into()),
        initial,
    }
}

impl Scene {
    /// Types a command and waits for `marker` in the live stream.
    async fn run(&mut self, command: &str, marker: &str) {
        self.live.type_text(&self.uri, command).await;
        self.live
            .wait_data(&self.uri, marker, Duration::from_secs(30))
            .await;
    }

    /// A late subscriber's state and the `fromSeq` of its snapshot.
    async fn late(&self) -> (TerminalState, i64) {
        let late = Ahp::connect(&self.d.url(), "late", &[]).await;
        late.subscribe_terminal(&self.uri).await
    }

    /// The terminal's state as a reconnecting client gets it (its history is gone, so the
    /// answer is a snapshot), with its `fromSeq`.
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
        let snap = result["snapshots"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["resource"] == self.uri.as_str())
            .unwrap_or_else(|| panic!("no snapshot of the terminal: {resp}"));
        let state: TerminalState = serde_json::from_value(snap["state"].clone()).unwrap();
        (state, snap["fromSeq"].as_i64().unwrap())
    }

    /// Waits until the live watcher has received everything up to `seq`: a resize to the
    /// current size (which changes nothing) is echoed after all of it.
    async fn live_until(&mut self, seq: i64) {
        let (cols, rows) = self.size;
        self.live
            .dispatch(
                &self.uri,
                StateAction::TerminalResized(TerminalResizedAction { cols, rows }),
            )
            .await;
        let uri = self.uri.clone();
        self.live
            .wait_for(
                &format!("serverSeq past {seq}"),
                Duration::from_secs(30),
                |log| {
                    log.iter()
                        .any(|e| e.channel == uri && e.server_seq as i64 > seq)
                },
            )
            .await;
    }

    async fn resize(&mut self, cols: i64, rows: i64) {
        self.size = (cols, rows);
        self.live
            .dispatch(
                &self.uri,
                StateAction::TerminalResized(TerminalResizedAction { cols, rows }),
            )
            .await;
    }

    /// Asserts that the late subscriber and the reconnecting client see the live screen,
    /// and that no judge answered anything.
    async fn assert_same_screen(&mut self, what: &str) {
        for (who, (state, from)) in [
            ("late subscriber", self.late().await),
            ("reconnected client", self.reconnected().await),
        ] {
            self.live_until(from).await;
            let live = live_judge(&self.initial, &self.live.log, &self.uri, from);
            let snap = snapshot_judge(&state);
            assert_eq!(snap.text(), live.text(), "{what}: the {who}'s text differs");
            assert_eq!(
                snap.screen(),
                live.screen(),
                "{what}: the {who}'s screen differs from the live one.\n--- {who}:\n{}\n--- live:\n{}",
                snap.text(),
                live.text()
            );
            assert_eq!(snap.answers(), Vec::<String>::new(), "{what}: {who}");
            assert_eq!(live.answers(), Vec::<String>::new(), "{what}: live");
        }
    }

    /// The snapshot starts with a synthesized prefix (the history was trimmed).
    async fn assert_prefixed(&self) -> TerminalState {
        let (state, _) = self.late().await;
        let text = snapshot_text(&state);
        assert!(
            text.starts_with("\x1b[?1049l\x1b[r"),
            "no synthesized prefix: {:?}",
            clip(text, 200)
        );
        state
    }
}

fn write_script(d: &Daemon, name: &str, body: &str) -> String {
    let path = d.home().join(name);
    std::fs::write(&path, body).unwrap();
    path.display().to_string()
}

// ─── Screens ─────────────────────────────────────────────────────────────────

/// Draws a header on the top three rows and keeps it there with a scroll region, so the
/// rest of the screen scrolls under it: only a model can show the header after a trim.
const HEADER: &str = "printf '\\e[2J\\e[1;1H\\e[1;31;44m header \\e[0m\\e[2;1H\\e[4munder 日本 é ñ\\e[0m\\e[3;1H\\e[7m---\\e[0m\\e[4;30r\\e[30;1H'\r";

#[tokio::test]
async fn coloured_output_far_beyond_the_scrollback() {
    let mut s = scene("model-colours").await;
    s.run(&format!("{HEADER}echo hdr-$((1+1))\r"), "hdr-2")
        .await;
    s.run(
        "for i in $(seq 1 4000); do printf '\\e[3%dm%05d \\e[1;4%dmbold\\e[0m plain\\n' $((i%8)) $i $((i%7)); done\r",
        "03999",
    )
    .await;
    s.run("echo end-$((1+1))\r", "end-2").await;
    let state = s.assert_prefixed().await;
    // Command parts keep their structure behind the prefix.
    assert!(
        state.content.iter().any(
            |p| matches!(p, TerminalContentPart::Command(c) if c.command_line.contains("end-$"))
        ),
        "the command part is gone: {:?}",
        state
            .content
            .iter()
            .map(|p| match p {
                TerminalContentPart::Command(c) =>
                    format!("cmd {:?} {}", c.command_line, c.output.len()),
                TerminalContentPart::Unclassified(u) => format!("text {}", u.value.len()),
                _ => "?".into(),
            })
            .collect::<Vec<_>>()
    );
    s.assert_same_screen("coloured flood").await;
}

#[tokio::test]
async fn a_full_screen_program_while_it_runs_and_after_it_leaves() {
    let mut s = scene("model-tui").await;
    let script = write_script(
        &s.d,
        "tui.sh",
        r#"printf 'before the program\n'
printf '\e[?1049h\e[H\e[2J\e[44m title bar \e[0m'
printf '\e[3;20r'
for i in $(seq 1 1500); do
  printf '\e[20;1H\n\e[3%dmlog line %d of the scrolling region\e[0m' $((i%8)) $i
  printf '\e7\e[1;60H\e[7m%5d\e[0m\e8' $i
done
printf '\e[25;1H\e[1mstatus: drawn\e[0m\e[10;5H'
printf 'drawn-%d' 2
read -rs line
printf '\e[r\e[?1049l'
echo left-$((1+1))
"#,
    );
    s.run(&format!("bash {script}\r"), "drawn-2").await;
    let state = s.assert_prefixed().await;
    // The raw text starts long after the first lines (they come from the model's dump, if
    // they are still on a screen).
    assert!(!snapshot_text(&state).contains("log line 5 of"));
    s.assert_same_screen("in the alternate screen").await;
    s.run("\r", "left-2").await;
    s.assert_same_screen("after leaving").await;
}

#[tokio::test]
async fn bracketed_paste_and_mouse_modes() {
    let mut s = scene("model-modes").await;
    s.run(
        "printf '\\e[?1000h\\e[?1006h\\e[?1004h\\e=\\e]2;modes title\\a'; seq 1 20000; echo end-$((1+1))\r",
        "end-2",
    )
    .await;
    s.assert_prefixed().await;
    s.assert_same_screen("modes").await;
    let (state, from) = s.late().await;
    let screen = snapshot_judge(&state).screen();
    assert!(screen.modes.contains(&("mouse click", true)), "{screen:?}");
    assert!(screen.modes.contains(&("mouse sgr", true)));
    assert!(screen.modes.contains(&("focus", true)));
    // bash turns bracketed paste on at its prompt.
    assert!(screen.modes.contains(&("bracketed paste", true)));
    assert_eq!(screen.title.as_deref(), Some("modes title"));
    assert!(from > 0);
}

#[tokio::test]
async fn wide_and_combining_characters() {
    let mut s = scene("model-wide").await;
    s.run(&format!("{HEADER}echo hdr-$((1+1))\r"), "hdr-2")
        .await;
    s.run(
        "for i in $(seq 1 2500); do printf '%d 日本語テキスト e\\xcc\\x81 n\\xcc\\x83 👍 終\\n' $i; done; printf 'wide-end 中文字 cafe\\xcc\\x81\\n'; echo end-$((1+1))\r",
        "end-2",
    )
    .await;
    s.assert_prefixed().await;
    s.assert_same_screen("wide and combining").await;
}

#[tokio::test]
async fn a_resize_in_the_middle() {
    let mut s = scene("model-resize").await;
    s.run(&format!("{HEADER}echo hdr-$((1+1))\r"), "hdr-2")
        .await;
    s.run("seq 1 8000; echo half-$((1+1))\r", "half-2").await;
    s.resize(70, 20).await;
    // A little output after the resize: the raw text the snapshots replay starts before the
    // resize, and the header drawn long before is still on the screen.
    s.run("echo end-$((1+1))\r", "end-2").await;
    s.assert_same_screen("resized, recent").await;
    // And once the model has passed the resize.
    s.run("seq 1 9000; echo far-$((1+1))\r", "far-2").await;
    s.assert_same_screen("resized, long ago").await;
}

// ─── Queries ─────────────────────────────────────────────────────────────────

const QUERY_SEQUENCES: [&str; 4] = ["\x1b[6n", "\x1b[c", "\x1b]11;?", "\x1b[?6n"];

/// Polls `path` until it holds a line starting with `prefix`; returns the file.
async fn wait_file(path: &std::path::Path, prefix: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if text.lines().any(|l| l.starts_with(prefix)) {
                return text;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{prefix:?} never appeared in {}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The commands that ask: the issue's CPR line, CPR after a cursor move, DA1, OSC 11 and
/// DECXCPR, each printing its answer to `out`; then whether a second answer came.
fn query_commands(out: &str) -> String {
    format!(
        "exec 3>{out}; printf '\\033[6n'; read -rs -d R reply; echo \"got:${{reply#*[}}\" >&3; \
         printf '\\033[5;7H\\033[6n'; read -rs -d R reply; echo \"cup:${{reply#*[}}\" >&3; \
         printf '\\033[c'; read -rs -d c reply; echo \"da1:${{reply#*[}}\" >&3; \
         printf '\\033]11;?\\033\\\\'; read -rs -d '\\' reply; echo \"osc11:${{reply#*]}}\" >&3; \
         printf '\\033[?6n'; read -rs -d R reply; echo \"xcpr:${{reply#*[}}\" >&3; \
         if read -rs -t 0.3 extra; then echo \"extra:$extra\" >&3; else echo \"one-answer-each\" >&3; fi\r"
    )
}

fn assert_answers(text: &str) {
    let line = |p: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(p))
            .unwrap_or_else(|| panic!("no {p} in {text:?}"))
            .to_string()
    };
    let got = line("got:");
    let (row, col) = got.split_once(';').unwrap_or_else(|| panic!("{got:?}"));
    assert!(row.parse::<u16>().is_ok_and(|r| r >= 1), "{got:?}");
    assert_eq!(
        col, "1",
        "after a newline the cursor is in column 1: {got:?}"
    );
    assert_eq!(line("cup:"), "5;7");
    assert_eq!(line("da1:"), "?1;2");
    assert!(
        line("osc11:").starts_with("11;rgb:0000/0000/0000"),
        "{text}"
    );
    assert!(line("xcpr:").starts_with("?5;"), "{text}");
    assert!(text.contains("one-answer-each"), "{text}");
}

#[tokio::test]
async fn queries_are_answered_with_nobody_watching() {
    let d = Daemon::start();
    let agent = Ahp::connect(&d.url(), "agent", &[]).await;
    let uri = term_uri("model-unwatched");
    agent.create_terminal(&uri, json!({})).await.unwrap();
    // Nobody subscribes: the shell starts, reads the commands and asks.
    let out = d.home().join("answers.txt");
    agent
        .type_text(&uri, &query_commands(&out.display().to_string()))
        .await;
    let text = wait_file(&out, "one-answer-each").await;
    assert_answers(&text);
}

#[tokio::test]
async fn queries_are_answered_once_and_cut_from_every_clients_data() {
    let d = Daemon::start();
    let (mut a, uri) = agent_with_terminal(&d, "model-watched").await;
    let mut b = Ahp::connect(&d.url(), "viewer", &[]).await;
    b.subscribe(&uri).await.unwrap();
    let out = d.home().join("answers.txt");
    a.type_text(&uri, &query_commands(&out.display().to_string()))
        .await;
    let text = wait_file(&out, "one-answer-each").await;
    assert_answers(&text);
    a.type_text(&uri, "echo done-$((1+1))\r").await;
    for c in [&mut a, &mut b] {
        c.wait_data(&uri, "done-2", SHELL_TIMEOUT).await;
        let data = c.data(&uri);
        for q in QUERY_SEQUENCES {
            assert!(!data.contains(q), "{q:?} reached a client: {data:?}");
        }
        // Replaying the stream through an emulator that answers queries writes nothing.
        let mut j = Judge::new(80, 24);
        j.feed(&data);
        assert_eq!(j.answers(), Vec::<String>::new());
    }
    // Nor does replaying a snapshot.
    let (state, _) = Ahp::connect(&d.url(), "late", &[])
        .await
        .subscribe_terminal(&uri)
        .await;
    assert_eq!(snapshot_judge(&state).answers(), Vec::<String>::new());
}

#[tokio::test]
async fn mode_reports_and_the_configured_colours() {
    let d = Daemon::start_with(&["--report-colors", "#102030,#405060,#708090"]);
    let agent = Ahp::connect(&d.url(), "agent", &[]).await;
    let uri = term_uri("model-modes-report");
    agent.create_terminal(&uri, json!({})).await.unwrap();
    let out = d.home().join("reports.txt");
    let out = out.display().to_string();
    agent
        .type_text(
            &uri,
            &format!(
                "exec 3>{out}; printf '\\033[?1000h\\033[?1000$p'; read -rs -d y r; echo \"on:${{r#*[}}\" >&3; \
                 printf '\\033[?1000l\\033[?1000$p'; read -rs -d y r; echo \"off:${{r#*[}}\" >&3; \
                 printf '\\033]10;?\\a'; read -rs -d $'\\a' r; echo \"fg:${{r#*]}}\" >&3; \
                 printf '\\033]12;?\\a'; read -rs -d $'\\a' r; echo \"cursor:${{r#*]}}\" >&3\r"
            ),
        )
        .await;
    let text = wait_file(std::path::Path::new(&out), "cursor:").await;
    assert!(text.contains("on:?1000;1$"), "{text}");
    assert!(text.contains("off:?1000;2$"), "{text}");
    assert!(text.contains("fg:10;rgb:1010/2020/3030"), "{text}");
    assert!(text.contains("cursor:12;rgb:7070/8080/9090"), "{text}");
}
