//! Between Rust values and C calls: paths as C strings, `-1` returns as
//! errors.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A path as a C string; paths never contain NUL, but a caller-made one
/// could, and that must be an error rather than a panic.
pub fn cstr(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte")
    })
}

/// A C call's `-1` as the error `errno` says; anything else is success.
pub fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
