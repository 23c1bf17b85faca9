//! The switch: two names of the zonepath exchanged atomically
//! (`renameat2` on Linux; elsewhere three renames a rerun can finish).

use std::fs;
use std::os::fd::BorrowedFd;
use std::path::Path;

use super::error::{UpdateError, errno_at, io_at};
use super::names::SWAP;

/// Exchanges two names of the zonepath atomically.
#[cfg(target_os = "linux")]
pub(super) fn exchange(
    zdir: BorrowedFd<'_>,
    a: &str,
    b: &str,
    zonepath: &Path,
) -> Result<(), UpdateError> {
    rustix::fs::renameat_with(
        zdir,
        a,
        zdir,
        b,
        rustix::fs::RenameFlags::EXCHANGE,
    )
    .map_err(errno_at("exchange", zonepath.join(a)))?;
    rustix::fs::fsync(zdir).map_err(errno_at("sync", zonepath))
}

/// Exchanges two names of the zonepath: three renames through
/// [`SWAP`], whose name [`undo_swap`] finds after a kill. The journal
/// (written before) names the names: only `root` with `root.new` or
/// `root.prev`, and the manifests, are ever exchanged.
#[cfg(not(target_os = "linux"))]
pub(super) fn exchange(
    zdir: BorrowedFd<'_>,
    a: &str,
    b: &str,
    zonepath: &Path,
) -> Result<(), UpdateError> {
    write_swap_names(zonepath, a, b)?;
    let err = |what: &'static str| errno_at(what, zonepath.join(a));
    rustix::fs::renameat(zdir, a, zdir, SWAP).map_err(err("rename"))?;
    rustix::fs::renameat(zdir, b, zdir, a).map_err(err("rename"))?;
    rustix::fs::renameat(zdir, SWAP, zdir, b).map_err(err("rename"))?;
    let _ = fs::remove_file(zonepath.join(format!("{SWAP}.names")));
    rustix::fs::fsync(zdir).map_err(errno_at("sync", zonepath))
}

#[cfg(not(target_os = "linux"))]
fn write_swap_names(
    zonepath: &Path,
    a: &str,
    b: &str,
) -> Result<(), UpdateError> {
    use std::io::Write;
    let p = zonepath.join(format!("{SWAP}.names"));
    // The names reach the disk before the first rename relies on them.
    fs::File::create(&p)
        .and_then(|mut f| {
            f.write_all(format!("{a}\n{b}\n").as_bytes())?;
            f.sync_all()
        })
        .map_err(io_at("write", &p))?;
    crate::manifest::sync_dir(zonepath).map_err(io_at("sync", zonepath))
}

/// Finishes a three-rename exchange a kill interrupted: `a` missing
/// means only the first rename happened (undone), `b` missing that the
/// second did too (completed).
pub(super) fn undo_swap(zonepath: &Path) -> Result<(), UpdateError> {
    let names = zonepath.join(format!("{SWAP}.names"));
    let swap = zonepath.join(SWAP);
    if fs::symlink_metadata(&swap).is_ok()
        && let Ok(text) = zinstall_core::foreign::read_to_string(
            &names,
            zinstall_core::foreign::Follow::No,
            zinstall_core::foreign::Kind::Other {
                what: "an exchange's names",
                cap: 4096,
            },
        )
        && let Some((a, b)) = text.trim().split_once('\n')
    {
        let (a, b) = (zonepath.join(a), zonepath.join(b));
        if fs::symlink_metadata(&a).is_err() {
            fs::rename(&swap, &a).map_err(io_at("rename", &swap))?;
        } else if fs::symlink_metadata(&b).is_err() {
            fs::rename(&swap, &b).map_err(io_at("rename", &swap))?;
        }
    }
    let _ = fs::remove_file(&names);
    Ok(())
}
