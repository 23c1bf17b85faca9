//! `zinstall`: copy trees, install roots, provision guests.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use brand::cli::{self, Cli};
use clap::Parser;

fn main() -> ExitCode {
    // Probes only matter to a tracer; failing to register them is said,
    // not fatal.
    if let Err(e) = copier::probes::register() {
        brand::output::note(format_args!("USDT probes not registered: {e}"));
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(done) = cli::completions_request(&args) {
        return done;
    }
    match Cli::try_parse_from(&args) {
        Ok(cli) => cli::run(&cli),
        Err(e) => cli::usage_error(e, &args),
    }
}
