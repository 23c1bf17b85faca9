//! Watching a run as it goes: its progress ([`Progress`], [`Metered`])
//! and a listing of what it writes ([`Listener`], [`EntryKind`]). Apart
//! from the plan, since readers of archives and images use them too.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// Receives progress as the workers finish batches. Calls come from many
/// threads; implementations should be cheap (an atomic add, a rate-limited
/// redraw).
///
/// A run whose size is known beforehand (an archive or image file's
/// length, a tree's data counted by an earlier pass) also says how far
/// through it it is: [`begin`](Progress::begin) with the total, then
/// [`read`](Progress::read) as it goes, so that a percentage and a time
/// left can be shown; a part of unknown size begins with `None`.
pub trait Progress: Send + Sync + fmt::Debug {
    /// `entries` more entries and `bytes` more bytes of data are done.
    fn advance(&self, entries: u64, bytes: u64);

    /// A part of the work begins: `Some(total)` bytes of input whose
    /// progress [`read`](Progress::read) reports, or `None` when its
    /// size is not known. Default: ignored.
    fn begin(&self, _total: Option<u64>) {}

    /// `bytes` more of the input announced by
    /// [`begin`](Progress::begin) are done. Default: ignored.
    fn read(&self, _bytes: u64) {}
}

/// A reader (or seekable reader, from its start) that tells a
/// [`Progress`] how far through its input it is: the furthest offset it
/// has read to or skipped to. A seek from the end (to learn the length)
/// is no progress.
pub struct Metered<R> {
    inner: R,
    progress: Option<Arc<dyn Progress>>,
    /// The offset now, and the furthest one reported.
    at: u64,
    reported: u64,
}

impl<R> Metered<R> {
    /// `inner`, at its start, reporting to `progress` (none: a plain
    /// wrapper).
    pub fn new(inner: R, progress: Option<Arc<dyn Progress>>) -> Self {
        Metered {
            inner,
            progress,
            at: 0,
            reported: 0,
        }
    }

    fn moved(&mut self, to: u64, counts: bool) {
        self.at = to;
        if counts && to > self.reported {
            if let Some(p) = &self.progress {
                p.read(to - self.reported);
            }
            self.reported = to;
        }
    }
}

impl<R: std::io::Read> std::io::Read for Metered<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.moved(self.at + n as u64, true);
        Ok(n)
    }
}

impl<R: std::io::Seek> std::io::Seek for Metered<R> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        let after = self.inner.seek(to)?;
        self.moved(after, !matches!(to, std::io::SeekFrom::End(_)));
        Ok(after)
    }
}

/// What an entry of a listing ([`Listener`]) is, in the destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A regular file with its data.
    File,
    /// A later name of a file, made as a hard link to its first copy.
    HardLink,
    /// A symlink.
    Symlink,
    /// A FIFO, socket or device node.
    Special,
    /// A file replaced by a symlink by a link rule.
    Redirect,
}

impl EntryKind {
    /// A short name for listings: `dir`, `file`, `hardlink`, `symlink`,
    /// `special`, `redirect`.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Dir => "dir",
            EntryKind::File => "file",
            EntryKind::HardLink => "hardlink",
            EntryKind::Symlink => "symlink",
            EntryKind::Special => "special",
            EntryKind::Redirect => "redirect",
        }
    }
}

/// Hears of each entry written (or, in a
/// [dry run](crate::Plan::dry_run), that would be), as `cp -v` lists
/// them: not entries skipped or, merging, left unchanged. Calls come from many threads in no set order.
pub trait Listener: Send + Sync + fmt::Debug {
    /// `src` was (or would be) made as `dst`, a `kind`.
    fn entry(&self, src: &Path, dst: &Path, kind: EntryKind);
}
