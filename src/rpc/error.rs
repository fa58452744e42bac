//! JSON-RPC error values and the AHP error codes ahpty uses (`ahp-types` errors module;
//! docs/protocol.md says which answer carries which), and the mapping of the host's errors
//! ([`HostError`]) to them. Every failure a peer can cause is turned into one of these, never
//! a panic.
//!
//! Pure values and conversions; touches nothing.

use ahp_types::errors::{ahp_error_codes as ahp, json_rpc_error_codes as rpc};
use serde_json::Value;

use crate::codec::{clip, MAX_MESSAGE_BYTES};
use crate::host::{ErrorKind, HostError};

/// An error answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// JSON-RPC or AHP error code.
    pub code: i32,
    /// Human-readable message; names the offending field or value.
    pub message: String,
    /// Optional structured detail (e.g. `supportedVersions` for -32005).
    pub data: Option<Value>,
}

impl RpcError {
    /// Messages longer than [`MAX_MESSAGE_BYTES`] are clipped.
    fn new(code: i32, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: clip(message.into(), MAX_MESSAGE_BYTES),
            data: None,
        }
    }
    /// -32700: the frame is not valid JSON.
    pub fn parse_error(message: impl Into<String>) -> Self {
        Self::new(rpc::PARSE_ERROR, message)
    }
    /// -32600: not a JSON-RPC 2.0 request object.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(rpc::INVALID_REQUEST, message)
    }
    /// -32601: the method is not served by ahpty.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(rpc::METHOD_NOT_FOUND, format!("method not found: {method}"))
    }
    /// -32601 with an explanation: the method exists but not in this connection state (a
    /// request before the handshake, a second `initialize` or `reconnect`), answered as the
    /// reference host does.
    pub fn method_unavailable(message: impl Into<String>) -> Self {
        Self::new(rpc::METHOD_NOT_FOUND, message)
    }
    /// -32602: bad or missing params; the message names the field.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(rpc::INVALID_PARAMS, message)
    }
    /// -32603: an internal failure (e.g. the shell could not be started).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(rpc::INTERNAL_ERROR, message)
    }
    /// -32001: any `ahp-session:` / `ahp-chat:` target (ahpty hosts no sessions; D2).
    pub fn session_not_found(uri: &str) -> Self {
        Self::new(ahp::SESSION_NOT_FOUND, format!("session not found: {uri}"))
    }
    /// -32002: no agent provider is registered on this host.
    pub fn provider_not_found() -> Self {
        Self::new(
            ahp::PROVIDER_NOT_FOUND,
            "ahpty hosts terminals only; no agent provider is registered",
        )
    }
    /// -32008: the terminal, directory or channel does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ahp::NOT_FOUND, message)
    }
    /// -32005 with `data.supportedVersions`; the connection is closed after it is sent.
    pub fn unsupported_version(supported: &[&str]) -> Self {
        RpcError {
            code: ahp::UNSUPPORTED_PROTOCOL_VERSION,
            message: "no supported protocol version offered".into(),
            data: Some(serde_json::json!({ "supportedVersions": supported })),
        }
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for RpcError {}

impl From<HostError> for RpcError {
    /// The JSON-RPC code of each kind: invalid params -32602, not found -32008, session not
    /// found -32001, already exists -32010, internal -32603.
    fn from(e: HostError) -> Self {
        let code = match e.kind {
            ErrorKind::InvalidParams => rpc::INVALID_PARAMS,
            ErrorKind::NotFound => ahp::NOT_FOUND,
            ErrorKind::SessionNotFound => ahp::SESSION_NOT_FOUND,
            ErrorKind::AlreadyExists => ahp::ALREADY_EXISTS,
            ErrorKind::Internal => rpc::INTERNAL_ERROR,
        };
        RpcError::new(code, e.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_clipped() {
        let e = RpcError::invalid_params(format!("channel: {}", "é".repeat(1 << 20)));
        assert!(e.message.len() <= MAX_MESSAGE_BYTES);
        assert!(e.message.starts_with("channel: é") && e.message.ends_with('…'));
    }

    #[test]
    fn host_errors_map_to_their_codes() {
        let code = |e: HostError| RpcError::from(e).code;
        assert_eq!(code(HostError::invalid_params("x")), -32602);
        assert_eq!(code(HostError::not_found("x")), -32008);
        assert_eq!(code(HostError::session_not_found("ahp-session:/s")), -32001);
        assert_eq!(code(HostError::already_exists("t:/1")), -32010);
        assert_eq!(code(HostError::internal("x")), -32603);
    }
}
