//! The source of a run, resolved once: the directory holding it, open,
//! and its name there. Everything the run reads of the source after
//! that — the top's `lstat`, the top directory, a single file, a dry
//! run's walk — goes through that descriptor; the source's path is only
//! text for messages from then on, so no directory swapped for a symlink
//! later can redirect a read.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use super::worker::leaf_name;
use crate::beneath::Root;
use crate::error::{Error, Op, Refusal, Result};
use crate::plan::Plan;
use crate::sys::{self, posix::Stat, posix::at};

/// Where the source is: `leaf` in the open directory `dir`.
pub(crate) struct Source {
    /// The directory holding the source, or the source itself when its
    /// path names a directory by no name of its own (`/`, `dir/.`).
    pub(crate) dir: Arc<OwnedFd>,
    /// The source's name in `dir`; `.` for `dir` itself.
    pub(crate) leaf: CString,
}

impl Source {
    /// Resolves the plan's source. Beneath
    /// [`source_within`](Plan::source_within)'s root, its directories
    /// are opened from the root's descriptor following no symlink;
    /// otherwise the path is the caller's own and its directory is
    /// opened as given (symlinks in it followed, as `cp` does).
    pub(crate) fn resolve(plan: &Plan) -> Result<Source> {
        match &plan.source_within {
            Some(root) => Source::beneath(&plan.src, &root.open()?),
            None => Source::by_path(&plan.src),
        }
    }

    fn beneath(src: &Path, root: &Root) -> Result<Source> {
        let rel = src
            .strip_prefix(root.path())
            .map_err(|_| Error::refused(src, Refusal::NotBeneath))?;
        let parts = crate::beneath::components(rel)
            .ok_or_else(|| Error::refused(src, Refusal::NotBeneath))?;
        let Some(leaf) = parts.last() else {
            // The root itself.
            return Ok(Source {
                dir: Arc::clone(root.fd()),
                leaf: c".".to_owned(),
            });
        };
        let parent = root.dir(rel.parent().unwrap_or(Path::new("")), None)?;
        Ok(Source {
            dir: parent.fd,
            leaf: leaf.clone(),
        })
    }

    fn by_path(src: &Path) -> Result<Source> {
        // Failing to reach the source's directory is failing to find
        // the source: said of the source, as its lstat would.
        let open = |dir: &Path| {
            sys::open_dir_search(dir)
                .map(Arc::new)
                .map_err(|e| Error::io(Op::Stat, src, e))
        };
        let name = src.file_name().filter(|_| !names_a_directory(src));
        let Some(name) = name else {
            return Ok(Source {
                dir: open(src)?,
                leaf: c".".to_owned(),
            });
        };
        let parent = match src.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        Ok(Source {
            dir: open(parent)?,
            leaf: leaf_name(name)?,
        })
    }

    /// The source's `lstat`: what it is, not what a symlink there
    /// points to.
    pub(crate) fn stat(&self, shown: &Path) -> Result<Stat> {
        at::stat(self.dir.as_raw_fd(), &self.leaf)
            .map_err(|e| Error::io(Op::Stat, shown, e))
    }

    /// The source directory, opened without following a symlink there:
    /// a source that stopped being a directory changed type.
    pub(crate) fn open_dir(&self, shown: &Path) -> Result<OwnedFd> {
        at::open_dir(self.dir.as_raw_fd(), &self.leaf).map_err(|e| {
            match e.raw_os_error() {
                Some(libc::ELOOP | libc::ENOTDIR) => {
                    Error::refused(shown, Refusal::ChangedType)
                }
                _ => Error::io(Op::ReadDir, shown, e),
            }
        })
    }
}

/// True if `path` ends in `/` or `/.`: as the kernel reads it, it names
/// the directory there (a symlink there followed), not an entry to copy
/// as whatever it is. `Path::file_name` drops both endings.
fn names_a_directory(path: &Path) -> bool {
    let b = path.as_os_str().as_bytes();
    b.ends_with(b"/") || b.ends_with(b"/.") || b == b"."
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn paths_that_name_a_directory_by_no_name_of_its_own() {
        for p in ["/", ".", "..", "a/", "a/.", "a/..", "/a//", "a/./"] {
            let named = Path::new(p).file_name().is_some()
                && !names_a_directory(Path::new(p));
            assert!(!named, "{p}");
        }
        for p in ["a", "a/b", "./a", "../a", "/a/b"] {
            assert!(!names_a_directory(Path::new(p)), "{p}");
        }
    }
}
