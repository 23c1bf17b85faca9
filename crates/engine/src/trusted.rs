//! Opening a directory a privileged process works in by a path it was
//! given (a zonepath), only if nobody else could have decided where that
//! path leads.
//!
//! A root process that follows a path through a directory another user
//! can write lets that user choose the target: a symlink planted in
//! `/tmp`, or a directory renamed and replaced by one while the process
//! works. So, as systemd's `chase()` with `CHASE_SAFE` and tmpfiles'
//! "unsafe path transition" check do, [`open_dir`] walks the path from
//! `/` one component at a time, each opened from its parent's descriptor,
//! and refuses it when any directory on the way could be changed by
//! someone other than root or this process's user:
//!
//! * a directory owned by another user, or writable by everyone, or by a
//!   group other than root's, may hold the next component only if it is
//!   sticky and that component is owned by root or this user (the sticky
//!   bit keeps others from renaming or removing it: `/tmp/x` made by root
//!   is safe, `/tmp/x` made by anyone else is not);
//! * a symlink on the way is followed only where that rule holds, its
//!   target checked the same way (`/var/run` → `/run` is fine);
//! * the last component is never a symlink, and must be a directory
//!   owned by root or this user (its mode is the caller's to set, through
//!   the descriptor).
//!
//! Each directory is made (when asked) and opened with the engine's own
//! step beneath its parent ([`crate::beneath`]: `O_DIRECTORY |
//! O_NOFOLLOW`, a symlink or non-directory met told apart), and the
//! last is returned as a [`Root`], whose descriptor the caller works
//! from.

// libc's `stat` field types differ between platforms: casts that are
// no-ops here are not everywhere.
#![allow(clippy::unnecessary_cast)]

use std::collections::VecDeque;
use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Component, Path, PathBuf};

use crate::beneath::{self, Root};
use crate::error::{Error, Op, Refusal, Result};
use crate::sys::posix::{self, at};

/// Symlinks followed on one path before it is refused, as the kernel's
/// `ELOOP` limit.
const MAX_LINKS: usize = 40;

/// Opens the directory at `path` as described in the module's
/// documentation; with `create`, a missing last component is made with
/// that mode first, and missing directories on the way 0755. Refusals
/// are [`Error::Refused`] with [`Refusal::Untrusted`], naming the path
/// and the directory that makes it unsafe.
pub fn open_dir(path: &Path, create: Option<u32>) -> Result<Root> {
    // A relative path is the caller's, from its working directory.
    let absolute =
        std::path::absolute(path).map_err(|e| Error::io(Op::Open, path, e))?;
    let mut todo: VecDeque<OsString> = names(&absolute);
    let root_fd = at::open_dir(libc::AT_FDCWD, c"/")
        .map_err(|e| Error::io(Op::Open, "/", e))?;
    let root_st =
        at::fstat(&root_fd).map_err(|e| Error::io(Op::Stat, "/", e))?;
    let mut w = Walk {
        path,
        create,
        me: posix::euid(),
        links: 0,
        stack: vec![(root_fd, root_st, PathBuf::from("/"))],
    };
    while let Some(name) = todo.pop_front() {
        let last = todo.is_empty();
        if name == ".." {
            if w.stack.len() > 1 {
                w.stack.pop();
            }
            continue;
        }
        w.step(name, last, &mut todo)?;
    }
    let (fd, _, _) = w.stack.pop().expect("never empty");
    Root::from_fd(fd, path)
}

/// [`open_dir`]'s walk from `/`.
struct Walk<'p> {
    /// The path asked for, as given: what a refusal names.
    path: &'p Path,
    create: Option<u32>,
    /// This process's user.
    me: u32,
    /// Symlinks followed so far.
    links: usize,
    /// The directories from `/` to where the walk is, for `..`.
    stack: Vec<(OwnedFd, libc::stat, PathBuf)>,
}

impl Walk<'_> {
    /// The component `name` (the `last` one, or one before `todo`):
    /// looked at, made if missing and asked for, then refused, followed
    /// or entered.
    fn step(
        &mut self,
        name: OsString,
        last: bool,
        todo: &mut VecDeque<OsString>,
    ) -> Result<()> {
        let (dir, dir_st, dir_path) = self.stack.last().expect("never empty");
        let dir_fd = dir.as_raw_fd();
        let shown = dir_path.join(&name);
        let cname = CString::new(name.into_vec())
            .map_err(|_| Error::refused(&shown, Refusal::NotBeneath))?;
        let (st, made) = self.look(dir_fd, &cname, &shown, last)?;
        if let Some(why) = swappable(dir_st, &st, self.me) {
            return Err(untrusted(
                self.path,
                format!("{} {why}", dir_path.display()),
            ));
        }
        match st.st_mode & libc::S_IFMT {
            libc::S_IFLNK if last => Err(untrusted(
                self.path,
                "is a symlink, which is never followed here".into(),
            )),
            libc::S_IFLNK => self.follow(dir_fd, &cname, &shown, todo),
            libc::S_IFDIR => self.enter(dir_fd, &cname, shown, &st, made, last),
            _ => Err(Error::io(
                Op::Open,
                &shown,
                std::io::Error::from_raw_os_error(libc::ENOTDIR),
            )),
        }
    }

    /// The entry `cname` of `dir` (at `shown`), not followed; a
    /// directory made there if missing and asked for, then also its
    /// open descriptor.
    fn look(
        &self,
        dir: RawFd,
        cname: &CString,
        shown: &Path,
        last: bool,
    ) -> Result<(libc::stat, Option<OwnedFd>)> {
        let mut st =
            at::lstat(dir, cname).map_err(|e| Error::io(Op::Stat, shown, e))?;
        // A directory made here, already open.
        let mut made = None;
        if st.is_none()
            && let Some(mode) = self.create
        {
            // Missing directories on the way are made as `mkdir -p` does,
            // by the engine's step beneath the parent.
            let mode = if last { mode } else { 0o755 };
            let fd = beneath::step(dir, cname, Some(mode))
                .map_err(|f| step_error(self.path, shown, f))?;
            st = Some(
                at::fstat(&fd).map_err(|e| Error::io(Op::Stat, shown, e))?,
            );
            made = Some(fd);
        }
        let Some(st) = st else {
            return Err(Error::io(
                Op::Open,
                shown,
                std::io::Error::from_raw_os_error(libc::ENOENT),
            ));
        };
        Ok((st, made))
    }

    /// Follows the symlink `cname` of `dir` (at `shown`): its target's
    /// components go first in `todo`, from `/` if it is absolute.
    fn follow(
        &mut self,
        dir: RawFd,
        cname: &CString,
        shown: &Path,
        todo: &mut VecDeque<OsString>,
    ) -> Result<()> {
        self.links += 1;
        if self.links > MAX_LINKS {
            return Err(Error::io(
                Op::Open,
                shown,
                std::io::Error::from_raw_os_error(libc::ELOOP),
            ));
        }
        let target = at::readlink(dir, cname)
            .map_err(|e| Error::io(Op::Readlink, shown, e))?;
        let target = PathBuf::from(OsString::from_vec(target));
        if target.is_absolute() {
            self.stack.truncate(1);
        }
        for n in names(&target).into_iter().rev() {
            todo.push_front(n);
        }
        Ok(())
    }

    /// Enters the directory `cname` of `dir` (at `shown`, as `st` saw
    /// it; `made` if it was made here), refusing one replaced meanwhile
    /// or, the `last`, owned by someone else.
    fn enter(
        &mut self,
        dir: RawFd,
        cname: &CString,
        shown: PathBuf,
        st: &libc::stat,
        made: Option<OwnedFd>,
        last: bool,
    ) -> Result<()> {
        let fd = match made {
            Some(fd) => fd,
            None => beneath::step(dir, cname, None)
                .map_err(|f| step_error(self.path, &shown, f))?,
        };
        let now = at::fstat(&fd).map_err(|e| Error::io(Op::Stat, &shown, e))?;
        // Replaced between the look and the open: by whom, if
        // the directory holding it is safe? Refuse either way.
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) {
            return Err(untrusted(
                self.path,
                format!("{} changed while it was opened", shown.display()),
            ));
        }
        // Its owner could chmod it and swap what is inside; its
        // mode is the caller's to set, through the descriptor.
        let uid = now.st_uid as u32;
        if last && uid != 0 && uid != self.me {
            return Err(untrusted(self.path, format!("is owned by uid {uid}")));
        }
        self.stack.push((fd, now, shown));
        Ok(())
    }
}

fn untrusted(path: &Path, why: String) -> Error {
    Error::refused(path, Refusal::Untrusted(why))
}

/// A step that met a symlink or a non-directory where a directory was
/// just seen: the entry changed while it was opened.
fn step_error(path: &Path, shown: &Path, f: beneath::StepFail) -> Error {
    match f {
        beneath::StepFail::Met(_) => untrusted(
            path,
            format!("{} changed while it was opened", shown.display()),
        ),
        beneath::StepFail::Io(op, e) => Error::io(op, shown, e),
    }
}

/// A path's plain components (`.` dropped, `..` kept).
fn names(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect()
}

/// Whether someone other than root or `me` may change the entries of the
/// directory `st`: why, if so.
fn open_to_others(st: &libc::stat, me: u32) -> Option<String> {
    let (uid, gid, mode) = (st.st_uid as u32, st.st_gid as u32, st.st_mode);
    if uid != 0 && uid != me {
        Some(format!("owned by uid {uid}"))
    } else if mode & 0o002 != 0 {
        Some("writable by everyone".into())
    } else if mode & 0o020 != 0 && gid != 0 {
        Some(format!("writable by group {gid}"))
    } else {
        None
    }
}

/// Whether the entry `entry` of the directory `dir` could be renamed or
/// replaced by someone other than root or `me`: why, if so. A sticky
/// directory of a trusted owner protects the entries trusted users own.
fn swappable(dir: &libc::stat, entry: &libc::stat, me: u32) -> Option<String> {
    let why = open_to_others(dir, me)?;
    let trusted = |uid: u32| uid == 0 || uid == me;
    let sticky = dir.st_mode & libc::S_ISVTX as libc::mode_t != 0;
    if sticky && trusted(dir.st_uid as u32) && trusted(entry.st_uid as u32) {
        return None;
    }
    Some(if sticky {
        format!(
            "is {why}, and the entry in it is owned by uid {}",
            entry.st_uid
        )
    } else {
        format!("is {why}")
    })
}

#[cfg(test)]
mod test {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn plain_paths_open_and_links_at_the_end_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let z = d.path().join("z");
        let r = open_dir(&z, Some(0o700)).unwrap();
        assert_eq!(r.path(), z);
        assert!(z.is_dir());
        std::os::unix::fs::symlink(&z, d.path().join("l")).unwrap();
        let e = open_dir(&d.path().join("l"), None).unwrap_err();
        assert!(e.to_string().contains("is a symlink"), "{e}");
        // A symlink on the way, in a directory only we may change, leads
        // where it says.
        std::fs::create_dir(z.join("in")).unwrap();
        let r = open_dir(&d.path().join("l/in"), None).unwrap();
        assert_eq!(r.path(), d.path().join("l/in"));
    }

    #[test]
    fn a_world_writable_directory_on_the_way_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let open = d.path().join("open");
        std::fs::create_dir_all(open.join("z")).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777))
            .unwrap();
        let e = open_dir(&open.join("z"), None).unwrap_err();
        assert!(e.to_string().contains("writable by everyone"), "{e}");
        // Sticky, like /tmp: what we own in it cannot be swapped by others.
        std::fs::set_permissions(
            &open,
            std::fs::Permissions::from_mode(0o1777),
        )
        .unwrap();
        open_dir(&open.join("z"), None).unwrap();
    }
}
