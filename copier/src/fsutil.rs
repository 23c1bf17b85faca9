//! Filesystem helpers the engine's callers share: removing a tree without
//! following links or crossing mounts, and flushing a filesystem.

use std::fs::File;
use std::io;

pub use crate::beneath::remove_tree;

/// Flushes the filesystem that holds `f` to stable storage (`syncfs(2)`
/// where the platform has it).
pub fn sync_fs(f: &File) -> io::Result<()> {
    crate::sys::sync_fs(f)
}
