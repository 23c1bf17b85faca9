//! The parsed request: the operations ([`Call`]) and the paths each
//! names, checked to mean one place before any grant is looked at.

use std::path::{Component, Path, PathBuf};

use super::args::{
    CopyArgs, GcArgs, InstallArgs, JobRef, ProvisionArgs, RollbackArgs,
    UninstallArgs, UpdateArgs,
};

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
