//! Many guests from one image: extract once into the cache, then give
//! every guest a thin copy.
//!
//! A provision is all or nothing: if any guest fails (or the run is
//! cancelled), every guest this run made is removed, and the output
//! directory too if this run created it, so that the same command can
//! simply be run again. Guests that were there before are never touched.
//!
//! Here: the run ([`provision`], [`dry_run`]) and what it reports; how an
//! image becomes a cache entry is the build module's, how a run is
//! asked for the options module's.

use std::fmt;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use zinstall_engine::{Op, Plan};
use zinstall_qcow2 as qcow2;

use crate::asked;
use crate::build::{build, converter};
use crate::cache::{Cache, Entry, EntryKind, Lease, Obtained, Replaced};
use crate::composefs;
use crate::customize::{self, Customization, Customized};
use crate::detect::{ImageKind, detect};
use crate::error::{ImageProblem, ProvisionError, ProvisionError as Error};
use crate::identity::{self, GuestIdentity};
use crate::options::{GuestFormat, ProvisionOptions};
use crate::seed::{Seed, SeedMade};

/// What one guest is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuestKind {
    /// A directory tree, cloned by reflink or copied.
    Tree {
        /// True if every file was cloned (shares extents with the cache).
        reflinked: bool,
    },
    /// A composefs root: the entry's image under an overlay whose upper
    /// layer is the guest's own.
    Composefs {
        /// The image's ID, hex.
        image: String,
        /// True if left mounted on its `root/` (`--mount`).
        mounted: bool,
    },
    /// A qcow2 overlay over the cached raw base.
    Disk {
        /// Its virtual size.
        virtual_size: u64,
    },
}

/// One guest made.
#[derive(Clone, Debug)]
pub struct Guest {
    /// Its directory or overlay file.
    pub path: PathBuf,
    /// What it is.
    pub kind: GuestKind,
    /// What of its identity was made its own (directory guests).
    pub identity: GuestIdentity,
    /// Its NoCloud seed (disk guests, unless none was asked for).
    pub seed: Option<SeedMade>,
    /// What its customisation made that its caller is to be told (the
    /// `random` passwords), directory guests.
    pub customized: Customized,
    /// How long it took.
    pub took: Duration,
}

impl fmt::Display for Guest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            GuestKind::Tree { reflinked: true } => {
                write!(f, "{}: tree, reflink clone", self.path.display())?
            }
            GuestKind::Tree { reflinked: false } => {
                write!(f, "{}: tree, parallel copy", self.path.display())?
            }
            GuestKind::Composefs { image, mounted } => write!(
                f,
                "{}: composefs, image {image}, {} (zinstall {} {})",
                self.path.display(),
                if *mounted {
                    "mounted on root/"
                } else {
                    "not mounted"
                },
                if *mounted { "unmount" } else { "mount" },
                self.path.display()
            )?,
            GuestKind::Disk { virtual_size } => write!(
                f,
                "{}: qcow2 overlay, {}",
                self.path.display(),
                zinstall_engine::stats::human_bytes(*virtual_size)
            )?,
        }
        write!(f, ", {}", zinstall_engine::stats::human_duration(self.took))?;
        let id = &self.identity;
        if let Some(h) = &id.hostname {
            write!(f, "; hostname {h}")?;
        }
        if let Some(m) = &id.machine_id {
            write!(f, ", machine-id {m}")?;
        }
        if !id.host_keys.is_empty() {
            write!(f, ", {} SSH host keys new", id.host_keys.len())?;
        }
        write!(f, "{}", self.customized)?;
        if let Some(s) = &self.seed {
            write!(
                f,
                "; seed {} (hostname {}, instance-id {}; attach with -drive \
                 file={},if=virtio,format=raw)",
                s.path.display(),
                s.hostname,
                s.instance_id,
                s.path.display()
            )?;
            if let Some(p) = &s.root_password {
                write!(f, "; root password {p}")?;
            }
        }
        Ok(())
    }
}

/// What a provisioning did.
#[derive(Clone, Debug)]
pub struct ProvisionReport {
    /// The image's kind.
    pub image: ImageKind,
    /// The cache entry the guests come from.
    pub entry: Entry,
    /// Whether the entry was built now or found.
    pub obtained: Obtained,
    /// The entry found altered and replaced by `entry`, if any.
    pub replaced: Option<Replaced>,
    /// The guests, in order.
    pub guests: Vec<Guest>,
    /// What was noticed and accepted building the entry (a qcow2 image
    /// read as it is though left dirty, a backing format probed, a
    /// conversion by qemu-img), each naming the file.
    pub notices: Vec<String>,
}

/// Provisions `opts.count` guests from `image`; `on_guest` hears of each
/// as it is made. On failure nothing this run made is left (see the
/// module documentation).
pub fn provision(
    image: &Path,
    opts: &ProvisionOptions,
    on_guest: &mut dyn FnMut(&Guest),
) -> Result<ProvisionReport, ProvisionError> {
    provision_in(image, opts, None, on_guest)
}

/// [`provision`], creating the cache root with `cache_mode` (and applying
/// it to an existing root) instead of the default 0700.
pub fn provision_in(
    image: &Path,
    opts: &ProvisionOptions,
    cache_mode: Option<u32>,
    on_guest: &mut dyn FnMut(&Guest),
) -> Result<ProvisionReport, ProvisionError> {
    let kind = check_request(image, opts)?;
    let seed = asked::prepare_seed(kind, is_disk(kind), opts)?;
    let custom = asked::prepare_customize(is_disk(kind), opts)?;
    let cache = open_cache(opts, cache_mode)?;
    let entry_kind = entry_kind(kind);
    let mut notices = Vec::new();
    let (mut lease, obtained) =
        lease_entry(&cache, image, kind, entry_kind, opts, &mut notices)?;
    // The image's own users and zoneinfo, in the cache entry (read, never
    // written), before the first guest.
    if let Some(c) = &custom
        && let Err(e) = customize::check_tree(c, &lease.entry.payload())
    {
        lease.release();
        return Err(e);
    }
    // Composefs guests: the entry's image, made once in the cache's store.
    let image = match opts.format {
        GuestFormat::Composefs => {
            match composefs::entry_image(&cache, &lease.entry, opts) {
                Ok(i) => Some(i),
                Err(e) => {
                    lease.release();
                    return Err(e);
                }
            }
        }
        GuestFormat::Tree => None,
    };
    let replaced = lease.replaced.take();
    let out_existed = fs::symlink_metadata(&opts.out).is_ok();
    let mut made: Vec<PathBuf> = Vec::new();
    let mut guests = Vec::with_capacity(opts.count);
    let from = Source {
        entry: &lease.entry,
        kind: entry_kind,
        custom: custom.as_ref(),
        seed: seed.as_ref(),
        image: image.as_ref(),
    };
    let result =
        make_guests(&cache, &from, opts, &mut made, &mut guests, on_guest);
    let entry = lease.entry.clone();
    lease.release();
    if let Err(e) = result {
        let ids: Vec<_> = guests
            .iter()
            .filter_map(|g| Some((&g.path, file_id(&g.path)?)))
            .collect();
        if image.is_some() {
            for p in &made {
                composefs::unmount_guest(p, true);
            }
        }
        let e = undo(e, &made, (!out_existed).then_some(&opts.out));
        // The guests this run made and removed hold their base no more.
        // A record that cannot be ended keeps the base: a leak, never a
        // lost base, and the provision's own error is the one to report.
        for (path, id) in ids {
            if fs::symlink_metadata(path).is_err() {
                let _kept = cache.release_guest(path, id);
            }
        }
        return Err(e);
    }
    Ok(ProvisionReport {
        image: kind,
        entry,
        obtained,
        replaced,
        guests,
        notices,
    })
}

/// The cache at `opts.cache`, made with `cache_mode` if missing, named
/// by its canonical path: overlays name their base by absolute path.
fn open_cache(
    opts: &ProvisionOptions,
    cache_mode: Option<u32>,
) -> Result<Cache, ProvisionError> {
    let cache = Cache::with_mode(&opts.cache, cache_mode)?;
    let root = fs::canonicalize(&opts.cache)
        .map_err(|e| Error::io(Op::Stat, &opts.cache, e))?;
    if root == cache.root() {
        Ok(cache)
    } else {
        Cache::new(root)
    }
}

/// Guest `i`'s seed, beside its overlay.
pub(crate) fn seed_path(opts: &ProvisionOptions, i: usize) -> PathBuf {
    opts.out.join(format!("{}-{i}.seed.img", opts.name))
}

/// The files besides a qcow2 image that its entry depends on: its data
/// file and backing chain as opened, or an encrypted image's key file.
pub(crate) fn chain_files(
    qcow: Option<&crate::build::Qcow2Input>,
    opts: &ProvisionOptions,
) -> Result<Vec<File>, ProvisionError> {
    Ok(match qcow {
        Some(crate::build::Qcow2Input::Native(img)) => img
            .files()
            .iter()
            .skip(1)
            .map(|(p, f)| f.try_clone().map_err(|e| Error::io(Op::Open, p, e)))
            .collect::<Result<_, _>>()?,
        // An encrypted image's entry is found again only with the
        // same key file, unchanged: another key is tried by qemu-img.
        Some(crate::build::Qcow2Input::QemuImg(_, e))
            if matches!(e.refusal(), Some(qcow2::Problem::Encrypted(_))) =>
        {
            match &opts.secret_file {
                Some(k) => vec![
                    zinstall_core::foreign::open(
                        k,
                        zinstall_core::foreign::Follow::Yes,
                    )
                    .map_err(|e| Error::io(Op::Open, k, e.into()))?,
                ],
                None => Vec::new(),
            }
        }
        _ => Vec::new(),
    })
}

/// The cache entry the guests of `image` (of `kind`) come from, found
/// or built, leased for as long as they are made.
fn lease_entry(
    cache: &Cache,
    image: &Path,
    kind: ImageKind,
    entry_kind: EntryKind,
    opts: &ProvisionOptions,
    notices: &mut Vec<String>,
) -> Result<(Lease, Obtained), ProvisionError> {
    let (lease, obtained) = if kind == ImageKind::Oci {
        crate::oci::obtain(cache, image, opts)?
    } else {
        // The image is opened once, beneath its directory's descriptor;
        // a qcow2 image's files are opened beneath that same descriptor:
        // their identities are part of its own, and the build reads the
        // very files opened.
        let opened = crate::build::open_image(image)?;
        let file = opened
            .file
            .try_clone()
            .map_err(|e| Error::io(Op::Open, image, e))?;
        let qcow = match kind {
            ImageKind::Qcow2 => {
                Some(crate::build::open_qcow2(image, opened, opts)?)
            }
            _ => None,
        };
        let also = chain_files(qcow.as_ref(), opts)?;
        let also: Vec<&File> = also.iter().collect();
        cache.obtain_with(
            image,
            &file,
            &also,
            entry_kind,
            opts.sha256.as_deref(),
            |reader, payload| {
                build(image, kind, qcow, reader, payload, opts, notices)
            },
        )?
    };
    // An entry built with device nodes allowed serves only provisions
    // that allow them too.
    if !opts.allow_devices
        && entry_kind == EntryKind::Tree
        && cache.holds_devices(&lease.entry)
    {
        let entry = lease.entry.name();
        lease.release();
        return Err(Error::Image {
            path: image.to_path_buf(),
            problem: ImageProblem::Devices { entry },
        });
    }
    Ok((lease, obtained))
}

/// What the guests are made from: the cache entry, its kind, and what
/// each guest is given besides (a directory guest's customisation, a
/// disk guest's seed).
struct Source<'a> {
    entry: &'a Entry,
    kind: EntryKind,
    custom: Option<&'a Customization>,
    /// Each disk guest's NoCloud seed, when one is made.
    seed: Option<&'a Seed>,
    /// The entry's composefs image, when the guests are composefs roots.
    image: Option<&'a composefs::EntryImage>,
}

/// Makes the guests from `from`'s entry, one after another, into
/// `guests`, and tells `on_guest` of each; every path this run is to
/// remove on failure goes into `made` before anything is written there.
fn make_guests(
    cache: &Cache,
    from: &Source<'_>,
    opts: &ProvisionOptions,
    made: &mut Vec<PathBuf>,
    guests: &mut Vec<Guest>,
    on_guest: &mut dyn FnMut(&Guest),
) -> Result<(), ProvisionError> {
    let (entry, entry_kind, custom, seed) =
        (from.entry, from.kind, from.custom, from.seed);
    fs::create_dir_all(&opts.out)
        .map_err(|e| Error::io(Op::Mkdir, &opts.out, e))?;
    // The data of a directory guest, once the first copy counted it.
    let mut tree_bytes = None;
    for i in 0..opts.count {
        if opts.cancel.as_ref().is_some_and(|c| c.is_cancelled()) {
            return Err(ProvisionError::Fs(
                zinstall_engine::Error::Cancelled {
                    path: opts.out.clone(),
                },
            ));
        }
        let t0 = Instant::now();
        let path = guest_path(opts, entry_kind, i);
        if fs::symlink_metadata(&path).is_ok() {
            if !opts.force {
                return Err(ProvisionError::GuestExists(path));
            }
            let id = file_id(&path);
            composefs::unmount_guest(&path, false);
            remove_guest(&path)?;
            // Gone for good, not moved: its base need not stay.
            if let Some(id) = id {
                cache.release_guest(&path, id)?;
            }
        }
        let seed_at = seed.map(|_| seed_path(opts, i));
        if let Some(sp) = &seed_at
            && fs::symlink_metadata(sp).is_ok()
        {
            if !opts.force {
                return Err(ProvisionError::GuestExists(sp.clone()));
            }
            remove_guest(sp)?;
        }
        // From here on the path is this run's to remove on failure,
        // whatever state the guest is left in.
        made.push(path.clone());
        if let Some(image) = from.image {
            let m =
                composefs::make_guest(&path, image, entry, i, opts, custom)?;
            let g = Guest {
                path,
                kind: GuestKind::Composefs {
                    image: image.hex.clone(),
                    mounted: m.mounted,
                },
                identity: m.identity,
                seed: None,
                customized: m.customized,
                took: t0.elapsed(),
            };
            cache.add_user(entry, &g.path)?;
            on_guest(&g);
            guests.push(g);
            continue;
        }
        let kind = make_guest(&path, entry_kind, entry, opts, &mut tree_bytes)?;
        let seed = match (seed, seed_at) {
            (Some(s), Some(sp)) => {
                made.push(sp.clone());
                Some(s.write(
                    &sp,
                    &opts.name,
                    i,
                    opts.identity.hostname.as_deref(),
                )?)
            }
            _ => None,
        };
        let identity = match entry_kind {
            EntryKind::Tree | EntryKind::Layer => identity::apply(
                &path,
                i,
                &format!("{}-{i}", opts.name),
                &opts.identity,
            )?,
            EntryKind::Raw => GuestIdentity::default(),
        };
        let customized = match custom {
            Some(c) => customize::apply(
                c,
                &path,
                i,
                opts.tunables,
                opts.cancel.as_ref(),
            )?,
            None => Customized::default(),
        };
        let g = Guest {
            path,
            kind,
            identity,
            seed,
            customized,
            took: t0.elapsed(),
        };
        cache.add_user(entry, &g.path)?;
        on_guest(&g);
        guests.push(g);
    }
    Ok(())
}

/// What is checked before anything is extracted (or, in a dry run,
/// instead): the count, which sizes the guest list, the size, which sizes
/// every overlay, the tunables (set by a caller rather than read from a
/// file, they may never have been checked, and a buffer is sized from
/// them), the image's kind, and the programs the guests will need.
pub(crate) fn check_request(
    image: &Path,
    opts: &ProvisionOptions,
) -> Result<ImageKind, ProvisionError> {
    if opts.count > ProvisionOptions::MAX_GUESTS {
        return Err(ProvisionError::TooManyGuests(opts.count));
    }
    if let Some(s) = opts.size
        && s > qcow2::MAX_OVERLAY_SIZE
    {
        return Err(ProvisionError::SizeTooLarge(s));
    }
    opts.tunables.validate()?;
    // Before anything is extracted: the guests need a directory.
    // The caller's output directory, as named (a link to it allowed).
    #[allow(clippy::disallowed_methods)]
    let out = fs::metadata(&opts.out);
    if out.is_ok_and(|m| !m.is_dir()) {
        return Err(ProvisionError::OutNotDirectory(opts.out.clone()));
    }
    let kind = detect(image)?;
    if opts.format == GuestFormat::Composefs {
        composefs_possible(image, kind, opts)?;
    } else if opts.mount {
        return Err(ProvisionError::Composefs {
            path: opts.out.clone(),
            why: "--mount leaves composefs guests mounted: it needs \
                  --format composefs"
                .into(),
        });
    }
    if !matches!(kind, ImageKind::Tree(_) | ImageKind::Oci) {
        asked::check_disk_customize(image, opts)?;
    }
    if matches!(kind, ImageKind::Tree(_) | ImageKind::Oci) {
        identity::check(&opts.identity, &opts.name)?;
    } else if let Some(q) = &opts.qemu_img {
        crate::qemu_img::check(q, &opts.out)?;
    }
    if matches!(kind, ImageKind::Foreign(..)) {
        converter(opts, image, kind)?;
    }
    Ok(kind)
}

/// Composefs guests are made of tree images only (a disk image's guests
/// are qcow2 overlays), and on Linux only.
fn composefs_possible(
    image: &Path,
    kind: ImageKind,
    opts: &ProvisionOptions,
) -> Result<(), ProvisionError> {
    if !cfg!(target_os = "linux") {
        return Err(ProvisionError::Composefs {
            path: opts.out.clone(),
            why: "composefs is Linux's (EROFS, overlayfs and fs-verity): \
                  provision --format composefs is refused on this system; \
                  make tree guests (--format tree)"
                .into(),
        });
    }
    if entry_kind(kind) == EntryKind::Raw {
        return Err(Error::Image {
            path: image.to_path_buf(),
            problem: ImageProblem::Unsupported(format!(
                "{}: composefs guests are made of tree images (a rootfs \
                 archive, an OCI image, a directory), not of a disk \
                 image, whose guests are qcow2 overlays; provision it \
                 without --format composefs",
                kind.describe()
            )),
        });
    }
    Ok(())
}

/// The device and inode of the file (a disk guest) at `path`.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| (m.dev(), m.ino()))
}

/// Removes the guest at `path` for `--force`: a tree without following
/// a symlink or leaving its filesystem, or one file.
fn remove_guest(path: &Path) -> Result<(), ProvisionError> {
    let md =
        fs::symlink_metadata(path).map_err(|e| Error::io(Op::Stat, path, e))?;
    if md.is_dir() {
        zinstall_engine::fsutil::remove_tree(path)?;
    } else {
        fs::remove_file(path).map_err(|e| Error::io(Op::Remove, path, e))?;
    }
    Ok(())
}

/// The cache entry an image of `kind` makes.
/// Whether `kind` makes disk guests (which a seed customises).
pub(crate) fn is_disk(kind: ImageKind) -> bool {
    entry_kind(kind) == EntryKind::Raw
}

pub(crate) fn entry_kind(kind: ImageKind) -> EntryKind {
    match kind {
        ImageKind::Tree(_) | ImageKind::Oci => EntryKind::Tree,
        ImageKind::Raw(_)
        | ImageKind::Qcow2
        | ImageKind::CompressedQcow2(_)
        | ImageKind::Foreign(..) => EntryKind::Raw,
    }
}

/// Guest `i`'s directory or overlay.
pub(crate) fn guest_path(
    opts: &ProvisionOptions,
    kind: EntryKind,
    i: usize,
) -> PathBuf {
    match kind {
        EntryKind::Tree | EntryKind::Layer => {
            opts.out.join(format!("{}-{i}", opts.name))
        }
        EntryKind::Raw => opts.out.join(format!("{}-{i}.qcow2", opts.name)),
    }
}

/// A directory guest's copy of a tree whose data an earlier copy
/// counted: the bytes written are how far through it the copy is.
#[derive(Debug)]
struct CountedTree(std::sync::Arc<dyn zinstall_engine::Progress>);

impl zinstall_engine::Progress for CountedTree {
    fn advance(&self, entries: u64, bytes: u64) {
        self.0.advance(entries, bytes);
        self.0.read(bytes);
    }
}

/// Makes one guest at `path` (which does not exist); `tree_bytes` is the
/// data of a directory guest, once one was copied.
fn make_guest(
    path: &Path,
    entry_kind: EntryKind,
    entry: &Entry,
    opts: &ProvisionOptions,
    tree_bytes: &mut Option<u64>,
) -> Result<GuestKind, ProvisionError> {
    match entry_kind {
        EntryKind::Tree | EntryKind::Layer => {
            let mut plan =
                Plan::new(entry.payload(), path).tunables(opts.tunables);
            if let Some(p) = &opts.progress {
                let counted = tree_bytes.filter(|b| *b > 0);
                p.begin(counted);
                plan = plan.progress(match counted {
                    Some(_) => std::sync::Arc::new(CountedTree(p.clone())),
                    None => p.clone(),
                });
            }
            if let Some(c) = &opts.cancel {
                plan = plan.cancel(c.clone());
            }
            if let Some(pool) = &opts.pool {
                plan = plan.pool(pool.clone());
            }
            if let Some(l) = &opts.listener {
                plan = plan.listener(std::sync::Arc::clone(l));
            }
            let r = plan.run()?;
            let s = &r.stats;
            *tree_bytes = Some(s.bytes);
            Ok(GuestKind::Tree {
                reflinked: s.files > 0 && s.reflinked == s.files,
            })
        }
        EntryKind::Raw => {
            let base = entry.payload();
            let base_size = fs::symlink_metadata(&base)
                .map_err(|e| Error::io(Op::Stat, &base, e))?
                .len();
            // Grow only: a guest disk is never smaller than its base.
            let size = opts.size.unwrap_or(0).max(base_size);
            if size > qcow2::MAX_OVERLAY_SIZE {
                return Err(ProvisionError::SizeTooLarge(size));
            }
            let virtual_size = match &opts.qemu_img {
                Some(q) => {
                    crate::qemu_img::create_overlay(
                        q,
                        path,
                        &base,
                        Some(size),
                    )?;
                    // Bounded above: cannot wrap.
                    size.next_multiple_of(512)
                }
                None => qcow2::create_overlay(path, &base, "raw", size)?,
            };
            Ok(GuestKind::Disk { virtual_size })
        }
    }
}

/// Removes what a failed provision made: its guests, then the output
/// directory if it made that and it is empty. What cannot be removed is
/// named in the error.
fn undo(
    failure: ProvisionError,
    made: &[PathBuf],
    out_made: Option<&PathBuf>,
) -> ProvisionError {
    let mut left = Vec::new();
    for p in made.iter().rev() {
        if fs::symlink_metadata(p).is_err() {
            continue;
        }
        if let Err(e) = zinstall_engine::fsutil::remove_tree(p) {
            left.push((p.clone(), e.to_string()));
        }
    }
    if let Some(out) = out_made {
        // Only if empty: remove_dir refuses otherwise.
        let _not_empty = fs::remove_dir(out);
    }
    if left.is_empty() {
        failure
    } else {
        ProvisionError::Cleanup {
            failure: Box::new(failure),
            left,
        }
    }
}

// Shared with the integration tests: a temporary directory removed even
// with immutable cache entries in it.
#[cfg(test)]
mod test {
    use zinstall_testkit::Tmp;

    use super::*;
    use crate::options::ProvisionRequest;

    fn opts(dir: &Path) -> ProvisionOptions {
        let request = ProvisionRequest {
            count: 1,
            out: dir.join("out"),
            name: "g".into(),
            max_archive_bytes: Some(1 << 30),
            keep_identity: true,
            ..Default::default()
        };
        ProvisionOptions::new(request, dir.join("cache"))
    }

    /// Absurd counts and sizes are refused before anything is read,
    /// extracted or allocated.
    #[test]
    fn counts_and_sizes_are_bounded_before_any_work() {
        let d = Tmp::new();
        let image = d.path().join("absent.raw");
        let mut o = opts(d.path());
        o.count = 99_999_999_999;
        let e = provision(&image, &o, &mut |_| {}).unwrap_err();
        assert!(matches!(e, ProvisionError::TooManyGuests(99_999_999_999)));
        assert!(e.to_string().contains("at most 65536"), "{e}");
        let mut o = opts(d.path());
        o.size = Some(u64::MAX);
        let e = provision(&image, &o, &mut |_| {}).unwrap_err();
        assert!(matches!(e, ProvisionError::SizeTooLarge(u64::MAX)), "{e}");
        assert!(e.to_string().contains("2 PiB"), "{e}");
        let mut o = opts(d.path());
        o.tunables.copy_bufsize = usize::MAX;
        let e = provision(&image, &o, &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("COPY_BUFSIZE"), "{e}");
        assert!(!d.path().join("cache").exists());
    }

    /// The largest size is made, as a qcow2 overlay of exactly that size.
    #[test]
    fn the_largest_size_is_made() {
        let d = Tmp::new();
        let image = d.path().join("disk.raw");
        fs::write(&image, vec![7u8; 1 << 20]).unwrap();
        let mut o = opts(d.path());
        o.count = 2;
        o.size = Some(qcow2::MAX_OVERLAY_SIZE);
        let r = provision(&image, &o, &mut |_| {}).unwrap();
        assert_eq!(r.guests.len(), 2);
        for g in &r.guests {
            assert_eq!(
                g.kind,
                GuestKind::Disk {
                    virtual_size: qcow2::MAX_OVERLAY_SIZE
                }
            );
        }
    }
}
