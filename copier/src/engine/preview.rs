//! A dry run ([`Plan::dry_run`](crate::Plan::dry_run)): the copy's walk
//! and decisions with every write left out. The source is walked as the
//! walker walks it (same rules, same mount-point rule) and the
//! destination is only read: by path, which is safe because nothing is
//! written through what is found.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::{Shared, identity, walk};
use crate::error::{Error, Op, Refusal, Result};
use crate::plan::EntryKind;
use crate::rules::{self, Action};
use crate::stats::Stats;

/// Walks the source, counting into `stats` what the copy would do;
/// errors go to `shared` as the copy's would.
pub(crate) fn run(
    shared: &Shared<'_>,
    src_md: &fs::Metadata,
    stats: &mut Stats,
) {
    let r = if src_md.is_dir() {
        tree(shared, stats)
    } else {
        single(shared, src_md, stats)
    };
    if let Err(e) = r {
        shared.fail(e);
    }
}

/// What is at `path` in the destination, if anything.
fn existing(path: &Path) -> Result<Option<fs::Metadata>> {
    match fs::symlink_metadata(path) {
        Ok(md) => Ok(Some(md)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(Op::Stat, path, e)),
    }
}

fn tree(shared: &Shared<'_>, stats: &mut Stats) -> Result<()> {
    let plan = shared.plan;
    walk::check_destination(plan)?;
    if let Some(md) = existing(&plan.dst)? {
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
    let mut top_dev = None;
    let mut seen_inodes = HashSet::new();
    let mut scratch = Vec::new();
    let mut it = walk::source_walk(plan);
    while !shared.stopped() {
        let entry = match it.next() {
            None => break,
            Some(Ok(e)) => e,
            Some(Err(e)) => {
                shared.entry_failed(Error::walk(Op::ReadDir, &plan.src, e));
                continue;
            }
        };
        let depth = entry.depth();
        let (rel, dst) = walk::destination_of(plan, &entry);
        let (action, rule_path) = walk::rule_for(plan, rel, &mut scratch);
        let ft = entry.file_type();
        if depth > 0 && action == Action::Skip {
            stats.skipped += 1;
            if ft.is_dir() {
                it.skip_current_dir();
            }
            continue;
        }
        let md = match entry.metadata() {
            Ok(md) => md,
            Err(e) => {
                shared.entry_failed(Error::walk(Op::Stat, entry.path(), e));
                if ft.is_dir() {
                    it.skip_current_dir();
                }
                continue;
            }
        };
        if ft.is_dir() {
            match top_dev {
                None => top_dev = Some(md.dev()),
                Some(dev) => {
                    walk::note_mount_point(shared, entry.path(), &md, dev);
                }
            }
        }
        let kind = if ft.is_dir() {
            EntryKind::Dir
        } else if ft.is_file() {
            if rules::link_target(&action, &rule_path).is_some() {
                EntryKind::Redirect
            } else if md.nlink() > 1 && !seen_inodes.insert(identity(&md)) {
                EntryKind::HardLink
            } else {
                EntryKind::File
            }
        } else if ft.is_symlink() {
            EntryKind::Symlink
        } else {
            EntryKind::Special
        };
        if depth > 0 && plan.merge {
            let there = match existing(&dst) {
                Ok(t) => t,
                Err(e) => {
                    shared.entry_failed(e);
                    continue;
                }
            };
            if let Some(there) = &there
                && there.is_dir() != (kind == EntryKind::Dir)
            {
                shared.entry_failed(Error::refused(&dst, Refusal::Conflict));
                if ft.is_dir() {
                    it.skip_current_dir();
                }
                continue;
            }
            if kind == EntryKind::File
                && there.is_some_and(|t| unchanged(&md, &t))
            {
                stats.unchanged += 1;
                continue;
            }
        }
        count(shared, stats, entry.path(), &dst, kind, &md);
    }
    Ok(())
}

fn single(
    shared: &Shared<'_>,
    md: &fs::Metadata,
    stats: &mut Stats,
) -> Result<()> {
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
    let there = existing(&dst)?;
    if there.is_some() && !plan.merge {
        return Err(Error::refused(&dst, Refusal::Exists));
    }
    let ft = md.file_type();
    let kind = if ft.is_file() {
        EntryKind::File
    } else if ft.is_symlink() {
        EntryKind::Symlink
    } else {
        EntryKind::Special
    };
    if kind == EntryKind::File && there.is_some_and(|t| unchanged(md, &t)) {
        stats.unchanged += 1;
        return Ok(());
    }
    count(shared, stats, &plan.src, &dst, kind, md);
    Ok(())
}

/// The copy's test for a file it may leave alone when merging.
fn unchanged(src: &fs::Metadata, dst: &fs::Metadata) -> bool {
    dst.is_file()
        && dst.len() == src.len()
        && (dst.mtime(), dst.mtime_nsec()) == (src.mtime(), src.mtime_nsec())
}

fn count(
    shared: &Shared<'_>,
    stats: &mut Stats,
    src: &Path,
    dst: &Path,
    kind: EntryKind,
    md: &fs::Metadata,
) {
    match kind {
        EntryKind::Dir => stats.dirs += 1,
        EntryKind::File => {
            stats.files += 1;
            stats.bytes += md.len();
        }
        EntryKind::HardLink => stats.hardlinks += 1,
        EntryKind::Symlink => stats.symlinks += 1,
        EntryKind::Special => stats.specials += 1,
        EntryKind::Redirect => stats.redirects += 1,
    }
    if let Some(p) = &shared.plan.progress {
        p.advance(1, if kind == EntryKind::File { md.len() } else { 0 });
    }
    if let Some(l) = &shared.plan.listener {
        l.entry(src, dst, kind);
    }
}
