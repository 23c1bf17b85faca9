//! Files: descriptor-relative operations, copies and clones, extended
//! attributes, inode flags.
//!
//! Everything that differs between platforms sits behind one set of
//! functions with identical signatures, chosen once here:
//!
//! | function | Linux (`linux.rs`, `linux_xattr.rs`) | illumos and others (`portable.rs`) |
//! |---|---|---|
//! | `open_source`, `open_source_at` | `O_NOATIME` when allowed | plain `open` |
//! | `open_dir_search` | `O_PATH` (search permission only) | `O_RDONLY` |
//! | `read_dir` | `getdents64` into a reused buffer | `readdir` on a duplicate (no `d_type` on illumos) |
//! | `clone_file` | `ioctl(FICLONE)` | unsupported |
//! | `clone_range` | `ioctl(FICLONERANGE)` | unsupported |
//! | `copy_range` | `copy_file_range(2)` | unsupported |
//! | `start_writeback` | `sync_file_range(SYNC_FILE_RANGE_WRITE)` | nothing |
//! | `advise_sequential` | `posix_fadvise(POSIX_FADV_SEQUENTIAL)` | nothing |
//! | `sync_fs` | `syncfs(2)` | `syncfs(2)` on illumos, else `sync(2)` |
//! | xattrs (`XATTRS`) | `*xattr(2)` | none listed, said once as a notice (see `portable.rs`) |
//! | `open_dir_beneath` | `openat2(RESOLVE_BENEATH)` | caller walks components |
//! | `open_dir_same_mount` | `openat2(RESOLVE_NO_XDEV)` | caller compares `st_dev` |
//! | `mount_id` | `statx(STATX_MNT_ID)`: bind mounts told apart | `None`: caller compares `st_dev` |
//! | `chmod_at` | `O_PATH` + `/proc/self/fd` | `fchmodat` after `lstat` |
//! | `XattrTarget::At` | `/proc/self/fd/DIR/NAME` | none listed |
//! | `file_flags`, `set_file_flags` | `ioctl(FS_IOC_GETFLAGS, FS_IOC_SETFLAGS)` | `ENOTTY`, no such flags |
//! | `subvolume::*` (btrfs snapshots) | `ioctl(BTRFS_IOC_*)` | not built: callers gate on Linux |
//!
//! "Unsupported" is reported as `Ok(false)` / `Ok(None)` so the caller
//! takes its portable path; no error is ever swallowed. POSIX calls that
//! are the same everywhere live in [`at`] (on a directory descriptor and
//! a name) and `posix.rs`; [`Stat`] and [`Times`] (`stat.rs`) are plain
//! values.

pub mod at;
mod posix;
mod stat;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
mod linux_xattr;
#[cfg(target_os = "linux")]
pub mod subvolume;
#[cfg(target_os = "linux")]
use linux as platform;
#[cfg(target_os = "linux")]
use linux_xattr as xattr;

// illumos and every other Unix: read/write copies, no reflink.
#[cfg(not(target_os = "linux"))]
mod portable;
#[cfg(not(target_os = "linux"))]
use portable as platform;
#[cfg(not(target_os = "linux"))]
use portable as xattr;

/// Whether this platform's build copies extended attributes.
pub const XATTRS: bool = cfg!(target_os = "linux");

/// Unmounting: Linux's, for composefs roots.
#[cfg(target_os = "linux")]
pub use linux::unmount;
/// Unnamed files: Linux's, for composefs objects.
#[cfg(target_os = "linux")]
pub use linux::{create_unnamed, link_unnamed, reopen_read_only};
/// Linux's alone: composefs (its only user) is Linux's.
#[cfg(target_os = "linux")]
pub use linux_xattr::remove_xattr_fd;
pub use platform::{
    IMMUTABLE_FL, advise_sequential, chmod_at, clone_file, clone_range,
    copy_range, file_flags, mount_id, open_dir_beneath, open_dir_same_mount,
    open_dir_search, open_source, open_source_at, read_dir, set_file_flags,
    start_writeback, sync_fs,
};
pub use posix::{major_minor, makedev, mkdir, seek, set_times_fd, sync};
pub use stat::{Stat, Times};
pub use xattr::{XattrTarget, get_xattr, list_xattrs, set_xattr};
