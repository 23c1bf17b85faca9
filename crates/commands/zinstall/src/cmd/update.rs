//! `zinstall update` and `zinstall rollback`: bring an installed root in
//! line with what it was made from as it is now (the host's trees, or
//! new versions of its images), writing only what changed, switched in
//! whole; and switch back.

use crate::exit::Exit;
use std::path::PathBuf;

use clap::Args;

use crate::cmd::daemon_arg::DaemonArg;
use crate::output;
use zinstall_daemon::protocol::UpdateReply;
use zinstall_install::update::{self, Update};
use zinstall_install::{Profile, profile};

/// Arguments of `zinstall update`.
#[derive(Args, Debug)]
pub struct UpdateArgs {
    /// The zonepath of an installed root (ZONEPATH/root).
    #[arg(long, value_name = "DIR")]
    pub zonepath: PathBuf,
    /// The profile: its [update] rules say who owns which path (default
    /// /etc/zinstall/profile.toml, or the built-in one for this platform
    /// when that does not exist). A root made from the host's trees
    /// needs the profile it was installed with.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Read the trees from this root instead of the one recorded at the
    /// install (a newer tree of the same system elsewhere).
    #[arg(long, value_name = "DIR")]
    pub source_root: Option<PathBuf>,
    /// New versions of the images the root was made from, one for each,
    /// in order (none: the recorded images, opened again; a registry tag
    /// is pulled again).
    pub images: Vec<PathBuf>,
    /// The source wins in merged paths too (/etc by default): the zone's
    /// changes to entries the source lays out are replaced. Kept paths
    /// stay the zone's, and entries the zone added stay. Also updates a
    /// root installed before zinstall recorded a manifest.
    #[arg(long)]
    pub force: bool,
    /// Update even while a process uses the root (a running zone or
    /// container): what it writes there during the update is lost.
    #[arg(long)]
    pub live: bool,
    /// Say what would be added, removed, changed, kept and replaced;
    /// write nothing into the root.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Print the counts: entries added, removed, changed and kept, bytes
    /// written.
    #[arg(long)]
    pub stats: bool,
    /// Print the outcome as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Where images pulled from a registry are kept (DIR/oci).
    #[arg(long, value_name = "DIR", default_value = crate::cmd::provision::DEFAULT_CACHE)]
    pub cache: PathBuf,
    #[command(flatten)]
    pub pull: crate::pull::PullArgs,
    /// The platform new image versions must be for (OS/ARCH[/VARIANT];
    /// default: this host's).
    #[arg(long, value_name = "OS/ARCH")]
    pub platform: Option<zinstall_engine::oci::Platform>,
    #[command(flatten)]
    pub remote: DaemonArg,
}

/// Arguments of `zinstall rollback`.
#[derive(Args, Debug)]
pub struct RollbackArgs {
    /// The zonepath whose root to switch back to the one before the last
    /// update.
    #[arg(long, value_name = "DIR")]
    pub zonepath: PathBuf,
    /// Print the outcome as one JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub remote: DaemonArg,
}

/// A stage to stop at, for the tests of an update killed at each: named
/// by `ZINSTALL_UPDATE_PAUSE`, said on standard error, then waited at
/// until the process is killed.
fn pause_at(stage: &str) {
    if std::env::var("ZINSTALL_UPDATE_PAUSE").is_ok_and(|s| s == stage) {
        output::note(format_args!("update paused at {stage}"));
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}

/// Updates; exit 0, 1 on failure, 2 for a bad profile.
pub fn run(args: &UpdateArgs) -> Exit {
    let path = args
        .profile
        .clone()
        .unwrap_or_else(|| PathBuf::from(profile::DEFAULT_PATH));
    let profile = match Profile::load(&path) {
        Ok(p) => p,
        Err(e) => {
            crate::json::fail(
                args.json,
                &e,
                serde_json::json!({ "path": crate::json::path(&e.path) }),
            );
            return Exit::Usage;
        }
    };
    run_with(args, profile, false)
}

/// Updates with `profile` (the hook's `attach -u` gives the zone brand's).
pub fn run_with(args: &UpdateArgs, profile: Profile, quiet: bool) -> Exit {
    let trust = match args.pull.trust(profile.policy.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            crate::json::fail(args.json, &e, crate::json::policy_fields(&e));
            return Exit::Usage;
        }
    };
    if let Err(e) = crate::interrupt::watch_signals() {
        output::note(format_args!("signals not handled: {e}"));
    }
    let mut stage = |s: &str| pause_at(s);
    let r = Update {
        zonepath: args.zonepath.clone(),
        profile,
        images: args.images.clone(),
        source_root: args.source_root.clone(),
        force: args.force,
        dry_run: args.dry_run,
        live: args.live,
        store: Some(zinstall_provision::store_of(&args.cache)),
        pull: args.pull.options(None, trust),
        platform: args.platform.clone(),
        tunables: zinstall_engine::Tunables::default(),
        stage: &mut stage,
        cancel: Some(crate::interrupt::cancel()),
    }
    .run();
    match r {
        Ok(report) => {
            print(&UpdateReply::of(&args.zonepath, &report), args, quiet);
            Exit::Ok
        }
        Err(e) => {
            crate::json::fail(
                args.json,
                format_args!("update {}: {e}", output::show(&args.zonepath)),
                serde_json::json!({ "zonepath": crate::json::path(&args.zonepath) }),
            );
            Exit::Failed
        }
    }
}

/// The outcome, wherever the update ran: one JSON object with `--json`,
/// else one line per path, then the counts.
pub fn print(r: &UpdateReply, args: &UpdateArgs, quiet: bool) {
    if args.json {
        match serde_json::to_value(r) {
            Ok(v) => crate::json::result(v),
            Err(e) => output::note(format_args!("update: {e}")),
        }
        return;
    }
    if let Some(what) = &r.recovered {
        output::note(what);
    }
    let verb = |done: &'static str, would: &'static str| {
        if r.dry_run { would } else { done }
    };
    if !quiet || r.dry_run {
        for c in &r.added {
            output::out(format_args!(
                "{} {}",
                verb("added", "would add"),
                output::escape(&c.path)
            ));
        }
        for c in &r.removed {
            output::out(format_args!(
                "{} {}",
                verb("removed", "would remove"),
                output::escape(&c.path)
            ));
        }
        for c in &r.changed {
            output::out(format_args!(
                "{} {} ({})",
                verb("changed", "would change"),
                output::escape(&c.path),
                c.what.join(", ")
            ));
        }
    }
    // The zone's changes are always named: what the update left, and
    // what it replaced.
    for k in &r.kept {
        output::note(format_args!(
            "kept {}: {}",
            output::escape(&k.path),
            k.why
        ));
    }
    for k in &r.replaced {
        output::note(format_args!(
            "{} {}: {}",
            verb("replaced", "would replace"),
            output::escape(&k.path),
            k.why
        ));
    }
    if r.layers_reused > 0 || r.layers_read > 0 {
        output::note(format_args!(
            "image layers: {} read, {} as recorded (not read)",
            r.layers_read, r.layers_reused
        ));
    }
    if r.method == "hardlink" && !r.dry_run {
        output::note(format_args!(
            "{} shares unchanged files with the root by hard link (this \
             filesystem cannot clone): an edit in place in the root reaches \
             root.prev too",
            output::show(&std::path::Path::new(&r.zonepath).join("root.prev"))
        ));
    }
    if args.stats || r.dry_run {
        let n = &r.stats;
        output::out(format_args!(
            "{}: {} added, {} removed, {} changed, {} kept, {} replaced, {} bytes written, {} entries shared",
            verb("updated", "would update"),
            n.added,
            n.removed,
            n.changed,
            n.kept,
            n.replaced,
            n.bytes,
            n.shared
        ));
    }
}

/// A rollback's outcome, wherever it ran: which root is in place now.
pub fn print_rollback(
    zonepath: &std::path::Path,
    recovered: Option<&str>,
    message: Option<&str>,
    json: bool,
) {
    if json {
        crate::json::result(serde_json::json!({
            "zonepath": crate::json::path(zonepath),
            "recovered": recovered,
            "message": message,
        }));
    } else {
        if let Some(what) = recovered {
            output::note(what);
        }
        output::out(format_args!(
            "rolled back {}: {}",
            output::show(&zonepath.join("root")),
            message.unwrap_or("the other root is in place")
        ));
    }
}

/// Rolls back; exit 0 or 1.
pub fn rollback(args: &RollbackArgs) -> Exit {
    match update::rollback(&args.zonepath) {
        Ok(rolled) => {
            print_rollback(
                &args.zonepath,
                rolled.recovered,
                Some(&rolled.message()),
                args.json,
            );
            Exit::Ok
        }
        Err(e) => {
            crate::json::fail(
                args.json,
                format_args!("rollback {}: {e}", output::show(&args.zonepath)),
                serde_json::json!({ "zonepath": crate::json::path(&args.zonepath) }),
            );
            Exit::Failed
        }
    }
}
