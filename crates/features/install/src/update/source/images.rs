//! The images of the source: opened again (a registry reference pulled
//! again, so a moved tag is a new version), identified by content, and
//! their layers laid over the parts below them.
//!
//! An image's version is its manifest's digest and its layers' diff_ids
//! (a tarball's is the SHA-256 of its bytes, one "layer"). When the new
//! images' layers begin with every layer the root was made from, the
//! root's recorded entries stand for those layers and only the layers
//! after them are read, each unpacked alone into the staging directory
//! with its whiteouts recorded, then laid over the recorded entries.
//! Otherwise every layer is read again. Either way nothing is written
//! into a root here.

use std::collections::HashSet;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use zinstall_archive::ArchiveKind;
use zinstall_engine::unpack::{Change, UnpackOptions, Whiteouts};

use super::fold::{Fold, From, RECORDED_GROUPS, Want};
use super::stage::{Staging, lay_staged};
use crate::manifest::{self, ImageRecord, Manifest};
use crate::update::error::UpdateError;

/// How an image's layers are read.
pub(crate) enum ImageSource {
    /// An OCI image, opened and checked.
    Oci(Box<zinstall_engine::oci::Image>),
    /// A tarball (a zinstall layer or a plain rootfs archive).
    Tarball {
        path: PathBuf,
        expect: Option<ArchiveKind>,
    },
}

/// An image as the update found it.
pub(crate) struct OpenedImage {
    /// What the new manifest records of it.
    pub(crate) record: ImageRecord,
    pub(crate) source: ImageSource,
}

/// What opening and reading images needs.
pub(crate) struct ImageOptions<'a> {
    pub(crate) platform: Option<&'a zinstall_engine::oci::Platform>,
    pub(crate) store: Option<&'a Path>,
    pub(crate) pull: &'a zinstall_registry::PullOptions,
    pub(crate) unpack: UnpackOptions,
}

/// Opens each image (`args` as given, or as recorded) and identifies it.
pub(crate) fn open_images(
    args: &[String],
    o: &ImageOptions<'_>,
) -> Result<Vec<OpenedImage>, UpdateError> {
    let mut out = Vec::new();
    for arg in args {
        let path = PathBuf::from(arg);
        let failed = |cause: crate::Cause| UpdateError::Image {
            image: arg.clone(),
            cause: Box::new(cause),
        };
        let pull = zinstall_registry::PullOptions {
            max_blob_size: Some(o.unpack.max_bytes),
            cancel: o.pull.cancel.clone().or_else(|| o.unpack.cancel.clone()),
            ..o.pull.clone()
        };
        if let Some(image) =
            crate::plan::oci_image(&path, o.platform, o.store, &pull)
                .map_err(failed)?
        {
            out.push(OpenedImage {
                record: crate::recipe::oci_record(arg.clone(), &image),
                source: ImageSource::Oci(Box::new(image)),
            });
            continue;
        }
        let expect = crate::plan::check_kind(&path, ArchiveKind::Layer)
            .map_err(failed)?;
        let digest =
            manifest::file_digest(&path).map_err(|e| UpdateError::Io {
                op: "read",
                path: path.clone(),
                error: e,
            })?;
        out.push(OpenedImage {
            record: ImageRecord {
                arg: arg.clone(),
                layers: vec![digest.clone()],
                digest,
                kind: "tarball".into(),
            },
            source: ImageSource::Tarball { path, expect },
        });
    }
    Ok(out)
}

/// Every layer the recorded images were made of, in order; `None` if a
/// recorded image does not say (a version 1 manifest).
pub(crate) fn recorded_layers(images: &[ImageRecord]) -> Option<Vec<String>> {
    let mut all = Vec::new();
    for i in images {
        if i.kind.is_empty() || i.layers.is_empty() {
            return None;
        }
        all.extend(i.layers.iter().cloned());
    }
    Some(all)
}

/// How many leading layers of `new` the root's recorded entries stand
/// for: all of `old` when `new` begins with them, else none.
pub(crate) fn reusable(old: &[String], new: &[String]) -> usize {
    if !old.is_empty() && new.len() >= old.len() && new[..old.len()] == *old {
        old.len()
    } else {
        0
    }
}

/// Lays the root's recorded entries into `fold`: what the first
/// [`reusable`] layers made, not read again.
pub(crate) fn lay_recorded(old: &Manifest, fold: &mut Fold) {
    for e in &old.entries {
        let mut entry = e.clone();
        let group = e.n.map(|n| (RECORDED_GROUPS, n));
        entry.n = None;
        entry.i = None;
        entry.z = false;
        let rel = e.path().into_owned();
        fold.put(Want {
            rel,
            atime: entry.t,
            entry,
            from: From::Recorded,
            group,
            redirect: false,
        });
    }
}

/// Lays the images' layers from the `skip`th (counting across images)
/// over `fold`, each unpacked alone into `staging`; returns the bytes
/// unpacked.
pub(crate) fn lay_images(
    images: &[OpenedImage],
    skip: usize,
    o: &ImageOptions<'_>,
    staging: &mut Staging,
    fold: &mut Fold,
) -> Result<u64, UpdateError> {
    let mut n = 0usize;
    let mut bytes = 0u64;
    for im in images {
        match &im.source {
            ImageSource::Oci(image) => {
                for i in 0..image.layers.len() {
                    n += 1;
                    if n <= skip {
                        continue;
                    }
                    let (dir, tag) = staging.part(&format!("layer{n}"))?;
                    let opts = UnpackOptions {
                        whiteouts: Whiteouts::Record,
                        ..o.unpack.clone()
                    };
                    let r = zinstall_engine::oci::unpack_layer(
                        image, i, &dir, &opts,
                    )?;
                    bytes += r.stats.bytes;
                    let implicit =
                        apply_changes(&r.changes, &image.layer_path(i), fold)?;
                    lay_staged(&dir, tag, "@image", &implicit, fold)?;
                }
            }
            ImageSource::Tarball { path, expect } => {
                n += 1;
                if n <= skip {
                    continue;
                }
                let (dir, tag) = staging.part(&format!("layer{n}"))?;
                let opts = UnpackOptions {
                    expect: *expect,
                    ..o.unpack.clone()
                };
                bytes += zinstall_engine::unpack::unpack(path, &dir, &opts)?
                    .stats
                    .bytes;
                lay_staged(&dir, tag, "@image", &HashSet::new(), fold)?;
            }
        }
    }
    Ok(bytes)
}

/// A layer's whiteouts and links to lower layers' files, laid over
/// `fold` before its tree; returns the directories it holds entries in
/// without an entry of its own.
fn apply_changes(
    changes: &[Change],
    layer: &Path,
    fold: &mut Fold,
) -> Result<HashSet<Vec<u8>>, UpdateError> {
    let rel = |p: &Path| -> Vec<u8> {
        p.strip_prefix("/")
            .unwrap_or(p)
            .as_os_str()
            .as_bytes()
            .to_vec()
    };
    let mut implicit = HashSet::new();
    for c in changes {
        match c {
            Change::Remove(p) => fold.remove(&rel(p)),
            Change::Opaque(p) => fold.clear_beneath(&rel(p)),
            Change::Implicit(p) => {
                implicit.insert(rel(p));
            }
            Change::Link { path, target } => {
                if !fold.link(&rel(path), &rel(target)) {
                    return Err(UpdateError::Io {
                        op: "link",
                        path: layer.join(path),
                        error: std::io::Error::new(
                            std::io::ErrorKind::NotFound,
                            format!(
                                "a hard link to {}, which no lower layer holds as a file",
                                target.display()
                            ),
                        ),
                    });
                }
            }
        }
    }
    Ok(implicit)
}

/// A tarball other than an image (the baseline) laid over `fold`:
/// unpacked into `staging` as the install unpacks it.
pub(crate) fn lay_archive(
    path: &Path,
    kind: ArchiveKind,
    label: &str,
    o: &ImageOptions<'_>,
    staging: &mut Staging,
    fold: &mut Fold,
) -> Result<u64, UpdateError> {
    let expect = crate::plan::check_kind(path, kind).map_err(|cause| {
        UpdateError::Image {
            image: path.display().to_string(),
            cause: Box::new(cause),
        }
    })?;
    let (dir, tag) = staging.part(label.trim_start_matches('@'))?;
    let opts = UnpackOptions {
        expect,
        ..o.unpack.clone()
    };
    let bytes = zinstall_engine::unpack::unpack(path, &dir, &opts)?
        .stats
        .bytes;
    lay_staged(&dir, tag, label, &HashSet::new(), fold)?;
    Ok(bytes)
}
