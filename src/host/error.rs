//! Why the host refused or failed a request, in the store's own terms: which kind of failure,
//! and one line for the peer that names the field or value at fault. The host knows nothing of
//! JSON-RPC; rpc maps each kind to its error code (`RpcError::from`, and docs/protocol.md
//! "Methods" for which request answers which).
//!
//! Pure values; touches nothing.

use std::fmt;

/// The kind of a [`HostError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request's values are wrong as sent (a bad URI, cwd, size, claim or list).
    InvalidParams,
    /// The terminal, directory or channel does not exist (decision D2).
    NotFound,
    /// A session or chat URI: ahpty hosts none (decision D2).
    SessionNotFound,
    /// A terminal with this URI already exists (decision D1).
    AlreadyExists,
    /// The host could not do it: the shell cannot start, a limit is reached, the connection
    /// or the daemon is closing.
    Internal,
}

/// A refused or failed request: its [`ErrorKind`] and a one-line message for the peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// Human-readable; names the offending field or value (rpc clips it to 1 KiB).
    pub message: String,
}

impl HostError {
    fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        HostError {
            kind,
            message: message.into(),
        }
    }

    /// [`ErrorKind::InvalidParams`].
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidParams, message)
    }

    /// [`ErrorKind::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    /// [`ErrorKind::SessionNotFound`] for `uri`.
    pub fn session_not_found(uri: &str) -> Self {
        Self::new(
            ErrorKind::SessionNotFound,
            format!("session not found: {uri}"),
        )
    }

    /// [`ErrorKind::AlreadyExists`] for the terminal `uri`.
    pub fn already_exists(uri: &str) -> Self {
        Self::new(
            ErrorKind::AlreadyExists,
            format!("terminal already exists: {uri}"),
        )
    }

    /// [`ErrorKind::AlreadyExists`] for the terminal `uri`, with what it is and what to do
    /// (`why`, e.g. "it has exited, …").
    pub fn already_exists_because(uri: &str, why: &str) -> Self {
        Self::new(
            ErrorKind::AlreadyExists,
            format!("terminal already exists: {uri}; {why}"),
        )
    }

    /// [`ErrorKind::Internal`].
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for HostError {}
