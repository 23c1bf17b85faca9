//! Making what an update wrote durable before the switch.

use std::os::fd::AsFd;

use zinstall_engine::beneath::Root;

use super::apply;
use super::attrs;
use super::error::{UpdateError, errno_at, io_at};
use super::platform;

/// Past this many files written, one `syncfs` makes them durable rather
/// than an `fsync` each.
const FSYNC_MOST: usize = 1024;

/// Makes what the update wrote durable: each file whose data it wrote
/// (one `syncfs` instead past [`FSYNC_MOST`], or on btrfs, whose
/// `fsync` makes only the file's own metadata durable), then every
/// directory it made or changed and the new root itself, whose journal
/// or log commit carries the clone's metadata before it.
pub(super) fn durable(
    new: &Root,
    written: &apply::Written,
) -> Result<(), UpdateError> {
    use rustix::fs::{Mode, OFlags};
    if written.data.len() > FSYNC_MOST || platform::on_btrfs(new.as_fd()) {
        let fd = new
            .as_fd()
            .try_clone_to_owned()
            .map_err(io_at("flush", new.path()))?;
        return zinstall_engine::fsutil::sync_fs(&std::fs::File::from(fd))
            .map_err(io_at("flush", new.path()));
    }
    for rel in &written.data {
        let (dir, name) = attrs::parent(new, rel, false)?;
        let fd = rustix::fs::openat(
            &dir,
            name.as_c_str(),
            OFlags::RDONLY
                | OFlags::NOFOLLOW
                | OFlags::CLOEXEC
                | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .map_err(errno_at("open", attrs::shown(&dir, &name)))?;
        rustix::fs::fsync(&fd)
            .map_err(errno_at("flush", attrs::shown(&dir, &name)))?;
    }
    for rel in written.dirs.iter().rev() {
        if rel.is_empty() {
            continue;
        }
        if let Ok(d) = new.dir(attrs::rel_path(rel), None) {
            rustix::fs::fsync(&d).map_err(errno_at("flush", d.path()))?;
        }
    }
    rustix::fs::fsync(new).map_err(errno_at("flush", new.path()))
}
