//! The wire protocol: JSON lines over a Unix stream socket.
//!
//! A client writes one request per line and reads reply lines. A request:
//!
//! ```json
//! {"v":1,"op":"copy","args":{"src":"/srv/a","dst":"/srv/b"},"detach":false}
//! ```
//!
//! `v` is the protocol version ([`VERSION`]); a daemon refuses others.
//! `op` names the operation ([`Call`]), `args` its arguments (unknown
//! fields are refused, so a typo never goes unnoticed), `detach` keeps a
//! long job running when its client goes away. A line is at most
//! [`MAX_LINE`] bytes and nests at most [`MAX_DEPTH`] arrays and objects
//! deep; it is read straight into the typed request, so a line that is
//! not one is refused at its first wrong byte, field or type, without
//! anything being built from the rest. Client text an error quotes (an
//! operation's name, a path, a field) is cut at [`MAX_ECHO`] bytes.
//!
//! Replies ([`Reply`]), one per line, each with `v` and `reply`: a quick
//! operation gets `ok` (with its `result`) or `error`. A long one (copy,
//! install, uninstall, provision, cache gc) gets `accepted` with the job's
//! id at once, then `progress` (about four a second) and `event` lines,
//! and ends with `done` (its `result`) or `error`. An error carries
//! `kind`, and where there is one the `op` and `path` that failed.
//! Requests on one connection are served in turn.

use std::path::{Component, Path, PathBuf};

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use crate::replies::{
    CacheEntryReply, CopyReply, GcEntryDecision, GcReply, GuestInfo,
    InstallReply, JobInfo, NoticeInfo, ProvisionReply, ReplacedInfo,
    StoreGcInfo, StoreImageDecision, ZonepathReply, reply_value,
};

/// The protocol version this build speaks.
pub const VERSION: u32 = 1;

/// The longest request line accepted, newline included. The largest
/// request a client makes is a copy with its exclude patterns; 256 KiB
/// holds thousands of them, and bounds what a connection costs.
pub const MAX_LINE: usize = 256 << 10;

/// How deep arrays and objects may nest in a request: none needs more
/// than three levels.
pub const MAX_DEPTH: usize = 32;

/// The most bytes of a client's text (an operation's name, a path)
/// quoted back in a reply or the log.
pub const MAX_ECHO: usize = 200;

/// The most bytes of a parse error's message, which quotes client text
/// amid its own words.
const MAX_DETAIL: usize = 512;

/// `s` cut at `max` bytes on a character boundary, the cut marked with
/// `…` and the original length, so that nothing a client sends is
/// repeated whole into a reply or the log.
pub fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…({} bytes)", &s[..end], s.len())
}

/// A path cut as [`clip`] cuts text (shown lossily: it is for reading).
pub fn clip_path(p: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    if p.as_os_str().len() <= MAX_ECHO {
        return p.to_path_buf();
    }
    let shown = String::from_utf8_lossy(p.as_os_str().as_bytes());
    PathBuf::from(clip(&shown, MAX_ECHO))
}

/// One parsed request.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// What to do.
    pub call: Call,
    /// Keep the job running if the client disconnects.
    pub detach: bool,
}

/// The operations.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    /// The daemon's version and protocol.
    Version,
    /// Copy a tree (a job).
    Copy(CopyArgs),
    /// Install a zone root or rootfs (a job).
    Install(InstallArgs),
    /// Remove an installed root (a job).
    Uninstall(UninstallArgs),
    /// Bring an installed root in line with its source (a job).
    Update(UpdateArgs),
    /// Switch an updated root back to the one before (a job).
    Rollback(RollbackArgs),
    /// Make guests from one cached image (a job).
    Provision(ProvisionArgs),
    /// The cache's entries.
    CacheList,
    /// Collect the cache (a job).
    CacheGc(GcArgs),
    /// Every job the caller may see.
    Jobs,
    /// One job.
    Status(JobRef),
    /// Cancel a job.
    Cancel(JobRef),
}

impl Call {
    /// The operation's name on the wire and in the configuration.
    pub fn name(&self) -> &'static str {
        match self {
            Call::Version => "version",
            Call::Copy(_) => "copy",
            Call::Install(_) => "install",
            Call::Uninstall(_) => "uninstall",
            Call::Update(_) => "update",
            Call::Rollback(_) => "rollback",
            Call::Provision(_) => "provision",
            Call::CacheList => "cache-list",
            Call::CacheGc(_) => "cache-gc",
            Call::Jobs => "jobs",
            Call::Status(_) => "status",
            Call::Cancel(_) => "cancel",
        }
    }

    /// Every operation's name.
    pub const NAMES: &'static [&'static str] = &[
        "version",
        "copy",
        "install",
        "uninstall",
        "update",
        "rollback",
        "provision",
        "cache-list",
        "cache-gc",
        "jobs",
        "status",
        "cancel",
    ];

    /// Whether the operation runs as a job.
    pub fn is_job(&self) -> bool {
        matches!(
            self,
            Call::Copy(_)
                | Call::Install(_)
                | Call::Uninstall(_)
                | Call::Update(_)
                | Call::Rollback(_)
                | Call::Provision(_)
                | Call::CacheGc(_)
        )
    }

    /// The paths the request names, with what it does to each: checked
    /// against a caller's grants.
    /// Images named by registry reference are not paths, and not among
    /// these.
    pub fn paths(&self) -> Vec<&PathBuf> {
        match self {
            Call::Copy(a) => vec![&a.src, &a.dst],
            Call::Install(a) => {
                let mut v = vec![&a.zonepath];
                v.extend(a.images.iter().filter(|p| !is_reference(p)));
                v.extend(a.profile.iter());
                v.extend(a.source_root.iter());
                v.extend(a.log.iter());
                v
            }
            Call::Uninstall(a) => vec![&a.zonepath],
            Call::Update(a) => {
                let mut v = vec![&a.zonepath];
                v.extend(a.images.iter().filter(|p| !is_reference(p)));
                v.extend(a.profile.iter());
                v.extend(a.source_root.iter());
                v
            }
            Call::Rollback(a) => vec![&a.zonepath],
            Call::Provision(a) if is_reference(&a.image) => vec![&a.out],
            Call::Provision(a) => vec![&a.image, &a.out],
            _ => Vec::new(),
        }
    }

    /// The first path this call names that is relative or has `.` or `..`
    /// components. Whatever the caller, a path must mean one place, so a
    /// request naming such a path is refused before any grant is looked
    /// at.
    pub fn unclean_path(&self) -> Option<&Path> {
        self.paths()
            .into_iter()
            .find(|p| normalized(p).is_none())
            .map(PathBuf::as_path)
    }
}

/// `p` if it is absolute and has no `.` or `..` component (repeated and
/// trailing slashes are dropped).
pub fn normalized(p: &Path) -> Option<PathBuf> {
    if !p.is_absolute() {
        return None;
    }
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::RootDir => {}
            Component::Normal(n) => out.push(n),
            Component::CurDir | Component::ParentDir | Component::Prefix(_) => {
                return None;
            }
        }
    }
    // `components` hides a `.` in the middle: look at the bytes too.
    use std::os::unix::ffi::OsStrExt;
    if p.as_os_str()
        .as_bytes()
        .split(|b| *b == b'/')
        .any(|c| c == b"." || c == b"..")
    {
        return None;
    }
    Some(out)
}

/// Whether an image argument is a registry reference
/// (`REGISTRY/REPO:TAG`, `@sha256:...`), told by its text alone: the
/// daemon's paths are absolute, a reference never is.
pub fn is_reference(p: &Path) -> bool {
    !p.is_absolute()
        && p.to_str().is_some_and(|s| {
            s.starts_with("docker://")
                || zinstall_registry::Reference::looks_like(s)
        })
}

/// The most exclude patterns one request may carry: thousands of short
/// patterns in one line would otherwise cost many times the line in
/// memory (a string each) before the request is refused.
pub const MAX_EXCLUDES: usize = 4096;

/// Reads a list of patterns, refusing the one past [`MAX_EXCLUDES`]
/// before it is built.
fn bounded_excludes<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<String>, D::Error> {
    struct Patterns;
    impl<'de> serde::de::Visitor<'de> for Patterns {
        type Value = Vec<String>;
        fn expecting(
            &self,
            f: &mut std::fmt::Formatter<'_>,
        ) -> std::fmt::Result {
            write!(f, "a list of at most {MAX_EXCLUDES} patterns")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Vec<String>, A::Error> {
            let mut out = Vec::new();
            while let Some(p) = seq.next_element::<String>()? {
                if out.len() == MAX_EXCLUDES {
                    return Err(serde::de::Error::custom(format!(
                        "more than {MAX_EXCLUDES} exclude patterns"
                    )));
                }
                out.push(p);
            }
            Ok(out)
        }
    }
    d.deserialize_seq(Patterns)
}

/// `copy`: like `zinstall copy SRC DST`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CopyArgs {
    /// The source, absolute.
    pub src: PathBuf,
    /// The destination, absolute.
    pub dst: PathBuf,
    /// Copy into a non-empty destination.
    #[serde(default)]
    pub merge: bool,
    /// Flush the destination filesystem at the end.
    #[serde(default)]
    pub sync: bool,
    /// Skip what these exclude patterns match (as `--exclude` reads
    /// them: a name at any depth, or a path with a `/`); at most
    /// [`MAX_EXCLUDES`].
    #[serde(default, deserialize_with = "bounded_excludes")]
    pub exclude: Vec<String>,
    /// Skip special files that cannot be made for lack of privilege,
    /// with a notice (as `--skip-special`).
    #[serde(default)]
    pub skip_special: bool,
}

/// `install`: like `zinstall install ZONEPATH`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstallArgs {
    /// The zonepath, absolute; the root is `ZONEPATH/root`.
    pub zonepath: PathBuf,
    /// The zone's name (default: the zonepath's last component).
    #[serde(default)]
    pub zone: Option<String>,
    /// The profile (default: the daemon's).
    #[serde(default)]
    pub profile: Option<PathBuf>,
    /// Images applied in order.
    #[serde(default)]
    pub images: Vec<PathBuf>,
    /// Copy the trees from this root instead of the profile's.
    #[serde(default)]
    pub source_root: Option<PathBuf>,
    /// Write the install log here instead of the profile's path.
    #[serde(default)]
    pub log: Option<PathBuf>,
    /// The platform OCI images must be for (`OS/ARCH[/VARIANT]`;
    /// default: the daemon host's).
    #[serde(default)]
    pub platform: Option<String>,
}

/// `uninstall`: like `zinstall uninstall ZONEPATH`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UninstallArgs {
    /// The zonepath, absolute.
    pub zonepath: PathBuf,
    /// Remove a root that has content and no install marker.
    #[serde(default)]
    pub foreign: bool,
}

/// `update`: like `zinstall update --zonepath ZONEPATH`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateArgs {
    /// The zonepath of an installed root, absolute.
    pub zonepath: PathBuf,
    /// The profile (default: the daemon's).
    #[serde(default)]
    pub profile: Option<PathBuf>,
    /// The images the root was installed with.
    #[serde(default)]
    pub images: Vec<PathBuf>,
    /// Copy the trees from this root instead of the profile's.
    #[serde(default)]
    pub source_root: Option<PathBuf>,
    /// Overwrite the zone's changes; update a root without a manifest.
    #[serde(default)]
    pub force: bool,
    /// Say what would change; write nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// `rollback`: like `zinstall rollback --zonepath ZONEPATH`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollbackArgs {
    /// The zonepath, absolute.
    pub zonepath: PathBuf,
}

/// One path an update added, removed or changed, and what changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpdateChange {
    /// The path as the zone sees it (`/usr/...`).
    pub path: String,
    /// What changed (`content`, `mode`, `owner`, `times`, ...); empty
    /// for an addition or a removal.
    #[serde(default)]
    pub what: Vec<String>,
}

/// A path an update left as the zone has it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpdateKept {
    /// The path as the zone sees it.
    pub path: String,
    /// Why it was kept.
    pub why: String,
}

/// An update's counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UpdateCounts {
    /// Entries added.
    pub added: u64,
    /// Entries removed.
    pub removed: u64,
    /// Entries changed.
    pub changed: u64,
    /// Entries kept as the zone has them.
    pub kept: u64,
    /// Bytes of content written.
    pub bytes: u64,
    /// Entries shared with the old root or made without content.
    pub shared: u64,
}

/// What an update did (or, dry, would do): the reply of `update`, and
/// what `zinstall update --json` prints, wherever it ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpdateReply {
    /// The zonepath.
    pub zonepath: String,
    /// Nothing was written.
    pub dry_run: bool,
    /// An interrupted update or rollback finished or undone first.
    #[serde(default)]
    pub recovered: Option<String>,
    /// Entries added.
    pub added: Vec<UpdateChange>,
    /// Entries removed.
    pub removed: Vec<UpdateChange>,
    /// Entries changed.
    pub changed: Vec<UpdateChange>,
    /// Entries the zone changed, left as they are.
    pub kept: Vec<UpdateKept>,
    /// The counts.
    pub stats: UpdateCounts,
}

impl UpdateReply {
    /// The reply for `report`, an update of `zonepath`.
    pub fn of(
        zonepath: &Path,
        report: &zinstall_install::update::Report,
    ) -> UpdateReply {
        let lossy = |p: &Path| p.to_string_lossy().into_owned();
        let changes = |v: &[zinstall_install::update::Change]| {
            v.iter()
                .map(|c| UpdateChange {
                    path: lossy(&c.path),
                    what: c.what.iter().map(|w| w.to_string()).collect(),
                })
                .collect()
        };
        UpdateReply {
            zonepath: lossy(zonepath),
            dry_run: report.dry_run,
            recovered: report.recovered.map(str::to_string),
            added: changes(&report.added),
            removed: changes(&report.removed),
            changed: changes(&report.changed),
            kept: report
                .kept
                .iter()
                .map(|k| UpdateKept {
                    path: lossy(&k.path),
                    why: k.why.to_string(),
                })
                .collect(),
            stats: UpdateCounts {
                added: report.added.len() as u64,
                removed: report.removed.len() as u64,
                changed: report.changed.len() as u64,
                kept: report.kept.len() as u64,
                bytes: report.bytes,
                shared: report.shared,
            },
        }
    }
}

/// `provision`: like `zinstall provision IMAGE`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvisionArgs {
    /// The image, absolute.
    pub image: PathBuf,
    /// Where the guests go, absolute.
    pub out: PathBuf,
    /// How many guests.
    #[serde(default = "one")]
    pub count: usize,
    /// Guests are NAME-0 …
    #[serde(default = "guest")]
    pub name: String,
    /// Virtual size of disk guests, in bytes.
    #[serde(default)]
    pub size: Option<u64>,
    /// The image's expected SHA-256.
    #[serde(default)]
    pub sha256: Option<String>,
    /// Keep the image's hostname, machine-id and SSH host keys in
    /// directory guests.
    #[serde(default)]
    pub keep_identity: bool,
    /// Directory guests' hostname pattern (`{n}`, `{name}`); default
    /// the guest's name.
    #[serde(default)]
    pub hostname: Option<String>,
    /// `generate` (default), `first-boot` or `keep`.
    #[serde(default)]
    pub machine_id: Option<zinstall_provision::identity::MachineId>,
    /// `generate` (default), `remove` or `keep`.
    #[serde(default)]
    pub ssh_host_keys: Option<zinstall_provision::identity::HostKeys>,
    /// Replace guests already there.
    #[serde(default)]
    pub force: bool,
    /// The platform an OCI image must be for (`OS/ARCH[/VARIANT]`;
    /// default: the daemon host's).
    #[serde(default)]
    pub platform: Option<String>,
    /// The most an image may unpack or decompress to, and a registry
    /// blob may declare, in bytes (as `--max-archive-size`; default the
    /// CLI's, `zinstall_archive::tar::DEFAULT_MAX_TOTAL_BYTES`).
    #[serde(default)]
    pub max_archive_size: Option<u64>,
    /// Make the image's device nodes (provision is root's alone: it
    /// cannot be granted).
    #[serde(default)]
    pub allow_devices: bool,
}

fn one() -> usize {
    1
}

fn guest() -> String {
    "guest".into()
}

/// `cache-gc`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GcArgs {
    /// Say what would be removed, remove nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Keep the cache under this many bytes.
    #[serde(default)]
    pub max_size: Option<u64>,
    /// Let disk entries go whose recorded guests are found nowhere.
    #[serde(default)]
    pub release_missing: bool,
}

/// `status` and `cancel`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRef {
    /// The job's id.
    pub job: u64,
}

/// Why a request line was refused before it was run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadRequest {
    /// Not JSON, or not the request's shape.
    #[error("malformed request: {0}")]
    Malformed(String),
    /// Another protocol version.
    #[error(
        "protocol version {got} is not spoken here (this daemon speaks {VERSION})"
    )]
    Version {
        /// What the client sent.
        got: u64,
    },
    /// No such operation.
    #[error("unknown operation {0:?} (known: {known})", known = Call::NAMES.join(", "))]
    UnknownOp(String),
    /// The operation's arguments are wrong.
    #[error("bad arguments for {op}: {why}")]
    Args {
        /// The operation.
        op: String,
        /// What is wrong.
        why: String,
    },
    /// Longer than [`MAX_LINE`].
    #[error("request longer than {MAX_LINE} bytes")]
    TooLong,
    /// Arrays and objects nested deeper than [`MAX_DEPTH`].
    #[error("malformed request: nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
}

/// The request's envelope, read first: its arguments are checked for
/// JSON and skipped (nothing is built from them) until the operation
/// says what they must be.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    v: Version,
    op: String,
    #[serde(default, rename = "args")]
    _args: Option<IgnoredAny>,
    #[serde(default)]
    detach: bool,
}

/// The same line read again for the arguments, typed by the operation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireArgs<T> {
    #[serde(rename = "v")]
    _v: IgnoredAny,
    #[serde(rename = "op")]
    _op: IgnoredAny,
    #[serde(default = "Option::default")]
    args: Option<T>,
    #[serde(default, rename = "detach")]
    _detach: IgnoredAny,
}

/// Arguments of an operation that takes none: `{}` only.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

/// `v`: a whole number, or the request is malformed.
struct Version(u64);

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Version;
            fn expecting(
                &self,
                f: &mut std::fmt::Formatter<'_>,
            ) -> std::fmt::Result {
                f.write_str("a protocol version number")
            }
            fn visit_u64<E: serde::de::Error>(
                self,
                v: u64,
            ) -> Result<Version, E> {
                Ok(Version(v))
            }
        }
        d.deserialize_u64(V)
    }
}

/// Whether arrays and objects in `line` nest deeper than [`MAX_DEPTH`]:
/// one pass over the bytes, strings skipped, before the parser (whose
/// own limit is deeper) sees them.
fn too_deep(line: &[u8]) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in line {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

impl Request {
    /// Parses one request line (without its newline).
    pub fn parse(line: &[u8]) -> Result<Request, BadRequest> {
        let w = Request::envelope(line)?;
        let call = Request::arguments(line, &w.op)?;
        Ok(Request {
            call,
            detach: w.detach,
        })
    }

    /// The operation's name a line asks for (cut as [`clip`] cuts it),
    /// its envelope checked but not its arguments: what the daemon
    /// looks at before it spends anything on a caller that may ask for
    /// nothing but `version`.
    pub fn operation(line: &[u8]) -> Result<String, BadRequest> {
        Request::envelope(line).map(|w| clip(&w.op, MAX_ECHO))
    }

    fn envelope(line: &[u8]) -> Result<Wire, BadRequest> {
        if line.len() >= MAX_LINE {
            return Err(BadRequest::TooLong);
        }
        if too_deep(line) {
            return Err(BadRequest::TooDeep);
        }
        let w: Wire = serde_json::from_slice(line).map_err(|e| {
            let e = e.to_string();
            if e.starts_with("invalid type") && e.contains("protocol version") {
                BadRequest::Malformed(
                    "\"v\" must be a protocol version number".into(),
                )
            } else {
                BadRequest::Malformed(clip(&e, MAX_DETAIL))
            }
        })?;
        if w.v.0 != u64::from(VERSION) {
            return Err(BadRequest::Version { got: w.v.0 });
        }
        Ok(w)
    }

    /// The arguments of `op`, read from the line again now that their
    /// type is known.
    fn arguments(line: &[u8], op: &str) -> Result<Call, BadRequest> {
        fn typed<T: serde::de::DeserializeOwned>(
            op: &str,
            line: &[u8],
        ) -> Result<T, BadRequest> {
            let bad = |e: serde_json::Error| BadRequest::Args {
                op: op.into(),
                why: clip(&e.to_string(), MAX_DETAIL),
            };
            let w: WireArgs<T> = serde_json::from_slice(line).map_err(bad)?;
            match w.args {
                Some(a) => Ok(a),
                // Missing arguments are `{}`: the fields' defaults, or
                // the missing field named.
                None => serde_json::from_slice(b"{}").map_err(bad),
            }
        }
        let none = || -> Result<(), BadRequest> {
            typed::<NoArgs>(op, line).map(|_| ()).map_err(|_| {
                BadRequest::Args {
                    op: op.into(),
                    why: "takes no arguments".into(),
                }
            })
        };
        Ok(match op {
            "version" => none().map(|()| Call::Version)?,
            "copy" => Call::Copy(typed(op, line)?),
            "install" => Call::Install(typed(op, line)?),
            "uninstall" => Call::Uninstall(typed(op, line)?),
            "update" => Call::Update(typed(op, line)?),
            "rollback" => Call::Rollback(typed(op, line)?),
            "provision" => Call::Provision(typed(op, line)?),
            "cache-list" => none().map(|()| Call::CacheList)?,
            "cache-gc" => Call::CacheGc(typed(op, line)?),
            "jobs" => none().map(|()| Call::Jobs)?,
            "status" => Call::Status(typed(op, line)?),
            "cancel" => Call::Cancel(typed(op, line)?),
            _ => return Err(BadRequest::UnknownOp(clip(op, MAX_ECHO))),
        })
    }

    /// The request as one line (without its newline).
    pub fn to_line(&self) -> String {
        let args = match &self.call {
            Call::Version | Call::CacheList | Call::Jobs => json!({}),
            Call::Copy(a) => json!(a),
            Call::Install(a) => json!(a),
            Call::Uninstall(a) => json!(a),
            Call::Update(a) => json!(a),
            Call::Rollback(a) => json!(a),
            Call::Provision(a) => json!(a),
            Call::CacheGc(a) => json!(a),
            Call::Status(a) | Call::Cancel(a) => json!(a),
        };
        json!({
            "v": VERSION,
            "op": self.call.name(),
            "args": args,
            "detach": self.detach,
        })
        .to_string()
    }
}

/// What kind of failure a [`WireError`] is: what a client decides on
/// (retry later, ask for a grant, report a bug). On the wire, the
/// kebab-case name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// The request was malformed, or named a path that is not absolute
    /// and clean.
    Request,
    /// The caller is not granted the call.
    Denied,
    /// The daemon has no room for the connection or the job now.
    Busy,
    /// A system call failed (`op` and `path` say which).
    Io,
    /// The engine refused an input (a hostile archive, an unsafe path).
    Refused,
    /// The job was cancelled.
    Cancelled,
    /// An install, uninstall, update or rollback failed.
    Install,
    /// A provision failed.
    Provision,
    /// No such job.
    NotFound,
    /// The daemon failed in a way that is its own fault.
    Internal,
    /// A kind this client does not know (a newer daemon's).
    #[serde(other)]
    Unknown,
}

impl ErrorKind {
    /// The name the wire carries.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Request => "request",
            ErrorKind::Denied => "denied",
            ErrorKind::Busy => "busy",
            ErrorKind::Io => "io",
            ErrorKind::Refused => "refused",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Install => "install",
            ErrorKind::Provision => "provision",
            ErrorKind::NotFound => "not-found",
            ErrorKind::Internal => "internal",
            ErrorKind::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failure as the wire carries it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// The operation that failed, when a system call did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    /// The path it failed on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// The whole message, as the CLI prints it.
    pub message: String,
    /// Every error of a copy that met several, first first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

impl WireError {
    /// An error with only a kind and a message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        WireError {
            kind,
            op: None,
            path: None,
            message: message.into(),
            errors: Vec::new(),
        }
    }

    /// From the engine's error.
    pub fn from_copier(e: &copier::Error) -> Self {
        let kind = match e {
            copier::Error::Cancelled { .. } => ErrorKind::Cancelled,
            copier::Error::Io { .. } => ErrorKind::Io,
            _ => ErrorKind::Refused,
        };
        WireError {
            kind,
            op: e.op().map(|o| o.as_str().to_string()),
            path: Some(e.path().to_path_buf()),
            message: e.to_string(),
            errors: Vec::new(),
        }
    }

    /// From a copy that stopped on errors.
    pub fn from_failure(f: &copier::Failure) -> Self {
        let mut w = f
            .first()
            .map(Self::from_copier)
            .unwrap_or_else(|| Self::new(ErrorKind::Internal, "copy failed"));
        w.message = f.to_string();
        w.errors = f.errors.iter().map(|e| e.to_string()).collect();
        w
    }
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for WireError {}

/// Progress of a job.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProgressInfo {
    /// What the job is doing now (`queued`, `copy`, `unpack`, `provision`,
    /// …).
    pub phase: String,
    /// Entries done.
    pub entries: u64,
    /// Data bytes done.
    pub bytes: u64,
    /// Bytes per second over the last interval.
    pub rate: u64,
    /// Since the job started.
    pub elapsed_ms: u64,
}

/// One reply line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "kebab-case")]
pub enum Reply {
    /// A quick operation's result.
    Ok {
        /// The protocol version.
        v: u32,
        /// What it returns.
        result: Value,
    },
    /// A job was started.
    Accepted {
        /// The protocol version.
        v: u32,
        /// Its id.
        job: u64,
    },
    /// A job's progress.
    Progress {
        /// The protocol version.
        v: u32,
        /// The job.
        job: u64,
        /// Where it is.
        #[serde(flatten)]
        progress: ProgressInfo,
    },
    /// Something a job reports (an install's steps, a guest made).
    Event {
        /// The protocol version.
        v: u32,
        /// The job.
        job: u64,
        /// The text the CLI prints for it.
        message: String,
    },
    /// A job's result.
    Done {
        /// The protocol version.
        v: u32,
        /// The job.
        job: u64,
        /// What it returns.
        result: Value,
    },
    /// A refusal, or a job's failure.
    Error {
        /// The protocol version.
        v: u32,
        /// The job, if one was started.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<u64>,
        /// What went wrong.
        error: WireError,
    },
}

impl Reply {
    /// The reply as one line (without its newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| {
            json!({"v": VERSION, "reply": "error",
                   "error": {"kind": "internal", "message": e.to_string()}})
            .to_string()
        })
    }

    /// An error reply not tied to a job.
    pub fn error(error: WireError) -> Reply {
        Reply::Error {
            v: VERSION,
            job: None,
            error,
        }
    }
}

/// An engine run's counts and timings, as `--json` and the log show
/// them (the serialized [`copier::Stats`]).
pub fn stats_json(s: &copier::Stats) -> Value {
    // Numbers, strings and arrays of them: nothing that cannot become a
    // JSON value.
    serde_json::to_value(s).unwrap_or(Value::Null)
}

/// [`stats_json`] read back, for a client printing a daemon's result as
/// it prints its own. Missing fields are zero; a field of the wrong type
/// is an error naming it.
pub fn stats_from_json(v: &Value) -> Result<copier::Stats, serde_json::Error> {
    copier::Stats::deserialize(v)
}

/// What was noticed and not kept, as `--json` shows it.
pub fn notices_json(n: &[copier::Notice]) -> Value {
    serde_json::to_value(NoticeInfo::of(n)).unwrap_or(Value::Null)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn requests_round_trip_and_bad_ones_say_why() {
        let r = Request {
            call: Call::Copy(CopyArgs {
                src: "/a".into(),
                dst: "/b".into(),
                merge: true,
                sync: false,
                exclude: vec!["*.o".into()],
                skip_special: false,
            }),
            detach: true,
        };
        assert_eq!(Request::parse(r.to_line().as_bytes()).unwrap(), r);
        let bad = |s: &str| Request::parse(s.as_bytes()).unwrap_err();
        assert!(matches!(bad("{"), BadRequest::Malformed(_)));
        assert_eq!(
            bad(r#"{"v":2,"op":"version"}"#),
            BadRequest::Version { got: 2 }
        );
        assert!(matches!(
            bad(r#"{"v":1,"op":"format-disk"}"#),
            BadRequest::UnknownOp(o) if o == "format-disk"
        ));
        let e = bad(r#"{"v":1,"op":"copy","args":{"src":"/a","dts":"/b"}}"#);
        assert!(e.to_string().contains("unknown field `dts`"), "{e}");
        let e = bad(r#"{"v":1,"op":"jobs","args":{"all":true}}"#);
        assert!(e.to_string().contains("takes no arguments"), "{e}");
        assert!(matches!(
            bad(r#"{"v":1,"op":"version","extra":1}"#),
            BadRequest::Malformed(_)
        ));
        let long = vec![b' '; MAX_LINE];
        assert_eq!(Request::parse(&long).unwrap_err(), BadRequest::TooLong);
    }

    #[test]
    fn hostile_lines_are_refused_early_and_echoed_short() {
        let bad = |s: &[u8]| Request::parse(s).unwrap_err();
        // A name of 100,000 bytes is quoted by its first 200 and its
        // length.
        let name = "é".repeat(50_000);
        let line = format!(r#"{{"v":1,"op":"{name}"}}"#);
        let e = bad(line.as_bytes()).to_string();
        assert!(e.len() < 400, "{}", e.len());
        assert!(e.contains("…(100000 bytes)"), "{e}");
        // An unknown field of any size, in the envelope or the arguments.
        let key = "k".repeat(100_000);
        for line in [
            format!(r#"{{"v":1,"{key}":0}}"#),
            format!(r#"{{"v":1,"op":"copy","args":{{"{key}":0}}}}"#),
        ] {
            let e = bad(line.as_bytes()).to_string();
            assert!(e.contains("unknown field"), "{e}");
            assert!(e.len() < 700, "{}", e.len());
        }
        // Objects by the thousand: refused at the first, whichever way
        // they come.
        let objects = r#"{"a":0},"#.repeat(20_000);
        let objects = objects.trim_end_matches(',');
        for line in [
            format!("{{{}}}", objects.replace(['{', '}'], "")),
            format!(r#"{{"v":1,"op":"copy","args":[{objects}]}}"#),
            format!(
                r#"{{"v":1,"op":"copy","args":{{"src":"/a","dst":"/b","exclude":[{objects}]}}}}"#
            ),
            format!(r#"{{"args":[{objects}],"v":1,"op":"jobs"}}"#),
        ] {
            assert!(line.len() < MAX_LINE);
            let e = bad(line.as_bytes());
            assert!(
                matches!(e, BadRequest::Malformed(_) | BadRequest::Args { .. }),
                "{e}"
            );
        }
        // Patterns by the thousand: refused past MAX_EXCLUDES, as they
        // come, not after a string was made of each.
        let patterns = r#""a","#.repeat(MAX_EXCLUDES + 1);
        let line = format!(
            r#"{{"v":1,"op":"copy","args":{{"src":"/a","dst":"/b","exclude":[{}]}}}}"#,
            patterns.trim_end_matches(',')
        );
        let e = bad(line.as_bytes());
        assert!(
            e.to_string().contains(&format!("more than {MAX_EXCLUDES}")),
            "{e}"
        );
        let fine = r#""a","#.repeat(MAX_EXCLUDES);
        let line = format!(
            r#"{{"v":1,"op":"copy","args":{{"src":"/a","dst":"/b","exclude":[{}]}}}}"#,
            fine.trim_end_matches(',')
        );
        assert!(Request::parse(line.as_bytes()).is_ok());
        // Nesting.
        let deep = format!(
            r#"{{"v":1,"op":"copy","args":{{"src":"/a","dst":"/b","exclude":{}"x"{}}}}}"#,
            "[".repeat(40),
            "]".repeat(40)
        );
        assert_eq!(bad(deep.as_bytes()), BadRequest::TooDeep);
        // Brackets inside strings are text.
        let r = Request::parse(
            br#"{"v":1,"op":"copy","args":{"src":"/[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"{","dst":"/b"}}"#,
        )
        .unwrap();
        assert!(matches!(r.call, Call::Copy(_)));
        // Arguments before the operation, as a map's order may put them.
        let r = Request::parse(
            br#"{"args":{"job":3},"detach":true,"op":"status","v":1}"#,
        )
        .unwrap();
        assert_eq!(r.call, Call::Status(JobRef { job: 3 }));
        assert!(r.detach);
        for (line, says) in [
            (
                r#"{"v":"1","op":"version"}"#,
                "must be a protocol version number",
            ),
            (
                r#"{"v":-1,"op":"version"}"#,
                "must be a protocol version number",
            ),
            (r#"{"op":"version"}"#, "missing field `v`"),
            (
                r#"{"v":1,"op":"version","args":{"x":1}}"#,
                "takes no arguments",
            ),
            (r#"{"v":1,"op":"copy"}"#, "missing field `src`"),
        ] {
            let e = bad(line.as_bytes()).to_string();
            assert!(e.contains(says), "{line}: {e}");
        }
        assert!(
            Request::parse(br#"{"v":1,"op":"version","args":null}"#).is_ok()
        );
        assert_eq!(clip("abc", 2), "ab…(3 bytes)");
        assert_eq!(clip("aé", 2), "a…(3 bytes)");
        assert_eq!(clip("abc", 3), "abc");
    }

    #[test]
    fn error_kinds_cross_the_wire_by_name() {
        let all = [
            ErrorKind::Request,
            ErrorKind::Denied,
            ErrorKind::Busy,
            ErrorKind::Io,
            ErrorKind::Refused,
            ErrorKind::Cancelled,
            ErrorKind::Install,
            ErrorKind::Provision,
            ErrorKind::NotFound,
            ErrorKind::Internal,
        ];
        for k in all {
            let v = serde_json::to_value(k).unwrap();
            assert_eq!(v, k.as_str());
            assert_eq!(serde_json::from_value::<ErrorKind>(v).unwrap(), k);
        }
        assert_eq!(ErrorKind::NotFound.as_str(), "not-found");
        // A newer daemon's kind is read, not refused.
        let w: WireError =
            serde_json::from_str(r#"{"kind":"quota","message":"over quota"}"#)
                .unwrap();
        assert_eq!(w.kind, ErrorKind::Unknown);
        assert_eq!(w.message, "over quota");
    }

    #[test]
    fn stats_survive_the_wire() {
        use std::time::Duration;
        // Every field set, each to a different value, so that a field
        // dropped or crossed on the wire fails the comparison.
        let s = copier::Stats {
            files: 1,
            dirs: 2,
            symlinks: 3,
            hardlinks: 4,
            redirects: 5,
            specials: 6,
            skipped: 7,
            unchanged: 8,
            bytes: 9,
            reflinked: 10,
            kernel_copied: 11,
            buffered: 12,
            elapsed: Duration::from_millis(13),
            walker_blocked: Duration::from_millis(14),
            fd_limit: 27,
            fd_budget: 28,
            fd_peak: 29,
            workers: vec![
                copier::WorkerStats {
                    jobs: 15,
                    batches: 16,
                    bytes: 17,
                    busy: Duration::from_millis(18),
                },
                copier::WorkerStats::default(),
            ],
            walkers: vec![copier::WalkerStats {
                dirs: 19,
                entries: 20,
                batches: 21,
                steals: 22,
                busy: Duration::from_millis(23),
                blocked: Duration::from_millis(24),
                fd_wait: Duration::from_millis(30),
                idle: Duration::from_millis(25),
                cpu: Duration::from_millis(26),
            }],
        };
        let v = stats_json(&s);
        // Through the text, as a client reads it.
        let line = serde_json::to_string(&v).unwrap();
        let back = stats_from_json(&serde_json::from_str(&line).unwrap());
        assert_eq!(back.unwrap(), s);
        // The names scripts read.
        assert_eq!(v["linked"], 5);
        assert_eq!(v["ms"], 13);
        assert_eq!(v["walker_blocked_ms"], 14);
        assert_eq!(v["workers"][0]["busy_ms"], 18);
        assert_eq!(v["walkers"][0]["cpu_ms"], 26);
        // Missing fields are zero; a wrong type is refused, not zero.
        let some = stats_from_json(&json!({"files": 3})).unwrap();
        assert_eq!(some.files, 3);
        assert_eq!(some.dirs, 0);
        let e = stats_from_json(&json!({"files": "three"})).unwrap_err();
        assert!(e.to_string().contains("invalid type"), "{e}");
    }

    /// The typed replies read back what the daemon sends; a field the
    /// other side lacks or renamed is an error naming it, never a zero or
    /// an empty string.
    #[test]
    fn typed_replies_round_trip_and_a_missing_field_is_an_error() {
        let job = JobInfo {
            job: 7,
            op: "copy".into(),
            what: "/srv/a".into(),
            uid: 1000,
            pid: 4242,
            state: "running".into(),
            phase: "copy".into(),
            entries: 10,
            bytes: 20,
            started: 1_700_000_000,
            elapsed_ms: 30,
            detached: false,
            process: Some(99),
            result: None,
            error: None,
        };
        let line = serde_json::to_string(&vec![job.clone()]).unwrap();
        let back: Vec<JobInfo> = serde_json::from_str(&line).unwrap();
        assert_eq!(back, vec![job.clone()]);
        let mut v = serde_json::to_value(&job).unwrap();
        // Optional fields are left out when empty, as before.
        assert!(v.get("result").is_none() && v.get("error").is_none());
        let state = v.as_object_mut().unwrap().remove("state").unwrap();
        v["status"] = state;
        let e = serde_json::from_value::<JobInfo>(v).unwrap_err();
        assert!(e.to_string().contains("missing field `state`"), "{e}");

        let copy = CopyReply {
            src: "/a".into(),
            dst: "/b".into(),
            stats: copier::Stats {
                files: 3,
                ..Default::default()
            },
            notices: vec![NoticeInfo {
                kind: "xattr".into(),
                notice: "1 xattr not kept".into(),
                count: 1,
                example: "/a/x".into(),
            }],
        };
        let v = reply_value(&copy).unwrap();
        assert_eq!(v["stats"]["files"], 3);
        assert_eq!(v["notices"][0]["notice"], "1 xattr not kept");
        let back: CopyReply = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(back, copy);
        let mut v = v;
        v.as_object_mut().unwrap().remove("notices");
        let e = serde_json::from_value::<CopyReply>(v).unwrap_err();
        assert!(e.to_string().contains("missing field `notices`"), "{e}");

        let rb = ZonepathReply {
            zonepath: "/zones/z".into(),
            recovered: Some("root.new".into()),
        };
        let back: ZonepathReply =
            serde_json::from_value(reply_value(&rb).unwrap()).unwrap();
        assert_eq!(back, rb);
    }
}
