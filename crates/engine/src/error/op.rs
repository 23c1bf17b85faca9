//! The operations an error can name: each the system call or step that
//! failed, with the name messages print. Apart from the error type so
//! that the list of operations reads on its own.

use std::fmt;

/// The operation that failed, named after the system call or step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// Reading a directory's entries during the walk.
    ReadDir,
    /// `lstat(2)` or `fstat(2)`.
    Stat,
    /// Opening a source file.
    Open,
    /// Creating a destination file.
    Create,
    /// `mkdir(2)`.
    Mkdir,
    /// `read(2)`.
    Read,
    /// `write(2)`.
    Write,
    /// `lseek(2)` with `SEEK_DATA`/`SEEK_HOLE`.
    Seek,
    /// `ioctl(FICLONE)`.
    Clone,
    /// `copy_file_range(2)`.
    CopyFileRange,
    /// `ftruncate(2)`.
    Truncate,
    /// `readlink(2)`.
    Readlink,
    /// `symlink(2)`.
    Symlink,
    /// `link(2)`.
    Link,
    /// `mknod(2)` / `mkfifo(3)`.
    Mknod,
    /// `fchown(2)` / `lchown(2)`.
    Chown,
    /// `fchmod(2)` / `chmod(2)`.
    Chmod,
    /// `futimens(2)` / `utimensat(2)`.
    SetTimes,
    /// `listxattr(2)`.
    ListXattr,
    /// `getxattr(2)`.
    GetXattr,
    /// `setxattr(2)`.
    SetXattr,
    /// `rename(2)`.
    Rename,
    /// `unlink(2)` / `rmdir(2)`.
    Remove,
    /// `syncfs(2)`.
    Sync,
    /// Reading a defaults file.
    ReadDefaults,
    /// Checking that a source entry still is what the walk saw.
    Check,
    /// Taking or releasing a `flock(2)` lock.
    Lock,
    /// Writing a cache entry's bookkeeping (metadata, index, users).
    Record,
    /// Taking on a caller's identity for a run (`setfsuid(2)`,
    /// `setfsgid(2)`, `setgroups(2)`).
    Credentials,
}

impl Op {
    /// The name printed in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::ReadDir => "readdir",
            Op::Stat => "stat",
            Op::Open => "open",
            Op::Create => "create",
            Op::Mkdir => "mkdir",
            Op::Read => "read",
            Op::Write => "write",
            Op::Seek => "lseek",
            Op::Clone => "ioctl(FICLONE)",
            Op::CopyFileRange => "copy_file_range",
            Op::Truncate => "ftruncate",
            Op::Readlink => "readlink",
            Op::Symlink => "symlink",
            Op::Link => "link",
            Op::Mknod => "mknod",
            Op::Chown => "chown",
            Op::Chmod => "chmod",
            Op::SetTimes => "utimensat",
            Op::ListXattr => "listxattr",
            Op::GetXattr => "getxattr",
            Op::SetXattr => "setxattr",
            Op::Rename => "rename",
            Op::Remove => "remove",
            Op::Sync => "syncfs",
            Op::ReadDefaults => "read defaults",
            Op::Check => "check",
            Op::Lock => "flock",
            Op::Record => "record",
            Op::Credentials => "setfsuid",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
