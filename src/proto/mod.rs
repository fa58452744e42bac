//! The protocol vocabulary shared by the daemon's layers and its clients: the root channel's
//! URI, the WebSocket close codes ahpty sends, the JSON-RPC error codes clients tell apart, and
//! the `ahpty/listTerminals` extension's shapes. One definition each: `rpc`, `host`, `server`
//! and `client` import them from here and re-declare none.
//!
//! Pure constants and serde types; touches nothing. Sits at the bottom with `config`: it imports
//! only `ahp-types` and `serde`.

pub mod catalog;
pub mod close;
pub mod codes;

/// The root channel, `ahp-root://` (AHP "Channels": the host's root state and the terminal
/// catalogue). Terminal channels are any other URI the host created (docs/protocol.md, D1).
pub const ROOT: &str = ahp_types::ROOT_RESOURCE_URI;
