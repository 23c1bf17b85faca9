//! Unpacking untrusted tar archives (tar, tar.gz, tar.zst) into a root,
//! in parallel, without ever writing outside it.
//!
//! # What stays outside
//!
//! Every name is checked before anything is done with it: an absolute
//! name, or one with a `..` component anywhere, is refused (the long names
//! of PAX and GNU headers included: the checked name is the one the entry
//! ends up with). Directories on the way to an entry are opened beneath
//! the root's descriptor, on Linux with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)`, elsewhere one component at a time with
//! `O_NOFOLLOW`: no symlink is ever followed, so a symlink the archive
//! created (or one already in the root) cannot take a later entry
//! elsewhere. Everything is then made with `*at` calls on that directory
//! descriptor and a single-component name. Hard links must name a target
//! inside the root reached without symlinks. Device nodes need
//! [`UnpackOptions::allow_devices`]. A file never replaces a directory,
//! nor a directory a symlink. The total of the entries' sizes is bounded
//! ([`UnpackOptions::max_bytes`]), against decompression bombs.
//!
//! The first refused entry stops the unpack with an error naming the
//! archive, the entry and the reason.
//!
//! # Parallel bodies
//!
//! One thread reads the stream: it decodes, checks and orders entries, and
//! makes directories, symlinks, hard links and special files itself (they
//! are cheap, and later entries depend on them). A file body up to 1 MiB
//! is read into memory and handed to the worker pool, which creates,
//! writes and finishes files in parallel; bodies in flight are bounded by
//! a shared byte budget, so memory stays flat whatever the archive. A
//! larger body is written by the reader itself, streaming, since the
//! stream cannot be read ahead of it anyway. A hard link waits until every
//! queued file is written, so its target exists. Directory metadata is
//! applied last, deepest first, so that a read-only directory does not
//! stop its own contents.
//!
//! With one thread (`copy_threads = 1`) the reader does everything itself:
//! the serial unpack.

use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use crossbeam_channel::Receiver;

use zinstall_archive::compress::{
    self, Compression, compression_of, decompress, read_up_to,
};
use zinstall_archive::meta;
use zinstall_archive::names::{self, Name};
use zinstall_archive::tar::{self, TarError};
use zinstall_archive::{ArchiveKind, ArchiveMeta, ArchiveRefusal};

use crate::beneath::{self, Chain, Root, WalkFail};
use crate::cancel::Cancel;
use crate::error::{Error, Met, Op, Result};
use crate::probes;
use crate::stats::{Notice, NoticeBoard, NoticeKind, Stats};
use crate::sys::posix::{Times, at, egid, euid};
use crate::sys::{self, XattrTarget};
use crate::tunables::Tunables;

mod survey;
pub use survey::{survey, survey_from};
mod layered;

pub use layered::{Change, Whiteouts};
use layered::{Class, Layered};

/// From a stream, bodies up to this size go to the pool in memory; larger
/// ones are streamed by the reader. From a plain tar file every body goes
/// to the pool as a range of the file.
const SMALL: u64 = 1 << 20;
/// Bytes of bodies in flight at most (a few per worker).
const BUDGET: u64 = 64 << 20;
/// Paths remembered between two barriers, to keep a later entry for the
/// same path from overtaking an earlier one still queued.
const MAX_TRACKED: usize = 65_536;

/// How to unpack.
#[derive(Clone, Debug)]
pub struct UnpackOptions {
    /// Workers (`copy_threads`; 1 unpacks serially in the reader) and
    /// batch size.
    pub tunables: Tunables,
    /// `Some(kind)`: the first member must be `zinstall.json` saying so.
    /// `None`: metadata is optional. With metadata, only members under
    /// `root/` are unpacked; without, everything.
    pub expect: Option<ArchiveKind>,
    /// Make device nodes (refused otherwise).
    pub allow_devices: bool,
    /// Refuse an archive whose entries add up to more bytes than this.
    pub max_bytes: u64,
    /// Set owners from the archive (default: when running as root).
    pub preserve_owner: Option<bool>,
    /// Stop at the next member when raised.
    pub cancel: Option<Cancel>,
    /// Write files on this shared pool's workers instead of starting
    /// `copy_threads` of the unpack's own (the reader stays in the calling
    /// thread).
    pub pool: Option<crate::Pool>,
    /// Hears of each member as it is unpacked (`tar -v`).
    pub listener: Option<Arc<dyn crate::Listener>>,
    /// OCI whiteouts: ignored (zinstall layers, plain tarballs), applied
    /// to the root, or recorded (see the `layered` module).
    pub whiteouts: Whiteouts,
}

impl Default for UnpackOptions {
    fn default() -> Self {
        UnpackOptions {
            tunables: Tunables::default(),
            expect: None,
            allow_devices: false,
            max_bytes: 64 << 30,
            preserve_owner: None,
            cancel: None,
            pool: None,
            listener: None,
            whiteouts: Whiteouts::Off,
        }
    }
}

/// What an unpack did.
#[derive(Clone, Debug, Default)]
pub struct UnpackReport {
    /// Entries made and bytes written; `skipped` counts members outside
    /// `root/`.
    pub stats: Stats,
    /// The archive's metadata, if it had any.
    pub meta: Option<ArchiveMeta>,
    /// What could not be kept (owners when not root).
    pub notices: Vec<Notice>,
    /// Recording whiteouts ([`Whiteouts::Record`]): what the layer
    /// changes besides its tree, in the archive's order, then the
    /// directories it has no entry for.
    pub changes: Vec<Change>,
}

/// Unpacks the archive file `archive` (tar, tar.gz, tar.zst or tar.xz,
/// told by content) into the existing directory `root`.
pub fn unpack(
    archive: &Path,
    root: &Path,
    opts: &UnpackOptions,
) -> Result<UnpackReport> {
    let mut f =
        File::open(archive).map_err(|e| Error::io(Op::Open, archive, e))?;
    let mut head = [0u8; compress::MAGIC_LEN];
    let n = read_up_to(&mut f, &mut head)
        .map_err(|e| Error::io(Op::Read, archive, e))?;
    let compression = compression_of(&head[..n]);
    f.seek(SeekFrom::Start(0))
        .map_err(|e| Error::io(Op::Read, archive, e))?;
    if compression == Compression::None {
        // A plain tar file: the reader only parses headers and seeks over
        // bodies; workers copy each body from its range of the file in the
        // kernel, so the reader never becomes the bottleneck.
        let body_source =
            f.try_clone().map_err(|e| Error::io(Op::Open, archive, e))?;
        let reader = tar::Reader::seekable(f, limits(opts))
            .map_err(|e| Error::io(Op::Read, archive, e))?;
        return run(reader, Some(body_source), archive, root, opts);
    }
    let reader =
        decompress(io::BufReader::with_capacity(1 << 20, f), compression)
            .map_err(|e| Error::io(Op::Read, archive, e))?;
    unpack_from(reader, archive, root, opts)
}

/// The reader's bounds for `opts`: declared sizes count against
/// `max_bytes` before anything is written.
fn limits(opts: &UnpackOptions) -> tar::Limits {
    tar::Limits {
        max_total_bytes: opts.max_bytes,
        ..tar::Limits::default()
    }
}

/// The most `zinstall.json` may hold.
const MAX_META: u64 = 64 << 10;

/// What a zinstall archive says it is, from its first member, reading
/// nothing more; `None` if the first member is not `zinstall.json`.
pub fn peek_kind(archive: &Path) -> Result<Option<ArchiveKind>> {
    let mut f =
        File::open(archive).map_err(|e| Error::io(Op::Open, archive, e))?;
    let mut head = [0u8; compress::MAGIC_LEN];
    let n = read_up_to(&mut f, &mut head)
        .map_err(|e| Error::io(Op::Read, archive, e))?;
    f.seek(SeekFrom::Start(0))
        .map_err(|e| Error::io(Op::Read, archive, e))?;
    let reader = decompress(f, compression_of(&head[..n]))
        .map_err(|e| Error::io(Op::Read, archive, e))?;
    let refuse = |entry: &str, reason| Error::Archive {
        archive: archive.to_path_buf(),
        entry: entry.to_string(),
        reason,
    };
    let mut rd = tar::Reader::new(reader, tar::Limits::default());
    let Some(m) = rd.next().map_err(|e| Error::tar(archive, e))? else {
        return Err(refuse(
            "",
            ArchiveRefusal::Corrupt("empty archive".into()),
        ));
    };
    let name =
        names::check(&m.name).map_err(|r| refuse(&names::show(&m.name), r))?;
    Ok(first_member(&mut rd, &m, &name, None, archive)?.map(|m| m.kind))
}

/// The first member's part: `Some(metadata)` when it is `zinstall.json`
/// (read, parsed, and checked against `expect`); `None` when it is not,
/// which `expect` refuses.
fn first_member<R: Read>(
    rd: &mut tar::Reader<R>,
    m: &tar::Member,
    name: &Name,
    expect: Option<ArchiveKind>,
    archive: &Path,
) -> Result<Option<ArchiveMeta>> {
    let refuse = |entry: &str, reason| Error::Archive {
        archive: archive.to_path_buf(),
        entry: entry.to_string(),
        reason,
    };
    if name.parts.len() != 1
        || name.parts[0].as_bytes() != meta::NAME.as_bytes()
    {
        return match expect {
            Some(_) => Err(refuse("", ArchiveRefusal::MissingMetadata)),
            None => Ok(None),
        };
    }
    let shown = m.name_lossy();
    let body = read_meta(rd, m)
        .map_err(|e| Error::tar(archive, e))?
        .map_err(|why| refuse(&shown, ArchiveRefusal::BadMetadata(why)))?;
    let found = meta::parse(&body)
        .map_err(|why| refuse(&shown, ArchiveRefusal::BadMetadata(why)))?;
    if let Some(want) = expect
        && want != found.kind
    {
        return Err(refuse(
            "",
            ArchiveRefusal::WrongArchiveType {
                expected: want.as_str().into(),
                found: found.kind.as_str().into(),
            },
        ));
    }
    Ok(Some(found))
}

/// The body of `zinstall.json`, bounded; the inner error says why it is
/// not metadata.
fn read_meta<R: Read>(
    rd: &mut tar::Reader<R>,
    m: &tar::Member,
) -> std::result::Result<std::result::Result<Vec<u8>, String>, TarError> {
    if m.kind != tar::Kind::File || m.sparse.is_some() {
        return Ok(Err("not a regular file".into()));
    }
    if m.size > MAX_META {
        return Ok(Err(format!(
            "{} bytes, more than the {MAX_META} it may hold",
            m.size
        )));
    }
    let mut body = Vec::with_capacity(m.size as usize);
    rd.body()
        .read_to_end(&mut body)
        .map_err(TarError::from_io)?;
    Ok(Ok(body))
}

/// Unpacks a decompressed tar stream; `archive` names it in errors.
pub fn unpack_from(
    reader: impl Read,
    archive: &Path,
    root: &Path,
    opts: &UnpackOptions,
) -> Result<UnpackReport> {
    run(
        tar::Reader::new(reader, limits(opts)),
        None,
        archive,
        root,
        opts,
    )
}

/// Unpacks what `input` reads; with `body_source` (the same plain tar
/// file), file bodies are copied from their ranges of it instead of being
/// read by the reader.
fn run<R: Read>(
    input: tar::Reader<R>,
    body_source: Option<File>,
    archive: &Path,
    root: &Path,
    opts: &UnpackOptions,
) -> Result<UnpackReport> {
    opts.tunables.validate()?;
    // The root's own last component is not followed either.
    let root_dir = Root::open(root)?;
    let is_root = euid() == 0;
    let ctx = Ctx {
        archive,
        root,
        root_fd: Arc::clone(root_dir.fd()),
        opts,
        is_root,
        preserve_owner: opts.preserve_owner.unwrap_or(is_root),
        quit: AtomicBool::new(false),
        error: Mutex::new(None),
        notices: NoticeBoard::default(),
        budget: Gate::default(),
        pending: Gate::default(),
        temp: AtomicU64::new(0),
        bytes_written: AtomicU64::new(0),
        files: AtomicU64::new(0),
        body_source,
    };
    let batch_size = opts.tunables.copy_batch.max(1);
    let reader_result = if let Some(pool) = &opts.pool {
        let in_flight = crate::pool::InFlight::default();
        let cap = 2 * pool.threads();
        let ctx = &ctx;
        let in_flight = &in_flight;
        pool.scope(|scope| {
            let send = move |batch: Vec<FileJob>| {
                in_flight.enter(cap);
                scope.spawn(move |_| {
                    for job in batch {
                        ctx.write_job(job);
                    }
                    in_flight.leave();
                });
                true
            };
            let batcher = Batcher {
                tx: Box::new(send),
                batch: Vec::new(),
                held: 0,
                size: batch_size,
            };
            read_all(ctx, input, Some(batcher))
        })
    } else {
        unpack_with_own_workers(&ctx, input, batch_size)
    };
    let outcome = match reader_result {
        Ok(o) => o,
        Err(e) => {
            ctx.fail(e);
            ReadOutcome::default()
        }
    };
    if let Some(e) = ctx.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    {
        return Err(e);
    }
    if ctx.cancelled() {
        return Err(Error::Cancelled {
            path: archive.to_path_buf(),
        });
    }
    // Directory metadata last, children before their parents: in
    // descending name order a directory follows everything beneath it,
    // and neighbours share their parents' open descriptors.
    let mut dirs = outcome.dirs;
    dirs.sort_by(|a, b| b.0.parts.cmp(&a.0.parts));
    let mut chain = Chain::new(Arc::clone(&ctx.root_fd));
    for (name, m) in &dirs {
        ctx.finish_dir(&mut chain, name, m)?;
    }
    let mut stats = outcome.stats;
    stats.files += ctx.files.load(Ordering::Relaxed);
    stats.bytes += ctx.bytes_written.load(Ordering::Relaxed);
    let notices = ctx.notices.into_vec();
    Ok(UnpackReport {
        stats,
        meta: outcome.meta,
        notices,
        changes: outcome.changes,
    })
}

/// Owner, mode, times and xattrs of an entry.
#[derive(Clone, Debug)]
struct Meta {
    mode: u32,
    uid: u32,
    gid: u32,
    times: Times,
    xattrs: Vec<(CString, Vec<u8>)>,
}

/// Reads the archive in this thread with `copy_threads` workers of the
/// unpack's own writing the files (none: the reader writes them).
fn unpack_with_own_workers<R: Read>(
    ctx: &Ctx<'_>,
    input: tar::Reader<R>,
    batch_size: usize,
) -> Result<ReadOutcome> {
    let workers = if ctx.opts.tunables.copy_threads > 1 {
        ctx.opts.tunables.copy_threads
    } else {
        0
    };
    // A few batches per worker, as in the copy engine.
    let (tx, rx) = crossbeam_channel::bounded::<Vec<FileJob>>(workers * 2);
    std::thread::scope(|s| {
        for i in 0..workers {
            let rx: Receiver<Vec<FileJob>> = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("unpack-{i}"))
                .spawn_scoped(s, move || {
                    for batch in rx {
                        for job in batch {
                            ctx.write_job(job);
                        }
                    }
                });
            if let Err(e) = spawned {
                ctx.fail(Error::io(Op::Open, "thread", e));
            }
        }
        drop(rx);
        let pool = (workers > 0).then(|| Batcher {
            tx: Box::new(move |batch| tx.send(batch).is_ok()),
            batch: Vec::new(),
            held: 0,
            size: batch_size,
        });
        read_all(ctx, input, pool)
    })
}

/// A file for the pool.
struct FileJob {
    dir: Arc<OwnedFd>,
    leaf: CString,
    replace: bool,
    body: Body,
    meta: Meta,
    shown: PathBuf,
    entry: String,
}

/// The reader's side of the pool: files go to the workers in batches of
/// `COPY_BATCH`, so that each worker tends to fill one directory while the
/// others fill others, instead of all of them creating files in the same
/// directory at once.
struct Batcher<'a> {
    /// Hands a batch to the workers; false when they are gone.
    tx: Box<dyn Fn(Vec<FileJob>) -> bool + 'a>,
    batch: Vec<FileJob>,
    /// In-memory body bytes in `batch`.
    held: u64,
    size: usize,
}

impl Batcher<'_> {
    /// Queues `job`; false when the workers are gone.
    fn push(&mut self, job: FileJob) -> bool {
        self.held += job.body.held();
        self.batch.push(job);
        // Bodies waiting here count against the byte budget; sending at a
        // quarter of it keeps the reader from waiting on bytes it holds.
        if self.batch.len() >= self.size || self.held >= BUDGET / 4 {
            return self.flush();
        }
        true
    }

    /// Sends what is queued; false when the workers are gone.
    fn flush(&mut self) -> bool {
        if self.batch.is_empty() {
            return true;
        }
        self.held = 0;
        (self.tx)(std::mem::take(&mut self.batch))
    }
}

/// Where a file's bytes are.
enum Body {
    /// Read by the reader from a stream.
    Bytes(Vec<u8>),
    /// Ranges of the plain tar file: `(offset in the file being written,
    /// length, offset in the archive)`, and the file's real size (larger
    /// than the ranges when it ends in a hole).
    At {
        segments: Vec<(u64, u64, u64)>,
        size: u64,
    },
}

impl Body {
    fn len(&self) -> u64 {
        match self {
            Body::Bytes(b) => b.len() as u64,
            Body::At { size, .. } => *size,
        }
    }

    /// Bytes of the in-memory budget this body holds.
    fn held(&self) -> u64 {
        match self {
            Body::Bytes(b) => b.len() as u64,
            Body::At { .. } => 0,
        }
    }
}

/// A counter others can wait on: the byte budget, and jobs in flight.
#[derive(Default)]
struct Gate {
    used: Mutex<u64>,
    cv: Condvar,
}

impl Gate {
    /// Adds `n`, first waiting until `used + n <= cap` (or nothing is
    /// used, so one oversized item still goes).
    fn acquire(&self, n: u64, cap: u64) {
        let mut g = self.used.lock().unwrap_or_else(|p| p.into_inner());
        while *g > 0 && *g + n > cap {
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        *g += n;
    }

    fn release(&self, n: u64) {
        let mut g = self.used.lock().unwrap_or_else(|p| p.into_inner());
        *g = g.saturating_sub(n);
        self.cv.notify_all();
    }

    /// Waits until nothing is used.
    fn wait_empty(&self) {
        let mut g = self.used.lock().unwrap_or_else(|p| p.into_inner());
        while *g > 0 {
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
}

struct Ctx<'a> {
    archive: &'a Path,
    root: &'a Path,
    root_fd: Arc<OwnedFd>,
    opts: &'a UnpackOptions,
    is_root: bool,
    preserve_owner: bool,
    quit: AtomicBool,
    error: Mutex<Option<Error>>,
    notices: NoticeBoard,
    budget: Gate,
    pending: Gate,
    temp: AtomicU64,
    bytes_written: AtomicU64,
    files: AtomicU64,
    /// The plain tar file bodies are copied from, when seekable.
    body_source: Option<File>,
}

#[derive(Default)]
struct ReadOutcome {
    stats: Stats,
    meta: Option<ArchiveMeta>,
    dirs: Vec<(Name, Meta)>,
    changes: Vec<Change>,
}

impl Ctx<'_> {
    fn fail(&self, e: Error) {
        self.quit.store(true, Ordering::Relaxed);
        let mut g = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            *g = Some(e);
        }
    }

    fn stopped(&self) -> bool {
        self.quit.load(Ordering::Relaxed) || self.cancelled()
    }

    fn cancelled(&self) -> bool {
        self.opts.cancel.as_ref().is_some_and(|c| c.is_cancelled())
    }

    fn refuse(&self, entry: &str, reason: ArchiveRefusal) -> Error {
        Error::Archive {
            archive: self.archive.to_path_buf(),
            entry: entry.to_string(),
            reason,
        }
    }

    fn shown(&self, parts: &[CString]) -> PathBuf {
        let mut p = self.root.to_path_buf();
        for c in parts {
            p.push(std::ffi::OsStr::from_bytes_compat(c.as_bytes()));
        }
        p
    }

    fn notice(&self, kind: NoticeKind, path: &Path) {
        self.notices.add(kind, path);
    }

    fn temp_name(&self) -> CString {
        let n = self.temp.fetch_add(1, Ordering::Relaxed);
        CString::new(format!(".zi{:x}.{n:x}", std::process::id()))
            .unwrap_or_default()
    }

    /// Opens the directory `parts` beneath the root through `chain`,
    /// never through a symlink; missing directories are made (0755) when
    /// `create`.
    fn open_dir(
        &self,
        chain: &mut Chain,
        parts: &[CString],
        entry: &str,
        create: bool,
    ) -> Result<Arc<OwnedFd>> {
        chain
            .open(parts, create.then_some(0o755))
            .map_err(|f| match f {
                WalkFail::Met(_, Met::Symlink) => {
                    self.refuse(entry, ArchiveRefusal::ThroughSymlink)
                }
                WalkFail::Met(_, Met::NotADirectory) => {
                    self.refuse(entry, ArchiveRefusal::FileOverDirectory)
                }
                f => f.into_error(self.root, parts, &self.shown(parts)),
            })
    }

    /// Owner (or a notice), xattrs, mode and times through a descriptor.
    fn finish_fd(&self, f: &File, m: &Meta, shown: &Path) -> Result<()> {
        self.owner(m, shown, || at::fchown(f, m.uid, m.gid))?;
        self.set_xattrs(&XattrTarget::Fd(f.as_fd()), m, shown)?;
        at::fchmod(f, m.mode & 0o7777)
            .map_err(|e| Error::io(Op::Chmod, shown, e))?;
        at::futimens(f, &m.times).map_err(|e| Error::io(Op::SetTimes, shown, e))
    }

    /// The same for an entry named in a directory we hold (a symlink, a
    /// FIFO, a device), never following it.
    fn finish_at(
        &self,
        dir: RawFd,
        leaf: &CStr,
        m: &Meta,
        shown: &Path,
        symlink: bool,
    ) -> Result<()> {
        self.owner(m, shown, || at::lchown(dir, leaf, m.uid, m.gid))?;
        self.set_xattrs(&XattrTarget::At(dir, leaf), m, shown)?;
        if !symlink {
            sys::chmod_at(dir, leaf, m.mode & 0o7777)
                .map_err(|e| Error::io(Op::Chmod, shown, e))?;
        }
        at::set_times(dir, leaf, &m.times)
            .map_err(|e| Error::io(Op::SetTimes, shown, e))
    }

    /// The member's xattrs; those needing privilege we lack are noticed
    /// (not root) rather than failed.
    fn set_xattrs(
        &self,
        target: &XattrTarget<'_>,
        m: &Meta,
        shown: &Path,
    ) -> Result<()> {
        if !sys::XATTRS {
            if !m.xattrs.is_empty() {
                self.notice(NoticeKind::XattrsUnsupported, shown);
            }
            return Ok(());
        }
        for (name, value) in &m.xattrs {
            if let Err(e) = sys::set_xattr(target, name, value) {
                let denied = matches!(
                    e.raw_os_error(),
                    Some(libc::EPERM | libc::EACCES)
                );
                if denied && !self.is_root {
                    self.notice(
                        NoticeKind::Xattr(name.to_string_lossy().into_owned()),
                        shown,
                    );
                } else {
                    return Err(Error::Attr {
                        op: Op::SetXattr,
                        path: shown.to_path_buf(),
                        name: name.to_string_lossy().into_owned(),
                        source: e,
                    });
                }
            }
        }
        Ok(())
    }

    fn owner(
        &self,
        m: &Meta,
        shown: &Path,
        chown: impl FnOnce() -> io::Result<()>,
    ) -> Result<()> {
        if !self.preserve_owner {
            if !self.is_root && (m.uid != euid() || m.gid != egid()) {
                self.notice(NoticeKind::Ownership, shown);
            }
            return Ok(());
        }
        match chown() {
            Err(e)
                if !self.is_root && e.raw_os_error() == Some(libc::EPERM) =>
            {
                self.notice(NoticeKind::Ownership, shown);
                Ok(())
            }
            r => r.map_err(|e| Error::io(Op::Chown, shown, e)),
        }
    }

    /// Writes one file (in a worker, or in the reader when serial).
    fn write_job(&self, job: FileJob) {
        let n = job.body.len();
        if !self.stopped() {
            probes::zinstall::archive__entry__start!(|| (
                self.archive.to_string_lossy(),
                job.entry.as_str()
            ));
            let r = self.write_file(&job);
            probes::zinstall::archive__entry__done!(|| (
                self.archive.to_string_lossy(),
                job.entry.as_str(),
                n,
                probes::errno(&r)
            ));
            match r {
                Ok(()) => {
                    self.files.fetch_add(1, Ordering::Relaxed);
                    self.bytes_written.fetch_add(n, Ordering::Relaxed);
                }
                Err(e) => self.fail(e),
            }
        }
        self.budget.release(job.body.held());
        self.pending.release(1);
    }

    fn write_file(&self, job: &FileJob) -> Result<()> {
        let dir = job.dir.as_raw_fd();
        let (name, temp) = if job.replace {
            (self.temp_name(), true)
        } else {
            (job.leaf.clone(), false)
        };
        let mut f = at::create_file(dir, &name)
            .map_err(|e| Error::io(Op::Create, &job.shown, e))?;
        let r = match &job.body {
            Body::Bytes(data) => f
                .write_all(data)
                .map_err(|e| Error::io(Op::Write, &job.shown, e)),
            Body::At { segments, size } => segments
                .iter()
                .try_for_each(|&(at, len, from)| {
                    self.copy_body(&f, from, len, at, &job.shown)
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
                }),
        }
        .and_then(|()| self.finish_fd(&f, &job.meta, &job.shown));
        drop(f);
        if let Err(e) = r {
            let _already_failing = at::unlink(dir, &name, false);
            return Err(e);
        }
        if temp {
            at::rename(dir, &name, &job.leaf).map_err(|e| {
                let _already_failing = at::unlink(dir, &name, false);
                Error::io(Op::Rename, &job.shown, e)
            })?;
        }
        Ok(())
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

    fn finish_dir(
        &self,
        chain: &mut Chain,
        name: &Name,
        m: &Meta,
    ) -> Result<()> {
        let entry = Name::joined(&name.parts).to_string_lossy().into_owned();
        let Some(leaf) = name.leaf() else {
            // The archive's entry for the root itself.
            let top = self
                .root_fd
                .try_clone()
                .map_err(|e| Error::io(Op::Open, self.root, e))?;
            return self.finish_fd(&File::from(top), m, self.root);
        };
        let parent = self.open_dir(chain, name.parent(), &entry, false)?;
        let shown = self.shown(&name.parts);
        let fd = at::open_dir(parent.as_raw_fd(), leaf)
            .map_err(|e| Error::io(Op::Open, &shown, e))?;
        self.finish_fd(&File::from(fd), m, &shown)
    }
}

/// `OsStr` from bytes without the unix-only import at each call site.
trait FromBytesCompat {
    fn from_bytes_compat(b: &[u8]) -> &Self;
}

impl FromBytesCompat for std::ffi::OsStr {
    fn from_bytes_compat(b: &[u8]) -> &Self {
        use std::os::unix::ffi::OsStrExt;
        std::ffi::OsStr::from_bytes(b)
    }
}

/// What is at `dir/leaf` now.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Existing {
    Nothing,
    Dir,
    Symlink,
    Other,
}

fn existing(dir: RawFd, leaf: &CStr, shown: &Path) -> Result<Existing> {
    Ok(
        match at::lstat(dir, leaf).map_err(|e| Error::io(Op::Stat, shown, e))? {
            None => Existing::Nothing,
            Some(st) => match st.st_mode & libc::S_IFMT {
                libc::S_IFDIR => Existing::Dir,
                libc::S_IFLNK => Existing::Symlink,
                _ => Existing::Other,
            },
        },
    )
}

impl Meta {
    /// Owner, mode, times and xattrs of a member. Owners are numeric, as
    /// `tar --numeric-owner` keeps them: an image's names belong to the
    /// image's own passwd, not the host's.
    fn of(m: &tar::Member) -> std::result::Result<Meta, String> {
        let t = |(s, ns): (i64, u32)| (s, i64::from(ns));
        let mtime = t(m.mtime);
        let mut xattrs = Vec::with_capacity(m.xattrs.len());
        for (name, value) in &m.xattrs {
            let c = CString::new(name.clone())
                .map_err(|_| "NUL in an xattr name".to_string())?;
            xattrs.push((c, value.clone()));
        }
        Ok(Meta {
            mode: m.mode & 0o7777,
            uid: m.uid,
            gid: m.gid,
            times: Times {
                atime: m.atime.map_or(mtime, t),
                mtime,
            },
            xattrs,
        })
    }
}

/// The reader: decodes members in order and does everything but pooled
/// file bodies.
fn read_all<R: Read>(
    ctx: &Ctx<'_>,
    mut rd: tar::Reader<R>,
    mut pool: Option<Batcher<'_>>,
) -> Result<ReadOutcome> {
    let started = Instant::now();
    let mut out = ReadOutcome::default();
    let seekable = ctx.body_source.is_some();
    let tar_err = |e: TarError| Error::tar(ctx.archive, e);
    let mut first = true;
    let mut subtree = false;
    let mut queued: HashSet<Vec<u8>> = HashSet::new();
    let mut chain = Chain::new(Arc::clone(&ctx.root_fd));
    let mut layered = Layered::new(ctx.opts.whiteouts);
    // Waits until every queued file is written. False: the pool is gone.
    let barrier = |pool: &mut Option<Batcher<'_>>,
                   queued: &mut HashSet<Vec<u8>>|
     -> bool {
        let sent = pool.as_mut().is_none_or(Batcher::flush);
        if sent {
            ctx.pending.wait_empty();
            queued.clear();
        }
        sent
    };
    let mut ended = false;
    while !ctx.stopped() {
        let Some(m) = rd.next().map_err(tar_err)? else {
            ended = true;
            break;
        };
        let shown_entry = m.name_lossy();
        let mut name =
            names::check(&m.name).map_err(|r| ctx.refuse(&shown_entry, r))?;
        if first {
            first = false;
            if let Some(meta) =
                first_member(&mut rd, &m, &name, ctx.opts.expect, ctx.archive)?
            {
                out.meta = Some(meta);
                subtree = true;
                continue;
            }
        }
        if subtree {
            if name.parts.first().map(|p| p.as_bytes()) != Some(b"root") {
                out.stats.skipped += 1;
                continue;
            }
            name.parts.remove(0);
        }
        if let Some(lay) = layered.as_mut() {
            let class = layered::classify(&name.parts).map_err(|why| {
                ctx.refuse(&shown_entry, ArchiveRefusal::Corrupt(why))
            })?;
            match class {
                Class::Entry => {}
                Class::Skip => {
                    out.stats.skipped += 1;
                    continue;
                }
                Class::Opaque => {
                    // What this layer queued stays; nothing is removed
                    // from under a worker.
                    if lay.applying() && !barrier(&mut pool, &mut queued) {
                        break;
                    }
                    lay.opaque(ctx, &mut chain, name.parent(), &shown_entry)?;
                    continue;
                }
                Class::Whiteout(leaf) => {
                    let mut target = name.parent().to_vec();
                    target.push(leaf.clone());
                    if lay.applying()
                        && lay.made(&target)
                        && !barrier(&mut pool, &mut queued)
                    {
                        break;
                    }
                    lay.whiteout(
                        ctx,
                        &mut chain,
                        name.parent(),
                        &leaf,
                        &shown_entry,
                    )?;
                    continue;
                }
            }
        }
        let meta = Meta::of(&m).map_err(|why| {
            ctx.refuse(&shown_entry, ArchiveRefusal::Corrupt(why))
        })?;
        let Some(leaf) = name.leaf().cloned() else {
            // The layer's own `root/` (or `./`): the root directory itself.
            if m.kind == tar::Kind::Directory {
                out.dirs.push((name, meta));
            }
            continue;
        };
        let rel = Name::joined(&name.parts).into_bytes();
        // A second entry for a path still queued waits for the first.
        if (queued.contains(&rel) || queued.len() >= MAX_TRACKED)
            && !barrier(&mut pool, &mut queued)
        {
            break;
        }
        let parent_parts = name.parent().to_vec();
        if let Some(lay) = layered.as_mut() {
            lay.touch(ctx, &mut chain, &parent_parts)?;
        }
        let dir =
            ctx.open_dir(&mut chain, &parent_parts, &shown_entry, true)?;
        let dfd = dir.as_raw_fd();
        let shown = ctx.shown(&name.parts);
        let mut now = existing(dfd, &leaf, &shown)?;
        if let Some(lay) = layered.as_mut() {
            // A lower layer's directory becomes a file, or its symlink a
            // directory: what it left goes. Within one layer, refused.
            let dir_entry = m.kind == tar::Kind::Directory;
            if lay.applying()
                && !lay.made(&name.parts)
                && ((now == Existing::Dir && !dir_entry)
                    || (now == Existing::Symlink && dir_entry))
            {
                beneath::remove_at(dfd, &leaf, &shown)?;
                now = Existing::Nothing;
            }
            lay.note(&name.parts);
        }
        let not_over_dir = || {
            if now == Existing::Dir {
                Err(ctx.refuse(&shown_entry, ArchiveRefusal::FileOverDirectory))
            } else {
                Ok(())
            }
        };
        if let Some(l) = &ctx.opts.listener {
            l.entry(Path::new(&shown_entry), &shown, listed_kind(m.kind));
        }
        match m.kind {
            tar::Kind::Directory => {
                match now {
                    Existing::Dir => {}
                    Existing::Symlink => {
                        return Err(ctx.refuse(
                            &shown_entry,
                            ArchiveRefusal::DirectoryOverSymlink,
                        ));
                    }
                    Existing::Other | Existing::Nothing => {
                        if now == Existing::Other {
                            at::unlink(dfd, &leaf, false).map_err(|e| {
                                Error::io(Op::Remove, &shown, e)
                            })?;
                        }
                        // Owner-writable until its metadata is applied last.
                        at::mkdir(dfd, &leaf, 0o700)
                            .map_err(|e| Error::io(Op::Mkdir, &shown, e))?;
                        out.stats.dirs += 1;
                    }
                }
                out.dirs.push((name, meta));
            }
            tar::Kind::File => {
                not_over_dir()?;
                let replace = now != Existing::Nothing;
                let body = if seekable {
                    Some(Body::At {
                        segments: m.segments(),
                        size: m.size,
                    })
                } else if pool.is_some()
                    && m.sparse.is_none()
                    && m.size <= SMALL
                {
                    // Held until the worker has written it; the size is
                    // at most SMALL, whatever the archive says.
                    ctx.budget.acquire(m.size, BUDGET);
                    let mut data = Vec::with_capacity(m.size as usize);
                    if let Err(e) = rd.body().read_to_end(&mut data) {
                        ctx.budget.release(m.size);
                        return Err(tar_err(TarError::from_io(e)));
                    }
                    Some(Body::Bytes(data))
                } else {
                    None
                };
                match body {
                    Some(body) => {
                        let job = FileJob {
                            dir,
                            leaf,
                            replace,
                            body,
                            meta,
                            shown,
                            entry: shown_entry,
                        };
                        ctx.pending.acquire(1, u64::MAX);
                        match &mut pool {
                            Some(pool) => {
                                queued.insert(rel);
                                if !pool.push(job) {
                                    break;
                                }
                            }
                            None => ctx.write_job(job),
                        }
                    }
                    None => {
                        // Streamed by the reader: one body at a time.
                        if !barrier(&mut pool, &mut queued) {
                            break;
                        }
                        let target = Target {
                            dir: dfd,
                            leaf: &leaf,
                            replace,
                            shown: &shown,
                        };
                        stream_file(ctx, &mut rd, &m, &target, &meta)?;
                    }
                }
            }
            tar::Kind::Symlink => {
                not_over_dir()?;
                let target = m.link.clone().unwrap_or_default();
                let target = CString::new(target).map_err(|_| {
                    ctx.refuse(
                        &shown_entry,
                        ArchiveRefusal::Corrupt("NUL in symlink target".into()),
                    )
                })?;
                if target.as_bytes().is_empty() {
                    return Err(ctx.refuse(
                        &shown_entry,
                        ArchiveRefusal::Corrupt(
                            "symlink without target".into(),
                        ),
                    ));
                }
                let tmp = if now == Existing::Nothing {
                    leaf.clone()
                } else {
                    ctx.temp_name()
                };
                at::symlink(&target, dfd, &tmp)
                    .map_err(|e| Error::io(Op::Symlink, &shown, e))?;
                ctx.finish_at(dfd, &tmp, &meta, &shown, true)?;
                if tmp != leaf {
                    at::rename(dfd, &tmp, &leaf)
                        .map_err(|e| Error::io(Op::Rename, &shown, e))?;
                }
                out.stats.symlinks += 1;
                queued.insert(rel);
            }
            tar::Kind::HardLink => {
                not_over_dir()?;
                let outside = || {
                    ctx.refuse(&shown_entry, ArchiveRefusal::HardLinkOutside)
                };
                let target_raw = m.link.clone().ok_or_else(outside)?;
                let mut target =
                    names::check(&target_raw).map_err(|_| outside())?;
                if subtree {
                    if target.parts.first().map(|p| p.as_bytes())
                        != Some(b"root")
                    {
                        return Err(outside());
                    }
                    target.parts.remove(0);
                }
                let Some(tleaf) = target.leaf().cloned() else {
                    return Err(outside());
                };
                // Its target may still be in a worker's hands.
                if !barrier(&mut pool, &mut queued) {
                    break;
                }
                let found = match ctx.open_dir(
                    &mut chain,
                    target.parent(),
                    &shown_entry,
                    false,
                ) {
                    Ok(tdir) => {
                        let e = existing(tdir.as_raw_fd(), &tleaf, &shown)?;
                        Some((tdir, e))
                    }
                    Err(_) => None,
                };
                let recording = layered.as_ref().is_some_and(|l| !l.applying());
                let tdir = match found {
                    Some((tdir, Existing::Other | Existing::Symlink)) => {
                        Some(tdir)
                    }
                    None | Some((_, Existing::Nothing)) if recording => None,
                    _ => return Err(outside()),
                };
                // The chain may have moved to the target's directory.
                let dir = ctx.open_dir(
                    &mut chain,
                    &parent_parts,
                    &shown_entry,
                    true,
                )?;
                let dfd = dir.as_raw_fd();
                if now != Existing::Nothing {
                    at::unlink(dfd, &leaf, false)
                        .map_err(|e| Error::io(Op::Remove, &shown, e))?;
                }
                match (tdir, layered.as_mut()) {
                    (Some(tdir), _) => {
                        at::link(tdir.as_raw_fd(), &tleaf, dfd, &leaf)
                            .map_err(|e| Error::io(Op::Link, &shown, e))?
                    }
                    // A layer alone: the target is a lower layer's file,
                    // linked when the layer is applied (beneath the root
                    // then, as every write).
                    (None, Some(lay)) => {
                        lay.defer_link(&name.parts, &target.parts)
                    }
                    (None, None) => return Err(outside()),
                }
                out.stats.hardlinks += 1;
            }
            tar::Kind::CharDevice
            | tar::Kind::BlockDevice
            | tar::Kind::Fifo => {
                let (typ, dev) = match m.kind {
                    tar::Kind::CharDevice => (libc::S_IFCHR, true),
                    tar::Kind::BlockDevice => (libc::S_IFBLK, true),
                    _ => (libc::S_IFIFO, false),
                };
                if dev && !ctx.opts.allow_devices {
                    return Err(ctx.refuse(
                        &shown_entry,
                        ArchiveRefusal::DeviceNotAllowed,
                    ));
                }
                not_over_dir()?;
                if now != Existing::Nothing {
                    at::unlink(dfd, &leaf, false)
                        .map_err(|e| Error::io(Op::Remove, &shown, e))?;
                }
                let rdev = crate::sys::posix::makedev(m.dev.0, m.dev.1);
                at::mknod(dfd, &leaf, typ | 0o600, rdev)
                    .map_err(|e| Error::io(Op::Mknod, &shown, e))?;
                // By name: a FIFO cannot be opened without blocking, a
                // device should not be opened at all.
                ctx.finish_at(dfd, &leaf, &meta, &shown, false)?;
                out.stats.specials += 1;
            }
            tar::Kind::Other(t) => {
                return Err(ctx.refuse(
                    &shown_entry,
                    ArchiveRefusal::UnsupportedEntryType(format!(
                        "typeflag {:?}",
                        t as char
                    )),
                ));
            }
        }
    }
    if let Some(mut pool) = pool {
        pool.flush();
    }
    ctx.pending.wait_empty();
    if let Some(lay) = layered
        && ended
        && !ctx.stopped()
    {
        out.changes = lay.finish(ctx, &mut chain, &out.dirs)?;
    }
    if ended {
        // The rest must be zeros, and a compressed stream is read to its
        // end so its checksums and trailer are verified.
        rd.finish().map_err(tar_err)?;
    }
    out.stats.elapsed = started.elapsed();
    Ok(out)
}

/// A member's kind as listings name it.
fn listed_kind(k: tar::Kind) -> crate::EntryKind {
    use crate::EntryKind;
    match k {
        tar::Kind::Directory => EntryKind::Dir,
        tar::Kind::HardLink => EntryKind::HardLink,
        tar::Kind::Symlink => EntryKind::Symlink,
        tar::Kind::CharDevice | tar::Kind::BlockDevice | tar::Kind::Fifo => {
            EntryKind::Special
        }
        tar::Kind::File | tar::Kind::Other(_) => EntryKind::File,
    }
}

/// Where the reader writes a streamed file.
struct Target<'a> {
    dir: RawFd,
    leaf: &'a CString,
    replace: bool,
    shown: &'a Path,
}

/// Writes a large or sparse body straight from the stream: each data
/// segment at its offset, then the real size, so holes stay holes.
fn stream_file<R: Read>(
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
    let r = write_segments(ctx, rd, m, &f, t.shown)
        .and_then(|()| ctx.finish_fd(&f, meta, t.shown));
    drop(f);
    if let Err(err) = r {
        let _already_failing = at::unlink(t.dir, &name, false);
        return Err(err);
    }
    if t.replace {
        at::rename(t.dir, &name, t.leaf)
            .map_err(|e| Error::io(Op::Rename, t.shown, e))?;
    }
    ctx.files.fetch_add(1, Ordering::Relaxed);
    ctx.bytes_written.fetch_add(m.size, Ordering::Relaxed);
    Ok(())
}

fn write_segments<R: Read>(
    ctx: &Ctx<'_>,
    rd: &mut tar::Reader<R>,
    m: &tar::Member,
    f: &File,
    shown: &Path,
) -> Result<()> {
    let whole = [(0, m.stored_size)];
    let map: &[(u64, u64)] = m.sparse.as_deref().unwrap_or(&whole);
    let mut buf = vec![0u8; m.stored_size.clamp(1, 1 << 20) as usize];
    let mut body = rd.body();
    for &(off, len) in map {
        let mut done = 0;
        while done < len {
            let want = (len - done).min(buf.len() as u64) as usize;
            let n = match body.read(&mut buf[..want]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
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
            f.write_all_at(&buf[..n], off + done)
                .map_err(|e| Error::io(Op::Write, shown, e))?;
            done += n as u64;
        }
    }
    let end = map.last().map_or(0, |&(o, l)| o + l);
    if m.size > end {
        f.set_len(m.size)
            .map_err(|e| Error::io(Op::Truncate, shown, e))?;
    }
    Ok(())
}
