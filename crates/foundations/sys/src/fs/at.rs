//! A directory file descriptor with the `*at` calls the unpacker uses.
//! Names passed in are single path components: the caller has checked
//! them, and the kernel never sees a `/` from an archive here.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::stat::{Stat, Times};
use crate::ffi::check;

fn fd_result(fd: libc::c_int) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens the directory `n` in `dir` without following a symlink.
pub fn open_dir(dir: RawFd, n: &CStr) -> io::Result<OwnedFd> {
    // SAFETY: valid descriptor and C string.
    fd_result(unsafe {
        libc::openat(
            dir,
            n.as_ptr(),
            libc::O_RDONLY
                | libc::O_DIRECTORY
                | libc::O_NOFOLLOW
                | libc::O_CLOEXEC,
        )
    })
}

/// Opens `n` in `dir` for reading without following a symlink (ELOOP
/// if it is one) and without blocking on a fifo or a device.
pub fn open_read(dir: RawFd, n: &CStr) -> io::Result<File> {
    // SAFETY: valid descriptor and C string.
    let fd = fd_result(unsafe {
        libc::openat(
            dir,
            n.as_ptr(),
            libc::O_RDONLY
                | libc::O_NOFOLLOW
                | libc::O_NONBLOCK
                | libc::O_CLOEXEC,
        )
    })?;
    Ok(File::from(fd))
}

/// `fstatat(AT_SYMLINK_NOFOLLOW)` as a [`Stat`]; a
/// missing entry is an error (`ENOENT`).
pub fn stat(dir: RawFd, n: &CStr) -> io::Result<Stat> {
    match lstat(dir, n)? {
        Some(st) => Ok(Stat::of(&st)),
        None => Err(io::Error::from_raw_os_error(libc::ENOENT)),
    }
}

/// Creates a regular file `n` in `dir` with `mode` (under the umask);
/// fails if anything is there.
pub fn create_file_mode(dir: RawFd, n: &CStr, mode: u32) -> io::Result<File> {
    // SAFETY: valid descriptor and C string.
    let fd = fd_result(unsafe {
        libc::openat(
            dir,
            n.as_ptr(),
            libc::O_WRONLY
                | libc::O_CREAT
                | libc::O_EXCL
                | libc::O_NOFOLLOW
                | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    })?;
    Ok(File::from(fd))
}

/// Creates a regular file `n` in `dir`, 0600; fails if anything is
/// there.
pub fn create_file(dir: RawFd, n: &CStr) -> io::Result<File> {
    create_file_mode(dir, n, 0o600)
}

pub fn mkdir(dir: RawFd, n: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: valid descriptor and C string.
    check(unsafe { libc::mkdirat(dir, n.as_ptr(), mode as libc::mode_t) })
}

pub fn symlink(target: &CStr, dir: RawFd, n: &CStr) -> io::Result<()> {
    // SAFETY: valid descriptor and C strings.
    check(unsafe { libc::symlinkat(target.as_ptr(), dir, n.as_ptr()) })
}

/// A hard link at `dir/n` to `from_dir/from` (a symlink is linked
/// itself, never followed).
pub fn link(
    from_dir: RawFd,
    from: &CStr,
    dir: RawFd,
    n: &CStr,
) -> io::Result<()> {
    // SAFETY: valid descriptors and C strings.
    check(unsafe { libc::linkat(from_dir, from.as_ptr(), dir, n.as_ptr(), 0) })
}

pub fn mknod(dir: RawFd, n: &CStr, mode: u32, rdev: u64) -> io::Result<()> {
    // SAFETY: valid descriptor and C string.
    check(unsafe {
        libc::mknodat(
            dir,
            n.as_ptr(),
            mode as libc::mode_t,
            rdev as libc::dev_t,
        )
    })
}

/// `fchmodat` on a name that is not a symlink.
pub fn chmod(dir: RawFd, n: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: valid descriptor and C string.
    check(unsafe { libc::fchmodat(dir, n.as_ptr(), mode as libc::mode_t, 0) })
}

pub fn unlink(dir: RawFd, n: &CStr, is_dir: bool) -> io::Result<()> {
    let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: valid descriptor and C string.
    check(unsafe { libc::unlinkat(dir, n.as_ptr(), flags) })
}

pub fn rename(dir: RawFd, from: &CStr, to: &CStr) -> io::Result<()> {
    // SAFETY: valid descriptor and C strings.
    check(unsafe { libc::renameat(dir, from.as_ptr(), dir, to.as_ptr()) })
}

/// `renameat` from one directory to another (`EXDEV` across
/// filesystems).
pub fn rename_between(
    from_dir: RawFd,
    from: &CStr,
    to_dir: RawFd,
    to: &CStr,
) -> io::Result<()> {
    // SAFETY: valid descriptors and C strings.
    check(unsafe {
        libc::renameat(from_dir, from.as_ptr(), to_dir, to.as_ptr())
    })
}

/// `fstatat(AT_SYMLINK_NOFOLLOW)`; `None` if nothing is there.
pub fn lstat(dir: RawFd, n: &CStr) -> io::Result<Option<libc::stat>> {
    // SAFETY: stat is plain data; zeroed is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor, C string and out pointer.
    let rc = unsafe {
        libc::fstatat(dir, n.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW)
    };
    if rc == 0 {
        return Ok(Some(st));
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ENOENT) {
        Ok(None)
    } else {
        Err(e)
    }
}

pub fn lchown(dir: RawFd, n: &CStr, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: valid descriptor and C string.
    check(unsafe {
        libc::fchownat(dir, n.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW)
    })
}

pub fn set_times(dir: RawFd, n: &CStr, t: &Times) -> io::Result<()> {
    let ts = t.timespecs();
    // SAFETY: valid descriptor, C string, two timespecs.
    check(unsafe {
        libc::utimensat(dir, n.as_ptr(), ts.as_ptr(), libc::AT_SYMLINK_NOFOLLOW)
    })
}

/// `fchown` on an open descriptor.
pub fn fchown(f: &impl AsRawFd, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: valid descriptor.
    check(unsafe { libc::fchown(f.as_raw_fd(), uid, gid) })
}

/// `fchmod` on an open descriptor.
pub fn fchmod(f: &impl AsRawFd, mode: u32) -> io::Result<()> {
    // SAFETY: valid descriptor.
    check(unsafe { libc::fchmod(f.as_raw_fd(), mode as libc::mode_t) })
}

/// `fstat` on an open descriptor.
pub fn fstat(f: &impl AsRawFd) -> io::Result<libc::stat> {
    // SAFETY: stat is plain data; zeroed is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor and out pointer.
    check(unsafe { libc::fstat(f.as_raw_fd(), &mut st) })?;
    Ok(st)
}

/// `readlinkat`: the target of the symlink `n` in `dir`, byte-exact.
pub fn readlink(dir: RawFd, n: &CStr) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 256];
    loop {
        // SAFETY: valid descriptor, C string and buffer of buf.len().
        let r = unsafe {
            libc::readlinkat(
                dir,
                n.as_ptr(),
                buf.as_mut_ptr() as *mut libc::c_char,
                buf.len(),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let r = r as usize;
        if r < buf.len() {
            buf.truncate(r);
            return Ok(buf);
        }
        // Possibly cut: ask again with room to spare (targets are
        // bounded by PATH_MAX on every filesystem we write to).
        if buf.len() >= 1 << 16 {
            return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
        }
        buf.resize(buf.len() * 4, 0);
    }
}

/// The names in the directory open as `dir` (without `.` and `..`),
/// read through a duplicate of the descriptor so `dir` stays usable.
pub fn read_names(dir: &impl AsRawFd) -> io::Result<Vec<CString>> {
    let mut names = Vec::new();
    read_entries(dir.as_raw_fd(), &mut Vec::new(), |name, _| {
        names.push(name.to_owned());
        Ok(true)
    })?;
    Ok(names)
}

/// Reads the directory open as `dir` from its start, handing `f` each
/// entry's name (not `.` or `..`) and its `d_type` (`DT_UNKNOWN`
/// where the platform or filesystem does not say); `f` returns
/// whether to go on. Read through a duplicate, so `dir` stays open
/// for opening what is inside.
pub fn read_entries(
    dir: RawFd,
    _buf: &mut Vec<u8>,
    mut f: impl FnMut(&CStr, u8) -> io::Result<bool>,
) -> io::Result<()> {
    // SAFETY: plain dup of an open descriptor.
    let dup = unsafe { libc::fcntl(dir, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `dup` is ours; on success the DIR owns it.
    let d = unsafe { libc::fdopendir(dup) };
    if d.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so `dup` is still ours to close.
        unsafe { libc::close(dup) };
        return Err(e);
    }
    // SAFETY: `d` is a valid DIR.
    unsafe { libc::rewinddir(d) };
    let result = loop {
        // SAFETY: resetting errno is always allowed.
        unsafe { *errno_location() = 0 };
        // SAFETY: `d` is a valid DIR.
        let ent = unsafe { libc::readdir(d) };
        if ent.is_null() {
            // SAFETY: reading errno.
            let err = unsafe { *errno_location() };
            break if err == 0 {
                Ok(())
            } else {
                Err(io::Error::from_raw_os_error(err))
            };
        }
        // SAFETY: d_name is NUL-terminated within the entry.
        let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) };
        let b = name.to_bytes();
        if b == b"." || b == b".." {
            continue;
        }
        match f(name, entry_type(ent)) {
            Ok(true) => {}
            Ok(false) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    // SAFETY: `d` is valid and closed once.
    unsafe { libc::closedir(d) };
    result
}

/// illumos's `dirent` has no type: the caller stats the entry.
#[cfg(any(target_os = "illumos", target_os = "solaris"))]
fn entry_type(_ent: *const libc::dirent) -> u8 {
    0
}

#[cfg(not(any(target_os = "illumos", target_os = "solaris")))]
fn entry_type(ent: *const libc::dirent) -> u8 {
    // SAFETY: `ent` is the entry readdir just returned.
    unsafe { (*ent).d_type }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn errno_location() -> *mut libc::c_int {
    // SAFETY: always valid for the calling thread.
    unsafe { libc::__errno_location() }
}

#[cfg(any(target_os = "illumos", target_os = "solaris"))]
fn errno_location() -> *mut libc::c_int {
    // SAFETY: always valid for the calling thread.
    unsafe { libc::___errno() }
}

#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_os = "illumos",
    target_os = "solaris"
)))]
fn errno_location() -> *mut libc::c_int {
    // SAFETY: always valid for the calling thread.
    unsafe { libc::__error() }
}

/// `futimens` on an open descriptor.
pub fn futimens(f: &impl AsRawFd, t: &Times) -> io::Result<()> {
    let ts = t.timespecs();
    // SAFETY: valid descriptor, two timespecs.
    check(unsafe { libc::futimens(f.as_raw_fd(), ts.as_ptr()) })
}
