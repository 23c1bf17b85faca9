//! Stopping a run from outside: a daemon cancelling a client's job, a
//! signal handler, a client that went away.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A flag shared between a run and whoever may cancel it. Clones share
/// the flag. A cancelled copy or unpack stops at its next entry (the
/// walker and the unpack reader check before each, workers before each
/// job) and fails with [`Error::Cancelled`](crate::Error::Cancelled);
/// what was written stays, as after any failure, for the caller to
/// remove.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// A flag not yet raised.
    pub fn new() -> Self {
        Self::default()
    }

    /// Raises the flag: every run holding a clone stops.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether the flag was raised.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// The flag itself, for what can only store into an atomic: a signal
    /// handler (`signal_hook::flag::register`) raises it by storing
    /// `true`.
    pub fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.0)
    }
}
