//! Visiting a tree beneath a descriptor, depth first in name order, never
//! through a symlink: for readers (digests, checks) that must see a tree
//! as it is without a path growing with depth.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::resolve::open_dir_nofollow;
use crate::error::{Error, Op, Refusal, Result};
use crate::sys::posix::at;

/// An entry [`walk_tree`] visits.
pub struct Visit<'a> {
    /// Its path relative to the top (empty for the top itself); for
    /// messages and digests, never handed to the kernel.
    pub rel: &'a Path,
    /// The directory holding it, open (for the top, the top itself).
    pub dir: BorrowedFd<'a>,
    /// Its name in `dir` (`.` for the top).
    pub name: &'a CStr,
    /// Its `lstat`.
    pub stat: &'a libc::stat,
}

/// A directory on the way down in [`walk_tree`].
struct Walked {
    id: (u64, u64),
    entries: std::vec::IntoIter<(CString, libc::stat)>,
}

/// Visits the directory `top` and everything beneath it, never following
/// a symlink: the top first, then depth first, each directory's entries
/// in the byte order of their names (as walkdir's `sort_by_file_name`).
/// Each entry is seen through its directory's descriptor and its own
/// name, so no path handed to the kernel grows with depth, and one
/// directory is held open at a time: going back up opens `..` and checks
/// it is the directory it came from (device and inode). `visit` says
/// whether to go on; its error ends the walk.
pub fn walk_tree(
    top: &Path,
    visit: &mut dyn FnMut(&Visit<'_>) -> io::Result<bool>,
) -> Result<()> {
    let mut cur = open_dir_nofollow(top)?;
    let st = at::fstat(&cur).map_err(|e| Error::io(Op::Stat, top, e))?;
    let mut rel = PathBuf::new();
    let shown = |rel: &Path| top.join(rel);
    let v = Visit {
        rel: &rel,
        dir: cur.as_fd(),
        name: c".",
        stat: &st,
    };
    if !visit(&v).map_err(|e| Error::io(Op::ReadDir, top, e))? {
        return Ok(());
    }
    let mut stack = vec![entries(&cur, top, &rel)?];
    loop {
        let Some(level) = stack.last_mut() else {
            return Ok(());
        };
        if let Some((name, st)) = level.entries.next() {
            rel.push(std::ffi::OsStr::from_bytes(name.as_bytes()));
            let v = Visit {
                rel: &rel,
                dir: cur.as_fd(),
                name: &name,
                stat: &st,
            };
            if !visit(&v).map_err(|e| Error::io(Op::ReadDir, shown(&rel), e))? {
                return Ok(());
            }
            if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                rel.pop();
                continue;
            }
            let child = at::open_dir(cur.as_raw_fd(), &name)
                .map_err(|e| Error::io(Op::Open, shown(&rel), e))?;
            let walked = entries(&child, top, &rel)?;
            if walked.id != (st.st_dev as u64, st.st_ino as u64) {
                return Err(Error::refused(shown(&rel), Refusal::ChangedType));
            }
            stack.push(walked);
            cur = child;
            continue;
        }
        stack.pop();
        let Some(parent) = stack.last() else {
            return Ok(());
        };
        cur = up(&cur, top, &mut rel, parent.id)?;
    }
}

/// The entries of the directory `fd` (at `rel` beneath `top`), each with
/// its `lstat`, in the byte order of their names.
fn entries(fd: &OwnedFd, top: &Path, rel: &Path) -> Result<Walked> {
    let shown = |rel: &Path| top.join(rel);
    let st = at::fstat(fd).map_err(|e| Error::io(Op::Stat, shown(rel), e))?;
    let names = at::read_names(fd)
        .map_err(|e| Error::io(Op::ReadDir, shown(rel), e))?;
    let mut v = Vec::with_capacity(names.len());
    for n in names {
        if let Some(st) = at::lstat(fd.as_raw_fd(), &n).map_err(|e| {
            Error::io(
                Op::Stat,
                shown(&rel.join(std::ffi::OsStr::from_bytes(n.as_bytes()))),
                e,
            )
        })? {
            v.push((n, st));
        }
    }
    v.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    Ok(Walked {
        id: (st.st_dev as u64, st.st_ino as u64),
        entries: v.into_iter(),
    })
}

/// Goes up from `cur` (at `rel` beneath `top`, which loses its last
/// component) to `..`, checked to be the directory `parent` it came
/// from.
fn up(
    cur: &OwnedFd,
    top: &Path,
    rel: &mut PathBuf,
    parent: (u64, u64),
) -> Result<OwnedFd> {
    let up = at::open_dir(cur.as_raw_fd(), c"..")
        .map_err(|e| Error::io(Op::Open, top.join(&*rel), e))?;
    let st =
        at::fstat(&up).map_err(|e| Error::io(Op::Stat, top.join(&*rel), e))?;
    rel.pop();
    // Moved meanwhile: `..` is another directory now.
    if (st.st_dev as u64, st.st_ino as u64) != parent {
        return Err(Error::refused(top.join(&*rel), Refusal::ChangedType));
    }
    Ok(up)
}
