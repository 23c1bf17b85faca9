//! How many of a run's workers may copy at once, changed while it runs:
//! a granted job's process starts its workers, and the daemon that
//! shares one budget among many jobs tells it how many of them it may
//! use as jobs come and go.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// The number of a run's workers that may work on batches at once
/// ([`Plan::worker_limit`](crate::Plan::worker_limit)). A worker takes
/// its next batch from the queue as ever, then waits for its turn before
/// doing it: lowering the limit takes effect as batches end, raising it
/// at once, and a run whose queue is closed still ends (every worker
/// sees the close). A limit of 0 pauses the run at its workers' next
/// batches until it is raised (a service giving the run's turn to
/// another); the run's walkers go on until the queue is full. A
/// cancelled or failed run's waiting workers drop their batches.
#[derive(Debug)]
pub struct WorkerLimit {
    state: Mutex<Counts>,
    changed: Condvar,
}

#[derive(Debug)]
struct Counts {
    allowed: usize,
    working: usize,
}

/// A worker's turn, given back when dropped.
pub(crate) struct Turn<'l>(&'l WorkerLimit);

impl WorkerLimit {
    /// A limit of `n` workers (0: paused).
    pub fn new(n: usize) -> WorkerLimit {
        WorkerLimit {
            state: Mutex::new(Counts {
                allowed: n,
                working: 0,
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Allows `n` workers (0: pauses) from now on.
    pub fn set(&self, n: usize) {
        self.lock().allowed = n;
        self.changed.notify_all();
    }

    /// The workers allowed now.
    pub fn get(&self) -> usize {
        self.lock().allowed
    }

    /// Waits for a turn to work; gives up waiting (and works) once
    /// `stopped` says the run stopped, so that its batch is dropped
    /// promptly.
    pub(crate) fn turn(&self, stopped: impl Fn() -> bool) -> Turn<'_> {
        let mut g = self.lock();
        while g.working >= g.allowed && !stopped() {
            g = self
                .changed
                .wait_timeout(g, Duration::from_millis(10))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        g.working += 1;
        Turn(self)
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.lock().working -= 1;
        self.0.changed.notify_one();
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn no_more_than_the_limit_work_at_once_and_it_can_grow() {
        let l = Arc::new(WorkerLimit::new(2));
        let (now, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|s| {
            for i in 0..8 {
                let (l, now, most) = (&l, &now, &most);
                s.spawn(move || {
                    for _ in 0..20 {
                        let _t = l.turn(|| false);
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(n, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(1));
                        now.fetch_sub(1, Ordering::SeqCst);
                    }
                    if i == 0 {
                        l.set(4);
                    }
                });
            }
        });
        let most = most.load(Ordering::SeqCst);
        assert!((2..=4).contains(&most), "{most} at once");
        assert_eq!(l.get(), 4);
    }

    #[test]
    fn a_paused_run_waits_until_raised_or_stopped() {
        let l = WorkerLimit::new(0);
        let worked = AtomicUsize::new(0);
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let _t = l.turn(|| false);
                worked.fetch_add(1, Ordering::SeqCst);
            });
            s.spawn(|| {
                let _t = l.turn(|| stop.load(Ordering::SeqCst));
                worked.fetch_add(1, Ordering::SeqCst);
            });
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(worked.load(Ordering::SeqCst), 0, "paused");
            stop.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(worked.load(Ordering::SeqCst), 1, "the stopped one");
            l.set(1);
        });
        assert_eq!(worked.load(Ordering::SeqCst), 2);
    }
}
