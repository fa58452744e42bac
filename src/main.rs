//! The `ahpty` command line: parse arguments, set up logging, run the daemon.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use ahpty::config::{
    default_socket_path, Auth, Config, Listen, TlsFiles, Token, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_SUBSCRIPTIONS, DEFAULT_MAX_TERMINALS,
    DEFAULT_SCROLLBACK_BYTES, TOKEN_ENV,
};
use ahpty::host::history::DEFAULT_TERMINAL_HISTORY_BYTES;
use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// Serve Agent Host Protocol (AHP) 1.0 terminals over WebSocket.
#[derive(Parser)]
#[command(name = "ahpty", version, about)]
struct Cli {
    /// More log output (-v debug, -vv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
// Parsed once per process: the size difference between the variants does not matter.
#[allow(clippy::large_enum_variant)]
enum Command {
    /// Run the daemon.
    Serve(ServeArgs),
    #[command(flatten)]
    Client(ClientCommand),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Where to listen (repeatable): host:port (port 0 picks a free port) or unix:PATH.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8765")]
    listen: Vec<Listen>,
    /// Read the token TCP peers must present from this file (else $AHPTY_TOKEN, else a
    /// random token is generated and the connect URL printed on stdout).
    #[arg(long, value_name = "PATH", conflicts_with = "no_auth")]
    token_file: Option<PathBuf>,
    /// Accept TCP peers without a token (development only; refused unless every TCP
    /// listener is on loopback).
    #[arg(long)]
    no_auth: bool,
    /// PEM certificate chain: serve wss:// on the TCP listeners (needs --tls-key).
    #[arg(long, value_name = "PATH", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Most simultaneous WebSocket connections (more get HTTP 503).
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS, value_name = "N")]
    max_connections: usize,
    /// Time a socket gets to complete the (TLS and) WebSocket handshake.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    handshake_timeout: Duration,
    /// Send a WebSocket ping after this much silence from a peer; `0` disables pings.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    ping_interval: Duration,
    /// Drop a pinged peer that sends nothing back for this long.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    ping_timeout: Duration,
    /// Program to run in each terminal [default: $SHELL, else /bin/bash, else /bin/sh].
    #[arg(long, overrides_with = "shell")]
    shell: Option<PathBuf>,
    /// Also accept WebSocket upgrades carrying this Origin (repeatable), e.g. a web build of
    /// VS Code. `vscode-file://vscode-app` (VS Code desktop) is always allowed.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allow_origin: Vec<String>,
    /// Retained output per terminal, in bytes.
    #[arg(long, default_value_t = DEFAULT_SCROLLBACK_BYTES, value_name = "BYTES")]
    scrollback_bytes: usize,
    /// Milliseconds between SIGHUP and SIGKILL when a terminal is disposed.
    #[arg(long, default_value_t = 500, value_name = "MS")]
    kill_grace_ms: u64,
    /// Do not inject shell integration into bash, zsh and fish.
    #[arg(long)]
    no_shell_integration: bool,
    /// Retained envelopes per terminal for `reconnect` replay, in bytes.
    #[arg(long, default_value_t = DEFAULT_TERMINAL_HISTORY_BYTES, value_name = "BYTES")]
    history_bytes: usize,
    /// Dispose a terminal once its claim holder has had no connection for this long
    /// (e.g. `90s`, `30m`, `24h`); `0` disables reaping.
    #[arg(long, default_value = "24h", value_parser = humantime::parse_duration, value_name = "DURATION")]
    orphan_grace: Duration,
    /// Close a connection whose unsent output stays above the high watermark this long
    /// (at least 100 ms); `0` never closes it (its terminals stay paused while it stalls).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    stall_timeout: Duration,
    /// Largest incoming WebSocket message, in bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_MESSAGE_BYTES, value_name = "BYTES")]
    max_message_bytes: usize,
    /// Most terminals at once.
    #[arg(long, default_value_t = DEFAULT_MAX_TERMINALS, value_name = "N")]
    max_terminals: usize,
    /// Most subscriptions per connection.
    #[arg(long, default_value_t = DEFAULT_MAX_SUBSCRIPTIONS, value_name = "N")]
    max_subscriptions: usize,
    /// The Unix socket the client subcommands find without flags (owner-only, no token)
    /// [default: $XDG_RUNTIME_DIR/ahpty/ahpty.sock, else /tmp/ahpty-$UID/ahpty.sock].
    #[arg(long, value_name = "PATH", conflicts_with = "no_socket")]
    socket: Option<PathBuf>,
    /// Do not listen on the default Unix socket (`--listen unix:PATH` still works).
    #[arg(long)]
    no_socket: bool,
}

fn main() -> ExitCode {
    // Take the token out of the environment before any thread or terminal exists, so no child
    // process ever inherits it.
    let env_token = std::env::var(TOKEN_ENV).ok();
    std::env::remove_var(TOKEN_ENV);
    let cli = Cli::parse();
    if let Command::Client(ClientCommand::RunWrapper(w)) = &cli.command {
        // Runs inside a terminal on behalf of `ahpty run`: no logging of its own.
        return ExitCode::from(ahpty::client::wrapper::run_wrapper(&w.words));
    }
    let is_client = matches!(cli.command, Command::Client(_));
    let default_level = match (cli.verbose, is_client) {
        // The client subcommands report failures as one line of their own.
        (0, true) => "error",
        (0, false) => "info",
        (1, _) => "debug",
        _ => "trace",
    };
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let args = match cli.command {
        Command::Serve(args) => args,
        Command::Client(command) => return client_main(command, env_token),
    };
    let shell = args.shell.unwrap_or_else(Config::default_shell);
    if !ahpty::config::is_executable(&shell) {
        eprintln!("ahpty: --shell {}: not an executable file", shell.display());
        return ExitCode::from(1);
    }
    let auth = match resolve_auth(args.no_auth, args.token_file.as_deref(), env_token) {
        Ok(auth) => auth,
        Err(e) => {
            eprintln!("ahpty: {e}");
            return ExitCode::from(1);
        }
    };
    let tls = match (args.tls_cert, args.tls_key) {
        (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
        _ => None,
    };
    let mut listen = args.listen;
    let socket = (!args.no_socket).then(|| args.socket.unwrap_or_else(default_socket_path));
    if let Some(path) = &socket {
        if !listen.contains(&Listen::Unix(path.clone())) {
            listen.push(Listen::Unix(path.clone()));
        }
    }
    let config = Config {
        listen,
        auth,
        tls,
        max_connections: args.max_connections.max(1),
        handshake_timeout: args.handshake_timeout.max(Duration::from_millis(100)),
        ping_interval: (!args.ping_interval.is_zero())
            .then(|| args.ping_interval.max(Duration::from_millis(100))),
        ping_timeout: args.ping_timeout.max(Duration::from_millis(100)),
        shell,
        allow_origins: args.allow_origin,
        scrollback_bytes: args.scrollback_bytes.max(1024),
        kill_grace: Duration::from_millis(args.kill_grace_ms),
        shell_integration: !args.no_shell_integration,
        history_bytes: args.history_bytes.max(1024),
        orphan_grace: (!args.orphan_grace.is_zero()).then_some(args.orphan_grace),
        stall_timeout: (!args.stall_timeout.is_zero())
            .then(|| args.stall_timeout.max(Duration::from_millis(100))),
        max_message_bytes: args.max_message_bytes.max(64 * 1024),
        max_terminals: args.max_terminals,
        max_subscriptions: args.max_subscriptions,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ahpty: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        let shutdown = shutdown_signal();
        let server = ahpty::Server::bind(&config).await?;
        // The connect URL(s), once, on stdout (never in the log): VS Code's SSH flow scrapes
        // `ws://127.0.0.1:PORT?tkn=TOKEN` from here.
        let mut out = std::io::stdout().lock();
        for url in server.connect_urls() {
            let _ = writeln!(out, "{url}");
        }
        let _ = out.flush();
        drop(out);
        server.run(shutdown).await;
        Ok::<_, std::io::Error>(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e)
            if e.kind() == std::io::ErrorKind::AddrInUse
                && socket
                    .as_ref()
                    .is_some_and(|p| e.to_string().contains(&p.display().to_string())) =>
        {
            eprintln!("ahpty: {e} (to run a second daemon, give it --socket PATH or --no-socket)");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("ahpty: {e}");
            ExitCode::from(1)
        }
    }
}

/// The authentication mode from `--no-auth`, `--token-file` and `$AHPTY_TOKEN` (in this order
/// of precedence; `--no-auth` with a configured token is a contradiction and refused).
fn resolve_auth(
    no_auth: bool,
    token_file: Option<&std::path::Path>,
    env_token: Option<String>,
) -> Result<Auth, String> {
    let env_token = env_token.filter(|t| !t.trim().is_empty());
    if no_auth {
        if env_token.is_some() {
            return Err(format!(
                "--no-auth contradicts ${TOKEN_ENV}, which is set: unset one of them"
            ));
        }
        return Ok(Auth::Disabled);
    }
    if let Some(path) = token_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--token-file {}: {e}", path.display()))?;
        let token = Token::new(text.trim().to_string())
            .map_err(|e| format!("--token-file {}: {e}", path.display()))?;
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.permissions().mode() & 0o077 != 0 {
                tracing::warn!(
                    "--token-file {} is readable by other users (chmod 600 it)",
                    path.display()
                );
            }
        }
        return Ok(Auth::Token {
            token,
            source: format!("--token-file {}", path.display()),
        });
    }
    if let Some(value) = env_token {
        let token =
            Token::new(value.trim().to_string()).map_err(|e| format!("${TOKEN_ENV}: {e}"))?;
        return Ok(Auth::Token {
            token,
            source: format!("${TOKEN_ENV}"),
        });
    }
    Ok(Auth::Generate)
}

/// Completes on SIGINT or SIGTERM. The handlers are installed when this is called (before
/// the listeners are announced), not when the future is first polled, so a signal sent right
/// after `listening on …` still stops the daemon cleanly.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let handlers = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    );
    async move {
        let (Ok(mut int), Ok(mut term)) = handlers else {
            // Without signal handlers, run until killed.
            return std::future::pending().await;
        };
        tokio::select! {
            _ = int.recv() => tracing::info!("SIGINT received"),
            _ = term.recv() => tracing::info!("SIGTERM received"),
        }
    }
}

// ─── Client subcommands: ls, attach, new, send, kill, run, logs ──────────────────────────────
//
// Parsed here, carried out by `ahpty::client` (one function per subcommand).

/// Which daemon a client subcommand talks to.
#[derive(clap::Args, Debug, Clone)]
struct TargetArgs {
    /// The daemon: ws://HOST:PORT?tkn=TOKEN, wss://HOST:PORT?tkn=TOKEN or unix:PATH
    /// [default: the default socket, $XDG_RUNTIME_DIR/ahpty/ahpty.sock, else
    /// /tmp/ahpty-$UID/ahpty.sock]. A ws:// URL without `tkn` sends $AHPTY_TOKEN, if set.
    #[arg(long, value_name = "URL", env = "AHPTY_URL")]
    url: Option<String>,
}

#[derive(Subcommand)]
enum ClientCommand {
    /// List the daemon's terminals.
    #[command(long_about = LS_ABOUT)]
    Ls(LsArgs),
    /// Use a terminal from this one (detach with Ctrl-\).
    #[command(long_about = ATTACH_ABOUT)]
    Attach(AttachArgs),
    /// Create a terminal running the daemon's shell; prints its URI.
    #[command(long_about = NEW_ABOUT)]
    New(NewArgs),
    /// Type text into a terminal.
    #[command(long_about = SEND_ABOUT)]
    Send(SendArgs),
    /// Dispose of a terminal (its processes are killed).
    Kill(KillArgs),
    /// Run a command in a fresh terminal; its output on stdout, its exit status as ours.
    #[command(long_about = RUN_ABOUT)]
    Run(RunArgs),
    /// Print a terminal's retained output (and follow it with -f).
    #[command(long_about = LOGS_ABOUT)]
    Logs(LogsArgs),
    /// (internal) The program `ahpty run` starts inside the terminal.
    #[command(name = "__run", hide = true)]
    RunWrapper(RunWrapperArgs),
}

const TERMINAL_HELP: &str = "The terminal: its number in `ahpty ls`, its title, its URI, or a \
                             unique prefix of the URI or title";

const LS_ABOUT: &str = "List the daemon's terminals: number (what `attach 3` selects), title, \
status (running, or exited with its code), the client holding the claim (\"(away)\" when it has \
no connection), size, age, working directory and URI.

Examples:
  ahpty ls
  ahpty ls --json | jq -r '.[] | select(.status == \"running\") | .uri'";

const ATTACH_ABOUT: &str = "Use a terminal from this one, like `tmux attach`: the screen is \
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

const NEW_ABOUT: &str = "Create a terminal running the daemon's shell in DIR (default: the \
current directory), at this window's size, claimed by the ahpty CLI. Prints the new terminal's \
URI; with --attach, attaches to it instead.

Examples:
  ahpty new --name build --cwd ~/src/app
  t=$(ahpty new) && ahpty send \"$t\" 'make' --enter";

const SEND_ABOUT: &str = "Type TEXT into a terminal, exactly as given (add --enter for the \
Return key). Fails when the daemon rejects the input (e.g. the terminal has exited).

Examples:
  ahpty send build 'make test' --enter
  ahpty send 3 $'\\x03'        # Ctrl-C";

const RUN_ABOUT: &str = "Run CMD ARG... in a fresh terminal (a real pty, the daemon's shell \
environment) and exit with its exit status, like running it here: stdout gets the command's \
output (stdout and stderr, which share the terminal) and nothing else — no prompt, no echoed \
command line. The arguments are passed as they are, without a shell: quote for your own shell \
only. The terminal is disposed of afterwards unless --keep.

Ctrl-C is passed on to the command. A command killed by signal N exits with 128+N; 127 means \
the program was not found.

Examples:
  ahpty run -- make test
  ahpty run --cwd /srv/app -- sh -c 'npm ci && npm test'
  ahpty run --keep -- ./long-job.sh; ahpty logs ./long-job.sh";

const LOGS_ABOUT: &str = "Print a terminal's retained output (its scrollback, raw terminal \
output with escape sequences), then with --follow its live output until it exits. --plain \
strips escape sequences, for reading or piping into grep.

Examples:
  ahpty logs 3 --plain | grep -i error
  ahpty logs build -f";

#[derive(clap::Args)]
struct LsArgs {
    /// Print a JSON array (one object per terminal; see docs/cli.md) instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    target: TargetArgs,
}

#[derive(clap::Args)]
struct AttachOpts {
    /// The key that detaches: ctrl-a … ctrl-z, ctrl-\, ctrl-], ctrl-^, ctrl-_, ctrl-@ (or
    /// ^X), or `none`.
    #[arg(long, value_name = "KEY", default_value = "ctrl-\\")]
    detach_key: ahpty::client::attach::DetachKey,
    /// Watch only: send no keys and no window size.
    #[arg(long)]
    read_only: bool,
    /// Take the terminal's claim first. Allowed when the holder is this CLI or has no live
    /// connection; otherwise refused (the holder is named) and you stay attached as a viewer.
    #[arg(long, conflicts_with = "read_only")]
    take: bool,
}

impl AttachOpts {
    fn options(&self) -> ahpty::client::attach::AttachOptions {
        ahpty::client::attach::AttachOptions {
            detach_key: self.detach_key.0,
            read_only: self.read_only,
            take: self.take,
        }
    }
}

#[derive(clap::Args)]
struct AttachArgs {
    #[arg(value_name = "TERMINAL", help = TERMINAL_HELP)]
    terminal: String,
    #[command(flatten)]
    attach: AttachOpts,
    #[command(flatten)]
    target: TargetArgs,
}

#[derive(clap::Args)]
struct NewArgs {
    /// Title of the terminal [default: the shell's name].
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Working directory [default: the current directory].
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Attach to the new terminal (then the attach options apply).
    #[arg(long)]
    attach: bool,
    #[command(flatten)]
    attach_opts: AttachOpts,
    #[command(flatten)]
    target: TargetArgs,
}

#[derive(clap::Args)]
struct SendArgs {
    #[arg(value_name = "TERMINAL", help = TERMINAL_HELP)]
    terminal: String,
    /// The text to type, sent as it is (escape sequences and control characters included).
    #[arg(value_name = "TEXT", allow_hyphen_values = true)]
    text: String,
    /// Press Return after the text (a carriage return, "\r").
    #[arg(long)]
    enter: bool,
    #[command(flatten)]
    target: TargetArgs,
}

#[derive(clap::Args)]
struct KillArgs {
    #[arg(value_name = "TERMINAL", help = TERMINAL_HELP)]
    terminal: String,
    #[command(flatten)]
    target: TargetArgs,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Working directory [default: the current directory].
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Keep the terminal afterwards (with its shell, at a prompt) instead of disposing of it.
    #[arg(long)]
    keep: bool,
    /// The command and its arguments (after `--`).
    #[arg(
        value_name = "CMD",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<std::ffi::OsString>,
    #[command(flatten)]
    target: TargetArgs,
}

#[derive(clap::Args)]
struct LogsArgs {
    #[arg(value_name = "TERMINAL", help = TERMINAL_HELP)]
    terminal: String,
    /// Keep printing live output until the terminal exits.
    #[arg(short, long)]
    follow: bool,
    /// Strip escape sequences (colours, cursor movement, titles); CR LF becomes LF.
    #[arg(long)]
    plain: bool,
    #[command(flatten)]
    target: TargetArgs,
}

#[derive(clap::Args)]
struct RunWrapperArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    words: Vec<std::ffi::OsString>,
}

/// Runs a client subcommand; `token` is `$AHPTY_TOKEN` (taken out of the environment).
fn client_main(command: ClientCommand, token: Option<String>) -> ExitCode {
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
                    cwd: a.cwd,
                    attach: a.attach.then(|| a.attach_opts.options()),
                };
                client::new::new(&target(&a.target)?, token, &opts).await
            }
            ClientCommand::Send(a) => {
                client::send::send(&target(&a.target)?, token, &a.terminal, &a.text, a.enter).await
            }
            ClientCommand::Kill(a) => {
                client::kill::kill(&target(&a.target)?, token, &a.terminal).await
            }
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
            ClientCommand::RunWrapper(w) => Ok(client::wrapper::run_wrapper(&w.words)),
        }
    });
    ExitCode::from(code)
}
