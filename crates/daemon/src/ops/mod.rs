//! Running each operation for a client: the same libraries the CLI
//! calls, given the daemon's pool, the job's cancel flag and progress.

use std::path::Path;
use std::sync::Arc;

use slog::info;

use zinstall_install::profile::Profile;
use zinstall_provision::cache::{Cache, GcOptions};
use zinstall_provision::{ProvisionOptions, ProvisionRequest};

use crate::auth::Granted;
use crate::config::Config;
use crate::jobs::Job;
use crate::protocol::{
    CacheEntryReply, Call, CleanPath, ErrorKind, GcArgs, GcReply, InstallArgs,
    InstallReply, JobResult, NoticeInfo, ProvisionArgs, ProvisionReply,
    RollbackArgs, RootFormat, UninstallArgs, UpdateArgs, UpdateReply,
    WireError, ZonepathReply,
};
use crate::state::Daemon;
use crate::sys::Peer;

mod copy;
mod install_composefs;
mod install_run;

use install_run::{Parts, install_error, run_install};

/// Runs a job's operation to its end.
pub fn run(
    d: &Daemon,
    job: &Arc<Job>,
    call: &Call,
    peer: &Peer,
    granted: &Granted,
    config: &Config,
) -> Result<JobResult, WireError> {
    match call {
        Call::Copy(a) if peer.uid != 0 => {
            crate::process::granted_copy(d, job, a, peer, granted)
                .map(JobResult::Copy)
        }
        Call::Copy(a) => copy::copy(d, job, a).map(JobResult::Copy),
        Call::Install(a) => {
            install(d, job, a, peer, config).map(JobResult::Install)
        }
        Call::Uninstall(a) => uninstall(d, job, a).map(JobResult::Uninstall),
        Call::Update(a) => update(d, job, a, config).map(JobResult::Update),
        Call::Rollback(a) => rollback(job, a).map(JobResult::Rollback),
        Call::Provision(a) => {
            provision(d, job, a, peer, config).map(JobResult::Provision)
        }
        Call::CacheGc(a) => cache_gc(job, a, config).map(JobResult::CacheGc),
        _ => Err(WireError::new(
            ErrorKind::Internal,
            format!("{} is not a job", call.name()),
        )),
    }
}

/// The profile a request names (else the daemon's), with the source
/// root it gives.
fn profile(
    named: &Option<CleanPath>,
    source_root: &Option<CleanPath>,
    config: &Config,
) -> Result<Profile, WireError> {
    let path = named
        .as_ref()
        .map_or_else(|| config.profile.clone(), |p| p.to_path_buf());
    let mut profile = Profile::load(&path).map_err(|e| {
        let mut w = WireError::new(ErrorKind::Install, e.to_string());
        w.path = Some(path.clone());
        w
    })?;
    if let Some(s) = source_root {
        profile.source_root = s.to_path_buf();
    }
    Ok(profile)
}

fn install(
    d: &Daemon,
    job: &Arc<Job>,
    a: &InstallArgs,
    peer: &Peer,
    config: &Config,
) -> Result<InstallReply, WireError> {
    job.set_phase("install");
    let mut profile = profile(&a.profile, &a.source_root, config)?;
    if let Some(l) = &a.log {
        profile.log = l.to_path_buf();
    }
    // As the CLI: the zonepath is made 0700 through a checked descriptor
    // (never through a symlink, nor under a directory another user could
    // swap it in), so that nobody else walks into the root meanwhile.
    let platform = platform(ErrorKind::Install, &a.platform)?;
    let pull = pull_options(config, job, ErrorKind::Install)?;
    let parts = Parts {
        profile,
        platform,
        pull,
    };
    if a.format == RootFormat::Composefs {
        return install_composefs::install(d, job, a, peer, config, parts);
    }
    let zonepath =
        zinstall_install::prepare_zonepath(&a.zonepath).map_err(|e| {
            let mut w = WireError::new(ErrorKind::Refused, e.to_string());
            w.path = Some(a.zonepath.to_path_buf());
            w
        })?;
    let mut r = run_install(d, job, a, peer, config, parts, &a.zonepath, None);
    // As the CLI: what was done to the zonepath is undone, and what
    // could not be, the error says.
    if let Err(e) = &mut r
        && let Some(done) = zonepath.undo(e)
    {
        job.event(format!("NOTE: {done}"));
    }
    match r {
        Ok(s) => Ok(InstallReply {
            zonepath: a.zonepath.to_string_lossy().into_owned(),
            notices: NoticeInfo::of(&s.notices),
            stats: s.stats,
            format: "tree".into(),
            composefs: None,
        }),
        Err(e) => Err(install_error(job, &a.zonepath, &e)),
    }
}

fn uninstall(
    d: &Daemon,
    job: &Arc<Job>,
    a: &UninstallArgs,
) -> Result<ZonepathReply, WireError> {
    job.set_phase("uninstall");
    if let Some(r) = install_composefs::uninstall(&a.zonepath) {
        r.map_err(|e| {
            let mut w = WireError::new(ErrorKind::Install, e.to_string());
            w.path = Some(a.zonepath.to_path_buf());
            w
        })?;
        return Ok(ZonepathReply {
            zonepath: a.zonepath.to_string_lossy().into_owned(),
            recovered: None,
            message: None,
        });
    }
    let mut events =
        |e: &zinstall_install::Event| job.event(format!("INFO: zinstall: {e}"));
    zinstall_install::uninstall(&a.zonepath, a.foreign, d.log(), &mut events)
        .map_err(|e| install_error(job, &a.zonepath, &e))?;
    Ok(ZonepathReply {
        zonepath: a.zonepath.to_string_lossy().into_owned(),
        recovered: None,
        message: None,
    })
}

/// An update's or a rollback's failure as the wire carries it.
fn update_error(
    job: &Job,
    zonepath: &Path,
    e: &zinstall_install::update::UpdateError,
) -> WireError {
    let kind = match e {
        zinstall_install::update::UpdateError::Cancelled => {
            ErrorKind::Cancelled
        }
        _ if job.cancel.is_cancelled() => ErrorKind::Cancelled,
        _ => ErrorKind::Install,
    };
    let mut w = WireError::new(kind, e.to_string());
    w.path = Some(zonepath.to_path_buf());
    w
}

/// Root's update, as `zinstall update`: each stage a job event and the
/// job's phase; the job's cancel stops it before the switch.
fn update(
    d: &Daemon,
    job: &Arc<Job>,
    a: &UpdateArgs,
    config: &Config,
) -> Result<UpdateReply, WireError> {
    job.set_phase("update");
    let profile = profile(&a.profile, &None, config)?;
    let platform = platform(ErrorKind::Install, &a.platform)?;
    let pull = pull_options(config, job, ErrorKind::Install)?;
    let mut stage = |s: &str| {
        job.set_phase(s);
        job.event(format!("INFO: zinstall: update: {s}"));
    };
    let r = zinstall_install::update::Update {
        zonepath: a.zonepath.to_path_buf(),
        profile,
        images: a.images.iter().map(|i| i.as_path().to_path_buf()).collect(),
        source_root: a.source_root.as_ref().map(|s| s.to_path_buf()),
        force: a.force,
        dry_run: a.dry_run,
        live: a.live,
        store: Some(zinstall_provision::store_of(&config.cache)),
        pull,
        platform,
        tunables: d.tunables(),
        stage: &mut stage,
        cancel: Some(job.cancel.clone()),
    }
    .run();
    match r {
        Ok(report) => Ok(UpdateReply::of(&a.zonepath, &report)),
        Err(e) => Err(update_error(job, &a.zonepath, &e)),
    }
}

/// Root's rollback, as `zinstall rollback`.
fn rollback(
    job: &Arc<Job>,
    a: &RollbackArgs,
) -> Result<ZonepathReply, WireError> {
    job.set_phase("rollback");
    match zinstall_install::update::rollback(&a.zonepath) {
        Ok(rolled) => Ok(ZonepathReply {
            zonepath: a.zonepath.to_string_lossy().into_owned(),
            recovered: rolled.recovered.map(str::to_string),
            message: Some(rolled.message()),
        }),
        Err(e) => Err(update_error(job, &a.zonepath, &e)),
    }
}

/// The platform a request names, parsed.
fn platform(
    kind: ErrorKind,
    p: &Option<String>,
) -> Result<Option<zinstall_engine::oci::Platform>, WireError> {
    p.as_deref()
        .map(|s| {
            s.parse()
                .map_err(|why| WireError::new(kind, format!("platform: {why}")))
        })
        .transpose()
}

/// Pulls as the daemon's configuration says, each step a job event; the
/// job's cancel (and the daemon stopping) ends a pull at once. The trust
/// policy is the daemon's (read for each job, so that a changed policy
/// applies to the next), whoever asks: no request field names or relaxes
/// it.
fn pull_options(
    config: &Config,
    job: &Arc<Job>,
    kind: ErrorKind,
) -> Result<zinstall_registry::PullOptions, WireError> {
    let trust = zinstall_registry::policy::Trust::load(
        config.policy.as_deref(),
        config.registries_d.as_deref(),
    )
    .map_err(|e| WireError::new(kind, e.to_string()))?
    .map(Arc::new);
    let events_job = Arc::clone(job);
    Ok(zinstall_registry::PullOptions {
        insecure: config.insecure_registries.clone(),
        events: Some(Arc::new(move |e: &zinstall_registry::Event| {
            events_job.event(format!("INFO: zinstall: {e}"))
        })),
        progress: None,
        cancel: Some(job.cancel.clone()),
        max_blob_size: None,
        trust,
        fetch_deadline: Some(config.fetch_deadline),
    })
}

fn provision(
    d: &Daemon,
    job: &Arc<Job>,
    a: &ProvisionArgs,
    peer: &Peer,
    config: &Config,
) -> Result<ProvisionReply, WireError> {
    job.set_phase("provision");
    if a.mount
        && crate::sys::shares_mount_namespace(peer.pid).ok() == Some(false)
    {
        return Err(WireError::new(
            ErrorKind::Refused,
            "--mount: zinstalld runs in another mount namespace than the \
             client's (systemd's ProtectSystem= gives it one of its own), \
             so the client would not see guests it left mounted: make them \
             without --mount and mount each with `zinstall mount DIR`",
        ));
    }
    let request = provision_request(a)?;
    let opts = ProvisionOptions {
        customize_sent: a.customize.as_deref().cloned(),
        tunables: d.tunables(),
        cancel: Some(job.cancel.clone()),
        pool: Some(d.pool().clone()),
        pull: pull_options(config, job, ErrorKind::Provision)?,
        ..ProvisionOptions::new(request, config.cache.clone())
    };
    // One build per image: the cache's build lock is a flock(2) on a file
    // each provision opens for itself, so it orders this daemon's jobs as
    // it orders processes; the others wait for the entry, then make their
    // guests at once.
    let mut on_guest = |g: &zinstall_provision::Guest| {
        job.entries
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        job.event(format!("made {g}"));
    };
    let r =
        zinstall_provision::provision(a.image.as_path(), &opts, &mut on_guest)
            .map_err(|e| {
                let kind = if job.cancel.is_cancelled() {
                    ErrorKind::Cancelled
                } else {
                    ErrorKind::Provision
                };
                let mut w = WireError::new(kind, provision_message(&e));
                w.path = Some(a.image.as_path().to_path_buf());
                w
            })?;
    if let Some(old) = &r.replaced {
        info!(d.log(), "cache entry altered"; "entry" => old.old.name(),
              "why" => crate::protocol::clip_middle(&old.why, crate::protocol::MAX_ERROR_TEXT),
              "rebuilt" => r.entry.name());
    }
    Ok(ProvisionReply::of(a.image.as_path(), &r))
}

/// The provision the client asked for, as the library takes it.
fn provision_request(a: &ProvisionArgs) -> Result<ProvisionRequest, WireError> {
    Ok(ProvisionRequest {
        count: a.count,
        out: a.out.to_path_buf(),
        name: a.name.clone(),
        size: a.size,
        sha256: a.sha256.clone(),
        max_archive_bytes: a.max_archive_size,
        allow_devices: a.allow_devices,
        keep_identity: a.keep_identity,
        hostname: a.hostname.clone(),
        machine_id: a.machine_id,
        ssh_host_keys: a.ssh_host_keys,
        force: a.force,
        platform: platform(ErrorKind::Provision, &a.platform)?,
        format: a.format,
        mount: a.mount,
        // Made from the contents the client sent: no path of its is
        // opened here.
        seed: a
            .seed
            .as_ref()
            .map(|s| {
                zinstall_provision::seed::sent::request(
                    s,
                    a.hostname.as_deref(),
                )
            })
            .transpose()
            .map_err(|e| {
                WireError::new(ErrorKind::Provision, provision_message(&e))
            })?,
    })
}

/// A provision's failure as the daemon's client should read it: the
/// library's message, but where it advises a flag the daemon does not
/// take (`--qemu-img`), what to do instead.
fn provision_message(e: &zinstall_provision::ProvisionError) -> String {
    use zinstall_provision::ImageProblem;
    use zinstall_provision::ProvisionError;
    if let ProvisionError::Image {
        path,
        problem:
            ImageProblem::ForeignDisk {
                format,
                qemu_format,
                compression,
            },
    } = e
    {
        let inside = compression
            .as_ref()
            .map(|c| format!(" inside {c}"))
            .unwrap_or_default();
        return format!(
            "{}: a {format} disk image{inside}, which zinstall reads through \
             qemu-img, and there is no qemu-img on zinstalld's PATH (install \
             it there, or convert the image first: qemu-img convert -f \
             {qemu_format} -O qcow2 IMAGE IMAGE.qcow2)",
            path.display()
        );
    }
    e.to_string()
}

/// The cache's entries, as `zinstall cache list --json` would show them.
pub fn cache_list(config: &Config) -> Result<Vec<CacheEntryReply>, WireError> {
    let cache = Cache::new(config.cache.clone())
        .map_err(|e| cache_error(config, &e))?;
    let entries = cache.list().map_err(|e| cache_error(config, &e))?;
    Ok(CacheEntryReply::list(&entries))
}

fn cache_gc(
    job: &Arc<Job>,
    a: &GcArgs,
    config: &Config,
) -> Result<GcReply, WireError> {
    job.set_phase("cache-gc");
    let cache = Cache::new(config.cache.clone())
        .map_err(|e| cache_error(config, &e))?;
    let r = cache
        .gc_with(&GcOptions {
            max_size: a.max_size,
            dry_run: a.dry_run,
            search: Vec::new(),
            release_missing: a.release_missing,
        })
        .map_err(|e| cache_error(config, &e))?;
    Ok(GcReply::of(&r, a.dry_run))
}

fn cache_error(
    config: &Config,
    e: &zinstall_provision::ProvisionError,
) -> WireError {
    let mut w = WireError::new(ErrorKind::Provision, e.to_string());
    w.path = Some(config.cache.clone());
    w
}
