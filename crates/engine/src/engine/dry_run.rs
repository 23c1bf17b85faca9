//! A dry run ([`Plan::dry_run`](crate::Plan::dry_run)): the copy's walk
//! and decisions with every write left out. The source is walked by the
//! same walkers as a copy (same rules, same mount-point rule), through
//! the same resolved source directory, and they count each entry here
//! instead of making it, placed by the copy's own rule
//! ([`placing::decide`]); the destination is only read: by path, which
//! is safe because nothing is written through what is found.

use std::collections::HashMap;
use std::ffi::CStr;
use std::fs;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::dest::check_destination;
use super::placing::{self, Decision, Merging};
use super::shared::Shared;
use super::source::Source;
use super::visit::{DryRunVisit, Mode};
use super::walk;
use crate::error::{Error, Op, Refusal, Result};
use crate::stats::Stats;
use crate::sys::posix::{self, Stat, at};
use crate::{EntryKind, Plan};

/// Walks the source, counting into `stats` what the copy would do;
/// errors go to `shared` as the copy's would. Returns the walkers'
/// results for a directory source.
pub(crate) fn run(
    shared: &Shared<'_>,
    source: &Source,
    src_md: &Stat,
    stats: &mut Stats,
) -> Option<walk::WalkResult> {
    let r = if src_md.is_dir() {
        tree(shared, source).map(Some)
    } else {
        single(shared, src_md, stats).map(|()| None)
    };
    r.unwrap_or_else(|e| {
        shared.fail(e);
        None
    })
}

/// What is at `path` in the destination, if anything (nothing, when the
/// plan says to take the destination as empty).
fn existing(plan: &Plan, path: &Path) -> Result<Option<fs::Metadata>> {
    if plan.dry_run_empty {
        return Ok(None);
    }
    match fs::symlink_metadata(path) {
        Ok(md) => Ok(Some(md)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(Op::Stat, path, e)),
    }
}

/// What is at `path` in the destination, as the copy's workers look at
/// it (never followed; nothing when the plan takes the destination as
/// empty).
fn look(plan: &Plan, path: &Path) -> io::Result<Option<libc::stat>> {
    if plan.dry_run_empty {
        return Ok(None);
    }
    at::lstat(libc::AT_FDCWD, &posix::cstr(path)?)
}

/// Where the copy would place an entry of `kind` for `dst`, its source
/// `md` (a symlink's target read by `target`; a later name's first name
/// at `first`), decided by the copy's rule.
fn decision(
    plan: &Plan,
    dst: &Path,
    kind: EntryKind,
    md: &Stat,
    target: impl FnOnce() -> io::Result<Vec<u8>>,
    first: Option<&Path>,
) -> Result<Decision> {
    let same = |st: &libc::stat| match kind {
        EntryKind::File => placing::same_file(st, md.size, md.times.mtime),
        EntryKind::Special => {
            placing::same_special(st, md.mode & !0o7777, md.rdev)
        }
        EntryKind::Symlink => target().is_ok_and(|t| {
            let read = || {
                fs::read_link(dst).map(|l| l.as_os_str().as_bytes().to_vec())
            };
            placing::same_symlink(st, read, &t)
        }),
        EntryKind::HardLink => first.is_some_and(|f| {
            look(plan, f)
                .ok()
                .flatten()
                .is_some_and(|f| (f.st_dev, f.st_ino) == (st.st_dev, st.st_ino))
        }),
        EntryKind::Dir | EntryKind::Redirect => false,
    };
    placing::decide(Merging::of(plan), dst, || look(plan, dst), same)
}

/// The copy's refusals about the top destination, then the walk of the
/// source through its resolved directory.
// The caller's destination, named by the caller: followed as named.
#[allow(clippy::disallowed_methods)]
fn tree(shared: &Shared<'_>, source: &Source) -> Result<walk::WalkResult> {
    let plan = shared.plan;
    let top = source.open_dir(&plan.src)?;
    check_destination(plan, &top)?;
    if let Some(md) = existing(plan, &plan.dst)? {
        // The copy opens the top directory following a symlink, as the
        // caller named it.
        let md = fs::metadata(&plan.dst)
            .map_err(|e| Error::io(Op::Stat, &plan.dst, e))
            .unwrap_or(md);
        if !md.is_dir() {
            return Err(Error::refused(&plan.dst, Refusal::Conflict));
        }
        if !plan.merge {
            let mut names = fs::read_dir(&plan.dst)
                .map_err(|e| Error::io(Op::ReadDir, &plan.dst, e))?;
            if names.next().is_some() {
                return Err(Error::refused(&plan.dst, Refusal::NotEmpty));
            }
        }
    }
    let dry = DryRun {
        shared,
        seen: Mutex::new(HashMap::new()),
    };
    Ok(walk::run(
        shared,
        Mode::DryRun(&dry),
        None,
        (top, None),
        plan.tunables.walkers(),
    ))
}

/// What the walkers call in a dry run: the run's state, and the inodes
/// with several names already counted, each with where its first name
/// goes.
struct DryRun<'s, 'p> {
    shared: &'s Shared<'p>,
    seen: Mutex<HashMap<(u64, u64), PathBuf>>,
}

impl DryRunVisit for DryRun<'_, '_> {
    fn dir(
        &self,
        stats: &mut Stats,
        src: &Path,
        dst: &Path,
        md: &Stat,
        top: bool,
    ) -> Result<()> {
        dir(self.shared, stats, src, dst, md, top)
    }

    fn entry(
        &self,
        stats: &mut Stats,
        at: (RawFd, &CStr),
        src: &Path,
        dst: &Path,
        redirect: bool,
    ) -> Result<()> {
        entry(self.shared, stats, &self.seen, at, src, dst, redirect)
    }
}

/// A directory a walker is about to read: merging, what is in its place
/// at the destination must be a directory (the top was checked).
fn dir(
    shared: &Shared<'_>,
    stats: &mut Stats,
    src: &Path,
    dst: &Path,
    md: &Stat,
    top: bool,
) -> Result<()> {
    if !top
        && shared.plan.merge
        && let Some(there) = existing(shared.plan, dst)?
        && !there.is_dir()
    {
        return Err(Error::refused(dst, Refusal::Conflict));
    }
    count(shared, stats, src, dst, EntryKind::Dir, md);
    Ok(())
}

/// Anything but a directory, named `at` in its open source directory.
fn entry(
    shared: &Shared<'_>,
    stats: &mut Stats,
    seen: &Mutex<HashMap<(u64, u64), PathBuf>>,
    at: (RawFd, &CStr),
    src: &Path,
    dst: &Path,
    redirect: bool,
) -> Result<()> {
    let md = at::stat(at.0, at.1).map_err(|e| Error::io(Op::Stat, src, e))?;
    let kind = match md.kind() as libc::mode_t {
        libc::S_IFDIR => return Err(Error::refused(src, Refusal::ChangedType)),
        libc::S_IFREG if redirect => EntryKind::Redirect,
        libc::S_IFREG => EntryKind::File,
        libc::S_IFLNK => EntryKind::Symlink,
        _ => EntryKind::Special,
    };
    // A later name of anything the copy links rather than makes again
    // (files, symlinks, special files alike).
    let first = if kind != EntryKind::Redirect && md.nlink > 1 {
        let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        match seen.get(&md.identity()) {
            Some(first) => Some(first.clone()),
            None => {
                seen.insert(md.identity(), dst.to_path_buf());
                None
            }
        }
    } else {
        None
    };
    let kind = if first.is_some() {
        EntryKind::HardLink
    } else {
        kind
    };
    let target = || at::readlink(at.0, at.1);
    match decision(shared.plan, dst, kind, &md, target, first.as_deref())? {
        // The copy counts a symlink it leaves alone as a symlink.
        Decision::Unchanged if kind != EntryKind::Symlink => {
            stats.unchanged += 1;
        }
        _ => count(shared, stats, src, dst, kind, &md),
    }
    Ok(())
}

/// A single source, its `lstat` taken through its resolved directory.
// The caller's destination, named by the caller: followed as named.
#[allow(clippy::disallowed_methods)]
fn single(shared: &Shared<'_>, md: &Stat, stats: &mut Stats) -> Result<()> {
    let plan = shared.plan;
    let dst = match fs::metadata(&plan.dst) {
        Ok(d) if d.is_dir() => {
            let name = plan
                .src
                .file_name()
                .ok_or_else(|| Error::refused(&plan.src, Refusal::BadSource))?;
            plan.dst.join(name)
        }
        _ => plan.dst.clone(),
    };
    let there = existing(plan, &dst)?;
    if there.is_some() && !plan.merge {
        return Err(Error::refused(&dst, Refusal::Exists));
    }
    let kind = match md.kind() as libc::mode_t {
        libc::S_IFREG => EntryKind::File,
        libc::S_IFLNK => EntryKind::Symlink,
        _ => EntryKind::Special,
    };
    let target =
        || fs::read_link(&plan.src).map(|l| l.as_os_str().as_bytes().to_vec());
    match decision(plan, &dst, kind, md, target, None)? {
        Decision::Unchanged if kind != EntryKind::Symlink => {
            stats.unchanged += 1;
        }
        _ => count(shared, stats, &plan.src, &dst, kind, md),
    }
    Ok(())
}

fn count(
    shared: &Shared<'_>,
    stats: &mut Stats,
    src: &Path,
    dst: &Path,
    kind: EntryKind,
    md: &Stat,
) {
    let bytes = if kind == EntryKind::File { md.size } else { 0 };
    match kind {
        EntryKind::Dir => stats.dirs += 1,
        EntryKind::File => {
            stats.files += 1;
            stats.bytes += md.size;
        }
        EntryKind::HardLink => stats.hardlinks += 1,
        EntryKind::Symlink => stats.symlinks += 1,
        EntryKind::Special => stats.specials += 1,
        EntryKind::Redirect => stats.redirects += 1,
    }
    if let Some(p) = &shared.plan.progress {
        p.advance(1, bytes);
    }
    if let Some(l) = &shared.plan.listener {
        l.entry(src, dst, kind);
    }
}
