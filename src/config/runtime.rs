//! The daemon's configuration as the rest of the crate uses it: [`Config`], [`Listen`],
//! [`Token`], [`Auth`], [`TlsFiles`], [`Persist`].
//!
//! May touch: the kernel's CSPRNG ([`Token::generate`]) and file metadata
//! ([`is_executable`]); nothing else.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::*;

/// Shortest accepted configured token, in bytes.
pub const MIN_TOKEN_LEN: usize = 16;

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
