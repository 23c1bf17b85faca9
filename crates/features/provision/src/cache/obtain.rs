//! Obtaining an entry: found by the image file's identity (or a key
//! known beforehand) and reused if its stamp still holds, or built once
//! from one read of the image into scratch, then published by one
//! rename after the data is flushed, stamped and protected.

use std::fs::{self, DirBuilder, File};
use std::io::{self, Read, Seek};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use zinstall_engine::Op;
use zinstall_engine::fsutil::{Flock, sync_fs};

use super::layout::{
    Cache, Entry, EntryKind, Meta, append_line, hex, now_secs, sync_dir,
    thread_number, write_atomic,
};
use super::protect::{protect, remove_entry_tree, restrict_like, stamp_walk};
use crate::error::{ImageProblem, ProvisionError as Error, Result};
use crate::records;

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

/// What [`Cache::obtain`] would do for an image, as a dry run
/// ([`crate::dry_run`]) finds it.
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
    progress: Option<std::sync::Arc<dyn zinstall_engine::Progress>>,
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
    /// Tells `progress` the file's length, then how far through it every
    /// read (or [`Self::feed`]) is.
    pub(crate) fn meter(
        &mut self,
        progress: Option<std::sync::Arc<dyn zinstall_engine::Progress>>,
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
    pub(crate) fn feed<T, E: From<Error>>(
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

impl Cache {
    /// What [`obtain`](Cache::obtain) would do for `image` as an entry
    /// of `kind`, found by the file's identity alone: the cache at
    /// `root` (which need not exist) is read, nothing in it is made or
    /// changed, and the image's data is not read. `expected` is checked
    /// against an entry found.
    pub(crate) fn peek(
        root: &Path,
        image: &Path,
        file: &File,
        also: &[&File],
        kind: EntryKind,
        expected: Option<&str>,
    ) -> Result<WouldObtain> {
        let md = file.metadata().map_err(|e| Error::io(Op::Stat, image, e))?;
        let cache = Cache {
            root: root.to_path_buf(),
        };
        let index = root
            .join("index")
            .join(chained_identity(image, &md, also, kind)?);
        let name = match records::read_text(&index) {
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
    pub(crate) fn peek_keyed(
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
    ///
    /// The image is opened here, as any foreign file is: a regular file,
    /// or refused naming what it is.
    pub fn obtain<E: From<Error>>(
        &self,
        image: &Path,
        kind: EntryKind,
        expected: Option<&str>,
        build: impl FnOnce(&mut HashingReader, &Path) -> Result<(), E>,
    ) -> Result<(Lease, Obtained), E> {
        let file = zinstall_core::foreign::open(
            image,
            zinstall_core::foreign::Follow::Yes,
        )
        .map_err(|e| Error::io(Op::Open, image, e.into()))?;
        self.obtain_with(image, &file, &[], kind, expected, build)
    }

    /// [`Self::obtain`] for an image that also depends on the files
    /// `also` (a qcow2 image's data file and backing chain, whose bytes
    /// `build` feeds to the digest after the image's; an encrypted
    /// image's key file): their identities are part of the image's, so
    /// that an entry is found again only while none of them has changed
    /// either. The image is `file`, opened by the caller (`image` names
    /// it in messages): it is never looked up by name again, and the
    /// entry is no more readable than the least readable of it and
    /// `also`.
    pub fn obtain_with<E: From<Error>>(
        &self,
        image: &Path,
        file: &File,
        also: &[&File],
        kind: EntryKind,
        expected: Option<&str>,
        build: impl FnOnce(&mut HashingReader, &Path) -> Result<(), E>,
    ) -> Result<(Lease, Obtained), E> {
        let md = file.metadata().map_err(|e| Error::io(Op::Stat, image, e))?;
        let identity = chained_identity(image, &md, also, kind)?;
        let id_lock =
            self.lock_file(&self.root.join("index"), &identity, false)?;
        let r = self.obtain_locked(
            (image, file),
            &md,
            also,
            kind,
            expected,
            &identity,
            build,
        );
        let _unlocked = id_lock.flock_unlock();
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn obtain_locked<E: From<Error>>(
        &self,
        (image, file): (&Path, &File),
        md: &fs::Metadata,
        also: &[&File],
        kind: EntryKind,
        expected: Option<&str>,
        identity: &str,
        build: impl FnOnce(&mut HashingReader, &Path) -> Result<(), E>,
    ) -> Result<(Lease, Obtained), E> {
        let index = self.root.join("index").join(identity);
        let mut replaced = None;
        if let Ok(name) = records::read_text(&index)
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
        let result = self.build_in((image, file), kind, &scratch, build);
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
        let now = file
            .metadata()
            .map_err(|e| Error::io(Op::Stat, image, e))
            .and_then(|now| chained_identity(image, &now, also, kind));
        match now {
            Ok(now) if now == identity => {}
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
        // Every file the entry was made from: it is no more readable
        // than the least readable of them.
        let mut sources = vec![md.clone()];
        for f in also {
            sources
                .push(f.metadata().map_err(|e| Error::io(Op::Stat, image, e))?);
        }
        let published = self.publish(&Built {
            kind,
            sha: &sha,
            scratch: &scratch,
            image,
            sources: &sources,
            bytes,
            took,
            layers: &[],
        });
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

    /// Returns the entry of `kind` whose content is named by `key` (a
    /// SHA-256, hex, known before building: an OCI layer's diff_id, an
    /// image's manifest digest), building it with `build` if there is
    /// none, or if the one there was altered. One builder per key: the
    /// key's lock is held while it looks and builds. `build` gets the
    /// path where the payload must be created and returns the entries the
    /// payload was made from, recorded in `meta.json` (gc keeps them
    /// while this entry stays); `source` names what it is made from, in
    /// `meta.json`; the entry takes `readable_like`'s read permissions.
    pub(crate) fn obtain_keyed<E: From<Error>>(
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
        // What the entry is made from, as named (a layout directory, a
        // store): only its owner and permissions are asked.
        #[allow(clippy::disallowed_methods)]
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
            let (entry, built, superseded) = match self.publish(&Built {
                kind,
                sha: key,
                scratch: &scratch,
                image: source,
                sources: std::slice::from_ref(&md),
                bytes,
                took,
                layers: &from,
            }) {
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
        (image, file): (&Path, &File),
        kind: EntryKind,
        scratch: &Path,
        build: impl FnOnce(&mut HashingReader, &Path) -> Result<(), E>,
    ) -> Result<(String, u64), E> {
        // The very file the caller opened, read from its start.
        let mut file = file
            .try_clone()
            .map_err(|e| Error::io(Op::Open, image, e))?;
        file.seek(io::SeekFrom::Start(0))
            .map_err(|e| Error::io(Op::Read, image, e))?;
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

    /// Moves a finished scratch into place under the content lock.
    /// Returns the entry, whether it was built now (false if a good entry
    /// with the same content was already there), and the altered entry
    /// it replaces, if any.
    fn publish(
        &self,
        b: &Built<'_>,
    ) -> Result<(Entry, bool, Option<Replaced>)> {
        // The build lock, not the lease lock: publishing must not wait for
        // guests being made from an existing entry of the same content.
        let lock = self.lock_file(
            &self.entries_dir(),
            &format!("{}-{}.build", b.kind.as_str(), b.sha),
            false,
        )?;
        let r = self.publish_locked(b);
        let _unlocked = lock.flock_unlock();
        r
    }

    /// [`Cache::publish`], its build lock held.
    fn publish_locked(
        &self,
        b: &Built<'_>,
    ) -> Result<(Entry, bool, Option<Replaced>)> {
        let (kind, scratch) = (b.kind, b.scratch);
        let mut replaced = None;
        let latest = self.generations(kind, b.sha)?.pop();
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
            sha256: b.sha.to_string(),
            generation,
        };
        entry.dir = self.entries_dir().join(entry.name());
        let payload = scratch.join(kind.payload());
        restrict_like(scratch, &payload, kind, b.sources)?;
        // The data on disk first, in one flush of the cache's
        // filesystem: ext4 writes a dirty file back and waits when
        // the immutable flag is set on it, one file at a time, which
        // made a tree of 10,000 files take 0.8 s to protect instead
        // of 0.1 s to flush and 0.13 s to protect once clean.
        // Our scratch, opened only to flush its filesystem.
        #[allow(clippy::disallowed_methods)]
        let dir =
            File::open(scratch).map_err(|e| Error::io(Op::Open, scratch, e))?;
        let flushing = Instant::now();
        sync_fs(&dir).map_err(|e| Error::io(Op::Sync, scratch, e))?;
        let immutable = protect(&payload, kind)?;
        let mut flush = flushing.elapsed();
        let (stamp, devices) = stamp_walk(&payload, kind)?;
        let (created, source) = write_meta(b, stamp, immutable, devices)?;
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
            b.took.as_millis(),
            flush.as_millis(),
            source.to_string_lossy()
        );
        append_line(&self.root.join("builds.log"), &line)?;
        Ok((entry, true, replaced))
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

    /// The number of builds ever completed in this cache.
    pub fn builds(&self) -> Result<u64> {
        let log = self.root.join("builds.log");
        // A line per build ever made: counted as it streams, never held.
        let f = match zinstall_core::foreign::open(
            &log,
            zinstall_core::foreign::Follow::No,
        ) {
            Ok(f) => f,
            Err(e) if e.is_not_found() => return Ok(0),
            Err(e) => return Err(Error::io(Op::Read, &log, e.into())),
        };
        let mut lines = 0u64;
        let mut r = io::BufReader::new(f);
        loop {
            let buf = match io::BufRead::fill_buf(&mut r) {
                Ok([]) => return Ok(lines),
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io(Op::Read, &log, e)),
            };
            let n = buf.len();
            lines += buf.iter().filter(|b| **b == b'\n').count() as u64;
            io::BufRead::consume(&mut r, n);
        }
    }
}

/// A finished build in its scratch directory, to be published.
struct Built<'a> {
    kind: EntryKind,
    /// The content's key, hex.
    sha: &'a str,
    scratch: &'a Path,
    /// What it was built from.
    image: &'a Path,
    /// Every file it was made from: the entry is no more readable than
    /// the least readable of them.
    sources: &'a [fs::Metadata],
    /// Bytes of the image read.
    bytes: u64,
    /// How long the build took.
    took: Duration,
    /// The layer entries it was made of, if any.
    layers: &'a [String],
}

/// Writes the record (`meta.json`) of the build `b` into its scratch;
/// when it was made (seconds since the epoch) and its image's path.
fn write_meta(
    b: &Built<'_>,
    stamp: String,
    immutable: bool,
    devices: bool,
) -> Result<(u64, PathBuf)> {
    let created = now_secs();
    let source =
        fs::canonicalize(b.image).unwrap_or_else(|_| b.image.to_path_buf());
    let meta = Meta {
        kind: b.kind.as_str().to_string(),
        sha256: b.sha.to_string(),
        source: source.to_string_lossy().into_owned(),
        image_bytes: b.bytes,
        created,
        build_ms: b.took.as_millis() as u64,
        stamp: Some(stamp),
        immutable,
        layers: b.layers.to_vec(),
        devices,
    };
    let meta_path = b.scratch.join("meta.json");
    let json = serde_json::to_vec_pretty(&meta)
        .map_err(|e| Error::io(Op::Record, &meta_path, io::Error::other(e)))?;
    fs::write(&meta_path, json)
        .map_err(|e| Error::io(Op::Record, &meta_path, e))?;
    Ok((created, source))
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
/// [`identity_key`] of an image that also reads the files `also`: theirs
/// folded into its own, in order.
fn chained_identity(
    image: &Path,
    md: &fs::Metadata,
    also: &[&File],
    kind: EntryKind,
) -> Result<String> {
    let mut identity = identity_key(md, kind);
    for f in also {
        let m = f.metadata().map_err(|e| Error::io(Op::Stat, image, e))?;
        let both = format!("{identity}+{}", identity_key(&m, kind));
        identity = hex(&Sha256::digest(both.as_bytes())[..16]);
    }
    Ok(identity)
}

pub(super) fn identity_key(md: &fs::Metadata, kind: EntryKind) -> String {
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
