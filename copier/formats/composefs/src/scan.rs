//! Reading a directory tree into composefs's tree: every entry opened
//! relative to its parent's descriptor, never through a symlink; each
//! regular file's contents stored as an object (or kept inline when
//! small), its metadata and extended attributes kept for the image.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{CStr, OsStr};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use composefs::generic_tree::LeafId;
use composefs::tree::{
    Directory, FileSystem, Inode, Leaf, LeafContent, RegularFile, Stat,
};
use zinstall_core::foreign::{self, Follow};
use zinstall_sys::fs::{XattrTarget, at, get_xattr, list_xattrs};

use crate::digest::{INLINE_MAX, ObjectId};
use crate::error::{Error, Op, Problem};
use crate::store::Store;

/// What a scan found and stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Entries below the top directory.
    pub entries: u64,
    /// Regular files kept inline in the image.
    pub inline: u64,
    /// Regular files stored as objects (each inode once).
    pub objects: u64,
    /// Of those, objects written (the rest were in the store already).
    pub written: u64,
    /// Bytes of the objects written.
    pub bytes_written: u64,
    /// Of those written, objects whose name was present with contents
    /// that did not match it (checked on first use), written afresh.
    pub replaced: u64,
}

/// A tree read from a directory, ready for the image writer.
pub struct Scanned {
    /// composefs's tree.
    pub fs: FileSystem<ObjectId>,
    /// What was found and stored.
    pub counts: Counts,
}

struct Scan<'a> {
    store: &'a Store,
    leaves: Vec<Leaf<ObjectId>>,
    /// Inodes with more than one link, by (device, inode): their leaf.
    links: HashMap<(u64, u64), LeafId>,
    counts: Counts,
}

type Xattrs = BTreeMap<Box<OsStr>, Box<[u8]>>;

/// Reads the tree at `src` (its last component not followed), storing
/// regular files' contents in `store`.
pub fn scan(src: &Path, store: &Store) -> Result<Scanned, Error> {
    let c = zinstall_sys::cstr(src).map_err(|e| Error::io(src, Op::Open, e))?;
    let top = at::open_dir(libc::AT_FDCWD, &c)
        .map_err(|e| Error::io(src, Op::Open, e))?;
    let st = at::fstat(&top).map_err(|e| Error::io(src, Op::Stat, e))?;
    let xattrs = read_xattrs(&XattrTarget::Fd(top.as_fd()), src)?;
    let mut s = Scan {
        store,
        leaves: Vec::new(),
        links: HashMap::new(),
        counts: Counts::default(),
    };
    let root = s.directory(&top, src, stat_of(&st, xattrs))?;
    Ok(Scanned {
        fs: FileSystem {
            root,
            leaves: s.leaves,
        },
        counts: s.counts,
    })
}

fn stat_of(st: &libc::stat, xattrs: Xattrs) -> Stat {
    Stat {
        st_mode: st.st_mode & 0o7777,
        st_uid: st.st_uid,
        st_gid: st.st_gid,
        st_mtim_sec: st.st_mtime,
        st_mtim_nsec: st.st_mtime_nsec as u32,
        xattrs,
    }
}

/// Every extended attribute of `t`, by name.
fn read_xattrs(t: &XattrTarget<'_>, shown: &Path) -> Result<Xattrs, Error> {
    let names = list_xattrs(t).map_err(|e| Error::io(shown, Op::Xattrs, e))?;
    let mut out = BTreeMap::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cn = std::ffi::CString::new(name)
            .map_err(|_| Error::new(shown, Op::Xattrs, Problem::BadName))?;
        // One removed since it was listed is simply not there.
        if let Some(v) =
            get_xattr(t, &cn).map_err(|e| Error::io(shown, Op::Xattrs, e))?
        {
            out.insert(Box::from(OsStr::from_bytes(name)), v.into());
        }
    }
    Ok(out)
}

/// Fails unless `now` is the inode `was` described.
fn same(was: &libc::stat, now: &libc::stat, shown: &Path) -> Result<(), Error> {
    if was.st_dev != now.st_dev
        || was.st_ino != now.st_ino
        || was.st_mode & libc::S_IFMT != now.st_mode & libc::S_IFMT
    {
        return Err(Error::new(shown, Op::Open, Problem::Changed("replaced")));
    }
    Ok(())
}

impl Scan<'_> {
    fn directory(
        &mut self,
        dir: &OwnedFd,
        shown: &Path,
        stat: Stat,
    ) -> Result<Directory<ObjectId>, Error> {
        let mut out = Directory::new(stat);
        let names = at::read_names(dir)
            .map_err(|e| Error::io(shown, Op::ReadDir, e))?;
        for name in names {
            let os = OsStr::from_bytes(name.to_bytes());
            let p = shown.join(os);
            let inode = self.entry(dir, &name, &p)?;
            out.insert(os, inode);
            self.counts.entries += 1;
        }
        Ok(out)
    }

    fn entry(
        &mut self,
        dir: &OwnedFd,
        name: &CStr,
        shown: &Path,
    ) -> Result<Inode<ObjectId>, Error> {
        let st = at::lstat(dir.as_raw_fd(), name)
            .map_err(|e| Error::io(shown, Op::Stat, e))?
            .ok_or_else(|| {
                Error::new(shown, Op::Stat, Problem::Changed("removed"))
            })?;
        let kind = st.st_mode & libc::S_IFMT;
        if kind == libc::S_IFDIR {
            let sub = at::open_dir(dir.as_raw_fd(), name)
                .map_err(|e| Error::io(shown, Op::Open, e))?;
            let now =
                at::fstat(&sub).map_err(|e| Error::io(shown, Op::Stat, e))?;
            same(&st, &now, shown)?;
            let x = read_xattrs(&XattrTarget::Fd(sub.as_fd()), shown)?;
            let d = self.directory(&sub, shown, stat_of(&now, x))?;
            return Ok(Inode::Directory(Box::new(d)));
        }
        let key = (st.st_dev, st.st_ino);
        if st.st_nlink > 1
            && let Some(id) = self.links.get(&key)
        {
            return Ok(Inode::leaf(*id));
        }
        let leaf = if kind == libc::S_IFREG {
            self.regular(dir, name, shown, &st)?
        } else {
            let content = match kind {
                libc::S_IFLNK => {
                    let t = at::readlink(dir.as_raw_fd(), name)
                        .map_err(|e| Error::io(shown, Op::ReadLink, e))?;
                    LeafContent::Symlink(OsStr::from_bytes(&t).into())
                }
                libc::S_IFCHR => LeafContent::CharacterDevice(st.st_rdev),
                libc::S_IFBLK => LeafContent::BlockDevice(st.st_rdev),
                libc::S_IFIFO => LeafContent::Fifo,
                _ => LeafContent::Socket,
            };
            let t = XattrTarget::At(dir.as_raw_fd(), name);
            Leaf {
                stat: stat_of(&st, read_xattrs(&t, shown)?),
                content,
            }
        };
        let id = LeafId(self.leaves.len());
        self.leaves.push(leaf);
        if st.st_nlink > 1 {
            self.links.insert(key, id);
        }
        Ok(Inode::leaf(id))
    }

    /// A regular file: opened through the foreign-file seam, checked to
    /// be the inode listed, its contents inline or stored.
    fn regular(
        &mut self,
        dir: &OwnedFd,
        name: &CStr,
        shown: &Path,
        st: &libc::stat,
    ) -> Result<Leaf<ObjectId>, Error> {
        let rel = Path::new(OsStr::from_bytes(name.to_bytes()));
        let f = foreign::open_at(dir.as_fd(), rel, shown, Follow::No)
            .map_err(|e| Error::new(shown, Op::Open, Problem::Foreign(e)))?;
        let now = at::fstat(&f).map_err(|e| Error::io(shown, Op::Stat, e))?;
        same(st, &now, shown)?;
        let xattrs = read_xattrs(&XattrTarget::Fd(f.as_fd()), shown)?;
        let size = now.st_size as u64;
        let file = if size <= INLINE_MAX {
            self.counts.inline += 1;
            RegularFile::Inline(read_small(&f, size, shown)?.into())
        } else {
            let put = self.store.put_file(&f, shown)?;
            if put.size != size {
                return Err(Error::new(
                    shown,
                    Op::Read,
                    Problem::Changed("size"),
                ));
            }
            self.counts.objects += 1;
            if put.written {
                self.counts.written += 1;
                self.counts.bytes_written += size;
            }
            if put.replaced {
                self.counts.replaced += 1;
            }
            RegularFile::External(put.id, size)
        };
        Ok(Leaf {
            stat: stat_of(&now, xattrs),
            content: LeafContent::Regular(file),
        })
    }
}

/// The whole of a small file, which must be `size` bytes.
fn read_small(mut f: &File, size: u64, shown: &Path) -> Result<Vec<u8>, Error> {
    let mut buf = Vec::with_capacity(size as usize);
    f.by_ref()
        .take(size + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Error::io(shown, Op::Read, e))?;
    if buf.len() as u64 != size {
        return Err(Error::new(shown, Op::Read, Problem::Changed("size")));
    }
    Ok(buf)
}
