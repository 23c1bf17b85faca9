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
//! A run given a pool still walks (or reads its archive) in the calling
//! thread; only the jobs go to the pool.

use std::io;
use std::sync::{Arc, Condvar, Mutex};

use crate::error::{Error, Op};

/// A fixed set of worker threads shared by the runs given it
/// ([`Plan::pool`](crate::Plan::pool),
/// [`UnpackOptions::pool`](crate::unpack::UnpackOptions)). Clones share
/// the threads; they end when the last clone is dropped.
#[derive(Clone)]
pub struct Pool {
    threads: Arc<rayon::ThreadPool>,
    size: usize,
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
        Ok(Pool {
            threads: Arc::new(threads),
            size,
        })
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
        f.debug_struct("Pool").field("threads", &self.size).finish()
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

/// The identity a run reads and writes files as, when it is not the
/// process's own: a service doing a client's copy checks every open and
/// every creation against the client, as if the client ran it.
///
/// On Linux the run's threads take it as their filesystem identity
/// (`setfsuid`, `setfsgid`, and the supplementary groups of that thread
/// only) for the run and its batches, and drop every effective
/// capability of that thread meanwhile: the kernel then refuses what the
/// caller could not do itself (override permissions, set file
/// capabilities or `trusted.*` attributes, make device nodes). The run
/// also keeps no `security.*` or `trusted.*` attribute and no setuid or
/// setgid bit for another owner, each said once as a notice, as `cp -a`
/// run by the caller would end. Other platforms have no
/// per-thread identity: a run given one fails with
/// [`Op::Credentials`](crate::Op::Credentials) there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    /// The user files are opened and created as.
    pub uid: u32,
    /// The primary group.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}
