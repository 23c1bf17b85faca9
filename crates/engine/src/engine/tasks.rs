//! The directories still to read, shared by a run's walkers: work-stealing
//! deques, the count of directories left, an idle walker's wake-up, and
//! the directories pinned open for their queued subdirectories. Apart
//! from the walker, which only pushes, takes and waits.

use std::collections::VecDeque;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering, fence};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use crossbeam_deque::{Injector, Steal, Stealer, Worker as DequeWorker};

use super::node::DirNode;
use super::writes::DstDir;

/// A directory still to read. It holds a count on its parent's node, whose descriptors stay pinned open for it until it is popped
/// (unless the walk lets go of them for want of descriptors, see
/// [`Tasks::evict`]): only then is it made at the destination and
/// opened, so a directory with many subdirectories queues them without
/// a descriptor each.
pub(crate) struct DirTask {
    pub(super) at: TaskAt,
    pub(super) parent: Option<Arc<DirNode>>,
}

pub(super) enum TaskAt {
    /// The top: the source directory and the destination, both opened
    /// already (the destination unmade when a dry run finds none).
    Top(OwnedFd, DstDir),
    /// A subdirectory: its name in its parent's node.
    Sub(CString),
}

/// The directories still to read, and how an idle walker learns there is
/// more.
pub(crate) struct Tasks {
    injector: Injector<DirTask>,
    stealers: Vec<Stealer<DirTask>>,
    /// Directories queued or being read; the walk is over at zero.
    pending: AtomicUsize,
    /// Walkers waiting for a directory to read.
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
    /// Directories pinned open for their queued subdirectories, oldest
    /// first: let go of when a walker waits for descriptors.
    pins: Mutex<VecDeque<Weak<DirNode>>>,
    /// Length of `pins` after it was last swept of nodes no longer
    /// pinned.
    swept: AtomicUsize,
}

/// An idle walker looks again this often, whatever wakes it: a cancel
/// raised outside the run sends no wake-up.
pub(crate) const IDLE_POLL: Duration = Duration::from_millis(10);

impl Tasks {
    /// The queue of a walk by `walkers` threads, holding `top`, and each
    /// walker's own deque.
    pub(crate) fn new(
        walkers: usize,
        top: DirTask,
    ) -> (Tasks, Vec<DequeWorker<DirTask>>) {
        let locals: Vec<DequeWorker<DirTask>> =
            (0..walkers).map(|_| DequeWorker::new_lifo()).collect();
        let tasks = Tasks {
            injector: Injector::new(),
            stealers: locals.iter().map(DequeWorker::stealer).collect(),
            pending: AtomicUsize::new(1),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            pins: Mutex::new(VecDeque::new()),
            swept: AtomicUsize::new(0),
        };
        tasks.injector.push(top);
        (tasks, locals)
    }

    /// Whether a queued directory is there to take.
    fn has_work(&self) -> bool {
        !self.injector.is_empty() || self.stealers.iter().any(|s| !s.is_empty())
    }

    /// Records `node` as pinned for its queued subdirectories; sweeps
    /// out nodes no longer pinned whenever the record doubled, so that it
    /// stays as long as the pins are, not as the tree.
    pub(crate) fn pinned(&self, node: &Arc<DirNode>) {
        let mut pins = self.pins.lock().unwrap_or_else(|p| p.into_inner());
        pins.push_back(Arc::downgrade(node));
        if pins.len() > 64
            && pins.len() > 2 * self.swept.load(Ordering::Relaxed)
        {
            pins.retain(|w| w.upgrade().is_some_and(|n| n.pinned()));
            self.swept.store(pins.len(), Ordering::Relaxed);
        }
    }

    /// Lets go of the oldest pin (nearest the top, so the cheapest to
    /// reopen); false if there is none.
    pub(crate) fn evict(&self) -> bool {
        loop {
            let oldest = self
                .pins
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop_front();
            let Some(w) = oldest else { return false };
            if let Some(n) = w.upgrade()
                && n.pinned()
            {
                n.unpin();
                return true;
            }
        }
    }

    /// One directory read: the walk ends when none is left.
    pub(crate) fn done_one(&self) {
        if self.pending.fetch_sub(1, Ordering::SeqCst) == 1 {
            let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.wake.notify_all();
        }
    }

    /// Whether every directory has been read.
    pub(crate) fn over(&self) -> bool {
        self.pending.load(Ordering::SeqCst) == 0
    }

    /// A directory taken from the shared queue or another walker's
    /// deque (the `index`th walker's is `local`).
    pub(crate) fn steal(
        &self,
        local: &DequeWorker<DirTask>,
        index: usize,
    ) -> Option<DirTask> {
        let n = self.stealers.len();
        loop {
            let mut retry = false;
            match self.injector.steal_batch_and_pop(local) {
                Steal::Success(t) => return Some(t),
                Steal::Retry => retry = true,
                Steal::Empty => {}
            }
            for k in 1..n {
                match self.stealers[(index + k) % n].steal() {
                    Steal::Success(t) => return Some(t),
                    Steal::Retry => retry = true,
                    Steal::Empty => {}
                }
            }
            if !retry {
                return None;
            }
        }
    }

    /// Waits until another walker queues a directory, the walk ends, the
    /// run stops (`stopped`), or a while passes.
    pub(crate) fn wait(&self, stopped: impl Fn() -> bool) {
        let g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        // Pairs with the fence after a push: either the pusher sees this
        // sleeper and wakes it, or this sees the pushed directory.
        fence(Ordering::SeqCst);
        if !self.has_work()
            && self.pending.load(Ordering::SeqCst) != 0
            && !stopped()
        {
            let _timed_out = self.wake.wait_timeout(g, IDLE_POLL);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Queues a subdirectory on a walker's deque (`local`), for any
    /// walker.
    pub(crate) fn push(&self, local: &DequeWorker<DirTask>, task: DirTask) {
        self.pending.fetch_add(1, Ordering::SeqCst);
        local.push(task);
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.wake.notify_one();
        }
    }
}
