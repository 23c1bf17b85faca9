//! Resolution: a path taken apart into plain names and its directories
//! opened beneath a descriptor, with `openat2` at once where the kernel
//! can, else one `O_NOFOLLOW` component at a time; a symlink or a
//! non-directory met is told apart from other failures and named.

use std::ffi::{CStr, CString};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path};
use std::sync::Arc;

use crate::error::{Error, Met, Op, Result};
use crate::sys::{self, posix::at};

/// Why a walk beneath a root stopped.
#[derive(Debug)]
pub(crate) enum WalkFail {
    /// Component `index` is a symlink or not a directory.
    Met(usize, Met),
    /// A system call on component `index` failed.
    Io(usize, Op, io::Error),
}

impl WalkFail {
    /// The public error: the path wanted, and what was met where.
    pub(crate) fn into_error(
        self,
        root: &Path,
        parts: &[CString],
        wanted: &Path,
    ) -> Error {
        let upto = |i: usize| {
            let mut p = root.to_path_buf();
            for c in &parts[..=i.min(parts.len().saturating_sub(1))] {
                p.push(std::ffi::OsStr::from_bytes(c.as_bytes()));
            }
            p
        };
        match self {
            WalkFail::Met(i, met) => Error::Beneath {
                path: wanted.to_path_buf(),
                at: upto(i),
                met,
            },
            WalkFail::Io(i, op, e) => Error::io(op, upto(i), e),
        }
    }
}

/// Splits a relative path into checked components; `None` if it is
/// absolute or has `..` (nothing the caller builds needs either).
pub(crate) fn components(rel: &Path) -> Option<Vec<CString>> {
    let mut v = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => v.push(CString::new(n.as_bytes()).ok()?),
            Component::CurDir => {}
            _ => return None,
        }
    }
    Some(v)
}

/// The directory `parts` beneath `top`: `openat2` for the whole path when
/// nothing needs making, else (or when the kernel has none) one component
/// at a time.
pub(crate) fn open_parts(
    top: &Arc<OwnedFd>,
    parts: &[CString],
    create: Option<u32>,
) -> std::result::Result<Arc<OwnedFd>, WalkFail> {
    if parts.is_empty() {
        return Ok(Arc::clone(top));
    }
    let joined = zinstall_archive::names::Name::joined(parts);
    // Beyond PATH_MAX the kernel refuses the whole path; components
    // have no such limit.
    if joined.as_bytes().len() < 4000 {
        // Missing, a symlink, a file: the walk below makes what is
        // missing or says exactly which component is in the way.
        if let Ok(Some(fd)) = sys::open_dir_beneath(top.as_raw_fd(), &joined) {
            return Ok(Arc::new(fd));
        }
    }
    let mut cur = Arc::clone(top);
    for (i, c) in parts.iter().enumerate() {
        cur = Arc::new(step(cur.as_raw_fd(), c, create).map_err(
            |f| match f {
                StepFail::Met(m) => WalkFail::Met(i, m),
                StepFail::Io(op, e) => WalkFail::Io(i, op, e),
            },
        )?);
    }
    Ok(cur)
}

/// Why one step failed.
#[derive(Debug)]
pub(crate) enum StepFail {
    Met(Met),
    Io(Op, io::Error),
}

/// Opens the directory `name` in `dir` without following a symlink; with
/// `create`, makes it first if it is missing.
pub(crate) fn step(
    dir: RawFd,
    name: &CStr,
    create: Option<u32>,
) -> std::result::Result<OwnedFd, StepFail> {
    match at::open_dir(dir, name) {
        Ok(fd) => Ok(fd),
        Err(e)
            if e.raw_os_error() == Some(libc::ENOENT) && create.is_some() =>
        {
            let mode = create.unwrap_or(0o755);
            match at::mkdir(dir, name, mode) {
                Ok(()) => {}
                // Made by someone else meanwhile: open what is there.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(StepFail::Io(Op::Mkdir, e)),
            }
            at::open_dir(dir, name).map_err(|e| classify(dir, name, e))
        }
        Err(e) => Err(classify(dir, name, e)),
    }
}

/// Tells a symlink or a non-directory in the way from other failures.
fn classify(dir: RawFd, name: &CStr, e: io::Error) -> StepFail {
    if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) {
        match at::lstat(dir, name) {
            Ok(Some(st)) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => {
                return StepFail::Met(Met::Symlink);
            }
            Ok(Some(st)) if st.st_mode & libc::S_IFMT != libc::S_IFDIR => {
                return StepFail::Met(Met::NotADirectory);
            }
            _ => {}
        }
    }
    StepFail::Io(Op::Open, e)
}

/// Opens a directory by path, its last component not followed.
// O_DIRECTORY | O_NOFOLLOW: only a directory opens; nothing is read.
#[allow(clippy::disallowed_methods)]
pub(super) fn open_dir_nofollow(path: &Path) -> Result<OwnedFd> {
    match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => Ok(f.into()),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ELOOP | libc::ENOTDIR)
            ) =>
        {
            let met = match std::fs::symlink_metadata(path) {
                Ok(m) if m.file_type().is_symlink() => Met::Symlink,
                Ok(m) if !m.is_dir() => Met::NotADirectory,
                _ => return Err(Error::io(Op::Open, path, e)),
            };
            Err(Error::Beneath {
                path: path.to_path_buf(),
                at: path.to_path_buf(),
                met,
            })
        }
        Err(e) => Err(Error::io(Op::Open, path, e)),
    }
}

/// Opens a regular file beneath nothing but its own last component: the
/// lock and state files of a zonepath, which must never be symlinks.
// The zonepath's own files, never followed, with the caller's options.
#[allow(clippy::disallowed_methods)]
pub fn open_file_nofollow(path: &Path, opts: &mut OpenOptions) -> Result<File> {
    opts.custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                Error::Beneath {
                    path: path.to_path_buf(),
                    at: path.to_path_buf(),
                    met: Met::Symlink,
                }
            } else {
                Error::io(Op::Open, path, e)
            }
        })
}
