//! The `ahpty/listTerminals` extension's wire shapes: one read-only look at every terminal with
//! what the root catalogue (`root/terminalsChanged`, AHP "Root state") leaves out — the
//! daemon's short number for it, its size, cwd, creation time and whether its claim holder is
//! connected — without anyone's scrollback. The host builds it (`host/catalog.rs`); the CLI's
//! `ls` and terminal selection read it.
//!
//! Pure types; touches nothing.

use ahp_types::state::{TerminalClaim, TerminalLifecycleState};
use serde::{Deserialize, Serialize};

/// JSON-RPC method name of the extension: params `{channel: "ahp-root://"}`, result a
/// [`TerminalListing`]; a request before the handshake is answered -32601.
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
