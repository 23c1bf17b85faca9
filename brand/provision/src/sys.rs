//! The crate's system calls that Rust cannot check, made in
//! `zinstall-sys` (the workspace's one place with `unsafe`) and
//! re-exported here behind the names the rest of the crate calls.
//!
//! | function | what it wraps |
//! |---|---|
//! | [`effective_ids`] | `geteuid(2)`, `getegid(2)` |
//! | [`process_exists`] | `kill(pid, 0)` |
//! | [`open_nofollow_at`] | `openat(2)` without following a symlink |
//! | [`give_fds`] | `fcntl(F_DUPFD_CLOEXEC)` and `dup2(2)` in a child before `exec` |
//! | `file_flags`, `set_file_flags` | Linux: `ioctl(FS_IOC_GETFLAGS, FS_IOC_SETFLAGS)`; elsewhere: `ENOTTY`, no such flags |

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

pub(crate) use zinstall_sys::fs::{IMMUTABLE_FL, file_flags, set_file_flags};
pub(crate) use zinstall_sys::process::{give_fds, process_exists};

/// This process's effective user and group.
pub(crate) fn effective_ids() -> (u32, u32) {
    (zinstall_sys::ident::euid(), zinstall_sys::ident::egid())
}

/// Opens the entry `name` of the directory `dir` read-only and
/// non-blocking (a directory or a device opens so too), failing on a
/// symlink instead of following it.
pub(crate) fn open_nofollow_at(
    dir: BorrowedFd<'_>,
    name: &CStr,
) -> io::Result<File> {
    zinstall_sys::fs::at::open_read(dir.as_raw_fd(), name)
}
