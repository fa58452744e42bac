//! Every setting of the daemon in one place: its name, default, limits and documentation, and
//! how the command line, the environment and the config file combine into a [`Config`].
//!
//! One rule names a setting everywhere: the flag `--max-terminals` is the key `max_terminals`
//! in `config.toml` and the variable `AHPTY_MAX_TERMINALS`. Precedence, per setting: flag >
//! environment > file > default ([`load`]); a list (`listen`, `allow_origin`) is replaced
//! whole, never merged. The CLI parses flags into a [`Layer`]; everything else — reading the
//! environment and the file, defaults, minimums, maximums, refusals — happens here. Errors are
//! one line naming the setting and where it came from ([`ConfigError`]).
//!
//! This is the bottom layer: it uses nothing else of the crate.
//!
//! May touch: the environment and the config file it is given to read, and the process's
//! open-file limit (raised once at start, [`raise_open_file_limit`]); nothing else.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The Origin VS Code desktop sends from its Electron renderer; allowed by default because no
/// web page can send it.
pub const VSCODE_DESKTOP_ORIGIN: &str = "vscode-file://vscode-app";

/// Default retained content per terminal, in bytes of UTF-8 text.
pub const DEFAULT_SCROLLBACK_BYTES: usize = 1024 * 1024;

/// Default retained envelopes per terminal for `reconnect` replay, in bytes of encoded JSON.
pub const DEFAULT_HISTORY_BYTES: usize = 4 * 1024 * 1024;

/// Default most bytes of transcripts kept in the state directory (256 MiB).
pub const DEFAULT_PERSIST_MAX_BYTES: usize = 256 * 1024 * 1024;

/// Smallest `persist_max_bytes` (1 MiB); smaller values are raised to it.
pub const MIN_PERSIST_BYTES: usize = 1024 * 1024;

/// Default age after which an untouched transcript is deleted at start: 7 days.
pub const DEFAULT_PERSIST_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Default time between SIGHUP and SIGKILL when a terminal is disposed.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_millis(500);

/// Default time a terminal survives without any connection of its claim holder: 24 hours,
/// so a laptop that sleeps overnight still finds its terminals.
pub const DEFAULT_ORPHAN_GRACE: Duration = Duration::from_secs(24 * 60 * 60);

/// Default time a connection may stay congested before it is closed.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Default time a congested connection may hold back a terminal that other viewers keep up
/// with (per congestion episode).
pub const DEFAULT_LAG_GRACE: Duration = Duration::from_millis(250);

/// Default time a connection may stay lagging (behind viewers that keep up) before it is
/// closed.
pub const DEFAULT_LAG_TIMEOUT: Duration = Duration::from_secs(10);

/// Default unsent bytes a lagging connection may queue before it is closed.
pub const DEFAULT_LAG_LIMIT_BYTES: usize = 8 * 1024 * 1024;

/// Smallest accepted lag limit, in bytes (twice the high watermark).
pub const MIN_LAG_LIMIT_BYTES: usize = 2 * 1024 * 1024;

/// Default largest incoming WebSocket message, in bytes.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Default most terminals at once.
pub const DEFAULT_MAX_TERMINALS: usize = 512;

/// Default most exited terminals kept (restored from transcripts or exited while running).
pub const DEFAULT_MAX_EXITED_TERMINALS: usize = 64;

/// Default most subscriptions per connection.
pub const DEFAULT_MAX_SUBSCRIPTIONS: usize = 1024;

/// Default most simultaneous WebSocket connections (all listeners together).
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// Default time a socket gets to complete the TLS and WebSocket handshakes.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Default time a live upgrade's new binary gets to answer its pre-flight, and then to take
/// over after `execve`, before the old image serves on.
pub const DEFAULT_UPGRADE_TIMEOUT: Duration = Duration::from_secs(5);

/// Shortest `upgrade_timeout` (1 s); shorter values are raised to it.
pub const MIN_UPGRADE_TIMEOUT: Duration = Duration::from_secs(1);

/// Longest `upgrade_timeout` (60 s): while a new image takes over nobody is served, so
/// longer values are lowered to it.
pub const MAX_UPGRADE_TIMEOUT: Duration = Duration::from_secs(60);

/// Default silence after which a connection is sent a WebSocket ping.
pub const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(30);

/// Default time a pinged connection has to send anything back before it is dropped.
pub const DEFAULT_PING_TIMEOUT: Duration = Duration::from_secs(30);

/// Smallest `scrollback_bytes` and `history_bytes`; smaller values are raised to it.
pub const MIN_BUFFER_BYTES: usize = 1024;

/// Smallest `max_message_bytes` (64 KiB); smaller values are raised to it.
pub const MIN_MESSAGE_BYTES: usize = 64 * 1024;

/// Shortest handshake, ping and stall duration (100 ms); shorter values are raised to it.
pub const MIN_DURATION: Duration = Duration::from_millis(100);

/// Environment variable holding the connection token (removed from the daemon's environment
/// at start, so terminals never inherit it). It has no flag and no file key: keep tokens in a
/// file and name it with `token_file`.
pub const TOKEN_ENV: &str = "AHPTY_TOKEN";

/// Environment variable naming the config file (like `--config`).
pub const CONFIG_ENV: &str = "AHPTY_CONFIG";

/// Prefix of every setting's environment variable (`AHPTY_` + the key in upper case).
pub const ENV_PREFIX: &str = "AHPTY_";

/// Set in every terminal's environment to the terminal's URI (`ahpty attach` refuses to attach
/// a terminal to itself).
pub const TERMINAL_ENV: &str = "AHPTY_TERMINAL";

/// Set in every terminal's environment to the daemon instance's id (the `hostId` of
/// `ahpty/listTerminals`), so a URI is only compared with terminals of the same daemon.
pub const HOST_ID_ENV: &str = "AHPTY_HOST_ID";

/// Set in every terminal's environment to the daemon's own executable (`ahpty run` types
/// `exec "$AHPTY_EXE" …` into the shell).
pub const EXE_ENV: &str = "AHPTY_EXE";

/// Environment variable naming the daemon the CLI's client subcommands talk to (`ws://…`,
/// `wss://…` or `unix:PATH`), overridden by `--url`; unset → [`default_socket_path`].
pub const URL_ENV: &str = "AHPTY_URL";

/// The Unix socket `ahpty serve` listens on by default and the client subcommands connect to
/// when neither `--url` nor `$AHPTY_URL` names a daemon:
///
/// - `$XDG_RUNTIME_DIR/ahpty/ahpty.sock` when `XDG_RUNTIME_DIR` is set to an absolute path
///   (the per-user runtime directory of systemd-logind: private, cleared at logout);
/// - otherwise `/tmp/ahpty-$UID/ahpty.sock` (`$UID` being the effective user id), the tmux
///   convention. `TMPDIR` is deliberately not consulted, so a daemon started by a service
///   manager and a client started from a login shell agree on the path.
///
/// Either directory is created with mode 0700 by the daemon and must belong to the daemon's
/// user (see `server::unix`); the client checks the daemon's uid on the socket itself
/// (`SO_PEERCRED`) before sending anything, so a socket planted by another user is refused.
pub fn default_socket_path() -> PathBuf {
    default_socket_path_from(std::env::var_os("XDG_RUNTIME_DIR"), effective_uid())
}

/// [`default_socket_path`] for a given `XDG_RUNTIME_DIR` value and uid (testable).
pub fn default_socket_path_from(runtime_dir: Option<std::ffi::OsString>, uid: u32) -> PathBuf {
    match runtime_dir.map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir.join("ahpty").join("ahpty.sock"),
        _ => PathBuf::from(format!("/tmp/ahpty-{uid}")).join("ahpty.sock"),
    }
}

/// The process's effective user id.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// This process's open-file limit (`RLIMIT_NOFILE`), in descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFileLimit {
    /// The limit in force.
    pub soft: u64,
    /// The most the soft limit can be raised to without privileges.
    pub hard: u64,
}

/// Raises the soft open-file limit to the hard limit (capped at the kernel's
/// `/proc/sys/fs/nr_open` when the hard limit is unlimited): every terminal and connection
/// costs descriptors, and the common soft limit of 1024 is far below what the default limits
/// need. Returns the limit in force afterwards; if raising fails, the limit as it was.
/// Errors: the limit cannot be read.
pub fn raise_open_file_limit() -> std::io::Result<OpenFileLimit> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource, RLIM_INFINITY};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    let target = if hard == RLIM_INFINITY {
        std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1 << 20)
    } else {
        hard
    };
    if soft >= target {
        return Ok(OpenFileLimit { soft, hard });
    }
    match setrlimit(Resource::RLIMIT_NOFILE, target, hard) {
        Ok(()) => {
            tracing::debug!(from = soft, to = target, "open-file limit raised");
            Ok(OpenFileLimit { soft: target, hard })
        }
        Err(e) => {
            tracing::debug!(error = %e, "cannot raise the open-file limit");
            Ok(OpenFileLimit { soft, hard })
        }
    }
}

/// Shortest accepted configured token, in bytes.
pub const MIN_TOKEN_LEN: usize = 16;

/// Environment variables every *agent terminal* — one created with a session claim, i.e. by
/// an agent's tool call — gets on top of the daemon's own, as the reference host gives the
/// terminals its agents run commands in: an empty pager (git, gh, man and most CLI tools then
/// print straight through instead of waiting in `less`), no git credential prompt, no
/// interactive package configuration, a fixed UTF-8 locale, and `AI_AGENT` saying that an
/// agent drives the process. Terminals created with a client claim (for a person) get none of
/// them. Changed with `--agent-env` / `--no-agent-env`.
pub const DEFAULT_AGENT_ENV: &[(&str, &str)] = &[
    ("LC_ALL", "C.UTF-8"),
    ("PAGER", ""),
    ("GIT_PAGER", ""),
    ("GH_PAGER", ""),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("DEBIAN_FRONTEND", "noninteractive"),
    ("AI_AGENT", "ahpty"),
];

/// One `--agent-env` argument: `KEY=VALUE` sets a variable (`KEY=` sets it empty), a bare
/// `KEY` leaves it out of agent terminals' additions (they inherit the daemon's value, if any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentEnvArg {
    /// `KEY=VALUE`.
    Set(String, String),
    /// `KEY`.
    Unset(String),
}

impl fmt::Display for AgentEnvArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentEnvArg::Set(k, v) => write!(f, "{k}={v}"),
            AgentEnvArg::Unset(k) => f.write_str(k),
        }
    }
}

impl Item for AgentEnvArg {
    fn parse_item(text: &str) -> Result<Self, String> {
        text.parse()
    }
}

impl std::str::FromStr for AgentEnvArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (key, value) = match s.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (s, None),
        };
        if key.is_empty() {
            return Err(format!(
                "{s:?}: expected KEY=VALUE (e.g. PAGER=cat) or KEY to leave a default out"
            ));
        }
        if s.contains('\0') {
            return Err(format!("{s:?}: environment variables cannot contain NUL"));
        }
        Ok(match value {
            Some(v) => AgentEnvArg::Set(key.into(), v.into()),
            None => AgentEnvArg::Unset(key.into()),
        })
    }
}

/// The variables agent terminals get: [`DEFAULT_AGENT_ENV`] (unless `defaults` is false),
/// then each argument in order (a later one wins).
pub fn agent_env(defaults: bool, args: &[AgentEnvArg]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = if defaults {
        DEFAULT_AGENT_ENV
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    } else {
        Vec::new()
    };
    for arg in args {
        let key = match arg {
            AgentEnvArg::Set(k, _) | AgentEnvArg::Unset(k) => k,
        };
        env.retain(|(k, _)| k != key);
        if let AgentEnvArg::Set(k, v) = arg {
            env.push((k.clone(), v.clone()));
        }
    }
    env
}

// ─── The settings ───────────────────────────────────────────────────────────────────────

/// Generates, from one table, the per-source [`Layer`], the resolved [`Settings`], the key
/// list [`KEYS`] with each key's documentation and default, and the resolution itself.
macro_rules! settings {
    ($(
        $(#[doc = $doc:literal])+
        $key:ident: $ty:ty = $default:expr, limit $limit:expr;
    )+) => {
        /// The settings one source (flags, environment or file) gives; `None` = not set there.
        #[derive(Debug, Clone, Default)]
        pub struct Layer {
            $(
                #[doc = concat!("`", stringify!($key), "`, if this source sets it.")]
                pub $key: Option<Val<$ty>>,
            )+
        }

        /// Every setting, resolved, with where its value came from.
        #[derive(Debug, Clone)]
        pub struct Settings {
            $( $(#[doc = $doc])+ pub $key: Val<$ty>, )+
        }

        /// Every key, in the order `ahpty config` prints them.
        pub const KEYS: &[Key] = &[
            $( Key { name: stringify!($key), doc: concat!($($doc, "\n"),+) }, )+
        ];

        /// The default of `key` in TOML syntax (`None` for an unknown key).
        pub fn default_text(key: &str) -> Option<String> {
            match key {
                $( stringify!($key) => Some(<$ty as Value>::to_toml(&$default)), )+
                _ => None,
            }
        }

        impl Layer {
            /// Parses `raw` into the setting `key`; `Ok(false)` when there is no such key.
            fn set(&mut self, key: &str, raw: Raw<'_>, origin: Origin) -> Result<bool, String> {
                match key {
                    $(
                        stringify!($key) => {
                            let value = <$ty as Value>::from_raw(raw)?;
                            self.$key = Some(Val { value, origin });
                        }
                    )+
                    _ => return Ok(false),
                }
                Ok(true)
            }

            /// Makes relative and `~/` paths of this (file) layer absolute.
            fn anchor_paths(&mut self, base: &Path, home: Option<&Path>) {
                $( if let Some(v) = &mut self.$key { v.value.anchor(base, home); } )+
            }
        }

        impl Settings {
            /// The first layer (highest precedence first) that sets each key wins, else the
            /// default; then each value's limit is applied. Returns the settings and one note
            /// per value raised to its minimum.
            fn resolve(layers: &[&Layer]) -> Result<(Settings, Vec<String>), ConfigError> {
                let mut notes = Vec::new();
                let settings = Settings {
                    $(
                        $key: {
                            let val = layers
                                .iter()
                                .find_map(|l| l.$key.clone())
                                .unwrap_or_else(|| Val { value: $default, origin: Origin::Default });
                            let limit: fn(&$ty) -> Limit<$ty> = $limit;
                            let limited = limit(&val.value);
                            let verb = if matches!(limited, Limit::Lowered(..)) { "lowered" } else { "raised" };
                            match limited {
                                Limit::Fine => val,
                                Limit::Raised(to, why) | Limit::Lowered(to, why) => {
                                    notes.push(format!(
                                        "{}: {why}, {} to {}",
                                        val.origin.naming(stringify!($key), &val.value.to_toml()),
                                        verb,
                                        to.to_toml()
                                    ));
                                    Val { value: to, origin: val.origin }
                                }
                                Limit::Refused(why) => {
                                    return Err(ConfigError::Invalid(format!(
                                        "{}: {why}",
                                        val.origin.naming(stringify!($key), &val.value.to_toml())
                                    )))
                                }
                            }
                        },
                    )+
                };
                Ok((settings, notes))
            }

            /// `(key, value in TOML syntax or "" when unset, origin)` of every setting.
            pub fn entries(&self) -> Vec<(&'static str, String, &Origin)> {
                vec![ $( (stringify!($key), self.$key.value.to_toml(), &self.$key.origin), )+ ]
            }
        }
    };
}

settings! {
    /// Where to listen (repeatable; a list in the file): host:port (port 0 picks a free
    /// port) or unix:PATH (a Unix socket, mode 0600 in a 0700 directory; its peers need no
    /// token).
    listen: Vec<Listen> = vec![Listen::Tcp(default_listen_addr())], limit |v| non_empty(v);
    /// The Unix socket the client subcommands find without flags (owner-only, no token), also
    /// listened on [default: $XDG_RUNTIME_DIR/ahpty/ahpty.sock, else /tmp/ahpty-$UID/ahpty.sock].
    socket: Option<PathBuf> = None, limit any;
    /// Do not listen on the default Unix socket (`--listen unix:PATH` still works).
    no_socket: bool = false, limit any;
    /// File holding the token TCP peers must present (`?tkn=TOKEN` or `Authorization: Bearer
    /// TOKEN`). Without it (and without $AHPTY_TOKEN) a random token is generated at start and
    /// the connect URL printed on stdout.
    token_file: Option<PathBuf> = None, limit any;
    /// Accept TCP peers without a token (development only; refused unless every TCP listener
    /// is on loopback).
    no_auth: bool = false, limit any;
    /// PEM certificate chain: serve wss:// on the TCP listeners (needs tls_key).
    tls_cert: Option<PathBuf> = None, limit any;
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) for tls_cert.
    tls_key: Option<PathBuf> = None, limit any;
    /// Program run in each terminal [default: $SHELL, else /bin/bash, else /bin/sh].
    shell: Option<PathBuf> = None, limit any;
    /// Also accept WebSocket upgrades carrying this Origin (repeatable), e.g. a web build of
    /// VS Code. `vscode-file://vscode-app` (VS Code desktop) is always allowed, requests
    /// without Origin too.
    allow_origin: Vec<String> = Vec::new(), limit any;
    /// Do not inject command detection (shell integration) into bash, zsh and fish.
    no_shell_integration: bool = false, limit any;
    /// Environment of agent terminals (created with a session claim), repeatable (a list in
    /// the file): KEY=VALUE sets a variable (KEY= sets it empty), a bare KEY leaves a default
    /// out. Defaults: LC_ALL=C.UTF-8 PAGER= GIT_PAGER= GH_PAGER= GIT_TERMINAL_PROMPT=0
    /// DEBIAN_FRONTEND=noninteractive AI_AGENT=ahpty. Terminals for people get none of them.
    agent_env: Vec<AgentEnvArg> = Vec::new(), limit any;
    /// Give agent terminals none of the default variables (only those of agent_env).
    no_agent_env: bool = false, limit any;
    /// Retained output per terminal, in bytes (trimmed from the head; at least 1024).
    scrollback_bytes: usize = DEFAULT_SCROLLBACK_BYTES, limit |v| at_least(*v, MIN_BUFFER_BYTES);
    /// Retained envelopes per terminal for `reconnect` replay, in bytes (at least 1024).
    history_bytes: usize = DEFAULT_HISTORY_BYTES, limit |v| at_least(*v, MIN_BUFFER_BYTES);
    /// Directory of the transcripts (each terminal's retained output and metadata, kept across
    /// restarts and crashes) and of the serverSeq high-water mark; created with mode 0700,
    /// refused if another user could write to it or to a directory above it (chmod 700 it),
    /// and used by one daemon at a time [default: $XDG_STATE_HOME/ahpty, else
    /// ~/.local/state/ahpty].
    state_dir: Option<PathBuf> = None, limit any;
    /// Keep no transcripts: nothing is written to the state directory, terminals do not come
    /// back after a restart, and serverSeq starts from the clock.
    no_persist: bool = false, limit any;
    /// Most bytes of transcripts on disk (at least 1 MiB): past it the transcripts of exited
    /// terminals are deleted, least recently written first; running terminals keep theirs.
    persist_max_bytes: usize = DEFAULT_PERSIST_MAX_BYTES, limit |v| at_least(*v, MIN_PERSIST_BYTES);
    /// Delete the transcripts nothing was written to for this long (e.g. 7d, 12h): at start,
    /// and while running those of exited terminals (checked every minute); 0 keeps them
    /// whatever their age.
    persist_max_age: Duration = DEFAULT_PERSIST_MAX_AGE, limit any;
    /// Time between SIGHUP and SIGKILL when a terminal is disposed (e.g. 500ms, 2s).
    kill_grace: Duration = DEFAULT_KILL_GRACE, limit any;
    /// Dispose a terminal once its claim holder has had no connection for this long (e.g.
    /// 90s, 30m, 24h; at least 1s, so a client that reconnects at once keeps its terminals);
    /// 0 disables reaping.
    orphan_grace: Duration = DEFAULT_ORPHAN_GRACE, limit |v| orphan_grace_limit(*v);
    /// Close (code 4001) a connection whose unsent output stays above the high watermark
    /// (1 MiB) this long (at least 100ms); 0 never closes it (its terminals stay paused while
    /// it stalls).
    stall_timeout: Duration = DEFAULT_STALL_TIMEOUT, limit |v| duration_at_least(*v, true);
    /// How long a viewer that stopped keeping up may hold back a terminal other viewers keep
    /// up with (per episode); after that it is lagging and the terminal runs on without it.
    /// 0 gives no grace.
    lag_grace: Duration = DEFAULT_LAG_GRACE, limit any;
    /// Close a lagging connection (code 4002) after this long (at least 100ms); 0 never
    /// closes it for time (the lag limit still applies).
    lag_timeout: Duration = DEFAULT_LAG_TIMEOUT, limit |v| duration_at_least(*v, true);
    /// Close a lagging connection (code 4002) once this many bytes of output wait for it (at
    /// least 2 MiB).
    lag_limit_bytes: usize = DEFAULT_LAG_LIMIT_BYTES, limit |v| at_least(*v, MIN_LAG_LIMIT_BYTES);
    /// Largest incoming WebSocket message, in bytes (larger: close code 1009; at least 64 KiB).
    max_message_bytes: usize = DEFAULT_MAX_MESSAGE_BYTES, limit |v| at_least(*v, MIN_MESSAGE_BYTES);
    /// Most terminals at once (createTerminal beyond it: -32603; at least 1).
    max_terminals: usize = DEFAULT_MAX_TERMINALS, limit |v| positive(*v);
    /// Most exited terminals kept, besides the running ones (at least 1): those restored from
    /// transcripts at start and those whose program exited. Past it the one that exited
    /// first is disposed (transcript deleted), with a log line; exited terminals never count
    /// toward max_terminals.
    max_exited_terminals: usize = DEFAULT_MAX_EXITED_TERMINALS, limit |v| positive(*v);
    /// Most subscriptions per connection (subscribe beyond it: -32603; at least 1).
    max_subscriptions: usize = DEFAULT_MAX_SUBSCRIPTIONS, limit |v| positive(*v);
    /// Most simultaneous WebSocket connections (more get HTTP 503; at least 1).
    max_connections: usize = DEFAULT_MAX_CONNECTIONS, limit |v| positive(*v);
    /// Time a socket gets to complete the (TLS and) WebSocket handshake (at least 100ms).
    handshake_timeout: Duration = DEFAULT_HANDSHAKE_TIMEOUT, limit |v| duration_at_least(*v, false);
    /// Send a WebSocket ping after this much silence from a peer (at least 100ms); 0 disables
    /// pings.
    ping_interval: Duration = DEFAULT_PING_INTERVAL, limit |v| duration_at_least(*v, true);
    /// Drop a pinged peer that sends nothing back for this long (at least 100ms).
    ping_timeout: Duration = DEFAULT_PING_TIMEOUT, limit |v| duration_at_least(*v, false);
    /// How long a live upgrade's new binary gets, once to answer its pre-flight and once to
    /// take over after execve, before the old version serves on (1s to 60s).
    upgrade_timeout: Duration = DEFAULT_UPGRADE_TIMEOUT, limit |v| upgrade_timeout_limit(*v);
    /// The colours the host answers a program's OSC 10/11/12 queries with: foreground,
    /// background and cursor colour, as #RRGGBB,#RRGGBB,#RRGGBB.
    report_colors: ReportColors = ReportColors::default(), limit any;
}

/// `127.0.0.1:8765`.
fn default_listen_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8765))
}

/// A key of the config file (and the flag and variable of the same name).
#[derive(Debug, Clone, Copy)]
pub struct Key {
    /// `max_terminals`.
    pub name: &'static str,
    /// What it means, its unit and its limits (the flag's help text).
    pub doc: &'static str,
}

impl Key {
    /// `--max-terminals`.
    pub fn flag(&self) -> String {
        flag_name(self.name)
    }

    /// `AHPTY_MAX_TERMINALS`.
    pub fn env(&self) -> String {
        env_name(self.name)
    }
}

fn flag_name(key: &str) -> String {
    format!("--{}", key.replace('_', "-"))
}

fn env_name(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.to_ascii_uppercase())
}

/// The help text of `key`'s flag: its documentation, the variable and key that also set it,
/// and its default. Panics on an unknown key (a programming error caught by any `--help`).
pub fn help(key: &str) -> String {
    let Some(k) = KEYS.iter().find(|k| k.name == key) else {
        panic!("no setting named {key}");
    };
    let doc = k.doc.lines().map(str::trim).collect::<Vec<_>>().join(" ");
    let default = default_text(key).unwrap_or_default();
    let default = match default.as_str() {
        "" | "false" | "[]" => String::new(),
        d => format!(" [default: {}]", human(d)),
    };
    format!("{doc}{default} [env: {}] [file: {key}]", k.env())
}

/// A setting's value and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Val<T> {
    /// The value.
    pub value: T,
    /// Where it came from.
    pub origin: Origin,
}

impl<T> Val<T> {
    /// A value given by the flag of `key` (named `--key-with-dashes`).
    pub fn flag(value: T, key: &str) -> Val<T> {
        Val {
            value,
            origin: Origin::Flag(flag_name(key)),
        }
    }
}

/// Where a setting's value came from, highest precedence first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A command-line flag (`--max-terminals`).
    Flag(String),
    /// An environment variable (`AHPTY_MAX_TERMINALS`).
    Env(String),
    /// The config file, at this line (1-based).
    File {
        /// The config file.
        path: PathBuf,
        /// The line of the value.
        line: usize,
    },
    /// Nothing set it.
    Default,
}

impl Origin {
    /// 3 for a flag, 2 for the environment, 1 for the file, 0 for the default.
    pub fn rank(&self) -> u8 {
        match self {
            Origin::Flag(_) => 3,
            Origin::Env(_) => 2,
            Origin::File { .. } => 1,
            Origin::Default => 0,
        }
    }

    /// How an error names a setting `key` set to `value` (TOML syntax) here:
    /// `--max-terminals 0`, `$AHPTY_MAX_TERMINALS=0`, `/path/config.toml:3: max_terminals = 0`.
    pub fn naming(&self, key: &str, value: &str) -> String {
        match self {
            Origin::Flag(flag) => format!("{flag} {}", human(value)),
            Origin::Env(var) => format!("${var}={}", human(value)),
            Origin::File { path, line } => format!("{}:{line}: {key} = {value}", path.display()),
            Origin::Default => format!("{key} = {value} (default)"),
        }
    }
}

/// A value in TOML syntax as a flag or variable would spell it: strings without quotes,
/// lists comma-separated.
fn human(value: &str) -> String {
    match toml::from_str::<BTreeMap<String, toml::Value>>(&format!("v = {value}")) {
        Ok(m) => match m.get("v") {
            Some(toml::Value::String(s)) => s.clone(),
            Some(toml::Value::Array(items)) => items
                .iter()
                .map(|i| match i {
                    toml::Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join(","),
            _ => value.to_string(),
        },
        Err(_) => value.to_string(),
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Flag(flag) => write!(f, "flag {flag}"),
            Origin::Env(var) => write!(f, "env {var}"),
            Origin::File { path, line } => write!(f, "{}:{line}", path.display()),
            Origin::Default => f.write_str("default"),
        }
    }
}

/// A configuration that cannot be used, as one line for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// The settings are wrong as written (bad value, unknown key, contradiction): exit status 2.
    Invalid(String),
    /// The settings are well-formed but cannot be carried out (a file they name cannot be
    /// read, the shell is not executable): exit status 2 as well — retrying cannot help
    /// until they are changed (the systemd unit does not restart on 2).
    Unusable(String),
}

impl ConfigError {
    /// 2: every settings error is one the user has to fix (docs/service.md).
    pub fn exit_code(&self) -> u8 {
        match self {
            ConfigError::Invalid(_) | ConfigError::Unusable(_) => 2,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Invalid(m) | ConfigError::Unusable(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ConfigError {}

// ─── Values ─────────────────────────────────────────────────────────────────────────────

/// A value as a source gives it: text (an environment variable) or TOML (the file).
#[derive(Debug, Clone, Copy)]
pub enum Raw<'a> {
    /// `AHPTY_…` text; lists are comma-separated.
    Text(&'a str),
    /// A value from `config.toml`.
    Toml(&'a toml::Value),
}

/// A type a setting can have.
pub trait Value: Sized + Clone {
    /// Parses flag or variable text (what clap's `value_parser` also calls).
    fn parse(text: &str) -> Result<Self, String>;

    /// Parses a value from either source.
    fn from_raw(raw: Raw<'_>) -> Result<Self, String> {
        match raw {
            Raw::Text(t) => Self::parse(t),
            Raw::Toml(toml::Value::String(s)) => Self::parse(s),
            Raw::Toml(v) => Err(format!("expected {}, not {}", Self::EXPECTED, v.type_str())),
        }
    }

    /// What a valid value looks like, for errors (`a duration such as "30s"`).
    const EXPECTED: &'static str;

    /// The value in TOML syntax (`""` for an unset optional value).
    fn to_toml(&self) -> String;

    /// Makes a relative or `~/` path absolute (file values only; no-op for non-paths).
    fn anchor(&mut self, _base: &Path, _home: Option<&Path>) {}
}

impl Value for usize {
    const EXPECTED: &'static str = "a whole number, e.g. 1048576";
    fn parse(text: &str) -> Result<Self, String> {
        text.trim()
            .replace('_', "")
            .parse()
            .map_err(|_| format!("expected {}", Self::EXPECTED))
    }
    fn from_raw(raw: Raw<'_>) -> Result<Self, String> {
        match raw {
            Raw::Toml(toml::Value::Integer(i)) => {
                usize::try_from(*i).map_err(|_| format!("expected {}", Self::EXPECTED))
            }
            Raw::Text(t) => Self::parse(t),
            Raw::Toml(v) => Err(format!("expected {}, not {}", Self::EXPECTED, v.type_str())),
        }
    }
    fn to_toml(&self) -> String {
        self.to_string()
    }
}

/// A duration in the one largest unit that states it exactly, as the docs write them
/// (`7d`, `24h`, `90s`, `500ms`: days for two days or more, so one day stays `24h`);
/// humantime's form for sub-millisecond parts.
pub fn duration_text(d: Duration) -> String {
    let ms = d.as_millis();
    if d.is_zero() {
        "0s".into()
    } else if !d.subsec_nanos().is_multiple_of(1_000_000) {
        humantime::format_duration(d).to_string()
    } else if ms.is_multiple_of(86_400_000) && ms > 86_400_000 {
        format!("{}d", ms / 86_400_000)
    } else if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

impl Value for Duration {
    const EXPECTED: &'static str = "a duration such as \"500ms\", \"30s\", \"5m\" or \"24h\"";
    fn parse(text: &str) -> Result<Self, String> {
        humantime::parse_duration(text.trim())
            .map_err(|_| format!("{:?} is not {}", text.trim(), Self::EXPECTED))
    }
    fn from_raw(raw: Raw<'_>) -> Result<Self, String> {
        match raw {
            Raw::Toml(toml::Value::Integer(0)) => Ok(Duration::ZERO),
            Raw::Toml(toml::Value::String(s)) => Self::parse(s),
            Raw::Text(s) => Self::parse(s),
            Raw::Toml(v) => Err(format!("expected {}, not {}", Self::EXPECTED, v.type_str())),
        }
    }
    fn to_toml(&self) -> String {
        toml::Value::String(duration_text(*self)).to_string()
    }
}

impl Value for bool {
    const EXPECTED: &'static str = "true or false";
    fn parse(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" => Ok(false),
            _ => Err("expected true or false (or 1/0, yes/no, on/off)".into()),
        }
    }
    fn from_raw(raw: Raw<'_>) -> Result<Self, String> {
        match raw {
            Raw::Toml(toml::Value::Boolean(b)) => Ok(*b),
            Raw::Text(t) => Self::parse(t),
            Raw::Toml(v) => Err(format!("expected {}, not {}", Self::EXPECTED, v.type_str())),
        }
    }
    fn to_toml(&self) -> String {
        self.to_string()
    }
}

impl Value for Option<PathBuf> {
    const EXPECTED: &'static str = "a path";
    fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("expected a path, not an empty string".into());
        }
        Ok(Some(PathBuf::from(text)))
    }
    fn to_toml(&self) -> String {
        match self {
            Some(p) => toml::Value::String(p.display().to_string()).to_string(),
            None => String::new(),
        }
    }
    fn anchor(&mut self, base: &Path, home: Option<&Path>) {
        let Some(path) = self else { return };
        if let (Ok(rest), Some(home)) = (path.strip_prefix("~"), home) {
            *path = home.join(rest);
        } else if path.is_relative() {
            *path = base.join(&*path);
        }
    }
}

/// A colour as 8-bit red, green and blue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rgb(pub u8, pub u8, pub u8);

impl fmt::Display for Rgb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }
}

impl std::str::FromStr for Rgb {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let hex = text.trim().strip_prefix('#').unwrap_or(text.trim());
        let byte = |i: usize| u8::from_str_radix(hex.get(i..i + 2).unwrap_or("x"), 16);
        match (hex.len(), byte(0), byte(2), byte(4)) {
            (6, Ok(r), Ok(g), Ok(b)) => Ok(Rgb(r, g, b)),
            _ => Err(format!(
                "{text:?} is not a colour: expected #RRGGBB, e.g. #1e1e1e"
            )),
        }
    }
}

/// The colours the host reports for OSC 10 (foreground), 11 (background) and 12 (cursor)
/// queries. The defaults are xterm.js's: white on black, a white cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportColors {
    /// OSC 10.
    pub foreground: Rgb,
    /// OSC 11.
    pub background: Rgb,
    /// OSC 12.
    pub cursor: Rgb,
}

impl Default for ReportColors {
    fn default() -> Self {
        ReportColors {
            foreground: Rgb(0xff, 0xff, 0xff),
            background: Rgb(0, 0, 0),
            cursor: Rgb(0xff, 0xff, 0xff),
        }
    }
}

impl Value for ReportColors {
    const EXPECTED: &'static str = "three colours, e.g. \"#ffffff,#000000,#ffffff\"";
    fn parse(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.split(',').collect();
        let [fg, bg, cursor] = parts[..] else {
            return Err(format!(
                "expected {} (foreground, background, cursor)",
                Self::EXPECTED
            ));
        };
        Ok(ReportColors {
            foreground: fg.parse()?,
            background: bg.parse()?,
            cursor: cursor.parse()?,
        })
    }
    fn to_toml(&self) -> String {
        let text = format!("{},{},{}", self.foreground, self.background, self.cursor);
        toml::Value::String(text).to_string()
    }
}

/// A list element: `Listen` or an Origin string.
pub trait Item: Sized + Clone + fmt::Display {
    /// Parses one element.
    fn parse_item(text: &str) -> Result<Self, String>;
}

impl Item for Listen {
    fn parse_item(text: &str) -> Result<Self, String> {
        text.parse()
    }
}

impl Item for String {
    fn parse_item(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("expected a non-empty string".into());
        }
        Ok(text.to_string())
    }
}

impl<T: Item> Value for Vec<T> {
    const EXPECTED: &'static str = "a list of strings, e.g. [\"127.0.0.1:8765\"]";
    fn parse(text: &str) -> Result<Self, String> {
        text.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(T::parse_item)
            .collect()
    }
    fn from_raw(raw: Raw<'_>) -> Result<Self, String> {
        match raw {
            Raw::Text(t) => Self::parse(t),
            Raw::Toml(toml::Value::String(s)) => Ok(vec![T::parse_item(s)?]),
            Raw::Toml(toml::Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    toml::Value::String(s) => T::parse_item(s),
                    v => Err(format!("expected {}, not {}", Self::EXPECTED, v.type_str())),
                })
                .collect(),
            Raw::Toml(v) => Err(format!("expected {}, not {}", Self::EXPECTED, v.type_str())),
        }
    }
    fn to_toml(&self) -> String {
        toml::Value::Array(
            self.iter()
                .map(|v| toml::Value::String(v.to_string()))
                .collect(),
        )
        .to_string()
    }
}

/// A `value_parser` for clap: the same parsing as the variable and the file.
pub fn parse_flag<T: Value>(text: &str) -> Result<T, String> {
    T::parse(text)
}

/// A `value_parser` for one element of a repeatable flag.
pub fn parse_item<T: Item>(text: &str) -> Result<T, String> {
    T::parse_item(text)
}

// ─── Limits ─────────────────────────────────────────────────────────────────────────────

/// The outcome of a setting's limit.
enum Limit<T> {
    Fine,
    /// Below the minimum: raised to it (logged as a warning, shown by `ahpty config`).
    Raised(T, String),
    /// Above the maximum: lowered to it (logged and shown the same way).
    Lowered(T, String),
    /// Makes no sense: refused (exit status 2).
    Refused(String),
}

fn any<T>(_: &T) -> Limit<T> {
    Limit::Fine
}

fn at_least(v: usize, min: usize) -> Limit<usize> {
    if v < min {
        Limit::Raised(min, format!("below the minimum {min}"))
    } else {
        Limit::Fine
    }
}

fn positive(v: usize) -> Limit<usize> {
    if v == 0 {
        Limit::Refused("must be at least 1".into())
    } else {
        Limit::Fine
    }
}

fn duration_at_least(v: Duration, zero_disables: bool) -> Limit<Duration> {
    if v < MIN_DURATION && !(zero_disables && v.is_zero()) {
        Limit::Raised(MIN_DURATION, "below the minimum 100ms".into())
    } else {
        Limit::Fine
    }
}

/// Smallest non-zero `orphan_grace`.
pub const MIN_ORPHAN_GRACE: Duration = Duration::from_secs(1);

fn orphan_grace_limit(v: Duration) -> Limit<Duration> {
    if !v.is_zero() && v < MIN_ORPHAN_GRACE {
        Limit::Raised(MIN_ORPHAN_GRACE, "below the minimum 1s".into())
    } else {
        Limit::Fine
    }
}

fn upgrade_timeout_limit(v: Duration) -> Limit<Duration> {
    if v < MIN_UPGRADE_TIMEOUT {
        Limit::Raised(MIN_UPGRADE_TIMEOUT, "below the minimum 1s".into())
    } else if v > MAX_UPGRADE_TIMEOUT {
        Limit::Lowered(MAX_UPGRADE_TIMEOUT, "above the maximum 60s".into())
    } else {
        Limit::Fine
    }
}

fn non_empty<T>(v: &[T]) -> Limit<Vec<T>> {
    if v.is_empty() {
        Limit::Refused("nothing to listen on: give at least one address".into())
    } else {
        Limit::Fine
    }
}

// ─── Sources ────────────────────────────────────────────────────────────────────────────

impl Layer {
    /// The `AHPTY_…` variables that `get` returns (empty ones count as unset).
    pub fn from_env(get: &dyn Fn(&str) -> Option<OsString>) -> Result<Layer, ConfigError> {
        let mut layer = Layer::default();
        for key in KEYS {
            let var = key.env();
            let Some(raw) = get(&var) else { continue };
            let Some(text) = raw.to_str() else {
                return Err(ConfigError::Invalid(format!("${var}: not valid UTF-8")));
            };
            if text.is_empty() {
                continue;
            }
            layer
                .set(key.name, Raw::Text(text), Origin::Env(var.clone()))
                .map_err(|e| ConfigError::Invalid(format!("${var}={text}: {e}")))?;
        }
        Ok(layer)
    }

    /// The settings in `text`, the contents of the config file `path`: top-level keys named
    /// like the flags. Unknown keys, TOML syntax errors and bad values are refused with the
    /// file and line. Relative paths are taken from the file's directory, `~/` from `home`.
    pub fn from_toml(path: &Path, text: &str, home: Option<&Path>) -> Result<Layer, ConfigError> {
        type Table = BTreeMap<toml::Spanned<String>, toml::Spanned<toml::Value>>;
        let at = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
        let table: Table = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| at(s.start)).unwrap_or(1);
            let msg = e.message().lines().next().unwrap_or("invalid TOML").trim();
            // Name a repeated key, and where it was first set.
            let key = e
                .span()
                .and_then(|s| text.get(s))
                .map(|k| k.trim().trim_matches('"').to_string())
                .filter(|k| !k.is_empty() && msg.contains("duplicate key"));
            let msg = match key {
                Some(key) => {
                    let first = text.lines().position(|l| {
                        l.trim_start()
                            .trim_start_matches('"')
                            .strip_prefix(key.as_str())
                            .is_some_and(|r| {
                                r.trim_start_matches('"').trim_start().starts_with('=')
                            })
                    });
                    match first.map(|i| i + 1).filter(|&f| f < line) {
                        Some(f) => format!("duplicate key `{key}` (first set on line {f})"),
                        None => format!("duplicate key `{key}`"),
                    }
                }
                None => msg.to_string(),
            };
            ConfigError::Invalid(format!("{}:{line}: {msg}", path.display()))
        })?;
        let mut layer = Layer::default();
        for (key, value) in &table {
            let line = at(value.span().start);
            let name = key.get_ref().as_str();
            let origin = Origin::File {
                path: path.to_path_buf(),
                line: at(key.span().start),
            };
            let set = layer
                .set(name, Raw::Toml(value.get_ref()), origin)
                .map_err(|e| {
                    ConfigError::Invalid(format!("{}:{line}: {name}: {e}", path.display()))
                })?;
            if !set {
                let hint = match suggest(name) {
                    Some(k) => format!("did you mean `{k}`?"),
                    None => "`ahpty config` lists every key".into(),
                };
                return Err(ConfigError::Invalid(format!(
                    "{}:{}: unknown key `{name}` ({hint})",
                    path.display(),
                    at(key.span().start)
                )));
            }
        }
        let base = path.parent().unwrap_or(Path::new("/"));
        layer.anchor_paths(base, home);
        Ok(layer)
    }
}

/// The known key closest to a misspelt one, if any is close.
fn suggest(name: &str) -> Option<&'static str> {
    KEYS.iter()
        .map(|k| (strsim::jaro_winkler(name, k.name), k.name))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

/// Notes on `AHPTY_*` variables among `names` that ahpty does not know (a typo would
/// otherwise be ignored silently), with the closest setting's variable when one is close.
pub fn unknown_env_notes(names: impl Iterator<Item = std::ffi::OsString>) -> Vec<String> {
    let known = [
        TOKEN_ENV,
        CONFIG_ENV,
        TERMINAL_ENV,
        HOST_ID_ENV,
        EXE_ENV,
        URL_ENV,
    ];
    let mut notes = Vec::new();
    for name in names {
        let Some(name) = name.to_str().map(str::to_string) else {
            continue;
        };
        let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        // AHPTY_SI_*: shell integration's own, inside terminals.
        if known.contains(&name.as_str())
            || rest.starts_with("SI_")
            || KEYS.iter().any(|k| k.env() == name)
        {
            continue;
        }
        let hint = match suggest(&rest.to_ascii_lowercase()) {
            Some(k) => format!(" (did you mean ${}?)", env_name(k)),
            None => String::new(),
        };
        notes.push(format!(
            "${name} is not an ahpty setting and is ignored{hint}"
        ));
    }
    notes
}

/// The config file in use and how it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFile {
    /// Its path.
    pub path: PathBuf,
    /// `--config`, `AHPTY_CONFIG` or the default location.
    pub chosen_by: Origin,
    /// Whether it exists (a missing default file is not an error).
    pub found: bool,
}

/// The default config file: `$XDG_CONFIG_HOME/ahpty/config.toml` (an absolute
/// `XDG_CONFIG_HOME` only), else `$HOME/.config/ahpty/config.toml`; `None` without either.
pub fn default_config_path(get: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    config_home(get).map(|d| d.join("ahpty").join("config.toml"))
}

/// `$XDG_CONFIG_HOME` if absolute, else `$HOME/.config`.
pub fn config_home(get: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    if let Some(dir) = get("XDG_CONFIG_HOME").map(PathBuf::from) {
        if dir.is_absolute() {
            return Some(dir);
        }
    }
    let home = get("HOME").map(PathBuf::from)?;
    home.is_absolute().then(|| home.join(".config"))
}

/// Everything [`load`] found: the resolved settings, notes on values raised to their minimum,
/// and the config file.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// Every setting with its origin.
    pub settings: Settings,
    /// One line per value raised to its minimum (to log as warnings).
    pub notes: Vec<String>,
    /// The config file, when there is one to read (`None`: no `$HOME`).
    pub file: Option<ConfigFile>,
}

/// Resolves every setting from `flags` (parsed by the CLI), the environment (`get`) and the
/// config file (`config_flag`, else `$AHPTY_CONFIG`, else [`default_config_path`]).
/// Precedence per key: flag > environment > file > default. A file named by `--config` or
/// `$AHPTY_CONFIG` must exist; the default one may be missing.
pub fn load(
    flags: &Layer,
    config_flag: Option<&Path>,
    get: &dyn Fn(&str) -> Option<OsString>,
) -> Result<Loaded, ConfigError> {
    let env = Layer::from_env(get)?;
    let chosen = match (config_flag, get(CONFIG_ENV).filter(|v| !v.is_empty())) {
        (Some(p), _) => Some((p.to_path_buf(), Origin::Flag("--config".into()))),
        (None, Some(p)) => Some((PathBuf::from(p), Origin::Env(CONFIG_ENV.into()))),
        (None, None) => default_config_path(get).map(|p| (p, Origin::Default)),
    };
    let home = get("HOME").map(PathBuf::from);
    let mut file_layer = Layer::default();
    let file = match chosen {
        None => None,
        Some((path, chosen_by)) => match std::fs::read_to_string(&path) {
            Ok(text) => {
                file_layer = Layer::from_toml(&path, &text, home.as_deref())?;
                Some(ConfigFile {
                    path,
                    chosen_by,
                    found: true,
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if chosen_by != Origin::Default {
                    return Err(ConfigError::Invalid(format!(
                        "config file {} ({chosen_by}): not found",
                        path.display()
                    )));
                }
                Some(ConfigFile {
                    path,
                    chosen_by,
                    found: false,
                })
            }
            Err(e) => {
                return Err(ConfigError::Unusable(format!(
                    "config file {}: {e}",
                    path.display()
                )))
            }
        },
    };
    let (settings, notes) = Settings::resolve(&[flags, &env, &file_layer])?;
    Ok(Loaded {
        settings,
        notes,
        file,
    })
}

/// Where the token TCP peers must present comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthPlan {
    /// `no_auth`, from there.
    Disabled(Origin),
    /// `token_file`, from there.
    TokenFile(PathBuf, Origin),
    /// `$AHPTY_TOKEN`.
    EnvToken,
    /// Nothing configured: generate one at start.
    Generate,
}

impl fmt::Display for AuthPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthPlan::Disabled(o) => write!(f, "no token on TCP (no_auth, {o})"),
            AuthPlan::TokenFile(p, o) => write!(f, "token from {} (token_file, {o})", p.display()),
            AuthPlan::EnvToken => write!(f, "token from ${TOKEN_ENV}"),
            AuthPlan::Generate => f.write_str("token generated at start, connect URL printed"),
        }
    }
}

impl Settings {
    /// How TCP peers authenticate, given whether `$AHPTY_TOKEN` is set. `no_auth` and a
    /// token are a contradiction when `$AHPTY_TOKEN` is set or both come from the same
    /// source; otherwise the higher-precedence one wins. `token_file` from a flag beats
    /// `$AHPTY_TOKEN`, which beats `token_file` from the file; `$AHPTY_TOKEN` and
    /// `$AHPTY_TOKEN_FILE` together are refused.
    pub fn auth_plan(&self, env_token: bool) -> Result<AuthPlan, ConfigError> {
        let no_auth = &self.no_auth;
        let file = &self.token_file;
        let naming = |v: &Val<bool>| v.origin.naming("no_auth", "true");
        if no_auth.value && env_token {
            return Err(ConfigError::Invalid(format!(
                "{} contradicts ${TOKEN_ENV}, which is set: unset one of them",
                naming(no_auth)
            )));
        }
        if let Some(path) = &file.value {
            if env_token && matches!(file.origin, Origin::Env(_)) {
                return Err(ConfigError::Invalid(format!(
                    "${TOKEN_ENV} and ${} are both set: unset one of them",
                    env_name("token_file")
                )));
            }
            if no_auth.value {
                match no_auth.origin.rank().cmp(&file.origin.rank()) {
                    std::cmp::Ordering::Equal => {
                        return Err(ConfigError::Invalid(format!(
                            "{} contradicts {}: keep one of them",
                            naming(no_auth),
                            file.origin.naming("token_file", &file.value.to_toml())
                        )))
                    }
                    std::cmp::Ordering::Greater => {
                        return Ok(AuthPlan::Disabled(no_auth.origin.clone()))
                    }
                    std::cmp::Ordering::Less => {}
                }
            }
            if env_token && file.origin.rank() < Origin::Env(TOKEN_ENV.into()).rank() {
                return Ok(AuthPlan::EnvToken);
            }
            return Ok(AuthPlan::TokenFile(path.clone(), file.origin.clone()));
        }
        if no_auth.value {
            return Ok(AuthPlan::Disabled(no_auth.origin.clone()));
        }
        Ok(if env_token {
            AuthPlan::EnvToken
        } else {
            AuthPlan::Generate
        })
    }

    /// The daemon's [`Config`]: authentication (reading the token file or taking
    /// `env_token`), TLS files, the shell. Returns it with warnings to log (a token file
    /// readable by others).
    pub fn into_config(
        self,
        env_token: Option<String>,
    ) -> Result<(Config, Vec<String>), ConfigError> {
        let env_token = env_token.filter(|t| !t.trim().is_empty());
        let mut warnings = Vec::new();
        let auth = match self.auth_plan(env_token.is_some())? {
            AuthPlan::Disabled(_) => Auth::Disabled,
            AuthPlan::Generate => Auth::Generate,
            AuthPlan::EnvToken => {
                let value = env_token.unwrap_or_default();
                let token = Token::new(value.trim().to_string())
                    .map_err(|e| ConfigError::Invalid(format!("${TOKEN_ENV}: {e}")))?;
                Auth::Token {
                    token,
                    source: format!("${TOKEN_ENV}"),
                }
            }
            AuthPlan::TokenFile(path, origin) => {
                let name = origin.naming("token_file", &Some(path.clone()).to_toml());
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| ConfigError::Unusable(format!("{name}: {e}")))?;
                let token = Token::new(text.trim().to_string())
                    .map_err(|e| ConfigError::Unusable(format!("{name}: {e}")))?;
                use std::os::unix::fs::PermissionsExt;
                if let Ok(meta) = std::fs::metadata(&path) {
                    if meta.permissions().mode() & 0o077 != 0 {
                        warnings.push(format!("{name} is readable by other users (chmod 600 it)"));
                    }
                }
                Auth::Token {
                    token,
                    source: format!("token file {}", path.display()),
                }
            }
        };
        let tls = match (&self.tls_cert.value, &self.tls_key.value) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            (None, None) => None,
            (Some(cert), None) => {
                return Err(ConfigError::Invalid(format!(
                    "{} needs tls_key too",
                    self.tls_cert
                        .origin
                        .naming("tls_cert", &Some(cert.clone()).to_toml())
                )))
            }
            (None, Some(key)) => {
                return Err(ConfigError::Invalid(format!(
                    "{} needs tls_cert too",
                    self.tls_key
                        .origin
                        .naming("tls_key", &Some(key.clone()).to_toml())
                )))
            }
        };
        let shell = match &self.shell.value {
            Some(shell) => {
                if !is_executable(shell) {
                    return Err(ConfigError::Unusable(format!(
                        "{}: not an executable file",
                        self.shell
                            .origin
                            .naming("shell", &self.shell.value.to_toml())
                    )));
                }
                shell.clone()
            }
            None => Config::default_shell(),
        };
        let nonzero = |d: Duration| (!d.is_zero()).then_some(d);
        if let (Some(path), true) = (&self.socket.value, self.no_socket.value) {
            return Err(ConfigError::Invalid(format!(
                "{} contradicts no_socket ({}): drop one of them",
                self.socket
                    .origin
                    .naming("socket", &Some(path.clone()).to_toml()),
                self.no_socket.origin
            )));
        }
        let (persist, persist_warning) = self.persist_plan()?;
        warnings.extend(persist_warning);
        let mut listen = self.listen.value;
        let socket = (!self.no_socket.value).then(|| {
            self.socket
                .value
                .clone()
                .unwrap_or_else(default_socket_path)
        });
        // Neither `socket` nor a `listen` entry named it: the default path.
        let socket_is_default = self.socket.value.is_none()
            && socket
                .as_ref()
                .is_some_and(|p| !listen.contains(&Listen::Unix(p.clone())));
        if let Some(path) = &socket {
            if !listen.contains(&Listen::Unix(path.clone())) {
                listen.push(Listen::Unix(path.clone()));
            }
        }
        let config = Config {
            listen,
            socket,
            socket_is_default,
            auth,
            tls,
            max_connections: self.max_connections.value,
            handshake_timeout: self.handshake_timeout.value,
            ping_interval: nonzero(self.ping_interval.value),
            ping_timeout: self.ping_timeout.value,
            shell,
            allow_origins: self.allow_origin.value,
            scrollback_bytes: self.scrollback_bytes.value,
            kill_grace: self.kill_grace.value,
            shell_integration: !self.no_shell_integration.value,
            history_bytes: self.history_bytes.value,
            orphan_grace: nonzero(self.orphan_grace.value),
            stall_timeout: nonzero(self.stall_timeout.value),
            lag_grace: self.lag_grace.value,
            lag_timeout: nonzero(self.lag_timeout.value),
            lag_limit_bytes: self.lag_limit_bytes.value,
            max_message_bytes: self.max_message_bytes.value,
            max_terminals: self.max_terminals.value,
            max_exited_terminals: self.max_exited_terminals.value,
            max_subscriptions: self.max_subscriptions.value,
            agent_env: agent_env(!self.no_agent_env.value, &self.agent_env.value),
            report_colors: self.report_colors.value,
            upgrade_timeout: self.upgrade_timeout.value,
            persist,
        };
        Ok((config, warnings))
    }
}

impl Settings {
    /// Where transcripts go: `None` with `no_persist`, or without a `$HOME` to put the default
    /// directory in (then with a warning). `state_dir` given by a source at least as strong as
    /// the one setting `no_persist` contradicts it; from a weaker one (e.g. the file, under a
    /// `--no-persist` flag) it is overridden.
    fn persist_plan(&self) -> Result<(Option<Persist>, Option<String>), ConfigError> {
        let dir = &self.state_dir;
        if self.no_persist.value {
            if let Some(path) = &dir.value {
                if dir.origin.rank() >= self.no_persist.origin.rank() {
                    return Err(ConfigError::Invalid(format!(
                        "{} contradicts no_persist ({}): drop one of them",
                        dir.origin
                            .naming("state_dir", &Some(path.clone()).to_toml()),
                        self.no_persist.origin
                    )));
                }
            }
            return Ok((None, None));
        }
        let (path, explicit) = match &dir.value {
            Some(p) => (Some(p.clone()), true),
            None => (default_state_dir(&|k| std::env::var_os(k)), false),
        };
        let Some(dir) = path else {
            return Ok((
                None,
                Some(
                    "neither $XDG_STATE_HOME nor $HOME is set: transcripts are not kept (give \
                     --state-dir DIR, or --no-persist to silence this)"
                        .into(),
                ),
            ));
        };
        let nonzero = |d: Duration| (!d.is_zero()).then_some(d);
        Ok((
            Some(Persist {
                dir,
                explicit,
                max_bytes: self.persist_max_bytes.value as u64,
                max_age: nonzero(self.persist_max_age.value),
            }),
            None,
        ))
    }
}

/// The default state directory: `$XDG_STATE_HOME/ahpty` (an absolute `XDG_STATE_HOME`
/// only), else `$HOME/.local/state/ahpty`; `None` without either.
pub fn default_state_dir(get: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    if let Some(dir) = get("XDG_STATE_HOME").map(PathBuf::from) {
        if dir.is_absolute() {
            return Some(dir.join("ahpty"));
        }
    }
    let home = get("HOME").map(PathBuf::from)?;
    home.is_absolute()
        .then(|| home.join(".local").join("state").join("ahpty"))
}

// ─── Runtime types ──────────────────────────────────────────────────────────────────────

/// Where the daemon accepts connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// A TCP address (`host:port`; port 0 picks a free port).
    Tcp(SocketAddr),
    /// A Unix domain socket path (`unix:PATH` on the command line).
    Unix(PathBuf),
}

impl std::str::FromStr for Listen {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("unix: needs a path, e.g. unix:/run/user/1000/ahpty/ahpty.sock".into());
            }
            return Ok(Listen::Unix(PathBuf::from(path)));
        }
        // `localhost` is the one host name understood: loopback, IPv4.
        if let Some(port) = s.strip_prefix("localhost:") {
            if let Ok(port) = port.parse::<u16>() {
                return Ok(Listen::Tcp(SocketAddr::from(([127, 0, 0, 1], port))));
            }
        }
        s.parse::<SocketAddr>().map(Listen::Tcp).map_err(|_| {
            format!(
                "{s:?} is neither an IP address and port (e.g. 127.0.0.1:8765, [::1]:8765, \
                 localhost:8765; other host names are not resolved) nor unix:PATH"
            )
        })
    }
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Listen::Tcp(addr) => write!(f, "{addr}"),
            Listen::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// A connection token. Its `Debug` form never shows the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// Validates a configured token: at least [`MIN_TOKEN_LEN`] bytes of printable ASCII
    /// without spaces (so it survives a URL query and an HTTP header unchanged).
    pub fn new(value: String) -> Result<Token, String> {
        if value.len() < MIN_TOKEN_LEN {
            return Err(format!(
                "the token is too short ({} bytes): use at least {MIN_TOKEN_LEN}, e.g. \
                 `head -c 32 /dev/urandom | base64 | tr '+/' '-_'`",
                value.len()
            ));
        }
        if !value.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("the token must be printable ASCII without spaces".into());
        }
        Ok(Token(value))
    }

    /// A fresh random token: 32 bytes from the kernel's CSPRNG (`getrandom(2)`), hex-encoded.
    pub fn generate() -> std::io::Result<Token> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)?;
        Ok(Token(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// The secret value (for comparison and for printing the connect URL once).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// How TCP peers authenticate. Unix-socket peers never need a token (the socket's file mode
/// and a peer-uid check restrict them to the daemon's user).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// Generate a random token at start and print the connect URL once on stdout (default).
    Generate,
    /// A configured token (`--token-file` or `AHPTY_TOKEN`); `source` names where it came from.
    Token {
        /// The token.
        token: Token,
        /// e.g. `--token-file /path` or `AHPTY_TOKEN`.
        source: String,
    },
    /// No token (`--no-auth`): only allowed when every TCP listener is on loopback.
    Disabled,
}

/// Certificate chain and private key (PEM files) for `wss://` on the TCP listeners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Where and how much the daemon keeps of its terminals across restarts (the transcript
/// store, docs/store.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Persist {
    /// The state directory (created with mode 0700).
    pub dir: PathBuf,
    /// Whether `state_dir` named it (then a directory that cannot be used stops the daemon;
    /// the default one only costs a warning).
    pub explicit: bool,
    /// Most bytes of transcripts on disk.
    pub max_bytes: u64,
    /// Transcripts untouched this long are deleted at start, and exited terminals' while
    /// running; `None`: no age limit.
    pub max_age: Option<Duration>,
}

/// Daemon settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen (default TCP `127.0.0.1:8765`); TCP and Unix listeners may be mixed.
    pub listen: Vec<Listen>,
    /// The default Unix socket the client subcommands connect to (also in `listen`); `None`
    /// with `no_socket`.
    pub socket: Option<PathBuf>,
    /// `socket` is the default path ([`default_socket_path`]), named by no setting: a
    /// directory there that is not safe to use (another user's) costs a warning and the
    /// daemon serves on without it; a socket someone named stays a refusal to start.
    pub socket_is_default: bool,
    /// Token authentication on TCP listeners.
    pub auth: Auth,
    /// TLS for every TCP listener (`wss://`); `None` = plain `ws://`.
    pub tls: Option<TlsFiles>,
    /// Most simultaneous WebSocket connections; upgrades beyond it get HTTP 503.
    pub max_connections: usize,
    /// A socket must complete the TLS and WebSocket handshakes within this time.
    pub handshake_timeout: Duration,
    /// Send a WebSocket ping after this much silence from the peer; `None` disables pings.
    pub ping_interval: Option<Duration>,
    /// A pinged peer that sends nothing back for this long is disconnected.
    pub ping_timeout: Duration,
    /// Program run in every new terminal.
    pub shell: PathBuf,
    /// Origins allowed on a WebSocket upgrade besides [`VSCODE_DESKTOP_ORIGIN`]; compared
    /// ASCII-case-insensitively, exactly (scheme, host and port).
    pub allow_origins: Vec<String>,
    /// Retained content per terminal, in bytes; older output is trimmed from the head.
    pub scrollback_bytes: usize,
    /// Time between SIGHUP and SIGKILL when a terminal is disposed.
    pub kill_grace: Duration,
    /// Inject shell integration into bash, zsh and fish.
    pub shell_integration: bool,
    /// Retained envelopes per terminal for `reconnect` replay, in bytes of encoded JSON.
    pub history_bytes: usize,
    /// A terminal whose claim holder has had no connection for this long is disposed;
    /// `None` disables reaping.
    pub orphan_grace: Option<Duration>,
    /// A connection whose outbound queue stays above the high watermark this long is closed
    /// (code 4001) so the terminals it watches can resume; `None` never closes it.
    pub stall_timeout: Option<Duration>,
    /// A congested connection holds back a terminal that others keep up with for at most this
    /// long per congestion episode; then it is lagging.
    pub lag_grace: Duration,
    /// A connection lagging this long is closed (code 4002); `None` never closes it for time.
    pub lag_timeout: Option<Duration>,
    /// A lagging connection whose unsent output passes this many bytes is closed (code 4002).
    pub lag_limit_bytes: usize,
    /// Largest incoming WebSocket message, in bytes (larger → close code 1009).
    pub max_message_bytes: usize,
    /// Most terminals the host runs at once (createTerminal beyond it → -32603); exited
    /// terminals do not count.
    pub max_terminals: usize,
    /// Most exited terminals kept (restored or exited live); past it the one that exited
    /// first is disposed.
    pub max_exited_terminals: usize,
    /// Most subscriptions one connection may hold (subscribe beyond it → -32603).
    pub max_subscriptions: usize,
    /// Variables set in agent terminals (created with a session claim) only; see
    /// [`DEFAULT_AGENT_ENV`].
    pub agent_env: Vec<(String, String)>,
    /// The colours OSC 10/11/12 queries are answered with.
    pub report_colors: ReportColors,
    /// How long a live upgrade's new binary gets to answer its pre-flight, and again to take
    /// over after `execve`, before the old image serves on (1 s to 60 s).
    pub upgrade_timeout: Duration,
    /// The transcript store; `None` keeps nothing across restarts (`no_persist`, and the
    /// default for a `Config` built in code).
    pub persist: Option<Persist>,
}

impl Config {
    /// The shell to use when none is configured: `$SHELL` if it names an executable file,
    /// else `/bin/bash` if present, else `/bin/sh`.
    pub fn default_shell() -> PathBuf {
        if let Some(s) = std::env::var_os("SHELL") {
            let p = PathBuf::from(s);
            if p.is_absolute() && is_executable(&p) {
                return p;
            }
        }
        let bash = PathBuf::from("/bin/bash");
        if is_executable(&bash) {
            bash
        } else {
            PathBuf::from("/bin/sh")
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: vec![Listen::Tcp(default_listen_addr())],
            socket: None,
            socket_is_default: false,
            auth: Auth::Generate,
            tls: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            ping_interval: Some(DEFAULT_PING_INTERVAL),
            ping_timeout: DEFAULT_PING_TIMEOUT,
            shell: Config::default_shell(),
            allow_origins: Vec::new(),
            scrollback_bytes: DEFAULT_SCROLLBACK_BYTES,
            kill_grace: DEFAULT_KILL_GRACE,
            shell_integration: true,
            history_bytes: DEFAULT_HISTORY_BYTES,
            orphan_grace: Some(DEFAULT_ORPHAN_GRACE),
            stall_timeout: Some(DEFAULT_STALL_TIMEOUT),
            lag_grace: DEFAULT_LAG_GRACE,
            lag_timeout: Some(DEFAULT_LAG_TIMEOUT),
            lag_limit_bytes: DEFAULT_LAG_LIMIT_BYTES,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_terminals: DEFAULT_MAX_TERMINALS,
            max_exited_terminals: DEFAULT_MAX_EXITED_TERMINALS,
            max_subscriptions: DEFAULT_MAX_SUBSCRIPTIONS,
            agent_env: agent_env(true, &[]),
            report_colors: ReportColors::default(),
            upgrade_timeout: DEFAULT_UPGRADE_TIMEOUT,
            persist: None,
        }
    }
}

/// Whether `path` is a regular file with an execute bit set.
pub fn is_executable(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_env_arguments() {
        let args: Vec<AgentEnvArg> = ["PAGER=cat", "LC_ALL", "AI_AGENT=my_agent", "X=a=b", "E="]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let env = agent_env(true, &args);
        let get = |k: &str| {
            env.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("PAGER"), Some("cat"));
        assert_eq!(get("LC_ALL"), None);
        assert_eq!(get("AI_AGENT"), Some("my_agent"));
        assert_eq!(get("X"), Some("a=b"));
        assert_eq!(get("E"), Some(""));
        assert_eq!(get("GIT_PAGER"), Some(""));
        assert_eq!(get("GIT_TERMINAL_PROMPT"), Some("0"));
        let only = agent_env(false, &args[..1]);
        assert_eq!(only, vec![("PAGER".to_string(), "cat".to_string())]);
        assert!("=x".parse::<AgentEnvArg>().is_err());
        assert!("".parse::<AgentEnvArg>().is_err());
    }

    #[test]
    fn default_socket_paths() {
        assert_eq!(
            default_socket_path_from(Some("/run/user/1000".into()), 1000),
            PathBuf::from("/run/user/1000/ahpty/ahpty.sock")
        );
        for unset in [None, Some("".into()), Some("relative/dir".into())] {
            assert_eq!(
                default_socket_path_from(unset, 1000),
                PathBuf::from("/tmp/ahpty-1000/ahpty.sock")
            );
        }
    }

    fn file_origin(line: usize) -> Origin {
        Origin::File {
            path: PathBuf::from("/c.toml"),
            line,
        }
    }

    /// Settings from `flags`, `env` (variable → value) and `file` (TOML text).
    fn settings(flags: Layer, env: &[(&str, &str)], file: &str) -> Result<Settings, ConfigError> {
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        };
        let env = Layer::from_env(&get)?;
        let file = Layer::from_toml(Path::new("/c.toml"), file, None)?;
        Settings::resolve(&[&flags, &env, &file]).map(|(s, _)| s)
    }

    fn flag_token_file() -> Layer {
        Layer {
            token_file: Some(Val::flag(Some(PathBuf::from("/f")), "token_file")),
            ..Layer::default()
        }
    }

    fn flag_no_auth() -> Layer {
        Layer {
            no_auth: Some(Val::flag(true, "no_auth")),
            ..Layer::default()
        }
    }

    #[test]
    fn auth_plan_follows_precedence() {
        let plan = |flags, env: &[(&str, &str)], file, token| {
            settings(flags, env, file).and_then(|s| s.auth_plan(token))
        };
        let flag = Origin::Flag("--token-file".into());
        // A token file from a flag beats $AHPTY_TOKEN; $AHPTY_TOKEN beats the file's.
        assert_eq!(
            plan(flag_token_file(), &[], "", true),
            Ok(AuthPlan::TokenFile("/f".into(), flag))
        );
        assert_eq!(
            plan(Layer::default(), &[], "token_file = \"/t\"\n", true),
            Ok(AuthPlan::EnvToken)
        );
        assert_eq!(
            plan(Layer::default(), &[], "token_file = \"/t\"\n", false),
            Ok(AuthPlan::TokenFile("/t".into(), file_origin(1)))
        );
        // --no-auth beats the file's token file; the file's no_auth loses to a flag's file.
        assert_eq!(
            plan(flag_no_auth(), &[], "token_file = \"/t\"\n", false),
            Ok(AuthPlan::Disabled(Origin::Flag("--no-auth".into())))
        );
        assert!(matches!(
            plan(flag_token_file(), &[], "no_auth = true\n", false),
            Ok(AuthPlan::TokenFile(..))
        ));
        assert_eq!(
            plan(Layer::default(), &[], "", false),
            Ok(AuthPlan::Generate)
        );
    }

    #[test]
    fn auth_contradictions_are_invalid() {
        let invalid = |r: Result<AuthPlan, ConfigError>| matches!(r, Err(ConfigError::Invalid(_)));
        let plan = |flags, env: &[(&str, &str)], file, token| {
            settings(flags, env, file).and_then(|s| s.auth_plan(token))
        };
        // no_auth with $AHPTY_TOKEN set, from any source.
        assert!(invalid(plan(flag_no_auth(), &[], "", true)));
        assert!(invalid(plan(
            Layer::default(),
            &[],
            "no_auth = true\n",
            true
        )));
        // Both in one source.
        assert!(invalid(plan(
            Layer::default(),
            &[],
            "no_auth = true\ntoken_file = \"/t\"\n",
            false
        )));
        assert!(invalid(plan(
            Layer::default(),
            &[("AHPTY_NO_AUTH", "1"), ("AHPTY_TOKEN_FILE", "/t")],
            "",
            false
        )));
        // $AHPTY_TOKEN and $AHPTY_TOKEN_FILE together.
        assert!(invalid(plan(
            Layer::default(),
            &[("AHPTY_TOKEN_FILE", "/t")],
            "",
            true
        )));
    }

    #[test]
    fn every_key_has_a_flag_a_variable_and_help() {
        for key in KEYS {
            assert!(default_text(key.name).is_some(), "{}", key.name);
            assert_eq!(key.env(), format!("AHPTY_{}", key.name.to_uppercase()));
            assert!(key.flag().starts_with("--") && !key.flag().contains('_'));
            assert!(help(key.name).contains(&key.env()), "{}", key.name);
        }
    }

    #[test]
    fn env_lists_and_empty_values() {
        let s = settings(
            Layer::default(),
            &[
                ("AHPTY_LISTEN", "127.0.0.1:1, unix:/tmp/s.sock"),
                ("AHPTY_MAX_TERMINALS", ""),
            ],
            "",
        )
        .unwrap();
        assert_eq!(
            s.listen.value,
            vec![
                Listen::Tcp(SocketAddr::from(([127, 0, 0, 1], 1))),
                Listen::Unix("/tmp/s.sock".into())
            ]
        );
        assert_eq!(s.listen.origin, Origin::Env("AHPTY_LISTEN".into()));
        assert_eq!(s.max_terminals.origin, Origin::Default);
        // An empty list is refused.
        assert!(matches!(
            settings(Layer::default(), &[], "listen = []\n"),
            Err(ConfigError::Invalid(m)) if m.contains("listen")
        ));
    }
}
