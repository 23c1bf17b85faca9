//! A worker: takes batches off the queue and does each job's system calls.

use std::fs::{self, File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{
    FileExt, FileTypeExt, MetadataExt, OpenOptionsExt, symlink,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use crossbeam_channel::Receiver;

use super::inodes::Claim;
use super::{
    Job, JobKind, Shared, ThreadResult, dirs, identity, meta, new_trace,
    open_error,
};
use crate::error::{Error, Op, Refusal, Result};
use crate::probes;
use crate::stats::{NoticeKind, Stats, WorkerStats};
use crate::sys::{self, posix};
use crate::trace::{ThreadState, ThreadTrace};

/// Where a new entry is written.
enum Placement {
    /// At its destination path (nothing is there).
    Direct,
    /// Beside it, then renamed over what is there (merging).
    Replace(PathBuf),
    /// What is there already matches (merging): leave it.
    Unchanged,
}

/// How a file's data was moved.
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
        }
    }

    /// Takes batches until the queue is closed. Once the run has stopped,
    /// queued jobs are dropped undone.
    pub(crate) fn run(&mut self, rx: Receiver<Vec<Job>>) {
        loop {
            self.trace.enter(ThreadState::Waiting);
            let idx = self.index;
            probes::zinstall::worker__idle!(|| idx);
            let waited = Instant::now();
            let Ok(batch) = rx.recv() else { break };
            let t0 = Instant::now();
            probes::zinstall::worker__busy!(|| (
                idx,
                batch.len() as u64,
                waited.elapsed().as_nanos() as u64
            ));
            self.load.batches += 1;
            for job in batch {
                if self.shared.stopped() {
                    break;
                }
                self.do_job(job);
            }
            self.load.busy += t0.elapsed();
            self.report_progress();
        }
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
    pub(crate) fn do_job(&mut self, job: Job) {
        let before = self.stats.bytes;
        let idx = self.index;
        probes::zinstall::job__start!(|| (
            idx,
            job.kind.name(),
            job.src.to_string_lossy()
        ));
        let r = match &job.kind {
            JobKind::File => self.copy_file(&job),
            JobKind::Symlink => self.copy_symlink(&job),
            JobKind::Special => self.copy_special(&job),
            JobKind::Redirect(target) => self.redirect(&job, target),
        };
        let bytes = self.stats.bytes - before;
        probes::zinstall::job__done!(|| (
            idx,
            job.kind.name(),
            job.src.to_string_lossy(),
            bytes,
            probes::errno(&r)
        ));
        if let Err(e) = r {
            self.shared.fail(e);
        }
        self.load.jobs += 1;
        self.load.bytes += bytes;
        self.unreported.0 += 1;
        self.unreported.1 += bytes;
        if let Some(parent) = &job.parent {
            dirs::release(parent, self.shared);
        }
    }

    fn copy_file(&mut self, job: &Job) -> Result<()> {
        self.trace.enter(ThreadState::Reading);
        let src =
            sys::open_source(&job.src).map_err(|e| open_error(&job.src, e))?;
        let md = src
            .metadata()
            .map_err(|e| Error::io(Op::Stat, &job.src, e))?;
        if !md.is_file() {
            return Err(Error::refused(&job.src, Refusal::ChangedType));
        }
        if md.nlink() > 1 {
            match self.claim(&md, &job.dst) {
                Claim::First(first) => {
                    let r = self.copy_file_body(job, &src, &md);
                    first.done(r.is_ok());
                    return r;
                }
                Claim::Later(first) => return self.hard_link(&first, job),
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
        let place = self.place(&job.dst, |m| {
            m.is_file()
                && m.len() == md.len()
                && (m.mtime(), m.mtime_nsec()) == (md.mtime(), md.mtime_nsec())
        })?;
        let path = match &place {
            Placement::Unchanged => {
                self.stats.unchanged += 1;
                return Ok(());
            }
            Placement::Direct => &job.dst,
            Placement::Replace(tmp) => tmp,
        };
        self.trace.enter(ThreadState::Writing);
        let dst = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| Error::io(Op::Create, path, e))?;
        let r = self.copy_data(src, &dst, md, &job.src, path).and_then(|m| {
            self.trace.enter(ThreadState::Metadata);
            meta::apply_file(self.shared, src, &dst, md, &job.src, path)?;
            Ok(m)
        });
        let method = match r {
            Ok(m) => m,
            Err(e) => {
                // A partial file must not look like a copy.
                drop(dst);
                let _already_failing = fs::remove_file(path);
                return Err(e);
            }
        };
        drop(dst);
        finish_placement(&place, &job.dst)?;
        self.stats.files += 1;
        self.stats.bytes += md.len();
        match method {
            Method::Clone => self.stats.reflinked += 1,
            Method::Kernel => self.stats.kernel_copied += 1,
            Method::Buffered => self.stats.buffered += 1,
        }
        Ok(())
    }

    /// Moves the data: a reflink if the filesystem can, else the data
    /// ranges (all of it, or only the non-hole parts of a sparse file) in
    /// the kernel or through the buffer.
    fn copy_data(
        &mut self,
        src: &File,
        dst: &File,
        md: &Metadata,
        src_path: &Path,
        dst_path: &Path,
    ) -> Result<Method> {
        let len = md.len();
        if len == 0 {
            return Ok(Method::Buffered);
        }
        let sh = self.shared;
        if !sh.no_clone.load(Ordering::Relaxed) {
            match sys::clone_file(src, dst) {
                Ok(true) => return Ok(Method::Clone),
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
                kernel |=
                    self.copy_range(src, dst, start, end, src_path, dst_path)?;
                off = end;
            }
            // Trailing hole: give the copy its full length.
            dst.set_len(len)
                .map_err(|e| Error::io(Op::Truncate, dst_path, e))?;
        } else {
            kernel = self.copy_range(src, dst, 0, len, src_path, dst_path)?;
        }
        Ok(if kernel {
            Method::Kernel
        } else {
            Method::Buffered
        })
    }

    /// Copies `[start, end)` to the same offsets; true if the kernel did
    /// it. Stops early if the source shrank under us.
    fn copy_range(
        &mut self,
        src: &File,
        dst: &File,
        start: u64,
        end: u64,
        src_path: &Path,
        dst_path: &Path,
    ) -> Result<bool> {
        let sh = self.shared;
        let mut off = start;
        if !sh.no_copy_range.load(Ordering::Relaxed) {
            while off < end {
                match sys::copy_range(src, dst, off, off, end - off) {
                    Ok(Some(0)) => return Ok(true),
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
                return Ok(true);
            }
        }
        if self.buf.is_empty() {
            self.buf = vec![0; sh.plan.tunables.copy_bufsize];
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
        Ok(false)
    }

    fn copy_symlink(&mut self, job: &Job) -> Result<()> {
        self.trace.enter(ThreadState::Linking);
        // lstat before readlink: reading a symlink updates its access
        // time, and the copy must get the time from before.
        let md = fs::symlink_metadata(&job.src)
            .map_err(|e| Error::io(Op::Stat, &job.src, e))?;
        if !md.file_type().is_symlink() {
            return Err(Error::refused(&job.src, Refusal::ChangedType));
        }
        let target = fs::read_link(&job.src).map_err(|e| {
            if e.raw_os_error() == Some(libc::EINVAL) {
                Error::refused(&job.src, Refusal::ChangedType)
            } else {
                Error::io(Op::Readlink, &job.src, e)
            }
        })?;
        let first = if md.nlink() > 1 {
            match self.claim(&md, &job.dst) {
                Claim::First(f) => Some(f),
                Claim::Later(first) => return self.hard_link(&first, job),
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
            f.done(r.is_ok());
        }
        r
    }

    /// A symlink at `job.dst` pointing at `target`; with `md`, the source
    /// symlink's owner, xattrs and times are applied.
    fn make_symlink(
        &mut self,
        job: &Job,
        target: &Path,
        md: Option<&Metadata>,
    ) -> Result<()> {
        let place = self.place(&job.dst, |m| {
            m.file_type().is_symlink()
                && fs::read_link(&job.dst).is_ok_and(|t| t == target)
        })?;
        let path = match &place {
            Placement::Unchanged => return Ok(()),
            Placement::Direct => &job.dst,
            Placement::Replace(tmp) => tmp,
        };
        symlink(target, path)
            .map_err(|e| Error::io2(Op::Symlink, path, target, e))?;
        if let Some(md) = md {
            self.trace.enter(ThreadState::Metadata);
            meta::apply_path(self.shared, md, &job.src, path)?;
        }
        finish_placement(&place, &job.dst)
    }

    fn redirect(&mut self, job: &Job, target: &Path) -> Result<()> {
        self.trace.enter(ThreadState::Linking);
        self.make_symlink(job, target, None)?;
        self.stats.redirects += 1;
        Ok(())
    }

    fn copy_special(&mut self, job: &Job) -> Result<()> {
        self.trace.enter(ThreadState::Linking);
        let md = fs::symlink_metadata(&job.src)
            .map_err(|e| Error::io(Op::Stat, &job.src, e))?;
        let ft = md.file_type();
        if !(ft.is_fifo()
            || ft.is_socket()
            || ft.is_char_device()
            || ft.is_block_device())
        {
            return Err(Error::refused(&job.src, Refusal::ChangedType));
        }
        let first = if md.nlink() > 1 {
            match self.claim(&md, &job.dst) {
                Claim::First(f) => Some(f),
                Claim::Later(first) => return self.hard_link(&first, job),
                Claim::Abandoned => return Ok(()),
            }
        } else {
            None
        };
        let r = self.make_special(job, &md);
        if let Some(f) = first {
            f.done(r.is_ok());
        }
        r
    }

    fn make_special(&mut self, job: &Job, md: &Metadata) -> Result<()> {
        let place = self.place(&job.dst, |m| {
            m.file_type() == md.file_type() && m.rdev() == md.rdev()
        })?;
        let path = match &place {
            Placement::Unchanged => {
                self.stats.unchanged += 1;
                return Ok(());
            }
            Placement::Direct => &job.dst,
            Placement::Replace(tmp) => tmp,
        };
        // Everything above the permission bits is the file type.
        let type_bits = md.mode() & !0o7777;
        if let Err(e) = posix::mknod(path, type_bits | 0o600, md.rdev()) {
            if e.raw_os_error() == Some(libc::EPERM) {
                if self.shared.plan.skip_special {
                    self.shared.notice(NoticeKind::SpecialSkipped, &job.src);
                    self.stats.skipped += 1;
                    return Ok(());
                }
                return Err(Error::refused(&job.src, Refusal::Special));
            }
            return Err(Error::io(Op::Mknod, path, e));
        }
        self.trace.enter(ThreadState::Metadata);
        meta::apply_path(self.shared, md, &job.src, path)?;
        finish_placement(&place, &job.dst)?;
        self.stats.specials += 1;
        Ok(())
    }

    /// A later name of an inode already copied to `first`.
    fn hard_link(&mut self, first: &Path, job: &Job) -> Result<()> {
        self.trace.enter(ThreadState::Linking);
        let first_id = fs::symlink_metadata(first).map(|m| identity(&m)).ok();
        let place = self.place(&job.dst, |m| Some(identity(m)) == first_id)?;
        let path = match &place {
            Placement::Unchanged => {
                self.stats.unchanged += 1;
                return Ok(());
            }
            Placement::Direct => &job.dst,
            Placement::Replace(tmp) => tmp,
        };
        posix::link_nofollow(first, path)
            .map_err(|e| Error::io2(Op::Link, first, path, e))?;
        finish_placement(&place, &job.dst)?;
        self.stats.hardlinks += 1;
        Ok(())
    }

    fn claim(&self, md: &Metadata, dst: &Path) -> Claim {
        let sh = self.shared;
        sh.inodes
            .claim(identity(md), md.nlink(), dst, || sh.stopped())
    }

    /// Decides where a new entry goes. Without merging, nothing is there
    /// (the destination was empty). Merging, an entry that `same` accepts
    /// is left alone, a directory in the way is a conflict, and anything
    /// else is replaced atomically.
    fn place(
        &self,
        dst: &Path,
        same: impl FnOnce(&Metadata) -> bool,
    ) -> Result<Placement> {
        if !self.shared.plan.merge {
            return Ok(Placement::Direct);
        }
        match fs::symlink_metadata(dst) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Ok(Placement::Direct)
            }
            Err(e) => Err(Error::io(Op::Stat, dst, e)),
            Ok(m) if m.is_dir() => Err(Error::refused(dst, Refusal::Conflict)),
            Ok(m) if same(&m) => Ok(Placement::Unchanged),
            Ok(_) => Ok(Placement::Replace(self.shared.temp_beside(dst))),
        }
    }
}

/// Renames a replacement over its destination.
fn finish_placement(place: &Placement, dst: &Path) -> Result<()> {
    if let Placement::Replace(tmp) = place
        && let Err(e) = fs::rename(tmp, dst)
    {
        let _already_failing = fs::remove_file(tmp);
        return Err(Error::io2(Op::Rename, tmp, dst, e));
    }
    Ok(())
}
