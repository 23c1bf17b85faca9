//! POSIX file calls that std does not offer in the form the engine needs
//! (no-follow variants, raw timespecs, holes, locks, device numbers), the
//! same on every Unix.

use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use super::stat::Times;
use crate::ffi::{check, cstr};

/// `futimens(2)`.
pub fn set_times_fd(f: &File, t: &Times) -> io::Result<()> {
    let ts = t.timespecs();
    // SAFETY: the fd is open for the life of `f`; `ts` has two entries.
    check(unsafe { libc::futimens(f.as_raw_fd(), ts.as_ptr()) })
}

/// `mkdir(2)`.
pub fn mkdir(path: &Path, mode: u32) -> io::Result<()> {
    let p = cstr(path)?;
    // SAFETY: `p` is NUL-terminated.
    check(unsafe { libc::mkdir(p.as_ptr(), mode as libc::mode_t) })
}

/// Where the next data or hole starts at or after `offset`
/// (`SEEK_DATA`/`SEEK_HOLE`). `Ok(None)` means "no more data" (ENXIO).
pub fn seek(f: &File, offset: u64, data: bool) -> io::Result<Option<u64>> {
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

/// A device number's major and minor parts; libc's are `unsafe` on
/// illumos as `makedev` is.
pub fn major_minor(dev: u64) -> (u32, u32) {
    let dev = dev as libc::dev_t;
    // Both parts are `c_uint` on Linux and illumos.
    #[cfg(target_os = "linux")]
    let parts: (u32, u32) = (libc::major(dev), libc::minor(dev));
    #[cfg(not(target_os = "linux"))]
    // SAFETY: pure arithmetic on one integer.
    let parts: (u32, u32) = unsafe { (libc::major(dev), libc::minor(dev)) };
    parts
}

/// A device number from its parts. libc's `makedev` is a safe function
/// on Linux and an `unsafe` one on illumos.
pub fn makedev(major: u32, minor: u32) -> u64 {
    #[cfg(target_os = "linux")]
    let d = libc::makedev(major, minor);
    #[cfg(not(target_os = "linux"))]
    // SAFETY: pure arithmetic on two integers.
    let d = unsafe { libc::makedev(major, minor) };
    d as u64
}

/// `sync(2)`: every filesystem's dirty data on its way to disk.
pub fn sync() {
    // SAFETY: sync takes no arguments and cannot fail.
    unsafe { libc::sync() };
}
