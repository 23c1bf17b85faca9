//! What can be wrong with an OCI image, each naming the image and the
//! blob or file.

use std::fmt;
use std::io;
use std::path::PathBuf;

use zinstall_archive::compress::Compression;

/// How a blob differs from its descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mismatch {
    /// Its bytes hash to another digest.
    Digest {
        /// The digest of the bytes read.
        found: String,
    },
    /// It has another size.
    Size {
        /// What the descriptor says.
        declared: u64,
        /// What is there.
        found: u64,
    },
    /// A layer's uncompressed bytes hash to another digest than the
    /// config's `rootfs.diff_ids` entry for it.
    DiffId {
        /// The config's diff_id.
        diff_id: String,
        /// The digest of the uncompressed bytes.
        found: String,
    },
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::Digest { found } => {
                write!(f, "its content hashes to {found}, not to its digest")
            }
            Mismatch::Size { declared, found } => write!(
                f,
                "it is {found} bytes where its descriptor says {declared}"
            ),
            Mismatch::DiffId { diff_id, found } => write!(
                f,
                "uncompressed, it hashes to {found}, not to the config's \
                 diff_id {diff_id}"
            ),
        }
    }
}

/// An OCI image refused or unreadable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading the image failed.
    #[error("{}: {op} {}: {error}", image.display(), path.display())]
    Io {
        /// The image (layout directory or archive).
        image: PathBuf,
        /// The file in it (`index.json`, `blobs/sha256/...`).
        path: PathBuf,
        /// `open`, `read`, `stat`.
        op: &'static str,
        /// The system's error.
        error: io::Error,
    },
    /// The image is not a well-formed OCI image layout, or names nothing
    /// usable: `what` is the file or descriptor, `why` the problem.
    #[error("{}: {what}: {why}", image.display())]
    Layout {
        /// The image.
        image: PathBuf,
        /// `index.json`, `manifest sha256:...`, `oci-layout`.
        what: String,
        /// What is wrong.
        why: String,
    },
    /// A blob is not what its descriptor says.
    #[error("{}: blob {digest}: {mismatch}", image.display())]
    Mismatch {
        /// The image.
        image: PathBuf,
        /// The blob's digest as its descriptor gives it.
        digest: String,
        /// How it differs.
        mismatch: Mismatch,
    },
    /// A JSON blob (index, manifest, config) larger than zinstall reads.
    #[error(
        "{}: {what} is {size} bytes, more than the {limit} a {what} may \
         have; refused before reading it",
        image.display()
    )]
    TooLarge {
        /// The image.
        image: PathBuf,
        /// `manifest`, `config`, `index`.
        what: String,
        /// The size claimed or found.
        size: u64,
        /// The bound.
        limit: u64,
    },
    /// A layer of a media type zinstall does not unpack.
    #[error(
        "{}: layer {digest}: media type {media_type} is not unpacked \
         (tar, tar+gzip, tar+zstd)",
        image.display()
    )]
    MediaType {
        /// The image.
        image: PathBuf,
        /// The layer.
        digest: String,
        /// Its media type.
        media_type: String,
    },
    /// A layer whose bytes are not compressed as its media type says:
    /// gzip bytes in a `tar+zstd` layer, a plain tar in a `tar+gzip`
    /// one, or a compression OCI has no media type for (bzip2, xz, lz4).
    /// Refused rather than read by its magic: the media type is what
    /// other runtimes and registries go by, so such an image would
    /// install here and fail everywhere else.
    #[error(
        "{}: layer {digest}: media type {media_type} says {}, but the blob \
         is {}{}",
        image.display(),
        .declared.name(),
        .found.name(),
        layer_advice(*.found)
    )]
    LayerCompression {
        /// The image.
        image: PathBuf,
        /// The layer.
        digest: String,
        /// Its media type.
        media_type: String,
        /// The compression the media type says.
        declared: Compression,
        /// The compression the blob's first bytes say.
        found: Compression,
    },
    /// A blob the image lacked could not be fetched.
    #[error("{}: fetching {digest}: {error}", image.display())]
    Fetch {
        /// The image.
        image: PathBuf,
        /// The blob.
        digest: String,
        /// What went wrong (the fetcher's error).
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The image is for another platform.
    #[error(
        "{}: the image is for {found}, not {wanted}; name its platform \
         with --platform {found} to use it anyway",
        image.display()
    )]
    Platform {
        /// The image.
        image: PathBuf,
        /// The platform asked for (the host's by default).
        wanted: String,
        /// The config's os/architecture.
        found: String,
    },
}

/// What to do about a layer not compressed as its media type says.
fn layer_advice(found: Compression) -> &'static str {
    if matches!(
        found,
        Compression::None | Compression::Gzip | Compression::Zstd
    ) {
        "; rebuild the layer or correct its media type"
    } else {
        ", which no OCI layer media type names (tar, tar+gzip, tar+zstd): \
         recompress the layer with gzip or zstd"
    }
}

impl Error {
    /// The image the error is about.
    pub fn image(&self) -> &std::path::Path {
        match self {
            Error::Io { image, .. }
            | Error::Layout { image, .. }
            | Error::Mismatch { image, .. }
            | Error::TooLarge { image, .. }
            | Error::MediaType { image, .. }
            | Error::LayerCompression { image, .. }
            | Error::Fetch { image, .. }
            | Error::Platform { image, .. } => image,
        }
    }

    /// The errno behind the error, if a system call failed.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { error, .. } => error.raw_os_error(),
            _ => None,
        }
    }
}

/// This crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
