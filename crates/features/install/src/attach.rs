//! The attach hook: an existing root checked against the profile, and
//! adopted (marked installed) when it has everything the profile lays
//! out. Apart from the install: it judges a root, and writes only the
//! marker.

use std::fs;
use std::path::Path;

use slog::{Logger, error, info, o};

use crate::error::{Cause, InstallError};
use crate::event::Event;
use crate::profile::Profile;
use crate::state::{State, ZoneLock};
use crate::zonepath::{open_zonepath, read_marker, write_marker};

/// Checks that an existing root is one this profile makes: the state
/// marker says installed, or (no marker) the root has every tree, link
/// and mount point the profile lays out, in which case it is adopted
/// (marked installed). Used by the `attach` hook.
pub fn attach(
    zonepath: &Path,
    profile: &Profile,
    log: &Logger,
    events: &mut dyn FnMut(&Event),
) -> Result<(), InstallError> {
    let log = log.new(o!("zonepath" => zonepath.display().to_string()));
    info!(log, "attach");
    let _zonepath = open_zonepath(zonepath)?;
    let lock = ZoneLock::take(zonepath)
        .map_err(|e| InstallError::refused(Cause::Lock(e)))?;
    let root = zonepath.join("root");
    let r = (|| {
        let st = read_marker(zonepath).map_err(InstallError::refused)?;
        if st == Some(State::Installing) {
            return Err(InstallError::refused(Cause::Interrupted {
                zonepath: zonepath.to_path_buf(),
            }));
        }
        let md = fs::symlink_metadata(&root).map_err(|source| {
            InstallError::refused(Cause::NoRoot {
                root: root.clone(),
                source,
            })
        })?;
        if !md.is_dir() {
            return Err(InstallError::refused(Cause::RootNotDirectory {
                root: root.clone(),
            }));
        }
        let mut missing = Vec::new();
        for t in &profile.trees {
            if !fs::symlink_metadata(root.join(t)).is_ok_and(|m| m.is_dir()) {
                missing.push(format!("tree {}", t.display()));
            }
        }
        for (path, target) in &profile.links {
            if fs::read_link(root.join(path)).ok().as_deref() != Some(target) {
                missing.push(format!(
                    "link {} -> {}",
                    path.display(),
                    target.display()
                ));
            }
        }
        for (path, _) in &profile.dirs {
            if !fs::symlink_metadata(root.join(path)).is_ok_and(|m| m.is_dir())
            {
                missing.push(format!("directory {}", path.display()));
            }
        }
        if !missing.is_empty() {
            return Err(InstallError::refused(Cause::NotProfileRoot {
                root: root.clone(),
                profile: profile.path.clone(),
                missing,
            }));
        }
        if st.is_none() {
            events(&Event::Adopting { root: root.clone() });
            write_marker(zonepath, State::Installed)
                .map_err(InstallError::refused)?;
        }
        events(&Event::Attached { root: root.clone() });
        Ok(())
    })();
    lock.release();
    match &r {
        Ok(()) => info!(log, "attach complete"),
        Err(e) => error!(log, "attach refused"; "error" => %e),
    }
    r
}
