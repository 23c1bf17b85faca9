//! The engine: walker threads, a bounded queue of batches, a pool of
//! workers.
//!
//! ```text
//!  walk-0 .. walk-W-1                  copy-0 .. copy-N-1
//! ┌────────────────┐ Vec<Job> × BATCH ┌───────────────────────────┐
//! │ walker: pop or │ ───────────────▶ │ worker: open, fstat, copy │
//! │ steal a dir,   │ bounded(2 × N)   │ data, chown, xattrs,      │
//! │ mkdir, readdir │  (one queue)     │ chmod, times              │
//! └────────────────┘                  └───────────────────────────┘
//!   ▲ push subdirs │ holds 1 on each dir it reads │ releases 1 per job
//!   └──────────────┘                               ▼
//!   DirNode { name, parent, pending } ── 0 ──▶ directory metadata applied
//!
//!   descriptor budget: a walker takes 2 per directory it opens (waiting
//!   while it is spent); they come back when nothing holds the directory
//! ```
//!
//! Invariants:
//! * The source is resolved once, when the run starts ([`source`]): the
//!   directory holding it is opened (beneath
//!   [`Plan::source_within`]'s root, following no symlink, when there is
//!   one) and everything read of the source after that — its `lstat`,
//!   the top directory, a single file, a dry run — goes through that
//!   descriptor and a single name, then through descriptors of what was
//!   opened from it. The source's path is text for messages only; it is
//!   never resolved again, so a directory swapped for a symlink
//!   meanwhile cannot redirect a read.
//! * A directory exists before any job inside it is queued: the walker
//!   that pops it creates it (mode 0700, so that its owner can fill it
//!   whatever its final mode) and opens it, beneath its parent's
//!   descriptor, before it reads the directory's entries.
//! * A directory's own metadata is applied after everything inside it is
//!   done (see [`dirs`]), so a 0555 directory is filled before it becomes
//!   0555 and its copied mtime is not clobbered by later creations.
//! * The walkers do no per-file system call beyond what readdir gives;
//!   opening (relative to the source directory's descriptor), `fstat` and
//!   everything else happens in the workers, in parallel. Hard links are
//!   found there too (see [`inodes`]): the first name a worker claims is
//!   copied, whichever walker found it and in whatever order.
//! * Descriptors: a walker takes two slots of the run's descriptor
//!   budget ([`crate::descriptors`]: the pool's, shared by every run on
//!   it, or the run's own) before it opens a directory and its
//!   destination, and the slots go back when both are closed: when the
//!   walker has read it, its queued jobs are done and its queued
//!   subdirectories have been taken. A queued directory holds no
//!   descriptor of its own, only a count on its parent's node, which
//!   keeps the parent pinned open until its last queued subdirectory is
//!   taken; a node keeps none otherwise (see [`node`]), so a deep chain
//!   costs none per level. A pinned directory may be let go of when the
//!   budget is spent (oldest first); its subdirectories then reopen it
//!   beneath its nearest ancestor still open (the top always is), checked
//!   to be the directory recorded. A hard link's first directory is not
//!   held for the later names either: they reopen it from its node. Every
//!   other descriptor is open for a moment in one thread (a job's files,
//!   a finished directory's `..`, such a reopening) and comes out of the
//!   reserve the budget leaves below the limit. `EMFILE` or `ENFILE`,
//!   should another part of the process take what the budget left, is
//!   waited out and the open retried once descriptors are given back,
//!   never reported.
//! * Waiting for descriptors cannot deadlock. Only walkers wait for the
//!   budget, and a waiting walker holds no descriptor and nothing the
//!   workers need: it takes its slots before it takes its parent's
//!   descriptors, and hands over the batch it was filling before it
//!   waits. Everything else that holds descriptors gives them back
//!   without waiting for the budget: workers never wait for it (their
//!   descriptors are in the reserve), so every queued batch is done and
//!   its jobs release their directories; a walker reading a directory
//!   waits only for room in the queue, which the workers make, then lets
//!   it go; and a waiting walker lets go of every pin. So while walkers
//!   wait, the directories held fall to none, and the budget (at least
//!   one directory's two) lets one of them go on. Across the runs on one
//!   pool the same holds, whatever the number of runs: the workers are
//!   the pool's, which wait for no budget, and each run's waiting
//!   walkers let go of their own run's pins, while a run that is not
//!   waiting is finishing directories.
//! * Memory is bounded by the queue (2 × threads batches, and one batch
//!   being filled per walker), the queued directories, and the inodes
//!   with more than one name; not by the size of the tree.
//! * The first error stops every walker (at its next entry, or within
//!   10 ms if idle) and the workers at their next job, unless the plan
//!   goes on past failed entries
//!   ([`OnError::KeepGoing`](crate::OnError::KeepGoing)): then a failed
//!   job is recorded and the rest go on, a directory that cannot be read
//!   or made is left out with its contents, and directory metadata is
//!   applied as usual, whichever walkers and workers meet the errors.
//!   Errors about the run itself (its destination, its settings, a
//!   cancel) stop every walker either way.
//!
//! Walk-only ([`Plan::walk_only`], a measurement aid): the walkers are
//! unchanged, directories and batches included, but each walker discards
//! the batches it fills instead of queuing them, releasing their
//! directories, and no directory's metadata is applied (the workers'
//! work in a copy), so the walkers' own rate is measured apart from the
//! copying and from any consumer's.
//!
//! A dry run ([`Plan::dry_run`]) is the copy itself, recording
//! ([`writes::Writes::Record`]): the same walk, jobs, workers, checks
//! and placement, the destination read through the same descriptors;
//! where the copy would write, the write is counted instead.

mod dest;
mod dirs;
mod dispatch;
mod inodes;
mod job;
mod meta;
mod node;
mod opening;
mod placing;
mod shared;
mod source;
mod tasks;
mod walk;
mod worker;
mod writes;

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Instant;

use crate::error::{Error, Op, Refusal};
use crate::stats::{NoticeKind, Stats};
use crate::sys;
use crate::sys::posix::Stat;
use crate::trace::Recording;
use crate::{Failure, Plan, Report};

use dest::{check_destination, open_top, single_destination, sync_destination};
use dispatch::{Dispatch, PoolDispatch};
use job::{Job, JobKind};
use shared::{Shared, as_caller};
use source::Source;
use writes::{DstDir, Writes};

/// Runs `plan` ([`Plan::run`]): the engine's one entry.
pub(crate) fn run(plan: &Plan) -> Result<Report, Failure> {
    let started = Instant::now();
    let shared = Shared::new(plan);
    let mut stats = Stats::default();
    let mut entities = Vec::new();
    crate::probes::walk_start(|| {
        (plan.src.to_string_lossy(), plan.dst.to_string_lossy())
    });
    if !sys::XATTRS {
        shared.notice(NoticeKind::XattrsUnsupported, &plan.src);
    }
    copy(&shared, &mut stats, &mut entities);
    // A cancelled run that met no error of its own still did not finish.
    if shared.cancelled() && shared.error_count() == 0 {
        shared.fail(Error::Cancelled {
            path: plan.dst.clone(),
        });
    }
    stats.elapsed = started.elapsed();
    stats.fd_limit = shared.fds.limit();
    stats.fd_budget = shared.fds.total() as u64;
    stats.fd_peak = shared.fds.peak() as u64;
    crate::probes::walk_done(|| {
        (
            stats.entries(),
            shared.error_count(),
            stats.elapsed.as_nanos() as u64,
        )
    });
    outcome(shared, stats, entities)
}

/// The run's copy, under the identity it takes: its settings checked,
/// its source resolved, the tree or the single entry copied and the
/// destination synced. Errors go to `shared`.
fn copy(
    shared: &Shared<'_>,
    stats: &mut Stats,
    entities: &mut Vec<crate::trace::EntityTrace>,
) {
    let plan = shared.plan;
    // Held for the whole run: the walk, the single copy and the sync are
    // this thread's; the workers take the identity themselves.
    let assumed = shared.assume();
    let ready = assumed.is_some()
        && plan.tunables.validate().map_err(|e| shared.fail(e)).is_ok();
    // Resolved once, as the run's identity; read through from here on.
    let source = ready
        .then(|| Source::resolve(plan).map_err(|e| shared.fail(e)).ok())
        .flatten();
    if let Some(source) = &source {
        match source.stat(&plan.src) {
            Err(e) => shared.fail(e),
            Ok(md) if md.is_dir() => {
                run_tree(shared, source, stats, entities);
                shared.finish_flusher();
            }
            Ok(md) => run_single(shared, source, &md, stats, entities),
        }
    }
    if plan.sync
        && shared.writes == Writes::Make
        && !shared.stopped()
        && let Err(e) = sync_destination(&plan.dst)
    {
        shared.fail(e);
    }
    drop(assumed);
}

/// What the run ends as: its report (with its recording, if the plan
/// asked for one), or its errors with the report.
fn outcome(
    shared: Shared<'_>,
    stats: Stats,
    entities: Vec<crate::trace::EntityTrace>,
) -> Result<Report, Failure> {
    let recording = shared.plan.record.then(|| Recording {
        start: shared.clock.wall,
        end_ns: shared.clock.now_ns(),
        states: crate::trace::engine_states(),
        entities,
    });
    let notices = shared.notices.into_vec();
    let report = Report {
        stats,
        notices,
        recording,
    };
    let (errors, more_errors) = shared
        .errors
        .into_inner()
        .unwrap_or_else(|p| p.into_inner());
    if errors.is_empty() {
        Ok(report)
    } else {
        Err(Failure {
            errors,
            more_errors,
            report: Box::new(report),
        })
    }
}

/// Copies a directory tree: walkers and workers in a scope.
fn run_tree(
    shared: &Shared<'_>,
    source: &Source,
    stats: &mut Stats,
    entities: &mut Vec<crate::trace::EntityTrace>,
) {
    let plan = shared.plan;
    let tops = source.open_dir(&plan.src).and_then(|src| {
        check_destination(plan, &src)?;
        Ok((src, open_top(plan, shared.writes)?))
    });
    let (top_src, top) = match tops {
        Ok(fds) => fds,
        Err(e) => {
            shared.fail(e);
            return;
        }
    };
    if let Some(fd) = top.fd()
        && let Err(e) = shared.start_flusher(fd)
    {
        shared.fail(e);
        return;
    }
    if let Some(pool) = plan.pool.as_ref().filter(|_| !plan.walk_only) {
        run_tree_pooled(shared, pool, (top_src, top), stats, entities);
        return;
    }
    let (tx, rx) =
        crossbeam_channel::bounded::<Vec<Job>>(2 * plan.tunables.copy_threads);
    // Walk-only: the walkers discard their own batches.
    let threads = if plan.walk_only {
        0
    } else {
        plan.tunables.copy_threads
    };
    let (walked, done) = thread::scope(|s| {
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads {
            let rx = rx.clone();
            let h = thread::Builder::new()
                .name(format!("copy-{i}"))
                .spawn_scoped(s, move || {
                    let mut w = worker::Worker::new(shared, i);
                    as_caller(shared, || w.run(rx));
                    w.finish()
                });
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    shared.fail(Error::io(Op::Open, "thread", e));
                    break;
                }
            }
        }
        drop(rx);
        let walked = walk::run(
            shared,
            (!plan.walk_only).then_some(&tx as &(dyn Dispatch + Sync)),
            (top_src, top),
            plan.tunables.walkers(),
        );
        // Every walker is done: closing the queue lets the workers finish.
        drop(tx);
        let done: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        (walked, done)
    });
    add_walkers(stats, entities, walked);
    for (s, ws, t) in done {
        stats.merge(&s);
        stats.workers.push(ws);
        entities.extend(t);
    }
}

/// Adds the walkers' counters, loads and traces to the run's.
fn add_walkers(
    stats: &mut Stats,
    entities: &mut Vec<crate::trace::EntityTrace>,
    walked: walk::WalkResult,
) {
    for (s, ws, t) in walked {
        stats.merge(&s);
        stats.walker_blocked += ws.blocked;
        stats.walkers.push(ws);
        entities.extend(t);
    }
}

/// Copies a directory tree with a shared pool's workers: the walkers
/// (as many as the pool's walker budget spares, at least one) queue each
/// batch as a task; each pool thread keeps one worker (its buffer,
/// counters and trace) for this run and takes the run's identity for
/// each batch it does.
fn run_tree_pooled(
    shared: &Shared<'_>,
    pool: &crate::pool::Pool,
    tops: (OwnedFd, DstDir),
    stats: &mut Stats,
    entities: &mut Vec<crate::trace::EntityTrace>,
) {
    let slots: Vec<Mutex<Option<worker::Worker<'_, '_>>>> =
        (0..pool.threads()).map(|_| Mutex::new(None)).collect();
    let in_flight = crate::pool::InFlight::default();
    let walkers = pool.take_walkers(shared.plan.tunables.walkers());
    let walked = pool.scope(|scope| {
        let dispatch = PoolDispatch {
            scope,
            shared,
            pool,
            slots: &slots,
            in_flight: &in_flight,
            cap: 2 * pool.threads(),
        };
        walk::run(shared, Some(&dispatch), (tops.0, tops.1), walkers.count())
    });
    drop(walkers);
    add_walkers(stats, entities, walked);
    for slot in &slots {
        let w = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(w) = w {
            let (s, ws, t) = w.finish();
            stats.merge(&s);
            stats.workers.push(ws);
            entities.extend(t);
        }
    }
}

/// Copies one non-directory source with a single worker, in this thread,
/// read as its name in its resolved directory. Its destination directory
/// is opened beneath [`Plan::within`]'s root when there is one (made if
/// missing, no symlink followed); a directory already at the destination
/// receives the source under its own name.
fn run_single(
    shared: &Shared<'_>,
    source: &Source,
    md: &Stat,
    stats: &mut Stats,
    entities: &mut Vec<crate::trace::EntityTrace>,
) {
    let plan = shared.plan;
    let (dir, leaf, dst) = match single_destination(plan, shared.writes) {
        Ok(d) => d,
        Err(e) => {
            shared.fail(e);
            return;
        }
    };
    // Taken as missing, in a dry run that takes the destination as empty.
    let dir = match (shared.writes, plan.dry_run_empty) {
        (Writes::Record, true) => DstDir::Unmade,
        _ => dir,
    };
    if !plan.merge {
        match dir.lstat(&leaf) {
            Ok(None) => {}
            Ok(Some(_)) => {
                shared.fail(Error::refused(&dst, Refusal::Exists));
                return;
            }
            Err(e) => {
                shared.fail(Error::io(Op::Stat, &dst, e));
                return;
            }
        }
    }
    let kind = match md.kind() as libc::mode_t {
        libc::S_IFREG => JobKind::File,
        libc::S_IFLNK => JobKind::Symlink,
        _ => JobKind::Special,
    };
    if plan.walk_only {
        // Counted as the entry it stands for; nothing written.
        match kind {
            JobKind::File => stats.files += 1,
            JobKind::Symlink => stats.symlinks += 1,
            _ => stats.specials += 1,
        }
        return;
    }
    let job = Job {
        kind,
        src: plan.src.clone(),
        dst,
        dir: Arc::new(dir),
        leaf,
        src_dir: Arc::clone(&source.dir),
        hold: None,
        src_leaf: Some(source.leaf.clone()),
        parent: None,
    };
    let mut w = worker::Worker::new(shared, 0);
    w.do_job(job);
    let (s, ws, t) = w.finish();
    stats.merge(&s);
    stats.workers.push(ws);
    entities.extend(t);
}

#[cfg(test)]
// Tests make and read their own fixtures by path.
#[allow(clippy::disallowed_methods)]
mod test {
    use std::fs;
    use std::io;
    use std::path::Path;

    use super::*;

    /// Runs one job the walk queued, against what is there now.
    fn run_job(kind: JobKind, src: &Path, dst: &Path) -> Vec<Error> {
        let plan = Plan::new(src, dst);
        let shared = Shared::new(&plan);
        let mut w = worker::Worker::new(&shared, 0);
        let dir = fs::File::open(dst.parent().unwrap()).unwrap();
        let src_dir = fs::File::open(src.parent().unwrap()).unwrap();
        w.do_job(Job {
            kind,
            src: src.to_path_buf(),
            dst: dst.to_path_buf(),
            dir: Arc::new(DstDir::Open(dir.into())),
            leaf: worker::leaf_name(dst.file_name().unwrap()).unwrap(),
            src_dir: Arc::new(src_dir.into()),
            hold: None,
            src_leaf: Some(
                worker::leaf_name(src.file_name().unwrap()).unwrap(),
            ),
            parent: None,
        });
        drop(w);
        shared.errors.into_inner().unwrap().0
    }

    #[test]
    fn a_file_that_vanished_after_the_walk_is_an_open_error() {
        let d = tempfile::tempdir().unwrap();
        let gone = d.path().join("gone");
        let errs = run_job(JobKind::File, &gone, &d.path().join("out"));
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].op(), Some(Op::Open));
        assert_eq!(errs[0].path(), gone);
        assert_eq!(errs[0].io_error().unwrap().kind(), io::ErrorKind::NotFound);
        assert!(!d.path().join("out").exists());
    }

    #[test]
    fn entries_that_changed_type_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink("target", &link).unwrap();
        let dir = d.path().join("dir");
        fs::create_dir(&dir).unwrap();
        let file = d.path().join("file");
        fs::write(&file, b"x").unwrap();
        for (kind, src) in [
            (JobKind::File, &link),
            (JobKind::File, &dir),
            (JobKind::Symlink, &file),
            (JobKind::Special, &file),
        ] {
            let out = d.path().join("out");
            let errs = run_job(kind, src, &out);
            assert!(
                matches!(
                    errs.as_slice(),
                    [Error::Refused { reason: Refusal::ChangedType, path }]
                        if path == src
                ),
                "{}: {errs:?}",
                src.display()
            );
            assert!(fs::symlink_metadata(&out).is_err());
        }
    }
}
