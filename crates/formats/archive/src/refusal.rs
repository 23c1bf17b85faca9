//! Why an archive member was refused.

use std::fmt;

/// Why an archive entry was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ArchiveRefusal {
    /// The name is absolute.
    AbsolutePath,
    /// The name has a `..` component.
    DotDot,
    /// Resolving it would leave the root.
    EscapesRoot,
    /// A directory on its path is a symlink, which is never followed.
    ThroughSymlink,
    /// A hard link to something outside the root or through a symlink.
    HardLinkOutside,
    /// A device node, and the caller did not allow them (install: the
    /// profile's `allow_devices`; provision: `--allow-devices`).
    DeviceNotAllowed,
    /// A non-directory where a directory is.
    FileOverDirectory,
    /// A directory where a symlink is.
    DirectoryOverSymlink,
    /// The archive is corrupt or truncated.
    Corrupt(String),
    /// The first member is not `zinstall.json`.
    MissingMetadata,
    /// `zinstall.json` is not valid.
    BadMetadata(String),
    /// A baseline where a layer was expected, or the reverse.
    WrongArchiveType {
        /// What was expected.
        expected: String,
        /// What the archive says it is.
        found: String,
    },
    /// An entry type that cannot be unpacked.
    UnsupportedEntryType(String),
    /// The archive (or its compressed stream) ends inside a member: `what`
    /// says where, e.g. `body`, `header`, `padding`.
    Truncated {
        /// The part being read when the data ran out.
        what: String,
    },
    /// The archive is compressed in a format zinstall recognises but
    /// does not read (legacy lzma, lzip, lzop, compress, legacy lz4):
    /// refused before any of it is read as tar.
    UnreadCompression {
        /// The format, e.g. `lzip`.
        format: String,
        /// The command that converts the file into one zinstall reads.
        convert: String,
    },
    /// The file is not an archive at all (an HTML page saved as
    /// `app.tar`): neither a compression's magic nor a tar header.
    NotAnArchive {
        /// What it looks like: `an HTML page`, `JSON`, `text`.
        looks: String,
        /// Its first bytes, quoted and cut short.
        starts: String,
    },
    /// A bound on declared sizes or counts was hit, checked before
    /// anything was allocated or written.
    LimitExceeded {
        /// What was counted, e.g. `total declared bytes`.
        what: String,
        /// The limit.
        limit: u64,
    },
}

impl fmt::Display for ArchiveRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArchiveRefusal::AbsolutePath => f.write_str("absolute path"),
            ArchiveRefusal::DotDot => f.write_str("path has a .. component"),
            ArchiveRefusal::EscapesRoot => f.write_str("path escapes the root"),
            ArchiveRefusal::ThroughSymlink => {
                f.write_str("path goes through a symlink")
            }
            ArchiveRefusal::HardLinkOutside => f.write_str(
                "hard link to a target outside the root or through a symlink",
            ),
            ArchiveRefusal::DeviceNotAllowed => {
                f.write_str("device node, and device nodes are not allowed")
            }
            ArchiveRefusal::FileOverDirectory => {
                f.write_str("would replace a directory with a non-directory")
            }
            ArchiveRefusal::DirectoryOverSymlink => {
                f.write_str("would replace a symlink with a directory")
            }
            ArchiveRefusal::Corrupt(why) => write!(f, "corrupt archive: {why}"),
            ArchiveRefusal::MissingMetadata => {
                f.write_str("first member is not zinstall.json")
            }
            ArchiveRefusal::BadMetadata(why) => {
                write!(f, "bad zinstall.json: {why}")
            }
            ArchiveRefusal::WrongArchiveType { expected, found } => {
                write!(f, "archive is a {found}, not a {expected}")
            }
            ArchiveRefusal::UnsupportedEntryType(t) => {
                write!(f, "unsupported entry type {t}")
            }
            ArchiveRefusal::Truncated { what } => {
                write!(f, "archive truncated in the {what}")
            }
            ArchiveRefusal::UnreadCompression { format, convert } => write!(
                f,
                "compressed with {format}, which zinstall does not read \
                 (it reads gzip, zstd, xz, bzip2 and lz4); convert it first: \
                 {convert}"
            ),
            ArchiveRefusal::NotAnArchive { looks, starts } => write!(
                f,
                "not an archive: it looks like {looks} (it starts with \
                 {starts}); give a tar archive (plain or compressed), an \
                 OCI image or a docker-archive"
            ),
            ArchiveRefusal::LimitExceeded { what, limit } => {
                write!(f, "{what} exceed the limit of {limit}")
            }
        }
    }
}

impl std::error::Error for ArchiveRefusal {}
