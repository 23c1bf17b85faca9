//! The few types every part of zinstall shares, so that the registry
//! client, the install library and the daemon need not depend on the
//! copy engine (`zinstall-engine`) for them:
//!
//! * [`Cancel`]: stopping a run from outside.
//! * [`Progress`] (and [`Metered`], a reader that reports to one):
//!   watching a run, a download or an unpack as it goes.
//! * [`Flock`]: whole-file advisory locks, on Linux and illumos alike.
//! * [`Credentials`]: whom a run reads and writes as.
//! * [`paths`]: where zinstall's files live unless told otherwise.
//! * [`foreign`]: the one reader of files the project did not make:
//!   opened by descriptor, refused unless regular, read within a cap.
//!
//! It depends on nothing of the workspace; the engine re-exports these
//! types where its callers found them before
//! (`zinstall_engine::Cancel`, `zinstall_engine::Progress`,
//! `zinstall_engine::fsutil::Flock`, `zinstall_engine::Credentials`).
//! Each lives in a module of its own; this file only declares and
//! re-exports them.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod cancel;
mod credentials;
mod flock;
pub mod foreign;
pub mod paths;
mod progress;

pub use cancel::Cancel;
pub use credentials::Credentials;
pub use flock::Flock;
pub use progress::{Metered, Progress};
