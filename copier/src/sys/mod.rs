//! The platform seam.
//!
//! Everything that differs between platforms sits behind one set of
//! functions with identical signatures, chosen once here:
//!
//! | function | Linux (`linux.rs`) | illumos and others (`portable.rs`) |
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
//! | `chmod_at` | `O_PATH` + `/proc/self/fd` | `fchmodat` after `lstat` |
//! | `XattrTarget::At` | `/proc/self/fd/DIR/NAME` | none listed |
//! | `assume` (a run's identity) | per-thread `setfsuid`, `setfsgid`, `setgroups`, effective capabilities cleared (`capset`) | unsupported (an error) |
//!
//! "Unsupported" is reported as `Ok(false)` / `Ok(None)` so the caller
//! takes its portable path; no error is ever swallowed. POSIX calls that
//! are the same everywhere live in [`posix`]. This is the only place in
//! the crate with `unsafe`.

pub(crate) mod posix;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
use linux as platform;

// illumos and every other Unix: read/write copies, no reflink.
#[cfg(not(target_os = "linux"))]
mod portable;
#[cfg(not(target_os = "linux"))]
use portable as platform;

/// Whether this platform's build copies extended attributes.
pub(crate) const XATTRS: bool = cfg!(target_os = "linux");

pub(crate) use platform::{
    Assumed, XattrTarget, advise_sequential, assume, chmod_at, clone_file,
    clone_range, copy_range, get_xattr, list_xattrs, open_dir_beneath,
    open_dir_same_mount, open_dir_search, open_source, open_source_at,
    read_dir, set_xattr, start_writeback, sync_fs,
};
