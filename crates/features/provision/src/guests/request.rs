//! What a provision is asked, checked before anything is extracted, and
//! what its guests are named.

use std::fs;
use std::path::{Path, PathBuf};

use zinstall_qcow2 as qcow2;

use crate::asked;
use crate::build::converter;
use crate::cache::EntryKind;
use crate::detect::{ImageKind, detect};
use crate::error::{ImageProblem, ProvisionError, ProvisionError as Error};
use crate::identity;
use crate::options::{GuestFormat, ProvisionOptions};

/// What is checked before anything is extracted (or, in a dry run,
/// instead): the count, which sizes the guest list, the size, which sizes
/// every overlay, the tunables (set by a caller rather than read from a
/// file, they may never have been checked, and a buffer is sized from
/// them), the image's kind, and the programs the guests will need.
pub(crate) fn check_request(
    image: &Path,
    opts: &ProvisionOptions,
) -> Result<ImageKind, ProvisionError> {
    if opts.count > ProvisionOptions::MAX_GUESTS {
        return Err(ProvisionError::TooManyGuests(opts.count));
    }
    if let Some(s) = opts.size
        && s > qcow2::MAX_OVERLAY_SIZE
    {
        return Err(ProvisionError::SizeTooLarge(s));
    }
    opts.tunables.validate()?;
    // Before anything is extracted: the guests need a directory.
    // The caller's output directory, as named (a link to it allowed).
    #[allow(clippy::disallowed_methods)]
    let out = fs::metadata(&opts.out);
    if out.is_ok_and(|m| !m.is_dir()) {
        return Err(ProvisionError::OutNotDirectory(opts.out.clone()));
    }
    let kind = detect(image)?;
    if opts.format == GuestFormat::Composefs {
        composefs_possible(image, kind, opts)?;
    } else if opts.mount {
        return Err(ProvisionError::Composefs {
            path: opts.out.clone(),
            why: "--mount leaves composefs guests mounted: it needs \
                  --format composefs"
                .into(),
        });
    }
    if !matches!(kind, ImageKind::Tree(_) | ImageKind::Oci) {
        asked::check_disk_customize(image, opts)?;
    }
    if matches!(kind, ImageKind::Tree(_) | ImageKind::Oci) {
        identity::check(&opts.identity, &opts.name)?;
    } else if let Some(q) = &opts.qemu_img {
        crate::qemu_img::check(q, &opts.out)?;
    }
    if matches!(kind, ImageKind::Foreign(..)) {
        converter(opts, image, kind)?;
    }
    Ok(kind)
}

/// Composefs guests are made of tree images only (a disk image's guests
/// are qcow2 overlays), and on Linux only.
fn composefs_possible(
    image: &Path,
    kind: ImageKind,
    opts: &ProvisionOptions,
) -> Result<(), ProvisionError> {
    if !cfg!(target_os = "linux") {
        return Err(ProvisionError::Composefs {
            path: opts.out.clone(),
            why: "composefs is Linux's (EROFS, overlayfs and fs-verity): \
                  provision --format composefs is refused on this system; \
                  make tree guests (--format tree)"
                .into(),
        });
    }
    if entry_kind(kind) == EntryKind::Raw {
        return Err(Error::Image {
            path: image.to_path_buf(),
            problem: ImageProblem::Unsupported(format!(
                "{}: composefs guests are made of tree images (a rootfs \
                 archive, an OCI image, a directory), not of a disk \
                 image, whose guests are qcow2 overlays; provision it \
                 without --format composefs",
                kind.describe()
            )),
        });
    }
    Ok(())
}

/// Whether `kind` makes disk guests (which a seed customises).
pub(crate) fn is_disk(kind: ImageKind) -> bool {
    entry_kind(kind) == EntryKind::Raw
}

/// The cache entry an image of `kind` makes.
pub(crate) fn entry_kind(kind: ImageKind) -> EntryKind {
    match kind {
        ImageKind::Tree(_) | ImageKind::Oci => EntryKind::Tree,
        ImageKind::Raw(_)
        | ImageKind::Qcow2
        | ImageKind::CompressedQcow2(_)
        | ImageKind::Foreign(..) => EntryKind::Raw,
    }
}

/// Guest `i`'s directory or overlay.
pub(crate) fn guest_path(
    opts: &ProvisionOptions,
    kind: EntryKind,
    i: usize,
) -> PathBuf {
    match kind {
        EntryKind::Tree | EntryKind::Layer => {
            opts.out.join(format!("{}-{i}", opts.name))
        }
        EntryKind::Raw => opts.out.join(format!("{}-{i}.qcow2", opts.name)),
    }
}

/// Guest `i`'s seed, beside its overlay.
pub(crate) fn seed_path(opts: &ProvisionOptions, i: usize) -> PathBuf {
    opts.out.join(format!("{}-{i}.seed.img", opts.name))
}
