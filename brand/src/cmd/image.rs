//! `zinstall image create DIR OUT`: a tree made a zinstall layer.

use std::fs::{self, File, OpenOptions};
use std::io::BufWriter;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use copier::pack::{PackOptions, pack};
use zinstall_archive::ArchiveKind;
use zinstall_archive::compress::{Encoder, compression_for_name};

use crate::output;

/// Arguments of `zinstall image`.
#[derive(Args, Debug)]
pub struct ImageArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ImageCommand,
}

impl ImageArgs {
    /// Whether the outcome is asked for as JSON.
    pub fn json(&self) -> bool {
        match &self.command {
            ImageCommand::Create(a) => a.json,
        }
    }
}

/// `zinstall image` subcommands.
#[derive(Subcommand, Debug)]
pub enum ImageCommand {
    /// Pack a tree into a zinstall layer (or baseline): zinstall.json,
    /// then the tree under root/, with every attribute copy keeps.
    Create(CreateArgs),
}

/// What `zinstall.json` says.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Kind {
    /// An image layer.
    Layer,
    /// A baseline archive.
    Baseline,
}

/// Arguments of `zinstall image create`.
#[derive(Args, Debug)]
pub struct CreateArgs {
    /// The tree to pack.
    pub dir: PathBuf,
    /// The archive to write: `.tar`, `.tar.gz`, `.tar.zst` or `.tar.xz`
    /// (the name says the compression). It must not exist.
    pub out: PathBuf,
    /// Layer or baseline.
    #[arg(long, value_enum, default_value = "layer")]
    pub kind: Kind,
    /// Print each member packed, as `tar -v` does.
    #[arg(long, short)]
    pub verbose: bool,
    /// Print the outcome as one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `zinstall image`.
pub fn run(args: &ImageArgs) -> ExitCode {
    match &args.command {
        ImageCommand::Create(a) => create(a),
    }
}

fn create(args: &CreateArgs) -> ExitCode {
    let Some(c) = compression_for_name(&args.out) else {
        output::error(format_args!(
            "{}: the name must end in .tar, .tar.gz, .tar.zst or .tar.xz \
             (it says the compression)",
            args.out.display()
        ));
        return ExitCode::from(2);
    };
    let kind = match args.kind {
        Kind::Layer => ArchiveKind::Layer,
        Kind::Baseline => ArchiveKind::Baseline,
    };
    if fs::symlink_metadata(&args.out).is_ok() {
        output::error(format_args!(
            "{}: exists already; nothing was written",
            args.out.display()
        ));
        return ExitCode::from(1);
    }
    // Written beside OUT under a name of its own, renamed into place
    // once whole: a failed or killed run leaves no archive that looks
    // complete.
    let partial = partial_name(&args.out);
    let f = match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(&partial)
    {
        Ok(f) => f,
        Err(e) => {
            output::error(format_args!("create {}: {e}", partial.display()));
            return ExitCode::from(1);
        }
    };
    let r = write_archive(args, f, c, kind);
    let r = r.and_then(|stats| {
        if fs::symlink_metadata(&args.out).is_ok() {
            return Err(format!(
                "{}: exists already; nothing was replaced",
                args.out.display()
            ));
        }
        fs::rename(&partial, &args.out)
            .map(|()| stats)
            .map_err(|e| {
                format!(
                    "rename {} to {}: {e}",
                    partial.display(),
                    args.out.display()
                )
            })
    });
    match r {
        Ok(stats) => {
            let size = fs::metadata(&args.out).map(|m| m.len()).unwrap_or(0);
            if args.json {
                crate::json::result(serde_json::json!({
                    "archive": crate::json::path(&args.out),
                    "kind": kind.as_str(),
                    "compression": c.name(),
                    "archive_bytes": size,
                    "stats": crate::json::stats(&stats),
                }));
            } else {
                output::out(format_args!(
                    "packed {} -> {} ({}, {}): {stats}",
                    output::show(&args.dir),
                    output::show(&args.out),
                    c.name(),
                    output::human_bytes(size)
                ));
            }
            ExitCode::SUCCESS
        }
        Err(msg) => {
            let _gone = fs::remove_file(&partial);
            output::error(msg);
            ExitCode::from(1)
        }
    }
}

fn write_archive(
    args: &CreateArgs,
    f: File,
    c: zinstall_archive::compress::Compression,
    kind: ArchiveKind,
) -> Result<copier::Stats, String> {
    let shown =
        |e: std::io::Error| format!("write {}: {e}", args.out.display());
    let enc =
        Encoder::new(BufWriter::with_capacity(1 << 20, f), c).map_err(shown)?;
    let mut enc = enc;
    let verbose = args.verbose && !args.json;
    let mut on_entry = |rel: &Path| {
        if verbose {
            output::out(format_args!("root/{}", rel.display()));
        }
    };
    let stats = pack(
        &args.dir,
        &mut enc,
        &args.out,
        &PackOptions { kind },
        &mut on_entry,
    )
    .map_err(|e| e.to_string())?;
    let buf = enc.finish().map_err(shown)?;
    let f = buf.into_inner().map_err(|e| shown(e.into_error()))?;
    f.sync_all().map_err(shown)?;
    Ok(stats)
}

/// `DIR/.NAME.partial.PID`.
fn partial_name(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    out.with_file_name(format!(".{name}.partial.{}", std::process::id()))
}
