//! illumos and other Unix systems: the portable read/write path.
//!
//! Neither reflinks nor in-kernel copies are offered here, so the engine
//! copies through its per-worker buffer, which is what made illumos zone
//! installs fast in the first place. illumos extended attributes live in
//! per-file attribute directories (`openat(O_XATTR)`) rather than in
//! name/value calls; copying them is not implemented, so none are listed.
//! System trees rarely carry them; zinstall(8) lists this limitation.

use std::ffi::CStr;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Opens a source file without following a final symlink and without
/// blocking on a file that turned into a FIFO.
// A copy's source, checked by the engine on its descriptor (fstat) as
// it copies; never followed (O_NOFOLLOW) nor waited on (O_NONBLOCK).
#[allow(clippy::disallowed_methods)]
pub fn open_source(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
}

/// Opens the directory `path` as the caller named it (symlinks on the
/// way followed), to look names up in it. No `O_PATH` here: opened for
/// reading.
// O_DIRECTORY: only a directory opens, and nothing is read.
#[allow(clippy::disallowed_methods)]
pub fn open_dir_search(path: &Path) -> io::Result<std::os::fd::OwnedFd> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(path)
        .map(std::os::fd::OwnedFd::from)
}

/// [`open_source`] for the entry `name` in the directory open as `dir`
/// (`AT_FDCWD` and a path work too).
pub fn open_source_at(
    dir: std::os::fd::RawFd,
    name: &CStr,
) -> io::Result<File> {
    use std::os::fd::FromRawFd;
    let flags = libc::O_RDONLY
        | libc::O_NOFOLLOW
        | libc::O_NONBLOCK
        | libc::O_NOCTTY
        | libc::O_CLOEXEC;
    // SAFETY: valid descriptor and C string.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Directory entries through `readdir` (see `at::read_entries`).
pub use super::at::read_entries as read_dir;

/// No reflinks here.
pub fn clone_file(_src: &File, _dst: &File) -> io::Result<bool> {
    Ok(false)
}

/// No reflinks here.
pub fn clone_range(
    _src: &File,
    _dst: &File,
    _off_in: u64,
    _off_out: u64,
    _len: u64,
) -> io::Result<bool> {
    Ok(false)
}

/// Writeback starts at the final flush here.
pub fn start_writeback(_f: &File, _off: u64, _len: u64) -> io::Result<()> {
    Ok(())
}

/// Read-ahead is the system's own here.
pub fn advise_sequential(_f: &File) {}

/// No in-kernel copies here.
pub fn copy_range(
    _src: &File,
    _dst: &File,
    _off_in: u64,
    _off_out: u64,
    _len: u64,
) -> io::Result<Option<u64>> {
    Ok(None)
}

/// `syncfs(2)` on illumos, which has it: only the destination's
/// filesystem is flushed.
#[cfg(target_os = "illumos")]
pub fn sync_fs(f: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: plain system call on an open descriptor.
    if unsafe { libc::syncfs(f.as_raw_fd()) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Elsewhere no per-filesystem sync: `sync(2)` flushes everything, which
/// includes the destination.
#[cfg(not(target_os = "illumos"))]
pub fn sync_fs(_f: &File) -> io::Result<()> {
    // SAFETY: sync takes no arguments and cannot fail.
    unsafe { libc::sync() };
    Ok(())
}

/// What an xattr call applies to.
pub enum XattrTarget<'a> {
    Fd(std::os::fd::BorrowedFd<'a>),
    Path(&'a CStr),
    At(std::os::fd::RawFd, &'a CStr),
}

/// See the module docs: no name/value attributes on this platform.
pub fn list_xattrs(_t: &XattrTarget<'_>) -> io::Result<Vec<u8>> {
    Ok(Vec::new())
}

/// Never called, since nothing is listed.
pub fn get_xattr(
    _t: &XattrTarget<'_>,
    _name: &CStr,
) -> io::Result<Option<Vec<u8>>> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Never called, since nothing is listed.
pub fn set_xattr(
    _t: &XattrTarget<'_>,
    _name: &CStr,
    _value: &[u8],
) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// No openat2 here: the caller walks the components with `O_NOFOLLOW`.
pub fn open_dir_beneath(
    _root: std::os::fd::RawFd,
    _rel: &CStr,
) -> io::Result<Option<std::os::fd::OwnedFd>> {
    Ok(None)
}

/// `fchmodat` after checking the entry is not a symlink: without
/// `O_PATH`, a symlink swapped in between the two calls would be followed;
/// only a writer inside the same directory could do that.
pub fn chmod_at(
    dir: std::os::fd::RawFd,
    name: &CStr,
    mode: u32,
) -> io::Result<()> {
    match super::at::lstat(dir, name)? {
        Some(st) if st.st_mode & libc::S_IFMT != libc::S_IFLNK => {
            super::at::chmod(dir, name, mode)
        }
        Some(_) => Err(io::Error::from_raw_os_error(libc::ELOOP)),
        None => Err(io::Error::from_raw_os_error(libc::ENOENT)),
    }
}

/// No openat2: the caller compares device numbers.
pub fn open_dir_same_mount(
    _dir: std::os::fd::RawFd,
    _name: &CStr,
) -> io::Result<Option<std::os::fd::OwnedFd>> {
    Ok(None)
}

/// Linux's `FS_IMMUTABLE_FL`; no file here carries it.
pub const IMMUTABLE_FL: libc::c_int = 0x10;

/// No flags here: `ENOTTY`.
pub fn file_flags(_f: &File) -> io::Result<libc::c_int> {
    Err(io::Error::from_raw_os_error(libc::ENOTTY))
}

/// No flags here: `ENOTTY`.
pub fn set_file_flags(_f: &File, _flags: libc::c_int) -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::ENOTTY))
}

/// See the Linux version: there is no mount id here (illumos's `lofs`
/// mounts are not told apart from the filesystem they show), so `None`,
/// and the caller goes by device numbers.
pub fn mount_id(
    _dir: std::os::fd::RawFd,
    _name: &CStr,
) -> io::Result<Option<u64>> {
    Ok(None)
}
