//! The uninstall hook: a root removed only when zinstall made it or
//! nothing in it would be lost, and every file of zinstall's and of
//! updates with it.

use std::fs;
use std::path::Path;

use slog::{Logger, error, info, o};

use crate::error::{Cause, InstallError};
use crate::event::Event;
use crate::state::ZoneLock;
use crate::update;
use crate::zonepath::{clear_marker, open_zonepath, read_marker};

/// Removes an installed (or partly installed) zone root, and zinstall's
/// files with it, so the zonepath is left empty of them.
///
/// Safe without any flag: a root is removed only when the zonepath's
/// marker says zinstall made it (installed, or installing: the partial
/// root of an interrupted install), or when there is nothing in it to
/// lose (no root, an empty one). A root with content and no marker is
/// kept unless `foreign` says to remove it anyway. zoneadm's `-F` only
/// skips its own question and never means `foreign`.
pub fn uninstall(
    zonepath: &Path,
    foreign: bool,
    log: &Logger,
    events: &mut dyn FnMut(&Event),
) -> Result<(), InstallError> {
    let log = log.new(o!("zonepath" => zonepath.display().to_string()));
    info!(log, "uninstall"; "foreign" => foreign);
    if !zonepath.exists() {
        events(&Event::NothingToRemove {
            zonepath: zonepath.to_path_buf(),
        });
        return Ok(());
    }
    let _zonepath = open_zonepath(zonepath)?;
    let lock = ZoneLock::take(zonepath)
        .map_err(|e| InstallError::refused(Cause::Lock(e)))?;
    let root = zonepath.join("root");
    let r = (|| {
        let st = read_marker(zonepath).map_err(InstallError::refused)?;
        let md = match fs::symlink_metadata(&root) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(InstallError::refused(Cause::RootUnreadable {
                    root: root.clone(),
                    source,
                }));
            }
        };
        let empty = md.as_ref().is_some_and(|m| m.is_dir())
            && fs::read_dir(&root).is_ok_and(|mut d| d.next().is_none());
        if md.is_some() && !empty && st.is_none() && !foreign {
            return Err(InstallError::refused(Cause::ForeignRoot {
                root: root.clone(),
                removing: true,
            }));
        }
        events(&Event::Uninstalling {
            zonepath: zonepath.to_path_buf(),
        });
        // Never follows a symlink: a hostile root cannot point the
        // removal at host files.
        zinstall_engine::fsutil::remove_tree(&root).map_err(|source| {
            InstallError::partial(Cause::Step {
                step: format!("remove {}", root.display()),
                source: Box::new(source),
            })
        })?;
        update::clear(zonepath).map_err(|e| {
            InstallError::partial(Cause::Step {
                step: "remove the roots and manifests of updates".into(),
                source: Box::new(zinstall_engine::Error::io(
                    zinstall_engine::Op::Remove,
                    zonepath,
                    std::io::Error::other(e.to_string()),
                )),
            })
        })?;
        clear_marker(zonepath).map_err(InstallError::partial)?;
        events(&Event::Uninstalled {
            zonepath: zonepath.to_path_buf(),
        });
        Ok(())
    })();
    // Released: the lock file goes too.
    lock.release();
    match &r {
        Ok(()) => info!(log, "uninstall complete"),
        Err(e) => error!(log, "uninstall failed"; "error" => %e),
    }
    r
}
