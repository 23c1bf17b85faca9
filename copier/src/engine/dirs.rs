//! Directory completion: metadata after contents.
//!
//! Each directory being copied has a [`DirNode`] whose `pending` count is
//! held by: the walker reading the directory (1, until it has read it),
//! every queued job inside it (1 each), and every subdirectory not yet
//! complete, queued or read (1 each); the walker counts the last two out
//! of a reserve it holds while reading ([`READ_RESERVE`]). Whoever drops the count to zero (a
//! walker done reading, the worker finishing the last job, or the last
//! subdirectory completing) applies the directory's owner, xattrs, mode
//! and times, then releases one count on the parent. So a directory's
//! mtime is set after the last entry was created in it, and a 0555
//! directory becomes 0555 only once full. Nothing is finalized once the
//! run has stopped on an error; going on past errors, a directory whose
//! metadata failed still lets its parent finish.
//!
//! A node does not keep its directory open: its descriptors belong to
//! what uses them (the walker reading it, the jobs in it, its queued
//! subdirectories, which are made and opened in it), so however deep a
//! tree is, a chain of directories waiting for their last subdirectory
//! holds none. A node finalized after all of those are gone is reopened
//! from the subdirectory that completed it (`..` of the source and of the
//! destination directory, never following a symlink), and used only if it
//! is the very directory recorded when it was made: a directory moved
//! meanwhile is an error, not a way elsewhere.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use super::Shared;
use super::meta;
use crate::error::{Error, Op, Refusal, Result};
use crate::sys::posix::{Stat, at};

/// The open source and destination directory of a node.
#[derive(Clone)]
pub(crate) struct DirFds {
    pub(crate) src: Arc<OwnedFd>,
    pub(crate) dst: Arc<OwnedFd>,
}

/// Holds a walker takes on a directory it is about to read, beyond its
/// own: one for each job and subdirectory it will queue, counted out
/// locally and the rest given back at once when it has read the
/// directory ([`release_n`]), rather than one shared atomic add per
/// entry. Far more than a directory can hold, so the count cannot reach
/// zero before the walker is done.
pub(crate) const READ_RESERVE: usize = 1 << (usize::BITS - 2);

/// A directory whose metadata is applied when its contents are done.
pub(crate) struct DirNode {
    pub(crate) src: PathBuf,
    pub(crate) dst: PathBuf,
    /// The source's `lstat`, taken before the walk read it, so the access
    /// time is the one before our own readdir.
    pub(crate) md: Stat,
    /// The descriptors, while anything else holds them.
    src_fd: Weak<OwnedFd>,
    dst_fd: Weak<OwnedFd>,
    /// `(dev, ino)` of the destination directory made.
    dst_id: (u64, u64),
    /// The top directory's descriptors, kept for the whole run: there is
    /// no directory to reopen it from.
    top: Option<DirFds>,
    pending: AtomicUsize,
    parent: Option<Arc<DirNode>>,
}

impl DirNode {
    /// A node held by the walker reading it: once, and
    /// [`READ_RESERVE`] times for what it will queue. `parent`'s hold
    /// for it was taken when it was queued, and passes to it.
    pub(crate) fn new(
        src: PathBuf,
        dst: PathBuf,
        md: Stat,
        fds: &DirFds,
        dst_id: (u64, u64),
        parent: Option<Arc<DirNode>>,
    ) -> Arc<Self> {
        let top = parent.is_none().then(|| fds.clone());
        Arc::new(DirNode {
            src,
            dst,
            md,
            src_fd: Arc::downgrade(&fds.src),
            dst_fd: Arc::downgrade(&fds.dst),
            dst_id,
            top,
            pending: AtomicUsize::new(1 + READ_RESERVE),
            parent,
        })
    }

    /// This node's descriptors: still held elsewhere, or reopened as `..`
    /// of a subdirectory's (`below`).
    fn fds(&self, below: Option<&DirFds>) -> Result<DirFds> {
        if let Some(t) = &self.top {
            return Ok(t.clone());
        }
        if let (Some(src), Some(dst)) =
            (self.src_fd.upgrade(), self.dst_fd.upgrade())
        {
            return Ok(DirFds { src, dst });
        }
        let Some(below) = below else {
            // Its subdirectory could not be reopened (that error is
            // recorded); nothing else leads here.
            return Err(Error::io(
                Op::Open,
                &self.dst,
                std::io::Error::other("its subdirectory could not be reopened"),
            ));
        };
        let src = self.reopen(&below.src, self.md.identity(), &self.src)?;
        let dst = self.reopen(&below.dst, self.dst_id, &self.dst)?;
        Ok(DirFds {
            src: Arc::new(src),
            dst: Arc::new(dst),
        })
    }

    /// `..` of `child`, if it is the directory `id` names.
    fn reopen(
        &self,
        child: &OwnedFd,
        id: (u64, u64),
        shown: &std::path::Path,
    ) -> Result<OwnedFd> {
        let fd = at::open_dir(child.as_raw_fd(), c"..")
            .map_err(|e| Error::io(Op::Open, shown, e))?;
        let st = at::fstat(&fd).map_err(|e| Error::io(Op::Stat, shown, e))?;
        if Stat::of(&st).identity() != id {
            return Err(Error::refused(shown, Refusal::Moved));
        }
        Ok(fd)
    }
}

/// Releases one hold on `node`, whose descriptors the caller holds
/// (`src`, `dst`); finalizes every directory whose count reaches zero,
/// walking up the tree (iteratively: trees can be deep).
pub(crate) fn release(
    node: &Arc<DirNode>,
    src: &Arc<OwnedFd>,
    dst: &Arc<OwnedFd>,
    shared: &Shared<'_>,
) {
    release_n(node, 1, src, dst, shared);
}

/// [`release`] of `n` holds at once.
pub(crate) fn release_n(
    node: &Arc<DirNode>,
    n: usize,
    src: &Arc<OwnedFd>,
    dst: &Arc<OwnedFd>,
    shared: &Shared<'_>,
) {
    // AcqRel: the finalizer must see that every release before it
    // happened, whichever thread did it. Most releases stop here, with
    // nothing cloned.
    if node.pending.fetch_sub(n, Ordering::AcqRel) != n {
        return;
    }
    let mut cur = Arc::clone(node);
    let mut own = Some(DirFds {
        src: Arc::clone(src),
        dst: Arc::clone(dst),
    });
    let mut below: Option<DirFds> = None;
    let mut first = true;
    loop {
        if !std::mem::take(&mut first)
            && cur.pending.fetch_sub(1, Ordering::AcqRel) != 1
        {
            return;
        }
        if shared.stopped() {
            return;
        }
        let fds = match own.take() {
            Some(f) => Ok(f),
            None => cur.fds(below.as_ref()),
        };
        below = match fds {
            // Walk-only leaves directory metadata out: it is the workers'
            // work in a copy.
            Ok(f) if shared.plan.walk_only => Some(f),
            Ok(f) => {
                if let Err(e) = meta::apply_dir(shared, &cur, &f) {
                    shared.entry_failed(e);
                }
                Some(f)
            }
            Err(e) => {
                shared.entry_failed(e);
                None
            }
        };
        if shared.stopped() {
            return;
        }
        match &cur.parent {
            Some(p) => cur = Arc::clone(p),
            None => return,
        }
    }
}
