//! What every thread of one run shares: the plan, the errors and notices
//! met, the descriptor budget, the flusher, and taking the run's
//! identity. A leaf: the walkers, workers and the run's driver all use it.

use std::ffi::CString;
use std::fs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::inodes;
use super::writes::Writes;
use crate::descriptors::Descriptors;
use crate::error::{Error, Op};
use crate::stats::{NoticeBoard, NoticeKind, Stats, WorkerStats};
use crate::sys;
use crate::sys::posix::at;
use crate::trace::{Clock, ThreadTrace};
use crate::writeback::Flusher;
use crate::{Failure, OnError, Plan};

/// State shared by the walker and the workers of one run.
pub(crate) struct Shared<'p> {
    pub(crate) plan: &'p Plan,
    /// Whether the run writes, or records what it would write (a dry
    /// run).
    pub(crate) writes: Writes,
    pub(crate) quit: AtomicBool,
    pub(super) errors: Mutex<(Vec<Error>, u64)>,
    pub(super) notices: NoticeBoard,
    pub(crate) inodes: inodes::InodeMap,
    /// Set once FICLONE proved impossible for this destination.
    pub(crate) no_clone: AtomicBool,
    /// Set once copy_file_range proved impossible.
    pub(crate) no_copy_range: AtomicBool,
    pub(crate) preserve_owner: bool,
    pub(crate) is_root: bool,
    /// Whom the copies belong to when their owners are not kept (the
    /// run's caller, or this process); `None` when they are.
    pub(crate) owner: Option<crate::pool::Credentials>,
    pub(crate) clock: Clock,
    temp_seq: AtomicU64,
    /// The descriptor budget: the pool's, shared with its other runs,
    /// or the run's own.
    pub(crate) fds: Descriptors,
    /// Flushes the destination as the run goes, when it will be flushed
    /// at its end ([`crate::Writeback`]); started with the tree's copy.
    flusher: std::sync::OnceLock<Flusher>,
}

impl<'p> Shared<'p> {
    pub(super) fn new(plan: &'p Plan) -> Self {
        // A run acting as someone else has none of root's privileges.
        let is_root = sys::posix::euid() == 0 && plan.credentials.is_none();
        let preserve_owner = plan.preserve_owner.unwrap_or(is_root);
        let owner = match &plan.credentials {
            Some(c) => Some(c.clone()),
            None if preserve_owner && is_root => None,
            None => Some(crate::pool::Credentials {
                uid: sys::posix::euid(),
                gid: sys::posix::egid(),
                groups: sys::posix::groups(),
            }),
        };
        Shared {
            plan,
            writes: Writes::of(plan),
            quit: AtomicBool::new(false),
            errors: Mutex::new((Vec::new(), 0)),
            notices: NoticeBoard::default(),
            inodes: inodes::InodeMap::default(),
            no_clone: AtomicBool::new(false),
            no_copy_range: AtomicBool::new(false),
            preserve_owner,
            is_root,
            owner,
            clock: Clock::new(),
            temp_seq: AtomicU64::new(0),
            fds: match &plan.pool {
                Some(pool) => pool.descriptors().clone(),
                None => Descriptors::for_threads(
                    plan.tunables.copy_threads,
                    plan.tunables.walkers(),
                ),
            },
            flusher: std::sync::OnceLock::new(),
        }
    }

    /// A file of `bytes` has been written into the destination.
    pub(crate) fn wrote(&self, bytes: u64) {
        if let Some(f) = self.flusher.get() {
            f.wrote(bytes);
        }
    }

    /// Starts flushing the destination whose top directory is `top` as
    /// the run goes, if the run will be flushed at its end.
    pub(super) fn start_flusher(&self, top: &OwnedFd) -> Result<(), Error> {
        let plan = self.plan;
        let early = plan
            .tunables
            .copy_writeback
            .early(plan.sync || plan.durable);
        if !early || plan.walk_only || self.writes == Writes::Record {
            return Ok(());
        }
        // The top may be a search-only (O_PATH) descriptor, which
        // syncfs(2) does not take.
        let f = at::open_dir(top.as_raw_fd(), c".")
            .and_then(|fd| Flusher::start(fs::File::from(fd)))
            .map_err(|e| Error::io(Op::Sync, &plan.dst, e))?;
        let _first = self.flusher.set(f);
        Ok(())
    }

    /// Waits for the flush under way; one that failed fails the run.
    pub(super) fn finish_flusher(&self) {
        if let Some(Err(e)) = self.flusher.get().map(Flusher::finish) {
            self.fail(Error::io(Op::Sync, &self.plan.dst, e));
        }
    }

    /// Records an error about the run itself and stops it.
    pub(crate) fn fail(&self, e: Error) {
        self.quit.store(true, Ordering::Relaxed);
        self.record(e);
    }

    /// Records an error about one entry; the run stops unless the plan
    /// goes on past failed entries.
    pub(crate) fn entry_failed(&self, e: Error) {
        if !self.keep_going() {
            self.quit.store(true, Ordering::Relaxed);
        }
        self.record(e);
    }

    /// True if the run goes on past failed entries.
    pub(crate) fn keep_going(&self) -> bool {
        self.plan.on_error == OnError::KeepGoing
    }

    fn record(&self, e: Error) {
        let mut g = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        if g.0.len() < Failure::MAX_ERRORS {
            g.0.push(e);
        } else {
            g.1 += 1;
        }
    }

    pub(super) fn error_count(&self) -> u64 {
        let g = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        g.0.len() as u64 + g.1
    }

    pub(crate) fn stopped(&self) -> bool {
        self.quit.load(Ordering::Relaxed) || self.cancelled()
    }

    pub(super) fn cancelled(&self) -> bool {
        self.plan.cancel.as_ref().is_some_and(|c| c.is_cancelled())
    }

    /// Takes the plan's identity in this thread, if it has one, until the
    /// result is dropped; `None` when that failed (the run has failed).
    ///
    /// Every engine thread that touches the source or the destination
    /// for a run calls this first and keeps the guard while it works:
    /// the walker (here in the engine's `run`), each worker, each pool task for a
    /// batch. With [`Plan::acting_as`] the thread then has the caller's
    /// fsuid, fsgid and groups and no effective capability at all, so
    /// the kernel checks each open, creation and attribute as the
    /// caller's own; dropping the guard gives the thread back its own
    /// identity and capabilities (a pool thread serves other runs next).
    pub(crate) fn assume(&self) -> Option<Option<sys::Assumed>> {
        match self.plan.credentials.as_ref().map(sys::assume).transpose() {
            Ok(a) => Some(a),
            Err(e) => {
                self.fail(Error::io(Op::Credentials, &self.plan.src, e));
                None
            }
        }
    }

    /// Records something not kept; said once per kind in the report.
    pub(crate) fn notice(&self, kind: NoticeKind, path: &Path) {
        self.notices.add(kind, path);
    }

    /// A name for writing a replacement beside an entry, then renaming
    /// it over. Short, so that it fits wherever the entry's name fits.
    pub(crate) fn temp_name(&self) -> CString {
        let n = self.temp_seq.fetch_add(1, Ordering::Relaxed);
        CString::new(format!(".zi{:x}.{n:x}", std::process::id()))
            .unwrap_or_default()
    }
}

/// Runs `f` in this thread with the run's identity, if it has one: what
/// every thread doing the run's work (walkers, workers, pooled batches)
/// does first, so that the identity is taken in one place. `None` if it
/// could not be taken (the run has failed).
pub(crate) fn as_caller<R>(
    shared: &Shared<'_>,
    f: impl FnOnce() -> R,
) -> Option<R> {
    let _assumed = shared.assume()?;
    Some(f())
}

/// A worker's or the walker's results: counters, load, trace.
pub(crate) type ThreadResult =
    (Stats, WorkerStats, Option<crate::trace::EntityTrace>);

pub(crate) fn new_trace(shared: &Shared<'_>, name: String) -> ThreadTrace {
    ThreadTrace::new(shared.clock, name, shared.plan.record)
}
