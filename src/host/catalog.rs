//! Builds the `ahpty/listTerminals` answer ([`crate::proto::catalog`]) from the store.
//!
//! Reads the store under its lock (one pass over the terminals, no allocation a peer sizes
//! beyond the answer itself); changes nothing.
//!
//! May touch: reads the store under the host lock; changes nothing.

use crate::proto::catalog::{TerminalListing, TerminalSummary};

use super::{ConnId, Host};

impl Host {
    /// This daemon instance's id (see [`TerminalListing::host_id`]).
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// `ahpty/listTerminals` asked by `conn`: every terminal, in creation order.
    pub fn list_terminals(&self, conn: ConnId) -> TerminalListing {
        let inner = self.lock();
        let asking = inner
            .connections
            .get(&conn)
            .and_then(|c| c.client_id.as_deref());
        let connected = |holder: &str| {
            let n = inner.clients.get(holder).copied().unwrap_or(0);
            n > usize::from(asking == Some(holder))
        };
        let mut terminals: Vec<TerminalSummary> = inner
            .terminals
            .iter()
            .map(|(uri, t)| TerminalSummary {
                id: t.serial,
                resource: uri.clone(),
                title: t.state.title.clone(),
                claim: t.state.claim.clone(),
                holder: t.holder.clone(),
                holder_connected: connected(&t.holder),
                lifecycle: t.state.lifecycle.clone(),
                cwd: t.state.cwd.clone(),
                cols: t.state.cols,
                rows: t.state.rows,
                created_at: t.created_ms,
                supports_command_detection: t.state.supports_command_detection,
                restored: t.process.is_none(),
            })
            .collect();
        terminals.sort_by_key(|t| t.id);
        TerminalListing {
            host_id: self.instance_id.clone(),
            terminals,
        }
    }
}
