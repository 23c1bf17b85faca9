//! A content-addressed cache of extracted images.
//!
//! Many guests are made from one image. Extracting or decompressing it
//! once per guest is the slow part, so each image is extracted once into
//! an *entry* keyed by the SHA-256 of the image's bytes and the entry's
//! kind (a directory tree, or a raw disk), and guests get thin copies of
//! the entry.
//!
//! ```text
//! ROOT/                                0700 unless configured
//!   entries/raw-<sha256>/base.raw      a raw disk, sparse, immutable
//!   entries/tree-<sha256>/tree/        an extracted root, immutable
//!                                      (of an OCI image: <sha256> is its
//!                                      manifest's)
//!   entries/layer-<sha256>/layer/      an OCI layer alone, by diff_id:
//!                                      tree/ and its changes (whiteouts,
//!                                      links to lower layers' files)
//!   entries/<kind>-<sha256>.<n>/       generation n, when an earlier
//!                                      one was found altered
//!   entries/<name>/meta.json           what it was made from, when, its
//!                                      stamp
//!   entries/<name>.lock                flock: shared while guests are made
//!                                      from it, exclusive to remove it
//!   entries/<kind>-<sha256>.build.lock flock: exclusive to publish or remove
//!   entries/<name>.users               guests made from it, one JSON line
//!                                      each: path, device, inode
//!   entries/<name>.altered             why the entry no longer counts
//!   index/<identity>                   file identity -> entry name
//!   index/<identity>.lock              flock: one builder per image file
//!   index/key-<kind>-<sha256>.lock     flock: one builder per OCI layer
//!                                      or image
//!   scratch/<identity>.<pid>.<thread>  a build in progress
//!   builds.log                         one line per completed build:
//!                                      time, pid, entry, build ms,
//!                                      flush ms (immutable flag, syncfs,
//!                                      directory fsync), source
//! ```
//!
//! **One build per image.** A builder first locks the image's *identity*
//! (device, inode, size, modification and change times, kind): two
//! processes given the same file serialize there, and the second finds the
//! first one's entry through the index without reading the image at all.
//! A builder reads the image exactly once, hashing it as it extracts into
//! a scratch directory unique to it (pid and thread in the name), then
//! locks the content key and renames the scratch into place, unless an
//! entry with the same content already exists (the same bytes under
//! another file). The rename is atomic and comes after one `syncfs`, so an
//! entry is whole or absent, even after a crash. An image that changes
//! while it is read is refused.
//!
//! **A base never changes under its guests.** Overlays read their base on
//! every access, so a changed base silently changes every guest made from
//! it: `qemu-img commit` of one guest, run as root, writes the guest's
//! data into the base, and the 0444 mode does not stop root. Two
//! measures, decided so:
//!
//! - *Protection.* The payload (`base.raw`, or every file and directory
//!   of `tree/`) gets the immutable flag (`chattr +i`) before the entry is
//!   published, where the filesystem has it (ext4, XFS, btrfs, tmpfs) and
//!   the process may set it (root). Not even root can then open the base
//!   for writing: `qemu-img commit` fails instead of changing the
//!   siblings. It costs one `ioctl` per file at build time and nothing at
//!   run time. fs-verity was not chosen: it needs a filesystem feature
//!   enabled at mkfs time and makes the file read-only by a Merkle tree
//!   the kernel checks on every read, a cost on every guest's I/O, where
//!   the immutable flag costs none.
//! - *Check.* Where the flag cannot be set (a filesystem without it, or
//!   not root), or someone clears it, the entry's *stamp* (inode, size,
//!   mtime and ctime of the payload, nanoseconds; for a tree, a digest of
//!   those of every file in it), recorded in `meta.json` when built, is
//!   compared with the payload before every reuse. ctime cannot be set
//!   from user space, so no write, truncation, chmod or `chattr -i` goes
//!   unnoticed. A stat (a walk for a tree) is all it costs, where
//!   re-hashing the payload would read the whole base on every
//!   provision. An entry whose stamp differs is marked altered (the
//!   reason in `<name>.altered`), left in place for the guests that
//!   already use it (one of them may now depend on what was committed
//!   into it), and a new generation is built beside it; the caller hears
//!   of it through [`Lease::replaced`].
//!
//! **A cache entry is never more readable than its source.** The entry's
//! directory and payload take the source file's read permissions (and,
//! when run as root, its owner and group): an image readable only by
//! root gives an entry readable only by root. The cache's root is made
//! 0700 unless a mode is configured ([`Cache::with_mode`]), for example
//! 0711 so that an unprivileged hypervisor can open bases by path.
//!
//! **Crashes.** A builder that dies leaves scratch behind and no entry;
//! the kernel drops its locks. The next builder of the same image, which
//! holds the identity lock, knows any scratch of that identity is stale
//! and removes it; [`Cache::gc`] removes stale scratch of any identity
//! whose lock it can take.
//!
//! **Paths never change, and gc never takes a disk guest's base.**
//! Overlays name their base by absolute path, so an entry is never moved
//! or renamed once made. Each guest is recorded with its path, device and
//! inode. [`Cache::gc`] keeps an entry if any of these holds:
//!
//! - a recorded guest is still at its path (for a disk entry: a qcow2
//!   file there whose backing file is this entry's base);
//! - a file with a recorded guest's device and inode, or any qcow2 file
//!   whose backing file is this entry's base, is found under the
//!   directories that held its guests or under the directories the
//!   caller names ([`GcOptions::search`]): a guest moved or copied there
//!   keeps its base, since an overlay's header names the base it reads;
//! - a process has the base open (a running VM, on Linux);
//! - a provision is making guests from it (its lock is held);
//! - it is a disk entry with a guest record at all: a guest moved or
//!   copied outside every searched directory cannot be seen, and would
//!   lose its base. Such a record ends only when zinstall removes that
//!   very guest (`--force`, a failed provision: [`Cache::release_guest`])
//!   or when the caller says the guests not found are deleted
//!   ([`GcOptions::release_missing`]). A tree guest is a copy that needs
//!   nothing of its entry, so tree entries are not held this way.
//!
//! `--dry-run` shows each entry's fate and why. gc removes an entry's
//! lock, user and marker files with it.
//!
//! Locks are `flock(2)` locks on files opened by this process; they are
//! released explicitly (not by dropping the file), because a child forked
//! by another thread between fork and exec would otherwise keep them.
//! Whoever takes a lock checks that the path still names the file it
//! locked, so gc may remove lock files without two holders ever locking
//! different files of one name.

use std::collections::{HashMap, HashSet};
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{
    DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt,
};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use copier::Op;
use copier::fsutil::{Flock, remove_tree, sync_fs};

use crate::error::{ImageProblem, ProvisionError as Error, Result};
use crate::immutable;

/// The cache root's mode unless configured: only its owner enters.
pub const DEFAULT_ROOT_MODE: u32 = 0o700;

/// **OCI images: layers stored once.** An OCI image's layers are cached
/// each on its own, keyed by its diff_id (the SHA-256 of the uncompressed
/// layer): `layer-<diff_id>/layer/` holds the layer's `tree/`, unpacked
/// alone, and its `changes`, what the layer removes from the layers below
/// (whiteouts) and the directories it holds no entry for. Two images
/// sharing a base layer share its entry, whatever their compression. The
/// image's own entry, `tree-<manifest sha256>`, is built by copying the
/// layer trees onto each other in order (reflink where the filesystem
/// can), applying each layer's changes before its copy; guests are copies
/// of it as of any tree. Whiteouts are kept as a list beside the tree,
/// not as overlayfs' 0/0 character devices in it: a list needs no
/// privilege to make (`mknod` does), is never mistaken for an image's own
/// device node, leaves the tree exactly the layer's entries, and lives in
/// the payload, so the stamp and the immutable flag cover it. Layers are
/// built and published as any entry ([`Cache::obtain_keyed`]: one builder
/// per key under its flock, scratch, stamp, immutable flag); an image
/// entry records the layer entries it was made from, and gc removes a
/// layer once no image entry it keeps names it.
///
/// `meta.json` of an entry.
#[derive(Serialize, Deserialize)]
struct Meta {
    kind: String,
    sha256: String,
    source: String,
    image_bytes: u64,
    created: u64,
    build_ms: u64,
    /// The payload's stamp when published (see the module docs).
    #[serde(default)]
    stamp: Option<String>,
    /// Whether the payload carries the immutable flag.
    #[serde(default)]
    immutable: bool,
    /// The layer entries an OCI image's tree was built from, lowest
    /// first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    layers: Vec<String>,
    /// The payload holds device nodes (built with devices allowed):
    /// reused only by a provision that allows them too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    devices: bool,
}

/// What an entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// An extracted directory tree (`tree/`).
    Tree,
    /// A raw disk image (`base.raw`).
    Raw,
    /// An OCI layer alone (`layer/`: `tree/` and `changes`).
    Layer,
}

impl EntryKind {
    /// `tree` or `raw`.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Tree => "tree",
            EntryKind::Raw => "raw",
            EntryKind::Layer => "layer",
        }
    }

    fn payload(self) -> &'static str {
        match self {
            EntryKind::Tree => "tree",
            EntryKind::Raw => "base.raw",
            EntryKind::Layer => "layer",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "tree" => Some(EntryKind::Tree),
            "raw" => Some(EntryKind::Raw),
            "layer" => Some(EntryKind::Layer),
            _ => None,
        }
    }
}

/// A finished entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The entry's directory; never moves.
    pub dir: PathBuf,
    /// What it holds.
    pub kind: EntryKind,
    /// SHA-256 of the image it was made from, hex.
    pub sha256: String,
    /// 0 for the first build of this content; one more for each rebuild
    /// after an earlier generation was found altered.
    pub generation: u32,
}

impl Entry {
    /// The extracted tree or the raw disk.
    pub fn payload(&self) -> PathBuf {
        self.dir.join(self.kind.payload())
    }

    /// The entry's name: `kind-sha256`, then `.N` from the second
    /// generation on.
    pub fn name(&self) -> String {
        match self.generation {
            0 => self.content_name(),
            g => format!("{}.{g}", self.content_name()),
        }
    }

    /// `kind-sha256`: what every generation of this content shares.
    pub fn content_name(&self) -> String {
        format!("{}-{}", self.kind.as_str(), self.sha256)
    }
}

/// Whether [`Cache::obtain`] built the entry or found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Obtained {
    /// Built now, in this much time.
    Built(Duration),
    /// Found, built earlier.
    Reused,
    /// Built now, in this much time, because the entry found was altered
    /// ([`Lease::replaced`] says which and why).
    Rebuilt(Duration),
}

/// An entry found altered and replaced by a new generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replaced {
    /// The altered entry, left for the guests that use it.
    pub old: Entry,
    /// What changed.
    pub why: String,
}

/// What [`Cache::obtain`] would do for an image, as
/// [`Cache::peek`] finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WouldObtain {
    /// Reuse this entry, built earlier from the same file.
    Reuse(Entry),
    /// Build a new generation: the entry built from this file was
    /// altered.
    Rebuild(Replaced),
    /// Read and build the image: no entry comes from this file as it is
    /// now (an entry of the same content, built from another file, would
    /// then be found by its digest and reused).
    Build,
}

/// An entry in use: guests are being made from it. Holds a shared lock so
/// that [`Cache::gc`] leaves the entry alone.
#[derive(Debug)]
pub struct Lease {
    /// The entry.
    pub entry: Entry,
    /// The altered entry this one replaces, if the one found had changed.
    pub replaced: Option<Replaced>,
    lock: File,
}

impl Lease {
    /// Ends the lease.
    pub fn release(self) {
        let _unlocked = self.lock.flock_unlock();
    }
}

/// Reads an image once while hashing every byte read.
pub struct HashingReader {
    file: File,
    hasher: Sha256,
    bytes: u64,
    /// The whole file has been hashed (by [`Self::feed`]).
    done: bool,
    /// Told how far through the file the reads are.
    progress: Option<std::sync::Arc<dyn copier::Progress>>,
}

impl Read for HashingReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.done {
            return Ok(0);
        }
        let n = self.file.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        if let Some(p) = &self.progress {
            p.read(n as u64);
        }
        Ok(n)
    }
}

/// Reads of this size finish a digest: large sequential reads, few
/// system calls.
const HASH_READ: usize = 4 << 20;

impl HashingReader {
    /// Bytes read so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Tells `progress` the file's length, then how far through it every
    /// read (or [`Self::feed`]) is.
    pub fn meter(
        &mut self,
        progress: Option<std::sync::Arc<dyn copier::Progress>>,
    ) {
        if let Some(p) = &progress {
            p.begin(self.file.metadata().ok().map(|m| m.len()));
        }
        self.progress = progress;
    }

    /// Runs `work`, which reads the image by other means (a qcow2 image
    /// read natively) and hands every byte of the file, in order, to the
    /// sink it is given: the digest is made from the very bytes the work
    /// read, in the same pass. Must be called before anything is read.
    pub fn feed<T, E: From<Error>>(
        &mut self,
        work: impl FnOnce(&mut (dyn FnMut(&[u8]) + Send)) -> Result<T, E>,
    ) -> Result<T, E> {
        assert_eq!(self.bytes, 0, "feed after a read");
        let (hasher, bytes) = (&mut self.hasher, &mut self.bytes);
        let progress = self.progress.clone();
        let mut sink = |b: &[u8]| {
            hasher.update(b);
            *bytes += b.len() as u64;
            if let Some(p) = &progress {
                p.read(b.len() as u64);
            }
        };
        let value = work(&mut sink)?;
        self.done = true;
        Ok(value)
    }
}

/// One entry as listed by [`Cache::list`].
#[derive(Clone, Debug)]
pub struct EntryInfo {
    /// The entry.
    pub entry: Entry,
    /// Bytes allocated on disk.
    pub size: u64,
    /// When it was built (seconds since the epoch).
    pub created: u64,
    /// The image it was built from (absolute path).
    pub source: String,
    /// Guests recorded as made from it that are still at their paths.
    pub users: Vec<PathBuf>,
    /// Why it no longer counts, if it was found altered.
    pub altered: Option<String>,
    /// Whether its payload carries the immutable flag.
    pub immutable: bool,
    /// For an OCI image's tree: the layer entries it was built from.
    pub layers: Vec<String>,
    /// For an OCI layer: the image entries built from it (more than one:
    /// the layer is shared, stored once).
    pub used_by: Vec<String>,
    /// When guests were last made from it (seconds since the epoch): its
    /// newest guest record, else when it was built. A layer's is its
    /// images' latest.
    pub last_used: u64,
}

/// How [`Cache::gc_with`] collects.
#[derive(Clone, Debug, Default)]
pub struct GcOptions {
    /// Stop once the cache is at most this big.
    pub max_size: Option<u64>,
    /// Decide and report, remove nothing.
    pub dry_run: bool,
    /// More directories to search for guests (moved or copied there),
    /// besides those their guests were made in.
    pub search: Vec<PathBuf>,
    /// Let disk entries go whose recorded guests are found nowhere
    /// searched: the caller says they are deleted, not moved. Without
    /// it a disk entry with a guest record is never removed.
    pub release_missing: bool,
}

/// What gc decided about one entry, and why.
#[derive(Clone, Debug)]
pub struct GcDecision {
    /// The entry.
    pub entry: Entry,
    /// Its size on disk.
    pub size: u64,
    /// Removed (or, in a dry run, would be).
    pub remove: bool,
    /// Why.
    pub why: String,
}

/// What [`Cache::gc`] did.
#[derive(Clone, Debug, Default)]
pub struct GcReport {
    /// Entries removed (none in a dry run).
    pub removed: Vec<Entry>,
    /// Bytes freed (or, in a dry run, that would be).
    pub freed: u64,
    /// Stale scratch directories removed.
    pub scratch_removed: usize,
    /// Entries kept because a guest uses them or they are locked.
    pub kept_in_use: usize,
    /// Every entry, oldest first, with what gc decided and why.
    pub decisions: Vec<GcDecision>,
    /// Lock, index and record files of removed entries removed.
    pub files_removed: usize,
    /// What gc did to the images pulled into the cache's store (`oci/`);
    /// its bytes are in `freed` too.
    pub store: zinstall_registry::store::StoreGcReport,
}

/// One guest as recorded in `<name>.users`; or, with `released`, the
/// end of the records before it of the guest with that device and inode
/// (zinstall removed it).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct UserRecord {
    path: PathBuf,
    #[serde(default)]
    dev: u64,
    #[serde(default)]
    ino: u64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    released: bool,
}

/// The cache under one root directory.
#[derive(Clone, Debug)]
pub struct Cache {
    root: PathBuf,
}

impl Cache {
    /// Opens (creating if needed, mode [`DEFAULT_ROOT_MODE`]) the cache
    /// at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Result<Self> {
        Self::with_mode(root, None)
    }

    /// Opens the cache at `root`, creating it with `mode` (default
    /// [`DEFAULT_ROOT_MODE`]); an explicit `mode` is also applied to an
    /// existing root.
    pub fn with_mode(
        root: impl Into<PathBuf>,
        mode: Option<u32>,
    ) -> Result<Self> {
        let root = root.into();
        let want = mode.unwrap_or(DEFAULT_ROOT_MODE) & 0o7777;
        let created = match fs::symlink_metadata(&root) {
            Ok(_) => false,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if let Some(parent) =
                    root.parent().filter(|p| !p.as_os_str().is_empty())
                {
                    fs::create_dir_all(parent)
                        .map_err(|e| Error::io(Op::Mkdir, parent, e))?;
                }
                match DirBuilder::new().mode(want).create(&root) {
                    Ok(()) => true,
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
                    Err(e) => return Err(Error::io(Op::Mkdir, &root, e)),
                }
            }
            Err(e) => return Err(Error::io(Op::Stat, &root, e)),
        };
        if created || mode.is_some() {
            // Exactly this mode, whatever the umask.
            fs::set_permissions(&root, fs::Permissions::from_mode(want))
                .map_err(|e| Error::io(Op::Chmod, &root, e))?;
        }
        for (sub, m) in
            [("entries", 0o755), ("index", 0o700), ("scratch", 0o700)]
        {
            let p = root.join(sub);
            match DirBuilder::new().mode(m).create(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::io(Op::Mkdir, &p, e)),
            }
        }
        Ok(Cache { root })
    }

    /// Opens the cache at `root` to read it or collect it: it must be
    /// there (a cache named by a typo is an error naming it, not a new
    /// empty cache), and nothing is made.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self> {
        let root = root.into();
        let md =
            fs::metadata(&root).map_err(|e| Error::io(Op::Open, &root, e))?;
        if !md.is_dir() {
            return Err(Error::io(
                Op::Open,
                &root,
                io::Error::from_raw_os_error(libc::ENOTDIR),
            ));
        }
        for sub in ["entries", "index", "scratch"] {
            if !root.join(sub).is_dir() {
                return Err(Error::io(
                    Op::Open,
                    &root,
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("not a zinstall cache (no {sub}/ in it)"),
                    ),
                ));
            }
        }
        Ok(Cache { root })
    }

    /// What [`obtain`](Cache::obtain) would do for `image` as an entry
    /// of `kind`, found by the file's identity alone: the cache at
    /// `root` (which need not exist) is read, nothing in it is made or
    /// changed, and the image's data is not read. `expected` is checked
    /// against an entry found.
    pub fn peek(
        root: &Path,
        image: &Path,
        kind: EntryKind,
        expected: Option<&str>,
    ) -> Result<WouldObtain> {
        let md =
            fs::metadata(image).map_err(|e| Error::io(Op::Stat, image, e))?;
        let cache = Cache {
            root: root.to_path_buf(),
        };
        let index = root.join("index").join(identity_key(&md, kind));
        let name = match fs::read_to_string(&index) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(WouldObtain::Build);
            }
            Err(e) => return Err(Error::io(Op::Read, &index, e)),
        };
        let Some(entry) = cache.entry_named(name.trim()) else {
            return Ok(WouldObtain::Build);
        };
        if !entry.dir.is_dir() {
            return Ok(WouldObtain::Build);
        }
        check_expected(image, expected, &entry.sha256)?;
        Ok(match cache.altered(&entry)? {
            None => WouldObtain::Reuse(entry),
            Some(why) => WouldObtain::Rebuild(Replaced { old: entry, why }),
        })
    }

    /// What [`Cache::obtain_keyed`] of `kind` and `key` would do, in the
    /// cache at `root`, changing nothing.
    pub fn peek_keyed(
        root: &Path,
        kind: EntryKind,
        key: &str,
    ) -> Result<WouldObtain> {
        let cache = Cache {
            root: root.to_path_buf(),
        };
        if !cache.entries_dir().is_dir() {
            return Ok(WouldObtain::Build);
        }
        let Some(entry) = cache.generations(kind, key)?.pop() else {
            return Ok(WouldObtain::Build);
        };
        Ok(match cache.altered(&entry)? {
            None => WouldObtain::Reuse(entry),
            Some(why) => WouldObtain::Rebuild(Replaced { old: entry, why }),
        })
    }

    /// The cache's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn entries_dir(&self) -> PathBuf {
        self.root.join("entries")
    }

    /// Returns the entry of `kind` for `image`, building it with `build`
    /// if there is none, or if the one there was altered.
    ///
    /// `build` gets a reader over the image (hashing what it reads), and
    /// the path where the payload must be created (a directory tree or a
    /// file; nothing exists there yet). Whatever of the image `build` does
    /// not read is read afterwards to finish the hash. If `expected` (hex
    /// SHA-256) is given and differs, nothing is kept and the error says
    /// so. A failed build leaves no entry and no scratch. The payload's
    /// permissions, immutable flag and stamp are set here, not by
    /// `build`.
    pub fn obtain<E: From<Error>>(
        &self,
        image: &Path,
        kind: EntryKind,
        expected: Option<&str>,
        build: impl FnOnce(&mut HashingReader, &Path) -> Result<(), E>,
    ) -> Result<(Lease, Obtained), E> {
        let md =
            fs::metadata(image).map_err(|e| Error::io(Op::Stat, image, e))?;
        let identity = identity_key(&md, kind);
        let id_lock =
            self.lock_file(&self.root.join("index"), &identity, false)?;
        let r =
            self.obtain_locked(image, &md, kind, expected, &identity, build);
        let _unlocked = id_lock.flock_unlock();
        r
    }

    fn obtain_locked<E: From<Error>>(
        &self,
        image: &Path,
        md: &fs::Metadata,
        kind: EntryKind,
        expected: Option<&str>,
        identity: &str,
        build: impl FnOnce(&mut HashingReader, &Path) -> Result<(), E>,
    ) -> Result<(Lease, Obtained), E> {
        let index = self.root.join("index").join(identity);
        let mut replaced = None;
        if let Ok(name) = fs::read_to_string(&index)
            && let Some(entry) = self.entry_named(name.trim())
        {
            check_expected(image, expected, &entry.sha256)?;
            match self.reuse(entry)? {
                Ok(lease) => return Ok((lease, Obtained::Reused)),
                Err(r) => replaced = r,
            }
        }
        let scratch = self.new_scratch(identity)?;
        let started = Instant::now();
        let result = self.build_in(image, kind, &scratch, build);
        let fail = |e| {
            let _already_failing = remove_entry_tree(&scratch);
            Err(e)
        };
        let (sha, bytes) = match result {
            Ok(v) => v,
            Err(e) => return fail(e),
        };
        // The digest is of what was read: an image written to meanwhile
        // may have given the payload other bytes than those hashed.
        match fs::metadata(image) {
            Ok(now) if identity_key(&now, kind) == identity => {}
            _ => {
                return fail(
                    Error::Image {
                        path: image.to_path_buf(),
                        problem: ImageProblem::ChangedWhileRead,
                    }
                    .into(),
                );
            }
        }
        if let Err(e) = check_expected(image, expected, &sha) {
            return fail(e.into());
        }
        let took = started.elapsed();
        let published =
            self.publish(kind, &sha, &scratch, image, md, bytes, took, &[]);
        let (entry, built, superseded) = match published {
            Ok(v) => v,
            Err(e) => return fail(e.into()),
        };
        write_atomic(&index, entry.name().as_bytes())?;
        Ok(self.leased(&entry, built, took, replaced.or(superseded))?)
    }

    /// The lease on an entry just published, and how it was obtained:
    /// `built` false when another builder's identical entry was there.
    fn leased(
        &self,
        entry: &Entry,
        built: bool,
        took: Duration,
        replaced: Option<Replaced>,
    ) -> Result<(Lease, Obtained)> {
        let mut lease = self.lease(entry)?;
        let how = match (built, &replaced) {
            (false, _) => Obtained::Reused,
            (true, None) => Obtained::Built(took),
            (true, Some(_)) => Obtained::Rebuilt(took),
        };
        lease.replaced = replaced;
        Ok((lease, how))
    }

    /// The entry found, leased, if it is still as it was built; else
    /// the lease is let go and, if the entry was altered (not removed by
    /// gc between the lookup and the lease), it is marked so and
    /// returned as the one a new build replaces.
    fn reuse(
        &self,
        entry: Entry,
    ) -> Result<std::result::Result<Lease, Option<Replaced>>> {
        let lease = self.lease(&entry)?;
        let mut replaced = None;
        if entry.dir.is_dir() {
            match self.altered(&entry)? {
                None => return Ok(Ok(lease)),
                Some(why) => {
                    self.mark_altered(&entry, &why)?;
                    replaced = Some(Replaced { old: entry, why });
                }
            }
        }
        lease.release();
        Ok(Err(replaced))
    }

    /// A new scratch directory for a build of `identity`. The caller holds
    /// the identity's lock, so any scratch of it left belongs to a builder
    /// that died, and is removed first.
    fn new_scratch(&self, identity: &str) -> Result<PathBuf> {
        self.remove_scratch(|n| n.starts_with(&format!("{identity}.")))?;
        let scratch = self.root.join("scratch").join(format!(
            "{identity}.{}.{}",
            std::process::id(),
            thread_number()
        ));
        DirBuilder::new()
            .mode(0o700)
            .create(&scratch)
            .map_err(|e| Error::io(Op::Mkdir, &scratch, e))?;
        Ok(scratch)
    }

    /// Returns the entry of `kind` whose content is named by `key` (a
    /// SHA-256, hex, known before building: an OCI layer's diff_id, an
    /// image's manifest digest), building it with `build` if there is
    /// none, or if the one there was altered. One builder per key: the
    /// key's lock is held while it looks and builds. `build` gets the
    /// path where the payload must be created and returns the entries the
    /// payload was made from, recorded in `meta.json` (gc keeps them
    /// while this entry stays); `source` names what it is made from, in
    /// `meta.json`; the entry takes `readable_like`'s read permissions.
    pub fn obtain_keyed<E: From<Error>>(
        &self,
        kind: EntryKind,
        key: &str,
        source: &Path,
        readable_like: &Path,
        bytes: u64,
        build: impl FnOnce(&Path) -> Result<Vec<String>, E>,
    ) -> Result<(Lease, Obtained), E> {
        if key.len() != 64 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::Image {
                path: source.to_path_buf(),
                problem: ImageProblem::Unsupported(format!(
                    "cache key {key:?} is not a SHA-256"
                )),
            }
            .into());
        }
        let md = fs::metadata(readable_like)
            .map_err(|e| Error::io(Op::Stat, readable_like, e))?;
        // No dot: stale scratch is told by what precedes the first one.
        let identity = format!("key-{}-{key}", kind.as_str());
        let id_lock =
            self.lock_file(&self.root.join("index"), &identity, false)?;
        let r = (|| {
            let mut replaced = None;
            if let Some(entry) = self.generations(kind, key)?.pop() {
                match self.reuse(entry)? {
                    Ok(lease) => return Ok((lease, Obtained::Reused)),
                    Err(r) => replaced = r,
                }
            }
            let scratch = self.new_scratch(&identity)?;
            let started = Instant::now();
            let from = match build(&scratch.join(kind.payload())) {
                Ok(v) => v,
                Err(e) => {
                    let _already_failing = remove_entry_tree(&scratch);
                    return Err(e);
                }
            };
            let took = started.elapsed();
            let (entry, built, superseded) = match self
                .publish(kind, key, &scratch, source, &md, bytes, took, &from)
            {
                Ok(v) => v,
                Err(e) => {
                    let _already_failing = remove_entry_tree(&scratch);
                    return Err(e.into());
                }
            };
            Ok(self.leased(&entry, built, took, replaced.or(superseded))?)
        })();
        let _unlocked = id_lock.flock_unlock();
        r
    }

    /// Runs `build` and returns the image's digest and length.
    fn build_in<E: From<Error>>(
        &self,
        image: &Path,
        kind: EntryKind,
        scratch: &Path,
        build: impl FnOnce(&mut HashingReader, &Path) -> Result<(), E>,
    ) -> Result<(String, u64), E> {
        let file =
            File::open(image).map_err(|e| Error::io(Op::Open, image, e))?;
        let mut reader = HashingReader {
            file,
            hasher: Sha256::new(),
            bytes: 0,
            done: false,
            progress: None,
        };
        build(&mut reader, &scratch.join(kind.payload()))?;
        let mut buf = vec![0u8; HASH_READ];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(Op::Read, image, e).into()),
            }
        }
        let digest = reader.hasher.finalize();
        Ok((hex(&digest), reader.bytes))
    }

    /// Every generation of `kind-sha` present, lowest first.
    fn generations(&self, kind: EntryKind, sha: &str) -> Result<Vec<Entry>> {
        let dir = self.entries_dir();
        let base = format!("{}-{sha}", kind.as_str());
        let mut out = Vec::new();
        for e in
            fs::read_dir(&dir).map_err(|e| Error::io(Op::ReadDir, &dir, e))?
        {
            let e = e.map_err(|e| Error::io(Op::ReadDir, &dir, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(&base)
                && let Some(entry) = self.entry_named(&name)
            {
                out.push(entry);
            }
        }
        out.sort_by_key(|e| e.generation);
        Ok(out)
    }

    /// Moves a finished scratch into place under the content lock.
    /// Returns the entry, whether it was built now (false if a good entry
    /// with the same content was already there), and the altered entry
    /// it replaces, if any.
    #[allow(clippy::too_many_arguments)]
    fn publish(
        &self,
        kind: EntryKind,
        sha: &str,
        scratch: &Path,
        image: &Path,
        source_md: &fs::Metadata,
        bytes: u64,
        took: Duration,
        layers: &[String],
    ) -> Result<(Entry, bool, Option<Replaced>)> {
        // The build lock, not the lease lock: publishing must not wait for
        // guests being made from an existing entry of the same content.
        let lock = self.lock_file(
            &self.entries_dir(),
            &format!("{}-{sha}.build", kind.as_str()),
            false,
        )?;
        let r = (|| {
            let mut replaced = None;
            let latest = self.generations(kind, sha)?.pop();
            if let Some(cur) = &latest {
                match self.altered(cur)? {
                    None => {
                        remove_entry_tree(scratch)?;
                        return Ok((cur.clone(), false, None));
                    }
                    Some(why) => {
                        self.mark_altered(cur, &why)?;
                        replaced = Some(Replaced {
                            old: cur.clone(),
                            why,
                        });
                    }
                }
            }
            let generation = latest.map_or(0, |e| e.generation + 1);
            let mut entry = Entry {
                dir: PathBuf::new(),
                kind,
                sha256: sha.to_string(),
                generation,
            };
            entry.dir = self.entries_dir().join(entry.name());
            let payload = scratch.join(kind.payload());
            restrict_like(scratch, &payload, kind, source_md)?;
            // The data on disk first, in one flush of the cache's
            // filesystem: ext4 writes a dirty file back and waits when
            // the immutable flag is set on it, one file at a time, which
            // made a tree of 10,000 files take 0.8 s to protect instead
            // of 0.1 s to flush and 0.13 s to protect once clean.
            let dir = File::open(scratch)
                .map_err(|e| Error::io(Op::Open, scratch, e))?;
            let flushing = Instant::now();
            sync_fs(&dir).map_err(|e| Error::io(Op::Sync, scratch, e))?;
            let immutable = protect(&payload, kind)?;
            let mut flush = flushing.elapsed();
            let (stamp, devices) = stamp_walk(&payload, kind)?;
            let created = now_secs();
            let source =
                fs::canonicalize(image).unwrap_or_else(|_| image.to_path_buf());
            let meta = Meta {
                kind: kind.as_str().to_string(),
                sha256: sha.to_string(),
                source: source.to_string_lossy().into_owned(),
                image_bytes: bytes,
                created,
                build_ms: took.as_millis() as u64,
                stamp: Some(stamp),
                immutable,
                layers: layers.to_vec(),
                devices,
            };
            let meta_path = scratch.join("meta.json");
            let json = serde_json::to_vec_pretty(&meta).map_err(|e| {
                Error::io(Op::Record, &meta_path, io::Error::other(e))
            })?;
            fs::write(&meta_path, json)
                .map_err(|e| Error::io(Op::Record, &meta_path, e))?;
            // Then the flags, times and record, so that what the rename
            // publishes is on disk as stamped.
            let synced = Instant::now();
            sync_fs(&dir).map_err(|e| Error::io(Op::Sync, scratch, e))?;
            flush += synced.elapsed();
            fs::rename(scratch, &entry.dir)
                .map_err(|e| Error::io2(Op::Rename, scratch, &entry.dir, e))?;
            let synced = Instant::now();
            sync_dir(&self.entries_dir())?;
            flush += synced.elapsed();
            // The build and its flush apart: writing a large base back to
            // disk can take as long as making it, and benchmarks compare
            // each with its like. The flush is all the waiting for the
            // disk: the two syncfs, the immutable flag and the
            // directory's fsync.
            let line = format!(
                "{created} {} {} {} {} {}\n",
                std::process::id(),
                entry.name(),
                took.as_millis(),
                flush.as_millis(),
                source.to_string_lossy()
            );
            append_line(&self.root.join("builds.log"), &line)?;
            Ok((entry, true, replaced))
        })();
        let _unlocked = lock.flock_unlock();
        r
    }

    /// Why `entry` no longer matches what was built, if it does not:
    /// marked altered earlier, no stamp recorded, or a stamp that differs
    /// from the payload's.
    pub fn altered(&self, entry: &Entry) -> Result<Option<String>> {
        let marker =
            self.entries_dir().join(format!("{}.altered", entry.name()));
        if let Ok(why) = fs::read_to_string(&marker) {
            return Ok(Some(why.trim().to_string()));
        }
        let meta_path = entry.dir.join("meta.json");
        let meta: Option<Meta> = fs::read(&meta_path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let Some(recorded) = meta.and_then(|m| m.stamp) else {
            return Ok(Some(format!(
                "{}: no stamp recorded, so it cannot be checked",
                meta_path.display()
            )));
        };
        let payload = entry.payload();
        let now = match stamp(&payload, entry.kind) {
            Ok(s) => s,
            Err(e) => return Ok(Some(format!("{e}"))),
        };
        Ok((now != recorded).then(|| {
            format!(
                "{} changed after it was built (stamp {recorded}, now {now})",
                payload.display()
            )
        }))
    }

    /// Whether `entry`'s payload holds device nodes, as recorded when it
    /// was built (an entry without the record holds none: it was built
    /// when provision made no device nodes).
    pub fn holds_devices(&self, entry: &Entry) -> bool {
        fs::read(entry.dir.join("meta.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Meta>(&b).ok())
            .is_some_and(|m| m.devices)
    }

    fn mark_altered(&self, entry: &Entry, why: &str) -> Result<()> {
        let marker =
            self.entries_dir().join(format!("{}.altered", entry.name()));
        if marker.exists() {
            return Ok(());
        }
        write_atomic(&marker, format!("{why}\n").as_bytes())
    }

    /// A shared hold on an entry while guests are made from it.
    fn lease(&self, entry: &Entry) -> Result<Lease> {
        let lock = self.lock_file(&self.entries_dir(), &entry.name(), true)?;
        Ok(Lease {
            entry: entry.clone(),
            replaced: None,
            lock,
        })
    }

    /// Records that `guest` (a path that exists) was made from `entry`,
    /// with its device and inode, so that it is found after a move.
    pub fn add_user(&self, entry: &Entry, guest: &Path) -> Result<()> {
        let users = self.entries_dir().join(format!("{}.users", entry.name()));
        let md = fs::symlink_metadata(guest)
            .map_err(|e| Error::io(Op::Stat, guest, e))?;
        let abs =
            fs::canonicalize(guest).unwrap_or_else(|_| guest.to_path_buf());
        let rec = UserRecord {
            path: abs,
            dev: md.dev(),
            ino: md.ino(),
            released: false,
        };
        let mut line = serde_json::to_string(&rec)
            .map_err(|e| Error::io(Op::Record, &users, io::Error::other(e)))?;
        line.push('\n');
        append_line(&users, &line)
    }

    /// Ends the records of the guest file that was at `guest` with device
    /// and inode `id`, in every disk entry that has one: called once
    /// zinstall itself has removed that guest (`--force`, a failed run),
    /// the one case where a guest is known to be gone rather than moved.
    pub fn release_guest(&self, guest: &Path, id: (u64, u64)) -> Result<()> {
        let dir = self.entries_dir();
        let names = match fs::read_dir(&dir) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(Op::ReadDir, &dir, e)),
        };
        for e in names {
            let e = e.map_err(|e| Error::io(Op::ReadDir, &dir, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(entry) = self.entry_named(&name) else {
                continue;
            };
            if entry.kind != EntryKind::Raw
                || !self
                    .user_records(&entry)?
                    .iter()
                    .any(|r| (r.dev, r.ino) == id)
            {
                continue;
            }
            let users = dir.join(format!("{name}.users"));
            let rec = UserRecord {
                path: guest.to_path_buf(),
                dev: id.0,
                ino: id.1,
                released: true,
            };
            let mut line = serde_json::to_string(&rec).map_err(|e| {
                Error::io(Op::Record, &users, io::Error::other(e))
            })?;
            line.push('\n');
            append_line(&users, &line)?;
        }
        Ok(())
    }

    /// The number of builds ever completed in this cache.
    pub fn builds(&self) -> Result<u64> {
        let log = self.root.join("builds.log");
        match fs::read_to_string(&log) {
            Ok(s) => Ok(s.lines().count() as u64),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(Error::io(Op::Read, &log, e)),
        }
    }

    /// Every entry, oldest first.
    pub fn list(&self) -> Result<Vec<EntryInfo>> {
        let dir = self.entries_dir();
        let mut out = Vec::new();
        for e in
            fs::read_dir(&dir).map_err(|e| Error::io(Op::ReadDir, &dir, e))?
        {
            let e = e.map_err(|e| Error::io(Op::ReadDir, &dir, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(entry) = self.entry_named(&name) else {
                continue;
            };
            // An entry whose metadata cannot be read is still listed (and
            // collectable), as built at the epoch from an unknown source.
            let meta: Option<Meta> = fs::read(entry.dir.join("meta.json"))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            let (created, source, immutable, layers) = meta
                .map(|m| (m.created, m.source, m.immutable, m.layers))
                .unwrap_or_default();
            let users = self
                .user_records(&entry)?
                .into_iter()
                .map(|r| r.path)
                .filter(|p| fs::symlink_metadata(p).is_ok())
                .collect::<HashSet<_>>();
            let mut users: Vec<PathBuf> = users.into_iter().collect();
            users.sort();
            let size = disk_usage(&entry.dir)?;
            let altered = self.altered(&entry)?;
            let users_file =
                self.entries_dir().join(format!("{}.users", entry.name()));
            let last_used = fs::metadata(&users_file)
                .ok()
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(created, |d| d.as_secs().max(created));
            out.push(EntryInfo {
                entry,
                size,
                created,
                source,
                users,
                altered,
                immutable,
                layers,
                used_by: Vec::new(),
                last_used,
            });
        }
        // Which images each layer is in, and when those were last used.
        let images: Vec<(String, Vec<String>, u64)> = out
            .iter()
            .filter(|e| !e.layers.is_empty())
            .map(|e| (e.entry.name(), e.layers.clone(), e.last_used))
            .collect();
        for e in out.iter_mut().filter(|e| e.entry.kind == EntryKind::Layer) {
            let name = e.entry.name();
            for (image, layers, used) in &images {
                if layers.contains(&name) {
                    e.used_by.push(image.clone());
                    e.last_used = e.last_used.max(*used);
                }
            }
        }
        out.sort_by(|a, b| {
            (a.created, a.entry.name()).cmp(&(b.created, b.entry.name()))
        });
        Ok(out)
    }

    /// Guests recorded for `entry`.
    fn user_records(&self, entry: &Entry) -> Result<Vec<UserRecord>> {
        let path = self.entries_dir().join(format!("{}.users", entry.name()));
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Vec::new());
            }
            Err(e) => return Err(Error::io(Op::Read, &path, e)),
        };
        let mut records: Vec<UserRecord> = Vec::new();
        for l in text.lines().filter(|l| !l.is_empty()) {
            let r = serde_json::from_str(l).unwrap_or_else(|_| UserRecord {
                // A line of an older cache: the path alone.
                path: PathBuf::from(l),
                dev: 0,
                ino: 0,
                released: false,
            });
            // A release ends the records before it only: a later guest
            // may reuse the inode.
            if r.released {
                records.retain(|x| (x.dev, x.ino) != (r.dev, r.ino));
            } else {
                records.push(r);
            }
        }
        Ok(records)
    }

    /// Removes entries no guest uses and nobody holds, oldest first: all
    /// of them, or only until the cache fits in `max_size` bytes. Stale
    /// scratch is removed too.
    pub fn gc(&self, max_size: Option<u64>) -> Result<GcReport> {
        self.gc_with(&GcOptions {
            max_size,
            ..GcOptions::default()
        })
    }

    /// gc as `opts` says; see the module documentation for how guests
    /// are found.
    pub fn gc_with(&self, opts: &GcOptions) -> Result<GcReport> {
        let mut report = GcReport {
            scratch_removed: if opts.dry_run {
                0
            } else {
                self.remove_stale_scratch()?
            },
            ..GcReport::default()
        };
        let mut entries = self.list()?;
        // Layers last: whether one stays depends on the image entries.
        entries.sort_by_key(|e| e.entry.kind == EntryKind::Layer);
        let in_use = self.find_users(&entries, &opts.search)?;
        let mut images_kept: Vec<(String, Vec<String>)> = Vec::new();
        let mut total: u64 = entries.iter().map(|e| e.size).sum();
        let dir = self.entries_dir();
        for info in entries {
            let name = info.entry.name();
            let mut decide = |remove: bool, why: String| {
                report.decisions.push(GcDecision {
                    entry: info.entry.clone(),
                    size: info.size,
                    remove,
                    why,
                })
            };
            if let Some(m) = opts.max_size
                && total <= m
            {
                images_kept.push((name.clone(), info.layers.clone()));
                decide(false, format!("the cache is within {m} bytes"));
                continue;
            }
            if let Some(why) = in_use.get(&name) {
                report.kept_in_use += 1;
                images_kept.push((name.clone(), info.layers.clone()));
                decide(false, why.clone());
                continue;
            }
            if info.entry.kind == EntryKind::Layer
                && let Some((image, _)) =
                    images_kept.iter().find(|(_, l)| l.contains(&name))
            {
                report.kept_in_use += 1;
                decide(false, format!("a layer of {image}, which stays"));
                continue;
            }
            // A disk guest cannot outlive its base: one recorded and not
            // found may have been moved or copied where nobody looked.
            if info.entry.kind == EntryKind::Raw && !opts.release_missing {
                let held = self.user_records(&info.entry)?.len();
                if held > 0 {
                    report.kept_in_use += 1;
                    decide(
                        false,
                        format!(
                            "held by {held} recorded guest{} not found \
                             (moved or copied elsewhere, or deleted); \
                             --release-missing lets it go",
                            if held == 1 { "" } else { "s" }
                        ),
                    );
                    continue;
                }
            }
            let build = self.lock_file(
                &dir,
                &format!("{}.build", info.entry.content_name()),
                false,
            )?;
            let lock = match self.try_lock_file(&dir, &name)? {
                Some(l) => l,
                None => {
                    let _unlocked = build.flock_unlock();
                    report.kept_in_use += 1;
                    images_kept.push((name.clone(), info.layers.clone()));
                    decide(false, "a provision is using it now".into());
                    continue;
                }
            };
            let why = match &info.altered {
                Some(a) => format!("altered ({a}) and no guest uses it"),
                None => {
                    let recorded = self.user_records(&info.entry)?.len();
                    format!(
                        "no guest uses it ({recorded} recorded, none found; \
                         not open by any process)"
                    )
                }
            };
            if opts.dry_run {
                let _unlocked = lock.flock_unlock();
                let _unlocked = build.flock_unlock();
                total = total.saturating_sub(info.size);
                report.freed += info.size;
                decide(true, why);
                continue;
            }
            // Out of sight first (one rename), then removed at leisure.
            let doomed = self
                .root
                .join("scratch")
                .join(format!("gc.{name}.{}", std::process::id()));
            let r = fs::rename(&info.entry.dir, &doomed)
                .map_err(|e| {
                    Error::io2(Op::Rename, &info.entry.dir, &doomed, e)
                })
                .and_then(|()| remove_entry_tree(&doomed));
            if r.is_ok() {
                for f in [
                    format!("{name}.users"),
                    format!("{name}.altered"),
                    format!("{name}.lock"),
                ] {
                    if fs::remove_file(dir.join(&f)).is_ok() {
                        report.files_removed += 1;
                    }
                }
                // The build lock goes with the last generation.
                if self
                    .generations(info.entry.kind, &info.entry.sha256)?
                    .is_empty()
                    && fs::remove_file(dir.join(format!(
                        "{}.build.lock",
                        info.entry.content_name()
                    )))
                    .is_ok()
                {
                    report.files_removed += 1;
                }
            }
            let _unlocked = lock.flock_unlock();
            let _unlocked = build.flock_unlock();
            r?;
            total = total.saturating_sub(info.size);
            report.freed += info.size;
            decide(true, why);
            report.removed.push(info.entry);
        }
        if !opts.dry_run {
            report.files_removed += self.remove_dangling_index()?;
        }
        self.gc_store(opts, total, &mut report)?;
        Ok(report)
    }

    /// Collects the images pulled into the cache's store (see
    /// [`zinstall_registry::store`]): an image stays while a tree entry
    /// made from it stays; others go (oldest pull first, and only until
    /// the cache fits `max_size`, counting what the entries keep).
    fn gc_store(
        &self,
        opts: &GcOptions,
        entries_total: u64,
        report: &mut GcReport,
    ) -> Result<()> {
        let trees: HashSet<&str> = report
            .decisions
            .iter()
            .filter(|d| !d.remove && d.entry.kind == EntryKind::Tree)
            .map(|d| d.entry.sha256.as_str())
            .collect();
        let keep = |img: &zinstall_registry::store::StoredImage| {
            img.manifests
                .iter()
                .find(|m| trees.contains(m.as_str()))
                .map(|m| format!("tree-{m} was made from it and stays"))
        };
        let store = crate::oci::store_of(&self.root);
        let r = zinstall_registry::store::gc(
            &store,
            &zinstall_registry::store::StoreGc {
                keep: &keep,
                budget: opts.max_size.map(|m| m.saturating_sub(entries_total)),
                dry_run: opts.dry_run,
            },
        )?;
        report.freed += r.freed;
        report.store = r;
        Ok(())
    }

    /// For each entry in use, why: see the module documentation.
    fn find_users(
        &self,
        entries: &[EntryInfo],
        search: &[PathBuf],
    ) -> Result<HashMap<String, String>> {
        let mut used: HashMap<String, String> = HashMap::new();
        // Payloads of disk entries by (dev, ino), and recorded guests by
        // (dev, ino).
        let mut bases: HashMap<(u64, u64), String> = HashMap::new();
        let mut guests: HashMap<(u64, u64), String> = HashMap::new();
        let mut roots: Vec<PathBuf> = search.to_vec();
        for info in entries {
            let name = info.entry.name();
            let base_id = (info.entry.kind == EntryKind::Raw)
                .then(|| fs::metadata(info.entry.payload()).ok())
                .flatten()
                .map(|m| (m.dev(), m.ino()));
            if let Some(id) = base_id {
                bases.insert(id, name.clone());
            }
            for rec in self.user_records(&info.entry)? {
                if let Some(p) = rec.path.parent() {
                    roots.push(p.to_path_buf());
                }
                if rec.ino != 0 {
                    guests.insert((rec.dev, rec.ino), name.clone());
                }
                if used.contains_key(&name) {
                    continue;
                }
                let Ok(md) = fs::symlink_metadata(&rec.path) else {
                    continue;
                };
                let here = match (info.entry.kind, base_id) {
                    (EntryKind::Raw, Some(id)) => {
                        backing_of(&rec.path).is_some_and(|b| b == id)
                    }
                    (EntryKind::Raw, None) => false,
                    // Guests are made from the image's tree, not a layer.
                    (EntryKind::Layer, _) => false,
                    // A tree guest is a copy; it is its own as long as it
                    // is the directory made (or an old record without an
                    // inode).
                    (EntryKind::Tree, _) => {
                        rec.ino == 0
                            || (md.dev(), md.ino()) == (rec.dev, rec.ino)
                    }
                };
                if here {
                    used.insert(
                        name.clone(),
                        format!("used by {}", rec.path.display()),
                    );
                }
            }
        }
        roots.sort();
        roots.dedup();
        for root in &roots {
            let walk = walkdir::WalkDir::new(root)
                .follow_links(false)
                .max_depth(SEARCH_DEPTH);
            for e in walk.into_iter().filter_map(|e| e.ok()) {
                let Ok(md) = e.metadata() else { continue };
                if let Some(name) = guests.get(&(md.dev(), md.ino()))
                    && !used.contains_key(name)
                {
                    used.insert(
                        name.clone(),
                        format!("used by {} (moved there)", e.path().display()),
                    );
                }
                if md.is_file()
                    && let Some(id) = backing_of(e.path())
                    && let Some(name) = bases.get(&id)
                    && !used.contains_key(name)
                {
                    used.insert(
                        name.clone(),
                        format!(
                            "used by {} (its backing file)",
                            e.path().display()
                        ),
                    );
                }
            }
        }
        for (id, name) in &bases {
            if !used.contains_key(name)
                && let Some(pid) = open_by_process(*id)
            {
                used.insert(name.clone(), format!("open by process {pid}"));
            }
        }
        Ok(used)
    }

    /// Index files naming entries that are gone, and identity lock files
    /// nobody holds whose index file is gone.
    fn remove_dangling_index(&self) -> Result<usize> {
        let dir = self.root.join("index");
        let mut removed = 0;
        let mut names = Vec::new();
        for e in
            fs::read_dir(&dir).map_err(|e| Error::io(Op::ReadDir, &dir, e))?
        {
            let e = e.map_err(|e| Error::io(Op::ReadDir, &dir, e))?;
            names.push(e.file_name().to_string_lossy().into_owned());
        }
        for n in &names {
            let Some(identity) = n.strip_suffix(".lock") else {
                continue;
            };
            if identity.contains('.') {
                continue;
            }
            let Some(lock) = self.try_lock_file(&dir, identity)? else {
                continue;
            };
            let index = dir.join(identity);
            let live = fs::read_to_string(&index)
                .ok()
                .is_some_and(|name| self.entry_named(name.trim()).is_some());
            if !live {
                if fs::remove_file(&index).is_ok() {
                    removed += 1;
                }
                if fs::remove_file(dir.join(n)).is_ok() {
                    removed += 1;
                }
            }
            let _unlocked = lock.flock_unlock();
        }
        Ok(removed)
    }

    /// Scratch whose builder is gone: its identity lock is free, or, for
    /// a removal in progress, its process is dead.
    fn remove_stale_scratch(&self) -> Result<usize> {
        let dir = self.root.join("scratch");
        let mut removed = 0;
        for e in
            fs::read_dir(&dir).map_err(|e| Error::io(Op::ReadDir, &dir, e))?
        {
            let e = e.map_err(|e| Error::io(Op::ReadDir, &dir, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            let stale = if let Some(rest) = name.strip_prefix("gc.") {
                let pid =
                    rest.rsplit('.').next().and_then(|p| p.parse::<i32>().ok());
                pid.is_some_and(|p| !process_alive(p))
            } else {
                let identity = name.split('.').next().unwrap_or_default();
                match self.try_lock_file(&self.root.join("index"), identity)? {
                    Some(lock) => {
                        let r = remove_entry_tree(&e.path());
                        let _unlocked = lock.flock_unlock();
                        r?;
                        removed += 1;
                        continue;
                    }
                    None => false,
                }
            };
            if stale {
                remove_entry_tree(&e.path())?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    fn remove_scratch(&self, matches: impl Fn(&str) -> bool) -> Result<()> {
        let dir = self.root.join("scratch");
        for e in
            fs::read_dir(&dir).map_err(|e| Error::io(Op::ReadDir, &dir, e))?
        {
            let e = e.map_err(|e| Error::io(Op::ReadDir, &dir, e))?;
            if matches(&e.file_name().to_string_lossy()) {
                remove_entry_tree(&e.path())?;
            }
        }
        Ok(())
    }

    fn entry_named(&self, name: &str) -> Option<Entry> {
        let (kind, rest) = name.split_once('-')?;
        let kind = EntryKind::parse(kind)?;
        let (sha, generation) = match rest.split_once('.') {
            None => (rest, 0),
            Some((sha, g)) => {
                // One spelling per generation: no sign, no leading zero.
                if !g.bytes().all(|b| b.is_ascii_digit()) || g.starts_with('0')
                {
                    return None;
                }
                (sha, g.parse::<u32>().ok()?)
            }
        };
        if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let dir = self.entries_dir().join(name);
        dir.is_dir().then(|| Entry {
            dir,
            kind,
            sha256: sha.to_string(),
            generation,
        })
    }

    fn lock_path(&self, dir: &Path, name: &str) -> PathBuf {
        dir.join(format!("{name}.lock"))
    }

    /// Opens and locks `dir/name.lock` (shared or exclusive), waiting if
    /// needed; retries if the file was removed meanwhile (by gc), so
    /// that the lock held is on the file the name now names.
    fn lock_file(&self, dir: &Path, name: &str, shared: bool) -> Result<File> {
        let path = self.lock_path(dir, name);
        loop {
            let f = open_lock(&path)?;
            let r = if shared {
                f.flock_shared()
            } else {
                f.flock_exclusive()
            };
            r.map_err(|e| Error::io(Op::Lock, &path, e))?;
            if same_file(&f, &path) {
                return Ok(f);
            }
            let _unlocked = f.flock_unlock();
        }
    }

    /// Like [`Self::lock_file`], exclusive, without waiting: `None` if
    /// someone holds it.
    fn try_lock_file(&self, dir: &Path, name: &str) -> Result<Option<File>> {
        let path = self.lock_path(dir, name);
        loop {
            let f = open_lock(&path)?;
            match f.try_flock_exclusive() {
                Ok(true) => {}
                Ok(false) => return Ok(None),
                Err(e) => return Err(Error::io(Op::Lock, &path, e)),
            }
            if same_file(&f, &path) {
                return Ok(Some(f));
            }
            let _unlocked = f.flock_unlock();
        }
    }
}

/// How deep gc looks under each searched directory.
const SEARCH_DEPTH: usize = 4;

fn same_file(f: &File, path: &Path) -> bool {
    match (f.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// The (device, inode) of the backing file a qcow2 file at `path` names,
/// if it is a qcow2 file with a backing file that exists. A relative name
/// is resolved against the overlay's directory, as QEMU does.
pub(crate) fn backing_of(path: &Path) -> Option<(u64, u64)> {
    let f = File::open(path).ok()?;
    let mut head = [0u8; 20];
    f.read_exact_at(&mut head, 0).ok()?;
    if &head[..4] != b"QFI\xfb" {
        return None;
    }
    let off = u64::from_be_bytes(head[8..16].try_into().ok()?);
    let len = u32::from_be_bytes(head[16..20].try_into().ok()?) as usize;
    // The name lies in cluster 0 (at most 2 MiB) and is at most 1023
    // bytes (QEMU's limits).
    if off == 0 || len == 0 || len > 1023 || off > (2 << 20) {
        return None;
    }
    let mut name = vec![0u8; len];
    f.read_exact_at(&mut name, off).ok()?;
    use std::os::unix::ffi::OsStrExt;
    let name = Path::new(std::ffi::OsStr::from_bytes(&name));
    let full = match path.parent() {
        Some(dir) if name.is_relative() => dir.join(name),
        _ => name.to_path_buf(),
    };
    let md = fs::metadata(full).ok()?;
    Some((md.dev(), md.ino()))
}

/// A process that has the file `(dev, ino)` open, on Linux.
fn open_by_process(id: (u64, u64)) -> Option<u32> {
    let procs = fs::read_dir("/proc").ok()?;
    for p in procs.filter_map(|e| e.ok()) {
        let Ok(pid) = p.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(fds) = fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        for fd in fds.filter_map(|e| e.ok()) {
            if let Ok(md) = fs::metadata(fd.path())
                && (md.dev(), md.ino()) == id
            {
                return Some(pid);
            }
        }
    }
    None
}

/// Gives the entry (its directory, and for a disk its payload) no more
/// read permission than the source `src` has: the source's read bits; as
/// root its owner and group too; otherwise the group bit only if the
/// group is the same.
fn restrict_like(
    dir: &Path,
    payload: &Path,
    kind: EntryKind,
    src: &fs::Metadata,
) -> Result<()> {
    // SAFETY: geteuid and getegid cannot fail.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let mut read = src.mode() & 0o444;
    if euid != 0 {
        // The entry is ours: owner read for us, who could read the source.
        read |= 0o400;
        if src.gid() != egid {
            read &= !0o040;
        }
    }
    // Directories: search where the file may be read.
    let dir_mode = read | (read >> 2) | 0o200;
    let chown = |p: &Path| -> Result<()> {
        if euid == 0 {
            std::os::unix::fs::lchown(p, Some(src.uid()), Some(src.gid()))
                .map_err(|e| Error::io(Op::Chown, p, e))?;
        }
        Ok(())
    };
    if kind == EntryKind::Raw {
        chown(payload)?;
        fs::set_permissions(payload, fs::Permissions::from_mode(read))
            .map_err(|e| Error::io(Op::Chmod, payload, e))?;
    }
    chown(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(dir_mode))
        .map_err(|e| Error::io(Op::Chmod, dir, e))
}

/// Sets the immutable flag on the payload (every file and directory of a
/// tree); false where it cannot be set.
fn protect(payload: &Path, kind: EntryKind) -> Result<bool> {
    match kind {
        EntryKind::Raw => immutable::set(payload, true)
            .map_err(|e| Error::io(Op::Chmod, payload, e)),
        EntryKind::Tree | EntryKind::Layer => {
            // Through each directory's descriptor, one open at a time: a
            // tree of any depth.
            let mut all = true;
            copier::fsutil::walk_tree(payload, &mut |v| {
                let t = v.stat.st_mode & libc::S_IFMT;
                if (t == libc::S_IFREG || t == libc::S_IFDIR)
                    && !immutable::set_at(v.dir, v.name, true)?
                {
                    all = false;
                    // Without the flag on one file there is none anywhere
                    // (same filesystem, same process).
                    return Ok(false);
                }
                Ok(true)
            })?;
            Ok(all)
        }
    }
}

/// The payload's stamp: inode, size, mtime and ctime (ns); for a tree, a
/// digest of those of every entry with its relative path.
fn stamp(payload: &Path, kind: EntryKind) -> Result<String> {
    stamp_walk(payload, kind).map(|(s, _)| s)
}

/// The payload's stamp, and whether it holds a device node.
fn stamp_walk(payload: &Path, kind: EntryKind) -> Result<(String, bool)> {
    match kind {
        EntryKind::Raw => {
            let md = fs::symlink_metadata(payload)
                .map_err(|e| Error::io(Op::Stat, payload, e))?;
            Ok((format!("raw:{}", stamp_fields(&md)), false))
        }
        EntryKind::Tree | EntryKind::Layer => {
            // Every entry with its path relative to the payload, in walkdir's
            // order (the order stamps were first recorded in): the payload,
            // then depth first, each directory's entries sorted by name.
            // Each is stat'ed relative to its directory's descriptor, so a
            // tree of any depth is stamped.
            use std::os::unix::ffi::OsStrExt;
            let mut h = Sha256::new();
            let mut devices = false;
            let top = fs::symlink_metadata(payload)
                .map_err(|e| Error::io(Op::Stat, payload, e))?;
            if !top.is_dir() {
                h.update([0]);
                h.update(stamp_fields(&top).as_bytes());
                h.update([b'\n']);
                return Ok((format!("tree:{}", hex(&h.finalize())), false));
            }
            copier::fsutil::walk_tree(payload, &mut |v| {
                let t = v.stat.st_mode & libc::S_IFMT;
                devices |= t == libc::S_IFBLK || t == libc::S_IFCHR;
                h.update(v.rel.as_os_str().as_bytes());
                h.update([0]);
                h.update(stat_fields(v.stat).as_bytes());
                h.update([b'\n']);
                Ok(true)
            })?;
            Ok((format!("tree:{}", hex(&h.finalize())), devices))
        }
    }
}

/// What a stamp records of one file: inode, size, mtime and ctime (ns),
/// mode, owner and group.
fn stamp_fields(md: &fs::Metadata) -> String {
    format!(
        "{}:{}:{}.{:09}:{}.{:09}:{:o}:{}:{}",
        md.ino(),
        md.size(),
        md.mtime(),
        md.mtime_nsec(),
        md.ctime(),
        md.ctime_nsec(),
        md.mode(),
        md.uid(),
        md.gid()
    )
}

/// [`stamp_fields`] of an `lstat`, the same text.
// libc's stat field types differ between platforms.
#[allow(clippy::unnecessary_cast)]
fn stat_fields(st: &libc::stat) -> String {
    format!(
        "{}:{}:{}.{:09}:{}.{:09}:{:o}:{}:{}",
        st.st_ino as u64,
        st.st_size as u64,
        st.st_mtime as i64,
        st.st_mtime_nsec as i64,
        st.st_ctime as i64,
        st.st_ctime_nsec as i64,
        st.st_mode as u32,
        st.st_uid,
        st.st_gid
    )
}

/// Removes a tree (an entry being collected, or scratch) after clearing
/// any immutable flag in it.
fn remove_entry_tree(path: &Path) -> Result<()> {
    if fs::symlink_metadata(path).is_err() {
        return Ok(());
    }
    if fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        // What cannot be walked is left to remove_tree to report.
        let mut failed = None;
        let _walked = copier::fsutil::walk_tree(path, &mut |v| {
            let t = v.stat.st_mode & libc::S_IFMT;
            if (t == libc::S_IFREG || t == libc::S_IFDIR)
                && immutable::is_set_at(v.dir, v.name)
                && let Err(e) = immutable::set_at(v.dir, v.name, false)
            {
                failed = Some(Error::io(Op::Chmod, path.join(v.rel), e));
                return Ok(false);
            }
            Ok(true)
        });
        if let Some(e) = failed {
            return Err(e);
        }
    } else if immutable::is_set(path) {
        immutable::set(path, false)
            .map_err(|err| Error::io(Op::Chmod, path, err))?;
    }
    remove_tree(path).map_err(Error::from)
}

fn open_lock(path: &Path) -> Result<File> {
    // Opened for append and never written: the file only carries locks.
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(Op::Lock, path, e))
}

fn check_expected(
    image: &Path,
    expected: Option<&str>,
    found: &str,
) -> Result<()> {
    match expected {
        Some(x) if !x.eq_ignore_ascii_case(found) => Err(Error::Image {
            path: image.to_path_buf(),
            problem: ImageProblem::ChecksumMismatch {
                expected: x.to_ascii_lowercase(),
                found: found.to_string(),
            },
        }),
        _ => Ok(()),
    }
}

/// Names an image file by what identifies its content without reading
/// it: a change to the file changes its size, mtime or ctime.
fn identity_key(md: &fs::Metadata, kind: EntryKind) -> String {
    let id = format!(
        "{}:{}:{}:{}.{}:{}.{}:{}",
        md.dev(),
        md.ino(),
        md.size(),
        md.mtime(),
        md.mtime_nsec(),
        md.ctime(),
        md.ctime_nsec(),
        kind.as_str()
    );
    let d = Sha256::digest(id.as_bytes());
    hex(&d[..16])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn thread_number() -> String {
    // `ThreadId(7)` → `7`: unique among this process's live threads.
    format!("{:?}", std::thread::current().id())
        .chars()
        .filter(char::is_ascii_digit)
        .collect()
}

fn process_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Writes `data` to `path` atomically: beside it, then renamed over it.
fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!(
        "tmp.{}.{}",
        std::process::id(),
        thread_number()
    ));
    fs::write(&tmp, data).map_err(|e| Error::io(Op::Record, &tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| {
        let _already_failing = fs::remove_file(&tmp);
        Error::io2(Op::Rename, &tmp, path, e)
    })
}

/// Appends one short line; `O_APPEND` makes concurrent appends whole.
fn append_line(path: &Path, line: &str) -> Result<()> {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(Op::Record, path, e))?;
    f.write_all(line.as_bytes())
        .map_err(|e| Error::io(Op::Record, path, e))
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(Op::Sync, dir, e))
}

/// Bytes allocated under `path`, not following symlinks, at any depth.
fn disk_usage(path: &Path) -> Result<u64> {
    let md =
        fs::symlink_metadata(path).map_err(|e| Error::io(Op::Stat, path, e))?;
    if !md.is_dir() {
        return Ok(md.blocks() * 512);
    }
    let mut total = 0;
    copier::fsutil::walk_tree(path, &mut |v| {
        // libc's stat field types differ between platforms.
        #[allow(clippy::unnecessary_cast)]
        let blocks = v.stat.st_blocks as u64;
        total += blocks * 512;
        Ok(true)
    })?;
    Ok(total)
}

#[cfg(test)]
mod test {
    use super::*;

    /// A tree stamp as entries built before were stamped: walkdir's order
    /// and paths. Stamps recorded then must still match.
    fn walkdir_stamp(payload: &Path) -> String {
        use std::os::unix::ffi::OsStrExt;
        let mut h = Sha256::new();
        for e in walkdir::WalkDir::new(payload)
            .follow_links(false)
            .sort_by_file_name()
        {
            let e = e.unwrap();
            let md = e.metadata().unwrap();
            let rel = e.path().strip_prefix(payload).unwrap();
            h.update(rel.as_os_str().as_bytes());
            h.update([0]);
            h.update(stamp_fields(&md).as_bytes());
            h.update([b'\n']);
        }
        format!("tree:{}", hex(&h.finalize()))
    }

    #[test]
    fn tree_stamps_are_those_recorded_before() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("tree");
        // Names whose byte order differs from other orders (case,
        // punctuation, non-UTF-8), nested directories, an empty one,
        // symlinks to a directory and to nothing, a hard link.
        for dir in ["a/b/c", "a/B", "a.b", "a-b/x", "Z", "empty"] {
            fs::create_dir_all(t.join(dir)).unwrap();
        }
        for (i, f) in
            ["a/b/c/f", "a/B/g", "a.b/h", "a-b/x/i", "Z/j", "k", "a/b/l"]
                .iter()
                .enumerate()
        {
            fs::write(t.join(f), vec![b'x'; i * 100]).unwrap();
        }
        use std::os::unix::ffi::OsStrExt;
        let odd = std::ffi::OsStr::from_bytes(b"\xff\xfe-odd");
        fs::write(t.join("a").join(odd), b"odd").unwrap();
        std::os::unix::fs::symlink("a/b", t.join("link-dir")).unwrap();
        std::os::unix::fs::symlink("nowhere", t.join("a/dangling")).unwrap();
        fs::hard_link(t.join("k"), t.join("a/b/k2")).unwrap();
        let now = stamp(&t, EntryKind::Tree).unwrap();
        assert_eq!(now, walkdir_stamp(&t));
        // And it changes with any entry.
        fs::write(t.join("a/b/c/f"), b"edited").unwrap();
        assert_ne!(stamp(&t, EntryKind::Tree).unwrap(), now);
        assert_eq!(stamp(&t, EntryKind::Tree).unwrap(), walkdir_stamp(&t));
    }

    /// A tree 3,000 levels deep (paths past PATH_MAX): stamped, its
    /// device nodes seen, measured, protected and removed, each through
    /// directory descriptors.
    #[test]
    fn deep_trees_are_stamped_protected_measured_and_removed() {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("tree");
        fs::create_dir(&t).unwrap();
        let mut dir: OwnedFd = File::open(&t).unwrap().into();
        let name = c"d";
        for _ in 0..3000 {
            // SAFETY: valid descriptors and C strings; the new descriptor
            // is owned once checked.
            let fd = unsafe {
                assert_eq!(
                    libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o755),
                    0
                );
                libc::openat(
                    dir.as_raw_fd(),
                    name.as_ptr(),
                    libc::O_RDONLY | libc::O_DIRECTORY,
                )
            };
            assert!(fd >= 0);
            // SAFETY: just opened, owned by nothing else.
            dir = unsafe { OwnedFd::from_raw_fd(fd) };
        }
        // SAFETY: as above.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                c"deepest".as_ptr(),
                libc::O_WRONLY | libc::O_CREAT,
                0o644,
            )
        };
        assert!(fd >= 0);
        // SAFETY: as above.
        drop(unsafe { File::from_raw_fd(fd) });
        drop(dir);
        let (s1, devices) = stamp_walk(&t, EntryKind::Tree).unwrap();
        assert!(!devices);
        assert_eq!(stamp(&t, EntryKind::Tree).unwrap(), s1);
        assert!(disk_usage(&t).unwrap() >= 3000 * 512);
        // Not root, or no flag on this filesystem: protect says so.
        let protected = protect(&t, EntryKind::Tree).unwrap();
        if protected {
            assert!(immutable::is_set(&t));
        }
        remove_entry_tree(&t).unwrap();
        assert!(!t.exists());
    }
}
