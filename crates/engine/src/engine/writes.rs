//! Whether a run writes, and the destination directories it holds. A dry
//! run ([`Plan::dry_run`](crate::Plan::dry_run)) is the copy itself with
//! [`Writes::Record`]: the same walk, jobs, workers and placement, the
//! destination read through the same descriptors; each write is counted
//! where the copy would make it, at one branch point
//! ([`Writes::dir_fd`]). A leaf: the walk, the workers and the nodes all
//! use it.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::Plan;
use crate::sys::posix::at;

/// Whether the run writes into the destination.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Writes {
    /// A copy: everything is made.
    Make,
    /// A dry run: nothing is made; each write is counted instead.
    Record,
}

impl Writes {
    pub(crate) fn of(plan: &Plan) -> Writes {
        if plan.dry_run {
            Writes::Record
        } else {
            Writes::Make
        }
    }

    /// The descriptor a write into `dir` goes through; `None` when the
    /// run records, and the caller counts the write instead.
    pub(crate) fn dir_fd(self, dir: &DstDir) -> Option<RawFd> {
        match (self, dir) {
            (Writes::Make, DstDir::Open(fd)) => Some(fd.as_raw_fd()),
            // Unmade only when recording.
            (Writes::Record, _) | (_, DstDir::Unmade) => None,
        }
    }

    /// Makes the directory `leaf` in `parent` (mode 0700; `None`: one
    /// not made). Recording, it fails as `mkdir` would, with `EEXIST`,
    /// when something is there, and succeeds otherwise.
    pub(crate) fn mkdir(
        self,
        parent: Option<RawFd>,
        leaf: &CStr,
    ) -> io::Result<()> {
        match (self, parent) {
            (Writes::Make, Some(fd)) => at::mkdir(fd, leaf, 0o700),
            (_, Some(fd)) => match at::lstat(fd, leaf)? {
                Some(_) => Err(io::Error::from_raw_os_error(libc::EEXIST)),
                None => Ok(()),
            },
            (_, None) => Ok(()),
        }
    }
}

/// A destination directory as the run holds it.
pub(crate) enum DstDir {
    /// Open beneath the destination, never followed.
    Open(OwnedFd),
    /// Not there: one a dry run would make, or the top it takes as empty
    /// ([`Plan::dry_run_as_if_empty`](crate::Plan::dry_run_as_if_empty)).
    /// Nothing is in it; only a run that records has one.
    Unmade,
}

impl DstDir {
    /// What is at `leaf` in it, never followed.
    pub(crate) fn lstat(&self, leaf: &CStr) -> io::Result<Option<libc::stat>> {
        match self {
            DstDir::Open(fd) => at::lstat(fd.as_raw_fd(), leaf),
            DstDir::Unmade => Ok(None),
        }
    }

    /// The target of the symlink `leaf` in it.
    pub(crate) fn readlink(&self, leaf: &CStr) -> io::Result<Vec<u8>> {
        match self {
            DstDir::Open(fd) => at::readlink(fd.as_raw_fd(), leaf),
            DstDir::Unmade => Err(io::Error::from(io::ErrorKind::NotFound)),
        }
    }

    /// Its descriptor, when it is there.
    pub(crate) fn fd(&self) -> Option<&OwnedFd> {
        match self {
            DstDir::Open(fd) => Some(fd),
            DstDir::Unmade => None,
        }
    }

    /// Its descriptor as a raw one, when it is there.
    pub(crate) fn raw(&self) -> Option<RawFd> {
        self.fd().map(AsRawFd::as_raw_fd)
    }
}
