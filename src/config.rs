//! Runtime settings of the daemon, filled by the CLI (or by tests) and read everywhere else.

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

/// Default largest incoming WebSocket message, in bytes.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Default most terminals at once.
pub const DEFAULT_MAX_TERMINALS: usize = 512;

/// Default most subscriptions per connection.
pub const DEFAULT_MAX_SUBSCRIPTIONS: usize = 1024;

/// Daemon settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// TCP address to listen on (default `127.0.0.1:8765`; port 0 picks a free port).
    pub listen: SocketAddr,
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
    /// (code 4001) so the terminals it watches can resume.
    pub stall_timeout: Duration,
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
            listen: SocketAddr::from(([127, 0, 0, 1], 8765)),
            shell: Config::default_shell(),
            allow_origins: Vec::new(),
            scrollback_bytes: DEFAULT_SCROLLBACK_BYTES,
            kill_grace: Duration::from_millis(500),
            shell_integration: true,
            history_bytes: crate::host::history::DEFAULT_TERMINAL_HISTORY_BYTES,
            orphan_grace: Some(DEFAULT_ORPHAN_GRACE),
            stall_timeout: DEFAULT_STALL_TIMEOUT,
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
