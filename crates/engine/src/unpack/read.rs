//! The reader's loop: members decoded in order, each checked, then
//! placed beneath the root by the step for its kind, or, in a dry run,
//! recorded where it would have been placed. Only file bodies go to the
//! pool; every other entry is made here, in archive order, so that what
//! a later member says about an earlier one (a hard link to it, a
//! whiteout of it, a second entry for it) finds it done.

use std::collections::HashSet;
use std::collections::hash_map::RandomState;
use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use zinstall_archive::ArchiveRefusal;
use zinstall_archive::names::{self, Name};
use zinstall_archive::tar::{self, TarError};

use super::batch::Batcher;
use super::budget::{BUDGET, CHUNKS_AHEAD, SMALL, Spare};
use super::checks::{link_target, special_type, symlink_target, unsupported};
use super::ctx::{Ctx, ReadOutcome};
use super::into_memory::InMemory;
use super::job::{Body, Existing, FileJob, Meta, Place, Target, existing};
use super::layered::{Class, Layered, classify};
use super::made::Made;
use super::members::{NO_MEMBERS, first_member, listed_kind, relative};
use super::memory::MemTree;
use super::options::Whiteouts;
use super::reading::{Flow, Reading, send};
use super::write::stream_file;
use crate::beneath::{self, Chain};
use crate::error::{Error, Op, Result};
use crate::stats::NoticeKind;
use crate::sys::posix::at;

/// Paths remembered between two barriers, to keep a later entry for the
/// same path from overtaking an earlier one still queued.
const MAX_TRACKED: usize = 65_536;

/// A member placed: its name beneath the root, its directory opened, and
/// what is there now.
struct Entry {
    m: tar::Member,
    name: Name,
    /// The member's name in the archive, for refusals.
    entry: String,
    meta: Meta,
    leaf: CString,
    /// A hash of its path: what is queued for the pool is tracked by it.
    rel: u64,
    dir: Arc<OwnedFd>,
    shown: PathBuf,
    now: Existing,
}

impl Entry {
    /// The pool's job for this file, with its body.
    fn job(self, replace: bool, body: Body, rel: Option<Vec<u8>>) -> FileJob {
        FileJob {
            place: Place::Tree {
                dir: self.dir,
                leaf: self.leaf,
                replace,
            },
            body,
            meta: self.meta,
            shown: self.shown,
            entry: self.entry,
            hold: None,
            rel,
        }
    }

    fn dfd(&self) -> RawFd {
        self.dir.as_raw_fd()
    }

    /// Only a directory entry may meet a directory.
    fn not_over_dir(&self, ctx: &Ctx<'_>) -> Result<()> {
        if self.now == Existing::Dir {
            Err(ctx.refuse(&self.entry, ArchiveRefusal::FileOverDirectory))
        } else {
            Ok(())
        }
    }

    /// Removes what is there, if anything (not a directory).
    fn unlink_existing(&self) -> Result<()> {
        if self.now != Existing::Nothing {
            at::unlink(self.dfd(), &self.leaf, false)
                .map_err(|e| Error::io(Op::Remove, &self.shown, e))?;
        }
        Ok(())
    }
}

/// Where [`read_all`] takes the members.
pub(super) enum Dest<'p> {
    /// Made beneath the root, open as `root`; file bodies through `pool`
    /// when there is one.
    Tree {
        root: Arc<OwnedFd>,
        pool: Option<Batcher<'p>>,
    },
    /// Nothing made: each member counted in the stats and told to the
    /// listener where the tree would have made it; bodies skipped. A dry
    /// run.
    Record,
    /// Held in memory ([`MemTree`]), file bodies stored through `pool`
    /// when there is one.
    Memory {
        tree: &'p mut MemTree,
        pool: Option<Batcher<'p>>,
    },
}

/// What the members are made in, when they are made.
enum Making<'p> {
    /// Boxed: the tree's side is large, and made once per unpack.
    Tree(Box<Tree<'p>>),
    /// A dry run: nothing made.
    Record,
    /// Held in memory.
    Memory(Box<InMemory<'p>>),
}

/// The tree's side of the loop: the pool, and what is made.
struct Tree<'p> {
    pool: Option<Batcher<'p>>,
    /// Paths queued and not yet written, by a hash of each: a constant per
    /// path at any depth.
    queued: HashSet<u64>,
    queued_key: RandomState,
    chain: Chain,
    /// What this unpack made: directories it created, and every path it
    /// placed, by the same hash. In a directory it created, nothing can
    /// be there but what it placed, so the look at what is there (a
    /// `stat` per entry) is skipped for a new name. A false match only
    /// costs that look; a miss cannot happen (every `*at` call that
    /// makes something refuses an existing name).
    made: Made,
    layered: Option<Layered>,
}

/// Reads every member of `rd`, checks it, and takes it to `dest`.
pub(super) fn read_all<R: Read>(
    ctx: &Ctx<'_>,
    rd: tar::Reader<R>,
    dest: Dest<'_>,
) -> Result<ReadOutcome> {
    let started = Instant::now();
    let mut r = Reading {
        ctx,
        rd,
        out: ReadOutcome::default(),
        subtree: false,
    };
    let mut making = match dest {
        Dest::Tree { root, pool } => Making::Tree(Box::new(Tree {
            pool,
            queued: HashSet::new(),
            queued_key: RandomState::new(),
            chain: Chain::new(root),
            made: Made::default(),
            layered: Layered::new(ctx.opts.whiteouts),
        })),
        Dest::Record => Making::Record,
        Dest::Memory { tree, pool } => {
            Making::Memory(Box::new(InMemory::new(ctx, tree, pool)))
        }
    };
    let mut first = true;
    let mut ended = false;
    while !ctx.stopped() {
        let next = r.rd.next();
        ctx.reader_quirks(&mut r.rd);
        let Some(m) = next.map_err(|e| Error::tar(ctx.archive, e))? else {
            ended = true;
            break;
        };
        let is_first = std::mem::take(&mut first);
        if let Flow::Stop = r.member(&mut making, m, is_first)? {
            break;
        }
    }
    if ended && first {
        if ctx.opts.expect.is_some() {
            return Err(ctx.refuse("", ArchiveRefusal::MissingMetadata));
        }
        ctx.notice(NoticeKind::ArchiveQuirk(NO_MEMBERS.into()), ctx.archive);
    }
    r.finish(making, ended, started)
}

impl Tree<'_> {
    /// What a path is tracked by while queued.
    fn rel(&self, parts: &[CString]) -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let mut h = self.queued_key.build_hasher();
        // Each component with its NUL: no component holds one, so no two
        // paths write the same bytes.
        for p in parts {
            h.write(p.as_bytes_with_nul());
        }
        h.finish()
    }

    /// Waits until every queued file is written; false if the pool is
    /// gone.
    fn barrier(&mut self, ctx: &Ctx<'_>) -> bool {
        let sent = self.pool.as_mut().is_none_or(Batcher::flush);
        if sent {
            ctx.pending.wait_empty();
            self.queued.clear();
        }
        sent
    }

    /// Hands `job` to the pool (or writes it here, serial); false when the
    /// pool is gone.
    fn queue(&mut self, ctx: &Ctx<'_>, rel: u64, job: FileJob) -> bool {
        if self.pool.is_some() {
            self.queued.insert(rel);
        }
        send(ctx, &mut self.pool, job)
    }

    /// A layer's opaque marker or whiteout applied (or recorded), once
    /// what this layer queued beneath it is written.
    fn layer_change(
        &mut self,
        ctx: &Ctx<'_>,
        name: &Name,
        entry: &str,
        class: Class,
    ) -> Result<Flow> {
        let Some(lay) = self.layered.as_ref() else {
            return Ok(Flow::Go);
        };
        // What this layer queued stays until written: nothing is removed
        // from under a worker.
        let must_wait = match &class {
            Class::Entry | Class::Skip => false,
            Class::Opaque => lay.applying(),
            Class::Whiteout(leaf) => {
                let mut target = name.parent().to_vec();
                target.push(leaf.clone());
                lay.applying() && lay.made(&target)
            }
        };
        if must_wait && !self.barrier(ctx) {
            return Ok(Flow::Stop);
        }
        let Some(lay) = self.layered.as_mut() else {
            return Ok(Flow::Go);
        };
        if let Some(c) = &ctx.opts.contents {
            match &class {
                Class::Opaque => c.forget(&joined(name.parent())),
                Class::Whiteout(leaf) => {
                    let mut target = name.parent().to_vec();
                    target.push(leaf.clone());
                    c.forget(&joined(&target));
                }
                Class::Entry | Class::Skip => {}
            }
        }
        match class {
            Class::Opaque => {
                lay.opaque(ctx, &mut self.chain, name.parent(), entry)?
            }
            Class::Whiteout(leaf) => {
                lay.whiteout(ctx, &mut self.chain, name.parent(), &leaf, entry)?
            }
            Class::Entry | Class::Skip => {}
        }
        Ok(Flow::Go)
    }

    /// Opens the member's directory beneath the root (made if missing)
    /// after any earlier entry for the same path is written, and looks at
    /// what is there; in a layer, a lower layer's directory a file
    /// replaces (or symlink a directory replaces) is removed first. `None`
    /// if the pool is gone.
    fn place(
        &mut self,
        ctx: &Ctx<'_>,
        m: tar::Member,
        name: Name,
        entry: String,
        meta: Meta,
        leaf: CString,
    ) -> Result<Option<Entry>> {
        let rel = self.rel(&name.parts);
        // A second entry for a path still queued waits for the first (two
        // paths of one hash wait too: harmless).
        if (self.queued.contains(&rel) || self.queued.len() >= MAX_TRACKED)
            && !self.barrier(ctx)
        {
            return Ok(None);
        }
        if let Some(lay) = self.layered.as_mut() {
            lay.touch(ctx, &mut self.chain, name.parent())?;
        }
        let dir = ctx.open_dir(&mut self.chain, name.parent(), &entry, true)?;
        let shown = ctx.shown(&name.parts);
        let mut now = match self.made.free(self.rel(name.parent()), rel) {
            true => Existing::Nothing,
            false => existing(dir.as_raw_fd(), &leaf, &shown)?,
        };
        self.made.placed(rel);
        if let Some(lay) = self.layered.as_mut() {
            // A lower layer's directory becomes a file, or its symlink a
            // directory: what it left goes. Within one layer, refused.
            let dir_entry = m.kind == tar::Kind::Directory;
            if lay.applying()
                && ((now == Existing::Dir && !dir_entry)
                    || (now == Existing::Symlink && dir_entry))
                && !lay.made(&name.parts)
            {
                beneath::remove_at(dir.as_raw_fd(), &leaf, &shown)?;
                now = Existing::Nothing;
            }
            lay.note(&name.parts, dir_entry);
        }
        Ok(Some(Entry {
            m,
            name,
            entry,
            meta,
            leaf,
            rel,
            dir,
            shown,
            now,
        }))
    }
}

impl<R: Read> Reading<'_, '_, R> {
    fn tar_err(&self, e: TarError) -> Error {
        Error::tar(self.ctx.archive, e)
    }

    /// One member: its name, a layer's bookkeeping and its metadata
    /// checked, then made by its kind's step or recorded.
    fn member(
        &mut self,
        making: &mut Making<'_>,
        m: tar::Member,
        first: bool,
    ) -> Result<Flow> {
        let ctx = self.ctx;
        let entry = m.name_lossy();
        let raw = relative(&m.name, "member names", |k, p| ctx.notice(k, p));
        let mut name = names::check(raw).map_err(|r| ctx.refuse(&entry, r))?;
        if first
            && let Some(meta) = first_member(
                &mut self.rd,
                &m,
                &name,
                ctx.opts.expect,
                ctx.archive,
            )?
        {
            self.out.meta = Some(meta);
            self.subtree = true;
            return Ok(Flow::Go);
        }
        if self.subtree {
            if name.parts.first().map(|p| p.as_bytes()) != Some(b"root") {
                self.out.stats.skipped += 1;
                return Ok(Flow::Go);
            }
            name.parts.remove(0);
        }
        // In an OCI layer: AUFS bookkeeping skipped, opaque markers and
        // whiteouts applied (or recorded) by the tree, not entries.
        if ctx.opts.whiteouts != Whiteouts::Off {
            let class = classify(&name.parts).map_err(|why| {
                ctx.refuse(&entry, ArchiveRefusal::Corrupt(why.to_string()))
            })?;
            match (class, &mut *making) {
                (Class::Entry, _) => {}
                (Class::Skip, _) => {
                    self.out.stats.skipped += 1;
                    return Ok(Flow::Go);
                }
                (_, Making::Record) => return Ok(Flow::Go),
                (class, Making::Memory(mm)) => {
                    mm.layer_change(ctx, &name, &entry, class)?;
                    return Ok(Flow::Go);
                }
                (class, Making::Tree(t)) => {
                    return t.layer_change(ctx, &name, &entry, class);
                }
            }
        }
        let meta = Meta::of(&m).map_err(|why| {
            ctx.refuse(&entry, ArchiveRefusal::Corrupt(why.to_string()))
        })?;
        let Some(leaf) = name.leaf().cloned() else {
            // The layer's own `root/` (or `./`): the root directory itself.
            match making {
                _ if m.kind != tar::Kind::Directory => {}
                Making::Tree(t) => {
                    if let Some(lay) = t.layered.as_mut() {
                        lay.note_root_entry();
                    }
                    self.out.dirs.push(&name.parts, meta);
                }
                Making::Memory(mm) => mm.root_entry(ctx, &entry, meta)?,
                Making::Record => {}
            }
            return Ok(Flow::Go);
        };
        match making {
            Making::Tree(t) => self.make(t, m, name, entry, meta, leaf),
            Making::Record => self.record(&m, &name, &entry).map(|()| Flow::Go),
            Making::Memory(mm) => {
                self.in_memory(mm, m, name, entry, meta, leaf)
            }
        }
    }

    /// A checked member made beneath the root by its kind's step.
    fn make(
        &mut self,
        t: &mut Tree<'_>,
        m: tar::Member,
        name: Name,
        entry: String,
        meta: Meta,
        leaf: CString,
    ) -> Result<Flow> {
        let ctx = self.ctx;
        // Whatever was recorded at this path (or beneath it, when it
        // replaces a directory) is not what is there now; a file records
        // its own once written. A directory over a directory keeps what
        // is in it; over anything else, nothing was beneath.
        if let Some(c) = &ctx.opts.contents {
            match m.kind {
                tar::Kind::Directory => c.forget_one(&joined(&name.parts)),
                _ => c.forget(&joined(&name.parts)),
            }
        }
        let Some(e) = t.place(ctx, m, name, entry, meta, leaf)? else {
            return Ok(Flow::Stop);
        };
        if let Some(l) = &ctx.opts.listener {
            l.entry(Path::new(&e.entry), &e.shown, listed_kind(e.m.kind));
        }
        match e.m.kind {
            tar::Kind::Directory => self.directory(t, e).map(|()| Flow::Go),
            tar::Kind::File => self.file(t, e),
            tar::Kind::Symlink => self.symlink(t, e).map(|()| Flow::Go),
            tar::Kind::HardLink => self.hard_link(t, e),
            tar::Kind::CharDevice
            | tar::Kind::BlockDevice
            | tar::Kind::Fifo => self.special(e).map(|()| Flow::Go),
            tar::Kind::Other(typ) => Err(unsupported(ctx, &e.entry, typ)),
        }
    }

    /// A checked member told to the listener and counted where [`make`]
    /// would have made it, with its kind's own checks; its body is
    /// skipped. What depends on the tree (what is already there, a
    /// symlink on the way, a hard link's target) is not looked at.
    ///
    /// [`make`]: Self::make
    fn record(
        &mut self,
        m: &tar::Member,
        name: &Name,
        entry: &str,
    ) -> Result<()> {
        let ctx = self.ctx;
        if let Some(l) = &ctx.opts.listener {
            l.entry(
                Path::new(entry),
                &ctx.shown(&name.parts),
                listed_kind(m.kind),
            );
        }
        let stats = &mut self.out.stats;
        match m.kind {
            tar::Kind::Directory => stats.dirs += 1,
            tar::Kind::File => {
                stats.files += 1;
                stats.bytes += m.size;
            }
            tar::Kind::Symlink => {
                symlink_target(ctx, m, entry)?;
                stats.symlinks += 1;
            }
            tar::Kind::HardLink => {
                link_target(ctx, m, entry, self.subtree)?;
                stats.hardlinks += 1;
            }
            tar::Kind::CharDevice
            | tar::Kind::BlockDevice
            | tar::Kind::Fifo => {
                special_type(ctx, m, entry)?;
                stats.specials += 1;
            }
            tar::Kind::Other(typ) => return Err(unsupported(ctx, entry, typ)),
        }
        Ok(())
    }

    /// A directory: made owner-writable (0700) unless there, its metadata
    /// applied at the end, after its contents.
    fn directory(&mut self, t: &mut Tree<'_>, e: Entry) -> Result<()> {
        match e.now {
            Existing::Dir => {}
            Existing::Symlink => {
                return Err(self
                    .ctx
                    .refuse(&e.entry, ArchiveRefusal::DirectoryOverSymlink));
            }
            Existing::Other | Existing::Nothing => {
                e.unlink_existing()?;
                at::mkdir(e.dfd(), &e.leaf, 0o700)
                    .map_err(|err| Error::io(Op::Mkdir, &e.shown, err))?;
                t.made.dir(e.rel);
                self.out.stats.dirs += 1;
            }
        }
        self.out.dirs.push(&e.name.parts, e.meta);
        Ok(())
    }

    /// A regular file: its body copied by a worker from the archive file's
    /// ranges, or held in memory (small ones, within the byte budget), or
    /// streamed here when neither can be.
    fn file(&mut self, t: &mut Tree<'_>, e: Entry) -> Result<Flow> {
        let ctx = self.ctx;
        e.not_over_dir(ctx)?;
        let replace = e.now != Existing::Nothing;
        let body = if ctx.body_source.is_some() {
            Some(Body::At {
                segments: e.m.segments(),
                size: e.m.size,
            })
        } else if t.pool.is_some() && e.m.sparse.is_none() {
            if e.m.size > SMALL {
                return self.chunked(t, e, replace);
            }
            // Held until the worker has written it; the size is at most
            // SMALL, whatever the archive says.
            let len = e.m.size as usize;
            let held = Spare::class(len) as u64;
            ctx.budget.acquire(held, BUDGET);
            let mut data = ctx.spare.take(len);
            data.resize(len, 0);
            if let Err(err) = self.rd.body().read_exact(&mut data) {
                ctx.budget.release(held);
                return Err(self.tar_err(TarError::from_io(err)));
            }
            Some(Body::Bytes(data))
        } else {
            None
        };
        let Some(body) = body else {
            // Streamed by the reader: one body at a time.
            if !t.barrier(ctx) {
                return Ok(Flow::Stop);
            }
            let path =
                ctx.opts.contents.as_ref().map(|_| joined(&e.name.parts));
            let target = Target {
                dir: e.dfd(),
                leaf: &e.leaf,
                replace,
                shown: &e.shown,
                rel: path,
            };
            stream_file(ctx, &mut self.rd, &e.m, &target, &e.meta)?;
            return Ok(Flow::Go);
        };
        let rel = e.rel;
        let path = ctx.opts.contents.as_ref().map(|_| joined(&e.name.parts));
        match t.queue(ctx, rel, e.job(replace, body, path)) {
            true => Ok(Flow::Go),
            false => Ok(Flow::Stop),
        }
    }

    /// A large body: its job goes to a worker first, then the body after
    /// it in chunks as the reader reads them, so the worker writes one
    /// chunk while the reader reads the next.
    fn chunked(
        &mut self,
        t: &mut Tree<'_>,
        e: Entry,
        replace: bool,
    ) -> Result<Flow> {
        let ctx = self.ctx;
        let (tx, rx) = crossbeam_channel::bounded(CHUNKS_AHEAD);
        let size = e.m.size;
        let rel = e.rel;
        let path = ctx.opts.contents.as_ref().map(|_| joined(&e.name.parts));
        let job = e.job(replace, Body::Chunks { rx, size }, path);
        // Sent at once, ahead of what follows.
        let sent = t.pool.as_mut().is_some_and(Batcher::flush)
            && t.queue(ctx, rel, job)
            && t.pool.as_mut().is_some_and(Batcher::flush);
        if !sent {
            return Ok(Flow::Stop);
        }
        self.feed(&tx, size)
    }

    /// A symlink, made under a temporary name and renamed over what is
    /// there, so the name never points nowhere.
    fn symlink(&mut self, t: &mut Tree<'_>, e: Entry) -> Result<()> {
        let ctx = self.ctx;
        e.not_over_dir(ctx)?;
        let target = symlink_target(ctx, &e.m, &e.entry)?;
        let tmp = if e.now == Existing::Nothing {
            e.leaf.clone()
        } else {
            ctx.temp_name()
        };
        at::symlink(&target, e.dfd(), &tmp)
            .map_err(|err| Error::io(Op::Symlink, &e.shown, err))?;
        ctx.finish_at(e.dfd(), &tmp, &e.meta, &e.shown, true)?;
        if tmp != e.leaf {
            at::rename(e.dfd(), &tmp, &e.leaf)
                .map_err(|err| Error::io(Op::Rename, &e.shown, err))?;
        }
        self.out.stats.symlinks += 1;
        t.queued.insert(e.rel);
        Ok(())
    }

    /// A hard link: its target must be a file or symlink this archive (or,
    /// in a layer, a lower one) made beneath the root; reached through
    /// the chain, never a path.
    fn hard_link(&mut self, t: &mut Tree<'_>, e: Entry) -> Result<Flow> {
        let ctx = self.ctx;
        e.not_over_dir(ctx)?;
        let outside = || ctx.refuse(&e.entry, ArchiveRefusal::HardLinkOutside);
        let (target, tleaf) = link_target(ctx, &e.m, &e.entry, self.subtree)?;
        // Its target may still be in a worker's hands: then every queued
        // file is waited for.
        if t.queued.contains(&t.rel(&target.parts)) && !t.barrier(ctx) {
            return Ok(Flow::Stop);
        }
        let found = match ctx.open_dir(
            &mut t.chain,
            target.parent(),
            &e.entry,
            false,
        ) {
            Ok(tdir) => {
                let there = existing(tdir.as_raw_fd(), &tleaf, &e.shown)?;
                Some((tdir, there))
            }
            Err(_) => None,
        };
        let recording = t.layered.as_ref().is_some_and(|l| !l.applying());
        let tdir = match found {
            Some((tdir, Existing::Other | Existing::Symlink)) => Some(tdir),
            None | Some((_, Existing::Nothing)) if recording => None,
            _ => return Err(outside()),
        };
        // The chain may have moved to the target's directory.
        let dir =
            ctx.open_dir(&mut t.chain, e.name.parent(), &e.entry, true)?;
        let dfd = dir.as_raw_fd();
        if e.now != Existing::Nothing {
            at::unlink(dfd, &e.leaf, false)
                .map_err(|err| Error::io(Op::Remove, &e.shown, err))?;
        }
        match (tdir, t.layered.as_mut()) {
            (Some(tdir), _) => at::link(tdir.as_raw_fd(), &tleaf, dfd, &e.leaf)
                .map_err(|err| Error::io(Op::Link, &e.shown, err))?,
            // A layer alone: the target is a lower layer's file, linked
            // when the layer is applied (beneath the root then, as every
            // write).
            (None, Some(lay)) => lay.defer_link(&e.name.parts, &target.parts),
            (None, None) => return Err(outside()),
        }
        self.out.stats.hardlinks += 1;
        Ok(Flow::Go)
    }

    /// A device node (only when allowed) or a FIFO, finished by name: a
    /// FIFO cannot be opened without blocking, a device should not be
    /// opened at all.
    fn special(&mut self, e: Entry) -> Result<()> {
        let ctx = self.ctx;
        let typ = special_type(ctx, &e.m, &e.entry)?;
        e.not_over_dir(ctx)?;
        e.unlink_existing()?;
        let rdev = crate::sys::posix::makedev(e.m.dev.0, e.m.dev.1);
        at::mknod(e.dfd(), &e.leaf, typ | 0o600, rdev)
            .map_err(|err| Error::io(Op::Mknod, &e.shown, err))?;
        ctx.finish_at(e.dfd(), &e.leaf, &e.meta, &e.shown, false)?;
        self.out.stats.specials += 1;
        Ok(())
    }

    /// After the last member (or a stop): every queued file written, a
    /// layer's changes settled, and, for an archive read to its end, the
    /// rest checked (zeros, a compressed stream's checksums and trailer).
    fn finish(
        mut self,
        making: Making<'_>,
        ended: bool,
        started: Instant,
    ) -> Result<ReadOutcome> {
        let ctx = self.ctx;
        if let Making::Memory(mm) = making {
            (*mm).finish(ctx, ended)?;
        } else if let Making::Tree(mut t) = making {
            if let Some(mut pool) = t.pool.take() {
                pool.flush();
            }
            ctx.pending.wait_empty();
            if let Some(lay) = t.layered.take()
                && ended
                && !ctx.stopped()
            {
                self.out.changes = lay.finish(ctx, &mut t.chain)?;
            }
        }
        if ended {
            let rest = self.rd.read_rest();
            ctx.reader_quirks(&mut self.rd);
            rest.map_err(|e| Error::tar(ctx.archive, e))?;
        }
        self.out.stats.elapsed = started.elapsed();
        Ok(self.out)
    }
}

/// A member's path in the root, `/`-separated.
fn joined(parts: &[CString]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            out.push(b'/');
        }
        out.extend_from_slice(p.as_bytes());
    }
    out
}
