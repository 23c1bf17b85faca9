//! Directory completion: metadata after contents.
//!
//! Each directory being copied has a [`DirNode`] whose `pending` count is
//! held by: the walker while it is still reading the directory (1), every
//! queued job inside it (1 each), and every subdirectory not yet complete
//! (1 each). Whoever drops the count to zero (the walker leaving the
//! directory, or the worker finishing its last job) applies the
//! directory's owner, xattrs, mode and times, then releases one count on
//! the parent. So a directory's mtime is set after the last entry was
//! created in it, and a 0555 directory becomes 0555 only once full.
//! Nothing is finalized once the run has stopped on an error; going on
//! past errors, a directory whose metadata failed still lets its parent
//! finish.

use std::fs::Metadata;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::Shared;
use super::meta;

/// A directory whose metadata is applied when its contents are done.
pub(crate) struct DirNode {
    pub(crate) src: PathBuf,
    pub(crate) dst: PathBuf,
    /// `lstat` of the source taken before the walk read it, so the
    /// access time is the one before our own readdir.
    pub(crate) md: Metadata,
    /// The destination directory, held from its creation: everything in
    /// it is made through this descriptor, and its metadata applied.
    pub(crate) fd: Arc<OwnedFd>,
    pending: AtomicUsize,
    parent: Option<Arc<DirNode>>,
}

impl DirNode {
    /// A node held once by its creator (the walker); takes one hold on
    /// `parent`.
    pub(crate) fn new(
        src: PathBuf,
        dst: PathBuf,
        md: Metadata,
        fd: Arc<OwnedFd>,
        parent: Option<Arc<DirNode>>,
    ) -> Arc<Self> {
        if let Some(p) = &parent {
            p.hold();
        }
        Arc::new(DirNode {
            src,
            dst,
            md,
            fd,
            pending: AtomicUsize::new(1),
            parent,
        })
    }

    /// One more thing inside must finish before this directory is done.
    pub(crate) fn hold(&self) {
        self.pending.fetch_add(1, Ordering::Relaxed);
    }
}

/// Releases one hold on `node`; finalizes every directory whose count
/// reaches zero, walking up the tree (iteratively: trees can be deep).
pub(crate) fn release(node: &Arc<DirNode>, shared: &Shared<'_>) {
    let mut cur = Arc::clone(node);
    loop {
        // AcqRel: the finalizer must see that every release before it
        // happened, whichever thread did it.
        if cur.pending.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        if shared.stopped() {
            return;
        }
        if let Err(e) = meta::apply_dir(shared, &cur) {
            shared.entry_failed(e);
            if shared.stopped() {
                return;
            }
        }
        match &cur.parent {
            Some(p) => cur = Arc::clone(p),
            None => return,
        }
    }
}
