//! A tree as a composefs image: its metadata, symlinks and small files in
//! an EROFS image (composefs-rs's writer, so the image ID is the one
//! `cfsctl` gives the same tree), its regular files' contents in the
//! store; the image stored as an object itself, named by its ID.

use std::path::Path;

use composefs::erofs::writer::{ValidatedFileSystem, mkfs_erofs};

use crate::digest::ObjectId;
use crate::error::{Error, Op, Problem};
use crate::scan::{Counts, ScanOptions, Scanned, scan_with};
use crate::store::Store;

/// An image written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// The image's ID: the fs-verity digest of its bytes, its object's
    /// name in the store.
    pub id: ObjectId,
    /// Its size in bytes.
    pub size: u64,
    /// False when the store had the image already.
    pub written: bool,
    /// The tree's entries and objects.
    pub counts: Counts,
}

/// Writes the tree at `src` into `store`: each regular file's contents
/// as an object (small ones inline), then the EROFS image of the tree,
/// which is stored as an object too, then syncs the store
/// ([`Store::sync`]): once this returns, a ref may name the image.
/// Returns the image's ID.
pub fn write_image(src: &Path, store: &Store) -> Result<Image, Error> {
    write_image_with(src, store, &ScanOptions::default())
}

/// [`write_image`] with the scan's options (how many workers store
/// contents).
pub fn write_image_with(
    src: &Path,
    store: &Store,
    opts: &ScanOptions,
) -> Result<Image, Error> {
    write_scanned(scan_with(src, store, opts)?, store, src)
}

/// The second half of [`write_image_with`]: the EROFS image of a tree
/// already scanned into `store`, stored and synced. The tree at `src`
/// (which names it in errors) is no longer read: its owner may remove
/// it meanwhile.
pub fn write_scanned(
    scanned: Scanned,
    store: &Store,
    src: &Path,
) -> Result<Image, Error> {
    let bytes = image_bytes(scanned.fs, src)?;
    let put = store.put_bytes(&bytes)?;
    store.sync()?;
    Ok(Image {
        id: put.id,
        size: put.size,
        written: put.written,
        counts: scanned.counts,
    })
}

/// The EROFS image of `fs`; `src` names the tree in errors.
pub fn image_bytes(
    fs: composefs::tree::FileSystem<ObjectId>,
    src: &Path,
) -> Result<Box<[u8]>, Error> {
    let valid = ValidatedFileSystem::new(fs).map_err(|e| {
        Error::new(src, Op::Image, Problem::Format(format!("{e:#}")))
    })?;
    Ok(mkfs_erofs(&valid))
}
