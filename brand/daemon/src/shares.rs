//! The granted jobs' worker budget, shared fairly: each job whose process
//! copies holds a share of the budget, recomputed as jobs come and go,
//! so that none holds more than its fair part while others wait, and a
//! job that stops using its share (stopped, hung) loses it to the others
//! at once in the accounting, and for good when it is failed for making
//! no progress.
//!
//! * Every holder has at least one worker, so at most `total` jobs hold
//!   shares; others wait, and are admitted as holders end: first the
//!   uid holding the fewest shares, then the uid admitted longest ago (a
//!   uid never admitted before any other), then the job that came
//!   first. A new uid's job is served before another's fifth.
//! * The budget is divided among the holders as water fills vessels: a
//!   job wanting fewer workers than an equal part takes what it wants,
//!   the rest share what is left.
//! * A job's process is told its share as it changes and runs only that
//!   many of its workers (`copier::WorkerLimit`); a share taken back
//!   is counted as free at once, and the process gives up the workers at
//!   their next batch.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// The granted jobs' workers, and who holds which part.
pub(crate) struct Shares {
    total: usize,
    ledger: Mutex<Ledger>,
    changed: Condvar,
}

#[derive(Default)]
struct Ledger {
    /// Jobs holding a share, by job id.
    holders: BTreeMap<u64, Holder>,
    /// Jobs waiting for one, in the order they came.
    waiting: Vec<Waiter>,
    /// When each uid with a job here was last admitted (a count of
    /// admissions), so that the uid admitted longest ago goes first.
    admitted_at: HashMap<u32, u64>,
    admissions: u64,
}

struct Holder {
    uid: u32,
    want: usize,
    share: usize,
}

struct Waiter {
    job: u64,
    uid: u32,
    want: usize,
}

/// A job's share, given back when dropped.
pub(crate) struct Share<'s> {
    shares: &'s Shares,
    job: u64,
}

impl Shares {
    /// `total` workers (at least one) to share.
    pub(crate) fn new(total: usize) -> Shares {
        Shares {
            total: total.max(1),
            ledger: Mutex::new(Ledger::default()),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for job `job` of `uid`, wanting `want` workers, to be given
    /// a share; `None` if `cancelled` says to give up meanwhile.
    pub(crate) fn join(
        &self,
        job: u64,
        uid: u32,
        want: usize,
        cancelled: impl Fn() -> bool,
    ) -> Option<Share<'_>> {
        let mut g = self.lock();
        g.waiting.push(Waiter {
            job,
            uid,
            want: want.max(1),
        });
        g.rebalance(self.total);
        self.changed.notify_all();
        while !g.holders.contains_key(&job) {
            if cancelled() {
                g.waiting.retain(|w| w.job != job);
                g.forget_idle_uids();
                return None;
            }
            g = self
                .changed
                .wait_timeout(g, Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Some(Share { shares: self, job })
    }

    /// Jobs holding shares, and jobs waiting for one.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let g = self.lock();
        (g.holders.len(), g.waiting.len())
    }
}

impl Share<'_> {
    /// The workers this job may run now.
    pub(crate) fn workers(&self) -> usize {
        self.shares
            .lock()
            .holders
            .get(&self.job)
            .map_or(1, |h| h.share)
    }
}

impl Drop for Share<'_> {
    fn drop(&mut self) {
        let mut g = self.shares.lock();
        g.holders.remove(&self.job);
        g.rebalance(self.shares.total);
        self.shares.changed.notify_all();
    }
}

impl Ledger {
    /// Admits waiters while there is a worker for each, then divides the
    /// budget among the holders.
    fn rebalance(&mut self, total: usize) {
        while self.holders.len() < total && !self.waiting.is_empty() {
            let held = |uid: u32| {
                self.holders.values().filter(|h| h.uid == uid).count()
            };
            let Some(at) = (0..self.waiting.len()).min_by_key(|i| {
                let w = &self.waiting[*i];
                (
                    held(w.uid),
                    self.admitted_at.get(&w.uid).copied().unwrap_or(0),
                    *i,
                )
            }) else {
                break;
            };
            let w = self.waiting.remove(at);
            self.admissions += 1;
            self.admitted_at.insert(w.uid, self.admissions);
            self.holders.insert(
                w.job,
                Holder {
                    uid: w.uid,
                    want: w.want,
                    share: 1,
                },
            );
        }
        self.forget_idle_uids();
        // Water-filling, the smallest wants first.
        let mut order: Vec<u64> = self.holders.keys().copied().collect();
        order.sort_by_key(|j| (self.holders[j].want, *j));
        let mut left = total;
        let n = order.len();
        for (i, j) in order.iter().enumerate() {
            let h = self.holders.get_mut(j).expect("a holder listed");
            let part = (left / (n - i)).max(1);
            h.share = h.want.min(part);
            left = left.saturating_sub(h.share);
        }
    }

    /// A uid with nothing here any more is forgotten: it comes back as a
    /// new one.
    fn forget_idle_uids(&mut self) {
        let (holders, waiting) = (&self.holders, &self.waiting);
        self.admitted_at.retain(|uid, _| {
            holders.values().any(|h| h.uid == *uid)
                || waiting.iter().any(|w| w.uid == *uid)
        });
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn a_newcomer_takes_its_part_from_a_holder_at_once() {
        let s = Shares::new(8);
        let a = s.join(1, 7, 8, || false).unwrap();
        assert_eq!(a.workers(), 8);
        let b = s.join(2, 8, 8, || false).unwrap();
        assert_eq!((a.workers(), b.workers()), (4, 4));
        let c = s.join(3, 9, 1, || false).unwrap();
        // One wants one; the other two share the seven left.
        assert_eq!(c.workers(), 1);
        assert_eq!(a.workers() + b.workers(), 7);
        drop(b);
        assert_eq!((a.workers(), c.workers()), (7, 1));
    }

    #[test]
    fn past_one_worker_each_jobs_wait_and_a_new_uid_goes_first() {
        let s = Shares::new(2);
        let a1 = s.join(1, 7, 2, || false).unwrap();
        let a2 = s.join(2, 7, 2, || false).unwrap();
        assert_eq!((a1.workers(), a2.workers()), (1, 1));
        std::thread::scope(|sc| {
            // Uid 7's third job waits; then uid 9's first comes.
            let third = sc.spawn(|| s.join(3, 7, 2, || false).map(|_| ()));
            while s.counts().1 < 1 {
                std::thread::sleep(Duration::from_millis(1));
            }
            let other = sc.spawn(|| {
                let sh = s.join(4, 9, 2, || false).unwrap();
                // Holds it while the third is still waiting.
                let waiting = s.counts().1;
                drop(sh);
                waiting
            });
            while s.counts().1 < 2 {
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(a1);
            assert_eq!(other.join().unwrap(), 1, "uid 9 was served first");
            drop(a2);
            assert!(third.join().unwrap().is_some());
        });
    }

    #[test]
    fn a_cancelled_waiter_leaves_nothing_behind() {
        let s = Shares::new(1);
        let a = s.join(1, 7, 1, || false).unwrap();
        assert!(s.join(2, 8, 1, || true).is_none());
        assert_eq!(s.counts(), (1, 0));
        drop(a);
        assert_eq!(s.counts(), (0, 0));
        assert!(s.lock().admitted_at.is_empty());
    }
}
