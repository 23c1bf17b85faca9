//! An install as a job runs it: the request's parts checked, the
//! install library's `Install` run with the daemon's pool and the job's
//! events and cancel, and its failure as the wire carries it. Both
//! forms of root use it: a tree into the zonepath, a composefs root
//! into its staging tree.

use std::path::Path;
use std::sync::Arc;

use zinstall_install::Install;
use zinstall_install::profile::Profile;

use crate::config::Config;
use crate::jobs::Job;
use crate::protocol::{ErrorKind, InstallArgs, WireError};
use crate::state::Daemon;
use crate::sys::Peer;

/// An install or uninstall's failure; `cancelled` when the job's flag
/// was raised (the library fails at its next entry then).
pub(super) fn install_error(
    job: &Job,
    zonepath: &Path,
    e: &zinstall_install::InstallError,
) -> WireError {
    let cancelled = job.cancel.is_cancelled();
    let mut w = WireError::new(
        if cancelled {
            ErrorKind::Cancelled
        } else {
            ErrorKind::Install
        },
        e.to_string(),
    );
    w.path = Some(zonepath.to_path_buf());
    w
}

/// What an install request gives, checked: the profile, the platform,
/// how images are pulled.
pub(super) struct Parts {
    pub(super) profile: Profile,
    pub(super) platform: Option<zinstall_engine::oci::Platform>,
    pub(super) pull: zinstall_registry::PullOptions,
}

/// The install `a` asks for, into the zonepath `into` (a composefs
/// install's staging one, its bodies hashed by `objects`): each step a
/// job event, the log naming the caller.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_install(
    d: &Daemon,
    job: &Arc<Job>,
    a: &InstallArgs,
    peer: &Peer,
    config: &Config,
    parts: Parts,
    into: &Path,
    objects: Option<zinstall_engine::contents::ObjectHasher>,
) -> Result<zinstall_install::Summary, zinstall_install::InstallError> {
    let zone = a.zone.clone().unwrap_or_else(|| {
        a.zonepath
            .file_name()
            .map_or_else(|| "root".into(), |n| n.to_string_lossy().into_owned())
    });
    // The install log the CLI writes, naming the daemon's caller.
    let argv = vec![
        "zinstalld".to_string(),
        format!("install-for-uid={}", peer.uid),
        format!("pid={}", peer.pid),
        a.zonepath.display().to_string(),
    ];
    let events_job = Arc::clone(job);
    let (log, warning) =
        zinstall_install::log::open(&parts.profile.log, &argv, move |m| {
            events_job.event(format!("NOTE: {m}"))
        });
    if let Some(w) = warning {
        job.event(format!("NOTE: {w}"));
    }
    let mut events = |e: &zinstall_install::Event| {
        if let zinstall_install::Event::Unpacking { .. } = e {
            job.set_phase("unpack");
        }
        job.event(format!("INFO: zinstall: {e}"));
    };
    Install {
        zone,
        zonepath: into.to_path_buf(),
        profile: parts.profile,
        images: a.images.iter().map(|i| i.as_path().to_path_buf()).collect(),
        tunables: d.tunables(),
        log,
        events: &mut events,
        cancel: Some(job.cancel.clone()),
        pool: Some(d.pool().clone()),
        listener: None,
        platform: parts.platform,
        store: Some(zinstall_provision::store_of(&config.cache)),
        pull: parts.pull,
        progress: None,
        // A staging root (`objects`) is flushed with its store instead.
        sync: objects.is_none(),
        objects,
    }
    .run()
}
