//! The store's images as gc sees them, and gc itself.
//!
//! Every process reading the store (a pull, an install or provision
//! reading a pulled image) holds a shared `flock` on `STORE/use.lock` for
//! as long as it has the image open ([`crate::Registry::open`] takes it,
//! the image's fetcher releases it). gc takes it exclusively without
//! waiting: while anyone reads the store, gc leaves it alone, so it never
//! removes a blob an install is about to read, a partial download in
//! progress, or an index record being written.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use oci_spec::image::ImageIndex;
use zinstall_core::Flock;
use zinstall_core::foreign::{self, Follow, Kind};
use zinstall_oci::{Digest, MAX_JSON, REF_NAME};

use crate::error::{RegistryError, Result};

/// The lock readers hold shared and gc exclusive.
pub(crate) const USE_LOCK: &str = "use.lock";

/// How deep an index may nest indexes before gc stops following it.
const MAX_NESTING: usize = 4;

/// Holds the store's use lock shared until dropped.
pub(crate) struct InUse(File);

impl InUse {
    /// Waits for any gc of `store` to finish, then holds the store open.
    pub(crate) fn take(store: &Path) -> Result<InUse> {
        let f = open_lock(store)?;
        f.flock_shared()
            .map_err(|e| RegistryError::io("lock", store.join(USE_LOCK), e))?;
        Ok(InUse(f))
    }
}

impl Drop for InUse {
    fn drop(&mut self) {
        // Released explicitly: a child forked by another thread may hold a
        // copy of the descriptor until it execs.
        let _unlocked = self.0.flock_unlock();
    }
}

// The store's own lock file, made here, never followed.
#[allow(clippy::disallowed_methods)]
fn open_lock(store: &Path) -> Result<File> {
    let p = store.join(USE_LOCK);
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&p)
        .map_err(|e| RegistryError::io("open", &p, e))
}

/// One image recorded in the store's `index.json`.
#[derive(Clone, Debug)]
pub struct StoredImage {
    /// Its top digest (a manifest or an index).
    pub digest: String,
    /// The names it was pulled by (`REGISTRY/REPO@DIGEST`, `…:TAG`).
    pub names: Vec<String>,
    /// The hex digests of its image manifests: the top one, or those its
    /// index lists. A provision cache keys the image's tree by these.
    pub manifests: Vec<String>,
    /// Bytes of the blobs it reaches that the store holds.
    pub size: u64,
    /// When it was pulled (its top blob's modification time).
    pub pulled: SystemTime,
    /// The blobs it reaches that the store holds (`ALG:HEX`).
    blobs: HashSet<String>,
}

/// What gc decided about one stored image, and why.
#[derive(Clone, Debug)]
pub struct StoreDecision {
    /// The image.
    pub image: StoredImage,
    /// Removed (or, in a dry run, would be).
    pub remove: bool,
    /// Why.
    pub why: String,
}

/// What [`gc`] did to a store.
#[derive(Clone, Debug, Default)]
pub struct StoreGcReport {
    /// Someone was reading the store: nothing was decided or removed.
    pub busy: bool,
    /// Each image, oldest first, with what gc decided and why.
    pub decisions: Vec<StoreDecision>,
    /// Bytes freed (or, in a dry run, that would be).
    pub freed: u64,
    /// Blobs removed (or that would be): those of removed images no kept
    /// image shares, and those no image reaches.
    pub blobs_removed: usize,
    /// Partial downloads removed (or that would be).
    pub partial_removed: usize,
    /// The store's size after gc (or, in a dry run, as it would be).
    pub size_after: u64,
}

/// How [`gc`] decides.
pub struct StoreGc<'a> {
    /// Why an image must stay (a cache entry made from it stays), or
    /// `None` if nothing needs it.
    pub keep: &'a dyn Fn(&StoredImage) -> Option<String>,
    /// Keep images nothing needs, newest first, while the store fits in
    /// this many bytes; `None`: remove every one nothing needs.
    pub budget: Option<u64>,
    /// Decide and report, remove nothing.
    pub dry_run: bool,
}

/// Removes from the image layout `store` the images `opts.keep` does not
/// keep (oldest first, only until the store fits `opts.budget` if there
/// is one), the blobs only they reached, blobs no image reaches, and
/// partial downloads. A store someone is reading is left alone
/// ([`StoreGcReport::busy`]). A store that does not exist is empty.
pub fn gc(store: &Path, opts: &StoreGc<'_>) -> Result<StoreGcReport> {
    let mut report = StoreGcReport::default();
    if fs::symlink_metadata(store.join("index.json")).is_err()
        && fs::symlink_metadata(store.join("blobs")).is_err()
    {
        return Ok(report);
    }
    let lock = open_lock(store)?;
    let lock_path = store.join(USE_LOCK);
    if !lock
        .try_flock_exclusive()
        .map_err(|e| RegistryError::io("lock", &lock_path, e))?
    {
        report.busy = true;
        report.size_after = dir_size(store);
        return Ok(report);
    }
    let r = gc_locked(store, opts, &mut report);
    let _unlocked = lock.flock_unlock();
    r.map(|()| report)
}

fn gc_locked(
    store: &Path,
    opts: &StoreGc<'_>,
    report: &mut StoreGcReport,
) -> Result<()> {
    let blobs = present_blobs(store)?;
    let mut images = images(store, &blobs)?;
    images.sort_by_key(|i| i.pulled);
    let partials = files_in(&store.join("partial"))?;
    let mut sweep = Sweep {
        blobs: &blobs,
        report,
        doomed: Vec::new(),
        total: blobs.values().map(|(_, s)| s).sum(),
    };
    sweep.unreached_and_partials(&images, &partials);
    let (removed, whys) = sweep.decide(&images, opts);
    let Sweep {
        report,
        doomed,
        total,
        ..
    } = sweep;
    report.size_after = total;
    if !opts.dry_run {
        remove_decided(store, &images, &removed, &doomed)?;
    }
    report.decisions = images
        .into_iter()
        .zip(removed)
        .zip(whys)
        .map(|((image, remove), why)| StoreDecision {
            image,
            remove,
            why: why.unwrap_or_default(),
        })
        .collect();
    Ok(())
}

/// What a gc removes, as it decides: the files doomed, and the store's
/// size once they are gone.
struct Sweep<'a> {
    blobs: &'a HashMap<String, (PathBuf, u64)>,
    report: &'a mut StoreGcReport,
    doomed: Vec<PathBuf>,
    total: u64,
}

impl Sweep<'_> {
    /// Dooms what goes regardless of decisions: partial downloads
    /// (nobody is downloading, or the lock would be held) and blobs no
    /// record reaches.
    fn unreached_and_partials(
        &mut self,
        images: &[StoredImage],
        partials: &[(PathBuf, u64)],
    ) {
        let reached: HashSet<&String> =
            images.iter().flat_map(|i| i.blobs.iter()).collect();
        for (digest, (path, size)) in self.blobs {
            if !reached.contains(digest) {
                self.doom_blob(path, *size);
            }
        }
        for (path, size) in partials {
            self.doomed.push(path.clone());
            self.report.partial_removed += 1;
            self.report.freed += size;
        }
    }

    /// Oldest pull first, each image nothing keeps goes: all of them, or
    /// only while the store is over the budget. Whether each goes, and
    /// why.
    fn decide(
        &mut self,
        images: &[StoredImage],
        opts: &StoreGc<'_>,
    ) -> (Vec<bool>, Vec<Option<String>>) {
        let mut removed: Vec<bool> = vec![false; images.len()];
        let mut whys: Vec<Option<String>> =
            images.iter().map(|i| (opts.keep)(i)).collect();
        for i in 0..images.len() {
            if whys[i].is_some() {
                continue;
            }
            if let Some(b) = opts.budget
                && self.total <= b
            {
                whys[i] = Some(format!("the cache is within {b} bytes"));
                continue;
            }
            removed[i] = true;
            // Blobs only this image (among those still kept) reaches.
            let others: HashSet<&String> = images
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i && !removed[*j])
                .flat_map(|(_, o)| o.blobs.iter())
                .collect();
            for b in &images[i].blobs {
                if !others.contains(b)
                    && let Some((path, size)) = self.blobs.get(b)
                {
                    self.doom_blob(path, *size);
                }
            }
            whys[i] =
                Some("no cache entry was made from it, or none stays".into());
        }
        (removed, whys)
    }

    fn doom_blob(&mut self, path: &Path, size: u64) {
        self.doomed.push(path.to_path_buf());
        self.report.blobs_removed += 1;
        self.report.freed += size;
        self.total = self.total.saturating_sub(size);
    }
}

/// Removes the images decided on from the index, then the doomed files,
/// then trust records no image is left for.
fn remove_decided(
    store: &Path,
    images: &[StoredImage],
    removed: &[bool],
    doomed: &[PathBuf],
) -> Result<()> {
    if removed.iter().any(|r| *r) {
        let gone: HashSet<&str> = images
            .iter()
            .zip(removed)
            .filter(|(_, r)| **r)
            .map(|(i, _)| i.digest.as_str())
            .collect();
        rewrite_index(store, &gone)?;
    }
    for p in doomed {
        match fs::remove_file(p) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(RegistryError::io("remove", p, e)),
        }
    }
    forget_trust_records(store)
}

/// Removes the trust records (`trust/ALGO-HEX.json`) of manifests no
/// longer in the store: a record outliving its image would say nothing
/// true of a later pull of another.
fn forget_trust_records(store: &Path) -> Result<()> {
    let dir = store.join("trust");
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(RegistryError::io("read", &dir, e)),
    };
    for e in entries.filter_map(std::result::Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((algo, hex)) =
            name.strip_suffix(".json").and_then(|n| n.split_once('-'))
        else {
            continue;
        };
        if fs::symlink_metadata(store.join("blobs").join(algo).join(hex))
            .is_err()
        {
            let p = e.path();
            match fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(RegistryError::io("remove", &p, e)),
            }
        }
    }
    Ok(())
}

/// The images `index.json` records, with the blobs each reaches.
fn images(
    store: &Path,
    blobs: &HashMap<String, (PathBuf, u64)>,
) -> Result<Vec<StoredImage>> {
    let index = read_index(store)?;
    let mut by_digest: Vec<StoredImage> = Vec::new();
    for d in index.manifests() {
        let digest = d.digest().to_string();
        let name = d
            .annotations()
            .as_ref()
            .and_then(|a| a.get(REF_NAME))
            .cloned();
        if let Some(img) = by_digest.iter_mut().find(|i| i.digest == digest) {
            img.names.extend(name);
            continue;
        }
        let mut reach = Reach::default();
        reach.walk(blobs, &digest, 0);
        let pulled = Digest::parse(&digest)
            .ok()
            .and_then(|g| fs::symlink_metadata(store.join(g.blob_path())).ok())
            .and_then(|m| m.modified().ok())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let size = reach
            .blobs
            .iter()
            .filter_map(|b| blobs.get(b))
            .map(|(_, s)| s)
            .sum();
        by_digest.push(StoredImage {
            digest,
            names: name.into_iter().collect(),
            manifests: reach.manifests,
            size,
            pulled,
            blobs: reach.blobs,
        });
    }
    Ok(by_digest)
}

/// What one record reaches: its blobs present in the store, and its
/// image manifests.
#[derive(Default)]
struct Reach {
    blobs: HashSet<String>,
    manifests: Vec<String>,
}

impl Reach {
    fn walk(
        &mut self,
        blobs: &HashMap<String, (PathBuf, u64)>,
        digest: &str,
        depth: usize,
    ) {
        let Some((path, _)) = blobs.get(digest) else {
            return;
        };
        if !self.blobs.insert(digest.to_string()) {
            return;
        }
        // Blobs in the store were checked against their digests when they
        // came in; one that is not JSON is a leaf.
        let Some(v) = read_json(path) else { return };
        let children = |key: &str| -> Vec<String> {
            v.get(key)
                .and_then(|m| m.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|d| d.get("digest")?.as_str())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        let listed = children("manifests");
        if !listed.is_empty() || v.get("manifests").is_some() {
            if depth < MAX_NESTING {
                for m in listed {
                    self.walk(blobs, &m, depth + 1);
                }
            }
            return;
        }
        if let Some((_, hex)) = digest.split_once(':') {
            self.manifests.push(hex.to_string());
        }
        let config = v
            .get("config")
            .and_then(|c| c.get("digest"))
            .and_then(|d| d.as_str())
            .map(str::to_string);
        for b in config.into_iter().chain(children("layers")) {
            if blobs.contains_key(&b) {
                self.blobs.insert(b);
            }
        }
    }
}

fn read_json(path: &Path) -> Option<serde_json::Value> {
    let bytes = foreign::read(path, Follow::No, JSON).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// A JSON file of the store, bounded as every OCI JSON document is.
const JSON: Kind = Kind::Other {
    what: "an OCI JSON document",
    cap: MAX_JSON,
};

pub(crate) fn read_index(store: &Path) -> Result<ImageIndex> {
    let path = store.join("index.json");
    match foreign::read(&path, Follow::No, JSON) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| {
            RegistryError::io(
                "parse",
                &path,
                io::Error::new(io::ErrorKind::InvalidData, e),
            )
        }),
        Err(e) if e.is_not_found() => Ok(ImageIndex::default()),
        Err(e) => Err(RegistryError::io("read", &path, e.into())),
    }
}

fn rewrite_index(store: &Path, gone: &HashSet<&str>) -> Result<()> {
    let mut index = read_index(store)?;
    let kept = index
        .manifests()
        .iter()
        .filter(|d| !gone.contains(d.digest().to_string().as_str()))
        .cloned()
        .collect();
    index.set_manifests(kept);
    let bytes = serde_json::to_vec_pretty(&index).map_err(|e| {
        RegistryError::io(
            "write",
            store.join("index.json"),
            io::Error::other(e),
        )
    })?;
    crate::layout::write_atomic(store, "index.json", &bytes, 0o644)
}

/// `ALG:HEX` → (path, bytes) of every blob in the store.
fn present_blobs(store: &Path) -> Result<HashMap<String, (PathBuf, u64)>> {
    let mut out = HashMap::new();
    let dir = store.join("blobs");
    let algs = match fs::read_dir(&dir) {
        Ok(r) => r,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(RegistryError::io("read", &dir, e)),
    };
    for alg in algs {
        let alg = alg.map_err(|e| RegistryError::io("read", &dir, e))?;
        let name = alg.file_name().to_string_lossy().into_owned();
        for (path, size) in files_in(&alg.path())? {
            let hex = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            out.insert(format!("{name}:{hex}"), (path, size));
        }
    }
    Ok(out)
}

/// The regular files directly in `dir`, with their sizes on disk.
fn files_in(dir: &Path) -> Result<Vec<(PathBuf, u64)>> {
    let rd = match fs::read_dir(dir) {
        Ok(r) => r,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(RegistryError::io("read", dir, e)),
    };
    let mut out = Vec::new();
    for e in rd {
        let e = e.map_err(|e| RegistryError::io("read", dir, e))?;
        let Ok(md) = e.metadata() else { continue };
        if md.is_file() {
            out.push((e.path(), md.blocks() * 512));
        }
    }
    Ok(out)
}

/// Bytes of the store's blobs and partial downloads.
fn dir_size(store: &Path) -> u64 {
    let blobs: u64 = present_blobs(store)
        .map(|b| b.values().map(|(_, s)| s).sum())
        .unwrap_or(0);
    let partial: u64 = files_in(&store.join("partial"))
        .map(|p| p.iter().map(|(_, s)| s).sum())
        .unwrap_or(0);
    blobs + partial
}
