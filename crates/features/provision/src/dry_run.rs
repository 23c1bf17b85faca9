//! A provision's dry run: the same checks as [`crate::provision`]'s, the
//! cache entry found or not by the image's identity, the guests' paths;
//! nothing written.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use zinstall_engine::Op;

use crate::asked;
use crate::cache::{Cache, WouldObtain};
use crate::detect::ImageKind;
use crate::error::{ProvisionError, ProvisionError as Error};
use crate::guests::open_for_cache;
use crate::guests::request::{
    check_request, entry_kind, guest_path, is_disk, seed_path,
};
use crate::options::ProvisionOptions;

/// What [`crate::provision`] would do, found without writing anything.
#[derive(Clone, Debug)]
pub struct ProvisionDryRun {
    /// The image's kind.
    pub image: ImageKind,
    /// Whether the cache entry would be reused, rebuilt or built.
    pub would: WouldObtain,
    /// The guests that would be made, in order: directories or qcow2
    /// overlays.
    pub guests: Vec<PathBuf>,
    /// The disk guests' NoCloud seeds that would be made, in order.
    pub seeds: Vec<PathBuf>,
}

/// A dry run of [`crate::provision`]: the same checks (count, size, tunables,
/// the image told by its content, `--qemu-img`'s program, the cache
/// entry by the image file's identity and `sha256` against an entry
/// found, no guest already there), nothing written, no image data read
/// beyond its head.
pub fn dry_run(
    image: &Path,
    opts: &ProvisionOptions,
) -> Result<ProvisionDryRun, ProvisionError> {
    let kind = check_request(image, opts)?;
    let seed = asked::prepare_seed(kind, is_disk(kind), opts)?;
    asked::prepare_customize(is_disk(kind), opts)?;
    let entry_kind = entry_kind(kind);
    let root = match fs::canonicalize(&opts.cache) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            opts.cache.clone()
        }
        Err(e) => return Err(Error::io(Op::Stat, &opts.cache, e)),
    };
    let would = if kind == ImageKind::Oci {
        crate::oci::peek(&root, image, opts)?
    } else {
        // A qcow2 image's chain is part of its identity: opened (its
        // headers and L1 tables read, no data).
        let opened = open_for_cache(image, kind, opts)?;
        let (file, also) = (opened.file, opened.also);
        let also: Vec<&File> = also.iter().collect();
        Cache::peek(
            &root,
            image,
            &file,
            &also,
            entry_kind,
            opts.sha256.as_deref(),
        )?
    };
    let mut guests = Vec::with_capacity(opts.count);
    for i in 0..opts.count {
        let path = guest_path(opts, entry_kind, i);
        if !opts.force && fs::symlink_metadata(&path).is_ok() {
            return Err(ProvisionError::GuestExists(path));
        }
        guests.push(path);
    }
    let mut seeds = Vec::new();
    for i in (0..opts.count).filter(|_| seed.is_some()) {
        let path = seed_path(opts, i);
        if !opts.force && fs::symlink_metadata(&path).is_ok() {
            return Err(ProvisionError::GuestExists(path));
        }
        seeds.push(path);
    }
    Ok(ProvisionDryRun {
        image: kind,
        would,
        guests,
        seeds,
    })
}
