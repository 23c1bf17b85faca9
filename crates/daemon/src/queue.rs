//! Which job runs next: two lanes, root's and everyone else's, each with
//! `max_jobs` places; in the second, one queue per uid taken in turn, so
//! that a user with many jobs delays the others by at most one job each
//! round, and root never waits behind anyone but root. A queued job is
//! an entry here, not a thread: a lane starts a thread when it gives a
//! job a place, and that thread goes on with the lane's next job.
//!
//! A uid other than root may have `max_jobs_per_uid` jobs running and
//! queued at once ([`Queue::admit`] says when it has them all).
//!
//! When every place is taken, a uid with no job running is not made to
//! wait for one of the others' to end (however long those are): its
//! first job takes a place beyond the `max_jobs`, up to twice as many
//! in all, so that a new uid's job is served before another uid's
//! fifth. The granted jobs' workers are shared by turns (`shares`), so
//! such a job has workers within a turn's length.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};

use crate::jobs::Job;
use crate::protocol::{ErrorKind, JobResult, WireError};

/// What a job does once it has a place; its result ends the job.
pub(crate) type Work =
    Box<dyn FnOnce(&Arc<Job>) -> Result<JobResult, WireError> + Send>;

/// Told of each job as it ends, with how long it ran.
type OnEnd = Arc<dyn Fn(&Job, std::time::Duration) + Send + Sync>;

/// A job waiting for a place.
struct Pending {
    job: Arc<Job>,
    work: Work,
}

#[derive(Default)]
struct Lane {
    running: usize,
    /// Jobs running, by uid.
    running_by_uid: HashMap<u32, usize>,
    /// When each uid with jobs here last had one started (a count of
    /// starts), so that the uid served longest ago goes first.
    last_start: HashMap<u32, u64>,
    starts: u64,
    /// Queued jobs by uid (root's lane has only uid 0's).
    queues: BTreeMap<u32, VecDeque<Pending>>,
    /// The uids with queued jobs, in the order they are served.
    turn: VecDeque<u32>,
}

impl Lane {
    /// The next job, counted as running: the front of the queue of the
    /// uid with the fewest jobs running and, among those, the one served
    /// longest ago (a uid just arrived first of all; then in turn), so
    /// that a user with many jobs delays another by at most one.
    fn next(&mut self) -> Option<Pending> {
        let at = (0..self.turn.len()).min_by_key(|i| {
            let uid = self.turn[*i];
            (
                self.running_by_uid.get(&uid).copied().unwrap_or(0),
                self.last_start.get(&uid).copied().unwrap_or(0),
            )
        })?;
        let uid = self.turn.remove(at)?;
        let q = self.queues.get_mut(&uid)?;
        let p = q.pop_front();
        if q.is_empty() {
            self.queues.remove(&uid);
        } else {
            self.turn.push_back(uid);
        }
        if p.is_some() {
            self.running += 1;
            *self.running_by_uid.entry(uid).or_default() += 1;
            self.starts += 1;
            self.last_start.insert(uid, self.starts);
        }
        p
    }

    /// The next job when every regular place is taken: the front of the
    /// queue of a uid with no job running, if any waits.
    fn next_for_new_uid(&mut self) -> Option<Pending> {
        let waiting_new = self
            .turn
            .iter()
            .any(|u| !self.running_by_uid.contains_key(u));
        if waiting_new { self.next() } else { None }
    }

    /// The next job within `max` places (and the extra ones new uids
    /// may take, up to `2 * max`).
    fn next_within(&mut self, max: usize) -> Option<Pending> {
        if self.running < max {
            self.next()
        } else if self.running < 2 * max {
            self.next_for_new_uid()
        } else {
            None
        }
    }

    /// A running job of `uid` ended.
    fn ended(&mut self, uid: u32) {
        self.running -= 1;
        if let Some(n) = self.running_by_uid.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                self.running_by_uid.remove(&uid);
                // Nothing of this uid's left: it is forgotten.
                if !self.queues.contains_key(&uid) {
                    self.last_start.remove(&uid);
                }
            }
        }
    }

    fn push(&mut self, uid: u32, p: Pending) {
        let q = self.queues.entry(uid).or_default();
        if q.is_empty() {
            self.turn.push_back(uid);
        }
        q.push_back(p);
    }

    /// Takes the queued job `id` out, if it is queued here.
    fn remove(&mut self, id: u64) -> Option<Pending> {
        let (uid, at) = self.queues.iter().find_map(|(uid, q)| {
            q.iter().position(|p| p.job.id == id).map(|at| (*uid, at))
        })?;
        let q = self.queues.get_mut(&uid)?;
        let p = q.remove(at);
        if q.is_empty() {
            self.queues.remove(&uid);
            self.turn.retain(|u| *u != uid);
        }
        p
    }

    fn drain(&mut self) -> Vec<Pending> {
        self.turn.clear();
        std::mem::take(&mut self.queues)
            .into_values()
            .flatten()
            .collect()
    }
}

#[derive(Default)]
struct Lanes {
    root: Lane,
    others: Lane,
    /// Jobs running or queued, by uid other than root.
    held: HashMap<u32, usize>,
    /// Places in each lane, from the configuration in force when the
    /// last job was queued.
    max_running: usize,
    /// Set when the service stops: nothing more starts.
    closed: bool,
}

impl Lanes {
    fn lane(&mut self, uid: u32) -> &mut Lane {
        if uid == 0 {
            &mut self.root
        } else {
            &mut self.others
        }
    }

    fn release(&mut self, uid: u32) {
        if uid == 0 {
            return;
        }
        if let Some(n) = self.held.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                self.held.remove(&uid);
            }
        }
    }
}

/// The jobs waiting for a place and the lanes' threads.
#[derive(Default)]
pub(crate) struct Queue {
    lanes: Mutex<Lanes>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Called with each job as it ends, after its result is in.
    on_end: Option<OnEnd>,
}

/// A place in a uid's share, held from [`Queue::admit`] until its job
/// ends (or is dropped unqueued).
pub(crate) struct Ticket {
    uid: u32,
    queue: Option<Arc<Queue>>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(q) = self.queue.take() {
            q.lock().release(self.uid);
        }
    }
}

/// A uid has all the jobs it may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Full {
    pub(crate) held: usize,
}

impl Queue {
    /// A queue that calls `on_end` for each job that ends.
    pub(crate) fn new(
        on_end: impl Fn(&Job, std::time::Duration) + Send + Sync + 'static,
    ) -> Queue {
        Queue {
            on_end: Some(Arc::new(on_end)),
            ..Queue::default()
        }
    }

    fn lock(&self) -> MutexGuard<'_, Lanes> {
        self.lanes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a job against `uid`'s share, or says it has them all.
    pub(crate) fn admit(
        self: &Arc<Self>,
        uid: u32,
        max_per_uid: usize,
    ) -> Result<Ticket, Full> {
        let mut g = self.lock();
        if uid != 0 {
            let held = g.held.entry(uid).or_default();
            if *held >= max_per_uid {
                return Err(Full { held: *held });
            }
            *held += 1;
        }
        Ok(Ticket {
            uid,
            queue: Some(Arc::clone(self)),
        })
    }

    /// Queues `job`, to run `work` when its lane has a place among
    /// `max_running`.
    pub(crate) fn submit(
        self: &Arc<Self>,
        mut ticket: Ticket,
        job: Arc<Job>,
        max_running: usize,
        work: Work,
    ) {
        // The share is now the queue's to give back, when the job ends.
        ticket.queue = None;
        let uid = ticket.uid;
        let mut g = self.lock();
        if g.closed {
            g.release(uid);
            drop(g);
            job.finish(Err(cancelled_queued()));
            return;
        }
        g.max_running = max_running.max(1);
        g.lane(uid).push(uid, Pending { job, work });
        self.start_more(&mut g, uid);
    }

    /// Starts threads for queued jobs of `uid`'s lane while it has
    /// places.
    fn start_more(self: &Arc<Self>, g: &mut Lanes, uid: u32) {
        let max = g.max_running;
        loop {
            let lane = g.lane(uid);
            let Some(first) = lane.next_within(max) else {
                return;
            };
            let q = Arc::clone(self);
            let id = first.job.id;
            // Shared with the thread so that a thread that cannot start
            // leaves the job here to be ended.
            let pending = Arc::new(Mutex::new(Some(first)));
            let mine = Arc::clone(&pending);
            let spawned = thread::Builder::new()
                .name(format!("job-{id}"))
                .spawn(move || {
                    let first = take(&mine);
                    q.run_lane(first, uid == 0);
                });
            match spawned {
                Ok(h) => {
                    let mut t =
                        self.threads.lock().unwrap_or_else(|p| p.into_inner());
                    t.retain(|t| !t.is_finished());
                    t.push(h);
                }
                Err(e) => {
                    // No thread: the job ends here, and its place with it.
                    if let Some(p) = take(&pending) {
                        g.lane(uid).ended(p.job.owner);
                        g.release(p.job.owner);
                        p.job.finish(Err(WireError::new(
                            ErrorKind::Internal,
                            format!(
                                "zinstalld: cannot start a job thread: {e}"
                            ),
                        )));
                    }
                    return;
                }
            }
        }
    }

    /// A lane's thread: runs its first job, then the lane's next ones
    /// while there are any.
    fn run_lane(&self, first: Option<Pending>, root: bool) {
        let mut next = first;
        while let Some(Pending { job, work }) = next.take() {
            let started = std::time::Instant::now();
            let r = if job.cancel.is_cancelled() {
                Err(cancelled_queued())
            } else {
                work(&job)
            };
            // The share is given back before the result is out: a client
            // that asks again as soon as it hears is not told it is busy.
            self.lock().release(job.owner);
            job.finish(r);
            if let Some(f) = &self.on_end {
                f(&job, started.elapsed());
            }
            let mut g = self.lock();
            // Closed, or fewer places since a reload: this thread ends.
            let (closed, max) = (g.closed, g.max_running);
            let lane = if root { &mut g.root } else { &mut g.others };
            lane.ended(job.owner);
            next = if closed { None } else { lane.next_within(max) };
        }
    }

    /// Ends the queued job `id` as cancelled; false if it is not queued
    /// (running, ended or unknown).
    pub(crate) fn cancel_queued(&self, id: u64) -> bool {
        let mut g = self.lock();
        let p = g.root.remove(id).or_else(|| g.others.remove(id));
        let Some(p) = p else {
            return false;
        };
        g.release(p.job.owner);
        drop(g);
        p.job.finish(Err(cancelled_queued()));
        true
    }

    /// Stops starting jobs, ends every queued one as cancelled, and
    /// waits for the lanes' threads (whose jobs the caller cancelled).
    pub(crate) fn close(&self) {
        let queued = {
            let mut g = self.lock();
            g.closed = true;
            let mut q = g.root.drain();
            q.extend(g.others.drain());
            for p in &q {
                g.release(p.job.owner);
            }
            q
        };
        for p in queued {
            p.job.finish(Err(cancelled_queued()));
        }
        let threads = std::mem::take(
            &mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()),
        );
        for t in threads {
            let _joined = t.join();
        }
    }
}

fn cancelled_queued() -> WireError {
    WireError::new(ErrorKind::Cancelled, "cancelled while queued")
}

fn take(p: &Mutex<Option<Pending>>) -> Option<Pending> {
    p.lock().unwrap_or_else(|p| p.into_inner()).take()
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::jobs::Jobs;
    use crate::protocol::ZonepathReply;
    use std::time::Duration;

    /// A result for a job that did nothing.
    fn done() -> JobResult {
        JobResult::Uninstall(ZonepathReply {
            zonepath: "/z".into(),
            recovered: None,
            message: None,
        })
    }

    /// Runs `jobs` (uid, name) through one place: the order they ran in.
    fn order(
        submits: &[(u32, &'static str)],
        places: usize,
    ) -> Vec<&'static str> {
        let q = Arc::new(Queue::default());
        let table = Jobs::new(100);
        let ran = Arc::new(Mutex::new(Vec::new()));
        let mut all = Vec::new();
        for (uid, name) in submits {
            let t = q.admit(*uid, 100).unwrap();
            let job = table.add("copy", (*name).into(), *uid, 1);
            let ran = Arc::clone(&ran);
            let name = *name;
            q.submit(
                t,
                Arc::clone(&job),
                places,
                Box::new(move |_| {
                    ran.lock().unwrap().push(name);
                    std::thread::sleep(Duration::from_millis(30));
                    Ok(done())
                }),
            );
            all.push(job);
        }
        while all.iter().any(|j| !j.state().finished()) {
            std::thread::sleep(Duration::from_millis(5));
        }
        q.close();
        Arc::try_unwrap(ran).unwrap().into_inner().unwrap()
    }

    #[test]
    fn a_uid_with_many_jobs_delays_another_by_one_at_most() {
        let ran =
            order(&[(7, "a1"), (7, "a2"), (7, "a3"), (8, "b1"), (9, "c1")], 1);
        assert_eq!(ran, ["a1", "b1", "c1", "a2", "a3"]);
    }

    #[test]
    fn roots_jobs_have_a_lane_of_their_own() {
        // One place per lane: root's job runs beside the users', not
        // after them.
        // Whether a1 or r1 is first to start is the scheduler's choice:
        // what matters is that r1 does not wait for a2.
        let ran = order(&[(7, "a1"), (7, "a2"), (0, "r1")], 1);
        let at = |n: &str| ran.iter().position(|x| *x == n).unwrap();
        assert_eq!(ran.len(), 3, "{ran:?}");
        assert!(at("r1") < at("a2") && at("a1") < at("a2"), "{ran:?}");
    }

    #[test]
    fn shares_are_counted_and_given_back() {
        let q = Arc::new(Queue::default());
        let held: Vec<Ticket> =
            (0..3).map(|_| q.admit(7, 3).unwrap()).collect();
        assert_eq!(q.admit(7, 3).err(), Some(Full { held: 3 }));
        assert!(q.admit(8, 3).is_ok(), "another uid has its own share");
        assert!(q.admit(0, 3).is_ok(), "root is not counted");
        drop(held);
        assert!(q.admit(7, 3).is_ok());
    }

    #[test]
    fn a_new_uids_first_job_takes_a_place_beyond_the_others() {
        // One place, held by uid 7's long job: uid 8's first job starts
        // beside it, uid 7's second waits.
        let q = Arc::new(Queue::default());
        let table = Jobs::new(100);
        let gate = Arc::new(std::sync::Barrier::new(3));
        let mut jobs = Vec::new();
        for (uid, name, held) in
            [(7, "a1", true), (7, "a2", false), (8, "b1", true)]
        {
            let job = table.add("copy", name.into(), uid, 1);
            let g = Arc::clone(&gate);
            q.submit(
                q.admit(uid, 10).unwrap(),
                Arc::clone(&job),
                1,
                Box::new(move |_| {
                    if held {
                        g.wait();
                    }
                    Ok(done())
                }),
            );
            jobs.push(job);
        }
        // a1 and b1 both run (the barrier needs both), a2 is queued.
        assert!(q.cancel_queued(jobs[1].id), "a2 waited for a place");
        gate.wait();
        q.close();
        assert!(matches!(jobs[0].state(), crate::jobs::State::Done(_)));
        assert!(matches!(jobs[2].state(), crate::jobs::State::Done(_)));
    }

    #[test]
    fn a_queued_job_cancelled_ends_at_once() {
        let q = Arc::new(Queue::default());
        let table = Jobs::new(100);
        let gate = Arc::new(std::sync::Barrier::new(2));
        let first = table.add("copy", "first".into(), 7, 1);
        let g = Arc::clone(&gate);
        q.submit(
            q.admit(7, 10).unwrap(),
            Arc::clone(&first),
            1,
            Box::new(move |_| {
                g.wait();
                Ok(done())
            }),
        );
        // The same uid's: queued (another uid's first job would take a
        // place of its own).
        let second = table.add("copy", "second".into(), 7, 1);
        q.submit(
            q.admit(7, 10).unwrap(),
            Arc::clone(&second),
            1,
            Box::new(|_| panic!("a cancelled job ran")),
        );
        assert!(q.cancel_queued(second.id));
        assert!(matches!(second.state(), crate::jobs::State::Failed(_)));
        assert!(!q.cancel_queued(first.id), "a running job is not queued");
        gate.wait();
        q.close();
        assert!(matches!(first.state(), crate::jobs::State::Done(_)));
    }
}
