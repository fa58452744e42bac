//! The `ahpty/listTerminals` extension: one read-only look at every terminal with what the
//! root catalogue (`root/terminalsChanged`) leaves out — the daemon's short number for it, its
//! size, cwd, creation time and whether its claim holder is connected — without sending
//! anyone's scrollback. The CLI's `ls` and terminal selection are built on it.
//!
//! Reads the store under its lock (one pass over the terminals, no allocation a peer sizes
//! beyond the answer itself); changes nothing.
//!
//! May touch: reads the store under the host lock; changes nothing.

use ahp_types::state::{TerminalClaim, TerminalLifecycleState};
use serde::{Deserialize, Serialize};

use super::{ConnId, Host};

/// JSON-RPC method name of the extension (params `{channel: "ahp-root://"}`).
pub const LIST_TERMINALS: &str = "ahpty/listTerminals";

/// Result of `ahpty/listTerminals`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminalListing {
    /// This daemon instance's id (a UUID, new at every start); terminals see it as
    /// `$AHPTY_HOST_ID`.
    pub host_id: String,
    /// Every terminal, in creation order.
    pub terminals: Vec<TerminalSummary>,
}

/// One terminal in a [`TerminalListing`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminalSummary {
    /// The daemon's number for the terminal: 1 for the first terminal created since start,
    /// then increasing; never reused while the daemon runs.
    pub id: u64,
    /// The terminal's channel URI.
    pub resource: String,
    /// Current title.
    pub title: String,
    /// Current claim.
    pub claim: TerminalClaim,
    /// The `clientId` holding the claim (for a session claim: the client that established it).
    pub holder: String,
    /// Whether a connection presenting [`holder`](Self::holder) is open right now, not
    /// counting the connection that asked.
    pub holder_connected: bool,
    /// Running, or exited with its code.
    pub lifecycle: TerminalLifecycleState,
    /// Working directory as a `file://` URI, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Width in columns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cols: Option<i64>,
    /// Height in rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<i64>,
    /// Creation time, Unix milliseconds (the daemon's clock).
    pub created_at: i64,
    /// Whether the shell reports commands (`terminal/commandExecuted`/`commandFinished`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supports_command_detection: Option<bool>,
    /// Restored from the transcript of an earlier daemon process: it has no process (its
    /// lifecycle is exited, with no exit code if it was running then). Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restored: bool,
}

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
