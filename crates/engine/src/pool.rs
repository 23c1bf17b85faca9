//! A worker budget shared by many runs.
//!
//! Without a pool each run starts its own `copy_threads` workers, which is
//! right for one process doing one copy. A service running many copies at
//! once gives them all one [`Pool`]: a fixed set of threads that takes
//! batches from every run in the order they were queued, so the workers
//! of all runs together never exceed the pool's size, and a small run
//! queued behind a huge one gets its batches done between the huge one's
//! (each run keeps at most two batches per pool thread in flight).
//!
//! A run given a pool still walks with threads of its own (or reads its
//! archive in the calling thread); only the jobs go to the pool. Its
//! walkers come from the pool's walker budget the same way: a run takes
//! as many of its `copy_walkers` as the budget has free when it starts,
//! and at least one, so that no run waits for another's walk. Its
//! directories come from the pool's descriptor budget
//! ([`Pool::descriptors`]), which every run on the pool shares.

use std::io;
use std::sync::{Arc, Condvar, Mutex};

use crate::descriptors::Descriptors;
use crate::error::{Error, Op};

/// A fixed set of worker threads shared by the runs given it
/// ([`Plan::pool`](crate::Plan::pool),
/// [`UnpackOptions::pool`](crate::unpack::UnpackOptions)). Clones share
/// the threads; they end when the last clone is dropped.
#[derive(Clone)]
pub struct Pool {
    threads: Arc<rayon::ThreadPool>,
    size: usize,
    walkers: Arc<WalkerBudget>,
    descriptors: Descriptors,
}

/// Walker threads the runs on a pool may start between them.
struct WalkerBudget {
    size: usize,
    free: Mutex<usize>,
}

/// Walkers a run took from a pool's budget; given back when dropped.
pub(crate) struct Walkers<'a> {
    budget: Option<&'a WalkerBudget>,
    taken: usize,
    count: usize,
}

impl Walkers<'_> {
    /// How many walkers the run starts.
    pub(crate) fn count(&self) -> usize {
        self.count
    }
}

impl Drop for Walkers<'_> {
    fn drop(&mut self) {
        if let Some(b) = self.budget {
            let mut free = b.free.lock().unwrap_or_else(|p| p.into_inner());
            *free += self.taken;
        }
    }
}

impl Pool {
    /// Starts `threads` workers (at least one), named `copy-0`,
    /// `copy-1`, ….
    pub fn new(threads: usize) -> Result<Pool, Error> {
        Pool::named(threads, "copy")
    }

    /// Starts `threads` workers named `NAME-0`, `NAME-1`, … (Linux shows
    /// 15 bytes of a thread's name).
    pub fn named(threads: usize, name: &str) -> Result<Pool, Error> {
        let size = threads.max(1);
        let name = name.to_string();
        let threads = rayon::ThreadPoolBuilder::new()
            .num_threads(size)
            .thread_name(move |i| format!("{name}-{i}"))
            .build()
            .map_err(|e| {
                Error::io(Op::Open, "thread pool", io::Error::other(e))
            })?;
        let walkers = crate::Tunables {
            copy_threads: size,
            copy_walkers: 0,
            ..crate::Tunables::default()
        }
        .walkers();
        Ok(Pool {
            threads: Arc::new(threads),
            size,
            walkers: Arc::new(WalkerBudget {
                size: walkers,
                free: Mutex::new(walkers),
            }),
            descriptors: Descriptors::for_threads(size, walkers),
        })
    }

    /// The same pool with a walker budget of `walkers` (at least one; by
    /// default what `COPY_WALKERS=0` gives its number of workers, see
    /// [`Tunables::walkers`](crate::Tunables::walkers)): the walker
    /// threads its runs may start between them.
    /// Clones made before share the old budget.
    pub fn with_walkers(mut self, walkers: usize) -> Self {
        let size = walkers.max(1);
        self.walkers = Arc::new(WalkerBudget {
            size,
            free: Mutex::new(size),
        });
        self.descriptors = Descriptors::for_threads(self.size, size);
        self
    }

    /// The same pool with this descriptor budget, shared by every run
    /// on it (by default one derived from the soft limit when the pool
    /// was made, see [`Descriptors::for_threads`]). Clones made before
    /// share the old budget.
    pub fn with_descriptors(mut self, descriptors: Descriptors) -> Self {
        self.descriptors = descriptors;
        self
    }

    /// The descriptor budget its runs share.
    pub fn descriptors(&self) -> &Descriptors {
        &self.descriptors
    }

    /// The walker budget.
    pub fn walkers(&self) -> usize {
        self.walkers.size
    }

    /// Takes up to `want` walkers from the budget; a run gets at least
    /// one even when the budget is spent, so it never waits for
    /// another's walk to end.
    pub(crate) fn take_walkers(&self, want: usize) -> Walkers<'_> {
        let mut free =
            self.walkers.free.lock().unwrap_or_else(|p| p.into_inner());
        let taken = want.min(*free);
        *free -= taken;
        Walkers {
            budget: Some(&self.walkers),
            taken,
            count: taken.max(1),
        }
    }

    /// How many workers the pool has.
    pub fn threads(&self) -> usize {
        self.size
    }

    /// Runs `body` with a scope whose spawned tasks run on the pool; returns
    /// once every task spawned in it finished.
    pub(crate) fn scope<'scope, R>(
        &self,
        body: impl FnOnce(&rayon::Scope<'scope>) -> R,
    ) -> R {
        self.threads.in_place_scope(body)
    }

    /// The calling pool thread's index, or 0 outside the pool.
    pub(crate) fn current_index(&self) -> usize {
        self.threads.current_thread_index().unwrap_or(0)
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("threads", &self.size)
            .field("walkers", &self.walkers.size)
            .finish()
    }
}

/// Counts one run's batches queued on a pool and not yet done, so that
/// the queuing side waits rather than queuing without bound.
#[derive(Default)]
pub(crate) struct InFlight {
    count: Mutex<usize>,
    done: Condvar,
}

impl InFlight {
    /// Waits until fewer than `cap` batches are in flight, then counts one
    /// more. Returns whether it had to wait.
    pub(crate) fn enter(&self, cap: usize) -> bool {
        let mut n = self.count.lock().unwrap_or_else(|p| p.into_inner());
        let waited = *n >= cap;
        while *n >= cap {
            n = self.done.wait(n).unwrap_or_else(|p| p.into_inner());
        }
        *n += 1;
        waited
    }

    /// Whether a batch could enter now without waiting.
    pub(crate) fn has_room(&self, cap: usize) -> bool {
        *self.count.lock().unwrap_or_else(|p| p.into_inner()) < cap
    }

    /// One batch done.
    pub(crate) fn leave(&self) {
        let mut n = self.count.lock().unwrap_or_else(|p| p.into_inner());
        *n = n.saturating_sub(1);
        self.done.notify_all();
    }

    /// Batches in flight now.
    pub(crate) fn len(&self) -> usize {
        *self.count.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whom a run reads and writes as ([`Plan::acting_as`](crate::Plan::acting_as)),
/// from `zinstall-core`; a run given one on a platform with no
/// per-thread identity fails with [`Op::Credentials`](crate::Op::Credentials).
pub use zinstall_core::Credentials;

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn runs_share_the_walker_budget_and_give_it_back() {
        let pool = Pool::new(2).unwrap().with_walkers(3);
        let a = pool.take_walkers(8);
        assert_eq!(a.count(), 3, "all the budget");
        let b = pool.take_walkers(2);
        assert_eq!(b.count(), 1, "spent: one of its own");
        drop(b);
        assert_eq!(pool.take_walkers(2).count(), 1, "a's still out");
        drop(a);
        let c = pool.take_walkers(2);
        assert_eq!(c.count(), 2);
        assert_eq!(pool.take_walkers(5).count(), 1);
        drop(c);
        assert_eq!(pool.take_walkers(5).count(), 3);
        let auto = crate::Tunables {
            copy_threads: 16,
            copy_walkers: 0,
            ..crate::Tunables::default()
        };
        assert_eq!(Pool::new(16).unwrap().walkers(), auto.walkers());
    }
}
