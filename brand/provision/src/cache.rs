//! A content-addressed cache of extracted images.
//!
//! Many guests are made from one image. Extracting or decompressing it
//! once per guest is the slow part, so each image is extracted once into
//! an *entry* keyed by the SHA-256 of the image's bytes and the entry's
//! kind (a directory tree, or a raw disk), and guests get thin copies of
//! the entry.
//!
//! ```text
//! ROOT/
//!   entries/raw-<sha256>/base.raw      a raw disk, 0444, sparse
//!   entries/tree-<sha256>/tree/        an extracted root
//!   entries/<name>/meta.json           what it was made from, when
//!   entries/<name>.lock                flock: shared while guests are made
//!                                      from it, exclusive to remove it
//!   entries/<name>.build.lock          flock: exclusive to publish or remove
//!   entries/<name>.users               guests made from it, one per line
//!   index/<identity>                   file identity -> entry name
//!   index/<identity>.lock              flock: one builder per image file
//!   scratch/<identity>.<pid>.<thread>  a build in progress
//!   builds.log                         one line per completed build
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
//! entry is whole or absent, even after a crash.
//!
//! **Crashes.** A builder that dies leaves scratch behind and no entry;
//! the kernel drops its locks. The next builder of the same image, which
//! holds the identity lock, knows any scratch of that identity is stale
//! and removes it; [`Cache::gc`] removes stale scratch of any identity
//! whose lock it can take.
//!
//! **Paths never change.** Overlays name their base by absolute path, so
//! an entry is never moved or renamed once made; [`Cache::gc`] removes
//! only entries no known guest uses and nobody holds.
//!
//! Locks are `flock(2)` locks on files opened by this process; they are
//! released explicitly (not by dropping the file), because a child forked
//! by another thread between fork and exec would otherwise keep them.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use copier::Op;
use copier::fsutil::{remove_tree, sync_fs};

use crate::error::{ImageProblem, ProvisionError as Error, Result};

/// `meta.json` of an entry.
#[derive(Serialize, Deserialize)]
struct Meta {
    kind: String,
    sha256: String,
    source: String,
    image_bytes: u64,
    created: u64,
    build_ms: u64,
}

/// What an entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// An extracted directory tree (`tree/`).
    Tree,
    /// A raw disk image (`base.raw`).
    Raw,
}

impl EntryKind {
    /// `tree` or `raw`.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Tree => "tree",
            EntryKind::Raw => "raw",
        }
    }

    fn payload(self) -> &'static str {
        match self {
            EntryKind::Tree => "tree",
            EntryKind::Raw => "base.raw",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "tree" => Some(EntryKind::Tree),
            "raw" => Some(EntryKind::Raw),
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
}

impl Entry {
    /// The extracted tree or the raw disk.
    pub fn payload(&self) -> PathBuf {
        self.dir.join(self.kind.payload())
    }

    /// `kind-sha256`, the entry's name.
    pub fn name(&self) -> String {
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
}

/// An entry in use: guests are being made from it. Holds a shared lock so
/// that [`Cache::gc`] leaves the entry alone.
#[derive(Debug)]
pub struct Lease {
    /// The entry.
    pub entry: Entry,
    lock: File,
}

impl Lease {
    /// Ends the lease.
    pub fn release(self) {
        let _unlocked = self.lock.unlock();
    }
}

/// Reads an image once while hashing every byte read.
pub struct HashingReader {
    file: File,
    hasher: Sha256,
    bytes: u64,
}

impl Read for HashingReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

impl HashingReader {
    /// Bytes read so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
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
    /// The image it was built from.
    pub source: String,
    /// Guests recorded as made from it that still exist.
    pub users: Vec<PathBuf>,
}

/// What [`Cache::gc`] did.
#[derive(Clone, Debug, Default)]
pub struct GcReport {
    /// Entries removed.
    pub removed: Vec<Entry>,
    /// Bytes freed.
    pub freed: u64,
    /// Stale scratch directories removed.
    pub scratch_removed: usize,
    /// Entries kept because a guest uses them or they are locked.
    pub kept_in_use: usize,
}

/// The cache under one root directory.
#[derive(Clone, Debug)]
pub struct Cache {
    root: PathBuf,
}

impl Cache {
    /// Opens (creating if needed) the cache at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Result<Self> {
        let root = root.into();
        for sub in ["entries", "index", "scratch"] {
            let p = root.join(sub);
            fs::create_dir_all(&p).map_err(|e| Error::io(Op::Mkdir, &p, e))?;
        }
        Ok(Cache { root })
    }

    /// The cache's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Returns the entry of `kind` for `image`, building it with `build`
    /// if there is none.
    ///
    /// `build` gets a reader over the image (hashing what it reads), and
    /// the path where the payload must be created (a directory tree or a
    /// file; nothing exists there yet). Whatever of the image `build` does
    /// not read is read afterwards to finish the hash. If `expected` (hex
    /// SHA-256) is given and differs, nothing is kept and the error says
    /// so. A failed build leaves no entry and no scratch.
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
        let id_lock = self.lock_file(&self.root.join("index"), &identity)?;
        let r = self.obtain_locked(image, kind, expected, &identity, build);
        let _unlocked = id_lock.unlock();
        r
    }

    fn obtain_locked<E: From<Error>>(
        &self,
        image: &Path,
        kind: EntryKind,
        expected: Option<&str>,
        identity: &str,
        build: impl FnOnce(&mut HashingReader, &Path) -> Result<(), E>,
    ) -> Result<(Lease, Obtained), E> {
        let index = self.root.join("index").join(identity);
        if let Ok(name) = fs::read_to_string(&index)
            && let Some(entry) = self.entry_named(name.trim())
        {
            check_expected(image, expected, &entry.sha256)?;
            let lease = self.lease(&entry)?;
            // gc may have removed it between the lookup and the lease.
            if entry.dir.is_dir() {
                return Ok((lease, Obtained::Reused));
            }
            lease.release();
        }
        // We hold the identity lock: any scratch of this identity belongs
        // to a builder that died.
        self.remove_scratch(|n| n.starts_with(&format!("{identity}.")))?;
        let scratch = self.root.join("scratch").join(format!(
            "{identity}.{}.{}",
            std::process::id(),
            thread_number()
        ));
        fs::create_dir(&scratch)
            .map_err(|e| Error::io(Op::Mkdir, &scratch, e))?;
        let started = Instant::now();
        let result = self.build_in(image, kind, &scratch, build);
        let (sha, bytes) = match result {
            Ok(v) => v,
            Err(e) => {
                let _already_failing = remove_tree(&scratch);
                return Err(e);
            }
        };
        if let Err(e) = check_expected(image, expected, &sha) {
            let _already_failing = remove_tree(&scratch);
            return Err(e.into());
        }
        let entry = Entry {
            dir: self
                .root
                .join("entries")
                .join(format!("{}-{sha}", kind.as_str())),
            kind,
            sha256: sha,
        };
        let took = started.elapsed();
        let published = self.publish(&entry, &scratch, image, bytes, took);
        if published.is_err() {
            let _already_failing = remove_tree(&scratch);
        }
        let built = published?;
        write_atomic(&index, entry.name().as_bytes())?;
        let lease = self.lease(&entry)?;
        Ok((
            lease,
            if built {
                Obtained::Built(took)
            } else {
                Obtained::Reused
            },
        ))
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
        };
        build(&mut reader, &scratch.join(kind.payload()))?;
        io::copy(&mut reader, &mut io::sink())
            .map_err(|e| Error::io(Op::Read, image, e))?;
        let digest = reader.hasher.finalize();
        Ok((hex(&digest), reader.bytes))
    }

    /// Moves a finished scratch into place under the content lock; false
    /// if an entry with the same content was already there.
    fn publish(
        &self,
        entry: &Entry,
        scratch: &Path,
        image: &Path,
        bytes: u64,
        took: Duration,
    ) -> Result<bool> {
        // The build lock, not the lease lock: publishing must not wait for
        // guests being made from an existing entry of the same content.
        let lock = self.lock_file(
            &self.root.join("entries"),
            &format!("{}.build", entry.name()),
        )?;
        let r = (|| {
            if entry.dir.exists() {
                remove_tree(scratch)?;
                return Ok(false);
            }
            let created = now_secs();
            let meta = Meta {
                kind: entry.kind.as_str().to_string(),
                sha256: entry.sha256.clone(),
                source: image.to_string_lossy().into_owned(),
                image_bytes: bytes,
                created,
                build_ms: took.as_millis() as u64,
            };
            let meta_path = scratch.join("meta.json");
            let json = serde_json::to_vec_pretty(&meta).map_err(|e| {
                Error::io(Op::Record, &meta_path, io::Error::other(e))
            })?;
            fs::write(&meta_path, json)
                .map_err(|e| Error::io(Op::Record, &meta_path, e))?;
            // One flush of the cache filesystem, so that what the rename
            // publishes is on disk.
            let dir = File::open(scratch)
                .map_err(|e| Error::io(Op::Open, scratch, e))?;
            sync_fs(&dir).map_err(|e| Error::io(Op::Sync, scratch, e))?;
            fs::rename(scratch, &entry.dir)
                .map_err(|e| Error::io2(Op::Rename, scratch, &entry.dir, e))?;
            sync_dir(&self.root.join("entries"))?;
            let line = format!(
                "{created} {} {} {} {}\n",
                std::process::id(),
                entry.name(),
                took.as_millis(),
                image.to_string_lossy()
            );
            append_line(&self.root.join("builds.log"), &line)?;
            Ok(true)
        })();
        let _unlocked = lock.unlock();
        r
    }

    /// A shared hold on an entry while guests are made from it.
    fn lease(&self, entry: &Entry) -> Result<Lease> {
        let path = self.lock_path(&self.root.join("entries"), &entry.name());
        let lock = open_lock(&path)?;
        lock.lock_shared()
            .map_err(|e| Error::io(Op::Lock, &path, e))?;
        Ok(Lease {
            entry: entry.clone(),
            lock,
        })
    }

    /// Records that `guest` was made from `entry`.
    pub fn add_user(&self, entry: &Entry, guest: &Path) -> Result<()> {
        let users = self
            .root
            .join("entries")
            .join(format!("{}.users", entry.name()));
        let mut line = guest.to_string_lossy().into_owned();
        line.push('\n');
        append_line(&users, &line)
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
        let dir = self.root.join("entries");
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
            let (created, source) =
                meta.map(|m| (m.created, m.source)).unwrap_or_default();
            let users = self.users(&entry)?;
            let size = disk_usage(&entry.dir)?;
            out.push(EntryInfo {
                entry,
                size,
                created,
                source,
                users,
            });
        }
        out.sort_by(|a, b| {
            (a.created, a.entry.name()).cmp(&(b.created, b.entry.name()))
        });
        Ok(out)
    }

    /// Guests recorded for `entry` that still exist.
    fn users(&self, entry: &Entry) -> Result<Vec<PathBuf>> {
        let path = self
            .root
            .join("entries")
            .join(format!("{}.users", entry.name()));
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Vec::new());
            }
            Err(e) => return Err(Error::io(Op::Read, &path, e)),
        };
        let mut users: Vec<PathBuf> = text
            .lines()
            .filter(|l| !l.is_empty())
            .map(PathBuf::from)
            .filter(|p| fs::symlink_metadata(p).is_ok())
            .collect();
        users.sort();
        users.dedup();
        Ok(users)
    }

    /// Removes entries no existing guest uses and nobody holds, oldest
    /// first: all of them, or only until the cache fits in `max_size`
    /// bytes. Stale scratch is removed too.
    pub fn gc(&self, max_size: Option<u64>) -> Result<GcReport> {
        let mut report = GcReport {
            scratch_removed: self.remove_stale_scratch()?,
            ..GcReport::default()
        };
        let entries = self.list()?;
        let mut total: u64 = entries.iter().map(|e| e.size).sum();
        for info in entries {
            if max_size.is_some_and(|m| total <= m) {
                break;
            }
            if !info.users.is_empty() {
                report.kept_in_use += 1;
                continue;
            }
            let entries = self.root.join("entries");
            let name = info.entry.name();
            let build = self.lock_file(&entries, &format!("{name}.build"))?;
            let path = self.lock_path(&entries, &name);
            let lock = open_lock(&path)?;
            match lock.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => {
                    let _unlocked = build.unlock();
                    report.kept_in_use += 1;
                    continue;
                }
                Err(TryLockError::Error(e)) => {
                    let _unlocked = build.unlock();
                    return Err(Error::io(Op::Lock, &path, e));
                }
            }
            // Out of sight first (one rename), then removed at leisure.
            let doomed = self.root.join("scratch").join(format!(
                "gc.{}.{}",
                info.entry.name(),
                std::process::id()
            ));
            let r = fs::rename(&info.entry.dir, &doomed)
                .map_err(|e| {
                    Error::io2(Op::Rename, &info.entry.dir, &doomed, e)
                })
                .and_then(|()| remove_tree(&doomed).map_err(Error::from));
            let users = self
                .root
                .join("entries")
                .join(format!("{}.users", info.entry.name()));
            let _stale_users = fs::remove_file(&users);
            let _unlocked = lock.unlock();
            let _unlocked = build.unlock();
            r?;
            total = total.saturating_sub(info.size);
            report.freed += info.size;
            report.removed.push(info.entry);
        }
        Ok(report)
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
                let path = self.lock_path(&self.root.join("index"), identity);
                let lock = open_lock(&path)?;
                match lock.try_lock() {
                    Ok(()) => {
                        let r = remove_tree(&e.path());
                        let _unlocked = lock.unlock();
                        r?;
                        removed += 1;
                        continue;
                    }
                    Err(_) => false,
                }
            };
            if stale {
                remove_tree(&e.path())?;
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
                remove_tree(&e.path())?;
            }
        }
        Ok(())
    }

    fn entry_named(&self, name: &str) -> Option<Entry> {
        let (kind, sha) = name.split_once('-')?;
        let kind = EntryKind::parse(kind)?;
        if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let dir = self.root.join("entries").join(name);
        dir.is_dir().then(|| Entry {
            dir,
            kind,
            sha256: sha.to_string(),
        })
    }

    fn lock_path(&self, dir: &Path, name: &str) -> PathBuf {
        dir.join(format!("{name}.lock"))
    }

    /// Opens and exclusively locks `dir/name.lock`, waiting if needed.
    fn lock_file(&self, dir: &Path, name: &str) -> Result<File> {
        let path = self.lock_path(dir, name);
        let f = open_lock(&path)?;
        f.lock().map_err(|e| Error::io(Op::Lock, &path, e))?;
        Ok(f)
    }
}

fn open_lock(path: &Path) -> Result<File> {
    // Opened for append and never written: the file only carries locks.
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o644)
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
        .mode(0o644)
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

/// Bytes allocated under `path`, not following symlinks.
fn disk_usage(path: &Path) -> Result<u64> {
    let mut total = 0;
    for e in walkdir::WalkDir::new(path).follow_links(false) {
        let e = e.map_err(|e| {
            let p = e.path().unwrap_or(path).to_path_buf();
            Error::io(Op::ReadDir, p, io::Error::from(e))
        })?;
        let md = e.metadata().map_err(|err| {
            Error::io(Op::Stat, e.path(), io::Error::from(err))
        })?;
        total += md.blocks() * 512;
    }
    Ok(total)
}
