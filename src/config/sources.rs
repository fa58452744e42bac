//! The sources of the settings: the `AHPTY_…` environment, the config file (TOML), and
//! [`load`], which combines them with the flags (flag > environment > file > default).
//!
//! May touch: the config file it is given to read (read only); the environment through the
//! getter it is given.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::*;

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
