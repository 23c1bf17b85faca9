//! `zinstall install` and `zinstall uninstall`: the brand's install on
//! Linux (or anywhere), by the same code the zoneadm hook runs.

use crate::exit::Exit;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use crate::output::{self, Bar};
use crate::settings::TunableArgs;
use zinstall_install::{self as install, Install, Profile, profile};

/// Arguments of `zinstall install`.
#[derive(Args, Debug)]
pub struct InstallArgs {
    #[command(flatten)]
    pub remote: crate::cmd::daemon_arg::DaemonArg,
    /// The zonepath: created (0700) if missing; the root is ZONEPATH/root.
    #[arg(long, value_name = "DIR")]
    pub zonepath: PathBuf,
    /// The install profile (default /etc/zinstall/profile.toml, or the
    /// built-in one for this platform when that does not exist).
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Copy the trees from this root instead of the profile's.
    #[arg(long, value_name = "DIR")]
    pub source_root: Option<PathBuf>,
    /// Write the structured log here instead of the profile's path.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Image layers, applied in order after the baseline: tarballs, or
    /// OCI images (a layout directory, oci-archive or docker save
    /// archive; IMAGE:REF names one in it; oci:DIR[:REF],
    /// oci-archive:FILE[:REF], docker-archive:FILE[:REF] as skopeo names
    /// them; REGISTRY/REPO:TAG, REGISTRY/REPO@sha256:... or docker://REF
    /// pulls one from a registry).
    pub images: Vec<PathBuf>,
    /// Where images pulled from a registry are kept (DIR/oci, an OCI
    /// layout shared with provision).
    #[arg(long, value_name = "DIR", default_value = crate::cmd::provision::DEFAULT_CACHE)]
    pub cache: PathBuf,
    #[command(flatten)]
    pub pull: crate::pull::PullArgs,
    /// The platform OCI images must be for, and the one chosen from a
    /// multi-platform index (OS/ARCH[/VARIANT]; default: this host's).
    #[arg(long, value_name = "OS/ARCH")]
    pub platform: Option<zinstall_engine::oci::Platform>,
    #[command(flatten)]
    pub tunables: TunableArgs,
    /// Print each step and the outcome as JSON lines (`{"event":...}`,
    /// then `{"result":...}` or `{"error":...}`) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Print each entry as it is written into the root, `'src' ->
    /// 'dst'` (an archive's members by their names in it).
    #[arg(long, short)]
    pub verbose: bool,
    /// Write nothing: make every check the install makes, walk each tree
    /// and read each archive through, and say what would be done; no
    /// zonepath, lock or log record is made.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Do not flush the root to the disk before marking the install
    /// complete (for scratch roots nobody needs after a crash).
    #[arg(long)]
    pub no_sync: bool,
    /// The root's form: `tree`, a directory tree in ZONEPATH/root; or
    /// `composefs` (Linux), file contents once in the cache's object
    /// store (CACHE/composefs) and an EROFS image of the tree, recorded
    /// in ZONEPATH/composefs.json, ZONEPATH/root left empty to mount it.
    #[arg(long, value_enum, default_value_t = Format::Tree)]
    pub format: Format,
    /// With `--format composefs`: build through a staging tree, as an
    /// install that is more than its archives does, even where the build
    /// in memory could (run as root, archives alone). The image is the
    /// same; for comparing the two, and as a way round.
    #[arg(long)]
    pub composefs_staging: bool,
}

/// The form of an installed root.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A directory tree.
    Tree,
    /// A composefs image and its objects (Linux).
    Composefs,
}

/// Arguments of `zinstall uninstall`.
#[derive(Args, Debug)]
pub struct UninstallArgs {
    #[command(flatten)]
    pub remote: crate::cmd::daemon_arg::DaemonArg,
    /// The zonepath whose root to remove.
    #[arg(long, value_name = "DIR")]
    pub zonepath: PathBuf,
    /// Remove the root even if zinstall did not make it.
    #[arg(short = 'F', long)]
    pub force: bool,
    /// Write the structured log here.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
}

/// Installs; exit 0, or 1 with the error (and 2 for bad settings).
pub fn install(args: &InstallArgs) -> Exit {
    let path = args
        .profile
        .clone()
        .unwrap_or_else(|| PathBuf::from(profile::DEFAULT_PATH));
    let mut profile = match Profile::load(&path) {
        Ok(p) => p,
        Err(e) => {
            let fields = serde_json::json!({
                "zonepath": crate::json::path(&args.zonepath),
                "stage": "BeforeRoot",
                "path": crate::json::path(&e.path),
            });
            crate::json::fail(args.json, &e, fields);
            return Exit::Usage;
        }
    };
    if let Some(s) = &args.source_root {
        profile.source_root = s.clone();
    }
    if let Some(l) = &args.log {
        profile.log = l.clone();
    }
    let tunables = match args.tunables.resolve() {
        Ok(t) => t,
        Err(e) => {
            crate::json::fail(args.json, &e, crate::json::fields(&e));
            return Exit::Usage;
        }
    };
    // A policy that cannot be read refuses every pull: found before
    // anything is made.
    let trust = match args.pull.trust(profile.policy.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            crate::json::fail(args.json, &e, crate::json::policy_fields(&e));
            return Exit::Usage;
        }
    };
    if args.format == Format::Composefs {
        return composefs(args, profile, tunables, trust);
    }
    if args.dry_run {
        return dry_run(args, profile, tunables, trust);
    }
    // Made (0700) through a checked descriptor: a zonepath that is a
    // symlink, or that another user could swap, is refused untouched.
    let zonepath = match install::prepare_zonepath(&args.zonepath) {
        Ok(z) => z,
        Err(e) => {
            crate::json::fail(
                args.json,
                &e,
                serde_json::json!({
                    "zonepath": crate::json::path(&args.zonepath),
                    "stage": "BeforeRoot",
                    "errno": e.raw_os_error(),
                }),
            );
            return Exit::Failed;
        }
    };
    let log = open_log(&profile);
    let json = args.json;
    let bar = Bar::for_terminal(json || args.verbose, "installing");
    let mut show = |e: &install::Event| show_event(json, &bar, e);
    let shown = profile.path.clone();
    let mut r = job(
        args,
        &args.zonepath,
        profile,
        tunables,
        log,
        &mut show,
        &bar,
        trust,
    )
    .run();
    if let Some(b) = &bar {
        b.finish();
    }
    // What this install did to the zonepath, it undoes (a zonepath it
    // made is removed once empty: a root that could not be cleaned keeps
    // it); what it could not undo, the error says.
    if let Err(e) = &mut r
        && let Some(done) = zonepath.undo(e)
    {
        output::note(done);
    }
    finish(args, &shown, r)
}

/// `--format composefs`: refused where composefs is not.
#[cfg(not(target_os = "linux"))]
fn composefs(
    args: &InstallArgs,
    _: Profile,
    _: zinstall_engine::Tunables,
    _: Option<Arc<zinstall_registry::policy::Trust>>,
) -> Exit {
    crate::json::fail(
        args.json,
        "--format composefs: composefs is Linux's (EROFS, overlayfs and \
         fs-verity): there is no composefs on this system; install a tree",
        serde_json::Value::Null,
    );
    Exit::Usage
}

/// `--format composefs`: its dry run, or the install.
#[cfg(target_os = "linux")]
fn composefs(
    args: &InstallArgs,
    profile: Profile,
    tunables: zinstall_engine::Tunables,
    trust: Option<Arc<zinstall_registry::policy::Trust>>,
) -> Exit {
    use super::install_composefs as cfs;
    let req = cfs::Request {
        zonepath: &args.zonepath,
        cache: &args.cache,
        json: args.json,
        workers: tunables.copy_threads,
    };
    if args.dry_run {
        let exit = dry_run(args, profile, tunables, trust);
        if exit == Exit::Ok {
            cfs::dry_run_note(&req);
        }
        return exit;
    }
    let for_memory = (profile.clone(), trust.clone());
    let mut once = Some((profile, tunables, trust));
    let mut stage = |staging: &std::path::Path| {
        let Some((profile, tunables, trust)) = once.take() else {
            unreachable!("the staging install runs once");
        };
        stage_composefs(args, staging, profile, tunables, trust)
    };
    let mut memory = Some(for_memory);
    let mut in_memory =
        |tree: &mut zinstall_engine::unpack::MemTree,
         sink: &dyn zinstall_engine::unpack::ObjectSink| {
            let Some((profile, trust)) = memory.take() else {
                unreachable!("the build in memory runs once");
            };
            build_in_memory(args, profile, tunables, trust, tree, sink)
        };
    let memory: Option<&mut install::composefs::BuildInMemory<'_>> =
        (!args.composefs_staging).then_some(&mut in_memory);
    cfs::install(&req, &mut stage, memory)
}

/// The plain install into the composefs staging zonepath `staging`;
/// not flushed, as the store is synced once its objects are in.
#[cfg(target_os = "linux")]
fn stage_composefs(
    args: &InstallArgs,
    staging: &std::path::Path,
    profile: Profile,
    tunables: zinstall_engine::Tunables,
    trust: Option<Arc<zinstall_registry::policy::Trust>>,
) -> Result<install::Summary, install::InstallError> {
    let log = open_log(&profile);
    let json = args.json;
    let bar = Bar::for_terminal(json || args.verbose, "installing");
    let mut show = |e: &install::Event| show_event(json, &bar, e);
    let mut job = job(
        args, staging, profile, tunables, log, &mut show, &bar, trust,
    );
    job.sync = false;
    job.objects = Some(install::composefs::object_hasher());
    let summary = job.run();
    if let Some(b) = &bar {
        b.finish();
    }
    summary
}

/// The install built in memory: its archives into `tree`, bodies into
/// the store through `sink`.
#[cfg(target_os = "linux")]
fn build_in_memory(
    args: &InstallArgs,
    profile: Profile,
    tunables: zinstall_engine::Tunables,
    trust: Option<Arc<zinstall_registry::policy::Trust>>,
    tree: &mut zinstall_engine::unpack::MemTree,
    sink: &dyn zinstall_engine::unpack::ObjectSink,
) -> Result<install::Built, install::InstallError> {
    let log = open_log(&profile);
    let json = args.json;
    let bar = Bar::for_terminal(json || args.verbose, "installing");
    let mut show = |e: &install::Event| show_event(json, &bar, e);
    let zonepath = args.zonepath.clone();
    let mut job = job(
        args, &zonepath, profile, tunables, log, &mut show, &bar, trust,
    );
    job.sync = false;
    let built = job.run_in_memory(tree, sink);
    if let Some(b) = &bar {
        b.finish();
    }
    built
}

/// The install's log, this command line recorded in it, with signals
/// watched from here on.
fn open_log(profile: &Profile) -> slog::Logger {
    // OS strings: a path given need not be UTF-8.
    let argv: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let (log, warning) =
        install::log::open(&profile.log, &argv, |m| output::note(m));
    if let Some(w) = warning {
        output::note(w);
    }
    if let Err(e) = crate::interrupt::watch_signals() {
        output::note(format_args!("signals not handled: {e}"));
    }
    log
}

/// The install the arguments describe, into `zonepath`.
#[allow(clippy::too_many_arguments)]
fn job<'a>(
    args: &InstallArgs,
    zonepath: &std::path::Path,
    profile: Profile,
    tunables: zinstall_engine::Tunables,
    log: slog::Logger,
    events: &'a mut dyn FnMut(&install::Event),
    bar: &Option<Arc<Bar>>,
    trust: Option<Arc<zinstall_registry::policy::Trust>>,
) -> Install<'a> {
    Install {
        zone: zone_name(args),
        zonepath: zonepath.to_path_buf(),
        profile,
        images: args.images.clone(),
        tunables,
        log,
        events,
        cancel: Some(crate::interrupt::cancel()),
        pool: None,
        listener: (args.verbose && !args.json)
            .then(|| std::sync::Arc::new(output::Listing) as _),
        platform: args.platform.clone(),
        store: Some(zinstall_provision::store_of(&args.cache)),
        pull: args.pull.options(bar.clone(), trust),
        progress: bar.clone().map(|b| b as Arc<dyn zinstall_engine::Progress>),
        sync: !args.no_sync,
        objects: None,
    }
}

/// The zone's name: the zonepath's last component.
fn zone_name(args: &InstallArgs) -> String {
    args.zonepath.file_name().map_or_else(
        || "zone".to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Prints a step (above the progress bar), and names it on the bar.
pub(super) fn show_event(
    json: bool,
    bar: &Option<Arc<Bar>>,
    e: &install::Event,
) {
    if json {
        crate::json::event(&e.to_string());
        return;
    }
    output::above(bar, || output::event(e));
    if let Some(b) = bar {
        match e {
            install::Event::Replicating { tree } => {
                b.set_what(&format!("replicating {tree}"));
            }
            install::Event::Unpacking { path, .. } => {
                let name = path.file_name().unwrap_or(path.as_os_str());
                b.set_what(&format!("unpacking {}", name.to_string_lossy()));
            }
            _ => {}
        }
    }
}

/// `--dry-run`: the install's checks and walks, nothing written, no log.
fn dry_run(
    args: &InstallArgs,
    profile: Profile,
    tunables: zinstall_engine::Tunables,
    trust: Option<Arc<zinstall_registry::policy::Trust>>,
) -> Exit {
    let json = args.json;
    let bar = Bar::for_terminal(json || args.verbose, "walking");
    let mut show = |e: &install::Event| show_event(json, &bar, e);
    let log = slog::Logger::root(slog::Discard, slog::o!());
    let shown = profile.path.clone();
    let r = job(
        args,
        &args.zonepath,
        profile,
        tunables,
        log,
        &mut show,
        &bar,
        trust,
    )
    .dry_run();
    if let Some(b) = &bar {
        b.finish();
    }
    finish(args, &shown, r)
}

/// Prints the outcome of an install or its dry run; the exit status.
fn finish(
    args: &InstallArgs,
    shown: &std::path::Path,
    r: Result<install::Summary, install::InstallError>,
) -> Exit {
    let json = args.json;
    // A default profile that failed may be the wrong one.
    let hint = r
        .as_ref()
        .err()
        .filter(|e| args.profile.is_none() && e.profile_decided())
        .map(|_| profile::default_hint(shown));
    if json {
        match &r {
            Ok(s) => crate::json::result(serde_json::json!({
                "zonepath": crate::json::path(&args.zonepath),
                "dry_run": args.dry_run,
                "stats": crate::json::stats(&s.stats),
                "notices": crate::json::notices(&s.notices),
                "format": match args.format {
                    Format::Tree => "tree",
                    Format::Composefs => "composefs",
                },
            })),
            Err(e) => crate::json::outcome(
                false,
                None,
                Some(crate::json::error(
                    e,
                    serde_json::json!({
                        "zonepath": crate::json::path(&args.zonepath),
                        "stage": format!("{:?}", e.stage),
                        "errno": e.raw_os_error(),
                        "hint": hint,
                        "stopped": crate::interrupt::reason()
                            .map(|r| r.to_string()),
                    }),
                )),
            ),
        }
    }
    match r {
        Ok(s) => {
            if args.dry_run && !json {
                output::out(format_args!(
                    "would install into {}: {}",
                    output::show(&args.zonepath.join("root")),
                    s.stats
                ));
            }
            Exit::Ok
        }
        Err(e) => {
            let stopped = crate::interrupt::reason();
            if !json {
                match stopped {
                    Some(why) => output::error(format_args!(
                        "{why}: install stopped: {e}"
                    )),
                    None => output::error(&e),
                }
                if let (Some(h), None) = (hint, stopped) {
                    output::note(h);
                }
                let msg = e.to_string();
                if let Some(h) = super::provision::cache_hint(
                    &args.cache,
                    e.raw_os_error(),
                    &msg,
                ) {
                    output::note(h);
                }
            }
            stopped.map_or(Exit::Failed, Exit::Interrupted)
        }
    }
}

/// Uninstalls; exit 0 or 1.
pub fn uninstall(args: &UninstallArgs) -> Exit {
    #[cfg(target_os = "linux")]
    if let Some(exit) = super::install_composefs::uninstall(&args.zonepath) {
        return exit;
    }
    let log_path = args.log.clone().unwrap_or_else(|| {
        Profile::load(std::path::Path::new(profile::DEFAULT_PATH))
            .map(|p| p.log)
            .unwrap_or_else(|_| profile::DEFAULT_LOG.into())
    });
    // OS strings: a path given need not be UTF-8.
    let argv: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let (log, warning) =
        install::log::open(&log_path, &argv, |m| output::note(m));
    if let Some(w) = warning {
        output::note(w);
    }
    let mut show = |e: &install::Event| output::event(e);
    match install::uninstall(&args.zonepath, args.force, &log, &mut show) {
        Ok(()) => Exit::Ok,
        Err(e) => {
            output::error(e);
            Exit::Failed
        }
    }
}
