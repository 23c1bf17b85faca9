//! Opening an image file or directory: told by content whether it is a
//! docker-archive or an OCI layout (directory or archive).

use std::path::Path;

use crate::error::Result;
use crate::image::{Image, Select};
use crate::store::Store;

impl Image {
    /// Opens the layout directory, oci-archive or docker-archive at
    /// `path` and chooses its image as `select` says. Every index, manifest and config read
    /// is checked against its digest and size first; every layer's media
    /// type, digest and diff_id are checked here, their contents as they
    /// are read ([`Image::layer`]).
    pub fn open(path: &Path, select: &Select) -> Result<Image> {
        let store = Store::open(path)?;
        // docker save describes its images in manifest.json, even where
        // it also writes an OCI layout (docker 25 and later), and names
        // them by its own tags there.
        if crate::docker::is_docker(&store) {
            return crate::docker::open(path, store, select);
        }
        Image::open_layout(path, store, select)
    }
}
