//! The handles: a [`Root`] opened without following its last component,
//! the [`Dir`]s opened beneath it, and what one finds, reads, replaces
//! and removes at a single name. How a path is walked is `resolve`'s.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::os::unix::ffi::OsStrExt as _;

use super::resolve::{components, open_dir_nofollow, open_parts};
use crate::error::{Error, Met, Op, Refusal, Result};
use crate::sys::{self, posix::at};

/// A directory that writes go beneath.
#[derive(Debug, Clone)]
pub struct Root {
    fd: Arc<OwnedFd>,
    path: PathBuf,
}

/// A plan's root: a path opened when the run starts, or a [`Root`]
/// already open (which is never reopened by path).
#[derive(Debug, Clone)]
pub(crate) enum RootAt {
    Path(PathBuf),
    Open(Root),
}

impl RootAt {
    /// The root's path, as given: what the plan's paths start with.
    pub(crate) fn path(&self) -> &Path {
        match self {
            RootAt::Path(p) => p,
            RootAt::Open(r) => r.path(),
        }
    }

    /// The root, open: by its path (its last component not followed),
    /// or the one already open.
    pub(crate) fn open(&self) -> Result<Root> {
        match self {
            RootAt::Path(p) => Root::open(p),
            RootAt::Open(r) => Ok(r.clone()),
        }
    }
}

/// A directory opened beneath a [`Root`].
#[derive(Debug, Clone)]
pub struct Dir {
    pub(crate) fd: Arc<OwnedFd>,
    path: PathBuf,
}

/// What [`Dir::stat`] finds at a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// `libc::S_IFMT` bits: a regular file, a directory, a symlink...
    pub format: u32,
    /// Permission and special bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
}

impl Found {
    /// A regular file.
    pub fn is_file(&self) -> bool {
        self.format == libc::S_IFREG as u32
    }
}

/// The root's descriptor, to hand to another process (a service's job
/// process works beneath it and never opens it by path).
impl AsFd for Root {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The directory's descriptor, for `*at` calls on single names beneath
/// it (the descriptor was reached without following a symlink).
impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Dir {
    /// Where it was when it was opened (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What is at `name` here, not following a symlink; `None` if
    /// nothing.
    pub fn stat(&self, name: &str) -> Result<Option<Found>> {
        let (n, shown) = self.name(name)?;
        let st = at::lstat(self.fd.as_raw_fd(), &n)
            .map_err(|e| Error::io(Op::Stat, &shown, e))?;
        Ok(st.map(|st| Found {
            format: st.st_mode as u32 & libc::S_IFMT as u32,
            mode: st.st_mode as u32 & 0o7777,
            uid: st.st_uid as u32,
            gid: st.st_gid as u32,
            size: st.st_size as u64,
        }))
    }

    /// The names here, sorted.
    pub fn names(&self) -> Result<Vec<String>> {
        let mut v: Vec<String> = at::read_names(&*self.fd)
            .map_err(|e| Error::io(Op::ReadDir, &self.path, e))?
            .into_iter()
            .map(|n| String::from_utf8_lossy(n.as_bytes()).into_owned())
            .collect();
        v.sort();
        Ok(v)
    }

    /// The content of the regular file `name`, opened without following
    /// a symlink; refused if it is anything else or larger than `max`.
    pub fn read_file(&self, name: &str, max: u64) -> Result<Vec<u8>> {
        use std::io::Read;
        let (n, shown) = self.name(name)?;
        let f = match at::open_read(self.fd.as_raw_fd(), &n) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(Error::Beneath {
                    path: shown.clone(),
                    at: shown,
                    met: Met::Symlink,
                });
            }
            Err(e) => return Err(Error::io(Op::Open, &shown, e)),
        };
        let st = at::fstat(&f).map_err(|e| Error::io(Op::Stat, &shown, e))?;
        if st.st_mode as u32 & libc::S_IFMT as u32 != libc::S_IFREG as u32 {
            return Err(Error::refused(&shown, Refusal::ChangedType));
        }
        let mut buf = Vec::new();
        f.take(max.saturating_add(1))
            .read_to_end(&mut buf)
            .map_err(|e| Error::io(Op::Read, &shown, e))?;
        if buf.len() as u64 > max {
            return Err(Error::refused(&shown, Refusal::TooLarge(max)));
        }
        Ok(buf)
    }

    /// Makes `name` a regular file holding `data` with `mode` (and,
    /// given, owner and group): written to a new file beside it, then
    /// renamed over whatever `name` was, so a symlink there is replaced,
    /// never written through, and a reader sees the old file or the new
    /// one, never a part.
    pub fn replace_file(
        &self,
        name: &str,
        data: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> Result<()> {
        use std::io::Write;
        let (n, shown) = self.name(name)?;
        let tmp =
            CString::new(format!(".{name}.zinstall-{}", std::process::id()))
                .map_err(|_| Error::refused(&shown, Refusal::NotBeneath))?;
        let dir = self.fd.as_raw_fd();
        let _stale = at::unlink(dir, &tmp, false);
        let mut f = at::create_file(dir, &tmp)
            .map_err(|e| Error::io(Op::Create, &shown, e))?;
        let written = (|| {
            f.write_all(data)
                .map_err(|e| Error::io(Op::Write, &shown, e))?;
            if let Some((uid, gid)) = owner {
                at::fchown(&f, uid, gid)
                    .map_err(|e| Error::io(Op::Chown, &shown, e))?;
            }
            at::fchmod(&f, mode)
                .map_err(|e| Error::io(Op::Chmod, &shown, e))?;
            at::rename(dir, &tmp, &n)
                .map_err(|e| Error::io(Op::Rename, &shown, e))
        })();
        if written.is_err() {
            let _already_failing = at::unlink(dir, &tmp, false);
        }
        written
    }

    /// Removes the non-directory `name` (a symlink itself, never its
    /// target); false if nothing was there.
    pub fn remove_file(&self, name: &str) -> Result<bool> {
        let (n, shown) = self.name(name)?;
        match at::unlink(self.fd.as_raw_fd(), &n, false) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io(Op::Remove, &shown, e)),
        }
    }

    /// Removes `name` here, a single entry or a tree with everything in
    /// it, never following a symlink and never leaving the filesystem (a
    /// mount point inside is an error naming it). Nothing there is not an
    /// error. The name is bytes: any name a directory can hold.
    pub fn remove_at(&self, name: &std::ffi::CStr) -> Result<()> {
        let shown =
            self.path.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
        if name.to_bytes().is_empty()
            || name.to_bytes() == b"."
            || name.to_bytes() == b".."
            || name.to_bytes().contains(&b'/')
        {
            return Err(Error::refused(&shown, Refusal::NotBeneath));
        }
        super::remove::remove_at(self.fd.as_raw_fd(), name, &shown)
    }

    /// Runs `change` and puts the directory's own access and
    /// modification times back as they were: an edit of one entry leaves
    /// the directory looking as it did.
    pub fn keeping_times<T, E: From<Error>>(
        &self,
        change: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        let st = at::fstat(&*self.fd)
            .map_err(|e| Error::io(Op::Stat, &self.path, e))?;
        let times = sys::posix::Times {
            atime: (st.st_atime as i64, st.st_atime_nsec as i64),
            mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
        };
        let value = change()?;
        at::futimens(&*self.fd, &times)
            .map_err(|e| Error::io(Op::SetTimes, &self.path, e))?;
        Ok(value)
    }

    /// `name` as a single component, and its path for messages.
    fn name(&self, name: &str) -> Result<(CString, PathBuf)> {
        let shown = self.path.join(name);
        if name.is_empty() || name == "." || name == ".." || name.contains('/')
        {
            return Err(Error::refused(&shown, Refusal::NotBeneath));
        }
        let c = CString::new(name)
            .map_err(|_| Error::refused(&shown, Refusal::NotBeneath))?;
        Ok((c, shown))
    }
}

impl Root {
    /// Opens the existing directory `path`. Its last component must not
    /// be a symlink (the path above it is the caller's, and trusted).
    pub fn open(path: &Path) -> Result<Root> {
        let fd = open_dir_nofollow(path)?;
        Ok(Root {
            fd: Arc::new(fd),
            path: path.to_path_buf(),
        })
    }

    /// Makes `path` with `mode` unless a directory is there, and opens
    /// it. Its parent must exist; a symlink at `path` is refused, never
    /// followed.
    pub fn create(path: &Path, mode: u32) -> Result<Root> {
        match sys::posix::mkdir(path, mode) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io(Op::Mkdir, path, e)),
        }
        Root::open(path)
    }

    /// A root over a directory already open: how a process that is
    /// handed descriptors (a daemon's per-job child, given its grants)
    /// uses them without ever opening a root by path. `path` is for
    /// messages and for taking a plan's paths apart, never opened. A
    /// descriptor of anything but a directory is refused as a conflict.
    pub fn from_fd(fd: OwnedFd, path: impl Into<PathBuf>) -> Result<Root> {
        let path = path.into();
        let st = at::fstat(&fd).map_err(|e| Error::io(Op::Stat, &path, e))?;
        if st.st_mode as u32 & libc::S_IFMT as u32 != libc::S_IFDIR as u32 {
            return Err(Error::refused(&path, Refusal::Conflict));
        }
        Ok(Root {
            fd: Arc::new(fd),
            path,
        })
    }

    /// Opens the absolute directory `path` following no symlink in any
    /// component, from `/` down (`openat2` with `RESOLVE_NO_SYMLINKS`
    /// where the kernel has it, else one `O_NOFOLLOW` component at a
    /// time). [`Root::open`] trusts everything above the last component;
    /// this is for a root whose parents may belong to someone else (a
    /// grant prefix in a user's directory), who could otherwise put a
    /// symlink there. A symlink met is an [`Error::Beneath`] naming the
    /// component; a relative path or one with `..` is refused.
    pub fn open_no_symlinks(path: &Path) -> Result<Root> {
        let rel = path
            .strip_prefix("/")
            .map_err(|_| Error::refused(path, Refusal::NotBeneath))?;
        let parts = components(rel)
            .ok_or_else(|| Error::refused(path, Refusal::NotBeneath))?;
        let slash = Path::new("/");
        let top = Arc::new(open_dir_nofollow(slash)?);
        let fd = open_parts(&top, &parts, None)
            .map_err(|f| f.into_error(slash, &parts, path))?;
        Ok(Root {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The root's path, as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn fd(&self) -> &Arc<OwnedFd> {
        &self.fd
    }

    /// Sets the root directory's own mode, through its descriptor.
    pub fn set_mode(&self, mode: u32) -> Result<()> {
        at::fchmod(&*self.fd, mode)
            .map_err(|e| Error::io(Op::Chmod, &self.path, e))
    }

    /// The root itself as a [`Dir`].
    pub fn top(&self) -> Dir {
        Dir {
            fd: Arc::clone(&self.fd),
            path: self.path.clone(),
        }
    }

    /// Opens the directory `rel` (relative, plain components only)
    /// beneath the root. With `create`, missing directories are made
    /// with that mode. A symlink or a non-directory on the way is an
    /// [`Error::Beneath`] naming it.
    pub fn dir(&self, rel: &Path, create: Option<u32>) -> Result<Dir> {
        let parts = components(rel).ok_or_else(|| {
            Error::refused(self.path.join(rel), Refusal::NotBeneath)
        })?;
        let shown = self.path.join(rel);
        let fd = open_parts(&self.fd, &parts, create)
            .map_err(|f| f.into_error(&self.path, &parts, &shown))?;
        Ok(Dir { fd, path: shown })
    }
}
