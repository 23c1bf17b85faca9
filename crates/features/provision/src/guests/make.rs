//! Making the guests, one after another, and undoing what a failed run
//! made.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use zinstall_engine::{Op, Plan};
use zinstall_qcow2 as qcow2;

use super::report::{Guest, GuestKind};
use super::request::{guest_path, seed_path};
use crate::cache::{Cache, Entry, EntryKind};
use crate::composefs;
use crate::customize::{self, Customization, Customized};
use crate::error::{ProvisionError, ProvisionError as Error};
use crate::identity::{self, GuestIdentity};
use crate::options::ProvisionOptions;
use crate::seed::Seed;

/// What the guests are made from: the cache entry, its kind, and what
/// each guest is given besides (a directory guest's customisation, a
/// disk guest's seed).
pub(super) struct Source<'a> {
    pub(super) entry: &'a Entry,
    pub(super) kind: EntryKind,
    pub(super) custom: Option<&'a Customization>,
    /// Each disk guest's NoCloud seed, when one is made.
    pub(super) seed: Option<&'a Seed>,
    /// The entry's composefs image, when the guests are composefs roots.
    pub(super) image: Option<&'a composefs::EntryImage>,
}

/// Makes the guests from `from`'s entry, one after another, into
/// `guests`, and tells `on_guest` of each; every path this run is to
/// remove on failure goes into `made` before anything is written there.
pub(super) fn make_guests(
    cache: &Cache,
    from: &Source<'_>,
    opts: &ProvisionOptions,
    made: &mut Vec<PathBuf>,
    guests: &mut Vec<Guest>,
    on_guest: &mut dyn FnMut(&Guest),
) -> Result<(), ProvisionError> {
    fs::create_dir_all(&opts.out)
        .map_err(|e| Error::io(Op::Mkdir, &opts.out, e))?;
    let mut m = Making {
        cache,
        from,
        opts,
        made,
        tree_bytes: None,
    };
    for i in 0..opts.count {
        if opts.cancel.as_ref().is_some_and(|c| c.is_cancelled()) {
            return Err(ProvisionError::Fs(
                zinstall_engine::Error::Cancelled {
                    path: opts.out.clone(),
                },
            ));
        }
        let t0 = Instant::now();
        let path = guest_path(opts, from.kind, i);
        let seed_at = from.seed.map(|_| seed_path(opts, i));
        m.make_room(&path, seed_at.as_deref())?;
        // From here on the path is this run's to remove on failure,
        // whatever state the guest is left in.
        m.made.push(path.clone());
        let mut g = match from.image {
            Some(image) => m.composefs_guest(path, image, i)?,
            None => m.copied_guest(path, seed_at, i)?,
        };
        g.took = t0.elapsed();
        cache.add_user(from.entry, &g.path)?;
        on_guest(&g);
        guests.push(g);
    }
    Ok(())
}

/// One run's making of guests: what they are made from and how, the
/// paths it is to remove on failure.
struct Making<'a> {
    cache: &'a Cache,
    from: &'a Source<'a>,
    opts: &'a ProvisionOptions,
    made: &'a mut Vec<PathBuf>,
    /// The data of a directory guest, once the first copy counted it.
    tree_bytes: Option<u64>,
}

impl Making<'_> {
    /// Removes, for `--force`, the guest at `path` and its seed at
    /// `seed_at`; without it, either one there is an error.
    fn make_room(
        &self,
        path: &Path,
        seed_at: Option<&Path>,
    ) -> Result<(), ProvisionError> {
        if fs::symlink_metadata(path).is_ok() {
            if !self.opts.force {
                return Err(ProvisionError::GuestExists(path.to_path_buf()));
            }
            let id = file_id(path);
            composefs::unmount_guest(path, false);
            remove_guest(path)?;
            // Gone for good, not moved: its base need not stay.
            if let Some(id) = id {
                self.cache.release_guest(path, id)?;
            }
        }
        if let Some(sp) = seed_at
            && fs::symlink_metadata(sp).is_ok()
        {
            if !self.opts.force {
                return Err(ProvisionError::GuestExists(sp.to_path_buf()));
            }
            remove_guest(sp)?;
        }
        Ok(())
    }

    /// Guest `i` at `path`, a composefs root over the entry's `image`.
    fn composefs_guest(
        &self,
        path: PathBuf,
        image: &composefs::EntryImage,
        i: usize,
    ) -> Result<Guest, ProvisionError> {
        let (entry, opts) = (self.from.entry, self.opts);
        let m = composefs::make_guest(
            &path,
            image,
            entry,
            i,
            opts,
            self.from.custom,
        )?;
        Ok(Guest {
            path,
            kind: GuestKind::Composefs {
                image: image.hex.clone(),
                mounted: m.mounted,
            },
            identity: m.identity,
            seed: None,
            customized: m.customized,
            took: Duration::ZERO,
        })
    }

    /// Guest `i` at `path`, a copy of the entry's tree or an overlay over
    /// its disk (with its seed at `seed_at`), its identity and
    /// customisation applied.
    fn copied_guest(
        &mut self,
        path: PathBuf,
        seed_at: Option<PathBuf>,
        i: usize,
    ) -> Result<Guest, ProvisionError> {
        let (entry, entry_kind, opts) =
            (self.from.entry, self.from.kind, self.opts);
        let kind =
            make_guest(&path, entry_kind, entry, opts, &mut self.tree_bytes)?;
        let seed = match (self.from.seed, seed_at) {
            (Some(s), Some(sp)) => {
                self.made.push(sp.clone());
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
        let customized = match self.from.custom {
            Some(c) => customize::apply(
                c,
                &path,
                i,
                opts.tunables,
                opts.cancel.as_ref(),
            )?,
            None => Customized::default(),
        };
        Ok(Guest {
            path,
            kind,
            identity,
            seed,
            customized,
            took: Duration::ZERO,
        })
    }
}

/// The device and inode of the file (a disk guest) at `path`.
pub(super) fn file_id(path: &Path) -> Option<(u64, u64)> {
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
pub(super) fn undo(
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
