//! `zinstall`: copy trees, install roots, provision guests.

use std::process::ExitCode;

use brand::cli::{self, Invocation};
use clap::Parser;

fn main() -> ExitCode {
    // Probes only matter to a tracer; failing to register them is said,
    // not fatal.
    if let Err(e) = copier::probes::register() {
        brand::output::note(format_args!("USDT probes not registered: {e}"));
    }
    cli::run(&Invocation::parse())
}
