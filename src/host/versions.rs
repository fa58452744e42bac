//! Which protocol version each connection and each `clientId` speaks, as far as the store
//! needs to know: envelopes are encoded per connection (`rpc::version::Encodings`) and a
//! `reconnect` is answered in the version its `clientId` negotiated last. The translation
//! itself lives in `rpc::version`; this file only keeps the bookkeeping.

use super::{ConnId, Host, Inner};
use crate::rpc::version::Wire;

/// Most `clientId`s of pre-0.9 versions remembered for `reconnect`. When full, clients without
/// a live connection are forgotten (their next `reconnect` gets -32008 and they initialize
/// again, renegotiating).
const MAX_REMEMBERED_WIRES: usize = 4096;

impl Host {
    /// Records the version `conn` negotiated in `initialize` for `client_id`, before the
    /// handshake subscribes it to anything: every envelope it receives from now on is encoded
    /// for `wire`.
    pub fn set_wire(&self, conn: ConnId, client_id: &str, wire: Wire) {
        let mut inner = self.lock();
        if let Some(c) = inner.connections.get_mut(&conn) {
            c.wire = wire;
        }
        inner.remember_wire(client_id, wire);
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

    /// Remembers (or, for the current version, forgets) the version of `client_id`.
    fn remember_wire(&mut self, client_id: &str, wire: Wire) {
        if wire.is_current() {
            self.client_wires.remove(client_id);
            return;
        }
        if self.client_wires.len() >= MAX_REMEMBERED_WIRES
            && !self.client_wires.contains_key(client_id)
        {
            let Inner {
                client_wires,
                clients,
                seen_clients,
                ..
            } = self;
            client_wires.retain(|id, _| {
                let live = clients.contains_key(id);
                if !live {
                    seen_clients.remove(id);
                }
                live
            });
        }
        self.client_wires.insert(client_id.to_string(), wire);
    }

    /// For `reconnect`: gives `conn` the version its `client_id` negotiated last.
    pub(super) fn restore_wire(&mut self, conn: ConnId, client_id: &str) -> Wire {
        let wire = self
            .client_wires
            .get(client_id)
            .copied()
            .unwrap_or_default();
        if let Some(c) = self.connections.get_mut(&conn) {
            c.wire = wire;
        }
        wire
    }
}
