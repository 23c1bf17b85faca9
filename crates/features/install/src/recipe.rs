//! What the manifest records of an install: its images (an OCI image
//! by its digests, a tarball by its SHA-256) and the recipe an update
//! repeats.

use std::path::Path;

use crate::manifest::{ArchiveRecord, ImageRecord, Recipe};
use crate::plan::Archive;
use crate::profile::Profile;

/// A path as the manifest writes it.
pub(crate) fn text(p: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    String::from_utf8_lossy(p.as_os_str().as_bytes()).into_owned()
}

/// How the manifest records image `arg`, laid out as `a`: an OCI image
/// by its manifest's digest and its layers' diff_ids; a tarball by the
/// SHA-256 of its bytes (filled in as the manifest is recorded). A file
/// is named by its absolute path, so an update from anywhere opens it
/// again.
pub(crate) fn image_record(arg: &Path, a: &Archive) -> ImageRecord {
    let arg = if zinstall_registry::reference_of(arg).is_some() {
        text(arg)
    } else {
        text(&zinstall_engine::oci::absolute_name(arg))
    };
    match &a.oci {
        Some(image) => oci_record(arg, image),
        None => ImageRecord {
            arg,
            digest: String::new(),
            kind: "tarball".into(),
            layers: Vec::new(),
        },
    }
}

/// How the manifest records the OCI image `image`, given as `arg`: by
/// its manifest's digest and its layers' diff_ids.
pub(crate) fn oci_record(
    arg: String,
    image: &zinstall_engine::oci::Image,
) -> ImageRecord {
    ImageRecord {
        arg,
        digest: format!("sha256:{}", image.manifest_sha256),
        kind: "oci".into(),
        layers: image.layers.iter().map(|l| l.diff_id.to_string()).collect(),
    }
}

/// The recipe of an install of `p` (its trees read under `source_root`)
/// with `images` and `baseline`.
pub(crate) fn recipe_of(
    p: &Profile,
    source_root: &Path,
    images: Vec<ImageRecord>,
    baseline: Option<ArchiveRecord>,
) -> Recipe {
    Recipe {
        source_root: (!p.trees.is_empty()).then(|| text(source_root)),
        trees: p.trees.iter().map(|t| text(t)).collect(),
        links: p.links.iter().map(|(l, t)| (text(l), text(t))).collect(),
        dirs: p.dirs.iter().map(|(d, m)| (text(d), *m)).collect(),
        images_over_host: !images.is_empty() && p.has_host_parts(),
        baseline,
        images,
        host_files: p.host_files.iter().map(|f| text(f)).collect(),
    }
}
