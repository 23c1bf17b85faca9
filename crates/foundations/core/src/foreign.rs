//! The one reader of files the project did not make: configuration,
//! trust policies, keys, signatures, secrets, profiles, images and their
//! backing files, named by an administrator, a user or an image.
//!
//! Each is opened once, by descriptor, and never looked up by name
//! again:
//!
//! * `O_NOFOLLOW` where the name must not be followed ([`Follow::No`]);
//!   an administrator's configuration path may be a symlink
//!   ([`Follow::Yes`]), but what it leads to is checked all the same;
//! * `O_NONBLOCK` while opening, so that a FIFO (or a device waiting
//!   for a carrier) never holds the caller, then cleared;
//! * `fstat` on the descriptor: a regular file, or refused naming what
//!   it is ("/etc/containers/policy.json is a character device");
//! * read within the cap of its [`Kind`], counted on the bytes read,
//!   never sized from metadata (a device says 0, a file may grow): at
//!   most `cap + 1` bytes are read, and one byte over is a refusal.
//!
//! Errors are [`Error`]s, carrying the path and the operation.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};
use rustix::io::Errno;

/// What a file is read as: its cap, and the words a refusal uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A containers-policy.json(5) trust policy: 4 MiB, as
    /// containers/image bounds it.
    Policy,
    /// A public key file named by a policy: 4 MiB.
    Key,
    /// A signature, from a `file://` lookaside: 64 KiB.
    Signature,
    /// A configuration file (registries.d YAML, registries.conf,
    /// zinstalld.toml, a profile, the defaults file, an auth file): 4
    /// MiB, far above any real one.
    Config,
    /// A secret or password file: 64 KiB.
    Secret,
    /// A record the project wrote where someone else may have written
    /// since (a cache entry's metadata, a trust record): 4 MiB.
    Record,
    /// Anything else read whole, with its own words and cap.
    Other {
        /// What it is, for messages ("a zone's XML file").
        what: &'static str,
        /// The most bytes it may have.
        cap: u64,
    },
}

impl Kind {
    /// The most bytes a file of this kind may have.
    pub fn cap(self) -> u64 {
        match self {
            Kind::Policy | Kind::Key | Kind::Config | Kind::Record => 4 << 20,
            Kind::Signature | Kind::Secret => 64 << 10,
            Kind::Other { cap, .. } => cap,
        }
    }

    /// What it is, for messages.
    pub fn what(self) -> &'static str {
        match self {
            Kind::Policy => "a trust policy",
            Kind::Key => "a key file",
            Kind::Signature => "a signature",
            Kind::Config => "a configuration file",
            Kind::Secret => "a secret file",
            Kind::Record => "a record",
            Kind::Other { what, .. } => what,
        }
    }
}

/// Whether the last component of a name may be a symlink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Follow {
    /// An administrator's configuration path, which may be a symlink to
    /// the real file: followed, and what it leads to checked.
    Yes,
    /// A name someone else may have planted a link at: a symlink is
    /// refused (`O_NOFOLLOW`).
    No,
}

/// What was being done when a file was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Opening it (and `fstat` on the descriptor).
    Open,
    /// Reading it.
    Read,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Open => "open",
            Op::Read => "read",
        })
    }
}

/// Why a file was refused.
#[derive(Debug)]
pub enum Problem {
    /// The system said no.
    Io(io::Error),
    /// Not a regular file: what it is instead.
    NotRegular(What),
    /// More bytes than its kind may have.
    TooLarge(Kind),
}

/// What a file that is not a regular file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum What {
    /// A directory.
    Directory,
    /// A symbolic link (where links are not followed).
    Symlink,
    /// A FIFO.
    Fifo,
    /// A socket.
    Socket,
    /// A character device.
    CharacterDevice,
    /// A block device.
    BlockDevice,
    /// A type the system did not name.
    Unknown,
}

impl What {
    fn of(t: FileType) -> What {
        match t {
            FileType::Directory => What::Directory,
            FileType::Symlink => What::Symlink,
            FileType::Fifo => What::Fifo,
            FileType::Socket => What::Socket,
            FileType::CharacterDevice => What::CharacterDevice,
            FileType::BlockDevice => What::BlockDevice,
            _ => What::Unknown,
        }
    }
}

impl fmt::Display for What {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            What::Directory => "a directory",
            What::Symlink => "a symbolic link",
            What::Fifo => "a FIFO",
            What::Socket => "a socket",
            What::CharacterDevice => "a character device",
            What::BlockDevice => "a block device",
            What::Unknown => "not a file of any known type",
        })
    }
}

/// A file refused: its path, the operation, and why.
#[derive(Debug)]
pub struct Error {
    /// The file, as it was named.
    pub path: PathBuf,
    /// What was being done.
    pub op: Op,
    /// Why it was refused.
    pub problem: Problem,
}

impl Error {
    fn io(path: &Path, op: Op, e: impl Into<io::Error>) -> Error {
        Error {
            path: path.to_path_buf(),
            op,
            problem: Problem::Io(e.into()),
        }
    }

    /// True when nothing was there to open (`ENOENT`): for the many
    /// files that are optional.
    pub fn is_not_found(&self) -> bool {
        self.io_kind() == Some(io::ErrorKind::NotFound)
    }

    /// What the file is, if it was refused for not being a regular
    /// file.
    pub fn not_regular(&self) -> Option<What> {
        match self.problem {
            Problem::NotRegular(w) => Some(w),
            _ => None,
        }
    }

    /// The kind of the system's error, if the system refused.
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        match &self.problem {
            Problem::Io(e) => Some(e.kind()),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.path.display();
        match &self.problem {
            Problem::Io(e) => write!(f, "{} {p}: {e}", self.op),
            Problem::NotRegular(what) => {
                write!(f, "{p} is {what}, not a regular file")
            }
            Problem::TooLarge(kind) => write!(
                f,
                "{} {p}: larger than {}, the most {} may be",
                self.op,
                size(kind.cap()),
                kind.what()
            ),
        }
    }
}

/// The system's error is in the message, so no `source()`
/// (CONTRIBUTING.md: a cause is said once).
impl std::error::Error for Error {}

/// For callers whose errors carry an `io::Error` beside the path and the
/// operation (which they name themselves): the system's error as it
/// was, or a refusal of ours said without the path.
impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        match e.problem {
            Problem::Io(e) => e,
            Problem::NotRegular(what) => io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{what}, not a regular file"),
            ),
            Problem::TooLarge(kind) => io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!(
                    "larger than {}, the most {} may be",
                    size(kind.cap()),
                    kind.what()
                ),
            ),
        }
    }
}

/// `n` bytes in the largest binary unit that divides them.
fn size(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// Opens `name` in `dir` (`CWD` and a path work too) as a regular file
/// for reading, as the module says; `shown` names it in errors.
fn open_in(
    dir: impl AsFd,
    name: &Path,
    shown: &Path,
    follow: Follow,
) -> Result<File, Error> {
    let mut flags =
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    if follow == Follow::No {
        flags |= OFlags::NOFOLLOW;
    }
    let dir = dir.as_fd();
    let fd: OwnedFd = match rustix::fs::openat(dir, name, flags, Mode::empty())
    {
        Ok(fd) => fd,
        // O_NOFOLLOW's ELOOP, said as what it is when the name is one.
        Err(Errno::LOOP) if follow == Follow::No => {
            let is_link =
                rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| {
                        FileType::from_raw_mode(st.st_mode) == FileType::Symlink
                    });
            return Err(if is_link {
                Error {
                    path: shown.to_path_buf(),
                    op: Op::Open,
                    problem: Problem::NotRegular(What::Symlink),
                }
            } else {
                Error::io(shown, Op::Open, Errno::LOOP)
            });
        }
        Err(e) => return Err(Error::io(shown, Op::Open, e)),
    };
    let st =
        rustix::fs::fstat(&fd).map_err(|e| Error::io(shown, Op::Open, e))?;
    let t = FileType::from_raw_mode(st.st_mode);
    if t != FileType::RegularFile {
        return Err(Error {
            path: shown.to_path_buf(),
            op: Op::Open,
            problem: Problem::NotRegular(What::of(t)),
        });
    }
    // A regular file never blocks; the flag is cleared so that what the
    // caller does with the descriptor is what it expects.
    let fl = rustix::fs::fcntl_getfl(&fd)
        .map_err(|e| Error::io(shown, Op::Open, e))?;
    rustix::fs::fcntl_setfl(&fd, fl - OFlags::NONBLOCK)
        .map_err(|e| Error::io(shown, Op::Open, e))?;
    Ok(File::from(fd))
}

/// Opens `path` for reading: a regular file, or refused naming what it
/// is. For files read as streams (images, backing files), whose size
/// is no bound on memory; read whole files with [`read`].
pub fn open(path: &Path, follow: Follow) -> Result<File, Error> {
    open_in(CWD, path, path, follow)
}

/// Opens `name` beneath the directory open as `dir`, never by a second
/// lookup of a path: for the files named relative to another one (a
/// qcow2 image's backing file beside it). `shown` is the path errors
/// name. `name` may have several components (each resolved from `dir`);
/// its last is not followed with [`Follow::No`].
pub fn open_at(
    dir: impl AsFd,
    name: &Path,
    shown: &Path,
    follow: Follow,
) -> Result<File, Error> {
    open_in(dir, name, shown, follow)
}

/// Reads `path` whole as a file of `kind`.
pub fn read(path: &Path, follow: Follow, kind: Kind) -> Result<Vec<u8>, Error> {
    let f = open(path, follow)?;
    read_file(&f, path, kind)
}

/// Reads `path` whole as UTF-8 text, as a file of `kind`.
pub fn read_to_string(
    path: &Path,
    follow: Follow,
    kind: Kind,
) -> Result<String, Error> {
    text(read(path, follow, kind)?, path)
}

/// Reads `name` beneath the directory open as `dir` whole, as a file of
/// `kind`, never following its last component.
pub fn read_at(
    dir: impl AsFd,
    name: &Path,
    shown: &Path,
    kind: Kind,
) -> Result<Vec<u8>, Error> {
    let f = open_in(dir, name, shown, Follow::No)?;
    read_file(&f, shown, kind)
}

/// Reads what is left of `f` (opened by [`open`] or [`open_at`]), at
/// most the cap of `kind`: one byte more is a refusal. `path` names it
/// in errors.
pub fn read_file(
    mut f: &File,
    path: &Path,
    kind: Kind,
) -> Result<Vec<u8>, Error> {
    let cap = kind.cap();
    // The size said is a hint for the first allocation only, bounded by
    // the cap: the read below is what counts.
    let hint = f.metadata().map_or(0, |m| m.len()).min(cap);
    let mut buf = Vec::with_capacity(usize::try_from(hint).unwrap_or(0));
    f.by_ref()
        .take(cap.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| Error::io(path, Op::Read, e))?;
    if buf.len() as u64 > cap {
        return Err(Error {
            path: path.to_path_buf(),
            op: Op::Read,
            problem: Problem::TooLarge(kind),
        });
    }
    Ok(buf)
}

/// `bytes` as text, or an error naming `path`.
fn text(bytes: Vec<u8>, path: &Path) -> Result<String, Error> {
    String::from_utf8(bytes).map_err(|e| {
        Error::io(
            path,
            Op::Read,
            io::Error::new(io::ErrorKind::InvalidData, e.utf8_error()),
        )
    })
}

/// Reads `path` whole as text of `kind`, `Ok(None)` when nothing is
/// there: for optional configuration.
pub fn read_optional(
    path: &Path,
    follow: Follow,
    kind: Kind,
) -> Result<Option<String>, Error> {
    match read_to_string(path, follow, kind) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
// Tests make and read their own fixtures by path.
#[allow(clippy::disallowed_methods)]
mod test {
    use super::*;

    fn tmp() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn a_regular_file_is_read_whole() {
        let d = tmp();
        let p = d.path().join("policy.json");
        std::fs::write(&p, b"{}").unwrap();
        assert_eq!(read(&p, Follow::No, Kind::Policy).unwrap(), b"{}");
        assert_eq!(
            read_to_string(&p, Follow::Yes, Kind::Config).unwrap(),
            "{}"
        );
    }

    #[test]
    fn a_character_device_is_refused_naming_it() {
        let p = Path::new("/dev/zero");
        let e = read(p, Follow::Yes, Kind::Policy).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/dev/zero is a character device, not a regular file"
        );
        assert_eq!(e.op, Op::Open);
    }

    #[test]
    fn a_symlink_is_refused_where_not_followed_and_checked_where_followed() {
        let d = tmp();
        let l = d.path().join("key.gpg");
        std::os::unix::fs::symlink("/dev/zero", &l).unwrap();
        let e = read(&l, Follow::No, Kind::Key).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("is a symbolic link, not a regular file"),
            "{e}"
        );
        let e = read(&l, Follow::Yes, Kind::Key).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("is a character device, not a regular file"),
            "{e}"
        );
    }

    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let d = tmp();
        let p = d.path().join("registries.d.yaml");
        rustix::fs::mknodat(
            CWD,
            &p,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let e = read(&p, Follow::No, Kind::Config).unwrap_err();
        assert!(
            e.to_string().ends_with("is a FIFO, not a regular file"),
            "{e}"
        );
    }

    #[test]
    fn a_directory_is_refused() {
        let d = tmp();
        let e = read(d.path(), Follow::No, Kind::Config).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("is a directory, not a regular file"),
            "{e}"
        );
    }

    #[test]
    fn one_byte_over_the_cap_is_refused_and_the_cap_itself_read() {
        let d = tmp();
        let p = d.path().join("sig");
        let kind = Kind::Other {
            what: "a test file",
            cap: 10,
        };
        std::fs::write(&p, [7u8; 10]).unwrap();
        assert_eq!(read(&p, Follow::No, kind).unwrap().len(), 10);
        std::fs::write(&p, [7u8; 11]).unwrap();
        let e = read(&p, Follow::No, kind).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "read {}: larger than 10 bytes, the most a test file may be",
                p.display()
            )
        );
        assert_eq!(Kind::Signature.cap(), 64 << 10);
        assert_eq!(Kind::Policy.cap(), 4 << 20);
    }

    #[test]
    fn missing_is_not_found_and_optional() {
        let d = tmp();
        let p = d.path().join("none");
        assert!(
            read(&p, Follow::No, Kind::Config)
                .unwrap_err()
                .is_not_found()
        );
        assert!(
            read_optional(&p, Follow::Yes, Kind::Config)
                .unwrap()
                .is_none()
        );
        let io: io::Error =
            read(&p, Follow::No, Kind::Config).unwrap_err().into();
        assert_eq!(io.kind(), io::ErrorKind::NotFound);
        assert_eq!(io.raw_os_error(), Some(2));
        let dev: io::Error =
            read(Path::new("/dev/null"), Follow::Yes, Kind::Config)
                .unwrap_err()
                .into();
        assert_eq!(dev.to_string(), "a character device, not a regular file");
    }

    #[test]
    fn beneath_a_descriptor_the_name_is_resolved_from_it() {
        let d = tmp();
        std::fs::write(d.path().join("backing.raw"), b"base").unwrap();
        let dir = File::open(d.path()).unwrap();
        let got = read_at(
            &dir,
            Path::new("backing.raw"),
            &d.path().join("backing.raw"),
            Kind::Record,
        )
        .unwrap();
        assert_eq!(got, b"base");
        std::os::unix::fs::symlink("/etc/passwd", d.path().join("l")).unwrap();
        assert!(
            read_at(&dir, Path::new("l"), Path::new("l"), Kind::Record)
                .is_err()
        );
    }

    #[test]
    fn an_opened_file_reads_blocking() {
        let d = tmp();
        let p = d.path().join("f");
        std::fs::write(&p, b"x").unwrap();
        let f = open(&p, Follow::No).unwrap();
        let fl = rustix::fs::fcntl_getfl(&f).unwrap();
        assert!(!fl.contains(OFlags::NONBLOCK));
    }
}
