//! The source's entries, part laid over part: what every room of the
//! source speaks. A leaf.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::manifest::Entry;

/// What the new source makes at one path.
#[derive(Clone, Debug)]
pub(crate) struct Want {
    /// Relative to the root, `/`-separated.
    pub(crate) rel: Vec<u8>,
    /// The entry as the manifest records it; a regular file's hash when
    /// known (staged and recorded entries always, a tree's file once
    /// read).
    pub(crate) entry: Entry,
    /// Where its content and attributes are.
    pub(crate) from: From,
    /// Names of one inode in the source: written as one.
    pub(crate) group: Option<(u64, u64)>,
    /// Access time to give it.
    pub(crate) atime: (i64, i64),
    /// A file a link rule makes a symlink of: its owner, times and
    /// extended attributes are the symlink's own, not compared.
    pub(crate) redirect: bool,
}

/// Where a want's content and attributes come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum From {
    /// A host tree's entry or a host file: read there.
    Path(PathBuf),
    /// An entry of an archive or layer unpacked beneath the zonepath:
    /// linked into the new root, not copied.
    Staged(PathBuf),
    /// The entry says it all: a profile's link or mount point.
    Entry,
    /// A directory made to hold the entries beneath it: as recorded if
    /// it was, else a plain one.
    Implicit,
    /// Unchanged since it was recorded (an image's lower layers, not
    /// read again): the old root holds it.
    Recorded,
}

impl From {
    /// Only the kind, target and mode say whether it changed (the rest
    /// is whatever the install's moment gave it).
    pub(crate) fn loose(&self) -> bool {
        matches!(self, From::Entry | From::Implicit)
    }
}

/// The parts laid one over the other.
#[derive(Default)]
pub(crate) struct Fold {
    map: BTreeMap<Vec<u8>, Want>,
    next_group: u64,
}

/// The end of the range of keys beneath `rel` (`rel/` .. `rel0`: `0`
/// follows `/` in byte order).
fn beneath_range(rel: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut lo = rel.to_vec();
    let mut hi = rel.to_vec();
    if !rel.is_empty() {
        lo.push(b'/');
        hi.push(b'0');
    } else {
        hi = vec![0xff; 1];
    }
    (lo, hi)
}

/// Group ids no source inode has (a device number this large is not
/// made): for links made between a layer and the ones below it, for
/// the recorded groups, and for each staged part's own.
const MADE_GROUPS: u64 = u64::MAX;
pub(crate) const RECORDED_GROUPS: u64 = u64::MAX - 1;
pub(crate) const STAGED_GROUPS: u64 = u64::MAX - 2;

impl Fold {
    /// Lays `w` over what is there: a directory over a directory keeps
    /// what is beneath it, anything else replaces the path and what was
    /// beneath it.
    pub(crate) fn put(&mut self, w: Want) {
        let replaces_below = w.entry.k != 'd'
            || self.map.get(&w.rel).is_some_and(|old| old.entry.k != 'd');
        if replaces_below {
            self.clear_beneath(&w.rel);
        }
        self.map.insert(w.rel.clone(), w);
    }

    /// Removes `rel` and everything beneath it.
    pub(crate) fn remove(&mut self, rel: &[u8]) {
        self.map.remove(rel);
        self.clear_beneath(rel);
    }

    /// Removes everything beneath `rel`, keeping `rel`.
    pub(crate) fn clear_beneath(&mut self, rel: &[u8]) {
        let (lo, hi) = beneath_range(rel);
        let doomed: Vec<Vec<u8>> =
            self.map.range(lo..hi).map(|(k, _)| k.clone()).collect();
        for k in doomed {
            self.map.remove(&k);
        }
    }

    pub(crate) fn get(&self, rel: &[u8]) -> Option<&Want> {
        self.map.get(rel)
    }

    /// Makes `rel` another name of the file at `target` (a layer's hard
    /// link to a lower layer's file); false if there is no such file.
    pub(crate) fn link(&mut self, rel: &[u8], target: &[u8]) -> bool {
        let Some(t) = self.map.get(target) else {
            return false;
        };
        if t.entry.k != 'f' {
            return false;
        }
        let group = match t.group {
            Some(g) => g,
            None => {
                self.next_group += 1;
                (MADE_GROUPS, self.next_group)
            }
        };
        let mut w = t.clone();
        if let Some(t) = self.map.get_mut(target) {
            t.group = Some(group);
        }
        w.group = Some(group);
        w.rel = rel.to_vec();
        w.entry.set_path(rel);
        self.put(w);
        true
    }

    /// The wants sorted by path, every directory that holds one present
    /// (made [`From::Implicit`] where no part names it).
    pub(crate) fn into_wants(mut self) -> Vec<Want> {
        let mut missing: std::collections::BTreeSet<Vec<u8>> =
            Default::default();
        for rel in self.map.keys() {
            let mut end = rel.len();
            while let Some(i) = rel[..end].iter().rposition(|&b| b == b'/') {
                let parent = &rel[..i];
                if self.map.contains_key(parent)
                    || !missing.insert(parent.to_vec())
                {
                    break;
                }
                end = i;
            }
        }
        for rel in missing {
            self.map
                .entry(rel.clone())
                .or_insert_with(|| implicit_dir(&rel));
        }
        self.map.into_values().collect()
    }
}

/// A directory no part names but one of its entries needs.
pub(crate) fn implicit_dir(rel: &[u8]) -> Want {
    let mut entry = Entry {
        p: None,
        px: None,
        k: 'd',
        m: 0o755,
        u: 0,
        g: 0,
        t: (0, 0),
        s: 0,
        h: None,
        l: None,
        r: None,
        n: None,
        x: None,
        o: None,
        i: None,
        z: false,
    };
    entry.set_path(rel);
    Want {
        rel: rel.to_vec(),
        entry,
        from: From::Implicit,
        group: None,
        atime: (0, 0),
        redirect: false,
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn file(rel: &str) -> Want {
        let mut w = implicit_dir(rel.as_bytes());
        w.entry.k = 'f';
        w.from = From::Entry;
        w
    }

    fn dir(rel: &str) -> Want {
        let mut w = implicit_dir(rel.as_bytes());
        w.from = From::Entry;
        w
    }

    fn paths(f: Fold) -> Vec<String> {
        f.into_wants()
            .into_iter()
            .map(|w| String::from_utf8(w.rel).unwrap())
            .collect()
    }

    #[test]
    fn later_parts_replace_and_directories_merge() {
        let mut f = Fold::default();
        f.put(dir("a"));
        f.put(file("a/x"));
        f.put(file("a.b"));
        f.put(dir("a"));
        assert_eq!(paths(f), ["a", "a.b", "a/x"]);
        let mut f = Fold::default();
        f.put(dir("a"));
        f.put(file("a/x"));
        f.put(file("a"));
        assert_eq!(paths(f), ["a"]);
        let mut f = Fold::default();
        f.put(file("a/b/c"));
        f.put(file("ab"));
        f.remove(b"a/b");
        assert_eq!(paths(f), ["ab"]);
        let mut f = Fold::default();
        f.put(file("d/e/f"));
        let w = f.into_wants();
        assert_eq!(w.len(), 3);
        assert_eq!(w[0].from, From::Implicit);
    }

    #[test]
    fn links_share_a_group() {
        let mut f = Fold::default();
        f.put(file("x"));
        assert!(f.link(b"y", b"x"));
        assert!(!f.link(b"z", b"nothing"));
        let w = f.into_wants();
        assert_eq!(w[0].group, w[1].group);
        assert!(w[0].group.is_some());
    }
}
