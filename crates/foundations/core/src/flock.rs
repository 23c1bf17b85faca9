//! Whole-file advisory locks.

use std::fs::File;
use std::io;

use rustix::fs::{FlockOperation, flock};
use rustix::io::{Errno, retry_on_intr};

/// Whole-file advisory locks with `flock(2)`, on Linux and illumos alike.
///
/// std's `File::lock` family returns `Unsupported` on illumos before Rust
/// 1.91.1; `flock` is in both libcs, and its locks belong to the open file
/// description, as std's do: dropped with the last descriptor, not taken
/// twice by two opens in one process. A call interrupted by a signal is
/// made again.
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

/// `flock(2)` on `f`, again while interrupted.
fn lock(f: &File, op: FlockOperation) -> Result<(), Errno> {
    retry_on_intr(|| flock(f, op))
}

impl Flock for File {
    fn flock_exclusive(&self) -> io::Result<()> {
        Ok(lock(self, FlockOperation::LockExclusive)?)
    }

    fn flock_shared(&self) -> io::Result<()> {
        Ok(lock(self, FlockOperation::LockShared)?)
    }

    fn try_flock_exclusive(&self) -> io::Result<bool> {
        match lock(self, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(true),
            Err(e) if e == Errno::WOULDBLOCK => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    fn flock_unlock(&self) -> io::Result<()> {
        Ok(lock(self, FlockOperation::Unlock)?)
    }
}

#[cfg(test)]
// Tests make and read their own fixtures by path.
#[allow(clippy::disallowed_methods)]
mod test {
    use super::*;

    /// Two opens of one file: two open file descriptions, whose locks
    /// exclude each other as two processes' would.
    fn two_opens() -> (tempfile::TempDir, File, File) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let a = File::create(&path).unwrap();
        let b = File::open(&path).unwrap();
        (dir, a, b)
    }

    #[test]
    fn an_exclusive_lock_excludes_another_open_until_released() {
        let (_dir, a, b) = two_opens();
        a.flock_exclusive().unwrap();
        assert!(!b.try_flock_exclusive().unwrap(), "held by a");
        a.flock_unlock().unwrap();
        assert!(b.try_flock_exclusive().unwrap(), "released");
        assert!(!a.try_flock_exclusive().unwrap(), "now held by b");
        b.flock_unlock().unwrap();
    }

    #[test]
    fn shared_locks_share_and_exclude_an_exclusive_one() {
        let (dir, a, b) = two_opens();
        a.flock_shared().unwrap();
        b.flock_shared().unwrap();
        let c = File::open(dir.path().join("lock")).unwrap();
        assert!(!c.try_flock_exclusive().unwrap(), "shared by a and b");
        a.flock_unlock().unwrap();
        assert!(!c.try_flock_exclusive().unwrap(), "still shared by b");
        b.flock_unlock().unwrap();
        assert!(c.try_flock_exclusive().unwrap());
    }

    #[test]
    fn a_lock_goes_with_its_last_descriptor() {
        let (_dir, a, b) = two_opens();
        a.flock_exclusive().unwrap();
        drop(a);
        assert!(b.try_flock_exclusive().unwrap());
    }
}
