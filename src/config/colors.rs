//! The colours the host answers OSC 10/11/12 queries with ([`ReportColors`]).
//!
//! Pure; touches nothing.

use std::fmt;

use super::*;

/// A colour as 8-bit red, green and blue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rgb(pub u8, pub u8, pub u8);

impl fmt::Display for Rgb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }
}

impl std::str::FromStr for Rgb {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let hex = text.trim().strip_prefix('#').unwrap_or(text.trim());
        let byte = |i: usize| u8::from_str_radix(hex.get(i..i + 2).unwrap_or("x"), 16);
        match (hex.len(), byte(0), byte(2), byte(4)) {
            (6, Ok(r), Ok(g), Ok(b)) => Ok(Rgb(r, g, b)),
            _ => Err(format!(
                "{text:?} is not a colour: expected #RRGGBB, e.g. #1e1e1e"
            )),
        }
    }
}

/// The colours the host reports for OSC 10 (foreground), 11 (background) and 12 (cursor)
/// queries. The defaults are xterm.js's: white on black, a white cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportColors {
    /// OSC 10.
    pub foreground: Rgb,
    /// OSC 11.
    pub background: Rgb,
    /// OSC 12.
    pub cursor: Rgb,
}

impl Default for ReportColors {
    fn default() -> Self {
        ReportColors {
            foreground: Rgb(0xff, 0xff, 0xff),
            background: Rgb(0, 0, 0),
            cursor: Rgb(0xff, 0xff, 0xff),
        }
    }
}

impl Value for ReportColors {
    const EXPECTED: &'static str = "three colours, e.g. \"#ffffff,#000000,#ffffff\"";
    fn parse(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.split(',').collect();
        let [fg, bg, cursor] = parts[..] else {
            return Err(format!(
                "expected {} (foreground, background, cursor)",
                Self::EXPECTED
            ));
        };
        Ok(ReportColors {
            foreground: fg.parse()?,
            background: bg.parse()?,
            cursor: cursor.parse()?,
        })
    }
    fn to_toml(&self) -> String {
        let text = format!("{},{},{}", self.foreground, self.background, self.cursor);
        toml::Value::String(text).to_string()
    }
}
