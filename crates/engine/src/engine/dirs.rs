//! Directory completion: metadata after contents.
//!
//! Each directory being copied has a [`DirNode`] whose `pending` count is
//! held by: the walker reading the directory (1, until it has read it),
//! every queued job inside it (1 each), and every subdirectory not yet
//! complete, queued or read (1 each); the walker counts the last two out
//! of a reserve it holds while reading
//! ([`READ_RESERVE`](super::node::READ_RESERVE)). Whoever drops the count
//! to zero (a walker done reading, the worker finishing the last job, or
//! the last subdirectory completing) applies the directory's owner, xattrs, mode
//! and times, then releases one count on the parent. So a directory's
//! mtime is set after the last entry was created in it, and a 0555
//! directory becomes 0555 only once full. Nothing is finalized once the
//! run has stopped on an error; going on past errors, a directory whose
//! metadata failed still lets its parent finish.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::meta;
use super::node::{DirFds, DirNode};
use super::shared::Shared;
use super::writes::Writes;

/// Releases one hold on `node`, whose descriptors the caller holds
/// (`fds` gives them, if it could open them: called only when they are
/// needed); finalizes every directory whose count reaches zero, walking
/// up the tree (iteratively: trees can be deep).
pub(crate) fn release(
    node: &Arc<DirNode>,
    fds: impl FnOnce() -> Option<DirFds>,
    shared: &Shared<'_>,
) {
    release_n(node, 1, fds, shared);
}

/// [`release`] of `n` holds at once.
pub(crate) fn release_n(
    node: &Arc<DirNode>,
    n: usize,
    fds: impl FnOnce() -> Option<DirFds>,
    shared: &Shared<'_>,
) {
    // AcqRel: the finalizer must see that every release before it
    // happened, whichever thread did it. Most releases stop here, with
    // nothing cloned.
    if node.pending.fetch_sub(n, Ordering::AcqRel) != n {
        return;
    }
    let mut cur = Arc::clone(node);
    let mut own = fds();
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
        let fds = match (shared.writes, own.take()) {
            // A dry run sets no metadata: nothing to open for it.
            (Writes::Record, _) => None,
            (Writes::Make, Some(f)) => Some(Ok(f)),
            (Writes::Make, None) => Some(cur.fds(below.as_ref())),
        };
        below = match fds {
            None => None,
            // Walk-only leaves directory metadata out: it is the workers'
            // work in a copy.
            Some(Ok(f)) if shared.plan.walk_only => Some(f),
            Some(Ok(f)) => {
                if let Err(e) = meta::apply_dir(shared, &cur, &f) {
                    shared.entry_failed(e);
                }
                Some(f)
            }
            Some(Err(e)) => {
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
