//! The entry points: an archive file or a stream unpacked, or dry-run.
//! The shared state is made, the reader run with the pool's workers or
//! the unpack's own (or none), or recording, directories finished at the
//! end, and the report made.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_channel::Receiver;

use zinstall_archive::ahead::read_ahead;
use zinstall_archive::compress::{
    self, Compression, compression_of, decompress, read_up_to,
};
use zinstall_archive::tar;

use super::batch::Batcher;
use super::ctx::{Ctx, DirList, ReadOutcome};
use super::job::FileJob;
use super::memory::{MemTree, ObjectSink, ObjectsTo};
use super::options::{UnpackOptions, UnpackReport};
use super::read::{Dest, read_all};
use super::source::{blame_stream, limits, open_archive};
use crate::beneath::{Chain, Root};
use crate::descriptors::Descriptors;
use crate::error::{Error, Op, Result};
use crate::stats::Notice;
use crate::writeback::Flusher;

/// Reads `archive` to its end as [`unpack`] would into `root`, through
/// the same reader and its checks, making nothing: the
/// [`Listener`](crate::Listener) of `opts` hears of each member where the
/// unpack would make it, and the report counts what would be made. What
/// depends on the tree being built (what `root` holds, a member below a
/// symlink an earlier member made, a file over a directory, a hard
/// link's target being there) is found by the unpack alone.
pub fn dry_run(
    archive: &Path,
    root: &Path,
    opts: &UnpackOptions,
) -> Result<UnpackReport> {
    let mut f = zinstall_core::foreign::open(
        archive,
        zinstall_core::foreign::Follow::Yes,
    )
    .map_err(|e| Error::io(Op::Open, archive, e.into()))?;
    let mut head = [0u8; compress::MAGIC_LEN];
    let n = read_up_to(&mut f, &mut head)
        .map_err(|e| Error::io(Op::Read, archive, e))?;
    f.seek(SeekFrom::Start(0))
        .map_err(|e| Error::io(Op::Read, archive, e))?;
    let reader = decompress(f, compression_of(&head[..n]))
        .map_err(|e| Error::io(Op::Read, archive, e))?;
    dry_run_from(reader, archive, root, opts)
}

/// [`dry_run`] of a tar stream already decompressed (an OCI layer read
/// through its digest checks); `archive` names it in errors. With
/// `opts.whiteouts` other than `Off`, OCI whiteouts are removals, not
/// entries: they are checked and not counted.
pub fn dry_run_from(
    reader: impl Read,
    archive: &Path,
    root: &Path,
    opts: &UnpackOptions,
) -> Result<UnpackReport> {
    let ctx = Ctx::new(archive, root, opts);
    let rd = tar::Reader::new(reader, limits(opts));
    let outcome = read_all(&ctx, rd, Dest::Record)?;
    if ctx.cancelled() {
        return Err(Error::Cancelled {
            path: archive.to_path_buf(),
        });
    }
    Ok(UnpackReport {
        stats: outcome.stats,
        meta: outcome.meta,
        notices: ctx.notices.into_vec(),
        changes: Vec::new(),
        sha256: None,
    })
}

/// Unpacks the archive file `archive` (a tar, plain or compressed, told
/// by content: see [`compress`]) into the existing directory `root`;
/// what the decoder ignored after the stream's end is a notice.
///
/// [`compress`]: zinstall_archive::compress
pub fn unpack(
    archive: &Path,
    root: &Path,
    opts: &UnpackOptions,
) -> Result<UnpackReport> {
    let (f, compression) = open_archive(archive)?;
    if !opts.digest {
        return unpack_open(f, compression, archive, root, opts);
    }
    // Read once, in order, hashed on its way to the tar reader. A plain
    // tar's bodies then come through the reader too rather than being
    // copied in the kernel: they are read for the hash anyway.
    let rest = f.try_clone().map_err(|e| Error::io(Op::Open, archive, e))?;
    if let Some(p) = &opts.progress {
        p.begin(f.metadata().ok().map(|m| m.len()));
    }
    let hashed = Hashed::new(f);
    let (hasher, read) = (Arc::clone(&hashed.hasher), Arc::clone(&hashed.read));
    let mut report = unpack_stream(
        crate::Metered::new(hashed, opts.progress.clone()),
        compression,
        archive,
        root,
        opts,
        Onto::Root,
    )?;
    // What the decoder left unread after the stream's end, at the file's
    // own offsets.
    let mut h = std::mem::replace(
        &mut *hasher.lock().unwrap_or_else(|p| p.into_inner()),
        zinstall_oci::Hasher::new(zinstall_oci::Algorithm::Sha256),
    );
    hash_from(&rest, read.load(Ordering::Relaxed), &mut h)
        .map_err(|e| Error::io(Op::Read, archive, e))?;
    report.sha256 = Some(h.finish().to_string());
    Ok(report)
}

/// A file read through to the tar reader, hashed as it goes.
struct Hashed {
    f: File,
    hasher: Arc<Mutex<zinstall_oci::Hasher>>,
    read: Arc<AtomicU64>,
}

impl Hashed {
    fn new(f: File) -> Hashed {
        Hashed {
            f,
            hasher: Arc::new(Mutex::new(zinstall_oci::Hasher::new(
                zinstall_oci::Algorithm::Sha256,
            ))),
            read: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl Read for Hashed {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.f.read(buf)?;
        self.hasher
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .update(&buf[..n]);
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Adds to `h` what `f` holds from `at` to its end.
fn hash_from(
    f: &File,
    mut at: u64,
    h: &mut zinstall_oci::Hasher,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = match f.read_at(&mut buf, at) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.update(&buf[..n]);
        at += n as u64;
    }
}

/// [`unpack`] of the archive open as `f`.
fn unpack_open(
    f: File,
    compression: Compression,
    archive: &Path,
    root: &Path,
    opts: &UnpackOptions,
) -> Result<UnpackReport> {
    if let Some(p) = &opts.progress {
        p.begin(f.metadata().ok().map(|m| m.len()));
    }
    // Bodies hashed by a store's digest are read anyway: through the
    // reader, in large reads, rather than copied and read back.
    let hashed = opts.contents.as_ref().is_some_and(|c| c.takes_objects());
    if compression == Compression::None && !hashed {
        // A plain tar file: the reader only parses headers and seeks over
        // bodies; workers copy each body from its range of the file in the
        // kernel, so the reader never becomes the bottleneck.
        let body_source =
            f.try_clone().map_err(|e| Error::io(Op::Open, archive, e))?;
        let f = crate::Metered::new(f, opts.progress.clone());
        let reader = tar::Reader::seekable(f, limits(opts))
            .map_err(|e| Error::io(Op::Read, archive, e))?;
        return run(reader, Some(body_source), archive, root, opts, Onto::Root);
    }
    unpack_stream(
        crate::Metered::new(f, opts.progress.clone()),
        compression,
        archive,
        root,
        opts,
        Onto::Root,
    )
}

/// Unpacks what `input` reads, decompressed as `compression` says, on a
/// thread of its own ahead of the tar reader.
fn unpack_stream(
    input: impl Read + Send,
    compression: Compression,
    archive: &Path,
    root: &Path,
    opts: &UnpackOptions,
    onto: Onto<'_>,
) -> Result<UnpackReport> {
    let reader = decompress(input, compression)
        .map_err(|e| Error::io(Op::Read, archive, e))?;
    let ignored = reader.ignored();
    // Decompressed on a thread of its own: the reader parses and
    // dispatches while the next chunks are decoded.
    let mut report = std::thread::scope(|s| {
        let (ahead, _decoder) = read_ahead(s, DECOMPRESS_THREAD, reader)
            .map_err(|e| Error::io(Op::Read, archive, e))?;
        let input = tar::Reader::new(ahead, limits(opts));
        run(input, None, archive, root, opts, onto)
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
        Onto::Root,
    )
}

/// Where [`run`] makes what it reads.
enum Onto<'t> {
    /// Beneath the root.
    Root,
    /// Into `tree`, bodies into `sink`.
    Memory {
        tree: &'t mut MemTree,
        sink: &'t dyn ObjectSink,
    },
}

/// Unpacks `archive` into `tree` rather than beneath a root: each member
/// made a node as the unpack beneath a root would make it (`root` names
/// where, in messages), each regular file's body stored by `sink`
/// (written by the workers, hashed as written, named by its digest;
/// small ones kept in the node), the directories' metadata applied last.
/// The archive is read as a stream, whatever it is.
///
/// Only what the kernel would keep as given is modelled, and ACLs, which
/// the kernel is asked about ([`ObjectSink::scratch`]): as root (owners
/// kept), whiteouts applied (never recorded), and no member made in a
/// directory with a default ACL, with a security attribute other than a
/// file capability, a sparse body, or a time or name some filesystem
/// would refuse or clamp. Anything else fails with
/// [`Error::Unmodeled`] naming the member, and the caller unpacks into a
/// tree instead; objects already stored stay in the store.
pub fn unpack_to_memory(
    archive: &Path,
    root: &Path,
    tree: &mut MemTree,
    sink: &dyn ObjectSink,
    opts: &UnpackOptions,
) -> Result<UnpackReport> {
    in_memory_allowed(archive, opts)?;
    let (f, compression) = open_archive(archive)?;
    if let Some(p) = &opts.progress {
        p.begin(f.metadata().ok().map(|m| m.len()));
    }
    unpack_stream(
        crate::Metered::new(f, opts.progress.clone()),
        compression,
        archive,
        root,
        opts,
        Onto::Memory { tree, sink },
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
    onto: Onto<'_>,
) -> Result<UnpackReport> {
    opts.tunables.validate()?;
    let (root_dir, ctx, into) = match onto {
        Onto::Root => {
            // The root's own last component is not followed either.
            let root_dir = Root::open(root)?;
            let ctx = context(archive, root, &root_dir, opts, body_source)?;
            let into = Into::Root(Arc::clone(root_dir.fd()));
            (Some(root_dir), ctx, into)
        }
        Onto::Memory { tree, sink } => {
            let mut ctx = Ctx::new(archive, root, opts);
            if opts.tunables.copy_writeback.early(opts.durable)
                && let Some(fs) = sink.filesystem()
            {
                ctx.flusher = Some(
                    Flusher::start(fs)
                        .map_err(|e| Error::io(Op::Sync, root, e))?,
                );
            }
            ctx.objects = Some(ObjectsTo {
                sink,
                hasher: sink.hasher(),
                slots: tree.slots(),
            });
            (None, ctx, Into::Memory(tree))
        }
    };
    let batch_size = opts.tunables.copy_batch.max(1);
    // The pool's, shared with its other runs, or the unpack's own.
    let fds = match &opts.pool {
        Some(pool) => pool.descriptors().clone(),
        None => Descriptors::for_threads(opts.tunables.copy_threads, 1),
    };
    let reader_result = if let Some(pool) = &opts.pool {
        unpack_on_pool(&ctx, pool, input, into, batch_size, &fds)
    } else {
        unpack_with_own_workers(&ctx, input, into, batch_size, &fds)
    };
    let outcome = match reader_result {
        Ok(o) => o,
        Err(e) => {
            ctx.fail(e);
            ReadOutcome::default()
        }
    };
    finish(ctx, root_dir.as_ref(), outcome, &fds)
}

/// [`unpack_to_memory`] of a tar stream read from `reader` (`archive`
/// names it): an OCI layer's, checked as it is read
/// ([`crate::oci::unpack_layer_to_memory`]). With
/// [`Whiteouts::Apply`](super::Whiteouts::Apply) its whiteouts remove
/// what lower layers left in `tree`, as beneath a root.
pub fn unpack_from_to_memory(
    reader: impl Read,
    archive: &Path,
    root: &Path,
    tree: &mut MemTree,
    sink: &dyn ObjectSink,
    opts: &UnpackOptions,
) -> Result<UnpackReport> {
    in_memory_allowed(archive, opts)?;
    let input = tar::Reader::new(reader, limits(opts));
    run(
        input,
        None,
        archive,
        root,
        opts,
        Onto::Memory { tree, sink },
    )
}

/// Refuses, as [`Error::Unmodeled`], an unpack into memory of what only
/// the kernel decides: an unpack not as root (or not keeping owners), or
/// a layer recorded rather than applied.
fn in_memory_allowed(archive: &Path, opts: &UnpackOptions) -> Result<()> {
    let unmodeled = |why: &str| Error::Unmodeled {
        archive: archive.to_path_buf(),
        entry: String::new(),
        why: why.into(),
    };
    if opts.whiteouts == super::Whiteouts::Record {
        return Err(unmodeled("a layer whose whiteouts are recorded"));
    }
    let is_root = crate::sys::posix::euid() == 0;
    if !is_root || !opts.preserve_owner.unwrap_or(is_root) {
        return Err(unmodeled(
            "an unpack whose owners and attributes the kernel decides \
             (not as root, or owners not kept)",
        ));
    }
    Ok(())
}

/// What the reader's loop makes its members in.
enum Into<'t> {
    Root(Arc<OwnedFd>),
    Memory(&'t mut MemTree),
}

impl<'t> Into<'t> {
    fn dest(self, pool: Option<Batcher<'t>>) -> Dest<'t> {
        match self {
            Into::Root(root) => Dest::Tree { root, pool },
            Into::Memory(tree) => Dest::Memory { tree, pool },
        }
    }
}

/// The unpack's shared state, with a flusher on the root when files are
/// flushed as they are written.
fn context<'a>(
    archive: &'a Path,
    root: &'a Path,
    root_dir: &Root,
    opts: &'a UnpackOptions,
    body_source: Option<File>,
) -> Result<Ctx<'a>> {
    Ok(Ctx {
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
        ..Ctx::new(archive, root, opts)
    })
}

/// Reads the archive in this thread, the pool's threads writing the
/// files; at most two batches a thread are in flight.
fn unpack_on_pool<R: Read>(
    ctx: &Ctx<'_>,
    pool: &crate::Pool,
    input: tar::Reader<R>,
    into: Into<'_>,
    batch_size: usize,
    fds: &Descriptors,
) -> Result<ReadOutcome> {
    let in_flight = crate::pool::InFlight::default();
    let cap = 2 * pool.threads();
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
        let batcher = Batcher::new(
            Box::new(send),
            batch_size,
            fds,
            Box::new(|| ctx.stopped()),
        );
        read_all(ctx, input, into.dest(Some(batcher)))
    })
}

/// After the read: waits for the flush, takes the first error, then
/// sets the directories' metadata and counts what was done.
fn finish(
    ctx: Ctx<'_>,
    root_dir: Option<&Root>,
    outcome: ReadOutcome,
    fds: &Descriptors,
) -> Result<UnpackReport> {
    let (archive, root) = (ctx.archive, ctx.root);
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
    if let Some(root_dir) = root_dir {
        let mut chain = Chain::new(Arc::clone(root_dir.fd()));
        for (id, m) in &list {
            ctx.finish_dir(root_dir.fd(), &mut chain, &tree.parts(*id), m)?;
        }
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
        sha256: None,
    })
}

/// Reads the archive in this thread with `copy_threads` workers of the
/// unpack's own writing the files (none: the reader writes them).
fn unpack_with_own_workers<R: Read>(
    ctx: &Ctx<'_>,
    input: tar::Reader<R>,
    into: Into<'_>,
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
        let pool = (workers > 0).then(|| {
            Batcher::new(
                Box::new(move |batch| tx.send(batch).is_ok()),
                batch_size,
                fds,
                Box::new(|| ctx.stopped()),
            )
        });
        read_all(ctx, input, into.dest(pool))
    })
}
