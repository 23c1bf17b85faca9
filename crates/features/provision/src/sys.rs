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
//! | [`symlink_at`], [`rename_at`] | `symlinkat(2)`, `renameat(2)` on single names beneath a directory descriptor |
//! | [`set_owner_mode`] | `fchownat(2)`, `fchmodat(2)` on a name that is not a symlink |
//! | [`run_in_root`] | a command inside a guest's tree: `clone` into new namespaces, `pivot_root`, mounts, `execve`, a wait with a timeout |
//! | [`readlink`] | `readlinkat(2)` |
//! | `file_flags`, `set_file_flags` | Linux: `ioctl(FS_IOC_GETFLAGS, FS_IOC_SETFLAGS)`; elsewhere: `ENOTTY`, no such flags |

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

pub(crate) use zinstall_sys::fs::at::readlink;
pub(crate) use zinstall_sys::fs::{IMMUTABLE_FL, file_flags, set_file_flags};
pub(crate) use zinstall_sys::process::{
    InRoot, RunEnd, give_fds, process_exists, run_in_root,
};

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

/// Makes the symlink `name` in `dir` point at `target`; fails if
/// anything is there.
pub(crate) fn symlink_at(
    dir: BorrowedFd<'_>,
    name: &CStr,
    target: &CStr,
) -> io::Result<()> {
    zinstall_sys::fs::at::symlink(target, dir.as_raw_fd(), name)
}

/// Renames `from` to `to`, both in `dir`, replacing what `to` was (a
/// symlink itself, never its target).
pub(crate) fn rename_at(
    dir: BorrowedFd<'_>,
    from: &CStr,
    to: &CStr,
) -> io::Result<()> {
    zinstall_sys::fs::at::rename(dir.as_raw_fd(), from, to)
}

/// Sets the owner (given), then the mode, of `name` in `dir`, never following
/// a symlink there (one is refused).
pub(crate) fn set_owner_mode(
    dir: BorrowedFd<'_>,
    name: &CStr,
    owner: Option<(u32, u32)>,
    mode: u32,
) -> io::Result<()> {
    if let Some((uid, gid)) = owner {
        zinstall_sys::fs::at::lchown(dir.as_raw_fd(), name, uid, gid)?;
    }
    zinstall_sys::fs::at::chmod(dir.as_raw_fd(), name, mode)
}
