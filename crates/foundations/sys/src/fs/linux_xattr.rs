//! Linux: extended attributes through the `*xattr(2)` calls, on an open
//! file, a path, or an entry of a held directory.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::io::AsRawFd;

/// What an xattr call applies to: an open file, or a path whose final
/// symlink is not followed.
pub enum XattrTarget<'a> {
    Fd(std::os::fd::BorrowedFd<'a>),
    Path(&'a CStr),
    /// The entry named in an open directory, its final symlink not
    /// followed: for symlinks and special files, which cannot be opened
    /// for xattr calls. Reached as `/proc/self/fd/DIR/NAME`, so the
    /// directory is the one we hold, whatever its path now leads to.
    At(RawFd, &'a CStr),
}

/// `/proc/self/fd/DIR/NAME`: the `l*xattr` path of an entry in a held
/// directory. Linux has no `*xattrat` calls before 6.13.
fn proc_path(dir: RawFd, name: &CStr) -> io::Result<CString> {
    let mut v = format!("/proc/self/fd/{dir}/").into_bytes();
    v.extend_from_slice(name.to_bytes());
    CString::new(v).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Names of the extended attributes, NUL-separated as the kernel gives
/// them. A filesystem without xattrs has none.
pub fn list_xattrs(t: &XattrTarget<'_>) -> io::Result<Vec<u8>> {
    if let XattrTarget::At(dir, name) = t {
        return list_xattrs(&XattrTarget::Path(&proc_path(*dir, name)?));
    }
    let mut buf = Vec::new();
    loop {
        // SAFETY: buf has `capacity` writable bytes (0 asks for the size).
        let r = unsafe {
            let (p, n) =
                (buf.as_mut_ptr() as *mut libc::c_char, buf.capacity());
            match t {
                XattrTarget::Fd(f) => libc::flistxattr(f.as_raw_fd(), p, n),
                XattrTarget::Path(c) => libc::llistxattr(c.as_ptr(), p, n),
                XattrTarget::At(..) => unreachable!("resolved above"),
            }
        };
        if r >= 0 {
            let r = r as usize;
            if buf.capacity() == 0 && r > 0 {
                buf.reserve_exact(r);
                continue;
            }
            // SAFETY: the kernel wrote `r` bytes.
            unsafe { buf.set_len(r) };
            return Ok(buf);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENOTSUP) => return Ok(Vec::new()),
            // The list grew between the two calls: ask again.
            Some(libc::ERANGE) => {
                buf = Vec::new();
                continue;
            }
            _ => return Err(e),
        }
    }
}

/// The value of one attribute; `None` if it is gone (removed since it was
/// listed).
pub fn get_xattr(
    t: &XattrTarget<'_>,
    name: &CStr,
) -> io::Result<Option<Vec<u8>>> {
    if let XattrTarget::At(dir, leaf) = t {
        let p = proc_path(*dir, leaf)?;
        return get_xattr(&XattrTarget::Path(&p), name);
    }
    let mut buf: Vec<u8> = Vec::new();
    loop {
        // SAFETY: buf has `capacity` writable bytes.
        let r = unsafe {
            let (p, n) =
                (buf.as_mut_ptr() as *mut libc::c_void, buf.capacity());
            match t {
                XattrTarget::Fd(f) => {
                    libc::fgetxattr(f.as_raw_fd(), name.as_ptr(), p, n)
                }
                XattrTarget::Path(c) => {
                    libc::lgetxattr(c.as_ptr(), name.as_ptr(), p, n)
                }
                XattrTarget::At(..) => unreachable!("resolved above"),
            }
        };
        if r >= 0 {
            let r = r as usize;
            if buf.capacity() == 0 && r > 0 {
                buf.reserve_exact(r);
                continue;
            }
            // SAFETY: the kernel wrote `r` bytes.
            unsafe { buf.set_len(r) };
            return Ok(Some(buf));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) => buf = Vec::new(),
            Some(libc::ENODATA) => return Ok(None),
            _ => return Err(e),
        }
    }
}

/// Sets one attribute.
pub fn set_xattr(
    t: &XattrTarget<'_>,
    name: &CStr,
    value: &[u8],
) -> io::Result<()> {
    if let XattrTarget::At(dir, leaf) = t {
        let p = proc_path(*dir, leaf)?;
        return set_xattr(&XattrTarget::Path(&p), name, value);
    }
    let (v, n) = (value.as_ptr() as *const libc::c_void, value.len());
    // SAFETY: name is NUL-terminated, value is `n` readable bytes.
    let r = unsafe {
        match t {
            XattrTarget::Fd(f) => {
                libc::fsetxattr(f.as_raw_fd(), name.as_ptr(), v, n, 0)
            }
            XattrTarget::Path(c) => {
                libc::lsetxattr(c.as_ptr(), name.as_ptr(), v, n, 0)
            }
            XattrTarget::At(..) => unreachable!("resolved above"),
        }
    };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Removes the attribute `name` of the open file `f` (`fremovexattr`);
/// one already gone is no error.
pub fn remove_xattr_fd(f: &impl AsRawFd, name: &CStr) -> io::Result<()> {
    // SAFETY: valid descriptor; name is NUL-terminated.
    if unsafe { libc::fremovexattr(f.as_raw_fd(), name.as_ptr()) } == -1 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENODATA) {
            return Err(e);
        }
    }
    Ok(())
}
