//! The immutable flag (`chattr +i`): a file so marked cannot be opened
//! for writing, renamed, linked or removed, not even by root, until the
//! flag is cleared, which takes `CAP_LINUX_IMMUTABLE`. ext4, XFS, btrfs
//! and tmpfs have it; elsewhere, and without the capability, setting it
//! fails and the caller goes on without.

use std::fs::OpenOptions;
use std::io;
use std::path::Path;

/// Sets (`on`) or clears the immutable flag of a regular file or a
/// directory. `Ok(false)` if the filesystem or the platform has no such
/// flag or the process may not set it.
pub fn set(path: &Path, on: bool) -> io::Result<bool> {
    // Read-only and non-blocking, as chattr(1) opens: a directory opens
    // this way too, and nothing is written through the descriptor.
    let f = OpenOptions::new()
        .read(true)
        .custom_flags_nonblock()
        .open(path)?;
    sys::set(&f, on)
}

/// [`set`] for the entry `name` of the open directory `dir`, opened
/// without following a symlink: a tree of any depth is flagged without a
/// path growing past `PATH_MAX`.
pub fn set_at(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::CStr,
    on: bool,
) -> io::Result<bool> {
    sys::set(&open_at(dir, name)?, on)
}

/// [`is_set`] for the entry `name` of the open directory `dir`.
pub fn is_set_at(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::CStr,
) -> bool {
    open_at(dir, name)
        .ok()
        .and_then(|f| sys::get(&f).ok())
        .is_some_and(|flags| flags & sys::IMMUTABLE != 0)
}

fn open_at(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::CStr,
) -> io::Result<std::fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: a valid descriptor and C string; on success the returned
    // descriptor is ours.
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
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// True if `path` carries the immutable flag.
pub fn is_set(path: &Path) -> bool {
    OpenOptions::new()
        .read(true)
        .custom_flags_nonblock()
        .open(path)
        .ok()
        .and_then(|f| sys::get(&f).ok())
        .is_some_and(|flags| flags & sys::IMMUTABLE != 0)
}

trait NonBlock {
    fn custom_flags_nonblock(&mut self) -> &mut Self;
}

impl NonBlock for OpenOptions {
    fn custom_flags_nonblock(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
    }
}

#[cfg(target_os = "linux")]
mod sys {
    use std::fs::File;
    use std::io;
    use std::os::fd::AsRawFd;

    /// `FS_IMMUTABLE_FL` of `linux/fs.h`.
    pub const IMMUTABLE: libc::c_int = 0x10;

    pub fn get(f: &File) -> io::Result<libc::c_int> {
        let mut flags: libc::c_int = 0;
        // SAFETY: FS_IOC_GETFLAGS writes one int through the pointer,
        // which points at a live int.
        let r = unsafe {
            libc::ioctl(f.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags)
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(flags)
    }

    pub fn set(f: &File, on: bool) -> io::Result<bool> {
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
        let flags = match get(f) {
            Ok(fl) => fl,
            Err(e) if unsupported(&e) => return Ok(false),
            Err(e) => return Err(e),
        };
        let want = if on {
            flags | IMMUTABLE
        } else {
            flags & !IMMUTABLE
        };
        if want == flags {
            return Ok(true);
        }
        // SAFETY: FS_IOC_SETFLAGS reads one int through the pointer,
        // which points at a live int.
        let r =
            unsafe { libc::ioctl(f.as_raw_fd(), libc::FS_IOC_SETFLAGS, &want) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if unsupported(&e) {
                return Ok(false);
            }
            return Err(e);
        }
        Ok(true)
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    use std::fs::File;
    use std::io;

    pub const IMMUTABLE: i32 = 0x10;

    pub fn get(_f: &File) -> io::Result<i32> {
        Ok(0)
    }

    pub fn set(_f: &File, _on: bool) -> io::Result<bool> {
        Ok(false)
    }
}
