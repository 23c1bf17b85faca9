//! The zinstall copier: a walk that hands batched jobs to a worker pool.
//!
//! ```text
//! source ──walk──▶ jobs ──batch──▶ bounded channel ──▶ N workers ──▶ dest
//! ```
//!
//! The library has no CLI, no logger and no fixed paths: every path and
//! every knob comes from the caller.

#![deny(missing_docs)]

pub mod defaults;
pub mod error;
#[allow(dead_code)] // The engine module uses the recorder internals.
pub mod trace;
pub mod tunables;

pub use defaults::DefaultsFile;
pub use error::{Error, Op, Refusal, Result};
pub use trace::{Recording, ThreadState};
pub use tunables::Tunables;
