//! The types a setting can have ([`Value`], [`Item`]): parsing from a flag, a variable or
//! TOML, and printing back in TOML syntax.
//!
//! Pure; touches nothing.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;

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
