//! Resuming clients and reaping what they left behind: `reconnect` answers from the
//! per-channel histories (replay) or with snapshots, superseding other connections of the
//! same `clientId`; the orphan clock of each terminal follows its claim holder's presence and
//! [`Host::reap_orphans`] disposes terminals whose holder stayed away past the grace period.
//!
//! May touch: the store under the host lock, connections' outboxes (superseded ones are
//! closed), and removed terminals' `Pty` (the reaper kills them).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ahp_types::commands::{ReconnectResult, ReconnectSnapshotResult};

use super::channel::{self, ChannelKind};
use super::history::Entry;
use super::{ConnId, Host, HostError, Inner};
use crate::codec::{self, version, Wire};

/// Largest `reconnect` replay, in bytes of encoded envelopes; a longer one is answered with
/// snapshots instead, which are never larger than the retained state.
pub const MAX_REPLAY_BYTES: usize = 32 * 1024 * 1024;

/// A reaped terminal: its URI, claim holder and what is left to do.
type Expired = (String, String, super::Removed);

pub use crate::proto::close::CLOSE_SUPERSEDED;

/// Most `clientId`s remembered for replay; beyond it the one seen longest ago is forgotten.
pub const MAX_REMEMBERED_CLIENTS: usize = 1024;

/// How long a `clientId` without a live connection is remembered for replay.
pub const REMEMBER_CLIENTS_FOR: Duration = Duration::from_secs(24 * 60 * 60);

/// What a `reconnect` answers, gathered under the lock and encoded after it is released.
enum Answer {
    /// The retained envelopes after `lastSeenServerSeq`, and the channels that are gone.
    Replay(Vec<Entry>, Vec<String>),
    /// Fresh snapshots.
    Snapshot(ReconnectResult),
}

/// The `clientId`s seen recently — when they last presented themselves or last disconnected —
/// bounded in count and age, so that memory stays flat however many ids peers invent. A
/// forgotten client that reconnects gets -32008 and initializes again.
pub(super) struct RecentClients {
    /// Client id → (stamp, when last seen, the wire shapes it negotiated last).
    last_seen: HashMap<String, (u64, Instant, Wire)>,
    /// Stamp → client id, oldest first.
    order: BTreeMap<u64, String>,
    next_stamp: u64,
    cap: usize,
    max_age: Duration,
}

impl RecentClients {
    pub(super) fn new(cap: usize, max_age: Duration) -> Self {
        RecentClients {
            last_seen: HashMap::new(),
            order: BTreeMap::new(),
            next_stamp: 0,
            cap,
            max_age,
        }
    }

    /// Whether `client_id` was seen within the remembered age.
    pub(super) fn contains(&self, client_id: &str) -> bool {
        self.last_seen
            .get(client_id)
            .is_some_and(|(_, at, _)| at.elapsed() < self.max_age)
    }

    /// The wire shapes `client_id` negotiated last (the current ones if it is not remembered).
    pub(super) fn wire(&self, client_id: &str) -> Wire {
        match self.last_seen.get(client_id) {
            Some((_, at, wire)) if at.elapsed() < self.max_age => *wire,
            _ => Wire::default(),
        }
    }

    /// Records the wire shapes `client_id` negotiated (and that it was seen now).
    pub(super) fn set_wire(&mut self, client_id: &str, wire: Wire) {
        self.touch(client_id);
        if let Some(entry) = self.last_seen.get_mut(client_id) {
            entry.2 = wire;
        }
    }

    /// Records `client_id` as seen now, forgetting the oldest and the expired ones.
    pub(super) fn touch(&mut self, client_id: &str) {
        let now = Instant::now();
        self.next_stamp += 1;
        let stamp = self.next_stamp;
        match self.last_seen.get_mut(client_id) {
            Some(entry) => {
                self.order.remove(&entry.0);
                (entry.0, entry.1) = (stamp, now);
                self.order.insert(stamp, client_id.to_string());
            }
            None => {
                self.last_seen
                    .insert(client_id.to_string(), (stamp, now, Wire::default()));
                self.order.insert(stamp, client_id.to_string());
            }
        }
        let cap = self.cap;
        while let Some(entry) = self.order.first_entry() {
            let expired = self
                .last_seen
                .get(entry.get())
                .is_none_or(|(_, at, _)| now.duration_since(*at) >= self.max_age);
            if self.last_seen.len() <= cap && !expired {
                break;
            }
            let id = entry.remove();
            self.last_seen.remove(&id);
        }
    }

    /// Every remembered id, oldest first, with how long ago it was seen (milliseconds) and
    /// its wire shapes as an index of [`Wire::ALL`] (for a live upgrade's hand-over).
    pub(super) fn image(&self) -> Vec<(String, u64, u8)> {
        self.order
            .values()
            .filter_map(|id| {
                let (_, at, wire) = self.last_seen.get(id)?;
                let index = Wire::ALL.iter().position(|w| w == wire).unwrap_or(0);
                Some((id.clone(), at.elapsed().as_millis() as u64, index as u8))
            })
            .collect()
    }

    /// Remembers `client_id` as seen `age_ms` ago with wire shapes `wire` (an index of
    /// [`Wire::ALL`]); called oldest first, after an [`image`](Self::image).
    pub(super) fn restore(&mut self, client_id: &str, age_ms: u64, wire: u8) {
        let Some(at) = Instant::now().checked_sub(Duration::from_millis(age_ms)) else {
            return;
        };
        let wire = Wire::ALL
            .get(usize::from(wire))
            .copied()
            .unwrap_or_default();
        self.set_wire(client_id, wire);
        if let Some(entry) = self.last_seen.get_mut(client_id) {
            entry.1 = at;
        }
    }

    /// How many ids are remembered.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.last_seen.len()
    }
}

impl Host {
    /// `reconnect` (docs/protocol.md, "`reconnect`"): resumes `client_id` on this connection.
    ///
    /// The `clientId` and `subscriptions` are checked first as for `initialize` (an error is
    /// returned and nothing happens). A `clientId` that never presented itself to this daemon
    /// (e.g. one from before a restart, whose `last_seen` belongs to another process's
    /// sequence) cannot be resumed: the answer is not found (-32008), nothing changes, and the
    /// client is expected to `initialize` (as VS Code and the `ahp` runtime do); the return
    /// value is then `Ok(None)`.
    ///
    /// Otherwise, any other live connection of the same `clientId` is closed first (code
    /// [`CLOSE_SUPERSEDED`]) and loses its subscriptions. If every requested channel that still
    /// exists has retained every envelope after `last_seen` (and the replay fits in
    /// [`MAX_REPLAY_BYTES`]), the answer is `{"type":"replay","actions":[…],"missing":[…]}` with
    /// exactly those envelopes in `serverSeq` order (a rejected one only if this client
    /// dispatched it); otherwise `{"type":"snapshot","snapshots":[…]}` with fresh snapshots.
    /// Channels that no longer exist are listed in `missing` (replay) or left out (snapshot).
    /// Either way the surviving subscriptions are live on this connection, atomically with the
    /// answer queued by `respond` (given the result as JSON text in the shapes of the protocol
    /// version the `clientId` negotiated last, and that version, returned too, for the
    /// connection's later answers).
    pub fn reconnect(
        &self,
        conn: ConnId,
        client_id: String,
        last_seen: i64,
        subscriptions: &[String],
        respond: impl FnOnce(Result<(&str, Wire), HostError>) -> String,
    ) -> Result<Option<Wire>, HostError> {
        let subscriptions = self.check_handshake(&client_id, "subscriptions", subscriptions)?;
        // Which channels exist, looked up outside one long lock hold; re-checked below.
        let exists = self.existing(&subscriptions);
        let mut inner = self.lock();
        if !inner.seen_clients.contains(&client_id) {
            tracing::info!(conn, %client_id, "reconnect refused: unknown client");
            let text = respond(Err(HostError::not_found(format!(
                "reconnect: client {client_id:?} is not known to this ahpty process (it \
                 restarted or forgot the client); call initialize instead"
            ))));
            inner.send(conn, text);
            return Ok(None);
        }
        let others: Vec<ConnId> = inner
            .connections
            .iter()
            .filter(|(id, c)| **id != conn && c.client_id.as_deref() == Some(client_id.as_str()))
            .map(|(id, _)| *id)
            .collect();
        for other in others {
            if let Some(c) = inner.connections.get(&other) {
                c.outbox.close(
                    CLOSE_SUPERSEDED,
                    "this clientId reconnected on another connection",
                );
            }
            inner.drop_connection(other);
            tracing::info!(conn = other, %client_id, "connection superseded by a reconnect");
        }
        inner.set_client(conn, client_id.clone());
        let wire = inner.restore_wire(conn, &client_id);
        let mut live: Vec<String> = Vec::new();
        let mut missing: Vec<String> = Vec::new();
        for (&uri, existed) in subscriptions.iter().zip(exists) {
            // Channels beyond the subscription limit are treated as missing.
            let exists = existed && (uri == channel::ROOT || inner.terminals.contains_key(uri));
            if exists && live.len() < inner.max_subscriptions {
                live.push(uri.to_string());
            } else {
                missing.push(uri.to_string());
            }
        }
        let replayable = u64::try_from(last_seen)
            .ok()
            .filter(|&s| s <= inner.server_seq)
            .filter(|&s| live.iter().all(|c| inner.covers(c, s)));
        let mut replay = None;
        if let Some(seen) = replayable {
            let mut actions = Vec::new();
            let mut bytes = 0;
            for uri in &live {
                let history = if uri == channel::ROOT {
                    &inner.root_history
                } else {
                    match inner.terminals.get(uri) {
                        Some(t) => &t.history,
                        None => continue,
                    }
                };
                for (envelope, size) in history.after(seen, &client_id) {
                    bytes += size;
                    actions.push(envelope.clone());
                }
            }
            if bytes <= MAX_REPLAY_BYTES {
                actions.sort_by_key(|e| e.server_seq);
                replay = Some(actions);
            }
        }
        let (answer, kind) = match replay {
            Some(actions) => {
                for uri in &live {
                    inner.add_subscriber(conn, uri);
                }
                let kind = format!("replay of {} actions", actions.len());
                (Answer::Replay(actions, missing), kind)
            }
            None => {
                let snapshots: Vec<_> = live
                    .iter()
                    .filter_map(|uri| {
                        let kind = if uri == channel::ROOT {
                            ChannelKind::Root
                        } else {
                            ChannelKind::Terminal
                        };
                        inner.subscribe(conn, uri, kind).ok()
                    })
                    .collect();
                let kind = format!("{} snapshots", snapshots.len());
                let result = ReconnectResult::Snapshot(ReconnectSnapshotResult { snapshots });
                (Answer::Snapshot(result), kind)
            }
        };
        tracing::info!(conn, %client_id, last_seen, "client reconnected: {kind}");
        self.answer(inner, conn, move || {
            let json = match answer {
                Answer::Replay(actions, missing) => {
                    // Retained envelopes go out as they were sent (translated only for a
                    // pre-0.9 client, where their shapes differ).
                    let envelopes: Vec<_> = actions
                        .iter()
                        .map(|e| version::envelope_for(e.envelope_json(), wire))
                        .collect();
                    codec::replay_result(envelopes.iter().map(|e| e.as_ref()), &missing)
                }
                Answer::Snapshot(result) => version::reconnect_result_json(&result, wire),
            };
            respond(Ok((&json, wire)))
        });
        Ok(Some(wire))
    }

    /// Disposes the terminals whose claim holder has had no live connection for longer than
    /// the configured orphan grace, sleeping until the next orphan's deadline (or until an
    /// orphan clock starts); returns at once when reaping is disabled. Runs until the host
    /// shuts down.
    pub async fn reap_orphans(self: Arc<Self>) {
        let Some(grace) = self.config.orphan_grace else {
            return;
        };
        loop {
            let notified = self.flow.reaper.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (expired, next): (Vec<Expired>, Option<tokio::time::Instant>) = {
                let mut inner = self.lock();
                if inner.shutting_down {
                    return;
                }
                let uris: Vec<String> = inner
                    .terminals
                    .iter()
                    .filter(|(_, t)| t.orphaned_since.is_some_and(|s| s.elapsed() >= grace))
                    .map(|(uri, _)| uri.clone())
                    .collect();
                let expired = uris
                    .into_iter()
                    .filter_map(|uri| {
                        let t = inner.remove_terminal(&uri)?;
                        let holder = t.holder.clone();
                        Some((uri, holder, inner.removed(t)))
                    })
                    .collect();
                let next = inner
                    .terminals
                    .values()
                    .filter_map(|t| t.orphaned_since)
                    .min()
                    .map(|s| s + grace);
                (expired, next)
            };
            for (uri, holder, removed) in expired {
                tracing::info!(
                    terminal = %uri,
                    %holder,
                    grace_secs = grace.as_secs_f64(),
                    "reaping terminal: its claim holder has been disconnected longer than the orphan grace"
                );
                self.kill(removed).await;
            }
            match next {
                Some(at) => {
                    tokio::select! {
                        _ = &mut notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }
}

impl Inner {
    /// Starts or stops each terminal's orphan clock after presence or ownership changed.
    pub(super) fn refresh_orphans(&mut self) {
        let now = tokio::time::Instant::now();
        for t in self.terminals.values_mut() {
            if self.clients.contains_key(&t.holder) {
                t.orphaned_since = None;
            } else if t.orphaned_since.is_none() {
                t.orphaned_since = Some(now);
                self.flow.reaper.notify_one();
            }
        }
    }

    /// Whether every envelope after `seq` on `channel` is retained.
    pub(super) fn covers(&self, channel: &str, seq: u64) -> bool {
        if channel == channel::ROOT {
            self.root_history.covers(seq)
        } else {
            self.terminals
                .get(channel)
                .is_some_and(|t| t.history.covers(seq))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_clients_are_bounded_in_count_and_age() {
        let mut r = RecentClients::new(3, Duration::from_secs(3600));
        for id in ["a", "b", "c", "d"] {
            r.touch(id);
        }
        assert_eq!(r.len(), 3);
        assert!(!r.contains("a") && r.contains("b") && r.contains("d"));
        // Seeing "b" again makes "c" the oldest.
        r.touch("b");
        r.touch("e");
        assert!(r.contains("b") && !r.contains("c"));
        assert_eq!(r.len(), 3);

        let mut r = RecentClients::new(10, Duration::ZERO);
        r.touch("x");
        assert!(!r.contains("x"));
        r.touch("y");
        assert_eq!(r.len(), 0, "expired ids are forgotten");
    }
}
