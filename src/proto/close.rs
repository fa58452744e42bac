//! The WebSocket close codes ahpty sends (RFC 6455 §7.4), and what a client does on each:
//! docs/protocol.md, "Close codes". The 1000–1015 range is the RFC's; 4000–4999 is reserved
//! for applications, and ahpty's own codes live there.
//!
//! Pure constants; touches nothing.

/// 1001 "Going Away": the daemon is shutting down (its terminals were stopped), or a
/// connection left a ping unanswered for the ping timeout. Do not resume.
pub const CLOSE_GOING_AWAY: u16 = 1001;

/// 1012 "Service Restart": the daemon restarts for a live upgrade (docs/upgrade.md). Reconnect
/// with `reconnect`, the same `clientId` and the last `serverSeq` seen.
pub const CLOSE_RESTART: u16 = 1012;

/// 4000: the connection's `clientId` was resumed (`reconnect`) on another connection, which
/// now holds its subscriptions.
pub const CLOSE_SUPERSEDED: u16 = 4000;

/// 4001: the connection stopped reading while nobody else kept up (`--stall-timeout`).
/// Reconnect and resume; nothing was lost from the terminals' retained content.
pub const CLOSE_STALLED: u16 = 4001;

/// 4002: the connection fell behind while other viewers kept up (`--lag-limit-bytes`,
/// `--lag-timeout`). Reconnect and resume from snapshots.
pub const CLOSE_LAGGING: u16 = 4002;
