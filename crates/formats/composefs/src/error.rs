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
    /// Linking a file into the store as an object.
    Link,
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
    /// Mounting an image.
    Mount,
    /// Unmounting a root.
    Unmount,
    /// Setting a directory's owner, mode or times.
    Attributes,
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
            Op::Link => "link",
            Op::Image => "write image",
            Op::Verify => "verify",
            Op::Remove => "remove",
            Op::Verity => "enable fs-verity",
            Op::Adopt => "make an object of",
            Op::Attributes => "set the owner, mode and times of",
            Op::Lock => "lock",
            Op::Mount => "mount",
            Op::Unmount => "unmount",
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
    /// The kernel refused a composefs mount in a way older kernels do
    /// (no EROFS from a file, no overlay layers given by descriptor).
    Kernel(io::Error),
    /// A mount point that is not a directory (a symlink, a file).
    NotDirectory,
    /// Nothing is mounted there.
    NotMounted,
    /// The directory has no `composefs.json`.
    NotComposefs,
    /// The record's image is not in its store.
    MissingImage(Box<Error>),
    /// fs-verity was required but the image has none (or another one).
    NoVerity,
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
            Problem::Kernel(e) => write!(
                f,
                "{p}: {op}: the kernel refused it ({e}): composefs mounts \
                 need Linux 6.12 or later with erofs and overlayfs (EROFS \
                 mounted from a file or a loop device, overlay data-only \
                 layers); upgrade the kernel, or load the erofs, overlay \
                 and loop modules"
            ),
            Problem::NotDirectory => write!(
                f,
                "{p}: {op}: not a directory (a symlink or a file): the mount \
                 point must be the empty directory install or provision made; \
                 remove what is there and make it with mkdir"
            ),
            Problem::NotComposefs => write!(
                f,
                "{p}: {op}: no composefs.json: not a composefs root (one \
                 made by install or provision --format composefs)"
            ),
            Problem::MissingImage(e) => write!(
                f,
                "{p}: {op}: its image is not in the store ({e}); `cache gc` \
                 or a removed store took it: provision or install it again"
            ),
            Problem::NotMounted => {
                write!(f, "{p}: {op}: nothing is mounted there")
            }
            Problem::NoVerity => write!(
                f,
                "{p}: {op}: fs-verity is required but the image has none \
                 (the store's filesystem may not support it): mount without \
                 requiring it, or keep the store on ext4/btrfs/f2fs with \
                 fs-verity enabled"
            ),
        }
    }
}

/// Every cause is in the message, so no `source()` (CONTRIBUTING.md: a
/// cause is said once).
impl std::error::Error for Error {}
