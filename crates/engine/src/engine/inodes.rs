//! Hard links: the first name of an inode is copied, later names are
//! linked to that copy.
//!
//! Workers learn a file's link count from the `fstat` they do anyway, so
//! the walker needs no `stat` per file. A worker meeting a file with more
//! than one link claims its `(dev, ino)` in a hash map (O(1) per file,
//! however many inodes): the first claimant copies it and marks the slot
//! done; a later claimant waits for that, then links. Waiting cannot
//! deadlock: a slot is only ever pending while its first claimant is
//! copying it, and a copy waits on nothing. A slot leaves the map when its
//! last name has been seen, so the map holds only link groups still open.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use super::node::DirNode;
use super::writes::DstDir;

#[derive(Default)]
pub(crate) struct InodeMap {
    map: Mutex<HashMap<(u64, u64), Group>>,
}

/// Where an entry was written: its directory and its name there; the
/// path only names it in messages.
#[derive(Clone)]
pub(crate) struct Placed {
    pub(crate) dir: PlacedDir,
    pub(crate) leaf: CString,
    pub(crate) shown: PathBuf,
}

/// The directory of a first name. A walked directory is not held open
/// for the later names (they may be anywhere in the tree, any time
/// later, and a group waiting for them must not hold the descriptor
/// budget): it is used if still open, else reopened from its node.
#[derive(Clone)]
pub(crate) enum PlacedDir {
    /// A single job's directory, held open.
    Open(Arc<DstDir>),
    /// A walked directory.
    Walked(Weak<DstDir>, Arc<DirNode>),
}

pub(crate) struct Slot {
    dst: Placed,
    state: Mutex<State>,
    cv: Condvar,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Pending,
    Ended(Outcome),
}

/// How the copy of a first name ended.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Written: made, or made again over what was there.
    Made,
    /// Merging, what was there was like it and left alone.
    Left,
    /// Failed (its error is recorded), or given up.
    Failed,
}

struct Group {
    slot: Arc<Slot>,
    /// Names of this inode not yet seen.
    remaining: u64,
}

/// The outcome of claiming an inode.
pub(crate) enum Claim {
    /// Copy it; then call [`First::done`].
    First(First),
    /// Link to this entry, the copy of the first name; `true` if that
    /// was made anew (not left as it was).
    Later(Placed, bool),
    /// The first copy failed (its error is already recorded) or the run
    /// stopped: nothing to do.
    Abandoned,
}

/// The duty of the first claimant. Dropping it without [`First::done`]
/// (a failed copy, a panic) marks the slot failed so waiters never hang.
pub(crate) struct First(Arc<Slot>);

impl First {
    pub(crate) fn done(self, outcome: Outcome) {
        self.0.set(State::Ended(outcome));
        std::mem::forget(self);
    }
}

impl Drop for First {
    fn drop(&mut self) {
        self.0.set(State::Ended(Outcome::Failed));
    }
}

impl Slot {
    fn set(&self, s: State) {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        *g = s;
        self.cv.notify_all();
    }
}

impl InodeMap {
    /// Claims inode `id` (with `nlink` names) for the entry `dst`.
    /// `stopped` is polled while waiting so a failed run never hangs.
    pub(crate) fn claim(
        &self,
        id: (u64, u64),
        nlink: u64,
        dst: &Placed,
        stopped: impl Fn() -> bool,
    ) -> Claim {
        let slot = {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            match map.entry(id) {
                Entry::Vacant(v) => {
                    let slot = Arc::new(Slot {
                        dst: dst.clone(),
                        state: Mutex::new(State::Pending),
                        cv: Condvar::new(),
                    });
                    v.insert(Group {
                        slot: Arc::clone(&slot),
                        remaining: nlink.saturating_sub(1),
                    });
                    return Claim::First(First(slot));
                }
                Entry::Occupied(mut o) => {
                    let e = o.get_mut();
                    e.remaining = e.remaining.saturating_sub(1);
                    let slot = Arc::clone(&e.slot);
                    if e.remaining == 0 {
                        o.remove();
                    }
                    slot
                }
            }
        };
        let mut g = slot.state.lock().unwrap_or_else(|p| p.into_inner());
        while *g == State::Pending {
            if stopped() {
                return Claim::Abandoned;
            }
            g = slot
                .cv
                .wait_timeout(g, Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        match *g {
            State::Ended(Outcome::Made) => Claim::Later(slot.dst.clone(), true),
            State::Ended(Outcome::Left) => {
                Claim::Later(slot.dst.clone(), false)
            }
            _ => Claim::Abandoned,
        }
    }
}
