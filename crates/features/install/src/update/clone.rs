//! The clone of the old root that the new one starts as, and that stays
//! behind as `root.prev`, the rollback point.
//!
//! Directories are made anew with the old one's owner, mode, extended
//! attributes (exactly: nothing inherited from a default ACL above) and
//! times. Every other entry is shared:
//!
//! - **Reflink** (XFS with `reflink=1`, btrfs): each file a new inode
//!   whose data shares the old one's extents, copy-on-write. The zone's
//!   later edits in place never reach `root.prev`. Costs a create and a
//!   clone per file, no data.
//! - **Hard links** (ext4, anything that cannot clone): each entry a new
//!   name of the old inode. Cheapest, but the two roots share the
//!   inode: a file the zone later edits in place (not replaced, as
//!   package managers do) is edited in `root.prev` too. The update says
//!   so when it uses them.

#![allow(clippy::unnecessary_cast)]

use std::collections::HashMap;
use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Mutex;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::attrs::{self, parent, rel_path};
use super::error::{UpdateError, errno_at, io_at};
use crate::manifest;

/// How the unchanged entries are shared between the old root and the
/// new.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Copy-on-write clones: the rollback point stays one.
    Reflink,
    /// Hard links: the two roots share unchanged inodes.
    HardLink,
}

impl Method {
    /// As reports say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Reflink => "reflink",
            Method::HardLink => "hardlink",
        }
    }
}

/// Whether files in the directory `dir` can be cloned: a small file made
/// and cloned there, then removed.
pub(super) fn probe(
    dir: BorrowedFd<'_>,
    at: &Path,
) -> Result<Method, UpdateError> {
    let a = c".zinstall-probe-a";
    let b = c".zinstall-probe-b";
    for n in [a, b] {
        let _stale = rustix::fs::unlinkat(dir, n, AtFlags::empty());
    }
    let create = |n: &CStr| {
        rustix::fs::openat(
            dir,
            n,
            OFlags::RDWR
                | OFlags::CREATE
                | OFlags::EXCL
                | OFlags::NOFOLLOW
                | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(errno_at("create", at.join(OsStr::from_bytes(n.to_bytes()))))
    };
    let r = (|| {
        let fa = create(a)?;
        rustix::io::write(&fa, &[0u8; 4096]).map_err(errno_at("write", at))?;
        let fb = create(b)?;
        Ok(if super::platform::clone_data(fb.as_fd(), fa.as_fd()) {
            Method::Reflink
        } else {
            Method::HardLink
        })
    })();
    for n in [a, b] {
        let _probe = rustix::fs::unlinkat(dir, n, AtFlags::empty());
    }
    r
}

/// An entry of a directory being cloned: its name, its type and, where
/// it was taken, its stat.
struct Listed<'n> {
    name: &'n CStr,
    kind: FileType,
    st: Option<rustix::fs::Stat>,
}

/// A file with other names, cloned once after the walk: its path in the
/// root and its inode.
type Linked = (Vec<u8>, (u64, u64));

/// The clone's walk.
pub(super) struct Clone<'a> {
    pub(super) method: Method,
    pub(super) new_path: &'a Path,
    pub(super) cancel: Option<&'a zinstall_core::Cancel>,
    linked: Mutex<Vec<Linked>>,
    /// The stamp of each file cloned alone (not linked after).
    stamps: Mutex<HashMap<Vec<u8>, Stamp>>,
    /// The old root's device and mount: a mount point is made empty.
    top: (u64, Option<u64>),
}

fn open_dir(dir: BorrowedFd<'_>, name: &CStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

impl<'a> Clone<'a> {
    pub(super) fn new(
        method: Method,
        old: BorrowedFd<'_>,
        new_path: &'a Path,
        cancel: Option<&'a zinstall_core::Cancel>,
    ) -> Result<Clone<'a>, UpdateError> {
        let dev = rustix::fs::fstat(old)
            .map_err(errno_at("stat", new_path))?
            .st_dev as u64;
        Ok(Clone {
            method,
            new_path,
            cancel,
            linked: Mutex::new(Vec::new()),
            stamps: Mutex::new(HashMap::new()),
            top: (dev, crate::manifest::mount_of(old, c"")),
        })
    }

    /// Makes `new` hold what `old` holds; returns how many entries it
    /// made. The files with other names are cloned after the walk
    /// ([`Clone::finish`]).
    pub(super) fn tree(
        &self,
        old: BorrowedFd<'_>,
        new: BorrowedFd<'_>,
        rel: &[u8],
        depth: usize,
    ) -> Result<u64, UpdateError> {
        use rayon::prelude::*;
        if self.cancel.is_some_and(zinstall_core::Cancel::is_cancelled) {
            return Err(UpdateError::Cancelled);
        }
        let here = self.new_path.join(rel_path(rel));
        let dir =
            rustix::fs::Dir::read_from(old).map_err(errno_at("read", &here))?;
        let mut subdirs = Vec::new();
        let mut made = 0u64;
        for e in dir {
            let e = e.map_err(errno_at("read", &here))?;
            let name = e.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            let at = here.join(OsStr::from_bytes(name.to_bytes()));
            let listed = self.kind_of(old, &e, &at)?;
            made += 1;
            if listed.kind == FileType::Directory {
                subdirs.push(name.to_owned());
                continue;
            }
            match self.method {
                Method::HardLink => {
                    rustix::fs::linkat(old, name, new, name, AtFlags::empty())
                        .map_err(errno_at("link", &at))?;
                }
                Method::Reflink => self.reflink(old, new, rel, listed, &at)?,
            }
        }
        let below = subdirs
            .par_iter()
            .map(|name| self.subdir(old, new, rel, name, depth))
            .collect::<Result<Vec<u64>, UpdateError>>()?;
        Ok(made + below.iter().sum::<u64>())
    }

    /// The entry `e` of `old` (at `at`) with its type and, where it was
    /// taken, its stat: a reflink needs one for each regular file.
    fn kind_of<'e>(
        &self,
        old: BorrowedFd<'_>,
        e: &'e rustix::fs::DirEntry,
        at: &Path,
    ) -> Result<Listed<'e>, UpdateError> {
        // The entry's type where the directory says it (illumos's
        // does not), else from a stat.
        #[cfg(not(any(target_os = "illumos", target_os = "solaris")))]
        let listed = e.file_type();
        #[cfg(any(target_os = "illumos", target_os = "solaris"))]
        let listed = FileType::Unknown;
        let listed = match (listed, self.method) {
            (FileType::Unknown, _)
            | (FileType::RegularFile, Method::Reflink) => None,
            (t, _) => Some(t),
        };
        let st = match listed {
            Some(_) => None,
            None => Some(
                rustix::fs::statat(
                    old,
                    e.file_name(),
                    AtFlags::SYMLINK_NOFOLLOW,
                )
                .map_err(errno_at("stat", at))?,
            ),
        };
        let kind = listed.unwrap_or_else(|| {
            FileType::from_raw_mode(st.as_ref().map_or(0, |s| s.st_mode) as _)
        });
        Ok(Listed {
            name: e.file_name(),
            kind,
            st,
        })
    }

    /// Clones the non-directory `e` of `old` (at `rel`, shown as `at`)
    /// into `new`; a file with other names is left for
    /// [`Clone::finish`].
    fn reflink(
        &self,
        old: BorrowedFd<'_>,
        new: BorrowedFd<'_>,
        rel: &[u8],
        e: Listed<'_>,
        at: &Path,
    ) -> Result<(), UpdateError> {
        let Listed { name, kind, st } = e;
        let st = match st {
            Some(st) => st,
            None => rustix::fs::statat(old, name, AtFlags::SYMLINK_NOFOLLOW)
                .map_err(errno_at("stat", at))?,
        };
        let mut r = rel.to_vec();
        if !r.is_empty() {
            r.push(b'/');
        }
        r.extend_from_slice(name.to_bytes());
        if kind == FileType::RegularFile && st.st_nlink > 1 {
            self.linked
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((r, (st.st_dev as u64, st.st_ino as u64)));
            return Ok(());
        }
        if let Some(stamp) = copy_entry(old, new, name, &st, at)? {
            self.stamps
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(r, stamp);
        }
        Ok(())
    }

    fn subdir(
        &self,
        old: BorrowedFd<'_>,
        new: BorrowedFd<'_>,
        rel: &[u8],
        name: &CString,
        depth: usize,
    ) -> Result<u64, UpdateError> {
        let mut sub_rel = rel.to_vec();
        if !sub_rel.is_empty() {
            sub_rel.push(b'/');
        }
        sub_rel.extend_from_slice(name.to_bytes());
        let at = self.new_path.join(rel_path(&sub_rel));
        let st =
            rustix::fs::statat(old, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)
                .map_err(errno_at("stat", &at))?;
        rustix::fs::mkdirat(new, name.as_c_str(), Mode::from_raw_mode(0o700))
            .map_err(errno_at("make", &at))?;
        let sub_new = open_dir(new, name).map_err(errno_at("open", &at))?;
        let sub_old = open_dir(old, name).map_err(errno_at("open", &at))?;
        let x = attrs::xattrs_fd(sub_old.as_fd(), &at)?;
        attrs::set_meta(
            sub_new.as_fd(),
            st.st_uid,
            st.st_gid,
            st.st_mode & 0o7777,
            &x,
            &at,
        )?;
        if depth >= manifest::MAX_DEPTH {
            return Err(UpdateError::TooDeep { path: at });
        }
        // A mount point is made, empty, as at the install.
        let n = if crate::manifest::same_mount(
            self.top,
            st.st_dev as u64,
            old,
            name,
        ) {
            self.tree(sub_old.as_fd(), sub_new.as_fd(), &sub_rel, depth + 1)?
        } else {
            0
        };
        attrs::set_times(
            sub_new.as_fd(),
            (st.st_atime as i64, st.st_atime_nsec as i64),
            (st.st_mtime as i64, st.st_mtime_nsec as i64),
            &at,
        )?;
        Ok(n)
    }

    /// The files with other names: each inode cloned once, its other
    /// names linked to the clone.
    pub(super) fn finish(
        self,
        old: &zinstall_engine::beneath::Root,
        new: &zinstall_engine::beneath::Root,
    ) -> Result<HashMap<Vec<u8>, Stamp>, UpdateError> {
        let mut linked =
            self.linked.into_inner().unwrap_or_else(|p| p.into_inner());
        linked.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
        let mut first: Option<&Linked> = None;
        for l in &linked {
            let (ndir, nname) = parent(new, &l.0, false)?;
            let at = new.path().join(rel_path(&l.0));
            match first {
                Some(f) if f.1 == l.1 => {
                    let (fdir, fname) = parent(new, &f.0, false)?;
                    rustix::fs::linkat(
                        &fdir,
                        fname.as_c_str(),
                        &ndir,
                        nname.as_c_str(),
                        AtFlags::empty(),
                    )
                    .map_err(errno_at("link", &at))?;
                }
                _ => {
                    let (odir, oname) = parent(old, &l.0, false)?;
                    let st = rustix::fs::statat(
                        &odir,
                        oname.as_c_str(),
                        AtFlags::SYMLINK_NOFOLLOW,
                    )
                    .map_err(errno_at("stat", &at))?;
                    // Its other names are linked after: no stamp lasts.
                    copy_entry(odir.as_fd(), ndir.as_fd(), &nname, &st, &at)?;
                    first = Some(l);
                }
            }
        }
        Ok(self.stamps.into_inner().unwrap_or_else(|p| p.into_inner()))
    }
}

/// A new, independent entry `name` in `new` like `name` in `old`: a
/// file's data cloned (copied where the clone is refused), a symlink or
/// special file made anew; owner, extended attributes, mode and times
/// as the old one's.
fn copy_entry(
    old: BorrowedFd<'_>,
    new: BorrowedFd<'_>,
    name: &CStr,
    st: &rustix::fs::Stat,
    at: &Path,
) -> Result<Option<Stamp>, UpdateError> {
    match FileType::from_raw_mode(st.st_mode as _) {
        FileType::RegularFile => copy_file(old, new, name, st, at).map(Some),
        FileType::Symlink => {
            copy_symlink(old, new, name, st, at).map(|()| None)
        }
        // A device, FIFO or socket has no data to share: a second name
        // of it costs nothing and edits of it are not a thing.
        _ => rustix::fs::linkat(old, name, new, name, AtFlags::empty())
            .map_err(errno_at("link", at))
            .map(|()| None),
    }
}

/// The access and modification times `st` holds.
fn times_of(st: &rustix::fs::Stat) -> ((i64, i64), (i64, i64)) {
    (
        (st.st_atime as i64, st.st_atime_nsec as i64),
        (st.st_mtime as i64, st.st_mtime_nsec as i64),
    )
}

/// Clones (or, where it cannot, copies) the regular file `name` of
/// `old`, stat `st`, into `new` with its metadata; the stamp of the
/// file made.
fn copy_file(
    old: BorrowedFd<'_>,
    new: BorrowedFd<'_>,
    name: &CStr,
    st: &rustix::fs::Stat,
    at: &Path,
) -> Result<Stamp, UpdateError> {
    let times = times_of(st);
    let src = rustix::fs::openat(
        old,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    )
    .map_err(errno_at("open", at))?;
    let dst = attrs::create_new(new, name, at)?;
    if !super::platform::clone_data(dst.as_fd(), src.as_fd()) {
        let mut out =
            std::fs::File::from(dst.try_clone().map_err(io_at("copy", at))?);
        std::io::copy(
            &mut std::fs::File::from(
                src.try_clone().map_err(io_at("copy", at))?,
            ),
            &mut out,
        )
        .map_err(io_at("copy", at))?;
    }
    let x = attrs::xattrs_fd(src.as_fd(), at)?;
    attrs::set_meta(
        dst.as_fd(),
        st.st_uid,
        st.st_gid,
        st.st_mode & 0o7777,
        &x,
        at,
    )?;
    attrs::set_times(dst.as_fd(), times.0, times.1, at)?;
    let now = rustix::fs::fstat(&dst).map_err(errno_at("stat", at))?;
    Ok((
        now.st_ino as u64,
        now.st_ctime as i64,
        now.st_ctime_nsec as i64,
    ))
}

/// Makes the symlink `name` of `old`, stat `st`, again in `new`, with
/// its owner and times.
fn copy_symlink(
    old: BorrowedFd<'_>,
    new: BorrowedFd<'_>,
    name: &CStr,
    st: &rustix::fs::Stat,
    at: &Path,
) -> Result<(), UpdateError> {
    let times = times_of(st);
    let target = rustix::fs::readlinkat(old, name, Vec::new())
        .map_err(errno_at("read link", at))?;
    rustix::fs::symlinkat(target.as_c_str(), new, name)
        .map_err(errno_at("make symlink", at))?;
    attrs::set_link_owner_and_times(
        new.as_fd(),
        name,
        (st.st_uid, st.st_gid),
        times,
        at,
    )
}

/// A file's inode and change time: the manifest's stamp.
pub(super) type Stamp = (u64, i64, i64);
