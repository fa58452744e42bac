//! Streaming UTF-8 assembly for pty output.
//!
//! A pty read may end in the middle of a multi-byte character; this decoder holds back the
//! incomplete tail (at most 3 bytes) until the next read completes it. Invalid bytes become
//! U+FFFD with maximal-subpart replacement (the same policy as `String::from_utf8_lossy`), so
//! nothing that is not valid UTF-8 ever reaches a WebSocket text frame. Touches nothing else.

/// Incremental UTF-8 decoder. Feed raw bytes with [`Utf8Decoder::decode_into`]; call
/// [`Utf8Decoder::finish`] at end of stream. Allocation-free: the held tail is at most 3 bytes.
#[derive(Debug, Default, Clone)]
pub struct Utf8Decoder {
    /// Bytes of an incomplete (so far valid) code point from the previous call.
    partial: [u8; 4],
    len: usize,
}

impl Utf8Decoder {
    /// A decoder with nothing pending.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes `bytes`, appending text to `out`. A trailing incomplete code point is held back.
    pub fn decode_into(&mut self, mut bytes: &[u8], out: &mut String) {
        if self.len > 0 {
            // Complete (or reject) the held character with up to 3 more bytes.
            let mut tmp = [0u8; 8];
            let held = self.len;
            tmp[..held].copy_from_slice(&self.partial[..held]);
            let take = bytes.len().min(4 - held);
            tmp[held..held + take].copy_from_slice(&bytes[..take]);
            let total = held + take;
            match std::str::from_utf8(&tmp[..total]) {
                Ok(s) => {
                    out.push_str(s);
                    self.len = 0;
                    bytes = &bytes[take..];
                }
                Err(e) if e.valid_up_to() > 0 => {
                    // The held character completed; the rest is decoded below.
                    let n = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&tmp[..n]).unwrap_or_default());
                    self.len = 0;
                    bytes = &bytes[n - held..];
                }
                Err(e) => match e.error_len() {
                    Some(n) => {
                        out.push(char::REPLACEMENT_CHARACTER);
                        self.len = 0;
                        bytes = &bytes[n.saturating_sub(held)..];
                    }
                    None => {
                        self.partial[..total].copy_from_slice(&tmp[..total]);
                        self.len = total;
                        return;
                    }
                },
            }
        }
        loop {
            match std::str::from_utf8(bytes) {
                Ok(s) => {
                    out.push_str(s);
                    return;
                }
                Err(e) => {
                    let n = e.valid_up_to();
                    // The prefix up to `valid_up_to` is valid by definition.
                    out.push_str(std::str::from_utf8(&bytes[..n]).unwrap_or_default());
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            bytes = &bytes[n + bad..];
                        }
                        None => {
                            let tail = &bytes[n..];
                            self.partial[..tail.len()].copy_from_slice(tail);
                            self.len = tail.len();
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Ends the stream: a dangling partial code point becomes one U+FFFD (returned).
    pub fn finish(&mut self) -> Option<char> {
        if self.len == 0 {
            None
        } else {
            self.len = 0;
            Some(char::REPLACEMENT_CHARACTER)
        }
    }

    /// The bytes of the incomplete code point held back (at most 3), for a live upgrade's
    /// hand-over: feeding them to a fresh decoder restores this one.
    pub fn pending(&self) -> &[u8] {
        &self.partial[..self.len]
    }

    /// Like [`Utf8Decoder::finish`], appending the U+FFFD (if any) to `out`.
    pub fn finish_into(&mut self, out: &mut String) {
        if let Some(c) = self.finish() {
            out.push(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_decode(bytes: &[u8], cuts: &[usize]) -> String {
        let mut d = Utf8Decoder::new();
        let mut out = String::new();
        let mut last = 0;
        for &c in cuts {
            d.decode_into(&bytes[last..c], &mut out);
            last = c;
        }
        d.decode_into(&bytes[last..], &mut out);
        if let Some(c) = d.finish() {
            out.push(c);
        }
        out
    }

    fn decode(d: &mut Utf8Decoder, bytes: &[u8]) -> String {
        let mut out = String::new();
        d.decode_into(bytes, &mut out);
        out
    }

    fn lossy(bytes: &[u8]) -> String {
        String::from_utf8_lossy(bytes).into_owned()
    }

    const VECTORS: &[&[u8]] = &[
        "aé😀─中".as_bytes(),
        b"\x42\xcc\x81\x43\xe2\x94\x80",
        b"\xc3\xa9\x21",
        b"a\xffb\xc0\x80c\xed\xa0\x80d\x9be\r\n",
        b"\xd8\x1b[0m12\n",
        b"\xe2\x94",
        b"\xf0\x9f\x98",
        b"\xf0\x9f\x98\x80\xf0",
        b"\xe2\x28\xa1",
        b"\xf4\x90\x80\x80x",
    ];

    #[test]
    fn every_split_matches_unsplit_lossy_decoding() {
        for v in VECTORS {
            let want = lossy(v);
            for i in 0..=v.len() {
                assert_eq!(split_decode(v, &[i]), want, "vector {v:?} split at {i}");
                for j in i..=v.len() {
                    assert_eq!(split_decode(v, &[i, j]), want, "vector {v:?} split {i},{j}");
                }
            }
            let ones: Vec<usize> = (1..v.len()).collect();
            assert_eq!(split_decode(v, &ones), want, "vector {v:?} byte by byte");
        }
    }

    #[test]
    fn maximal_subpart_replacement() {
        assert_eq!(
            split_decode(b"a\xffb\xc0\x80c\xed\xa0\x80d\x9be\r\n", &[]),
            "a\u{FFFD}b\u{FFFD}\u{FFFD}c\u{FFFD}\u{FFFD}\u{FFFD}d\u{FFFD}e\r\n"
        );
    }

    #[test]
    fn split_character_is_not_lost_nor_the_next() {
        let mut d = Utf8Decoder::new();
        let mut out = decode(&mut d, b"\x42\xcc");
        assert_eq!(out, "B");
        out.push_str(&decode(&mut d, b"\x81\x43\xe2\x94\x80"));
        assert_eq!(out, "B\u{301}C─");
    }

    #[test]
    fn dangling_tail_at_eof_is_one_replacement() {
        let mut d = Utf8Decoder::new();
        assert_eq!(decode(&mut d, b"ok\xe2\x94"), "ok");
        assert_eq!(d.finish(), Some('\u{FFFD}'));
        assert_eq!(d.finish(), None);
    }
}
