//! What the update does at each path: the new source's entry, the one
//! recorded, and the zone's, under the path's owner (`follow`, `merge`,
//! `keep`; see [`crate::owners`]).
//!
//! What the source changed is told from the recorded entry (a tree's
//! file by size and modification time first, as rsync's quick check,
//! and by its content hash when the size is the same and the time is
//! not, so a change of content at the same size is reported as one);
//! what the zone changed, from the zone's entry ([`Zone::vs`]).

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::error::{UpdateError, io_at};
use super::report::{Change, Kept, Report};
use super::source::{From, Want};
use super::zone::{Vs, Zone};
use crate::manifest::{self, Entry, Manifest};
use crate::owners::{Owner, Owners};

/// The path as the zone sees it, for reports.
pub(super) fn shown(rel: &[u8]) -> PathBuf {
    Path::new("/").join(OsStr::from_bytes(rel))
}

/// What the update does.
pub(super) struct Plan {
    /// Per want: write it into the new root.
    pub(super) write: Vec<bool>,
    /// Per want: the root keeps the zone's own entry where the source's
    /// is recorded.
    pub(super) zones: Vec<bool>,
    /// Paths to remove from the new root, deepest first, and whether
    /// what the zone put beneath goes too (a followed path) or keeps a
    /// directory (otherwise).
    pub(super) remove: Vec<(Vec<u8>, bool)>,
}

/// What deciding on the recorded entries came to.
pub(super) enum Decision {
    /// What to write and remove.
    Plan(Plan),
    /// No decision: a followed path the zone changed (`path`) needs the
    /// source's own copy, which only reading the image's layers again
    /// gives.
    Restage { path: PathBuf },
}

/// Hashes, in parallel, each tree file whose size is as recorded but
/// whose modification time is not (to tell a change of content from
/// one of times); gives every other unchanged file its recorded hash.
pub(super) fn settle_hashes(
    old: &Manifest,
    wants: &mut [Want],
) -> Result<(), UpdateError> {
    use rayon::prelude::*;
    let by_path = old.by_path();
    wants
        .par_iter_mut()
        .try_for_each(|w| -> Result<(), UpdateError> {
            if w.entry.k != 'f' || w.entry.h.is_some() {
                return Ok(());
            }
            let From::Path(src) = &w.from else {
                return Ok(());
            };
            let Some(b) = by_path.get(w.rel.as_slice()) else {
                return Ok(());
            };
            if b.k != 'f' || b.s != w.entry.s {
                return Ok(());
            }
            if b.t == w.entry.t {
                w.entry.h = b.h.clone();
                return Ok(());
            }
            w.entry.h =
                Some(manifest::hash_file(src).map_err(io_at("hash", src))?);
            Ok(())
        })
}

/// What changed between `b` (recorded) and `w` (the source now).
fn changes(b: &Entry, w: &Want, links_differ: bool) -> Vec<&'static str> {
    let s = &w.entry;
    let mut what = Vec::new();
    if b.k != s.k {
        what.push("type");
        return what;
    }
    if s.k == 'l' && b.l != s.l {
        what.push("target");
    }
    if w.from.loose() {
        if s.k == 'd' && w.from == From::Entry && b.m != s.m {
            what.push("mode");
        }
        return what;
    }
    if s.k == 'f' {
        let differ = b.s != s.s
            || match (&b.h, &s.h) {
                (Some(x), Some(y)) => x != y,
                // Not hashed: the quick check said size and time match.
                _ => false,
            };
        if differ {
            what.push("content");
        }
    }
    if s.k != 'l' && b.m != s.m {
        what.push("mode");
    }
    if !w.redirect {
        if (b.u, b.g) != (s.u, s.g) {
            what.push("owner");
        }
        if b.t != s.t {
            what.push("times");
        }
        if b.x != s.x {
            what.push("xattrs");
        }
    }
    if (s.k == 'c' || s.k == 'b') && b.r != s.r {
        what.push("device");
    }
    if s.k == 'f' && links_differ {
        what.push("links");
    }
    what
}

/// The inputs of a decision.
pub(super) struct Inputs<'a> {
    pub(super) old: &'a Manifest,
    pub(super) wants: &'a [Want],
    pub(super) zone: &'a Zone<'a>,
    pub(super) owners: &'a Owners,
    /// The source wins in merged paths too (`--force`).
    pub(super) force: bool,
    /// Paths whose recorded entry stands, untouched (a host file missing
    /// on the host).
    pub(super) pinned: &'a HashSet<Vec<u8>>,
}

impl Inputs<'_> {
    fn owner(&self, rel: &[u8]) -> Owner {
        match self.owners.of(rel) {
            Owner::Merge if self.force => Owner::Follow,
            o => o,
        }
    }
}

/// Decides; fills the report's lists.
pub(super) fn decide(
    i: &Inputs<'_>,
    report: &mut Report,
) -> Result<Decision, UpdateError> {
    let paths: Vec<_> = i.old.entries.iter().map(Entry::path).collect();
    let k = Known::of(i, &paths);
    let mut plan = Plan {
        write: vec![false; i.wants.len()],
        zones: vec![false; i.wants.len()],
        remove: Vec::new(),
    };
    for (n, w) in i.wants.iter().enumerate() {
        if i.pinned.contains(&w.rel) {
            continue;
        }
        let here = i.zone.exists(&w.rel);
        let restage = match (k.by_path.get(w.rel.as_slice()), &k.whats[n]) {
            (Some(_), Some(what)) => k.recorded(n, w, what, &mut plan, report),
            _ => {
                k.added(n, w, here, &mut plan, report);
                None
            }
        };
        if let Some(restage) = restage {
            return Ok(restage);
        }
    }
    k.gone_from_source(&mut plan, report);
    k.zone_additions(&mut plan, report);
    if let Some(restage) = k.whole_link_groups(&mut plan) {
        return Ok(restage);
    }
    plan.remove.sort_by(|a, b| b.0.cmp(&a.0));
    plan.remove.dedup();
    Ok(Decision::Plan(plan))
}

/// What a decision is made from: the recorded entries by path, each
/// want's changes against its recorded entry, and the zone's state
/// where a decision depends on it.
struct Known<'a> {
    i: &'a Inputs<'a>,
    /// The recorded entries' paths, in the manifest's order.
    paths: &'a [Cow<'a, [u8]>],
    by_path: HashMap<Cow<'a, [u8]>, &'a Entry>,
    want_at: HashMap<&'a [u8], usize>,
    /// Per want: what changed since its recorded entry, if it has one.
    whats: Vec<Option<Vec<&'static str>>>,
    states: HashMap<&'a [u8], Vs>,
}

impl<'a> Known<'a> {
    fn of(i: &'a Inputs<'a>, paths: &'a [Cow<'a, [u8]>]) -> Known<'a> {
        use rayon::prelude::*;
        let by_path = i.old.by_path();
        let want_at: HashMap<&[u8], usize> = i
            .wants
            .iter()
            .enumerate()
            .map(|(n, w)| (w.rel.as_slice(), n))
            .collect();
        // Hard-link groups, recorded and now, as sets of paths.
        let mut old_groups: HashMap<u64, BTreeSet<&[u8]>> = HashMap::new();
        for (e, p) in i.old.entries.iter().zip(paths) {
            if let Some(n) = e.n {
                old_groups.entry(n).or_default().insert(p.as_ref());
            }
        }
        let mut new_groups: HashMap<(u64, u64), BTreeSet<&[u8]>> =
            HashMap::new();
        for w in i.wants {
            if let Some(g) = w.group {
                new_groups.entry(g).or_default().insert(w.rel.as_slice());
            }
        }
        let links_differ = |w: &Want, b: &Entry| -> bool {
            let old: BTreeSet<&[u8]> =
                match b.n.and_then(|n| old_groups.get(&n)) {
                    Some(s) => s.clone(),
                    None => BTreeSet::from([w.rel.as_slice()]),
                };
            let new: BTreeSet<&[u8]> =
                match w.group.and_then(|g| new_groups.get(&g)) {
                    Some(s) if s.len() > 1 => s.clone(),
                    _ => BTreeSet::from([w.rel.as_slice()]),
                };
            old != new
        };
        let whats: Vec<Option<Vec<&'static str>>> = i
            .wants
            .iter()
            .map(|w| {
                by_path
                    .get(w.rel.as_slice())
                    .map(|b| changes(b, w, links_differ(w, b)))
            })
            .collect();
        // The zone's state, where a decision depends on it: every recorded
        // entry in a followed path, a changed or removed one in a merged
        // path. Read in parallel (a state may need a hash).
        let mut asks: Vec<(&[u8], &Entry)> = Vec::new();
        for (w, what) in i.wants.iter().zip(&whats) {
            let Some(b) = by_path.get(w.rel.as_slice()) else {
                continue;
            };
            let o = i.owner(&w.rel);
            let changed = what.as_ref().is_some_and(|v| !v.is_empty());
            if o == Owner::Follow || (o == Owner::Merge && changed) {
                asks.push((w.rel.as_slice(), b));
            }
        }
        for (e, p) in i.old.entries.iter().zip(paths) {
            if !want_at.contains_key(p.as_ref()) && i.owner(p) != Owner::Keep {
                asks.push((p.as_ref(), e));
            }
        }
        let states: HashMap<&[u8], Vs> = asks
            .par_iter()
            .map(|(rel, b)| (*rel, i.zone.vs(rel, b)))
            .collect();
        Known {
            i,
            paths,
            by_path,
            want_at,
            whats,
            states,
        }
    }

    fn state(&self, rel: &[u8]) -> Vs {
        self.states.get(rel).copied().unwrap_or(Vs::Same)
    }

    /// A want with a recorded entry, changed by `what`; a `Restage` when
    /// the zone changed a recorded entry the source no longer holds.
    fn recorded(
        &self,
        n: usize,
        w: &Want,
        what: &[&'static str],
        plan: &mut Plan,
        report: &mut Report,
    ) -> Option<Decision> {
        let o = self.i.owner(&w.rel);
        let changed = !what.is_empty();
        if changed {
            report.changed.push(Change {
                path: shown(&w.rel),
                what: what.to_vec(),
            });
        }
        match o {
            Owner::Keep => {
                if changed {
                    report.kept.push(Kept {
                        path: shown(&w.rel),
                        why: concat!(
                            "a kept path: the new source changes it, the ",
                            made!(),
                            "'s stays"
                        ),
                    });
                    plan.zones[n] = true;
                }
            }
            Owner::Follow => {
                let zs = self.state(&w.rel);
                if zs != Vs::Same {
                    if w.from == From::Recorded {
                        return Some(Decision::Restage {
                            path: shown(&w.rel),
                        });
                    }
                    report.replaced.push(Kept {
                        path: shown(&w.rel),
                        why: replaced_why(zs),
                    });
                    plan.write[n] = true;
                } else if changed {
                    plan.write[n] = true;
                }
            }
            Owner::Merge => match self.state(&w.rel) {
                _ if !changed => {}
                Vs::Same => plan.write[n] = true,
                Vs::Gone => {
                    report.kept.push(Kept {
                        path: shown(&w.rel),
                        why: concat!(
                            "removed in the ",
                            made!(),
                            " since it was recorded; stays removed"
                        ),
                    });
                    plan.zones[n] = true;
                }
                Vs::Changed(_) => {
                    report.kept.push(Kept {
                        path: shown(&w.rel),
                        why: concat!("changed in the ", made!(), " since it was recorded; the new source changes it too"),
                    });
                    plan.zones[n] = true;
                }
            },
        }
        None
    }

    /// A want without a recorded entry: the source adds it; `here`, the
    /// zone has an entry there.
    fn added(
        &self,
        n: usize,
        w: &Want,
        here: bool,
        plan: &mut Plan,
        report: &mut Report,
    ) {
        let o = self.i.owner(&w.rel);
        report.added.push(Change {
            path: shown(&w.rel),
            what: Vec::new(),
        });
        match o {
            // The zone's entries are never replaced; where it has
            // none, the source's is made, as an install makes it.
            Owner::Keep if here => {
                report.kept.push(Kept {
                    path: shown(&w.rel),
                    why: concat!(
                        "a kept path: the ",
                        made!(),
                        "'s own entry where the new source adds one"
                    ),
                });
                plan.zones[n] = true;
            }
            Owner::Keep => plan.write[n] = true,
            Owner::Follow => {
                if here {
                    report.replaced.push(Kept {
                        path: shown(&w.rel),
                        why: concat!(
                            "the ",
                            made!(),
                            "'s own entry where the new source adds one"
                        ),
                    });
                }
                plan.write[n] = true;
            }
            Owner::Merge => {
                if here
                    && !(w.entry.k == 'd'
                        && self
                            .i
                            .zone
                            .get(&w.rel)
                            .is_some_and(|z| z.kind == 'd'))
                {
                    report.kept.push(Kept {
                        path: shown(&w.rel),
                        why: concat!(
                            "the ",
                            made!(),
                            "'s own entry where the new source adds one"
                        ),
                    });
                    plan.zones[n] = true;
                } else {
                    plan.write[n] = true;
                }
            }
        }
    }

    /// Recorded entries the source no longer has.
    fn gone_from_source(&self, plan: &mut Plan, report: &mut Report) {
        // Recorded entries the source no longer has.
        for (e, p) in self.i.old.entries.iter().zip(self.paths) {
            if self.want_at.contains_key(p.as_ref())
                || self.i.pinned.contains(p.as_ref())
            {
                continue;
            }
            report.removed.push(Change {
                path: shown(p),
                what: Vec::new(),
            });
            match self.i.owner(p) {
                Owner::Keep => report.kept.push(Kept {
                    path: shown(p),
                    why: concat!(
                        "a kept path: the new source removes it, the ",
                        made!(),
                        "'s stays"
                    ),
                }),
                Owner::Follow => match self.state(p) {
                    Vs::Gone => {}
                    zs => {
                        if zs != Vs::Same {
                            report.replaced.push(Kept {
                                path: shown(p),
                                why: concat!(
                                    "changed in the ",
                                    made!(),
                                    "; the new source removes it"
                                ),
                            });
                        }
                        plan.remove.push((p.to_vec(), true));
                    }
                },
                Owner::Merge => match self.state(p) {
                    Vs::Gone => {}
                    Vs::Same => plan.remove.push((p.to_vec(), e.k != 'd')),
                    Vs::Changed(_) => report.kept.push(Kept {
                        path: shown(p),
                        why: concat!(
                            "changed in the ",
                            made!(),
                            " since it was recorded; the new source removes it"
                        ),
                    }),
                },
            }
        }
    }

    /// What the zone added in a followed path.
    fn zone_additions(&self, plan: &mut Plan, report: &mut Report) {
        // What the zone added in a followed path goes: the source owns it.
        // (Not where only --force makes the source win: the zone's own
        // entries stay there.)
        let mut added: Vec<&Vec<u8>> = self
            .i
            .zone
            .paths()
            .filter(|p| {
                !self.by_path.contains_key(p.as_slice())
                    && !self.want_at.contains_key(p.as_slice())
                    && self.i.owners.of(p) == Owner::Follow
            })
            .collect();
        added.sort();
        let mut last: Option<&[u8]> = None;
        for p in added {
            // Beneath one already going: goes with it.
            if last.is_some_and(|l| {
                p.starts_with(l) && p.get(l.len()) == Some(&b'/')
            }) {
                continue;
            }
            report.replaced.push(Kept {
                path: shown(p),
                why: concat!(
                    "the ",
                    made!(),
                    "'s own entry in a followed path"
                ),
            });
            plan.remove.push((p.clone(), true));
            last = Some(p.as_slice());
        }
    }

    /// A `Restage` when a link group must be written whole and one of its
    /// recorded names changed in the zone.
    fn whole_link_groups(&self, plan: &mut Plan) -> Option<Decision> {
        // A hard-link group with one name written is written whole.
        let mut dirty: HashSet<(u64, u64)> = HashSet::new();
        for (n, w) in self.i.wants.iter().enumerate() {
            if let (Some(g), true) = (w.group, plan.write[n]) {
                dirty.insert(g);
            }
        }
        for (n, w) in self.i.wants.iter().enumerate() {
            if !plan.write[n]
                && !plan.zones[n]
                && w.group.is_some_and(|g| dirty.contains(&g))
            {
                if w.from == From::Recorded && self.state(&w.rel) != Vs::Same {
                    return Some(Decision::Restage {
                        path: shown(&w.rel),
                    });
                }
                plan.write[n] = true;
            }
        }
        None
    }
}

fn replaced_why(zs: Vs) -> &'static str {
    match zs {
        Vs::Gone => concat!("removed in the ", made!(), "; put back"),
        Vs::Changed("content") => {
            concat!("the ", made!(), "'s change of its content replaced")
        }
        Vs::Changed("mode") => {
            concat!("the ", made!(), "'s change of its mode replaced")
        }
        Vs::Changed("owner") => {
            concat!("the ", made!(), "'s change of its owner replaced")
        }
        Vs::Changed("type") => {
            concat!("the ", made!(), "'s entry of another type replaced")
        }
        Vs::Changed(_) => concat!("the ", made!(), "'s change replaced"),
        Vs::Same => "",
    }
}
