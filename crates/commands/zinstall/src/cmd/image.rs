//! `zinstall image create DIR OUT`: a tree made a zinstall layer.
//! `zinstall image verify REF`: whether the trust policy accepts an
//! image in a registry, and the rule that decided.
//! `zinstall image composefs DIR --store STORE`: see `image_composefs`.

use crate::exit::Exit;
use std::fs::{self, File, OpenOptions};
use std::io::BufWriter;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand, ValueEnum};
use zinstall_archive::ArchiveKind;
use zinstall_archive::compress::{Encoder, compression_for_name};
use zinstall_pack::{PackOptions, pack};

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
            ImageCommand::Verify(a) => a.json,
            ImageCommand::Composefs(a) => a.json,
        }
    }
}

/// `zinstall image` subcommands.
#[derive(Subcommand, Debug)]
pub enum ImageCommand {
    /// Pack a tree into a zinstall layer (or baseline): zinstall.json,
    /// then the tree under root/, with every attribute copy keeps.
    Create(CreateArgs),
    /// Judge an image in a registry by the trust policy
    /// (containers-policy.json(5)) as a pull would, before any layer:
    /// print the verdict and the rule (scope, requirement) that decided
    /// it. Exit 0 accepted, 1 rejected, 2 when it cannot be judged.
    Verify(VerifyArgs),
    /// Store a tree as composefs does (Linux): each regular file's
    /// contents once in an object store named by fs-verity digest, the
    /// tree's metadata in an EROFS image stored there too; print the
    /// image's ID.
    Composefs(super::image_composefs::ComposefsArgs),
}

/// Arguments of `zinstall image verify`.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The image: REGISTRY/REPO:TAG or REGISTRY/REPO@sha256:HEX.
    pub reference: String,
    /// Policy, registries.d and plain-HTTP registries, as a pull takes
    /// them.
    #[command(flatten)]
    pub pull: crate::pull::PullArgs,
    /// Print the verdict as one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
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
pub fn run(args: &ImageArgs) -> Exit {
    match &args.command {
        ImageCommand::Create(a) => create(a),
        ImageCommand::Verify(a) => verify(a),
        ImageCommand::Composefs(a) => super::image_composefs::run(a),
    }
}

fn verify(args: &VerifyArgs) -> Exit {
    let reference = match zinstall_registry::Reference::parse(&args.reference) {
        Ok(r) => r,
        Err(e) => {
            crate::json::fail(args.json, &e, serde_json::Value::Null);
            return Exit::Usage;
        }
    };
    let trust = match args.pull.trust(None) {
        Ok(Some(t)) => t,
        Ok(None) => {
            crate::json::fail(
                args.json,
                format_args!(
                    "no trust policy: {} does not exist and --policy names \
                     none",
                    zinstall_registry::policy::SYSTEM_POLICY
                ),
                serde_json::Value::Null,
            );
            return Exit::Usage;
        }
        Err(e) => {
            crate::json::fail(args.json, &e, crate::json::policy_fields(&e));
            return Exit::Usage;
        }
    };
    // Nothing is stored: the store is never made.
    let registry = zinstall_registry::Registry::new(Path::new("/nonexistent"))
        .insecure(args.pull.insecure_registry.clone())
        .fetch_deadline(args.pull.deadline())
        .trust(Some(trust));
    let (digest, verdict) = match registry.verify(&reference) {
        Ok(Some(v)) => v,
        Ok(None) => unreachable!("a trust policy was given"),
        Err(e) => {
            crate::json::fail(args.json, &e, serde_json::Value::Null);
            return Exit::Usage;
        }
    };
    let shown = reference.to_string();
    if args.json {
        let v = crate::json::verdict(&shown, &digest.to_string(), &verdict);
        // A rejection is the command's failure: `error` says why, as the
        // schema has every failure do.
        let error = verdict.refusal.as_ref().map(|(req, why, detail)| {
            crate::json::error(
                format_args!(
                    "{shown}: rejected by {} scope {:?} requirement {req}: \
                     {why}: {detail}",
                    verdict.policy.display(),
                    verdict.scope
                ),
                serde_json::json!({"kind": "rejected"}),
            )
        });
        crate::json::outcome(verdict.accepted(), Some(v), error);
    } else {
        match &verdict.refusal {
            None => println!(
                "{shown}: accepted ({digest}) by {} scope {:?}: {}",
                verdict.policy.display(),
                verdict.scope,
                verdict.requirements.join(", ")
            ),
            Some((req, why, detail)) => println!(
                "{shown}: rejected ({digest}) by {} scope {:?} requirement \
                 {req}: {why}: {detail}",
                verdict.policy.display(),
                verdict.scope,
            ),
        }
    }
    if verdict.accepted() {
        Exit::Ok
    } else {
        Exit::Failed
    }
}

fn create(args: &CreateArgs) -> Exit {
    let Some(c) = compression_for_name(&args.out) else {
        output::error(format_args!(
            "{}: the name must end in .tar, .tar.gz, .tar.zst or .tar.xz \
             (it says the compression)",
            args.out.display()
        ));
        return Exit::Usage;
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
        return Exit::Failed;
    }
    // Written beside OUT under a name of its own, renamed into place
    // once whole: a failed or killed run leaves no archive that looks
    // complete.
    let partial = partial_name(&args.out);
    // A new file of ours (O_EXCL, O_NOFOLLOW).
    #[allow(clippy::disallowed_methods)]
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
            return Exit::Failed;
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
            let size = fs::symlink_metadata(&args.out)
                .map(|m| m.len())
                .unwrap_or(0);
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
            Exit::Ok
        }
        Err(msg) => {
            let _gone = fs::remove_file(&partial);
            output::error(msg);
            Exit::Failed
        }
    }
}

fn write_archive(
    args: &CreateArgs,
    f: File,
    c: zinstall_archive::compress::Compression,
    kind: ArchiveKind,
) -> Result<zinstall_engine::Stats, String> {
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
