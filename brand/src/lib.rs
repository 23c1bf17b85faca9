//! The zinstall binaries' shared code: command implementations, terminal
//! output, and how settings are found. Each binary in `src/bin` only
//! parses its arguments and calls in here; the engine is the `copier`
//! crate.

pub mod cli;
pub mod cmd;
pub mod hook;
pub mod json;
pub mod output;
pub mod pull;
pub mod settings;
pub mod statemap;
