//! Flow control: when a terminal stops reading its pty, and when a connection that does not
//! keep up is closed. Every watermark, limit and timer of it is here; `outbox.rs` keeps the
//! per-connection accounting and wake-ups this is built on, `pump.rs` applies the decision to
//! each terminal, and [`Host::watch_stalls`] closes connections. Nothing is ever dropped from a
//! connection that stays open.
//!
//! # The policy
//!
//! A connection's queue counts the bytes not yet written to its socket. It is *congested* from
//! when the queue passes [`HIGH_WATERMARK_BYTES`] until it is back under
//! [`LOW_WATERMARK_BYTES`]: one *episode*. For each terminal, each congested subscriber may
//! *hold* it — stop it from reading its pty, so the program blocks in `write` as on a slow
//! serial line:
//!
//! - **Nobody keeps up** (one subscriber, or every subscriber congested): the congested
//!   subscribers hold the terminal until one of them drains. A connection congested for longer
//!   than `--stall-timeout` (default 30 s) is closed with [`CLOSE_STALLED`] (4001).
//! - **Somebody keeps up**: a congested subscriber holds the terminal only for its *grace*
//!   (`--lag-grace`, default 250 ms, counted from the start of its episode), and only if it had
//!   kept up for at least [`GRACE_REARM`] before the episode began — a hiccup of a healthy
//!   viewer, not a slow or freshly reconnected one. After that it is *lagging*: the terminal
//!   runs on at the pace of those who keep up, and the lagging connection's queue grows with
//!   the envelopes it has not read yet (shared bytes, see `outbox.rs`).
//! - A lagging connection whose queue passes `--lag-limit-bytes` (default 8 MiB), or that
//!   stays lagging for `--lag-timeout` (default 10 s), is closed with [`CLOSE_LAGGING`] (4002)
//!   and a reason, and logged. Its client resumes with `reconnect`: a replay from the
//!   terminal's history if it still covers the gap, else a snapshot.
//! - A terminal without subscribers is never held. Lagging ends with the episode: a connection
//!   that catches up (under the low watermark) is an ordinary subscriber again.
//! - Input echoes: input to a terminal is refused while a subscriber that holds it has
//!   [`HARD_LIMIT_BYTES`] unread ([`input_blocker`]); a subscriber that does not hold it
//!   is lagging, bounded by the lag limit instead.
//!
//! # Wake-ups
//!
//! Nothing here polls. A held terminal registers with the connections it waits for and is
//! woken when one of *its own* subscribers' episode ends, when its subscribers change, or when
//! the nearest grace ends. The watchdog sleeps until the nearest stall or lag deadline, and is
//! woken early when an episode or a lag starts, or a lag limit is hit.
//!
//! May touch: the outboxes' flow state and the host lock (the watchdog closes connections);
//! no I/O.

use std::collections::{btree_set, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::outbox::{FlowState, Outbox, OutboxReceiver, OutboxRef};
use super::{ConnId, Host, Inner};
use crate::config::Config;

/// Queued bytes above which a connection is congested.
pub const HIGH_WATERMARK_BYTES: usize = 1024 * 1024;

/// Queued bytes under which a congested connection's episode ends.
pub const LOW_WATERMARK_BYTES: usize = 256 * 1024;

/// Queued bytes at which a connection's socket is no longer read at all, and input to the
/// terminals it holds is refused: a holding connection's output is paused at the high
/// watermark, so only echoes of other clients' input (or answers to its own requests) can push
/// its queue this far.
pub const HARD_LIMIT_BYTES: usize = 4 * 1024 * 1024;

/// A congested subscriber gets its grace only if it had kept up (no episode) for this long
/// before the episode began.
pub const GRACE_REARM: Duration = Duration::from_secs(1);

pub use crate::proto::close::{CLOSE_LAGGING, CLOSE_STALLED};

/// The flow-control settings (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// A connection congested this long is closed (4001); `None` never.
    pub stall_timeout: Option<Duration>,
    /// How long a congested subscriber may hold a terminal others keep up with.
    pub lag_grace: Duration,
    /// A connection lagging this long is closed (4002); `None` never.
    pub lag_timeout: Option<Duration>,
    /// A lagging connection whose queue passes this many bytes is closed (4002).
    pub lag_limit: usize,
}

impl Policy {
    /// The settings of `config`.
    pub fn of(config: &Config) -> Policy {
        Policy {
            stall_timeout: config.stall_timeout,
            lag_grace: config.lag_grace,
            lag_timeout: config.lag_timeout,
            lag_limit: config.lag_limit_bytes,
        }
    }
}

/// Flow control shared by the host, its inner state and every outbox.
#[derive(Debug)]
pub(crate) struct Flow {
    pub policy: Policy,
    /// Wakes [`Host::watch_stalls`].
    pub watchdog: Notify,
    /// Wakes [`Host::reap_orphans`] (an orphan clock started).
    pub reaper: Notify,
}

impl Flow {
    pub fn new(config: &Config) -> Arc<Flow> {
        Arc::new(Flow {
            policy: Policy::of(config),
            watchdog: Notify::new(),
            reaper: Notify::new(),
        })
    }
}

/// What a terminal's pump does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Read the pty.
    Open,
    /// Do not read it; wait for the terminal's wake-up, or until `until` (a grace ends).
    Shut { until: Option<Instant> },
}

/// When the grace of the episode in `f` ends (its start if it gets none).
fn grace_end(policy: &Policy, f: &FlowState) -> Option<Instant> {
    let since = f.congested_since?;
    let rested = since.saturating_duration_since(f.calm_since) >= GRACE_REARM;
    Some(if rested {
        since + policy.lag_grace
    } else {
        since
    })
}

/// The decision for a terminal whose subscribers' queues are `subscribers`, at `now` (see the
/// module docs). Registers `wake` (the terminal's) with every congested subscriber, and marks
/// subscribers lagging when the terminal runs on without them.
pub(crate) fn gate<'a>(
    policy: &Policy,
    now: Instant,
    subscribers: impl IntoIterator<Item = &'a OutboxRef>,
    wake: &Arc<Notify>,
) -> Gate {
    let mut keeping_up = false;
    let mut holders: Vec<(&OutboxRef, Instant)> = Vec::new();
    for o in subscribers {
        if o.is_killed() {
            continue;
        }
        if !o.is_congested() {
            keeping_up = true;
            continue;
        }
        match o.wake_on_drain(wake, |f| grace_end(policy, f)).flatten() {
            Some(end) => holders.push((o, end)),
            None => keeping_up = true,
        }
    }
    if holders.is_empty() {
        return Gate::Open;
    }
    if !keeping_up {
        return Gate::Shut { until: None };
    }
    match holders.iter().map(|h| h.1).filter(|&end| now < end).min() {
        Some(until) => Gate::Shut { until: Some(until) },
        None => {
            for (o, _) in holders {
                o.mark_lagging(now);
            }
            Gate::Open
        }
    }
}

/// Whether a subscriber holding a terminal (see [`gate`]) has [`HARD_LIMIT_BYTES`] unread:
/// its queued bytes if so. A subscriber over that limit that no longer holds the terminal is
/// marked lagging instead (its lag limit bounds it).
pub(crate) fn input_blocker<'a>(
    policy: &Policy,
    now: Instant,
    subscribers: impl IntoIterator<Item = &'a OutboxRef> + Clone,
) -> Option<usize> {
    let keeping_up = subscribers
        .clone()
        .into_iter()
        .any(|o| !o.is_killed() && !o.is_congested());
    for o in subscribers {
        let queued = o.queued_bytes();
        if queued < HARD_LIMIT_BYTES || o.is_killed() {
            continue;
        }
        let in_grace = o
            .with_flow(|f| grace_end(policy, f))
            .is_some_and(|end| now < end);
        if !keeping_up || in_grace {
            return Some(queued);
        }
        o.mark_lagging(now);
    }
    None
}

/// What the watchdog does with one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Keep it; look again at the deadline, if any.
    Keep(Option<Instant>),
    /// Close it with this code and reason.
    Close(u16, String),
}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s:.1}")
    }
}

/// The watchdog's decision for the connection whose queue is `o`, at `now`.
pub(crate) fn verdict(policy: &Policy, now: Instant, o: &OutboxRef) -> Verdict {
    if o.is_killed() {
        return Verdict::Keep(None);
    }
    if o.is_over_limit() {
        return Verdict::Close(
            CLOSE_LAGGING,
            format!(
                "lagging: {} bytes unread while other viewers kept up; reconnect to resume",
                o.queued_bytes()
            ),
        );
    }
    let (since, lagging) = o.with_flow(|f| (f.congested_since, f.lagging_since));
    let mut next: Option<Instant> = None;
    if let (Some(since), Some(timeout)) = (since, policy.stall_timeout) {
        let at = since + timeout;
        if now >= at {
            return Verdict::Close(
                CLOSE_STALLED,
                format!("stalled: output not read for {} s", secs(timeout)),
            );
        }
        next = Some(at);
    }
    if let (Some(lagging), Some(timeout)) = (lagging, policy.lag_timeout) {
        let at = lagging + timeout;
        if now >= at {
            return Verdict::Close(
                CLOSE_LAGGING,
                format!(
                    "lagging: {} s behind the other viewers; reconnect to resume",
                    secs(timeout)
                ),
            );
        }
        next = Some(next.map_or(at, |n| n.min(at)));
    }
    Verdict::Keep(next)
}

/// A terminal's subscribers; any change wakes the terminal's pump (a paused terminal may be
/// free to run).
#[derive(Debug)]
pub(crate) struct Subscribers {
    set: BTreeSet<ConnId>,
    /// The terminal's wake-up (see the module docs).
    pub wake: Arc<Notify>,
}

impl Subscribers {
    pub fn new(wake: Arc<Notify>) -> Subscribers {
        Subscribers {
            set: BTreeSet::new(),
            wake,
        }
    }

    pub fn insert(&mut self, conn: ConnId) -> bool {
        let added = self.set.insert(conn);
        if added {
            self.wake.notify_one();
        }
        added
    }

    pub fn remove(&mut self, conn: &ConnId) -> bool {
        let removed = self.set.remove(conn);
        if removed {
            self.wake.notify_one();
        }
        removed
    }

    pub fn iter(&self) -> btree_set::Iter<'_, ConnId> {
        self.set.iter()
    }
}

impl<'a> IntoIterator for &'a Subscribers {
    type Item = &'a ConnId;
    type IntoIter = btree_set::Iter<'a, ConnId>;
    fn into_iter(self) -> Self::IntoIter {
        self.set.iter()
    }
}

impl Inner {
    /// The queues of `subscribers` that are still connected.
    pub(super) fn queues<'a>(
        &'a self,
        subscribers: &'a Subscribers,
    ) -> impl Iterator<Item = &'a OutboxRef> + Clone + 'a {
        subscribers
            .iter()
            .filter_map(|c| self.connections.get(c))
            .map(|c| c.outbox.watch())
    }

    /// The gate of terminal `uri` now (see [`gate`]); `None` if it is gone.
    pub(super) fn gate(&self, uri: &str) -> Option<Gate> {
        let t = self.terminals.get(uri)?;
        Some(gate(
            &self.flow.policy,
            Instant::now(),
            self.queues(&t.subscribers),
            &t.subscribers.wake,
        ))
    }
}

impl Host {
    /// A new outbound queue for a connection, under the host's flow control.
    pub fn new_outbox(&self) -> (Outbox, OutboxReceiver) {
        Outbox::new(self.flow.clone())
    }

    /// The gate of the terminal at `uri` numbered `serial`; `None` if it is gone.
    pub(crate) fn gate(&self, uri: &str, serial: u64) -> Option<Gate> {
        let inner = self.lock();
        inner.terminals.get(uri).filter(|t| t.serial == serial)?;
        inner.gate(uri)
    }

    /// Closes connections according to the policy (see the module docs): stalled ones with
    /// [`CLOSE_STALLED`], lagging ones with [`CLOSE_LAGGING`], logged at warn level; their
    /// subscriptions are dropped at once, so the terminals they held resume. The client may
    /// `reconnect`. Sleeps until the nearest deadline or until woken; runs until the host
    /// shuts down.
    pub async fn watch_stalls(self: Arc<Self>) {
        let policy = self.flow.policy;
        loop {
            let notified = self.flow.watchdog.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let next = {
                let mut inner = self.lock();
                if inner.shutting_down {
                    return;
                }
                let now = Instant::now();
                let mut next: Option<Instant> = None;
                let mut doomed = Vec::new();
                for (id, c) in &inner.connections {
                    match verdict(&policy, now, c.outbox.watch()) {
                        Verdict::Keep(at) => {
                            next = match (next, at) {
                                (Some(n), Some(a)) => Some(n.min(a)),
                                (n, a) => n.or(a),
                            }
                        }
                        Verdict::Close(code, reason) => doomed.push((*id, code, reason)),
                    }
                }
                for (conn, code, reason) in doomed {
                    if let Some(c) = inner.connections.get(&conn) {
                        let client_id = c.client_id.as_deref().unwrap_or("?");
                        let queued_bytes = c.outbox.queued_bytes();
                        if code == CLOSE_STALLED {
                            tracing::warn!(
                                conn,
                                client_id,
                                queued_bytes,
                                "closing a stalled connection: it has not read its output for \
                                 {:?} ({reason})",
                                policy.stall_timeout.unwrap_or_default()
                            );
                        } else {
                            tracing::warn!(
                                conn,
                                client_id,
                                queued_bytes,
                                "closing a lagging connection: it fell behind while other \
                                 viewers kept up ({reason})"
                            );
                        }
                        c.outbox.kill(code, reason);
                    }
                    inner.drop_connection(conn);
                }
                next
            };
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

#[cfg(test)]
mod tests {
    //! The policy on fake queues: outboxes filled and drained by hand, paused tokio time.
    use super::*;
    use crate::host::outbox::Outgoing;

    const GRACE: Duration = Duration::from_millis(250);

    fn policy() -> Policy {
        Policy {
            stall_timeout: Some(Duration::from_secs(30)),
            lag_grace: GRACE,
            lag_timeout: Some(Duration::from_secs(10)),
            lag_limit: 8 * 1024 * 1024,
        }
    }

    struct Conn {
        outbox: Outbox,
        rx: OutboxReceiver,
    }

    impl Conn {
        fn new(flow: &Arc<Flow>) -> Conn {
            let (outbox, rx) = Outbox::new(flow.clone());
            Conn { outbox, rx }
        }
        fn queue(&self, bytes: usize) {
            self.outbox.send("x".repeat(bytes));
        }
        /// Writes everything queued.
        fn drain(&mut self) {
            while let Some(Outgoing::Text(t)) = self.rx.try_recv() {
                self.rx.written(t.len());
            }
        }
        fn q(&self) -> &OutboxRef {
            self.outbox.watch()
        }
    }

    fn flow() -> Arc<Flow> {
        Arc::new(Flow {
            policy: policy(),
            watchdog: Notify::new(),
            reaper: Notify::new(),
        })
    }

    fn gate_of(conns: &[&Conn], wake: &Arc<Notify>) -> Gate {
        gate(&policy(), Instant::now(), conns.iter().map(|c| c.q()), wake)
    }

    const OVER: usize = HIGH_WATERMARK_BYTES + 1;

    #[tokio::test(start_paused = true)]
    async fn no_subscribers_or_nobody_congested_never_pauses() {
        let f = flow();
        let wake = Arc::new(Notify::new());
        assert_eq!(gate_of(&[], &wake), Gate::Open);
        let a = Conn::new(&f);
        a.queue(HIGH_WATERMARK_BYTES);
        assert_eq!(gate_of(&[&a], &wake), Gate::Open);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_congested_subscriber_pauses_until_it_drains() {
        let f = flow();
        let wake = Arc::new(Notify::new());
        let mut a = Conn::new(&f);
        tokio::time::advance(GRACE_REARM).await;
        a.queue(OVER);
        assert_eq!(gate_of(&[&a], &wake), Gate::Shut { until: None });
        // Long past any grace: still paused, never lagging (nobody keeps up).
        tokio::time::advance(Duration::from_secs(20)).await;
        assert_eq!(gate_of(&[&a], &wake), Gate::Shut { until: None });
        assert!(!a.q().is_lagging());
        // Draining under the low watermark wakes the terminal and opens the gate.
        a.drain();
        wake.notified().await;
        assert_eq!(gate_of(&[&a], &wake), Gate::Open);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hiccup_beside_a_healthy_viewer_holds_only_for_the_grace() {
        let f = flow();
        let wake = Arc::new(Notify::new());
        let fast = Conn::new(&f);
        let slow = Conn::new(&f);
        tokio::time::advance(GRACE_REARM).await;
        slow.queue(OVER);
        let start = Instant::now();
        assert_eq!(
            gate_of(&[&fast, &slow], &wake),
            Gate::Shut {
                until: Some(start + GRACE)
            }
        );
        tokio::time::advance(GRACE).await;
        assert_eq!(gate_of(&[&fast, &slow], &wake), Gate::Open);
        assert!(slow.q().is_lagging());
        // Lagging, it no longer holds the terminal, even once the fast one is congested too
        // … except that then nobody keeps up, and everybody holds it.
        assert_eq!(gate_of(&[&fast, &slow], &wake), Gate::Open);
        fast.queue(OVER);
        assert_eq!(gate_of(&[&fast, &slow], &wake), Gate::Shut { until: None });
    }

    #[tokio::test(start_paused = true)]
    async fn no_grace_for_a_viewer_that_was_not_keeping_up() {
        let f = flow();
        let wake = Arc::new(Notify::new());
        let fast = Conn::new(&f);
        // Congested right after connecting (e.g. a reconnect into a flood): no grace.
        let slow = Conn::new(&f);
        slow.queue(OVER);
        assert_eq!(gate_of(&[&fast, &slow], &wake), Gate::Open);
        assert!(slow.q().is_lagging());
        // It catches up: lagging ends with the episode. A new episode right after gets no
        // grace either; one after a second of keeping up does.
        let mut slow = slow;
        slow.drain();
        assert!(!slow.q().is_lagging());
        slow.queue(OVER);
        assert_eq!(gate_of(&[&fast, &slow], &wake), Gate::Open);
        slow.drain();
        tokio::time::advance(GRACE_REARM).await;
        slow.queue(OVER);
        assert!(matches!(
            gate_of(&[&fast, &slow], &wake),
            Gate::Shut { until: Some(_) }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn lagging_connections_are_closed_at_the_limit_or_after_the_timeout() {
        let f = flow();
        let p = policy();
        let wake = Arc::new(Notify::new());
        let fast = Conn::new(&f);
        let slow = Conn::new(&f);
        slow.queue(OVER);
        assert_eq!(gate_of(&[&fast, &slow], &wake), Gate::Open);
        let lagging_at = Instant::now();
        assert_eq!(
            verdict(&p, Instant::now(), slow.q()),
            Verdict::Keep(Some(lagging_at + Duration::from_secs(10)))
        );
        // Just before the lag timeout: kept; at it: closed with 4002.
        tokio::time::advance(Duration::from_millis(9_999)).await;
        assert!(matches!(
            verdict(&p, Instant::now(), slow.q()),
            Verdict::Keep(_)
        ));
        tokio::time::advance(Duration::from_millis(1)).await;
        match verdict(&p, Instant::now(), slow.q()) {
            Verdict::Close(code, reason) => {
                assert_eq!(code, CLOSE_LAGGING);
                assert!(reason.starts_with("lagging: 10 s behind"), "{reason}");
            }
            v => panic!("{v:?}"),
        }
        // Another one passes the byte limit: flagged at once, and the watchdog is woken.
        let other = Conn::new(&f);
        other.queue(OVER);
        assert_eq!(gate_of(&[&fast, &other], &wake), Gate::Open);
        use futures_util::FutureExt;
        let _ = f.watchdog.notified().now_or_never(); // a permit left by earlier episodes
        let woken = f.watchdog.notified();
        other.queue(p.lag_limit);
        woken.await;
        match verdict(&p, Instant::now(), other.q()) {
            Verdict::Close(code, reason) => {
                assert_eq!(code, CLOSE_LAGGING);
                assert!(reason.contains("bytes unread"), "{reason}");
            }
            v => panic!("{v:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_connection_is_closed_after_the_stall_timeout() {
        let f = flow();
        let p = policy();
        let a = Conn::new(&f);
        a.queue(OVER);
        let since = Instant::now();
        assert_eq!(
            verdict(&p, since, a.q()),
            Verdict::Keep(Some(since + Duration::from_secs(30)))
        );
        tokio::time::advance(Duration::from_secs(30)).await;
        match verdict(&p, Instant::now(), a.q()) {
            Verdict::Close(code, reason) => {
                assert_eq!(code, CLOSE_STALLED);
                assert_eq!(reason, "stalled: output not read for 30 s");
            }
            v => panic!("{v:?}"),
        }
        // Not congested: nothing to watch.
        let b = Conn::new(&f);
        assert_eq!(verdict(&p, Instant::now(), b.q()), Verdict::Keep(None));
    }

    #[tokio::test(start_paused = true)]
    async fn input_is_refused_only_while_a_full_queue_holds_the_terminal() {
        let f = flow();
        let p = policy();
        let fast = Conn::new(&f);
        let slow = Conn::new(&f);
        slow.queue(HARD_LIMIT_BYTES);
        // Alone: it holds the terminal, input is refused.
        assert_eq!(
            input_blocker(&p, Instant::now(), [slow.q()]),
            Some(HARD_LIMIT_BYTES)
        );
        // Beside a healthy viewer (and without grace): it is lagging, input goes through.
        assert_eq!(
            input_blocker(&p, Instant::now(), [fast.q(), slow.q()]),
            None
        );
        assert!(slow.q().is_lagging());
    }

    #[tokio::test(start_paused = true)]
    async fn the_watchdog_closes_a_stalled_connection_at_its_deadline() {
        let config = Config {
            stall_timeout: Some(Duration::from_secs(30)),
            ..Config::default()
        };
        let host = Host::new(&config);
        let (outbox, rx) = host.new_outbox();
        let killed = rx.kill_signal();
        host.connect(outbox.clone());
        tokio::spawn(host.clone().watch_stalls());
        outbox.send("x".repeat(OVER));
        // Paused time jumps to the next timer whenever every task sleeps: the connection must
        // be closed at its deadline, not before.
        let early = tokio::time::timeout(Duration::from_millis(29_990), killed.killed()).await;
        assert!(early.is_err(), "closed before the stall timeout: {early:?}");
        let (code, reason) = killed.killed().await;
        assert_eq!(code, CLOSE_STALLED);
        assert_eq!(reason, "stalled: output not read for 30 s");
    }

    #[tokio::test(start_paused = true)]
    async fn subscriber_changes_wake_the_terminal() {
        let wake = Arc::new(Notify::new());
        let mut s = Subscribers::new(wake.clone());
        assert!(s.insert(7));
        wake.notified().await;
        assert!(!s.insert(7));
        assert!(s.remove(&7));
        wake.notified().await;
    }
}
