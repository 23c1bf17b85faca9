//! A composefs install's build in memory: the store as the unpack's
//! [`ObjectSink`] (a body held whole hashed first and created under its
//! name; a larger one written to an unnamed file as it streams in, then
//! named with one link), the hash that names them, and the tree in memory
//! handed to the image writer.

use std::collections::HashMap;
use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};

use zinstall_composefs::{
    BodyHasher, Builder, Entry, EntryStat, INLINE_MAX, LeafKind, LeafRef,
    Scanned, Store, from_bytes,
};
use zinstall_engine::contents::{ObjectDigest, ObjectHasher};
use zinstall_engine::unpack::{
    Attrs, FileBody, MemTree, NodeId, NodeKind, ObjectSink,
};

/// The fs-verity digest as the unpacker's workers take it of each body
/// they write.
struct VerityBody(BodyHasher);

impl zinstall_engine::contents::ObjectHash for VerityBody {
    fn write(&mut self, b: &[u8]) {
        self.0.write(b);
    }

    fn finish(self: Box<Self>) -> zinstall_engine::contents::ObjectDigest {
        self.0.finish()
    }
}

/// What the staging install hashes each file's body with, beside
/// writing it: its object name ([`crate::Install::objects`]).
pub fn object_hasher() -> zinstall_engine::contents::ObjectHasher {
    std::sync::Arc::new(|| Box::new(VerityBody(BodyHasher::new())))
}

/// The store, taking the bodies of an unpack into memory, and what it
/// wrote.
pub(crate) struct StoreSink<'a> {
    store: &'a Store,
    written: AtomicU64,
    bytes: AtomicU64,
    replaced: AtomicU64,
}

impl<'a> StoreSink<'a> {
    pub(crate) fn new(store: &'a Store) -> StoreSink<'a> {
        StoreSink {
            store,
            written: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            replaced: AtomicU64::new(0),
        }
    }
}

impl StoreSink<'_> {
    fn count(&self, put: &zinstall_composefs::Put) {
        if put.written {
            self.written.fetch_add(1, Ordering::Relaxed);
            self.bytes.fetch_add(put.size, Ordering::Relaxed);
        }
        if put.replaced {
            self.replaced.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl ObjectSink for StoreSink<'_> {
    fn create(&self) -> std::io::Result<File> {
        self.store.create_unnamed().map_err(std::io::Error::other)
    }

    fn commit(
        &self,
        f: File,
        digest: &ObjectDigest,
        size: u64,
    ) -> std::io::Result<()> {
        let put = self
            .store
            .name_unnamed(f, &from_bytes(digest), size)
            .map_err(std::io::Error::other)?;
        self.count(&put);
        Ok(())
    }

    fn put(&self, data: &[u8], digest: &ObjectDigest) -> std::io::Result<()> {
        let put = self
            .store
            .put_known(data, &from_bytes(digest))
            .map_err(std::io::Error::other)?;
        self.count(&put);
        Ok(())
    }

    fn hasher(&self) -> ObjectHasher {
        object_hasher()
    }

    fn inline_max(&self) -> u64 {
        INLINE_MAX
    }

    fn scratch(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        self.store.scratch_dir().map_err(std::io::Error::other)
    }

    fn filesystem(&self) -> Option<File> {
        self.store
            .objects_dir()
            .try_clone_to_owned()
            .ok()
            .map(File::from)
    }
}

/// The image's tree of `tree`, with what `sink` wrote; `None` if a
/// file's body was never stored (an unpack that did not finish).
pub(crate) fn scanned(tree: &MemTree, sink: &StoreSink<'_>) -> Option<Scanned> {
    let mut b = Builder::new();
    let mut leaves = HashMap::new();
    let top = dir(tree, tree.root(), &mut b, &mut leaves)?;
    b.finish(
        top,
        sink.written.load(Ordering::Relaxed),
        sink.bytes.load(Ordering::Relaxed),
        sink.replaced.load(Ordering::Relaxed),
    )
}

fn stat(a: &Attrs) -> EntryStat {
    EntryStat {
        mode: a.mode,
        uid: a.uid,
        gid: a.gid,
        mtime: a.mtime,
        xattrs: a
            .xattrs
            .iter()
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect(),
    }
}

/// The directory `id`, depth first; each other node once, hard links
/// naming the same leaf.
fn dir(
    tree: &MemTree,
    id: NodeId,
    b: &mut Builder,
    leaves: &mut HashMap<NodeId, LeafRef>,
) -> Option<Entry> {
    let node = tree.node(id);
    let NodeKind::Dir(entries) = &node.kind else {
        return None;
    };
    let mut out = Vec::with_capacity(entries.len());
    for (name, &child) in entries {
        let c = tree.node(child);
        let e = match &c.kind {
            NodeKind::Dir(_) => dir(tree, child, b, leaves)?,
            kind => {
                let r = match leaves.get(&child) {
                    Some(r) => *r,
                    None => {
                        let r = b.leaf(&stat(&c.attrs), leaf_kind(tree, kind)?);
                        leaves.insert(child, r);
                        r
                    }
                };
                Builder::leaf_entry(r)
            }
        };
        out.push((name.clone(), e));
    }
    Some(b.dir(&stat(&node.attrs), out))
}

fn leaf_kind(tree: &MemTree, kind: &NodeKind) -> Option<LeafKind> {
    Some(match kind {
        NodeKind::File {
            body: FileBody::Inline(d),
            ..
        } => LeafKind::Inline(d.clone()),
        NodeKind::File {
            size,
            body: FileBody::Object(slot),
        } => LeafKind::Object {
            id: from_bytes(&tree.object(*slot)?),
            size: *size,
        },
        NodeKind::Symlink(t) => LeafKind::Symlink(t.clone()),
        NodeKind::Special { kind, rdev } => match *kind {
            libc::S_IFCHR => LeafKind::CharDevice(*rdev),
            libc::S_IFBLK => LeafKind::BlockDevice(*rdev),
            _ => LeafKind::Fifo,
        },
        NodeKind::Dir(_) => return None,
    })
}
