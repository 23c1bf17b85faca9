//! Where the walkers' batches go: the run's own workers' queue, or
//! tasks on a shared pool. Behind one trait, so the walk knows neither.

use std::sync::Mutex;
use std::time::Instant;

use crossbeam_channel::{Sender, TrySendError};

use super::job::Job;
use super::shared::{Shared, as_caller};
use super::worker::Worker;

/// Where the walker's batches go: its own workers' queue, or a shared
/// pool.
pub(crate) trait Dispatch {
    /// Queues a batch if there is room now; gives it back if not.
    fn try_send(&self, batch: Vec<Job>) -> std::result::Result<(), Vec<Job>>;
    /// Queues a batch, waiting for room.
    fn send(&self, batch: Vec<Job>);
    /// Batches queued and not yet taken.
    fn queued(&self) -> usize;
}

impl Dispatch for Sender<Vec<Job>> {
    fn try_send(&self, batch: Vec<Job>) -> std::result::Result<(), Vec<Job>> {
        match Sender::try_send(self, batch) {
            Err(TrySendError::Full(batch)) => Err(batch),
            // Every worker is gone: the run has failed; the jobs are
            // dropped.
            Ok(()) | Err(TrySendError::Disconnected(_)) => Ok(()),
        }
    }

    fn send(&self, batch: Vec<Job>) {
        let _disconnected = Sender::send(self, batch).is_err();
    }

    fn queued(&self) -> usize {
        self.len()
    }
}

/// Batches as tasks on a shared [`Pool`](crate::Pool), at most `cap` of
/// this run's in flight.
pub(crate) struct PoolDispatch<'a, 'scope, 'p> {
    pub(crate) scope: &'a rayon::Scope<'scope>,
    pub(crate) shared: &'scope Shared<'p>,
    pub(crate) pool: &'scope crate::pool::Pool,
    pub(crate) slots: &'scope [Mutex<Option<Worker<'scope, 'p>>>],
    pub(crate) in_flight: &'scope crate::pool::InFlight,
    pub(crate) cap: usize,
}

impl<'scope, 'p: 'scope> PoolDispatch<'_, 'scope, 'p> {
    fn spawn(&self, batch: Vec<Job>) {
        let (shared, pool, slots, in_flight) =
            (self.shared, self.pool, self.slots, self.in_flight);
        let queued = Instant::now();
        self.scope.spawn(move |_| {
            let i = pool.current_index();
            let mut slot = slots[i % slots.len()]
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let w = slot.get_or_insert_with(|| Worker::new(shared, i));
            as_caller(shared, || w.run_batch(batch, queued));
            drop(slot);
            in_flight.leave();
        });
    }
}

impl<'scope, 'p: 'scope> Dispatch for PoolDispatch<'_, 'scope, 'p> {
    fn try_send(&self, batch: Vec<Job>) -> std::result::Result<(), Vec<Job>> {
        if !self.in_flight.has_room(self.cap) {
            return Err(batch);
        }
        self.in_flight.enter(self.cap);
        self.spawn(batch);
        Ok(())
    }

    fn send(&self, batch: Vec<Job>) {
        self.in_flight.enter(self.cap);
        self.spawn(batch);
    }

    fn queued(&self) -> usize {
        self.in_flight.len()
    }
}
