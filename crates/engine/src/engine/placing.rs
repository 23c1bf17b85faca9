//! What a copy does with an entry's name in the destination, from what
//! is there: the one rule for the copy's workers and for its dry run,
//! which only reads what is there.

// `stat`'s field types differ between platforms: the casts are needed on
// some.
#![allow(clippy::unnecessary_cast)]

use std::io;
use std::path::Path;

use crate::Plan;
use crate::error::{Error, Op, Refusal, Result};

/// How the copy merges into what is there.
#[derive(Clone, Copy)]
pub(crate) struct Merging {
    /// Merging at all: without it the destination was empty, and
    /// nothing is looked at.
    pub(crate) merge: bool,
    /// As an image layer: every entry written, a directory in the way
    /// removed.
    pub(crate) layered: bool,
}

impl Merging {
    pub(crate) fn of(plan: &Plan) -> Merging {
        Merging {
            merge: plan.merge,
            layered: plan.layered,
        }
    }
}

/// Where a new entry goes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Under its own name: nothing is there.
    Direct,
    /// A layer's entry over a directory: the directory is removed (with
    /// everything in it), then the entry made under its own name.
    RemoveDir,
    /// What is there is like the entry: left alone.
    Unchanged,
    /// Something else is there: the entry is made beside it and renamed
    /// over it.
    Replace,
}

/// Decides where a new entry for `dst` goes. Merging, `look` tells what
/// is there (never following it), and `same` whether it is like the
/// entry: a directory in the way is refused unless a layer removes it;
/// a like entry is left alone unless a layer writes it again.
pub(crate) fn decide(
    how: Merging,
    dst: &Path,
    look: impl FnOnce() -> io::Result<Option<libc::stat>>,
    same: impl FnOnce(&libc::stat) -> bool,
) -> Result<Decision> {
    if !how.merge {
        return Ok(Decision::Direct);
    }
    match look() {
        Err(e) => Err(Error::io(Op::Stat, dst, e)),
        Ok(None) => Ok(Decision::Direct),
        Ok(Some(st)) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {
            match how.layered {
                true => Ok(Decision::RemoveDir),
                false => Err(Error::refused(dst, Refusal::DirectoryInTheWay)),
            }
        }
        Ok(Some(st)) if !how.layered && same(&st) => Ok(Decision::Unchanged),
        Ok(Some(_)) => Ok(Decision::Replace),
    }
}

/// A regular file of the source's size and modification time.
pub(crate) fn same_file(st: &libc::stat, size: u64, mtime: (i64, i64)) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFREG
        && st.st_size as u64 == size
        && (st.st_mtime as i64, st.st_mtime_nsec as i64) == mtime
}

/// A special file of the same type (`type_bits`: the mode above the
/// permission bits) and device number.
pub(crate) fn same_special(st: &libc::stat, type_bits: u32, rdev: u64) -> bool {
    st.st_mode as u32 & libc::S_IFMT as u32 == type_bits
        && st.st_rdev as u64 == rdev
}

/// A symlink whose target, read only when it is one, is `target`.
pub(crate) fn same_symlink(
    st: &libc::stat,
    read: impl FnOnce() -> io::Result<Vec<u8>>,
    target: &[u8],
) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFLNK
        && read().is_ok_and(|t| t == target)
}
