//! Removing a tree beneath a descriptor: never following a symlink,
//! never leaving the filesystem, one directory open at a time, so depth
//! costs nothing but the names; mount points met are left and named.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::resolve::open_dir_nofollow;
use crate::error::{Error, Op, Refusal, Result};
use crate::sys::{self, posix::at};

/// Removes the tree at `path` without following symlinks, without
/// leaving its filesystem, at any depth.
///
/// Each directory is opened from its parent's descriptor (`O_NOFOLLOW`,
/// and on Linux `RESOLVE_NO_XDEV`, so a bind mount of the same filesystem
/// is seen too), made writable through that descriptor, emptied with
/// `unlinkat`, then removed. Only one directory is held open at a time:
/// going back up opens `..` and checks it is the directory we came from
/// (device and inode), so depth is bounded by nothing but memory for the
/// names. A mount point inside is left in place with what it holds, like
/// `rm --one-file-system`; the rest is removed and the first such mount
/// points are returned as an error, so a caller never mistakes the tree
/// for gone.
pub fn remove_tree(path: &Path) -> Result<()> {
    let md = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(Op::Stat, path, e)),
    };
    if !md.is_dir() {
        return std::fs::remove_file(path)
            .map_err(|e| Error::io(Op::Remove, path, e));
    }
    let top = open_dir_nofollow(path)?;
    let left = empty_dir(top, path)?;
    if !left.is_empty() {
        return Err(Error::MountsLeft {
            path: path.to_path_buf(),
            mounts: left,
        });
    }
    std::fs::remove_dir(path).map_err(|e| Error::io(Op::Remove, path, e))
}

/// Removes `name` in the directory `dir` (a tree, with everything in it,
/// or a single entry), never following a symlink and never leaving the
/// filesystem: a symlink is removed itself. `shown` names it in errors.
/// Nothing there is not an error.
pub(crate) fn remove_at(dir: RawFd, name: &CStr, shown: &Path) -> Result<()> {
    let Some(st) =
        at::lstat(dir, name).map_err(|e| Error::io(Op::Stat, shown, e))?
    else {
        return Ok(());
    };
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return at::unlink(dir, name, false)
            .map_err(|e| Error::io(Op::Remove, shown, e));
    }
    let fd =
        at::open_dir(dir, name).map_err(|e| Error::io(Op::Open, shown, e))?;
    let left = empty_dir(fd, shown)?;
    if !left.is_empty() {
        return Err(Error::MountsLeft {
            path: shown.to_path_buf(),
            mounts: left,
        });
    }
    at::unlink(dir, name, true).map_err(|e| Error::io(Op::Remove, shown, e))
}

/// One directory on the way down: who it is and what is left to visit.
struct Level {
    /// Its `(dev, ino)`, to recognise it when coming back up.
    id: (u64, u64),
    /// Subdirectories still to remove.
    subdirs: Vec<CString>,
    /// Its name in its parent.
    name: CString,
}

/// Empties the directory open as `top` (at `shown`). Returns the mount
/// points found inside and left.
fn empty_dir(top: OwnedFd, shown: &Path) -> Result<Vec<PathBuf>> {
    let top_st = at::fstat(&top).map_err(|e| Error::io(Op::Stat, shown, e))?;
    let dev = top_st.st_dev as u64;
    // The mount, where the system tells it: a bind mount of the same
    // filesystem inside is left as any mount point is.
    let mount = Mount {
        dev,
        id: sys::mount_id(top.as_raw_fd(), c"").ok().flatten(),
    };
    let mut left: Vec<PathBuf> = Vec::new();
    let mut cur = top;
    let mut path = shown.to_path_buf();
    let mut stack: Vec<Level> = Vec::new();
    let first = scan(&cur, &path, mount, &mut left)?;
    stack.push(Level {
        id: (dev, top_st.st_ino as u64),
        subdirs: first,
        name: CString::default(),
    });
    loop {
        let Some(level) = stack.last_mut() else {
            return Ok(left);
        };
        if let Some(name) = level.subdirs.pop() {
            path.push(std::ffi::OsStr::from_bytes(name.as_bytes()));
            match open_same_mount(cur.as_fd(), &name, dev) {
                Ok(Some(child)) => {
                    let st = at::fstat(&child)
                        .map_err(|e| Error::io(Op::Stat, &path, e))?;
                    let subdirs = scan(&child, &path, mount, &mut left)?;
                    stack.push(Level {
                        id: (st.st_dev as u64, st.st_ino as u64),
                        subdirs,
                        name,
                    });
                    cur = child;
                }
                Ok(None) => {
                    // Another filesystem: leave it, say so at the end.
                    left.push(path.clone());
                    path.pop();
                }
                Err(e) => return Err(Error::io(Op::Open, &path, e)),
            }
            continue;
        }
        // This level is empty (or holds only mount points): go up.
        let done = stack.pop().unwrap_or_else(|| unreachable!());
        let Some(parent) = stack.last() else {
            return Ok(left);
        };
        let up = at::open_dir(cur.as_raw_fd(), c"..")
            .map_err(|e| Error::io(Op::Open, &path, e))?;
        let st = at::fstat(&up).map_err(|e| Error::io(Op::Stat, &path, e))?;
        if (st.st_dev as u64, st.st_ino as u64) != parent.id {
            // Moved while we were inside: its parent is not ours now.
            return Err(Error::refused(&path, Refusal::ChangedType));
        }
        cur = up;
        match at::unlink(cur.as_raw_fd(), &done.name, true) {
            Ok(()) => {}
            // Holds a mount point we left: not empty, already said.
            Err(e)
                if !left.is_empty()
                    && e.raw_os_error() == Some(libc::ENOTEMPTY) => {}
            Err(e) => return Err(Error::io(Op::Remove, &path, e)),
        }
        path.pop();
    }
}

/// The device and mount (where the system tells it) a removal stays on.
#[derive(Clone, Copy)]
struct Mount {
    dev: u64,
    id: Option<u64>,
}

impl Mount {
    /// Whether the directory `name` in `dir` (whose `stat` is `st`) is
    /// on another mount: another device, or another mount id.
    fn other(&self, dir: &OwnedFd, name: &CStr, st: &libc::stat) -> bool {
        st.st_dev as u64 != self.dev
            || self.id.is_some_and(|top| {
                sys::mount_id(dir.as_raw_fd(), name)
                    .ok()
                    .flatten()
                    .is_some_and(|m| m != top)
            })
    }
}

/// Makes `dir` writable, removes every non-directory in it and returns
/// the names of its subdirectories on the same mount (the others, mount
/// points, are added to `left`).
fn scan(
    dir: &OwnedFd,
    shown: &Path,
    mount: Mount,
    left: &mut Vec<PathBuf>,
) -> Result<Vec<CString>> {
    // Through the descriptor: a read-only directory (0555 in an extracted
    // root) must not stop the removal.
    at::fchmod(dir, 0o700).map_err(|e| Error::io(Op::Chmod, shown, e))?;
    let names =
        at::read_names(dir).map_err(|e| Error::io(Op::ReadDir, shown, e))?;
    let mut subdirs = Vec::new();
    for n in names {
        let st = match at::lstat(dir.as_raw_fd(), &n) {
            Ok(Some(st)) => st,
            Ok(None) => continue,
            Err(e) => {
                return Err(Error::io(
                    Op::Stat,
                    shown.join(std::ffi::OsStr::from_bytes(n.as_bytes())),
                    e,
                ));
            }
        };
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            if mount.other(dir, &n, &st) {
                left.push(
                    shown.join(std::ffi::OsStr::from_bytes(n.as_bytes())),
                );
                continue;
            }
            subdirs.push(n);
        } else if let Err(e) = at::unlink(dir.as_raw_fd(), &n, false) {
            // A file bind-mounted over: leave it like a directory mount.
            let p = shown.join(std::ffi::OsStr::from_bytes(n.as_bytes()));
            if e.raw_os_error() == Some(libc::EBUSY) {
                left.push(p);
            } else {
                return Err(Error::io(Op::Remove, p, e));
            }
        }
    }
    Ok(subdirs)
}

/// Opens the subdirectory `name` if it is on the same mount; `Ok(None)`
/// if it is a mount point.
fn open_same_mount(
    dir: BorrowedFd<'_>,
    name: &CStr,
    dev: u64,
) -> io::Result<Option<OwnedFd>> {
    match sys::open_dir_same_mount(dir.as_raw_fd(), name) {
        Ok(Some(fd)) => return Ok(Some(fd)),
        Ok(None) => {}
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => return Ok(None),
        Err(e) => return Err(e),
    }
    let fd = at::open_dir(dir.as_raw_fd(), name)?;
    let st = at::fstat(&fd)?;
    Ok((st.st_dev as u64 == dev).then_some(fd))
}
