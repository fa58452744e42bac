//! Named keys (`C-c`, `Enter`, `Up`, `Tab`, `Esc`, `F2`, …) as the bytes a terminal sends.
//!
//! May touch: nothing but its arguments.

/// The bytes for `name`, or `None` for a name it does not know.
pub fn key(name: &str) -> Option<String> {
    let s = match name {
        "Enter" | "Return" => "\r",
        "Tab" => "\t",
        "Esc" | "Escape" => "\x1b",
        "Backspace" | "BSpace" => "\x7f",
        "Space" => " ",
        "Up" => "\x1b[A",
        "Down" => "\x1b[B",
        "Right" => "\x1b[C",
        "Left" => "\x1b[D",
        "Home" => "\x1b[H",
        "End" => "\x1b[F",
        "PageUp" | "PPage" => "\x1b[5~",
        "PageDown" | "NPage" => "\x1b[6~",
        "Delete" | "DC" => "\x1b[3~",
        "F1" => "\x1bOP",
        "F2" => "\x1bOQ",
        "F3" => "\x1bOR",
        "F4" => "\x1bOS",
        "F5" => "\x1b[15~",
        "F6" => "\x1b[17~",
        "F7" => "\x1b[18~",
        "F8" => "\x1b[19~",
        "F9" => "\x1b[20~",
        "F10" => "\x1b[21~",
        "F11" => "\x1b[23~",
        "F12" => "\x1b[24~",
        _ => {
            let letter = name.strip_prefix("C-")?;
            let mut chars = letter.chars();
            let c = chars.next()?.to_ascii_lowercase();
            if chars.next().is_some() || !c.is_ascii_lowercase() {
                return None;
            }
            return Some(char::from(c as u8 - b'a' + 1).to_string());
        }
    };
    Some(s.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn names() {
        assert_eq!(super::key("C-c").as_deref(), Some("\x03"));
        assert_eq!(super::key("Enter").as_deref(), Some("\r"));
        assert_eq!(super::key("C-cc"), None);
        assert_eq!(super::key("Nope"), None);
    }
}
