//! The update's system calls on single names: attributes set through
//! descriptors, and the directory holding a path opened beneath a root
//! by the engine's writer ([`zinstall_engine::beneath`]), never through a
//! symlink.
//!
//! Extended attributes are set exactly: what a new entry inherited (a
//! directory made under one with a default ACL gets that ACL) is
//! removed, so an entry carries its source's attributes and nothing
//! else. XFS lists its ACLs a second time as `trusted.SGI_ACL_FILE` and
//! `trusted.SGI_ACL_DEFAULT`; those aliases are never copied, compared or
//! removed on their own: they come and go with `system.posix_acl_*`.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::Mode;
use zinstall_engine::beneath::{Dir, Root};

use super::error::{UpdateError, errno_at, io_at};
use crate::manifest;

/// Extended attributes: names and values.
pub(super) type Xattrs = Vec<(Vec<u8>, Vec<u8>)>;

/// The relative path `rel` as a `Path`.
pub(super) fn rel_path(rel: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(rel))
}

/// The directory holding `rel` beneath `root`, opened without following
/// a symlink (made, 0755, with `create`), and `rel`'s last component.
pub(super) fn parent(
    root: &Root,
    rel: &[u8],
    create: bool,
) -> Result<(Dir, CString), UpdateError> {
    let (dir, name) = match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => (&b""[..], rel),
    };
    let shown = root.path().join(rel_path(rel));
    if name.is_empty() || name == b"." || name == b".." {
        return Err(UpdateError::Io {
            op: "open",
            path: shown,
            error: io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a name beneath the root",
            ),
        });
    }
    let d = if dir.is_empty() {
        root.top()
    } else {
        root.dir(rel_path(dir), create.then_some(0o755))?
    };
    let c = CString::new(name)
        .map_err(|e| io_at("open", &shown)(io::Error::other(e)))?;
    Ok((d, c))
}

/// The shown path of `name` in `dir`.
pub(super) fn shown(dir: &Dir, name: &CStr) -> PathBuf {
    dir.path().join(OsStr::from_bytes(name.to_bytes()))
}

pub(super) fn set_owner(
    fd: BorrowedFd<'_>,
    uid: u32,
    gid: u32,
    at: &Path,
) -> Result<(), UpdateError> {
    use rustix::fs::{Gid, Uid};
    rustix::fs::fchown(fd, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))
        .map_err(errno_at("chown", at))
}

pub(super) fn set_mode(
    fd: BorrowedFd<'_>,
    mode: u32,
    at: &Path,
) -> Result<(), UpdateError> {
    rustix::fs::fchmod(fd, Mode::from_raw_mode(mode))
        .map_err(errno_at("chmod", at))
}

/// Owner, extended attributes, then mode: a `chown` clears set-id bits
/// and file capabilities, so both are set after it; the mode last, so
/// that removing an inherited ACL cannot leave its mask in the group
/// bits.
pub(super) fn set_meta(
    fd: BorrowedFd<'_>,
    uid: u32,
    gid: u32,
    mode: u32,
    xattrs: &Xattrs,
    at: &Path,
) -> Result<(), UpdateError> {
    set_owner(fd, uid, gid, at)?;
    set_xattrs(fd, xattrs, at)?;
    set_mode(fd, mode, at)
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

/// Makes the file `name` in `dir`, which must not exist (never through
/// a symlink), 0600 until its metadata is set; open for writing.
pub(super) fn create_new(
    dir: BorrowedFd<'_>,
    name: &CStr,
    at: &Path,
) -> Result<std::os::fd::OwnedFd, UpdateError> {
    use rustix::fs::OFlags;
    rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::EXCL
            | OFlags::NOFOLLOW
            | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(errno_at("create", at))
}

/// Gives the symlink `name` in `dir` its owner and times; never
/// followed.
pub(super) fn set_link_owner_and_times(
    dir: BorrowedFd<'_>,
    name: &CStr,
    (uid, gid): (u32, u32),
    (atime, mtime): ((i64, i64), (i64, i64)),
    at: &Path,
) -> Result<(), UpdateError> {
    use rustix::fs::{AtFlags, Gid, Uid};
    let nofollow = AtFlags::SYMLINK_NOFOLLOW;
    let (uid, gid) = (Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)));
    rustix::fs::chownat(dir, name, uid, gid, nofollow)
        .map_err(errno_at("chown", at))?;
    rustix::fs::utimensat(dir, name, &timestamps(atime, mtime), nofollow)
        .map_err(errno_at("set times of", at))
}

pub(super) fn set_times(
    fd: BorrowedFd<'_>,
    atime: (i64, i64),
    mtime: (i64, i64),
    at: &Path,
) -> Result<(), UpdateError> {
    rustix::fs::futimens(fd, &timestamps(atime, mtime))
        .map_err(errno_at("set times of", at))
}

/// Sets the extended attributes of `fd` to exactly `want`: every other
/// name removed (an inherited ACL included), XFS's aliases left alone.
#[cfg(target_os = "linux")]
pub(super) fn set_xattrs(
    fd: BorrowedFd<'_>,
    want: &Xattrs,
    at: &Path,
) -> Result<(), UpdateError> {
    let names = match manifest::read_sized(|b| rustix::fs::flistxattr(fd, b)) {
        Ok(n) => n,
        Err(rustix::io::Errno::NOTSUP) => Vec::new(),
        Err(e) => return Err(errno_at("list xattrs of", at)(e)),
    };
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        if manifest::xattr_alias(name) || want.iter().any(|(w, _)| w == name) {
            continue;
        }
        let c = CString::new(name)
            .map_err(|e| io_at("remove xattr of", at)(io::Error::other(e)))?;
        match rustix::fs::fremovexattr(fd, c.as_c_str()) {
            // Gone with another: an ACL's alias, or the ACL itself.
            Ok(()) | Err(rustix::io::Errno::NODATA) => {}
            Err(e) => return Err(errno_at("remove xattr of", at)(e)),
        }
    }
    for (name, value) in want {
        if manifest::xattr_alias(name) {
            continue;
        }
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
pub(super) fn set_xattrs(
    _: BorrowedFd<'_>,
    _: &Xattrs,
    _: &Path,
) -> Result<(), UpdateError> {
    Ok(())
}

/// The extended attributes of the file at `p` (not followed).
#[cfg(target_os = "linux")]
pub(super) fn xattrs_of(p: &Path) -> Result<Xattrs, UpdateError> {
    manifest::xattrs(p).map_err(io_at("read xattrs of", p))
}

#[cfg(not(target_os = "linux"))]
pub(super) fn xattrs_of(_: &Path) -> Result<Xattrs, UpdateError> {
    Ok(Vec::new())
}

/// The extended attributes of what `fd` is open on.
pub(super) fn xattrs_fd(
    fd: BorrowedFd<'_>,
    at: &Path,
) -> Result<Xattrs, UpdateError> {
    manifest::xattrs_fd(fd).map_err(io_at("read xattrs of", at))
}
