//! The reader's steps for an unpack into memory ([`super::memory`]): each
//! member made a node by its kind's step, with the tree unpack's checks
//! and refusals, in archive order; bodies to the store through the pool;
//! what only the kernel decides left to an unpack into a tree
//! ([`Error::Unmodeled`]).

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::Read;
use std::path::Path;

use zinstall_archive::ArchiveRefusal;
use zinstall_archive::names::Name;
use zinstall_archive::tar::{self, TarError};

use super::batch::Batcher;
use super::budget::{BUDGET, CHUNKS_AHEAD, SMALL, Spare};
use super::checks::{link_target, special_type, symlink_target, unsupported};
use super::ctx::Ctx;
use super::job::{Body, Existing, FileJob, Meta, Place};
use super::kernel_attrs::{is_acl, kernel_attrs};
use super::layered::Class;
use super::members::listed_kind;
use super::memory::{Attrs, FileBody, MemTree, Met, Node, NodeId, NodeKind};
use super::memory_layers::MemLayer;
use super::options::Whiteouts;
use super::reading::{Flow, Reading, send};
use super::write::stream_object;
use crate::error::{Error, Result};

/// The longest name a filesystem takes for one component.
const NAME_MAX: usize = 255;

/// The longest symlink target `symlink(2)` takes, with its NUL.
const TARGET_MAX: usize = 4096;

/// Extended attributes of one entry, names and values with a little
/// for each header, that every filesystem keeps: past it, left to one.
const XATTRS_MAX: usize = 2048;

/// The reader's side of an unpack into memory.
pub(super) struct InMemory<'p> {
    tree: &'p mut MemTree,
    pool: Option<Batcher<'p>>,
    /// Files of at most this many bytes are kept in their node.
    inline_max: u64,
    /// Directories' metadata, applied after the last member as the tree
    /// unpack applies it: deepest first, in archive order at each depth.
    dirs: Vec<(Vec<CString>, Meta)>,
    /// An OCI layer's state, when its whiteouts apply.
    layer: Option<MemLayer>,
}

/// What a node's attributes are checked for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Other,
}

/// Where a member goes: its directory's node, its name there, what is
/// there now.
struct At<'a> {
    dir: NodeId,
    leaf: &'a [u8],
    now: Existing,
    entry: &'a str,
}

impl At<'_> {
    /// Only a directory entry may meet a directory.
    fn not_over_dir(&self, ctx: &Ctx<'_>) -> Result<()> {
        if self.now == Existing::Dir {
            Err(ctx.refuse(self.entry, ArchiveRefusal::FileOverDirectory))
        } else {
            Ok(())
        }
    }
}

impl<'p> InMemory<'p> {
    pub(super) fn new(
        ctx: &Ctx<'_>,
        tree: &'p mut MemTree,
        pool: Option<Batcher<'p>>,
    ) -> InMemory<'p> {
        InMemory {
            tree,
            pool,
            inline_max: ctx.objects.as_ref().map_or(0, |o| o.sink.inline_max()),
            dirs: Vec::new(),
            layer: (ctx.opts.whiteouts == Whiteouts::Apply)
                .then(MemLayer::default),
        }
    }

    /// The archive's entry for the root itself: its metadata, at the end.
    pub(super) fn root_entry(
        &mut self,
        ctx: &Ctx<'_>,
        entry: &str,
        meta: Meta,
    ) -> Result<()> {
        attrs_of(ctx, entry, &meta, Kind::Dir)?;
        if let Some(lay) = self.layer.as_mut() {
            lay.note_root_entry();
        }
        self.dirs.push((Vec::new(), meta));
        Ok(())
    }

    /// A layer's opaque marker or whiteout, applied to what lower layers
    /// left.
    pub(super) fn layer_change(
        &mut self,
        ctx: &Ctx<'_>,
        name: &Name,
        entry: &str,
        class: Class,
    ) -> Result<()> {
        let Some(lay) = self.layer.as_mut() else {
            return Err(ctx.unmodeled(entry, "a whiteout outside a layer"));
        };
        match class {
            Class::Opaque => lay.opaque(ctx, self.tree, name.parent(), entry),
            Class::Whiteout(leaf) => {
                lay.whiteout(ctx, self.tree, name.parent(), &leaf, entry)
            }
            Class::Entry | Class::Skip => Ok(()),
        }
    }

    /// After the last member (or a stop): every body stored, then, for
    /// an archive read through, the directories' metadata applied.
    pub(super) fn finish(mut self, ctx: &Ctx<'_>, ended: bool) -> Result<()> {
        if let Some(mut pool) = self.pool.take() {
            pool.flush();
        }
        ctx.pending.wait_empty();
        if !ended || ctx.stopped() {
            return Ok(());
        }
        if let Some(lay) = self.layer.take() {
            lay.finish(self.tree);
        }
        self.dirs.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        for (parts, m) in &self.dirs {
            let entry = Name::joined(parts).to_string_lossy().into_owned();
            let id = self.tree.walk(parts, false).map_err(|_| {
                ctx.unmodeled(&entry, "a directory replaced after its entry")
            })?;
            let a = &mut self.tree.node_mut(id).attrs;
            if a.xattrs.keys().any(|n| is_acl(n))
                || m.xattrs.iter().any(|(n, _)| is_acl(n.as_bytes()))
            {
                // The kernel keeps an ACL in step with the mode.
                *a = kernel_attrs(ctx, &ctx.shown(parts), m, Some(a))?;
                continue;
            }
            // Set as chown, setxattr, chmod and utimensat set them.
            a.uid = m.uid;
            a.gid = m.gid;
            for (n, v) in &m.xattrs {
                a.xattrs.insert(n.as_bytes().to_vec(), v.clone());
            }
            a.mode = m.mode & 0o7777;
            a.mtime = (m.times.mtime.0, m.times.mtime.1 as u32);
        }
        Ok(())
    }

    fn existing(&self, dir: NodeId, leaf: &[u8]) -> Existing {
        match self.tree.get(dir, leaf).map(|n| &self.tree.node(n).kind) {
            None => Existing::Nothing,
            Some(NodeKind::Dir(_)) => Existing::Dir,
            Some(NodeKind::Symlink(_)) => Existing::Symlink,
            Some(_) => Existing::Other,
        }
    }

    /// A new node named at `at`, over what was there.
    fn put(&mut self, at: &At<'_>, node: Node) {
        let id = self.tree.push(node);
        self.tree.set(at.dir, at.leaf, id);
    }
}

/// The attributes `meta` leaves on a new entry of `kind`, where they are
/// what the kernel stores as given.
fn attrs_of(
    ctx: &Ctx<'_>,
    entry: &str,
    meta: &Meta,
    kind: Kind,
) -> Result<Attrs> {
    let why = |w: &str| Err(ctx.unmodeled(entry, w));
    if meta.uid == u32::MAX || meta.gid == u32::MAX {
        return why("an owner of 4294967295, which chown(2) takes as none");
    }
    let (s, ns) = meta.times.mtime;
    let nanos = 0..1_000_000_000;
    if !nanos.contains(&ns) || !nanos.contains(&meta.times.atime.1) {
        return why("a time whose nanoseconds are out of range");
    }
    if !(i64::from(i32::MIN)..=i64::from(i32::MAX)).contains(&s) {
        return why("a time outside 1901-2038, which filesystems keep apart");
    }
    let mut xattrs = BTreeMap::new();
    let mut total = 0;
    for (name, value) in &meta.xattrs {
        let n = name.as_bytes();
        let plain = (n.starts_with(b"user.") && n.len() > 5)
            || (n.starts_with(b"trusted.") && n.len() > 8);
        let stored_as_given = match kind {
            Kind::Dir => plain || is_acl(n),
            Kind::File => {
                plain
                    || n == b"system.posix_acl_access"
                    || (n == b"security.capability" && cap_v2(value))
            }
            Kind::Other => false,
        };
        if !stored_as_given {
            return Err(ctx.unmodeled(
                entry,
                format!(
                    "the extended attribute {}, which the kernel takes by \
                     rules of its own here",
                    String::from_utf8_lossy(n)
                ),
            ));
        }
        total += n.len() + value.len() + 16;
        xattrs.insert(n.to_vec(), value.clone());
    }
    if total > XATTRS_MAX {
        return why("extended attributes larger than every filesystem keeps");
    }
    Ok(Attrs {
        mode: meta.mode & 0o7777,
        uid: meta.uid,
        gid: meta.gid,
        mtime: (s, ns as u32),
        xattrs,
    })
}

/// A file capability in its revision-2 form, which the kernel stores as
/// given (a revision-3 one it may rewrite for the user namespace).
fn cap_v2(value: &[u8]) -> bool {
    const VFS_CAP_REVISION_2: u32 = 0x0200_0000;
    value.len() == 20
        && value[..4]
            .try_into()
            .map(u32::from_le_bytes)
            .is_ok_and(|magic| magic & 0xFF00_0000 == VFS_CAP_REVISION_2)
}

impl<R: Read> Reading<'_, '_, R> {
    /// A checked member made a node by its kind's step.
    pub(super) fn in_memory(
        &mut self,
        mm: &mut InMemory<'_>,
        m: tar::Member,
        name: Name,
        entry: String,
        meta: Meta,
        leaf: CString,
    ) -> Result<Flow> {
        let ctx = self.ctx;
        if name.parts.iter().any(|p| p.as_bytes().len() > NAME_MAX) {
            return Err(ctx.unmodeled(&entry, "a name longer than 255 bytes"));
        }
        let dir_entry = m.kind == tar::Kind::Directory;
        let links = m.kind == tar::Kind::HardLink;
        if mm.tree.inherits_acl(
            name.parent(),
            leaf.as_bytes(),
            dir_entry,
            links,
        ) {
            return Err(ctx.unmodeled(
                &entry,
                "an entry made in a directory with a default ACL",
            ));
        }
        if let Some(lay) = mm.layer.as_mut() {
            lay.touch(mm.tree, name.parent());
        }
        let dir =
            mm.tree.walk(name.parent(), true).map_err(|met| match met {
                Met::Symlink => {
                    ctx.refuse(&entry, ArchiveRefusal::ThroughSymlink)
                }
                Met::NotADirectory | Met::Missing => {
                    ctx.refuse(&entry, ArchiveRefusal::FileOverDirectory)
                }
            })?;
        if let Some(l) = &ctx.opts.listener {
            l.entry(
                Path::new(&entry),
                &ctx.shown(&name.parts),
                listed_kind(m.kind),
            );
        }
        let mut now = mm.existing(dir, leaf.as_bytes());
        if let Some(lay) = mm.layer.as_mut() {
            // A lower layer's directory becomes a file, or its symlink a
            // directory: what it left goes. Within one layer, refused.
            let dir_entry = m.kind == tar::Kind::Directory;
            if ((now == Existing::Dir && !dir_entry)
                || (now == Existing::Symlink && dir_entry))
                && !lay.made(&name.parts)
            {
                mm.tree.unset(dir, leaf.as_bytes());
                now = Existing::Nothing;
            }
            lay.note(&name.parts, dir_entry);
        }
        let at = At {
            dir,
            leaf: leaf.as_bytes(),
            now,
            entry: &entry,
        };
        match m.kind {
            tar::Kind::Directory => {
                self.mem_directory(mm, &at, &name, meta).map(|()| Flow::Go)
            }
            tar::Kind::File => self.mem_file(mm, &at, &m, &name, meta),
            tar::Kind::Symlink => {
                self.mem_symlink(mm, &at, &m, &meta).map(|()| Flow::Go)
            }
            tar::Kind::HardLink => {
                self.mem_hard_link(mm, &at, &m).map(|()| Flow::Go)
            }
            tar::Kind::CharDevice
            | tar::Kind::BlockDevice
            | tar::Kind::Fifo => {
                self.mem_special(mm, &at, &m, &meta).map(|()| Flow::Go)
            }
            tar::Kind::Other(typ) => Err(unsupported(ctx, &entry, typ)),
        }
    }

    /// A directory: made (as `mkdir(0700)`) unless one is there, its
    /// metadata applied at the end.
    fn mem_directory(
        &mut self,
        mm: &mut InMemory<'_>,
        at: &At<'_>,
        name: &Name,
        meta: Meta,
    ) -> Result<()> {
        attrs_of(self.ctx, at.entry, &meta, Kind::Dir)?;
        match at.now {
            Existing::Dir => {}
            Existing::Symlink => {
                return Err(self
                    .ctx
                    .refuse(at.entry, ArchiveRefusal::DirectoryOverSymlink));
            }
            Existing::Other | Existing::Nothing => {
                let node = mm.tree.new_dir(at.dir, 0o700);
                mm.put(at, node);
                self.out.stats.dirs += 1;
            }
        }
        mm.dirs.push((name.parts.clone(), meta));
        Ok(())
    }

    /// A regular file: a small body kept in its node, a larger one stored
    /// by a worker (or here, serial), as the tree unpack writes it.
    fn mem_file(
        &mut self,
        mm: &mut InMemory<'_>,
        at: &At<'_>,
        m: &tar::Member,
        name: &Name,
        meta: Meta,
    ) -> Result<Flow> {
        let ctx = self.ctx;
        at.not_over_dir(ctx)?;
        if m.sparse.is_some() {
            return Err(ctx.unmodeled(at.entry, "a sparse file"));
        }
        let mut attrs = attrs_of(ctx, at.entry, &meta, Kind::File)?;
        if attrs.xattrs.keys().any(|n| is_acl(n)) {
            // The kernel keeps an ACL in step with the mode: asked.
            let shown = ctx.shown(&name.parts);
            attrs = kernel_attrs(ctx, &shown, &meta, None)?;
        }
        let size = m.size;
        let read_err = |e| Error::tar(ctx.archive, TarError::from_io(e));
        if size <= mm.inline_max {
            let mut data = vec![0u8; size as usize];
            self.rd.body().read_exact(&mut data).map_err(read_err)?;
            let body = FileBody::Inline(data);
            let kind = NodeKind::File { size, body };
            mm.put(at, Node { attrs, kind });
            self.out.stats.files += 1;
            self.out.stats.bytes += size;
            return Ok(Flow::Go);
        }
        let slot = mm.tree.new_slot();
        let body = FileBody::Object(slot);
        mm.put(
            at,
            Node {
                attrs,
                kind: NodeKind::File { size, body },
            },
        );
        let shown = ctx.shown(&name.parts);
        if mm.pool.is_none() {
            stream_object(ctx, &mut self.rd, size, slot, &shown)?;
            return Ok(Flow::Go);
        }
        let job = |body| FileJob {
            place: Place::Object(slot),
            body,
            meta,
            shown,
            entry: at.entry.to_string(),
            hold: None,
            rel: None,
        };
        if size > SMALL {
            let (tx, rx) = crossbeam_channel::bounded(CHUNKS_AHEAD);
            // Sent at once, ahead of what follows.
            let sent = mm.pool.as_mut().is_some_and(Batcher::flush)
                && send(ctx, &mut mm.pool, job(Body::Chunks { rx, size }))
                && mm.pool.as_mut().is_some_and(Batcher::flush);
            if !sent {
                return Ok(Flow::Stop);
            }
            return self.feed(&tx, size);
        }
        // Held until the worker has written it.
        let len = size as usize;
        let held = Spare::class(len) as u64;
        ctx.budget.acquire(held, BUDGET);
        let mut data = ctx.spare.take(len);
        data.resize(len, 0);
        if let Err(err) = self.rd.body().read_exact(&mut data) {
            ctx.budget.release(held);
            return Err(read_err(err));
        }
        Ok(match send(ctx, &mut mm.pool, job(Body::Bytes(data))) {
            true => Flow::Go,
            false => Flow::Stop,
        })
    }

    /// A symlink: mode 0777, as the kernel makes every one.
    fn mem_symlink(
        &mut self,
        mm: &mut InMemory<'_>,
        at: &At<'_>,
        m: &tar::Member,
        meta: &Meta,
    ) -> Result<()> {
        let ctx = self.ctx;
        at.not_over_dir(ctx)?;
        let target = symlink_target(ctx, m, at.entry)?;
        if target.as_bytes().len() >= TARGET_MAX {
            return Err(ctx.unmodeled(at.entry, "a symlink target too long"));
        }
        let mut attrs = attrs_of(ctx, at.entry, meta, Kind::Other)?;
        attrs.mode = 0o777;
        let kind = NodeKind::Symlink(target.into_bytes());
        mm.put(at, Node { attrs, kind });
        self.out.stats.symlinks += 1;
        Ok(())
    }

    /// A hard link: its target must be a file or symlink this archive (or
    /// an earlier one) made in the tree, reached without symlinks.
    fn mem_hard_link(
        &mut self,
        mm: &mut InMemory<'_>,
        at: &At<'_>,
        m: &tar::Member,
    ) -> Result<()> {
        let ctx = self.ctx;
        at.not_over_dir(ctx)?;
        let outside = || ctx.refuse(at.entry, ArchiveRefusal::HardLinkOutside);
        let (target, tleaf) = link_target(ctx, m, at.entry, self.subtree)?;
        let tdir = mm
            .tree
            .walk(target.parent(), false)
            .map_err(|_| outside())?;
        let node = mm
            .tree
            .get(tdir, tleaf.as_bytes())
            .filter(|&n| !matches!(mm.tree.node(n).kind, NodeKind::Dir(_)))
            .ok_or_else(outside)?;
        if (tdir, tleaf.as_bytes()) == (at.dir, at.leaf) {
            // The tree unpack unlinks the name, then fails to link it.
            return Err(Error::io(
                crate::error::Op::Link,
                ctx.shown(&target.parts),
                std::io::Error::from_raw_os_error(libc::ENOENT),
            ));
        }
        mm.tree.set(at.dir, at.leaf, node);
        self.out.stats.hardlinks += 1;
        Ok(())
    }

    /// A device node (only when allowed) or a FIFO.
    fn mem_special(
        &mut self,
        mm: &mut InMemory<'_>,
        at: &At<'_>,
        m: &tar::Member,
        meta: &Meta,
    ) -> Result<()> {
        let ctx = self.ctx;
        let kind = special_type(ctx, m, at.entry)?;
        at.not_over_dir(ctx)?;
        let attrs = attrs_of(ctx, at.entry, meta, Kind::Other)?;
        let rdev = crate::sys::posix::makedev(m.dev.0, m.dev.1);
        let kind = NodeKind::Special {
            kind,
            rdev: rdev as u64,
        };
        mm.put(at, Node { attrs, kind });
        self.out.stats.specials += 1;
        Ok(())
    }
}
