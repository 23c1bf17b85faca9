//! The new root's manifest: every entry of the new source as the source
//! makes it (where the zone keeps its own, the source's is recorded and
//! marked), with the recipe it was made from; and, once the new root is
//! in place, each entry's inode and change time, so that the next update
//! reads only what the zone touched.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::Path;

use zinstall_engine::beneath::Root;

use super::apply::Written;
use super::decide::Plan;
use super::error::{self, UpdateError, io_at};
use super::source::{From, Want};
use super::zone::Zone;
use crate::manifest::{self, Entry, Made, Manifest, Recipe};
use crate::owners::Owners;
use crate::state::{self, State};

/// What stays of the old root in the new one, for its record.
pub(super) struct Kept<'a> {
    /// Paths whose recorded entry stands, untouched.
    pub(super) pinned: &'a HashSet<Vec<u8>>,
    /// How the new root shares the old one's entries (`snapshot`,
    /// `reflink`, `hardlink`).
    pub(super) method: &'a str,
    /// A reflink clone's stamps of the files it cloned alone.
    pub(super) cloned: &'a HashMap<Vec<u8>, super::clone::Stamp>,
}

/// The manifest of the new root.
pub(super) fn new_manifest(
    old: &Manifest,
    wants: &[Want],
    plan: &Plan,
    written: &Written,
    kept: &Kept<'_>,
    recipe: Recipe,
    made: Made,
) -> Result<Manifest, UpdateError> {
    let pinned = kept.pinned;
    let by_path = old.by_path();
    let blocked: HashSet<usize> = written.blocked.iter().copied().collect();
    let counts = group_sizes(wants);
    let mut groups: HashMap<(u64, u64), u64> = HashMap::new();
    let mut entries = Vec::with_capacity(wants.len());
    for (n, w) in wants.iter().enumerate() {
        if pinned.contains(&w.rel) {
            if let Some(b) = by_path.get(w.rel.as_slice()) {
                entries.push(standing(b));
            }
            continue;
        }
        let b = by_path.get(w.rel.as_slice());
        // A link or mount point of the profile, or a directory made only
        // to hold others, that is there as recorded: its record stands
        // (the entry made now says nothing of its owner or times).
        if let Some(b) = b.filter(|b| {
            w.from.loose()
                && b.k == w.entry.k
                && (b.k != 'l' || b.l == w.entry.l)
        }) && !plan.write[n]
        {
            entries.push(standing(b));
            continue;
        }
        let mut e = w.entry.clone();
        e.i = None;
        e.n = None;
        e.z = plan.zones[n] || blocked.contains(&n);
        let alone = w
            .group
            .is_none_or(|g| counts.get(&g).is_none_or(|c| *c < 2));
        if e.k == 'f' && !e.z && alone {
            e.i = known_stamp(n, w, b.copied(), plan, written, kept);
        }
        if e.k == 'f' {
            if let Some(h) = written.hashes.get(&n) {
                e.h = Some(h.clone());
            }
            if e.h.is_none() {
                e.h = Some(source_hash(w, &by_path)?);
            }
        }
        if let Some(g) =
            w.group.filter(|g| counts.get(g).is_some_and(|c| *c > 1))
        {
            let next = groups.len() as u64;
            e.n = Some(*groups.entry(g).or_insert(next));
        }
        entries.push(e);
    }
    for (p, b) in &by_path {
        if pinned.contains(p.as_ref())
            && !wants.iter().any(|w| w.rel == p.as_ref())
        {
            entries.push(standing(b));
        }
    }
    Ok(sorted_manifest(entries, recipe, made))
}

/// The manifest of `entries`, sorted by path, made by `made` from
/// `recipe`.
fn sorted_manifest(
    mut entries: Vec<Entry>,
    recipe: Recipe,
    made: Made,
) -> Manifest {
    entries.sort_by(|a, b| a.path().cmp(&b.path()));
    Manifest {
        header: manifest::Header {
            version: manifest::CURRENT_VERSION,
            root_ino: None,
            trees: Vec::new(),
            images: Vec::new(),
            entries: entries.len() as u64,
            recipe: Some(recipe),
            made: Some(made),
        },
        entries,
    }
}

/// An entry of the old record that stands in the new one, without its
/// link group or stamp (the new record numbers and stamps its own).
fn standing(b: &Entry) -> Entry {
    let mut b = b.clone();
    b.n = None;
    b.i = None;
    b
}

/// How many wants share each link group.
fn group_sizes(wants: &[Want]) -> HashMap<(u64, u64), usize> {
    let mut counts: HashMap<(u64, u64), usize> = HashMap::new();
    for w in wants {
        if let Some(g) = w.group {
            *counts.entry(g).or_default() += 1;
        }
    }
    counts
}

/// Want `n`'s file's inode and change time where they are known now
/// and nothing will move them: written here, cloned alone, or a
/// snapshot's (which keeps the old root's inodes); `b` is its recorded
/// entry.
fn known_stamp(
    n: usize,
    w: &Want,
    b: Option<&Entry>,
    plan: &Plan,
    written: &Written,
    kept: &Kept<'_>,
) -> Option<super::clone::Stamp> {
    match (written.stamps.get(&n), plan.write[n], kept.method) {
        (Some(s), _, _) => Some(*s),
        (None, true, _) => None,
        (None, false, "snapshot") => {
            b.and_then(|b| b.i.filter(|_| b.n.is_none()))
        }
        (None, false, "reflink") => kept.cloned.get(&w.rel).copied(),
        _ => None,
    }
}

/// The content hash of a file not written by copying: its source's, or
/// the recorded one where it has no file to read.
fn source_hash(
    w: &Want,
    by_path: &HashMap<Cow<'_, [u8]>, &Entry>,
) -> Result<String, UpdateError> {
    Ok(match &w.from {
        From::Path(src) | From::Staged(src) => {
            manifest::hash_file(src).map_err(io_at("hash", src))?
        }
        _ => by_path
            .get(w.rel.as_slice())
            .and_then(|b| b.h.clone())
            .unwrap_or_default(),
    })
}

/// Gives every entry of `m`, the manifest just made the zonepath's,
/// whose file in the root is as recorded (type, mode, owner, size,
/// modification time) the inode and change time it has now, and the
/// root's identity to the header; and writes it. Run once the root is in place and nothing else will link or
/// unlink its inodes (the previous `root.prev` is gone), so the next
/// update trusts the stamps. An entry whose file differs gets none: the
/// next update reads it.
pub(super) fn stamp(
    zonepath: &Path,
    owners: &Owners,
    mut m: Manifest,
) -> Result<(), UpdateError> {
    let root_path = zonepath.join("root");
    let root = Root::open(&root_path)?;
    let zone = Zone::scan(&root, owners)?;
    for e in &mut m.entries {
        e.i = None;
        if e.z {
            continue;
        }
        let rel = e.path().into_owned();
        let Some(z) = zone.get(&rel) else { continue };
        let same = z.kind == e.k
            && (z.kind == 'l' || (z.mode, z.uid, z.gid) == (e.m, e.u, e.g))
            && (z.kind != 'f' || (z.size == e.s && z.mtime == e.t));
        if same && z.kind == 'f' {
            e.i = Some((z.ino, z.ctime.0, z.ctime.1));
        }
    }
    m.header.root_ino = Some(root_ino(&root_path)?);
    manifest::write(zonepath, manifest::MANIFEST, &m)?;
    Ok(())
}

/// Which directory `p` is ([`super::platform::root_id`]).
pub(super) fn root_ino(p: &Path) -> Result<u64, UpdateError> {
    super::platform::root_id(p).map_err(io_at("stat", p))
}

/// Refuses a zonepath with no finished install.
pub(super) fn installed(zp: &Path) -> Result<(), UpdateError> {
    match state::read(zp)
        .map_err(io_at("read marker", zp.join(state::STATE)))?
    {
        Some(State::Installed) => {}
        st => {
            if let Some(e) = error::composefs_root(zp) {
                return Err(e);
            }
            return Err(UpdateError::NotInstalled {
                zonepath: zp.to_path_buf(),
                state: match st {
                    Some(State::Installing) => "its install did not finish",
                    _ => "no install is recorded there",
                },
            });
        }
    }
    Ok(())
}

/// The root's recorded manifest, and whether there is one: without,
/// `force` updates as if every entry were the source's.
pub(super) fn recorded(
    zp: &Path,
    force: bool,
) -> Result<(Manifest, bool), UpdateError> {
    Ok(match manifest::read(zp, manifest::MANIFEST)? {
        Some(m) => (m, true),
        None if force => (
            Manifest {
                header: manifest::Header {
                    version: manifest::CURRENT_VERSION,
                    root_ino: None,
                    trees: Vec::new(),
                    images: Vec::new(),
                    entries: 0,
                    recipe: None,
                    made: None,
                },
                entries: Vec::new(),
            },
            false,
        ),
        None => {
            return Err(UpdateError::NoManifest {
                zonepath: zp.to_path_buf(),
            });
        }
    })
}
