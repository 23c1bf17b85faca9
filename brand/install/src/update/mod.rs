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

// Reads and writes by path here are converted to zinstall_core::foreign
// and the engine's beneath writer with this module's rewrite.
#![allow(clippy::disallowed_methods)]
// libc's `stat` field types differ between platforms: casts that are
// no-ops here are not everywhere.
#![allow(clippy::unnecessary_cast)]

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::manifest::{self, Manifest};
use crate::profile::Profile;
use crate::state::{self, State, ZoneLock};
use crate::zonepath::open_zonepath;

mod apply;
mod beneath;
mod clone;
mod diff;
mod error;
mod journal;
mod names;
mod record;
mod report;
mod switch;

use apply::apply;
use beneath::{set_owner_mode, set_times_fd};
use clone::clone_tree;
use diff::{Want, diff};
pub use error::UpdateError;
use error::io_at;
use journal::{Journal, finish_update, remove_if, write_journal};
pub use journal::{clear, recover, rollback};
pub use names::{JOURNAL, ROOT_NEW, ROOT_PREV};
pub use record::image_records;
use record::new_manifest;
pub use report::{Change, Kept, Report};
use switch::exchange;

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

impl Update<'_> {
    /// Runs the update; see the module's documentation.
    pub fn run(&mut self) -> Result<Report, UpdateError> {
        let zonepath = self.zonepath.clone();
        let _held = open_zonepath(&zonepath).map_err(|e| UpdateError::Io {
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
