//! Runtime settings of the daemon, filled by the CLI (or by tests) and read everywhere else.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The Origin VS Code desktop sends from its Electron renderer; allowed by default because no
/// web page can send it.
pub const VSCODE_DESKTOP_ORIGIN: &str = "vscode-file://vscode-app";

/// Default retained content per terminal, in bytes of UTF-8 text.
pub const DEFAULT_SCROLLBACK_BYTES: usize = 1024 * 1024;

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

/// Default most subscriptions per connection.
pub const DEFAULT_MAX_SUBSCRIPTIONS: usize = 1024;

/// Default most simultaneous WebSocket connections (all listeners together).
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// Default time a socket gets to complete the TLS and WebSocket handshakes.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Default silence after which a connection is sent a WebSocket ping.
pub const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(30);

/// Default time a pinged connection has to send anything back before it is dropped.
pub const DEFAULT_PING_TIMEOUT: Duration = Duration::from_secs(30);

/// Environment variable holding the connection token (removed from the daemon's environment
/// at start, so terminals never inherit it).
pub const TOKEN_ENV: &str = "AHPTY_TOKEN";

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
        s.parse::<SocketAddr>().map(Listen::Tcp).map_err(|_| {
            format!("{s:?} is neither host:port (e.g. 127.0.0.1:8765, [::1]:8765) nor unix:PATH")
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

    /// A fresh random token: 32 bytes from the kernel's CSPRNG, hex-encoded.
    pub fn generate() -> std::io::Result<Token> {
        use std::io::Read;
        let mut bytes = [0u8; 32];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
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

/// Daemon settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen (default TCP `127.0.0.1:8765`); TCP and Unix listeners may be mixed.
    pub listen: Vec<Listen>,
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
    /// Most terminals the host runs at once (createTerminal beyond it → -32603).
    pub max_terminals: usize,
    /// Most subscriptions one connection may hold (subscribe beyond it → -32603).
    pub max_subscriptions: usize,
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
            listen: vec![Listen::Tcp(SocketAddr::from(([127, 0, 0, 1], 8765)))],
            auth: Auth::Generate,
            tls: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            ping_interval: Some(DEFAULT_PING_INTERVAL),
            ping_timeout: DEFAULT_PING_TIMEOUT,
            shell: Config::default_shell(),
            allow_origins: Vec::new(),
            scrollback_bytes: DEFAULT_SCROLLBACK_BYTES,
            kill_grace: Duration::from_millis(500),
            shell_integration: true,
            history_bytes: crate::host::history::DEFAULT_TERMINAL_HISTORY_BYTES,
            orphan_grace: Some(DEFAULT_ORPHAN_GRACE),
            stall_timeout: Some(DEFAULT_STALL_TIMEOUT),
            lag_grace: DEFAULT_LAG_GRACE,
            lag_timeout: Some(DEFAULT_LAG_TIMEOUT),
            lag_limit_bytes: DEFAULT_LAG_LIMIT_BYTES,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_terminals: DEFAULT_MAX_TERMINALS,
            max_subscriptions: DEFAULT_MAX_SUBSCRIPTIONS,
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
