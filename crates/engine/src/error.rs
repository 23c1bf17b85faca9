//! Errors that name the operation and the path.
//!
//! Every filesystem failure the engine meets becomes an [`Error`] carrying
//! the operation that failed ([`Op`]), the path it was applied to, the
//! second path when there is one (the destination of a copy, the target
//! of a link), and the `io::Error` underneath with its errno intact. Its
//! display reads like the failing call:
//!
//! ```text
//! copy_file_range /a/b -> /x/b: No space left on device (os error 28)
//! ```

use std::io;
use std::path::{Path, PathBuf};

pub use zinstall_archive::ArchiveRefusal;

mod defaults_problem;
mod display;
mod op;
mod refusal;
mod syntax;
#[cfg(test)]
mod test;

pub use defaults_problem::DefaultsProblem;
pub use op::Op;
pub use refusal::{Met, Refusal};
pub use syntax::Syntax;

use defaults_problem::DefaultsMsg;
use display::{Arrow, EntryName, LineNo, Paths, Wanted};

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error of the engine.
///
/// The variants are public so callers can match on them; use
/// [`Error::path`] and [`Error::io_error`] to reach the common parts.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A system call failed.
    #[error("{op} {}{}: {error}", path.display(), Arrow(target.as_deref()))]
    Io {
        /// What was being done.
        op: Op,
        /// The path it was done to.
        path: PathBuf,
        /// The second path of the operation (copy or link destination).
        target: Option<PathBuf>,
        /// The underlying error, errno intact; said in the message, so
        /// not a `source()`.
        error: io::Error,
    },
    /// An extended attribute could not be read or written.
    #[error("{op} {} ({name}): {error}", path.display())]
    Attr {
        /// `ListXattr`, `GetXattr` or `SetXattr`.
        op: Op,
        /// The file.
        path: PathBuf,
        /// The attribute's name.
        name: String,
        /// The underlying error.
        error: io::Error,
    },
    /// An archive entry was refused, or the archive itself.
    #[error("{}: {}{reason}", archive.display(), EntryName(entry))]
    Archive {
        /// The archive file.
        archive: PathBuf,
        /// The entry's name as the archive gives it (lossy), or empty.
        entry: String,
        /// Why.
        reason: ArchiveRefusal,
    },
    /// An unpack into memory met a member whose result only the kernel
    /// decides ([`crate::unpack::unpack_to_memory`]): the caller unpacks
    /// into a tree instead.
    #[error(
        "{}: {}{why}: left to an unpack into a tree",
        archive.display(),
        EntryName(entry)
    )]
    Unmodeled {
        /// The archive file.
        archive: PathBuf,
        /// The member's name as the archive gives it (lossy).
        entry: String,
        /// What it holds that is not modelled.
        why: String,
    },
    /// The run was cancelled ([`crate::Cancel`]) before it finished.
    #[error("{}: cancelled", path.display())]
    Cancelled {
        /// The run's destination (or the archive being unpacked).
        path: PathBuf,
    },
    /// An entry was refused.
    #[error("{}: {reason}", path.display())]
    Refused {
        /// The entry.
        path: PathBuf,
        /// Why.
        reason: Refusal,
    },
    /// A write beneath a root met a symlink or a non-directory where it
    /// needed a directory; nothing was written through it.
    #[error(
        "{}{} is {met} inside the root; nothing is written through it",
        Wanted(path, at),
        at.display()
    )]
    Beneath {
        /// What was to be written (or the directory to open).
        path: PathBuf,
        /// The component that is in the way.
        at: PathBuf,
        /// What it is.
        met: Met,
    },
    /// A removal stopped at mount points inside the tree and left them,
    /// with everything in them; the rest was removed.
    #[error(
        "remove {}: left {} mount point(s) in place with everything in them \
         (unmount them and remove again): {}",
        path.display(),
        mounts.len(),
        Paths(mounts)
    )]
    MountsLeft {
        /// The tree being removed.
        path: PathBuf,
        /// The mount points met, in the order found.
        mounts: Vec<PathBuf>,
    },
    /// A defaults file (or environment setting) is malformed.
    #[error("{}{}: {}", file.display(), LineNo(*line), DefaultsMsg(problem, key, value))]
    Defaults {
        /// The file, or `environment` for an environment variable.
        file: PathBuf,
        /// 1-based line number; 0 when not from a file.
        line: usize,
        /// The key, when known.
        key: String,
        /// The offending text.
        value: String,
        /// What is wrong with it.
        problem: DefaultsProblem,
    },
    /// An OCI image was refused or could not be read: a blob that is not
    /// what its descriptor says, a layer's diff_id, the platform, the
    /// layout (image, blob and why).
    #[error(transparent)]
    Oci(#[from] zinstall_oci::Error),
    /// A rule pattern does not compile.
    #[error("bad rule pattern {pattern:?}: {message}")]
    Rule {
        /// The pattern as given.
        pattern: String,
        /// The glob compiler's explanation.
        message: String,
    },
}

impl Error {
    /// An I/O error on one path.
    pub fn io(op: Op, path: impl Into<PathBuf>, error: io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            target: None,
            error,
        }
    }

    /// An I/O error on a pair of paths (source and destination).
    pub fn io2(
        op: Op,
        path: impl Into<PathBuf>,
        target: impl Into<PathBuf>,
        error: io::Error,
    ) -> Self {
        Error::Io {
            op,
            path: path.into(),
            target: Some(target.into()),
            error,
        }
    }

    /// A directory walk's error: the path it concerns (`at` when it names
    /// none) and the system's error alone, whose message walkdir's own
    /// display would wrap around the path a second time.
    pub fn walk(op: Op, at: &Path, e: walkdir::Error) -> Self {
        let path = e.path().unwrap_or(at).to_path_buf();
        let source = e.into_io_error().unwrap_or_else(|| {
            io::Error::other("a directory contains itself (filesystem loop)")
        });
        Error::io(op, path, source)
    }

    /// The error for a tar archive `archive` whose reader failed: an
    /// [`Error::Archive`] naming the member, or an [`Error::Io`] for a
    /// failed read of the file itself.
    pub fn tar(archive: &Path, e: zinstall_archive::tar::TarError) -> Self {
        match e.into_refusal() {
            (_, Err(io)) => Error::io(Op::Read, archive, io),
            (entry, Ok(reason)) => Error::Archive {
                archive: archive.to_path_buf(),
                entry,
                reason,
            },
        }
    }

    /// A refused entry.
    pub fn refused(path: impl Into<PathBuf>, reason: Refusal) -> Self {
        Error::Refused {
            path: path.into(),
            reason,
        }
    }

    /// The path the error is about.
    pub fn path(&self) -> &Path {
        match self {
            Error::Io { path, .. }
            | Error::Attr { path, .. }
            | Error::Refused { path, .. }
            | Error::Cancelled { path }
            | Error::Beneath { path, .. }
            | Error::MountsLeft { path, .. } => path,
            Error::Defaults { file, .. } => file,
            Error::Archive { archive, .. }
            | Error::Unmodeled { archive, .. } => archive,
            Error::Oci(e) => e.image(),
            Error::Rule { .. } => Path::new(""),
        }
    }

    /// The operation, for I/O errors.
    pub fn op(&self) -> Option<Op> {
        match self {
            Error::Io { op, .. } | Error::Attr { op, .. } => Some(*op),
            _ => None,
        }
    }

    /// The underlying I/O error, if any.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            Error::Io { error, .. } | Error::Attr { error, .. } => Some(error),
            _ => None,
        }
    }

    /// The errno of the underlying I/O error, if any.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.io_error().and_then(io::Error::raw_os_error)
    }
}

impl From<Error> for io::Error {
    /// Keeps the kind of an I/O error so callers can still match on it.
    fn from(e: Error) -> io::Error {
        let kind = match &e {
            Error::Io { error, .. } | Error::Attr { error, .. } => error.kind(),
            Error::MountsLeft { .. } => io::ErrorKind::ResourceBusy,
            Error::Cancelled { .. } => io::ErrorKind::Interrupted,
            Error::Refused { .. } | Error::Beneath { .. } => {
                io::ErrorKind::InvalidInput
            }
            Error::Defaults { .. }
            | Error::Rule { .. }
            | Error::Archive { .. }
            | Error::Unmodeled { .. }
            | Error::Oci(_) => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, e)
    }
}
