//! `zinstalld`: the installer daemon. See zinstalld(8).

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use zinstall::exit::Exit;

use clap::Parser;
use zinstall_daemon::config::DEFAULT_CONFIG;
use zinstall_daemon::server::{self, Options, ServeError};

/// Serve copies, installs and provisions to many clients over a Unix
/// socket, with one worker budget, one cache and one log.
#[derive(Parser, Debug)]
#[command(name = "zinstalld", version = zinstall::cli::VERSION, max_term_width = 100)]
struct Args {
    /// The configuration [default: /etc/zinstall/zinstalld.toml, which may
    /// be absent].
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Listen here instead of the configuration's socket.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
}

fn main() -> ExitCode {
    // Before anything else, a job's process included. As Go's runtime and systemd do: a caller's low default (zoneadm's
    // 256 on illumos) must not bound how wide a tree can be copied. A
    // limit that cannot be raised is the one the budget is derived from.
    let _kept = zinstall_engine::descriptors::raise_limit();
    // A granted job's process (see zinstalld(8)): the daemon starts its
    // own binary again with this first argument, never a user.
    let child = zinstall_daemon::process::CHILD_ARG;
    if std::env::args_os().nth(1).is_some_and(|a| a == child) {
        let rest: Vec<String> = std::env::args_os()
            .skip(2)
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        return match zinstall_daemon::process::child_main(&rest) {
            Ok(()) => Exit::Ok,
            Err(_) => Exit::Usage,
        }
        .into();
    }
    zinstall::output::set_program("zinstalld");
    let args = Args::parse();
    if let Err(e) = zinstall_engine::probes::register() {
        zinstall::output::note(format_args!("USDT probes not registered: {e}"));
    }
    let opts = Options {
        config_required: args.config.is_some(),
        config: args.config.unwrap_or_else(|| DEFAULT_CONFIG.into()),
        socket: args.socket,
        version: zinstall::cli::VERSION.to_string(),
    };
    match server::run(opts, zinstall_install::log::to_stderr("zinstalld")) {
        Ok(()) => Exit::Ok.into(),
        Err(e) => {
            // The daemon's own messages name it, not the CLI (a
            // parser's quoted line and caret on lines of their own).
            zinstall::output::error(&e);
            match e {
                ServeError::Config(_) | ServeError::Engine(_) => Exit::Usage,
                ServeError::Socket { .. } => Exit::Failed,
            }
            .into()
        }
    }
}
