//! An unpack into memory ([`unpack_to_memory`](super::unpack_to_memory)):
//! the tree a root would be, held as nodes, with every regular file's
//! body in a store of objects ([`ObjectSink`]) instead of beneath a root.
//! For a root kept as an image of metadata over such a store (composefs),
//! each file then costs one name in the store rather than a file in a
//! tree made, read back and removed.
//!
//! The nodes are what the tree unpack would leave, member by member: the
//! same checks and refusals (a file over a directory, a member through a
//! symlink, a hard link whose target is not there), a later member over an
//! earlier one, hard links sharing a node, missing parents made as
//! `mkdir(0755)` makes them, directories' metadata applied last. An ACL,
//! which the kernel keeps in step with the mode, is settled by asking it
//! (`kernel_attrs.rs`). What only the kernel decides otherwise (a default
//! ACL given to new entries, attributes a filesystem refuses or clamps)
//! is not modelled: such a member fails the unpack with [`Error::Unmodeled`], and
//! the caller unpacks into a tree instead.
//!
//! [`Error::Unmodeled`]: crate::Error::Unmodeled

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::File;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use std::path::Path;

use crate::contents::{BodyHash, ObjectDigest, ObjectHasher};
use crate::error::{Error, Op, Result};

/// Where an unpack into memory puts file bodies: a store that names each
/// by its digest.
pub trait ObjectSink: Send + Sync {
    /// A new, unnamed file in the store to write one body into.
    fn create(&self) -> std::io::Result<File>;
    /// Names `f`, holding `size` bytes written whole, by `digest`, the
    /// [`ObjectSink::hasher`]'s of those bytes.
    fn commit(
        &self,
        f: File,
        digest: &ObjectDigest,
        size: u64,
    ) -> std::io::Result<()>;
    /// Stores `data`, whose digest is `digest`, under that name: a body
    /// held whole is hashed first and written once, where it belongs, or
    /// not at all when the store has it.
    fn put(&self, data: &[u8], digest: &ObjectDigest) -> std::io::Result<()>;
    /// The hash the store names bodies by.
    fn hasher(&self) -> ObjectHasher;
    /// Files of at most this many bytes are kept in the node, not stored.
    fn inline_max(&self) -> u64;
    /// A directory on the store's filesystem where the unpack may make
    /// and remove entries of its own, to ask the kernel what it makes of
    /// attributes it keeps by rules of its own (an ACL and the mode).
    fn scratch(&self) -> std::io::Result<std::os::fd::OwnedFd>;
    /// A descriptor on the store's filesystem, for its data to be sent
    /// to the disk while the unpack goes on (`syncfs(2)`, as an unpack
    /// beneath a root does), when the caller flushes it at the end.
    fn filesystem(&self) -> Option<File>;
}

/// A node's index in its [`MemTree`].
pub type NodeId = usize;

/// A node's attributes, as `lstat` and the xattr calls would show them
/// in the tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attrs {
    /// Permission bits (`0o7777`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time: seconds and nanoseconds.
    pub mtime: (i64, u32),
    /// Extended attributes, by name.
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// Where a regular file's body is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileBody {
    /// Kept here (at most [`ObjectSink::inline_max`] bytes).
    Inline(Vec<u8>),
    /// In the store: [`MemTree::object`] of this slot names it.
    Object(usize),
}

/// What a node is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// A directory: its entries by name.
    Dir(BTreeMap<Vec<u8>, NodeId>),
    /// A regular file of `size` bytes.
    File {
        /// Its length.
        size: u64,
        /// Where its bytes are.
        body: FileBody,
    },
    /// A symlink and its target.
    Symlink(Vec<u8>),
    /// A FIFO or device node: its type bits (`S_IFIFO`, `S_IFCHR`,
    /// `S_IFBLK`) and device number.
    Special {
        /// `st_mode & S_IFMT`.
        kind: u32,
        /// `st_rdev`.
        rdev: u64,
    },
}

/// One inode of the tree: hard links share it.
#[derive(Clone, Debug)]
pub struct Node {
    /// Its attributes.
    pub attrs: Attrs,
    /// What it is.
    pub kind: NodeKind,
}

/// Why a walk to a directory stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Met {
    Symlink,
    NotADirectory,
    Missing,
}

/// Each stored body's digest, by slot: filled by the workers while the
/// reader adds nodes.
#[derive(Debug, Default)]
pub(super) struct Slots(Mutex<Vec<Option<ObjectDigest>>>);

impl Slots {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<ObjectDigest>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A worker's stored body.
    pub(super) fn fill(&self, slot: usize, digest: ObjectDigest) {
        if let Some(s) = self.lock().get_mut(slot) {
            *s = Some(digest);
        }
    }
}

/// A root's tree held in memory; its root is node 0.
#[derive(Debug)]
pub struct MemTree {
    nodes: Vec<Node>,
    /// Names each node has (its hard links): a node no name holds any
    /// more is taken again by the next one made, so an archive that
    /// writes one name a million times holds one node, not a million.
    links: Vec<u32>,
    /// Nodes no name holds.
    free: Vec<NodeId>,
    objects: Arc<Slots>,
    /// The creator's umask, euid and egid: what a directory made as a
    /// missing parent gets.
    umask: u32,
    euid: u32,
    egid: u32,
}

/// Seconds and nanoseconds of `t` since the epoch.
pub(super) fn stamp(t: SystemTime) -> (i64, u32) {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(_) => (0, 0),
    }
}

impl MemTree {
    /// An empty root as an install makes it: mode 0755, owned by the
    /// caller, made now. `umask` is the process's: missing parents are
    /// made as `mkdir(0755)` under it would make them.
    pub fn new(umask: u32) -> MemTree {
        let (euid, egid) =
            (crate::sys::posix::euid(), crate::sys::posix::egid());
        MemTree {
            nodes: vec![Node {
                attrs: Attrs {
                    mode: 0o755,
                    uid: euid,
                    gid: egid,
                    mtime: stamp(SystemTime::now()),
                    xattrs: BTreeMap::new(),
                },
                kind: NodeKind::Dir(BTreeMap::new()),
            }],
            // The root is never freed.
            links: vec![1],
            free: Vec::new(),
            objects: Arc::default(),
            umask: umask & 0o777,
            euid,
            egid,
        }
    }

    /// The root directory's node.
    pub fn root(&self) -> NodeId {
        0
    }

    /// Nodes held: those names hold, and those free to be taken again.
    pub fn nodes_held(&self) -> usize {
        self.nodes.len()
    }

    /// The node `id`.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id]
    }

    /// The digest of the body stored in `slot`, once written.
    pub fn object(&self, slot: usize) -> Option<ObjectDigest> {
        self.objects.lock().get(slot).copied().flatten()
    }

    /// Where the workers put what they stored.
    pub(super) fn slots(&self) -> Arc<Slots> {
        Arc::clone(&self.objects)
    }

    /// A new slot for a body a worker will store.
    pub(super) fn new_slot(&self) -> usize {
        let mut s = self.objects.lock();
        s.push(None);
        s.len() - 1
    }

    pub(super) fn node_mut(&mut self, id: NodeId) -> &mut Node {
        &mut self.nodes[id]
    }

    /// Adds `node`, not yet named anywhere.
    pub(super) fn push(&mut self, node: Node) -> NodeId {
        if let Some(id) = self.free.pop() {
            self.nodes[id] = node;
            self.links[id] = 0;
            return id;
        }
        self.nodes.push(node);
        self.links.push(0);
        self.nodes.len() - 1
    }

    /// One name fewer for `id`: a node left with none is free, and so,
    /// for a directory, is what only it held.
    fn release(&mut self, id: NodeId) {
        let mut stack = vec![id];
        while let Some(n) = stack.pop() {
            self.links[n] = self.links[n].saturating_sub(1);
            if self.links[n] > 0 || n == self.root() {
                continue;
            }
            let gone = std::mem::replace(
                &mut self.nodes[n].kind,
                NodeKind::Dir(BTreeMap::new()),
            );
            if let NodeKind::Dir(entries) = gone {
                stack.extend(entries.into_values());
            }
            // Its stored body's slot is kept: a worker may still fill it.
            self.free.push(n);
        }
    }

    /// The node named `leaf` in directory `dir`.
    pub(super) fn get(&self, dir: NodeId, leaf: &[u8]) -> Option<NodeId> {
        match &self.nodes[dir].kind {
            NodeKind::Dir(e) => e.get(leaf).copied(),
            _ => None,
        }
    }

    /// Names `id` as `leaf` in `dir`, over whatever was there; the
    /// directory's time is now, as the kernel's would be.
    pub(super) fn set(&mut self, dir: NodeId, leaf: &[u8], id: NodeId) {
        let d = &mut self.nodes[dir];
        let NodeKind::Dir(e) = &mut d.kind else {
            return;
        };
        let was = e.insert(leaf.to_vec(), id);
        d.attrs.mtime = stamp(SystemTime::now());
        if was == Some(id) {
            return;
        }
        self.links[id] += 1;
        if let Some(old) = was {
            self.release(old);
        }
    }

    /// Removes the name `leaf` from `dir`, if there; the directory's time
    /// is now, as the kernel's would be.
    pub(super) fn unset(&mut self, dir: NodeId, leaf: &[u8]) {
        let d = &mut self.nodes[dir];
        let NodeKind::Dir(e) = &mut d.kind else {
            return;
        };
        if let Some(old) = e.remove(leaf) {
            d.attrs.mtime = stamp(SystemTime::now());
            self.release(old);
        }
    }

    /// The directory `parts` below the root, made (as `mkdir(0755)`
    /// would, a set-group-ID parent's group passed on) where missing when
    /// `create`; never through a symlink.
    pub(super) fn walk(
        &mut self,
        parts: &[CString],
        create: bool,
    ) -> Result<NodeId, Met> {
        let mut at = self.root();
        for p in parts {
            let next = match self.get(at, p.as_bytes()) {
                Some(n) => n,
                None if create => {
                    let node = self.missing_parent(at);
                    let n = self.push(node);
                    self.set(at, p.as_bytes(), n);
                    n
                }
                None => return Err(Met::Missing),
            };
            match self.nodes[next].kind {
                NodeKind::Dir(_) => at = next,
                NodeKind::Symlink(_) => return Err(Met::Symlink),
                _ => return Err(Met::NotADirectory),
            }
        }
        Ok(at)
    }

    /// Whether a member at `parent`/`leaf` would be made in a directory
    /// with a default ACL (the kernel gives it to what is made there): the
    /// member itself unless it `links` an existing node or is a directory
    /// entry (`dir`) over a directory, and any parent missing on the way.
    pub(super) fn inherits_acl(
        &self,
        parent: &[CString],
        leaf: &[u8],
        dir: bool,
        links: bool,
    ) -> bool {
        let has_default = |n: NodeId| {
            self.nodes[n]
                .attrs
                .xattrs
                .contains_key(&b"system.posix_acl_default"[..])
        };
        let mut at = self.root();
        for p in parent {
            match self.get(at, p.as_bytes()) {
                Some(n) if matches!(self.nodes[n].kind, NodeKind::Dir(_)) => {
                    at = n;
                }
                // Made here, without a default ACL below it.
                None => return has_default(at),
                // Refused by the walk.
                Some(_) => return false,
            }
        }
        let made = match self.get(at, leaf) {
            Some(n) if dir => !matches!(self.nodes[n].kind, NodeKind::Dir(_)),
            _ => !links,
        };
        made && has_default(at)
    }

    /// A directory made in `parent`: `mkdir(mode)` under the umask, owned
    /// by the caller, the parent's group and set-group-ID bit passed on
    /// where the parent has it.
    pub(super) fn new_dir(&self, parent: NodeId, mode: u32) -> Node {
        let p = &self.nodes[parent].attrs;
        let sgid = p.mode & libc::S_ISGID != 0;
        Node {
            attrs: Attrs {
                mode: (mode & !self.umask)
                    | if sgid { libc::S_ISGID } else { 0 },
                uid: self.euid,
                gid: if sgid { p.gid } else { self.egid },
                mtime: stamp(SystemTime::now()),
                xattrs: BTreeMap::new(),
            },
            kind: NodeKind::Dir(BTreeMap::new()),
        }
    }

    fn missing_parent(&self, parent: NodeId) -> Node {
        self.new_dir(parent, 0o755)
    }
}

/// What the workers of an unpack into memory write bodies with.
pub(super) struct ObjectsTo<'a> {
    pub(super) sink: &'a dyn ObjectSink,
    pub(super) hasher: ObjectHasher,
    pub(super) slots: Arc<Slots>,
}

impl ObjectsTo<'_> {
    /// Stores `data`, hashed first, and puts its digest in `slot`.
    pub(super) fn put(
        &self,
        data: &[u8],
        slot: usize,
        shown: &Path,
    ) -> Result<()> {
        let mut h = (self.hasher)();
        h.write(data);
        let digest = h.finish();
        self.sink
            .put(data, &digest)
            .map_err(|e| Error::io(Op::Create, shown, e))?;
        self.slots.fill(slot, digest);
        Ok(())
    }

    /// Names `f`, whose `size` bytes `h` hashed, in the store, and puts
    /// its digest in `slot`.
    pub(super) fn store(
        &self,
        f: File,
        h: BodyHash,
        size: u64,
        slot: usize,
        shown: &Path,
    ) -> Result<()> {
        let Some(digest) = h.finish_object() else {
            return Err(Error::io(
                Op::Write,
                shown,
                std::io::Error::other("a body hashed without the store's hash"),
            ));
        };
        self.sink
            .commit(f, &digest, size)
            .map_err(|e| Error::io(Op::Link, shown, e))?;
        self.slots.fill(slot, digest);
        Ok(())
    }
}
