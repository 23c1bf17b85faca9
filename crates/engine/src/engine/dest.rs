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
use super::writes::{DstDir, Writes};
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
/// and resolved as given. Without merging it must be empty. Recording,
/// nothing is made: a top that is not there, or that the plan takes as
/// empty, is [`DstDir::Unmade`].
pub(crate) fn open_top(plan: &Plan, writes: Writes) -> Result<DstDir> {
    if writes == Writes::Record && plan.dry_run_empty {
        return Ok(DstDir::Unmade);
    }
    let fd: OwnedFd = match &plan.within {
        Some(root) => {
            let rel = plan
                .dst
                .strip_prefix(root.path())
                .map_err(|_| Error::refused(&plan.dst, Refusal::NotBeneath))?;
            let Some(r) = missing_as_none(root.open(), writes)? else {
                return Ok(DstDir::Unmade);
            };
            match rel.file_name() {
                None => r
                    .fd()
                    .try_clone()
                    .map_err(|e| Error::io(Op::Open, root.path(), e))?,
                Some(leaf) => {
                    let Some(parent) = made_dir(
                        &r,
                        rel.parent().unwrap_or(Path::new("")),
                        writes,
                    )?
                    else {
                        return Ok(DstDir::Unmade);
                    };
                    let leaf = leaf_name(leaf)?;
                    match writes.mkdir(Some(parent.fd.as_raw_fd()), &leaf) {
                        Ok(()) if writes == Writes::Record => {
                            return Ok(DstDir::Unmade);
                        }
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
            if !make_root(&plan.dst, writes)? {
                return Ok(DstDir::Unmade);
            }
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
    Ok(DstDir::Open(fd))
}

/// The directory `rel` beneath the root `r`, made (mode 0755) if
/// missing; recording, `None` if it is missing.
fn made_dir(
    r: &Root,
    rel: &Path,
    writes: Writes,
) -> Result<Option<beneath::Dir>> {
    let create = (writes == Writes::Make).then_some(0o755);
    missing_as_none(r.dir(rel, create), writes)
}

/// What was opened; recording, `None` for what is missing: the caller
/// (an install making its root) or the copy would make it first.
fn missing_as_none<T>(opened: Result<T>, writes: Writes) -> Result<Option<T>> {
    match opened {
        Ok(d) => Ok(Some(d)),
        Err(e)
            if writes == Writes::Record
                && e.raw_os_error() == Some(libc::ENOENT) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The top destination directory: created with its parents if missing;
/// an existing one was checked by `check_destination`. Whether it is
/// there: recording, a missing one is not made.
// The caller's destination, named by the caller: followed as named.
#[allow(clippy::disallowed_methods)]
fn make_root(dst: &Path, writes: Writes) -> Result<bool> {
    if fs::metadata(dst).is_ok() {
        return Ok(true);
    }
    if writes == Writes::Record {
        // What the copy's mkdir would meet: a dangling symlink, say.
        if fs::symlink_metadata(dst).is_ok() {
            let e = io::Error::from_raw_os_error(libc::EEXIST);
            return Err(Error::io(Op::Mkdir, dst, e));
        }
        return Ok(false);
    }
    if let Some(parent) = dst.parent()
        && !parent.as_os_str().is_empty()
    {
        fs::create_dir_all(parent)
            .map_err(|e| Error::io(Op::Mkdir, parent, e))?;
    }
    posix::mkdir(dst, 0o700).map_err(|e| Error::io(Op::Mkdir, dst, e))?;
    Ok(true)
}

/// A directory inside the copy, made in its parent's descriptor and
/// opened without following a symlink. 0700 until its contents are done,
/// so its owner can fill it whatever its final mode. Merging, a directory
/// already there is used; a symlink there is never followed. Recording,
/// a directory the copy would make (or make again, in a layer's place
/// of something else) is [`DstDir::Unmade`], and so is every directory
/// in one.
pub(crate) fn make_dir(
    shared: &Shared<'_>,
    parent: &DstDir,
    leaf: &std::ffi::CStr,
    dst: &Path,
    merge: bool,
    layered: bool,
) -> Result<DstDir> {
    let writes = shared.writes;
    let made = match writes.mkdir(parent.raw(), leaf) {
        Ok(()) => true,
        Err(e) if merge && e.kind() == io::ErrorKind::AlreadyExists => {
            // A layer's directory replaces a lower layer's file or
            // symlink there (the symlink removed, never followed).
            let replaced = layered
                && parent
                    .lstat(leaf)
                    .map_err(|e| Error::io(Op::Stat, dst, e))?
                    .is_some_and(|st| {
                        st.st_mode & libc::S_IFMT != libc::S_IFDIR
                    });
            if replaced && let Some(p) = writes.dir_fd(parent) {
                beneath::remove_at(p, leaf, dst)?;
                at::mkdir(p, leaf, 0o700)
                    .map_err(|e| Error::io(Op::Mkdir, dst, e))?;
            }
            replaced
        }
        Err(e) => return Err(Error::io(Op::Mkdir, dst, e)),
    };
    let Some(parent) = parent.raw() else {
        return Ok(DstDir::Unmade);
    };
    if made && writes == Writes::Record {
        return Ok(DstDir::Unmade);
    }
    let full = |f: &beneath::StepFail| matches!(f, beneath::StepFail::Io(_, e) if descriptors::exhausted(e));
    let step = || beneath::step(parent, leaf, None);
    let fd = shared.fds.retrying(step, full).map_err(|f| match f {
        beneath::StepFail::Met(crate::error::Met::NotADirectory) => {
            Error::refused(dst, Refusal::Conflict)
        }
        f => step_error(f, dst),
    })?;
    Ok(DstDir::Open(fd))
}

/// The directory, name and shown path a single source is copied to.
/// Recording, a directory the copy would make is [`DstDir::Unmade`].
// The caller's destination, named by the caller: followed as named.
#[allow(clippy::disallowed_methods)]
pub(crate) fn single_destination(
    plan: &Plan,
    writes: Writes,
) -> Result<(DstDir, CString, PathBuf), Error> {
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
            let Some(r) = missing_as_none(root.open(), writes)? else {
                // The root itself would be made: into it, or as its
                // file.
                return match rel.file_name() {
                    None => {
                        let name = src_name()?;
                        let leaf = leaf_name(name)?;
                        Ok((DstDir::Unmade, leaf, plan.dst.join(name)))
                    }
                    Some(leaf) => {
                        let leaf = leaf_name(leaf)?;
                        Ok((DstDir::Unmade, leaf, plan.dst.clone()))
                    }
                };
            };
            // Into the root itself, or into a directory that is there.
            let into_dir = match rel.file_name() {
                None => Some(r.top()),
                Some(_) => r.dir(rel, None).ok(),
            };
            if let Some(d) = into_dir {
                let name = src_name()?;
                let dir = owned(d.fd, &plan.dst)?;
                return Ok((dir, leaf_name(name)?, plan.dst.join(name)));
            }
            let parent =
                made_dir(&r, rel.parent().unwrap_or(Path::new("")), writes)
                    .map_err(|e| match e {
                        // Name the file that was to be written.
                        Error::Beneath { at, met, .. } => Error::Beneath {
                            path: plan.dst.clone(),
                            at,
                            met,
                        },
                        e => e,
                    })?;
            let dir = match parent {
                Some(p) => owned(p.fd, &plan.dst)?,
                None => DstDir::Unmade,
            };
            let leaf = rel.file_name().unwrap_or_default();
            Ok((dir, leaf_name(leaf)?, plan.dst.clone()))
        }
        None => {
            if fs::metadata(&plan.dst).is_ok_and(|m| m.is_dir()) {
                let name = src_name()?;
                let r = Root::open(&plan.dst)
                    .or_else(|_| open_followed(&plan.dst))?;
                let fd = Arc::clone(r.fd());
                drop(r);
                return Ok((
                    owned(fd, &plan.dst)?,
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
            let fd = Arc::clone(open_followed(parent)?.fd());
            let dir = owned(fd, parent)?;
            Ok((dir, leaf_name(leaf)?, plan.dst.clone()))
        }
    }
}

/// A directory opened for the run, as its own descriptor: the one
/// given, or a duplicate while a [`Root`] still shares it.
fn owned(fd: Arc<OwnedFd>, shown: &Path) -> Result<DstDir> {
    let fd = Arc::try_unwrap(fd).or_else(|fd| {
        fd.try_clone().map_err(|e| Error::io(Op::Open, shown, e))
    })?;
    Ok(DstDir::Open(fd))
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
