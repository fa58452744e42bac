//! The wire format, as text: everything the daemon sends, and the translation between the
//! host's AHP 1.0.0 shapes and an older protocol version's. Pure functions and values; no
//! I/O, no state, no locks.
//!
//! This is a bottom layer, like `config`: both the host (which encodes each envelope once,
//! under its lock, and shares the bytes with every subscriber and the channel's history) and
//! rpc (which encodes responses) use it, and it uses nothing else of the crate. Encoding an
//! envelope is a function of `ahp-types` values only, so it needs neither the host's state
//! nor rpc's connection state.
//!
//! - [`message`]: JSON-RPC results, errors and `action` notifications (the hot
//!   `terminal/data` frame is written straight from the output pieces).
//! - [`version`]: the per-version wire shapes ([`Wire`]), negotiation, and the translation of
//!   envelopes, snapshots and results to them (and of older claims to 1.0.0).
//! - [`json`]: JSON string escaping, byte for byte as serde_json does it.
//! - [`Frame`]: one encoded message in shared bytes, and [`clip`] for what a peer is told.

mod json;
pub(crate) mod message;
pub(crate) mod version;

use bytes::Bytes;

pub use message::{
    action, action_encoded, action_params, data_action, error, notification, replay_result,
    success, success_raw,
};
pub use version::Wire;

/// Longest error `message` and `rejectionReason` sent to a peer, in bytes: a longer one is cut
/// on a character boundary and ends with `…`, so an answer never echoes a large value back.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// `text` cut to at most `max` bytes on a character boundary, ending with `…` when cut.
pub fn clip(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut cut = max.saturating_sub('…'.len_utf8());
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// One complete JSON-RPC message for one WebSocket text frame: UTF-8 JSON in reference-counted
/// bytes. The host encodes an envelope once and every subscriber's queue and the channel's
/// history hold the same bytes; cloning costs a reference count. Built only from `str` and
/// `String`, so it is always valid UTF-8 (the server relies on that to hand it to the
/// WebSocket without checking it again).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Frame(Bytes);

impl Frame {
    /// The message text.
    pub fn as_str(&self) -> &str {
        // SAFETY: a Frame is only ever built from a `str` or a `String` (see the `From`
        // impls), and its bytes are immutable.
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the message is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The shared bytes (valid UTF-8), without a copy.
    pub fn bytes(&self) -> &Bytes {
        &self.0
    }

    /// The bytes, which are valid UTF-8.
    pub fn into_bytes(self) -> Bytes {
        self.0
    }
}

impl From<String> for Frame {
    /// Takes the string's buffer; no copy.
    fn from(text: String) -> Frame {
        Frame(Bytes::from(text.into_bytes()))
    }
}

impl From<&str> for Frame {
    /// Copies the text.
    fn from(text: &str) -> Frame {
        Frame(Bytes::copy_from_slice(text.as_bytes()))
    }
}

impl std::ops::Deref for Frame {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Frame {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Debug for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_clipped() {
        let clipped = clip(
            format!("channel: {}", "é".repeat(1 << 20)),
            MAX_MESSAGE_BYTES,
        );
        assert!(clipped.len() <= MAX_MESSAGE_BYTES);
        assert!(clipped.starts_with("channel: é") && clipped.ends_with('…'));
        assert_eq!(clip("short".into(), 10), "short");
    }

    #[test]
    fn frames_share_their_bytes() {
        let a = Frame::from(String::from("{\"x\":\"é\"}"));
        let b = a.clone();
        assert_eq!(a.as_str().as_ptr(), b.as_str().as_ptr());
        assert_eq!(&*b, "{\"x\":\"é\"}");
        assert_eq!(b.len(), 10);
    }
}
