//! The immutable flag (`chattr +i`): a file so marked cannot be opened
//! for writing, renamed, linked or removed, not even by root, until the
//! flag is cleared, which takes `CAP_LINUX_IMMUTABLE`. ext4, XFS, btrfs
//! and tmpfs have it; elsewhere, and without the capability, setting it
//! fails and the caller goes on without.

use std::ffi::CStr;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::sys::{self, IMMUTABLE_FL};

/// Sets (`on`) or clears the immutable flag of a regular file or a
/// directory. `Ok(false)` if the filesystem or the platform has no such
/// flag or the process may not set it.
pub(crate) fn set(path: &Path, on: bool) -> io::Result<bool> {
    set_on(&open(path)?, on)
}

/// [`set`] for the entry `name` of the open directory `dir`, opened
/// without following a symlink: a tree of any depth is flagged without a
/// path growing past `PATH_MAX`.
pub(crate) fn set_at(
    dir: BorrowedFd<'_>,
    name: &CStr,
    on: bool,
) -> io::Result<bool> {
    set_on(&sys::open_nofollow_at(dir, name)?, on)
}

/// [`is_set`] for the entry `name` of the open directory `dir`.
pub(crate) fn is_set_at(dir: BorrowedFd<'_>, name: &CStr) -> bool {
    sys::open_nofollow_at(dir, name)
        .ok()
        .is_some_and(|f| flagged(&f))
}

/// True if `path` carries the immutable flag.
pub(crate) fn is_set(path: &Path) -> bool {
    open(path).ok().is_some_and(|f| flagged(&f))
}

/// Opens `path` read-only and non-blocking, as chattr(1) opens: a
/// directory opens this way too, and nothing is written through the
/// descriptor. A symlink is not followed.
// The cache's own payload, or a guest this run made: opened only to read
// and set its inode flags, never followed nor waited on.
#[allow(clippy::disallowed_methods)]
fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
}

fn flagged(f: &File) -> bool {
    sys::file_flags(f).is_ok_and(|flags| flags & IMMUTABLE_FL != 0)
}

fn set_on(f: &File, on: bool) -> io::Result<bool> {
    // No such flag on this filesystem or platform, or not ours to set.
    let unsupported = |e: &io::Error| {
        matches!(
            e.raw_os_error(),
            Some(
                libc::ENOTTY
                    | libc::EOPNOTSUPP
                    | libc::EPERM
                    | libc::EINVAL
                    | libc::EACCES
            )
        )
    };
    let flags = match sys::file_flags(f) {
        Ok(fl) => fl,
        Err(e) if unsupported(&e) => return Ok(false),
        Err(e) => return Err(e),
    };
    let want = if on {
        flags | IMMUTABLE_FL
    } else {
        flags & !IMMUTABLE_FL
    };
    if want == flags {
        return Ok(true);
    }
    match sys::set_file_flags(f, want) {
        Ok(()) => Ok(true),
        Err(e) if unsupported(&e) => Ok(false),
        Err(e) => Err(e),
    }
}
