//! One `ahpty mcp` process is one agent session: its `clientId`, its session and chat URIs
//! (named after the MCP client's `clientInfo.name`), the claims it puts on terminals
//! (`{session, chat, turnId, toolCallId}` during a call, `{session, chat}` after a
//! backgrounded return), and which of its terminals run a command.
//!
//! May touch: the daemon, through connections it opens as the session's `clientId`.

use std::collections::HashMap;

use ahp::ahp_types::actions::{StateAction, TerminalClaimedAction};
use ahp::ahp_types::state::{TerminalClaim, TerminalSessionClaim};
use parking_lot::Mutex;

use crate::client::{Conn, Failure, Target};

/// The agent session.
pub struct Session {
    pub target: Target,
    pub token: Option<String>,
    /// `ahpty-mcp-<uuid>`.
    pub client_id: String,
    /// `ahp-session:/<client name>-<uuid>`, set at the MCP `initialize`.
    pub uri: Mutex<String>,
    /// Terminal URI → whether a command of this session runs in it.
    pub busy: Mutex<HashMap<String, bool>>,
}

impl Session {
    pub fn new(target: Target, token: Option<String>) -> Session {
        let id = uuid::Uuid::new_v4();
        Session {
            target,
            token,
            client_id: format!("ahpty-mcp-{id}"),
            uri: Mutex::new(format!("ahp-session:/mcp-{id}")),
            busy: Mutex::new(HashMap::new()),
        }
    }

    /// Names the session after the MCP client (`clientInfo.name`, reduced to URI-safe
    /// characters).
    pub fn name_after(&self, client: &str) {
        let safe: String = client
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            .take(64)
            .collect();
        let tail = self.client_id.trim_start_matches("ahpty-mcp-").to_string();
        *self.uri.lock() = format!("ahp-session:/{safe}-{tail}");
    }

    /// A connection as the session's `clientId`.
    pub async fn conn(&self) -> Result<Conn, Failure> {
        Conn::open_as(&self.target, self.token.as_deref(), &[], &self.client_id).await
    }

    /// The session claim; with `call` (turnId, toolCallId) during a tool call.
    pub fn claim(&self, call: Option<(&str, &str)>) -> TerminalClaim {
        let session = self.uri.lock().clone();
        TerminalClaim::Session(TerminalSessionClaim {
            chat: session.replacen("ahp-session:", "ahp-chat:", 1),
            session,
            turn_id: call.map(|c| c.0.to_string()),
            tool_call_id: call.map(|c| c.1.to_string()),
        })
    }

    /// `terminal/claimed` with [`Session::claim`].
    pub fn claimed(&self, call: Option<(&str, &str)>) -> StateAction {
        StateAction::TerminalClaimed(TerminalClaimedAction {
            claim: self.claim(call),
        })
    }

    /// An idle terminal of this session (none of its commands runs there).
    pub fn idle(&self) -> Option<String> {
        self.busy
            .lock()
            .iter()
            .find(|(_, b)| !**b)
            .map(|(u, _)| u.clone())
    }

    pub fn set_busy(&self, uri: &str, busy: bool) {
        self.busy.lock().insert(uri.to_string(), busy);
    }
}
