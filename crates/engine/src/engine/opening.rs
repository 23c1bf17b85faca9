//! What opening an entry tells: a file's identity, and the error a
//! failed open is reported as. A leaf, used by the walk, the workers
//! and the directory nodes alike.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::beneath;
use crate::error::{Error, Op, Refusal};

/// The error for a directory that could not be opened beneath its parent.
pub(crate) fn step_error(f: beneath::StepFail, path: &Path) -> Error {
    match f {
        beneath::StepFail::Met(met) => Error::Beneath {
            path: path.to_path_buf(),
            at: path.to_path_buf(),
            met,
        },
        beneath::StepFail::Io(op, e) => Error::io(op, path, e),
    }
}

/// Opening a source failed: a vanished file is an I/O error with its
/// path; a file that became a symlink (ELOOP under O_NOFOLLOW) changed
/// type.
pub(crate) fn open_error(path: &Path, e: io::Error) -> Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        Error::refused(path, Refusal::ChangedType)
    } else {
        Error::io(Op::Open, path, e)
    }
}

/// `(dev, ino)`: the identity of a file.
pub(crate) fn identity(md: &fs::Metadata) -> (u64, u64) {
    (md.dev(), md.ino())
}
