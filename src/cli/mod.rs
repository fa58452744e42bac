//! The binary's parts, by job: the `serve` flags, the client subcommands' flags, the manual
//! pages. `main.rs` declares the top-level parser and runs what was asked.
//!
//! May touch: what each part says.

pub(crate) mod client_args;
pub(crate) mod man;
pub(crate) mod serve_args;
