//! A run's description ([`Plan`]) and its outcome ([`Report`] or
//! [`Failure`]).

mod builder;
mod outcome;
mod watch;

pub use builder::Plan;
pub use outcome::{Failure, OnError, Report};
pub use watch::{EntryKind, Listener, Metered, Progress};

// The engine runs plans; a plan's data (builder.rs) knows nothing of the
// engine, so the dependency runs one way: this file → engine → data.
impl Plan {
    /// Runs the plan: walks the source, copies everything, and returns
    /// what was done, or every error met (up to a cap) with what was done
    /// before the run stopped.
    pub fn run(&self) -> Result<Report, Failure> {
        crate::engine::run(self)
    }
}
