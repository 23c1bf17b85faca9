//! Early writeback: the data a run writes sent to the disk while the run
//! goes on ([`crate::Writeback`]), so that a run that must end on the
//! disk (`--sync`, an install, the provision cache) waits at its end only
//! for the last of it, and the disk works while the run still reads and
//! creates.
//!
//! A flusher thread calls `syncfs(2)` on the destination's filesystem
//! once a step's worth of data (64 MiB, each file counting a block more
//! for its inode and entry) has been written since its last flush began,
//! or a quarter second has passed with anything written. One `syncfs`
//! writes back every dirty inode of the filesystem in one pass, in the
//! kernel's flusher, with its batching and block allocation across
//! files; file-by-file `sync_file_range(2)` from the workers measured
//! slower than no early writeback at all (bench/README.md, "Durable
//! installs"), as each worker then waits on the allocation and the
//! device queue of every small file it writes. The workers never wait
//! on the flusher: while it flushes, they write the next step. The dirty
//! data of a run stays within about two steps plus what the disk falls
//! behind, far from the kernel's dirty limits.
//!
//! illumos has `syncfs(2)` too, so the same holds there.

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::sys;

/// Bytes written that start a flush.
pub(crate) const STEP: u64 = 64 << 20;
/// The longest written data waits for a flush.
pub(crate) const PERIOD: Duration = Duration::from_millis(250);
/// What a file counts besides its data: its inode and directory entry
/// are written back too, and a tree of empty files is all metadata.
const PER_FILE: u64 = 4096;
/// How often the flusher looks at the time while data trickles in.
const TICK: Duration = Duration::from_millis(25);

/// The name of the flusher thread, as statemaps show it.
pub const FLUSH_THREAD: &str = "flush";

struct Inner {
    /// Bytes written since the last flush began.
    pending: AtomicU64,
    stop: Mutex<bool>,
    wake: Condvar,
    /// The first flush that failed: the run reports it.
    failed: Mutex<Option<io::Error>>,
}

/// A run's flusher; see the module documentation.
pub(crate) struct Flusher {
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Flusher {
    /// Starts flushing the filesystem that holds `fs` (any descriptor on
    /// it: the destination's top directory).
    pub(crate) fn start(fs: File) -> io::Result<Flusher> {
        let inner = Arc::new(Inner {
            pending: AtomicU64::new(0),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            failed: Mutex::new(None),
        });
        let shared = Arc::clone(&inner);
        let thread = std::thread::Builder::new()
            .name(FLUSH_THREAD.into())
            .spawn(move || flush_loop(&shared, &fs))?;
        Ok(Flusher {
            inner,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// A file of `bytes` has been written.
    pub(crate) fn wrote(&self, bytes: u64) {
        let add = bytes.saturating_add(PER_FILE);
        let before = self.inner.pending.fetch_add(add, Ordering::Relaxed);
        if before < STEP && before.saturating_add(add) >= STEP {
            self.inner.wake.notify_one();
        }
    }

    /// Stops the flusher, once the flush under way (if any) is done;
    /// returns the first flush's error, if one failed.
    pub(crate) fn finish(&self) -> io::Result<()> {
        *lock(&self.inner.stop) = true;
        self.inner.wake.notify_one();
        if let Some(t) = lock(&self.thread).take() {
            // A panic in a flush is a failed flush.
            if t.join().is_err() {
                return Err(io::Error::other("the flusher thread panicked"));
            }
        }
        match lock(&self.inner.failed).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        let _reported_by_finish = self.finish();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn flush_loop(inner: &Inner, fs: &File) {
    let mut last = Instant::now();
    loop {
        {
            let mut stop = lock(&inner.stop);
            loop {
                if *stop {
                    return;
                }
                let p = inner.pending.load(Ordering::Relaxed);
                if p >= STEP || (p > 0 && last.elapsed() >= PERIOD) {
                    break;
                }
                stop = inner
                    .wake
                    .wait_timeout(stop, TICK)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        }
        inner.pending.store(0, Ordering::Relaxed);
        last = Instant::now();
        if let Err(e) = sys::sync_fs(fs) {
            lock(&inner.failed).get_or_insert(e);
            // The final flush says the same; no use hammering the disk.
            return;
        }
    }
}
