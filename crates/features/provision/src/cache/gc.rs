//! Listing a cache's entries, and collecting them: every entry no guest
//! uses and no provision holds, oldest first (or until the cache fits a
//! size), with the reason for each decision; stale scratch, dangling
//! index files and pulled images no kept entry was made from go too.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use zinstall_engine::Op;
use zinstall_engine::fsutil::Flock;

use super::layout::{Cache, Entry, EntryKind, Meta, store_of};
use super::protect::remove_entry_tree;
use crate::error::{ProvisionError as Error, Result};
use crate::{records, sys};

/// A gc deciding, entry by entry, what stays.
struct Deciding<'a> {
    opts: &'a GcOptions,
    /// For each entry in use, why.
    in_use: HashMap<String, String>,
    /// The entries' directory.
    dir: PathBuf,
    /// Bytes the entries that stay take.
    total: u64,
    /// The image entries that stay, with their layers.
    images_kept: Vec<(String, Vec<String>)>,
    report: &'a mut GcReport,
}

/// Why an entry stays, as the report counts it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kept {
    /// The cache is within its budget: not counted as in use.
    Budget,
    /// In use; an image's layers stay with it.
    Used,
    /// Held by what stays (the image it is a layer of, guests recorded
    /// and not found): its own layers are not counted as staying.
    Held,
}

impl Deciding<'_> {
    fn keep(&mut self, info: &EntryInfo, why: String, kept: Kept) {
        if kept != Kept::Budget {
            self.report.kept_in_use += 1;
        }
        if kept != Kept::Held {
            self.images_kept
                .push((info.entry.name(), info.layers.clone()));
        }
        self.report.decisions.push(GcDecision {
            entry: info.entry.clone(),
            size: info.size,
            remove: false,
            why,
        });
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
    /// What gc did to the composefs store, if the cache has one.
    pub composefs: Option<super::ComposefsSweep>,
}

impl Cache {
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
            let meta: Option<Meta> =
                records::read(&entry.dir.join("meta.json"))
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
            let last_used = fs::symlink_metadata(&users_file)
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
        let listed: Vec<&Entry> = entries.iter().map(|e| &e.entry).collect();
        let in_use = self.find_users(&listed, &opts.search)?;
        let mut d = Deciding {
            opts,
            in_use,
            dir: self.entries_dir(),
            total: entries.iter().map(|e| e.size).sum(),
            images_kept: Vec::new(),
            report: &mut report,
        };
        for info in entries {
            self.decide(&mut d, info)?;
        }
        let total = d.total;
        if !opts.dry_run {
            report.files_removed += self.remove_dangling_index()?;
        }
        self.gc_store(opts, total, &mut report)?;
        // Last: the entries removed above gave up their refs.
        report.composefs = self.gc_composefs(opts.dry_run)?;
        Ok(report)
    }

    /// Keeps the entry `info` (oldest first) or removes it.
    fn decide(&self, d: &mut Deciding<'_>, info: EntryInfo) -> Result<()> {
        let name = info.entry.name();
        if let Some(m) = d.opts.max_size
            && d.total <= m
        {
            d.keep(
                &info,
                format!("the cache is within {m} bytes"),
                Kept::Budget,
            );
            return Ok(());
        }
        if let Some(why) = d.in_use.get(&name) {
            d.keep(&info, why.clone(), Kept::Used);
            return Ok(());
        }
        if info.entry.kind == EntryKind::Layer
            && let Some((image, _)) =
                d.images_kept.iter().find(|(_, l)| l.contains(&name))
        {
            let why = format!("a layer of {image}, which stays");
            d.keep(&info, why, Kept::Held);
            return Ok(());
        }
        // A disk guest cannot outlive its base: one recorded and not
        // found may have been moved or copied where nobody looked.
        if info.entry.kind == EntryKind::Raw && !d.opts.release_missing {
            let held = self.user_records(&info.entry)?.len();
            if held > 0 {
                let why = format!(
                    "{}; --release-missing lets it go",
                    held_by_missing(held)
                );
                d.keep(&info, why, Kept::Held);
                return Ok(());
            }
        }
        let Some(why) = self.remove_unheld(
            &d.dir,
            &info,
            d.opts.dry_run,
            &mut d.report.files_removed,
        )?
        else {
            d.keep(&info, "a provision is using it now".into(), Kept::Used);
            return Ok(());
        };
        d.total = d.total.saturating_sub(info.size);
        d.report.freed += info.size;
        d.report.decisions.push(GcDecision {
            entry: info.entry.clone(),
            size: info.size,
            remove: true,
            why,
        });
        if !d.opts.dry_run {
            d.report.removed.push(info.entry);
        }
        Ok(())
    }

    /// Removes the entry `info` names, which nothing keeps, under its
    /// locks (a dry run only takes them and lets them go); `None` when a
    /// provision holds it now, else why it goes.
    fn remove_unheld(
        &self,
        dir: &Path,
        info: &EntryInfo,
        dry_run: bool,
        files_removed: &mut usize,
    ) -> Result<Option<String>> {
        let build = self.lock_file(
            dir,
            &format!("{}.build", info.entry.content_name()),
            false,
        )?;
        let Some(lock) = self.try_lock_file(dir, &info.entry.name())? else {
            let _unlocked = build.flock_unlock();
            return Ok(None);
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
        if dry_run {
            let _unlocked = lock.flock_unlock();
            let _unlocked = build.flock_unlock();
            return Ok(Some(why));
        }
        let r = self.remove_entry(&info.entry, files_removed);
        let _unlocked = lock.flock_unlock();
        let _unlocked = build.flock_unlock();
        r?;
        if info.entry.kind == EntryKind::Tree {
            self.remove_composefs_ref(&info.entry)?;
        }
        Ok(Some(why))
    }

    /// The disk entries guests still read, each with why: a guest found
    /// naming its base as the backing file (where it was made, moved, or
    /// under `search`), or guests recorded and found nowhere (moved or
    /// copied where nobody looked: a base cannot be rebuilt under a
    /// guest, so these count too). Directory guests are copies and need
    /// no entry. What a package's purge keeps; nothing is changed.
    pub fn disks_in_use(
        &self,
        search: &[PathBuf],
    ) -> Result<Vec<(Entry, String)>> {
        let entries = self.list()?;
        let disks: Vec<&Entry> = entries
            .iter()
            .map(|e| &e.entry)
            .filter(|e| e.kind == EntryKind::Raw)
            .collect();
        let in_use = self.find_users(&disks, search)?;
        let mut out = Vec::new();
        for entry in disks {
            let why = match in_use.get(&entry.name()) {
                Some(why) => why.clone(),
                None => match self.user_records(entry)?.len() {
                    0 => continue,
                    held => held_by_missing(held),
                },
            };
            out.push((entry.clone(), why));
        }
        Ok(out)
    }

    /// Removes the collected `entry`, whose locks the caller holds: out
    /// of sight first (one rename), then removed at leisure, with its
    /// record, marker and lock files, counted in `files_removed`; its
    /// content's build lock goes with the last generation.
    fn remove_entry(
        &self,
        entry: &Entry,
        files_removed: &mut usize,
    ) -> Result<()> {
        let name = entry.name();
        let dir = self.entries_dir();
        let doomed = self
            .root
            .join("scratch")
            .join(format!("gc.{name}.{}", std::process::id()));
        fs::rename(&entry.dir, &doomed)
            .map_err(|e| Error::io2(Op::Rename, &entry.dir, &doomed, e))
            .and_then(|()| remove_entry_tree(&doomed))?;
        for f in [
            format!("{name}.users"),
            format!("{name}.altered"),
            format!("{name}.lock"),
        ] {
            if fs::remove_file(dir.join(&f)).is_ok() {
                *files_removed += 1;
            }
        }
        if self.generations(entry.kind, &entry.sha256)?.is_empty()
            && fs::remove_file(
                dir.join(format!("{}.build.lock", entry.content_name())),
            )
            .is_ok()
        {
            *files_removed += 1;
        }
        Ok(())
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
        let store = store_of(&self.root);
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
            let live = records::read_text(&index)
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
                pid.is_some_and(|p| !sys::process_exists(p))
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
}

/// Bytes allocated under `path`, not following symlinks, at any depth.
pub(super) fn disk_usage(path: &Path) -> Result<u64> {
    let md =
        fs::symlink_metadata(path).map_err(|e| Error::io(Op::Stat, path, e))?;
    if !md.is_dir() {
        return Ok(md.blocks() * 512);
    }
    let mut total = 0;
    zinstall_engine::fsutil::walk_tree(path, &mut |v| {
        // libc's stat field types differ between platforms.
        #[allow(clippy::unnecessary_cast)]
        let blocks = v.stat.st_blocks as u64;
        total += blocks * 512;
        Ok(true)
    })?;
    Ok(total)
}

/// Why a disk entry whose `held` recorded guests were not found stays.
fn held_by_missing(held: usize) -> String {
    format!(
        "held by {held} recorded guest{} not found (moved or copied \
         elsewhere, or deleted)",
        if held == 1 { "" } else { "s" }
    )
}
