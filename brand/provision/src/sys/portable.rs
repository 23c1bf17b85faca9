//! illumos and other Unix systems: no inode flags to read or set
//! (`ENOTTY`, as Linux says of a filesystem without them).

use std::fs::File;
use std::io;

/// Linux's `FS_IMMUTABLE_FL`; no file here carries it.
pub(crate) const IMMUTABLE_FL: libc::c_int = 0x10;

/// No flags here: `ENOTTY`.
pub(crate) fn file_flags(_f: &File) -> io::Result<libc::c_int> {
    Err(io::Error::from_raw_os_error(libc::ENOTTY))
}

/// No flags here: `ENOTTY`.
pub(crate) fn set_file_flags(_f: &File, _flags: libc::c_int) -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::ENOTTY))
}
