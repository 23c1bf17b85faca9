//! Errors of a tar stream: what is wrong, with the member and offset, and
//! how each maps to an `io::Error` or an [`ArchiveRefusal`].

use std::fmt;
use std::io;

use crate::ArchiveRefusal;

/// What is wrong with an archive.
#[derive(Debug)]
#[non_exhaustive]
pub enum TarErrorKind {
    /// Reading the underlying stream failed (a decompressor's corruption
    /// errors arrive here too).
    Io(io::Error),
    /// The stream ends inside this part of a member.
    Truncated(&'static str),
    /// The header's checksum does not match its bytes.
    Checksum {
        /// The checksum field; `None` when it is not a number.
        stored: Option<u64>,
        /// The sum of the bytes.
        computed: u64,
    },
    /// A header field cannot be decoded or is out of range.
    Field {
        /// Its name.
        field: &'static str,
        /// Why.
        why: String,
    },
    /// A PAX extended header is malformed or holds a bad value.
    Pax(String),
    /// A sparse map is malformed or inconsistent.
    Sparse(String),
    /// An ACL record cannot be turned into an xattr.
    Acl(String),
    /// Something else about the member's structure is wrong.
    Malformed(String),
    /// A format feature this reader does not take.
    Unsupported(String),
    /// A bound of [`Limits`](super::limits::Limits) was hit.
    Limit {
        /// What was counted.
        what: &'static str,
        /// The limit.
        limit: u64,
    },
}

/// An error naming the member (when there is one) and its offset.
#[derive(Debug)]
pub struct TarError {
    /// The member's name (lossy), empty before a name is known.
    pub member: String,
    /// Offset of the member's first header, or of the failing block.
    pub offset: u64,
    /// What is wrong.
    pub kind: TarErrorKind,
}

impl fmt::Display for TarErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TarErrorKind::Io(e) => write!(f, "read failed: {e}"),
            TarErrorKind::Truncated(part) => {
                write!(f, "truncated in the {part}")
            }
            TarErrorKind::Checksum {
                stored: None,
                computed,
            } => write!(
                f,
                "header checksum field is not a number (bytes sum to {computed})"
            ),
            TarErrorKind::Checksum {
                stored: Some(stored),
                computed,
            } => write!(
                f,
                "header checksum mismatch: field says {stored}, bytes sum to {computed}"
            ),
            TarErrorKind::Field { field, why } => {
                write!(f, "bad {field} field: {why}")
            }
            TarErrorKind::Pax(why) => {
                write!(f, "bad PAX extended header: {why}")
            }
            TarErrorKind::Sparse(why) => write!(f, "bad sparse map: {why}"),
            TarErrorKind::Acl(why) => write!(f, "bad ACL: {why}"),
            TarErrorKind::Malformed(why) => f.write_str(why),
            TarErrorKind::Unsupported(why) => write!(f, "unsupported: {why}"),
            TarErrorKind::Limit { what, limit } => {
                write!(f, "{what} exceed the limit of {limit}")
            }
        }
    }
}

impl fmt::Display for TarError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.member.is_empty() {
            write!(f, "at offset {}: {}", self.offset, self.kind)
        } else {
            write!(
                f,
                "member {:?} (header at offset {}): {}",
                self.member, self.offset, self.kind
            )
        }
    }
}

/// A read's error is in the message, so no `source()`
/// (CONTRIBUTING.md: a cause is said once).
impl std::error::Error for TarError {}

impl From<TarError> for io::Error {
    /// Truncation reads as `UnexpectedEof`, I/O errors keep their kind,
    /// the rest is `InvalidData`; [`TarError::from_io`] gets it back.
    fn from(e: TarError) -> io::Error {
        let kind = match &e.kind {
            TarErrorKind::Truncated(_) => io::ErrorKind::UnexpectedEof,
            TarErrorKind::Io(io) => io.kind(),
            _ => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, e)
    }
}

impl TarError {
    /// The `TarError` inside an `io::Error` from a `Body` read, or the
    /// `io::Error` itself as [`TarErrorKind::Io`] (member unknown).
    pub fn from_io(e: io::Error) -> TarError {
        let e = if e.get_ref().is_some_and(|i| i.is::<TarError>()) {
            let kind = e.kind();
            match e.into_inner().map(|i| i.downcast::<TarError>()) {
                Some(Ok(t)) => return *t,
                _ => io::Error::from(kind),
            }
        } else {
            e
        };
        TarError {
            member: String::new(),
            offset: 0,
            kind: TarErrorKind::Io(e),
        }
    }

    /// Is this the stream ending early (in the tar data or beneath it)?
    pub fn is_truncated(&self) -> bool {
        match &self.kind {
            TarErrorKind::Truncated(_) => true,
            TarErrorKind::Io(e) => e.kind() == io::ErrorKind::UnexpectedEof,
            _ => false,
        }
    }

    /// What this error means for the archive as a whole: the member it
    /// met (if any) and either the reason that member is refused
    /// (truncation, limits and corruption each with their
    /// [`ArchiveRefusal`]) or, for a failed read of the file itself, the
    /// I/O error.
    pub fn into_refusal(self) -> (String, Result<ArchiveRefusal, io::Error>) {
        let reason = match self.kind {
            TarErrorKind::Io(e) if e.raw_os_error().is_some() => {
                return (self.member, Err(e));
            }
            TarErrorKind::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                ArchiveRefusal::Truncated {
                    what: format!("compressed stream ({e})"),
                }
            }
            TarErrorKind::Io(e) => ArchiveRefusal::Corrupt(e.to_string()),
            TarErrorKind::Truncated(part) => {
                ArchiveRefusal::Truncated { what: part.into() }
            }
            TarErrorKind::Limit { what, limit } => {
                ArchiveRefusal::LimitExceeded {
                    what: what.into(),
                    limit,
                }
            }
            TarErrorKind::Unsupported(why) => {
                ArchiveRefusal::UnsupportedEntryType(why)
            }
            other => ArchiveRefusal::Corrupt(format!(
                "{other} (at offset {})",
                self.offset
            )),
        };
        (self.member, Ok(reason))
    }
}
