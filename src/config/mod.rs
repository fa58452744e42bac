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
//! This file holds the constants and the settings table (with each setting's limit); the
//! rest is one file per job: `values` (the types a setting can have), `origin` (where a value
//! came from, [`ConfigError`]), `sources` (environment, file, [`load`]), `daemon` (settings to
//! [`Config`]), `runtime` (the [`Config`] types), `agent_env`, `colors`, `system` (socket
//! path, uid, open-file limit). Everything public is re-exported here: `crate::config::X`.
//!
//! May touch: the environment and the config file it is given to read, and the process's
//! open-file limit (raised once at start, [`raise_open_file_limit`]); nothing else.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod agent_env;
mod colors;
mod daemon;
mod origin;
mod runtime;
mod sources;
mod system;
#[cfg(test)]
mod tests;
mod values;

pub use agent_env::{agent_env, AgentEnvArg, DEFAULT_AGENT_ENV};
pub use colors::{ReportColors, Rgb};
pub use daemon::{default_state_dir, AuthPlan};
use origin::human;
pub use origin::{ConfigError, Origin, Val};
pub use runtime::{is_executable, Auth, Config, Listen, Persist, TlsFiles, Token, MIN_TOKEN_LEN};
pub use sources::{config_home, default_config_path, load, unknown_env_notes, ConfigFile, Loaded};
pub use system::{
    default_socket_path, default_socket_path_from, effective_uid, raise_open_file_limit,
    OpenFileLimit,
};
pub use values::{duration_text, parse_flag, parse_item, Item, Raw, Value};

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
