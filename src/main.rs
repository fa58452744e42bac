//! The `ahpty` command line: parse arguments, set up logging, run the daemon.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use ahpty::config::{
    Config, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_SUBSCRIPTIONS, DEFAULT_MAX_TERMINALS,
    DEFAULT_SCROLLBACK_BYTES,
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
    /// Address to listen on (host:port; port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8765")]
    listen: SocketAddr,
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
    /// Close a connection whose unsent output stays above the high watermark this long.
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
}

fn main() -> ExitCode {
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
    let config = Config {
        listen: args.listen,
        shell,
        allow_origins: args.allow_origin,
        scrollback_bytes: args.scrollback_bytes.max(1024),
        kill_grace: Duration::from_millis(args.kill_grace_ms),
        shell_integration: !args.no_shell_integration,
        history_bytes: args.history_bytes.max(1024),
        orphan_grace: (!args.orphan_grace.is_zero()).then_some(args.orphan_grace),
        stall_timeout: args.stall_timeout.max(Duration::from_millis(100)),
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
        let server = ahpty::Server::bind(&config).await?;
        server.run(shutdown_signal()).await;
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

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        // Without signal handlers, run until killed.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => tracing::info!("SIGINT received"),
        _ = term.recv() => tracing::info!("SIGTERM received"),
    }
}
