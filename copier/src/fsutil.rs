//! Filesystem helpers the engine's callers share: removing a tree without
//! following links or crossing mounts, flushing a filesystem, and
//! whole-file locks.

use std::fs::File;
use std::io;

pub use crate::beneath::remove_tree;

/// Flushes the filesystem that holds `f` to stable storage (`syncfs(2)`
/// where the platform has it).
pub fn sync_fs(f: &File) -> io::Result<()> {
    crate::sys::sync_fs(f)
}

/// Whole-file advisory locks with `flock(2)`, on Linux and illumos alike.
///
/// std's `File::lock` family returns `Unsupported` on illumos before Rust
/// 1.91.1; `flock` is in both libcs, and its locks belong to the open file
/// description, as std's do: dropped with the last descriptor, not taken
/// twice by two opens in one process.
pub trait Flock {
    /// Waits for an exclusive lock.
    fn flock_exclusive(&self) -> io::Result<()>;
    /// Waits for a shared lock.
    fn flock_shared(&self) -> io::Result<()>;
    /// Takes an exclusive lock if no one holds one: `Ok(false)` if
    /// another open file holds a lock.
    fn try_flock_exclusive(&self) -> io::Result<bool>;
    /// Releases the lock.
    fn flock_unlock(&self) -> io::Result<()>;
}

impl Flock for File {
    fn flock_exclusive(&self) -> io::Result<()> {
        crate::sys::posix::flock(self, libc::LOCK_EX).map(|_| ())
    }

    fn flock_shared(&self) -> io::Result<()> {
        crate::sys::posix::flock(self, libc::LOCK_SH).map(|_| ())
    }

    fn try_flock_exclusive(&self) -> io::Result<bool> {
        crate::sys::posix::flock(self, libc::LOCK_EX | libc::LOCK_NB)
    }

    fn flock_unlock(&self) -> io::Result<()> {
        crate::sys::posix::flock(self, libc::LOCK_UN).map(|_| ())
    }
}
