//! What an update did, or dry would do: each path added, removed or
//! changed, and each of the zone's changes kept. A leaf: the diff and
//! the writes fill it.

use std::path::PathBuf;

/// One path the update adds, removes or changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// Absolute as in the zone (`/usr/bin/ls`).
    pub path: PathBuf,
    /// What changed: `content`, `mode`, `owner`, `times`, `xattrs`,
    /// `target`, `links`, `type`.
    pub what: Vec<&'static str>,
}

/// A path the update left as the zone has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    /// Absolute as in the zone.
    pub path: PathBuf,
    /// Why: the zone changed it, removed it, made its own file there, or
    /// put its own files in a directory the source removed.
    pub why: &'static str,
}

/// What an update did (or, dry, would do).
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Paths the new source has and the old install had not.
    pub added: Vec<Change>,
    /// Paths the new source no longer has.
    pub removed: Vec<Change>,
    /// Paths whose entry changed.
    pub changed: Vec<Change>,
    /// The zone's changes kept (dpkg's conffiles): see [`Kept::why`].
    pub kept: Vec<Kept>,
    /// Bytes of file content written.
    pub bytes: u64,
    /// Entries shared with the old root (hard links) or made anew
    /// (directories) without writing content.
    pub shared: u64,
    /// Nothing was written.
    pub dry_run: bool,
    /// An interrupted update or rollback that was finished or undone
    /// first.
    pub recovered: Option<&'static str>,
}
