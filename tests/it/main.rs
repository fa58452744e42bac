//! The black-box specification of ahpty: one test binary, one module per behaviour, each test
//! named after what it pins. Every test drives the real thing: the `ahpty` binary on a free
//! port, real ptys and shells, real WebSocket connections, the official `ahp` client crate.
//! `support` holds the scaffolding; the [`spec!`] and [`measured!`] macros hide the runtime
//! and the suite lock (measuring tests run alone, see `support`).
//!
//! `cargo test --test it MODULE::` runs one module, `cargo test --test it -- --list` lists
//! the specification.

#[macro_use]
mod support;

mod agent_terminals;
mod attach;
mod cli_client;
mod cli_usage;
mod command_detection;
mod config;
mod daemon_hardening;
mod daemon_process;
mod exited_terminals;
mod flood_memory;
mod flow_control;
mod handshake;
mod hostile_input;
mod hostile_output;
mod hostile_peers;
mod input_priority;
mod limits;
mod mcp;
mod multi_client;
mod ownership;
mod persistence;
mod properties;
mod randomized;
mod readme_example;
mod reaping;
mod resume;
mod resume_runtime;
mod security;
mod seed_clients;
mod service;
mod shell_integration_scripts;
mod state_dir;
mod structure;
mod terminal_lifecycle;
mod terminal_model;
mod upgrade;
mod upgrade_load;
mod utf8_output;
mod vscode;
mod websocat_recipes;
mod wire_errors;
mod xterm_judge;
mod xterm_judge_screens;
