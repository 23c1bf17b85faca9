//! The descriptor budget: how many directories a run (or every run on a
//! [`Pool`](crate::Pool)) may hold open at once.
//!
//! A process may have `RLIMIT_NOFILE` descriptors open; zoneadm starts
//! the brand hook with illumos' default soft limit of 256. Each binary
//! first raises its soft limit to the hard one ([`raise_limit`]), as Go's
//! runtime and systemd do; then every run takes the directories it opens
//! out of a budget derived from what the limit is:
//!
//! ```text
//! budget = max(soft limit − reserve, floor)
//! reserve = BASE_RESERVE + PER_THREAD × (workers + walkers)
//! floor   = PER_WALKER × walkers + 2
//! ```
//!
//! [`BASE_RESERVE`] covers what is open besides the engine's directories:
//! stdio, the log, sockets, the pool's own, the top directories of the
//! run. [`PER_THREAD`] covers what each engine thread opens for a moment
//! and never keeps: a worker's source and destination file, a finished
//! directory's `..` reopened to apply its metadata, a hard link's first
//! directory reopened beneath the top. The budget counts the rest, the
//! directories held open across entries: each walked directory's source
//! and destination, from when a walker opens it until nothing (its
//! reading, queued jobs in it, its queued subdirectories) needs it. The
//! walk goes on with any budget of two (see the deadlock argument in the
//! engine's module documentation); the floor lets each walker have a
//! directory open and the next one taken. Under a limit too low for the
//! reserve and the floor the run still goes on, and an `EMFILE` then is
//! waited out as any other spent budget.
//!
//! Slots are taken before a descriptor is opened and given back when it
//! is closed; taking one waits while the budget is spent, never fails.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::sys::posix;

/// Descriptors set aside for everything but the engine's threads and
/// directories: stdio, logs, sockets, the pool, the run's top
/// directories.
pub const BASE_RESERVE: usize = 32;

/// Descriptors set aside for each worker and walker thread: what one
/// opens for a moment while it holds its share of the budget.
pub const PER_THREAD: usize = 6;

/// The budget's floor per walker: the source and destination of the
/// directory it reads and of the next one it opens.
pub const PER_WALKER: usize = 4;

/// Used when the limit cannot be read.
const UNKNOWN_LIMIT: u64 = 256;

/// Raises the soft limit on open descriptors to the hard limit; returns
/// the soft limit now in force. Each binary calls this first, so that a
/// tree as wide as its files allow is never held to a caller's lower
/// default (zoneadm's, a shell's `ulimit -n`).
pub fn raise_limit() -> io::Result<u64> {
    let (soft, hard) = posix::nofile_limits()?;
    if soft >= hard {
        return Ok(soft);
    }
    match posix::set_nofile_soft(hard) {
        Ok(()) => Ok(hard),
        // Some systems cap the soft limit below an unlimited hard one.
        Err(_) => Ok(soft),
    }
}

/// The soft limit on open descriptors now.
pub fn limit() -> u64 {
    posix::nofile_limits().map_or(UNKNOWN_LIMIT, |(soft, _)| soft)
}

/// A budget of open descriptors, shared by its clones.
#[derive(Clone)]
pub struct Descriptors(Arc<Inner>);

struct Inner {
    limit: u64,
    total: usize,
    held: Mutex<usize>,
    freed: Condvar,
    peak: AtomicUsize,
}

impl Descriptors {
    /// The budget for `workers` and `walkers` threads under the soft
    /// limit now in force.
    pub fn for_threads(workers: usize, walkers: usize) -> Descriptors {
        Descriptors::derived(limit(), workers, walkers)
    }

    /// The budget for `workers` and `walkers` threads under a soft limit
    /// of `limit`: what is left of it past the reserve, at least the
    /// floor.
    pub fn derived(limit: u64, workers: usize, walkers: usize) -> Descriptors {
        let walkers = walkers.max(1);
        let reserve = BASE_RESERVE + PER_THREAD * (workers + walkers);
        let floor = PER_WALKER * walkers + 2;
        let left = usize::try_from(limit)
            .unwrap_or(usize::MAX)
            .saturating_sub(reserve);
        Descriptors::with_total(limit, left.max(floor))
    }

    /// A budget of exactly `total` descriptors (at least 2), counted
    /// against a limit of `limit`.
    pub fn with_total(limit: u64, total: usize) -> Descriptors {
        Descriptors(Arc::new(Inner {
            limit,
            total: total.max(2),
            held: Mutex::new(0),
            freed: Condvar::new(),
            peak: AtomicUsize::new(0),
        }))
    }

    /// The soft limit the budget was derived from.
    pub fn limit(&self) -> u64 {
        self.0.limit
    }

    /// Descriptors in the budget.
    pub fn total(&self) -> usize {
        self.0.total
    }

    /// The most descriptors held at once so far.
    pub fn peak(&self) -> usize {
        self.0.peak.load(Ordering::Relaxed)
    }

    /// Descriptors held now.
    pub fn held(&self) -> usize {
        *self.0.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `n` descriptors if the budget has them now.
    pub(crate) fn try_take(&self, n: usize) -> Option<Slot> {
        let mut held = self.0.held.lock().unwrap_or_else(|p| p.into_inner());
        if *held + n > self.0.total {
            return None;
        }
        *held += n;
        debug_assert!(*held <= self.0.total, "descriptor budget overdrawn");
        self.0.peak.fetch_max(*held, Ordering::Relaxed);
        Some(Slot {
            budget: self.clone(),
            n,
        })
    }

    /// Waits until descriptors are given back, or `timeout` passes.
    pub(crate) fn wait(&self, timeout: Duration) {
        let held = self.0.held.lock().unwrap_or_else(|p| p.into_inner());
        let _timed_out = self.0.freed.wait_timeout(held, timeout);
    }

    /// Runs `open` until it succeeds or fails other than for want of
    /// descriptors (`EMFILE`, `ENFILE`): those mean another thread of the
    /// process took the descriptors the budget left, and are waited out
    /// while anything holds descriptors to give back, up to a few seconds
    /// when nothing in the budget does.
    pub(crate) fn retrying<T, E>(
        &self,
        mut open: impl FnMut() -> Result<T, E>,
        exhausted: impl Fn(&E) -> bool,
    ) -> Result<T, E> {
        let mut idle = 0;
        loop {
            match open() {
                Err(e) if exhausted(&e) && idle < EXHAUSTED_TRIES => {
                    if self.held() == 0 {
                        idle += 1;
                    }
                    self.wait(EXHAUSTED_WAIT);
                }
                r => return r,
            }
        }
    }

    fn give_back(&self, n: usize) {
        let mut held = self.0.held.lock().unwrap_or_else(|p| p.into_inner());
        *held = held.saturating_sub(n);
        self.0.freed.notify_all();
    }
}

/// Waits for descriptors another part of the process holds, when the
/// budget holds none: this many of [`EXHAUSTED_WAIT`].
const EXHAUSTED_TRIES: u32 = 100;
const EXHAUSTED_WAIT: Duration = Duration::from_millis(20);

/// True if `e` says the process or the system is out of descriptors.
pub(crate) fn exhausted(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// Descriptors taken from a budget; given back when dropped.
pub(crate) struct Slot {
    budget: Descriptors,
    n: usize,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.budget.give_back(self.n);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn the_budget_is_the_limit_less_the_reserve_and_at_least_the_floor() {
        let b = Descriptors::derived(256, 8, 1);
        assert_eq!(b.total(), 256 - BASE_RESERVE - PER_THREAD * 9);
        let tight = Descriptors::derived(64, 8, 16);
        assert_eq!(tight.total(), PER_WALKER * 16 + 2);
    }

    #[test]
    fn slots_wait_for_what_is_given_back() {
        let b = Descriptors::with_total(64, 4);
        let a = b.try_take(3).unwrap();
        assert!(b.try_take(2).is_none());
        drop(a);
        let c = b.try_take(4).unwrap();
        assert_eq!((b.held(), b.peak()), (4, 4));
        drop(c);
        assert_eq!(b.held(), 0);
    }
}
