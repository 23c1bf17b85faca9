//! `zinstall`: copy trees, install roots, provision guests.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use zinstall::cli::{self, Cli};

fn main() -> ExitCode {
    // As Go's runtime and systemd do: a caller's low default (zoneadm's
    // 256 on illumos) must not bound how wide a tree can be copied. A
    // limit that cannot be raised is the one the budget is derived from.
    let _kept = zinstall_engine::descriptors::raise_limit();
    // Probes only matter to a tracer; failing to register them is said,
    // not fatal.
    if let Err(e) = zinstall_engine::probes::register() {
        zinstall::output::note(format_args!("USDT probes not registered: {e}"));
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(done) = cli::completions_request(&args) {
        return done.into();
    }
    if let Some(refused) = cli::spaced_value(&args) {
        return refused.into();
    }
    match Cli::parse_ordered(&args) {
        Ok(cli) => cli::run(&cli),
        Err(e) => cli::usage_error(e, &args),
    }
    .into()
}
