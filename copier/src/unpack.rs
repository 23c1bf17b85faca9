//! Unpacking untrusted tar archives (tar, tar.gz, tar.zst) into a root,
//! in parallel, without ever writing outside it.
//!
//! # What stays outside
//!
//! Every name is checked before anything is done with it: one with a `..`
//! component anywhere is refused (the long names of PAX and GNU headers
//! included: the checked name is the one the entry ends up with). An
//! absolute name loses its leading slashes first, as GNU tar's do, and
//! lands beneath the root.
//!
//! What GNU tar and bsdtar read past (bytes after the end, a body on a
//! hard link, an ACL without a mask, ...; see the reader's
//! [`tar::QuirkKind`]) is read as GNU tar reads it, each with a notice
//! ([`NoticeKind::ArchiveQuirk`]) naming the member and what was done.
//! Directories on the way to an entry are opened beneath
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
//! larger body goes to a worker too, as it is read: the reader hands it
//! over in chunks through a short channel, so the writing (the costly
//! part) is a worker's while the reader reads on. A hard link whose target
//! is still queued waits until every queued file is written. Directory
//! metadata is applied last, deepest first, so that a read-only directory
//! does not stop its own contents.
//!
//! With one thread (`copy_threads = 1`) the reader does everything itself:
//! the serial unpack.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crossbeam_channel::Receiver;

use zinstall_archive::ahead::read_ahead;
use zinstall_archive::compress::{self, Compression, decompress, read_up_to};
use zinstall_archive::meta;
use zinstall_archive::names::{self, Name};
use zinstall_archive::tar::{self, TarError};
use zinstall_archive::{ArchiveKind, ArchiveMeta, ArchiveRefusal};

use crate::beneath::{Chain, Root, WalkFail};
use crate::cancel::Cancel;
use crate::descriptors::{Descriptors, Slot};
use crate::error::{Error, Met, Op, Result};
use crate::probes;
use crate::stats::{Notice, NoticeBoard, NoticeKind, Stats};
use crate::sys::posix::{Times, at, egid, euid};
use crate::sys::{self, XattrTarget};
use crate::tunables::Tunables;

mod survey;
pub use survey::{survey, survey_from};
mod layered;
mod paths;
mod read;

pub use layered::{Change, Whiteouts};

use crate::writeback::Flusher;
use paths::{NodeId, PathTree};
use read::read_all;

/// From a stream, bodies up to this size go to the pool in memory; larger
/// ones in chunks of this size as they are read. From a plain tar file
/// every body goes to the pool as a range of the file.
const SMALL: u64 = 1 << 20;
/// Chunks of a large body read ahead of its worker: with the one being
/// read and the one being written, the memory a large body holds.
const CHUNKS_AHEAD: usize = 4;
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
    /// Told how far through the archive file (or OCI blob) the unpack is,
    /// its length first ([`crate::Progress::begin`]).
    pub progress: Option<Arc<dyn crate::Progress>>,
    /// The caller flushes the root's filesystem once the unpack is done
    /// (an install, the provision cache): with `COPY_WRITEBACK=sync`
    /// ([`crate::Writeback`]) each file's data then starts back to the
    /// disk as soon as it is written, so that the flush waits only for
    /// the last files.
    pub durable: bool,
}

impl Default for UnpackOptions {
    fn default() -> Self {
        UnpackOptions {
            tunables: Tunables::default(),
            expect: None,
            allow_devices: false,
            max_bytes: zinstall_archive::tar::DEFAULT_MAX_TOTAL_BYTES,
            preserve_owner: None,
            cancel: None,
            pool: None,
            listener: None,
            whiteouts: Whiteouts::Off,
            progress: None,
            durable: false,
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

/// Unpacks the archive file `archive` (a tar, plain or compressed, told
/// by content: see [`compress`]) into the existing directory `root`;
/// what the decoder ignored after the stream's end is a notice.
pub fn unpack(
    archive: &Path,
    root: &Path,
    opts: &UnpackOptions,
) -> Result<UnpackReport> {
    let (f, compression) = open_archive(archive)?;
    if let Some(p) = &opts.progress {
        p.begin(f.metadata().ok().map(|m| m.len()));
    }
    if compression == Compression::None {
        // A plain tar file: the reader only parses headers and seeks over
        // bodies; workers copy each body from its range of the file in the
        // kernel, so the reader never becomes the bottleneck.
        let body_source =
            f.try_clone().map_err(|e| Error::io(Op::Open, archive, e))?;
        let f = crate::Metered::new(f, opts.progress.clone());
        let reader = tar::Reader::seekable(f, limits(opts))
            .map_err(|e| Error::io(Op::Read, archive, e))?;
        return run(reader, Some(body_source), archive, root, opts);
    }
    let f = crate::Metered::new(f, opts.progress.clone());
    let reader = decompress(f, compression)
        .map_err(|e| Error::io(Op::Read, archive, e))?;
    let ignored = reader.ignored();
    // Decompressed on a thread of its own: the reader parses and
    // dispatches while the next chunks are decoded.
    let mut report = std::thread::scope(|s| {
        let (ahead, _decoder) = read_ahead(s, DECOMPRESS_THREAD, reader)
            .map_err(|e| Error::io(Op::Read, archive, e))?;
        unpack_from(ahead, archive, root, opts)
    })
    .map_err(|e| blame_stream(e, archive, opts.max_bytes))?;
    report.notices.extend(
        ignored
            .take()
            .into_iter()
            .map(|i| Notice::stream(i, archive)),
    );
    Ok(report)
}

/// The name of the thread decompressing an archive or layer ahead of
/// its reader, as statemaps and `top -H` show it.
pub const DECOMPRESS_THREAD: &str = "decompress";

/// The error for `archive`, whose tar reader found it corrupt or
/// truncated (`e`): when `archive` is compressed and its stream is
/// itself corrupt or truncated (read again to its end, at most `limit`
/// bytes, as many as the unpack itself may read), the stream's fault at
/// the same member, since a stream decoded before its checksum is
/// reached gives the tar reader damaged headers; `e` otherwise.
fn blame_stream(e: Error, archive: &Path, limit: u64) -> Error {
    // Only what damaged data gives: a name or size refusal stands, and a
    // bomb refused on its sizes is not decoded again.
    let Error::Archive {
        entry,
        reason: ArchiveRefusal::Corrupt(_) | ArchiveRefusal::Truncated { .. },
        ..
    } = &e
    else {
        return e;
    };
    let Ok((f, c)) = open_archive(archive) else {
        return e;
    };
    if c == Compression::None {
        return e;
    }
    let checked = decompress(f, c)
        .and_then(|d| io::copy(&mut d.take(limit), &mut io::sink()));
    let reason = match checked {
        Err(fault) if fault.kind() == io::ErrorKind::UnexpectedEof => {
            ArchiveRefusal::Truncated {
                what: format!("compressed stream ({fault})"),
            }
        }
        Err(fault) if fault.raw_os_error().is_none() => {
            ArchiveRefusal::Corrupt(fault.to_string())
        }
        _ => return e,
    };
    Error::Archive {
        archive: archive.to_path_buf(),
        entry: entry.clone(),
        reason,
    }
}

/// Opens `archive` and tells its compression; one zinstall does not read
/// is refused, naming the command that converts it, before anything is
/// read as tar.
fn open_archive(archive: &Path) -> Result<(File, Compression)> {
    let mut f =
        File::open(archive).map_err(|e| Error::io(Op::Open, archive, e))?;
    crate::sys::advise_sequential(&f);
    let compression = compress::detect(&mut f)
        .map_err(|e| Error::io(Op::Read, archive, e))?;
    if let Some(reason) = compression.refusal(archive) {
        return Err(Error::Archive {
            archive: archive.to_path_buf(),
            entry: String::new(),
            reason,
        });
    }
    Ok((f, compression))
}

/// The reader's bounds for `opts`: declared sizes count against
/// `max_bytes` before anything is written.
fn limits(opts: &UnpackOptions) -> tar::Limits {
    tar::Limits {
        max_total_bytes: opts.max_bytes,
        ..tar::Limits::default()
    }
}

/// A reader's quirk as a notice: what was done, and the member (or, for
/// the archive as a whole, the archive and the offset).
fn quirk_notice(archive: &Path, q: tar::Quirk) -> (NoticeKind, PathBuf) {
    if q.member.is_empty() {
        (
            NoticeKind::ArchiveQuirk(format!(
                "at offset {}: {}",
                q.offset, q.kind
            )),
            archive.to_path_buf(),
        )
    } else {
        (
            NoticeKind::ArchiveQuirk(q.kind.to_string()),
            PathBuf::from(q.member),
        )
    }
}

/// A member name without its leading slashes (noticed, once counted per
/// member, as GNU tar warns once per archive): beneath the root, as GNU
/// tar extracts it. `what` is `member names` or `hard link targets`.
fn relative<'a>(
    raw: &'a [u8],
    what: &str,
    notice: impl FnOnce(NoticeKind, &Path),
) -> &'a [u8] {
    let (rest, stripped) = names::strip_leading_slashes(raw);
    if stripped {
        notice(
            NoticeKind::ArchiveQuirk(format!(
                "leading `/' removed from {what}"
            )),
            Path::new(&names::show(raw)),
        );
    }
    rest
}

/// What an archive with no member at all does: GNU tar extracts nothing
/// and succeeds, and so does the unpack, saying so. A zinstall archive
/// must carry its `zinstall.json`.
const NO_MEMBERS: &str = "archive has no members: nothing unpacked";

/// The most `zinstall.json` may hold.
const MAX_META: u64 = 64 << 10;

/// What a zinstall archive says it is, from its first member, reading
/// nothing more; `None` if the first member is not `zinstall.json`.
pub fn peek_kind(archive: &Path) -> Result<Option<ArchiveKind>> {
    peek(archive).map_err(|e| {
        blame_stream(e, archive, zinstall_archive::tar::DEFAULT_MAX_TOTAL_BYTES)
    })
}

fn peek(archive: &Path) -> Result<Option<ArchiveKind>> {
    let (f, compression) = open_archive(archive)?;
    let reader = decompress(f, compression)
        .map_err(|e| Error::io(Op::Read, archive, e))?;
    let refuse = |entry: &str, reason| Error::Archive {
        archive: archive.to_path_buf(),
        entry: entry.to_string(),
        reason,
    };
    let mut rd = tar::Reader::new(reader, tar::Limits::default());
    let Some(m) = rd.next().map_err(|e| Error::tar(archive, e))? else {
        // No members (Docker's empty layer is 1,024 zero bytes): a plain
        // tarball, which unpacks to nothing, as GNU tar extracts it.
        return Ok(None);
    };
    let (raw, _) = names::strip_leading_slashes(&m.name);
    let name =
        names::check(raw).map_err(|r| refuse(&names::show(&m.name), r))?;
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
        spare: Spare::default(),
        pending: Gate::default(),
        temp: AtomicU64::new(0),
        bytes_written: AtomicU64::new(0),
        files: AtomicU64::new(0),
        body_source,
        flusher: match opts.tunables.copy_writeback.early(opts.durable) {
            true => Some(
                root_dir
                    .fd()
                    .try_clone()
                    .and_then(|fd| Flusher::start(File::from(fd)))
                    .map_err(|e| Error::io(Op::Sync, root, e))?,
            ),
            false => None,
        },
    };
    let batch_size = opts.tunables.copy_batch.max(1);
    // The pool's, shared with its other runs, or the unpack's own.
    let fds = match &opts.pool {
        Some(pool) => pool.descriptors().clone(),
        None => Descriptors::for_threads(opts.tunables.copy_threads, 1),
    };
    let reader_result = if let Some(pool) = &opts.pool {
        let in_flight = crate::pool::InFlight::default();
        let cap = 2 * pool.threads();
        let ctx = &ctx;
        let in_flight = &in_flight;
        pool.scope(|scope| {
            let send = move |batch: Vec<FileJob>| {
                in_flight.enter(cap);
                scope.spawn(move |_| {
                    ctx.write_batch(batch);
                    in_flight.leave();
                });
                true
            };
            let batcher = Batcher {
                tx: Box::new(send),
                batch: Vec::new(),
                held: 0,
                dirs: 0,
                size: batch_size,
                fds: fds.clone(),
                stopped: Box::new(|| ctx.stopped()),
            };
            read_all(ctx, input, Some(batcher))
        })
    } else {
        unpack_with_own_workers(&ctx, input, batch_size, &fds)
    };
    let outcome = match reader_result {
        Ok(o) => o,
        Err(e) => {
            ctx.fail(e);
            ReadOutcome::default()
        }
    };
    // Every file is written: the flush under way is waited for, and one
    // that failed fails the unpack (the caller's final flush might not
    // see it again).
    if let Some(Err(e)) = ctx.flusher.as_ref().map(Flusher::finish) {
        ctx.fail(Error::io(Op::Sync, root, e));
    }
    if let Some(e) = ctx.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    {
        return Err(e);
    }
    if ctx.cancelled() {
        return Err(Error::Cancelled {
            path: archive.to_path_buf(),
        });
    }
    // Directory metadata last, children before their parents: deepest
    // first, and in the archive's order within a depth, so neighbours
    // share their parents' open descriptors.
    let DirList { tree, mut list } = outcome.dirs;
    list.sort_by_key(|(id, _)| std::cmp::Reverse(tree.depth(*id)));
    let mut chain = Chain::new(Arc::clone(&ctx.root_fd));
    for (id, m) in &list {
        ctx.finish_dir(&mut chain, &tree.parts(*id), m)?;
    }
    let mut stats = outcome.stats;
    stats.fd_limit = fds.limit();
    stats.fd_budget = fds.total() as u64;
    stats.fd_peak = fds.peak() as u64;
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
    fds: &Descriptors,
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
                        ctx.write_batch(batch);
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
            dirs: 0,
            size: batch_size,
            fds: fds.clone(),
            stopped: Box::new(|| ctx.stopped()),
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
    /// The budget's slot for `dir`, on the first job in a batch to hold
    /// it: given back when the batch is done.
    hold: Option<Slot>,
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
    /// Directories whose descriptors the jobs in `batch` hold.
    dirs: usize,
    size: usize,
    /// The descriptor budget: each directory a batch holds takes one
    /// slot, so the batches in flight hold no more than it (a directory
    /// in two batches counts twice, on the safe side).
    fds: Descriptors,
    /// Whether the unpack has stopped.
    stopped: Box<dyn Fn() -> bool + 'a>,
}

/// A batch is sent once its jobs hold this many directories' descriptors:
/// files one per directory down a deep tree would otherwise pin a
/// descriptor each until the batch filled.
const BATCH_DIRS: usize = 8;

impl Batcher<'_> {
    /// Queues `job`; false when the workers are gone.
    fn push(&mut self, mut job: FileJob) -> bool {
        self.held += job.body.held();
        if self
            .batch
            .last()
            .is_none_or(|last| !Arc::ptr_eq(&last.dir, &job.dir))
        {
            self.dirs += 1;
            match self.slot() {
                Some(s) => job.hold = Some(s),
                None => return false,
            }
        }
        self.batch.push(job);
        // Bodies waiting here count against the byte budget; sending at a
        // quarter of it keeps the reader from waiting on bytes it holds.
        if self.batch.len() >= self.size
            || self.held >= BUDGET / 4
            || self.dirs >= BATCH_DIRS
        {
            return self.flush();
        }
        true
    }

    /// A slot for a directory joining the batch. While the budget is
    /// spent the reader sends what it holds and waits for the workers to
    /// give slots back (they never wait for one, so they always can);
    /// `None` once the unpack stopped or the workers are gone.
    fn slot(&mut self) -> Option<Slot> {
        if let Some(s) = self.fds.try_take(1) {
            return Some(s);
        }
        if !self.flush() {
            return None;
        }
        loop {
            if (self.stopped)() {
                return None;
            }
            if let Some(s) = self.fds.try_take(1) {
                return Some(s);
            }
            self.fds.wait(std::time::Duration::from_millis(10));
        }
    }

    /// Sends what is queued; false when the workers are gone.
    fn flush(&mut self) -> bool {
        if self.batch.is_empty() {
            return true;
        }
        self.held = 0;
        self.dirs = 0;
        (self.tx)(std::mem::take(&mut self.batch))
    }
}

/// Where a file's bytes are.
enum Body {
    /// Read by the reader from a stream, into a buffer of [`Spare`]'s
    /// (whose whole capacity the budget counts).
    Bytes(Vec<u8>),
    /// Ranges of the plain tar file: `(offset in the file being written,
    /// length, offset in the archive)`, and the file's real size (larger
    /// than the ranges when it ends in a hole).
    At {
        segments: Vec<(u64, u64, u64)>,
        size: u64,
    },
    /// Read by the reader while the worker writes it: `size` bytes in
    /// chunks, in order. Fewer means the reader stopped (and says why).
    Chunks { rx: Receiver<Vec<u8>>, size: u64 },
}

impl Body {
    fn len(&self) -> u64 {
        match self {
            Body::Bytes(b) => b.len() as u64,
            Body::At { size, .. } | Body::Chunks { size, .. } => *size,
        }
    }

    /// Bytes of the in-memory budget this body holds (a chunked body's
    /// are bounded by its channel instead: its reader waits on its worker
    /// alone, never on the budget other jobs hold).
    fn held(&self) -> u64 {
        match self {
            Body::Bytes(b) => Spare::class(b.len()) as u64,
            Body::At { .. } | Body::Chunks { .. } => 0,
        }
    }
}

/// Body buffers the workers are done with, for the reader to fill again:
/// a fresh one per body costs its pages' faults and zeroing, more than
/// the copy into it. Buffers come in size classes (powers of two from
/// 4 KiB to [`SMALL`]), so any spare one of a class fits a body of it;
/// what is kept is bounded by the byte budget.
#[derive(Default)]
struct Spare {
    kept: Mutex<(Vec<Vec<Vec<u8>>>, u64)>,
}

impl Spare {
    const LEAST: usize = 4 << 10;

    /// The capacity of the buffer a body of `len` bytes is read into.
    fn class(len: usize) -> usize {
        match len {
            0 => 0,
            _ => len.max(Self::LEAST).next_power_of_two(),
        }
    }

    fn index(class: usize) -> usize {
        (class.trailing_zeros() - Self::LEAST.trailing_zeros()) as usize
    }

    /// A buffer of `len`'s class, holding what it last held: the caller
    /// sizes it and reads over all of it.
    fn take(&self, len: usize) -> Vec<u8> {
        let class = Self::class(len);
        if class == 0 {
            return Vec::new();
        }
        let mut g = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let (lists, bytes) = &mut *g;
        if let Some(b) = lists.get_mut(Self::index(class)).and_then(Vec::pop) {
            *bytes -= class as u64;
            return b;
        }
        drop(g);
        Vec::with_capacity(class)
    }

    /// Keeps `b` for another body, within the budget. Its bytes stay:
    /// the next body is read over them, and `resize` then zeroes only
    /// what it adds past them.
    fn give(&self, b: Vec<u8>) {
        let class = b.capacity();
        if !class.is_power_of_two()
            || !(Self::LEAST..=SMALL as usize).contains(&class)
        {
            return;
        }
        let i = Self::index(class);
        let mut g = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let (lists, bytes) = &mut *g;
        // Full: room is made in the class holding the most, so what is
        // kept follows the sizes being read now.
        while *bytes + class as u64 > BUDGET {
            let most = (0..lists.len())
                .filter(|&j| j != i)
                .max_by_key(|&j| lists[j].len() << j);
            match most.and_then(|j| lists[j].pop()) {
                Some(dropped) => *bytes -= dropped.capacity() as u64,
                None => return,
            }
        }
        if lists.len() <= i {
            lists.resize_with(i + 1, Vec::new);
        }
        lists[i].push(b);
        *bytes += class as u64;
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
    spare: Spare,
    pending: Gate,
    temp: AtomicU64,
    bytes_written: AtomicU64,
    files: AtomicU64,
    /// The plain tar file bodies are copied from, when seekable.
    body_source: Option<File>,
    /// Flushes the root's filesystem as the unpack goes, when it will be
    /// flushed at its end ([`crate::Writeback`]).
    flusher: Option<Flusher>,
}

#[derive(Default)]
struct ReadOutcome {
    stats: Stats,
    meta: Option<ArchiveMeta>,
    dirs: DirList,
    changes: Vec<Change>,
}

/// The directory entries whose metadata is applied at the end, each by
/// its node in a tree of their paths: a constant per directory at any
/// depth, where a list of full paths grows with the square of it.
struct DirList {
    tree: PathTree,
    list: Vec<(NodeId, Meta)>,
}

impl Default for DirList {
    fn default() -> Self {
        DirList {
            tree: PathTree::new(),
            list: Vec::new(),
        }
    }
}

impl DirList {
    fn push(&mut self, parts: &[CString], meta: Meta) {
        let id = self.tree.intern(parts);
        self.list.push((id, meta));
    }
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

    /// The reader's quirks since the last call, each a notice.
    fn reader_quirks<R: Read>(&self, rd: &mut tar::Reader<R>) {
        for q in rd.take_quirks() {
            let (kind, path) = quirk_notice(self.archive, q);
            self.notice(kind, &path);
        }
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
    /// Writes a batch's files; its descriptor slots are given back once
    /// all of them are done (its later jobs hold the directories too).
    fn write_batch(&self, batch: Vec<FileJob>) {
        let mut holds = Vec::new();
        for mut job in batch {
            holds.extend(job.hold.take());
            self.write_job(job);
        }
    }

    fn write_job(&self, job: FileJob) {
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
        let dir = job.dir.as_raw_fd();
        let (name, temp) = if job.replace {
            (self.temp_name(), true)
        } else {
            (job.leaf.clone(), false)
        };
        let f = at::create_file(dir, &name)
            .map_err(|e| Error::io(Op::Create, &job.shown, e))?;
        let r = match &job.body {
            Body::Bytes(data) => write_data(&f, data, 0)
                .and_then(|end| {
                    // Ends in zeros left as a hole: the length still.
                    if end < data.len() as u64 {
                        f.set_len(data.len() as u64)?;
                    }
                    Ok(true)
                })
                .map_err(|e| Error::io(Op::Write, &job.shown, e)),
            Body::Chunks { rx, size } => {
                write_chunks(&f, rx, *size, &self.spare)
                    .map_err(|e| Error::io(Op::Write, &job.shown, e))
            }
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
                })
                .map(|()| true),
        }
        .and_then(|whole| match whole {
            true => self.finish_fd(&f, &job.meta, &job.shown).map(|()| true),
            false => Ok(false),
        });
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
            at::rename(dir, &name, &job.leaf).map_err(|e| {
                let _already_failing = at::unlink(dir, &name, false);
                Error::io(Op::Rename, &job.shown, e)
            })?;
        }
        Ok(true)
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
        parts: &[CString],
        m: &Meta,
    ) -> Result<()> {
        let entry = Name::joined(parts).to_string_lossy().into_owned();
        let Some((leaf, parent)) = parts.split_last() else {
            // The archive's entry for the root itself.
            let top = self
                .root_fd
                .try_clone()
                .map_err(|e| Error::io(Op::Open, self.root, e))?;
            return self.finish_fd(&File::from(top), m, self.root);
        };
        let parent = self.open_dir(chain, parent, &entry, false)?;
        let shown = self.shown(parts);
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

/// Blocks of zeros this size, at this alignment in the file, are left as
/// holes: the usual filesystem block.
const HOLE_BLOCK: u64 = 4096;

/// Writes `data` at offset `at` of `f`, leaving every whole block of
/// zeros (aligned in the file) unwritten: a hole once the file's length
/// is set. A member read from a stream is written so, sparse-declared or
/// not, so that a small compressed archive declaring a huge file of
/// zeros takes no space: what it reads as is the same. Returns the
/// offset after the last byte written (`at` if none was).
fn write_data(f: &File, data: &[u8], at: u64) -> io::Result<u64> {
    let mut run: Option<usize> = None;
    let mut written = at;
    let mut i = 0usize;
    while i < data.len() {
        let pos = at + i as u64;
        let step = (HOLE_BLOCK - pos % HOLE_BLOCK) as usize;
        let end = (i + step).min(data.len());
        let whole = end - i == HOLE_BLOCK as usize;
        if whole && is_zero(&data[i..end]) {
            if let Some(s) = run.take() {
                f.write_all_at(&data[s..i], at + s as u64)?;
                written = at + i as u64;
            }
        } else if run.is_none() {
            run = Some(i);
        }
        i = end;
    }
    if let Some(s) = run {
        f.write_all_at(&data[s..], at + s as u64)?;
        written = at + data.len() as u64;
    }
    Ok(written)
}

fn is_zero(block: &[u8]) -> bool {
    // A comparison with a block of zeros is a memcmp: vectorised by libc
    // whatever the build.
    static ZEROS: [u8; HOLE_BLOCK as usize] = [0; HOLE_BLOCK as usize];
    block == &ZEROS[..block.len()]
}

#[cfg(test)]
mod test {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// Whole aligned blocks of zeros are not written; the file reads the
    /// same once its length is set, and the end returned says whether
    /// it must be.
    #[test]
    fn zero_blocks_are_left_as_holes() {
        let d = zinstall_testkit::Tmp::new();
        let p = d.path().join("f");
        let mut data = vec![7u8; 100];
        data.resize(100 + 3 * 4096 + 4096 - 100, 0);
        data.extend_from_slice(&[9u8; 50]);
        data.resize(7 * 4096, 0);
        let f = File::create(&p).unwrap();
        let end = write_data(&f, &data, 0).unwrap();
        assert_eq!(end, 5 * 4096);
        f.set_len(data.len() as u64).unwrap();
        drop(f);
        assert_eq!(fs_read(&p), data);
        let blocks = std::fs::metadata(&p).unwrap().blocks() * 512;
        assert!(blocks <= 3 * 4096, "{blocks} bytes allocated");
        // Written from an offset that is not a block boundary: the
        // partial first block is written whatever it holds.
        let f = File::create(&p).unwrap();
        assert_eq!(write_data(&f, &[0u8; 5000], 100).unwrap(), 5100);
        // Nothing but zeros: nothing written.
        assert_eq!(write_data(&f, &[0u8; 8192], 8192).unwrap(), 8192);
    }

    fn fs_read(p: &Path) -> Vec<u8> {
        std::fs::read(p).unwrap()
    }
}
