//! What went wrong, where and in which step: every error names the path
//! (in the source tree or the store) and the operation, with its cause.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// The step that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Opening a file or directory.
    Open,
    /// `fstatat`/`fstat` of an entry.
    Stat,
    /// Listing a directory.
    ReadDir,
    /// Reading a symlink's target.
    ReadLink,
    /// Listing or reading extended attributes.
    Xattrs,
    /// Reading a file's contents.
    Read,
    /// Making a directory or a temporary file in the store.
    Create,
    /// Writing an object's contents.
    Write,
    /// `fsync` of an object or a store directory.
    Sync,
    /// Renaming a finished object into place.
    Rename,
    /// Turning the tree into an EROFS image.
    Image,
    /// Checking an object against its name.
    Verify,
    /// Removing a ref, an object or a temporary file.
    Remove,
    /// Enabling or measuring an object's fs-verity.
    Verity,
    /// Making a file to be moved into the store an object (owner, mode,
    /// extended attributes).
    Adopt,
    /// Taking the store's lock.
    Lock,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Open => "open",
            Op::Stat => "stat",
            Op::ReadDir => "read directory",
            Op::ReadLink => "read link",
            Op::Xattrs => "read extended attributes",
            Op::Read => "read",
            Op::Create => "create",
            Op::Write => "write",
            Op::Sync => "sync",
            Op::Rename => "rename",
            Op::Image => "write image",
            Op::Verify => "verify",
            Op::Remove => "remove",
            Op::Verity => "enable fs-verity",
            Op::Adopt => "make an object of",
            Op::Lock => "lock",
        })
    }
}

/// Why the step failed.
#[derive(Debug)]
pub enum Problem {
    /// The system call's error.
    Io(io::Error),
    /// Opening a file through the foreign-file seam failed (it is not a
    /// regular file, or could not be opened).
    Foreign(zinstall_core::foreign::Error),
    /// The entry changed while it was read: its type, identity or size
    /// is no longer what the walk saw.
    Changed(&'static str),
    /// A stored object's contents do not have the digest its name says.
    Mismatch {
        /// The digest the contents have.
        found: String,
    },
    /// A name that is no object's (not `XX/` and 62 hex digits).
    BadName,
    /// The tree cannot be an EROFS image (composefs's own check).
    Format(String),
}

/// An error with the path and the operation it happened in.
#[derive(Debug)]
pub struct Error {
    /// The path, in the source tree or the store.
    pub path: PathBuf,
    /// The step.
    pub op: Op,
    /// The cause.
    pub problem: Problem,
}

impl Error {
    /// `problem` in `op` on `path`.
    pub fn new(path: &Path, op: Op, problem: Problem) -> Error {
        Error {
            path: path.to_path_buf(),
            op,
            problem,
        }
    }

    /// The system error `e` in `op` on `path`.
    pub fn io(path: &Path, op: Op, e: io::Error) -> Error {
        Error::new(path, op, Problem::Io(e))
    }

    /// True if the error is an object whose contents do not match its
    /// name.
    pub fn is_mismatch(&self) -> bool {
        matches!(self.problem, Problem::Mismatch { .. })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.path.display();
        let op = self.op;
        match &self.problem {
            Problem::Io(e) => write!(f, "{p}: {op}: {e}"),
            // The seam's error names the path and its operation itself.
            Problem::Foreign(e) => write!(f, "{e}"),
            Problem::Changed(what) => {
                write!(f, "{p}: {op}: changed while read ({what})")
            }
            Problem::Mismatch { found } => write!(
                f,
                "{p}: {op}: the contents' fs-verity digest is {found}, \
                 not the object's name"
            ),
            Problem::BadName => write!(f, "{p}: {op}: not an object name"),
            Problem::Format(m) => write!(f, "{p}: {op}: {m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.problem {
            Problem::Io(e) => Some(e),
            Problem::Foreign(e) => Some(e),
            _ => None,
        }
    }
}
