//! The `ahpty` command line: parse arguments, set up logging, run the daemon.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use ahpty::config::{
    Auth, Config, Listen, TlsFiles, Token, DEFAULT_LAG_LIMIT_BYTES, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_SUBSCRIPTIONS, DEFAULT_MAX_TERMINALS,
    DEFAULT_SCROLLBACK_BYTES, MIN_LAG_LIMIT_BYTES, TOKEN_ENV,
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
enum Command {
    /// Run the daemon.
    Serve(ServeArgs),
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
    /// How long a viewer that stopped keeping up may hold back a terminal other viewers keep
    /// up with (per episode); after that it is lagging and the terminal runs on without it.
    /// `0` gives no grace.
    #[arg(long, default_value = "250ms", value_parser = humantime::parse_duration, value_name = "DURATION")]
    lag_grace: Duration,
    /// Close a lagging connection (code 4002) after this long (at least 100 ms); `0` never
    /// closes it for time (the lag limit still applies).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    lag_timeout: Duration,
    /// Close a lagging connection (code 4002) once this many bytes of output wait for it
    /// (at least 2 MiB).
    #[arg(long, default_value_t = DEFAULT_LAG_LIMIT_BYTES, value_name = "BYTES")]
    lag_limit_bytes: usize,
    /// Largest incoming WebSocket message, in bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_MESSAGE_BYTES, value_name = "BYTES")]
    max_message_bytes: usize,
    /// Most terminals at once.
    #[arg(long, default_value_t = DEFAULT_MAX_TERMINALS, value_name = "N")]
    max_terminals: usize,
    /// Most subscriptions per connection.
    #[arg(long, default_value_t = DEFAULT_MAX_SUBSCRIPTIONS, value_name = "N")]
    max_subscriptions: usize,
}

fn main() -> ExitCode {
    // Take the token out of the environment before any thread or terminal exists, so no child
    // process ever inherits it.
    let env_token = std::env::var(TOKEN_ENV).ok();
    std::env::remove_var(TOKEN_ENV);
    let cli = Cli::parse();
    let default_level = match cli.verbose {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let Command::Serve(args) = cli.command;
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
    let config = Config {
        listen: args.listen,
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
        lag_grace: args.lag_grace,
        lag_timeout: (!args.lag_timeout.is_zero())
            .then(|| args.lag_timeout.max(Duration::from_millis(100))),
        lag_limit_bytes: args.lag_limit_bytes.max(MIN_LAG_LIMIT_BYTES),
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
