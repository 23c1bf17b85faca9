//! Test support shared by every crate of the workspace.
//!
//! A test either runs or fails. A prerequisite the machine lacks (root, a
//! loop device, a filesystem type) is, under `CI=true`, a failure that
//! names it; elsewhere the test is skipped with a line written straight to
//! the terminal's stderr (libtest does not capture it), so a developer sees
//! what did not run. A missing external program is always a failure that
//! names the Debian package to install: `bash .ci/test` installs them all.
//!
//! ```ignore
//! #[test]
//! fn owners_are_kept() {
//!     if !zinstall_testkit::require_root() {
//!         return;
//!     }
//!     let tar = zinstall_testkit::tool("tar");
//!     // ...
//! }
//! ```

// Test support reads and writes its own fixtures by path: the seam is
// the product's.
#![allow(clippy::disallowed_methods)]
#![deny(missing_docs)]
// System calls in `zinstall-sys`.
#![forbid(unsafe_code)]

mod files;
pub mod fsops;
pub mod loopfs;
mod prereq;
pub mod run;
pub mod sentinel;
pub mod tmp;
pub mod tools;

#[cfg(target_os = "linux")]
pub use files::{exchange, xattrs};
pub use files::{listing, mkfifo, pseudo_random};
pub use loopfs::{Kind, LoopFs, delayed_extents, shares_extents};
pub use prereq::{
    alone, composefs_mounts, has_filesystem, in_ci, is_root, kernel, require,
    require_root, unmet,
};
pub use tmp::Tmp;
pub use tools::{have, need, package, tool};
