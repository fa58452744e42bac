//! JSON-RPC 2.0 for AHP: framing ([`frame`]), errors ([`error`]), typed params ([`params`]),
//! the method table ([`dispatch`]) and the per-version wire shapes ([`version`]). Turns frames
//! into host calls and host results into responses; holds no state beyond one connection's
//! handshake status and negotiated version.

pub mod dispatch;
pub mod error;
pub mod frame;
pub mod params;
pub mod version;

pub use dispatch::{Flow, RpcConnection};
pub use error::RpcError;
