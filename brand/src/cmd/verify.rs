//! `zinstall verify A B`: compare two trees on every attribute.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use copier::verify::{self, CompareOptions};

use crate::output;

/// Arguments of `zinstall verify`.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The original tree.
    pub a: PathBuf,
    /// The copy.
    pub b: PathBuf,
    /// Do not compare access times.
    #[arg(long)]
    pub no_atime: bool,
    /// Do not compare owners (compared by default when run as root).
    #[arg(long)]
    pub no_owner: bool,
    /// Also check that files with holes stayed sparse.
    #[arg(long)]
    pub sparse: bool,
}

/// Exit 0 if identical, 1 if they differ, 2 if they cannot be read.
pub fn run(args: &VerifyArgs) -> ExitCode {
    let mut opts = CompareOptions {
        sparse: args.sparse,
        ..Default::default()
    };
    opts.atime &= !args.no_atime;
    opts.owner &= !args.no_owner;
    match verify::compare(&args.a, &args.b, &opts) {
        Ok(c) if c.is_identical() => {
            output::out(format_args!(
                "identical: {} entries compared",
                c.entries_compared
            ));
            ExitCode::SUCCESS
        }
        Ok(c) => {
            output::out(c.to_string().trim_end());
            output::out(format_args!(
                "{} differences in {} entries compared",
                c.differences.len(),
                c.entries_compared
            ));
            ExitCode::from(1)
        }
        Err(e) => {
            output::error(e);
            ExitCode::from(2)
        }
    }
}
