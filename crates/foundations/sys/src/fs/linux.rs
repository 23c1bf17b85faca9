//! Linux: reflinks, in-kernel copies, `syncfs`, `openat2`, inode flags.

use std::ffi::{CStr, CString};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// `_IOW(0x94, 9, int)`: clone a whole file (btrfs, XFS, bcachefs...).
const FICLONE: libc::c_ulong = 0x4004_9409;
/// `_IOW(0x94, 13, struct file_clone_range)`: clone part of a file.
const FICLONERANGE: libc::c_ulong = 0x4020_940d;

/// `struct file_clone_range` of `<linux/fs.h>`.
#[repr(C)]
struct FileCloneRange {
    src_fd: i64,
    src_offset: u64,
    src_length: u64,
    dest_offset: u64,
}

/// Opens a source file for reading without touching its access time when
/// the kernel lets us (`O_NOATIME` needs ownership or CAP_FOWNER), so that
/// copying a tree does not change the tree. `O_NONBLOCK` keeps a file that
/// turned into a FIFO behind our back from blocking the worker.
// A copy's source, checked by the engine on its descriptor (fstat) as
// it copies; never followed (O_NOFOLLOW) nor waited on (O_NONBLOCK).
#[allow(clippy::disallowed_methods)]
pub fn open_source(path: &Path) -> io::Result<File> {
    let base = libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY;
    match OpenOptions::new()
        .read(true)
        .custom_flags(base | libc::O_NOATIME)
        .open(path)
    {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            OpenOptions::new().read(true).custom_flags(base).open(path)
        }
        r => r,
    }
}

/// [`open_source`] for the entry `name` in the directory open as `dir`
/// (`AT_FDCWD` and a path work too): one name resolved, not a path.
pub fn open_source_at(dir: RawFd, name: &CStr) -> io::Result<File> {
    let base = libc::O_RDONLY
        | libc::O_NOFOLLOW
        | libc::O_NONBLOCK
        | libc::O_NOCTTY
        | libc::O_CLOEXEC;
    let open = |flags| {
        // SAFETY: valid descriptor and C string.
        let fd = unsafe { libc::openat(dir, name.as_ptr(), flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor.
        Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
    };
    match open(base | libc::O_NOATIME) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => open(base),
        r => r,
    }
}

/// Opens the directory `path` as the caller named it (symlinks on the
/// way followed) for looking names up in it, not for reading it:
/// `O_PATH` needs only search permission, as a lookup by path would, so
/// a source in a directory its reader may enter but not list is found.
// O_PATH | O_DIRECTORY: only a directory opens, and nothing is read.
#[allow(clippy::disallowed_methods)]
pub fn open_dir_search(path: &Path) -> io::Result<OwnedFd> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(path)
        .map(OwnedFd::from)
}

/// Reads the directory open as `dir` from its start (a descriptor just
/// opened), handing `f` each entry's name (not `.` or `..`) and its
/// `d_type` (`DT_UNKNOWN` where the filesystem does not say); `f`
/// returns whether to go on. `getdents64` itself into `buf`, reused
/// from one directory to the next: `opendir` would stat the descriptor
/// and need a duplicate of it to leave it open.
pub fn read_dir(
    dir: RawFd,
    buf: &mut Vec<u8>,
    mut f: impl FnMut(&CStr, u8) -> io::Result<bool>,
) -> io::Result<()> {
    // Offsets in `struct linux_dirent64`.
    const RECLEN: usize = 16;
    const TYPE: usize = 18;
    const NAME: usize = 19;
    if buf.len() < 32 << 10 {
        buf.resize(32 << 10, 0);
    }
    loop {
        // SAFETY: valid descriptor; `buf` has `buf.len()` writable bytes.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir,
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Ok(());
        }
        let got = &buf[..n as usize];
        let mut at = 0;
        while at + NAME < got.len() {
            let reclen =
                u16::from_ne_bytes([got[at + RECLEN], got[at + RECLEN + 1]])
                    as usize;
            let end = (at + reclen).min(got.len());
            if reclen <= NAME || end <= at + NAME {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            let name = CStr::from_bytes_until_nul(&got[at + NAME..end])
                .map_err(|_| io::Error::from_raw_os_error(libc::EIO))?;
            let b = name.to_bytes();
            if b != b"." && b != b".." && !f(name, got[at + TYPE])? {
                return Ok(());
            }
            at += reclen;
        }
    }
}

/// Clones `src` into `dst` sharing extents. `Ok(false)`: this filesystem
/// pair cannot (different filesystems, no reflink support); the caller
/// copies instead. Other errors (ENOSPC, EIO) are returned.
pub fn clone_file(src: &File, dst: &File) -> io::Result<bool> {
    // SAFETY: both fds are open; FICLONE takes the source fd as argument.
    let rc =
        unsafe { libc::ioctl(dst.as_raw_fd(), FICLONE as _, src.as_raw_fd()) };
    cloned(rc)
}

/// A clone ioctl's outcome: `Ok(false)` when the filesystem cannot
/// clone, not across these two files, or not this kind of file or range.
fn cloned(rc: libc::c_int) -> io::Result<bool> {
    if rc == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(
            libc::EOPNOTSUPP
            | libc::ENOTTY
            | libc::EINVAL
            | libc::EXDEV
            | libc::ETXTBSY
            | libc::EPERM
            | libc::ENOSYS,
        ) => Ok(false),
        _ => Err(e),
    }
}

/// Clones `len` bytes of `src` at `off_in` into `dst` at `off_out`,
/// sharing extents. `Ok(false)`: not on this filesystem pair, or not for
/// this range (offsets and length must be multiples of the block size,
/// the length may end at the source's end only where that is also the
/// destination's); the caller copies instead.
pub fn clone_range(
    src: &File,
    dst: &File,
    off_in: u64,
    off_out: u64,
    len: u64,
) -> io::Result<bool> {
    let arg = FileCloneRange {
        src_fd: i64::from(src.as_raw_fd()),
        src_offset: off_in,
        src_length: len,
        dest_offset: off_out,
    };
    // SAFETY: both fds are open; arg is a file_clone_range that outlives
    // the call.
    let rc = unsafe {
        libc::ioctl(
            dst.as_raw_fd(),
            FICLONERANGE as _,
            &arg as *const FileCloneRange,
        )
    };
    cloned(rc)
}

/// Copies up to `len` bytes from `src` at `off_in` to `dst` at `off_out`
/// in the kernel. Returns the bytes copied (0 at end of file), or
/// `Ok(None)` when the kernel cannot do it for these files, so the caller
/// falls back to read/write.
pub fn copy_range(
    src: &File,
    dst: &File,
    off_in: u64,
    off_out: u64,
    len: u64,
) -> io::Result<Option<u64>> {
    let mut oi = off_in as libc::loff_t;
    let mut oo = off_out as libc::loff_t;
    // The kernel caps one call near 2 GiB; ask for at most 1 GiB so a
    // progress update comes back now and then.
    let len = len.min(1 << 30) as usize;
    loop {
        // SAFETY: fds are open; offsets point at valid loff_t.
        let r = unsafe {
            libc::copy_file_range(
                src.as_raw_fd(),
                &mut oi,
                dst.as_raw_fd(),
                &mut oo,
                len,
                0,
            )
        };
        if r >= 0 {
            return Ok(Some(r as u64));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            // Not implemented, not across these filesystems, not for this
            // file type, or forbidden by a seccomp filter.
            Some(
                libc::ENOSYS
                | libc::EXDEV
                | libc::EINVAL
                | libc::EOPNOTSUPP
                | libc::EPERM,
            ) => return Ok(None),
            _ => return Err(e),
        }
    }
}

/// Starts writing back the dirty pages of `f` in `off..off + len`
/// without waiting for them (`sync_file_range(SYNC_FILE_RANGE_WRITE)`).
pub fn start_writeback(f: &File, off: u64, len: u64) -> io::Result<()> {
    // SAFETY: plain syscall on an open fd.
    let rc = unsafe {
        libc::sync_file_range(
            f.as_raw_fd(),
            off as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        )
    };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Tells the kernel `f` is read from start to end
/// (`POSIX_FADV_SEQUENTIAL`): twice the read-ahead, so that a cold
/// archive does not stall its reader. Only a hint.
pub fn advise_sequential(f: &File) {
    // SAFETY: plain syscall on an open fd; the result is only a hint.
    let _hint = unsafe {
        libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL)
    };
}

/// `syncfs(2)`: one flush of the destination filesystem.
pub fn sync_fs(f: &File) -> io::Result<()> {
    // SAFETY: plain syscall on an open fd.
    if unsafe { libc::syncfs(f.as_raw_fd()) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Opens the directory `rel` (a relative path of checked components)
/// beneath `root` with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
/// RESOLVE_NO_MAGICLINKS)`: no symlink is followed and nothing outside
/// `root` is reached, whatever is on disk. `Ok(None)` when the kernel has
/// no openat2 (before 5.6, or filtered); the caller then walks the
/// components itself.
pub fn open_dir_beneath(
    root: RawFd,
    rel: &CStr,
) -> io::Result<Option<OwnedFd>> {
    openat2(
        root,
        rel,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        libc::RESOLVE_BENEATH
            | libc::RESOLVE_NO_SYMLINKS
            | libc::RESOLVE_NO_MAGICLINKS,
    )
}

/// Whether this kernel answered openat2 with ENOSYS once: it will again,
/// so the component walk is taken straight away. A fact about the running
/// kernel, the same for every caller, so process-wide is its right scope.
static NO_OPENAT2: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// How many times an openat2 the kernel asks to retry (EAGAIN: a rename
/// or mount elsewhere raced the lookup) is made before the caller takes
/// its component walk instead; a filesystem under constant renames must
/// not hold a thread forever.
const OPENAT2_RETRIES: u32 = 16;

/// `openat2(dir, path, flags, resolve)`; `Ok(None)` when the caller must
/// do without it: the kernel has none (ENOSYS, remembered), a seccomp
/// filter refuses it (EPERM), or it kept asking for a retry.
fn openat2(
    dir: RawFd,
    path: &CStr,
    flags: libc::c_int,
    resolve: u64,
) -> io::Result<Option<OwnedFd>> {
    use std::sync::atomic::Ordering;
    if NO_OPENAT2.load(Ordering::Relaxed) {
        return Ok(None);
    }
    // SAFETY: open_how is plain data; zeroed is valid.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags as u64;
    how.resolve = resolve;
    for _ in 0..OPENAT2_RETRIES {
        // SAFETY: valid descriptor, C string and open_how of the right size.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir,
                path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            // SAFETY: the kernel returned this descriptor.
            return Ok(Some(unsafe { OwnedFd::from_raw_fd(fd as i32) }));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) => continue,
            Some(libc::ENOSYS) => {
                NO_OPENAT2.store(true, Ordering::Relaxed);
                return Ok(None);
            }
            Some(libc::EPERM) => return Ok(None),
            _ => return Err(e),
        }
    }
    Ok(None)
}

/// Sets the mode of the entry `name` in `dir` without following it if it
/// is (or became) a symlink: opened `O_PATH | O_NOFOLLOW`, checked, then
/// changed through `/proc/self/fd`, which reaches that very inode.
pub fn chmod_at(dir: RawFd, name: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: valid descriptor and C string.
    let fd = unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let st = super::at::fstat(&fd)?;
    if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    let p = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: NUL-terminated path.
    crate::ffi::check(unsafe { libc::chmod(p.as_ptr(), mode as libc::mode_t) })
}

/// Opens the directory `name` in `dir` only if it is on the same mount
/// (`RESOLVE_NO_XDEV`: a bind mount of the same filesystem counts as
/// another mount) and not a symlink. `Ok(None)`: no openat2 here, the
/// caller compares device numbers instead.
pub fn open_dir_same_mount(
    dir: RawFd,
    name: &CStr,
) -> io::Result<Option<OwnedFd>> {
    openat2(
        dir,
        name,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        libc::RESOLVE_BENEATH
            | libc::RESOLVE_NO_SYMLINKS
            | libc::RESOLVE_NO_MAGICLINKS
            | libc::RESOLVE_NO_XDEV,
    )
}

/// `FS_IMMUTABLE_FL` of `linux/fs.h`.
pub const IMMUTABLE_FL: libc::c_int = 0x10;

/// The inode flags of `f` (`FS_IOC_GETFLAGS`).
pub fn file_flags(f: &File) -> io::Result<libc::c_int> {
    let mut flags: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one int through the pointer, which
    // points at a live int.
    let r = unsafe {
        libc::ioctl(f.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags)
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(flags)
}

/// Sets the inode flags of `f` to `flags` (`FS_IOC_SETFLAGS`).
pub fn set_file_flags(f: &File, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: FS_IOC_SETFLAGS reads one int through the pointer, which
    // points at a live int.
    let r =
        unsafe { libc::ioctl(f.as_raw_fd(), libc::FS_IOC_SETFLAGS, &flags) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The id of the mount the entry `name` in `dir` is on (the directory
/// itself when `name` is empty), not following a symlink nor triggering
/// an automount: `statx(STATX_MNT_ID)`. Two directories of one
/// filesystem have one device number but different mount ids when one
/// is a bind mount. `Ok(None)` where the kernel does not say (before
/// 5.8, or statx filtered): the caller goes by device numbers.
pub fn mount_id(dir: RawFd, name: &CStr) -> io::Result<Option<u64>> {
    let mut flags = libc::AT_SYMLINK_NOFOLLOW | libc::AT_NO_AUTOMOUNT;
    if name.is_empty() {
        flags |= libc::AT_EMPTY_PATH;
    }
    // SAFETY: statx is plain data; zeroed is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor, a C string and a statx buffer to fill.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_statx,
            dir,
            name.as_ptr(),
            flags,
            libc::STATX_MNT_ID,
            &mut stx as *mut libc::statx,
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOSYS | libc::EPERM) => Ok(None),
            _ => Err(e),
        };
    }
    Ok((stx.stx_mask & libc::STATX_MNT_ID != 0).then_some(stx.stx_mnt_id))
}

/// Unmounts what is mounted at `path` (`umount2`), never through a
/// symlink at its last component (`UMOUNT_NOFOLLOW`), so a mount point
/// swapped for a link cannot make us unmount something else. EINVAL when
/// nothing is mounted there.
pub fn unmount(path: &Path) -> io::Result<()> {
    let c = crate::cstr(path)?;
    // SAFETY: a valid C string; umount2 reads it only.
    if unsafe { libc::umount2(c.as_ptr(), libc::UMOUNT_NOFOLLOW) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A new unnamed regular file in the directory `dir` (`O_TMPFILE`),
/// open for writing, with `mode`: it has no name until [`link_unnamed`]
/// gives it one, and is gone if the process dies first.
pub fn create_unnamed(dir: RawFd, mode: u32) -> io::Result<File> {
    // SAFETY: a valid descriptor and a C string literal.
    let fd = unsafe {
        libc::openat(
            dir,
            c".".as_ptr(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just opened and owned by no one else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// The unnamed file `f` reopened read-only, through its descriptor's
/// `/proc/self/fd` link (not a path anyone else names): what fs-verity
/// needs once the writable descriptor is closed.
pub fn reopen_read_only(f: &File) -> io::Result<File> {
    let proc = CString::new(format!("/proc/self/fd/{}", f.as_raw_fd()))
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a C string; the link names the descriptor we hold.
    let fd =
        unsafe { libc::open(proc.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just opened and owned by no one else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Names the unnamed file `f` ([`create_unnamed`]) `n` in `dir`; fails
/// with `EEXIST` if the name is taken. By its descriptor
/// (`AT_EMPTY_PATH`, which takes `CAP_DAC_READ_SEARCH`), else through its
/// `/proc/self/fd` link, which takes no capability.
pub fn link_unnamed(f: &File, dir: RawFd, n: &CStr) -> io::Result<()> {
    // SAFETY: valid descriptors and C strings.
    let r = unsafe {
        libc::linkat(
            f.as_raw_fd(),
            c"".as_ptr(),
            dir,
            n.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    // Without the capability the kernel says ENOENT.
    if e.raw_os_error() != Some(libc::ENOENT) {
        return Err(e);
    }
    let proc = CString::new(format!("/proc/self/fd/{}", f.as_raw_fd()))
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: valid C strings and descriptor.
    let r = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            proc.as_ptr(),
            dir,
            n.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
