//! What the walkers do with what they find: a copy makes it; a dry run
//! counts it through a [`DryRunVisit`]. Apart, so that the walk and the dry
//! run (`dry_run`) each depend on this leaf and not on each other.

use std::ffi::CStr;
use std::os::fd::RawFd;
use std::path::Path;

use crate::error::Result;
use crate::stats::Stats;
use crate::sys::posix::Stat;

/// What the walkers do with what they find.
#[derive(Clone, Copy)]
pub(crate) enum Mode<'a> {
    /// Make each directory at the destination and queue jobs for the
    /// rest (a copy, or a walk-only run whose consumer discards them).
    Copy,
    /// Write nothing: count what a copy would do (a dry run), here.
    DryRun(&'a (dyn DryRunVisit + 'a)),
}

/// A dry run's counting, which the walkers call in place of making
/// anything.
pub(crate) trait DryRunVisit: Sync {
    /// A directory a walker is about to read (`top`: the source itself).
    fn dir(
        &self,
        stats: &mut Stats,
        src: &Path,
        dst: &Path,
        md: &Stat,
        top: bool,
    ) -> Result<()>;

    /// Anything but a directory, named `at` in its open source directory;
    /// `redirect` when a link rule replaces it.
    fn entry(
        &self,
        stats: &mut Stats,
        at: (RawFd, &CStr),
        src: &Path,
        dst: &Path,
        redirect: bool,
    ) -> Result<()>;
}
