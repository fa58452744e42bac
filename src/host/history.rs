//! Retained envelopes of one channel, for `reconnect` replay (notes §4, §6).
//!
//! Each channel — the root channel and every terminal — keeps its own history, bounded in
//! bytes of encoded JSON, so one chatty terminal never evicts another's. `floor` is the
//! `serverSeq` after which every envelope of the channel is still held: a client that last saw
//! `s ≥ floor` can be resumed by replay; an older one needs a snapshot. A terminal's floor
//! starts at the counter value when it was created, so a URI reused after a dispose is never
//! replayed onto the old terminal's state.

use std::collections::VecDeque;

use ahp_types::actions::ActionEnvelope;

/// History of the root channel, in bytes of encoded envelopes.
pub const ROOT_HISTORY_BYTES: usize = 1024 * 1024;

struct Entry {
    envelope: ActionEnvelope,
    bytes: usize,
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

    /// Appends an envelope (`bytes` = its encoded size), evicting the oldest entries while
    /// over the cap. Envelopes must arrive in increasing `serverSeq` order.
    pub fn push(&mut self, envelope: ActionEnvelope, bytes: usize) {
        self.bytes += bytes;
        self.entries.push_back(Entry { envelope, bytes });
        while self.bytes > self.cap {
            let Some(old) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= old.bytes;
            self.floor = old.envelope.server_seq;
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
    ) -> impl Iterator<Item = (&'a ActionEnvelope, usize)> + 'a {
        let start = self
            .entries
            .partition_point(|e| e.envelope.server_seq <= seq);
        self.entries.range(start..).filter_map(move |e| {
            let visible = e.envelope.rejection_reason.is_none()
                || e.envelope
                    .origin
                    .as_ref()
                    .is_some_and(|o| o.client_id == client_id);
            visible.then_some((&e.envelope, e.bytes))
        })
    }

    /// Bytes currently held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::actions::{ActionOrigin, StateAction, TerminalDataAction};

    fn env(seq: u64, data: &str) -> ActionEnvelope {
        ActionEnvelope {
            channel: "t:/1".into(),
            action: StateAction::TerminalData(TerminalDataAction { data: data.into() }),
            server_seq: seq,
            origin: None,
            rejection_reason: None,
        }
    }

    #[test]
    fn eviction_moves_the_floor() {
        let mut h = History::new(25, 3);
        assert!(h.covers(3) && !h.covers(2));
        for seq in 4..=8 {
            h.push(env(seq, "x"), 10);
        }
        // 50 bytes pushed, cap 25: seqs 4, 5 and 6 evicted.
        assert_eq!(h.bytes(), 20);
        assert!(!h.covers(5));
        assert!(h.covers(6));
        let seqs: Vec<u64> = h.after(6, "c").map(|(e, _)| e.server_seq).collect();
        assert_eq!(seqs, [7, 8]);
        assert_eq!(h.after(8, "c").count(), 0);
    }

    #[test]
    fn rejections_replay_to_their_dispatcher_only() {
        let mut h = History::new(1000, 0);
        let mut rejected = env(1, "x");
        rejected.origin = Some(ActionOrigin {
            client_id: "a".into(),
            client_seq: 1,
        });
        rejected.rejection_reason = Some("no".into());
        h.push(rejected, 10);
        h.push(env(2, "y"), 10);
        assert_eq!(h.after(0, "a").count(), 2);
        assert_eq!(h.after(0, "b").count(), 1);
    }
}
