//! VS Code's agent-host conformance tier, ported: every check of
//! `protocolContractsSuite.ts`, `terminalResilienceSuite.ts` and (for terminals)
//! `stateOperationsSuite.ts` in microsoft/vscode `src/vs/platform/agentHost/test/node/e2e/`
//! that applies to a host without agents, one Rust test per VS Code test, named after it.
//! Each test runs against its own daemon, so they run in parallel. docs/protocol.md
//! ("VS Code's conformance suite") has the table of every upstream test.

mod harness;
mod protocol_contracts;
mod state_operations;
mod terminal_resilience;
