//! Why an image was refused or could not be read: a leaf every part of
//! the crate names, so that none of them names the crate root.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::layout::{MAX_CHAIN, MAX_L1_ENTRIES};

/// Why an image was refused or could not be read.
#[derive(Debug)]
#[non_exhaustive]
pub enum Problem {
    /// Not a qcow2 image.
    BadMagic,
    /// A version other than 2 or 3.
    Version(u32),
    /// Incompatible feature bits this reader does not know (their mask).
    UnknownFeatures(u64),
    /// The image is encrypted (the `crypt_method`: 1 AES, 2 LUKS).
    Encrypted(u32),
    /// The data lives in an external file, and the image was opened
    /// alone (`Image::open`; `Image::open_chain` reads it), or the
    /// header names no such file.
    ExternalData,
    /// A backing file or data file name that is not followed: absolute,
    /// with `..`, through a symlink, or not a regular file.
    NameRefused {
        /// `backing file` or `data file`.
        what: &'static str,
        /// The name as recorded in the image.
        name: String,
        /// Why it is refused.
        why: String,
    },
    /// A backing chain longer than [`MAX_CHAIN`] images.
    ChainTooDeep {
        /// The images of the chain opened, from the top.
        chain: Vec<PathBuf>,
    },
    /// A backing chain that comes back to an image already in it.
    ChainLoop {
        /// The images of the chain opened, from the top; the last one
        /// names an earlier one as its backing file.
        chain: Vec<PathBuf>,
        /// The backing file name that closes the loop.
        name: String,
    },
    /// A backing file in a format other than qcow2 or raw.
    BackingFormat(String),
    /// A cluster size outside 512 B to 2 MiB.
    ClusterBits(u32),
    /// The image has a backing file of its own.
    HasBacking(String),
    /// A table or cluster lies outside the file, or is misaligned.
    Corrupt(String),
    /// A table or cluster offset that is not a multiple of the cluster
    /// size.
    Unaligned {
        /// What it is (`L1 table`, `L2 table`, `data cluster`).
        what: &'static str,
        /// Its offset in the file.
        offset: u64,
        /// The alignment it needs.
        align: u64,
    },
    /// A table or cluster that does not lie wholly inside the file.
    OutsideFile {
        /// What it is.
        what: &'static str,
        /// Its offset in the file.
        offset: u64,
        /// Its length.
        len: u64,
        /// The file's length.
        file_len: u64,
    },
    /// A virtual size whose L1 table would exceed QEMU's 32 MiB limit at
    /// this cluster size (or that is past what any qcow2 can map).
    TooLarge {
        /// The virtual size asked for or declared.
        size: u64,
        /// The cluster size.
        cluster_size: u64,
    },
    /// A compressed cluster did not inflate to a cluster.
    Decompress {
        /// Guest offset of the cluster.
        guest_offset: u64,
        /// The decoder's complaint.
        why: String,
    },
    /// A request the writer cannot satisfy (relative base, size).
    Invalid(String),
    /// `qemu-img` failed.
    QemuImg {
        /// Its exit status.
        status: String,
        /// Its standard error, trimmed.
        stderr: String,
    },
}

/// An error about one image: the image, and what went wrong.
#[derive(Debug)]
pub struct Error {
    /// The image.
    pub path: PathBuf,
    /// What went wrong.
    pub kind: ErrorKind,
}

/// What went wrong with an image: a system call, or the image itself.
#[derive(Debug)]
pub enum ErrorKind {
    /// An I/O operation failed.
    Io {
        /// What was being done (`read`, `create`, ...).
        op: &'static str,
        /// The system's error.
        error: io::Error,
    },
    /// The image is refused.
    Problem(Problem),
}

impl Error {
    /// A failed I/O operation `op` on `path`.
    pub fn io(
        path: impl Into<PathBuf>,
        op: &'static str,
        e: io::Error,
    ) -> Self {
        Error {
            path: path.into(),
            kind: ErrorKind::Io { op, error: e },
        }
    }

    /// The image at `path` refused for `p`.
    pub fn problem(path: impl Into<PathBuf>, p: Problem) -> Self {
        Error {
            path: path.into(),
            kind: ErrorKind::Problem(p),
        }
    }

    /// The problem, if the image was refused.
    pub fn refusal(&self) -> Option<&Problem> {
        match &self.kind {
            ErrorKind::Problem(p) => Some(p),
            ErrorKind::Io { .. } => None,
        }
    }

    /// The system's error, if an I/O operation failed.
    pub fn io_error(&self) -> Option<&io::Error> {
        match &self.kind {
            ErrorKind::Io { error, .. } => Some(error),
            ErrorKind::Problem(_) => None,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::BadMagic => write!(f, "not a qcow2 image (bad magic)"),
            Problem::Version(v) => write!(f, "unsupported qcow2 version {v}"),
            Problem::UnknownFeatures(m) => {
                write!(f, "unknown incompatible features {m:#x}")
            }
            Problem::Encrypted(m) => write!(
                f,
                "encrypted ({}); reading it needs its key: decrypt a copy \
                 first with qemu-img convert --object \
                 secret,id=sec0,file=KEYFILE --image-opts \
                 driver=qcow2,file.filename=IMAGE,encrypt.key-secret=sec0 \
                 -O qcow2 PLAIN.qcow2",
                match m {
                    1 => "legacy AES",
                    2 => "LUKS",
                    _ => "unknown method",
                }
            ),
            Problem::ExternalData => write!(
                f,
                "its data is in an external data file, which is not opened \
                 here (or the header names none)"
            ),
            Problem::NameRefused { what, name, why } => {
                write!(f, "{what} {name:?} refused: {why}")
            }
            Problem::ChainTooDeep { chain } => write!(
                f,
                "backing chain deeper than {MAX_CHAIN} images: {}",
                show_chain(chain)
            ),
            Problem::ChainLoop { chain, name } => write!(
                f,
                "backing chain loops: {} names {name:?}, already in the chain",
                show_chain(chain)
            ),
            Problem::BackingFormat(fmt) => write!(
                f,
                "backing file format {fmt:?} is not read natively (qcow2 and \
                 raw are); flatten the image first (qemu-img convert -O qcow2)"
            ),
            Problem::ClusterBits(b) => {
                write!(f, "unsupported cluster_bits {b}")
            }
            Problem::HasBacking(b) => write!(
                f,
                "image has a backing file of its own ({b}); flatten it first \
                 (qemu-img convert)"
            ),
            Problem::Corrupt(why) => write!(f, "corrupt image: {why}"),
            Problem::Unaligned {
                what,
                offset,
                align,
            } => write!(
                f,
                "corrupt image: {what} at {offset:#x} is unaligned (not a \
                 multiple of {align:#x})"
            ),
            Problem::OutsideFile {
                what,
                offset,
                len,
                file_len,
            } => write!(
                f,
                "corrupt image: {what} at {offset:#x} ({len} bytes) lies \
                 outside the file ({file_len} bytes)"
            ),
            Problem::TooLarge { size, cluster_size } => write!(
                f,
                "virtual size {size} is too large for {cluster_size}-byte \
                 clusters: its L1 table would exceed {MAX_L1_ENTRIES} \
                 entries (32 MiB, QEMU's limit)"
            ),
            Problem::Decompress { guest_offset, why } => write!(
                f,
                "compressed cluster at guest offset {guest_offset:#x}: {why}"
            ),
            Problem::Invalid(why) => f.write_str(why),
            Problem::QemuImg { status, stderr } => {
                write!(f, "qemu-img failed ({status}): {stderr}")
            }
        }
    }
}

fn show_chain(chain: &[PathBuf]) -> String {
    chain
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(" -> ")
}

impl Problem {
    /// Whether the image is refused for a feature this reader lacks
    /// (`qemu-img` may read it), not for being corrupt or hostile.
    pub fn is_unsupported(&self) -> bool {
        matches!(
            self,
            Problem::Version(_)
                | Problem::UnknownFeatures(_)
                | Problem::Encrypted(_)
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "qcow2 {}: ", self.path.display())?;
        match &self.kind {
            ErrorKind::Io { op, error } => write!(f, "{op}: {error}"),
            ErrorKind::Problem(p) => write!(f, "{p}"),
        }
    }
}

/// The system's error is in the message, so no `source()`
/// (CONTRIBUTING.md: a cause is said once).
impl std::error::Error for Error {}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;
