//! Applying metadata: owner, extended attributes, mode, times.
//!
//! The order matters and is the same for every kind of entry:
//! 1. owner: `chown` clears setuid/setgid bits and file capabilities, so
//!    it comes first;
//! 2. extended attributes (capabilities, ACLs, user.*), after the owner so
//!    `security.capability` survives;
//! 3. mode with its special bits, after chown for the same reason (an ACL
//!    set in step 2 is consistent with it: its mask is the group bits);
//! 4. times, last, since every step before may change ctime/mtime.

use std::ffi::{CStr, CString};
use std::fs::{File, Metadata, Permissions};
use std::io;
use std::os::fd::{AsFd, RawFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::node::{DirFds, DirNode};
use super::shared::Shared;
use crate::error::{Error, Op, Result};
use crate::stats::NoticeKind;
use crate::sys::posix::{self, Stat, Times, at};
use crate::sys::{self, XattrTarget};

/// Owner, xattrs, mode, times of a regular file, through its descriptor.
pub(crate) fn apply_file(
    shared: &Shared<'_>,
    src: &File,
    dst: &File,
    md: &Metadata,
    src_path: &Path,
    dst_path: &Path,
) -> Result<()> {
    owner(shared, md.uid(), md.gid(), dst_path, || {
        std::os::unix::fs::fchown(dst, Some(md.uid()), Some(md.gid()))
    })?;
    copy_xattrs(
        shared,
        &XattrTarget::Fd(src.as_fd()),
        &XattrTarget::Fd(dst.as_fd()),
        src_path,
        dst_path,
    )?;
    dst.set_permissions(Permissions::from_mode(mode(
        shared,
        &Stat::of_metadata(md),
        dst_path,
    )))
    .map_err(|e| Error::io(Op::Chmod, dst_path, e))?;
    posix::set_times_fd(dst, &Times::of(md))
        .map_err(|e| Error::io(Op::SetTimes, dst_path, e))
}

/// The same for an entry named in a directory we hold: symlinks (no
/// mode), special files. Nothing is followed: not the directory's path
/// (we hold it), not the entry (`AT_SYMLINK_NOFOLLOW`, `O_PATH`). `src`
/// is the source entry (itself named in its directory, or by path).
pub(crate) fn apply_at(
    shared: &Shared<'_>,
    md: &Stat,
    src: &XattrTarget<'_>,
    src_path: &Path,
    dir: RawFd,
    leaf: &CStr,
    dst_path: &Path,
) -> Result<()> {
    owner(shared, md.uid, md.gid, dst_path, || {
        at::lchown(dir, leaf, md.uid, md.gid)
    })?;
    copy_xattrs(shared, src, &XattrTarget::At(dir, leaf), src_path, dst_path)?;
    if !md.is_symlink() {
        sys::chmod_at(dir, leaf, mode(shared, md, dst_path))
            .map_err(|e| Error::io(Op::Chmod, dst_path, e))?;
    }
    at::set_times(dir, leaf, &md.times)
        .map_err(|e| Error::io(Op::SetTimes, dst_path, e))
}

/// A finished directory, through its source and destination
/// descriptors.
pub(crate) fn apply_dir(
    shared: &Shared<'_>,
    d: &DirNode,
    fds: &DirFds,
) -> Result<()> {
    let md = &d.md;
    // A dry run's directory, not made, has nothing to apply to (and a
    // dry run applies nothing).
    let Some(dst) = fds.dst.fd() else {
        return Ok(());
    };
    // Made here, not kept: a node holds no paths.
    let (src_path, dst_path) = d.paths();
    owner(shared, md.uid, md.gid, &dst_path, || {
        at::fchown(dst, md.uid, md.gid)
    })?;
    copy_xattrs(
        shared,
        &XattrTarget::Fd(fds.src.as_fd()),
        &XattrTarget::Fd(dst.as_fd()),
        &src_path,
        &dst_path,
    )?;
    at::fchmod(dst, mode(shared, md, &dst_path))
        .map_err(|e| Error::io(Op::Chmod, &dst_path, e))?;
    at::futimens(dst, &md.times)
        .map_err(|e| Error::io(Op::SetTimes, &dst_path, e))
}

/// The mode to give an entry: the source's, but without the setuid
/// (setgid) bit of an owner (group) the copy does not keep — in a run
/// acting as a caller, one not running as root, or one told not to keep
/// owners — as `cp -a` clears them when it cannot keep the owner: a
/// set-id bit means "run as this owner", and the owner here is the
/// caller.
fn mode(shared: &Shared<'_>, md: &Stat, path: &Path) -> u32 {
    let mode = md.mode & 0o7777;
    let Some(who) = &shared.owner else {
        return mode;
    };
    let mut kept = mode;
    if md.uid != who.uid {
        kept &= !0o4000; // S_ISUID
    }
    // A directory's setgid bit only says that entries take its group.
    if !md.is_dir() && md.gid != who.gid && !who.groups.contains(&md.gid) {
        kept &= !0o2000; // S_ISGID
    }
    if kept != mode {
        shared.notice(NoticeKind::SetId, path);
    }
    kept
}

/// Attributes a caller without privilege can never set: file
/// capabilities and the other `security.*` labels, and `trusted.*`.
fn privileged_xattr(name: &[u8]) -> bool {
    name.starts_with(b"security.") || name.starts_with(b"trusted.")
}

/// Sets the owner when we keep owners; otherwise, or when not permitted
/// without root, notes once that owners were not kept.
fn owner(
    shared: &Shared<'_>,
    uid: u32,
    gid: u32,
    path: &Path,
    chown: impl FnOnce() -> io::Result<()>,
) -> Result<()> {
    if !shared.preserve_owner {
        if !shared.is_root && (uid != posix::euid() || gid != posix::egid()) {
            shared.notice(NoticeKind::Ownership, path);
        }
        return Ok(());
    }
    match chown() {
        Ok(()) => Ok(()),
        Err(e) if !shared.is_root && e.raw_os_error() == Some(libc::EPERM) => {
            shared.notice(NoticeKind::Ownership, path);
            Ok(())
        }
        Err(e) => Err(Error::io(Op::Chown, path, e)),
    }
}

/// Copies every extended attribute we can read. Attributes that need
/// privilege we lack (trusted.*, security.capability) are noted once,
/// not failed; as root every failure is an error, since a root missing a
/// capability or an ACL is broken.
fn copy_xattrs(
    shared: &Shared<'_>,
    src: &XattrTarget<'_>,
    dst: &XattrTarget<'_>,
    src_path: &Path,
    dst_path: &Path,
) -> Result<()> {
    let names = sys::list_xattrs(src).map_err(|e| Error::Attr {
        op: Op::ListXattr,
        path: src_path.to_path_buf(),
        name: String::new(),
        error: e,
    })?;
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let attr_err = |op, path: &Path, e| Error::Attr {
            op,
            path: path.to_path_buf(),
            name: String::from_utf8_lossy(name).into_owned(),
            error: e,
        };
        // Acting as a caller, these are not even tried: the thread has no
        // capability to set them, and must not rely on that alone.
        if shared.plan.credentials.is_some() && privileged_xattr(name) {
            shared.notice(NoticeKind::Xattr(namespace(name)), dst_path);
            continue;
        }
        // Split on NUL, so the name has none.
        let cname = CString::new(name).map_err(|_| {
            attr_err(
                Op::GetXattr,
                src_path,
                io::Error::from(io::ErrorKind::InvalidData),
            )
        })?;
        let Some(value) = sys::get_xattr(src, &cname)
            .map_err(|e| attr_err(Op::GetXattr, src_path, e))?
        else {
            continue;
        };
        if let Err(e) = sys::set_xattr(dst, &cname, &value) {
            let denied =
                matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES));
            if denied && !shared.is_root {
                shared.notice(NoticeKind::Xattr(namespace(name)), dst_path);
            } else {
                return Err(attr_err(Op::SetXattr, dst_path, e));
            }
        }
    }
    Ok(())
}

/// How a notice names an attribute: capabilities by name, the rest by
/// namespace.
fn namespace(name: &[u8]) -> String {
    let name = String::from_utf8_lossy(name);
    if name == "security.capability" || name.starts_with("system.") {
        return name.into_owned();
    }
    match name.split_once('.') {
        Some((ns, _)) => format!("{ns}.*"),
        None => name.into_owned(),
    }
}
