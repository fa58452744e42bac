//! The source tree's shape, checked on every `cargo test`: no file in src/ or tests/ over
//! [`MAX_LINES`] lines, `src/client` importing nothing from `crate::host`, imports flowing
//! downwards in the layer order of docs/architecture.md ([`LAYERS`]), and WebSocket close
//! codes written as numbers only in `src/server` and `src/proto`.
//!
//! Reads files under the crate's directory; writes nothing, starts nothing.

use std::path::{Path, PathBuf};

/// The longest a source file may be, in lines.
const MAX_LINES: usize = 800;

/// Files over [`MAX_LINES`] today that are being split; the list is emptied as each split lands.
/// Adding to it is not a fix.
const OVERSIZED_BEING_SPLIT: &[&str] = &[
    "src/terminal/escape.rs",
    "src/host/screen.rs",
    "src/upgrade/mod.rs",
    "tests/it/upgrade.rs",
    "tests/it/flow_control.rs",
    "tests/it/hostile_peers.rs",
];

/// Files outside `src/server` and `src/proto` that still write close codes as numbers today
/// (the host decides stalled and lagging connections itself); emptied once that decision
/// leaves the host.
const CLOSE_CODES_BEING_MOVED: &[&str] = &["src/host/outbox.rs"];

/// The crate's top-level modules from the top down (docs/architecture.md, "Architecture"). A
/// module may import (`crate::…`) only modules in a layer below its own; `main.rs` (the binary,
/// through `ahpty::`) is above them all.
const LAYERS: &[&[&str]] = &[
    &["upgrade", "client", "service"],
    &["server"],
    &["rpc"],
    &["host"],
    &["store", "terminal", "codec"],
    &["proto", "private_dir"],
    &["config"],
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, as paths relative to the crate's directory, sorted.
fn rust_files(dir: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root().join(dir)];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("read {}: {e}", d.display()));
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                let rel = path.strip_prefix(root()).unwrap_or(&path);
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// The code of each line: comments (`//…` to the end of the line) removed, string literals
/// kept. Good enough for this tree, whose `//` inside strings are URLs.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().filter_map(|(i, line)| {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            return None;
        }
        let code = match line.find("// ") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        };
        Some((i + 1, code))
    })
}

/// The top-level module a file under src/ belongs to (`src/host/flow.rs` → `host`).
fn top_module(rel: &str) -> Option<&str> {
    let rest = rel.strip_prefix("src/")?;
    let first = rest.split('/').next()?;
    Some(first.strip_suffix(".rs").unwrap_or(first))
}

/// The top-level modules a line names through `crate::` (also `crate::{a, b::c}`).
fn crate_imports(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // e.g. `ahpty_crate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            let mut depth = 0;
            let mut item = String::new();
            for c in group[..end].chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(std::mem::take(&mut item));
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 {
                    item.push(c);
                }
            }
            out.push(item);
        } else {
            out.push(rest.to_string());
        }
    }
    out.into_iter()
        .map(|s| {
            s.trim()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|s| !s.is_empty() && s != "self")
        .collect()
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// Lines of `text` breaking the size rule, if any (a message per file). The allow-list only
/// shrinks: an entry that is gone or back under the limit is reported too.
fn oversized(files: &[String]) -> Vec<String> {
    let mut out: Vec<String> = files
        .iter()
        .filter(|f| !OVERSIZED_BEING_SPLIT.contains(&f.as_str()))
        .filter_map(|f| {
            let n = read(f).lines().count();
            (n > MAX_LINES).then(|| {
                format!("{f}: {n} lines, over {MAX_LINES}: split it by job (docs/architecture.md)")
            })
        })
        .collect();
    for f in OVERSIZED_BEING_SPLIT {
        let n = files
            .iter()
            .find(|g| g.as_str() == *f)
            .map(|g| read(g).lines().count());
        if n.is_none_or(|n| n <= MAX_LINES) {
            out.push(format!(
                "{f} is in OVERSIZED_BEING_SPLIT but is not over {MAX_LINES} lines: remove it from the list"
            ));
        }
    }
    out
}

/// Imports against the layer order, and any import of `crate::host` from `src/client`.
fn upward_imports(files: &[String], contents: impl Fn(&str) -> String) -> Vec<String> {
    let mut out = Vec::new();
    for f in files {
        let Some(from) = top_module(f) else { continue };
        // The binary (main.rs and its parts in src/cli/) stands above every layer.
        if from == "main" || from == "lib" || from == "cli" {
            continue;
        }
        let text = contents(f);
        for (n, line) in code_lines(&text) {
            for to in crate_imports(line) {
                if to == from {
                    continue;
                }
                if from == "client" && to == "host" {
                    out.push(format!(
                        "{f}:{n}: src/client imports crate::host; clients speak the protocol \
                         only: use crate::proto"
                    ));
                    continue;
                }
                match (layer_of(from), layer_of(&to)) {
                    (Some(a), Some(b)) if b <= a => out.push(format!(
                        "{f}:{n}: {from} imports crate::{to}, which is not below it in the \
                         layer order (tests/it/structure.rs LAYERS, docs/architecture.md)"
                    )),
                    (None, _) => out.push(format!(
                        "{f}: module {from} is not in LAYERS: add it to tests/it/structure.rs \
                         and docs/architecture.md"
                    )),
                    _ => {}
                }
            }
        }
    }
    out
}

/// Whether `word` is a WebSocket close code: RFC 6455 §7.4's 1000–1015, or ahpty's own from
/// 4000 up (40xx; 4096 and above are buffer sizes, not codes).
fn is_close_code(word: &str) -> bool {
    let digits = word.trim_end_matches("u16");
    digits.len() == 4
        && digits
            .parse::<u16>()
            .is_ok_and(|n| (1000..=1015).contains(&n) || (4000..4096).contains(&n))
}

/// Close codes written as numbers on a line that closes something, outside src/server and
/// src/proto.
fn close_code_literals(files: &[String], contents: impl Fn(&str) -> String) -> Vec<String> {
    let mut out = Vec::new();
    for f in files {
        if f.starts_with("src/server/")
            || f.starts_with("src/proto/")
            || CLOSE_CODES_BEING_MOVED.contains(&f.as_str())
        {
            continue;
        }
        let text = contents(f);
        for (n, line) in code_lines(&text) {
            let lower = line.to_ascii_lowercase();
            if !(lower.contains("close") || lower.contains("kill(")) {
                continue;
            }
            let words = line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
            if let Some(code) = words.into_iter().find(|w| is_close_code(w)) {
                out.push(format!(
                    "{f}:{n}: close code {code} written as a number: use crate::proto::close"
                ));
            }
        }
    }
    out
}

fn fail_on(problems: Vec<String>) {
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn no_source_file_is_over_800_lines() {
    let mut files = rust_files("src");
    files.extend(rust_files("tests"));
    fail_on(oversized(&files));
}

#[test]
fn imports_flow_downwards_and_client_knows_no_host() {
    fail_on(upward_imports(&rust_files("src"), read));
}

#[test]
fn close_codes_are_named_in_proto() {
    fail_on(close_code_literals(&rust_files("src"), read));
}

/// Each rule catches what it is there for: the checks above would pass on an empty tree.
#[test]
fn the_rules_catch_what_they_forbid() {
    let fake = |text: &'static str| move |_: &str| text.to_string();
    let client = vec!["src/client/ls.rs".to_string()];
    assert_eq!(
        upward_imports(&client, fake("use crate::host::catalog::TerminalSummary;")).len(),
        1
    );
    assert_eq!(
        upward_imports(&client, fake("use crate::{config::Config, host::Host};")).len(),
        1
    );
    assert!(upward_imports(&client, fake("use crate::proto::ROOT; // crate::host")).is_empty());
    let terminal = vec!["src/terminal/pty_io.rs".to_string()];
    let up = upward_imports(&terminal, fake("    let h = crate::host::Host::new();"));
    assert!(up[0].contains("not below it"), "{up:?}");
    let host = vec!["src/host/mod.rs".to_string()];
    assert_eq!(
        close_code_literals(&host, fake("o.close(1001, \"bye\");")).len(),
        1
    );
    assert_eq!(
        close_code_literals(&host, fake("pub const CLOSE_X: u16 = 4003;")).len(),
        1
    );
    assert!(close_code_literals(&host, fake("o.close(CLOSE_GOING_AWAY, \"bye\");")).is_empty());
    assert!(close_code_literals(&host, fake("let buf = [0u8; 4096]; close(fd)")).is_empty());
    let server = vec!["src/server/writer.rs".to_string()];
    assert!(close_code_literals(&server, fake("o.close(1001, \"bye\");")).is_empty());
    assert!(Path::new(&root().join("tests/it/structure.rs")).exists());
}
