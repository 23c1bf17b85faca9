//! Writing files: a worker's job (its body from memory, from chunks as
//! the reader feeds them, or copied from ranges of the tar file), and a
//! body the reader streams itself; each made under a temporary name when
//! it replaces something, and counted once written.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::Ordering;

use crossbeam_channel::Receiver;
use zinstall_archive::ArchiveRefusal;
use zinstall_archive::compress::read_up_to;
use zinstall_archive::tar::{self, TarError};

use super::budget::Spare;
use super::ctx::Ctx;
use super::holes::{HOLE_BLOCK, write_data};
use super::job::{Body, FileJob, Meta, Place, Target};
use crate::error::{Error, Op, Result};
use crate::probes;
use crate::sys::{self, posix::at};

impl Ctx<'_> {
    /// Writes one file (in a worker, or in the reader when serial).
    /// Writes a batch's files; its descriptor slots are given back once
    /// all of them are done (its later jobs hold the directories too).
    pub(super) fn write_batch(&self, batch: Vec<FileJob>) {
        let mut holds = Vec::new();
        for mut job in batch {
            holds.extend(job.hold.take());
            self.write_job(job);
        }
    }

    pub(super) fn write_job(&self, job: FileJob) {
        let n = job.body.len();
        if !self.stopped() {
            probes::archive_entry_start(|| {
                (self.archive.to_string_lossy(), job.entry.as_str())
            });
            let r = self.write_file(&job);
            probes::archive_entry_done(|| {
                (
                    self.archive.to_string_lossy(),
                    job.entry.as_str(),
                    n,
                    probes::errno(&r),
                )
            });
            match r {
                // A chunked body its reader stopped feeding: the reader
                // says why.
                Ok(false) => {}
                Ok(true) => {
                    self.files.fetch_add(1, Ordering::Relaxed);
                    self.bytes_written.fetch_add(n, Ordering::Relaxed);
                    if let Some(f) = &self.flusher {
                        f.wrote(n);
                    }
                }
                Err(e) => self.fail(e),
            }
        }
        self.budget.release(job.body.held());
        if let Body::Bytes(b) = job.body {
            self.spare.give(b);
        }
        self.pending.release(1);
    }

    /// Creates and writes a job's file; false (and nothing left) when a
    /// chunked body ended short.
    fn write_file(&self, job: &FileJob) -> Result<bool> {
        let (dir, leaf, replace) = match &job.place {
            Place::Tree { dir, leaf, replace } => {
                (dir.as_raw_fd(), leaf, *replace)
            }
            Place::Object(slot) => return self.write_object(job, *slot),
        };
        let (name, temp) = if replace {
            (self.temp_name(), true)
        } else {
            (leaf.clone(), false)
        };
        let f = at::create_file(dir, &name)
            .map_err(|e| Error::io(Op::Create, &job.shown, e))?;
        // The content's hash, where it is recorded and can be taken.
        let contents = self.opts.contents.as_deref();
        let mut hash = None;
        let r = self.write_body(&f, job, &mut hash);
        // Its attributes as they were left, through the descriptor.
        let xattrs = match (&r, &job.rel) {
            (Ok(true), Some(_))
                if contents.is_some_and(|c| c.wants_xattrs()) =>
            {
                xattrs_of(&f)
            }
            _ => None,
        };
        drop(f);
        match r {
            Ok(true) => {}
            Ok(false) => {
                let _abandoned = at::unlink(dir, &name, false);
                return Ok(false);
            }
            Err(e) => {
                let _already_failing = at::unlink(dir, &name, false);
                return Err(e);
            }
        }
        if temp {
            at::rename(dir, &name, leaf).map_err(|e| {
                let _already_failing = at::unlink(dir, &name, false);
                Error::io(Op::Rename, &job.shown, e)
            })?;
        }
        if let (Some(c), Some(rel), Some((n, h))) =
            (&self.opts.contents, &job.rel, hash)
        {
            c.put(rel.clone(), n, h, xattrs);
        }
        Ok(true)
    }

    /// Writes a job's body into `f`, its new file, and then its metadata
    /// through the descriptor; false when a chunked body ended short.
    /// Leaves in `hash` the content's hash where it is recorded and can
    /// be taken.
    fn write_body(
        &self,
        f: &File,
        job: &FileJob,
        hash: &mut Option<(u64, crate::contents::BodyHash)>,
    ) -> Result<bool> {
        let contents = self.opts.contents.as_deref();
        match &job.body {
            Body::Bytes(data) => write_data(f, data, 0)
                .and_then(|end| {
                    // Ends in zeros left as a hole: the length still.
                    if end < data.len() as u64 {
                        f.set_len(data.len() as u64)?;
                    }
                    if let (Some(c), Some(_)) = (contents, &job.rel) {
                        let mut h = c.hasher();
                        h.write(data);
                        *hash = Some((data.len() as u64, h));
                    }
                    Ok(true)
                })
                .map_err(|e| Error::io(Op::Write, &job.shown, e)),
            Body::Chunks { rx, size } => {
                let mut h =
                    contents.filter(|_| job.rel.is_some()).map(|c| c.hasher());
                let whole = write_chunks(f, rx, *size, &self.spare, h.as_mut())
                    .map_err(|e| Error::io(Op::Write, &job.shown, e));
                if let (Ok(true), Some(h)) = (&whole, h) {
                    *hash = Some((*size, h));
                }
                whole
            }
            Body::At { segments, size } => segments
                .iter()
                .try_for_each(|&(at, len, from)| {
                    self.copy_body(f, from, len, at, &job.shown)
                })
                .and_then(|()| {
                    let end =
                        segments.last().map_or(0, |&(at, len, _)| at + len);
                    if *size > end {
                        // Ends in a hole.
                        f.set_len(*size)
                            .map_err(|e| Error::io(Op::Truncate, &job.shown, e))
                    } else {
                        Ok(())
                    }
                })
                .map(|()| {
                    // Copied in the kernel: read back from the page cache
                    // it was just copied through (a sparse body is left to
                    // whoever wants its hash).
                    if let (Some(c), Some(_), [(0, len, from)]) =
                        (contents, &job.rel, segments.as_slice())
                        && len == size
                    {
                        *hash = self.hash_range(c, *from, *len);
                    }
                    true
                }),
        }
        .and_then(|whole| match whole {
            true => self.finish_fd(f, &job.meta, &job.shown).map(|()| true),
            false => Ok(false),
        })
    }

    /// Writes a job's body into the store of an unpack into memory
    /// ([`super::memory::ObjectSink`]), hashed as it goes, and puts its
    /// digest in the tree's `slot`; false (nothing named) when a chunked
    /// body ended short.
    fn write_object(&self, job: &FileJob, slot: usize) -> Result<bool> {
        let no_store = |what: &str| {
            Error::io(
                Op::Create,
                &job.shown,
                io::Error::other(what.to_string()),
            )
        };
        let Some(to) = &self.objects else {
            return Err(no_store("no store for the bodies of this unpack"));
        };
        let (rx, size) = match &job.body {
            // Held whole: hashed first, written once where it belongs.
            Body::Bytes(data) => {
                to.put(data, slot, &job.shown)?;
                return Ok(true);
            }
            Body::Chunks { rx, size } => (rx, *size),
            // Never made for an unpack into memory: it reads the stream.
            Body::At { .. } => {
                return Err(no_store("a body copied from the archive file"));
            }
        };
        let f = to
            .sink
            .create()
            .map_err(|e| Error::io(Op::Create, &job.shown, e))?;
        let mut h = crate::contents::BodyHash::Object((to.hasher)());
        let whole = write_chunks(&f, rx, size, &self.spare, Some(&mut h))
            .map_err(|e| Error::io(Op::Write, &job.shown, e))?;
        if !whole {
            return Ok(false);
        }
        to.store(f, h, size, slot, &job.shown)?;
        Ok(true)
    }

    /// The hash of `len` bytes at `offset` of the plain tar file, as
    /// `contents` takes it; `None` if they cannot all be read.
    fn hash_range(
        &self,
        contents: &crate::contents::Contents,
        offset: u64,
        len: u64,
    ) -> Option<(u64, crate::contents::BodyHash)> {
        thread_local! {
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let src = self.body_source.as_ref()?;
        BUF.with(|b| {
            let mut buf = b.borrow_mut();
            if buf.is_empty() {
                buf.resize(256 << 10, 0);
            }
            let mut h = contents.hasher();
            let mut done = 0u64;
            while done < len {
                let want = (len - done).min(buf.len() as u64) as usize;
                match src.read_at(&mut buf[..want], offset + done) {
                    Ok(0) | Err(_) => return None,
                    Ok(n) => {
                        h.write(&buf[..n]);
                        done += n as u64;
                    }
                }
            }
            Some((len, h))
        })
    }

    /// Copies `len` bytes at `offset` of the tar file into `f` at `at`:
    /// in the kernel where it can, else through a buffer. A short archive
    /// is refused as truncated.
    fn copy_body(
        &self,
        f: &File,
        offset: u64,
        len: u64,
        at: u64,
        shown: &Path,
    ) -> Result<()> {
        let Some(src) = &self.body_source else {
            return Err(Error::io(
                Op::Read,
                self.archive,
                io::Error::other("no archive file to copy bodies from"),
            ));
        };
        let truncated = || {
            self.refuse(
                &shown.to_string_lossy(),
                ArchiveRefusal::Truncated {
                    what: "body".into(),
                },
            )
        };
        let mut done = 0;
        while done < len {
            match sys::copy_range(src, f, offset + done, at + done, len - done)
                .map_err(|e| Error::io(Op::CopyFileRange, shown, e))?
            {
                Some(0) => return Err(truncated()),
                Some(n) => done += n,
                None => break,
            }
        }
        if done == len {
            return Ok(());
        }
        let mut buf = vec![0u8; (len - done).min(1 << 20) as usize];
        while done < len {
            let want = (len - done).min(buf.len() as u64) as usize;
            let n = src
                .read_at(&mut buf[..want], offset + done)
                .map_err(|e| Error::io(Op::Read, self.archive, e))?;
            if n == 0 {
                return Err(truncated());
            }
            f.write_all_at(&buf[..n], at + done)
                .map_err(|e| Error::io(Op::Write, shown, e))?;
            done += n as u64;
        }
        Ok(())
    }
}

/// Writes a large or sparse body straight from the stream: each data
/// segment at its offset, then the real size, so holes stay holes.
pub(super) fn stream_file<R: Read>(
    ctx: &Ctx<'_>,
    rd: &mut tar::Reader<R>,
    m: &tar::Member,
    t: &Target<'_>,
    meta: &Meta,
) -> Result<()> {
    let name = if t.replace {
        ctx.temp_name()
    } else {
        t.leaf.clone()
    };
    let f = at::create_file(t.dir, &name)
        .map_err(|e| Error::io(Op::Create, t.shown, e))?;
    // A sparse body's hash is left to whoever wants it.
    let contents = ctx.opts.contents.as_deref();
    let mut h = contents
        .filter(|_| t.rel.is_some() && m.sparse.is_none())
        .map(|c| c.hasher());
    let r = write_segments(ctx, rd, m, &f, t.shown, h.as_mut())
        .and_then(|()| ctx.finish_fd(&f, meta, t.shown));
    let xattrs = match (&r, &t.rel) {
        (Ok(()), Some(_)) if contents.is_some_and(|c| c.wants_xattrs()) => {
            xattrs_of(&f)
        }
        _ => None,
    };
    drop(f);
    if let Err(err) = r {
        let _already_failing = at::unlink(t.dir, &name, false);
        return Err(err);
    }
    if t.replace {
        at::rename(t.dir, &name, t.leaf)
            .map_err(|e| Error::io(Op::Rename, t.shown, e))?;
    }
    if let (Some(c), Some(rel), Some(h)) = (&ctx.opts.contents, &t.rel, h) {
        c.put(rel.clone(), m.size, h, xattrs);
    }
    ctx.files.fetch_add(1, Ordering::Relaxed);
    ctx.bytes_written.fetch_add(m.size, Ordering::Relaxed);
    if let Some(f) = &ctx.flusher {
        f.wrote(m.size);
    }
    Ok(())
}

fn write_segments<R: Read>(
    ctx: &Ctx<'_>,
    rd: &mut tar::Reader<R>,
    m: &tar::Member,
    f: &File,
    shown: &Path,
    mut hash: Option<&mut crate::contents::BodyHash>,
) -> Result<()> {
    let whole = [(0, m.stored_size)];
    let map: &[(u64, u64)] = m.sparse.as_deref().unwrap_or(&whole);
    let mut buf = vec![0u8; m.stored_size.clamp(1, 1 << 20) as usize];
    let mut body = rd.body();
    for &(off, len) in map {
        let mut done = 0;
        while done < len {
            // Up to the next block boundary of the file, so that whole
            // blocks of zeros are seen as such whatever the stream's
            // reads return.
            let at = off + done;
            let mut want = (len - done).min(buf.len() as u64);
            let cut = (at + want) % HOLE_BLOCK;
            if cut < want {
                want -= cut;
            }
            let want = want as usize;
            let n = match read_up_to(&mut body, &mut buf[..want]) {
                Ok(n) => n,
                Err(e) => {
                    return Err(Error::tar(ctx.archive, TarError::from_io(e)));
                }
            };
            if n == 0 {
                return Err(ctx.refuse(
                    &shown.to_string_lossy(),
                    ArchiveRefusal::Truncated {
                        what: "body".into(),
                    },
                ));
            }
            write_data(f, &buf[..n], at)
                .map_err(|e| Error::io(Op::Write, shown, e))?;
            if let Some(h) = hash.as_deref_mut() {
                h.write(&buf[..n]);
            }
            done += n as u64;
        }
    }
    // Ends in a hole, or in zeros left as one.
    f.set_len(m.size)
        .map_err(|e| Error::io(Op::Truncate, shown, e))
}

/// Writes a chunked body as its chunks arrive, zeros left as holes;
/// false when they stop short of `size`.
fn write_chunks(
    f: &File,
    rx: &Receiver<Vec<u8>>,
    size: u64,
    spare: &Spare,
    mut hash: Option<&mut crate::contents::BodyHash>,
) -> io::Result<bool> {
    let mut at = 0u64;
    let mut end = 0u64;
    for chunk in rx {
        if chunk.len() as u64 > size - at {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "more bytes than the member's size",
            ));
        }
        let written = write_data(f, &chunk, at)?;
        if let Some(h) = hash.as_deref_mut() {
            h.write(&chunk);
        }
        if written > at {
            end = written;
        }
        at += chunk.len() as u64;
        spare.give(chunk);
    }
    if at < size {
        return Ok(false);
    }
    // Ends in zeros left as a hole.
    if end < size {
        f.set_len(size)?;
    }
    Ok(true)
}

/// The digest of the extended attributes of the file open as `f`;
/// `None` if they cannot be read (then they are read later, by name).
fn xattrs_of(f: &File) -> Option<Option<u128>> {
    use std::os::fd::AsFd;
    if !sys::XATTRS {
        return Some(None);
    }
    let target = sys::XattrTarget::Fd(f.as_fd());
    let names = sys::list_xattrs(&target).ok()?;
    let mut pairs = Vec::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        if crate::contents::xattr_alias(name) {
            continue;
        }
        let c = std::ffi::CString::new(name).ok()?;
        match sys::get_xattr(&target, &c).ok()? {
            Some(v) => pairs.push((name.to_vec(), v)),
            // Gone since it was listed.
            None => continue,
        }
    }
    Some(crate::contents::xattrs_digest(pairs))
}

/// A body the reader stores itself (an unpack into memory with no
/// workers): read in pieces, written and hashed as it comes, then named
/// in the store and its digest put in `slot`.
pub(super) fn stream_object<R: Read>(
    ctx: &Ctx<'_>,
    rd: &mut tar::Reader<R>,
    size: u64,
    slot: usize,
    shown: &Path,
) -> Result<()> {
    let Some(to) = &ctx.objects else {
        return Err(Error::io(
            Op::Create,
            shown,
            io::Error::other("no store for the bodies of this unpack"),
        ));
    };
    let f = to
        .sink
        .create()
        .map_err(|e| Error::io(Op::Create, shown, e))?;
    let mut h = crate::contents::BodyHash::Object((to.hasher)());
    let mut buf = vec![0u8; size.min(1 << 20) as usize];
    let mut body = rd.body();
    let (mut at, mut end) = (0u64, 0u64);
    while at < size {
        let want = (size - at).min(buf.len() as u64) as usize;
        body.read_exact(&mut buf[..want])
            .map_err(|e| Error::tar(ctx.archive, TarError::from_io(e)))?;
        let written = write_data(&f, &buf[..want], at)
            .map_err(|e| Error::io(Op::Write, shown, e))?;
        end = end.max(written);
        h.write(&buf[..want]);
        at += want as u64;
    }
    if end < size {
        f.set_len(size)
            .map_err(|e| Error::io(Op::Truncate, shown, e))?;
    }
    to.store(f, h, size, slot, shown)?;
    if let Some(fl) = &ctx.flusher {
        fl.wrote(size);
    }
    ctx.files.fetch_add(1, Ordering::Relaxed);
    ctx.bytes_written.fetch_add(size, Ordering::Relaxed);
    Ok(())
}
