//! The walker: reads the source tree in depth-first order, creates each
//! directory, and queues batches of jobs for everything else.

use std::fs;
use std::io;
use std::mem;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Sender, TrySendError};
use walkdir::WalkDir;

use super::dirs::{self, DirNode};
use super::{Job, JobKind, Shared, identity, new_trace};
use crate::beneath::{self, Root};
use crate::error::{Error, Op, Refusal, Result};
use crate::rules::{self, Action};
use crate::stats::Stats;
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
    tx: Option<Sender<Vec<Job>>>,
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
        tx: Sender<Vec<Job>>,
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
        let mut it = WalkDir::new(&plan.src)
            .follow_links(false)
            .same_file_system(!plan.cross_fs)
            .into_iter();
        self.trace.enter(ThreadState::Walking);
        while !self.shared.stopped() {
            let entry = match it.next() {
                None => break,
                Some(Ok(e)) => e,
                Some(Err(e)) => {
                    let path = e.path().unwrap_or(&plan.src).to_path_buf();
                    self.shared.fail(Error::io(
                        Op::ReadDir,
                        path,
                        io::Error::from(e),
                    ));
                    break;
                }
            };
            let depth = entry.depth();
            self.leave_dirs(depth);
            let rel = entry
                .path()
                .strip_prefix(&plan.src)
                .unwrap_or(Path::new(""));
            let dst = if depth == 0 {
                plan.dst.clone()
            } else {
                plan.dst.join(rel)
            };
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
                    self.shared.fail(e);
                    break;
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
                    self.shared.fail(e);
                    break;
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
        let md = entry.metadata().map_err(|e| {
            Error::io(Op::Stat, entry.path(), io::Error::from(e))
        })?;
        if !md.is_dir() {
            return Err(Error::refused(entry.path(), Refusal::ChangedType));
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
                )?
            }
        };
        self.trace.enter(ThreadState::Walking);
        self.stats.dirs += 1;
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
            tx.len() as u64
        ));
        match tx.try_send(batch) {
            Ok(()) => {}
            Err(TrySendError::Full(batch)) => {
                self.trace.enter(ThreadState::Blocked);
                let t0 = Instant::now();
                // An error means every worker is gone; the run has failed
                // and the jobs are dropped.
                let _disconnected = tx.send(batch).is_err();
                self.stats.walker_blocked += t0.elapsed();
                self.trace.enter(ThreadState::Walking);
            }
            Err(TrySendError::Disconnected(_)) => {}
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
) -> Result<OwnedFd> {
    match at::mkdir(parent, leaf, 0o700) {
        Ok(()) => {}
        Err(e) if merge && e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Error::io(Op::Mkdir, dst, e)),
    }
    beneath::step(parent, leaf, None).map_err(|f| match f {
        beneath::StepFail::Met(crate::error::Met::NotADirectory) => {
            Error::refused(dst, Refusal::Conflict)
        }
        f => step_error(f, dst),
    })
}
