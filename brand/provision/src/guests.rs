//! Many guests from one image: extract once into the cache, then give
//! every guest a thin copy.
//!
//! A provision is all or nothing: if any guest fails (or the run is
//! cancelled), every guest this run made is removed, and the output
//! directory too if this run created it, so that the same command can
//! simply be run again. Guests that were there before are never touched.

use std::fmt;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use copier::fsutil::RangeCopier;
use copier::unpack::{self, UnpackOptions};
use copier::{Op, Plan, Tunables};
use zinstall_qcow2 as qcow2;

use crate::cache::{
    Cache, Entry, EntryKind, HashingReader, Obtained, Replaced, WouldObtain,
};
use crate::detect::{self, Compression, ImageKind, decompress, detect};
use crate::error::{ImageProblem, ProvisionError, ProvisionError as Error};
use crate::identity::{self, GuestIdentity, IdentityOptions};
use crate::sparse::write_sparse;

/// The mode of every disk guest (a qcow2 overlay), native or made by
/// `qemu-img`: it holds what the guest writes, so it is its owner's
/// alone.
pub const OVERLAY_MODE: u32 = 0o600;

/// How to provision.
#[derive(Clone, Debug)]
pub struct ProvisionOptions {
    /// Guests to make.
    pub count: usize,
    /// Where the guests go.
    pub out: PathBuf,
    /// Guests are named `NAME-0` ... `NAME-(count-1)`.
    pub name: String,
    /// Virtual size of disk guests; never below the base's.
    pub size: Option<u64>,
    /// The cache's root directory.
    pub cache: PathBuf,
    /// The image's expected SHA-256 (hex), if known.
    pub sha256: Option<String>,
    /// Make overlays with this `qemu-img` instead of natively.
    pub qemu_img: Option<PathBuf>,
    /// Workers for extraction, conversion and copies.
    pub tunables: Tunables,
    /// Bound on what an archive may unpack to, on a compressed disk
    /// image decompressed, and on the data a qcow2 image's clusters
    /// write.
    pub max_archive_bytes: u64,
    /// Make an image's device nodes (a root filesystem's `/dev`); refused
    /// otherwise, naming the member. Only root can make them: a guest's
    /// device node is a way into this host's devices for whoever can
    /// reach the guest's directory, so it is asked for, never assumed.
    pub allow_devices: bool,
    /// Stops extraction, conversion and copies at their next entry when
    /// raised.
    pub cancel: Option<copier::Cancel>,
    /// Do copies and unpacks on this shared pool (a service's worker
    /// budget); conversions then use one thread.
    pub pool: Option<copier::Pool>,
    /// Hears of each entry written: an archive's members unpacked into
    /// the cache, each directory guest's entries (`-v`).
    pub listener: Option<std::sync::Arc<dyn copier::Listener>>,
    /// Each directory guest's own hostname, machine-id and SSH host keys
    /// ([`IdentityOptions::unique`]), or the image's
    /// ([`IdentityOptions::keep`]). Disk guests are never changed.
    pub identity: IdentityOptions,
    /// Replace a guest already at a guest's path instead of failing.
    pub force: bool,
    /// The platform an OCI image must be for (and the one chosen from a
    /// multi-platform index); `None`: the host's.
    pub platform: Option<copier::oci::Platform>,
    /// How images named by registry reference are pulled (into the
    /// cache's `oci/` store).
    pub pull: zinstall_registry::PullOptions,
    /// Hears how far each step is: through the image file as the cache
    /// entry is made (its length is known), through each OCI layer blob,
    /// and through each directory guest's copy (the first one's size is
    /// not known; the others' is the first one's).
    pub progress: Option<std::sync::Arc<dyn copier::Progress>>,
}

/// What one guest is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuestKind {
    /// A directory tree, cloned by reflink or copied.
    Tree {
        /// True if every file was cloned (shares extents with the cache).
        reflinked: bool,
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
            GuestKind::Disk { virtual_size } => write!(
                f,
                "{}: qcow2 overlay, {}",
                self.path.display(),
                copier::stats::human_bytes(*virtual_size)
            )?,
        }
        write!(f, ", {}", copier::stats::human_duration(self.took))?;
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
}

impl ProvisionOptions {
    /// How an image's archive (or an OCI layer) is unpacked into the
    /// cache: these knobs, devices only if allowed, owners when root.
    pub(crate) fn unpack(&self) -> UnpackOptions {
        UnpackOptions {
            tunables: self.tunables,
            expect: None,
            allow_devices: self.allow_devices,
            max_bytes: self.max_archive_bytes,
            preserve_owner: None,
            cancel: self.cancel.clone(),
            pool: self.pool.clone(),
            listener: self.listener.clone(),
            whiteouts: Default::default(),
            progress: self.progress.clone(),
        }
    }

    /// The most guests one provisioning makes. Each is a file or a tree
    /// and a cache user record; far more than any host runs, and small
    /// enough that bookkeeping per guest stays small.
    pub const MAX_GUESTS: usize = 65536;
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
    let cache = Cache::with_mode(&opts.cache, cache_mode)?;
    // Overlays name their base by absolute path.
    let root = fs::canonicalize(&opts.cache)
        .map_err(|e| Error::io(Op::Stat, &opts.cache, e))?;
    let cache = if root == cache.root() {
        cache
    } else {
        Cache::new(root)?
    };
    let entry_kind = entry_kind(kind);
    let (mut lease, obtained) = if kind == ImageKind::Oci {
        crate::oci::obtain(&cache, image, opts)?
    } else {
        cache.obtain(
            image,
            entry_kind,
            opts.sha256.as_deref(),
            |reader, payload| build(image, kind, reader, payload, opts),
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
    let replaced = lease.replaced.take();
    let out_existed = fs::symlink_metadata(&opts.out).is_ok();
    let mut made: Vec<PathBuf> = Vec::new();
    let mut guests = Vec::with_capacity(opts.count);
    // The data of a directory guest, once the first copy counted it.
    let mut tree_bytes = None;
    let result = (|| -> Result<(), ProvisionError> {
        fs::create_dir_all(&opts.out)
            .map_err(|e| Error::io(Op::Mkdir, &opts.out, e))?;
        for i in 0..opts.count {
            if opts.cancel.as_ref().is_some_and(|c| c.is_cancelled()) {
                return Err(ProvisionError::Fs(copier::Error::Cancelled {
                    path: opts.out.clone(),
                }));
            }
            let t0 = Instant::now();
            let path = guest_path(opts, entry_kind, i);
            if fs::symlink_metadata(&path).is_ok() {
                if !opts.force {
                    return Err(ProvisionError::GuestExists(path));
                }
                let id = file_id(&path);
                remove_guest(&path)?;
                // Gone for good, not moved: its base need not stay.
                if let Some(id) = id {
                    cache.release_guest(&path, id)?;
                }
            }
            // From here on the path is this run's to remove on failure,
            // whatever state the guest is left in.
            made.push(path.clone());
            let kind = make_guest(
                &path,
                entry_kind,
                &lease.entry,
                opts,
                &mut tree_bytes,
            )?;
            let identity = match entry_kind {
                EntryKind::Tree | EntryKind::Layer => identity::apply(
                    &path,
                    i,
                    &format!("{}-{i}", opts.name),
                    &opts.identity,
                )?,
                EntryKind::Raw => GuestIdentity::default(),
            };
            let g = Guest {
                path,
                kind,
                identity,
                took: t0.elapsed(),
            };
            cache.add_user(&lease.entry, &g.path)?;
            on_guest(&g);
            guests.push(g);
        }
        Ok(())
    })();
    let entry = lease.entry.clone();
    lease.release();
    if let Err(e) = result {
        let ids: Vec<_> = guests
            .iter()
            .filter_map(|g| Some((&g.path, file_id(&g.path)?)))
            .collect();
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
    })
}

/// What [`provision`] would do, found without writing anything.
#[derive(Clone, Debug)]
pub struct ProvisionPreview {
    /// The image's kind.
    pub image: ImageKind,
    /// Whether the cache entry would be reused, rebuilt or built.
    pub would: WouldObtain,
    /// The guests that would be made, in order: directories or qcow2
    /// overlays.
    pub guests: Vec<PathBuf>,
}

/// A dry run of [`provision`]: the same checks (count, size, tunables,
/// the image told by its content, `--qemu-img`'s program, the cache
/// entry by the image file's identity and `sha256` against an entry
/// found, no guest already there), nothing written, no image data read
/// beyond its head.
pub fn preview(
    image: &Path,
    opts: &ProvisionOptions,
) -> Result<ProvisionPreview, ProvisionError> {
    let kind = check_request(image, opts)?;
    let entry_kind = entry_kind(kind);
    let root = match fs::canonicalize(&opts.cache) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            opts.cache.clone()
        }
        Err(e) => return Err(Error::io(Op::Stat, &opts.cache, e)),
    };
    let would = if kind == ImageKind::Oci {
        crate::oci::peek(&root, image, opts)?
    } else {
        Cache::peek(&root, image, entry_kind, opts.sha256.as_deref())?
    };
    let mut guests = Vec::with_capacity(opts.count);
    for i in 0..opts.count {
        let path = guest_path(opts, entry_kind, i);
        if !opts.force && fs::symlink_metadata(&path).is_ok() {
            return Err(ProvisionError::GuestExists(path));
        }
        guests.push(path);
    }
    Ok(ProvisionPreview {
        image: kind,
        would,
        guests,
    })
}

/// What is checked before anything is extracted (or, in a preview,
/// instead): the count, which sizes the guest list, the size, which sizes
/// every overlay, the tunables (set by a caller rather than read from a
/// file, they may never have been checked, and a buffer is sized from
/// them), the image's kind, and the programs the guests will need.
fn check_request(
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
    if fs::metadata(&opts.out).is_ok_and(|m| !m.is_dir()) {
        return Err(ProvisionError::OutNotDirectory(opts.out.clone()));
    }
    let kind = detect(image)?;
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

/// The `qemu-img` that converts the foreign `image` (see
/// [`crate::qemu_img::converter`]); without one, the image is refused
/// naming its format and the conversion to do by hand.
fn converter(
    opts: &ProvisionOptions,
    image: &Path,
    kind: ImageKind,
) -> Result<PathBuf, ProvisionError> {
    let ImageKind::Foreign(format, c) = kind else {
        unreachable!("only foreign images are converted");
    };
    crate::qemu_img::converter(opts.qemu_img.as_deref()).ok_or_else(|| {
        Error::Image {
            path: image.to_path_buf(),
            problem: ImageProblem::ForeignDisk {
                format: format.name().into(),
                qemu_format: format.qemu_name().into(),
                compression: (c != Compression::None).then(|| c.name().into()),
            },
        }
    })
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
        copier::fsutil::remove_tree(path)?;
    } else {
        fs::remove_file(path).map_err(|e| Error::io(Op::Remove, path, e))?;
    }
    Ok(())
}

/// The cache entry an image of `kind` makes.
fn entry_kind(kind: ImageKind) -> EntryKind {
    match kind {
        ImageKind::Tree(_) | ImageKind::Oci => EntryKind::Tree,
        ImageKind::Raw(_)
        | ImageKind::Qcow2
        | ImageKind::CompressedQcow2(_)
        | ImageKind::Foreign(..) => EntryKind::Raw,
    }
}

/// Guest `i`'s directory or overlay.
fn guest_path(opts: &ProvisionOptions, kind: EntryKind, i: usize) -> PathBuf {
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
struct CountedTree(std::sync::Arc<dyn copier::Progress>);

impl copier::Progress for CountedTree {
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
            let base_size = fs::metadata(&base)
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
        if let Err(e) = copier::fsutil::remove_tree(p) {
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

/// Conversion threads: the tunable, but no more than the machine has
/// cores (more only contend) and at most 8; one beside a shared pool,
/// whose workers are the budget (a cache entry is built once, while every
/// guest's copy runs on the pool).
fn convert_threads(opts: &ProvisionOptions) -> usize {
    if opts.pool.is_some() {
        return 1;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    opts.tunables.copy_threads.clamp(1, 8).min(cores)
}

/// Builds a cache entry's payload from the image, reading it once: through
/// the hashing reader, or for a plain qcow2 image natively, feeding the
/// digest as it goes.
fn build(
    image: &Path,
    kind: ImageKind,
    reader: &mut HashingReader,
    payload: &Path,
    opts: &ProvisionOptions,
) -> Result<(), ProvisionError> {
    reader.meter(opts.progress.clone());
    match kind {
        ImageKind::Tree(c) => {
            fs::create_dir(payload)
                .map_err(|e| Error::io(Op::Mkdir, payload, e))?;
            let stream = decompress(
                std::io::BufReader::with_capacity(1 << 20, reader),
                c,
            )
            .map_err(|e| Error::io(Op::Read, image, e))?;
            unpack::unpack_from(stream, image, payload, &opts.unpack())?;
        }
        ImageKind::Raw(c) => {
            let out = File::create_new(payload)
                .map_err(|e| Error::io(Op::Create, payload, e))?;
            let mut stream = decompress(reader, c)
                .map_err(|e| Error::io(Op::Read, image, e))?;
            // Compressed, the stream may say anything: bounded. A plain
            // file's bytes are its size.
            let limit = match c {
                Compression::None => u64::MAX,
                _ => opts.max_archive_bytes,
            };
            decompress_into(image, &mut stream, &out, payload, limit, opts)?;
            // A fixed VHD is the disk and a footer, which the guest must
            // not see; compressed, only the stream shows it.
            let len = out
                .metadata()
                .map_err(|e| Error::io(Op::Stat, payload, e))?
                .len();
            if let Some(disk) = detect::fixed_vhd_disk_len(&out, len, image)? {
                out.set_len(disk)
                    .map_err(|e| Error::io(Op::Truncate, payload, e))?;
            }
        }
        ImageKind::Qcow2 => {
            // One sequential read of the file feeds the digest; plain
            // clusters are reflinked or copied in the kernel from the
            // image file, or written from the same buffers.
            convert_streaming(image, reader, payload, opts, &Placer::new())?;
        }
        ImageKind::CompressedQcow2(c) => {
            // Decompressed once beside the payload (the scratch directory,
            // removed with it on failure), read natively, then dropped.
            let inner = payload.with_file_name("image.qcow2");
            scratch_copy(
                image,
                reader,
                c,
                &inner,
                opts.max_archive_bytes,
                opts,
            )?;
            // Its problems are the image's: the scratch copy is gone.
            let r =
                convert_qcow2(&inner, image, payload, opts).map_err(
                    |e| match e {
                        ProvisionError::Qcow2(mut q) if q.path == inner => {
                            q.path = image.to_path_buf();
                            ProvisionError::Qcow2(q)
                        }
                        e => e,
                    },
                );
            let _scratch = fs::remove_file(&inner);
            r?;
        }
        ImageKind::Foreign(format, c) => {
            // Copied (decompressed) into the scratch directory first: what
            // qemu-img reads is what was hashed, and it is given nothing
            // of the host's (see crate::qemu_img).
            let qemu_img = converter(opts, image, kind)?;
            let copy = payload.with_file_name("image.foreign");
            let limit = match c {
                Compression::None => u64::MAX,
                _ => opts.max_archive_bytes,
            };
            scratch_copy(image, reader, c, &copy, limit, opts)?;
            let r =
                crate::qemu_img::convert_to_raw(&crate::qemu_img::Conversion {
                    qemu_img: &qemu_img,
                    format,
                    shown: image,
                    copy: &copy,
                    payload,
                    cancel: opts.cancel.as_ref(),
                });
            let _scratch = fs::remove_file(&copy);
            r?;
        }
        // Built layer by layer (crate::oci), never from one stream.
        ImageKind::Oci => {
            return Err(Error::Image {
                path: image.to_path_buf(),
                problem: ImageProblem::Unsupported(
                    "an OCI image is not one stream".into(),
                ),
            });
        }
    }
    Ok(())
}

/// A qcow2 image's plain clusters placed by reflink or in-kernel copy
/// (the copy engine's [`RangeCopier`]).
struct Placer(RangeCopier);

impl Placer {
    fn new() -> Self {
        Placer(RangeCopier::new())
    }
}

impl qcow2::KernelCopy for Placer {
    fn copy(
        &self,
        src: &File,
        src_off: u64,
        dst: &File,
        dst_off: u64,
        len: u64,
    ) -> std::io::Result<u64> {
        self.0.copy(src, src_off, dst, dst_off, len)
    }

    fn finished(&self, dst: &File, off: u64, len: u64) {
        // The base is flushed before it is published: writing it back
        // while the conversion goes on leaves the flush less to do. A
        // failed writeback is reported by that flush.
        let _hint = copier::fsutil::start_writeback(dst, off, len);
    }
}

/// What converting a qcow2 image made: the converter's counts, and of
/// the bytes it placed, how many were reflinked and how many copied in
/// the kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Qcow2Build {
    /// The converter's counts.
    pub stats: qcow2::ConvertStats,
    /// Bytes reflinked from the image file.
    pub cloned: u64,
    /// Bytes copied in the kernel.
    pub copied: u64,
}

/// Converts the qcow2 `image` into the sparse raw `payload`, feeding
/// every byte of the file read to `reader`'s digest once, with plain
/// clusters placed by `placer`.
fn convert_streaming(
    image: &Path,
    reader: &mut HashingReader,
    payload: &Path,
    opts: &ProvisionOptions,
    placer: &Placer,
) -> Result<Qcow2Build, ProvisionError> {
    let img = qcow2::Image::open(image)?;
    img.require_standalone()?;
    check_data(&img, image, opts.max_archive_bytes)?;
    let out = File::create_new(payload)
        .map_err(|e| Error::io(Op::Create, payload, e))?;
    let co = qcow2::ConvertOptions {
        threads: convert_threads(opts),
    };
    let stats = reader.feed(|sink| {
        qcow2::convert_to_raw_streaming_with(&img, &out, &co, sink, placer)
            .map_err(ProvisionError::from)
    })?;
    Ok(Qcow2Build {
        stats,
        cloned: placer.0.cloned(),
        copied: placer.0.copied(),
    })
}

/// Builds a raw cache entry for the qcow2 `image` in `cache` as
/// [`provision`] does, its plain clusters placed in the kernel (reflink,
/// else `copy_file_range`) or, with `user_space_only`, all written from
/// the buffers that read them; says how each byte got there. For tests
/// and measurements of the two paths.
pub fn build_qcow2_entry(
    image: &Path,
    cache: &Cache,
    user_space_only: bool,
) -> Result<(Entry, Qcow2Build), ProvisionError> {
    let opts = ProvisionOptions {
        count: 0,
        out: PathBuf::new(),
        name: String::new(),
        size: None,
        cache: cache.root().to_path_buf(),
        sha256: None,
        qemu_img: None,
        tunables: Tunables::default(),
        max_archive_bytes: u64::MAX,
        allow_devices: false,
        cancel: None,
        pool: None,
        listener: None,
        identity: IdentityOptions::keep(),
        force: false,
        platform: None,
        pull: Default::default(),
        progress: None,
    };
    let placer = match user_space_only {
        true => Placer(RangeCopier::user_space_only()),
        false => Placer::new(),
    };
    let mut made = None;
    let (lease, _) =
        cache.obtain(image, EntryKind::Raw, None, |reader, payload| {
            made = Some(convert_streaming(
                image, reader, payload, &opts, &placer,
            )?);
            Ok::<_, ProvisionError>(())
        })?;
    let entry = lease.entry.clone();
    lease.release();
    Ok((entry, made.unwrap_or_default()))
}

/// Reads a decompressed qcow2 image at `qcow` (the image `shown`) into a
/// sparse raw `payload`.
fn convert_qcow2(
    qcow: &Path,
    shown: &Path,
    payload: &Path,
    opts: &ProvisionOptions,
) -> Result<(), ProvisionError> {
    let img = qcow2::Image::open(qcow)?;
    img.require_standalone()?;
    check_data(&img, shown, opts.max_archive_bytes)?;
    let out = File::create_new(payload)
        .map_err(|e| Error::io(Op::Create, payload, e))?;
    let co = qcow2::ConvertOptions {
        threads: convert_threads(opts),
    };
    qcow2::convert_to_raw(&img, &out, &co, &|_| {})?;
    Ok(())
}

/// Refuses a qcow2 image whose tables map more data than `limit`, before
/// anything is written: its clusters may point at the same few bytes of
/// the file over and over, so a small image could write a huge base.
fn check_data(
    img: &qcow2::Image,
    path: &Path,
    limit: u64,
) -> Result<(), ProvisionError> {
    let data = img.data_bytes()?;
    if data > limit {
        return Err(Error::Image {
            path: path.to_path_buf(),
            problem: ImageProblem::DataTooLarge { data, limit },
        });
    }
    Ok(())
}

/// Writes the image read through `reader`, decompressed (`c`), sparsely
/// into the new file `dst` beside the payload (in the scratch directory,
/// removed with it on failure), refusing more than `limit` bytes.
fn scratch_copy(
    image: &Path,
    reader: &mut HashingReader,
    c: Compression,
    dst: &Path,
    limit: u64,
    opts: &ProvisionOptions,
) -> Result<(), ProvisionError> {
    let out =
        File::create_new(dst).map_err(|e| Error::io(Op::Create, dst, e))?;
    let mut stream =
        decompress(reader, c).map_err(|e| Error::io(Op::Read, image, e))?;
    decompress_into(image, &mut stream, &out, dst, limit, opts)
}

/// Writes a decompressed stream sparsely into `out`, refusing more than
/// `limit` bytes.
fn decompress_into(
    image: &Path,
    stream: &mut dyn std::io::Read,
    out: &File,
    out_path: &Path,
    limit: u64,
    opts: &ProvisionOptions,
) -> Result<(), ProvisionError> {
    // Page-aligned: the kernel copies into the page cache several times
    // faster from an aligned buffer.
    let len = opts.tunables.copy_bufsize.max(1 << 20);
    let mut raw = vec![0u8; len + 4096];
    let at = raw.as_ptr().align_offset(4096).min(4096);
    let buf = &mut raw[at..at + len];
    let mut bounded = std::io::Read::take(stream, limit.saturating_add(1));
    let (n, _) = write_sparse(&mut bounded, out, buf, |_| {}).map_err(|e| {
        // A system call's error is the destination's (a full disk);
        // anything else is the decoder finding the image corrupt or cut
        // short.
        if e.raw_os_error().is_some() {
            Error::io(Op::Write, out_path, e)
        } else {
            Error::Image {
                path: image.to_path_buf(),
                problem: ImageProblem::Corrupt(e.to_string()),
            }
        }
    })?;
    if n > limit {
        return Err(Error::Image {
            path: image.to_path_buf(),
            problem: ImageProblem::TooLarge { limit },
        });
    }
    Ok(())
}

// Shared with the integration tests: a temporary directory removed even
// with immutable cache entries in it.
#[cfg(test)]
#[path = "../../../copier/tests/common/tmp.rs"]
mod tmp;

#[cfg(test)]
mod test {
    use super::*;

    use super::tmp::Tmp;

    fn opts(dir: &Path) -> ProvisionOptions {
        ProvisionOptions {
            count: 1,
            out: dir.join("out"),
            name: "g".into(),
            size: None,
            cache: dir.join("cache"),
            sha256: None,
            qemu_img: None,
            tunables: Tunables::default(),
            max_archive_bytes: 1 << 30,
            allow_devices: false,
            cancel: None,
            pool: None,
            listener: None,
            identity: IdentityOptions::keep(),
            force: false,
            platform: None,
            pull: Default::default(),
            progress: None,
        }
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
