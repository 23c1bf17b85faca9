//! Refusals: why an entry was refused with no system call failing, and
//! what a write beneath a root met in its way. Each carries the words its
//! message prints, apart from the error type that wraps it.

use std::fmt;

/// Why an entry was refused without any system call failing.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The entry is no longer of the type the walk saw (replaced mid-copy).
    ChangedType,
    /// A device node, FIFO or socket that cannot be recreated here.
    Special,
    /// The destination holds a non-directory where the source has a
    /// directory (merging never replaces one by the other).
    Conflict,
    /// The destination holds a directory where the source has a
    /// non-directory (merging never replaces one by the other).
    DirectoryInTheWay,
    /// The destination exists and is not empty, and merging was not asked.
    NotEmpty,
    /// The destination file exists, and merging was not asked.
    Exists,
    /// The source is neither a directory nor a regular file or symlink.
    BadSource,
    /// The destination lies inside the source.
    DestinationInsideSource,
    /// A path meant to lie beneath a root is absolute or has `..`.
    NotBeneath,
    /// The source file changed (size or times) while it was copied, so
    /// the copy would match neither version.
    ChangedDuringCopy,
    /// A file read whole is larger than it may be.
    TooLarge(u64),
    /// A directory being copied was moved elsewhere while its contents
    /// were (its parent is no longer the one it was made in).
    Moved,
    /// A path a privileged process was to work in could have been
    /// redirected by another user (see [`crate::trusted`]): why.
    Untrusted(String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Refusal::TooLarge(max) = self {
            return write!(f, "larger than the {max} bytes it may hold");
        }
        if let Refusal::Untrusted(why) = self {
            return write!(f, "unsafe path: {why}");
        }
        f.write_str(match self {
            Refusal::TooLarge(_) => "too large",
            Refusal::Untrusted(_) => "unsafe path",
            Refusal::ChangedType => "changed type during the copy",
            Refusal::Special => {
                "special file not recreated (needs privilege; \
                 use --skip-special to skip such files)"
            }
            Refusal::Conflict => {
                "not a directory, where the source has a directory (one is \
                 never replaced by the other)"
            }
            Refusal::DirectoryInTheWay => {
                "a directory, where the source has a non-directory (one is \
                 never replaced by the other)"
            }
            Refusal::NotEmpty => {
                "destination is not empty (use --merge to copy into it)"
            }
            Refusal::Exists => {
                "destination exists (use --merge to overwrite it)"
            }
            Refusal::BadSource => "source is not a file, directory or symlink",
            Refusal::DestinationInsideSource => {
                "destination is inside the source"
            }
            Refusal::NotBeneath => "not a relative path of plain names",
            Refusal::ChangedDuringCopy => {
                "changed while it was copied (size or times differ); \
                 copy it again when it is not being written"
            }
            Refusal::Moved => "moved elsewhere during the copy",
        })
    }
}

/// What a write beneath a root met where it needed a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Met {
    /// A symlink, which is never followed inside a root.
    Symlink,
    /// Something that is not a directory.
    NotADirectory,
}

impl fmt::Display for Met {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Met::Symlink => "a symlink",
            Met::NotADirectory => "not a directory",
        })
    }
}
