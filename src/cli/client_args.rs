//! The client subcommands' flags (`ls`, `attach`, `new`, `send`, `kill`, `run`, `logs`, …),
//! parsed here and carried out by `ahpty::client` (one function per subcommand).
//!
//! May touch: nothing beyond what `ahpty::client` does for each subcommand.

use crate::CLIENT_AFTER_HELP;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

// ─── Client subcommands: ls, attach, new, send, kill, run, logs ──────────────────────────────
//
// Parsed here, carried out by `ahpty::client` (one function per subcommand).

/// Which daemon a client subcommand talks to.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct TargetArgs {
    /// The daemon: ws://HOST:PORT?tkn=TOKEN, wss://HOST:PORT?tkn=TOKEN or unix:PATH
    /// [default: the default socket, $XDG_RUNTIME_DIR/ahpty/ahpty.sock, else
    /// /tmp/ahpty-$UID/ahpty.sock]. A ws:// URL without `tkn` sends $AHPTY_TOKEN, if set.
    #[arg(long, value_name = "URL", env = "AHPTY_URL", hide_env_values = true)]
    pub(crate) url: Option<String>,
}

#[derive(Subcommand)]
pub(crate) enum ClientCommand {
    /// List the daemon's terminals.
    #[command(long_about = LS_ABOUT, after_help = CLIENT_AFTER_HELP)]
    Ls(LsArgs),
    /// Use a terminal from this one (detach with Ctrl-\).
    #[command(long_about = ATTACH_ABOUT, after_help = REMOTE_AFTER_HELP)]
    Attach(AttachArgs),
    /// Create a terminal running the daemon's shell; prints its URI.
    #[command(long_about = NEW_ABOUT, after_help = CLIENT_AFTER_HELP)]
    New(NewArgs),
    /// Type text into a terminal.
    #[command(long_about = SEND_ABOUT, after_help = CLIENT_AFTER_HELP)]
    Send(SendArgs),
    /// Dispose of a terminal (its processes are killed), or of every exited one.
    #[command(long_about = KILL_ABOUT, after_help = CLIENT_AFTER_HELP)]
    Kill(KillArgs),
    /// Run a command in a fresh terminal; its output on stdout, its exit status as ours.
    #[command(long_about = RUN_ABOUT, after_help = REMOTE_AFTER_HELP)]
    Run(RunArgs),
    /// Print a terminal's retained output (and follow it with -f).
    #[command(long_about = LOGS_ABOUT, after_help = CLIENT_AFTER_HELP)]
    Logs(LogsArgs),
    /// Serve MCP on stdio: one agent session running its commands in watchable terminals.
    #[command(long_about = MCP_ABOUT, after_help = CLIENT_AFTER_HELP)]
    Mcp(McpArgs),
}

const MCP_ABOUT: &str = "Serve the Model Context Protocol on stdin/stdout for a coding agent: \
one process is one agent session of the daemon, with the tools run, wait, send, stop and list \
(docs/agents.md). Every command runs in a terminal a person can watch with `ahpty attach`. \
When no daemon answers on the default socket, one is started in the background with the \
default settings (it outlives the agent), unless --no-start.

Example:
  claude mcp add ahpty -- ahpty mcp";

#[derive(clap::Args)]
pub(crate) struct McpArgs {
    /// Fail instead of starting a daemon when none answers on the default socket.
    #[arg(long)]
    no_start: bool,
    #[command(flatten)]
    target: TargetArgs,
}

pub(crate) const TERMINAL_HELP: &str =
    "The terminal: its number in `ahpty ls`, its title, its URI, or a \
                             unique prefix of the URI or title";

pub(crate) const LS_ABOUT: &str = "List the daemon's terminals: number (what `attach 3` selects), title, \
status (running, or exited with its code), the client holding the claim (\"(away)\" when it has \
no connection; never for ahpty-cli, the CLI itself, which connects only while a command runs), size, age, working directory and URI.

Examples:
  ahpty ls
  ahpty ls --json | jq -r '.[] | select(.status == \"running\") | .uri'";

pub(crate) const ATTACH_ABOUT: &str =
    "Use a terminal from this one, like `tmux attach`: the screen is \
repainted from the terminal's retained output, then everything you type goes to it and its \
output comes here; your window size is sent to it (on attach and whenever it changes).

Detach with Ctrl-\\ (or the --detach-key): the terminal keeps running. To send the detach key \
itself to the program, attach with another --detach-key (or `none`), or type it from another \
shell with `ahpty send TERMINAL $'\\x1c'`.

When the terminal's program exits, attach exits with its exit status. Attaching does not change \
who holds the terminal's claim unless --take is given; input is accepted from any client.

Without a terminal on stdin (a pipe or a file), stdin is typed into the terminal and its live \
output is copied to stdout until it exits.

Examples:
  ahpty attach 3
  ahpty attach build --read-only
  ahpty attach ahp-terminal:/t1 --take --detach-key ctrl-]
  printf 'make\\r' | ahpty attach build";

pub(crate) const NEW_ABOUT: &str =
    "Create a terminal running the daemon's shell in DIR (default: the \
current directory), at this window's size, claimed by the ahpty CLI. Prints the new terminal's \
URI; with --attach, attaches to it instead.

Examples:
  ahpty new --name build --cwd ~/src/app
  t=$(ahpty new) && ahpty send \"$t\" 'make' --enter";

pub(crate) const SEND_ABOUT: &str =
    "Type TEXT into a terminal, exactly as given (add --enter for the \
Return key); TEXT `-` reads the text from stdin. Fails when the daemon rejects the input \
(e.g. the terminal has exited).

Examples:
  ahpty send build 'make test' --enter
  ahpty send 3 $'\\x03'        # Ctrl-C
  ahpty send build - < commands.txt";

pub(crate) const RUN_ABOUT: &str =
    "Run CMD ARG... in a fresh terminal (a real pty, the daemon's shell \
environment) and exit with its exit status, like running it here: stdout gets the command's \
output (stdout and stderr, which share the terminal) and nothing else — no prompt, no echoed \
command line. The arguments are passed as they are, without a shell: quote for your own shell \
only. The terminal is disposed of afterwards unless --keep.

stdin is typed into the terminal as it comes (like `ssh host cmd`), and its end is sent as \
Ctrl-D: with stdin from /dev/null a program that reads gets EOF at once. Ctrl-C is passed on \
to the command. A command killed by signal N exits with 128+N; 127 means the program was not \
found. With --keep, the kept terminal's number and URI are printed on stderr.

Examples:
  ahpty run -- make test
  ahpty run --cwd /srv/app -- sh -c 'npm ci && npm test'
  ahpty run --keep -- ./long-job.sh; ahpty logs ./long-job.sh";

/// Footer of `attach` and `run`, which exit with the remote program's status.
pub(crate) const REMOTE_AFTER_HELP: &str =
    "Exit status: the remote program's exit status (128+N when a \
signal N ended it); 1 the daemon refused, the terminal was disposed, or no terminal matches; 2 \
no daemon reachable or a usage error; 255 the connection was lost.";

pub(crate) const KILL_ABOUT: &str =
    "Dispose of a terminal: its shell and everything running in it get \
SIGHUP, then SIGKILL after the daemon's kill_grace; it disappears from `ahpty ls`, and its \
transcript is deleted.

With --exited, dispose of every exited terminal at once (those restored after a restart and \
those whose program exited; running ones are left alone), printing one line for each \
(`disposed of 3 \"build\" ahp-terminal:/…`); --dry-run prints them (`would dispose of …`) and \
keeps them.

Examples:
  ahpty kill build
  ahpty kill 3
  ahpty kill --exited --dry-run
  ahpty kill --exited";

pub(crate) const LOGS_ABOUT: &str =
    "Print a terminal's retained output (its scrollback, raw terminal \
output with escape sequences), then with --follow its live output until it exits. --plain \
strips escape sequences, for reading or piping into grep.

Examples:
  ahpty logs 3 --plain | grep -i error
  ahpty logs build -f";

#[derive(clap::Args)]
pub(crate) struct LsArgs {
    /// Print a JSON array (one object per terminal; see docs/cli.md) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) target: TargetArgs,
}

#[derive(clap::Args)]
pub(crate) struct AttachOpts {
    /// The key that detaches: ctrl-a … ctrl-z, ctrl-\, ctrl-], ctrl-^, ctrl-_, ctrl-@ (or
    /// ^X), or `none` [default: ctrl-\].
    #[arg(long, value_name = "KEY")]
    pub(crate) detach_key: Option<ahpty::client::attach::DetachKey>,
    /// Watch only: send no keys and no window size.
    #[arg(long)]
    pub(crate) read_only: bool,
    /// Take the terminal's claim first. Allowed when the holder is this CLI or has no live
    /// connection; otherwise refused (the holder is named) and you stay attached as a viewer.
    #[arg(long, conflicts_with = "read_only")]
    pub(crate) take: bool,
    /// Let the program set this terminal's clipboard (OSC 52 and the like). Without it those
    /// writes are removed from the output, as are, always, clipboard reads and every query
    /// your terminal would answer to the program (colours, font, cursor position, device
    /// attributes, DECRQSS, XTGETTCAP …).
    #[arg(long)]
    pub(crate) allow_clipboard: bool,
}

impl AttachOpts {
    pub(crate) fn options(&self) -> ahpty::client::attach::AttachOptions {
        ahpty::client::attach::AttachOptions {
            detach_key: self
                .detach_key
                .as_ref()
                .map_or(Some(ahpty::client::attach::DEFAULT_DETACH_KEY), |k| k.0),
            read_only: self.read_only,
            take: self.take,
            allow_clipboard: self.allow_clipboard,
        }
    }
}

#[derive(clap::Args)]
pub(crate) struct AttachArgs {
    #[arg(value_name = "TERMINAL", help = TERMINAL_HELP)]
    pub(crate) terminal: String,
    #[command(flatten)]
    pub(crate) attach: AttachOpts,
    #[command(flatten)]
    pub(crate) target: TargetArgs,
}

#[derive(clap::Args)]
pub(crate) struct NewArgs {
    /// Name of the terminal, its title for good: titles its programs set (OSC 0/2) do not
    /// replace it, so `ahpty send NAME` keeps finding it [default: no name; the title is the
    /// shell's name, then what its programs set].
    #[arg(long, value_name = "NAME")]
    pub(crate) name: Option<String>,
    /// Create the terminal even when a running one already has this --name (selecting by the
    /// name is then ambiguous; use numbers or URIs). Without it, exited terminals with this
    /// name are disposed of once the new one exists.
    #[arg(long, requires = "name")]
    pub(crate) force: bool,
    /// Working directory [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub(crate) cwd: Option<PathBuf>,
    /// Attach to the new terminal (then the attach options apply).
    #[arg(long)]
    pub(crate) attach: bool,
    #[command(flatten)]
    pub(crate) attach_opts: AttachOpts,
    #[command(flatten)]
    pub(crate) target: TargetArgs,
}

#[derive(clap::Args)]
pub(crate) struct SendArgs {
    #[arg(value_name = "TERMINAL", help = TERMINAL_HELP)]
    pub(crate) terminal: String,
    /// The text to type, sent as it is (escape sequences and control characters included);
    /// `-` reads it from stdin (any size).
    #[arg(value_name = "TEXT", allow_hyphen_values = true)]
    pub(crate) text: String,
    /// Press Return after the text (a carriage return, "\r").
    #[arg(long)]
    pub(crate) enter: bool,
    #[command(flatten)]
    pub(crate) target: TargetArgs,
}

#[derive(clap::Args)]
#[command(
    override_usage = "ahpty kill [OPTIONS] <TERMINAL>\n       ahpty kill [OPTIONS] --exited [--dry-run]"
)]
pub(crate) struct KillArgs {
    #[arg(value_name = "TERMINAL", help = TERMINAL_HELP, required_unless_present = "exited", conflicts_with = "exited")]
    pub(crate) terminal: Option<String>,
    /// Dispose of every exited terminal (restored from transcripts, or whose program exited)
    /// instead of one; running terminals are left alone. Prints one line per terminal.
    #[arg(long)]
    pub(crate) exited: bool,
    /// With --exited: print the terminals that would be disposed of, and keep them.
    #[arg(long, requires = "exited", conflicts_with = "terminal")]
    pub(crate) dry_run: bool,
    #[command(flatten)]
    pub(crate) target: TargetArgs,
}

#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// Working directory [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub(crate) cwd: Option<PathBuf>,
    /// Keep the terminal afterwards (with its shell, at a prompt) instead of disposing of it.
    #[arg(long)]
    pub(crate) keep: bool,
    /// The command and its arguments (after `--`; words after CMD are its arguments, even
    /// when they start with `-`).
    #[arg(value_name = "CMD", required = true, trailing_var_arg = true)]
    pub(crate) command: Vec<std::ffi::OsString>,
    #[command(flatten)]
    pub(crate) target: TargetArgs,
}

#[derive(clap::Args)]
pub(crate) struct LogsArgs {
    #[arg(value_name = "TERMINAL", help = TERMINAL_HELP)]
    pub(crate) terminal: String,
    /// Keep printing live output until the terminal exits.
    #[arg(short, long)]
    pub(crate) follow: bool,
    /// Strip escape sequences (colours, cursor movement, titles); CR LF becomes LF.
    #[arg(long)]
    pub(crate) plain: bool,
    #[command(flatten)]
    pub(crate) target: TargetArgs,
}

/// Runs a client subcommand; `token` is `$AHPTY_TOKEN` (taken out of the environment).
pub(crate) fn client_main(command: ClientCommand, token: Option<String>) -> ExitCode {
    use ahpty::client::{self, Target};
    let token = token.as_deref();
    let target = |t: &TargetArgs| Target::resolve(t.url.as_deref());
    let code = client::run_command(async move {
        match command {
            ClientCommand::Ls(a) => client::ls::ls(&target(&a.target)?, token, a.json).await,
            ClientCommand::Attach(a) => {
                let opts = a.attach.options();
                client::attach::attach(&target(&a.target)?, token, &a.terminal, &opts).await
            }
            ClientCommand::New(a) => {
                let opts = client::new::NewOptions {
                    name: a.name,
                    force: a.force,
                    cwd: a.cwd,
                    attach: a.attach.then(|| a.attach_opts.options()),
                };
                client::new::new(&target(&a.target)?, token, &opts).await
            }
            ClientCommand::Send(a) => {
                client::send::send(&target(&a.target)?, token, &a.terminal, &a.text, a.enter).await
            }
            ClientCommand::Kill(a) => match &a.terminal {
                Some(t) => client::kill::kill(&target(&a.target)?, token, t).await,
                None => client::kill::kill_exited(&target(&a.target)?, token, a.dry_run).await,
            },
            ClientCommand::Run(a) => {
                let opts = client::run::RunOptions {
                    cwd: a.cwd,
                    keep: a.keep,
                    argv: a.command,
                };
                client::run::run(&target(&a.target)?, token, &opts).await
            }
            ClientCommand::Logs(a) => {
                client::logs::logs(&target(&a.target)?, token, &a.terminal, a.follow, a.plain).await
            }
            ClientCommand::Mcp(a) => {
                let default_socket = a.target.url.as_deref().is_none_or(|u| u.trim().is_empty());
                client::mcp::mcp(target(&a.target)?, token, default_socket, !a.no_start).await
            }
        }
    });
    ExitCode::from(code)
}
