//! Runs real bash, zsh and fish (when installed) in a pty with the shell-integration injection,
//! types commands, and checks the parser + tracker output: command lines, exit codes, cwd,
//! user hooks still running, and no integration sequence left in the text.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use ahp_types::actions::StateAction;
use ahpty::terminal::shell_integration::{
    new_nonce, prepare_with_env, CommandTracker, Mark, OutputParser, Parsed,
};
use portable_pty::{native_pty_system, Child, CommandBuilder, MasterPty, PtySize};

const FIRST_PROMPT: Duration = Duration::from_secs(10);
const POSIX_LOOP: &[&str] = &["for i in 1 2", "do echo L$i", "done"];
const FISH_LOOP: &[&str] = &["for i in 1 2", "echo L$i", "end"];
const STEP: Duration = Duration::from_secs(10);

struct Term {
    _master: Box<dyn MasterPty + Send>,
    child: Box<dyn Child + Send + Sync>,
    writer: Box<dyn Write + Send>,
    rx: Receiver<Vec<u8>>,
    parser: OutputParser,
    tracker: CommandTracker,
    text: String,
    marks: Vec<Mark>,
    actions: Vec<StateAction>,
    prompts: usize,
}

impl Drop for Term {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The shell's path; `None` (test skipped) only outside CI: `.ci/run` installs all three,
/// so under `CI` a missing shell fails the test instead of passing silently.
fn find_shell(name: &str) -> Option<PathBuf> {
    let found = ["/bin", "/usr/bin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file());
    if found.is_none() && std::env::var_os("CI").is_some() {
        panic!("{name} is not installed; .ci/run installs it");
    }
    found
}

fn temp_home(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ahpty-si-test-{tag}-{}", new_nonce()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Term {
    fn spawn(shell: &Path, home: &Path) -> Term {
        let nonce = new_nonce();
        let inj = prepare_with_env(shell, &nonce, |_| None).unwrap();
        let pair = native_pty_system()
            .openpty(PtySize {
                rows: 24,
                cols: 200,
                pixel_width: 0,
                pixel_height: 0,
            })
            .unwrap();
        let mut cmd = CommandBuilder::new(shell);
        cmd.args(&inj.args);
        cmd.env_clear();
        cmd.env("HOME", home);
        cmd.env("PATH", "/usr/local/bin:/usr/bin:/bin");
        cmd.env("TERM", "xterm-256color");
        cmd.env("LANG", "C.UTF-8");
        cmd.env("LC_ALL", "C.UTF-8");
        for (k, v) in &inj.env {
            cmd.env(k, v);
        }
        cmd.cwd(home);
        let child = pair.slave.spawn_command(cmd).unwrap();
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().unwrap();
        let writer = pair.master.take_writer().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if tx.send(buf[..n].to_vec()).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        Term {
            _master: pair.master,
            child,
            writer,
            rx,
            parser: OutputParser::signed(nonce),
            tracker: CommandTracker::new(None),
            text: String::new(),
            marks: Vec::new(),
            actions: Vec::new(),
            prompts: 0,
        }
    }

    /// Reads output until `pred` holds or `timeout` passes.
    fn wait_for(&mut self, timeout: Duration, pred: impl Fn(&Term) -> bool) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if pred(self) {
                return true;
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            match self.rx.recv_timeout(left) {
                Ok(chunk) => self.absorb(&chunk),
                Err(RecvTimeoutError::Timeout) => return pred(self),
                Err(RecvTimeoutError::Disconnected) => return pred(self),
            }
        }
    }

    fn absorb(&mut self, chunk: &[u8]) {
        let mut events = Vec::new();
        self.parser.feed(chunk, &mut events);
        for e in events {
            match e {
                Parsed::Text(t) => {
                    assert!(!t.contains("\x1b]633"), "633 leaked: {t:?}");
                    assert!(!t.contains("\x1b]133"), "133 leaked: {t:?}");
                    self.text.push_str(&t);
                }
                Parsed::Mark(m) => {
                    if m == Mark::PromptStart {
                        self.prompts += 1;
                    }
                    self.marks.push(m.clone());
                    self.tracker.on_mark(m, 0, &mut self.actions);
                }
                // Nobody answers here (the host does, in the daemon).
                Parsed::Query(_) => {}
            }
        }
    }

    fn first_prompt(&mut self) {
        assert!(
            self.wait_for(FIRST_PROMPT, |t| t.prompts >= 1),
            "no first prompt; text so far: {:?}",
            self.text
        );
    }

    /// Types `input` + Enter and waits for the next prompt.
    fn type_line(&mut self, input: &str) {
        let before = self.prompts;
        self.writer.write_all(input.as_bytes()).unwrap();
        self.writer.write_all(b"\r").unwrap();
        self.writer.flush().unwrap();
        assert!(
            self.wait_for(STEP, |t| t.prompts > before),
            "no prompt after {input:?}; text: {:?}",
            self.text
        );
    }

    fn executed(&self) -> Vec<(String, String)> {
        self.actions
            .iter()
            .filter_map(|a| match a {
                StateAction::TerminalCommandExecuted(e) => {
                    Some((e.command_id.clone(), e.command_line.clone()))
                }
                _ => None,
            })
            .collect()
    }

    fn finished(&self) -> Vec<(String, Option<i64>)> {
        self.actions
            .iter()
            .filter_map(|a| match a {
                StateAction::TerminalCommandFinished(f) => {
                    Some((f.command_id.clone(), f.exit_code))
                }
                _ => None,
            })
            .collect()
    }

    fn cwds(&self) -> Vec<String> {
        self.actions
            .iter()
            .filter_map(|a| match a {
                StateAction::TerminalCwdChanged(c) => Some(c.cwd.clone()),
                _ => None,
            })
            .collect()
    }

    /// Runs one command and returns (commandLine, exitCode) of the command it produced.
    fn run(&mut self, input: &str) -> (String, Option<i64>) {
        let n = self.executed().len();
        self.type_line(input);
        // The D mark precedes the next prompt's A mark, so both are in by now.
        let ex = self.executed();
        assert_eq!(
            ex.len(),
            n + 1,
            "one command for {input:?}: {ex:?}; marks {:?}; text {:?}",
            self.marks,
            self.text
        );
        let (id, line) = ex[n].clone();
        let fin = self.finished();
        let (fid, code) = fin.last().cloned().expect("finished");
        assert_eq!(fid, id, "finished matches executed for {input:?}");
        (line, code)
    }
}

/// Scenario shared by all shells; `multi_line` checks the multi-line command's line.
fn scenario(term: &mut Term, exit7: &str, multi: &[&str], multi_line: impl Fn(&str)) {
    term.first_prompt();
    assert!(term.tracker.detection_available());
    assert!(term
        .actions
        .iter()
        .any(|a| matches!(a, StateAction::TerminalCommandDetectionAvailable(_))));

    assert_eq!(term.run("echo hi"), ("echo hi".to_string(), Some(0)));
    assert!(term.text.contains("hi\r\n"));
    assert_eq!(term.run("false"), ("false".to_string(), Some(1)));
    assert_eq!(term.run(exit7), (exit7.to_string(), Some(7)));
    assert!(
        term.text.contains("USERHOOK:7"),
        "user's own prompt hook saw $? = 7: {:?}",
        term.text
    );

    let tricky = r#"echo 'a;b' "c\d" \"q\" ünï ✓;  echo   x"#;
    let (line, code) = term.run(tricky);
    assert_eq!(line, tricky);
    assert_eq!(code, Some(0));

    let (line, code) = term.run("cd /tmp");
    assert_eq!((line.as_str(), code), ("cd /tmp", Some(0)));
    assert_eq!(term.cwds().last().map(String::as_str), Some("file:///tmp"));

    // Empty Enter: no command.
    let n = term.executed().len();
    let f = term.finished().len();
    term.type_line("");
    assert_eq!(term.executed().len(), n);
    assert_eq!(term.finished().len(), f);

    // A forged E mark (wrong nonce) printed by a program is not trusted.
    let (line, _) = term.run("printf '\\033]633;E;evil;wrongnonce\\007'");
    assert_eq!(line, "printf '\\033]633;E;evil;wrongnonce\\007'");
    let (line, _) = term.run("true");
    assert_eq!(line, "true");
    assert!(term.executed().iter().all(|(_, l)| l != "evil"));

    // The nonce is not visible to programs.
    term.run("env | grep -c AHPTY_SI");
    assert!(
        term.text.contains("\r0\r\n") || term.text.contains("\n0\r\n"),
        "{:?}",
        term.text
    );

    let (line, code) = run_multi_line(term, multi);
    multi_line(&line);
    assert_eq!(code, Some(0));
    assert!(term.text.contains("L1\r\nL2\r\n"));
}

fn run_multi_line(term: &mut Term, parts: &[&str]) -> (String, Option<i64>) {
    let n = term.executed().len();
    let before = term.prompts;
    for part in parts {
        term.writer.write_all(part.as_bytes()).unwrap();
        term.writer.write_all(b"\r").unwrap();
        term.writer.flush().unwrap();
        // Give the shell a moment to show its continuation prompt (poll, not sleep).
        let len = term.text.len();
        term.wait_for(Duration::from_millis(500), |t| t.text.len() > len);
    }
    assert!(term.wait_for(STEP, |t| t.prompts > before && t.executed().len() > n));
    let ex = term.executed();
    let fin = term.finished();
    (ex[n].1.clone(), fin.last().and_then(|f| f.1))
}

spec!(bash_marks_commands_and_keeps_the_users_hooks, {
    let Some(bash) = find_shell("bash") else {
        eprintln!("bash not installed; skipped");
        return;
    };
    let home = temp_home("bash");
    std::fs::write(
        home.join(".bashrc"),
        r#"set -u
PS1='user\$ '
__user_count=0
PROMPT_COMMAND=('printf "USERHOOK:%s\n" "$?"' '__user_count=$((__user_count+1))')
trap '__user_debug=1' DEBUG
"#,
    )
    .unwrap();
    let mut term = Term::spawn(&bash, &home);
    scenario(&mut term, "(exit 7)", POSIX_LOOP, |line| {
        assert_eq!(line, "for i in 1 2; do echo L$i; done")
    });
    // The user's DEBUG trap and PROMPT_COMMAND entries are still in place.
    term.run("trap -p DEBUG; echo \"count=$__user_count\"");
    assert!(term.text.contains("__user_debug=1"), "{:?}", term.text);
    assert!(!term.text.contains("count=0"));
    std::fs::remove_dir_all(&home).ok();
});

spec!(
    bash_keeps_a_string_prompt_command_and_marks_unhistoried_commands,
    {
        let Some(bash) = find_shell("bash") else {
            return;
        };
        let home = temp_home("bash2");
        std::fs::write(
            home.join(".bashrc"),
            "set -u\nPROMPT_COMMAND='printf \"USERHOOK:%s\\n\" \"$?\"'\nHISTCONTROL=ignorespace\n",
        )
        .unwrap();
        let mut term = Term::spawn(&bash, &home);
        term.first_prompt();
        assert_eq!(term.run("(exit 3)"), ("(exit 3)".into(), Some(3)));
        assert!(term.text.contains("USERHOOK:3"));
        // A command kept out of history still gets C/D, with an empty command line.
        assert_eq!(term.run(" (exit 4)"), (String::new(), Some(4)));
        std::fs::remove_dir_all(&home).ok();
    }
);

spec!(zsh_marks_commands_and_keeps_the_users_startup_files, {
    let Some(zsh) = find_shell("zsh") else {
        eprintln!("zsh not installed; skipped");
        return;
    };
    let home = temp_home("zsh");
    std::fs::write(home.join(".zshenv"), "export USER_ZSHENV_RAN=1\n").unwrap();
    std::fs::write(
        home.join(".zshrc"),
        r#"setopt nounset
PS1='user%# '
precmd() { print -r -- "USERHOOK:$?" }
autoload -Uz add-zsh-hook
__user_pre() { __user_preexec_ran=1 }
add-zsh-hook preexec __user_pre
"#,
    )
    .unwrap();
    let mut term = Term::spawn(&zsh, &home);
    scenario(&mut term, "(exit 7)", POSIX_LOOP, |line| {
        assert_eq!(line, "for i in 1 2\ndo echo L$i\ndone")
    });
    term.run("echo \"[$USER_ZSHENV_RAN][${__user_preexec_ran-}][${ZDOTDIR-unset}]\"");
    assert!(term.text.contains("[1][1][unset]"), "{:?}", term.text);
    std::fs::remove_dir_all(&home).ok();
});

spec!(fish_marks_commands_and_keeps_the_users_config, {
    let Some(fish) = find_shell("fish") else {
        eprintln!("fish not installed; skipped");
        return;
    };
    let home = temp_home("fish");
    let conf = home.join(".config/fish");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(
        conf.join("config.fish"),
        r#"set -g fish_greeting
function fish_prompt; printf 'user> '; end
function __user_hook --on-event fish_postexec; echo "USERHOOK:$status"; end
"#,
    )
    .unwrap();
    let mut term = Term::spawn(&fish, &home);
    scenario(&mut term, "sh -c 'exit 7'", FISH_LOOP, |line| {
        assert!(line.starts_with("for i in 1 2\n"), "{line:?}");
        assert!(line.contains("echo L$i\n"), "{line:?}");
        eprintln!("fish multi-line command line: {line:?}");
        assert!(line.ends_with("end"), "{line:?}");
    });
    term.run("echo \"[$XDG_DATA_DIRS]\"");
    assert!(term.text.contains("[]"), "{:?}", term.text);
    std::fs::remove_dir_all(&home).ok();
});
