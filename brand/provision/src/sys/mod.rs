//! The crate's system calls that Rust cannot check: the only module
//! allowed `unsafe`, each use with why it is sound, behind small safe
//! functions the rest of the crate calls.
//!
//! | function | what it wraps |
//! |---|---|
//! | [`effective_ids`] | `geteuid(2)`, `getegid(2)` |
//! | [`process_exists`] | `kill(pid, 0)` |
//! | [`open_nofollow_at`] | `openat(2)` without following a symlink |
//! | [`give_fds`] | `fcntl(F_DUPFD_CLOEXEC)` and `dup2(2)` in a child before `exec` |
//! | `file_flags`, `set_file_flags` | Linux (`linux.rs`): `ioctl(FS_IOC_GETFLAGS, FS_IOC_SETFLAGS)`; elsewhere (`portable.rs`): `ENOTTY`, no such flags |

#![allow(unsafe_code)]

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
use linux as platform;

#[cfg(not(target_os = "linux"))]
mod portable;
#[cfg(not(target_os = "linux"))]
use portable as platform;

pub(crate) use platform::{IMMUTABLE_FL, file_flags, set_file_flags};

/// This process's effective user and group.
pub(crate) fn effective_ids() -> (u32, u32) {
    // SAFETY: geteuid and getegid take nothing and cannot fail.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// Whether the process `pid` exists (one of another user's too).
pub(crate) fn process_exists(pid: i32) -> bool {
    // SAFETY: signal 0 sends nothing; it only checks that the process
    // exists and may be signalled.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Opens the entry `name` of the directory `dir` read-only and
/// non-blocking (a directory or a device opens so too), failing on a
/// symlink instead of following it.
pub(crate) fn open_nofollow_at(
    dir: BorrowedFd<'_>,
    name: &CStr,
) -> io::Result<File> {
    // SAFETY: `dir` is a live descriptor and `name` a NUL-terminated
    // string, both borrowed for the call.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY
                | libc::O_NONBLOCK
                | libc::O_NOFOLLOW
                | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Makes `cmd`'s child find the descriptors `fds` (open in this process,
/// and still open when it is spawned) as its descriptors `at`, and no
/// others of this process's but those std passes (0, 1 and 2).
pub(crate) fn give_fds<const N: usize>(
    cmd: &mut Command,
    fds: [RawFd; N],
    at: [RawFd; N],
) {
    let pre_exec = move || {
        // Out of the way of the targets first: a source may be one of
        // them. Close-on-exec: only the dup2 copies reach the program.
        let mut high = [0; N];
        for (h, fd) in high.iter_mut().zip(fds) {
            // SAFETY: fcntl on a descriptor the parent keeps open
            // until the spawn returns.
            *h = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
            if *h < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        for (h, to) in high.into_iter().zip(at) {
            // SAFETY: dup2 of the descriptor just made.
            if unsafe { libc::dup2(h, to) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    };
    // SAFETY: between fork and exec the closure calls only fcntl and
    // dup2, which are async-signal-safe, allocates nothing and touches
    // nothing but descriptors.
    unsafe {
        cmd.pre_exec(pre_exec);
    }
}
