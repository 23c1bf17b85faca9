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
    /// refused, reset, timed out, stalled, TLS, name resolution).
    #[error("{op} {url}: {why}")]
    Http {
        /// `GET`, `read`.
        op: &'static str,
        /// The URL.
        url: String,
        /// What kind of failure: it decides whether to try again.
        kind: Failure,
        /// What went wrong.
        why: String,
    },
    /// The pull was cancelled (its job's cancel flag, a daemon stopping):
    /// what was received stays for a later pull to resume.
    #[error("{op} {url}: cancelled")]
    Cancelled {
        /// `GET`, `read`.
        op: &'static str,
        /// The URL.
        url: String,
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
    /// A blob whose descriptor declares more than the pull may fetch
    /// (`--max-archive-size`): refused before any byte is fetched.
    #[error(
        "{reference}: blob {digest}: declares {size} bytes, more than the \
         {limit} a pull may fetch"
    )]
    BlobTooLarge {
        /// The image.
        reference: String,
        /// The blob.
        digest: String,
        /// What its descriptor says.
        size: u64,
        /// The bound.
        limit: u64,
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
    #[error("{op} {}: {error}", path.display())]
    Io {
        /// `mkdir`, `open`, `write`, `rename`, `lock`.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The system's error.
        error: io::Error,
    },
    /// The image, once its blobs were there, was refused as any OCI
    /// image is (platform, media types, digests).
    #[error(transparent)]
    Image(#[from] zinstall_oci::Error),
    /// The trust policy refused the image, could not be read, or its
    /// signatures could not be fetched: nothing of the image was kept.
    #[error(transparent)]
    Policy(Box<crate::policy::PolicyError>),
}

impl From<crate::policy::PolicyError> for RegistryError {
    fn from(e: crate::policy::PolicyError) -> Self {
        // Boxed: a refusal carries several names, and every Result of the
        // crate would otherwise be as large.
        RegistryError::Policy(Box::new(e))
    }
}

impl RegistryError {
    pub(crate) fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
        error: io::Error,
    ) -> Self {
        RegistryError::Io {
            op,
            path: path.into(),
            error,
        }
    }

    /// Whether trying again may help: a broken, timed-out or stalled
    /// connection or a server error; not a refusal, a TLS certificate,
    /// a name that does not resolve, an address family the system
    /// refuses, a 4xx status or a cancel.
    pub fn is_transient(&self) -> bool {
        match self {
            RegistryError::Http { kind, .. } => kind.is_transient(),
            RegistryError::Status { status, .. } => {
                *status == 429 || *status >= 500
            }
            _ => false,
        }
    }
}

/// Why a request failed on the way, told by the error's kind (never its
/// text): whether trying again may help follows from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// Refused, reset or cut: the registry (or the path to it) may be
    /// back soon.
    Connection,
    /// No answer in time.
    Timeout,
    /// Data came slower than the pull's minimum rate.
    Stalled,
    /// The registry's name does not resolve.
    Name,
    /// TLS failed: the certificate is not trusted, or the handshake.
    Tls,
    /// The system refuses the address family or the connection (a
    /// service confined to other families, a seccomp filter).
    Refused,
    /// The request itself is wrong (URL, header, redirects, protocol).
    Request,
}

impl Failure {
    /// Whether trying again may help.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            Failure::Connection | Failure::Timeout | Failure::Stalled
        )
    }

    /// The kind of a client error.
    pub(crate) fn of(e: &ureq::Error) -> Failure {
        match e {
            ureq::Error::Io(io) => Failure::of_io(io),
            ureq::Error::Timeout(_) => Failure::Timeout,
            ureq::Error::HostNotFound => Failure::Name,
            ureq::Error::ConnectionFailed
            | ureq::Error::Protocol(_)
            | ureq::Error::BodyStalled => Failure::Connection,
            ureq::Error::Tls(_)
            | ureq::Error::Rustls(_)
            | ureq::Error::Pem(_)
            | ureq::Error::TlsRequired => Failure::Tls,
            _ => Failure::Request,
        }
    }

    /// The kind of a system error met connecting or reading.
    pub(crate) fn of_io(e: &io::Error) -> Failure {
        if let Some(inner) = e.get_ref().and_then(|i| i.downcast_ref()) {
            return Failure::of(inner);
        }
        match e.raw_os_error() {
            Some(
                libc::EAFNOSUPPORT
                | libc::EPROTONOSUPPORT
                | libc::EPERM
                | libc::EACCES,
            ) => Failure::Refused,
            _ if e.kind() == io::ErrorKind::TimedOut
                || e.kind() == io::ErrorKind::WouldBlock =>
            {
                Failure::Timeout
            }
            _ => Failure::Connection,
        }
    }
}

/// This crate's result.
pub type Result<T, E = RegistryError> = std::result::Result<T, E>;
