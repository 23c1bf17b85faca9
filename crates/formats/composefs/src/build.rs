//! An image's tree given rather than scanned: a tree held in memory (an
//! unpack into memory) handed over bottom up, each directory with its
//! entries, each non-directory inode once as a leaf that hard links name
//! again. [`Builder::finish`] gives what [`crate::scan`] gives, for
//! [`crate::write_scanned`].

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use composefs::generic_tree::LeafId;
use composefs::tree::{
    Directory, FileSystem, Inode, Leaf, LeafContent, RegularFile, Stat,
};

use crate::digest::{INLINE_MAX, ObjectId};
use crate::scan::{Counts, Scanned};

/// An entry's attributes, as `lstat` and the xattr calls give them.
#[derive(Clone, Debug)]
pub struct EntryStat {
    /// Permission bits (`0o7777`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time: seconds and nanoseconds.
    pub mtime: (i64, u32),
    /// Extended attributes, by name.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// What a leaf (an inode that is not a directory) is.
#[derive(Clone, Debug)]
pub enum LeafKind {
    /// A regular file whose contents are in the store.
    Object {
        /// Its object.
        id: ObjectId,
        /// Its length.
        size: u64,
    },
    /// A regular file of at most [`INLINE_MAX`] bytes, kept in the image.
    Inline(Vec<u8>),
    /// A symlink and its target.
    Symlink(Vec<u8>),
    /// A FIFO.
    Fifo,
    /// A character device and its number.
    CharDevice(u64),
    /// A block device and its number.
    BlockDevice(u64),
}

/// A leaf added to a [`Builder`]: name it in directories with
/// [`Builder::leaf_entry`], once per hard link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafRef(usize);

/// An entry of a directory: a directory built, or a leaf.
pub struct Entry(Inode<ObjectId>);

/// Builds an image's tree bottom up.
#[derive(Default)]
pub struct Builder {
    leaves: Vec<Leaf<ObjectId>>,
    counts: Counts,
}

fn stat(s: &EntryStat) -> Stat {
    Stat {
        st_mode: s.mode & 0o7777,
        st_uid: s.uid,
        st_gid: s.gid,
        st_mtim_sec: s.mtime.0,
        st_mtim_nsec: s.mtime.1,
        xattrs: s
            .xattrs
            .iter()
            .map(|(n, v)| (Box::from(OsStr::from_bytes(n)), v.clone().into()))
            .collect::<BTreeMap<_, _>>(),
    }
}

impl Builder {
    /// An empty tree.
    pub fn new() -> Builder {
        Builder::default()
    }

    /// Adds a leaf. An inline file longer than [`INLINE_MAX`], or an
    /// object of at most that, is not what a scan makes: kept as given
    /// all the same (the image is valid either way).
    pub fn leaf(&mut self, s: &EntryStat, kind: LeafKind) -> LeafRef {
        let content = match kind {
            LeafKind::Object { id, size } => {
                self.counts.objects += 1;
                self.counts.named_by_writer += 1;
                LeafContent::Regular(RegularFile::External(id, size))
            }
            LeafKind::Inline(data) => {
                self.counts.inline += 1;
                LeafContent::Regular(RegularFile::Inline(data.into()))
            }
            LeafKind::Symlink(t) => {
                LeafContent::Symlink(OsStr::from_bytes(&t).into())
            }
            LeafKind::Fifo => LeafContent::Fifo,
            LeafKind::CharDevice(rdev) => LeafContent::CharacterDevice(rdev),
            LeafKind::BlockDevice(rdev) => LeafContent::BlockDevice(rdev),
        };
        self.leaves.push(Leaf {
            stat: stat(s),
            content,
        });
        LeafRef(self.leaves.len() - 1)
    }

    /// A leaf as a directory's entry.
    pub fn leaf_entry(r: LeafRef) -> Entry {
        Entry(Inode::leaf(LeafId(r.0)))
    }

    /// A directory of `entries`.
    pub fn dir(
        &mut self,
        s: &EntryStat,
        entries: impl IntoIterator<Item = (Vec<u8>, Entry)>,
    ) -> Entry {
        let mut d = Directory::new(stat(s));
        for (name, e) in entries {
            d.insert(OsStr::from_bytes(&name), e.0);
            self.counts.entries += 1;
        }
        Entry(Inode::Directory(Box::new(d)))
    }

    /// The tree whose top directory is `top` (a [`Builder::dir`]), with
    /// the store's counts of what was written (`written` objects,
    /// `bytes_written` bytes, `replaced` of them over bad ones); `None`
    /// if `top` is not a directory.
    pub fn finish(
        self,
        top: Entry,
        written: u64,
        bytes_written: u64,
        replaced: u64,
    ) -> Option<Scanned> {
        let Inode::Directory(root) = top.0 else {
            return None;
        };
        let mut counts = self.counts;
        counts.written = written;
        counts.bytes_written = bytes_written;
        counts.replaced = replaced;
        Some(Scanned {
            fs: FileSystem {
                root: *root,
                leaves: self.leaves,
            },
            counts,
        })
    }
}

/// Whether a regular file of `size` bytes is kept in the image rather
/// than stored.
pub fn is_inline(size: u64) -> bool {
    size <= INLINE_MAX
}
