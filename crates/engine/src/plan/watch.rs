//! Watching a run as it goes: its progress ([`Progress`], [`Metered`],
//! from `zinstall-core`, which the registry client and the daemon share)
//! and a listing of what it writes ([`Listener`], [`EntryKind`]). Apart
//! from the plan, since readers of archives and images use them too.

use std::fmt;
use std::path::Path;

pub use zinstall_core::{Metered, Progress};

/// What an entry of a listing ([`Listener`]) is, in the destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A regular file with its data.
    File,
    /// A later name of a file, made as a hard link to its first copy.
    HardLink,
    /// A symlink.
    Symlink,
    /// A FIFO, socket or device node.
    Special,
    /// A file replaced by a symlink by a link rule.
    Redirect,
}

impl EntryKind {
    /// A short name for listings: `dir`, `file`, `hardlink`, `symlink`,
    /// `special`, `redirect`.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Dir => "dir",
            EntryKind::File => "file",
            EntryKind::HardLink => "hardlink",
            EntryKind::Symlink => "symlink",
            EntryKind::Special => "special",
            EntryKind::Redirect => "redirect",
        }
    }
}

/// Hears of each entry written (or, in a
/// [dry run](crate::Plan::dry_run), that would be), as `cp -v` lists
/// them: not entries skipped or, merging, left unchanged. Calls come from many threads in no set order.
pub trait Listener: Send + Sync + fmt::Debug {
    /// `src` was (or would be) made as `dst`, a `kind`.
    fn entry(&self, src: &Path, dst: &Path, kind: EntryKind);
}
