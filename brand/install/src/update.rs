//! Updating an installed root in place: only what the source changed is
//! written, into a new root beside the old one, switched in with one
//! rename; the previous root is kept for [`rollback`].
//!
//! ```text
//!   root (old) ──clone──▶ root.new ──changes──▶ root.new ──exchange──▶ root
//!                                                                      root.new (old) ──▶ root.prev
//! ```
//!
//! 1. Under the zonepath's lock, an interrupted update or rollback is
//!    finished or undone first ([`recover`]).
//! 2. The manifest the install recorded ([`crate::manifest`]) is compared
//!    with the profile's trees as they are now: each path added, removed
//!    or changed (content by size and modification time, as rsync's
//!    quick check; type, mode, owner, times, extended attributes, link
//!    target, hard-link group). A file the update would replace or
//!    remove is first compared with the manifest: if the zone changed it
//!    since (its content hash differs, or it is gone or of another type),
//!    it is kept and named, unless `force`. Entries the install did not
//!    lay out are the zone's own and are carried over untouched.
//! 3. `ZONEPATH/.zinstall.update` is written, naming the old root's
//!    inode; then `root.new` is made: each directory anew with the old
//!    one's mode, owner, extended attributes and times, every other
//!    entry as a hard link to the old root's (no byte is copied). A
//!    hard link shares the inode: the previous root is kept only to roll
//!    back to, and a file the zone later edits in place is edited in
//!    both; an update never edits a shared inode, it replaces the entry.
//! 4. The changes are written beneath `root.new`'s descriptor, one
//!    component at a time without following a symlink; the new manifest
//!    is written as `.zinstall.manifest.new`.
//! 5. `root` and `root.new` are exchanged (`renameat2(RENAME_EXCHANGE)`
//!    on Linux; elsewhere three renames through `.zinstall.swap`, which
//!    the journal lets a rerun finish or undo). The manifests follow,
//!    the previous `root.prev` is removed and the old root becomes
//!    `root.prev`, and the journal is removed.
//!
//! A kill at any moment leaves `root` whole, old or new: before the
//! exchange the old root was never written; after it the new one is
//! complete. Which one the journal tells by the root's inode; the next
//! update, rollback, attach or uninstall finishes or cleans up.

// libc's `stat` field types differ between platforms: casts that are
// no-ops here are not everywhere.
#![allow(clippy::unnecessary_cast)]

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::{CStr, CString, OsStr};
use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};

use crate::manifest::{self, Entry, Manifest};
use crate::profile::Profile;
use crate::state::{self, State, ZoneLock};

/// Extended attributes: names and values.
type Xattrs = Vec<(Vec<u8>, Vec<u8>)>;

/// The journal of an update or rollback under way, in the zonepath.
pub const JOURNAL: &str = ".zinstall.update";
/// The new root an update builds.
pub const ROOT_NEW: &str = "root.new";
/// The root before the last update, kept for rollback.
pub const ROOT_PREV: &str = "root.prev";
/// Where a non-Linux exchange parks one side.
const SWAP: &str = ".zinstall.swap";

/// Why an update or rollback stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpdateError {
    /// Another process holds the zonepath, or the lock failed.
    #[error("{0}")]
    Lock(#[from] state::LockError),
    /// The zonepath is not an installed zone.
    #[error("{}: not installed (the marker says {state})", zonepath.display())]
    NotInstalled {
        /// The zonepath.
        zonepath: PathBuf,
        /// What the marker says.
        state: &'static str,
    },
    /// No manifest: the install predates them, so the zone's changes
    /// cannot be told from the install's.
    #[error(
        "{}: no manifest of what the install laid out (installed before \
         zinstall recorded one), so the zone's own changes cannot be told \
         from the install's; --force updates anyway, replacing every file \
         of the profile's trees and keeping every other entry",
        zonepath.display()
    )]
    NoManifest {
        /// The zonepath.
        zonepath: PathBuf,
    },
    /// The images differ from those installed.
    #[error(
        "the images differ from those installed ({installed} now {given}); \
         an update replaces the profile's trees only: reinstall to change \
         images"
    )]
    ImagesChanged {
        /// The digests recorded.
        installed: String,
        /// The digests given.
        given: String,
    },
    /// Images were laid over the trees: their entries cannot be told
    /// from the trees'.
    #[error(
        "the install laid images over the profile's trees, whose entries \
         the manifest cannot tell from the images': reinstall to update it"
    )]
    ImagesOverTrees,
    /// A tree of the profile is missing on the host.
    #[error("tree {} is missing", tree.display())]
    TreeMissing {
        /// The tree.
        tree: PathBuf,
    },
    /// Nothing to roll back to.
    #[error("{}: no previous root ({ROOT_PREV}) to roll back to", zonepath.display())]
    NoPrevious {
        /// The zonepath.
        zonepath: PathBuf,
    },
    /// The manifest could not be read or written.
    #[error("{0}")]
    Manifest(#[from] manifest::ManifestError),
    /// A system call failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// Where.
        path: PathBuf,
        /// The system's error.
        source: io::Error,
    },
    /// The root could not be opened beneath its zonepath.
    #[error("{0}")]
    Copier(#[from] copier::Error),
    /// The root is deeper than the update goes.
    #[error(
        "{}: more than {} directories deep; an update does not go this \
         deep (reinstall instead)",
        path.display(),
        manifest::MAX_DEPTH
    )]
    TooDeep {
        /// The first directory past the limit.
        path: PathBuf,
    },
    /// Cancelled before the switch: the old root is in place, untouched.
    #[error("cancelled; the root is as it was")]
    Cancelled,
}

fn io_at(
    op: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(io::Error) -> UpdateError {
    let path = path.into();
    move |source| UpdateError::Io { op, path, source }
}

fn errno_at(
    op: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(rustix::io::Errno) -> UpdateError {
    let path = path.into();
    move |e| UpdateError::Io {
        op,
        path,
        source: e.into(),
    }
}

/// One path the update adds, removes or changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// Absolute as in the zone (`/usr/bin/ls`).
    pub path: PathBuf,
    /// What changed: `content`, `mode`, `owner`, `times`, `xattrs`,
    /// `target`, `links`, `type`.
    pub what: Vec<&'static str>,
}

/// A path the update left as the zone has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    /// Absolute as in the zone.
    pub path: PathBuf,
    /// Why: the zone changed it, removed it, made its own file there, or
    /// put its own files in a directory the source removed.
    pub why: &'static str,
}

/// What an update did (or, dry, would do).
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Paths the new source has and the old install had not.
    pub added: Vec<Change>,
    /// Paths the new source no longer has.
    pub removed: Vec<Change>,
    /// Paths whose entry changed.
    pub changed: Vec<Change>,
    /// The zone's changes kept (dpkg's conffiles): see [`Kept::why`].
    pub kept: Vec<Kept>,
    /// Bytes of file content written.
    pub bytes: u64,
    /// Entries shared with the old root (hard links) or made anew
    /// (directories) without writing content.
    pub shared: u64,
    /// Nothing was written.
    pub dry_run: bool,
    /// An interrupted update or rollback that was finished or undone
    /// first.
    pub recovered: Option<&'static str>,
}

/// One update.
pub struct Update<'a> {
    /// The zonepath; the root is `zonepath/root`.
    pub zonepath: PathBuf,
    /// The profile whose trees are the new source.
    pub profile: Profile,
    /// The images, as given to the install (they must not have changed).
    pub images: Vec<PathBuf>,
    /// Overwrite the zone's changes, and update without a manifest.
    pub force: bool,
    /// Say what would change; write nothing.
    pub dry_run: bool,
    /// Hears the name of each stage as it is reached (`cloned`,
    /// `applied`, `recorded`, `switched`, `settled`).
    pub stage: &'a mut dyn FnMut(&str),
    /// Raised, the update stops before the switch and removes what it
    /// built (after the switch it finishes).
    pub cancel: Option<copier::Cancel>,
}

/// What the new source makes at one path.
#[derive(Debug)]
struct Want {
    rel: Vec<u8>,
    src: PathBuf,
    entry: Entry,
    /// Source inode of a file with other names in the tree.
    inode: Option<(u64, u64)>,
    atime: (i64, i64),
    /// A file that a link rule makes a symlink of (its owner, times and
    /// xattrs are the symlink's own, not the source's).
    redirect: bool,
}

/// What is to be done at a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Same,
    Add,
    Change,
    /// Of another type: the old entry goes first.
    Replace,
}

impl Update<'_> {
    /// Runs the update; see the module's documentation.
    pub fn run(&mut self) -> Result<Report, UpdateError> {
        let zonepath = self.zonepath.clone();
        let _held =
            crate::open_zonepath(&zonepath).map_err(|e| UpdateError::Io {
                op: "open zonepath",
                path: zonepath.clone(),
                source: io::Error::other(e.to_string()),
            })?;
        let lock = ZoneLock::take(&zonepath)?;
        let mut report = Report {
            dry_run: self.dry_run,
            ..Report::default()
        };
        if !self.dry_run {
            report.recovered = recover(&zonepath)?;
        }
        let r = self.run_locked(&mut report);
        lock.release();
        r.map(|()| report)
    }

    fn run_locked(&mut self, report: &mut Report) -> Result<(), UpdateError> {
        let zp = self.zonepath.clone();
        match state::read(&zp)
            .map_err(io_at("read marker", zp.join(state::STATE)))?
        {
            Some(State::Installed) => {}
            st => {
                return Err(UpdateError::NotInstalled {
                    zonepath: zp,
                    state: match st {
                        Some(State::Installing) => "installing",
                        _ => "nothing",
                    },
                });
            }
        }
        let old = match manifest::read(&zp, manifest::MANIFEST)? {
            Some(m) => m,
            None if self.force => Manifest {
                header: manifest::Header {
                    version: 1,
                    root_ino: 0,
                    trees: Vec::new(),
                    images: Vec::new(),
                    entries: 0,
                },
                entries: Vec::new(),
            },
            None => return Err(UpdateError::NoManifest { zonepath: zp }),
        };
        let given = image_records(&self.images);
        let digests = |v: &[manifest::ImageRecord]| {
            v.iter()
                .map(|i| i.digest.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        if old.header.root_ino != 0
            && digests(&given) != digests(&old.header.images)
        {
            return Err(UpdateError::ImagesChanged {
                installed: digests(&old.header.images),
                given: digests(&given),
            });
        }
        let trees: Vec<String> = self
            .profile
            .trees
            .iter()
            .map(|t| {
                String::from_utf8_lossy(t.as_os_str().as_bytes()).into_owned()
            })
            .collect();
        if !old.header.images.is_empty()
            && !trees.is_empty()
            && self.profile.lays_images_over_host()
        {
            return Err(UpdateError::ImagesOverTrees);
        }
        let cancel = self.cancel.clone();
        let stop = || match &cancel {
            Some(c) if c.is_cancelled() => Err(UpdateError::Cancelled),
            _ => Ok(()),
        };
        let wants = self.wants()?;
        stop()?;
        let root = zp.join("root");
        let old_root = copier::beneath::Root::open(&root)?;
        let plan =
            diff(&old, &wants, &trees, old_root.as_fd(), self.force, report)?;
        // Nothing to write: no new root, and the previous one stays the
        // one to roll back to.
        let nothing = report.added.is_empty()
            && report.removed.is_empty()
            && report.changed.is_empty();
        if self.dry_run || nothing {
            return Ok(());
        }
        // The journal first: whatever is made after it, a rerun finds.
        let old_ino = fs::symlink_metadata(&root)
            .map_err(io_at("stat", &root))?
            .ino();
        write_journal(&zp, &Journal::Update(old_ino))?;
        let new_path = zp.join(ROOT_NEW);
        let built = (|| -> Result<(), UpdateError> {
            // A leftover the journal did not name is not built on.
            remove_if(&new_path)?;
            let new_root = copier::beneath::Root::create(&new_path, 0o700)?;
            let clone = || {
                clone_tree(
                    old_root.as_fd(),
                    new_root.as_fd(),
                    b"",
                    &new_path,
                    cancel.as_ref(),
                    1,
                )
            };
            report.shared += match manifest::deep_pool() {
                Some(pool) => pool.install(clone)?,
                None => clone()?,
            };
            (self.stage)("cloned");
            let mut written = HashMap::new();
            apply(
                &plan,
                &wants,
                old_root.as_fd(),
                new_root.as_fd(),
                &new_path,
                report,
                &mut written,
            )?;
            // The root's own directory, as the old one was.
            let top =
                fs::symlink_metadata(&root).map_err(io_at("stat", &root))?;
            set_owner_mode(
                new_root.as_fd(),
                top.uid(),
                top.gid(),
                top.mode() & 0o7777,
                &new_path,
            )?;
            set_times_fd(
                new_root.as_fd(),
                (top.atime(), top.atime_nsec()),
                (top.mtime(), top.mtime_nsec()),
                &new_path,
            )?;
            (self.stage)("applied");
            let m = new_manifest(
                &old,
                &wants,
                &plan,
                &written,
                &trees,
                given,
                new_root.as_fd(),
                &new_path,
            )?;
            manifest::write(&zp, manifest::MANIFEST_NEW, &m)?;
            let f =
                fs::File::open(&new_path).map_err(io_at("open", &new_path))?;
            copier::fsutil::sync_fs(&f).map_err(io_at("flush", &new_path))?;
            (self.stage)("recorded");
            stop()
        })();
        if let Err(e) = built {
            // Not switched: the old root is in place; what was built
            // beside it goes (a rerun would remove it too).
            let _already_failing = remove_if(&new_path)
                .and_then(|()| remove_if(&zp.join(manifest::MANIFEST_NEW)))
                .and_then(|()| remove_if(&zp.join(JOURNAL)));
            return Err(e);
        }
        let zdir = copier::beneath::Root::open(&zp)?;
        exchange(zdir.as_fd(), "root", ROOT_NEW, &zp)?;
        (self.stage)("switched");
        finish_update(&zp, &mut *self.stage)
    }

    /// Every entry the profile's trees make now, with its attributes.
    /// The walk lists names and applies the rules; the attributes are
    /// read in parallel.
    fn wants(&self) -> Result<Vec<Want>, UpdateError> {
        use rayon::prelude::*;
        // Path, path in the root, tree, and the symlink a link rule
        // makes of it.
        let mut listed: Vec<(PathBuf, PathBuf, usize, Option<PathBuf>)> =
            Vec::new();
        let mut scratch = Vec::new();
        let mut tree_names = Vec::new();
        for t in &self.profile.trees {
            let top = self.profile.source_root.join(t);
            let md = fs::metadata(&top)
                .map_err(|_| UpdateError::TreeMissing { tree: top.clone() })?;
            if !md.is_dir() {
                return Err(UpdateError::TreeMissing { tree: top });
            }
            tree_names.push(
                String::from_utf8_lossy(t.as_os_str().as_bytes()).into_owned(),
            );
            let tree = tree_names.len() - 1;
            // A mount point is listed, not entered: copied empty, as the
            // install does.
            let mut it = walkdir::WalkDir::new(&top)
                .follow_links(false)
                .same_file_system(true)
                .into_iter();
            while let Some(item) = it.next() {
                let item = item.map_err(|e| UpdateError::Io {
                    op: "walk",
                    path: e.path().unwrap_or(&top).to_path_buf(),
                    source: e
                        .into_io_error()
                        .unwrap_or_else(|| io::Error::other("loop")),
                })?;
                let ft = item.file_type();
                let inner =
                    item.path().strip_prefix(&top).unwrap_or(Path::new(""));
                let rel = if inner.as_os_str().is_empty() {
                    t.clone()
                } else {
                    t.join(inner)
                };
                let action = if item.depth() == 0 {
                    &copier::Action::Copy
                } else {
                    self.profile.rules.action(&rel, &mut scratch)
                };
                if *action == copier::Action::Skip {
                    if ft.is_dir() {
                        it.skip_current_dir();
                    }
                    continue;
                }
                if !(ft.is_dir() || ft.is_file() || ft.is_symlink()) {
                    // The install skips sockets, FIFOs and devices.
                    continue;
                }
                let link = if ft.is_file() {
                    copier::rules::link_target(action, &rel)
                } else {
                    None
                };
                listed.push((item.into_path(), rel, tree, link));
            }
        }
        let mut out = listed
            .into_par_iter()
            .map(|(src, rel, tree, link)| -> Result<Want, UpdateError> {
                let md =
                    fs::symlink_metadata(&src).map_err(io_at("stat", &src))?;
                let relb = rel.as_os_str().as_bytes().to_vec();
                let mut entry = manifest::entry_of(
                    &relb,
                    &src,
                    &md,
                    Some(tree_names[tree].clone()),
                )
                .map_err(io_at("read attributes of", &src))?;
                let mut inode = None;
                let redirect = md.is_file() && link.is_some();
                if md.is_file() {
                    if let Some(target) = link {
                        // A link rule makes a symlink of it.
                        entry.k = 'l';
                        entry.s = 0;
                        entry.x = None;
                        entry.l =
                            Some(manifest::hex(target.as_os_str().as_bytes()));
                    } else if md.nlink() > 1 {
                        inode = Some((md.dev(), md.ino()));
                    }
                }
                Ok(Want {
                    rel: relb,
                    src,
                    entry,
                    inode,
                    atime: (md.atime(), md.atime_nsec()),
                    redirect,
                })
            })
            .collect::<Result<Vec<Want>, UpdateError>>()?;
        out.sort_by(|a, b| a.rel.cmp(&b.rel));
        out.dedup_by(|a, b| a.rel == b.rel);
        Ok(out)
    }
}

/// The images' digests, as the manifest records them.
pub fn image_records(images: &[PathBuf]) -> Vec<manifest::ImageRecord> {
    images
        .iter()
        .map(|i| manifest::ImageRecord {
            arg: i.display().to_string(),
            digest: manifest::image_digest(i),
        })
        .collect()
}

/// What the diff decided for each want (by index) and each old entry
/// removed.
struct Plan {
    ops: Vec<Op>,
    /// Wants left as the zone has them.
    kept: HashSet<usize>,
    /// Old entries to remove (paths), deepest first.
    remove: Vec<(Vec<u8>, char)>,
}

fn shown(rel: &[u8]) -> PathBuf {
    Path::new("/").join(OsStr::from_bytes(rel))
}

/// How the zone's copy of `m` stands.
#[derive(PartialEq, Eq)]
enum Zone {
    AsInstalled,
    Changed,
    Gone,
}

fn zone_state(root: BorrowedFd<'_>, m: &Entry) -> Zone {
    let rel = m.path();
    let Ok((dir, name)) = parent_of(root, &rel, false) else {
        return Zone::Changed;
    };
    let st = match rustix::fs::statat(
        &dir,
        name.as_c_str(),
        AtFlags::SYMLINK_NOFOLLOW,
    ) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Zone::Gone,
        Err(_) => return Zone::Changed,
    };
    let kind = st.st_mode & libc::S_IFMT;
    let same_kind = match m.k {
        'd' => kind == libc::S_IFDIR,
        'f' => kind == libc::S_IFREG,
        'l' => kind == libc::S_IFLNK,
        _ => true,
    };
    if !same_kind {
        return Zone::Changed;
    }
    match m.k {
        'l' => {
            match rustix::fs::readlinkat(&dir, name.as_c_str(), Vec::new()) {
                Ok(t) if Some(t.as_bytes().to_vec()) == m.target() => {
                    Zone::AsInstalled
                }
                _ => Zone::Changed,
            }
        }
        'f' => {
            let now = (st.st_ino, st.st_ctime as i64, st.st_ctime_nsec as i64);
            if m.i == Some(now) && st.st_size as u64 == m.s {
                return Zone::AsInstalled;
            }
            let hashed = rustix::fs::openat(
                &dir,
                name.as_c_str(),
                OFlags::RDONLY
                    | OFlags::NOFOLLOW
                    | OFlags::CLOEXEC
                    | OFlags::NONBLOCK,
                Mode::empty(),
            )
            .map_err(io::Error::from)
            .and_then(|fd| manifest::hash_reader(fs::File::from(fd)));
            match hashed {
                Ok(h) if Some(&h) == m.h.as_ref() => Zone::AsInstalled,
                _ => Zone::Changed,
            }
        }
        _ => Zone::AsInstalled,
    }
}

/// Compares the manifest with the wants; fills the report's lists.
fn diff(
    old: &Manifest,
    wants: &[Want],
    trees: &[String],
    root: BorrowedFd<'_>,
    force: bool,
    report: &mut Report,
) -> Result<Plan, UpdateError> {
    let by_path = old.by_path();
    // Hard-link groups: the set of paths of each, old and new.
    let mut old_groups: HashMap<u64, BTreeSet<&[u8]>> = HashMap::new();
    let paths: Vec<_> = old.entries.iter().map(Entry::path).collect();
    for (e, p) in old.entries.iter().zip(&paths) {
        if let Some(n) = e.n {
            old_groups.entry(n).or_default().insert(p.as_ref());
        }
    }
    let mut new_groups: HashMap<(u64, u64), BTreeSet<&[u8]>> = HashMap::new();
    for w in wants {
        if let Some(i) = w.inode {
            new_groups.entry(i).or_default().insert(w.rel.as_slice());
        }
    }
    let members_old = |rel: &[u8], e: &Entry| -> BTreeSet<Vec<u8>> {
        match e.n.and_then(|n| old_groups.get(&n)) {
            Some(s) => s.iter().map(|p| p.to_vec()).collect(),
            None => BTreeSet::from([rel.to_vec()]),
        }
    };
    let members_new = |w: &Want| -> BTreeSet<Vec<u8>> {
        match w.inode.and_then(|i| new_groups.get(&i)) {
            Some(s) if s.len() > 1 => s.iter().map(|p| p.to_vec()).collect(),
            _ => BTreeSet::from([w.rel.clone()]),
        }
    };
    let mut ops = Vec::with_capacity(wants.len());
    let mut whats: Vec<Vec<&'static str>> = Vec::with_capacity(wants.len());
    for w in wants {
        let Some(m) = by_path.get(w.rel.as_slice()) else {
            ops.push(Op::Add);
            whats.push(Vec::new());
            continue;
        };
        let n = &w.entry;
        let mut what = Vec::new();
        if m.k != n.k {
            what.push("type");
        } else {
            if n.k == 'f' && m.s != n.s {
                what.push("content");
            }
            if n.k == 'l' && m.l != n.l {
                what.push("target");
            }
            if m.m != n.m && n.k != 'l' {
                what.push("mode");
            }
            if (m.u, m.g) != (n.u, n.g) && !w.redirect {
                what.push("owner");
            }
            if m.t != n.t && !w.redirect {
                what.push("times");
            }
            if m.x != n.x && !w.redirect {
                what.push("xattrs");
            }
            // Alone before and now (most files): no sets to compare.
            let grouped = m.n.is_some() || w.inode.is_some();
            if n.k == 'f' && grouped && members_old(&w.rel, m) != members_new(w)
            {
                what.push("links");
            }
            if (m.k == 'c' || m.k == 'b') && m.r != n.r {
                what.push("device");
            }
            if m.z && force && what.is_empty() {
                // The zone's edit, kept before: forced, the source's.
                what.push("content");
            }
        }
        ops.push(match what.first() {
            None => Op::Same,
            Some(&"type") => Op::Replace,
            Some(_) => Op::Change,
        });
        whats.push(what);
    }
    // A group with one member written is written whole.
    let mut dirty: HashSet<(u64, u64)> = HashSet::new();
    for (w, op) in wants.iter().zip(&ops) {
        if let (Some(i), Op::Add | Op::Change | Op::Replace) = (w.inode, op) {
            dirty.insert(i);
        }
    }
    for (i, w) in wants.iter().enumerate() {
        if ops[i] == Op::Same && w.inode.is_some_and(|n| dirty.contains(&n)) {
            ops[i] = Op::Change;
            whats[i].push("links");
        }
    }
    // Removals: the old tree entries the source no longer has, and those
    // of another type now.
    let want_paths: HashSet<&[u8]> =
        wants.iter().map(|w| w.rel.as_slice()).collect();
    let mut kept = HashSet::new();
    let mut remove = Vec::new();
    let mut blocked: HashSet<Vec<u8>> = HashSet::new();
    for (m, p) in old.entries.iter().zip(&paths) {
        let ours = m
            .o
            .as_ref()
            .is_some_and(|o| trees.contains(o) || old.header.trees.contains(o));
        if !ours || want_paths.contains(p.as_ref()) {
            continue;
        }
        if m.k != 'd' && !force {
            match zone_state(root, m) {
                Zone::AsInstalled => {}
                Zone::Gone => continue,
                Zone::Changed => {
                    report.kept.push(Kept {
                        path: shown(p),
                        why: "changed in the zone since it was installed; the new source removes it",
                    });
                    blocked.insert(p.to_vec());
                    continue;
                }
            }
        }
        report.removed.push(Change {
            path: shown(p),
            what: Vec::new(),
        });
        remove.push((p.to_vec(), m.k));
    }
    for (i, w) in wants.iter().enumerate() {
        let what = std::mem::take(&mut whats[i]);
        match ops[i] {
            Op::Same => {}
            Op::Add => {
                // Something the install did not make is there: the zone's.
                if !force && exists(root, &w.rel) {
                    report.kept.push(Kept {
                        path: shown(&w.rel),
                        why: "the zone's own entry where the new source adds one",
                    });
                    kept.insert(i);
                    continue;
                }
                report.added.push(Change {
                    path: shown(&w.rel),
                    what: Vec::new(),
                });
            }
            Op::Change | Op::Replace => {
                let m = by_path[w.rel.as_slice()];
                if m.k != 'd' && !force {
                    let why = match zone_state(root, m) {
                        Zone::AsInstalled => None,
                        Zone::Changed => {
                            Some("changed in the zone since it was installed")
                        }
                        Zone::Gone => {
                            Some("removed in the zone since it was installed")
                        }
                    };
                    if let Some(why) = why {
                        report.kept.push(Kept {
                            path: shown(&w.rel),
                            why,
                        });
                        kept.insert(i);
                        continue;
                    }
                }
                if ops[i] == Op::Replace {
                    remove.push((w.rel.clone(), m.k));
                }
                report.changed.push(Change {
                    path: shown(&w.rel),
                    what,
                });
            }
        }
    }
    // A want beneath a kept path that stays a non-directory cannot be
    // written: kept with it.
    for (i, w) in wants.iter().enumerate() {
        if ops[i] != Op::Same && !kept.contains(&i) {
            let under_blocked = blocked.iter().any(|b| {
                w.rel.starts_with(b) && w.rel.get(b.len()) == Some(&b'/')
            });
            if under_blocked {
                kept.insert(i);
            }
        }
        if kept.contains(&i) {
            blocked.insert(w.rel.clone());
        }
    }
    remove.sort_by(|a, b| b.0.cmp(&a.0));
    remove.dedup();
    Ok(Plan { ops, kept, remove })
}

fn exists(root: BorrowedFd<'_>, rel: &[u8]) -> bool {
    match parent_of(root, rel, false) {
        Ok((dir, name)) => {
            rustix::fs::statat(&dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)
                .is_ok()
        }
        Err(_) => false,
    }
}

/// The directory holding `rel` beneath `root`, opened one component at
/// a time without following a symlink, and the last component. With
/// `create`, missing directories are made (0755; the update sets their
/// attributes after).
fn parent_of(
    root: BorrowedFd<'_>,
    rel: &[u8],
    create: bool,
) -> io::Result<(OwnedFd, CString)> {
    let parts: Vec<&[u8]> = rel
        .split(|&b| b == b'/')
        .filter(|p| !p.is_empty())
        .collect();
    let Some((last, dirs)) = parts.split_last() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty path"));
    };
    let mut fd = rustix::io::dup(root)?;
    for d in dirs {
        if *d == b".." || *d == b"." {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not beneath the root",
            ));
        }
        let c = CString::new(*d).map_err(io::Error::other)?;
        if create {
            match rustix::fs::mkdirat(
                &fd,
                c.as_c_str(),
                Mode::from_raw_mode(0o755),
            ) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
        }
        fd = open_dir(fd.as_fd(), &c)?;
    }
    if *last == b".." || *last == b"." {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not beneath the root",
        ));
    }
    Ok((fd, CString::new(*last).map_err(io::Error::other)?))
}

fn open_dir(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

fn set_owner_mode(
    fd: BorrowedFd<'_>,
    uid: u32,
    gid: u32,
    mode: u32,
    at: &Path,
) -> Result<(), UpdateError> {
    use rustix::fs::{Gid, Uid};
    rustix::fs::fchown(fd, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))
        .map_err(errno_at("chown", at))?;
    rustix::fs::fchmod(fd, Mode::from_raw_mode(mode))
        .map_err(errno_at("chmod", at))
}

fn timestamps(atime: (i64, i64), mtime: (i64, i64)) -> rustix::fs::Timestamps {
    rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: atime.0,
            tv_nsec: atime.1 as _,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: mtime.0,
            tv_nsec: mtime.1 as _,
        },
    }
}

fn set_times_fd(
    fd: BorrowedFd<'_>,
    atime: (i64, i64),
    mtime: (i64, i64),
    at: &Path,
) -> Result<(), UpdateError> {
    rustix::fs::futimens(fd, &timestamps(atime, mtime))
        .map_err(errno_at("set times of", at))
}

/// Sets the extended attributes of `fd` to exactly those of `src`.
#[cfg(target_os = "linux")]
fn set_xattrs_fd(
    fd: BorrowedFd<'_>,
    src: &[(Vec<u8>, Vec<u8>)],
    at: &Path,
) -> Result<(), UpdateError> {
    let names = match manifest::read_sized(|b| rustix::fs::flistxattr(fd, b)) {
        Ok(n) => n,
        Err(rustix::io::Errno::NOTSUP) => Vec::new(),
        Err(e) => return Err(errno_at("list xattrs of", at)(e)),
    };
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        if !src.iter().any(|(s, _)| s == name) {
            let c = CString::new(name).map_err(|e| {
                io_at("remove xattr of", at)(io::Error::other(e))
            })?;
            rustix::fs::fremovexattr(fd, c.as_c_str())
                .map_err(errno_at("remove xattr of", at))?;
        }
    }
    for (name, value) in src {
        let c = CString::new(name.as_slice())
            .map_err(|e| io_at("set xattr of", at)(io::Error::other(e)))?;
        rustix::fs::fsetxattr(
            fd,
            c.as_c_str(),
            value,
            rustix::fs::XattrFlags::empty(),
        )
        .map_err(errno_at("set xattr of", at))?;
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn set_xattrs_fd(
    _: BorrowedFd<'_>,
    _: &[(Vec<u8>, Vec<u8>)],
    _: &Path,
) -> Result<(), UpdateError> {
    Ok(())
}

#[cfg(target_os = "linux")]
fn xattrs_of(p: &Path) -> Result<Xattrs, UpdateError> {
    manifest::xattrs(p).map_err(io_at("read xattrs of", p))
}

#[cfg(not(target_os = "linux"))]
fn xattrs_of(_: &Path) -> Result<Xattrs, UpdateError> {
    Ok(Vec::new())
}

fn xattrs_fd(fd: BorrowedFd<'_>, at: &Path) -> Result<Xattrs, UpdateError> {
    manifest::xattrs_fd(fd).map_err(io_at("read xattrs of", at))
}

/// A file the update wrote: its content's hash, and its inode and
/// change time when done (none for a hard-link group's, which later
/// links move).
struct Written {
    hash: String,
    stat: Option<(u64, i64, i64)>,
}

/// Makes `new` hold what `old` holds: directories anew with their
/// attributes, every other entry a hard link to the old one; returns how
/// many entries it made. Subdirectories are cloned in parallel, each
/// opening its own pair of descriptors when it starts (so a directory of
/// thousands holds two, not thousands). A linked entry is neither stated
/// before nor after: the link moves its change time, so the manifest
/// keeps no stamp for it and a later update hashes it if it must know
/// whether the zone changed it.
fn clone_tree(
    old: BorrowedFd<'_>,
    new: BorrowedFd<'_>,
    rel: &[u8],
    new_path: &Path,
    cancel: Option<&copier::Cancel>,
    depth: usize,
) -> Result<u64, UpdateError> {
    use rayon::prelude::*;
    use rustix::fs::FileType;
    if cancel.is_some_and(copier::Cancel::is_cancelled) {
        return Err(UpdateError::Cancelled);
    }
    let here = new_path.join(OsStr::from_bytes(rel));
    let top_dev = rustix::fs::fstat(old)
        .map_err(errno_at("stat", &here))?
        .st_dev;
    let dir =
        rustix::fs::Dir::read_from(old).map_err(errno_at("read", &here))?;
    let mut subdirs = Vec::new();
    let mut made = 0u64;
    for e in dir {
        let e = e.map_err(errno_at("read", &here))?;
        let name = e.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let at = || here.join(OsStr::from_bytes(name.to_bytes()));
        // The entry's type where the directory says it (illumos's does
        // not), else from a stat.
        #[cfg(not(any(target_os = "illumos", target_os = "solaris")))]
        let listed = e.file_type();
        #[cfg(any(target_os = "illumos", target_os = "solaris"))]
        let listed = FileType::Unknown;
        let is_dir = match listed {
            FileType::Directory => true,
            FileType::Unknown => {
                let st =
                    rustix::fs::statat(old, name, AtFlags::SYMLINK_NOFOLLOW)
                        .map_err(errno_at("stat", at()))?;
                FileType::from_raw_mode(st.st_mode as _) == FileType::Directory
            }
            _ => false,
        };
        if is_dir {
            subdirs.push(name.to_owned());
        } else {
            rustix::fs::linkat(old, name, new, name, AtFlags::empty())
                .map_err(errno_at("link", at()))?;
        }
        made += 1;
    }
    let below = subdirs
        .par_iter()
        .map(|name| -> Result<u64, UpdateError> {
            let at = here.join(OsStr::from_bytes(name.to_bytes()));
            let st = rustix::fs::statat(
                old,
                name.as_c_str(),
                AtFlags::SYMLINK_NOFOLLOW,
            )
            .map_err(errno_at("stat", &at))?;
            rustix::fs::mkdirat(
                new,
                name.as_c_str(),
                Mode::from_raw_mode(0o700),
            )
            .map_err(errno_at("make", &at))?;
            let sub_new = open_dir(new, name).map_err(io_at("open", &at))?;
            let sub_old = open_dir(old, name).map_err(io_at("open", &at))?;
            set_owner_mode(
                sub_new.as_fd(),
                st.st_uid,
                st.st_gid,
                st.st_mode & 0o7777,
                &at,
            )?;
            let x = xattrs_fd(sub_old.as_fd(), &at)?;
            if !x.is_empty() {
                set_xattrs_fd(sub_new.as_fd(), &x, &at)?;
            }
            let mut sub_rel = rel.to_vec();
            if !sub_rel.is_empty() {
                sub_rel.push(b'/');
            }
            sub_rel.extend_from_slice(name.to_bytes());
            if depth >= manifest::MAX_DEPTH {
                return Err(UpdateError::TooDeep { path: at });
            }
            let n = if st.st_dev == top_dev {
                clone_tree(
                    sub_old.as_fd(),
                    sub_new.as_fd(),
                    &sub_rel,
                    new_path,
                    cancel,
                    depth + 1,
                )?
            } else {
                0
            };
            set_times_fd(
                sub_new.as_fd(),
                (st.st_atime as i64, st.st_atime_nsec as i64),
                (st.st_mtime as i64, st.st_mtime_nsec as i64),
                &at,
            )?;
            Ok(n)
        })
        .collect::<Result<Vec<u64>, UpdateError>>()?;
    Ok(made + below.iter().sum::<u64>())
}

/// Writes the plan into the new root: removals deepest first, then each
/// entry added or changed, parents first; then the times of every
/// directory touched.
fn apply(
    plan: &Plan,
    wants: &[Want],
    old: BorrowedFd<'_>,
    new: BorrowedFd<'_>,
    new_path: &Path,
    report: &mut Report,
    written: &mut HashMap<Vec<u8>, Written>,
) -> Result<(), UpdateError> {
    let mut touched: BTreeSet<Vec<u8>> = BTreeSet::new();
    let parent = |rel: &[u8]| -> Vec<u8> {
        match rel.iter().rposition(|&b| b == b'/') {
            Some(i) => rel[..i].to_vec(),
            None => Vec::new(),
        }
    };
    for (rel, kind) in &plan.remove {
        let at = new_path.join(OsStr::from_bytes(rel));
        let Ok((dir, name)) = parent_of(new, rel, false) else {
            continue;
        };
        let flags = if *kind == 'd' {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        match rustix::fs::unlinkat(&dir, name.as_c_str(), flags) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(rustix::io::Errno::NOTEMPTY | rustix::io::Errno::EXIST) => {
                report.removed.retain(|c| c.path != shown(rel));
                report.kept.push(Kept {
                    path: shown(rel),
                    why: "holds the zone's own files; the new source removes it",
                });
            }
            Err(e) => return Err(errno_at("remove", at)(e)),
        }
        touched.insert(parent(rel));
    }
    // The first name written of each source inode, for the others.
    let mut first: HashMap<(u64, u64), Vec<u8>> = HashMap::new();
    for (i, w) in wants.iter().enumerate() {
        if plan.ops[i] == Op::Same || plan.kept.contains(&i) {
            continue;
        }
        let at = new_path.join(OsStr::from_bytes(&w.rel));
        let (dir, name) = parent_of(new, &w.rel, true)
            .map_err(io_at("open the parent of", &at))?;
        touched.insert(parent(&w.rel));
        let e = &w.entry;
        // An entry of the other kind (directory or not) in the way: only
        // where the plan replaces it, or `force` overwrites the zone's.
        if let Ok(st) =
            rustix::fs::statat(&dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)
        {
            let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
            if is_dir != (e.k == 'd') {
                remove_beneath(dir.as_fd(), &name, &at)?;
            }
        }
        match e.k {
            'd' => {
                match rustix::fs::mkdirat(
                    &dir,
                    name.as_c_str(),
                    Mode::from_raw_mode(0o700),
                ) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(err) => return Err(errno_at("make", &at)(err)),
                }
                let fd =
                    open_dir(dir.as_fd(), &name).map_err(io_at("open", &at))?;
                set_owner_mode(fd.as_fd(), e.u, e.g, e.m, &at)?;
                set_xattrs_fd(fd.as_fd(), &xattrs_of(&w.src)?, &at)?;
                touched.insert(w.rel.clone());
            }
            'f' => {
                unlink_any(&dir, &name, &at)?;
                if let Some(f) = w.inode.and_then(|n| first.get(&n)) {
                    let (fdir, fname) = parent_of(new, f, false)
                        .map_err(io_at("open the parent of", &at))?;
                    rustix::fs::linkat(
                        &fdir,
                        fname.as_c_str(),
                        &dir,
                        name.as_c_str(),
                        AtFlags::empty(),
                    )
                    .map_err(errno_at("link", &at))?;
                    continue;
                }
                let fd = rustix::fs::openat(
                    &dir,
                    name.as_c_str(),
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )
                .map_err(errno_at("create", &at))?;
                let mut out = fs::File::from(fd);
                let src =
                    fs::File::open(&w.src).map_err(io_at("open", &w.src))?;
                let (n, hash) =
                    copy_data(src, &mut out).map_err(io_at("write", &at))?;
                report.bytes += n;
                set_owner_mode(out.as_fd(), e.u, e.g, e.m, &at)?;
                set_xattrs_fd(out.as_fd(), &xattrs_of(&w.src)?, &at)?;
                set_times_fd(out.as_fd(), w.atime, e.t, &at)?;
                let st =
                    rustix::fs::fstat(&out).map_err(errno_at("stat", &at))?;
                written.insert(
                    w.rel.clone(),
                    Written {
                        hash,
                        stat: w.inode.is_none().then_some((
                            st.st_ino,
                            st.st_ctime as i64,
                            st.st_ctime_nsec as i64,
                        )),
                    },
                );
                if let Some(n) = w.inode {
                    first.insert(n, w.rel.clone());
                }
            }
            'l' => {
                unlink_any(&dir, &name, &at)?;
                let target = e.target().unwrap_or_default();
                rustix::fs::symlinkat(
                    OsStr::from_bytes(&target),
                    &dir,
                    name.as_c_str(),
                )
                .map_err(errno_at("make symlink", &at))?;
                if !w.redirect {
                    use rustix::fs::{Gid, Uid};
                    rustix::fs::chownat(
                        &dir,
                        name.as_c_str(),
                        Some(Uid::from_raw(e.u)),
                        Some(Gid::from_raw(e.g)),
                        AtFlags::SYMLINK_NOFOLLOW,
                    )
                    .map_err(errno_at("chown", &at))?;
                    rustix::fs::utimensat(
                        &dir,
                        name.as_c_str(),
                        &timestamps(w.atime, e.t),
                        AtFlags::SYMLINK_NOFOLLOW,
                    )
                    .map_err(errno_at("set times of", &at))?;
                }
            }
            _ => {}
        }
    }
    // Directory times last: every write above moved them.
    let wanted: HashMap<&[u8], &Want> =
        wants.iter().map(|w| (w.rel.as_slice(), w)).collect();
    for rel in touched.iter().rev() {
        if rel.is_empty() {
            continue;
        }
        let at = new_path.join(OsStr::from_bytes(rel));
        let times = match wanted.get(rel.as_slice()) {
            Some(w) if w.entry.k == 'd' => Some((w.atime, w.entry.t)),
            // Now a file: its own times were set as it was written.
            Some(_) => None,
            None => match parent_of(old, rel, false) {
                Ok((d, n)) => rustix::fs::statat(
                    &d,
                    n.as_c_str(),
                    AtFlags::SYMLINK_NOFOLLOW,
                )
                .ok()
                .map(|st| {
                    (
                        (st.st_atime as i64, st.st_atime_nsec as i64),
                        (st.st_mtime as i64, st.st_mtime_nsec as i64),
                    )
                }),
                Err(_) => None,
            },
        };
        let Some((a, m)) = times else { continue };
        let Ok((dir, name)) = parent_of(new, rel, false) else {
            continue;
        };
        match rustix::fs::utimensat(
            &dir,
            name.as_c_str(),
            &timestamps(a, m),
            AtFlags::SYMLINK_NOFOLLOW,
        ) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(errno_at("set times of", at)(e)),
        }
    }
    Ok(())
}

/// Removes `name` in `dir` and, a directory, everything in it, one
/// descriptor at a time without following a symlink.
fn remove_beneath(
    dir: BorrowedFd<'_>,
    name: &CStr,
    at: &Path,
) -> Result<(), UpdateError> {
    let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(errno_at("stat", at)(e)),
    };
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return rustix::fs::unlinkat(dir, name, AtFlags::empty())
            .map_err(errno_at("remove", at));
    }
    let sub = open_dir(dir, name).map_err(io_at("open", at))?;
    let mut names = Vec::new();
    for e in rustix::fs::Dir::read_from(&sub).map_err(errno_at("read", at))? {
        let e = e.map_err(errno_at("read", at))?;
        let n = e.file_name();
        if n.to_bytes() != b"." && n.to_bytes() != b".." {
            names.push(n.to_owned());
        }
    }
    for n in names {
        remove_beneath(
            sub.as_fd(),
            &n,
            &at.join(OsStr::from_bytes(n.to_bytes())),
        )?;
    }
    rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)
        .map_err(errno_at("remove", at))
}

/// Removes the non-directory `name` if there is one; a directory there
/// is an error (the plan removed the old one first).
fn unlink_any(
    dir: &OwnedFd,
    name: &CStr,
    at: &Path,
) -> Result<(), UpdateError> {
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(errno_at("remove", at)(e)),
    }
}

fn copy_data(src: fs::File, out: &mut fs::File) -> io::Result<(u64, String)> {
    manifest::hash_copy(src, out)
}

/// The manifest of the new root: the old entries carried over, the
/// changed ones from the source (hashed), the inode and change time of
/// each entry whose content is known refreshed.
#[allow(clippy::too_many_arguments)]
fn new_manifest(
    old: &Manifest,
    wants: &[Want],
    plan: &Plan,
    written: &HashMap<Vec<u8>, Written>,
    trees: &[String],
    images: Vec<manifest::ImageRecord>,
    new: BorrowedFd<'_>,
    new_path: &Path,
) -> Result<Manifest, UpdateError> {
    let by_path = old.by_path();
    let want_paths: HashSet<&[u8]> =
        wants.iter().map(|w| w.rel.as_slice()).collect();
    let mut out: Vec<Entry> = Vec::new();
    // Carried: what the trees did not lay out, and what they laid out
    // unchanged. Linked into the new root, they have no stamp: whether
    // the zone changed one is known by its hash (see clone_tree).
    let fresh = |e: &mut Entry| e.i = None;
    let removed: HashSet<&[u8]> =
        plan.remove.iter().map(|(p, _)| p.as_slice()).collect();
    for e in &old.entries {
        let p = e.path();
        let ours = e
            .o
            .as_ref()
            .is_some_and(|o| trees.contains(o) || old.header.trees.contains(o));
        if ours
            || want_paths.contains(p.as_ref())
            || removed.contains(p.as_ref())
        {
            continue;
        }
        let mut e = e.clone();
        fresh(&mut e);
        out.push(e);
    }
    let max_group = old
        .entries
        .iter()
        .filter_map(|e| e.n)
        .max()
        .map_or(0, |n| n + 1);
    let mut groups: HashMap<(u64, u64), u64> = HashMap::new();
    let mut counts: HashMap<(u64, u64), usize> = HashMap::new();
    for w in wants {
        if let Some(i) = w.inode {
            *counts.entry(i).or_default() += 1;
        }
    }
    for (i, w) in wants.iter().enumerate() {
        let mut e = w.entry.clone();
        if plan.ops[i] == Op::Same {
            // Unchanged: the old entry, hash and group as recorded.
            if let Some(m) = by_path.get(w.rel.as_slice()) {
                let mut m = (*m).clone();
                m.o = e.o.clone();
                fresh(&mut m);
                out.push(m);
                continue;
            }
        }
        e.i = None;
        if let Some(done) = written.get(&w.rel) {
            e.h = Some(done.hash.clone());
            e.i = done.stat;
        } else if e.k == 'f' {
            // Kept (or linked to a group's first): the source's content
            // still, the zone's file being its own edit of it.
            e.h = Some(
                manifest::hash_file(&w.src).map_err(io_at("hash", &w.src))?,
            );
        }
        if let Some(n) =
            w.inode.filter(|n| counts.get(n).is_some_and(|c| *c > 1))
        {
            let next = max_group + groups.len() as u64;
            e.n = Some(*groups.entry(n).or_insert(next));
        }
        e.z = plan.kept.contains(&i);
        out.push(e);
    }
    let mut entries = out;
    entries.sort_by(|a, b| a.path().cmp(&b.path()));
    let root_ino = rustix::fs::fstat(new)
        .map_err(errno_at("stat", new_path))?
        .st_ino;
    Ok(Manifest {
        header: manifest::Header {
            version: 1,
            root_ino,
            trees: trees.to_vec(),
            images,
            entries: entries.len() as u64,
        },
        entries,
    })
}

/// What the journal says is under way.
#[derive(Debug, PartialEq, Eq)]
enum Journal {
    /// An update; the old root's inode.
    Update(u64),
    /// A rollback; the root's inode before it.
    Rollback(u64),
}

fn write_journal(zonepath: &Path, j: &Journal) -> Result<(), UpdateError> {
    let text = match j {
        Journal::Update(i) => format!("update {i}\n"),
        Journal::Rollback(i) => format!("rollback {i}\n"),
    };
    let path = zonepath.join(JOURNAL);
    let tmp = zonepath.join(format!("{JOURNAL}.{}", std::process::id()));
    let r = (|| -> io::Result<()> {
        match fs::remove_file(&tmp) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        fs::File::open(zonepath)?.sync_all()
    })();
    r.map_err(io_at("write", path))
}

fn read_journal(zonepath: &Path) -> Result<Option<Journal>, UpdateError> {
    let path = zonepath.join(JOURNAL);
    let f = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_at("read", path)(e)),
    };
    let mut s = String::new();
    f.take(256)
        .read_to_string(&mut s)
        .map_err(io_at("read", &path))?;
    let bad = || UpdateError::Io {
        op: "read",
        path: path.clone(),
        source: io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not a journal: {s:?}"),
        ),
    };
    let (word, ino) = s.trim().split_once(' ').ok_or_else(bad)?;
    let ino: u64 = ino.parse().map_err(|_| bad())?;
    match word {
        "update" => Ok(Some(Journal::Update(ino))),
        "rollback" => Ok(Some(Journal::Rollback(ino))),
        _ => Err(bad()),
    }
}

use std::os::unix::fs::OpenOptionsExt;

fn ino_of(p: &Path) -> Option<u64> {
    fs::symlink_metadata(p).ok().map(|m| m.ino())
}

fn remove_if(p: &Path) -> Result<(), UpdateError> {
    match fs::symlink_metadata(p) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_at("stat", p)(e)),
        Ok(m) if m.is_dir() => {
            copier::fsutil::remove_tree(p).map_err(UpdateError::Copier)
        }
        Ok(_) => fs::remove_file(p).map_err(io_at("remove", p)),
    }
}

/// Finishes or undoes an update or rollback a kill interrupted; says
/// which. Called with the zonepath's lock held.
pub fn recover(zonepath: &Path) -> Result<Option<&'static str>, UpdateError> {
    let root = zonepath.join("root");
    undo_swap(zonepath)?;
    let Some(j) = read_journal(zonepath)? else {
        return Ok(None);
    };
    let now = ino_of(&root);
    let done = match j {
        Journal::Update(old) if now == Some(old) => {
            remove_if(&zonepath.join(ROOT_NEW))?;
            remove_if(&zonepath.join(manifest::MANIFEST_NEW))?;
            fs::remove_file(zonepath.join(JOURNAL))
                .map_err(io_at("remove", zonepath.join(JOURNAL)))?;
            "an interrupted update was undone: the old root is in place"
        }
        Journal::Update(_) => {
            finish_update(zonepath, &mut |_| {})?;
            "an interrupted update was finished: the new root is in place"
        }
        Journal::Rollback(old) => {
            if now != Some(old) {
                settle_manifests(zonepath)?;
            }
            fs::remove_file(zonepath.join(JOURNAL))
                .map_err(io_at("remove", zonepath.join(JOURNAL)))?;
            if now == Some(old) {
                "an interrupted rollback was undone"
            } else {
                "an interrupted rollback was finished"
            }
        }
    };
    Ok(Some(done))
}

/// After the exchange: the manifests follow the roots, the old root
/// becomes `root.prev`, the journal goes. Each step can be redone.
fn finish_update(
    zonepath: &Path,
    stage: &mut dyn FnMut(&str),
) -> Result<(), UpdateError> {
    let m = zonepath.join(manifest::MANIFEST);
    let mnew = zonepath.join(manifest::MANIFEST_NEW);
    let mprev = zonepath.join(manifest::MANIFEST_PREV);
    if mnew.exists() {
        if m.exists() {
            fs::rename(&m, &mprev).map_err(io_at("rename", &m))?;
        }
        fs::rename(&mnew, &m).map_err(io_at("rename", &mnew))?;
    }
    stage("settled");
    let new = zonepath.join(ROOT_NEW);
    if fs::symlink_metadata(&new).is_ok() {
        remove_if(&zonepath.join(ROOT_PREV))?;
        fs::rename(&new, zonepath.join(ROOT_PREV))
            .map_err(io_at("rename", &new))?;
    }
    fs::File::open(zonepath)
        .and_then(|d| d.sync_all())
        .map_err(io_at("sync", zonepath))?;
    fs::remove_file(zonepath.join(JOURNAL))
        .map_err(io_at("remove", zonepath.join(JOURNAL)))
}

/// Makes `.zinstall.manifest` the one describing `root` (its header
/// names the root's inode), exchanging it with the previous one if a
/// rollback stopped between the two.
fn settle_manifests(zonepath: &Path) -> Result<(), UpdateError> {
    let root = ino_of(&zonepath.join("root"));
    let cur = manifest::read(zonepath, manifest::MANIFEST)?
        .map(|m| m.header.root_ino);
    if cur == root {
        return Ok(());
    }
    let prev = manifest::read(zonepath, manifest::MANIFEST_PREV)?
        .map(|m| m.header.root_ino);
    if prev == root {
        let zdir = copier::beneath::Root::open(zonepath)?;
        exchange(
            zdir.as_fd(),
            manifest::MANIFEST,
            manifest::MANIFEST_PREV,
            zonepath,
        )?;
    }
    Ok(())
}

/// Exchanges two names of the zonepath atomically.
#[cfg(target_os = "linux")]
fn exchange(
    zdir: BorrowedFd<'_>,
    a: &str,
    b: &str,
    zonepath: &Path,
) -> Result<(), UpdateError> {
    rustix::fs::renameat_with(
        zdir,
        a,
        zdir,
        b,
        rustix::fs::RenameFlags::EXCHANGE,
    )
    .map_err(errno_at("exchange", zonepath.join(a)))?;
    rustix::fs::fsync(zdir).map_err(errno_at("sync", zonepath))
}

/// Exchanges two names of the zonepath: three renames through
/// [`SWAP`], whose name [`undo_swap`] finds after a kill. The journal
/// (written before) names the names: only `root` with `root.new` or
/// `root.prev`, and the manifests, are ever exchanged.
#[cfg(not(target_os = "linux"))]
fn exchange(
    zdir: BorrowedFd<'_>,
    a: &str,
    b: &str,
    zonepath: &Path,
) -> Result<(), UpdateError> {
    write_swap_names(zonepath, a, b)?;
    let err = |what: &'static str| errno_at(what, zonepath.join(a));
    rustix::fs::renameat(zdir, a, zdir, SWAP).map_err(err("rename"))?;
    rustix::fs::renameat(zdir, b, zdir, a).map_err(err("rename"))?;
    rustix::fs::renameat(zdir, SWAP, zdir, b).map_err(err("rename"))?;
    let _ = fs::remove_file(zonepath.join(format!("{SWAP}.names")));
    rustix::fs::fsync(zdir).map_err(errno_at("sync", zonepath))
}

#[cfg(not(target_os = "linux"))]
fn write_swap_names(
    zonepath: &Path,
    a: &str,
    b: &str,
) -> Result<(), UpdateError> {
    let p = zonepath.join(format!("{SWAP}.names"));
    fs::write(&p, format!("{a}\n{b}\n")).map_err(io_at("write", &p))?;
    fs::File::open(zonepath)
        .and_then(|d| d.sync_all())
        .map_err(io_at("sync", zonepath))
}

/// Finishes a three-rename exchange a kill interrupted: `a` missing
/// means only the first rename happened (undone), `b` missing that the
/// second did too (completed).
fn undo_swap(zonepath: &Path) -> Result<(), UpdateError> {
    let names = zonepath.join(format!("{SWAP}.names"));
    let swap = zonepath.join(SWAP);
    if fs::symlink_metadata(&swap).is_ok()
        && let Ok(text) = fs::read_to_string(&names)
        && let Some((a, b)) = text.trim().split_once('\n')
    {
        let (a, b) = (zonepath.join(a), zonepath.join(b));
        if fs::symlink_metadata(&a).is_err() {
            fs::rename(&swap, &a).map_err(io_at("rename", &swap))?;
        } else if fs::symlink_metadata(&b).is_err() {
            fs::rename(&swap, &b).map_err(io_at("rename", &swap))?;
        }
    }
    let _ = fs::remove_file(&names);
    Ok(())
}

/// Switches back to the root before the last update: `root` and
/// `root.prev` exchanged, and their manifests. Rolling back twice
/// returns to the updated root.
pub fn rollback(zonepath: &Path) -> Result<Option<&'static str>, UpdateError> {
    let _held =
        crate::open_zonepath(zonepath).map_err(|e| UpdateError::Io {
            op: "open zonepath",
            path: zonepath.to_path_buf(),
            source: io::Error::other(e.to_string()),
        })?;
    let lock = ZoneLock::take(zonepath)?;
    let r = (|| {
        let recovered = recover(zonepath)?;
        let prev = zonepath.join(ROOT_PREV);
        if !fs::symlink_metadata(&prev).is_ok_and(|m| m.is_dir()) {
            return Err(UpdateError::NoPrevious {
                zonepath: zonepath.to_path_buf(),
            });
        }
        let root = zonepath.join("root");
        let ino = fs::symlink_metadata(&root)
            .map_err(io_at("stat", &root))?
            .ino();
        write_journal(zonepath, &Journal::Rollback(ino))?;
        let zdir = copier::beneath::Root::open(zonepath)?;
        exchange(zdir.as_fd(), "root", ROOT_PREV, zonepath)?;
        settle_manifests(zonepath)?;
        fs::remove_file(zonepath.join(JOURNAL))
            .map_err(io_at("remove", zonepath.join(JOURNAL)))?;
        Ok(recovered)
    })();
    lock.release();
    r
}

/// Removes what updates leave in a zonepath (`root.new`, `root.prev`,
/// the journal, the manifests): part of an uninstall.
pub fn clear(zonepath: &Path) -> Result<(), UpdateError> {
    undo_swap(zonepath)?;
    remove_if(&zonepath.join(ROOT_NEW))?;
    remove_if(&zonepath.join(ROOT_PREV))?;
    remove_if(&zonepath.join(SWAP))?;
    remove_if(&zonepath.join(JOURNAL))?;
    manifest::clear(zonepath).map_err(io_at("remove manifests in", zonepath))
}
