//! A directory being copied, as the walk and the workers hold it: its
//! name, parent and count ([`DirNode`]) and its open descriptors
//! ([`DirFds`]), reopened when needed. Apart from completion (`dirs`) and
//! metadata (`meta`), which both use it.
//!
//! A node does not keep its directory open: its descriptors belong to
//! what uses them (the walker reading it, the jobs in it, and, while it
//! has subdirectories queued, a pin the walk may let go of when the
//! descriptor budget is spent), so however deep a tree is, a chain of
//! directories waiting for their last subdirectory holds none. A node
//! finalized after all of those are gone is reopened from the
//! subdirectory that completed it (`..` of the source and of the
//! destination directory, never following a symlink); one needed again
//! for a queued subdirectory or a hard link is reopened beneath its
//! nearest ancestor still open (the top is, for the whole run), one name
//! at a time. Either is used only if it is the very directory recorded
//! when it was made: a directory moved meanwhile is an error, not a way
//! elsewhere.
//!
//! A node keeps its name and a link to its parent, not its paths: memory
//! per level is constant however deep the tree. A path, for a message or
//! a rule, is made when needed by walking up to the top ([`DirNode::paths`]).

use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, Weak};

use super::opening::step_error;
use super::writes::DstDir;
use crate::beneath;
use crate::descriptors::Slot;
use crate::error::{Error, Op, Refusal, Result};
use crate::sys::posix::{Stat, at};

/// The open source and destination directory of a node, and the budget
/// slot they hold (none for the top, or for a directory reopened for a
/// moment: those come out of the reserve).
#[derive(Clone)]
pub(crate) struct DirFds {
    pub(crate) src: Arc<OwnedFd>,
    pub(crate) dst: Arc<DstDir>,
    pub(crate) hold: Option<Arc<Slot>>,
}

/// Holds a walker takes on a directory it is about to read, beyond its
/// own: one for each job and subdirectory it will queue, counted out
/// locally and the rest given back at once when it has read the
/// directory (`dirs::release_n`), rather than one shared atomic add per
/// entry. Far more than a directory can hold, so the count cannot reach
/// zero before the walker is done.
pub(crate) const READ_RESERVE: usize = 1 << (usize::BITS - 2);

/// A directory whose metadata is applied when its contents are done.
pub(crate) struct DirNode {
    /// Its name in its parent (empty for the top).
    name: CString,
    /// The source's `lstat`, taken before the walk read it, so the access
    /// time is the one before our own readdir.
    pub(crate) md: Stat,
    /// `(dev, ino)` of the destination directory made; `None` for one a
    /// dry run would make, which is never there to reopen.
    dst_id: Option<(u64, u64)>,
    open: Mutex<Open>,
    /// The top directory's descriptors and paths, kept for the whole
    /// run: there is no directory to reopen it from.
    top: Option<(DirFds, PathBuf, PathBuf)>,
    pub(super) pending: AtomicUsize,
    pub(super) parent: Option<Arc<DirNode>>,
}

/// A node's descriptors: while anything else holds them, and while it
/// has subdirectories queued, unless the walk let go of them.
struct Open {
    src: Weak<OwnedFd>,
    dst: Weak<DstDir>,
    hold: Weak<Slot>,
    pin: Option<DirFds>,
    queued: usize,
}

impl Open {
    fn live(&self) -> Option<DirFds> {
        if let Some(p) = &self.pin {
            return Some(p.clone());
        }
        Some(DirFds {
            src: self.src.upgrade()?,
            dst: self.dst.upgrade()?,
            hold: self.hold.upgrade(),
        })
    }

    fn set(&mut self, fds: &DirFds) {
        self.src = Arc::downgrade(&fds.src);
        self.dst = Arc::downgrade(&fds.dst);
        self.hold = fds.hold.as_ref().map_or_else(Weak::new, Arc::downgrade);
    }
}

impl DirNode {
    /// A node held by the walker reading it: once, and
    /// [`READ_RESERVE`] times for what it will queue. `parent`'s hold
    /// for it was taken when it was queued, and passes to it. The top
    /// (no parent) is given its paths.
    pub(crate) fn new(
        name: &CStr,
        md: Stat,
        fds: &DirFds,
        dst_id: Option<(u64, u64)>,
        parent: Option<Arc<DirNode>>,
        top_paths: Option<(PathBuf, PathBuf)>,
    ) -> Arc<Self> {
        let top = top_paths.map(|(s, d)| (fds.clone(), s, d));
        let mut open = Open {
            src: Weak::new(),
            dst: Weak::new(),
            hold: Weak::new(),
            pin: None,
            queued: 0,
        };
        open.set(fds);
        Arc::new(DirNode {
            name: name.to_owned(),
            md,
            dst_id,
            open: Mutex::new(open),
            top,
            pending: AtomicUsize::new(1 + READ_RESERVE),
            parent,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The source and destination paths, made by walking up to the top:
    /// for messages, rules and listeners, never to open anything.
    pub(crate) fn paths(&self) -> (PathBuf, PathBuf) {
        self.paths_with(None)
    }

    /// The paths of `name` in this directory.
    pub(crate) fn paths_of(&self, name: &CStr) -> (PathBuf, PathBuf) {
        self.paths_with(Some(name))
    }

    /// The paths, with `leaf` below them; each made in one allocation,
    /// as every job's are.
    fn paths_with(&self, leaf: Option<&CStr>) -> (PathBuf, PathBuf) {
        let mut names: Vec<&CStr> = Vec::with_capacity(16);
        names.extend(leaf);
        let mut cur = self;
        let (top_src, top_dst) = loop {
            if let Some((_, s, d)) = &cur.top {
                break (s.as_path(), d.as_path());
            }
            names.push(&cur.name);
            match &cur.parent {
                Some(p) => cur = p,
                None => break (Path::new(""), Path::new("")),
            }
        };
        let below: usize = names.iter().map(|n| n.to_bytes().len() + 1).sum();
        let make = |top: &Path| {
            let mut p = PathBuf::with_capacity(top.as_os_str().len() + below);
            p.push(top);
            for n in names.iter().rev() {
                p.push(OsStr::from_bytes(n.to_bytes()));
            }
            p
        };
        (make(top_src), make(top_dst))
    }

    /// Counts a subdirectory queued in this directory, open as `fds`,
    /// which stay open for it (pinned) until it is taken; true if this
    /// pinned them, for the walk to let go of when descriptors run short.
    pub(crate) fn queue_sub(&self, fds: &DirFds) -> bool {
        let mut o = self.lock();
        o.queued += 1;
        if o.pin.is_some() {
            return false;
        }
        o.pin = Some(fds.clone());
        true
    }

    /// A queued subdirectory taken: its parent's descriptors if still
    /// open; unpinned once no subdirectory is queued.
    pub(crate) fn take_sub(&self) -> Option<DirFds> {
        let mut o = self.lock();
        let live = o.live();
        o.queued = o.queued.saturating_sub(1);
        if o.queued == 0 {
            o.pin = None;
        }
        live
    }

    /// Lets go of the pin: the descriptors close once nothing else
    /// holds them, and a subdirectory queued later reopens them.
    pub(crate) fn unpin(&self) {
        let pin = self.lock().pin.take();
        drop(pin);
    }

    /// Whether the node is pinned now.
    pub(crate) fn pinned(&self) -> bool {
        self.lock().pin.is_some()
    }

    /// The directory's descriptors: the top's, still open, or reopened
    /// beneath its nearest ancestor still open, one name at a time.
    pub(crate) fn open_fds(self: &Arc<Self>) -> Result<DirFds> {
        let mut below = Vec::new();
        let mut cur = Arc::clone(self);
        let mut fds = loop {
            if let Some((t, ..)) = &cur.top {
                break t.clone();
            }
            if let Some(f) = cur.lock().live() {
                break f;
            }
            let Some(p) = cur.parent.clone() else {
                return Err(self.lost());
            };
            below.push(cur);
            cur = p;
        };
        for n in below.iter().rev() {
            fds = n.reopen_in(&fds)?;
        }
        Ok(fds)
    }

    /// Opens this directory in its parent's descriptors `parent`,
    /// if it is still the one recorded.
    fn reopen_in(&self, parent: &DirFds) -> Result<DirFds> {
        let shown = || self.paths();
        let src = at::open_dir(parent.src.as_raw_fd(), &self.name)
            .map_err(|e| Error::io(Op::Open, shown().0, e))?;
        check_id(&src, self.md.identity(), || shown().0)?;
        let dst = match (self.dst_id, parent.dst.raw()) {
            (Some(id), Some(p)) => {
                let dst = beneath::step(p, &self.name, None)
                    .map_err(|f| step_error(f, &shown().1))?;
                check_id(&dst, id, || shown().1)?;
                DstDir::Open(dst)
            }
            // A dry run's, not made.
            (None, _) => DstDir::Unmade,
            // In a directory not made: none is.
            (Some(_), None) => return Err(self.lost()),
        };
        let fds = DirFds {
            src: Arc::new(src),
            dst: Arc::new(dst),
            hold: None,
        };
        self.lock().set(&fds);
        Ok(fds)
    }

    /// The error for a directory none of whose ancestors could be
    /// opened (that error is recorded).
    fn lost(&self) -> Error {
        Error::io(
            Op::Open,
            self.paths().1,
            std::io::Error::other("its subdirectory could not be reopened"),
        )
    }

    /// This node's descriptors: still held elsewhere, or reopened as `..`
    /// of a subdirectory's (`below`).
    pub(super) fn fds(&self, below: Option<&DirFds>) -> Result<DirFds> {
        if let Some((t, ..)) = &self.top {
            return Ok(t.clone());
        }
        if let Some(f) = self.lock().live() {
            return Ok(f);
        }
        let Some(below) = below else {
            // Its subdirectory could not be reopened (that error is
            // recorded); nothing else leads here.
            return Err(self.lost());
        };
        let src = self.reopen(&below.src, self.md.identity(), true)?;
        let dst = match (self.dst_id, below.dst.fd()) {
            (Some(id), Some(below)) => {
                DstDir::Open(self.reopen(below, id, false)?)
            }
            (None, _) => DstDir::Unmade,
            (Some(_), None) => return Err(self.lost()),
        };
        Ok(DirFds {
            src: Arc::new(src),
            dst: Arc::new(dst),
            hold: None,
        })
    }

    /// `..` of `child`, if it is the directory `id` names.
    fn reopen(
        &self,
        child: &OwnedFd,
        id: (u64, u64),
        source: bool,
    ) -> Result<OwnedFd> {
        let shown = || {
            let (s, d) = self.paths();
            if source { s } else { d }
        };
        let fd = at::open_dir(child.as_raw_fd(), c"..")
            .map_err(|e| Error::io(Op::Open, shown(), e))?;
        check_id(&fd, id, shown)?;
        Ok(fd)
    }
}

/// Refuses `fd` unless it is the directory `id` names.
fn check_id(
    fd: &OwnedFd,
    id: (u64, u64),
    shown: impl Fn() -> PathBuf,
) -> Result<()> {
    let st = at::fstat(fd).map_err(|e| Error::io(Op::Stat, shown(), e))?;
    if Stat::of(&st).identity() != id {
        return Err(Error::refused(shown(), Refusal::Moved));
    }
    Ok(())
}
