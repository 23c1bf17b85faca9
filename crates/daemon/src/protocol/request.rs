//! The parsed request: the operations ([`Call`]) and the paths each
//! names, each a [`CleanPath`] from the moment it was read.

use super::args::{
    CopyArgs, GcArgs, InstallArgs, JobRef, ProvisionArgs, RollbackArgs,
    UninstallArgs, UpdateArgs,
};
use super::path::CleanPath;

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

    /// The paths the request names: checked against a caller's grants.
    /// Images named by registry reference are not paths, and not among
    /// these.
    pub fn paths(&self) -> Vec<&CleanPath> {
        match self {
            Call::Copy(a) => vec![&a.src, &a.dst],
            Call::Install(a) => {
                let mut v = vec![&a.zonepath];
                v.extend(a.images.iter().filter_map(|i| i.file()));
                v.extend(a.profile.iter());
                v.extend(a.source_root.iter());
                v.extend(a.log.iter());
                v
            }
            Call::Uninstall(a) => vec![&a.zonepath],
            Call::Update(a) => {
                let mut v = vec![&a.zonepath];
                v.extend(a.images.iter().filter_map(|i| i.file()));
                v.extend(a.profile.iter());
                v.extend(a.source_root.iter());
                v
            }
            Call::Rollback(a) => vec![&a.zonepath],
            Call::Provision(a) => {
                let mut v: Vec<&CleanPath> =
                    a.image.file().into_iter().collect();
                v.push(&a.out);
                v
            }
            _ => Vec::new(),
        }
    }
}
