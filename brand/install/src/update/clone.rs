//! The clone of the old root that the new one starts as: directories
//! made anew with their attributes, every other entry a hard link.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, Mode};

use super::beneath::{
    open_dir, set_owner_mode, set_times_fd, set_xattrs_fd, xattrs_fd,
};
use super::error::{UpdateError, errno_at, io_at};
use crate::manifest;

/// Makes `new` hold what `old` holds: directories anew with their
/// attributes, every other entry a hard link to the old one; returns how
/// many entries it made. Subdirectories are cloned in parallel, each
/// opening its own pair of descriptors when it starts (so a directory of
/// thousands holds two, not thousands). A linked entry is neither stated
/// before nor after: the link moves its change time, so the manifest
/// keeps no stamp for it and a later update hashes it if it must know
/// whether the zone changed it.
pub(super) fn clone_tree(
    old: BorrowedFd<'_>,
    new: BorrowedFd<'_>,
    rel: &[u8],
    new_path: &Path,
    cancel: Option<&zinstall_core::Cancel>,
    depth: usize,
) -> Result<u64, UpdateError> {
    use rayon::prelude::*;
    use rustix::fs::FileType;
    if cancel.is_some_and(zinstall_core::Cancel::is_cancelled) {
        return Err(UpdateError::Cancelled);
    }
    let here = new_path.join(OsStr::from_bytes(rel));
    let top_dev = rustix::fs::fstat(old)
        .map_err(errno_at("stat", &here))?
        .st_dev;
    let dir =
        rustix::fs::Dir::read_from(old).map_err(errno_at("read", &here))?;
    let mut subdirs = Vec::new();
    let mut made = 0u64;
    for e in dir {
        let e = e.map_err(errno_at("read", &here))?;
        let name = e.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let at = || here.join(OsStr::from_bytes(name.to_bytes()));
        // The entry's type where the directory says it (illumos's does
        // not), else from a stat.
        #[cfg(not(any(target_os = "illumos", target_os = "solaris")))]
        let listed = e.file_type();
        #[cfg(any(target_os = "illumos", target_os = "solaris"))]
        let listed = FileType::Unknown;
        let is_dir = match listed {
            FileType::Directory => true,
            FileType::Unknown => {
                let st =
                    rustix::fs::statat(old, name, AtFlags::SYMLINK_NOFOLLOW)
                        .map_err(errno_at("stat", at()))?;
                FileType::from_raw_mode(st.st_mode as _) == FileType::Directory
            }
            _ => false,
        };
        if is_dir {
            subdirs.push(name.to_owned());
        } else {
            rustix::fs::linkat(old, name, new, name, AtFlags::empty())
                .map_err(errno_at("link", at()))?;
        }
        made += 1;
    }
    let below = subdirs
        .par_iter()
        .map(|name| -> Result<u64, UpdateError> {
            let at = here.join(OsStr::from_bytes(name.to_bytes()));
            let st = rustix::fs::statat(
                old,
                name.as_c_str(),
                AtFlags::SYMLINK_NOFOLLOW,
            )
            .map_err(errno_at("stat", &at))?;
            rustix::fs::mkdirat(
                new,
                name.as_c_str(),
                Mode::from_raw_mode(0o700),
            )
            .map_err(errno_at("make", &at))?;
            let sub_new = open_dir(new, name).map_err(io_at("open", &at))?;
            let sub_old = open_dir(old, name).map_err(io_at("open", &at))?;
            set_owner_mode(
                sub_new.as_fd(),
                st.st_uid,
                st.st_gid,
                st.st_mode & 0o7777,
                &at,
            )?;
            let x = xattrs_fd(sub_old.as_fd(), &at)?;
            if !x.is_empty() {
                set_xattrs_fd(sub_new.as_fd(), &x, &at)?;
            }
            let mut sub_rel = rel.to_vec();
            if !sub_rel.is_empty() {
                sub_rel.push(b'/');
            }
            sub_rel.extend_from_slice(name.to_bytes());
            if depth >= manifest::MAX_DEPTH {
                return Err(UpdateError::TooDeep { path: at });
            }
            let n = if st.st_dev == top_dev {
                clone_tree(
                    sub_old.as_fd(),
                    sub_new.as_fd(),
                    &sub_rel,
                    new_path,
                    cancel,
                    depth + 1,
                )?
            } else {
                0
            };
            set_times_fd(
                sub_new.as_fd(),
                (st.st_atime as i64, st.st_atime_nsec as i64),
                (st.st_mtime as i64, st.st_mtime_nsec as i64),
                &at,
            )?;
            Ok(n)
        })
        .collect::<Result<Vec<u64>, UpdateError>>()?;
    Ok(made + below.iter().sum::<u64>())
}
