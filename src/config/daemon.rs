//! From resolved [`Settings`] to the daemon's [`Config`]: the authentication plan, TLS
//! files, shell, socket and transcript store, with the contradictions refused.
//!
//! May touch: the token file and the shell it names (read, stat); nothing else.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::*;

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
