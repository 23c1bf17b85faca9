//! gc's last step for the cache's composefs store (`<cache>/composefs`):
//! once the entries are decided, every object and image no ref keeps is
//! removed, with the staging trees and temporary files interrupted runs
//! left (`Store::sweep`, under the store's lock held exclusively). Done
//! here, in the cache's gc, so that `cache gc` through zinstalld sweeps
//! exactly as a local one does. composefs is Linux's: elsewhere there is
//! no store to sweep.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::layout::{Cache, Entry};
#[cfg(target_os = "linux")]
use crate::error::ProvisionError as Error;
use crate::error::Result;

/// What gc did to the cache's composefs store.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComposefsSweep {
    /// The store.
    pub store: PathBuf,
    /// Nothing was removed; what would be is counted.
    pub dry_run: bool,
    /// Images a ref names.
    pub images_kept: u64,
    /// Objects kept (the images included).
    pub objects_kept: u64,
    /// Objects removed (or that would be).
    pub objects_removed: u64,
    /// Their bytes.
    pub bytes_removed: u64,
    /// `images/<hex>` links removed.
    pub links_removed: u64,
    /// Staging trees and temporary files of interrupted runs removed.
    pub leftovers_removed: u64,
}

#[cfg(target_os = "linux")]
fn error(e: zinstall_composefs::Error) -> Error {
    Error::Composefs {
        path: e.path.clone(),
        why: e.to_string(),
    }
}

/// Sweeps the composefs store at `path`, if there is one (a cache
/// whose entries are gone, or that only installs used, may still have
/// one).
pub fn sweep_store(
    path: &Path,
    dry_run: bool,
) -> Result<Option<ComposefsSweep>> {
    if !cfg!(target_os = "linux") || fs::symlink_metadata(path).is_err() {
        return Ok(None);
    }
    #[cfg(target_os = "linux")]
    {
        let r = zinstall_composefs::Store::open(path)
            .and_then(|s| s.sweep(dry_run))
            .map_err(error)?;
        Ok(Some(ComposefsSweep {
            store: path.to_path_buf(),
            dry_run,
            images_kept: r.images_kept,
            objects_kept: r.objects_kept,
            objects_removed: r.objects_removed,
            bytes_removed: r.bytes_removed,
            links_removed: r.links_removed,
            leftovers_removed: r.leftovers_removed,
        }))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = dry_run;
        Ok(None)
    }
}

impl Cache {
    /// Sweeps the cache's composefs store, if it has one.
    pub fn gc_composefs(
        &self,
        dry_run: bool,
    ) -> Result<Option<ComposefsSweep>> {
        sweep_store(&self.composefs_store(), dry_run)
    }

    /// Removes the ref that kept a removed tree entry's composefs image
    /// (the image and its objects go with the sweep after).
    pub(super) fn remove_composefs_ref(&self, entry: &Entry) -> Result<()> {
        let store = self.composefs_store();
        if !cfg!(target_os = "linux") || fs::symlink_metadata(&store).is_err() {
            return Ok(());
        }
        #[cfg(target_os = "linux")]
        zinstall_composefs::Store::open(&store)
            .and_then(|s| s.remove_ref(&entry.composefs_ref()))
            .map_err(error)?;
        #[cfg(not(target_os = "linux"))]
        let _ = entry;
        Ok(())
    }
}
