//! POSIX calls that std does not offer in the form the engine needs
//! (no-follow variants, raw timespecs, device numbers), the same on every
//! Unix.

use std::ffi::CString;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// A path as a C string; paths never contain NUL, but a caller-made one
/// could, and that must be an error rather than a panic.
pub(crate) fn cstr(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte")
    })
}

pub(crate) fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Access and modification times, to the nanosecond, as stat gave them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Times {
    pub(crate) atime: (i64, i64),
    pub(crate) mtime: (i64, i64),
}

impl Times {
    pub(crate) fn of(md: &Metadata) -> Self {
        Times {
            atime: (md.atime(), md.atime_nsec()),
            mtime: (md.mtime(), md.mtime_nsec()),
        }
    }

    pub(crate) fn timespecs(&self) -> [libc::timespec; 2] {
        let ts = |(s, ns): (i64, i64)| libc::timespec {
            tv_sec: s as libc::time_t,
            tv_nsec: ns as _,
        };
        [ts(self.atime), ts(self.mtime)]
    }
}

/// What the engine keeps of a `stat`: type and permission bits, owner,
/// link count, identity, device number, size and times. Made from
/// `fstatat` (std makes no `Metadata` from a directory descriptor and a
/// name) or from a `Metadata`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stat {
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) nlink: u64,
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) rdev: u64,
    pub(crate) size: u64,
    pub(crate) times: Times,
}

// libc's `stat` field types differ between platforms: casts that are
// no-ops here are not everywhere.
#[allow(clippy::unnecessary_cast)]
impl Stat {
    pub(crate) fn of(st: &libc::stat) -> Self {
        Stat {
            mode: st.st_mode as u32,
            uid: st.st_uid as u32,
            gid: st.st_gid as u32,
            nlink: st.st_nlink as u64,
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            rdev: st.st_rdev as u64,
            size: st.st_size as u64,
            times: Times {
                atime: (st.st_atime as i64, st.st_atime_nsec as i64),
                mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
            },
        }
    }

    pub(crate) fn of_metadata(md: &Metadata) -> Self {
        Stat {
            mode: md.mode(),
            uid: md.uid(),
            gid: md.gid(),
            nlink: md.nlink(),
            dev: md.dev(),
            ino: md.ino(),
            rdev: md.rdev(),
            size: md.len(),
            times: Times::of(md),
        }
    }

    /// The type bits (`S_IFMT`).
    pub(crate) fn kind(&self) -> u32 {
        self.mode & libc::S_IFMT as u32
    }

    pub(crate) fn is_dir(&self) -> bool {
        self.kind() == libc::S_IFDIR as u32
    }

    pub(crate) fn is_symlink(&self) -> bool {
        self.kind() == libc::S_IFLNK as u32
    }

    /// `(dev, ino)`: the identity of a file.
    pub(crate) fn identity(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }
}

/// `futimens(2)`.
pub(crate) fn set_times_fd(f: &File, t: &Times) -> io::Result<()> {
    let ts = t.timespecs();
    // SAFETY: the fd is open for the life of `f`; `ts` has two entries.
    check(unsafe { libc::futimens(f.as_raw_fd(), ts.as_ptr()) })
}

/// `mkdir(2)`.
pub(crate) fn mkdir(path: &Path, mode: u32) -> io::Result<()> {
    let p = cstr(path)?;
    // SAFETY: `p` is NUL-terminated.
    check(unsafe { libc::mkdir(p.as_ptr(), mode as libc::mode_t) })
}

/// Where the next data or hole starts at or after `offset`
/// (`SEEK_DATA`/`SEEK_HOLE`). `Ok(None)` means "no more data" (ENXIO).
pub(crate) fn seek(
    f: &File,
    offset: u64,
    data: bool,
) -> io::Result<Option<u64>> {
    let whence = if data {
        libc::SEEK_DATA
    } else {
        libc::SEEK_HOLE
    };
    // SAFETY: plain lseek on an open fd.
    let r =
        unsafe { libc::lseek(f.as_raw_fd(), offset as libc::off_t, whence) };
    if r == -1 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENXIO) {
            return Ok(None);
        }
        return Err(e);
    }
    Ok(Some(r as u64))
}

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`).
pub(crate) fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a timespec to fill.
    let rc =
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The effective user id; decides whether ownership can be kept.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// The effective group id: what new files get as group when not root.
pub(crate) fn egid() -> u32 {
    // SAFETY: getegid cannot fail.
    unsafe { libc::getegid() }
}

/// The supplementary groups of this thread (empty if they cannot be
/// read).
pub(crate) fn groups() -> Vec<u32> {
    let mut g = vec![0 as libc::gid_t; 65536];
    // SAFETY: the buffer holds as many gids as its length says.
    let n = unsafe { libc::getgroups(g.len() as libc::c_int, g.as_mut_ptr()) };
    g.truncate(usize::try_from(n).unwrap_or(0));
    g
}

/// A directory file descriptor with the `*at` calls the unpacker uses.
/// Names passed in are single path components: the caller has checked
/// them, and the kernel never sees a `/` from an archive here.
pub(crate) mod at {
    use std::ffi::{CStr, CString};
    use std::fs::File;
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

    use super::{Times, check};

    fn fd_result(fd: libc::c_int) -> io::Result<OwnedFd> {
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor to us.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Opens the directory `n` in `dir` without following a symlink.
    pub(crate) fn open_dir(dir: RawFd, n: &CStr) -> io::Result<OwnedFd> {
        // SAFETY: valid descriptor and C string.
        fd_result(unsafe {
            libc::openat(
                dir,
                n.as_ptr(),
                libc::O_RDONLY
                    | libc::O_DIRECTORY
                    | libc::O_NOFOLLOW
                    | libc::O_CLOEXEC,
            )
        })
    }

    /// Opens `n` in `dir` for reading without following a symlink (ELOOP
    /// if it is one) and without blocking on a fifo or a device.
    pub(crate) fn open_read(dir: RawFd, n: &CStr) -> io::Result<File> {
        // SAFETY: valid descriptor and C string.
        let fd = fd_result(unsafe {
            libc::openat(
                dir,
                n.as_ptr(),
                libc::O_RDONLY
                    | libc::O_NOFOLLOW
                    | libc::O_NONBLOCK
                    | libc::O_CLOEXEC,
            )
        })?;
        Ok(File::from(fd))
    }

    /// `fstatat(AT_SYMLINK_NOFOLLOW)` as a [`Stat`](super::Stat); a
    /// missing entry is an error (`ENOENT`).
    pub(crate) fn stat(dir: RawFd, n: &CStr) -> io::Result<super::Stat> {
        match lstat(dir, n)? {
            Some(st) => Ok(super::Stat::of(&st)),
            None => Err(io::Error::from_raw_os_error(libc::ENOENT)),
        }
    }

    /// Creates a regular file `n` in `dir`; fails if anything is there.
    pub(crate) fn create_file(dir: RawFd, n: &CStr) -> io::Result<File> {
        // SAFETY: valid descriptor and C string.
        let fd = fd_result(unsafe {
            libc::openat(
                dir,
                n.as_ptr(),
                libc::O_WRONLY
                    | libc::O_CREAT
                    | libc::O_EXCL
                    | libc::O_NOFOLLOW
                    | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        })?;
        Ok(File::from(fd))
    }

    pub(crate) fn mkdir(dir: RawFd, n: &CStr, mode: u32) -> io::Result<()> {
        // SAFETY: valid descriptor and C string.
        check(unsafe { libc::mkdirat(dir, n.as_ptr(), mode as libc::mode_t) })
    }

    pub(crate) fn symlink(
        target: &CStr,
        dir: RawFd,
        n: &CStr,
    ) -> io::Result<()> {
        // SAFETY: valid descriptor and C strings.
        check(unsafe { libc::symlinkat(target.as_ptr(), dir, n.as_ptr()) })
    }

    /// A hard link at `dir/n` to `from_dir/from` (a symlink is linked
    /// itself, never followed).
    pub(crate) fn link(
        from_dir: RawFd,
        from: &CStr,
        dir: RawFd,
        n: &CStr,
    ) -> io::Result<()> {
        // SAFETY: valid descriptors and C strings.
        check(unsafe {
            libc::linkat(from_dir, from.as_ptr(), dir, n.as_ptr(), 0)
        })
    }

    pub(crate) fn mknod(
        dir: RawFd,
        n: &CStr,
        mode: u32,
        rdev: u64,
    ) -> io::Result<()> {
        // SAFETY: valid descriptor and C string.
        check(unsafe {
            libc::mknodat(
                dir,
                n.as_ptr(),
                mode as libc::mode_t,
                rdev as libc::dev_t,
            )
        })
    }

    /// `fchmodat` on a name that is not a symlink.
    #[cfg_attr(target_os = "linux", allow(dead_code))]
    pub(crate) fn chmod(dir: RawFd, n: &CStr, mode: u32) -> io::Result<()> {
        // SAFETY: valid descriptor and C string.
        check(unsafe {
            libc::fchmodat(dir, n.as_ptr(), mode as libc::mode_t, 0)
        })
    }

    pub(crate) fn unlink(dir: RawFd, n: &CStr, is_dir: bool) -> io::Result<()> {
        let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
        // SAFETY: valid descriptor and C string.
        check(unsafe { libc::unlinkat(dir, n.as_ptr(), flags) })
    }

    pub(crate) fn rename(dir: RawFd, from: &CStr, to: &CStr) -> io::Result<()> {
        // SAFETY: valid descriptor and C strings.
        check(unsafe { libc::renameat(dir, from.as_ptr(), dir, to.as_ptr()) })
    }

    /// `fstatat(AT_SYMLINK_NOFOLLOW)`; `None` if nothing is there.
    pub(crate) fn lstat(
        dir: RawFd,
        n: &CStr,
    ) -> io::Result<Option<libc::stat>> {
        // SAFETY: stat is plain data; zeroed is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid descriptor, C string and out pointer.
        let rc = unsafe {
            libc::fstatat(dir, n.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW)
        };
        if rc == 0 {
            return Ok(Some(st));
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOENT) {
            Ok(None)
        } else {
            Err(e)
        }
    }

    pub(crate) fn lchown(
        dir: RawFd,
        n: &CStr,
        uid: u32,
        gid: u32,
    ) -> io::Result<()> {
        // SAFETY: valid descriptor and C string.
        check(unsafe {
            libc::fchownat(dir, n.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW)
        })
    }

    pub(crate) fn set_times(dir: RawFd, n: &CStr, t: &Times) -> io::Result<()> {
        let ts = t.timespecs();
        // SAFETY: valid descriptor, C string, two timespecs.
        check(unsafe {
            libc::utimensat(
                dir,
                n.as_ptr(),
                ts.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })
    }

    /// `fchown` on an open descriptor.
    pub(crate) fn fchown(
        f: &impl AsRawFd,
        uid: u32,
        gid: u32,
    ) -> io::Result<()> {
        // SAFETY: valid descriptor.
        check(unsafe { libc::fchown(f.as_raw_fd(), uid, gid) })
    }

    /// `fchmod` on an open descriptor.
    pub(crate) fn fchmod(f: &impl AsRawFd, mode: u32) -> io::Result<()> {
        // SAFETY: valid descriptor.
        check(unsafe { libc::fchmod(f.as_raw_fd(), mode as libc::mode_t) })
    }

    /// `fstat` on an open descriptor.
    pub(crate) fn fstat(f: &impl AsRawFd) -> io::Result<libc::stat> {
        // SAFETY: stat is plain data; zeroed is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid descriptor and out pointer.
        check(unsafe { libc::fstat(f.as_raw_fd(), &mut st) })?;
        Ok(st)
    }

    /// `readlinkat`: the target of the symlink `n` in `dir`, byte-exact.
    pub(crate) fn readlink(dir: RawFd, n: &CStr) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; 256];
        loop {
            // SAFETY: valid descriptor, C string and buffer of buf.len().
            let r = unsafe {
                libc::readlinkat(
                    dir,
                    n.as_ptr(),
                    buf.as_mut_ptr() as *mut libc::c_char,
                    buf.len(),
                )
            };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            let r = r as usize;
            if r < buf.len() {
                buf.truncate(r);
                return Ok(buf);
            }
            // Possibly cut: ask again with room to spare (targets are
            // bounded by PATH_MAX on every filesystem we write to).
            if buf.len() >= 1 << 16 {
                return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
            }
            buf.resize(buf.len() * 4, 0);
        }
    }

    /// The names in the directory open as `dir` (without `.` and `..`),
    /// read through a duplicate of the descriptor so `dir` stays usable.
    pub(crate) fn read_names(dir: &impl AsRawFd) -> io::Result<Vec<CString>> {
        let mut names = Vec::new();
        read_entries(dir.as_raw_fd(), &mut Vec::new(), |name, _| {
            names.push(name.to_owned());
            Ok(true)
        })?;
        Ok(names)
    }

    /// Reads the directory open as `dir` from its start, handing `f` each
    /// entry's name (not `.` or `..`) and its `d_type` (`DT_UNKNOWN`
    /// where the platform or filesystem does not say); `f` returns
    /// whether to go on. Read through a duplicate, so `dir` stays open
    /// for opening what is inside.
    pub(crate) fn read_entries(
        dir: RawFd,
        _buf: &mut Vec<u8>,
        mut f: impl FnMut(&CStr, u8) -> io::Result<bool>,
    ) -> io::Result<()> {
        // SAFETY: plain dup of an open descriptor.
        let dup = unsafe { libc::fcntl(dir, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `dup` is ours; on success the DIR owns it.
        let d = unsafe { libc::fdopendir(dup) };
        if d.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: fdopendir failed, so `dup` is still ours to close.
            unsafe { libc::close(dup) };
            return Err(e);
        }
        // SAFETY: `d` is a valid DIR.
        unsafe { libc::rewinddir(d) };
        let result = loop {
            // SAFETY: resetting errno is always allowed.
            unsafe { *errno_location() = 0 };
            // SAFETY: `d` is a valid DIR.
            let ent = unsafe { libc::readdir(d) };
            if ent.is_null() {
                // SAFETY: reading errno.
                let err = unsafe { *errno_location() };
                break if err == 0 {
                    Ok(())
                } else {
                    Err(io::Error::from_raw_os_error(err))
                };
            }
            // SAFETY: d_name is NUL-terminated within the entry.
            let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) };
            let b = name.to_bytes();
            if b == b"." || b == b".." {
                continue;
            }
            match f(name, entry_type(ent)) {
                Ok(true) => {}
                Ok(false) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        // SAFETY: `d` is valid and closed once.
        unsafe { libc::closedir(d) };
        result
    }

    /// illumos's `dirent` has no type: the caller stats the entry.
    #[cfg(any(target_os = "illumos", target_os = "solaris"))]
    fn entry_type(_ent: *const libc::dirent) -> u8 {
        0
    }

    #[cfg(not(any(target_os = "illumos", target_os = "solaris")))]
    fn entry_type(ent: *const libc::dirent) -> u8 {
        // SAFETY: `ent` is the entry readdir just returned.
        unsafe { (*ent).d_type }
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn errno_location() -> *mut libc::c_int {
        // SAFETY: always valid for the calling thread.
        unsafe { libc::__errno_location() }
    }

    #[cfg(any(target_os = "illumos", target_os = "solaris"))]
    fn errno_location() -> *mut libc::c_int {
        // SAFETY: always valid for the calling thread.
        unsafe { libc::___errno() }
    }

    #[cfg(not(any(
        target_os = "linux",
        target_os = "android",
        target_os = "illumos",
        target_os = "solaris"
    )))]
    fn errno_location() -> *mut libc::c_int {
        // SAFETY: always valid for the calling thread.
        unsafe { libc::__error() }
    }

    /// `futimens` on an open descriptor.
    pub(crate) fn futimens(f: &impl AsRawFd, t: &Times) -> io::Result<()> {
        let ts = t.timespecs();
        // SAFETY: valid descriptor, two timespecs.
        check(unsafe { libc::futimens(f.as_raw_fd(), ts.as_ptr()) })
    }
}

/// `flock(2)` with `op`, retried on `EINTR`: `Ok(false)` when `LOCK_NB`
/// finds the lock held.
pub(crate) fn flock(f: &impl AsRawFd, op: libc::c_int) -> io::Result<bool> {
    loop {
        // SAFETY: plain system call on an open descriptor.
        if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::EWOULDBLOCK) if op & libc::LOCK_NB != 0 => {
                return Ok(false);
            }
            _ => return Err(e),
        }
    }
}

/// A device number's major and minor parts; libc's are `unsafe` on
/// illumos as `makedev` is.
pub(crate) fn major_minor(dev: u64) -> (u32, u32) {
    let dev = dev as libc::dev_t;
    // Both parts are `c_uint` on Linux and illumos.
    #[cfg(target_os = "linux")]
    let parts: (u32, u32) = (libc::major(dev), libc::minor(dev));
    #[cfg(not(target_os = "linux"))]
    // SAFETY: pure arithmetic on one integer.
    let parts: (u32, u32) = unsafe { (libc::major(dev), libc::minor(dev)) };
    parts
}

/// A device number from its parts. libc's `makedev` is a safe function
/// on Linux and an `unsafe` one on illumos.
pub(crate) fn makedev(major: u32, minor: u32) -> u64 {
    #[cfg(target_os = "linux")]
    let d = libc::makedev(major, minor);
    #[cfg(not(target_os = "linux"))]
    // SAFETY: pure arithmetic on two integers.
    let d = unsafe { libc::makedev(major, minor) };
    d as u64
}

/// The soft and hard limits on open descriptors (`RLIMIT_NOFILE`).
// rlim_t is u64 here, not everywhere.
#[allow(clippy::unnecessary_cast)]
pub(crate) fn nofile_limits() -> io::Result<(u64, u64)> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: r is a valid rlimit for getrlimit to fill.
    check(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) })?;
    Ok((r.rlim_cur as u64, r.rlim_max as u64))
}

/// Sets the soft limit on open descriptors, the hard one kept.
#[allow(clippy::unnecessary_cast)]
pub(crate) fn set_nofile_soft(soft: u64) -> io::Result<()> {
    let (_, hard) = nofile_limits()?;
    let r = libc::rlimit {
        rlim_cur: soft as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: r is a valid rlimit.
    check(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) })
}
