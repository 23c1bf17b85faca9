//! The install's recording: the root walked and the tarballs digested
//! on a thread of its own while the install's flush waits on the disk;
//! written by the install's steps before the marker says installed.

use std::path::Path;

use super::digest::file_digest;
use super::format::{Made, Manifest, ManifestError, Recipe};
use super::record::record_with;

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

/// Records the root at `root`, made from `recipe`: the walk of the root
/// beside the digests of the recipe's tarballs (the baseline, tarball
/// images) that it does not have yet.
pub(crate) fn pending(
    root: &Path,
    mut recipe: Recipe,
    contents: Option<&zinstall_engine::contents::Contents>,
) -> Pending {
    let t0 = std::time::Instant::now();
    let trees = recipe.trees.clone();
    let (digested, recorded) = rayon::join(
        || -> Result<(), ManifestError> {
            let digest = |p: &str| {
                file_digest(Path::new(p)).map_err(|error| ManifestError::Io {
                    op: "read",
                    path: p.into(),
                    error,
                })
            };
            if let Some(b) =
                recipe.baseline.as_mut().filter(|b| b.digest.is_empty())
            {
                b.digest = digest(&b.path)?;
            }
            for i in recipe.images.iter_mut().filter(|i| i.digest.is_empty()) {
                i.digest = digest(&i.arg)?;
                i.layers = vec![i.digest.clone()];
            }
            Ok(())
        },
        || record_with(root, &trees, Vec::new(), contents),
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    Pending {
        recorded: digested.and(recorded).map(|mut m| {
            m.header.trees = Vec::new();
            m.header.recipe = Some(recipe);
            m.header.made = Some(Made {
                how: "install".into(),
                at: now,
                generation: 0,
            });
            m
        }),
        took: t0.elapsed(),
    }
}
