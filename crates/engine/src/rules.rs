//! Link rules: what to do with each source path.
//!
//! A zone root does not need its own copy of everything: the global zone's
//! `/usr` is mounted read-only at `/system/usr`, so most of `usr/bin` can
//! be a symlink into it. A [`RuleSet`] is an ordered list of glob patterns,
//! each with an [`Action`]; the first pattern that matches a path decides,
//! and a path no pattern matches is copied. Patterns are matched against
//! the path as it will be inside the installed root (the plan's
//! `rule_base` joined with the path relative to the source), without a
//! leading `/`: `usr/bin/*`, `**/*.so*`. `*` does not cross `/`; `**`
//! does.
//!
//! `Skip` applies to every kind of entry (a skipped directory is not
//! descended into). `Link` and `RelativeLink` apply to regular files;
//! directories, symlinks and special files they match are copied as
//! usual.

use std::path::{Component, Path, PathBuf};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::error::{Error, Result};

/// What to do with a matched path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Copy it (the default).
    Copy,
    /// Replace the file with an absolute symlink to `prefix/path`, e.g.
    /// prefix `/system` turns `usr/bin/ls` into a link to
    /// `/system/usr/bin/ls`.
    Link(PathBuf),
    /// Replace the file with a relative symlink to the same place, e.g.
    /// `usr/bin/ls` links to `../../system/usr/bin/ls`; it stays right when
    /// the root is looked at from outside (mounted elsewhere).
    RelativeLink(PathBuf),
    /// Leave it out (and, for a directory, everything in it).
    Skip,
}

/// One rule: a glob pattern and its action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Glob pattern, e.g. `usr/lib/**/*.so*`.
    pub pattern: String,
    /// What matching paths get.
    pub action: Action,
}

impl Rule {
    /// A rule.
    pub fn new(pattern: impl Into<String>, action: Action) -> Self {
        Rule {
            pattern: pattern.into(),
            action,
        }
    }
}

impl Rule {
    /// A skip rule from an exclude pattern, read as rsync reads one: a
    /// pattern without `/` matches a name at any depth (`*.log` drops
    /// `x.log` and `a/b/x.log`); one with `/` is anchored at the top
    /// (`/cache` and `var/cache` drop only that path). A trailing `/`
    /// is dropped first and matches files and directories alike. rsync's
    /// `dir/***` (the directory and everything in it) is `dir`, since
    /// nothing beneath a skipped directory is visited.
    pub fn exclude(pattern: &str) -> Rule {
        let p = pattern.trim_end_matches('/');
        let p = match p.strip_suffix("/***") {
            Some(dir) if !dir.trim_matches('/').is_empty() => dir,
            _ => p,
        };
        let glob = match p.strip_prefix('/') {
            Some(anchored) => anchored.trim_start_matches('/').to_string(),
            None if p.contains('/') => p.to_string(),
            None => format!("**/{p}"),
        };
        Rule {
            pattern: glob,
            action: Action::Skip,
        }
    }
}

/// The largest exclude file read ([`read_exclude_file`]).
pub const MAX_EXCLUDE_FILE: u64 = 16 << 20;

/// Exclude patterns from a list as rsync's `--exclude-from` reads one:
/// one pattern a line; blank lines and lines beginning with `#` or `;`
/// are comments. A line is taken as it is but for its line end.
pub fn exclude_patterns(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .filter(|l| !l.is_empty() && !l.starts_with(['#', ';']))
        .map(str::to_string)
        .collect()
}

/// The exclude patterns of the file at `path` ([`exclude_patterns`]); a
/// file that cannot be read, is not text, or is larger than
/// [`MAX_EXCLUDE_FILE`] is an error naming it.
pub fn read_exclude_file(path: &Path) -> Result<Vec<String>> {
    let kind = zinstall_core::foreign::Kind::Other {
        what: "an exclude file",
        cap: MAX_EXCLUDE_FILE,
    };
    let bytes = zinstall_core::foreign::read(
        path,
        zinstall_core::foreign::Follow::Yes,
        kind,
    )
    .map_err(|e| match e.problem {
        zinstall_core::foreign::Problem::TooLarge(_) => {
            Error::refused(path, crate::Refusal::TooLarge(MAX_EXCLUDE_FILE))
        }
        _ => Error::io(crate::Op::Read, path, e.into()),
    })?;
    let text = String::from_utf8(bytes).map_err(|e| {
        Error::io(
            crate::Op::Read,
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        )
    })?;
    Ok(exclude_patterns(&text))
}

/// Skip rules for exclude patterns ([`Rule::exclude`]); `None` for no
/// patterns. An empty pattern (or only `/`) excludes nothing and is an
/// error, as is one that does not compile.
pub fn excludes(
    patterns: &[String],
) -> Result<Option<std::sync::Arc<RuleSet>>> {
    if patterns.is_empty() {
        return Ok(None);
    }
    if let Some(p) = patterns.iter().find(|p| p.trim_matches('/').is_empty()) {
        return Err(Error::Rule {
            pattern: p.clone(),
            message: "an empty exclude pattern matches nothing".to_string(),
        });
    }
    // `***` is rsync's "this directory and all beneath it" only at the
    // end; anywhere else a glob would take it for `**` plus a literal
    // `*` and silently match nothing the user meant.
    if let Some(p) = patterns
        .iter()
        .find(|p| Rule::exclude(p).pattern.contains("***"))
    {
        return Err(Error::Rule {
            pattern: p.clone(),
            message: "`***` is understood only at the end, as `DIR/***` \
                      (DIR and everything in it)"
                .to_string(),
        });
    }
    let set = RuleSet::new(patterns.iter().map(|p| Rule::exclude(p))).map_err(
        |e| match e {
            // Name the pattern as the user wrote it.
            Error::Rule { pattern, message } => Error::Rule {
                pattern: patterns
                    .iter()
                    .find(|p| Rule::exclude(p).pattern == pattern)
                    .cloned()
                    .unwrap_or(pattern),
                message,
            },
            e => e,
        },
    )?;
    Ok(Some(std::sync::Arc::new(set)))
}

/// An ordered, compiled list of rules.
#[derive(Clone, Debug)]
pub struct RuleSet {
    set: GlobSet,
    actions: Vec<Action>,
}

impl RuleSet {
    /// Compiles `rules`; a bad pattern is an error naming it. Link
    /// prefixes must be absolute.
    pub fn new(rules: impl IntoIterator<Item = Rule>) -> Result<Self> {
        let mut b = GlobSetBuilder::new();
        let mut actions = Vec::new();
        for r in rules {
            let glob = GlobBuilder::new(&r.pattern)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| Error::Rule {
                    pattern: r.pattern.clone(),
                    message: e.kind().to_string(),
                })?;
            if let Action::Link(p) | Action::RelativeLink(p) = &r.action
                && !p.is_absolute()
            {
                return Err(Error::Rule {
                    pattern: r.pattern.clone(),
                    message: format!(
                        "link prefix {} is not absolute",
                        p.display()
                    ),
                });
            }
            b.add(glob);
            actions.push(r.action);
        }
        let set = b.build().map_err(|e| Error::Rule {
            pattern: String::new(),
            message: e.to_string(),
        })?;
        Ok(RuleSet { set, actions })
    }

    /// True if there are no rules (everything is copied).
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }

    /// The action for `path` (relative, as inside the installed root).
    /// `scratch` is reused between calls to avoid an allocation per path.
    pub fn action<'a>(
        &'a self,
        path: &Path,
        scratch: &mut Vec<usize>,
    ) -> &'a Action {
        if self.actions.is_empty() {
            return &Action::Copy;
        }
        self.set.matches_into(path, scratch);
        scratch
            .iter()
            .min()
            .and_then(|&i| self.actions.get(i))
            .unwrap_or(&Action::Copy)
    }
}

/// The symlink target that `action` gives the file at `path` (relative,
/// as inside the installed root), or `None` for `Copy`/`Skip`.
pub fn link_target(action: &Action, path: &Path) -> Option<PathBuf> {
    match action {
        Action::Link(prefix) => Some(prefix.join(path)),
        Action::RelativeLink(prefix) => {
            let depth = path
                .components()
                .filter(|c| matches!(c, Component::Normal(_)))
                .count()
                .saturating_sub(1);
            let mut t = PathBuf::new();
            for _ in 0..depth {
                t.push("..");
            }
            let inner = prefix.strip_prefix("/").unwrap_or(prefix);
            t.push(inner);
            t.push(path);
            Some(t)
        }
        Action::Copy | Action::Skip => None,
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn rules() -> RuleSet {
        RuleSet::new([
            Rule::new("usr/bin/keep", Action::Copy),
            Rule::new("usr/bin/*", Action::RelativeLink("/system".into())),
            Rule::new("**/*.so*", Action::Link("/system".into())),
            Rule::new("usr/lib/svc/manifest", Action::Skip),
        ])
        .unwrap()
    }

    #[test]
    fn first_match_wins_and_default_is_copy() {
        let r = rules();
        let mut s = Vec::new();
        let mut a = |p: &str| r.action(Path::new(p), &mut s).clone();
        assert_eq!(a("usr/bin/keep"), Action::Copy);
        assert_eq!(a("usr/bin/ls"), Action::RelativeLink("/system".into()));
        // `*` does not cross a slash.
        assert_eq!(a("usr/bin/sub/x"), Action::Copy);
        assert_eq!(a("usr/lib/libc.so.1"), Action::Link("/system".into()));
        assert_eq!(a("usr/lib/svc/manifest"), Action::Skip);
        assert_eq!(a("usr/share/doc"), Action::Copy);
    }

    #[test]
    fn targets() {
        let p = Path::new("usr/bin/ls");
        assert_eq!(
            link_target(&Action::RelativeLink("/system".into()), p).unwrap(),
            Path::new("../../system/usr/bin/ls")
        );
        assert_eq!(
            link_target(&Action::Link("/system".into()), p).unwrap(),
            Path::new("/system/usr/bin/ls")
        );
        assert_eq!(link_target(&Action::Copy, p), None);
    }

    #[test]
    fn rsync_triple_star_excludes_the_directory_and_all_in_it() {
        let set = excludes(&["var/cache/***".to_string()]).unwrap().unwrap();
        let mut s = Vec::new();
        let mut a = |p: &str| set.action(Path::new(p), &mut s).clone();
        // The directory is skipped, so nothing beneath it is visited.
        assert_eq!(a("var/cache"), Action::Skip);
        assert_eq!(a("var/cached"), Action::Copy);
        let set = excludes(&["*.d/***".to_string()]).unwrap().unwrap();
        let mut a = |p: &str| set.action(Path::new(p), &mut s).clone();
        assert_eq!(a("etc/rc.d"), Action::Skip);
        let e = excludes(&["a/***/b".to_string()]).unwrap_err();
        assert!(e.to_string().contains("a/***/b"), "{e}");
    }

    #[test]
    fn bad_pattern_and_relative_prefix_are_errors() {
        let e =
            RuleSet::new([Rule::new("usr/[bin", Action::Copy)]).unwrap_err();
        assert!(e.to_string().contains("usr/[bin"), "{e}");
        let e = RuleSet::new([Rule::new("x", Action::Link("rel".into()))])
            .unwrap_err();
        assert!(e.to_string().contains("not absolute"), "{e}");
    }
}
