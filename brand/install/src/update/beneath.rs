//! System calls beneath a root's descriptor: each path opened one
//! component at a time without following a symlink, attributes set
//! through descriptors, entries removed. Shared by the diff, the clone
//! and the writes.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags};

use super::error::{UpdateError, errno_at, io_at};
use crate::manifest;

/// Extended attributes: names and values.
type Xattrs = Vec<(Vec<u8>, Vec<u8>)>;

/// The directory holding `rel` beneath `root`, opened one component at
/// a time without following a symlink, and the last component. With
/// `create`, missing directories are made (0755; the update sets their
/// attributes after).
pub(super) fn parent_of(
    root: BorrowedFd<'_>,
    rel: &[u8],
    create: bool,
) -> io::Result<(OwnedFd, CString)> {
    let parts: Vec<&[u8]> = rel
        .split(|&b| b == b'/')
        .filter(|p| !p.is_empty())
        .collect();
    let Some((last, dirs)) = parts.split_last() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty path"));
    };
    let mut fd = rustix::io::dup(root)?;
    for d in dirs {
        if *d == b".." || *d == b"." {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not beneath the root",
            ));
        }
        let c = CString::new(*d).map_err(io::Error::other)?;
        if create {
            match rustix::fs::mkdirat(
                &fd,
                c.as_c_str(),
                Mode::from_raw_mode(0o755),
            ) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
        }
        fd = open_dir(fd.as_fd(), &c)?;
    }
    if *last == b".." || *last == b"." {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not beneath the root",
        ));
    }
    Ok((fd, CString::new(*last).map_err(io::Error::other)?))
}

pub(super) fn open_dir(
    dir: BorrowedFd<'_>,
    name: &CStr,
) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

pub(super) fn set_owner_mode(
    fd: BorrowedFd<'_>,
    uid: u32,
    gid: u32,
    mode: u32,
    at: &Path,
) -> Result<(), UpdateError> {
    use rustix::fs::{Gid, Uid};
    rustix::fs::fchown(fd, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))
        .map_err(errno_at("chown", at))?;
    rustix::fs::fchmod(fd, Mode::from_raw_mode(mode))
        .map_err(errno_at("chmod", at))
}

pub(super) fn timestamps(
    atime: (i64, i64),
    mtime: (i64, i64),
) -> rustix::fs::Timestamps {
    rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: atime.0,
            tv_nsec: atime.1 as _,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: mtime.0,
            tv_nsec: mtime.1 as _,
        },
    }
}

pub(super) fn set_times_fd(
    fd: BorrowedFd<'_>,
    atime: (i64, i64),
    mtime: (i64, i64),
    at: &Path,
) -> Result<(), UpdateError> {
    rustix::fs::futimens(fd, &timestamps(atime, mtime))
        .map_err(errno_at("set times of", at))
}

/// Sets the extended attributes of `fd` to exactly those of `src`.
#[cfg(target_os = "linux")]
pub(super) fn set_xattrs_fd(
    fd: BorrowedFd<'_>,
    src: &[(Vec<u8>, Vec<u8>)],
    at: &Path,
) -> Result<(), UpdateError> {
    let names = match manifest::read_sized(|b| rustix::fs::flistxattr(fd, b)) {
        Ok(n) => n,
        Err(rustix::io::Errno::NOTSUP) => Vec::new(),
        Err(e) => return Err(errno_at("list xattrs of", at)(e)),
    };
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        if !src.iter().any(|(s, _)| s == name) {
            let c = CString::new(name).map_err(|e| {
                io_at("remove xattr of", at)(io::Error::other(e))
            })?;
            rustix::fs::fremovexattr(fd, c.as_c_str())
                .map_err(errno_at("remove xattr of", at))?;
        }
    }
    for (name, value) in src {
        let c = CString::new(name.as_slice())
            .map_err(|e| io_at("set xattr of", at)(io::Error::other(e)))?;
        rustix::fs::fsetxattr(
            fd,
            c.as_c_str(),
            value,
            rustix::fs::XattrFlags::empty(),
        )
        .map_err(errno_at("set xattr of", at))?;
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
pub(super) fn set_xattrs_fd(
    _: BorrowedFd<'_>,
    _: &[(Vec<u8>, Vec<u8>)],
    _: &Path,
) -> Result<(), UpdateError> {
    Ok(())
}

#[cfg(target_os = "linux")]
pub(super) fn xattrs_of(p: &Path) -> Result<Xattrs, UpdateError> {
    manifest::xattrs(p).map_err(io_at("read xattrs of", p))
}

#[cfg(not(target_os = "linux"))]
pub(super) fn xattrs_of(_: &Path) -> Result<Xattrs, UpdateError> {
    Ok(Vec::new())
}

pub(super) fn xattrs_fd(
    fd: BorrowedFd<'_>,
    at: &Path,
) -> Result<Xattrs, UpdateError> {
    manifest::xattrs_fd(fd).map_err(io_at("read xattrs of", at))
}

/// Removes `name` in `dir` and, a directory, everything in it, one
/// descriptor at a time without following a symlink.
pub(super) fn remove_beneath(
    dir: BorrowedFd<'_>,
    name: &CStr,
    at: &Path,
) -> Result<(), UpdateError> {
    let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(errno_at("stat", at)(e)),
    };
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return rustix::fs::unlinkat(dir, name, AtFlags::empty())
            .map_err(errno_at("remove", at));
    }
    let sub = open_dir(dir, name).map_err(io_at("open", at))?;
    let mut names = Vec::new();
    for e in rustix::fs::Dir::read_from(&sub).map_err(errno_at("read", at))? {
        let e = e.map_err(errno_at("read", at))?;
        let n = e.file_name();
        if n.to_bytes() != b"." && n.to_bytes() != b".." {
            names.push(n.to_owned());
        }
    }
    for n in names {
        remove_beneath(
            sub.as_fd(),
            &n,
            &at.join(OsStr::from_bytes(n.to_bytes())),
        )?;
    }
    rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)
        .map_err(errno_at("remove", at))
}

/// Removes the non-directory `name` if there is one; a directory there
/// is an error (the plan removed the old one first).
pub(super) fn unlink_any(
    dir: &OwnedFd,
    name: &CStr,
    at: &Path,
) -> Result<(), UpdateError> {
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(errno_at("remove", at)(e)),
    }
}
