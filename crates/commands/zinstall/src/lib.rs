//! The zinstall binaries' shared code: command implementations, terminal
//! output, and how settings are found. Each binary in `src/bin` only
//! parses its arguments and calls in here; the engine is the `zinstall-engine`
//! crate.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod cli;
mod cmd;
pub mod exit;
mod habits;
pub mod hook;
pub mod interrupt;
mod json;
pub mod output;
mod pull;
mod settings;
mod statemap;
pub mod sys;
