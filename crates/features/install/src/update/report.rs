//! What an update did, or dry would do: each path added, removed or
//! changed by the source, each of the zone's changes kept or replaced,
//! and how the new root was made. A leaf: the decisions and the writes
//! fill it.

use std::path::PathBuf;

/// One path the update adds, removes or changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// Absolute as in the zone (`/usr/bin/ls`).
    pub path: PathBuf,
    /// What changed: `content`, `mode`, `owner`, `times`, `xattrs`,
    /// `target`, `links`, `type`, `device`.
    pub what: Vec<&'static str>,
}

/// A path where the zone's entry and the source's differ, and what the
/// update did about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    /// Absolute as in the zone.
    pub path: PathBuf,
    /// Why.
    pub why: &'static str,
}

/// What an update did (or, dry, would do).
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Paths the new source has and the recorded one had not.
    pub added: Vec<Change>,
    /// Paths the new source no longer has.
    pub removed: Vec<Change>,
    /// Paths whose entry the source changed.
    pub changed: Vec<Change>,
    /// The zone's entries left as the zone has them where the source
    /// differs (merged and kept paths): see [`Kept::why`].
    pub kept: Vec<Kept>,
    /// The zone's changes replaced by the source's (followed paths).
    pub replaced: Vec<Kept>,
    /// Bytes of file content written.
    pub bytes: u64,
    /// Entries shared with the old root or made without content.
    pub shared: u64,
    /// How unchanged entries are shared with the old root (`reflink`,
    /// `hardlink`); empty when nothing was written.
    pub method: &'static str,
    /// Image layers read (the others stood as recorded).
    pub layers_read: usize,
    /// Image layers the root's recorded entries stood for, not read.
    pub layers_reused: usize,
    /// What the root is made from after the update (for messages).
    pub recipe: String,
    /// Nothing was written.
    pub dry_run: bool,
    /// An interrupted update or rollback that was finished or undone
    /// first.
    pub recovered: Option<&'static str>,
}
