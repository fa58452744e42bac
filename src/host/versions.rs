//! Which protocol version each connection and each `clientId` speaks, as far as the store
//! needs to know: envelopes are encoded per connection (`codec::version::Encodings`) and a
//! `reconnect` is answered in the version its `clientId` negotiated last (remembered with the
//! client itself, see `resume::RecentClients`, so it is bounded and expires the same way). The
//! translation itself lives in `codec::version`; this file only keeps the bookkeeping.
//!
//! May touch: the per-connection version records in the store; no I/O.

use super::{ConnId, Host, Inner};
use crate::codec::Wire;

impl Host {
    /// Records the version `conn` negotiated in `initialize` for `client_id`, before the
    /// handshake subscribes it to anything: every envelope it receives from now on is encoded
    /// for `wire`.
    pub fn set_wire(&self, conn: ConnId, client_id: &str, wire: Wire) {
        let mut inner = self.lock();
        if let Some(c) = inner.connections.get_mut(&conn) {
            c.wire = wire;
        }
        inner.seen_clients.set_wire(client_id, wire);
    }
}

impl Inner {
    /// The shapes a connection's envelopes are encoded in.
    pub(super) fn wire_of(&self, conn: ConnId) -> Wire {
        self.connections
            .get(&conn)
            .map(|c| c.wire)
            .unwrap_or_default()
    }

    /// For `reconnect`: gives `conn` the version its `client_id` negotiated last.
    pub(super) fn restore_wire(&mut self, conn: ConnId, client_id: &str) -> Wire {
        let wire = self.seen_clients.wire(client_id);
        if let Some(c) = self.connections.get_mut(&conn) {
            c.wire = wire;
        }
        wire
    }
}
