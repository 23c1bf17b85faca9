//! btrfs subvolumes: a directory that is one can be snapshotted whole,
//! copy-on-write, in one call, and removed in one call.
//!
//! An install on btrfs makes its root a subvolume; an update then takes
//! the new root as a snapshot of the old (nothing walked, nothing
//! linked), and the previous root goes as a subvolume does. Elsewhere,
//! and on btrfs for a root that is a plain directory, each call answers
//! `Ok(false)` and the caller takes its portable path.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// The longest subvolume name, with its NUL.
const NAME_MAX: usize = 4040;

/// `struct btrfs_ioctl_vol_args_v2` of `<linux/btrfs.h>`.
#[repr(C)]
struct VolArgsV2 {
    fd: i64,
    transid: u64,
    flags: u64,
    unused: [u64; 4],
    name: [u8; NAME_MAX],
}

/// `struct btrfs_ioctl_vol_args`, for kernels before `SNAP_DESTROY_V2`.
#[repr(C)]
struct VolArgs {
    fd: i64,
    name: [u8; 4088],
}

/// `struct btrfs_ioctl_ino_lookup_args`.
#[repr(C)]
struct InoLookup {
    treeid: u64,
    objectid: u64,
    name: [u8; 4080],
}

const MAGIC: u64 = 0x94;

/// `_IOW(BTRFS_IOCTL_MAGIC, nr, size)`.
const fn iow(nr: u64, size: usize) -> u64 {
    (1 << 30) | ((size as u64) << 16) | (MAGIC << 8) | nr
}

const SNAP_CREATE_V2: u64 = iow(23, std::mem::size_of::<VolArgsV2>());
const SUBVOL_CREATE_V2: u64 = iow(24, std::mem::size_of::<VolArgsV2>());
const SNAP_DESTROY_V2: u64 = iow(63, std::mem::size_of::<VolArgsV2>());
const SNAP_DESTROY: u64 = iow(15, std::mem::size_of::<VolArgs>());
/// `_IOWR(BTRFS_IOCTL_MAGIC, 18, struct btrfs_ioctl_ino_lookup_args)`.
const INO_LOOKUP: u64 = (3 << 30)
    | ((std::mem::size_of::<InoLookup>() as u64) << 16)
    | (MAGIC << 8)
    | 18;

/// The inode number of every subvolume's root directory.
const FIRST_FREE_OBJECTID: u64 = 256;
const BTRFS_SUPER_MAGIC: i64 = 0x9123_683e;

fn args_v2(name: &CStr, fd: i64) -> io::Result<Box<VolArgsV2>> {
    let n = name.to_bytes();
    if n.is_empty() || n.len() >= NAME_MAX || n.contains(&b'/') {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut a = Box::new(VolArgsV2 {
        fd,
        transid: 0,
        flags: 0,
        unused: [0; 4],
        name: [0; NAME_MAX],
    });
    a.name[..n.len()].copy_from_slice(n);
    Ok(a)
}

/// What a refused btrfs call means: not btrfs (or not this kind of
/// directory) is `Ok(false)`; anything else is the error.
fn unsupported(e: io::Error) -> io::Result<bool> {
    match e.raw_os_error() {
        Some(libc::ENOTTY | libc::EOPNOTSUPP | libc::EINVAL | libc::EXDEV) => {
            Ok(false)
        }
        _ => Err(e),
    }
}

/// True if `dir` is the root directory of a btrfs subvolume.
pub fn is_subvolume(dir: BorrowedFd<'_>) -> io::Result<bool> {
    let mut fs = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `dir` is open; the kernel fills the struct.
    if unsafe { libc::fstatfs(dir.as_raw_fd(), fs.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatfs returned 0, so the struct is filled.
    let fs = unsafe { fs.assume_init() };
    // `f_type`'s width differs between targets.
    #[allow(clippy::unnecessary_cast)]
    let kind = fs.f_type as i64;
    if kind != BTRFS_SUPER_MAGIC {
        return Ok(false);
    }
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: as above.
    if unsafe { libc::fstat(dir.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat returned 0.
    let st = unsafe { st.assume_init() };
    Ok(st.st_mode & libc::S_IFMT == libc::S_IFDIR
        && st.st_ino == FIRST_FREE_OBJECTID)
}

/// The id of the subvolume whose root directory `dir` is: lasting across
/// mounts, unlike its inode number (every subvolume's root is 256) or
/// its device number. `None` if `dir` is not one.
pub fn subvolume_id(dir: BorrowedFd<'_>) -> io::Result<Option<u64>> {
    if !is_subvolume(dir)? {
        return Ok(None);
    }
    let mut a = Box::new(InoLookup {
        treeid: 0,
        objectid: FIRST_FREE_OBJECTID,
        name: [0; 4080],
    });
    // SAFETY: `dir` is open and `a` is the struct this request reads and
    // fills (a tree id of 0 asks for the descriptor's own subvolume, which
    // any user may).
    let rc = unsafe {
        libc::ioctl(dir.as_raw_fd(), INO_LOOKUP as _, &mut *a as *mut InoLookup)
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Some(a.treeid))
}

/// Makes `name` in `parent` a new, empty subvolume; `Ok(false)` where
/// the filesystem has none (the caller makes a directory).
pub fn create_subvolume(
    parent: BorrowedFd<'_>,
    name: &CStr,
) -> io::Result<bool> {
    let a = args_v2(name, 0)?;
    // SAFETY: `parent` is open and `a` is the struct this request reads.
    let rc = unsafe {
        libc::ioctl(
            parent.as_raw_fd(),
            SUBVOL_CREATE_V2 as _,
            &*a as *const VolArgsV2,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    unsupported(io::Error::last_os_error())
}

/// Makes `name` in `parent` a writable snapshot of the subvolume `src`;
/// `Ok(false)` where it cannot (not btrfs, `src` not a subvolume, or
/// another filesystem).
pub fn snapshot(
    src: BorrowedFd<'_>,
    parent: BorrowedFd<'_>,
    name: &CStr,
) -> io::Result<bool> {
    let a = args_v2(name, i64::from(src.as_raw_fd()))?;
    // SAFETY: both descriptors are open and `a` is the struct this
    // request reads.
    let rc = unsafe {
        libc::ioctl(
            parent.as_raw_fd(),
            SNAP_CREATE_V2 as _,
            &*a as *const VolArgsV2,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    unsupported(io::Error::last_os_error())
}

/// Removes the subvolume `name` in `parent` with everything in it, in
/// one call; `Ok(false)` where it is not one (or the kernel will not).
pub fn destroy_subvolume(
    parent: BorrowedFd<'_>,
    name: &CStr,
) -> io::Result<bool> {
    let a = args_v2(name, 0)?;
    // SAFETY: `parent` is open and `a` is the struct this request reads.
    let rc = unsafe {
        libc::ioctl(
            parent.as_raw_fd(),
            SNAP_DESTROY_V2 as _,
            &*a as *const VolArgsV2,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::ENOTTY) {
        return unsupported(e);
    }
    // Before Linux 5.7: the first version of the request.
    let mut old = Box::new(VolArgs {
        fd: 0,
        name: [0; 4088],
    });
    let n = name.to_bytes();
    if n.len() >= old.name.len() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    old.name[..n.len()].copy_from_slice(n);
    // SAFETY: as above, with the first version's struct.
    let rc = unsafe {
        libc::ioctl(
            parent.as_raw_fd(),
            SNAP_DESTROY as _,
            &*old as *const VolArgs,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    unsupported(io::Error::last_os_error())
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn the_requests_are_the_kernels() {
        // From <linux/btrfs.h> as compiled.
        assert_eq!(std::mem::size_of::<VolArgsV2>(), 4096);
        assert_eq!(std::mem::size_of::<VolArgs>(), 4096);
        assert_eq!(SNAP_CREATE_V2, 0x5000_9417);
        assert_eq!(SUBVOL_CREATE_V2, 0x5000_9418);
        assert_eq!(SNAP_DESTROY_V2, 0x5000_943f);
        assert_eq!(SNAP_DESTROY, 0x5000_940f);
        assert_eq!(std::mem::size_of::<InoLookup>(), 4096);
        assert_eq!(INO_LOOKUP, 0xd000_9412);
    }
}
