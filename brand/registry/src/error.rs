//! What can go wrong pulling an image, each naming the URL, digest or
//! path involved.

use std::io;
use std::path::PathBuf;

/// A pull refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The text is not a registry reference.
    #[error("{text:?} is not an image reference: {why}")]
    BadReference {
        /// What was given.
        text: String,
        /// What is wrong with it.
        why: String,
    },
    /// The request could not be made or its answer not read (connection
    /// refused, reset, timed out, TLS).
    #[error("{op} {url}: {why}")]
    Http {
        /// `GET`, `read`.
        op: &'static str,
        /// The URL.
        url: String,
        /// What went wrong.
        why: String,
    },
    /// The registry answered with an error status.
    #[error("GET {url}: {status}{}", if detail.is_empty() { String::new() } else { format!(": {detail}") })]
    Status {
        /// The URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The registry's error text, if it gave one.
        detail: String,
    },
    /// The registry wants credentials zinstall does not have, or its
    /// token service refused.
    #[error("{registry}: {why}")]
    Auth {
        /// The registry.
        registry: String,
        /// What is wrong.
        why: String,
    },
    /// A manifest, token or error body larger than zinstall reads.
    #[error("GET {url}: more than the {limit} bytes a {what} may have")]
    TooLarge {
        /// The URL.
        url: String,
        /// `manifest`, `token`.
        what: &'static str,
        /// The bound.
        limit: u64,
    },
    /// What the registry served is not what was asked for.
    #[error("{reference}: {what} {digest}: {why}")]
    Mismatch {
        /// The image.
        reference: String,
        /// `manifest`, `blob`.
        what: &'static str,
        /// The digest asked for.
        digest: String,
        /// How it differs.
        why: String,
    },
    /// A download kept breaking: what was received is kept, and the next
    /// pull resumes from it.
    #[error(
        "{reference}: blob {digest}: {got} of {size} bytes after {attempts} \
         attempts (kept; the next pull resumes): {last}"
    )]
    Interrupted {
        /// The image.
        reference: String,
        /// The blob.
        digest: String,
        /// Bytes received and kept.
        got: u64,
        /// Bytes the blob has.
        size: u64,
        /// Requests made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// The local store could not be written or read.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// `mkdir`, `open`, `write`, `rename`, `lock`.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The system's error.
        source: io::Error,
    },
    /// The image, once its blobs were there, was refused as any OCI
    /// image is (platform, media types, digests).
    #[error(transparent)]
    Image(#[from] zinstall_oci::Error),
}

impl RegistryError {
    pub(crate) fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
        source: io::Error,
    ) -> Self {
        RegistryError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Whether trying again may help: a broken connection or a server
    /// error, not a refusal.
    pub fn is_transient(&self) -> bool {
        match self {
            RegistryError::Http { .. } => true,
            RegistryError::Status { status, .. } => {
                *status == 429 || *status >= 500
            }
            _ => false,
        }
    }
}

/// This crate's result.
pub type Result<T, E = RegistryError> = std::result::Result<T, E>;
