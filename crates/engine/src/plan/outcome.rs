//! How a run ends: what it does when an entry fails ([`OnError`]) and
//! what it gives back ([`Report`] or [`Failure`]). The engine fills
//! these in; they name nothing of it.

use std::fmt;

use crate::error::Error;
use crate::stats::{Notice, Stats};
use crate::trace::Recording;

/// What a run does when an entry fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnError {
    /// Stop at the first error: the walk dispatches nothing more, workers
    /// drop the jobs they have not started, and no directory gets its
    /// metadata. What an install wants: a root with holes is not a root.
    #[default]
    Stop,
    /// Go on as `cp -a` does: copy every entry that can be copied, record
    /// each failure (path and operation), and fail the run at the end. A
    /// directory that cannot be read or made is left out with everything
    /// in it. Errors about the run itself (the destination refused, a
    /// bad tunable, cancellation) still stop it at once.
    KeepGoing,
}

/// A finished run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// What was done.
    pub stats: Stats,
    /// What could not be kept (each said once).
    pub notices: Vec<Notice>,
    /// Thread states, when recording was asked for.
    pub recording: Option<Recording>,
}

/// A run that met errors.
///
/// Under [`OnError::Stop`] the first error stops the walk from
/// dispatching more work and workers stop at their next job; under
/// [`OnError::KeepGoing`] the run went on and `report` counts everything
/// that was copied. The errors are kept in the order they happened, up
/// to [`Failure::MAX_ERRORS`].
#[derive(Debug)]
pub struct Failure {
    /// The errors met, first first.
    pub errors: Vec<Error>,
    /// Errors beyond the cap, counted only.
    pub more_errors: u64,
    /// What was done: before the run stopped, or (going on past errors)
    /// all of it.
    pub report: Box<Report>,
}

impl Failure {
    /// How many errors are kept.
    pub const MAX_ERRORS: usize = 100;

    /// The first error.
    pub fn first(&self) -> Option<&Error> {
        self.errors.first()
    }
}

/// One error met before anything was done.
impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure {
            errors: vec![e],
            more_errors: 0,
            report: Box::default(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        if self.more_errors > 0 {
            write!(f, "\n... and {} more errors", self.more_errors)?;
        }
        Ok(())
    }
}

/// The errors are in the message, so no `source()` (CONTRIBUTING.md: a
/// cause is said once).
impl std::error::Error for Failure {}
