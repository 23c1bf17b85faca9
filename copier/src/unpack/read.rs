//! The reader's loop: members decoded in order, each placed beneath the
//! root by the step for its kind. Only file bodies go to the pool; every
//! other entry is made here, in archive order, so that what a later
//! member says about an earlier one (a hard link to it, a whiteout of it,
//! a second entry for it) finds it done.

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
use super::ctx::{Ctx, ReadOutcome};
use super::job::{Body, Existing, FileJob, Meta, Target, existing};
use super::layered::{Class, Layered};
use super::members::{NO_MEMBERS, first_member, listed_kind, relative};
use super::write::stream_file;
use crate::beneath::{self, Chain};
use crate::error::{Error, Op, Result};
use crate::stats::NoticeKind;
use crate::sys::posix::at;

/// Paths remembered between two barriers, to keep a later entry for the
/// same path from overtaking an earlier one still queued.
const MAX_TRACKED: usize = 65_536;

/// Whether the loop goes on after a member.
enum Flow {
    Go,
    /// The pool is gone: a worker failed, and said why.
    Stop,
}

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
            dir: self.dir,
            leaf: self.leaf,
            replace,
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

/// The loop's state: the reader, the pool's side, and what is made.
struct Reading<'c, 'x, 'p, R> {
    ctx: &'c Ctx<'x>,
    rd: tar::Reader<R>,
    pool: Option<Batcher<'p>>,
    out: ReadOutcome,
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
    /// The archive is a zinstall layer: its tree is under `root/`.
    subtree: bool,
}

/// Paths tracked in [`Made`] at most: past them, every entry is looked
/// at again (16 MiB of hashes, whatever the archive's length).
const MAX_MADE: usize = 1 << 20;

#[derive(Default)]
struct Made {
    dirs: HashSet<u64>,
    placed: HashSet<u64>,
    /// Past [`MAX_MADE`]: nothing is tracked any more.
    full: bool,
}

impl Made {
    /// Whether `rel`, in the directory `parent`, is known to be free.
    fn free(&self, parent: u64, rel: u64) -> bool {
        !self.full && self.dirs.contains(&parent) && !self.placed.contains(&rel)
    }

    fn placed(&mut self, rel: u64) {
        if self.full {
            return;
        }
        if self.placed.len() + self.dirs.len() >= MAX_MADE {
            *self = Made {
                full: true,
                ..Made::default()
            };
            return;
        }
        self.placed.insert(rel);
    }

    fn dir(&mut self, rel: u64) {
        if !self.full {
            self.dirs.insert(rel);
        }
    }
}

/// Reads every member of `rd` and makes it beneath the root, file bodies
/// through `pool` when there is one.
pub(super) fn read_all<R: Read>(
    ctx: &Ctx<'_>,
    rd: tar::Reader<R>,
    pool: Option<Batcher<'_>>,
) -> Result<ReadOutcome> {
    let started = Instant::now();
    let mut r = Reading {
        ctx,
        rd,
        pool,
        out: ReadOutcome::default(),
        queued: HashSet::new(),
        queued_key: RandomState::new(),
        chain: Chain::new(Arc::clone(&ctx.root_fd)),
        made: Made::default(),
        layered: Layered::new(ctx.opts.whiteouts),
        subtree: false,
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
        if let Flow::Stop = r.member(m, std::mem::take(&mut first))? {
            break;
        }
    }
    if ended && first {
        if ctx.opts.expect.is_some() {
            return Err(ctx.refuse("", ArchiveRefusal::MissingMetadata));
        }
        ctx.notice(NoticeKind::ArchiveQuirk(NO_MEMBERS.into()), ctx.archive);
    }
    r.finish(ended, started)
}

impl<R: Read> Reading<'_, '_, '_, R> {
    fn tar_err(&self, e: TarError) -> Error {
        Error::tar(self.ctx.archive, e)
    }

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
    fn barrier(&mut self) -> bool {
        let sent = self.pool.as_mut().is_none_or(Batcher::flush);
        if sent {
            self.ctx.pending.wait_empty();
            self.queued.clear();
        }
        sent
    }

    /// One member: its name checked, a layer's bookkeeping and whiteouts
    /// applied, then made by its kind's step.
    fn member(&mut self, m: tar::Member, first: bool) -> Result<Flow> {
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
        if let Some(flow) = self.layer_bookkeeping(&name, &entry)? {
            return Ok(flow);
        }
        let meta = Meta::of(&m).map_err(|why| {
            ctx.refuse(&entry, ArchiveRefusal::Corrupt(why.to_string()))
        })?;
        let Some(leaf) = name.leaf().cloned() else {
            // The layer's own `root/` (or `./`): the root directory itself.
            if m.kind == tar::Kind::Directory {
                if let Some(lay) = self.layered.as_mut() {
                    lay.note_root_entry();
                }
                self.out.dirs.push(&name.parts, meta);
            }
            return Ok(Flow::Go);
        };
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
        let Some(e) = self.place(m, name, entry, meta, leaf)? else {
            return Ok(Flow::Stop);
        };
        if let Some(l) = &ctx.opts.listener {
            l.entry(Path::new(&e.entry), &e.shown, listed_kind(e.m.kind));
        }
        match e.m.kind {
            tar::Kind::Directory => self.directory(e).map(|()| Flow::Go),
            tar::Kind::File => self.file(e),
            tar::Kind::Symlink => self.symlink(e).map(|()| Flow::Go),
            tar::Kind::HardLink => self.hard_link(e),
            tar::Kind::CharDevice
            | tar::Kind::BlockDevice
            | tar::Kind::Fifo => self.special(e).map(|()| Flow::Go),
            tar::Kind::Other(t) => Err(ctx.refuse(
                &e.entry,
                ArchiveRefusal::UnsupportedEntryType(format!(
                    "typeflag {:?}",
                    t as char
                )),
            )),
        }
    }

    /// In an OCI layer: AUFS bookkeeping skipped, opaque markers and
    /// whiteouts applied (or recorded). `Some` when the member was one of
    /// those and is done.
    fn layer_bookkeeping(
        &mut self,
        name: &Name,
        entry: &str,
    ) -> Result<Option<Flow>> {
        let ctx = self.ctx;
        let Some(lay) = self.layered.as_ref() else {
            return Ok(None);
        };
        let class = super::layered::classify(&name.parts).map_err(|why| {
            ctx.refuse(entry, ArchiveRefusal::Corrupt(why.to_string()))
        })?;
        // What this layer queued stays until written: nothing is removed
        // from under a worker.
        let must_wait = match &class {
            Class::Entry => return Ok(None),
            Class::Skip => {
                self.out.stats.skipped += 1;
                return Ok(Some(Flow::Go));
            }
            Class::Opaque => lay.applying(),
            Class::Whiteout(leaf) => {
                let mut target = name.parent().to_vec();
                target.push(leaf.clone());
                lay.applying() && lay.made(&target)
            }
        };
        if must_wait && !self.barrier() {
            return Ok(Some(Flow::Stop));
        }
        let Some(lay) = self.layered.as_mut() else {
            return Ok(None);
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
        Ok(Some(Flow::Go))
    }

    /// Opens the member's directory beneath the root (made if missing)
    /// after any earlier entry for the same path is written, and looks at
    /// what is there; in a layer, a lower layer's directory a file
    /// replaces (or symlink a directory replaces) is removed first. `None`
    /// if the pool is gone.
    fn place(
        &mut self,
        m: tar::Member,
        name: Name,
        entry: String,
        meta: Meta,
        leaf: CString,
    ) -> Result<Option<Entry>> {
        let ctx = self.ctx;
        let rel = self.rel(&name.parts);
        // A second entry for a path still queued waits for the first (two
        // paths of one hash wait too: harmless).
        if (self.queued.contains(&rel) || self.queued.len() >= MAX_TRACKED)
            && !self.barrier()
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

    /// A directory: made owner-writable (0700) unless there, its metadata
    /// applied at the end, after its contents.
    fn directory(&mut self, e: Entry) -> Result<()> {
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
                self.made.dir(e.rel);
                self.out.stats.dirs += 1;
            }
        }
        self.out.dirs.push(&e.name.parts, e.meta);
        Ok(())
    }

    /// A regular file: its body copied by a worker from the archive file's
    /// ranges, or held in memory (small ones, within the byte budget), or
    /// streamed here when neither can be.
    fn file(&mut self, e: Entry) -> Result<Flow> {
        let ctx = self.ctx;
        e.not_over_dir(ctx)?;
        let replace = e.now != Existing::Nothing;
        let body = if ctx.body_source.is_some() {
            Some(Body::At {
                segments: e.m.segments(),
                size: e.m.size,
            })
        } else if self.pool.is_some() && e.m.sparse.is_none() {
            if e.m.size > SMALL {
                return self.chunked(e, replace);
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
            if !self.barrier() {
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
        match self.queue(rel, e.job(replace, body, path)) {
            true => Ok(Flow::Go),
            false => Ok(Flow::Stop),
        }
    }

    /// Hands `job` to the pool (or writes it here, serial); false when the
    /// pool is gone.
    fn queue(&mut self, rel: u64, job: FileJob) -> bool {
        let ctx = self.ctx;
        let held = job.body.held();
        ctx.pending.acquire(1, u64::MAX);
        let Some(pool) = &mut self.pool else {
            ctx.write_job(job);
            return true;
        };
        self.queued.insert(rel);
        if pool.push(job) {
            return true;
        }
        // Dropped unwritten: what it counted is given back.
        ctx.pending.release(1);
        ctx.budget.release(held);
        false
    }

    /// A large body: its job goes to a worker first, then the body after
    /// it in chunks as the reader reads them, so the worker writes one
    /// chunk while the reader reads the next.
    fn chunked(&mut self, e: Entry, replace: bool) -> Result<Flow> {
        let ctx = self.ctx;
        let (tx, rx) = crossbeam_channel::bounded(CHUNKS_AHEAD);
        let size = e.m.size;
        let rel = e.rel;
        let path = ctx.opts.contents.as_ref().map(|_| joined(&e.name.parts));
        let job = e.job(replace, Body::Chunks { rx, size }, path);
        // Sent at once, ahead of what follows.
        let sent = self.pool.as_mut().is_some_and(Batcher::flush)
            && self.queue(rel, job)
            && self.pool.as_mut().is_some_and(Batcher::flush);
        if !sent {
            return Ok(Flow::Stop);
        }
        let mut body = self.rd.body();
        let mut left = size;
        while left > 0 {
            if ctx.stopped() {
                return Ok(Flow::Stop);
            }
            let want = left.min(SMALL);
            let mut chunk = ctx.spare.take(want as usize);
            chunk.resize(want as usize, 0);
            if let Err(err) = body.read_exact(&mut chunk) {
                return Err(Error::tar(ctx.archive, TarError::from_io(err)));
            }
            left -= want;
            // Its worker stopped: it failed, and said why.
            if tx.send(chunk).is_err() {
                return Ok(Flow::Stop);
            }
        }
        Ok(Flow::Go)
    }

    /// A symlink, made under a temporary name and renamed over what is
    /// there, so the name never points nowhere.
    fn symlink(&mut self, e: Entry) -> Result<()> {
        let ctx = self.ctx;
        e.not_over_dir(ctx)?;
        let target = e.m.link.clone().unwrap_or_default();
        let target = CString::new(target).map_err(|_| {
            ctx.refuse(
                &e.entry,
                ArchiveRefusal::Corrupt("NUL in symlink target".into()),
            )
        })?;
        if target.as_bytes().is_empty() {
            return Err(ctx.refuse(
                &e.entry,
                ArchiveRefusal::Corrupt("symlink without target".into()),
            ));
        }
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
        self.queued.insert(e.rel);
        Ok(())
    }

    /// A hard link: its target must be a file or symlink this archive (or,
    /// in a layer, a lower one) made beneath the root; reached through
    /// the chain, never a path.
    fn hard_link(&mut self, e: Entry) -> Result<Flow> {
        let ctx = self.ctx;
        e.not_over_dir(ctx)?;
        let outside = || ctx.refuse(&e.entry, ArchiveRefusal::HardLinkOutside);
        let target_raw = e.m.link.clone().ok_or_else(outside)?;
        let target_raw =
            relative(&target_raw, "hard link targets", |k, p| ctx.notice(k, p));
        let mut target = names::check(target_raw).map_err(|_| outside())?;
        if self.subtree {
            if target.parts.first().map(|p| p.as_bytes()) != Some(b"root") {
                return Err(outside());
            }
            target.parts.remove(0);
        }
        let Some(tleaf) = target.leaf().cloned() else {
            return Err(outside());
        };
        // Its target may still be in a worker's hands: then every queued
        // file is waited for.
        if self.queued.contains(&self.rel(&target.parts)) && !self.barrier() {
            return Ok(Flow::Stop);
        }
        let found = match ctx.open_dir(
            &mut self.chain,
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
        let recording = self.layered.as_ref().is_some_and(|l| !l.applying());
        let tdir = match found {
            Some((tdir, Existing::Other | Existing::Symlink)) => Some(tdir),
            None | Some((_, Existing::Nothing)) if recording => None,
            _ => return Err(outside()),
        };
        // The chain may have moved to the target's directory.
        let dir =
            ctx.open_dir(&mut self.chain, e.name.parent(), &e.entry, true)?;
        let dfd = dir.as_raw_fd();
        if e.now != Existing::Nothing {
            at::unlink(dfd, &e.leaf, false)
                .map_err(|err| Error::io(Op::Remove, &e.shown, err))?;
        }
        match (tdir, self.layered.as_mut()) {
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
        let (typ, dev) = match e.m.kind {
            tar::Kind::CharDevice => (libc::S_IFCHR, true),
            tar::Kind::BlockDevice => (libc::S_IFBLK, true),
            _ => (libc::S_IFIFO, false),
        };
        if dev && !ctx.opts.allow_devices {
            return Err(ctx.refuse(&e.entry, ArchiveRefusal::DeviceNotAllowed));
        }
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
    fn finish(mut self, ended: bool, started: Instant) -> Result<ReadOutcome> {
        let ctx = self.ctx;
        if let Some(mut pool) = self.pool.take() {
            pool.flush();
        }
        ctx.pending.wait_empty();
        if let Some(lay) = self.layered.take()
            && ended
            && !ctx.stopped()
        {
            self.out.changes = lay.finish(ctx, &mut self.chain)?;
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
