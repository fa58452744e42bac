//! The output pipeline of one terminal: raw pty bytes in, [`PtyEvent`]s out, in stream order.
//!
//! Runs on the terminal's reader thread. It assembles UTF-8 across reads (invalid bytes become
//! U+FFFD) so that every `terminal/data` is valid text and no character is split between two
//! envelopes. Touches nothing outside the terminal it belongs to.

use super::utf8::Utf8Decoder;
use super::PtyEvent;

/// Per-terminal output state, kept across reads.
#[derive(Debug, Default)]
pub struct OutputPipeline {
    decoder: Utf8Decoder,
}

impl OutputPipeline {
    /// A pipeline for plain output (no shell integration).
    pub fn plain() -> Self {
        Self::default()
    }

    /// Processes one read's bytes.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<PtyEvent> {
        let text = self.decoder.decode(bytes);
        if text.is_empty() {
            Vec::new()
        } else {
            vec![PtyEvent::Data(text)]
        }
    }

    /// End of stream: releases anything held back (a dangling partial character becomes
    /// one U+FFFD).
    pub fn finish(&mut self) -> Vec<PtyEvent> {
        match self.decoder.finish() {
            Some(c) => vec![PtyEvent::Data(c.to_string())],
            None => Vec::new(),
        }
    }
}
