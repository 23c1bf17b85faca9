//! Who owns each path of a root at an update: the source (`follow`),
//! the source and the zone together (`merge`), or the zone (`keep`).
//! Declared in the profile's `[update]` section (zinstall(5)), never
//! guessed file by file.
//!
//! - `follow`: the root holds exactly what the source makes there. A
//!   zone's change is replaced, an entry the zone added is removed, and
//!   each is named. For the operating system's files and the package
//!   databases that describe them, which must change together.
//! - `merge`: the three-way merge ostree applies to `/etc`, against the
//!   source as it was recorded: an entry the zone did not change follows
//!   the new source; one it changed or removed stays as the zone has it,
//!   named; one it added is kept.
//! - `keep`: the zone's. An update never replaces or removes what the
//!   zone has there (a changed or removed source entry is named, not
//!   applied); an entry the source adds where the zone has nothing is
//!   made, as an install would make it.
//!
//! A path's owner is that of the deepest of its ancestors (itself
//! included) that a pattern names; at one depth a pattern without
//! wildcards beats one with them, and between lists `keep` beats `merge`
//! beats `follow`. A path no pattern names has the `default` owner.

use std::fmt;
use std::path::Path;

use std::os::unix::ffi::OsStrExt;

use globset::{GlobBuilder, GlobMatcher};
use serde::Deserialize;

/// Who owns a path at an update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Owner {
    /// The source wins.
    Follow,
    /// Three-way: the zone's changes are kept, the rest follows.
    Merge,
    /// The zone's: what it has is never replaced or removed.
    Keep,
}

impl Owner {
    /// The word the profile uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Owner::Follow => "follow",
            Owner::Merge => "merge",
            Owner::Keep => "keep",
        }
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the packaged profiles and a profile without `[update]` say:
/// the system's files and their package databases follow, `/etc`
/// merges, the zone's data is kept.
pub const DEFAULT_FOLLOW: &[&str] = &[
    "usr",
    "bin",
    "sbin",
    "lib",
    "lib32",
    "lib64",
    "libx32",
    // Package databases describe the files above: they follow with them.
    "var/lib/dpkg",
    "var/lib/rpm",
    "var/lib/apk",
    "usr/lib/sysimage/rpm",
    "var/pkg",
    "var/sadm/install",
];
/// See [`DEFAULT_FOLLOW`].
pub const DEFAULT_MERGE: &[&str] = &["etc"];
/// See [`DEFAULT_FOLLOW`]. `/usr/local` is the administrator's (FHS:
/// system software updates must not touch it).
pub const DEFAULT_KEEP: &[&str] = &["var", "home", "root", "srv", "usr/local"];

/// The `[update]` section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawOwners {
    pub(crate) follow: Option<Vec<String>>,
    pub(crate) merge: Option<Vec<String>>,
    pub(crate) keep: Option<Vec<String>>,
    pub(crate) default: Option<Owner>,
}

struct Pattern {
    text: String,
    matcher: GlobMatcher,
    literal: bool,
    owner: Owner,
}

/// A pattern of a profile's `[update]` section that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("update.{owner}[{index}] = {pattern:?}: {problem}")]
pub struct OwnersError {
    /// The list it is in.
    pub owner: Owner,
    /// Its place in the list, from 0.
    pub index: usize,
    /// The pattern as written.
    pub pattern: String,
    /// What is wrong with it.
    pub problem: PatternProblem,
}

/// What is wrong with an ownership pattern.
#[derive(Debug, thiserror::Error)]
pub enum PatternProblem {
    /// Empty, or with `..` or empty components.
    #[error("must name a path in the root, without .. or empty components")]
    NotInRoot,
    /// Not a glob.
    #[error("{0}")]
    Glob(globset::Error),
    /// Also in another owner's list.
    #[error("also listed under update.{0}")]
    Twice(Owner),
}

/// The ownership rules of a profile.
pub struct Owners {
    patterns: Vec<Pattern>,
    /// The patterns without wildcards, by their path: most of them, and
    /// each found by one lookup per ancestor of a path.
    literal: std::collections::HashMap<Vec<u8>, Owner>,
    default: Owner,
}

impl fmt::Debug for Owners {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Owners");
        for o in [Owner::Follow, Owner::Merge, Owner::Keep] {
            let list: Vec<&str> = self
                .patterns
                .iter()
                .filter(|p| p.owner == o)
                .map(|p| p.text.as_str())
                .collect();
            d.field(o.as_str(), &list);
        }
        d.field("default", &self.default).finish()
    }
}

impl Default for Owners {
    fn default() -> Self {
        Owners::from_raw(RawOwners::default())
            .unwrap_or_else(|_| Owners::everything(Owner::Merge))
    }
}

impl Owners {
    /// Every path owned alike.
    pub fn everything(owner: Owner) -> Owners {
        Owners {
            patterns: Vec::new(),
            literal: Default::default(),
            default: owner,
        }
    }

    /// The rules from a profile's `[update]` section; a list it leaves
    /// out is the packaged default's. The error names the pattern.
    pub(crate) fn from_raw(raw: RawOwners) -> Result<Owners, OwnersError> {
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        let lists = [
            (
                Owner::Follow,
                raw.follow.unwrap_or_else(|| owned(DEFAULT_FOLLOW)),
            ),
            (
                Owner::Merge,
                raw.merge.unwrap_or_else(|| owned(DEFAULT_MERGE)),
            ),
            (Owner::Keep, raw.keep.unwrap_or_else(|| owned(DEFAULT_KEEP))),
        ];
        let mut patterns = Vec::new();
        for (owner, list) in lists {
            for (i, text) in list.into_iter().enumerate() {
                let fail = |problem| OwnersError {
                    owner,
                    index: i,
                    pattern: text.clone(),
                    problem,
                };
                let trimmed = text.trim_matches('/');
                if trimmed.is_empty()
                    || trimmed.split('/').any(|c| c.is_empty() || c == "..")
                {
                    return Err(fail(PatternProblem::NotInRoot));
                }
                // `*` stays within one component, as in a shell.
                let glob = GlobBuilder::new(trimmed)
                    .literal_separator(true)
                    .build()
                    .map_err(|e| fail(PatternProblem::Glob(e)))?;
                if let Some(other) = patterns.iter().find(|p: &&Pattern| {
                    p.text.trim_matches('/') == trimmed && p.owner != owner
                }) {
                    return Err(fail(PatternProblem::Twice(other.owner)));
                }
                patterns.push(Pattern {
                    literal: !trimmed.contains(['*', '?', '[', '{']),
                    matcher: glob.compile_matcher(),
                    text,
                    owner,
                });
            }
        }
        let literal = patterns
            .iter()
            .filter(|p| p.literal)
            .map(|p| (p.text.trim_matches('/').as_bytes().to_vec(), p.owner))
            .collect();
        Ok(Owners {
            patterns,
            literal,
            default: raw.default.unwrap_or(Owner::Merge),
        })
    }

    /// The owner of `rel` (relative to the root, `/`-separated bytes).
    pub fn of(&self, rel: &[u8]) -> Owner {
        let globs = self.patterns.iter().any(|p| !p.literal);
        let mut best: Option<(usize, bool, Owner)> = None;
        let mut depth = 0;
        for end in (1..=rel.len()).filter(|&e| e == rel.len() || rel[e] == b'/')
        {
            depth += 1;
            let prefix = &rel[..end];
            let mut consider = |c: (usize, bool, Owner)| {
                best = Some(match best {
                    Some(b) if b >= c => b,
                    _ => c,
                });
            };
            if let Some(&o) = self.literal.get(prefix) {
                consider((depth, true, o));
            }
            if globs {
                let path = Path::new(std::ffi::OsStr::from_bytes(prefix));
                for p in self.patterns.iter().filter(|p| !p.literal) {
                    if p.matcher.is_match(path) {
                        consider((depth, false, p.owner));
                    }
                }
            }
        }
        best.map_or(self.default, |b| b.2)
    }

    /// True if nothing at or beneath `rel` can be owned by anything but
    /// `keep`: an update need not look inside it.
    pub fn all_kept_beneath(&self, rel: &[u8]) -> bool {
        if self.of(rel) != Owner::Keep {
            return false;
        }
        let mut prefix = rel.to_vec();
        prefix.push(b'/');
        // A pattern for something deeper with another owner (follow
        // var/lib/dpkg inside kept var), or one with wildcards that may
        // match deeper, makes it worth a look.
        !self.patterns.iter().any(|p| {
            p.owner != Owner::Keep
                && (!p.literal
                    || p.text.trim_matches('/').as_bytes().starts_with(&prefix))
        })
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn the_deepest_named_ancestor_decides() {
        let o = Owners::default();
        assert_eq!(o.of(b"usr/bin/ls"), Owner::Follow);
        assert_eq!(o.of(b"usr"), Owner::Follow);
        assert_eq!(o.of(b"usr/local/bin/tool"), Owner::Keep);
        assert_eq!(o.of(b"etc/passwd"), Owner::Merge);
        assert_eq!(o.of(b"var/log/syslog"), Owner::Keep);
        assert_eq!(o.of(b"var/lib/dpkg/status"), Owner::Follow);
        assert_eq!(o.of(b"var/lib/dpkgx"), Owner::Keep);
        assert_eq!(o.of(b"lib64/ld.so"), Owner::Follow);
        assert_eq!(o.of(b"opt/app"), Owner::Merge);
        assert!(o.all_kept_beneath(b"home"));
        assert!(!o.all_kept_beneath(b"var"));
        assert!(o.all_kept_beneath(b"var/log"));
        assert!(!o.all_kept_beneath(b"etc"));
    }

    #[test]
    fn globs_literals_and_conflicts() {
        let raw = RawOwners {
            follow: Some(vec!["lib*".into()]),
            merge: Some(vec![]),
            keep: Some(vec!["lib32".into()]),
            default: Some(Owner::Keep),
        };
        let o = Owners::from_raw(raw).unwrap();
        assert_eq!(o.of(b"lib64/x"), Owner::Follow);
        assert_eq!(o.of(b"lib32/x"), Owner::Keep);
        assert_eq!(o.of(b"opt"), Owner::Keep);
        let e = Owners::from_raw(RawOwners {
            follow: Some(vec!["etc".into()]),
            merge: Some(vec!["etc".into()]),
            ..RawOwners::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("also listed under update.follow"), "{e}");
        let e = Owners::from_raw(RawOwners {
            keep: Some(vec!["../x".into()]),
            ..RawOwners::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("update.keep[0]"), "{e}");
    }
}
