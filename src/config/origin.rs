//! Where a setting's value came from ([`Origin`], [`Val`]) and how an error names it
//! ([`ConfigError`], one line for the user).
//!
//! Pure; touches nothing.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use super::*;

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
pub(super) fn human(value: &str) -> String {
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
