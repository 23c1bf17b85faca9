//! The walker: reads the source tree in depth-first order, creates each
//! directory, and queues batches of jobs for everything else.

use std::fs;
use std::io;
use std::mem;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_channel::{Sender, TrySendError};
use walkdir::WalkDir;

use super::dirs::{self, DirNode};
use super::worker::Worker;
use super::{Job, JobKind, Shared, identity, new_trace};
use crate::beneath::{self, Root};
use crate::error::{Error, Op, Refusal, Result};
use crate::rules::{self, Action};
use crate::stats::{NoticeKind, Stats};
use crate::sys::posix::{self, at};
use crate::trace::{ThreadState, ThreadTrace};

/// Refuses a destination the copy must not go to: inside the source (the
/// walk would copy its own output), or non-empty without merging.
pub(crate) fn check_destination(plan: &crate::Plan) -> Result<()> {
    let src_md = fs::metadata(&plan.src)
        .map_err(|e| Error::io(Op::Stat, &plan.src, e))?;
    let src_id = identity(&src_md);
    // Identity by (dev, ino), never by comparing path strings: the same
    // directory has many spellings.
    let mut probe = plan.dst.clone();
    while fs::symlink_metadata(&probe).is_err() {
        if !probe.pop() {
            break;
        }
    }
    if probe.as_os_str().is_empty() {
        probe = PathBuf::from(".");
    }
    if let Ok(real) = fs::canonicalize(&probe) {
        for a in real.ancestors() {
            if fs::metadata(a).is_ok_and(|m| identity(&m) == src_id) {
                return Err(Error::refused(
                    &plan.dst,
                    Refusal::DestinationInsideSource,
                ));
            }
        }
    }
    Ok(())
}

/// Makes (if missing) and opens the top destination directory. Inside a
/// root ([`crate::Plan::within`]) every directory down to it is opened
/// beneath the root, none followed; otherwise its path is the caller's
/// and resolved as given. Without merging it must be empty.
pub(crate) fn open_top(plan: &crate::Plan) -> Result<OwnedFd> {
    let fd: OwnedFd = match &plan.within {
        Some(root) => {
            let rel = plan
                .dst
                .strip_prefix(root)
                .map_err(|_| Error::refused(&plan.dst, Refusal::NotBeneath))?;
            let r = Root::open(root)?;
            match rel.file_name() {
                None => r
                    .fd()
                    .try_clone()
                    .map_err(|e| Error::io(Op::Open, root, e))?,
                Some(leaf) => {
                    let parent = r.dir(
                        rel.parent().unwrap_or(Path::new("")),
                        Some(0o755),
                    )?;
                    let leaf = super::worker::leaf_name(leaf)?;
                    match at::mkdir(parent.fd.as_raw_fd(), &leaf, 0o700) {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                        Err(e) => {
                            return Err(Error::io(Op::Mkdir, &plan.dst, e));
                        }
                    }
                    beneath::step(parent.fd.as_raw_fd(), &leaf, None)
                        .map_err(|f| step_error(f, &plan.dst))?
                }
            }
        }
        None => {
            make_root(&plan.dst)?;
            let top = super::open_followed(&plan.dst)?;
            top.fd()
                .try_clone()
                .map_err(|e| Error::io(Op::Open, &plan.dst, e))?
        }
    };
    if !plan.merge {
        let names = at::read_names(&fd)
            .map_err(|e| Error::io(Op::ReadDir, &plan.dst, e))?;
        if !names.is_empty() {
            return Err(Error::refused(&plan.dst, Refusal::NotEmpty));
        }
    }
    Ok(fd)
}

/// The error for a directory that could not be opened beneath its parent.
pub(crate) fn step_error(f: beneath::StepFail, path: &Path) -> Error {
    match f {
        beneath::StepFail::Met(met) => Error::Beneath {
            path: path.to_path_buf(),
            at: path.to_path_buf(),
            met,
        },
        beneath::StepFail::Io(op, e) => Error::io(op, path, e),
    }
}

pub(crate) struct Walker<'s, 'p> {
    shared: &'s Shared<'p>,
    /// The top destination directory, until the walk enters it.
    top: Option<OwnedFd>,
    tx: Option<Box<dyn Dispatch + 's>>,
    batch: Vec<Job>,
    /// Directories on the current path, with their walk depth.
    stack: Vec<(usize, Arc<DirNode>)>,
    stats: Stats,
    trace: ThreadTrace,
    scratch: Vec<usize>,
}

impl<'s, 'p> Walker<'s, 'p> {
    pub(crate) fn new(
        shared: &'s Shared<'p>,
        tx: Box<dyn Dispatch + 's>,
        top: OwnedFd,
    ) -> Self {
        Walker {
            shared,
            top: Some(top),
            tx: Some(tx),
            batch: Vec::with_capacity(batch_capacity(shared)),
            stack: Vec::new(),
            stats: Stats::default(),
            trace: new_trace(shared, "walker".to_string()),
            scratch: Vec::new(),
        }
    }

    pub(crate) fn walk(&mut self) {
        let plan = self.shared.plan;
        let mut it = source_walk(plan);
        self.trace.enter(ThreadState::Walking);
        while !self.shared.stopped() {
            let entry = match it.next() {
                None => break,
                Some(Ok(e)) => e,
                Some(Err(e)) => {
                    // walkdir goes on past a directory it cannot read.
                    self.shared.entry_failed(Error::walk(
                        Op::ReadDir,
                        &plan.src,
                        e,
                    ));
                    continue;
                }
            };
            let depth = entry.depth();
            self.leave_dirs(depth);
            let (rel, dst) = destination_of(plan, &entry);
            let (action, rule_path) = self.rule(rel);
            let ft = entry.file_type();
            if depth > 0 && action == Action::Skip {
                self.stats.skipped += 1;
                if ft.is_dir() {
                    it.skip_current_dir();
                }
                continue;
            }
            if ft.is_dir() {
                if let Err(e) = self.enter_dir(&entry, dst, depth) {
                    if depth == 0 {
                        self.shared.fail(e);
                        break;
                    }
                    // Without its copy, nothing inside can be written.
                    self.shared.entry_failed(e);
                    it.skip_current_dir();
                }
                continue;
            }
            let kind = if ft.is_file() {
                match rules::link_target(&action, &rule_path) {
                    Some(target) => JobKind::Redirect(target),
                    None => JobKind::File,
                }
            } else if ft.is_symlink() {
                JobKind::Symlink
            } else {
                JobKind::Special
            };
            let Some((_, parent)) = self.stack.last() else {
                break;
            };
            let parent = Arc::clone(parent);
            let leaf = match super::worker::leaf_name(entry.file_name()) {
                Ok(l) => l,
                Err(e) => {
                    self.shared.entry_failed(e);
                    continue;
                }
            };
            parent.hold();
            self.queue(Job {
                kind,
                src: entry.into_path(),
                dst,
                dir: Arc::clone(&parent.fd),
                leaf,
                parent: Some(parent),
            });
        }
    }

    /// The rule action for `rel` and the path it was matched as.
    fn rule(&mut self, rel: &Path) -> (Action, PathBuf) {
        let plan = self.shared.plan;
        match &plan.rules {
            Some(r) if !r.is_empty() => {
                let p = plan.rule_base.join(rel);
                (r.action(&p, &mut self.scratch).clone(), p)
            }
            _ => (Action::Copy, PathBuf::new()),
        }
    }

    /// Creates the destination directory and starts tracking it.
    fn enter_dir(
        &mut self,
        entry: &walkdir::DirEntry,
        dst: PathBuf,
        depth: usize,
    ) -> Result<()> {
        // lstat now, before walkdir reads the directory and bumps its
        // access time.
        self.trace.enter(ThreadState::Mkdir);
        let md = entry
            .metadata()
            .map_err(|e| Error::walk(Op::Stat, entry.path(), e))?;
        if !md.is_dir() {
            return Err(Error::refused(entry.path(), Refusal::ChangedType));
        }
        if let Some((_, top)) = self.stack.first() {
            note_mount_point(self.shared, entry.path(), &md, top.md.dev());
        }
        let fd = match (depth, self.top.take()) {
            (0, Some(top)) => top,
            _ => {
                let Some((_, parent)) = self.stack.last() else {
                    return Err(Error::refused(&dst, Refusal::ChangedType));
                };
                let leaf = super::worker::leaf_name(entry.file_name())?;
                make_dir(
                    parent.fd.as_raw_fd(),
                    &leaf,
                    &dst,
                    self.shared.plan.merge,
                    self.shared.plan.layered,
                )?
            }
        };
        self.trace.enter(ThreadState::Walking);
        self.stats.dirs += 1;
        if let Some(l) = &self.shared.plan.listener {
            l.entry(entry.path(), &dst, crate::EntryKind::Dir);
        }
        let parent = self.stack.last().map(|(_, d)| Arc::clone(d));
        let node = DirNode::new(
            entry.path().to_path_buf(),
            dst,
            md,
            Arc::new(fd),
            parent,
        );
        self.stack.push((depth, node));
        Ok(())
    }

    /// Releases the walker's hold on directories it has left.
    fn leave_dirs(&mut self, depth: usize) {
        while let Some((d, _)) = self.stack.last() {
            if *d < depth {
                break;
            }
            if let Some((_, node)) = self.stack.pop() {
                dirs::release(&node, self.shared);
            }
        }
    }

    fn queue(&mut self, job: Job) {
        self.batch.push(job);
        if self.batch.len() >= self.shared.plan.tunables.copy_batch {
            self.send();
        }
    }

    fn send(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let cap = batch_capacity(self.shared);
        let batch = mem::replace(&mut self.batch, Vec::with_capacity(cap));
        let Some(tx) = &self.tx else { return };
        crate::probes::zinstall::batch__dispatch!(|| (
            batch.len() as u64,
            tx.queued() as u64
        ));
        if let Err(batch) = tx.try_send(batch) {
            self.trace.enter(ThreadState::Blocked);
            let t0 = Instant::now();
            tx.send(batch);
            self.stats.walker_blocked += t0.elapsed();
            self.trace.enter(ThreadState::Walking);
        }
    }

    /// Flushes the last batch, releases every directory still open and
    /// closes the queue so the workers finish.
    pub(crate) fn finish(
        mut self,
    ) -> (Stats, Option<crate::trace::EntityTrace>) {
        if !self.shared.stopped() {
            self.send();
        }
        self.batch.clear();
        self.leave_dirs(0);
        self.tx = None;
        self.trace.enter(ThreadState::Waiting);
        (self.stats, self.trace.finish())
    }
}

/// The source walked as a copy walks it: depth first, no symlink
/// followed, on one filesystem unless asked.
pub(crate) fn source_walk(plan: &crate::Plan) -> walkdir::IntoIter {
    WalkDir::new(&plan.src)
        .follow_links(false)
        .same_file_system(!plan.cross_fs)
        .into_iter()
}

/// Notes `path`, a directory below the source's top (whose device is
/// `top_dev`), when another filesystem is mounted on it and the walk
/// stays on one: it is copied empty, which must not go unsaid.
pub(crate) fn note_mount_point(
    shared: &Shared<'_>,
    path: &Path,
    md: &fs::Metadata,
    top_dev: u64,
) {
    if !shared.plan.cross_fs && md.dev() != top_dev {
        shared.notice(NoticeKind::MountPoint(path.to_path_buf()), path);
    }
}

/// An entry's path relative to the source, and where it goes.
pub(crate) fn destination_of<'e>(
    plan: &crate::Plan,
    entry: &'e walkdir::DirEntry,
) -> (&'e Path, PathBuf) {
    let rel = entry
        .path()
        .strip_prefix(&plan.src)
        .unwrap_or(Path::new(""));
    let dst = if entry.depth() == 0 {
        plan.dst.clone()
    } else {
        plan.dst.join(rel)
    };
    (rel, dst)
}

/// The rule action for `rel` (relative to the source) and the path it
/// was matched as; `scratch` is reused between calls.
pub(crate) fn rule_for(
    plan: &crate::Plan,
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

/// Where the walker's batches go: its own workers' queue, or a shared
/// pool.
pub(crate) trait Dispatch {
    /// Queues a batch if there is room now; gives it back if not.
    fn try_send(&self, batch: Vec<Job>) -> std::result::Result<(), Vec<Job>>;
    /// Queues a batch, waiting for room.
    fn send(&self, batch: Vec<Job>);
    /// Batches queued and not yet taken.
    fn queued(&self) -> usize;
}

impl Dispatch for Sender<Vec<Job>> {
    fn try_send(&self, batch: Vec<Job>) -> std::result::Result<(), Vec<Job>> {
        match Sender::try_send(self, batch) {
            Err(TrySendError::Full(batch)) => Err(batch),
            // Every worker is gone: the run has failed; the jobs are
            // dropped.
            Ok(()) | Err(TrySendError::Disconnected(_)) => Ok(()),
        }
    }

    fn send(&self, batch: Vec<Job>) {
        let _disconnected = Sender::send(self, batch).is_err();
    }

    fn queued(&self) -> usize {
        self.len()
    }
}

/// Batches as tasks on a shared [`Pool`](crate::Pool), at most `cap` of
/// this run's in flight.
pub(crate) struct PoolDispatch<'a, 'scope, 'p> {
    pub(crate) scope: &'a rayon::Scope<'scope>,
    pub(crate) shared: &'scope Shared<'p>,
    pub(crate) pool: &'scope crate::pool::Pool,
    pub(crate) slots: &'scope [Mutex<Option<Worker<'scope, 'p>>>],
    pub(crate) in_flight: &'scope crate::pool::InFlight,
    pub(crate) cap: usize,
}

impl<'scope, 'p: 'scope> PoolDispatch<'_, 'scope, 'p> {
    fn spawn(&self, batch: Vec<Job>) {
        let (shared, pool, slots, in_flight) =
            (self.shared, self.pool, self.slots, self.in_flight);
        let queued = Instant::now();
        self.scope.spawn(move |_| {
            let i = pool.current_index();
            let mut slot = slots[i % slots.len()]
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let w = slot.get_or_insert_with(|| Worker::new(shared, i));
            if let Some(_assumed) = shared.assume() {
                w.run_batch(batch, queued);
            }
            drop(slot);
            in_flight.leave();
        });
    }
}

impl<'scope, 'p: 'scope> Dispatch for PoolDispatch<'_, 'scope, 'p> {
    fn try_send(&self, batch: Vec<Job>) -> std::result::Result<(), Vec<Job>> {
        if !self.in_flight.has_room(self.cap) {
            return Err(batch);
        }
        self.in_flight.enter(self.cap);
        self.spawn(batch);
        Ok(())
    }

    fn send(&self, batch: Vec<Job>) {
        self.in_flight.enter(self.cap);
        self.spawn(batch);
    }

    fn queued(&self) -> usize {
        self.in_flight.len()
    }
}

/// Room for a batch, capped so that a huge COPY_BATCH does not reserve
/// memory it may never use.
fn batch_capacity(shared: &Shared<'_>) -> usize {
    shared.plan.tunables.copy_batch.min(4096)
}

/// The top destination directory: created with its parents if missing;
/// an existing one was checked by `check_destination`.
fn make_root(dst: &Path) -> Result<()> {
    if fs::metadata(dst).is_ok() {
        return Ok(());
    }
    if let Some(parent) = dst.parent()
        && !parent.as_os_str().is_empty()
    {
        fs::create_dir_all(parent)
            .map_err(|e| Error::io(Op::Mkdir, parent, e))?;
    }
    posix::mkdir(dst, 0o700).map_err(|e| Error::io(Op::Mkdir, dst, e))
}

/// A directory inside the copy, made in its parent's descriptor and
/// opened without following a symlink. 0700 until its contents are done,
/// so its owner can fill it whatever its final mode. Merging, a directory
/// already there is used; a symlink there is never followed.
fn make_dir(
    parent: std::os::fd::RawFd,
    leaf: &std::ffi::CStr,
    dst: &Path,
    merge: bool,
    layered: bool,
) -> Result<OwnedFd> {
    match at::mkdir(parent, leaf, 0o700) {
        Ok(()) => {}
        Err(e) if merge && e.kind() == io::ErrorKind::AlreadyExists => {
            // A layer's directory replaces a lower layer's file or
            // symlink there (the symlink removed, never followed).
            if layered
                && at::lstat(parent, leaf)
                    .map_err(|e| Error::io(Op::Stat, dst, e))?
                    .is_some_and(|st| {
                        st.st_mode & libc::S_IFMT != libc::S_IFDIR
                    })
            {
                crate::beneath::remove_at(parent, leaf, dst)?;
                at::mkdir(parent, leaf, 0o700)
                    .map_err(|e| Error::io(Op::Mkdir, dst, e))?;
            }
        }
        Err(e) => return Err(Error::io(Op::Mkdir, dst, e)),
    }
    beneath::step(parent, leaf, None).map_err(|f| match f {
        beneath::StepFail::Met(crate::error::Met::NotADirectory) => {
            Error::refused(dst, Refusal::Conflict)
        }
        f => step_error(f, dst),
    })
}
