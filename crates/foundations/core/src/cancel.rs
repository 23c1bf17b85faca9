//! Stopping a run from outside: a daemon cancelling a client's job, a
//! signal handler, a client that went away.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A flag shared between a run and whoever may cancel it. Clones share
/// the flag. A cancelled copy or unpack stops at its next entry (the
/// walker and the unpack reader check before each, workers before each
/// job) and fails with the engine's `Error::Cancelled`; a cancelled
/// download stops at its next read. What was written stays, as after
/// any failure, for the caller to remove.
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

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn clones_share_the_flag() {
        let a = Cancel::new();
        let b = a.clone();
        assert!(!a.is_cancelled() && !b.is_cancelled());
        b.cancel();
        assert!(a.is_cancelled(), "raised through the clone");
        let c = Cancel::new();
        assert!(!c.is_cancelled(), "a new flag is its own");
    }

    #[test]
    fn the_flag_raises_it() {
        let a = Cancel::new();
        a.flag().store(true, Ordering::Relaxed);
        assert!(a.clone().is_cancelled());
    }
}
