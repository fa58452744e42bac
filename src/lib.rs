//! ahpty — a standalone daemon serving Agent Host Protocol (AHP) 1.0 terminals over WebSocket.
//!
//! Data flows one way: pty bytes → [`terminal`] (UTF-8 assembly, shell-integration parsing)
//! → actions → [`host`] (the authoritative store: reducers, `serverSeq`, fan-out) → each
//! connection's outbox → [`server`] (WebSocket). Client requests come in through [`rpc`]
//! (JSON-RPC framing and the method table) and reach the same host. [`client`] is the other
//! side: the CLI's subcommands (`ls`, `attach`, `run`, `logs`, …) talking to a daemon through
//! the official `ahp` client.
//!
//! Imports run one way, downwards (docs/architecture.md): server → rpc → host → terminal, with
//! codec and config below.
//!
//! Declares the modules and re-exports the daemon's entry points; touches nothing.

pub mod client;
pub mod codec;
pub mod config;
pub mod host;
pub mod private_dir;
pub mod proto;
pub mod rpc;
pub mod server;
pub mod service;
pub mod store;
pub mod terminal;
pub mod upgrade;

pub use config::Config;
pub use server::{serve, Server};
