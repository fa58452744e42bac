//! Retained envelopes of one channel, for `reconnect` replay (docs/protocol.md, "Reconnect,
//! history and reaping").
//!
//! Each channel — the root channel and every terminal — keeps its own history, bounded in
//! bytes of encoded JSON, so one chatty terminal never evicts another's. `floor` is the
//! `serverSeq` after which every envelope of the channel is still held: a client that last saw
//! `s ≥ floor` can be resumed by replay; an older one needs a snapshot. A terminal's floor
//! starts at the counter value when it was created, so a URI reused after a dispose is never
//! replayed onto the old terminal's state.
//!
//! Pure data structure (no lock of its own, no I/O); the host keeps one per channel.

use std::collections::VecDeque;

use crate::codec::{self, Frame};

/// History of the root channel, in bytes of encoded envelopes.
pub const ROOT_HISTORY_BYTES: usize = 1024 * 1024;

/// One retained envelope: the `action` notification exactly as it was sent (the same bytes the
/// subscribers' queues hold), so keeping it costs no copy and replaying it no re-encoding.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The envelope's `serverSeq`.
    pub server_seq: u64,
    text: Frame,
    /// For a rejected action, the client that dispatched it: the only one it is replayed to.
    rejected_for: Option<String>,
}

impl Entry {
    /// The envelope as JSON (the notification's `params`).
    pub fn envelope_json(&self) -> &str {
        codec::action_params(self.text.as_str())
    }
}

/// A bounded, ordered log of one channel's envelopes.
pub struct History {
    entries: VecDeque<Entry>,
    bytes: usize,
    cap: usize,
    floor: u64,
}

impl History {
    /// An empty history holding at most `cap` bytes, complete after `floor`.
    pub fn new(cap: usize, floor: u64) -> Self {
        History {
            entries: VecDeque::new(),
            bytes: 0,
            cap,
            floor,
        }
    }

    /// Appends the `action` notification `text` of envelope `server_seq` (for a rejected
    /// action, `rejected_for` names its dispatcher), evicting the oldest entries while over the
    /// cap. Envelopes must arrive in increasing `serverSeq` order.
    pub fn push(&mut self, server_seq: u64, text: Frame, rejected_for: Option<String>) {
        self.bytes += text.len();
        self.entries.push_back(Entry {
            server_seq,
            text,
            rejected_for,
        });
        while self.bytes > self.cap {
            let Some(old) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= old.text.len();
            self.floor = old.server_seq;
        }
    }

    /// Whether every envelope after `seq` is still held.
    pub fn covers(&self, seq: u64) -> bool {
        seq >= self.floor
    }

    /// Envelopes after `seq`, oldest first, with their encoded sizes. A rejected envelope is
    /// included only for the client that dispatched it (decision D3).
    pub fn after<'a>(
        &'a self,
        seq: u64,
        client_id: &'a str,
    ) -> impl Iterator<Item = (&'a Entry, usize)> + 'a {
        let start = self.entries.partition_point(|e| e.server_seq <= seq);
        self.entries.range(start..).filter_map(move |e| {
            let visible = e.rejected_for.as_deref().is_none_or(|c| c == client_id);
            visible.then_some((e, e.text.len()))
        })
    }

    /// Bytes currently held.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// This history as data, for a live upgrade's hand-over (docs/upgrade.md).
    pub fn image(&self) -> HistoryImage {
        HistoryImage {
            cap: self.cap,
            floor: self.floor,
            entries: self
                .entries
                .iter()
                .map(|e| EntryImage {
                    server_seq: e.server_seq,
                    // Shared, not copied: a hand-over costs no second copy of the histories.
                    text: e.text.clone(),
                    bytes: None,
                    rejected_for: e.rejected_for.clone(),
                })
                .collect(),
        }
    }

    /// The history an [`image`](Self::image) describes.
    pub fn from_image(image: HistoryImage) -> History {
        let mut h = History::new(image.cap, image.floor);
        for e in image.entries {
            h.bytes += e.text.len();
            h.entries.push_back(Entry {
                server_seq: e.server_seq,
                text: e.text,
                rejected_for: e.rejected_for,
            });
        }
        h
    }
}

impl HistoryImage {
    /// Drops every entry, keeping what it covered known as not covered any more (a
    /// `reconnect` from before then gets a snapshot instead of a replay).
    pub fn forget(&mut self) {
        if let Some(last) = self.entries.last() {
            self.floor = self.floor.max(last.server_seq);
        }
        self.entries = Vec::new();
    }
}

fn empty_frame() -> Frame {
    Frame::from("")
}

/// A [`Frame`] as a JSON string (and back, without a copy of the parsed string).
mod frame_text {
    use crate::codec::Frame;

    pub fn serialize<S: serde::Serializer>(f: &Frame, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(f.as_str())
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Frame, D::Error> {
        let text: String = serde::Deserialize::deserialize(d)?;
        Ok(Frame::from(text))
    }
}

/// A [`History`] as data: its cap and floor and every retained `action` notification.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryImage {
    /// Bytes of encoded envelopes held at most.
    pub cap: usize,
    /// Every envelope after this `serverSeq` is held.
    pub floor: u64,
    /// The retained envelopes, oldest first.
    pub entries: Vec<EntryImage>,
}

/// One retained envelope of a [`HistoryImage`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryImage {
    /// The envelope's `serverSeq`.
    pub server_seq: u64,
    /// The `action` notification exactly as it was sent (a JSON string); empty when it
    /// follows the JSON as `bytes` raw bytes (format 2, `upgrade::format`).
    #[serde(with = "frame_text", default = "empty_frame")]
    pub text: Frame,
    /// The length of the text in bytes, when the text follows the JSON (format 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// For a rejected action, the client it is replayed to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected_for: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::actions::{ActionEnvelope, StateAction, TerminalDataAction};

    fn env(seq: u64, data: &str) -> Frame {
        codec::action(&ActionEnvelope {
            channel: "t:/1".into(),
            action: StateAction::TerminalData(TerminalDataAction { data: data.into() }),
            server_seq: seq,
            origin: None,
            rejection_reason: None,
        })
        .into()
    }

    #[test]
    fn eviction_moves_the_floor() {
        let mut h = History::new(250, 3);
        assert!(h.covers(3) && !h.covers(2));
        let size = env(4, "x").len();
        let mut h2 = History::new(size * 5 / 2, 3);
        for seq in 4..=8 {
            h.push(seq, env(seq, "x"), None);
            h2.push(seq, env(seq, "x"), None);
        }
        // Five envelopes pushed, room for two and a half: seqs 4, 5 and 6 evicted.
        assert_eq!(h2.bytes(), 2 * size);
        assert!(!h2.covers(5));
        assert!(h2.covers(6));
        let seqs: Vec<u64> = h2.after(6, "c").map(|(e, _)| e.server_seq).collect();
        assert_eq!(seqs, [7, 8]);
        assert_eq!(h2.after(8, "c").count(), 0);
        let replayed: ActionEnvelope =
            serde_json::from_str(h2.after(7, "c").next().unwrap().0.envelope_json()).unwrap();
        assert_eq!(replayed.server_seq, 8);
    }

    #[test]
    fn rejections_replay_to_their_dispatcher_only() {
        let mut h = History::new(1000, 0);
        h.push(1, env(1, "x"), Some("a".into()));
        h.push(2, env(2, "y"), None);
        assert_eq!(h.after(0, "a").count(), 2);
        assert_eq!(h.after(0, "b").count(), 1);
    }
}
