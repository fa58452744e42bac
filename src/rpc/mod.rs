//! JSON-RPC 2.0 for AHP: the framing of incoming messages ([`frame`]), errors and their
//! codes ([`error`]), typed params whose errors name the field ([`params`]) and the method
//! table ([`dispatch`]). Turns frames into host calls and host results into responses (encoded
//! with [`crate::codec`]); holds no state beyond one connection's handshake status and
//! negotiated version.
//!
//! May touch: the host's API and its connection's outbox; no socket (the server reads and
//! writes frames).

pub(crate) mod dispatch;
pub(crate) mod error;
pub mod frame;
pub(crate) mod params;

pub use dispatch::{Message, Next, RpcConnection};
pub use error::RpcError;
