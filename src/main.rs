//! The `ahpty` command line: parse arguments, set up logging, call into the library. Every
//! setting's default, limit and documentation lives in `ahpty::config`; this file only
//! declares the top-level parser and hands what was given to `config::load`. Its parts, by
//! job, are in `src/cli/`: the `serve` flags, the client subcommands' flags, the man pages.
//!
//! May touch: argv, stdout/stderr, the tracing subscriber, the choice of allocator;
//! everything else is the library's.

mod cli;

use cli::client_args::*;
use cli::man::*;
use cli::serve_args::*;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use ahpty::config::{self, parse_flag, ConfigError, Listen, Loaded, Origin, KEYS};
use ahpty::service;
use clap::{CommandFactory, Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// The process's allocator: jemalloc. glibc's malloc serves every allocation above its mmap
/// threshold (128 KiB at first) with a fresh mapping and trims its heaps eagerly, so a flood's
/// envelopes (about 150 KB each) were mapped, faulted in page by page, zeroed and unmapped —
/// with a TLB shootdown on every core — one after another: a third of the daemon's CPU per MB
/// of output, and a fifth of a snapshot's time (docs/performance.md, "Allocator").
/// `ahpty::host` returns jemalloc's free pages to the OS after the terminal model's bursts.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read when it starts: freed pages go back to the OS within about a
/// second (`dirty_decay_ms`) rather than jemalloc's default of ten, and without the lazy
/// "muzzy" stage, so the resident memory a burst leaves behind — a flood beside a stalled
/// viewer, a large snapshot — falls back within a second or two while the daemon works (once
/// it is idle, the host purges what is left: `give_back_memory` in `host/screen.rs`). One
/// arena (`narenas:1`) instead of four per core: a flooding terminal's reads run on a thread
/// of their own (`terminal/reader.rs`), which allocates the output that the runtime's workers
/// free, and with an arena of its own that left 15–25 MiB more resident beside a lagging
/// viewer; the threads' caches serve the small allocations without the arena's lock either
/// way (docs/performance.md, "Floods read on a thread of their own"). `_RJEM_MALLOC_CONF` in
/// the environment overrides them (jemalloc(3), "TUNING").
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
static malloc_conf: Option<&'static std::ffi::c_char> =
    // SAFETY: a pointer to the first byte of a NUL-terminated static string, which is what
    // jemalloc reads this symbol as (`const char *`).
    Some(unsafe { &*c"dirty_decay_ms:1000,muzzy_decay_ms:0,narenas:1".as_ptr() });

/// Serve Agent Host Protocol (AHP) 1.0 terminals over WebSocket.
#[derive(Parser)]
#[command(name = "ahpty", version, about, long_about = TOP_ABOUT, after_help = TOP_AFTER_HELP)]
struct Cli {
    /// More log output: -v ahpty's debug messages, -vv its trace messages, -vvv those of
    /// its libraries too; RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

const AFTER_HELP: &str = "Settings come from flags, then AHPTY_* variables, then \
$XDG_CONFIG_HOME/ahpty/config.toml (keys named like the flags), then defaults: \
`ahpty config` shows which. Exit status 2: the settings are wrong, or name a file that cannot \
be used (also a usage error); 1: the daemon could not start (e.g. an address in use) or \
stopped on an error.";

const TOP_ABOUT: &str = "Serve Agent Host Protocol (AHP) 1.0 terminals over WebSocket.

ahpty is a daemon hosting pseudo-terminals (shells, dev servers, builds) for AI agents, \
editors (VS Code's remote agent hosts) and scripts: they connect over WebSocket (TCP, with a \
token, or the owner-only Unix socket), create terminals, type into them and watch their \
output; terminals keep running when a client goes away. `ahpty serve` runs the daemon (as a \
systemd user service: `ahpty service install`); ls, attach, new, send, kill, run and logs use \
it from the shell.

Examples:
  ahpty serve
  ahpty ls
  ahpty attach 3
  ahpty run -- make test";

const TOP_AFTER_HELP: &str = "The daemon: `ahpty serve` (settings: `ahpty help serve`). The \
client commands (ls, attach, new, send, kill, run, logs) find it on its default socket, \
$XDG_RUNTIME_DIR/ahpty/ahpty.sock, or at --url / $AHPTY_URL.

Exit status: serve and config exit 2 when the settings are wrong, 1 when the daemon could not \
start. The client commands exit 2 when no daemon can be reached (or on a usage error), 1 when \
the daemon refused or no terminal matches, 255 when the connection was lost; attach and run \
exit with the remote program's status.";

const SERVE_ABOUT: &str = "Run the daemon in the foreground: it listens on the --listen \
addresses (TCP) and on its default Unix socket, prints one connect URL per TCP listener on \
stdout (ws://HOST:PORT?tkn=TOKEN when it generated the token), logs to stderr, and stops \
cleanly on SIGINT or SIGTERM (its terminals are hung up, every connection is closed with code \
1001). As a systemd user service: `ahpty service install` (docs/service.md).

Examples:
  ahpty serve
  ahpty serve --listen 127.0.0.1:8765 --token-file ~/.config/ahpty/token
  ahpty serve --listen 127.0.0.1:0 --no-socket     # a second, private daemon";

/// Footer of every client subcommand's help.
const CLIENT_AFTER_HELP: &str = "Exit status: 0 done; 1 the daemon refused, or no terminal \
matches, or the selection is ambiguous; 2 no daemon reachable (none running, wrong URL or \
token) or a usage error; 255 the connection was lost.";

#[derive(Subcommand)]
// Parsed once per process: the size difference between the variants does not matter.
#[allow(clippy::large_enum_variant)]
enum Command {
    /// Run the daemon.
    #[command(long_about = SERVE_ABOUT, after_help = AFTER_HELP)]
    Serve(ServeArgs),
    /// Print the settings `serve` would use, each with where it came from: a flag, an
    /// environment variable, FILE:LINE of the config file, or the default.
    #[command(after_help = AFTER_HELP)]
    Config(ServeArgs),
    /// Install, remove or inspect the systemd user service.
    Service {
        #[command(subcommand)]
        action: ServiceAction,
    },
    /// Print a completion script for SHELL on stdout.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print a man page (roff) on stdout: ahpty(1), or ahpty-COMMAND(1) for a subcommand.
    Man {
        /// The subcommand whose page to print (e.g. `serve`).
        command: Option<String>,
    },
    /// Upgrade the running daemon in place: it re-executes its binary (the path it was
    /// started from, e.g. after a package update) with the same pid, keeping every terminal
    /// running and every client resumable; prints the outcome. Exit status 0: upgraded; 1:
    /// the upgrade failed and the old version serves on (the reason is printed); 2: no
    /// outcome within --timeout; 3: the daemon exited during the upgrade (a new binary that
    /// ended before it took over). The same as `kill -USR2 PID`.
    Upgrade(UpgradeArgs),
    /// (internal) The pre-flight of a live upgrade: checks that this binary can run the given
    /// `serve` arguments and prints the hand-over formats it reads, as JSON.
    #[command(hide = true, name = "upgrade-check")]
    UpgradeCheck {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<std::ffi::OsString>,
    },
    #[command(flatten)]
    Client(ClientCommand),
}

#[derive(clap::Args)]
struct UpgradeArgs {
    /// The daemon's pid [default: the daemon listening on --socket].
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,
    /// The daemon's Unix socket, to find its pid [default: $XDG_RUNTIME_DIR/ahpty/ahpty.sock,
    /// else /tmp/ahpty-$UID/ahpty.sock].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// How long to wait for the outcome (e.g. 15s); more than twice the daemon's
    /// --upgrade-timeout, which bounds the new binary's pre-flight and its take-over.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_flag::<Duration>)]
    timeout: Duration,
}

#[derive(Subcommand)]
enum ServiceAction {
    /// Write the user unit for this binary to $XDG_CONFIG_HOME/systemd/user/ahpty.service,
    /// then `systemctl --user daemon-reload` and `enable --now` it.
    Install,
    /// `systemctl --user disable --now` the service and remove its unit file.
    Uninstall,
    /// Show the unit file and `systemctl --user status ahpty.service`.
    Status,
}

fn main() -> ExitCode {
    // Take the token out of the environment first, before any thread or terminal exists: no
    // child inherits it and /proc/PID/environ no longer shows it (ahpty::server::environ).
    // SAFETY: the first statement of main; no thread exists yet.
    let env_token = unsafe { ahpty::server::environ::take_token() };
    // A live upgrade's hand-over, read before any thread exists (it may go back to the old
    // image from here, see ahpty::upgrade).
    let inherited = ahpty::upgrade::take_inherited();
    // Runs inside a terminal on behalf of `ahpty run`: not a subcommand of the interface (no
    // help, completion or man page), no logging of its own.
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() == Some(std::ffi::OsStr::new(ahpty::client::wrapper::SUBCOMMAND)) {
        let words: Vec<std::ffi::OsString> = args.collect();
        return ExitCode::from(ahpty::client::wrapper::run_wrapper(&words));
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Client(command) => {
            // The client subcommands report failures as one line of their own.
            init_tracing_at(cli.verbose, "error");
            client_main(command, env_token)
        }
        Command::Serve(args) => {
            init_tracing(cli.verbose);
            serve(&args, env_token, inherited)
        }
        Command::Upgrade(a) => {
            let socket = a.socket.unwrap_or_else(config::default_socket_path);
            let code = ahpty::upgrade::cli::run(a.pid, &socket, a.timeout, &mut std::io::stdout());
            ExitCode::from(code)
        }
        Command::UpgradeCheck { args } => upgrade_check(args, env_token),
        Command::Config(args) => print_config(&args, env_token),
        Command::Service { action } => {
            let mut out = std::io::stdout().lock();
            let result = match action {
                ServiceAction::Install => service::install(&mut out),
                ServiceAction::Uninstall => service::uninstall(&mut out),
                ServiceAction::Status => service::status(&mut out),
            };
            match result {
                Ok(code) => ExitCode::from(code),
                Err(e) => {
                    let _ = out.flush();
                    eprintln!("ahpty: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "ahpty", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Man { command } => print_man(command.as_deref()),
    }
}

/// Logs to stderr: colours only on a terminal. When stderr is the systemd journal: no
/// timestamps (the journal adds its own) and each line starts with its syslog priority
/// (`<3>` error … `<7>` debug), which the journal turns into the entry's priority
/// (`journalctl -p warning`).
fn init_tracing(verbose: u8) {
    init_tracing_at(verbose, "info")
}

/// [`init_tracing`] with `quiet` as the level without `-v`.
fn init_tracing_at(verbose: u8, quiet: &str) {
    let default_level = match verbose {
        0 => quiet.to_string(),
        1 => format!("{quiet},ahpty=debug"),
        2 => format!("{quiet},ahpty=trace"),
        _ => "trace".to_string(),
    };
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let journal = service::is_journal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(!journal && std::io::stderr().is_terminal());
    if journal {
        let format = tracing_subscriber::fmt::format().without_time();
        builder.event_format(JournalPriority(format)).init();
    } else {
        builder.init();
    }
}

/// Prefixes each event with its syslog priority for the journal (`sd-daemon(3)` prefixes).
struct JournalPriority<F>(F);

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for JournalPriority<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let priority = match *event.metadata().level() {
            tracing::Level::ERROR => 3,
            tracing::Level::WARN => 4,
            tracing::Level::INFO => 6,
            _ => 7,
        };
        write!(writer, "<{priority}>")?;
        self.0.format_event(ctx, writer, event)
    }
}

fn fail(e: &ConfigError) -> ExitCode {
    eprintln!("ahpty: {e}");
    ExitCode::from(e.exit_code())
}

/// Settings resolved and checked as `serve` checks them before binding anything: the token
/// file read, `no_auth` and tokens against the listeners' addresses, the TLS files loaded.
/// Every refusal is a settings mistake, exit status 2 (systemd does not restart on it).
struct Checked {
    config: config::Config,
    /// Warnings of the resolution (an exposed token file…); those of the listener checks are
    /// logged by `Server::bind` itself.
    warnings: Vec<String>,
    /// The listener checks' warnings, for `ahpty config`.
    exposure: Vec<String>,
}

/// Runs the start-time checks on loaded settings; the refusal is one line (exit status 2).
fn check(loaded: &Loaded, env_token: Option<String>) -> Result<Checked, String> {
    let (config, warnings) = loaded
        .settings
        .clone()
        .into_config(env_token)
        .map_err(|e| e.to_string())?;
    let exposure = ahpty::server::check_settings(&config)?;
    Ok(Checked {
        config,
        warnings,
        exposure,
    })
}

/// `ahpty upgrade-check -- ARGS…`: parses ARGS as this binary's `serve` would (settings
/// included) and prints the hand-over formats it reads; exit status 1 with one line on stderr
/// if it cannot.
fn upgrade_check(args: Vec<std::ffi::OsString>, env_token: Option<String>) -> ExitCode {
    let argv = std::iter::once("ahpty".into()).chain(args);
    let serve_args = match Cli::try_parse_from(argv) {
        Ok(Cli {
            command: Command::Serve(a),
            ..
        }) => a,
        Ok(_) => {
            eprintln!("ahpty: upgrade-check: the arguments are not those of `ahpty serve`");
            return ExitCode::from(1);
        }
        Err(e) => {
            let text = e.to_string();
            eprintln!("ahpty: {}", text.lines().next().unwrap_or("bad arguments"));
            return ExitCode::from(1);
        }
    };
    let loaded = match serve_args.load() {
        Ok(l) => l,
        Err(e) => return fail(&e),
    };
    if let Err(m) = check(&loaded, env_token) {
        eprintln!("ahpty: {m}");
        return ExitCode::from(2);
    }
    match serde_json::to_string(&ahpty::upgrade::CheckAnswer::own()) {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ahpty: {e}");
            ExitCode::from(1)
        }
    }
}

fn serve(
    args: &ServeArgs,
    env_token: Option<String>,
    inherited: Option<Result<ahpty::upgrade::Inherited, String>>,
) -> ExitCode {
    let inherited = match inherited.transpose() {
        Ok(i) => i,
        Err(e) => {
            eprintln!("ahpty: cannot take over from the previous image: {e}");
            return ExitCode::from(1);
        }
    };
    // Before the commit, a failure goes back to the previous image (when there is one).
    let abandon = |reason: &str| {
        if let Some(i) = &inherited {
            i.abandon(reason);
        }
    };
    let loaded = match args.load() {
        Ok(l) => l,
        Err(e) => {
            abandon(&e.to_string());
            return fail(&e);
        }
    };
    let Checked {
        config, warnings, ..
    } = match check(&loaded, env_token) {
        Ok(c) => c,
        Err(m) => {
            abandon(&m);
            eprintln!("ahpty: {m}");
            return ExitCode::from(2);
        }
    };
    let (file, notes) = (loaded.file.clone(), loaded.notes.clone());
    if let Some(file) = file.filter(|f| f.found) {
        tracing::info!("settings from {}", file.path.display());
    }
    if args.kill_grace_ms.is_some() {
        tracing::warn!("--kill-grace-ms is deprecated: use --kill-grace DURATION (e.g. 500ms)");
    }
    for note in notes {
        tracing::warn!("{note}");
    }
    for w in warnings {
        tracing::warn!("{w}");
    }
    // Every terminal and connection needs file descriptors: use the whole hard limit, and say
    // up front when even that is too small.
    if let Some(warning) = ahpty::server::fdlimit::prepare(&config) {
        tracing::warn!("{warning}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            abandon(&format!("cannot start the async runtime: {e}"));
            eprintln!("ahpty: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        let shutdown = shutdown_signal();
        let upgrader = match ahpty::upgrade::Upgrader::install(
            inherited.as_ref().map(|i| &i.handover),
            config.upgrade_timeout,
        ) {
            Ok(u) => u,
            Err(e) => {
                if let Some(i) = &inherited {
                    i.abandon(&format!("cannot install the SIGUSR2 handler: {e}"));
                }
                return Err(e);
            }
        };
        let server = match inherited {
            Some(inherited) => {
                // The transcripts go on in the same files (the old image's lock ended with it).
                let store = match config.persist.as_ref().map(ahpty::store::open).transpose() {
                    Ok(s) => s.flatten(),
                    Err(e) => {
                        inherited.abandon(&e.to_string());
                        return Err(e);
                    }
                };
                // The commit point: from here on the old image is gone for good.
                let (handover, mut fds, failed) = inherited.commit();
                let adoption = ahpty::upgrade::Adoption::of(&handover);
                let host = ahpty::host::Host::resume(&config, handover.host, &mut fds, store)?;
                let server = ahpty::Server::adopt(&config, handover.server, &mut fds, host)?;
                upgrader.report_adopted(&adoption, failed, server.host().terminal_count());
                server
            }
            None => {
                let mut server = ahpty::Server::bind(&config).await?;
                announce(&mut server, &config);
                server
            }
        };
        upgrader.signals_ready();
        server.with_upgrades(upgrader).run(shutdown).await;
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

/// Once every listener is bound: the connect URL(s) on stdout (never in the log; VS Code's
/// SSH flow scrapes `ws://127.0.0.1:PORT?tkn=TOKEN` from here), then readiness to systemd
/// (`READY=1` with a `STATUS=` line, when `$NOTIFY_SOCKET` is set).
fn announce(server: &mut ahpty::Server, config: &config::Config) {
    let urls = server.connect_urls();
    // Under systemd, stdout is the journal: a generated token would be stored there, so only
    // the address is printed.
    let hide_token = server.token_generated() && service::is_journal(&std::io::stdout());
    if hide_token && !urls.is_empty() {
        server.withhold_token();
        tracing::warn!(
            "stdout is the journal, so the generated token is not printed: give the daemon a \
             token_file to reach it over TCP (see docs/service.md); the Unix socket needs none"
        );
    }
    let mut out = std::io::stdout().lock();
    for url in &urls {
        let url = match (hide_token, url.split_once("?tkn=")) {
            (true, Some((base, _))) => base,
            _ => url,
        };
        let _ = writeln!(out, "{url}");
    }
    let _ = out.flush();
    drop(out);
    let scheme = if config.tls.is_some() { "wss" } else { "ws" };
    let tcp = server
        .tcp_addrs()
        .into_iter()
        .map(|a| format!("{scheme}://{a}"));
    let unix = config.listen.iter().filter_map(|l| match l {
        Listen::Unix(_) => Some(l.to_string()),
        Listen::Tcp(_) => None,
    });
    let status = tcp.chain(unix).collect::<Vec<_>>().join(", ");
    if let Err(e) = sd_notify::notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&format!("listening on {status}")),
    ]) {
        tracing::warn!("cannot notify systemd of readiness ($NOTIFY_SOCKET): {e}");
    }
}

/// `ahpty config`: every setting in TOML syntax, each with its origin as a comment.
fn print_config(args: &ServeArgs, env_token: Option<String>) -> ExitCode {
    let has_env_token = env_token.is_some();
    let loaded = match args.load() {
        Ok(l) => l,
        Err(e) => return fail(&e),
    };
    // The settings are printed even when serve would refuse them; the refusal follows on
    // stderr (exit status 2).
    let (warnings, exposure, refusal) = match check(&loaded, env_token) {
        Ok(c) => (c.warnings, c.exposure, None),
        Err(m) => (Vec::new(), Vec::new(), Some(m)),
    };
    let auth = match loaded.settings.auth_plan(has_env_token) {
        Ok(a) => a,
        Err(e) => return fail(&e),
    };
    let mut out = String::new();
    out.push_str(
        "# ahpty settings: value, then where it came from (flag, env, FILE:LINE, default)\n",
    );
    match &loaded.file {
        Some(f) => {
            let state = if f.found { "read" } else { "not found" };
            let how = match &f.chosen_by {
                Origin::Default => String::new(),
                o => format!(", chosen by {o}"),
            };
            out.push_str(&format!(
                "# config file: {} ({state}{how})\n",
                f.path.display()
            ));
        }
        None => out.push_str("# config file: none ($HOME is not set)\n"),
    }
    for (key, value, origin) in loaded.settings.entries() {
        let line = if value.is_empty() {
            format!("# {key} (not set)")
        } else {
            format!("{key} = {value}")
        };
        out.push_str(&format!("{line:<40} # {origin}\n"));
    }
    if loaded.settings.shell.value.is_none() {
        out.push_str(&format!(
            "# shell: {} ($SHELL, else /bin/bash, else /bin/sh)\n",
            config::Config::default_shell().display()
        ));
    }
    if loaded.settings.state_dir.value.is_none() && !loaded.settings.no_persist.value {
        let dir = config::default_state_dir(&|k| std::env::var_os(k));
        out.push_str(&format!(
            "# state_dir: {} ($XDG_STATE_HOME/ahpty, else ~/.local/state/ahpty)\n",
            dir.map_or_else(|| "none".into(), |d| d.display().to_string())
        ));
    }
    out.push_str(&format!("# auth: {auth}\n"));
    for note in &loaded.notes {
        out.push_str(&format!("# note: {note}\n"));
    }
    for warning in warnings.iter().chain(&exposure) {
        out.push_str(&format!(
            "# warning: {}\n",
            ahpty::client::one_line(warning)
        ));
    }
    debug_assert_eq!(KEYS.len(), loaded.settings.entries().len());
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(out.as_bytes());
    let _ = stdout.flush();
    match refusal {
        Some(m) => {
            eprintln!("ahpty: serve would refuse these settings: {m}");
            ExitCode::from(2)
        }
        None => ExitCode::SUCCESS,
    }
}

/// Completes on SIGINT or SIGTERM (and tells systemd the daemon is stopping). The handlers are
/// installed when this is called (before the listeners are announced), not when the future is
/// first polled, so a signal sent right after `listening on …` still stops the daemon cleanly.
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
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    }
}
