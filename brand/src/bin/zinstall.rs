//! `zinstall`: copy trees, install roots, provision guests.

use std::process::ExitCode;

use brand::cmd;
use clap::{Parser, Subcommand};

/// Fast, faithful installation of zone roots, rootfs trees and VM guests.
#[derive(Parser, Debug)]
#[command(name = "zinstall", version, about, max_term_width = 100)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Copy a tree faithfully and in parallel (like cp -a, faster).
    Copy(cmd::copy::CopyArgs),
    /// Install a zone root or rootfs from a profile, a baseline and images.
    Install(cmd::install::InstallArgs),
    /// Remove an installed root.
    Uninstall(cmd::install::UninstallArgs),
    /// Make guests (directory roots or qcow2 disks) from one cached image.
    Provision(cmd::provision::ProvisionArgs),
    /// List or collect the image cache.
    Cache(cmd::provision::CacheArgs),
    /// Draw a statemap as SVG and print each thread's time per state.
    Statemap(cmd::statemap::StatemapArgs),
    /// Trace a command's threads with bpftrace into a statemap.
    Trace(cmd::trace::TraceArgs),
    /// Find the best COPY_THREADS and COPY_BATCH for a tree and filesystem.
    Tune(cmd::tune::TuneArgs),
    /// Compare two trees on every attribute a faithful copy keeps.
    Verify(cmd::verify::VerifyArgs),
}

fn main() -> ExitCode {
    // Probes only matter to a tracer; failing to register them is said,
    // not fatal.
    if let Err(e) = copier::probes::register() {
        brand::output::note(format_args!("USDT probes not registered: {e}"));
    }
    let cli = Cli::parse();
    match &cli.command {
        Command::Copy(a) => cmd::copy::run(a),
        Command::Install(a) => cmd::install::install(a),
        Command::Uninstall(a) => cmd::install::uninstall(a),
        Command::Provision(a) => cmd::provision::provision(a),
        Command::Cache(a) => cmd::provision::cache(a),
        Command::Statemap(a) => cmd::statemap::run(a),
        Command::Verify(a) => cmd::verify::run(a),
        Command::Trace(a) => cmd::trace::run(a),
        Command::Tune(a) => cmd::tune::run(a),
    }
}
