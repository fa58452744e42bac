//! Streaming UTF-8 assembly for pty output.
//!
//! A pty read may end in the middle of a multi-byte character; this decoder holds back the
//! incomplete tail (at most 3 bytes) until the next read completes it. Invalid bytes become
//! U+FFFD with maximal-subpart replacement (the same policy as `String::from_utf8_lossy`), so
//! nothing that is not valid UTF-8 ever reaches a WebSocket text frame. Touches nothing else.

/// Incremental UTF-8 decoder. Feed raw bytes with [`Utf8Decoder::decode`]; call
/// [`Utf8Decoder::finish`] at end of stream.
#[derive(Debug, Default)]
pub struct Utf8Decoder {
    /// Bytes of an incomplete (so far valid) code point from the previous read; at most 3.
    pending: Vec<u8>,
}

impl Utf8Decoder {
    /// A decoder with nothing pending.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes `input`, appending text to `out`. A trailing incomplete code point is held back.
    pub fn decode_into(&mut self, input: &[u8], out: &mut String) {
        if self.pending.is_empty() {
            self.decode_fresh(input, out);
            return;
        }
        // Rare path (a read ended inside a character): decode the held bytes and the new
        // input together. The copy is at most one read buffer.
        let mut joined = std::mem::take(&mut self.pending);
        joined.extend_from_slice(input);
        self.decode_fresh(&joined, out);
    }

    /// Convenience wrapper around [`Utf8Decoder::decode_into`].
    pub fn decode(&mut self, input: &[u8]) -> String {
        let mut out = String::with_capacity(input.len());
        self.decode_into(input, &mut out);
        out
    }

    /// Ends the stream: a dangling partial code point becomes one U+FFFD.
    pub fn finish(&mut self) -> Option<char> {
        if self.pending.is_empty() {
            None
        } else {
            self.pending.clear();
            Some('\u{FFFD}')
        }
    }

    /// Whether bytes of an incomplete code point are being held back.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    fn decode_fresh(&mut self, mut input: &[u8], out: &mut String) {
        loop {
            match std::str::from_utf8(input) {
                Ok(s) => {
                    out.push_str(s);
                    return;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // The prefix up to `valid_up_to` is valid by definition.
                    if let Ok(s) = std::str::from_utf8(&input[..valid]) {
                        out.push_str(s);
                    }
                    match e.error_len() {
                        None => {
                            self.pending = input[valid..].to_vec();
                            return;
                        }
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            input = &input[valid + bad..];
                        }
                    }
                }
            }
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
        let mut out = d.decode(b"\x42\xcc");
        assert!(d.has_pending());
        out.push_str(&d.decode(b"\x81\x43\xe2\x94\x80"));
        assert_eq!(out, "B\u{301}C─");
    }

    #[test]
    fn dangling_tail_at_eof_is_one_replacement() {
        let mut d = Utf8Decoder::new();
        assert_eq!(d.decode(b"ok\xe2\x94"), "ok");
        assert_eq!(d.finish(), Some('\u{FFFD}'));
        assert_eq!(d.finish(), None);
    }
}
