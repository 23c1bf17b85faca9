//! A worker: takes batches off the queue and does each job's system calls.

// libc's `stat` field types differ between platforms: casts that are
// no-ops here are not everywhere.
#![allow(clippy::unnecessary_cast)]

use std::ffi::{CStr, CString, OsString};
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crossbeam_channel::Receiver;

use super::inodes::{Claim, Outcome, Placed, PlacedDir};
use super::job::{Job, JobKind};
use super::opening::{identity, open_error};
use super::placing::{self, Decision, Merging};
use super::shared::{Shared, ThreadResult, new_trace};
use super::writes::Writes;
use super::{dirs, meta};
use crate::descriptors;
use crate::error::{Error, Op, Refusal, Result};
use crate::probes;
use crate::stats::{NoticeKind, Stats, WorkerStats};
use crate::sys::{self, XattrTarget, posix, posix::Stat, posix::at};
use crate::trace::{ThreadState, ThreadTrace};

/// Where a new entry is written, in its directory.
enum Placement {
    /// Under its own name (nothing is there).
    Direct,
    /// Under this name beside it, then renamed over what is there
    /// (merging).
    Replace(CString),
    /// What is there already matches (merging): leave it.
    Unchanged,
}

/// How a file's data was moved.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Method {
    Clone,
    Kernel,
    Buffered,
}

pub(crate) struct Worker<'s, 'p> {
    shared: &'s Shared<'p>,
    /// COPY_BUFSIZE bytes, allocated once for the worker's life.
    buf: Vec<u8>,
    trace: ThreadTrace,
    stats: Stats,
    load: WorkerStats,
    /// The worker's number, for probes.
    index: u32,
    /// Progress not yet reported.
    unreported: (u64, u64),
    /// Whether the last entry placed was left as it was (merging).
    left: bool,
}

impl<'s, 'p> Worker<'s, 'p> {
    pub(crate) fn new(shared: &'s Shared<'p>, index: usize) -> Self {
        Worker {
            shared,
            buf: Vec::new(),
            trace: new_trace(shared, format!("worker-{index}")),
            stats: Stats::default(),
            load: WorkerStats::default(),
            index: index as u32,
            unreported: (0, 0),
            left: false,
        }
    }

    /// Takes batches until the queue is closed. Once the run has stopped,
    /// queued jobs are dropped undone.
    pub(crate) fn run(&mut self, rx: Receiver<Vec<Job>>) {
        loop {
            self.trace.enter(ThreadState::Waiting);
            let idx = self.index;
            probes::worker_idle(idx);
            let waited = Instant::now();
            let Ok(batch) = rx.recv() else { break };
            // Within the plan's worker limit, if it has one: the batch
            // waits for a turn.
            let turn = self
                .shared
                .plan
                .worker_limit
                .as_ref()
                .map(|l| l.turn(|| self.shared.stopped()));
            self.run_batch(batch, waited);
            drop(turn);
        }
    }

    /// Does one batch; `waited` is when the worker (or the batch, on a
    /// shared pool) started waiting.
    pub(crate) fn run_batch(&mut self, batch: Vec<Job>, waited: Instant) {
        let idx = self.index;
        let t0 = Instant::now();
        probes::worker_busy(|| {
            (idx, batch.len() as u64, waited.elapsed().as_nanos() as u64)
        });
        self.load.batches += 1;
        for job in batch {
            if self.shared.stopped() {
                break;
            }
            self.do_job(job);
        }
        self.load.busy += t0.elapsed();
        self.report_progress();
        self.trace.enter(ThreadState::Waiting);
    }

    pub(crate) fn finish(mut self) -> ThreadResult {
        self.report_progress();
        self.trace.enter(ThreadState::Waiting);
        (self.stats, self.load, self.trace.finish())
    }

    fn report_progress(&mut self) {
        let (n, b) = std::mem::take(&mut self.unreported);
        if n > 0
            && let Some(p) = &self.shared.plan.progress
        {
            p.advance(n, b);
        }
    }

    /// Does one job, records its error if any, and releases its directory.
    pub(crate) fn do_job(&mut self, mut job: Job) {
        job.name_paths();
        let before = self.stats.bytes;
        let left = (
            self.stats.unchanged,
            self.stats.skipped,
            self.stats.hardlinks,
        );
        let idx = self.index;
        probes::job_start(|| (idx, job.kind.name(), job.src.to_string_lossy()));
        let r = match &job.kind {
            JobKind::File => self.copy_file(&job),
            JobKind::Symlink => self.copy_symlink(&job),
            JobKind::Special => self.copy_special(&job),
            JobKind::Redirect(target) => self.redirect(&job, target),
        };
        let bytes = self.stats.bytes - before;
        probes::job_done(|| {
            (
                idx,
                job.kind.name(),
                job.src.to_string_lossy(),
                bytes,
                probes::errno(&r),
            )
        });
        match r {
            Err(e) => self.shared.entry_failed(e),
            Ok(()) => self.listed(&job, left),
        }
        self.load.jobs += 1;
        self.load.bytes += bytes;
        self.unreported.0 += 1;
        self.unreported.1 += bytes;
        if let Some(parent) = &job.parent {
            dirs::release(parent, || Some(job.fds()), self.shared);
        }
    }

    /// Tells the listener of the entry `job` wrote; `left` is the
    /// (unchanged, skipped, hard links) counts before it, which say
    /// whether it wrote anything and what.
    fn listed(&self, job: &Job, left: (u64, u64, u64)) {
        let Some(l) = &self.shared.plan.listener else {
            return;
        };
        if self.stats.unchanged != left.0 || self.stats.skipped != left.1 {
            return;
        }
        let kind = match &job.kind {
            JobKind::File if self.stats.hardlinks != left.2 => {
                crate::EntryKind::HardLink
            }
            JobKind::File => crate::EntryKind::File,
            JobKind::Symlink => crate::EntryKind::Symlink,
            JobKind::Special => crate::EntryKind::Special,
            JobKind::Redirect(_) => crate::EntryKind::Redirect,
        };
        l.entry(&job.src, &job.dst, kind);
    }

    /// True if the run goes on past a failed entry and has not stopped.
    fn goes_on(&self) -> bool {
        self.shared.keep_going() && !self.shared.stopped()
    }

    fn copy_file(&mut self, job: &Job) -> Result<()> {
        self.trace.enter(ThreadState::Reading);
        let (dir, name) = source(job);
        let src = self
            .shared
            .fds
            .retrying(|| sys::open_source_at(dir, name), descriptors::exhausted)
            .map_err(|e| open_error(&job.src, e))?;
        let md = src
            .metadata()
            .map_err(|e| Error::io(Op::Stat, &job.src, e))?;
        if !md.is_file() {
            return Err(Error::refused(&job.src, Refusal::ChangedType));
        }
        if md.nlink() > 1 {
            match self.claim(identity(&md), md.nlink(), job) {
                Claim::First(first) => {
                    let r = self.copy_file_body(job, &src, &md);
                    first.done(self.outcome(&r));
                    return r;
                }
                Claim::Later(first, anew) => {
                    return self.hard_link(&first, anew, job);
                }
                // Its first name failed and the run goes on: this name
                // is copied on its own rather than left out.
                Claim::Abandoned if self.goes_on() => {}
                Claim::Abandoned => return Ok(()),
            }
        }
        self.copy_file_body(job, &src, &md)
    }

    fn copy_file_body(
        &mut self,
        job: &Job,
        src: &File,
        md: &Metadata,
    ) -> Result<()> {
        let mtime = (md.mtime(), md.mtime_nsec());
        let place =
            self.place(job, |st| placing::same_file(st, md.len(), mtime))?;
        let name = match &place {
            Placement::Unchanged => {
                self.stats.unchanged += 1;
                return Ok(());
            }
            Placement::Direct => &job.leaf,
            Placement::Replace(tmp) => tmp,
        };
        let Some(dir) = self.shared.writes.dir_fd(&job.dir) else {
            // Recorded: the file as the copy would write it.
            self.stats.files += 1;
            self.stats.bytes += md.len();
            return Ok(());
        };
        self.trace.enter(ThreadState::Writing);
        let dst = self
            .shared
            .fds
            .retrying(|| at::create_file(dir, name), descriptors::exhausted)
            .map_err(|e| Error::io(Op::Create, &job.dst, e))?;
        let r = self.copy_data(src, &dst, md, &job.src, &job.dst).and_then(
            |(m, n)| {
                check_unchanged(src, md, &job.src)?;
                self.trace.enter(ThreadState::Metadata);
                meta::apply_file(
                    self.shared,
                    src,
                    &dst,
                    md,
                    &job.src,
                    &job.dst,
                )?;
                Ok((m, n))
            },
        );
        let (method, copied) = match r {
            Ok(m) => m,
            Err(e) => {
                // A partial file must not look like a copy.
                drop(dst);
                let _already_failing = at::unlink(dir, name, false);
                return Err(e);
            }
        };
        drop(dst);
        finish_placement(job, dir, &place)?;
        if method != Method::Clone {
            self.shared.wrote(copied);
        }
        self.stats.files += 1;
        self.stats.bytes += copied;
        match method {
            Method::Clone => self.stats.reflinked += 1,
            Method::Kernel => self.stats.kernel_copied += 1,
            Method::Buffered => self.stats.buffered += 1,
        }
        Ok(())
    }

    /// Moves the data: a reflink if the filesystem can, else the data
    /// ranges (all of it, or only the non-hole parts of a sparse file) in
    /// the kernel or through the buffer. Returns how, and the bytes the
    /// copy holds.
    ///
    /// A file with no blocks is either empty, all hole, or a procfs/sysfs
    /// file whose `st_size` (0 or 4096) says nothing of its content: the
    /// first two are known by `SEEK_DATA`, the last is read to its end.
    fn copy_data(
        &mut self,
        src: &File,
        dst: &File,
        md: &Metadata,
        src_path: &Path,
        dst_path: &Path,
    ) -> Result<(Method, u64)> {
        let len = md.len();
        if md.blocks() == 0 {
            let all_hole =
                len > 0 && matches!(posix::seek(src, 0, true), Ok(None));
            if all_hole {
                dst.set_len(len)
                    .map_err(|e| Error::io(Op::Truncate, dst_path, e))?;
                return Ok((Method::Buffered, len));
            }
            let n = self.copy_to_end(src, dst, src_path, dst_path)?;
            return Ok((Method::Buffered, n));
        }
        let sh = self.shared;
        if !sh.no_clone.load(Ordering::Relaxed) {
            match sys::clone_file(src, dst) {
                Ok(true) => return Ok((Method::Clone, len)),
                Ok(false) => sh.no_clone.store(true, Ordering::Relaxed),
                Err(e) => {
                    return Err(Error::io2(Op::Clone, src_path, dst_path, e));
                }
            }
        }
        // Fewer allocated blocks than the size needs: there are holes.
        let sparse = md.blocks().saturating_mul(512) < len;
        let mut kernel = false;
        if sparse {
            let mut off = 0;
            while off < len {
                let Some(start) = posix::seek(src, off, true)
                    .map_err(|e| Error::io(Op::Seek, src_path, e))?
                else {
                    break;
                };
                let end = posix::seek(src, start, false)
                    .map_err(|e| Error::io(Op::Seek, src_path, e))?
                    .unwrap_or(len)
                    .min(len);
                let (k, reached) =
                    self.copy_range(src, dst, start, end, src_path, dst_path)?;
                kernel |= k;
                if reached < end {
                    return Err(Error::refused(
                        src_path,
                        Refusal::ChangedDuringCopy,
                    ));
                }
                off = end;
            }
            // Trailing hole: give the copy its full length.
            dst.set_len(len)
                .map_err(|e| Error::io(Op::Truncate, dst_path, e))?;
        } else {
            let (k, reached) =
                self.copy_range(src, dst, 0, len, src_path, dst_path)?;
            if reached < len {
                // Shorter than its size said: it shrank under us.
                return Err(Error::refused(
                    src_path,
                    Refusal::ChangedDuringCopy,
                ));
            }
            kernel = k;
        }
        Ok((
            if kernel {
                Method::Kernel
            } else {
                Method::Buffered
            },
            len,
        ))
    }

    /// Reads `src` to its end through the buffer, whatever its size says.
    fn copy_to_end(
        &mut self,
        src: &File,
        dst: &File,
        src_path: &Path,
        dst_path: &Path,
    ) -> Result<u64> {
        self.buffered(src, dst, 0, u64::MAX, src_path, dst_path)
    }

    /// Copies `[start, end)` to the same offsets. Returns whether the
    /// kernel did it, and where the copy stopped: before `end` if the
    /// source shrank under us.
    fn copy_range(
        &mut self,
        src: &File,
        dst: &File,
        start: u64,
        end: u64,
        src_path: &Path,
        dst_path: &Path,
    ) -> Result<(bool, u64)> {
        let sh = self.shared;
        let mut off = start;
        if !sh.no_copy_range.load(Ordering::Relaxed) {
            while off < end {
                match sys::copy_range(src, dst, off, off, end - off) {
                    Ok(Some(0)) => return Ok((true, off)),
                    Ok(Some(n)) => off += n,
                    Ok(None) => {
                        sh.no_copy_range.store(true, Ordering::Relaxed);
                        break;
                    }
                    Err(e) => {
                        return Err(Error::io2(
                            Op::CopyFileRange,
                            src_path,
                            dst_path,
                            e,
                        ));
                    }
                }
            }
            if off >= end {
                return Ok((true, off));
            }
        }
        let reached = self.buffered(src, dst, off, end, src_path, dst_path)?;
        Ok((false, reached))
    }

    /// Copies `[off, end)` through the worker's buffer, stopping early at
    /// the end of the source; returns where it stopped.
    fn buffered(
        &mut self,
        src: &File,
        dst: &File,
        mut off: u64,
        end: u64,
        src_path: &Path,
        dst_path: &Path,
    ) -> Result<u64> {
        if self.buf.is_empty() {
            self.buf = vec![0; self.shared.plan.tunables.copy_bufsize];
        }
        while off < end {
            self.trace.enter(ThreadState::Reading);
            let want = (end - off).min(self.buf.len() as u64) as usize;
            let n = match src.read_at(&mut self.buf[..want], off) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io(Op::Read, src_path, e)),
            };
            self.trace.enter(ThreadState::Writing);
            dst.write_all_at(&self.buf[..n], off)
                .map_err(|e| Error::io(Op::Write, dst_path, e))?;
            off += n as u64;
        }
        Ok(off)
    }

    fn copy_symlink(&mut self, job: &Job) -> Result<()> {
        self.trace.enter(ThreadState::Linking);
        // lstat before readlink: reading a symlink updates its access
        // time, and the copy must get the time from before.
        let (dir, name) = source(job);
        let md = at::stat(dir, name)
            .map_err(|e| Error::io(Op::Stat, &job.src, e))?;
        if !md.is_symlink() {
            return Err(Error::refused(&job.src, Refusal::ChangedType));
        }
        let target = at::readlink(dir, name).map_err(|e| {
            if e.raw_os_error() == Some(libc::EINVAL) {
                Error::refused(&job.src, Refusal::ChangedType)
            } else {
                Error::io(Op::Readlink, &job.src, e)
            }
        })?;
        let target = PathBuf::from(OsString::from_vec(target));
        let first = if md.nlink > 1 {
            match self.claim(md.identity(), md.nlink, job) {
                Claim::First(f) => Some(f),
                Claim::Later(first, anew) => {
                    return self.hard_link(&first, anew, job);
                }
                Claim::Abandoned if self.goes_on() => None,
                Claim::Abandoned => return Ok(()),
            }
        } else {
            None
        };
        let r = self.make_symlink(job, &target, Some(&md));
        if r.is_ok() {
            self.stats.symlinks += 1;
        }
        if let Some(f) = first {
            f.done(self.outcome(&r));
        }
        r
    }

    /// A symlink named `job.leaf` pointing at `target`; with `md`, the
    /// source symlink's owner, xattrs and times are applied.
    fn make_symlink(
        &mut self,
        job: &Job,
        target: &Path,
        md: Option<&Stat>,
    ) -> Result<()> {
        let ctarget = posix::cstr(target)
            .map_err(|e| Error::io2(Op::Symlink, &job.dst, target, e))?;
        let place = self.place(job, |st| {
            let read = || job.dir.readlink(&job.leaf);
            placing::same_symlink(st, read, ctarget.as_bytes())
        })?;
        let name = match &place {
            Placement::Unchanged => return Ok(()),
            Placement::Direct => &job.leaf,
            Placement::Replace(tmp) => tmp,
        };
        // Recorded: counted by the caller.
        let Some(dir) = self.shared.writes.dir_fd(&job.dir) else {
            return Ok(());
        };
        at::symlink(&ctarget, dir, name)
            .map_err(|e| Error::io2(Op::Symlink, &job.dst, target, e))?;
        if let Some(md) = md {
            self.trace.enter(ThreadState::Metadata);
            self.apply_at(job, md, dir, name)?;
        }
        finish_placement(job, dir, &place)
    }

    /// The source's owner, xattrs, mode and times on the entry `name`
    /// made for `job` in its directory, open as `dir`.
    fn apply_at(
        &self,
        job: &Job,
        md: &Stat,
        dir: RawFd,
        name: &CStr,
    ) -> Result<()> {
        let (sdir, sname) = source(job);
        let src = XattrTarget::At(sdir, sname);
        meta::apply_at(self.shared, md, &src, &job.src, dir, name, &job.dst)
    }

    fn redirect(&mut self, job: &Job, target: &Path) -> Result<()> {
        self.trace.enter(ThreadState::Linking);
        self.make_symlink(job, target, None)?;
        self.stats.redirects += 1;
        Ok(())
    }

    fn copy_special(&mut self, job: &Job) -> Result<()> {
        self.trace.enter(ThreadState::Linking);
        let (dir, name) = source(job);
        let md = at::stat(dir, name)
            .map_err(|e| Error::io(Op::Stat, &job.src, e))?;
        let special =
            [libc::S_IFIFO, libc::S_IFSOCK, libc::S_IFCHR, libc::S_IFBLK];
        if !special.iter().any(|&k| k as u32 == md.kind()) {
            return Err(Error::refused(&job.src, Refusal::ChangedType));
        }
        let first = if md.nlink > 1 {
            match self.claim(md.identity(), md.nlink, job) {
                Claim::First(f) => Some(f),
                Claim::Later(first, anew) => {
                    return self.hard_link(&first, anew, job);
                }
                Claim::Abandoned if self.goes_on() => None,
                Claim::Abandoned => return Ok(()),
            }
        } else {
            None
        };
        let r = self.make_special(job, &md);
        if let Some(f) = first {
            f.done(self.outcome(&r));
        }
        r
    }

    fn make_special(&mut self, job: &Job, md: &Stat) -> Result<()> {
        // Everything above the permission bits is the file type.
        let type_bits = md.mode & !0o7777;
        let place = self
            .place(job, |st| placing::same_special(st, type_bits, md.rdev))?;
        let name = match &place {
            Placement::Unchanged => {
                self.stats.unchanged += 1;
                return Ok(());
            }
            Placement::Direct => &job.leaf,
            Placement::Replace(tmp) => tmp,
        };
        let Some(dir) = self.shared.writes.dir_fd(&job.dir) else {
            // Recorded: whether mknod is permitted is not known.
            self.stats.specials += 1;
            return Ok(());
        };
        if let Err(e) = at::mknod(dir, name, type_bits | 0o600, md.rdev) {
            if e.raw_os_error() == Some(libc::EPERM) {
                if self.shared.plan.skip_special {
                    self.shared.notice(NoticeKind::SpecialSkipped, &job.src);
                    self.stats.skipped += 1;
                    return Ok(());
                }
                return Err(Error::refused(&job.src, Refusal::Special));
            }
            return Err(Error::io(Op::Mknod, &job.dst, e));
        }
        self.trace.enter(ThreadState::Metadata);
        self.apply_at(job, md, dir, name)?;
        finish_placement(job, dir, &place)?;
        self.stats.specials += 1;
        Ok(())
    }

    /// How the copy of a first name ended, from its result.
    fn outcome(&self, r: &Result<()>) -> Outcome {
        match r {
            Err(_) => Outcome::Failed,
            Ok(()) if self.left => Outcome::Left,
            Ok(()) => Outcome::Made,
        }
    }

    /// A later name of an inode already copied to `first` (`anew`: made,
    /// not left as it was).
    fn hard_link(
        &mut self,
        first: &Placed,
        anew: bool,
        job: &Job,
    ) -> Result<()> {
        self.trace.enter(ThreadState::Linking);
        let first_dir = match &first.dir {
            PlacedDir::Open(d) => Arc::clone(d),
            PlacedDir::Walked(d, node) => match d.upgrade() {
                Some(d) => d,
                None => node.open_fds()?.dst,
            },
        };
        let first_id = match (self.shared.writes, anew) {
            // Recorded, a first name made anew is not there: nothing
            // there is a link to it.
            (Writes::Record, true) => None,
            _ => first_dir
                .lstat(&first.leaf)
                .ok()
                .flatten()
                .map(|st| (st.st_dev as u64, st.st_ino as u64)),
        };
        let place = self.place(job, |st| {
            Some((st.st_dev as u64, st.st_ino as u64)) == first_id
        })?;
        let name = match &place {
            Placement::Unchanged => {
                self.stats.unchanged += 1;
                return Ok(());
            }
            Placement::Direct => &job.leaf,
            Placement::Replace(tmp) => tmp,
        };
        let writes = self.shared.writes;
        let (Some(from), Some(dir)) =
            (writes.dir_fd(&first_dir), writes.dir_fd(&job.dir))
        else {
            // Recorded.
            self.stats.hardlinks += 1;
            return Ok(());
        };
        at::link(from, &first.leaf, dir, name)
            .map_err(|e| Error::io2(Op::Link, &first.shown, &job.dst, e))?;
        finish_placement(job, dir, &place)?;
        self.stats.hardlinks += 1;
        Ok(())
    }

    fn claim(&self, id: (u64, u64), nlink: u64, job: &Job) -> Claim {
        let sh = self.shared;
        let dir = match &job.parent {
            Some(node) => {
                PlacedDir::Walked(Arc::downgrade(&job.dir), Arc::clone(node))
            }
            None => PlacedDir::Open(Arc::clone(&job.dir)),
        };
        let placed = Placed {
            dir,
            leaf: job.leaf.clone(),
            shown: job.dst.clone(),
        };
        sh.inodes.claim(id, nlink, &placed, || sh.stopped())
    }

    /// Places a new entry as [`placing::decide`] says, from what is there
    /// (looked at, never followed; `same` says whether it is like the
    /// entry): a directory a layer replaces is removed here, and a
    /// replacement gets its temporary name.
    fn place(
        &mut self,
        job: &Job,
        same: impl FnOnce(&libc::stat) -> bool,
    ) -> Result<Placement> {
        self.left = false;
        let look = || job.dir.lstat(&job.leaf);
        match placing::decide(
            Merging::of(self.shared.plan),
            &job.dst,
            look,
            same,
        )? {
            Decision::Direct => Ok(Placement::Direct),
            Decision::RemoveDir => {
                if let Some(dir) = self.shared.writes.dir_fd(&job.dir) {
                    crate::beneath::remove_at(dir, &job.leaf, &job.dst)?;
                }
                Ok(Placement::Direct)
            }
            Decision::Unchanged => {
                self.left = true;
                Ok(Placement::Unchanged)
            }
            Decision::Replace => {
                Ok(Placement::Replace(self.shared.temp_name()))
            }
        }
    }
}

/// Renames a replacement over its destination, within its directory
/// (open as `dir`).
fn finish_placement(job: &Job, dir: RawFd, place: &Placement) -> Result<()> {
    if let Placement::Replace(tmp) = place
        && let Err(e) = at::rename(dir, tmp, &job.leaf)
    {
        let _already_failing = at::unlink(dir, tmp, false);
        return Err(Error::io(Op::Rename, &job.dst, e));
    }
    Ok(())
}

/// Refuses a copy whose source changed while it was read: its size or
/// modification/change time now differ from what was copied.
fn check_unchanged(src: &File, before: &Metadata, path: &Path) -> Result<()> {
    let now = src.metadata().map_err(|e| Error::io(Op::Stat, path, e))?;
    let key = |m: &Metadata| {
        (
            m.len(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
        )
    };
    if key(&now) != key(before) {
        return Err(Error::refused(path, Refusal::ChangedDuringCopy));
    }
    Ok(())
}

/// Where a job's source is: its directory and its name there.
fn source(job: &Job) -> (RawFd, &CStr) {
    let name = job.src_leaf.as_deref().unwrap_or(&job.leaf);
    (job.src_dir.as_raw_fd(), name)
}

/// A name as a C string, for `*at` calls.
pub(crate) fn leaf_name(name: &std::ffi::OsStr) -> Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| {
        Error::io(
            Op::Create,
            Path::new(name),
            io::Error::from(io::ErrorKind::InvalidInput),
        )
    })
}
