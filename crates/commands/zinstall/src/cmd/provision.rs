//! `zinstall provision` and `zinstall cache`.

use crate::exit::Exit;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock};

use clap::{Args, Subcommand};
use serde_json::Value;
use zinstall_daemon::replies::{CacheEntryReply, GcReply, ProvisionReply};
use zinstall_provision::GuestFormat;
use zinstall_provision::cache::{Cache, GcOptions};
use zinstall_provision::identity::{HostKeys, MachineId};
use zinstall_provision::{
    self as provision, ProvisionOptions, ProvisionRequest,
};

use crate::cmd::cache_print::{print_cache_list, print_gc, print_in_use};
use crate::cmd::provision_dry::DryRunSummary;
use crate::cmd::provision_seed::SeedArgs;
use crate::output::{self, Bar};
use crate::settings::TunableArgs;

/// The cache's default place (the provisioning library's).
pub use zinstall_provision::DEFAULT_CACHE;

/// `--max-archive-size`'s default: the archive library's bound, written
/// as the flag takes it.
static DEFAULT_MAX_ARCHIVE_SIZE: LazyLock<String> =
    LazyLock::new(|| size_text(zinstall_archive::tar::DEFAULT_MAX_TOTAL_BYTES));

/// Arguments of `zinstall provision`.
#[derive(Args, Debug)]
pub struct ProvisionArgs {
    #[command(flatten)]
    pub remote: crate::cmd::daemon_arg::DaemonArg,
    /// A rootfs archive (tar, tar.gz, tar.zst, tar.xz, tar.bz2,
    /// tar.lz4), an OCI image (layout directory, oci-archive or docker
    /// save archive; IMAGE:REF names one in it; or oci:DIR[:REF],
    /// oci-archive:FILE[:REF], docker-archive:FILE[:REF]) or a disk image
    /// (raw or qcow2; VMDK, VDI, VHD, VHDX, QED, Parallels through
    /// qemu-img; plain or compressed
    /// with gzip, zstd, xz, bzip2 or lz4), told by content; or
    /// REGISTRY/REPO:TAG or
    /// REGISTRY/REPO@sha256:..., pulled into the cache.
    pub image: PathBuf,
    #[command(flatten)]
    pub pull: crate::pull::PullArgs,
    /// Guests to make (1 to 65536).
    #[arg(long, default_value_t = 1, value_parser = parse_count)]
    pub count: usize,
    /// Where the guests go.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Guests are named NAME-0 ... NAME-(N-1).
    #[arg(long, default_value = "guest")]
    pub name: String,
    /// Virtual size of disk guests (bytes, or with K, M, G, T); never
    /// below the image's, at most 2P (qcow2's limit).
    #[arg(long, value_parser = parse_virtual_size)]
    pub size: Option<u64>,
    /// The image cache.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_CACHE)]
    pub cache: PathBuf,
    /// Refuse the image unless its SHA-256 is this (hex).
    #[arg(long, value_name = "HEX")]
    pub sha256: Option<String>,
    /// Make overlays with qemu-img (--qemu-img=PATH: that one) instead
    /// of natively; qcow2 images the native reader lacks a feature for
    /// are converted with it, formats zinstall does not read too (without
    /// it: the qemu-img on PATH). The = is required, so
    /// that the image is not taken for the path; a qemu-img written
    /// after a space is refused, saying to write --qemu-img=PATH.
    #[arg(long, value_name = "PATH", num_args = 0..=1, require_equals = true,
          default_missing_value = "/usr/bin/qemu-img")]
    pub qemu_img: Option<PathBuf>,
    /// Follow a qcow2 image's backing and data file names that are
    /// absolute or have `..` when they lead beneath DIR. Names beside
    /// the image are always followed; symlinks never are.
    #[arg(long, value_name = "DIR")]
    pub backing_dir: Option<PathBuf>,
    /// The key of an encrypted qcow2 image: FILE holds exactly its
    /// passphrase; qemu-img (--qemu-img, or the one on PATH) decrypts the
    /// image with it.
    #[arg(long, value_name = "FILE")]
    pub secret_file: Option<PathBuf>,
    /// Refuse archives unpacking to more than this, compressed qcow2
    /// images decompressing to more, and registry blobs declaring more.
    #[arg(long, value_parser = parse_size,
          default_value = DEFAULT_MAX_ARCHIVE_SIZE.as_str())]
    pub max_archive_size: u64,
    /// The platform an OCI image must be for, and the one chosen from a
    /// multi-platform index (OS/ARCH[/VARIANT]; default: this host's).
    #[arg(long, value_name = "OS/ARCH")]
    pub platform: Option<zinstall_engine::oci::Platform>,
    /// Make the image's device nodes (a root filesystem's /dev), as
    /// root; without it an image holding one is refused, naming it.
    #[arg(long)]
    pub allow_devices: bool,
    /// Mode of the cache directory (octal): given, it is also applied to
    /// an existing cache; by default a new cache is made 0700.
    #[arg(long, value_name = "OCTAL", value_parser = parse_mode)]
    pub cache_mode: Option<u32>,
    #[command(flatten)]
    pub tunables: TunableArgs,
    /// Print the outcome as one JSON object (image, entry, how it was
    /// obtained, each guest) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Print each entry written, `'src' -> 'dst'`: an archive's members
    /// as the cache entry is built, then each directory guest's entries.
    #[arg(long, short)]
    pub verbose: bool,
    /// Write nothing: tell the image, find whether the cache holds it
    /// (by the file's identity, without reading it), check that no guest
    /// is there yet, and say what would be done.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Guests' hostname: {n} is the guest's number, {name} its name
    /// (default {name}); a disk guest's seed sets it too.
    #[arg(long, value_name = "PATTERN", help = crate::output::verbatim(
        "Guests' hostname: {n} is the guest's number, {name} its name \
         (default {name}); a disk guest's seed sets it too"
    ))]
    pub hostname: Option<String>,
    /// Directory guests' /etc/machine-id: a new one each (generate, the
    /// default), `uninitialized` for systemd's first boot (first-boot),
    /// or the image's (keep).
    #[arg(long, value_name = "HOW", value_parser = MachineId::parse)]
    pub machine_id: Option<MachineId>,
    /// Directory guests' SSH host keys: new ones each, made with
    /// ssh-keygen (generate, the default), removed for the guest to make
    /// at boot (remove), or the image's (keep).
    #[arg(long, value_name = "HOW", value_parser = HostKeys::parse)]
    pub ssh_host_keys: Option<HostKeys>,
    /// Directory guests keep the image's hostname, machine-id and host
    /// keys: exact copies.
    #[arg(long, conflicts_with_all = ["hostname", "machine_id", "ssh_host_keys"])]
    pub keep_identity: bool,
    /// Replace guests already at the guests' paths.
    #[arg(long)]
    pub force: bool,
    /// What a tree image's guests are: a copy each (tree), or composefs
    /// roots sharing one image and store, each with its own upper layer
    /// (composefs, Linux; mount with `zinstall mount`).
    #[arg(long, value_name = "FORMAT", default_value = "tree",
          value_parser = GuestFormat::parse)]
    pub format: GuestFormat,
    /// Leave each composefs guest mounted on its root/.
    #[arg(long)]
    pub mount: bool,
    /// Boxed: the command enum's variants stay of a size.
    #[command(flatten)]
    pub customize: Box<crate::cmd::customize::CustomizeArgs>,
    #[command(flatten)]
    pub seed: Box<SeedArgs>,
}

impl ProvisionArgs {
    /// What the flags ask of the provisioning (what `--daemon` sends).
    fn request(&self) -> ProvisionRequest {
        ProvisionRequest {
            count: self.count,
            out: self.out.clone(),
            name: self.name.clone(),
            size: self.size,
            sha256: self.sha256.clone(),
            max_archive_bytes: Some(self.max_archive_size),
            allow_devices: self.allow_devices,
            keep_identity: self.keep_identity,
            hostname: self.hostname.clone(),
            machine_id: self.machine_id,
            ssh_host_keys: self.ssh_host_keys,
            force: self.force,
            platform: self.platform.clone(),
            format: self.format,
            mount: self.mount,
            // Made from the customisation options by `provision`; the
            // seed's options are refused with --daemon.
            seed: None,
        }
    }
}

/// An octal mode of at most 0777.
pub fn parse_mode(s: &str) -> Result<u32, String> {
    let m = u32::from_str_radix(s.trim().trim_start_matches("0o"), 8)
        .map_err(|_| format!("{s:?} is not an octal mode"))?;
    if m > 0o777 {
        return Err(format!("{s:?}: a mode is at most 0777"));
    }
    Ok(m)
}

/// `zinstall cache ...`.
#[derive(Args, Debug)]
pub struct CacheArgs {
    #[command(subcommand)]
    pub command: CacheCommand,
    /// The image cache.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_CACHE, global = true)]
    pub cache: PathBuf,
    /// Have zinstalld do this, at its socket (default
    /// /run/zinstall/zinstalld.sock; also ZINSTALL_DAEMON), with the same
    /// output. The = is required.
    #[arg(long, value_name = "SOCKET", num_args = 0..=1, require_equals = true,
          global = true)]
    pub daemon: Option<Option<PathBuf>>,
}

/// What to do with the cache.
#[derive(Subcommand, Debug)]
pub enum CacheCommand {
    /// List entries: kind, digest, size, age, source, guests using them.
    List {
        /// Print the entries as one JSON array.
        #[arg(long)]
        json: bool,
    },
    /// Remove entries no guest uses, oldest first, and pulled images no
    /// remaining entry was made from (with their blobs and partial
    /// downloads).
    Gc {
        /// Stop once the cache is at most this big.
        #[arg(long, value_parser = parse_size)]
        max_size: Option<u64>,
        /// Say what would be removed and why; remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// Also look for guests (moved or copied) under this directory;
        /// repeatable.
        #[arg(long, value_name = "DIR")]
        search: Vec<PathBuf>,
        /// Let disk entries go whose recorded guests are found nowhere
        /// searched (they were deleted); without it they stay.
        #[arg(long)]
        release_missing: bool,
        /// Print the decisions as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Re-hash every object of the cache's composefs store against its
    /// name; exit 1 naming each that does not match.
    Verify {
        /// Print the outcome as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// List the disk entries guests still read (their qcow2 backing
    /// files), one a line: the entry's directory, ": ", why. Changes
    /// nothing; the package's purge keeps these.
    InUse {
        /// Also look for guests (moved or copied) under this directory;
        /// repeatable.
        #[arg(long, value_name = "DIR")]
        search: Vec<PathBuf>,
        /// Print them as one JSON array.
        #[arg(long)]
        json: bool,
    },
}

/// `10G`, `512M`, `4096`: binary suffixes, as qemu-img reads them.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => {
                    return Err(format!(
                        "{s:?}: unknown size suffix {c:?} (use K, M, G or T)"
                    ));
                }
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a size"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// `n` as [`parse_size`] reads it, in the largest unit that divides it
/// (`64G`).
fn size_text(n: u64) -> String {
    for (suffix, shift) in [('T', 40), ('G', 30), ('M', 20), ('K', 10)] {
        if n != 0 && n.is_multiple_of(1 << shift) {
            return format!("{}{suffix}", n >> shift);
        }
    }
    n.to_string()
}

/// A guest count: at least one, at most
/// [`ProvisionOptions::MAX_GUESTS`].
pub fn parse_count(s: &str) -> Result<usize, String> {
    let max = ProvisionOptions::MAX_GUESTS;
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a count"))?;
    if !(1..=max).contains(&n) {
        return Err(format!("{n} guests: must be 1 to {max}"));
    }
    Ok(n)
}

/// A disk guest's virtual size: a size qcow2 overlays can have.
pub fn parse_virtual_size(s: &str) -> Result<u64, String> {
    let n = parse_size(s)?;
    let max = zinstall_qcow2::MAX_OVERLAY_SIZE;
    if n > max {
        return Err(format!(
            "{s:?} is larger than a qcow2 overlay can be ({max} bytes, 2P)"
        ));
    }
    Ok(n)
}

/// Provisions; exit 0, 1 on failure, 2 on bad settings.
pub fn provision(args: &ProvisionArgs) -> Exit {
    let tunables = match args.tunables.resolve() {
        Ok(t) => t,
        Err(e) => {
            crate::json::fail(args.json, &e, crate::json::fields(&e));
            return Exit::Usage;
        }
    };
    let trust = match args.pull.trust(None) {
        Ok(t) => t,
        Err(e) => {
            crate::json::fail(args.json, &e, crate::json::policy_fields(&e));
            return Exit::Usage;
        }
    };
    let customize = match args.customize.options() {
        Ok(c) => c,
        Err(e) => {
            let fields = crate::json::provision_fields(&e);
            crate::json::fail(args.json, &e, fields);
            return Exit::Usage;
        }
    };
    // Disk guests get the same options in their NoCloud seed.
    let seed = match args.seed.request(args.hostname.as_deref(), &customize) {
        Ok(s) => s,
        Err(e) => {
            crate::json::fail(args.json, &e, Value::Null);
            return Exit::Usage;
        }
    };
    // No bar for a dry run, which reads no image.
    let bar = (!args.dry_run)
        .then(|| Bar::for_terminal(args.json || args.verbose, "provisioning"))
        .flatten();
    let opts = ProvisionOptions {
        qemu_img: args.qemu_img.clone(),
        backing_dir: args.backing_dir.clone(),
        secret_file: args.secret_file.clone(),
        tunables,
        listener: (args.verbose && !args.json).then(|| {
            Arc::new(output::Listing) as Arc<dyn zinstall_engine::Listener>
        }),
        pull: args.pull.options(bar.clone(), trust),
        progress: bar.clone().map(|b| b as Arc<dyn zinstall_engine::Progress>),
        cancel: Some(crate::interrupt::cancel()),
        customize,
        seed,
        ..ProvisionOptions::new(args.request(), &args.cache)
    };
    if let Err(e) = crate::interrupt::watch_signals() {
        output::note(format_args!("signals not handled: {e}"));
    }
    if args.dry_run {
        return match provision::dry_run(&args.image, &opts) {
            Ok(p) => {
                let found = DryRunSummary::of(&args.image, &p);
                if args.json {
                    crate::json::result(crate::json::typed(&found));
                } else {
                    found.print();
                }
                Exit::Ok
            }
            Err(e) => {
                let fields = crate::json::provision_fields(&e);
                crate::json::fail(args.json, &e, fields);
                Exit::Failed
            }
        };
    }
    let json = args.json;
    let mut noticed: Vec<String> = Vec::new();
    let mut on_guest = |g: &provision::Guest| {
        if !json {
            output::above(&bar, || {
                output::out(format_args!("made {g}"));
                // Told once, here: never kept by zinstall.
                for (user, pw) in &g.customized.passwords {
                    output::out(format_args!(
                        "password of {user} on {}: {pw}",
                        g.path.display()
                    ));
                }
            });
        }
        for n in &g.customized.notices {
            if !noticed.contains(n) {
                output::above(&bar, || output::note(n));
                noticed.push(n.clone());
            }
        }
        if let Some(b) = &bar {
            b.set_what("copying guests");
        }
    };
    let r = provision::provision_in(
        &args.image,
        &opts,
        args.cache_mode,
        &mut on_guest,
    );
    if let Some(b) = &bar {
        b.finish();
    }
    match r {
        Ok(r) => {
            let reply = ProvisionReply::of(&args.image, &r);
            if json {
                crate::json::result(crate::json::typed(&reply));
            } else {
                for n in &r.notices {
                    output::note(n);
                }
                print_provision(&reply);
            }
            Exit::Ok
        }
        Err(e) => {
            let fields = crate::json::provision_fields(&e);
            let status = match crate::interrupt::reason() {
                Some(why) => {
                    crate::json::fail(
                        json,
                        format_args!("{why}: provision stopped: {e}"),
                        fields,
                    );
                    Exit::Interrupted(why)
                }
                None => {
                    crate::json::fail(json, &e, fields);
                    Exit::Failed
                }
            };
            // After the error, as every hint.
            if let (Some(h), false) = (
                cache_hint(&args.cache, e.raw_os_error(), &e.to_string()),
                json,
            ) {
                output::note(h);
            }
            status
        }
    }
}

/// A hint for an error on the cache that the caller may not write: the
/// default cache is root's.
pub(crate) fn cache_hint(
    cache: &std::path::Path,
    errno: Option<i32>,
    message: &str,
) -> Option<String> {
    let denied = matches!(
        errno,
        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS)
    );
    let shown = cache.display().to_string();
    let on_cache = message.contains(&shown)
        || cache.ancestors().skip(1).any(|a| {
            a.parent().is_some()
                && message.contains(&format!("mkdir {}:", a.display()))
        });
    (denied && on_cache).then(|| {
        format!(
            "the cache {shown} is not yours to write: run as root, give \
             --cache DIR of your own, or ask zinstalld (--daemon) to do it"
        )
    })
}

/// A provisioning's outcome as text: the note of an altered entry, then
/// one summary line.
pub fn print_provision(r: &ProvisionReply) {
    if let Some(old) = &r.replaced {
        output::note(format_args!(
            "cache entry {} was altered ({}); rebuilt as {}",
            old.entry, old.why, r.entry
        ));
    }
    let took = std::time::Duration::from_millis(r.build_ms.unwrap_or(0));
    let took = zinstall_engine::stats::human_duration(took);
    let how = match r.obtained.as_str() {
        "built" => format!("extracted once in {took}"),
        "rebuilt" => format!("rebuilt in {took}"),
        _ => "cached".to_string(),
    };
    output::out(format_args!(
        "provisioned {} from {} ({}, {how}): {}",
        output::count(r.guests.len() as u64, "guest", "guests"),
        r.image,
        r.kind,
        r.payload
    ));
}

/// Lists or collects the cache.
pub fn cache(args: &CacheArgs) -> Exit {
    let json = match &args.command {
        CacheCommand::List { json }
        | CacheCommand::Verify { json }
        | CacheCommand::Gc { json, .. }
        | CacheCommand::InUse { json, .. } => *json,
    };
    let fail = |e: &zinstall_provision::ProvisionError| {
        crate::json::fail(json, e, crate::json::provision_fields(e));
        if let (Some(h), false) = (
            cache_hint(&args.cache, e.raw_os_error(), &e.to_string()),
            json,
        ) {
            output::note(h);
        }
        Exit::Failed
    };
    if let CacheCommand::Verify { json } = &args.command {
        return super::cache_composefs::verify(&absolute(&args.cache), *json);
    }
    // Listing and collecting make nothing: not even a missing cache.
    let cache = match Cache::open(absolute(&args.cache)) {
        Ok(c) => c,
        Err(e) => {
            // A cache only composefs installs used has a store alone.
            if let CacheCommand::Gc { dry_run, json, .. } = &args.command {
                return super::cache_composefs::sweep_alone(
                    &absolute(&args.cache),
                    *dry_run,
                    *json,
                )
                .unwrap_or_else(|| fail(&e));
            }
            return fail(&e);
        }
    };
    match &args.command {
        CacheCommand::List { json } => match cache.list() {
            Ok(entries) => {
                let list = CacheEntryReply::list(&entries);
                if *json {
                    crate::json::result(crate::json::typed(&list));
                } else {
                    print_cache_list(&list);
                }
                Exit::Ok
            }
            Err(e) => fail(&e),
        },
        CacheCommand::Gc {
            max_size,
            dry_run,
            search,
            release_missing,
            json,
        } => match cache.gc_with(&GcOptions {
            max_size: *max_size,
            dry_run: *dry_run,
            search: search.iter().map(|p| absolute(p)).collect(),
            release_missing: *release_missing,
        }) {
            Ok(r) => {
                let reply = GcReply::of(&r, *dry_run);
                if *json {
                    crate::json::result(crate::json::typed(&reply));
                } else {
                    print_gc(&reply);
                }
                Exit::Ok
            }
            Err(e) => fail(&e),
        },
        CacheCommand::Verify { .. } => unreachable!("verified above"),
        CacheCommand::InUse { search, json } => {
            let search: Vec<PathBuf> =
                search.iter().map(|p| absolute(p)).collect();
            match cache.disks_in_use(&search) {
                Ok(disks) => {
                    print_in_use(&disks, *json);
                    Exit::Ok
                }
                Err(e) => fail(&e),
            }
        }
    }
}

/// `p` made absolute against the working directory (not resolved:
/// symlinks stay as named).
fn absolute(p: &std::path::Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("10G"), Ok(10 << 30));
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        assert!(parse_size("1Q").unwrap_err().contains("suffix"));
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    /// The bound's default is written as the flag reads it back.
    #[test]
    fn sizes_are_written_as_read() {
        assert_eq!(DEFAULT_MAX_ARCHIVE_SIZE.as_str(), "64G");
        for n in [0, 1, 1000, 4096, 3 << 20, 64 << 30, 2 << 40, u64::MAX] {
            assert_eq!(parse_size(&size_text(n)), Ok(n), "{}", size_text(n));
        }
        assert_eq!(size_text(1536 << 20), "1536M");
    }

    #[test]
    fn counts_and_virtual_sizes_are_bounded() {
        assert_eq!(parse_count("10"), Ok(10));
        assert_eq!(parse_count("65536"), Ok(65536));
        for bad in ["0", "65537", "99999999999", "-1", "x", ""] {
            assert!(parse_count(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_virtual_size("2048T"), Ok(2 << 50));
        for bad in ["2049T", "18446744073709551615", "99999999999T"] {
            let e = parse_virtual_size(bad).unwrap_err();
            assert!(e.contains("larger") || e.contains("too large"), "{e}");
        }
    }
}
