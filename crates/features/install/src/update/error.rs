//! Why an update or rollback stopped, and the helpers that put the
//! path and operation on a system call's error.

use std::io;
use std::path::PathBuf;

use super::names::ROOT_PREV;
use crate::manifest;
use crate::state;

/// The record of a composefs root in its zonepath (zinstall-composefs's
/// `RECORD`, named here as this crate reads no composefs).
pub(crate) const COMPOSEFS_RECORD: &str = "composefs.json";

/// The error for a zonepath holding a composefs root, if `zonepath`
/// holds one.
pub(crate) fn composefs_root(
    zonepath: &std::path::Path,
) -> Option<UpdateError> {
    std::fs::symlink_metadata(zonepath.join(COMPOSEFS_RECORD))
        .is_ok()
        .then(|| UpdateError::Composefs {
            zonepath: zonepath.to_path_buf(),
        })
}

/// Why an update or rollback stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpdateError {
    /// Another process holds the zonepath, or the lock failed.
    #[error(transparent)]
    Lock(#[from] state::LockError),
    /// The zonepath is not an installed zone.
    #[error(
        "{} was never installed by zinstall ({state}), so there is no \
         root to update: install one with zinstall install --zonepath {} \
         [IMAGE...]",
        zonepath.display(),
        zonepath.display()
    )]
    NotInstalled {
        /// The zonepath.
        zonepath: PathBuf,
        /// What the marker says.
        state: &'static str,
    },
    /// The zonepath holds a composefs root: an image in a store, not a
    /// tree to switch.
    #[error(
        "{}: holds a composefs root ({}), and update and rollback change \
         tree roots only: the [update] owners could not be kept, as an \
         image swapped under the root's upper/ shows every change of the \
         source, in kept and merged paths too; install the new images \
         with --format composefs into another zonepath",
        zonepath.display(),
        zonepath.join(COMPOSEFS_RECORD).display()
    )]
    Composefs {
        /// The zonepath.
        zonepath: PathBuf,
    },
    /// No manifest: the install predates them, so the zone's changes
    /// cannot be told from the install's.
    #[error(
        "{}: no manifest of what the install laid out (installed before \
         zinstall recorded one), so the {}'s own changes cannot be told \
         from the install's; --force updates anyway, replacing every file \
         of the profile's trees and keeping every other entry",
        zonepath.display(),
        made!()
    )]
    NoManifest {
        /// The zonepath.
        zonepath: PathBuf,
    },
    /// What the update was given is not what the root was made from.
    #[error(
        "the root was made from {recorded}, and this update was given \
         {given}: {why}; nothing was changed"
    )]
    RecipeMismatch {
        /// The zonepath.
        zonepath: PathBuf,
        /// The recorded recipe, as a user reads it.
        recorded: String,
        /// What the update was given.
        given: String,
        /// What to do instead.
        why: String,
    },
    /// An image could not be opened or read.
    #[error("image {image}: {cause}")]
    Image {
        /// As given, or as recorded.
        image: String,
        /// Why.
        cause: Box<crate::Cause>,
    },
    /// A process uses the root: an update would lose what it writes.
    #[error(
        "{}: process {pid} ({comm}) {what}; stop {} (or the \
         process) first, or update with --live, which loses what is \
         written in the root while the update runs; nothing was changed",
        root.display(),
        if cfg!(any(target_os = "illumos", target_os = "solaris")) {
            "the zone"
        } else {
            "the container or guest using it"
        }
    )]
    Live {
        /// The root.
        root: PathBuf,
        /// The process.
        pid: u32,
        /// Its command name.
        comm: String,
        /// How it uses the root.
        what: String,
    },
    /// A tree of the profile is missing on the host.
    #[error("tree {} is missing", tree.display())]
    TreeMissing {
        /// The tree.
        tree: PathBuf,
    },
    /// Nothing to roll back to.
    #[error("{}: no previous root ({ROOT_PREV}) to roll back to", zonepath.display())]
    NoPrevious {
        /// The zonepath.
        zonepath: PathBuf,
    },
    /// The manifest could not be read or written.
    #[error(transparent)]
    Manifest(#[from] manifest::ManifestError),
    /// A system call failed.
    #[error("{op} {}: {error}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// Where.
        path: PathBuf,
        /// The system's error.
        error: io::Error,
    },
    /// The root could not be opened beneath its zonepath.
    #[error(transparent)]
    Copier(#[from] zinstall_engine::Error),
    /// The root is deeper than the update goes.
    #[error(
        "{}: more than {} directories deep; an update does not go this \
         deep (reinstall instead)",
        path.display(),
        manifest::MAX_DEPTH
    )]
    TooDeep {
        /// The first directory past the limit.
        path: PathBuf,
    },
    /// Cancelled before the switch: the old root is in place, untouched.
    #[error("cancelled; the root is as it was")]
    Cancelled,
}

pub(super) fn io_at(
    op: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(io::Error) -> UpdateError {
    let path = path.into();
    move |error| UpdateError::Io { op, path, error }
}

pub(super) fn errno_at(
    op: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(rustix::io::Errno) -> UpdateError {
    let path = path.into();
    move |e| UpdateError::Io {
        op,
        path,
        error: e.into(),
    }
}
