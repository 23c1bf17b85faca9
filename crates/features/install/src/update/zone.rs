//! The zone's root as it is now, against what was recorded: what the
//! zone changed, removed or added since the last install or update.
//!
//! The root is walked once (by descriptors beneath it, never following a
//! symlink, not into mount points nor into what only `keep` owns), each
//! entry stated. An entry is as recorded when its inode number and
//! change time are the recorded ones (no write, `chmod`, `chown`, xattr
//! change or link leaves the change time as it was); otherwise its
//! type, mode, owner, size, link target and extended attributes are
//! compared, and a regular file's content hashed when all of those
//! match. Times alone are not a change: a `touch` is not an edit.

#![allow(clippy::unnecessary_cast)]

use std::collections::HashMap;
use std::ffi::CStr;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{AtFlags, Mode, OFlags};
use zinstall_engine::beneath::Root;

use super::attrs::{parent, rel_path};
use super::error::{UpdateError, errno_at};
use crate::manifest::{self, Entry};
use crate::owners::Owners;

/// One entry of the zone's root, as stated.
#[derive(Clone, Copy, Debug)]
pub(super) struct Seen {
    pub(super) kind: char,
    pub(super) mode: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) size: u64,
    pub(super) ino: u64,
    pub(super) ctime: (i64, i64),
    pub(super) mtime: (i64, i64),
    pub(super) rdev: u64,
}

/// How the zone's entry stands against the recorded one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Vs {
    /// As recorded.
    Same,
    /// Changed: what.
    Changed(&'static str),
    /// Not there.
    Gone,
}

/// The zone's root, walked.
pub(super) struct Zone<'r> {
    root: &'r Root,
    seen: HashMap<Vec<u8>, Seen>,
}

fn kind_of(mode: u32) -> char {
    match mode & libc::S_IFMT as u32 {
        x if x == libc::S_IFDIR as u32 => 'd',
        x if x == libc::S_IFREG as u32 => 'f',
        x if x == libc::S_IFLNK as u32 => 'l',
        x if x == libc::S_IFCHR as u32 => 'c',
        x if x == libc::S_IFBLK as u32 => 'b',
        x if x == libc::S_IFIFO as u32 => 'p',
        _ => 's',
    }
}

fn seen_of(st: &rustix::fs::Stat) -> Seen {
    Seen {
        kind: kind_of(st.st_mode as u32),
        mode: st.st_mode as u32 & 0o7777,
        uid: st.st_uid,
        gid: st.st_gid,
        size: st.st_size as u64,
        ino: st.st_ino as u64,
        ctime: (st.st_ctime as i64, st.st_ctime_nsec as i64),
        mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
        rdev: st.st_rdev as u64,
    }
}

struct Walk<'a> {
    root: &'a Root,
    owners: &'a Owners,
    /// The root's device and mount.
    top: (u64, Option<u64>),
}

impl Walk<'_> {
    fn dir(
        &self,
        dir: BorrowedFd<'_>,
        rel: &[u8],
        depth: usize,
    ) -> Result<Vec<(Vec<u8>, Seen)>, UpdateError> {
        use rayon::prelude::*;
        let at = || self.root.path().join(rel_path(rel));
        let names = rustix::fs::Dir::read_from(dir)
            .map_err(errno_at("read", at()))?
            .map(|e| e.map(|e| e.file_name().to_owned()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(errno_at("read", at()))?;
        let per = names
            .par_iter()
            .filter(|n| n.to_bytes() != b"." && n.to_bytes() != b"..")
            .map(|n| self.entry(dir, rel, n, depth))
            .collect::<Result<Vec<_>, UpdateError>>()?;
        Ok(per.into_iter().flatten().collect())
    }

    fn entry(
        &self,
        dir: BorrowedFd<'_>,
        parent: &[u8],
        name: &CStr,
        depth: usize,
    ) -> Result<Vec<(Vec<u8>, Seen)>, UpdateError> {
        let mut rel = parent.to_vec();
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(name.to_bytes());
        let at = || self.root.path().join(rel_path(&rel));
        let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        {
            Ok(st) => st,
            // Gone since listed: the zone is not running (or --live).
            Err(rustix::io::Errno::NOENT) => return Ok(Vec::new()),
            Err(e) => return Err(errno_at("stat", at())(e)),
        };
        let seen = seen_of(&st);
        let mut out = Vec::new();
        if seen.kind == 'd'
            && manifest::same_mount(self.top, st.st_dev as u64, dir, name)
            && !self.owners.all_kept_beneath(&rel)
        {
            if depth >= manifest::MAX_DEPTH {
                return Err(UpdateError::TooDeep { path: at() });
            }
            let fd = rustix::fs::openat(
                dir,
                name,
                OFlags::RDONLY
                    | OFlags::DIRECTORY
                    | OFlags::NOFOLLOW
                    | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(errno_at("open", at()))?;
            out = self.dir(fd.as_fd(), &rel, depth + 1)?;
        }
        out.push((rel, seen));
        Ok(out)
    }
}

impl<'r> Zone<'r> {
    /// Walks `root`.
    pub(super) fn scan(
        root: &'r Root,
        owners: &Owners,
    ) -> Result<Zone<'r>, UpdateError> {
        let st =
            rustix::fs::fstat(root).map_err(errno_at("stat", root.path()))?;
        let walk = Walk {
            root,
            owners,
            top: (st.st_dev as u64, manifest::mount_of(root.as_fd(), c"")),
        };
        let all = match manifest::deep_pool() {
            Some(pool) => pool.install(|| walk.dir(root.as_fd(), b"", 1))?,
            None => walk.dir(root.as_fd(), b"", 1)?,
        };
        Ok(Zone {
            root,
            seen: all.into_iter().collect(),
        })
    }

    /// What the zone has at `rel`, if anything was seen there.
    pub(super) fn get(&self, rel: &[u8]) -> Option<&Seen> {
        self.seen.get(rel)
    }

    /// Whether the zone has anything at `rel`: seen by the walk, or
    /// (where the walk does not look, beneath kept paths) found there.
    pub(super) fn exists(&self, rel: &[u8]) -> bool {
        if self.seen.contains_key(rel) {
            return true;
        }
        match parent(self.root, rel, false) {
            Ok((dir, name)) => rustix::fs::statat(
                &dir,
                name.as_c_str(),
                AtFlags::SYMLINK_NOFOLLOW,
            )
            .is_ok(),
            Err(_) => false,
        }
    }

    /// How many entries were seen.
    pub(super) fn len(&self) -> usize {
        self.seen.len()
    }

    /// Every path seen.
    pub(super) fn paths(&self) -> impl Iterator<Item = &Vec<u8>> {
        self.seen.keys()
    }

    /// How the zone's `rel` stands against `b`, its recorded entry.
    pub(super) fn vs(&self, rel: &[u8], b: &Entry) -> Vs {
        let Some(z) = self.seen.get(rel) else {
            return Vs::Gone;
        };
        if z.kind != b.k {
            return Vs::Changed("type");
        }
        if b.i
            .is_some_and(|(ino, cs, cn)| ino == z.ino && (cs, cn) == z.ctime)
        {
            return Vs::Same;
        }
        if b.k != 'l' && z.mode != b.m {
            return Vs::Changed("mode");
        }
        if (z.uid, z.gid) != (b.u, b.g) && b.k != 'l' {
            return Vs::Changed("owner");
        }
        match b.k {
            'f' if z.size != b.s => return Vs::Changed("content"),
            'c' | 'b' if Some(z.rdev) != b.r => return Vs::Changed("device"),
            _ => {}
        }
        // What takes a read: done only when all the above match.
        match self.read(rel, b) {
            Ok(v) => v,
            // Unreadable now: not what was recorded, as far as we know.
            Err(_) => Vs::Changed("content"),
        }
    }

    fn read(&self, rel: &[u8], b: &Entry) -> Result<Vs, UpdateError> {
        let (dir, name) = parent(self.root, rel, false)?;
        let at = || self.root.path().join(rel_path(rel));
        match b.k {
            'l' => {
                let t =
                    rustix::fs::readlinkat(&dir, name.as_c_str(), Vec::new())
                        .map_err(errno_at("read link", at()))?;
                Ok(if Some(t.as_bytes().to_vec()) == b.target() {
                    Vs::Same
                } else {
                    Vs::Changed("target")
                })
            }
            'f' | 'd' => {
                let flags = if b.k == 'd' {
                    OFlags::RDONLY | OFlags::DIRECTORY
                } else {
                    OFlags::RDONLY
                };
                let fd = rustix::fs::openat(
                    &dir,
                    name.as_c_str(),
                    flags
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC
                        | OFlags::NONBLOCK,
                    Mode::empty(),
                )
                .map_err(errno_at("open", at()))?;
                let x = manifest::digest_of(
                    manifest::xattrs_fd(fd.as_fd())
                        .map_err(super::error::io_at("read xattrs of", at()))?,
                );
                if x != b.x {
                    return Ok(Vs::Changed("xattrs"));
                }
                if b.k == 'd' {
                    return Ok(Vs::Same);
                }
                let h = manifest::hash_reader(File::from(fd))
                    .map_err(super::error::io_at("hash", at()))?;
                Ok(if Some(&h) == b.h.as_ref() {
                    Vs::Same
                } else {
                    Vs::Changed("content")
                })
            }
            _ => Ok(Vs::Same),
        }
    }
}
