//! `zinstall copy SRC DST`: a faithful, parallel `cp -a`.

use crate::exit::Exit;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use std::io::Read;

use serde_json::json;
use zinstall_engine::{OnError, Plan};

use crate::output::{self, Bar};
use crate::settings::TunableArgs;

/// Arguments of `zinstall copy`.
#[derive(Args, Debug)]
pub struct CopyArgs {
    #[command(flatten)]
    pub remote: crate::cmd::daemon_arg::DaemonArg,
    /// Source: a directory, file, symlink or special file.
    pub src: PathBuf,
    /// Destination: created if missing; must be empty unless --merge.
    pub dst: PathBuf,
    #[command(flatten)]
    pub tunables: TunableArgs,
    /// Accepted as cp -a and rsync -a users type it; changes nothing:
    /// owners, modes, times, ACLs, xattrs, links and holes are always
    /// kept.
    #[arg(long, short = 'a')]
    pub archive: bool,
    /// Accepted as rsync -H users type it; changes nothing: hard links
    /// are always kept.
    #[arg(long, short = 'H')]
    pub hard_links: bool,
    /// Accepted as cp -r, cp -R and rsync -r users type it; changes
    /// nothing: directories are always copied with all beneath them.
    #[arg(long, short = 'r', visible_short_alias = 'R')]
    pub recursive: bool,
    /// Accepted as cp -p, cp --preserve[=LIST] and rsync -p users type
    /// it, whatever LIST names; changes nothing: every attribute is
    /// always kept.
    #[arg(short = 'p', long, value_name = "LIST", num_args = 0..=1,
          require_equals = true, default_missing_value = "all")]
    pub preserve: Option<String>,
    /// Accepted as rsync -z users type it, with a note: there is no
    /// transfer to compress in a local copy.
    #[arg(long, short = 'z')]
    pub compress: bool,
    /// Copy into a non-empty destination, replacing entries that differ.
    #[arg(long)]
    pub merge: bool,
    /// Flush the destination filesystem once at the end (syncfs).
    #[arg(long)]
    pub sync: bool,
    /// Print per-worker statistics after the copy.
    #[arg(long)]
    pub stats: bool,
    /// Print nothing but errors.
    #[arg(long, short)]
    pub quiet: bool,
    /// Print each entry as it is written, `'src' -> 'dst'`, as cp -v.
    #[arg(long, short)]
    pub verbose: bool,
    /// Write nothing: walk the source, check the destination, and say
    /// what would be copied (each entry with -v).
    #[arg(long, short = 'n', conflicts_with_all = ["statemap", "sync"])]
    pub dry_run: bool,
    /// Skip special files that cannot be recreated without privilege.
    #[arg(long)]
    pub skip_special: bool,
    /// Stay on SRC's filesystem, as cp -x and rsync -x do (the default):
    /// a directory another filesystem is mounted on is copied empty, and
    /// a note names it.
    #[arg(long, short = 'x', overrides_with = "cross_fs")]
    pub one_file_system: bool,
    /// Descend into directories on other filesystems, as cp -a and rsync
    /// -a do without -x (not the default). The last of -x and --cross-fs
    /// given wins.
    #[arg(long, overrides_with = "one_file_system")]
    pub cross_fs: bool,
    /// Record each thread's states and write them to FILE as a statemap.
    #[arg(long, value_name = "FILE")]
    pub statemap: Option<PathBuf>,
    /// Skip entries matching PATTERN and all beneath them, as rsync and
    /// tar do: a pattern without a slash matches a name at any depth
    /// (`*.log`, `.git`); one with a slash is a path from SRC (`var/cache`,
    /// `/tmp`). `*` matches within a name, `**` across. Repeatable.
    #[arg(long, value_name = "PATTERN")]
    pub exclude: Vec<String>,
    /// Read exclude patterns from FILE (`-`: standard input), one a line;
    /// blank lines and lines starting with # or ; are skipped. Repeatable.
    #[arg(long, value_name = "FILE")]
    pub exclude_from: Vec<PathBuf>,
    /// Print the outcome as one JSON object (counts, workers, notices,
    /// errors) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Every exclude pattern: `--exclude`'s, then each `--exclude-from`
/// file's.
pub fn exclude_patterns(
    args: &CopyArgs,
) -> zinstall_engine::Result<Vec<String>> {
    let mut patterns = args.exclude.clone();
    for f in &args.exclude_from {
        if f.as_os_str() == "-" {
            // As bounded as a file of them.
            let max = zinstall_engine::rules::MAX_EXCLUDE_FILE;
            let mut text = String::new();
            std::io::stdin()
                .take(max + 1)
                .read_to_string(&mut text)
                .map_err(|e| {
                    zinstall_engine::Error::io(
                        zinstall_engine::Op::Read,
                        "-",
                        e,
                    )
                })?;
            if text.len() as u64 > max {
                return Err(zinstall_engine::Error::refused(
                    "-",
                    zinstall_engine::Refusal::TooLarge(max),
                ));
            }
            patterns.extend(zinstall_engine::rules::exclude_patterns(&text));
        } else {
            patterns.extend(zinstall_engine::rules::read_exclude_file(f)?);
        }
    }
    Ok(patterns)
}

/// Runs the copy; exit 0 on success, 1 on any error.
pub fn run(args: &CopyArgs) -> Exit {
    // rsync -z is accepted, not refused: `rsync -avz` is typed for local
    // copies too, where rsync itself ignores it, so refusing would fail a
    // line that means nothing harmful; a note says it did nothing.
    if args.compress && !args.quiet {
        output::note(
            "-z (compress in transit) has no meaning for a local copy: \
             nothing is sent over a network; ignored",
        );
    }
    let tunables = match args.tunables.resolve() {
        Ok(t) => t,
        Err(e) => {
            crate::json::fail(args.json, &e, crate::json::fields(&e));
            return Exit::Usage;
        }
    };
    let rules = match exclude_patterns(args)
        .and_then(|p| zinstall_engine::rules::excludes(&p))
    {
        Ok(r) => r,
        Err(e) => {
            crate::json::fail(args.json, &e, crate::json::fields(&e));
            return Exit::Usage;
        }
    };
    let bar = Bar::for_terminal(
        args.quiet || args.json || args.verbose,
        if args.dry_run { "walking" } else { "copying" },
    );
    if let Err(e) = crate::interrupt::watch_signals() {
        output::note(format_args!("signals not handled: {e}"));
    }
    let mut plan = Plan::new(&args.src, &args.dst)
        .cancel(crate::interrupt::cancel())
        .on_error(OnError::KeepGoing)
        .dry_run(args.dry_run)
        .tunables(tunables)
        .merge(args.merge)
        .sync(args.sync)
        .skip_special(args.skip_special)
        .cross_fs(args.cross_fs)
        .record_states(args.statemap.is_some());
    if let Some(r) = rules {
        plan = plan.rules(r, Path::new(""));
    }
    if let Some(b) = &bar {
        plan =
            plan.progress(Arc::clone(b) as Arc<dyn zinstall_engine::Progress>);
    }
    if args.verbose && !args.json {
        plan = plan.listener(Arc::new(output::Listing));
    }
    let result = plan.run();
    if let Some(b) = &bar {
        b.finish();
    }
    let (report, failed) = match &result {
        Ok(r) => (r, None),
        Err(f) => (&*f.report, Some(f)),
    };
    if args.json {
        let error = failed.map(|f| {
            let n = f.errors.len() as u64 + f.more_errors;
            let message = match (crate::interrupt::reason(), f.errors.first()) {
                (Some(why), _) => format!("{why}: copy stopped"),
                (None, Some(e)) if n == 1 => e.to_string(),
                (None, Some(e)) => format!("{e} (and {} more)", n - 1),
                (None, None) => "the copy failed".to_string(),
            };
            let first = f.errors.first();
            crate::json::error(
                message,
                json!({
                    "path": first.map(|e| crate::json::path(e.path())),
                    "op": first.and_then(|e| e.op()).map(|o| o.as_str()),
                    "errno": first.and_then(|e| e.raw_os_error()),
                }),
            )
        });
        let result = json!({
            "src": crate::json::path(&args.src),
            "dst": crate::json::path(&args.dst),
            "dry_run": args.dry_run,
            "stats": crate::json::stats(&report.stats),
            "notices": crate::json::notices(&report.notices),
            "errors": failed.map_or_else(Vec::new, |f| f
                .errors
                .iter()
                .map(|e| json!({
                    "path": crate::json::path(e.path()),
                    "op": e.op().map(|o| o.as_str()),
                    "errno": e.raw_os_error(),
                    "message": e.to_string(),
                }))
                .collect()),
            "more_errors": failed.map_or(0, |f| f.more_errors),
            "stopped": crate::interrupt::reason().map(|r| r.to_string()),
        });
        crate::json::outcome(failed.is_none(), Some(result), error);
    } else {
        for n in &report.notices {
            output::note(n);
        }
    }
    if let (Some(path), Some(rec)) = (&args.statemap, &report.recording) {
        let title = format!(
            "zinstall copy {} {}",
            args.src.display(),
            args.dst.display()
        );
        if let Err(e) = crate::statemap::save(rec, &title, path) {
            output::error(e);
            return Exit::Failed;
        }
    }
    if let (Some(_), Some(why)) = (failed, crate::interrupt::reason()) {
        if !args.json {
            stopped(args, why, report);
        }
        return Exit::Interrupted(why);
    }
    if let Some(f) = failed {
        if !args.json {
            output::failure(f, &args.dst);
            // Going on past errors, what was copied is worth a line.
            if !args.quiet && report.stats.entries() > 0 {
                let n = f.errors.len() as u64 + f.more_errors;
                output::out(format_args!(
                    "{} {} -> {} with errors: {}; {} (above)",
                    if args.dry_run { "would copy" } else { "copied" },
                    output::show(&args.src),
                    output::show(&args.dst),
                    report.stats,
                    output::count(n, "error", "errors"),
                ));
            }
        }
        return Exit::Failed;
    }
    if !args.quiet && !args.json {
        output::out(format_args!(
            "{} {} -> {}: {}",
            if args.dry_run { "would copy" } else { "copied" },
            output::show(&args.src),
            output::show(&args.dst),
            report.stats
        ));
        if args.stats {
            output::stats_detail(&report.stats);
        }
    }
    Exit::Ok
}

/// Says what a copy stopped by a signal or a closed output left, and how
/// to finish it.
fn stopped(
    args: &CopyArgs,
    why: crate::interrupt::Reason,
    r: &zinstall_engine::Report,
) {
    if args.dry_run {
        output::error(format_args!("{why}: dry run stopped"));
        return;
    }
    output::error(format_args!(
        "{why}: copy stopped; {} holds what was copied so far ({}), its \
         directories not yet given their modes and times; `zinstall copy \
         --merge {} {}` finishes it",
        output::show(&args.dst),
        r.stats,
        output::show(&args.src),
        output::show(&args.dst),
    ));
}
