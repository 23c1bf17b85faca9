//! What the reader works out about a member and hands on: its metadata,
//! what is at its name now, and a file's job for a worker with where its
//! body is (in memory, in chunks, or ranges of the tar file).

use std::ffi::{CStr, CString};
use std::os::fd::{OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crossbeam_channel::Receiver;
use zinstall_archive::tar;

use super::budget::Spare;
use crate::descriptors::Slot;
use crate::error::{Error, Op, Result};
use crate::sys::posix::{Times, at};

/// Owner, mode, times and xattrs of an entry.
#[derive(Clone, Debug)]
pub(super) struct Meta {
    pub(super) mode: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) times: Times,
    pub(super) xattrs: Vec<(CString, Vec<u8>)>,
}

/// A member's xattr name holds a NUL, which no file system takes.
#[derive(Debug)]
pub(super) struct NulInXattrName;

impl std::fmt::Display for NulInXattrName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NUL in an xattr name")
    }
}

impl Meta {
    /// Owner, mode, times and xattrs of a member. Owners are numeric, as
    /// `tar --numeric-owner` keeps them: an image's names belong to the
    /// image's own passwd, not the host's.
    pub(super) fn of(
        m: &tar::Member,
    ) -> std::result::Result<Meta, NulInXattrName> {
        let t = |(s, ns): (i64, u32)| (s, i64::from(ns));
        let mtime = t(m.mtime);
        let mut xattrs = Vec::with_capacity(m.xattrs.len());
        for (name, value) in &m.xattrs {
            let c = CString::new(name.clone()).map_err(|_| NulInXattrName)?;
            xattrs.push((c, value.clone()));
        }
        Ok(Meta {
            mode: m.mode & 0o7777,
            uid: m.uid,
            gid: m.gid,
            times: Times {
                atime: m.atime.map_or(mtime, t),
                mtime,
            },
            xattrs,
        })
    }
}

/// A file for the pool.
pub(super) struct FileJob {
    pub(super) place: Place,
    pub(super) body: Body,
    pub(super) meta: Meta,
    pub(super) shown: PathBuf,
    pub(super) entry: String,
    /// The budget's slot for `dir`, on the first job in a batch to hold
    /// it: given back when the batch is done.
    pub(super) hold: Option<Slot>,
    /// Its path in the root, when content hashes are recorded.
    pub(super) rel: Option<Vec<u8>>,
}

/// Where a file job's file goes.
pub(super) enum Place {
    /// Named `leaf` in the directory `dir` beneath the root, under a
    /// temporary name first when it `replace`s what is there.
    Tree {
        dir: Arc<OwnedFd>,
        leaf: CString,
        replace: bool,
    },
    /// Into the store of an unpack into memory, its digest put in this
    /// slot of the tree ([`super::memory::MemTree::object`]).
    Object(usize),
}

impl Place {
    /// The directory it is written in, if one beneath the root.
    pub(super) fn dir(&self) -> Option<&Arc<OwnedFd>> {
        match self {
            Place::Tree { dir, .. } => Some(dir),
            Place::Object(_) => None,
        }
    }
}

/// Where a file's bytes are.
pub(super) enum Body {
    /// Read by the reader from a stream, into a buffer of [`Spare`]'s
    /// (whose whole capacity the budget counts).
    Bytes(Vec<u8>),
    /// Ranges of the plain tar file: `(offset in the file being written,
    /// length, offset in the archive)`, and the file's real size (larger
    /// than the ranges when it ends in a hole).
    At {
        segments: Vec<(u64, u64, u64)>,
        size: u64,
    },
    /// Read by the reader while the worker writes it: `size` bytes in
    /// chunks, in order. Fewer means the reader stopped (and says why).
    Chunks { rx: Receiver<Vec<u8>>, size: u64 },
}

impl Body {
    pub(super) fn len(&self) -> u64 {
        match self {
            Body::Bytes(b) => b.len() as u64,
            Body::At { size, .. } | Body::Chunks { size, .. } => *size,
        }
    }

    /// Bytes of the in-memory budget this body holds (a chunked body's
    /// are bounded by its channel instead: its reader waits on its worker
    /// alone, never on the budget other jobs hold).
    pub(super) fn held(&self) -> u64 {
        match self {
            Body::Bytes(b) => Spare::class(b.len()) as u64,
            Body::At { .. } | Body::Chunks { .. } => 0,
        }
    }
}

/// What is at `dir/leaf` now.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Existing {
    Nothing,
    Dir,
    Symlink,
    Other,
}

pub(super) fn existing(
    dir: RawFd,
    leaf: &CStr,
    shown: &Path,
) -> Result<Existing> {
    Ok(
        match at::lstat(dir, leaf).map_err(|e| Error::io(Op::Stat, shown, e))? {
            None => Existing::Nothing,
            Some(st) => match st.st_mode & libc::S_IFMT {
                libc::S_IFDIR => Existing::Dir,
                libc::S_IFLNK => Existing::Symlink,
                _ => Existing::Other,
            },
        },
    )
}

/// Where the reader writes a streamed file.
pub(super) struct Target<'a> {
    pub(super) dir: RawFd,
    pub(super) leaf: &'a CString,
    pub(super) replace: bool,
    pub(super) shown: &'a Path,
    /// Its path in the root, when content hashes are recorded.
    pub(super) rel: Option<Vec<u8>>,
}
