//! JSON-RPC 2.0 for AHP: framing ([`frame`]), errors ([`error`]), typed params ([`params`])
//! and the method table ([`dispatch`]). Turns frames into host calls and host results into
//! responses; holds no state beyond one connection's handshake status.

pub mod dispatch;
pub mod error;
pub mod frame;
pub mod params;

pub use dispatch::{Flow, RpcConnection};
pub use error::RpcError;
