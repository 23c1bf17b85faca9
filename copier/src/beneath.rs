//! The one way into a root: directories opened beneath it, one component
//! at a time, never through a symlink.
//!
//! Everything zinstall writes into a root — tree copies, archive members,
//! host files, merges, link rules — and everything it removes from one
//! goes through a directory descriptor that was reached from the root's
//! own descriptor without following a symlink (on Linux `openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS` where
//! it can, else `openat(O_NOFOLLOW | O_DIRECTORY)` per component). Entries
//! are then made with `*at` calls on that descriptor and a single name.
//! So nothing inside the root — a symlink an image planted, or a directory
//! swapped for one while we write — decides where a write lands: a
//! symlink met on the way is an error naming it, never a path to follow.
//!
//! ```no_run
//! use std::path::Path;
//! use copier::beneath::Root;
//!
//! let root = Root::create(Path::new("/zones/z1/root"), 0o755)?;
//! // `etc` and `etc/default` are made if missing; a symlink at either
//! // is refused with an error naming it.
//! let dir = root.dir(Path::new("etc/default"), Some(0o755))?;
//! println!("{}", dir.path().display());
//! # Ok::<(), copier::Error>(())
//! ```

// libc's `stat` field types differ between platforms: casts that are
// no-ops here are not everywhere.
#![allow(clippy::unnecessary_cast)]

use std::ffi::{CStr, CString};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

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

/// Why a walk beneath a root stopped.
#[derive(Debug)]
pub(crate) enum WalkFail {
    /// Component `index` is a symlink or not a directory.
    Met(usize, Met),
    /// A system call on component `index` failed.
    Io(usize, Op, io::Error),
}

impl WalkFail {
    /// The public error: the path wanted, and what was met where.
    pub(crate) fn into_error(
        self,
        root: &Path,
        parts: &[CString],
        wanted: &Path,
    ) -> Error {
        let upto = |i: usize| {
            let mut p = root.to_path_buf();
            for c in &parts[..=i.min(parts.len().saturating_sub(1))] {
                p.push(std::ffi::OsStr::from_bytes(c.as_bytes()));
            }
            p
        };
        match self {
            WalkFail::Met(i, met) => Error::Beneath {
                path: wanted.to_path_buf(),
                at: upto(i),
                met,
            },
            WalkFail::Io(i, op, e) => Error::io(op, upto(i), e),
        }
    }
}

/// Splits a relative path into checked components; `None` if it is
/// absolute or has `..` (nothing the caller builds needs either).
pub(crate) fn components(rel: &Path) -> Option<Vec<CString>> {
    let mut v = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => v.push(CString::new(n.as_bytes()).ok()?),
            Component::CurDir => {}
            _ => return None,
        }
    }
    Some(v)
}

/// The directory `parts` beneath `top`: `openat2` for the whole path when
/// nothing needs making, else (or when the kernel has none) one component
/// at a time.
pub(crate) fn open_parts(
    top: &Arc<OwnedFd>,
    parts: &[CString],
    create: Option<u32>,
) -> std::result::Result<Arc<OwnedFd>, WalkFail> {
    if parts.is_empty() {
        return Ok(Arc::clone(top));
    }
    let joined = zinstall_archive::names::Name::joined(parts);
    // Beyond PATH_MAX the kernel refuses the whole path; components
    // have no such limit.
    if joined.as_bytes().len() < 4000 {
        // Missing, a symlink, a file: the walk below makes what is
        // missing or says exactly which component is in the way.
        if let Ok(Some(fd)) = sys::open_dir_beneath(top.as_raw_fd(), &joined) {
            return Ok(Arc::new(fd));
        }
    }
    let mut cur = Arc::clone(top);
    for (i, c) in parts.iter().enumerate() {
        cur = Arc::new(step(cur.as_raw_fd(), c, create).map_err(
            |f| match f {
                StepFail::Met(m) => WalkFail::Met(i, m),
                StepFail::Io(op, e) => WalkFail::Io(i, op, e),
            },
        )?);
    }
    Ok(cur)
}

/// The directories on the path last opened beneath a top directory, so
/// the next entry in the same or a nearby directory (archives come in
/// tree order) costs one `openat` or none, at any depth.
///
/// It holds the names of the path's directories, and descriptors of a
/// bounded few of them: the last [`Chain::RECENT`] levels, and every
/// `stride`-th level above them, the stride doubling whenever more than
/// [`Chain::MAX_CHECKPOINTS`] would be held. A level whose descriptor was
/// let go is opened again from the nearest one held, by name, one
/// component at a time, never through a symlink, as every open is. A
/// path thousands of levels deep so holds a few dozen descriptors, not
/// one per level, and going back up costs at most `stride` opens.
pub(crate) struct Chain {
    top: Arc<OwnedFd>,
    open: Vec<(CString, Option<Arc<OwnedFd>>)>,
    stride: usize,
}

impl Chain {
    /// Levels at the end of the path always held open.
    pub(crate) const RECENT: usize = 8;
    /// At most this many levels above the recent ones held open.
    pub(crate) const MAX_CHECKPOINTS: usize = 16;

    pub(crate) fn new(top: Arc<OwnedFd>) -> Self {
        Chain {
            top,
            open: Vec::new(),
            stride: 16,
        }
    }

    /// The directory `parts` beneath the top: the longest prefix already
    /// open is reused, the rest opened (or made, with `create`) one
    /// component at a time, none followed.
    pub(crate) fn open(
        &mut self,
        parts: &[CString],
        create: Option<u32>,
    ) -> std::result::Result<Arc<OwnedFd>, WalkFail> {
        let keep = self
            .open
            .iter()
            .zip(parts)
            .take_while(|((have, _), want)| have == *want)
            .count();
        self.open.truncate(keep);
        // The deepest level still held, to open the rest from.
        let held = self.open.iter().rposition(|(_, fd)| fd.is_some());
        let mut cur = match held {
            Some(i) => self.open[i].1.clone(),
            None => None,
        }
        .unwrap_or_else(|| Arc::clone(&self.top));
        let from = held.map_or(0, |i| i + 1);
        for (i, c) in parts.iter().enumerate().skip(from) {
            let fd = step(cur.as_raw_fd(), c, create).map_err(|f| match f {
                StepFail::Met(m) => WalkFail::Met(i, m),
                StepFail::Io(op, e) => WalkFail::Io(i, op, e),
            })?;
            cur = Arc::new(fd);
            if i < self.open.len() {
                self.open[i].1 = Some(Arc::clone(&cur));
            } else {
                self.open.push((c.clone(), Some(Arc::clone(&cur))));
            }
            self.let_go(i);
        }
        Ok(cur)
    }

    /// Having opened level `i`: lets go of the level that fell out of the
    /// recent ones, unless it is a checkpoint, and thins the checkpoints
    /// when there are too many.
    fn let_go(&mut self, i: usize) {
        let Some(old) = i.checked_sub(Self::RECENT) else {
            return;
        };
        if (old + 1) % self.stride != 0 {
            self.open[old].1 = None;
        }
        if (old + 1) / self.stride > Self::MAX_CHECKPOINTS {
            self.stride *= 2;
            let stride = self.stride;
            for (j, (_, fd)) in self.open[..=old].iter_mut().enumerate() {
                if (j + 1) % stride != 0 {
                    *fd = None;
                }
            }
        }
    }

    /// Descriptors held (for tests).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.open.iter().filter(|(_, fd)| fd.is_some()).count()
    }
}

/// Why one step failed.
#[derive(Debug)]
pub(crate) enum StepFail {
    Met(Met),
    Io(Op, io::Error),
}

/// Opens the directory `name` in `dir` without following a symlink; with
/// `create`, makes it first if it is missing.
pub(crate) fn step(
    dir: RawFd,
    name: &CStr,
    create: Option<u32>,
) -> std::result::Result<OwnedFd, StepFail> {
    match at::open_dir(dir, name) {
        Ok(fd) => Ok(fd),
        Err(e)
            if e.raw_os_error() == Some(libc::ENOENT) && create.is_some() =>
        {
            let mode = create.unwrap_or(0o755);
            match at::mkdir(dir, name, mode) {
                Ok(()) => {}
                // Made by someone else meanwhile: open what is there.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(StepFail::Io(Op::Mkdir, e)),
            }
            at::open_dir(dir, name).map_err(|e| classify(dir, name, e))
        }
        Err(e) => Err(classify(dir, name, e)),
    }
}

/// Tells a symlink or a non-directory in the way from other failures.
fn classify(dir: RawFd, name: &CStr, e: io::Error) -> StepFail {
    if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) {
        match at::lstat(dir, name) {
            Ok(Some(st)) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => {
                return StepFail::Met(Met::Symlink);
            }
            Ok(Some(st)) if st.st_mode & libc::S_IFMT != libc::S_IFDIR => {
                return StepFail::Met(Met::NotADirectory);
            }
            _ => {}
        }
    }
    StepFail::Io(Op::Open, e)
}

/// Opens a directory by path, its last component not followed.
fn open_dir_nofollow(path: &Path) -> Result<OwnedFd> {
    match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => Ok(f.into()),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ELOOP | libc::ENOTDIR)
            ) =>
        {
            let met = match std::fs::symlink_metadata(path) {
                Ok(m) if m.file_type().is_symlink() => Met::Symlink,
                Ok(m) if !m.is_dir() => Met::NotADirectory,
                _ => return Err(Error::io(Op::Open, path, e)),
            };
            Err(Error::Beneath {
                path: path.to_path_buf(),
                at: path.to_path_buf(),
                met,
            })
        }
        Err(e) => Err(Error::io(Op::Open, path, e)),
    }
}

/// Opens a regular file beneath nothing but its own last component: the
/// lock and state files of a zonepath, which must never be symlinks.
pub fn open_file_nofollow(path: &Path, opts: &mut OpenOptions) -> Result<File> {
    opts.custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                Error::Beneath {
                    path: path.to_path_buf(),
                    at: path.to_path_buf(),
                    met: Met::Symlink,
                }
            } else {
                Error::io(Op::Open, path, e)
            }
        })
}

/// Removes the tree at `path` without following symlinks, without
/// leaving its filesystem, at any depth.
///
/// Each directory is opened from its parent's descriptor (`O_NOFOLLOW`,
/// and on Linux `RESOLVE_NO_XDEV`, so a bind mount of the same filesystem
/// is seen too), made writable through that descriptor, emptied with
/// `unlinkat`, then removed. Only one directory is held open at a time:
/// going back up opens `..` and checks it is the directory we came from
/// (device and inode), so depth is bounded by nothing but memory for the
/// names. A mount point inside is left in place with what it holds, like
/// `rm --one-file-system`; the rest is removed and the first such mount
/// points are returned as an error, so a caller never mistakes the tree
/// for gone.
pub fn remove_tree(path: &Path) -> Result<()> {
    let md = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(Op::Stat, path, e)),
    };
    if !md.is_dir() {
        return std::fs::remove_file(path)
            .map_err(|e| Error::io(Op::Remove, path, e));
    }
    let top = open_dir_nofollow(path)?;
    let left = empty_dir(top, path)?;
    if !left.is_empty() {
        return Err(Error::MountsLeft {
            path: path.to_path_buf(),
            mounts: left,
        });
    }
    std::fs::remove_dir(path).map_err(|e| Error::io(Op::Remove, path, e))
}

/// Removes `name` in the directory `dir` (a tree, with everything in it,
/// or a single entry), never following a symlink and never leaving the
/// filesystem: a symlink is removed itself. `shown` names it in errors.
/// Nothing there is not an error.
pub(crate) fn remove_at(dir: RawFd, name: &CStr, shown: &Path) -> Result<()> {
    let Some(st) =
        at::lstat(dir, name).map_err(|e| Error::io(Op::Stat, shown, e))?
    else {
        return Ok(());
    };
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return at::unlink(dir, name, false)
            .map_err(|e| Error::io(Op::Remove, shown, e));
    }
    let fd =
        at::open_dir(dir, name).map_err(|e| Error::io(Op::Open, shown, e))?;
    let left = empty_dir(fd, shown)?;
    if !left.is_empty() {
        return Err(Error::MountsLeft {
            path: shown.to_path_buf(),
            mounts: left,
        });
    }
    at::unlink(dir, name, true).map_err(|e| Error::io(Op::Remove, shown, e))
}

/// An entry [`walk_tree`] visits.
pub struct Visit<'a> {
    /// Its path relative to the top (empty for the top itself); for
    /// messages and digests, never handed to the kernel.
    pub rel: &'a Path,
    /// The directory holding it, open (for the top, the top itself).
    pub dir: BorrowedFd<'a>,
    /// Its name in `dir` (`.` for the top).
    pub name: &'a CStr,
    /// Its `lstat`.
    pub stat: &'a libc::stat,
}

/// A directory on the way down in [`walk_tree`].
struct Walked {
    id: (u64, u64),
    entries: std::vec::IntoIter<(CString, libc::stat)>,
}

/// Visits the directory `top` and everything beneath it, never following
/// a symlink: the top first, then depth first, each directory's entries
/// in the byte order of their names (as walkdir's `sort_by_file_name`).
/// Each entry is seen through its directory's descriptor and its own
/// name, so no path handed to the kernel grows with depth, and one
/// directory is held open at a time: going back up opens `..` and checks
/// it is the directory it came from (device and inode). `visit` says
/// whether to go on; its error ends the walk.
pub fn walk_tree(
    top: &Path,
    visit: &mut dyn FnMut(&Visit<'_>) -> io::Result<bool>,
) -> Result<()> {
    let mut cur = open_dir_nofollow(top)?;
    let st = at::fstat(&cur).map_err(|e| Error::io(Op::Stat, top, e))?;
    let mut rel = PathBuf::new();
    let shown = |rel: &Path| top.join(rel);
    let v = Visit {
        rel: &rel,
        dir: cur.as_fd(),
        name: c".",
        stat: &st,
    };
    if !visit(&v).map_err(|e| Error::io(Op::ReadDir, top, e))? {
        return Ok(());
    }
    let entries = |fd: &OwnedFd, rel: &Path| -> Result<Walked> {
        let st =
            at::fstat(fd).map_err(|e| Error::io(Op::Stat, shown(rel), e))?;
        let names = at::read_names(fd)
            .map_err(|e| Error::io(Op::ReadDir, shown(rel), e))?;
        let mut v = Vec::with_capacity(names.len());
        for n in names {
            if let Some(st) = at::lstat(fd.as_raw_fd(), &n).map_err(|e| {
                Error::io(
                    Op::Stat,
                    shown(&rel.join(std::ffi::OsStr::from_bytes(n.as_bytes()))),
                    e,
                )
            })? {
                v.push((n, st));
            }
        }
        v.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        Ok(Walked {
            id: (st.st_dev as u64, st.st_ino as u64),
            entries: v.into_iter(),
        })
    };
    let mut stack = vec![entries(&cur, &rel)?];
    loop {
        let Some(level) = stack.last_mut() else {
            return Ok(());
        };
        if let Some((name, st)) = level.entries.next() {
            rel.push(std::ffi::OsStr::from_bytes(name.as_bytes()));
            let v = Visit {
                rel: &rel,
                dir: cur.as_fd(),
                name: &name,
                stat: &st,
            };
            if !visit(&v).map_err(|e| Error::io(Op::ReadDir, shown(&rel), e))? {
                return Ok(());
            }
            if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                rel.pop();
                continue;
            }
            let child = at::open_dir(cur.as_raw_fd(), &name)
                .map_err(|e| Error::io(Op::Open, shown(&rel), e))?;
            let walked = entries(&child, &rel)?;
            if walked.id != (st.st_dev as u64, st.st_ino as u64) {
                return Err(Error::refused(shown(&rel), Refusal::ChangedType));
            }
            stack.push(walked);
            cur = child;
            continue;
        }
        stack.pop();
        let Some(parent) = stack.last() else {
            return Ok(());
        };
        let up = at::open_dir(cur.as_raw_fd(), c"..")
            .map_err(|e| Error::io(Op::Open, shown(&rel), e))?;
        let st =
            at::fstat(&up).map_err(|e| Error::io(Op::Stat, shown(&rel), e))?;
        rel.pop();
        // Moved meanwhile: `..` is another directory now.
        if (st.st_dev as u64, st.st_ino as u64) != parent.id {
            return Err(Error::refused(shown(&rel), Refusal::ChangedType));
        }
        cur = up;
    }
}

/// One directory on the way down: who it is and what is left to visit.
struct Level {
    /// Its `(dev, ino)`, to recognise it when coming back up.
    id: (u64, u64),
    /// Subdirectories still to remove.
    subdirs: Vec<CString>,
    /// Its name in its parent.
    name: CString,
}

/// Empties the directory open as `top` (at `shown`). Returns the mount
/// points found inside and left.
fn empty_dir(top: OwnedFd, shown: &Path) -> Result<Vec<PathBuf>> {
    let top_st = at::fstat(&top).map_err(|e| Error::io(Op::Stat, shown, e))?;
    let dev = top_st.st_dev as u64;
    let mut left: Vec<PathBuf> = Vec::new();
    let mut cur = top;
    let mut path = shown.to_path_buf();
    let mut stack: Vec<Level> = Vec::new();
    let first = scan(&cur, &path, dev, &mut left)?;
    stack.push(Level {
        id: (dev, top_st.st_ino as u64),
        subdirs: first,
        name: CString::default(),
    });
    loop {
        let Some(level) = stack.last_mut() else {
            return Ok(left);
        };
        if let Some(name) = level.subdirs.pop() {
            path.push(std::ffi::OsStr::from_bytes(name.as_bytes()));
            match open_same_mount(cur.as_fd(), &name, dev) {
                Ok(Some(child)) => {
                    let st = at::fstat(&child)
                        .map_err(|e| Error::io(Op::Stat, &path, e))?;
                    let subdirs = scan(&child, &path, dev, &mut left)?;
                    stack.push(Level {
                        id: (st.st_dev as u64, st.st_ino as u64),
                        subdirs,
                        name,
                    });
                    cur = child;
                }
                Ok(None) => {
                    // Another filesystem: leave it, say so at the end.
                    left.push(path.clone());
                    path.pop();
                }
                Err(e) => return Err(Error::io(Op::Open, &path, e)),
            }
            continue;
        }
        // This level is empty (or holds only mount points): go up.
        let done = stack.pop().unwrap_or_else(|| unreachable!());
        let Some(parent) = stack.last() else {
            return Ok(left);
        };
        let up = at::open_dir(cur.as_raw_fd(), c"..")
            .map_err(|e| Error::io(Op::Open, &path, e))?;
        let st = at::fstat(&up).map_err(|e| Error::io(Op::Stat, &path, e))?;
        if (st.st_dev as u64, st.st_ino as u64) != parent.id {
            // Moved while we were inside: its parent is not ours now.
            return Err(Error::refused(&path, Refusal::ChangedType));
        }
        cur = up;
        match at::unlink(cur.as_raw_fd(), &done.name, true) {
            Ok(()) => {}
            // Holds a mount point we left: not empty, already said.
            Err(e)
                if !left.is_empty()
                    && e.raw_os_error() == Some(libc::ENOTEMPTY) => {}
            Err(e) => return Err(Error::io(Op::Remove, &path, e)),
        }
        path.pop();
    }
}

/// Makes `dir` writable, removes every non-directory in it and returns
/// the names of its subdirectories.
fn scan(
    dir: &OwnedFd,
    shown: &Path,
    dev: u64,
    left: &mut Vec<PathBuf>,
) -> Result<Vec<CString>> {
    // Through the descriptor: a read-only directory (0555 in an extracted
    // root) must not stop the removal.
    at::fchmod(dir, 0o700).map_err(|e| Error::io(Op::Chmod, shown, e))?;
    let names =
        at::read_names(dir).map_err(|e| Error::io(Op::ReadDir, shown, e))?;
    let mut subdirs = Vec::new();
    for n in names {
        let st = match at::lstat(dir.as_raw_fd(), &n) {
            Ok(Some(st)) => st,
            Ok(None) => continue,
            Err(e) => {
                return Err(Error::io(
                    Op::Stat,
                    shown.join(std::ffi::OsStr::from_bytes(n.as_bytes())),
                    e,
                ));
            }
        };
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            if st.st_dev as u64 != dev {
                left.push(
                    shown.join(std::ffi::OsStr::from_bytes(n.as_bytes())),
                );
                continue;
            }
            subdirs.push(n);
        } else if let Err(e) = at::unlink(dir.as_raw_fd(), &n, false) {
            // A file bind-mounted over: leave it like a directory mount.
            let p = shown.join(std::ffi::OsStr::from_bytes(n.as_bytes()));
            if e.raw_os_error() == Some(libc::EBUSY) {
                left.push(p);
            } else {
                return Err(Error::io(Op::Remove, p, e));
            }
        }
    }
    Ok(subdirs)
}

/// Opens the subdirectory `name` if it is on the same mount; `Ok(None)`
/// if it is a mount point.
fn open_same_mount(
    dir: BorrowedFd<'_>,
    name: &CStr,
    dev: u64,
) -> io::Result<Option<OwnedFd>> {
    match sys::open_dir_same_mount(dir.as_raw_fd(), name) {
        Ok(Some(fd)) => return Ok(Some(fd)),
        Ok(None) => {}
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => return Ok(None),
        Err(e) => return Err(e),
    }
    let fd = at::open_dir(dir.as_raw_fd(), name)?;
    let st = at::fstat(&fd)?;
    Ok((st.st_dev as u64 == dev).then_some(fd))
}

#[cfg(test)]
mod test {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{PermissionsExt, symlink};

    /// A path 3,000 levels deep is made and opened through a chain that
    /// holds a few dozen descriptors; going up and down again reaches
    /// the same directories.
    #[test]
    fn deep_chains_hold_few_descriptors() {
        let d = zinstall_testkit::Tmp::new();
        let top = Root::open(d.path()).unwrap();
        let mut chain = Chain::new(Arc::clone(top.fd()));
        let parts: Vec<CString> = (0..3000)
            .map(|i| CString::new(format!("d{}", i % 7)).unwrap())
            .collect();
        let ino = |fd: &OwnedFd| at::fstat(fd).unwrap().st_ino;
        let mut inodes = Vec::new();
        for k in 1..=parts.len() {
            let fd = chain.open(&parts[..k], Some(0o755)).unwrap();
            inodes.push(ino(&fd));
            assert!(
                chain.held() <= Chain::RECENT + Chain::MAX_CHECKPOINTS + 1,
                "{} descriptors at depth {k}",
                chain.held()
            );
        }
        for k in [1500, 3000, 7, 2999, 1, 3000, 64] {
            let fd = chain.open(&parts[..k], None).unwrap();
            assert_eq!(ino(&fd), inodes[k - 1], "depth {k}");
        }
        // A symlink deep down is met and named by its level.
        let fd = chain.open(&parts[..2000], None).unwrap();
        symlinkat_for_test(&fd, "s");
        let mut via = parts[..2000].to_vec();
        via.push(CString::new("s").unwrap());
        via.push(CString::new("x").unwrap());
        match chain.open(&via, Some(0o755)) {
            Err(WalkFail::Met(2000, Met::Symlink)) => {}
            other => panic!("{:?}", other.map(|_| ())),
        }
    }

    fn symlinkat_for_test(dir: &OwnedFd, name: &str) {
        let name = CString::new(name).unwrap();
        let target = CString::new("/").unwrap();
        at::symlink(&target, dir.as_raw_fd(), &name).unwrap();
    }

    #[test]
    fn symlinks_on_the_way_are_refused_and_named() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        let outside = d.path().join("outside");
        fs::create_dir_all(root.join("real/deeper")).unwrap();
        fs::create_dir(&outside).unwrap();
        symlink(&outside, root.join("link")).unwrap();
        symlink("../..", root.join("real/up")).unwrap();
        fs::write(root.join("file"), b"x").unwrap();
        let r = Root::open(&root).unwrap();
        assert!(r.dir(Path::new("real/deeper"), None).is_ok());
        for (rel, at, met) in [
            ("link/x", "link", Met::Symlink),
            ("real/up/outside", "real/up", Met::Symlink),
            ("file/x", "file", Met::NotADirectory),
        ] {
            let e = r.dir(Path::new(rel), Some(0o755)).unwrap_err();
            match e {
                Error::Beneath { at: a, met: m, .. } => {
                    assert_eq!(a, root.join(at), "{rel}");
                    assert_eq!(m, met, "{rel}");
                }
                e => panic!("{rel}: {e}"),
            }
        }
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
        let made = r.dir(Path::new("new/a/b"), Some(0o750)).unwrap();
        assert_eq!(made.path(), root.join("new/a/b"));
        let m = fs::metadata(root.join("new/a")).unwrap();
        assert!(m.is_dir());
        assert!(r.dir(Path::new("../x"), None).is_err());
        assert!(r.dir(Path::new("/etc"), None).is_err());
        // The root itself a symlink: refused.
        symlink(&outside, d.path().join("rootlink")).unwrap();
        assert!(matches!(
            Root::open(&d.path().join("rootlink")),
            Err(Error::Beneath {
                met: Met::Symlink,
                ..
            })
        ));
    }

    #[test]
    fn read_only_deep_trees_are_removed_and_links_out_are_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("tree");
        let outside = d.path().join("outside");
        fs::create_dir_all(tree.join("ro/inner")).unwrap();
        fs::write(tree.join("ro/inner/f"), b"x").unwrap();
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("keep"), b"host").unwrap();
        fs::set_permissions(&outside, fs::Permissions::from_mode(0o751))
            .unwrap();
        symlink(&outside, tree.join("ro/trap")).unwrap();
        // Deeper than PATH_MAX allows by path.
        let mut fd: OwnedFd = File::open(&tree).unwrap().into();
        for _ in 0..1500 {
            let n = c"dd";
            at::mkdir(fd.as_raw_fd(), n, 0o755).unwrap();
            fd = at::open_dir(fd.as_raw_fd(), n).unwrap();
        }
        let f = at::create_file(fd.as_raw_fd(), c"leaf").unwrap();
        drop(f);
        at::fchmod(&fd, 0o555).unwrap();
        for p in ["ro/inner", "ro"] {
            fs::set_permissions(
                tree.join(p),
                fs::Permissions::from_mode(0o555),
            )
            .unwrap();
        }
        remove_tree(&tree).unwrap();
        assert!(!tree.exists());
        assert_eq!(fs::read(outside.join("keep")).unwrap(), b"host");
        let mode = fs::metadata(&outside).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o751);
        // Gone already is fine; a file is removed as a file.
        remove_tree(&tree).unwrap();
        fs::write(&tree, b"f").unwrap();
        remove_tree(&tree).unwrap();
        assert!(!tree.exists());
    }
}
