//! The `ahpty serve` flags (clap): each declared with the help text, default and limit
//! `ahpty::config` gives it, and turned into the flags' settings layer.
//!
//! May touch: nothing; pure parsing.

use std::path::PathBuf;
use std::time::Duration;

use ahpty::config::{
    self, help, parse_flag, parse_item, AgentEnvArg, ConfigError, Layer, Listen, Loaded, Origin,
    ReportColors, Val,
};

/// The `serve` options. Their help text, defaults and limits come from `ahpty::config`, and
/// every one of them can also be set by the variable and config-file key of the same name.
#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// Read settings from this TOML file instead of $XDG_CONFIG_HOME/ahpty/config.toml
    /// (else ~/.config/ahpty/config.toml) [env: AHPTY_CONFIG].
    #[arg(long, value_name = "PATH")]
    pub(crate) config: Option<PathBuf>,
    #[arg(long, value_name = "ADDR", help = help("listen"), value_parser = parse_item::<Listen>)]
    pub(crate) listen: Vec<Listen>,
    #[arg(long, value_name = "PATH", conflicts_with = "no_auth", help = help("token_file"))]
    pub(crate) token_file: Option<PathBuf>,
    #[arg(long, help = help("no_auth"))]
    pub(crate) no_auth: bool,
    #[arg(long, value_name = "PATH", requires = "tls_key", help = help("tls_cert"))]
    pub(crate) tls_cert: Option<PathBuf>,
    #[arg(long, value_name = "PATH", requires = "tls_cert", help = help("tls_key"))]
    pub(crate) tls_key: Option<PathBuf>,
    #[arg(long, value_name = "PATH", overrides_with = "shell", help = help("shell"))]
    pub(crate) shell: Option<PathBuf>,
    #[arg(long, value_name = "ORIGIN", help = help("allow_origin"), value_parser = parse_item::<String>)]
    pub(crate) allow_origin: Vec<String>,
    #[arg(long, help = help("no_shell_integration"))]
    pub(crate) no_shell_integration: bool,
    #[arg(long = "agent-env", value_name = "KEY[=VALUE]", help = help("agent_env"), value_parser = parse_item::<AgentEnvArg>)]
    pub(crate) agent_env: Vec<AgentEnvArg>,
    #[arg(long, help = help("no_agent_env"))]
    pub(crate) no_agent_env: bool,
    #[arg(long, value_name = "PATH", conflicts_with = "no_socket", help = help("socket"))]
    pub(crate) socket: Option<PathBuf>,
    #[arg(long, help = help("no_socket"))]
    pub(crate) no_socket: bool,
    #[arg(long, value_name = "BYTES", help = help("scrollback_bytes"), value_parser = parse_flag::<usize>)]
    pub(crate) scrollback_bytes: Option<usize>,
    #[arg(long, value_name = "BYTES", help = help("history_bytes"), value_parser = parse_flag::<usize>)]
    pub(crate) history_bytes: Option<usize>,
    #[arg(long, value_name = "DIR", conflicts_with = "no_persist", help = help("state_dir"))]
    pub(crate) state_dir: Option<PathBuf>,
    #[arg(long, help = help("no_persist"))]
    pub(crate) no_persist: bool,
    #[arg(long, value_name = "BYTES", help = help("persist_max_bytes"), value_parser = parse_flag::<usize>)]
    pub(crate) persist_max_bytes: Option<usize>,
    #[arg(long, value_name = "DURATION", help = help("persist_max_age"), value_parser = parse_flag::<Duration>)]
    pub(crate) persist_max_age: Option<Duration>,
    #[arg(long, value_name = "DURATION", help = help("kill_grace"), value_parser = parse_flag::<Duration>)]
    pub(crate) kill_grace: Option<Duration>,
    /// Deprecated spelling of --kill-grace, in milliseconds.
    #[arg(long, value_name = "MS", hide = true, conflicts_with = "kill_grace")]
    pub(crate) kill_grace_ms: Option<u64>,
    #[arg(long, value_name = "DURATION", help = help("orphan_grace"), value_parser = parse_flag::<Duration>)]
    pub(crate) orphan_grace: Option<Duration>,
    #[arg(long, value_name = "DURATION", help = help("stall_timeout"), value_parser = parse_flag::<Duration>)]
    pub(crate) stall_timeout: Option<Duration>,
    #[arg(long, value_name = "DURATION", help = help("lag_grace"), value_parser = parse_flag::<Duration>)]
    pub(crate) lag_grace: Option<Duration>,
    #[arg(long, value_name = "DURATION", help = help("lag_timeout"), value_parser = parse_flag::<Duration>)]
    pub(crate) lag_timeout: Option<Duration>,
    #[arg(long, value_name = "BYTES", help = help("lag_limit_bytes"), value_parser = parse_flag::<usize>)]
    pub(crate) lag_limit_bytes: Option<usize>,
    #[arg(long, value_name = "BYTES", help = help("max_message_bytes"), value_parser = parse_flag::<usize>)]
    pub(crate) max_message_bytes: Option<usize>,
    #[arg(long, value_name = "N", help = help("max_terminals"), value_parser = parse_flag::<usize>)]
    pub(crate) max_terminals: Option<usize>,
    #[arg(long, value_name = "N", help = help("max_exited_terminals"), value_parser = parse_flag::<usize>)]
    pub(crate) max_exited_terminals: Option<usize>,
    #[arg(long, value_name = "N", help = help("max_subscriptions"), value_parser = parse_flag::<usize>)]
    pub(crate) max_subscriptions: Option<usize>,
    #[arg(long, value_name = "N", help = help("max_connections"), value_parser = parse_flag::<usize>)]
    pub(crate) max_connections: Option<usize>,
    #[arg(long, value_name = "DURATION", help = help("handshake_timeout"), value_parser = parse_flag::<Duration>)]
    pub(crate) handshake_timeout: Option<Duration>,
    #[arg(long, value_name = "DURATION", help = help("ping_interval"), value_parser = parse_flag::<Duration>)]
    pub(crate) ping_interval: Option<Duration>,
    #[arg(long, value_name = "DURATION", help = help("ping_timeout"), value_parser = parse_flag::<Duration>)]
    pub(crate) ping_timeout: Option<Duration>,
    #[arg(long, value_name = "FG,BG,CURSOR", help = help("report_colors"), value_parser = parse_flag::<ReportColors>)]
    pub(crate) report_colors: Option<ReportColors>,
    #[arg(long, value_name = "DURATION", help = help("upgrade_timeout"), value_parser = parse_flag::<Duration>)]
    pub(crate) upgrade_timeout: Option<Duration>,
}

/// A flag's parsed form as a setting: `Some` when the flag was given.
pub(crate) trait Given<T> {
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
    pub(crate) fn layer(&self) -> Layer {
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
    pub(crate) fn load(&self) -> Result<Loaded, ConfigError> {
        let env = |name: &str| std::env::var_os(name);
        let mut loaded = config::load(&self.layer(), self.config.as_deref(), &env)?;
        loaded.notes.extend(config::unknown_env_notes(
            std::env::vars_os().map(|(name, _)| name),
        ));
        Ok(loaded)
    }
}
