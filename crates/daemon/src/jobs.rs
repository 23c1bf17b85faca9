//! Jobs: ids, state, progress, cancel, and the results clients wait for.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::protocol::{ErrorKind, JobInfo, JobResult, ProgressInfo, WireError};

/// Where a job is.
#[derive(Clone, Debug, PartialEq)]
pub enum State {
    /// Waiting for a place among the jobs running at once.
    Queued,
    /// Running.
    Running,
    /// Finished with this result.
    Done(JobResult),
    /// Failed (or was cancelled) with this error.
    Failed(WireError),
}

impl State {
    fn name(&self) -> &'static str {
        match self {
            State::Queued => "queued",
            State::Running => "running",
            State::Done(_) => "done",
            State::Failed(e) if e.kind == ErrorKind::Cancelled => "cancelled",
            State::Failed(_) => "failed",
        }
    }

    /// Whether the job has ended.
    pub fn finished(&self) -> bool {
        matches!(self, State::Done(_) | State::Failed(_))
    }
}

/// The most events a job keeps for clients that have not read them.
const MAX_EVENTS: usize = 1024;

/// One job.
pub struct Job {
    /// Its id.
    pub id: u64,
    /// The operation's name.
    pub op: &'static str,
    /// A short description (the main path).
    pub what: String,
    /// Who asked (uid), and from which process.
    pub owner: u32,
    /// The client's pid.
    pub pid: i32,
    /// Raised to stop it.
    pub cancel: zinstall_core::Cancel,
    /// Entries done.
    pub entries: AtomicU64,
    /// Bytes done.
    pub bytes: AtomicU64,
    started: Instant,
    started_unix: u64,
    inner: Mutex<Inner>,
    changed: Condvar,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("id", &self.id)
            .field("op", &self.op)
            .field("what", &self.what)
            .finish_non_exhaustive()
    }
}

struct Inner {
    state: State,
    phase: String,
    /// Events not yet taken by the client, and how many were dropped.
    events: VecDeque<String>,
    dropped: u64,
    detached: bool,
    /// When the job ended: its elapsed time stops there.
    ended: Option<Instant>,
    /// The process running the job, when it runs in one of its own (a
    /// caller's granted copy).
    process: Option<u32>,
}

impl Job {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The job's state now.
    pub fn state(&self) -> State {
        self.lock().state.clone()
    }

    /// Sets the phase shown in progress.
    pub fn set_phase(&self, phase: &str) {
        let mut g = self.lock();
        g.phase = phase.to_string();
        if g.state == State::Queued {
            g.state = State::Running;
        }
        self.changed.notify_all();
    }

    /// Records something the client should hear of.
    pub fn event(&self, message: String) {
        let mut g = self.lock();
        if g.events.len() >= MAX_EVENTS {
            g.events.pop_front();
            g.dropped += 1;
        }
        g.events.push_back(message);
        self.changed.notify_all();
    }

    /// Ends the job.
    pub fn finish(&self, result: Result<JobResult, WireError>) {
        let mut g = self.lock();
        g.ended.get_or_insert_with(Instant::now);
        g.state = match result {
            Ok(v) => State::Done(v),
            // What is kept is bounded, whatever made it.
            Err(e) => State::Failed(e.bounded()),
        };
        self.changed.notify_all();
    }

    /// Records the process the job runs in, while it runs there.
    pub fn set_process(&self, pid: Option<u32>) {
        self.lock().process = pid;
    }

    /// Sets the totals done so far (as a job's process reports them).
    pub fn set_done(&self, entries: u64, bytes: u64) {
        self.entries.fetch_max(entries, Ordering::Relaxed);
        self.bytes.fetch_max(bytes, Ordering::Relaxed);
    }

    /// Keeps the job running when its client goes.
    pub fn detach(&self) {
        self.lock().detached = true;
    }

    /// Whether its client asked it to outlive the connection.
    pub fn detached(&self) -> bool {
        self.lock().detached
    }

    /// How long the job ran (or has run, while it runs), from when it
    /// was asked for.
    pub fn elapsed(&self) -> Duration {
        let ended = self.lock().ended;
        ended.unwrap_or_else(Instant::now) - self.started
    }

    /// Waits up to `timeout` for news; returns the events that came, and
    /// the state if the job ended.
    pub fn wait(&self, timeout: Duration) -> (Vec<String>, Option<State>) {
        let mut g = self.lock();
        if g.events.is_empty() && !g.state.finished() {
            g = self
                .changed
                .wait_timeout(g, timeout)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let events = g.events.drain(..).collect();
        let end = g.state.finished().then(|| g.state.clone());
        (events, end)
    }

    /// Progress now; `rate` from the bytes at `last`.
    pub fn progress(&self, last: Option<(Instant, u64)>) -> ProgressInfo {
        let bytes = self.bytes.load(Ordering::Relaxed);
        let now = Instant::now();
        let rate = match last {
            Some((t, b)) if now > t => {
                (bytes.saturating_sub(b) as f64 / (now - t).as_secs_f64())
                    as u64
            }
            _ => 0,
        };
        let elapsed = self.elapsed();
        ProgressInfo {
            phase: self.lock().phase.clone(),
            entries: self.entries.load(Ordering::Relaxed),
            bytes,
            rate,
            elapsed_ms: elapsed.as_millis() as u64,
        }
    }

    /// What `jobs` shows: [`Job::describe`] with a failure summed up in
    /// a line (its errors are `status`'s to list).
    pub fn summary(&self) -> JobInfo {
        let mut info = self.describe();
        info.error = info.error.as_ref().map(WireError::summary);
        info
    }

    /// What `status` and `cancel` show.
    pub fn describe(&self) -> JobInfo {
        let elapsed = self.elapsed();
        let g = self.lock();
        let (result, error) = match &g.state {
            State::Done(r) => (Some(r.clone()), None),
            State::Failed(e) => (None, Some(e.clone())),
            State::Queued | State::Running => (None, None),
        };
        JobInfo {
            job: self.id,
            op: self.op.to_string(),
            what: crate::protocol::clip(&self.what, crate::protocol::MAX_ECHO),
            uid: self.owner,
            pid: self.pid,
            state: g.state.name().to_string(),
            phase: g.phase.clone(),
            entries: self.entries.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            started: self.started_unix,
            elapsed_ms: elapsed.as_millis() as u64,
            detached: g.detached,
            process: g.process,
            result,
            error,
        }
    }
}

impl zinstall_core::Progress for Job {
    fn advance(&self, entries: u64, bytes: u64) {
        self.entries.fetch_add(entries, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// Every job, by id.
pub struct Jobs {
    next: AtomicU64,
    all: Mutex<BTreeMap<u64, Arc<Job>>>,
    keep_finished: usize,
}

impl Jobs {
    /// An empty table keeping `keep_finished` ended jobs.
    pub fn new(keep_finished: usize) -> Self {
        Jobs {
            next: AtomicU64::new(1),
            all: Mutex::new(BTreeMap::new()),
            keep_finished,
        }
    }

    fn table(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<Job>>> {
        self.all.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new queued job.
    pub fn add(
        &self,
        op: &'static str,
        what: String,
        owner: u32,
        pid: i32,
    ) -> Arc<Job> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let job = Arc::new(Job {
            id,
            op,
            what,
            owner,
            pid,
            cancel: zinstall_core::Cancel::new(),
            entries: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            started: Instant::now(),
            started_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            inner: Mutex::new(Inner {
                state: State::Queued,
                phase: "queued".into(),
                events: VecDeque::new(),
                dropped: 0,
                detached: false,
                ended: None,
                process: None,
            }),
            changed: Condvar::new(),
        });
        let mut t = self.table();
        t.insert(id, Arc::clone(&job));
        // Forget the owner's oldest ended jobs beyond the limit: each
        // uid's records are its own, never pushed out by another's.
        let ended: Vec<u64> = t
            .iter()
            .filter(|(_, j)| j.owner == owner && j.state().finished())
            .map(|(id, _)| *id)
            .collect();
        for id in ended
            .iter()
            .take(ended.len().saturating_sub(self.keep_finished))
        {
            t.remove(id);
        }
        job
    }

    /// A job by id.
    pub fn get(&self, id: u64) -> Option<Arc<Job>> {
        self.table().get(&id).cloned()
    }

    /// Every job, oldest first.
    pub fn list(&self) -> Vec<Arc<Job>> {
        self.table().values().cloned().collect()
    }

    /// Cancels every job not yet ended.
    pub fn cancel_all(&self) {
        for j in self.list() {
            if !j.state().finished() {
                j.cancel.cancel();
            }
        }
    }

    /// Jobs not yet ended.
    pub fn active(&self) -> usize {
        self.list().iter().filter(|j| !j.state().finished()).count()
    }
}
