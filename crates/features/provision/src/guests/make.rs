//! Making the guests, one after another, and undoing what a failed run
//! made.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

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
