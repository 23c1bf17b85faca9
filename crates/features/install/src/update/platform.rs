//! What the update asks of the filesystem that only some platforms
//! answer: a root snapshotted whole (a btrfs subvolume), a file's data
//! cloned copy-on-write, a root removed in one call, and which
//! filesystem holds a root.

use std::ffi::CStr;
use std::io;
use std::os::fd::BorrowedFd;

/// Makes `name` in `parent` a writable snapshot of the root open as
/// `root`, if it is a btrfs subvolume; false otherwise.
#[cfg(target_os = "linux")]
pub(crate) fn snapshot(
    root: BorrowedFd<'_>,
    parent: BorrowedFd<'_>,
    name: &CStr,
) -> io::Result<bool> {
    use zinstall_sys::fs::subvolume;
    if !subvolume::is_subvolume(root)? {
        return Ok(false);
    }
    subvolume::snapshot(root, parent, name)
}

/// Never, off Linux.
#[cfg(not(target_os = "linux"))]
pub(crate) fn snapshot(
    _root: BorrowedFd<'_>,
    _parent: BorrowedFd<'_>,
    _name: &CStr,
) -> io::Result<bool> {
    Ok(false)
}

/// Makes `name` in `parent` an empty btrfs subvolume, where the
/// filesystem is btrfs; false otherwise (the caller makes a directory).
#[cfg(target_os = "linux")]
pub(crate) fn make_subvolume(
    parent: BorrowedFd<'_>,
    name: &CStr,
) -> io::Result<bool> {
    zinstall_sys::fs::subvolume::create_subvolume(parent, name)
}

/// Never, off Linux.
#[cfg(not(target_os = "linux"))]
pub(crate) fn make_subvolume(
    _parent: BorrowedFd<'_>,
    _name: &CStr,
) -> io::Result<bool> {
    Ok(false)
}

/// Removes `name` in `parent` in one call if it is a btrfs subvolume
/// (`dir` open on it); false otherwise.
#[cfg(target_os = "linux")]
pub(crate) fn remove_subvolume(
    dir: BorrowedFd<'_>,
    parent: BorrowedFd<'_>,
    name: &CStr,
) -> io::Result<bool> {
    use zinstall_sys::fs::subvolume;
    if !subvolume::is_subvolume(dir)? {
        return Ok(false);
    }
    subvolume::destroy_subvolume(parent, name)
}

/// Never, off Linux.
#[cfg(not(target_os = "linux"))]
pub(crate) fn remove_subvolume(
    _dir: BorrowedFd<'_>,
    _parent: BorrowedFd<'_>,
    _name: &CStr,
) -> io::Result<bool> {
    Ok(false)
}

/// Clones `src`'s data into the empty file `dst`, sharing extents;
/// false where the filesystem (or platform) cannot.
#[cfg(target_os = "linux")]
pub(crate) fn clone_data(dst: BorrowedFd<'_>, src: BorrowedFd<'_>) -> bool {
    rustix::fs::ioctl_ficlone(dst, src).is_ok()
}

/// Clones `src`'s data into the empty file `dst`, sharing extents;
/// false where the filesystem (or platform) cannot.
#[cfg(not(target_os = "linux"))]
pub(crate) fn clone_data(_dst: BorrowedFd<'_>, _src: BorrowedFd<'_>) -> bool {
    false
}

/// True if `fd` is on btrfs, whose `fsync` makes only the file's own
/// metadata durable, not what came before it.
#[cfg(target_os = "linux")]
pub(crate) fn on_btrfs(fd: BorrowedFd<'_>) -> bool {
    rustix::fs::fstatfs(fd)
        .is_ok_and(|s| s.f_type as i64 == libc::BTRFS_SUPER_MAGIC as i64)
}

/// True if `fd` is on btrfs (never, off Linux).
#[cfg(not(target_os = "linux"))]
pub(crate) fn on_btrfs(_fd: BorrowedFd<'_>) -> bool {
    false
}

/// Which directory a root is, as the journal and the manifest name it:
/// its inode number, but for a btrfs subvolume (every one of whose root
/// directories is inode 256, a snapshot's too) its subvolume id, which a
/// rename or a remount does not change.
#[cfg(target_os = "linux")]
pub(crate) fn root_id(p: &std::path::Path) -> io::Result<u64> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::symlink_metadata(p)?;
    if md.ino() != 256 || !md.is_dir() {
        return Ok(md.ino());
    }
    let dir =
        zinstall_engine::beneath::Root::open(p).map_err(io::Error::other)?;
    Ok(
        match zinstall_sys::fs::subvolume::subvolume_id(dir.as_fd())? {
            // Never a small inode number.
            Some(id) => id | (1 << 63),
            None => md.ino(),
        },
    )
}

/// Which directory a root is: its inode number.
#[cfg(not(target_os = "linux"))]
pub(crate) fn root_id(p: &std::path::Path) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::symlink_metadata(p)?.ino())
}
