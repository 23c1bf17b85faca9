//! `zinstall tune`: find this machine's best COPY_THREADS and COPY_BATCH
//! (and COPY_WALKERS, when asked).

use crate::exit::Exit;
use std::path::PathBuf;

use clap::Args;
use zinstall_tune::sweep::{self, Grid};
use zinstall_tune::tune::{self, TuneOptions};

use crate::output;
use crate::settings::DEFAULTS_FILE;

/// Arguments of `zinstall tune`.
#[derive(Args, Debug)]
pub struct TuneArgs {
    /// The tree to copy (default: a generated /usr-like tree).
    pub tree: Option<PathBuf>,
    /// A directory on the filesystem to tune for; copies are made (and
    /// removed) under it.
    #[arg(long, value_name = "DIR", default_value = "/var/tmp")]
    pub dest: PathBuf,
    /// COPY_THREADS values to try.
    #[arg(long, default_value = "1,2,4,8,16")]
    pub threads: String,
    /// COPY_BATCH values to try.
    #[arg(long, default_value = "8,32,128,512")]
    pub batch: String,
    /// COPY_WALKERS values to try at every point (default: not swept,
    /// the built-in default).
    #[arg(long, value_name = "LIST")]
    pub walkers: Option<String>,
    /// Timed runs per point.
    #[arg(long, default_value_t = 2)]
    pub runs: usize,
    /// Write the best point into the defaults file, keeping its comments.
    #[arg(long)]
    pub write: bool,
    /// The defaults file to write (default /etc/default/zinstall).
    #[arg(long, value_name = "FILE")]
    pub defaults: Option<PathBuf>,
    /// After the timed runs, copy once more at every point recording a
    /// statemap into DIR (with bpftrace's scheduler map too, as root),
    /// and report where the workers' time went.
    #[arg(long, value_name = "DIR")]
    pub statemap: Option<PathBuf>,
}

/// Sweeps, reports, and writes with --write.
pub fn run(args: &TuneArgs) -> Exit {
    let list = |s: &str| sweep::list(s).map_err(|e| e.to_string());
    let walkers = match args.walkers.as_deref().map(list) {
        None => Ok(Vec::new()),
        Some(Ok(w)) if w.is_empty() => Err("--walkers: empty list".into()),
        Some(r) => r,
    };
    let grid = match (list(&args.threads), list(&args.batch), walkers) {
        (Ok(threads), Ok(batches), Ok(walkers))
            if !threads.is_empty() && !batches.is_empty() =>
        {
            Grid {
                threads,
                batches,
                walkers,
            }
        }
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
            output::error(e);
            return Exit::Usage;
        }
        _ => {
            output::error("empty grid");
            return Exit::Usage;
        }
    };
    let zinstall = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            output::error(format_args!("finding this program: {e}"));
            return Exit::Failed;
        }
    };
    let opts = TuneOptions {
        tree: args.tree.clone(),
        dest: args.dest.clone(),
        grid,
        runs: args.runs.max(1),
        zinstall,
        statemap: args.statemap.clone(),
    };
    let mut log = |l: &str| output::note(l);
    let r = match tune::tune(&opts, &mut log) {
        Ok(r) => r,
        Err(e) => {
            output::error(e);
            return Exit::Failed;
        }
    };
    output::out(&r.table);
    if let (Some(shares), Some(dir)) = (&r.shares, &args.statemap) {
        output::out(format_args!(
            "Where the workers' time went (statemaps in {}):\n\n{shares}",
            dir.display()
        ));
    }
    let (p, best) = r.best;
    let mut settings =
        vec![("COPY_THREADS", p.threads), ("COPY_BATCH", p.batch)];
    if let Some(w) = p.walkers {
        settings.push(("COPY_WALKERS", w));
    }
    let said = settings
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ");
    output::out(format_args!(
        "best: {said}, median {best:.3} s; {:.2}x the default (8 x 128, {:.3} s){}",
        best / r.default,
        r.default,
        r.cp.map(|c| format!(", {:.2}x cp -a ({c:.3} s)", best / c))
            .unwrap_or_default()
    ));
    for w in &r.warnings {
        output::note(format_args!("warning: {w}"));
    }
    if args.write {
        let path = args
            .defaults
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULTS_FILE));
        let old = match zinstall_core::foreign::read_optional(
            &path,
            zinstall_core::foreign::Follow::Yes,
            zinstall_core::foreign::Kind::Config,
        ) {
            Ok(s) => s.unwrap_or_default(),
            Err(e) => {
                output::error(e);
                return Exit::Failed;
            }
        };
        let new =
            match zinstall_engine::defaults::rewrite(&path, &old, &settings) {
                Ok(n) => n,
                Err(e) => {
                    output::error(e);
                    return Exit::Failed;
                }
            };
        let tmp = path.with_extension(format!("tune.{}", std::process::id()));
        let written = std::fs::write(&tmp, new)
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            output::error(format_args!("write {}: {e}", path.display()));
            return Exit::Failed;
        }
        output::out(format_args!("wrote {said} to {}", path.display()));
        if !r.warnings.is_empty() {
            output::note(format_args!(
                "written despite the warnings above: run zinstall tune \
                 --write again on a quiet machine, or restore {}'s \
                 previous settings",
                path.display()
            ));
        }
    }
    Exit::Ok
}
