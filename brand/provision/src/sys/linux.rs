//! Linux: a file's inode flags (`chattr`'s), through `ioctl(2)`.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `FS_IMMUTABLE_FL` of `linux/fs.h`.
pub(crate) const IMMUTABLE_FL: libc::c_int = 0x10;

/// The inode flags of `f` (`FS_IOC_GETFLAGS`).
pub(crate) fn file_flags(f: &File) -> io::Result<libc::c_int> {
    let mut flags: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one int through the pointer, which
    // points at a live int.
    let r = unsafe {
        libc::ioctl(f.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags)
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(flags)
}

/// Sets the inode flags of `f` to `flags` (`FS_IOC_SETFLAGS`).
pub(crate) fn set_file_flags(f: &File, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: FS_IOC_SETFLAGS reads one int through the pointer, which
    // points at a live int.
    let r =
        unsafe { libc::ioctl(f.as_raw_fd(), libc::FS_IOC_SETFLAGS, &flags) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
