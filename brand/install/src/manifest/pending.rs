//! The install's recording: the root walked and the images identified
//! on a thread of its own while the install's flush waits on the disk;
//! written by the install's steps before the marker says installed.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::digest::image_digest;
use super::format::{ImageRecord, Manifest, ManifestError};
use super::record::record;

/// What an install laid out, recorded (not yet written): made on a
/// thread of its own while the install's flush waits on the disk.
pub(crate) struct Pending {
    pub(crate) recorded: Result<Manifest, ManifestError>,
    pub(crate) took: std::time::Duration,
}

impl Pending {
    /// A recording that failed for `why`.
    pub(crate) fn failed(root: &Path, why: &str) -> Pending {
        Pending {
            recorded: Err(ManifestError::Invalid {
                path: root.to_path_buf(),
                why: why.into(),
            }),
            took: std::time::Duration::ZERO,
        }
    }
}

/// Records the root at `root` for an install of `trees` from `images`:
/// the images' identities beside the walk of the root.
pub(crate) fn pending(
    root: &Path,
    trees: &[PathBuf],
    images: &[PathBuf],
) -> Pending {
    let t0 = std::time::Instant::now();
    let trees: Vec<String> = trees
        .iter()
        .map(|t| String::from_utf8_lossy(t.as_os_str().as_bytes()).into_owned())
        .collect();
    let (images, recorded) = rayon::join(
        || {
            images
                .iter()
                .map(|i| ImageRecord {
                    arg: i.display().to_string(),
                    digest: image_digest(i),
                })
                .collect()
        },
        || record(root, &trees, Vec::new()),
    );
    Pending {
        recorded: recorded.map(|mut m| {
            m.header.images = images;
            m
        }),
        took: t0.elapsed(),
    }
}
