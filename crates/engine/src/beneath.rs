//! The one way into a root: directories opened beneath it, one component
//! at a time, never through a symlink.
//!
//! Everything zinstall writes into a root — tree copies, archive members,
//! host files, merges, link rules — and everything it removes from one
//! goes through a directory descriptor that was reached from the root's
//! own descriptor without following a symlink (on Linux `openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS` where
//! it can, else `openat(O_NOFOLLOW | O_DIRECTORY)` per component). Entries
//! are then made with `*at` calls on that descriptor and a single name.
//! So nothing inside the root — a symlink an image planted, or a directory
//! swapped for one while we write — decides where a write lands: a
//! symlink met on the way is an error naming it, never a path to follow.
//!
//! ```no_run
//! use std::path::Path;
//! use zinstall_engine::beneath::Root;
//!
//! let root = Root::create(Path::new("/zones/z1/root"), 0o755)?;
//! // `etc` and `etc/default` are made if missing; a symlink at either
//! // is refused with an error naming it.
//! let dir = root.dir(Path::new("etc/default"), Some(0o755))?;
//! println!("{}", dir.path().display());
//! # Ok::<(), zinstall_engine::Error>(())
//! ```

// libc's `stat` field types differ between platforms: casts that are
// no-ops here are not everywhere.
#![allow(clippy::unnecessary_cast)]

mod chain;
mod remove;
mod resolve;
mod root;
#[cfg(test)]
mod test;
mod walk;

pub(crate) use chain::Chain;
pub(crate) use remove::remove_at;
pub use remove::remove_tree;
pub use resolve::open_file_nofollow;
pub(crate) use resolve::{StepFail, WalkFail, components, step};
pub(crate) use root::RootAt;
pub use root::{Dir, Found, Root};
pub use walk::{Visit, walk_tree};
