//! JSON string escaping, byte for byte as serde_json writes it, eight bytes at a time: the hot
//! path of every `terminal/data` frame (see [`super::message::data_action`]). Pure; no state.

/// The bytes of `w` that must be escaped in a JSON string (a control character, `"` or `\\`),
/// as a mask with the high bit of each such byte set. The lowest set bit is exact (later bits
/// may be false positives), which is all [`push_escaped`] uses; bytes ≥ 0x80 never match.
fn escape_mask(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    let q = w ^ (ONES * u64::from(b'"'));
    let quote = q.wrapping_sub(ONES) & !q & HIGH;
    let b = w ^ (ONES * u64::from(b'\\'));
    let backslash = b.wrapping_sub(ONES) & !b & HIGH;
    control | quote | backslash
}

/// `\u0000` to `\u001f`, six bytes each: the escape of control character `c` is
/// `CONTROLS[6 * c..6 * c + 6]` (escape-heavy output has an ESC every few bytes).
const CONTROLS: &str = concat!(
    "\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007",
    "\\u0008\\u0009\\u000a\\u000b\\u000c\\u000d\\u000e\\u000f",
    "\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017",
    "\\u0018\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f",
);

/// Appends the escape of `b` (a byte [`escape_mask`] matches), exactly as serde_json writes it.
fn push_escape(out: &mut String, b: u8) {
    match b {
        b'"' => out.push_str("\\\""),
        b'\\' => out.push_str("\\\\"),
        0x08 => out.push_str("\\b"),
        0x0c => out.push_str("\\f"),
        b'\n' => out.push_str("\\n"),
        b'\r' => out.push_str("\\r"),
        b'\t' => out.push_str("\\t"),
        _ => {
            let at = 6 * usize::from(b & 0x1f);
            out.push_str(CONTROLS.get(at..at + 6).unwrap_or_default());
        }
    }
}

/// Appends `s` escaped as the inside of a JSON string, exactly as serde_json escapes it
/// (`\"`, `\\`, `\b \f \n \r \t`, other controls as `\u00xx`; nothing else): eight bytes
/// are checked at a time, and runs without escapes are copied whole.
pub(crate) fn push_escaped(out: &mut String, s: &str) {
    let bytes = s.as_bytes();
    // `start..i` is the run not yet copied; escapes are ASCII, so every cut is on a character
    // boundary.
    let mut start = 0;
    let mut i = 0;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        let mask = escape_mask(u64::from_le_bytes(w));
        if mask == 0 {
            i += 8;
            continue;
        }
        let j = i + (mask.trailing_zeros() / 8) as usize;
        out.push_str(&s[start..j]);
        push_escape(out, bytes[j]);
        i = j + 1;
        start = i;
    }
    while i < bytes.len() {
        let b = bytes[i];
        if b < 0x20 || b == b'"' || b == b'\\' {
            out.push_str(&s[start..i]);
            push_escape(out, b);
            start = i + 1;
        }
        i += 1;
    }
    out.push_str(&s[start..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_is_escaped_as_serde_escapes_it() {
        for b in 0..=0x7fu8 {
            let s = format!("a{}b", char::from(b));
            let mut out = String::new();
            push_escaped(&mut out, &s);
            assert_eq!(
                format!("\"{out}\""),
                serde_json::to_string(&s).unwrap(),
                "{b:#x}"
            );
        }
    }

    #[test]
    fn escaping_matches_serde_at_every_alignment() {
        let specials = "\"\\\u{0}\u{1f}\n\r\t\u{8}\u{c}\u{7f}é";
        for pad in 0..24 {
            for gap in 0..10 {
                let s = format!(
                    "{}{}{}{}",
                    "a".repeat(pad),
                    specials,
                    "b".repeat(gap),
                    specials
                );
                let mut out = String::new();
                push_escaped(&mut out, &s);
                assert_eq!(format!("\"{out}\""), serde_json::to_string(&s).unwrap());
            }
        }
    }
}
