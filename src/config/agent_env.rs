//! The environment agent terminals (created with a session claim) get on top of the
//! daemon's: the defaults and the `--agent-env` arguments that change them.
//!
//! Pure data and parsing; touches nothing.

use std::fmt;

use super::*;

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
