//! The `zinstall` command line: its clap definition, shared by the binary,
//! the shell completions it writes, and the test that holds zinstall(8)
//! to it.

use crate::exit::Exit;
use std::io::Write;
use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};

use crate::cmd;

/// The version `--version` prints: the package version and the commit it
/// was built from (`-dirty` with uncommitted changes, `unknown` outside
/// git unless `ZINSTALL_COMMIT` was set at build time).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("ZINSTALL_COMMIT"),
    ")"
);

/// What `zinstall --help` says first.
const ABOUT: &str =
    "Fast, faithful installation of zone roots, rootfs trees and VM guests.";

/// The command line as users see it: what `--help`, the shell
/// completions and zinstall(8) describe.
#[derive(Parser, Debug)]
#[command(name = "zinstall", version = VERSION, about = ABOUT, max_term_width = 100)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Have zinstalld run the command, at its socket (default
    /// /run/zinstall/zinstalld.sock; also ZINSTALL_DAEMON): copy,
    /// install, uninstall, provision, cache, jobs and cancel, with the
    /// same output (other commands refuse it). Also taken after each of
    /// those commands. The = is required: a socket written after a space
    /// is refused, saying to write --daemon=PATH.
    #[arg(long, value_name = "SOCKET", num_args = 0..=1,
          require_equals = true)]
    pub daemon: Option<Option<PathBuf>>,
}

impl Cli {
    /// Parses `args`, keeping what clap's derived values lose: the order
    /// of `provision --run` and `--run-command` between each other.
    pub fn parse_ordered(
        args: &[std::ffi::OsString],
    ) -> Result<Cli, clap::Error> {
        use clap::FromArgMatches;
        let m = Cli::command().try_get_matches_from(args)?;
        let mut cli = Cli::from_arg_matches(&m)?;
        if let (Command::Provision(a), Some(("provision", pm))) =
            (&mut cli.command, m.subcommand())
        {
            a.customize.order_runs(pm);
        }
        Ok(cli)
    }

    /// `--daemon` as given before the command or after it.
    fn daemon(&self) -> Option<Option<PathBuf>> {
        let after = match &self.command {
            Command::Copy(a) => &a.remote.daemon,
            Command::Install(a) => &a.remote.daemon,
            Command::Uninstall(a) => &a.remote.daemon,
            Command::Update(a) => &a.remote.daemon,
            Command::Rollback(a) => &a.remote.daemon,
            Command::Provision(a) => &a.remote.daemon,
            Command::Cache(a) => &a.daemon,
            Command::Jobs(a) => &a.remote.daemon,
            Command::Cancel(a) => &a.remote.daemon,
            _ => &None,
        };
        after.clone().or_else(|| self.daemon.clone())
    }
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Copy a tree faithfully and in parallel (like cp -a, faster).
    Copy(cmd::copy::CopyArgs),
    /// Install a zone root or rootfs from a profile, a baseline and images.
    Install(cmd::install::InstallArgs),
    /// Remove an installed root.
    Uninstall(cmd::install::UninstallArgs),
    /// Bring an installed root in line with the profile's trees: only
    /// what changed is written, switched in whole; the zone's changes kept.
    Update(cmd::update::UpdateArgs),
    /// Switch back to the root before the last update.
    Rollback(cmd::update::RollbackArgs),
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
    /// Make zinstall images: pack a tree into a layer.
    Image(cmd::image::ImageArgs),
    /// Mount a composefs root (a guest or zonepath) on DIR/root.
    Mount(cmd::mount::MountArgs),
    /// Unmount a composefs root's DIR/root.
    Unmount(cmd::mount::UnmountArgs),
    /// List zinstalld's jobs.
    Jobs(cmd::remote::JobsArgs),
    /// Cancel one of zinstalld's jobs.
    Cancel(cmd::remote::CancelArgs),
}

impl Command {
    /// The command's name, as typed.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Copy(_) => "copy",
            Command::Install(_) => "install",
            Command::Uninstall(_) => "uninstall",
            Command::Update(_) => "update",
            Command::Rollback(_) => "rollback",
            Command::Provision(_) => "provision",
            Command::Cache(_) => "cache",
            Command::Statemap(_) => "statemap",
            Command::Trace(_) => "trace",
            Command::Tune(_) => "tune",
            Command::Verify(_) => "verify",
            Command::Image(_) => "image",
            Command::Mount(_) => "mount",
            Command::Unmount(_) => "unmount",
            Command::Jobs(_) => "jobs",
            Command::Cancel(_) => "cancel",
        }
    }
}

/// `zinstall completions SHELL`, the packagers' command that writes a
/// completion script (pkg/Makefile installs them), read before clap
/// parses: a hidden subcommand of [`Cli`] would be offered by the
/// completions themselves and by clap's typo tips. `None` for any other
/// command line.
pub fn completions_request(args: &[std::ffi::OsString]) -> Option<Exit> {
    if args.get(1).is_none_or(|a| a != "completions") {
        return None;
    }
    use clap::ValueEnum;
    let shell = match &args[2..] {
        [s] => s
            .to_str()
            .and_then(|s| clap_complete::Shell::from_str(s, false).ok()),
        _ => None,
    };
    Some(match shell {
        Some(shell) => completions(shell),
        None => {
            crate::output::error(
                "usage: zinstall completions bash|zsh|fish|elvish|powershell",
            );
            Exit::Usage
        }
    })
}

/// A command line whose value to an `=` option was written after a
/// space, where the next argument is surely that value: refused before
/// clap reads it as the command's argument (exit 2). `None` otherwise.
pub fn spaced_value(args: &[std::ffi::OsString]) -> Option<Exit> {
    let said = crate::habits::spaced_value(args)?;
    let json = args
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "--json");
    crate::json::fail(json, said, serde_json::json!({ "kind": "usage" }));
    Some(Exit::Usage)
}

/// Runs the command the arguments name.
pub fn run(cli: &Cli) -> Exit {
    let command = &cli.command;
    crate::json::set_command(command.name());
    use cmd::provision::{CacheArgs, CacheCommand};
    use cmd::remote;
    let daemon = cli.daemon();
    if let Some(sock) = remote::socket(&daemon) {
        match command {
            Command::Copy(a) => return remote::copy(&sock, a),
            Command::Install(a) => return remote::install(&sock, a),
            Command::Uninstall(a) => return remote::uninstall(&sock, a),
            Command::Update(a) => return remote::update(&sock, a),
            Command::Rollback(a) => return remote::rollback(&sock, a),
            Command::Provision(a) => return remote::provision(&sock, a),
            Command::Cache(a) => {
                match &a.command {
                    CacheCommand::List { json } => {
                        return remote::cache_list(&sock, *json);
                    }
                    CacheCommand::Gc {
                        max_size,
                        dry_run,
                        search,
                        release_missing,
                        json,
                    } => {
                        return remote::cache_gc(
                            &sock,
                            zinstall_daemon::protocol::GcArgs {
                                dry_run: *dry_run,
                                max_size: *max_size,
                                release_missing: *release_missing,
                            },
                            search,
                            *json,
                        );
                    }
                    // Read here: see below. The store is read in place
                    // by whoever may read it (root, as the daemon runs).
                    CacheCommand::InUse { .. }
                    | CacheCommand::Verify { .. } => {}
                };
            }
            _ => {}
        }
    }
    // The flag, given to a command it does not apply to, is refused
    // rather than ignored (ZINSTALL_DAEMON names a default only).
    let local = match command {
        Command::Statemap(_) => Some(("statemap", false)),
        Command::Trace(_) => Some(("trace", false)),
        Command::Tune(_) => Some(("tune", false)),
        Command::Verify(a) => Some(("verify", a.json)),
        Command::Image(a) => Some(("image", a.json())),
        Command::Mount(_) => Some(("mount", false)),
        Command::Unmount(_) => Some(("unmount", false)),
        // What guests still read is asked of the cache's files, by the
        // package's purge among others, with zinstalld stopped.
        Command::Cache(CacheArgs {
            command: CacheCommand::InUse { json, .. },
            ..
        }) => Some(("cache in-use", *json)),
        _ => None,
    };
    if let (Some((name, json)), Some(_)) = (local, &cli.daemon) {
        crate::json::fail(
            json,
            format_args!(
                "--daemon does not apply to {name}, which always runs here; \
                 the daemon runs copy, install, uninstall, update, rollback, \
                 provision, cache (but cache in-use), jobs and cancel"
            ),
            serde_json::json!({ "kind": "usage" }),
        );
        return Exit::Usage;
    }
    match command {
        Command::Jobs(a) => {
            remote::jobs(&remote::socket_or_default(&daemon), a)
        }
        Command::Cancel(a) => {
            remote::cancel(&remote::socket_or_default(&daemon), a)
        }
        Command::Copy(a) => cmd::copy::run(a),
        Command::Install(a) => cmd::install::install(a),
        Command::Uninstall(a) => cmd::install::uninstall(a),
        Command::Update(a) => cmd::update::run(a),
        Command::Rollback(a) => cmd::update::rollback(a),
        Command::Provision(a) => cmd::provision::provision(a),
        Command::Cache(a) => cmd::provision::cache(a),
        Command::Statemap(a) => cmd::statemap::run(a),
        Command::Verify(a) => cmd::verify::run(a),
        Command::Trace(a) => cmd::trace::run(a),
        Command::Tune(a) => cmd::tune::run(a),
        Command::Image(a) => cmd::image::run(a),
        Command::Mount(a) => cmd::mount::mount(a),
        Command::Unmount(a) => cmd::mount::unmount(a),
    }
}

/// A command line clap refused: printed as clap prints it, or, with
/// `--json` among the options, as a JSON error object on standard output
/// (exit 2 either way; help and version go as asked).
pub fn usage_error(e: clap::Error, args: &[std::ffi::OsString]) -> Exit {
    use clap::error::ErrorKind;
    // The outcome names the command the line was for, when it names one.
    if let Some(name) = args.get(1).and_then(|a| a.to_str()) {
        let known = Cli::command()
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .find(|s| s == name);
        if let Some(n) = known {
            crate::json::set_command(&n);
        }
    }
    let json = args
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "--json");
    let shown = matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    // `--daemon` after a command zinstalld does not run: said as the
    // flag before it is, not with clap's tip to quote it.
    if e.kind() == ErrorKind::UnknownArgument
        && let Some(clap::error::ContextValue::String(arg)) =
            e.get(clap::error::ContextKind::InvalidArg)
        && (arg == "--daemon" || arg.starts_with("--daemon="))
    {
        let name = args
            .get(1..)
            .into_iter()
            .flatten()
            .find(|a| !a.to_string_lossy().starts_with('-'))
            .map_or_else(String::new, |a| a.to_string_lossy().into_owned());
        crate::json::fail(
            json,
            format_args!(
                "--daemon does not apply to {name}, which always runs here; \
                 the daemon runs copy, install, uninstall, provision, cache, \
                 jobs and cancel"
            ),
            serde_json::json!({ "kind": "usage" }),
        );
        return Exit::Usage;
    }
    if !shown && let Some(said) = crate::habits::answer(&e, args) {
        crate::json::fail(json, said, serde_json::json!({ "kind": "usage" }));
        return Exit::Usage;
    }
    if !json || shown {
        e.exit()
    }
    // The error's lines, up to the usage that follows them.
    let text = e.render().to_string();
    let message = text
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ");
    let message = message.strip_prefix("error: ").unwrap_or(&message);
    crate::json::fail(true, message, serde_json::json!({ "kind": "usage" }));
    Exit::Usage
}

/// Writes the completion script for `shell` to standard output.
fn completions(shell: clap_complete::Shell) -> Exit {
    let mut script = Vec::new();
    clap_complete::generate(
        shell,
        &mut Cli::command(),
        "zinstall",
        &mut script,
    );
    let mut out = std::io::stdout().lock();
    match out.write_all(&script).and_then(|()| out.flush()) {
        Ok(()) => Exit::Ok,
        Err(e) => {
            crate::output::error(format_args!(
                "writing the {shell} completions to standard output: {e}"
            ));
            Exit::Failed
        }
    }
}
