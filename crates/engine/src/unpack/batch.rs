//! The reader's side of the pool: file jobs gathered into batches and
//! sent, each batch bounded in bytes, in jobs and in the directory
//! descriptors it holds.

use std::sync::Arc;

use super::budget::BUDGET;
use super::job::FileJob;
use crate::descriptors::{Descriptors, Slot};

/// The reader's side of the pool: files go to the workers in batches of
/// `COPY_BATCH`, so that each worker tends to fill one directory while the
/// others fill others, instead of all of them creating files in the same
/// directory at once.
pub(super) struct Batcher<'a> {
    /// Hands a batch to the workers; false when they are gone.
    pub(super) tx: Box<dyn Fn(Vec<FileJob>) -> bool + 'a>,
    pub(super) batch: Vec<FileJob>,
    /// In-memory body bytes in `batch`.
    pub(super) held: u64,
    /// Directories whose descriptors the jobs in `batch` hold.
    pub(super) dirs: usize,
    pub(super) size: usize,
    /// The descriptor budget: each directory a batch holds takes one
    /// slot, so the batches in flight hold no more than it (a directory
    /// in two batches counts twice, on the safe side).
    pub(super) fds: Descriptors,
    /// Whether the unpack has stopped.
    pub(super) stopped: Box<dyn Fn() -> bool + 'a>,
}

/// A batch is sent once its jobs hold this many directories' descriptors:
/// files one per directory down a deep tree would otherwise pin a
/// descriptor each until the batch filled.
const BATCH_DIRS: usize = 8;

impl<'a> Batcher<'a> {
    /// Nothing batched yet: batches of `size` jobs go to `tx`, their
    /// directories counted against `fds`, until `stopped`.
    pub(super) fn new(
        tx: Box<dyn Fn(Vec<FileJob>) -> bool + 'a>,
        size: usize,
        fds: &Descriptors,
        stopped: Box<dyn Fn() -> bool + 'a>,
    ) -> Batcher<'a> {
        Batcher {
            tx,
            batch: Vec::new(),
            held: 0,
            dirs: 0,
            size,
            fds: fds.clone(),
            stopped,
        }
    }

    /// Queues `job`; false when the workers are gone.
    pub(super) fn push(&mut self, mut job: FileJob) -> bool {
        self.held += job.body.held();
        // A job written into the store holds no directory.
        let new_dir = match (self.batch.last(), job.place.dir()) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(last), Some(dir)) => {
                last.place.dir().is_none_or(|l| !Arc::ptr_eq(l, dir))
            }
        };
        if new_dir {
            self.dirs += 1;
            match self.slot() {
                Some(s) => job.hold = Some(s),
                None => return false,
            }
        }
        self.batch.push(job);
        // Bodies waiting here count against the byte budget; sending at a
        // quarter of it keeps the reader from waiting on bytes it holds.
        if self.batch.len() >= self.size
            || self.held >= BUDGET / 4
            || self.dirs >= BATCH_DIRS
        {
            return self.flush();
        }
        true
    }

    /// A slot for a directory joining the batch. While the budget is
    /// spent the reader sends what it holds and waits for the workers to
    /// give slots back (they never wait for one, so they always can);
    /// `None` once the unpack stopped or the workers are gone.
    fn slot(&mut self) -> Option<Slot> {
        if let Some(s) = self.fds.try_take(1) {
            return Some(s);
        }
        if !self.flush() {
            return None;
        }
        loop {
            if (self.stopped)() {
                return None;
            }
            if let Some(s) = self.fds.try_take(1) {
                return Some(s);
            }
            self.fds.wait(std::time::Duration::from_millis(10));
        }
    }

    /// Sends what is queued; false when the workers are gone.
    pub(super) fn flush(&mut self) -> bool {
        if self.batch.is_empty() {
            return true;
        }
        self.held = 0;
        self.dirs = 0;
        (self.tx)(std::mem::take(&mut self.batch))
    }
}
