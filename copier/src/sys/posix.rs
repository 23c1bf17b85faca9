//! POSIX calls that std does not offer in the form the engine needs
//! (no-follow variants, raw timespecs, device numbers), the same on every
//! Unix.

use std::ffi::CString;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// A path as a C string; paths never contain NUL, but a caller-made one
/// could, and that must be an error rather than a panic.
pub(crate) fn cstr(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte")
    })
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Access and modification times, to the nanosecond, as stat gave them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Times {
    pub(crate) atime: (i64, i64),
    pub(crate) mtime: (i64, i64),
}

impl Times {
    pub(crate) fn of(md: &Metadata) -> Self {
        Times {
            atime: (md.atime(), md.atime_nsec()),
            mtime: (md.mtime(), md.mtime_nsec()),
        }
    }

    fn timespecs(&self) -> [libc::timespec; 2] {
        let ts = |(s, ns): (i64, i64)| libc::timespec {
            tv_sec: s as libc::time_t,
            tv_nsec: ns as _,
        };
        [ts(self.atime), ts(self.mtime)]
    }
}

/// `futimens(2)`.
pub(crate) fn set_times_fd(f: &File, t: &Times) -> io::Result<()> {
    let ts = t.timespecs();
    // SAFETY: the fd is open for the life of `f`; `ts` has two entries.
    check(unsafe { libc::futimens(f.as_raw_fd(), ts.as_ptr()) })
}

/// `utimensat(2)` with `AT_SYMLINK_NOFOLLOW`, so symlinks get their own
/// times.
pub(crate) fn set_times_nofollow(path: &Path, t: &Times) -> io::Result<()> {
    let p = cstr(path)?;
    let ts = t.timespecs();
    // SAFETY: `p` is NUL-terminated; `ts` has two entries.
    check(unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            p.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
}

/// `fchownat(2)` with `AT_SYMLINK_NOFOLLOW`.
pub(crate) fn lchown(path: &Path, uid: u32, gid: u32) -> io::Result<()> {
    let p = cstr(path)?;
    // SAFETY: `p` is NUL-terminated.
    check(unsafe {
        libc::fchownat(
            libc::AT_FDCWD,
            p.as_ptr(),
            uid,
            gid,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
}

/// `chmod(2)`; never applied to symlinks.
pub(crate) fn chmod(path: &Path, mode: u32) -> io::Result<()> {
    let p = cstr(path)?;
    // SAFETY: `p` is NUL-terminated.
    check(unsafe { libc::chmod(p.as_ptr(), mode as libc::mode_t) })
}

/// `mkdir(2)`.
pub(crate) fn mkdir(path: &Path, mode: u32) -> io::Result<()> {
    let p = cstr(path)?;
    // SAFETY: `p` is NUL-terminated.
    check(unsafe { libc::mkdir(p.as_ptr(), mode as libc::mode_t) })
}

/// `mknod(2)` for FIFOs, sockets and devices; `mode` includes the type.
pub(crate) fn mknod(path: &Path, mode: u32, rdev: u64) -> io::Result<()> {
    let p = cstr(path)?;
    // SAFETY: `p` is NUL-terminated.
    check(unsafe {
        libc::mknod(p.as_ptr(), mode as libc::mode_t, rdev as libc::dev_t)
    })
}

/// `linkat(2)` without `AT_SYMLINK_FOLLOW`: a symlink is linked itself,
/// never the file it points at.
pub(crate) fn link_nofollow(existing: &Path, new: &Path) -> io::Result<()> {
    let a = cstr(existing)?;
    let b = cstr(new)?;
    // SAFETY: both are NUL-terminated.
    check(unsafe {
        libc::linkat(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), 0)
    })
}

/// Where the next data or hole starts at or after `offset`
/// (`SEEK_DATA`/`SEEK_HOLE`). `Ok(None)` means "no more data" (ENXIO).
pub(crate) fn seek(
    f: &File,
    offset: u64,
    data: bool,
) -> io::Result<Option<u64>> {
    let whence = if data {
        libc::SEEK_DATA
    } else {
        libc::SEEK_HOLE
    };
    // SAFETY: plain lseek on an open fd.
    let r =
        unsafe { libc::lseek(f.as_raw_fd(), offset as libc::off_t, whence) };
    if r == -1 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENXIO) {
            return Ok(None);
        }
        return Err(e);
    }
    Ok(Some(r as u64))
}

/// The effective user id; decides whether ownership can be kept.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// The effective group id: what new files get as group when not root.
pub(crate) fn egid() -> u32 {
    // SAFETY: getegid cannot fail.
    unsafe { libc::getegid() }
}
