//! The `ahpty` command line: parse arguments, set up logging, call into the library. Every
//! setting's default, limit and documentation lives in `ahpty::config`; this file only
//! declares the flags and hands what was given to `config::load`.
//!
//! May touch: argv, stdout/stderr, the tracing subscriber, the choice of allocator;
//! everything else is the library's.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use ahpty::config::{
    self, help, parse_flag, parse_item, AgentEnvArg, ConfigError, Layer, Listen, Loaded, Origin,
    ReportColors, Val, KEYS,
};
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

/// The `serve` options. Their help text, defaults and limits come from `ahpty::config`, and
/// every one of them can also be set by the variable and config-file key of the same name.
#[derive(clap::Args)]
struct ServeArgs {
    /// Read settings from this TOML file instead of $XDG_CONFIG_HOME/ahpty/config.toml
    /// (else ~/.config/ahpty/config.toml) [env: AHPTY_CONFIG].
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    #[arg(long, value_name = "ADDR", help = help("listen"), value_parser = parse_item::<Listen>)]
    listen: Vec<Listen>,
    #[arg(long, value_name = "PATH", conflicts_with = "no_auth", help = help("token_file"))]
    token_file: Option<PathBuf>,
    #[arg(long, help = help("no_auth"))]
    no_auth: bool,
    #[arg(long, value_name = "PATH", requires = "tls_key", help = help("tls_cert"))]
    tls_cert: Option<PathBuf>,
    #[arg(long, value_name = "PATH", requires = "tls_cert", help = help("tls_key"))]
    tls_key: Option<PathBuf>,
    #[arg(long, value_name = "PATH", overrides_with = "shell", help = help("shell"))]
    shell: Option<PathBuf>,
    #[arg(long, value_name = "ORIGIN", help = help("allow_origin"), value_parser = parse_item::<String>)]
    allow_origin: Vec<String>,
    #[arg(long, help = help("no_shell_integration"))]
    no_shell_integration: bool,
    #[arg(long = "agent-env", value_name = "KEY[=VALUE]", help = help("agent_env"), value_parser = parse_item::<AgentEnvArg>)]
    agent_env: Vec<AgentEnvArg>,
    #[arg(long, help = help("no_agent_env"))]
    no_agent_env: bool,
    #[arg(long, value_name = "PATH", conflicts_with = "no_socket", help = help("socket"))]
    socket: Option<PathBuf>,
    #[arg(long, help = help("no_socket"))]
    no_socket: bool,
    #[arg(long, value_name = "BYTES", help = help("scrollback_bytes"), value_parser = parse_flag::<usize>)]
    scrollback_bytes: Option<usize>,
    #[arg(long, value_name = "BYTES", help = help("history_bytes"), value_parser = parse_flag::<usize>)]
    history_bytes: Option<usize>,
    #[arg(long, value_name = "DIR", conflicts_with = "no_persist", help = help("state_dir"))]
    state_dir: Option<PathBuf>,
    #[arg(long, help = help("no_persist"))]
    no_persist: bool,
    #[arg(long, value_name = "BYTES", help = help("persist_max_bytes"), value_parser = parse_flag::<usize>)]
    persist_max_bytes: Option<usize>,
    #[arg(long, value_name = "DURATION", help = help("persist_max_age"), value_parser = parse_flag::<Duration>)]
    persist_max_age: Option<Duration>,
    #[arg(long, value_name = "DURATION", help = help("kill_grace"), value_parser = parse_flag::<Duration>)]
    kill_grace: Option<Duration>,
    /// Deprecated spelling of --kill-grace, in milliseconds.
    #[arg(long, value_name = "MS", hide = true, conflicts_with = "kill_grace")]
    kill_grace_ms: Option<u64>,
    #[arg(long, value_name = "DURATION", help = help("orphan_grace"), value_parser = parse_flag::<Duration>)]
    orphan_grace: Option<Duration>,
    #[arg(long, value_name = "DURATION", help = help("stall_timeout"), value_parser = parse_flag::<Duration>)]
    stall_timeout: Option<Duration>,
    #[arg(long, value_name = "DURATION", help = help("lag_grace"), value_parser = parse_flag::<Duration>)]
    lag_grace: Option<Duration>,
    #[arg(long, value_name = "DURATION", help = help("lag_timeout"), value_parser = parse_flag::<Duration>)]
    lag_timeout: Option<Duration>,
    #[arg(long, value_name = "BYTES", help = help("lag_limit_bytes"), value_parser = parse_flag::<usize>)]
    lag_limit_bytes: Option<usize>,
    #[arg(long, value_name = "BYTES", help = help("max_message_bytes"), value_parser = parse_flag::<usize>)]
    max_message_bytes: Option<usize>,
    #[arg(long, value_name = "N", help = help("max_terminals"), value_parser = parse_flag::<usize>)]
    max_terminals: Option<usize>,
    #[arg(long, value_name = "N", help = help("max_exited_terminals"), value_parser = parse_flag::<usize>)]
    max_exited_terminals: Option<usize>,
    #[arg(long, value_name = "N", help = help("max_subscriptions"), value_parser = parse_flag::<usize>)]
    max_subscriptions: Option<usize>,
    #[arg(long, value_name = "N", help = help("max_connections"), value_parser = parse_flag::<usize>)]
    max_connections: Option<usize>,
    #[arg(long, value_name = "DURATION", help = help("handshake_timeout"), value_parser = parse_flag::<Duration>)]
    handshake_timeout: Option<Duration>,
    #[arg(long, value_name = "DURATION", help = help("ping_interval"), value_parser = parse_flag::<Duration>)]
    ping_interval: Option<Duration>,
    #[arg(long, value_name = "DURATION", help = help("ping_timeout"), value_parser = parse_flag::<Duration>)]
    ping_timeout: Option<Duration>,
    #[arg(long, value_name = "FG,BG,CURSOR", help = help("report_colors"), value_parser = parse_flag::<ReportColors>)]
    report_colors: Option<ReportColors>,
    #[arg(long, value_name = "DURATION", help = help("upgrade_timeout"), value_parser = parse_flag::<Duration>)]
    upgrade_timeout: Option<Duration>,
}

/// A flag's parsed form as a setting: `Some` when the flag was given.
trait Given<T> {
    fn given(self) -> Option<T>;
}

impl<T> Given<T> for Option<T> {
    fn given(self) -> Option<T> {
        self
    }
}

impl Given<Option<PathBuf>> for Option<PathBuf> {
    fn given(self) -> Option<Option<PathBuf>> {
        self.map(Some)
    }
}

impl Given<bool> for bool {
    fn given(self) -> Option<bool> {
        self.then_some(true)
    }
}

impl<T> Given<Vec<T>> for Vec<T> {
    fn given(self) -> Option<Vec<T>> {
        (!self.is_empty()).then_some(self)
    }
}

impl ServeArgs {
    /// The flags given, as the highest-precedence settings layer.
    fn layer(&self) -> Layer {
        let mut layer = Layer::default();
        macro_rules! given {
            ($($key:ident),+) => {
                $( layer.$key = self.$key.clone().given().map(|v| Val::flag(v, stringify!($key))); )+
            };
        }
        given!(
            listen,
            socket,
            no_socket,
            token_file,
            no_auth,
            tls_cert,
            tls_key,
            shell,
            allow_origin,
            no_shell_integration,
            agent_env,
            no_agent_env,
            scrollback_bytes,
            history_bytes,
            state_dir,
            no_persist,
            persist_max_bytes,
            persist_max_age,
            kill_grace,
            orphan_grace,
            stall_timeout,
            lag_grace,
            lag_timeout,
            lag_limit_bytes,
            max_message_bytes,
            max_terminals,
            max_exited_terminals,
            max_subscriptions,
            max_connections,
            handshake_timeout,
            ping_interval,
            ping_timeout,
            report_colors,
            upgrade_timeout
        );
        if let Some(ms) = self.kill_grace_ms {
            layer.kill_grace = Some(Val {
                value: Duration::from_millis(ms),
                origin: Origin::Flag("--kill-grace-ms".into()),
            });
        }
        layer
    }

    /// Resolves flags, environment, config file and defaults.
    fn load(&self) -> Result<Loaded, ConfigError> {
        let env = |name: &str| std::env::var_os(name);
        let mut loaded = config::load(&self.layer(), self.config.as_deref(), &env)?;
        loaded.notes.extend(config::unknown_env_notes(
            std::env::vars_os().map(|(name, _)| name),
        ));
        Ok(loaded)
    }
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

/// `ahpty man [COMMAND]`: clap_mangen's sections, then EXIT STATUS (from the help footer),
/// EXAMPLES (from the long help), ENVIRONMENT and FILES.
fn print_man(command: Option<&str>) -> ExitCode {
    // `help` is a subcommand of the parser, not a page of its own.
    let mut cmd = Cli::command().disable_help_subcommand(true);
    // Global options (-v) appear on every page.
    cmd.build();
    let page = match command {
        None => cmd,
        Some(name) => match cmd.find_subcommand(name) {
            Some(sub) => {
                let full = format!("ahpty-{}", sub.get_name());
                sub.clone()
                    .name(full)
                    .bin_name(format!("ahpty {name}"))
                    .version(env!("CARGO_PKG_VERSION"))
                    .disable_version_flag(true)
            }
            None => {
                // Hidden subcommands (upgrade-check, for the daemon's own use) are not listed.
                let names: Vec<&str> = cmd
                    .get_subcommands()
                    .filter(|s| !s.is_hide_set())
                    .map(|s| s.get_name())
                    .collect();
                eprintln!(
                    "ahpty: no subcommand {name:?} (one of: {})",
                    names.join(", ")
                );
                return ExitCode::from(2);
            }
        },
    };
    match render_man(page, command) {
        Ok(out) => {
            let _ = std::io::stdout().lock().write_all(&out);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ahpty: cannot render the man page: {e}");
            ExitCode::from(1)
        }
    }
}

fn render_man(page: clap::Command, command: Option<&str>) -> std::io::Result<Vec<u8>> {
    use roff::{bold, roman, Roff};
    let long = page
        .get_long_about()
        .or(page.get_about())
        .map(|s| s.to_string())
        .unwrap_or_default();
    let (description, examples) = match long.split_once("\n\nExamples:\n") {
        Some((d, e)) => (d.to_string(), e.to_string()),
        None => (long.clone(), String::new()),
    };
    let footer = page
        .get_after_help()
        .map(|s| s.to_string())
        .unwrap_or_default();
    let (notes, status) = match footer.find("Exit status") {
        Some(i) => (footer[..i].trim().to_string(), footer[i..].to_string()),
        None => (footer.trim().to_string(), String::new()),
    };
    let page = page
        .long_about(description)
        .after_help(None::<&str>)
        .after_long_help(None::<&str>);
    let man = clap_mangen::Man::new(page.clone());
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    if page.has_subcommands() {
        man.render_subcommands_section(&mut out)?;
    }
    let mut roff = Roff::new();
    let paragraphs = |roff: &mut Roff, text: &str| {
        for para in text.split("\n\n").filter(|p| !p.trim().is_empty()) {
            roff.control("PP", []);
            roff.text([roman(para.replace('\n', " "))]);
        }
    };
    if !notes.is_empty() {
        roff.control("SH", ["NOTES"]);
        paragraphs(&mut roff, &notes);
    }
    if !status.is_empty() {
        roff.control("SH", ["EXIT STATUS"]);
        paragraphs(&mut roff, &status);
    }
    if !examples.is_empty() {
        roff.control("SH", ["EXAMPLES"]);
        roff.control("nf", []);
        for line in examples.lines() {
            roff.text([roman(line.trim_start())]);
        }
        roff.control("fi", []);
    }
    let client = !matches!(
        command,
        Some("serve" | "config" | "service" | "completions" | "man")
    );
    let daemon = matches!(command, None | Some("serve" | "config"));
    let mut env: Vec<(&str, &str)> = Vec::new();
    if client {
        env.push((
            "AHPTY_URL",
            "The daemon the client commands talk to (like --url): ws://HOST:PORT?tkn=TOKEN, \
             wss://…, or unix:PATH.",
        ));
        env.push((
            "AHPTY_TOKEN",
            "The token sent to a ws:// URL without tkn (client commands); the token the daemon \
             requires (serve).",
        ));
    }
    if daemon {
        env.push((
            "AHPTY_*",
            "Every serve setting, named like its flag (AHPTY_LISTEN, AHPTY_TOKEN_FILE, …): \
             below flags, above the config file.",
        ));
        env.push((
            "AHPTY_CONFIG",
            "The config file to read instead of the default.",
        ));
        env.push((
            "XDG_CONFIG_HOME",
            "Where the config file is looked for (default ~/.config).",
        ));
    }
    if client || daemon {
        env.push((
            "XDG_RUNTIME_DIR",
            "Where the default socket lives (unset: /tmp/ahpty-$UID/).",
        ));
        env.push(("RUST_LOG", "Log filter (overrides -v), e.g. ahpty=debug."));
    }
    if !env.is_empty() {
        roff.control("SH", ["ENVIRONMENT"]);
        for (name, what) in env {
            roff.control("TP", []);
            roff.text([bold(name)]);
            roff.text([roman(what)]);
        }
    }
    let mut files: Vec<(&str, &str)> = Vec::new();
    if daemon || command == Some("service") {
        files.push((
            "$XDG_CONFIG_HOME/ahpty/config.toml",
            "The settings file (TOML, keys named like the flags); `ahpty config` shows what \
             is used.",
        ));
    }
    if daemon || client {
        files.push((
            "$XDG_RUNTIME_DIR/ahpty/ahpty.sock",
            "The daemon's default Unix socket (owner-only; no token needed), where the client \
             commands look first.",
        ));
    }
    if matches!(command, None | Some("service")) {
        files.push((
            "$XDG_CONFIG_HOME/systemd/user/ahpty.service",
            "The user unit `ahpty service install` writes.",
        ));
    }
    if !files.is_empty() {
        roff.control("SH", ["FILES"]);
        for (name, what) in files {
            roff.control("TP", []);
            roff.text([bold(name)]);
            roff.text([roman(what)]);
        }
    }
    roff.to_writer(&mut out)?;
    man.render_version_section(&mut out)?;
    Ok(out)
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

// ─── Client subcommands: ls, attach, new, send, kill, run, logs ──────────────────────────────
//
// Parsed here, carried out by `ahpty::client` (one function per subcommand).

/// Which daemon a client subcommand talks to.
#[derive(clap::Args, Debug, Clone)]
struct TargetArgs {
    /// The daemon: ws://HOST:PORT?tkn=TOKEN, wss://HOST:PORT?tkn=TOKEN or unix:PATH
    /// [default: the default socket, $XDG_RUNTIME_DIR/ahpty/ahpty.sock, else
    /// /tmp/ahpty-$UID/ahpty.sock]. A ws:// URL without `tkn` sends $AHPTY_TOKEN, if set.
    #[arg(long, value_name = "URL", env = "AHPTY_URL", hide_env_values = true)]
    url: Option<String>,
}

#[derive(Subcommand)]
enum ClientCommand {
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
struct McpArgs {
    /// Fail instead of starting a daemon when none answers on the default socket.
    #[arg(long)]
    no_start: bool,
    #[command(flatten)]
    target: TargetArgs,
}

const TERMINAL_HELP: &str = "The terminal: its number in `ahpty ls`, its title, its URI, or a \
                             unique prefix of the URI or title";

const LS_ABOUT: &str = "List the daemon's terminals: number (what `attach 3` selects), title, \
status (running, or exited with its code), the client holding the claim (\"(away)\" when it has \
no connection; never for ahpty-cli, the CLI itself, which connects only while a command runs), size, age, working directory and URI.

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
Return key); TEXT `-` reads the text from stdin. Fails when the daemon rejects the input \
(e.g. the terminal has exited).

Examples:
  ahpty send build 'make test' --enter
  ahpty send 3 $'\\x03'        # Ctrl-C
  ahpty send build - < commands.txt";

const RUN_ABOUT: &str = "Run CMD ARG... in a fresh terminal (a real pty, the daemon's shell \
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
const REMOTE_AFTER_HELP: &str = "Exit status: the remote program's exit status (128+N when a \
signal N ended it); 1 the daemon refused, the terminal was disposed, or no terminal matches; 2 \
no daemon reachable or a usage error; 255 the connection was lost.";

const KILL_ABOUT: &str = "Dispose of a terminal: its shell and everything running in it get \
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
    /// ^X), or `none` [default: ctrl-\].
    #[arg(long, value_name = "KEY")]
    detach_key: Option<ahpty::client::attach::DetachKey>,
    /// Watch only: send no keys and no window size.
    #[arg(long)]
    read_only: bool,
    /// Take the terminal's claim first. Allowed when the holder is this CLI or has no live
    /// connection; otherwise refused (the holder is named) and you stay attached as a viewer.
    #[arg(long, conflicts_with = "read_only")]
    take: bool,
    /// Let the program set this terminal's clipboard (OSC 52 and the like). Without it those
    /// writes are removed from the output, as are, always, clipboard reads and every query
    /// your terminal would answer to the program (colours, font, cursor position, device
    /// attributes, DECRQSS, XTGETTCAP …).
    #[arg(long)]
    allow_clipboard: bool,
}

impl AttachOpts {
    fn options(&self) -> ahpty::client::attach::AttachOptions {
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
    /// Name of the terminal, its title for good: titles its programs set (OSC 0/2) do not
    /// replace it, so `ahpty send NAME` keeps finding it [default: no name; the title is the
    /// shell's name, then what its programs set].
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Create the terminal even when a running one already has this --name (selecting by the
    /// name is then ambiguous; use numbers or URIs). Without it, exited terminals with this
    /// name are disposed of once the new one exists.
    #[arg(long, requires = "name")]
    force: bool,
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
    /// The text to type, sent as it is (escape sequences and control characters included);
    /// `-` reads it from stdin (any size).
    #[arg(value_name = "TEXT", allow_hyphen_values = true)]
    text: String,
    /// Press Return after the text (a carriage return, "\r").
    #[arg(long)]
    enter: bool,
    #[command(flatten)]
    target: TargetArgs,
}

#[derive(clap::Args)]
#[command(
    override_usage = "ahpty kill [OPTIONS] <TERMINAL>\n       ahpty kill [OPTIONS] --exited [--dry-run]"
)]
struct KillArgs {
    #[arg(value_name = "TERMINAL", help = TERMINAL_HELP, required_unless_present = "exited", conflicts_with = "exited")]
    terminal: Option<String>,
    /// Dispose of every exited terminal (restored from transcripts, or whose program exited)
    /// instead of one; running terminals are left alone. Prints one line per terminal.
    #[arg(long)]
    exited: bool,
    /// With --exited: print the terminals that would be disposed of, and keep them.
    #[arg(long, requires = "exited", conflicts_with = "terminal")]
    dry_run: bool,
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
    /// The command and its arguments (after `--`; words after CMD are its arguments, even
    /// when they start with `-`).
    #[arg(value_name = "CMD", required = true, trailing_var_arg = true)]
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
