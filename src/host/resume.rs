//! Resuming clients and reaping what they left behind: `reconnect` answers from the
//! per-channel histories (replay) or with snapshots, superseding other connections of the
//! same `clientId`; the orphan clock of each terminal follows its claim holder's presence and
//! [`Host::reap_orphans`] disposes terminals whose holder stayed away past the grace period.

use std::sync::Arc;
use std::time::Instant;

use ahp_types::commands::{ReconnectResult, ReconnectSnapshotResult};

use super::{channel, ConnId, Host, Inner};
use crate::rpc::frame;
use crate::terminal::PtyProcess;

/// Largest `reconnect` replay, in bytes of encoded envelopes; a longer one is answered with
/// snapshots instead, which are never larger than the retained state.
pub const MAX_REPLAY_BYTES: usize = 32 * 1024 * 1024;

/// A reaped terminal: its URI, claim holder and process.
type Expired = (String, String, Arc<PtyProcess>);

/// WebSocket close code sent to a connection whose `clientId` reconnected elsewhere.
pub const CLOSE_SUPERSEDED: u16 = 4000;

impl Host {
    /// `reconnect` (notes §4): resumes `client_id` on this connection.
    ///
    /// Any other live connection of the same `clientId` is closed first (code
    /// [`CLOSE_SUPERSEDED`]) and loses its subscriptions. If the `clientId` presented itself
    /// to this daemon before, and every requested channel that still
    /// exists has retained every envelope after `last_seen` (and the replay fits in
    /// [`MAX_REPLAY_BYTES`]), the answer is `{"type":"replay","actions":[…],"missing":[…]}` with
    /// exactly those envelopes in `serverSeq` order (a rejected one only if this client
    /// dispatched it); otherwise `{"type":"snapshot","snapshots":[…]}` with fresh snapshots.
    /// Channels that no longer exist are listed in `missing` (replay) or left out (snapshot).
    /// Either way the surviving subscriptions are live on this connection, atomically with the
    /// answer queued by `respond` (given the result as JSON text).
    pub fn reconnect(
        &self,
        conn: ConnId,
        client_id: String,
        last_seen: i64,
        subscriptions: &[String],
        respond: impl FnOnce(&str) -> String,
    ) {
        let mut inner = self.lock();
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
        let known = inner.seen_clients.contains(&client_id);
        inner.set_client(conn, client_id.clone());
        let mut live: Vec<String> = Vec::new();
        let mut missing: Vec<String> = Vec::new();
        for uri in subscriptions {
            if live.contains(uri) || missing.contains(uri) {
                continue;
            }
            // Channels beyond the subscription limit are treated as missing.
            let exists = uri == channel::ROOT || inner.terminals.contains_key(uri);
            if exists && live.len() < inner.max_subscriptions {
                live.push(uri.clone());
            } else {
                missing.push(uri.clone());
            }
        }
        let replayable = u64::try_from(last_seen)
            .ok()
            .filter(|_| known)
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
        let (result, kind) = match replay {
            Some(actions) => {
                for uri in &live {
                    inner.add_subscriber(conn, uri);
                }
                // The retained envelopes are replayed as they were sent, not re-encoded.
                let kind = format!("replay of {} actions", actions.len());
                let json =
                    frame::replay_result(actions.iter().map(|e| e.envelope_json()), &missing);
                (json, kind)
            }
            None => {
                let snapshots: Vec<_> = live
                    .iter()
                    .filter_map(|uri| inner.subscribe(conn, uri).ok())
                    .collect();
                let kind = format!("{} snapshots", snapshots.len());
                let result = ReconnectResult::Snapshot(ReconnectSnapshotResult { snapshots });
                (serde_json::to_string(&result).unwrap_or_default(), kind)
            }
        };
        tracing::info!(conn, %client_id, last_seen, "client reconnected: {kind}");
        let text = respond(&result);
        inner.send(conn, text);
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
            let (expired, next): (Vec<Expired>, Option<Instant>) = {
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
                        Some((uri, t.holder, t.process))
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
            for (uri, holder, process) in expired {
                tracing::info!(
                    terminal = %uri,
                    %holder,
                    grace_secs = grace.as_secs_f64(),
                    "reaping terminal: its claim holder has been disconnected longer than the orphan grace"
                );
                self.kill(process).await;
            }
            match next {
                Some(at) => {
                    tokio::select! {
                        _ = &mut notified => {}
                        _ = tokio::time::sleep_until(at.into()) => {}
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
        let now = Instant::now();
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
