//! `zinstall --daemon`: the same commands, run by zinstalld, with the same
//! progress bar and output; and `zinstall jobs`, `zinstall cancel`.

use crate::exit::Exit;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use serde::Serialize;
use serde::de::DeserializeOwned;
use zinstall_daemon::client::{Client, ClientError};
use zinstall_daemon::protocol::{
    CacheEntryReply, Call, CleanPath, CopyArgs, CopyReply, ErrorKind, GcArgs,
    GcReply, ImageArg, InstallArgs, InstallReply, JobInfo, JobRef,
    ProgressInfo, ProvisionArgs, ProvisionReply, Request, RollbackArgs,
    RootFormat, UninstallArgs, UpdateArgs, UpdateReply, ZonepathReply,
};

use crate::output::{self, Bar};
use crate::settings::TunableArgs;

pub use super::daemon_arg::{DaemonArg, socket, socket_or_default};

/// Arguments of `zinstall jobs`.
#[derive(Args, Debug)]
pub struct JobsArgs {
    /// Print the jobs as one JSON array.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub remote: DaemonArg,
}

/// Arguments of `zinstall cancel`.
#[derive(Args, Debug)]
pub struct CancelArgs {
    /// The job's id, as `zinstall jobs` shows it.
    pub job: u64,
    #[command(flatten)]
    pub remote: DaemonArg,
}

/// A path as the daemon takes one: made absolute from this process's
/// directory, and without `..` (which only the filesystem could resolve,
/// and the daemon does not guess). Else the path as given.
fn absolute(p: &Path) -> Result<CleanPath, PathBuf> {
    std::path::absolute(p)
        .ok()
        .and_then(|a| CleanPath::new(a).ok())
        .ok_or_else(|| p.to_path_buf())
}

/// An image argument as the daemon takes it: a path as [`absolute`]
/// makes it, a registry reference as given.
fn image_arg(p: &Path) -> Result<ImageArg, PathBuf> {
    // `oci:DIR:REF` and the like: the daemon takes the path made
    // absolute, and the rest as `IMAGE:REF`.
    if let Some((path, reference)) = zinstall_engine::oci::transport_name(p) {
        let abs = absolute(&path)?;
        let Some(r) = reference else {
            return Ok(ImageArg::File(abs));
        };
        let mut named = PathBuf::from(abs).into_os_string();
        named.push(format!(":{r}"));
        return CleanPath::new(PathBuf::from(named))
            .map(ImageArg::File)
            .map_err(|_| p.to_path_buf());
    }
    match p.to_str() {
        Some(r) if zinstall_registry::reference_of(p).is_some() => {
            Ok(ImageArg::Reference(r.to_string()))
        }
        _ => absolute(p).map(ImageArg::File),
    }
}

/// A request's arguments, or, if `build` met a path the daemon cannot
/// take, that path said and the usage status.
fn with_paths<T>(
    json: bool,
    build: impl FnOnce() -> Result<T, PathBuf>,
) -> Result<T, Exit> {
    build().map_err(|p| {
        crate::json::fail(
            json,
            format_args!(
                "{}: zinstalld takes paths without `..` components: name it without them",
                p.display()
            ),
            crate::json::NO_FIELDS,
        );
        Exit::Usage
    })
}

/// Flags that have no meaning when the daemon runs the command.
fn local_only(flags: &[(&str, bool)], json: bool) -> Result<(), Exit> {
    for (flag, set) in flags {
        if *set {
            crate::json::fail(
                json,
                format_args!("{flag} is not available with --daemon"),
                crate::json::NO_FIELDS,
            );
            return Err(Exit::Usage);
        }
    }
    Ok(())
}

/// The trust policy flags: the daemon judges every pull by its own.
const POLICY_FLAGS: &str = "--policy, --registries.d (the daemon's trust \
                            policy is its configuration's)";

fn policy_set(p: &crate::pull::PullArgs) -> bool {
    p.policy.is_some() || p.registries_d.is_some()
}

/// The dry-run and listing flags, refused together with why.
const LISTING_FLAGS: &str =
    "--dry-run, --verbose (run without --daemon for a dry run or a listing)";

/// The tunable flags, refused together with why.
const TUNABLE_FLAGS: &str = "--threads, --walkers, --batch, --bufsize, \
     --writeback, --defaults \
     (the daemon's configuration and worker budget decide)";

fn tunables_set(t: &TunableArgs) -> bool {
    t.threads.is_some()
        || t.walkers.is_some()
        || t.batch.is_some()
        || t.bufsize.is_some()
        || t.writeback.is_some()
        || t.defaults.is_some()
}

/// The socket, as `--json` names it beside an error reaching it.
#[derive(Serialize)]
struct SocketField {
    socket: String,
}

/// What `--json` tells beside the message of the daemon's refusal or a
/// job's failure.
#[derive(Serialize)]
struct RemoteFields<'a> {
    kind: ErrorKind,
    op: &'a Option<String>,
    path: &'a Option<PathBuf>,
    errors: &'a [String],
    more_errors: u64,
}

/// Sends `call`, drawing progress on `bar` and printing events; returns
/// the result read as `T` (the type the call returns), or prints the
/// error (as JSON with `json`) and returns the exit code.
fn call<T: DeserializeOwned>(
    socket: &Path,
    call: Call,
    bar: Option<Arc<Bar>>,
    event: &mut dyn FnMut(&str),
    json: bool,
) -> Result<T, Exit> {
    let socket_field = crate::json::typed(&SocketField {
        socket: socket.to_string_lossy().into_owned(),
    });
    let mut client = match Client::connect(socket) {
        Ok(c) => c,
        Err(e) => {
            crate::json::fail(json, e, socket_field);
            return Err(Exit::Failed);
        }
    };
    let mut seen = (0, 0);
    let mut progress = |p: &ProgressInfo| {
        if let Some(b) = &bar {
            zinstall_engine::Progress::advance(
                b.as_ref(),
                p.entries.saturating_sub(seen.0),
                p.bytes.saturating_sub(seen.1),
            );
            seen = (p.entries.max(seen.0), p.bytes.max(seen.1));
        }
    };
    let request = Request {
        call,
        detach: false,
    };
    let r = client.call_as(&request, &mut progress, event);
    if let Some(b) = &bar {
        b.finish();
    }
    r.map_err(|e| {
        match e {
            ClientError::Remote(w) if json => crate::json::fail(
                true,
                &w.message,
                crate::json::typed(&RemoteFields {
                    kind: w.kind,
                    op: &w.op,
                    path: &w.path,
                    errors: &w.errors,
                    more_errors: w.more_errors,
                }),
            ),
            ClientError::Remote(w) if !w.errors.is_empty() => {
                for line in &w.errors {
                    output::error(line);
                }
                if w.more_errors > 0 {
                    output::error(format_args!(
                        "... and {} more errors",
                        w.more_errors
                    ));
                }
            }
            // Said as it always was, whether or not with `--json`.
            e @ ClientError::Result { .. } => output::error(e),
            e => crate::json::fail(json, e, socket_field),
        }
        Exit::Failed
    })
}

/// `zinstall --daemon copy`.
pub fn copy(socket: &Path, a: &super::copy::CopyArgs) -> Exit {
    if let Err(c) = local_only(
        &[
            (TUNABLE_FLAGS, tunables_set(&a.tunables)),
            ("--statemap", a.statemap.is_some()),
            ("--cross-fs", a.cross_fs),
            (LISTING_FLAGS, a.dry_run || a.verbose),
        ],
        a.json,
    ) {
        return c;
    }
    // The client reads its exclude files, with its own rights.
    let exclude = match super::copy::exclude_patterns(a) {
        Ok(p) => p,
        Err(e) => {
            crate::json::fail(a.json, &e, crate::json::fields(&e));
            return Exit::Usage;
        }
    };
    let bar = Bar::for_terminal(a.quiet || a.json, "copying");
    let args = match with_paths(a.json, || {
        Ok(CopyArgs {
            src: absolute(&a.src)?,
            dst: absolute(&a.dst)?,
            merge: a.merge,
            sync: a.sync,
            exclude,
            skip_special: a.skip_special,
        })
    }) {
        Ok(args) => args,
        Err(c) => return c,
    };
    let result: CopyReply =
        match call(socket, Call::Copy(args), bar, &mut |_| {}, a.json) {
            Ok(r) => r,
            Err(c) => return c,
        };
    if a.json {
        crate::json::result(crate::json::typed(&result));
        return Exit::Ok;
    }
    let CopyReply { stats, notices, .. } = result;
    for n in notices {
        output::note(n.notice);
    }
    if !a.quiet {
        output::out(format_args!(
            "copied {} -> {}: {stats}",
            output::show(&a.src),
            output::show(&a.dst),
        ));
        if a.stats {
            output::stats_detail(&stats);
        }
    }
    Exit::Ok
}

/// `zinstall --daemon install`.
pub fn install(socket: &Path, a: &super::install::InstallArgs) -> Exit {
    if let Err(c) = local_only(
        &[
            (TUNABLE_FLAGS, tunables_set(&a.tunables)),
            (LISTING_FLAGS, a.dry_run || a.verbose),
            // The daemon's installs always reach the disk before they
            // are marked complete.
            ("--no-sync", a.no_sync),
            (POLICY_FLAGS, policy_set(&a.pull)),
        ],
        a.json,
    ) {
        return c;
    }
    let args = match with_paths(a.json, || {
        Ok(InstallArgs {
            zonepath: absolute(&a.zonepath)?,
            zone: None,
            profile: a.profile.as_deref().map(absolute).transpose()?,
            images: a
                .images
                .iter()
                .map(|p| image_arg(p))
                .collect::<Result<_, _>>()?,
            source_root: a.source_root.as_deref().map(absolute).transpose()?,
            log: a.log.as_deref().map(absolute).transpose()?,
            platform: a.platform.as_ref().map(|p| p.to_string()),
            format: match a.format {
                super::install::Format::Tree => RootFormat::Tree,
                super::install::Format::Composefs => RootFormat::Composefs,
            },
        })
    }) {
        Ok(args) => args,
        Err(c) => return c,
    };
    let json = a.json;
    let mut show = |e: &str| {
        // The daemon sends each step as the hook prints it.
        if json {
            let text = e.strip_prefix("INFO: zinstall: ").unwrap_or(e);
            crate::json::event(text);
        } else {
            output::out(e);
        }
    };
    match call::<InstallReply>(
        socket,
        Call::Install(args),
        None,
        &mut show,
        json,
    ) {
        Ok(r) => {
            if json {
                crate::json::result(crate::json::typed(&r));
            }
            // composefs is Linux's: a daemon elsewhere makes trees.
            #[cfg(target_os = "linux")]
            if let (false, Some(c)) = (json, &r.composefs) {
                super::install_composefs::print_installed(&a.zonepath, c);
            }
            Exit::Ok
        }
        Err(c) => c,
    }
}

/// `zinstall --daemon uninstall`.
pub fn uninstall(socket: &Path, a: &super::install::UninstallArgs) -> Exit {
    let args = match with_paths(false, || {
        Ok(UninstallArgs {
            zonepath: absolute(&a.zonepath)?,
            foreign: a.force,
        })
    }) {
        Ok(args) => args,
        Err(c) => return c,
    };
    match call::<ZonepathReply>(
        socket,
        Call::Uninstall(args),
        None,
        &mut |e| output::out(e),
        false,
    ) {
        Ok(_) => Exit::Ok,
        Err(c) => c,
    }
}

/// `zinstall --daemon update`: root's, like install. The stages are
/// shown as the daemon reaches them; the outcome as the local command
/// prints it.
pub fn update(socket: &Path, a: &super::update::UpdateArgs) -> Exit {
    let args = match with_paths(a.json, || {
        Ok(UpdateArgs {
            zonepath: absolute(&a.zonepath)?,
            profile: a.profile.as_deref().map(absolute).transpose()?,
            images: a
                .images
                .iter()
                .map(|p| image_arg(p))
                .collect::<Result<_, _>>()?,
            source_root: a.source_root.as_deref().map(absolute).transpose()?,
            force: a.force,
            dry_run: a.dry_run,
            live: a.live,
            platform: a.platform.as_ref().map(|p| p.to_string()),
        })
    }) {
        Ok(args) => args,
        Err(c) => return c,
    };
    let json = a.json;
    // The stages are the job's phase (`zinstall jobs`); the output is
    // the local command's.
    let mut quiet = |_: &str| {};
    match call::<UpdateReply>(
        socket,
        Call::Update(args),
        None,
        &mut quiet,
        json,
    ) {
        Ok(r) => {
            super::update::print(&r, a, false);
            Exit::Ok
        }
        Err(c) => c,
    }
}

/// `zinstall --daemon rollback`.
pub fn rollback(socket: &Path, a: &super::update::RollbackArgs) -> Exit {
    let args = match with_paths(a.json, || {
        Ok(RollbackArgs {
            zonepath: absolute(&a.zonepath)?,
        })
    }) {
        Ok(args) => args,
        Err(c) => return c,
    };
    let json = a.json;
    let mut quiet = |_: &str| {};
    match call::<ZonepathReply>(
        socket,
        Call::Rollback(args),
        None,
        &mut quiet,
        json,
    ) {
        Ok(r) => {
            super::update::print_rollback(
                &a.zonepath,
                r.recovered.as_deref(),
                r.message.as_deref(),
                json,
            );
            Exit::Ok
        }
        Err(c) => c,
    }
}

/// `zinstall --daemon provision`.
pub fn provision(socket: &Path, a: &super::provision::ProvisionArgs) -> Exit {
    if let Err(c) = local_only(
        &[
            (TUNABLE_FLAGS, tunables_set(&a.tunables)),
            ("--qemu-img", a.qemu_img.is_some()),
            (LISTING_FLAGS, a.dry_run || a.verbose),
            (POLICY_FLAGS, policy_set(&a.pull)),
            ("--cache-mode", a.cache_mode.is_some()),
            (
                "--cache (the daemon's cache is its configuration's)",
                a.cache != Path::new(super::provision::DEFAULT_CACHE),
            ),
        ],
        a.json,
    ) {
        return c;
    }
    let (customize, seed) = match super::provision_sent::contents(a) {
        Ok(c) => c,
        Err(c) => return c,
    };
    let args = match with_paths(a.json, || {
        Ok(ProvisionArgs {
            image: image_arg(&a.image)?,
            out: absolute(&a.out)?,
            count: a.count,
            name: a.name.clone(),
            size: a.size,
            sha256: a.sha256.clone(),
            keep_identity: a.keep_identity,
            hostname: a.hostname.clone(),
            machine_id: a.machine_id,
            ssh_host_keys: a.ssh_host_keys,
            force: a.force,
            platform: a.platform.as_ref().map(|p| p.to_string()),
            max_archive_size: Some(a.max_archive_size),
            allow_devices: a.allow_devices,
            customize: customize.map(Box::new),
            seed: seed.map(Box::new),
            format: a.format,
            mount: a.mount,
        })
    }) {
        Ok(args) => args,
        Err(c) => return c,
    };
    let call_ = Call::Provision(args);
    let line = Request {
        call: call_.clone(),
        detach: false,
    }
    .to_line();
    if let Err(c) = super::provision_sent::check_line(&line, a.json) {
        return c;
    }
    shown::<ProvisionReply>(socket, call_, a.json, |r| {
        super::provision_sent::print_passwords(r);
        super::provision::print_provision(r);
    })
}

/// `zinstall --daemon cache gc`: collection by the daemon, printed as
/// the local command prints it.
pub fn cache_gc(
    socket: &Path,
    args: GcArgs,
    search: &[PathBuf],
    json: bool,
) -> Exit {
    if let Err(c) = local_only(
        &[(
            "--search (the daemon searches where its guests were made)",
            !search.is_empty(),
        )],
        json,
    ) {
        return c;
    }
    shown::<GcReply>(
        socket,
        Call::CacheGc(args),
        json,
        super::cache_print::print_gc,
    )
}

/// `zinstall --daemon cache list`: the daemon's cache, printed as the
/// local command prints its own.
pub fn cache_list(socket: &Path, json: bool) -> Exit {
    shown::<Vec<CacheEntryReply>>(socket, Call::CacheList, json, |l| {
        super::cache_print::print_cache_list(l)
    })
}

/// Runs `call` in the daemon, its events shown as they come (unless
/// `json`), and its result read as `T`: printed by `print`, or as the
/// local command's `--json` prints it.
fn shown<T: serde::Serialize + DeserializeOwned>(
    socket: &Path,
    call_: Call,
    json: bool,
    print: impl FnOnce(&T),
) -> Exit {
    let mut event = |e: &str| {
        if !json {
            output::out(e);
        }
    };
    let reply: T = match call(socket, call_, None, &mut event, json) {
        Ok(r) => r,
        Err(c) => return c,
    };
    if json {
        crate::json::result(crate::json::typed(&reply));
    } else {
        print(&reply);
    }
    Exit::Ok
}

/// `zinstall jobs`.
pub fn jobs(socket: &Path, a: &JobsArgs) -> Exit {
    let jobs: Vec<JobInfo> =
        match call(socket, Call::Jobs, None, &mut |_| {}, a.json) {
            Ok(r) => r,
            Err(c) => return c,
        };
    if a.json {
        crate::json::result(crate::json::typed(&jobs));
        return Exit::Ok;
    }
    output::out(
        "JOB    OP         STATE      PHASE      UID    ENTRIES        BYTES  WHAT",
    );
    for j in jobs {
        output::out(format_args!(
            "{:<6} {:<10} {:<10} {:<10} {:<6} {:>7} {:>12}  {}",
            j.job, j.op, j.state, j.phase, j.uid, j.entries, j.bytes, j.what,
        ));
    }
    Exit::Ok
}

/// `zinstall cancel ID`.
pub fn cancel(socket: &Path, a: &CancelArgs) -> Exit {
    match call::<JobInfo>(
        socket,
        Call::Cancel(JobRef { job: a.job }),
        None,
        &mut |_| {},
        false,
    ) {
        Ok(j) => {
            output::out(format_args!(
                "job {} cancelled ({} when asked)",
                a.job, j.state
            ));
            Exit::Ok
        }
        Err(c) => c,
    }
}
