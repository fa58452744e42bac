//! JSON-RPC error codes (JSON-RPC 2.0 §5.1, and AHP's own in the -32000 range: the spec's
//! "Errors" section, `ahp_types::errors`), named where ahpty and its clients tell them apart.
//! `rpc/error.rs` says which answer carries which.
//!
//! Pure constants; touches nothing.

pub use ahp_types::errors::{ahp_error_codes as ahp, json_rpc_error_codes as json_rpc};

/// -32008 "not found": the terminal, directory or channel does not exist; to a `reconnect`,
/// the daemon does not know the `clientId` (it restarted without a live upgrade).
pub const NOT_FOUND: i32 = ahp::NOT_FOUND;

/// -32000: what the `ahp` client crate answers its pending requests with when the connection
/// ends. ahpty itself never sends it.
pub const CONNECTION_LOST: i32 = -32000;
