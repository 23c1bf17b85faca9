//! What can go wrong in provisioning, each with the path (or image) and
//! the operation.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use zinstall_engine::Op;
use zinstall_qcow2 as qcow2;

use crate::options::ProvisionOptions;

/// Why an image was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ImageProblem {
    /// Its SHA-256 is not the one the caller expected.
    ChecksumMismatch {
        /// Expected digest, hex.
        expected: String,
        /// Digest of the bytes read, hex.
        found: String,
    },
    /// The image ended before its format said it would.
    Truncated,
    /// A compressed stream is corrupt.
    Corrupt(String),
    /// The image is of a kind this operation does not take.
    Unsupported(String),
    /// The image changed (size, mtime or ctime) while it was read.
    ChangedWhileRead,
    /// The image's tree holds device nodes (its cache entry, named,
    /// was built by a provision that allowed them), and this provision
    /// does not allow them.
    Devices {
        /// The cache entry.
        entry: String,
    },
    /// Decompressed, the image is larger than the bound set.
    TooLarge {
        /// The bound, bytes.
        limit: u64,
    },
    /// A qcow2 image's clusters hold more data than the bound set.
    DataTooLarge {
        /// Bytes of data its tables map.
        data: u64,
        /// The bound, bytes.
        limit: u64,
    },
    /// A disk image format zinstall reads only through `qemu-img` (VMDK,
    /// VDI, ...), and there is none.
    ForeignDisk {
        /// The format's name.
        format: String,
        /// Its name for `qemu-img -f`.
        qemu_format: String,
        /// The compression around it, if any.
        compression: Option<String>,
    },
}

impl fmt::Display for ImageProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageProblem::ChecksumMismatch { expected, found } => write!(
                f,
                "checksum mismatch: expected sha256 {expected}, read {found}"
            ),
            ImageProblem::Truncated => f.write_str("truncated image"),
            ImageProblem::Corrupt(why) => write!(f, "corrupt image: {why}"),
            ImageProblem::Unsupported(why) => {
                write!(f, "unsupported image: {why}")
            }
            ImageProblem::ChangedWhileRead => f.write_str(
                "the image changed while it was read; nothing was kept",
            ),
            ImageProblem::Devices { entry } => write!(
                f,
                "holds device nodes (its cache entry {entry} was built \
                 with them allowed); provision --allow-devices makes \
                 them, as root"
            ),
            ImageProblem::TooLarge { limit } => write!(
                f,
                "decompressed, it is larger than {limit} bytes (the \
                 --max-archive-size bound)"
            ),
            ImageProblem::DataTooLarge { data, limit } => write!(
                f,
                "its clusters hold {data} bytes of data, more than {limit} \
                 (the --max-archive-size bound); nothing was written"
            ),
            ImageProblem::ForeignDisk {
                format,
                qemu_format,
                compression,
            } => {
                write!(f, "a {format} disk image")?;
                if let Some(c) = compression {
                    write!(f, " inside {c}")?;
                }
                write!(
                    f,
                    ", which zinstall reads through qemu-img, and there is \
                     no qemu-img on PATH (install it, or name it with \
                     --qemu-img); or convert it first: qemu-img convert -f \
                     {qemu_format} -O qcow2 IMAGE IMAGE.qcow2"
                )?;
                if compression.is_some() {
                    f.write_str(" (after decompressing it)")?;
                }
                Ok(())
            }
        }
    }
}

/// A provisioning or cache failure.
#[derive(Debug)]
#[non_exhaustive]
pub enum ProvisionError {
    /// A filesystem operation in the cache or a guest failed or was
    /// refused (the engine's error: operation, path, errno), or an
    /// archive member was refused.
    Fs(zinstall_engine::Error),
    /// Copying a cached tree into a guest failed: every error the copy
    /// met.
    Copy(zinstall_engine::Failure),
    /// An image's content is not what it must be.
    Image {
        /// The image file.
        path: PathBuf,
        /// What is wrong.
        problem: ImageProblem,
    },
    /// From the qcow2 reader or overlay writer (image, offset, cause).
    Qcow2(qcow2::Error),
    /// A guest that already exists (and replacing it was not asked).
    GuestExists(PathBuf),
    /// Where the guests were to go is there and is not a directory.
    OutNotDirectory(PathBuf),
    /// A hostname pattern that makes no valid hostname: why.
    BadHostname(HostnameError),
    /// A customisation option refused: its value, or what it names on
    /// this host or in the image or guest.
    Customize {
        /// The option, as typed (`--ssh-inject`).
        option: &'static str,
        /// Its value as given (never a password).
        value: String,
        /// The file it is about (a key file, the image's `/etc/passwd`,
        /// a guest's file); empty when none.
        path: PathBuf,
        /// What is wrong, and what to do.
        why: String,
    },
    /// A `--run` or `--run-command` failed in a directory guest: it could
    /// not be started there, exited non-zero, was killed, or ran past
    /// `--run-timeout`. The guest is removed with the rest of the run.
    Run {
        /// The guest it ran in.
        guest: PathBuf,
        /// The option and its value, as typed (`--run-command "false"`).
        step: String,
        /// How it ended, or why it could not start.
        end: String,
        /// The guest's log of what its commands wrote.
        log: PathBuf,
    },
    /// More guests than [`ProvisionOptions::MAX_GUESTS`].
    TooManyGuests(usize),
    /// A virtual size larger than a qcow2 overlay can have
    /// ([`qcow2::MAX_OVERLAY_SIZE`]).
    SizeTooLarge(u64),
    /// A program (`qemu-img`) could not be run.
    Program {
        /// The program, as given.
        program: PathBuf,
        /// What it was to make.
        target: PathBuf,
        /// Why it could not be run.
        source: io::Error,
    },
    /// A program (`qemu-img`) ran and failed.
    ProgramFailed {
        /// The program.
        program: PathBuf,
        /// What it was to make.
        target: PathBuf,
        /// Its exit status.
        status: String,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// A customisation option, or a file it names, refused before any
    /// guest was made (a key file that holds no SSH public key, a
    /// password file others may read, user-data cloud-config cannot be
    /// merged into).
    Seed {
        /// The option (`--ssh-inject`), or the options.
        option: String,
        /// The file it names; empty when it is the value itself.
        path: PathBuf,
        /// What is wrong, and what to do.
        why: String,
    },
    /// An image could not be pulled from its registry.
    Pull(zinstall_registry::RegistryError),
    /// A composefs step failed: the entry's image written into the
    /// cache's store, a guest's root mounted or unmounted, its record
    /// written; or composefs guests asked for where there are none.
    Composefs {
        /// The path it is about (the store, an object, a guest's root).
        path: PathBuf,
        /// The step, its cause and what to do (composefs's own error,
        /// which names the path and operation too).
        why: String,
    },
    /// A provision failed and what it had made could not all be removed:
    /// the failure, then what is left.
    Cleanup {
        /// Why the provision failed.
        failure: Box<ProvisionError>,
        /// Guests that could not be removed, with why.
        left: Vec<(PathBuf, String)>,
    },
}

/// The provisioning library's result.
pub(crate) type Result<T, E = ProvisionError> = std::result::Result<T, E>;

impl ProvisionError {
    /// A failed filesystem operation `op` on `path`.
    pub(crate) fn io(
        op: Op,
        path: impl Into<PathBuf>,
        source: io::Error,
    ) -> Self {
        ProvisionError::Fs(zinstall_engine::Error::io(op, path, source))
    }

    /// A failed operation `op` on `path` involving a second path
    /// `target` (a rename's destination).
    pub(crate) fn io2(
        op: Op,
        path: impl Into<PathBuf>,
        target: impl Into<PathBuf>,
        source: io::Error,
    ) -> Self {
        ProvisionError::Fs(zinstall_engine::Error::io2(
            op, path, target, source,
        ))
    }

    /// The path the error is about (the guest, the image, the cache
    /// file); empty when there is none.
    pub fn path(&self) -> &Path {
        match self {
            ProvisionError::Fs(e) => e.path(),
            ProvisionError::Copy(f) => {
                f.first().map_or(Path::new(""), |e| e.path())
            }
            ProvisionError::Image { path, .. } => path,
            ProvisionError::Qcow2(e) => &e.path,
            ProvisionError::GuestExists(p)
            | ProvisionError::OutNotDirectory(p) => p,
            ProvisionError::Program { program, .. }
            | ProvisionError::ProgramFailed { program, .. } => program,
            ProvisionError::Cleanup { failure, .. } => failure.path(),
            ProvisionError::Seed { path, .. } => path,
            ProvisionError::Customize { path, .. } => path,
            ProvisionError::Run { guest, .. } => guest,
            ProvisionError::Composefs { path, .. } => path,
            ProvisionError::Pull(_)
            | ProvisionError::TooManyGuests(_)
            | ProvisionError::SizeTooLarge(_)
            | ProvisionError::BadHostname(_) => Path::new(""),
        }
    }

    /// The errno behind the error, if a system call failed.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            ProvisionError::Fs(e) => e.raw_os_error(),
            ProvisionError::Copy(f) => f.first().and_then(|e| e.raw_os_error()),
            ProvisionError::Qcow2(e) => {
                e.io_error().and_then(|i| i.raw_os_error())
            }
            ProvisionError::Program { source, .. } => source.raw_os_error(),
            ProvisionError::Cleanup { failure, .. } => failure.raw_os_error(),
            _ => None,
        }
    }
}

impl fmt::Display for ProvisionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProvisionError::Fs(e) => {
                write!(f, "{e}")?;
                if let zinstall_engine::Error::Archive {
                    reason: zinstall_archive::ArchiveRefusal::DeviceNotAllowed,
                    ..
                } = e
                {
                    f.write_str(
                        " (provision --allow-devices makes them, as root)",
                    )?;
                }
                Ok(())
            }
            ProvisionError::Copy(e) => write!(f, "{e}"),
            ProvisionError::Image { path, problem } => {
                write!(f, "{}: {problem}", path.display())
            }
            ProvisionError::Qcow2(e) => write!(f, "{e}"),
            ProvisionError::GuestExists(p) => write!(
                f,
                "{}: guest exists already (--force replaces it)",
                p.display()
            ),
            ProvisionError::OutNotDirectory(p) => write!(
                f,
                "{}: not a directory; the guests are made inside the \
                 directory --out names (it is made if missing)",
                p.display()
            ),
            ProvisionError::BadHostname(why) => write!(f, "{why}"),
            ProvisionError::Seed { option, path, why } => {
                if path.as_os_str().is_empty() {
                    write!(f, "{option}: {why}")
                } else {
                    write!(f, "{option} {}: {why}", path.display())
                }
            }
            ProvisionError::Customize {
                option,
                value,
                path,
                why,
            } => {
                write!(f, "{option} {value:?}: ")?;
                if !path.as_os_str().is_empty() {
                    write!(f, "{}: ", path.display())?;
                }
                f.write_str(why)
            }
            ProvisionError::Run {
                guest,
                step,
                end,
                log,
            } => write!(
                f,
                "guest {}: {step} {end}; the guest is removed, and what \
                 the commands wrote is in {}",
                guest.display(),
                log.display()
            ),
            ProvisionError::Pull(e) => write!(f, "{e}"),
            ProvisionError::Composefs { why, .. } => f.write_str(why),
            ProvisionError::TooManyGuests(n) => {
                write!(
                    f,
                    "{n} guests asked for; at most {}",
                    ProvisionOptions::MAX_GUESTS
                )
            }
            ProvisionError::SizeTooLarge(s) => write!(
                f,
                "virtual size {s} is larger than a qcow2 overlay can be \
                 ({} bytes, 2 PiB)",
                qcow2::MAX_OVERLAY_SIZE
            ),
            ProvisionError::Program {
                program,
                target,
                source,
            } => write!(
                f,
                "{}: cannot run it to make {}: {source}",
                program.display(),
                target.display()
            ),
            ProvisionError::ProgramFailed {
                program,
                target,
                status,
                stderr,
            } => write!(
                f,
                "{} failed making {} ({status}): {stderr}",
                program.display(),
                target.display()
            ),
            ProvisionError::Cleanup { failure, left } => {
                write!(f, "{failure}; and could not remove what it made:")?;
                for (p, why) in left {
                    write!(f, " {}: {why};", p.display())?;
                }
                Ok(())
            }
        }
    }
}

/// A hostname a `--hostname` pattern makes for a guest that is not one.
#[derive(Debug, thiserror::Error)]
#[error("hostname {hostname:?} (from {pattern:?}): {problem}")]
pub struct HostnameError {
    /// The hostname made.
    pub hostname: String,
    /// The pattern it was made from.
    pub pattern: String,
    /// What is wrong with it.
    pub problem: HostnameProblem,
}

/// What is wrong with a hostname (RFC 1123).
#[derive(Debug, thiserror::Error)]
pub enum HostnameProblem {
    /// Empty, or longer than 64 bytes.
    #[error("must be 1 to 64 bytes")]
    Length,
    /// A label that is empty, of other characters, or with a hyphen at
    /// either end.
    #[error(
        "each dot-separated label must be letters, digits and inner hyphens"
    )]
    Label,
}

/// Every cause is in the message, so no `source()` (CONTRIBUTING.md: a
/// cause is said once).
impl std::error::Error for ProvisionError {}

impl From<zinstall_engine::Error> for ProvisionError {
    fn from(e: zinstall_engine::Error) -> Self {
        ProvisionError::Fs(e)
    }
}

impl From<zinstall_registry::RegistryError> for ProvisionError {
    fn from(e: zinstall_registry::RegistryError) -> Self {
        match e {
            // Refused as any OCI image is: said the same way.
            zinstall_registry::RegistryError::Image(e) => {
                ProvisionError::Fs(zinstall_engine::Error::Oci(e))
            }
            e => ProvisionError::Pull(e),
        }
    }
}

impl From<qcow2::Error> for ProvisionError {
    fn from(e: qcow2::Error) -> Self {
        ProvisionError::Qcow2(e)
    }
}

impl From<zinstall_engine::Failure> for ProvisionError {
    fn from(f: zinstall_engine::Failure) -> Self {
        ProvisionError::Copy(f)
    }
}
