//! The install profile (TOML): what a root is made of.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use zinstall_engine::{Action, Rule, RuleSet};

use crate::owners::{Owners, RawOwners};

/// The zone profile (`etc/zinstall/profile.toml`): a sparse illumos zone.
pub const ZONE: &str = include_str!("../../../../etc/zinstall/profile.toml");

/// The Linux profile (`etc/zinstall/profile-linux.toml`): a merged-/usr
/// Linux root filesystem.
pub const LINUX: &str =
    include_str!("../../../../etc/zinstall/profile-linux.toml");

/// The system's profile.
pub const DEFAULT_PATH: &str = zinstall_core::paths::PROFILE;

/// The install log, unless the profile names another: in a directory of
/// root's alone (made when missing), so that nobody else can plant a
/// link or a file where root appends.
pub const DEFAULT_LOG: &str = zinstall_core::paths::INSTALL_LOG;

/// How the built-in default profile is named in messages.
pub const BUILT_IN: &str = "(built-in default profile)";

/// This platform's profile, which the packages install as
/// [`DEFAULT_PATH`] and which is used when that file does not exist; the
/// other is installed beside it as [`ALTERNATIVE_PATH`].
#[cfg(any(target_os = "illumos", target_os = "solaris"))]
pub const DEFAULT: &str = ZONE;
/// This platform's profile, which the packages install as
/// [`DEFAULT_PATH`] and which is used when that file does not exist; the
/// other is installed beside it as [`ALTERNATIVE_PATH`].
#[cfg(not(any(target_os = "illumos", target_os = "solaris")))]
pub const DEFAULT: &str = LINUX;

/// Where the packages install the other platform's profile.
#[cfg(any(target_os = "illumos", target_os = "solaris"))]
pub const ALTERNATIVE_PATH: &str = "/etc/zinstall/profile-linux.toml";
/// Where the packages install the other platform's profile.
#[cfg(not(any(target_os = "illumos", target_os = "solaris")))]
pub const ALTERNATIVE_PATH: &str = "/etc/zinstall/profile-zone.toml";

/// What [`DEFAULT`] and the profile at [`ALTERNATIVE_PATH`] lay out, for
/// messages.
#[cfg(any(target_os = "illumos", target_os = "solaris"))]
pub const PURPOSES: (&str, &str) =
    ("a sparse illumos zone", "a Linux root filesystem");
/// What [`DEFAULT`] and the profile at [`ALTERNATIVE_PATH`] lay out, for
/// messages.
#[cfg(not(any(target_os = "illumos", target_os = "solaris")))]
pub const PURPOSES: (&str, &str) =
    ("a Linux root filesystem", "a sparse illumos zone");

/// What a user whose install failed on the default profile should know:
/// which profile that was, and the other one (`shown` is how the profile
/// names itself, [`Profile::path`]).
pub fn default_hint(shown: &Path) -> String {
    let (this, other) = PURPOSES;
    // The other profile is named as a file to give only where it is: it
    // exists where the package was installed, not in a build tree.
    let alternative = if Path::new(ALTERNATIVE_PATH).exists() {
        format!("use --profile {ALTERNATIVE_PATH}")
    } else {
        format!(
            "write a profile and give it with --profile (there is no \
             {ALTERNATIVE_PATH}, which the packages install)"
        )
    };
    if shown == Path::new(BUILT_IN) {
        return format!(
            "the profile was the built-in default (there is no \
             {DEFAULT_PATH}), for {this}; for {other} {alternative} (see \
             zinstall(5))"
        );
    }
    format!(
        "the profile was the default, {}; the packages install it for \
         {this}; for {other} {alternative} (see zinstall(5))",
        shown.display()
    )
}

/// A parsed, checked profile.
#[derive(Clone, Debug)]
pub struct Profile {
    /// Where it was read from (for messages).
    pub path: PathBuf,
    /// The root the trees are copied from.
    pub source_root: PathBuf,
    /// Trees to replicate, relative to `source_root`.
    pub trees: Vec<PathBuf>,
    /// The structured log.
    pub log: PathBuf,
    /// Link and prune rules, compiled.
    pub rules: Arc<RuleSet>,
    /// The rules as written (for the log).
    pub rule_count: usize,
    /// Baseline archive name and where to look for it.
    pub baseline: Option<Baseline>,
    /// Host files copied in at the end.
    pub host_files: Vec<PathBuf>,
    /// Symlinks made in the root before the trees: path, target.
    pub links: Vec<(PathBuf, PathBuf)>,
    /// Empty directories (mount points) made in the root before the
    /// trees: path, mode.
    pub dirs: Vec<(PathBuf, u32)>,
    /// Bound on what an archive may unpack to.
    pub max_archive_bytes: u64,
    /// Whether archives may make device nodes.
    pub allow_devices: bool,
    /// An install given images lays them over what the profile makes
    /// of the host (trees, links, mount points, baseline, host files):
    /// the zone brand's way. When false, an install given images lays
    /// out the images alone, as a Linux user giving an image expects;
    /// the profile's host parts serve installs given no image. `None`:
    /// the profile does not say ([`Profile::lays_images_over_host`]).
    pub images_over_host: Option<bool>,
    /// The trust policy (containers-policy.json(5)) images pulled for
    /// this profile's installs must satisfy, unless `--policy` names
    /// another; `None`: the system's.
    pub policy: Option<PathBuf>,
    /// Who owns each path at an update (`[update]`).
    pub owners: Arc<Owners>,
}

impl Profile {
    /// This profile as an install given images uses it: unchanged when
    /// [`images_over_host`](Profile::images_over_host), else without its
    /// host trees, links, mount points, baseline and host files.
    pub fn for_images(&self) -> Profile {
        if self.lays_images_over_host() {
            return self.clone();
        }
        Profile {
            trees: Vec::new(),
            baseline: None,
            host_files: Vec::new(),
            links: Vec::new(),
            dirs: Vec::new(),
            ..self.clone()
        }
    }

    /// Whether images go over the host's parts: as the profile says, else
    /// as the zone brand does on illumos, and alone elsewhere.
    pub fn lays_images_over_host(&self) -> bool {
        self.images_over_host
            .unwrap_or_else(default_images_over_host)
    }

    /// The profile as the zone brand's hook uses it: images over the
    /// host's parts unless the profile says otherwise, whatever the
    /// platform (zoneadm installs a zone, not an image).
    pub fn for_zone_brand(mut self) -> Profile {
        self.images_over_host.get_or_insert(true);
        self
    }

    /// True if the profile makes anything of the host.
    pub fn has_host_parts(&self) -> bool {
        !self.trees.is_empty()
            || self.baseline.is_some()
            || !self.host_files.is_empty()
            || !self.links.is_empty()
            || !self.dirs.is_empty()
    }
}

/// Where the baseline comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Baseline {
    /// The archive's file name.
    pub file: String,
    /// Directories searched in order.
    pub search: Vec<PathBuf>,
    /// Whether a missing baseline is an error.
    pub required: bool,
}

impl Baseline {
    /// The first `search/file` that exists.
    pub fn find(&self) -> Option<PathBuf> {
        self.search
            .iter()
            .map(|d| d.join(&self.file))
            .find(|p| p.is_file())
    }
}

/// A profile that cannot be used: the file, and what is wrong.
#[derive(Debug)]
pub struct ProfileError {
    /// The profile file.
    pub path: PathBuf,
    /// The key or line at fault, and why.
    pub message: String,
    /// Where the text does not parse as a profile, when that is the
    /// error: shown with the line and a caret.
    pub syntax: Option<Box<zinstall_engine::Syntax>>,
}

impl ProfileError {
    fn new(path: &Path, message: String) -> Self {
        ProfileError {
            path: path.to_path_buf(),
            message,
            syntax: None,
        }
    }
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.syntax {
            Some(s) => write!(f, "profile {s}"),
            None => {
                write!(f, "profile {}: {}", self.path.display(), self.message)
            }
        }
    }
}

impl std::error::Error for ProfileError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default = "default_source_root")]
    source_root: PathBuf,
    #[serde(default = "default_trees")]
    trees: Vec<PathBuf>,
    #[serde(default = "default_log")]
    log: PathBuf,
    #[serde(default = "default_max")]
    max_archive_bytes: u64,
    #[serde(default)]
    allow_devices: bool,
    images_over_host: Option<bool>,
    policy: Option<PathBuf>,
    #[serde(default, rename = "rule")]
    rules: Vec<RawRule>,
    #[serde(default)]
    prune: RawPrune,
    baseline: Option<RawBaseline>,
    #[serde(default)]
    host_files: RawHostFiles,
    #[serde(default, rename = "link")]
    links: Vec<RawLink>,
    #[serde(default, rename = "dir")]
    dirs: Vec<RawDir>,
    #[serde(default)]
    update: RawOwners,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    path: PathBuf,
    target: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDir {
    path: PathBuf,
    mode: u32,
}

/// A relative path of plain components, not empty.
fn plain_relative(p: &Path) -> bool {
    !p.as_os_str().is_empty()
        && p.components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    pattern: String,
    action: String,
    prefix: Option<PathBuf>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPrune {
    #[serde(default)]
    paths: Vec<String>,
    list_file: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBaseline {
    file: String,
    #[serde(default)]
    search: Vec<PathBuf>,
    #[serde(default)]
    required: bool,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHostFiles {
    #[serde(default)]
    paths: Vec<PathBuf>,
}

fn default_source_root() -> PathBuf {
    PathBuf::from("/")
}

fn default_trees() -> Vec<PathBuf> {
    ["usr", "lib", "sbin"].iter().map(PathBuf::from).collect()
}

fn default_log() -> PathBuf {
    PathBuf::from(DEFAULT_LOG)
}

/// The zone brand keeps its baseline and replicated trees under the
/// images it is given; a Linux install of an image is the image.
fn default_images_over_host() -> bool {
    cfg!(any(target_os = "illumos", target_os = "solaris"))
}

fn default_max() -> u64 {
    zinstall_archive::tar::DEFAULT_MAX_TOTAL_BYTES
}

/// The most a profile may hold; shipped ones are a few KiB.
pub const MAX_PROFILE_BYTES: u64 = 1 << 20;
/// The most a prune list file may hold (a path per line).
pub const MAX_LIST_BYTES: u64 = 16 << 20;

/// Reads a regular file of at most `max` bytes as UTF-8. A FIFO, a
/// device (`/dev/zero` never ends) or a larger file is refused rather
/// than read without end.
fn read_bounded(path: &Path, max: u64) -> std::io::Result<String> {
    let kind = zinstall_core::foreign::Kind::Other {
        what: "a profile or a list it names",
        cap: max,
    };
    let follow = zinstall_core::foreign::Follow::Yes;
    Ok(zinstall_core::foreign::read_to_string(path, follow, kind)?)
}

impl Profile {
    /// Reads `path`; the built-in default if it is the system profile
    /// and does not exist.
    pub fn load(path: &Path) -> Result<Profile, ProfileError> {
        let err = |message: String| ProfileError::new(path, message);
        match read_bounded(path, MAX_PROFILE_BYTES) {
            Ok(text) => Self::parse(path, &text),
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    && path == Path::new(DEFAULT_PATH) =>
            {
                Self::parse(Path::new(BUILT_IN), DEFAULT)
            }
            Err(e) => Err(err(format!("read: {e}"))),
        }
    }

    /// Parses and checks a profile's text.
    pub fn parse(path: &Path, text: &str) -> Result<Profile, ProfileError> {
        let err = |message: String| ProfileError::new(path, message);
        let raw: Raw = toml::from_str(text).map_err(|e| ProfileError {
            syntax: Some(Box::new(zinstall_engine::Syntax::at(
                path,
                text,
                e.span(),
                e.message(),
            ))),
            ..err(e.message().to_string())
        })?;
        check_paths(path, &raw)?;
        // Prune rules first: a pruned path is skipped whatever else matches.
        let mut rules = Vec::new();
        let mut prune = raw.prune.paths.clone();
        if let Some(list) = &raw.prune.list_file {
            prune.extend(prune_list(path, list)?);
        }
        for p in &prune {
            let p = p.trim_matches('/');
            rules.push(Rule::new(globset::escape(p), Action::Skip));
        }
        for (i, r) in raw.rules.iter().enumerate() {
            rules.push(rule(path, i, r)?);
        }
        let owners =
            Owners::from_raw(raw.update).map_err(|e| err(e.to_string()))?;
        let rule_count = rules.len();
        let rules =
            RuleSet::new(rules).map_err(|e| err(format!("rule: {e}")))?;
        Ok(Profile {
            path: path.to_path_buf(),
            source_root: raw.source_root,
            trees: raw.trees,
            log: raw.log,
            rules: Arc::new(rules),
            rule_count,
            baseline: raw.baseline.map(|b| Baseline {
                file: b.file,
                search: b.search,
                required: b.required,
            }),
            host_files: raw.host_files.paths,
            links: raw.links.into_iter().map(|l| (l.path, l.target)).collect(),
            dirs: raw.dirs.into_iter().map(|d| (d.path, d.mode)).collect(),
            max_archive_bytes: raw.max_archive_bytes,
            allow_devices: raw.allow_devices,
            images_over_host: raw.images_over_host,
            policy: raw.policy,
            owners: Arc::new(owners),
        })
    }
}

/// Checks that the trees, links and dirs of the profile at `path` name
/// plain relative paths, and the dirs' modes.
fn check_paths(path: &Path, raw: &Raw) -> Result<(), ProfileError> {
    let err = |message: String| ProfileError::new(path, message);
    for (i, t) in raw.trees.iter().enumerate() {
        let bad = t.is_absolute()
            || t.components()
                .any(|c| !matches!(c, std::path::Component::Normal(_)));
        if bad || t.as_os_str().is_empty() {
            return Err(err(format!(
                "trees[{i}] = {:?}: must be a relative path without ..",
                t
            )));
        }
    }
    for (i, l) in raw.links.iter().enumerate() {
        if !plain_relative(&l.path) {
            return Err(err(format!(
                "link[{i}].path = {:?}: must be a relative path without ..",
                l.path
            )));
        }
        if l.target.as_os_str().is_empty() {
            return Err(err(format!("link[{i}].target is empty")));
        }
    }
    for (i, d) in raw.dirs.iter().enumerate() {
        if !plain_relative(&d.path) {
            return Err(err(format!(
                "dir[{i}].path = {:?}: must be a relative path without ..",
                d.path
            )));
        }
        if d.mode > 0o7777 {
            return Err(err(format!(
                "dir[{i}].mode = {:#o}: more than 0o7777",
                d.mode
            )));
        }
    }
    Ok(())
}

/// The paths `list` (a profile's `prune.list_file`) names, one a line;
/// none if it does not exist.
fn prune_list(path: &Path, list: &Path) -> Result<Vec<String>, ProfileError> {
    let err = |message: String| ProfileError::new(path, message);
    let mut out = Vec::new();
    match read_bounded(list, MAX_LIST_BYTES) {
        Ok(text) => {
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                if line.starts_with('/') || line.split('/').any(|c| c == "..") {
                    return Err(err(format!(
                        "prune.list_file {}:{}: {line:?} must be relative, without ..",
                        list.display(),
                        n + 1
                    )));
                }
                out.push(line.to_string());
            }
        }
        // The list is optional: a system may have none.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(err(format!(
                "prune.list_file {}: {e}",
                list.display()
            )));
        }
    }
    Ok(out)
}

/// The profile's `i`th rule.
fn rule(path: &Path, i: usize, r: &RawRule) -> Result<Rule, ProfileError> {
    let err = |message: String| ProfileError::new(path, message);
    let need_prefix = |a: fn(PathBuf) -> Action| match &r.prefix {
        Some(p) => Ok(a(p.clone())),
        None => Err(err(format!(
            "rule[{i}]: action {:?} needs a prefix",
            r.action
        ))),
    };
    let action = match r.action.as_str() {
        "copy" => Action::Copy,
        "skip" => Action::Skip,
        "link" => need_prefix(Action::Link)?,
        "relative-link" => need_prefix(Action::RelativeLink)?,
        other => {
            return Err(err(format!(
                "rule[{i}].action = {other:?}: must be copy, link, relative-link or skip"
            )));
        }
    };
    Ok(Rule::new(r.pattern.clone(), action))
}

#[cfg(test)]
mod test {
    use super::*;

    /// A device, a FIFO, an oversized file: refused, never read without
    /// end, and the error names the file.
    #[test]
    fn profiles_and_lists_are_read_bounded() {
        let e = Profile::load(Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("/dev/zero"), "{e}");
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo {}", fifo.display());
        let e = Profile::load(&fifo).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let big = d.path().join("big.toml");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(MAX_PROFILE_BYTES + 1).unwrap();
        let e = Profile::load(&big).unwrap_err();
        assert!(e.to_string().contains("larger than"), "{e}");
        let text =
            format!("trees = []\n[prune]\nlist_file = {:?}\n", "/dev/zero");
        let e = Profile::parse(Path::new("p.toml"), &text).unwrap_err();
        assert!(e.to_string().contains("prune.list_file /dev/zero"), "{e}");
    }

    #[test]
    fn the_shipped_profiles_parse() {
        let p = Profile::parse(Path::new("zone"), ZONE).unwrap();
        assert_eq!(
            p.trees,
            [PathBuf::from("usr"), "lib".into(), "sbin".into()]
        );
        let mut s = Vec::new();
        assert_eq!(
            p.rules.action(Path::new("usr/bin/ls"), &mut s),
            &Action::Link("/system".into())
        );
        assert_eq!(
            p.rules.action(Path::new("lib/svc/manifest"), &mut s),
            &Action::Skip
        );
        assert_eq!(
            p.rules.action(Path::new("usr/lib/libc.so.1"), &mut s),
            &Action::Link("/system".into())
        );
        assert_eq!(
            p.rules.action(Path::new("lib/svc/method/x"), &mut s),
            &Action::Copy
        );
        let l = Profile::parse(Path::new("linux"), LINUX).unwrap();
        for (name, target) in [
            ("bin", "usr/bin"),
            ("sbin", "usr/sbin"),
            ("lib", "usr/lib"),
            ("lib64", "usr/lib64"),
        ] {
            assert!(
                l.links.contains(&(name.into(), target.into())),
                "{name} -> {target}"
            );
        }
        for (d, mode) in [
            ("dev", 0o755),
            ("proc", 0o555),
            ("sys", 0o555),
            ("run", 0o755),
            ("tmp", 0o1777),
        ] {
            assert!(l.dirs.contains(&(d.into(), mode)), "{d} {mode:o}");
        }
    }

    #[test]
    fn unknown_keys_bad_globs_and_actions_name_the_file_and_key() {
        let e = Profile::parse(Path::new("/p.toml"), "sourceroot = \"/\"\n")
            .unwrap_err();
        let s = e.to_string();
        assert!(
            s.starts_with("profile /p.toml:1:1: unknown field `sourceroot`")
                && s.ends_with("\n1 | sourceroot = \"/\"\n  | ^^^^^^^^^^"),
            "{s}"
        );
        let e = Profile::parse(
            Path::new("/p.toml"),
            "[[rule]]\npattern = \"usr/[bin\"\naction = \"copy\"\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("usr/[bin"), "{e}");
        let e = Profile::parse(
            Path::new("/p.toml"),
            "[[rule]]\npattern = \"x\"\naction = \"move\"\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("rule[0].action"), "{e}");
        let e = Profile::parse(
            Path::new("/p.toml"),
            "[[rule]]\npattern = \"x\"\naction = \"link\"\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("needs a prefix"), "{e}");
        let e = Profile::parse(Path::new("/p.toml"), "trees = [\"../etc\"]\n")
            .unwrap_err();
        assert!(e.to_string().contains("trees[0]"), "{e}");
        let e = Profile::parse(
            Path::new("/p.toml"),
            "[baseline]\nfile = \"b\"\nwhere = []\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("where"), "{e}");
        let e = Profile::parse(
            Path::new("/p.toml"),
            "[[link]]\npath = \"../bin\"\ntarget = \"usr/bin\"\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("link[0].path"), "{e}");
        let e = Profile::parse(
            Path::new("/p.toml"),
            "[[dir]]\npath = \"tmp\"\nmode = 0o17777\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("dir[0].mode"), "{e}");
    }
}
