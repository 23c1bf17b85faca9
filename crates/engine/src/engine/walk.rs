//! The walkers: `COPY_WALKERS` threads sharing the directories still to
//! read through work-stealing deques. Each reads a directory relative to
//! its parent's descriptor, makes and opens it beneath the destination
//! first (recorded, in a dry run), queues its subdirectories and feeds
//! batches of jobs for everything else into the one queue the workers
//! share.

use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::OnceLock;
use std::thread;
use std::time::Instant;

use crossbeam_deque::Worker as DequeWorker;

use super::dest::make_dir;
use super::dirs;
use super::dispatch::Dispatch;
use super::job::{Job, JobKind};
use super::node::{DirFds, DirNode, READ_RESERVE};
use super::shared::{Shared, as_caller, new_trace};
use super::tasks::{DirTask, IDLE_POLL, TaskAt, Tasks};
use super::writes::DstDir;
use crate::descriptors::{self, Slot};
use crate::error::{Error, Op, Refusal, Result};
use crate::plan::Plan;
use crate::rules::{self, Action};
use crate::stats::{NoticeKind, Stats, WalkerStats};
use crate::sys::{
    self,
    posix::{self, Stat, at},
};
use crate::trace::{ThreadState, ThreadTrace};

/// What the walkers of one run share: the directories still to read, and
/// what to do with what they find.
pub(crate) struct Walk<'s, 'p> {
    shared: &'s Shared<'p>,
    dispatch: Option<&'s (dyn Dispatch + Sync + 's)>,
    tasks: Tasks,
    /// The top source directory's device and mount (where the system
    /// tells it), for the same-mount rule: a directory on another mount
    /// is a mount point, a bind mount of the same filesystem included.
    top_dev: OnceLock<(u64, Option<u64>)>,
}

/// A directory opened to be read ([`Walker::open`]): its source `lstat`,
/// name and descriptor, its destination, whether it is a mount point not
/// to descend into, and the budget slot its descriptors hold.
type Opened = (Stat, CString, Arc<OwnedFd>, Arc<DstDir>, bool, Option<Slot>);

/// The results of a walk: each walker's counters, load and trace.
pub(crate) type WalkResult =
    Vec<(Stats, WalkerStats, Option<crate::trace::EntityTrace>)>;

/// Walks the plan's source, open as `top.0`, with `walkers` threads,
/// `walk-0`, `walk-1`, ..., each taking the run's identity as a worker
/// does. `top.1` is the destination directory, and `dispatch` where
/// batches go (none when walking only).
pub(crate) fn run<'s, 'p>(
    shared: &'s Shared<'p>,
    dispatch: Option<&'s (dyn Dispatch + Sync + 's)>,
    top: (OwnedFd, DstDir),
    walkers: usize,
) -> WalkResult {
    let walkers = walkers.max(1);
    let top = DirTask {
        at: TaskAt::Top(top.0, top.1),
        parent: None,
    };
    let (tasks, locals) = Tasks::new(walkers, top);
    let walk = Walk {
        shared,
        dispatch,
        tasks,
        top_dev: OnceLock::new(),
    };
    let walk = &walk;
    thread::scope(|s| {
        let mut handles = Vec::with_capacity(walkers);
        for (i, local) in locals.into_iter().enumerate() {
            let h = thread::Builder::new()
                .name(format!("walk-{i}"))
                .spawn_scoped(s, move || {
                    let mut w = Walker::new(walk, i, local);
                    as_caller(shared, || w.walk());
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
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// One walker thread: reads directories, its own first (newest first, so
/// the walk goes depth first and a directory's descriptors are let go
/// soon), then those it steals (oldest first, near the top of the tree,
/// where the most work hangs).
struct Walker<'w, 's, 'p> {
    walk: &'w Walk<'s, 'p>,
    shared: &'s Shared<'p>,
    index: usize,
    local: DequeWorker<DirTask>,
    batch: Vec<Job>,
    /// Directories the batch's jobs are in (their descriptors are held
    /// until the batch is done), counted as they change.
    batch_dirs: usize,
    stats: Stats,
    load: WalkerStats,
    trace: ThreadTrace,
    scratch: Vec<usize>,
    /// getdents buffer, reused for every directory.
    buf: Vec<u8>,
    /// Holds on the directory being read handed to what it queued, out
    /// of its reserve.
    given: usize,
}

impl<'w, 's, 'p> Walker<'w, 's, 'p> {
    fn new(
        walk: &'w Walk<'s, 'p>,
        index: usize,
        local: DequeWorker<DirTask>,
    ) -> Self {
        let shared = walk.shared;
        Walker {
            walk,
            shared,
            index,
            local,
            batch: Vec::with_capacity(batch_capacity(shared)),
            batch_dirs: 0,
            stats: Stats::default(),
            load: WalkerStats::default(),
            trace: new_trace(shared, format!("walker-{index}")),
            scratch: Vec::new(),
            buf: Vec::new(),
            given: 0,
        }
    }

    fn walk(&mut self) {
        while let Some(task) = self.next() {
            self.trace.enter(ThreadState::Walking);
            let t0 = Instant::now();
            self.read(task);
            self.load.busy += t0.elapsed();
            self.walk.tasks.done_one();
        }
        if !self.shared.stopped() {
            self.send();
        }
    }

    /// The next directory to read: this walker's newest, else one taken
    /// from the others; `None` once every walker is out of work (or the
    /// run stopped).
    fn next(&mut self) -> Option<DirTask> {
        loop {
            if self.shared.stopped() {
                return None;
            }
            if let Some(t) = self.local.pop() {
                return Some(t);
            }
            if let Some(t) = self.steal() {
                self.load.steals += 1;
                return Some(t);
            }
            // Nothing here: hand over what is batched before waiting, so
            // workers are not kept from it.
            self.send();
            if self.walk.tasks.over() {
                return None;
            }
            self.idle();
        }
    }

    fn steal(&self) -> Option<DirTask> {
        self.walk.tasks.steal(&self.local, self.index)
    }

    /// Waits until another walker queues a directory, the walk ends, or
    /// a while passes.
    fn idle(&mut self) {
        self.trace.enter(ThreadState::Waiting);
        let idx = self.index as u32;
        crate::probes::walker_idle(idx);
        let t0 = Instant::now();
        let shared = self.shared;
        self.walk.tasks.wait(|| shared.stopped());
        self.load.idle += t0.elapsed();
    }

    /// Queues a subdirectory for any walker.
    fn push(&mut self, task: DirTask) {
        self.walk.tasks.push(&self.local, task);
    }

    /// Reads one directory: makes it (or records it), queues its
    /// subdirectories and batches the rest. An error about the top stops
    /// the run; about any other directory it is that entry's (left out
    /// with its contents, the run going on if the plan says so). The
    /// count this directory holds (or, not made, the count its parent
    /// kept for it) is released whatever happens, after the error is
    /// recorded.
    fn read(&mut self, task: DirTask) {
        let idx = self.index as u32;
        let plan = self.shared.plan;
        let top = matches!(task.at, TaskAt::Top(..));
        let (src, dst) = match (&task.at, &task.parent) {
            (TaskAt::Sub(name), Some(p)) => p.paths_of(name),
            _ => (plan.src.clone(), plan.dst.clone()),
        };
        crate::probes::dir_start(|| (idx, src.to_string_lossy()));
        let before = self.load.entries;
        let (r, hold) = self.read_task(task, &src, &dst);
        let n = self.load.entries - before;
        crate::probes::dir_done(|| {
            (idx, src.to_string_lossy(), n, crate::probes::errno(&r))
        });
        match r {
            Err(e) if top => self.shared.fail(e),
            Err(e) => self.shared.entry_failed(e),
            Ok(()) => {}
        }
        if let Some((node, fds, n)) = hold {
            dirs::release_n(&node, n, || fds, self.shared);
        }
    }

    /// Descriptor slots for a directory about to be opened (`n`: its
    /// source and destination). While the budget is spent the walker
    /// hands over its batch (its jobs hold descriptors), lets go of
    /// pinned directories, oldest first, and waits for descriptors to
    /// be given back, holding none itself; `None` if the run stopped
    /// meanwhile.
    fn slot(&mut self, n: usize) -> Option<Slot> {
        let shared = self.shared;
        let budget = &shared.fds;
        if let Some(s) = budget.try_take(n) {
            return Some(s);
        }
        self.send();
        self.trace.enter(ThreadState::Blocked);
        let t0 = Instant::now();
        let s = loop {
            if self.shared.stopped() {
                break None;
            }
            if let Some(s) = budget.try_take(n) {
                break Some(s);
            }
            if !self.walk.tasks.evict() {
                budget.wait(IDLE_POLL);
            }
        };
        self.load.fd_wait += t0.elapsed();
        self.trace.enter(ThreadState::Mkdir);
        s
    }

    /// Reads a directory; returns the outcome and the holds to release:
    /// the directory's own (and what is left of its reserve), or, not
    /// made, the one its parent kept for it.
    #[allow(clippy::type_complexity)]
    fn read_task(
        &mut self,
        task: DirTask,
        src: &Path,
        dst: &Path,
    ) -> (Result<()>, Option<(Arc<DirNode>, Option<DirFds>, usize)>) {
        let DirTask { at, parent } = task;
        // Slots first, waiting if need be with no descriptor held: the
        // parent's are taken only once the walker has its slots.
        let slot = match (&at, &parent) {
            (TaskAt::Sub(_), Some(_)) => match self.slot(2) {
                Some(s) => Some(s),
                // The run stopped meanwhile.
                None => return (Ok(()), parent.map(|p| (p, None, 1))),
            },
            _ => None,
        };
        // The parent's descriptors, taken before its pin may go: still
        // open, or reopened beneath its nearest open ancestor.
        let parent_fds = match (&at, &parent) {
            (TaskAt::Sub(_), Some(p)) => match p.take_sub() {
                Some(f) => Some(Ok(f)),
                None => Some(p.open_fds()),
            },
            _ => None,
        };
        let parent_fds = match parent_fds.transpose() {
            Ok(f) => f,
            Err(e) => {
                let hold = parent.map(|p| (p, None, 1));
                return (Err(e), hold);
            }
        };
        // The count on the parent this task holds, given back if the
        // directory cannot be made.
        let parent_hold = parent
            .as_ref()
            .map(|p| (Arc::clone(p), parent_fds.clone(), 1));
        let made = self.open(src, dst, at, parent_fds.as_ref(), slot);
        let made = made.and_then(|o| {
            let id = match o.3.fd() {
                Some(d) => Some(
                    at::fstat(d)
                        .map(|st| Stat::of(&st).identity())
                        .map_err(|e| Error::io(Op::Stat, dst, e))?,
                ),
                // Not made (a dry run's): never reopened.
                None => None,
            };
            Ok((o, id))
        });
        drop(parent_fds);
        let ((md, name, src_fd, dst_fd, mount, hold), id) = match made {
            Ok(m) => m,
            Err(e) => return (Err(e), parent_hold),
        };
        drop(parent_hold);
        self.stats.dirs += 1;
        self.load.dirs += 1;
        let is_top = parent.is_none();
        let fds = DirFds {
            src: Arc::clone(&src_fd),
            dst: dst_fd,
            hold: hold.map(Arc::new),
        };
        if let Some(l) = &self.shared.plan.listener {
            l.entry(src, dst, crate::EntryKind::Dir);
        }
        let top_paths = is_top.then(|| (src.to_path_buf(), dst.to_path_buf()));
        let node = DirNode::new(&name, md, &fds, id, parent, top_paths);
        self.trace.enter(ThreadState::Walking);
        self.given = 0;
        let r = if mount {
            // Another filesystem, not crossed: made, not read (cp -x).
            Ok(())
        } else {
            self.list(src, &node, &fds)
        };
        let left = READ_RESERVE - self.given + 1;
        (r, Some((node, Some(fds), left)))
    }

    /// The source directory's `lstat`, name and descriptor (never
    /// followed), the destination directory made and opened (recorded,
    /// in a dry run), whether it is a mount point not to descend into,
    /// and the budget slot its descriptors hold (`slot`, taken for a
    /// subdirectory).
    fn open(
        &mut self,
        src: &Path,
        dst: &Path,
        at: TaskAt,
        parent: Option<&DirFds>,
        slot: Option<Slot>,
    ) -> Result<Opened> {
        let plan = self.shared.plan;
        self.trace.enter(ThreadState::Mkdir);
        let (src_dir, dst_dir, name) = match at {
            TaskAt::Top(fd, dst_fd) => return self.open_top(src, fd, dst_fd),
            TaskAt::Sub(name) => match parent {
                Some(p) => (Arc::clone(&p.src), &p.dst, name),
                None => return Err(Error::refused(dst, Refusal::ChangedType)),
            },
        };
        let md = at::stat(src_dir.as_raw_fd(), &name)
            .map_err(|e| Error::io(Op::Stat, src, e))?;
        if !md.is_dir() {
            return Err(Error::refused(src, Refusal::ChangedType));
        }
        let mount = self.mount_point(src, &src_dir, &name, &md);
        let fd = self.open_src(src, &src_dir, &name)?;
        let dst_fd = make_dir(
            self.shared,
            dst_dir,
            &name,
            dst,
            plan.merge,
            plan.layered,
        )?;
        Ok((md, name, Arc::new(fd), Arc::new(dst_fd), mount, slot))
    }

    /// The top directory, already open as `fd` (at `src`) and `dst_fd`:
    /// its device and mount kept for the same-mount rule.
    fn open_top(
        &self,
        src: &Path,
        fd: OwnedFd,
        dst_fd: DstDir,
    ) -> Result<Opened> {
        let md = at::fstat(&fd)
            .map(|st| Stat::of(&st))
            .map_err(|e| Error::io(Op::Stat, src, e))?;
        let mnt = sys::mount_id(fd.as_raw_fd(), c"").ok().flatten();
        let _first = self.walk.top_dev.set((md.dev, mnt));
        Ok((
            md,
            CString::default(),
            Arc::new(fd),
            Arc::new(dst_fd),
            false,
            None,
        ))
    }

    /// Whether the subdirectory `name` of `src_dir` (at `src`, its
    /// `lstat` `md`) is on another mount than the top, when the plan
    /// does not cross them; one that is gets a notice.
    fn mount_point(
        &self,
        src: &Path,
        src_dir: &OwnedFd,
        name: &CStr,
        md: &Stat,
    ) -> bool {
        let mount = !self.shared.plan.cross_fs
            && self.walk.top_dev.get().is_some_and(|(dev, mnt)| {
                *dev != md.dev
                    || mnt.is_some_and(|top| {
                        sys::mount_id(src_dir.as_raw_fd(), name)
                            .ok()
                            .flatten()
                            .is_some_and(|m| m != top)
                    })
            });
        if mount {
            // Copied empty, which must not go unsaid.
            self.shared
                .notice(NoticeKind::MountPoint(src.to_path_buf()), src);
        }
        mount
    }

    /// Opens the subdirectory `name` of `src_dir` (at `src`), never
    /// followed, waiting out a lack of descriptors.
    fn open_src(
        &self,
        src: &Path,
        src_dir: &OwnedFd,
        name: &CStr,
    ) -> Result<OwnedFd> {
        // Opening it is the first step of reading it: a directory that
        // cannot be opened is one that cannot be read.
        self.shared
            .fds
            .retrying(
                || at::open_dir(src_dir.as_raw_fd(), name),
                descriptors::exhausted,
            )
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP | libc::ENOTDIR) => {
                    Error::refused(src, Refusal::ChangedType)
                }
                _ => Error::io(Op::ReadDir, src, e),
            })
    }

    /// Reads the entries of an open source directory: subdirectories
    /// queued, the rest batched.
    fn list(
        &mut self,
        src: &Path,
        node: &Arc<DirNode>,
        fds: &DirFds,
    ) -> Result<()> {
        let mut buf = std::mem::take(&mut self.buf);
        let r = sys::read_dir(fds.src.as_raw_fd(), &mut buf, |name, dtype| {
            if self.shared.stopped() {
                return Ok(false);
            }
            self.load.entries += 1;
            if let Err(e) = self.entry(src, node, fds, name, dtype) {
                self.shared.entry_failed(e);
            }
            Ok(!self.shared.stopped())
        });
        self.buf = buf;
        r.map_err(|e| Error::io(Op::ReadDir, src, e))
    }

    /// One entry of a directory being read: left out if a rule skips
    /// it, queued if a directory, else batched as a job.
    fn entry(
        &mut self,
        src: &Path,
        node: &Arc<DirNode>,
        fds: &DirFds,
        name: &CStr,
        dtype: u8,
    ) -> Result<()> {
        let os = OsStr::from_bytes(name.to_bytes());
        let (action, rule_path) = self.action_of(src, os);
        if action == Action::Skip {
            self.stats.skipped += 1;
            return Ok(());
        }
        let kind = kind_of(&fds.src, src, name, dtype)?;
        if kind == libc::S_IFDIR {
            self.queue_dir(node, fds, name);
            return Ok(());
        }
        let kind = job_kind(kind, &action, &rule_path);
        self.queue_job(node, fds, name, kind);
        Ok(())
    }

    /// The rule action for the entry `os` of the directory `src`, and
    /// the path it was matched as.
    fn action_of(&mut self, src: &Path, os: &OsStr) -> (Action, PathBuf) {
        let plan = self.shared.plan;
        // Paths cost the walker more than anything else per entry: they
        // are made here only for rules and directories; a job's are made
        // by its worker.
        let ruled = plan.rules.as_ref().is_some_and(|r| !r.is_empty());
        if ruled {
            let p = src.join(os);
            let rel = p.strip_prefix(&plan.src).unwrap_or(Path::new(""));
            rule_for(plan, rel, &mut self.scratch)
        } else {
            (Action::Copy, PathBuf::new())
        }
    }

    /// Queues the subdirectory `name` of the directory being read,
    /// counted on `node`, which stays pinned open until it is taken.
    fn queue_dir(&mut self, node: &Arc<DirNode>, fds: &DirFds, name: &CStr) {
        self.given += 1;
        if node.queue_sub(fds) {
            self.walk.tasks.pinned(node);
        }
        self.push(DirTask {
            at: TaskAt::Sub(name.to_owned()),
            parent: Some(Arc::clone(node)),
        });
    }

    /// Batches the job for the entry `name` of the directory being read.
    fn queue_job(
        &mut self,
        node: &Arc<DirNode>,
        fds: &DirFds,
        name: &CStr,
        kind: JobKind,
    ) {
        self.given += 1;
        self.queue(Job {
            kind,
            src: PathBuf::new(),
            dst: PathBuf::new(),
            dir: Arc::clone(&fds.dst),
            src_dir: Arc::clone(&fds.src),
            hold: fds.hold.clone(),
            src_leaf: None,
            leaf: name.to_owned(),
            parent: Some(Arc::clone(node)),
        });
    }

    fn queue(&mut self, job: Job) {
        let same_dir = self
            .batch
            .last()
            .is_some_and(|last| Arc::ptr_eq(&last.dir, &job.dir));
        if !same_dir {
            self.batch_dirs += 1;
        }
        self.batch.push(job);
        if self.batch.len() >= self.shared.plan.tunables.copy_batch
            || self.batch_dirs >= MAX_BATCH_DIRS
        {
            self.send();
        }
    }

    fn send(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let cap = batch_capacity(self.shared);
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(cap));
        self.batch_dirs = 0;
        self.load.batches += 1;
        if self.shared.plan.walk_only {
            self.discard(batch);
            return;
        }
        let Some(tx) = self.walk.dispatch else { return };
        let idx = self.index as u32;
        crate::probes::batch_dispatch(|| {
            (idx, batch.len() as u64, tx.queued() as u64)
        });
        if let Err(batch) = tx.try_send(batch) {
            self.trace.enter(ThreadState::Blocked);
            let t0 = Instant::now();
            tx.send(batch);
            self.load.blocked += t0.elapsed();
            self.trace.enter(ThreadState::Walking);
        }
    }

    /// Walk-only: counts each job as the entry it stands for and releases
    /// its directory, writing nothing.
    fn discard(&mut self, batch: Vec<Job>) {
        let n = batch.len() as u64;
        for job in batch {
            let count = match job.kind {
                JobKind::File => &mut self.stats.files,
                JobKind::Symlink => &mut self.stats.symlinks,
                JobKind::Special => &mut self.stats.specials,
                JobKind::Redirect(_) => &mut self.stats.redirects,
            };
            *count += 1;
            if let Some(p) = &job.parent {
                dirs::release(p, || Some(job.fds()), self.shared);
            }
        }
        if let Some(p) = &self.shared.plan.progress {
            p.advance(n, 0);
        }
    }

    /// Drops what is still batched if the run stopped, and gives back the
    /// walker's counters, load and trace.
    fn finish(
        mut self,
    ) -> (Stats, WalkerStats, Option<crate::trace::EntityTrace>) {
        self.batch.clear();
        self.trace.enter(ThreadState::Waiting);
        self.load.cpu = posix::thread_cpu_time();
        (self.stats, self.load, self.trace.finish())
    }
}

/// The rule action for `rel` (relative to the source) and the path it
/// was matched as; `scratch` is reused between calls.
pub(crate) fn rule_for(
    plan: &Plan,
    rel: &Path,
    scratch: &mut Vec<usize>,
) -> (Action, PathBuf) {
    match &plan.rules {
        Some(r) if !r.is_empty() => {
            let p = plan.rule_base.join(rel);
            (r.action(&p, scratch).clone(), p)
        }
        _ => (Action::Copy, PathBuf::new()),
    }
}

/// The file type (`S_IFMT` bits) of the entry `name` in the source
/// directory `dir` (at `src`): readdir's, or its `lstat`'s where readdir
/// does not tell; anything but a directory, file or symlink is taken as
/// special.
fn kind_of(
    dir: &OwnedFd,
    src: &Path,
    name: &CStr,
    dtype: u8,
) -> Result<libc::mode_t> {
    Ok(match dtype {
        libc::DT_DIR => libc::S_IFDIR,
        libc::DT_REG => libc::S_IFREG,
        libc::DT_LNK => libc::S_IFLNK,
        libc::DT_UNKNOWN => at::stat(dir.as_raw_fd(), name)
            .map_err(|e| {
                Error::io(
                    Op::Stat,
                    src.join(OsStr::from_bytes(name.to_bytes())),
                    e,
                )
            })?
            .kind() as libc::mode_t,
        _ => libc::S_IFIFO,
    })
}

/// The job for a non-directory entry of file type `kind`: a redirect
/// where the rule `action` (matched as `rule_path`) links a file
/// elsewhere, else a copy of its kind.
fn job_kind(kind: libc::mode_t, action: &Action, rule_path: &Path) -> JobKind {
    let target = if kind == libc::S_IFREG {
        rules::link_target(action, rule_path)
    } else {
        None
    };
    match (kind, target) {
        (_, Some(target)) => JobKind::Redirect(target),
        (libc::S_IFREG, None) => JobKind::File,
        (libc::S_IFLNK, None) => JobKind::Symlink,
        _ => JobKind::Special,
    }
}

/// The most directories one batch has jobs in. Each job holds its
/// directory's two descriptors until it is done, so a batch filled along
/// a deep chain of directories with a file or two in each would hold two
/// descriptors per level; sent at this many, a batch holds at most twice
/// as many, however the tree is shaped.
const MAX_BATCH_DIRS: usize = 16;

/// Room for a batch, capped so that a huge COPY_BATCH does not reserve
/// memory it may never use.
fn batch_capacity(shared: &Shared<'_>) -> usize {
    shared.plan.tunables.copy_batch.min(4096)
}
