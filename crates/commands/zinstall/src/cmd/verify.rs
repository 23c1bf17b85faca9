//! `zinstall verify A B`: compare two trees on every attribute.

use crate::exit::Exit;
use std::path::PathBuf;

use clap::Args;
use zinstall_verify::{self as verify, CompareOptions};

use crate::output;

/// Arguments of `zinstall verify`.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The original tree.
    pub a: PathBuf,
    /// The copy.
    pub b: PathBuf,
    /// Also compare access times of files (not by default: reading a
    /// tree to pack or compare it changes them, and not every tool that
    /// makes a tree keeps them).
    #[arg(long, overrides_with = "no_atime")]
    pub atime: bool,
    /// Do not compare access times (the default).
    #[arg(long, hide = true, overrides_with = "atime")]
    pub no_atime: bool,
    /// Stay on A's and B's filesystems, as `zinstall copy` does (the
    /// default): a mount point is compared, not what is mounted on it.
    #[arg(long, short = 'x', overrides_with = "cross_fs")]
    pub one_file_system: bool,
    /// Descend into directories on other filesystems (as `zinstall copy
    /// --cross-fs`). The last of -x and --cross-fs given wins.
    #[arg(long, overrides_with = "one_file_system")]
    pub cross_fs: bool,
    /// Do not compare owners (compared by default when run as root).
    #[arg(long)]
    pub no_owner: bool,
    /// Also check that files with holes stayed sparse.
    #[arg(long)]
    pub sparse: bool,
    /// Print the outcome as one JSON object (entries compared, each
    /// difference with its path) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Exit 0 if identical, 1 if they differ, 2 if they cannot be read.
pub fn run(args: &VerifyArgs) -> Exit {
    let mut opts = CompareOptions {
        sparse: args.sparse,
        atime: args.atime,
        cross_fs: args.cross_fs,
        ..Default::default()
    };
    opts.owner &= !args.no_owner;
    let result = verify::compare(&args.a, &args.b, &opts);
    if args.json {
        let v = match &result {
            Ok(c) => serde_json::json!({
                "identical": c.is_identical(),
                "entries_compared": c.entries_compared,
                "differences": c.differences.iter().map(|d| serde_json::json!({
                    "path": crate::json::path(&d.path),
                    "difference": d.kind.to_string(),
                })).collect::<Vec<_>>(),
            }),
            Err(e) => {
                crate::json::fail(true, e, crate::json::fields(e));
                return Exit::Usage;
            }
        };
        let n = result.as_ref().map_or(0, |c| c.differences.len());
        crate::json::outcome(
            n == 0,
            Some(v),
            (n > 0).then(|| {
                crate::json::error(
                    format!("{n} difference{}", if n == 1 { "" } else { "s" }),
                    serde_json::json!({ "kind": "differences" }),
                )
            }),
        );
        return match result {
            Ok(c) if c.is_identical() => Exit::Ok,
            Ok(_) => Exit::Failed,
            Err(_) => Exit::Usage,
        };
    }
    match result {
        Ok(c) if c.is_identical() => {
            output::out(format_args!(
                "identical: {} compared",
                output::count(c.entries_compared, "entry", "entries")
            ));
            Exit::Ok
        }
        Ok(c) => {
            output::out(c.to_string().trim_end());
            output::out(format_args!(
                "{} in {} compared",
                output::count(
                    c.differences.len() as u64,
                    "difference",
                    "differences"
                ),
                output::count(c.entries_compared, "entry", "entries")
            ));
            Exit::Failed
        }
        Err(e) => {
            output::error(e);
            Exit::Usage
        }
    }
}
