//! The destination side of a run: refusing a destination inside the
//! source, making and opening the top directory (or a single file's
//! directory), each directory inside the copy, and the final sync.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::opening::{identity, step_error};
use super::shared::Shared;
use super::worker::leaf_name;
use crate::beneath::{self, Root};
use crate::descriptors;
use crate::error::{Error, Op, Refusal, Result};
use crate::plan::Plan;
use crate::sys::{
    self,
    posix::{self, Stat, at},
};

/// Refuses a destination the copy must not go to: inside the source
/// directory open as `src` (the walk would copy its own output).
// The caller's destination, named by the caller: followed as named.
#[allow(clippy::disallowed_methods)]
pub(crate) fn check_destination(plan: &Plan, src: &OwnedFd) -> Result<()> {
    let src_id = at::fstat(src)
        .map(|st| Stat::of(&st).identity())
        .map_err(|e| Error::io(Op::Stat, &plan.src, e))?;
    // Identity by (dev, ino), never by comparing path strings: the same
    // directory has many spellings.
    let mut probe = plan.dst.clone();
    while fs::symlink_metadata(&probe).is_err() {
        if !probe.pop() {
            break;
        }
    }
    if probe.as_os_str().is_empty() {
        probe = PathBuf::from(".");
    }
    if let Ok(real) = fs::canonicalize(&probe) {
        for a in real.ancestors() {
            if fs::metadata(a).is_ok_and(|m| identity(&m) == src_id) {
                return Err(Error::refused(
                    &plan.dst,
                    Refusal::DestinationInsideSource,
                ));
            }
        }
    }
    Ok(())
}

/// Makes (if missing) and opens the top destination directory. Inside a
/// root ([`crate::Plan::within`]) every directory down to it is opened
/// beneath the root, none followed; otherwise its path is the caller's
/// and resolved as given. Without merging it must be empty.
pub(crate) fn open_top(plan: &Plan) -> Result<OwnedFd> {
    let fd: OwnedFd = match &plan.within {
        Some(root) => {
            let rel = plan
                .dst
                .strip_prefix(root.path())
                .map_err(|_| Error::refused(&plan.dst, Refusal::NotBeneath))?;
            let r = root.open()?;
            match rel.file_name() {
                None => r
                    .fd()
                    .try_clone()
                    .map_err(|e| Error::io(Op::Open, root.path(), e))?,
                Some(leaf) => {
                    let parent = r.dir(
                        rel.parent().unwrap_or(Path::new("")),
                        Some(0o755),
                    )?;
                    let leaf = leaf_name(leaf)?;
                    match at::mkdir(parent.fd.as_raw_fd(), &leaf, 0o700) {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                        Err(e) => {
                            return Err(Error::io(Op::Mkdir, &plan.dst, e));
                        }
                    }
                    beneath::step(parent.fd.as_raw_fd(), &leaf, None)
                        .map_err(|f| step_error(f, &plan.dst))?
                }
            }
        }
        None => {
            make_root(&plan.dst)?;
            let top = open_followed(&plan.dst)?;
            top.fd()
                .try_clone()
                .map_err(|e| Error::io(Op::Open, &plan.dst, e))?
        }
    };
    if !plan.merge {
        let names = at::read_names(&fd)
            .map_err(|e| Error::io(Op::ReadDir, &plan.dst, e))?;
        if !names.is_empty() {
            return Err(Error::refused(&plan.dst, Refusal::NotEmpty));
        }
    }
    Ok(fd)
}

/// The top destination directory: created with its parents if missing;
/// an existing one was checked by `check_destination`.
// The caller's destination, named by the caller: followed as named.
#[allow(clippy::disallowed_methods)]
fn make_root(dst: &Path) -> Result<()> {
    if fs::metadata(dst).is_ok() {
        return Ok(());
    }
    if let Some(parent) = dst.parent()
        && !parent.as_os_str().is_empty()
    {
        fs::create_dir_all(parent)
            .map_err(|e| Error::io(Op::Mkdir, parent, e))?;
    }
    posix::mkdir(dst, 0o700).map_err(|e| Error::io(Op::Mkdir, dst, e))
}

/// A directory inside the copy, made in its parent's descriptor and
/// opened without following a symlink. 0700 until its contents are done,
/// so its owner can fill it whatever its final mode. Merging, a directory
/// already there is used; a symlink there is never followed.
pub(crate) fn make_dir(
    shared: &Shared<'_>,
    parent: std::os::fd::RawFd,
    leaf: &std::ffi::CStr,
    dst: &Path,
    merge: bool,
    layered: bool,
) -> Result<OwnedFd> {
    match at::mkdir(parent, leaf, 0o700) {
        Ok(()) => {}
        Err(e) if merge && e.kind() == io::ErrorKind::AlreadyExists => {
            // A layer's directory replaces a lower layer's file or
            // symlink there (the symlink removed, never followed).
            if layered
                && at::lstat(parent, leaf)
                    .map_err(|e| Error::io(Op::Stat, dst, e))?
                    .is_some_and(|st| {
                        st.st_mode & libc::S_IFMT != libc::S_IFDIR
                    })
            {
                beneath::remove_at(parent, leaf, dst)?;
                at::mkdir(parent, leaf, 0o700)
                    .map_err(|e| Error::io(Op::Mkdir, dst, e))?;
            }
        }
        Err(e) => return Err(Error::io(Op::Mkdir, dst, e)),
    }
    let full = |f: &beneath::StepFail| matches!(f, beneath::StepFail::Io(_, e) if descriptors::exhausted(e));
    let step = || beneath::step(parent, leaf, None);
    shared.fds.retrying(step, full).map_err(|f| match f {
        beneath::StepFail::Met(crate::error::Met::NotADirectory) => {
            Error::refused(dst, Refusal::Conflict)
        }
        f => step_error(f, dst),
    })
}

/// The directory, name and shown path a single source is copied to.
// The caller's destination, named by the caller: followed as named.
#[allow(clippy::disallowed_methods)]
pub(crate) fn single_destination(
    plan: &Plan,
) -> Result<(Arc<OwnedFd>, CString, PathBuf), Error> {
    let src_name = || {
        plan.src
            .file_name()
            .ok_or_else(|| Error::refused(&plan.src, Refusal::BadSource))
    };
    match &plan.within {
        Some(root) => {
            let rel = plan
                .dst
                .strip_prefix(root.path())
                .map_err(|_| Error::refused(&plan.dst, Refusal::NotBeneath))?;
            let r = root.open()?;
            // Into the root itself, or into a directory that is there.
            let into_dir = match rel.file_name() {
                None => Some(r.top()),
                Some(_) => r.dir(rel, None).ok(),
            };
            if let Some(d) = into_dir {
                let name = src_name()?;
                return Ok((d.fd, leaf_name(name)?, plan.dst.join(name)));
            }
            let parent = r
                .dir(rel.parent().unwrap_or(Path::new("")), Some(0o755))
                .map_err(|e| match e {
                    // Name the file that was to be written.
                    Error::Beneath { at, met, .. } => Error::Beneath {
                        path: plan.dst.clone(),
                        at,
                        met,
                    },
                    e => e,
                })?;
            let leaf = rel.file_name().unwrap_or_default();
            Ok((parent.fd, leaf_name(leaf)?, plan.dst.clone()))
        }
        None => {
            if fs::metadata(&plan.dst).is_ok_and(|m| m.is_dir()) {
                let name = src_name()?;
                let r = Root::open(&plan.dst)
                    .or_else(|_| open_followed(&plan.dst))?;
                return Ok((
                    r.fd().clone(),
                    leaf_name(name)?,
                    plan.dst.join(name),
                ));
            }
            let parent = match plan.dst.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            let leaf = plan
                .dst
                .file_name()
                .ok_or_else(|| Error::refused(&plan.dst, Refusal::Conflict))?;
            let r = open_followed(parent)?;
            Ok((r.fd().clone(), leaf_name(leaf)?, plan.dst.clone()))
        }
    }
}

/// A caller's directory path, resolved as given (it is theirs); not a
/// directory is a conflict.
// The caller's destination, named by the caller: followed as named.
#[allow(clippy::disallowed_methods)]
pub(crate) fn open_followed(path: &Path) -> Result<Root, Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ENOTDIR) {
                Error::refused(path, Refusal::Conflict)
            } else {
                Error::io(Op::Open, path, e)
            }
        })?;
    Root::from_fd(f.into(), path)
}

// The caller's destination, named by the caller: followed as named.
#[allow(clippy::disallowed_methods)]
pub(crate) fn sync_destination(dst: &Path) -> Result<(), Error> {
    let f = fs::File::open(dst).map_err(|e| Error::io(Op::Sync, dst, e))?;
    sys::sync_fs(&f).map_err(|e| Error::io(Op::Sync, dst, e))
}
