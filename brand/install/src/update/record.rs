//! The new root's manifest: the old entries carried over, the changed
//! ones from the source, and the images as recorded.

use std::collections::{HashMap, HashSet};
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

use super::apply::Written;
use super::diff::{Op, Plan, Want};
use super::error::{UpdateError, errno_at, io_at};
use crate::manifest::{self, Entry, Manifest};

/// The images' digests, as the manifest records them.
pub fn image_records(images: &[PathBuf]) -> Vec<manifest::ImageRecord> {
    images
        .iter()
        .map(|i| manifest::ImageRecord {
            arg: i.display().to_string(),
            digest: manifest::image_digest(i),
        })
        .collect()
}

/// The manifest of the new root: the old entries carried over, the
/// changed ones from the source (hashed), the inode and change time of
/// each entry whose content is known refreshed.
#[allow(clippy::too_many_arguments)]
pub(super) fn new_manifest(
    old: &Manifest,
    wants: &[Want],
    plan: &Plan,
    written: &HashMap<Vec<u8>, Written>,
    trees: &[String],
    images: Vec<manifest::ImageRecord>,
    new: BorrowedFd<'_>,
    new_path: &Path,
) -> Result<Manifest, UpdateError> {
    let by_path = old.by_path();
    let want_paths: HashSet<&[u8]> =
        wants.iter().map(|w| w.rel.as_slice()).collect();
    let mut out: Vec<Entry> = Vec::new();
    // Carried: what the trees did not lay out, and what they laid out
    // unchanged. Linked into the new root, they have no stamp: whether
    // the zone changed one is known by its hash (see clone_tree).
    let fresh = |e: &mut Entry| e.i = None;
    let removed: HashSet<&[u8]> =
        plan.remove.iter().map(|(p, _)| p.as_slice()).collect();
    for e in &old.entries {
        let p = e.path();
        let ours = e
            .o
            .as_ref()
            .is_some_and(|o| trees.contains(o) || old.header.trees.contains(o));
        if ours
            || want_paths.contains(p.as_ref())
            || removed.contains(p.as_ref())
        {
            continue;
        }
        let mut e = e.clone();
        fresh(&mut e);
        out.push(e);
    }
    let max_group = old
        .entries
        .iter()
        .filter_map(|e| e.n)
        .max()
        .map_or(0, |n| n + 1);
    let mut groups: HashMap<(u64, u64), u64> = HashMap::new();
    let mut counts: HashMap<(u64, u64), usize> = HashMap::new();
    for w in wants {
        if let Some(i) = w.inode {
            *counts.entry(i).or_default() += 1;
        }
    }
    for (i, w) in wants.iter().enumerate() {
        let mut e = w.entry.clone();
        if plan.ops[i] == Op::Same {
            // Unchanged: the old entry, hash and group as recorded.
            if let Some(m) = by_path.get(w.rel.as_slice()) {
                let mut m = (*m).clone();
                m.o = e.o.clone();
                fresh(&mut m);
                out.push(m);
                continue;
            }
        }
        e.i = None;
        if let Some(done) = written.get(&w.rel) {
            e.h = Some(done.hash.clone());
            e.i = done.stat;
        } else if e.k == 'f' {
            // Kept (or linked to a group's first): the source's content
            // still, the zone's file being its own edit of it.
            e.h = Some(
                manifest::hash_file(&w.src).map_err(io_at("hash", &w.src))?,
            );
        }
        if let Some(n) =
            w.inode.filter(|n| counts.get(n).is_some_and(|c| *c > 1))
        {
            let next = max_group + groups.len() as u64;
            e.n = Some(*groups.entry(n).or_insert(next));
        }
        e.z = plan.kept.contains(&i);
        out.push(e);
    }
    let mut entries = out;
    entries.sort_by(|a, b| a.path().cmp(&b.path()));
    let root_ino = rustix::fs::fstat(new)
        .map_err(errno_at("stat", new_path))?
        .st_ino;
    Ok(Manifest {
        header: manifest::Header {
            version: 1,
            root_ino,
            trees: trees.to_vec(),
            images,
            entries: entries.len() as u64,
        },
        entries,
    })
}
