//! Filesystem helpers the engine's callers share: removing a tree without
//! following links or crossing mounts, flushing a filesystem, placing
//! ranges of one file in another in the kernel, and whole-file locks.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub use crate::beneath::{Visit, remove_tree, walk_tree};
use crate::error::{Error, Op, Result};
/// Whole-file locks, from `zinstall-core` (which the registry client
/// shares without depending on the engine).
pub use zinstall_core::Flock;

/// Flushes the filesystem that holds `f` to stable storage (`syncfs(2)`
/// where the platform has it).
pub fn sync_fs(f: &File) -> io::Result<()> {
    crate::sys::sync_fs(f)
}

/// Starts writing `off..off + len` of `f` back to disk without waiting:
/// a file that will be flushed anyway then reaches the disk while its
/// writer still works, and the flush finds less to do. Nothing where the
/// platform has no such call.
pub fn start_writeback(f: &File, off: u64, len: u64) -> io::Result<()> {
    crate::sys::start_writeback(f, off, len)
}

/// Places ranges of one file in another without the bytes passing
/// through user space: a reflink (`FICLONERANGE`) where the filesystem
/// shares extents (XFS, btrfs; source and destination on one
/// filesystem), else `copy_file_range(2)` (ext4 copies in the kernel).
/// What the pair of files refuses (EXDEV, EOPNOTSUPP, EINVAL...) is
/// remembered, so each way is asked once; what [`Self::copy`] did not
/// place, the caller writes itself. Counts the bytes each way placed.
#[derive(Debug, Default)]
pub struct RangeCopier {
    no_clone: AtomicBool,
    no_copy: AtomicBool,
    /// The destination's block size once known: clones need ranges
    /// aligned to it.
    block: AtomicU64,
    cloned: AtomicU64,
    copied: AtomicU64,
}

impl RangeCopier {
    /// Tries reflinks, then in-kernel copies.
    pub fn new() -> Self {
        Self::default()
    }

    /// Places nothing: every range is left to the caller (the portable
    /// path, kept selectable so that it stays tested).
    pub fn user_space_only() -> Self {
        RangeCopier {
            no_clone: AtomicBool::new(true),
            no_copy: AtomicBool::new(true),
            ..Self::default()
        }
    }

    /// In-kernel copies only, no reflinks.
    pub fn without_clones() -> Self {
        RangeCopier {
            no_clone: AtomicBool::new(true),
            ..Self::default()
        }
    }

    /// Places `len` bytes of `src` at `off_in` at `off_out` of `dst`.
    /// Returns how many bytes from the front of the range were placed:
    /// fewer than `len` when neither way can place the rest (or the
    /// source ends first), and the caller writes those. Errors that are
    /// not "cannot here" (ENOSPC, EIO) are returned.
    pub fn copy(
        &self,
        src: &File,
        off_in: u64,
        dst: &File,
        off_out: u64,
        len: u64,
    ) -> io::Result<u64> {
        let mut done = 0;
        if !self.no_clone.load(Ordering::Relaxed) {
            let block = match self.block.load(Ordering::Relaxed) {
                0 => {
                    let b = dst.metadata()?.blksize().max(512);
                    self.block.store(b, Ordering::Relaxed);
                    b
                }
                b => b,
            };
            // Whole blocks only; a partial last block is copied.
            let head = len - len % block;
            if head > 0
                && off_in.is_multiple_of(block)
                && off_out.is_multiple_of(block)
            {
                if crate::sys::clone_range(src, dst, off_in, off_out, head)? {
                    self.cloned.fetch_add(head, Ordering::Relaxed);
                    done = head;
                } else {
                    self.no_clone.store(true, Ordering::Relaxed);
                }
            }
        }
        while done < len && !self.no_copy.load(Ordering::Relaxed) {
            match crate::sys::copy_range(
                src,
                dst,
                off_in + done,
                off_out + done,
                len - done,
            )? {
                Some(0) => break,
                Some(n) => {
                    self.copied.fetch_add(n, Ordering::Relaxed);
                    done += n;
                }
                None => self.no_copy.store(true, Ordering::Relaxed),
            }
        }
        Ok(done)
    }

    /// Bytes placed by reflink.
    pub fn cloned(&self) -> u64 {
        self.cloned.load(Ordering::Relaxed)
    }

    /// Bytes copied in the kernel.
    pub fn copied(&self) -> u64 {
        self.copied.load(Ordering::Relaxed)
    }
}

/// Every extended attribute of `p` (not following a final symlink):
/// name and value, in the order the filesystem lists them. What an
/// archive keeps of a file and what a comparison compares.
pub fn read_xattrs(p: &Path) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let c = crate::sys::posix::cstr(p)
        .map_err(|e| Error::io(Op::ListXattr, p, e))?;
    let t = crate::sys::XattrTarget::Path(&c);
    let names = crate::sys::list_xattrs(&t)
        .map_err(|e| Error::io(Op::ListXattr, p, e))?;
    let mut out = Vec::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cname = CString::new(name).map_err(|_| {
            Error::io(Op::GetXattr, p, io::ErrorKind::InvalidData.into())
        })?;
        // Gone since it was listed: nothing to keep.
        if let Some(v) = crate::sys::get_xattr(&t, &cname)
            .map_err(|e| Error::io(Op::GetXattr, p, e))?
        {
            out.push((name.to_vec(), v));
        }
    }
    Ok(out)
}
