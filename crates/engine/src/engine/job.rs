//! A job: one entry a walker found, for a worker to make. Its own room,
//! as the walkers make jobs and the workers (and dispatchers) take them.

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use super::node::{DirFds, DirNode};
use super::writes::DstDir;
use crate::descriptors::Slot;

/// One unit of work for a worker.
pub(crate) struct Job {
    pub(crate) kind: JobKind,
    /// The source and destination paths, for messages only: the entry is
    /// read as `leaf` (or `src_leaf`) in `src_dir` and made as `leaf` in
    /// `dir`, never by these paths. The walker leaves them empty for an
    /// entry of a tree; the worker makes them from the directory's
    /// ([`Job::name_paths`]).
    pub(crate) src: PathBuf,
    pub(crate) dst: PathBuf,
    /// The destination directory, opened beneath the destination root
    /// (or, in a dry run, one not made).
    pub(crate) dir: Arc<DstDir>,
    /// The entry's name in `dir`, and in `src_dir` unless `src_leaf`
    /// says otherwise.
    pub(crate) leaf: CString,
    /// The source directory, open.
    pub(crate) src_dir: Arc<OwnedFd>,
    /// The descriptor budget's slot `dir` and `src_dir` hold, if they
    /// are a walked directory's.
    pub(crate) hold: Option<Arc<Slot>>,
    /// The entry's name in `src_dir` when it is not `leaf`: a single
    /// source copied under another name.
    pub(crate) src_leaf: Option<CString>,
    /// The directory this entry lives in; released when the job is done.
    pub(crate) parent: Option<Arc<DirNode>>,
}

impl Job {
    /// Fills in the paths of an entry queued by a walker, from its
    /// directory's.
    pub(crate) fn name_paths(&mut self) {
        if let Some(p) = &self.parent
            && self.src.as_os_str().is_empty()
        {
            (self.src, self.dst) = p.paths_of(&self.leaf);
        }
    }

    /// Its directory's descriptors, to release it with.
    pub(crate) fn fds(&self) -> DirFds {
        DirFds {
            src: Arc::clone(&self.src_dir),
            dst: Arc::clone(&self.dir),
            hold: self.hold.clone(),
        }
    }
}

pub(crate) enum JobKind {
    /// A regular file: copy data and metadata.
    File,
    /// Recreate a symlink with the same target.
    Symlink,
    /// Recreate a FIFO, socket or device node.
    Special,
    /// Replace a file by a symlink to this target (a link rule).
    Redirect(PathBuf),
}

impl JobKind {
    /// The kind's name in probes.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            JobKind::File => "file",
            JobKind::Symlink => "symlink",
            JobKind::Special => "special",
            JobKind::Redirect(_) => "redirect",
        }
    }
}
