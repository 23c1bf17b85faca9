//! Errors that name the operation and the path.
//!
//! Every filesystem failure the engine meets becomes an [`Error`] carrying
//! the operation that failed ([`Op`]), the path it was applied to, the
//! second path when there is one (the destination of a copy, the target
//! of a link), and the `io::Error` underneath with its errno intact. Its
//! display reads like the failing call:
//!
//! ```text
//! copy_file_range /a/b -> /x/b: No space left on device (os error 28)
//! ```

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

pub use zinstall_archive::ArchiveRefusal;

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The operation that failed, named after the system call or step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// Reading a directory's entries during the walk.
    ReadDir,
    /// `lstat(2)` or `fstat(2)`.
    Stat,
    /// Opening a source file.
    Open,
    /// Creating a destination file.
    Create,
    /// `mkdir(2)`.
    Mkdir,
    /// `read(2)`.
    Read,
    /// `write(2)`.
    Write,
    /// `lseek(2)` with `SEEK_DATA`/`SEEK_HOLE`.
    Seek,
    /// `ioctl(FICLONE)`.
    Clone,
    /// `copy_file_range(2)`.
    CopyFileRange,
    /// `ftruncate(2)`.
    Truncate,
    /// `readlink(2)`.
    Readlink,
    /// `symlink(2)`.
    Symlink,
    /// `link(2)`.
    Link,
    /// `mknod(2)` / `mkfifo(3)`.
    Mknod,
    /// `fchown(2)` / `lchown(2)`.
    Chown,
    /// `fchmod(2)` / `chmod(2)`.
    Chmod,
    /// `futimens(2)` / `utimensat(2)`.
    SetTimes,
    /// `listxattr(2)`.
    ListXattr,
    /// `getxattr(2)`.
    GetXattr,
    /// `setxattr(2)`.
    SetXattr,
    /// `rename(2)`.
    Rename,
    /// `unlink(2)` / `rmdir(2)`.
    Remove,
    /// `syncfs(2)`.
    Sync,
    /// Reading a defaults file.
    ReadDefaults,
    /// Checking that a source entry still is what the walk saw.
    Check,
    /// Taking or releasing a `flock(2)` lock.
    Lock,
    /// Writing a cache entry's bookkeeping (metadata, index, users).
    Record,
    /// Taking on a caller's identity for a run (`setfsuid(2)`,
    /// `setfsgid(2)`, `setgroups(2)`).
    Credentials,
}

impl Op {
    /// The name printed in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::ReadDir => "readdir",
            Op::Stat => "stat",
            Op::Open => "open",
            Op::Create => "create",
            Op::Mkdir => "mkdir",
            Op::Read => "read",
            Op::Write => "write",
            Op::Seek => "lseek",
            Op::Clone => "ioctl(FICLONE)",
            Op::CopyFileRange => "copy_file_range",
            Op::Truncate => "ftruncate",
            Op::Readlink => "readlink",
            Op::Symlink => "symlink",
            Op::Link => "link",
            Op::Mknod => "mknod",
            Op::Chown => "chown",
            Op::Chmod => "chmod",
            Op::SetTimes => "utimensat",
            Op::ListXattr => "listxattr",
            Op::GetXattr => "getxattr",
            Op::SetXattr => "setxattr",
            Op::Rename => "rename",
            Op::Remove => "remove",
            Op::Sync => "syncfs",
            Op::ReadDefaults => "read defaults",
            Op::Check => "check",
            Op::Lock => "flock",
            Op::Record => "record",
            Op::Credentials => "setfsuid",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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

/// Why a defaults file was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DefaultsProblem {
    /// A line that is neither blank, a `#` comment nor `KEY=value`.
    Malformed,
    /// The same key set twice.
    Duplicate {
        /// Line of the first setting.
        first_line: usize,
    },
    /// A value that is not a number.
    NotANumber,
    /// A word that is not one of the key's values.
    NotOneOf {
        /// The values the key takes.
        choices: &'static [&'static str],
    },
    /// A number outside the accepted range.
    OutOfRange {
        /// Smallest accepted value.
        min: u64,
        /// Largest accepted value.
        max: u64,
    },
    /// A key zinstall does not read: a typo, most likely.
    UnknownKey {
        /// The known key closest to it, if one is close.
        nearest: Option<&'static str>,
    },
    /// `export KEY=value`: defread(3C) does not read it.
    Export,
    /// The file is longer than any defaults file needs to be.
    TooLong {
        /// The most bytes read.
        max: u64,
    },
}

/// An error of the engine.
///
/// The variants are public so callers can match on them; use
/// [`Error::path`] and [`Error::io_error`] to reach the common parts.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A system call failed.
    #[error("{op} {}{}: {source}", path.display(), Arrow(target.as_deref()))]
    Io {
        /// What was being done.
        op: Op,
        /// The path it was done to.
        path: PathBuf,
        /// The second path of the operation (copy or link destination).
        target: Option<PathBuf>,
        /// The underlying error, errno intact.
        source: io::Error,
    },
    /// An extended attribute could not be read or written.
    #[error("{op} {} ({name}): {source}", path.display())]
    Attr {
        /// `ListXattr`, `GetXattr` or `SetXattr`.
        op: Op,
        /// The file.
        path: PathBuf,
        /// The attribute's name.
        name: String,
        /// The underlying error.
        source: io::Error,
    },
    /// An archive entry was refused, or the archive itself.
    #[error("{}: {}{reason}", archive.display(), EntryName(entry))]
    Archive {
        /// The archive file.
        archive: PathBuf,
        /// The entry's name as the archive gives it (lossy), or empty.
        entry: String,
        /// Why.
        reason: ArchiveRefusal,
    },
    /// The run was cancelled ([`crate::Cancel`]) before it finished.
    #[error("{}: cancelled", path.display())]
    Cancelled {
        /// The run's destination (or the archive being unpacked).
        path: PathBuf,
    },
    /// An entry was refused.
    #[error("{}: {reason}", path.display())]
    Refused {
        /// The entry.
        path: PathBuf,
        /// Why.
        reason: Refusal,
    },
    /// A write beneath a root met a symlink or a non-directory where it
    /// needed a directory; nothing was written through it.
    #[error(
        "{}{} is {met} inside the root; nothing is written through it",
        Wanted(path, at),
        at.display()
    )]
    Beneath {
        /// What was to be written (or the directory to open).
        path: PathBuf,
        /// The component that is in the way.
        at: PathBuf,
        /// What it is.
        met: Met,
    },
    /// A removal stopped at mount points inside the tree and left them,
    /// with everything in them; the rest was removed.
    #[error(
        "remove {}: left {} mount point(s) in place with everything in them \
         (unmount them and remove again): {}",
        path.display(),
        mounts.len(),
        Paths(mounts)
    )]
    MountsLeft {
        /// The tree being removed.
        path: PathBuf,
        /// The mount points met, in the order found.
        mounts: Vec<PathBuf>,
    },
    /// A defaults file (or environment setting) is malformed.
    #[error("{}{}: {}", file.display(), LineNo(*line), DefaultsMsg(problem, key, value))]
    Defaults {
        /// The file, or `environment` for an environment variable.
        file: PathBuf,
        /// 1-based line number; 0 when not from a file.
        line: usize,
        /// The key, when known.
        key: String,
        /// The offending text.
        value: String,
        /// What is wrong with it.
        problem: DefaultsProblem,
    },
    /// An OCI image was refused or could not be read: a blob that is not
    /// what its descriptor says, a layer's diff_id, the platform, the
    /// layout (image, blob and why).
    #[error(transparent)]
    Oci(#[from] zinstall_oci::Error),
    /// A rule pattern does not compile.
    #[error("bad rule pattern {pattern:?}: {message}")]
    Rule {
        /// The pattern as given.
        pattern: String,
        /// The glob compiler's explanation.
        message: String,
    },
}

/// Where a file does not parse, and why, shown as compilers show it:
///
/// ```text
/// /etc/zinstall/profile.toml:2:1: missing comma between array elements
///   |
/// 2 | log = 3
///   | ^
/// ```
///
/// Parsers of configuration (profiles, `zinstalld.toml`, statemaps) make
/// one from their error's position in the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Syntax {
    /// The file.
    pub file: PathBuf,
    /// The line, from 1 (0: the position is unknown).
    pub line: usize,
    /// The column, from 1, in characters.
    pub column: usize,
    /// The line's text, control characters shown escaped.
    pub text: String,
    /// How many characters the caret line marks (at least 1).
    pub width: usize,
    /// What is wrong.
    pub message: String,
}

impl Syntax {
    /// The error at byte range `span` of `source`, the text of `file`
    /// (no span: the position is unknown).
    pub fn at(
        file: impl Into<PathBuf>,
        source: &str,
        span: Option<std::ops::Range<usize>>,
        message: impl Into<String>,
    ) -> Syntax {
        let mut s = Syntax {
            file: file.into(),
            line: 0,
            column: 0,
            text: String::new(),
            width: 1,
            message: message.into().trim_end().to_string(),
        };
        let Some(span) = span else { return s };
        let start = floor_char(source, span.start.min(source.len()));
        let end = floor_char(source, span.end.clamp(start, source.len()));
        let line_start = source[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = source[start..]
            .find('\n')
            .map_or(source.len(), |i| start + i);
        let line = source[line_start..line_end].trim_end_matches('\r');
        s.line = source[..start].matches('\n').count() + 1;
        s.column = source[line_start..start].chars().count() + 1;
        s.text = line.chars().map(visible).collect();
        s.width = source[start..end.min(line_end).max(start)]
            .chars()
            .count()
            .max(1);
        // A long line (a statemap's, a minified file's) is shown around
        // the column only.
        let len = s.text.chars().count();
        if len > Self::MAX_SHOWN {
            let from = (s.column - 1).saturating_sub(Self::MAX_SHOWN / 2);
            let from = from.min(len - Self::MAX_SHOWN);
            let window: String =
                s.text.chars().skip(from).take(Self::MAX_SHOWN).collect();
            s.text = format!(
                "{}{window}{}",
                if from > 0 { "..." } else { "" },
                if from + Self::MAX_SHOWN < len {
                    "..."
                } else {
                    ""
                }
            );
            s.column = s.column - from + if from > 0 { 3 } else { 0 };
            s.width = s.width.min(Self::MAX_SHOWN);
        }
        s
    }

    /// The most characters of the line shown.
    pub const MAX_SHOWN: usize = 120;

    /// The error at `line` and `column` (from 1) of `source`.
    pub fn at_line(
        file: impl Into<PathBuf>,
        source: &str,
        line: usize,
        column: usize,
        message: impl Into<String>,
    ) -> Syntax {
        let offset = source
            .split_inclusive('\n')
            .take(line.saturating_sub(1))
            .map(str::len)
            .sum::<usize>();
        let in_line = source[offset.min(source.len())..]
            .chars()
            .take(column.saturating_sub(1))
            .map(char::len_utf8)
            .sum::<usize>();
        let at = offset + in_line;
        Syntax::at(file, source, (line > 0).then_some(at..at), message)
    }
}

/// The largest char boundary at or below `i`.
fn floor_char(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// A character as it is shown in the quoted line: tabs as a space (so
/// the caret stays under it), other control characters as `?`.
fn visible(c: char) -> char {
    match c {
        '\t' => ' ',
        c if c.is_control() => '?',
        c => c,
    }
}

impl fmt::Display for Syntax {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            return write!(f, "{}: {}", self.file.display(), self.message);
        }
        write!(
            f,
            "{}:{}:{}: {}",
            self.file.display(),
            self.line,
            self.column,
            self.message.replace('\n', "; ")
        )?;
        let gutter = " ".repeat(self.line.to_string().len());
        write!(
            f,
            "\n{gutter} |\n{} | {}\n{gutter} | {}{}",
            self.line,
            self.text,
            " ".repeat(self.column - 1),
            "^".repeat(self.width)
        )
    }
}

impl std::error::Error for Syntax {}

struct Arrow<'a>(Option<&'a Path>);

impl fmt::Display for Arrow<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(p) => write!(f, " -> {}", p.display()),
            None => Ok(()),
        }
    }
}

/// Paths separated by commas.
struct Paths<'a>(&'a [PathBuf]);

impl fmt::Display for Paths<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}", p.display())?;
        }
        Ok(())
    }
}

/// `PATH: ` before what is in its way, unless that is the path itself.
struct Wanted<'a>(&'a Path, &'a Path);

impl fmt::Display for Wanted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == self.1 {
            Ok(())
        } else {
            write!(f, "{}: ", self.0.display())
        }
    }
}

struct EntryName<'a>(&'a str);

impl fmt::Display for EntryName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, "entry {:?}: ", self.0)
        }
    }
}

struct LineNo(usize);

impl fmt::Display for LineNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 > 0 {
            write!(f, ":{}", self.0)
        } else {
            Ok(())
        }
    }
}

struct DefaultsMsg<'a>(&'a DefaultsProblem, &'a str, &'a str);

impl fmt::Display for DefaultsMsg<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let DefaultsMsg(problem, key, value) = *self;
        match problem {
            DefaultsProblem::Malformed => {
                write!(f, "malformed line {value:?} (expected KEY=value)")
            }
            DefaultsProblem::Duplicate { first_line } => write!(
                f,
                "{key} set again (first set on line {first_line}); \
                 remove one"
            ),
            DefaultsProblem::NotANumber => {
                write!(f, "{key}={value}: not a number")
            }
            DefaultsProblem::NotOneOf { choices } => write!(
                f,
                "{key}={value}: must be one of {}",
                choices.join(", ")
            ),
            DefaultsProblem::OutOfRange { min, max } => write!(
                f,
                "{key}={value}: out of range (must be {min} to {max})"
            ),
            DefaultsProblem::UnknownKey { nearest: Some(n) } => {
                write!(f, "unknown key {key} (did you mean {n}?)")
            }
            DefaultsProblem::UnknownKey { nearest: None } => {
                write!(f, "unknown key {key}")
            }
            DefaultsProblem::Export => write!(
                f,
                "export {key}={value}: defread(3C) reads KEY=value lines \
                 only; drop the export (a shell sourcing the file sees the \
                 setting either way)"
            ),
            DefaultsProblem::TooLong { max } => {
                write!(f, "longer than {max} bytes; not a defaults file")
            }
        }
    }
}

impl Error {
    /// An I/O error on one path.
    pub fn io(op: Op, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            target: None,
            source,
        }
    }

    /// An I/O error on a pair of paths (source and destination).
    pub fn io2(
        op: Op,
        path: impl Into<PathBuf>,
        target: impl Into<PathBuf>,
        source: io::Error,
    ) -> Self {
        Error::Io {
            op,
            path: path.into(),
            target: Some(target.into()),
            source,
        }
    }

    /// A directory walk's error: the path it concerns (`at` when it names
    /// none) and the system's error alone, whose message walkdir's own
    /// display would wrap around the path a second time.
    pub fn walk(op: Op, at: &Path, e: walkdir::Error) -> Self {
        let path = e.path().unwrap_or(at).to_path_buf();
        let source = e.into_io_error().unwrap_or_else(|| {
            io::Error::other("a directory contains itself (filesystem loop)")
        });
        Error::io(op, path, source)
    }

    /// The error for a tar archive `archive` whose reader failed: an
    /// [`Error::Archive`] naming the member, or an [`Error::Io`] for a
    /// failed read of the file itself.
    pub fn tar(archive: &Path, e: zinstall_archive::tar::TarError) -> Self {
        match e.into_refusal() {
            (_, Err(io)) => Error::io(Op::Read, archive, io),
            (entry, Ok(reason)) => Error::Archive {
                archive: archive.to_path_buf(),
                entry,
                reason,
            },
        }
    }

    /// A refused entry.
    pub fn refused(path: impl Into<PathBuf>, reason: Refusal) -> Self {
        Error::Refused {
            path: path.into(),
            reason,
        }
    }

    /// The path the error is about.
    pub fn path(&self) -> &Path {
        match self {
            Error::Io { path, .. }
            | Error::Attr { path, .. }
            | Error::Refused { path, .. }
            | Error::Cancelled { path }
            | Error::Beneath { path, .. }
            | Error::MountsLeft { path, .. } => path,
            Error::Defaults { file, .. } => file,
            Error::Archive { archive, .. } => archive,
            Error::Oci(e) => e.image(),
            Error::Rule { .. } => Path::new(""),
        }
    }

    /// The operation, for I/O errors.
    pub fn op(&self) -> Option<Op> {
        match self {
            Error::Io { op, .. } | Error::Attr { op, .. } => Some(*op),
            _ => None,
        }
    }

    /// The underlying I/O error, if any.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            Error::Io { source, .. } | Error::Attr { source, .. } => {
                Some(source)
            }
            _ => None,
        }
    }

    /// The errno of the underlying I/O error, if any.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.io_error().and_then(io::Error::raw_os_error)
    }
}

impl From<Error> for io::Error {
    /// Keeps the kind of an I/O error so callers can still match on it.
    fn from(e: Error) -> io::Error {
        let kind = match &e {
            Error::Io { source, .. } | Error::Attr { source, .. } => {
                source.kind()
            }
            Error::MountsLeft { .. } => io::ErrorKind::ResourceBusy,
            Error::Cancelled { .. } => io::ErrorKind::Interrupted,
            Error::Refused { .. } | Error::Beneath { .. } => {
                io::ErrorKind::InvalidInput
            }
            Error::Defaults { .. }
            | Error::Rule { .. }
            | Error::Archive { .. }
            | Error::Oci(_) => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, e)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn io_error_reads_like_the_call() {
        let e = Error::io2(
            Op::CopyFileRange,
            "/a/b",
            "/x/b",
            io::Error::from_raw_os_error(libc::ENOSPC),
        );
        let s = e.to_string();
        assert!(
            s.starts_with("copy_file_range /a/b -> /x/b: No space left"),
            "{s}"
        );
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        let back: io::Error = e.into();
        assert_eq!(back.kind(), io::ErrorKind::StorageFull);
    }

    #[test]
    fn defaults_error_names_file_line_and_value() {
        let e = Error::Defaults {
            file: "/etc/default/zinstall".into(),
            line: 7,
            key: "COPY_THREADS".into(),
            value: "0".into(),
            problem: DefaultsProblem::OutOfRange { min: 1, max: 1024 },
        };
        assert_eq!(
            e.to_string(),
            "/etc/default/zinstall:7: COPY_THREADS=0: out of range \
             (must be 1 to 1024)"
        );
    }

    #[test]
    fn syntax_errors_show_the_line_and_a_caret() {
        let text = "a = 1\nlog = [1,\n\tb = \u{1b}x\n";
        let at = text.find("b =").unwrap();
        let e = Syntax::at("p.toml", text, Some(at..at + 1), "bad key\n");
        assert_eq!(
            e.to_string(),
            "p.toml:3:2: bad key\n  |\n3 |  b = ?x\n  |  ^"
        );
        assert_eq!(
            Syntax::at_line("p.toml", text, 2, 7, "x"),
            Syntax {
                file: "p.toml".into(),
                line: 2,
                column: 7,
                text: "log = [1,".into(),
                width: 1,
                message: "x".into(),
            }
        );
        // Past the end, or with no position: still a message.
        let end = Syntax::at("p", "x", Some(5..9), "eof");
        assert_eq!(end.to_string(), "p:1:2: eof\n  |\n1 | x\n  |  ^");
        assert_eq!(Syntax::at("p", "", None, "empty").to_string(), "p: empty");
        // A long line is shown around the column.
        let long = format!("{}X{}", "a".repeat(500), "b".repeat(500));
        let e = Syntax::at("p", &long, Some(500..501), "here");
        assert!(e.text.chars().count() <= Syntax::MAX_SHOWN + 6);
        assert_eq!(e.text.chars().nth(e.column - 1), Some('X'));
    }
}
