//! Root's install in composefs form, as `zinstall install --format
//! composefs`: the install library's, into the daemon cache's store,
//! its staging install run with the daemon's pool; and the uninstall of
//! such a root.

use std::path::Path;
use std::sync::Arc;

use super::install_run::Parts;
use crate::config::Config;
use crate::jobs::Job;
use crate::protocol::{ErrorKind, InstallArgs, InstallReply, WireError};
use crate::state::Daemon;
use crate::sys::Peer;

/// Installs `a` in composefs form into the store of the daemon's cache.
#[cfg(target_os = "linux")]
pub(super) fn install(
    d: &Daemon,
    job: &Arc<Job>,
    a: &InstallArgs,
    peer: &Peer,
    config: &Config,
    parts: Parts,
) -> Result<InstallReply, WireError> {
    use super::install_run::{install_error, run_install};
    use crate::protocol::NoticeInfo;
    use zinstall_install::composefs;
    let store = zinstall_provision::composefs_store_of(&config.cache);
    let req = composefs::Request {
        zonepath: &a.zonepath,
        store: &store,
        workers: d.tunables().copy_threads,
    };
    let mut parts = Some(parts);
    let mut stage = |staging: &Path| match parts.take() {
        Some(p) => run_install(
            d,
            job,
            a,
            peer,
            config,
            p,
            staging,
            Some(composefs::object_hasher()),
        ),
        None => unreachable!("the staging install runs once"),
    };
    let mut notes = |n: String| job.event(format!("NOTE: {n}"));
    // Through a staging tree: a granted job runs as its caller, and the
    // build in memory is for installs as root.
    match composefs::install(&req, &mut stage, None, &mut notes) {
        Ok(m) => Ok(InstallReply {
            zonepath: a.zonepath.to_string_lossy().into_owned(),
            notices: NoticeInfo::of(&m.summary.notices),
            stats: m.summary.stats.clone(),
            format: "composefs".into(),
            composefs: Some(Box::new(crate::protocol::ComposefsInstall::of(
                &m,
            ))),
        }),
        Err(e) => Err(match e.install_error() {
            Some(ie) => install_error(job, &a.zonepath, ie),
            None => {
                let kind = if job.cancel.is_cancelled() {
                    ErrorKind::Cancelled
                } else {
                    ErrorKind::Install
                };
                let mut w = WireError::new(kind, e.to_string());
                w.path = Some(a.zonepath.to_path_buf());
                w
            }
        }),
    }
}

/// Elsewhere: refused, saying why.
#[cfg(not(target_os = "linux"))]
pub(super) fn install(
    _: &Daemon,
    _: &Arc<Job>,
    a: &InstallArgs,
    _: &Peer,
    _: &Config,
    _: Parts,
) -> Result<InstallReply, WireError> {
    let mut w = WireError::new(
        ErrorKind::Refused,
        "format composefs: composefs is Linux's (EROFS, overlayfs and \
         fs-verity): there is no composefs on this system; install a tree",
    );
    w.path = Some(a.zonepath.to_path_buf());
    Err(w)
}

/// Uninstalls the composefs root at `zonepath`: `None` when it holds
/// none; else what went wrong.
#[cfg(target_os = "linux")]
pub(super) fn uninstall(
    zonepath: &Path,
) -> Option<Result<(), zinstall_install::composefs::ComposefsError>> {
    zinstall_install::composefs::uninstall(zonepath).map(|r| r.map(|_| ()))
}

/// Elsewhere there is none (nor its error type).
#[cfg(not(target_os = "linux"))]
pub(super) fn uninstall(
    _: &Path,
) -> Option<Result<(), std::convert::Infallible>> {
    None
}
