//! Where an update unpacks what it must read again (a baseline, an
//! image's new layers): `ZONEPATH/.zinstall.stage`, on the root's own
//! filesystem so that what is staged is linked into the new root, not
//! copied a second time. Removed when the update ends, and by the next
//! update, rollback or uninstall if a kill left it.

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::fold::{Fold, From, Want};
use crate::manifest;
use crate::update::attrs::{set_mode, set_xattrs};
use crate::update::error::UpdateError;
use crate::update::journal::remove_if;
use crate::update::names::STAGE;

/// The staging directory of one update.
pub(crate) struct Staging {
    path: PathBuf,
    parts: usize,
}

impl Staging {
    /// Makes it, empty, readable by its owner alone, with no default ACL
    /// for what is unpacked there to inherit.
    pub(crate) fn new(zonepath: &Path) -> Result<Staging, UpdateError> {
        let path = zonepath.join(STAGE);
        remove_if(&path)?;
        let root = zinstall_engine::beneath::Root::create(&path, 0o700)?;
        set_xattrs(root.as_fd(), &Vec::new(), &path)?;
        set_mode(root.as_fd(), 0o700, &path)?;
        Ok(Staging { path, parts: 0 })
    }

    /// A new empty directory for one part, and its number.
    pub(crate) fn part(
        &mut self,
        name: &str,
    ) -> Result<(PathBuf, u64), UpdateError> {
        self.parts += 1;
        let dir = self.path.join(format!("{}-{name}", self.parts));
        zinstall_engine::beneath::Root::create(&dir, 0o755)?;
        Ok((dir, self.parts as u64))
    }

    /// Removes it and everything in it.
    pub(crate) fn remove(self) -> Result<(), UpdateError> {
        remove_if(&self.path)
    }
}

/// Lays everything staged at `tree` (part `tag`) over `fold`; `label`
/// is the entries' origin. Directories named in `implicit` (made by the
/// unpack only to hold entries) keep what is below them in the fold.
pub(crate) fn lay_staged(
    tree: &Path,
    tag: u64,
    label: &str,
    implicit: &std::collections::HashSet<Vec<u8>>,
    fold: &mut Fold,
) -> Result<(), UpdateError> {
    let m = manifest::record(tree, &[], Vec::new())?;
    for mut e in m.entries {
        let rel = e.path().into_owned();
        if e.k == 'd'
            && implicit.contains(&rel)
            && fold.get(&rel).is_some_and(|w| w.entry.k == 'd')
        {
            continue;
        }
        let group = e.n.map(|n| (super::fold::STAGED_GROUPS - tag, n));
        e.n = None;
        e.i = None;
        e.o = Some(label.to_string());
        let t = e.t;
        fold.put(Want {
            from: From::Staged(tree.join(OsStr::from_bytes(&rel))),
            rel,
            entry: e,
            group,
            atime: t,
            redirect: false,
        });
    }
    Ok(())
}
