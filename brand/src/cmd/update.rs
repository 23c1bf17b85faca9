//! `zinstall update` and `zinstall rollback`: bring an installed root in
//! line with the profile's trees as they are now, writing only what
//! changed, switched in whole; and switch back.

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
    /// The install profile (default /etc/zinstall/profile.toml, or the
    /// built-in one for this platform when that does not exist).
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Copy the trees from this root instead of the profile's.
    #[arg(long, value_name = "DIR")]
    pub source_root: Option<PathBuf>,
    /// The images the root was installed with (they must be the same).
    pub images: Vec<PathBuf>,
    /// Overwrite files the zone changed since the install, and update a
    /// root installed before zinstall recorded what it laid out.
    #[arg(long)]
    pub force: bool,
    /// Say what would be added, removed, changed and kept; write
    /// nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Print the counts: entries added, removed, changed and kept, bytes
    /// written.
    #[arg(long)]
    pub stats: bool,
    /// Print the outcome as one JSON object.
    #[arg(long)]
    pub json: bool,
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
    let mut profile = match Profile::load(&path) {
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
    if let Some(s) = &args.source_root {
        profile.source_root = s.clone();
    }
    run_with(args, profile, false)
}

/// Updates with `profile` (the hook's `attach -u` gives the zone brand's).
pub fn run_with(args: &UpdateArgs, profile: Profile, quiet: bool) -> Exit {
    let mut stage = |s: &str| pause_at(s);
    let r = Update {
        zonepath: args.zonepath.clone(),
        profile,
        images: args.images.clone(),
        force: args.force,
        dry_run: args.dry_run,
        stage: &mut stage,
        cancel: None,
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
    // The zone's changes are always named: they are what the update
    // did not do.
    for k in &r.kept {
        output::note(format_args!(
            "kept {}: {} (--force replaces it)",
            output::escape(&k.path),
            k.why
        ));
    }
    if args.stats || r.dry_run {
        let n = &r.stats;
        output::out(format_args!(
            "{}: {} added, {} removed, {} changed, {} kept, {} bytes written, {} entries shared",
            verb("updated", "would update"),
            n.added,
            n.removed,
            n.changed,
            n.kept,
            n.bytes,
            n.shared
        ));
    }
}

/// A rollback's outcome, wherever it ran.
pub fn print_rollback(
    zonepath: &std::path::Path,
    recovered: Option<&str>,
    json: bool,
) {
    if json {
        crate::json::result(serde_json::json!({
            "zonepath": crate::json::path(zonepath),
            "recovered": recovered,
        }));
    } else {
        if let Some(what) = recovered {
            output::note(what);
        }
        output::out(format_args!(
            "rolled back {}: the root before the last update is in place",
            output::show(&zonepath.join("root"))
        ));
    }
}

/// Rolls back; exit 0 or 1.
pub fn rollback(args: &RollbackArgs) -> Exit {
    match update::rollback(&args.zonepath) {
        Ok(recovered) => {
            print_rollback(&args.zonepath, recovered, args.json);
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
