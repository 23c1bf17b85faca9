//! The diff: what the new source makes at each path, compared with the
//! manifest of what the install laid out and with what the zone has
//! now; decides what is added, changed, removed or kept.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};

use super::beneath::parent_of;
use super::error::UpdateError;
use super::report::{Change, Kept, Report};
use crate::manifest::{self, Entry, Manifest};

/// What the new source makes at one path.
#[derive(Debug)]
pub(super) struct Want {
    pub(super) rel: Vec<u8>,
    pub(super) src: PathBuf,
    pub(super) entry: Entry,
    /// Source inode of a file with other names in the tree.
    pub(super) inode: Option<(u64, u64)>,
    pub(super) atime: (i64, i64),
    /// A file that a link rule makes a symlink of (its owner, times and
    /// xattrs are the symlink's own, not the source's).
    pub(super) redirect: bool,
}

/// What is to be done at a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Op {
    Same,
    Add,
    Change,
    /// Of another type: the old entry goes first.
    Replace,
}

/// What the diff decided for each want (by index) and each old entry
/// removed.
pub(super) struct Plan {
    pub(super) ops: Vec<Op>,
    /// Wants left as the zone has them.
    pub(super) kept: HashSet<usize>,
    /// Old entries to remove (paths), deepest first.
    pub(super) remove: Vec<(Vec<u8>, char)>,
}

pub(super) fn shown(rel: &[u8]) -> PathBuf {
    Path::new("/").join(OsStr::from_bytes(rel))
}

/// How the zone's copy of `m` stands.
#[derive(PartialEq, Eq)]
enum Zone {
    AsInstalled,
    Changed,
    Gone,
}

fn zone_state(root: BorrowedFd<'_>, m: &Entry) -> Zone {
    let rel = m.path();
    let Ok((dir, name)) = parent_of(root, &rel, false) else {
        return Zone::Changed;
    };
    let st = match rustix::fs::statat(
        &dir,
        name.as_c_str(),
        AtFlags::SYMLINK_NOFOLLOW,
    ) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Zone::Gone,
        Err(_) => return Zone::Changed,
    };
    let kind = st.st_mode & libc::S_IFMT;
    let same_kind = match m.k {
        'd' => kind == libc::S_IFDIR,
        'f' => kind == libc::S_IFREG,
        'l' => kind == libc::S_IFLNK,
        _ => true,
    };
    if !same_kind {
        return Zone::Changed;
    }
    match m.k {
        'l' => {
            match rustix::fs::readlinkat(&dir, name.as_c_str(), Vec::new()) {
                Ok(t) if Some(t.as_bytes().to_vec()) == m.target() => {
                    Zone::AsInstalled
                }
                _ => Zone::Changed,
            }
        }
        'f' => {
            let now = (st.st_ino, st.st_ctime as i64, st.st_ctime_nsec as i64);
            if m.i == Some(now) && st.st_size as u64 == m.s {
                return Zone::AsInstalled;
            }
            let hashed = rustix::fs::openat(
                &dir,
                name.as_c_str(),
                OFlags::RDONLY
                    | OFlags::NOFOLLOW
                    | OFlags::CLOEXEC
                    | OFlags::NONBLOCK,
                Mode::empty(),
            )
            .map_err(io::Error::from)
            .and_then(|fd| manifest::hash_reader(fs::File::from(fd)));
            match hashed {
                Ok(h) if Some(&h) == m.h.as_ref() => Zone::AsInstalled,
                _ => Zone::Changed,
            }
        }
        _ => Zone::AsInstalled,
    }
}

/// Compares the manifest with the wants; fills the report's lists.
pub(super) fn diff(
    old: &Manifest,
    wants: &[Want],
    trees: &[String],
    root: BorrowedFd<'_>,
    force: bool,
    report: &mut Report,
) -> Result<Plan, UpdateError> {
    let by_path = old.by_path();
    // Hard-link groups: the set of paths of each, old and new.
    let mut old_groups: HashMap<u64, BTreeSet<&[u8]>> = HashMap::new();
    let paths: Vec<_> = old.entries.iter().map(Entry::path).collect();
    for (e, p) in old.entries.iter().zip(&paths) {
        if let Some(n) = e.n {
            old_groups.entry(n).or_default().insert(p.as_ref());
        }
    }
    let mut new_groups: HashMap<(u64, u64), BTreeSet<&[u8]>> = HashMap::new();
    for w in wants {
        if let Some(i) = w.inode {
            new_groups.entry(i).or_default().insert(w.rel.as_slice());
        }
    }
    let members_old = |rel: &[u8], e: &Entry| -> BTreeSet<Vec<u8>> {
        match e.n.and_then(|n| old_groups.get(&n)) {
            Some(s) => s.iter().map(|p| p.to_vec()).collect(),
            None => BTreeSet::from([rel.to_vec()]),
        }
    };
    let members_new = |w: &Want| -> BTreeSet<Vec<u8>> {
        match w.inode.and_then(|i| new_groups.get(&i)) {
            Some(s) if s.len() > 1 => s.iter().map(|p| p.to_vec()).collect(),
            _ => BTreeSet::from([w.rel.clone()]),
        }
    };
    let mut ops = Vec::with_capacity(wants.len());
    let mut whats: Vec<Vec<&'static str>> = Vec::with_capacity(wants.len());
    for w in wants {
        let Some(m) = by_path.get(w.rel.as_slice()) else {
            ops.push(Op::Add);
            whats.push(Vec::new());
            continue;
        };
        let n = &w.entry;
        let mut what = Vec::new();
        if m.k != n.k {
            what.push("type");
        } else {
            if n.k == 'f' && m.s != n.s {
                what.push("content");
            }
            if n.k == 'l' && m.l != n.l {
                what.push("target");
            }
            if m.m != n.m && n.k != 'l' {
                what.push("mode");
            }
            if (m.u, m.g) != (n.u, n.g) && !w.redirect {
                what.push("owner");
            }
            if m.t != n.t && !w.redirect {
                what.push("times");
            }
            if m.x != n.x && !w.redirect {
                what.push("xattrs");
            }
            // Alone before and now (most files): no sets to compare.
            let grouped = m.n.is_some() || w.inode.is_some();
            if n.k == 'f' && grouped && members_old(&w.rel, m) != members_new(w)
            {
                what.push("links");
            }
            if (m.k == 'c' || m.k == 'b') && m.r != n.r {
                what.push("device");
            }
            if m.z && force && what.is_empty() {
                // The zone's edit, kept before: forced, the source's.
                what.push("content");
            }
        }
        ops.push(match what.first() {
            None => Op::Same,
            Some(&"type") => Op::Replace,
            Some(_) => Op::Change,
        });
        whats.push(what);
    }
    // A group with one member written is written whole.
    let mut dirty: HashSet<(u64, u64)> = HashSet::new();
    for (w, op) in wants.iter().zip(&ops) {
        if let (Some(i), Op::Add | Op::Change | Op::Replace) = (w.inode, op) {
            dirty.insert(i);
        }
    }
    for (i, w) in wants.iter().enumerate() {
        if ops[i] == Op::Same && w.inode.is_some_and(|n| dirty.contains(&n)) {
            ops[i] = Op::Change;
            whats[i].push("links");
        }
    }
    // Removals: the old tree entries the source no longer has, and those
    // of another type now.
    let want_paths: HashSet<&[u8]> =
        wants.iter().map(|w| w.rel.as_slice()).collect();
    let mut kept = HashSet::new();
    let mut remove = Vec::new();
    let mut blocked: HashSet<Vec<u8>> = HashSet::new();
    for (m, p) in old.entries.iter().zip(&paths) {
        let ours = m
            .o
            .as_ref()
            .is_some_and(|o| trees.contains(o) || old.header.trees.contains(o));
        if !ours || want_paths.contains(p.as_ref()) {
            continue;
        }
        if m.k != 'd' && !force {
            match zone_state(root, m) {
                Zone::AsInstalled => {}
                Zone::Gone => continue,
                Zone::Changed => {
                    report.kept.push(Kept {
                        path: shown(p),
                        why: "changed in the zone since it was installed; the new source removes it",
                    });
                    blocked.insert(p.to_vec());
                    continue;
                }
            }
        }
        report.removed.push(Change {
            path: shown(p),
            what: Vec::new(),
        });
        remove.push((p.to_vec(), m.k));
    }
    for (i, w) in wants.iter().enumerate() {
        let what = std::mem::take(&mut whats[i]);
        match ops[i] {
            Op::Same => {}
            Op::Add => {
                // Something the install did not make is there: the zone's.
                if !force && exists(root, &w.rel) {
                    report.kept.push(Kept {
                        path: shown(&w.rel),
                        why: "the zone's own entry where the new source adds one",
                    });
                    kept.insert(i);
                    continue;
                }
                report.added.push(Change {
                    path: shown(&w.rel),
                    what: Vec::new(),
                });
            }
            Op::Change | Op::Replace => {
                let m = by_path[w.rel.as_slice()];
                if m.k != 'd' && !force {
                    let why = match zone_state(root, m) {
                        Zone::AsInstalled => None,
                        Zone::Changed => {
                            Some("changed in the zone since it was installed")
                        }
                        Zone::Gone => {
                            Some("removed in the zone since it was installed")
                        }
                    };
                    if let Some(why) = why {
                        report.kept.push(Kept {
                            path: shown(&w.rel),
                            why,
                        });
                        kept.insert(i);
                        continue;
                    }
                }
                if ops[i] == Op::Replace {
                    remove.push((w.rel.clone(), m.k));
                }
                report.changed.push(Change {
                    path: shown(&w.rel),
                    what,
                });
            }
        }
    }
    // A want beneath a kept path that stays a non-directory cannot be
    // written: kept with it.
    for (i, w) in wants.iter().enumerate() {
        if ops[i] != Op::Same && !kept.contains(&i) {
            let under_blocked = blocked.iter().any(|b| {
                w.rel.starts_with(b) && w.rel.get(b.len()) == Some(&b'/')
            });
            if under_blocked {
                kept.insert(i);
            }
        }
        if kept.contains(&i) {
            blocked.insert(w.rel.clone());
        }
    }
    remove.sort_by(|a, b| b.0.cmp(&a.0));
    remove.dedup();
    Ok(Plan { ops, kept, remove })
}

fn exists(root: BorrowedFd<'_>, rel: &[u8]) -> bool {
    match parent_of(root, rel, false) {
        Ok((dir, name)) => {
            rustix::fs::statat(&dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)
                .is_ok()
        }
        Err(_) => false,
    }
}
