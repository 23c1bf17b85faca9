//! Filesystem helpers shared by the library's callers.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::error::{Error, Op, Result};

/// Removes a tree without following symlinks, making directories
/// writable first so read-only ones (0555 in an extracted root) do not
/// stop the removal.
pub fn remove_tree(path: &Path) -> Result<()> {
    let md = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(Op::Stat, path, e)),
    };
    if !md.is_dir() {
        return fs::remove_file(path)
            .map_err(|e| Error::io(Op::Remove, path, e));
    }
    for e in walkdir::WalkDir::new(path).follow_links(false) {
        let e = e.map_err(|e| {
            let p = e.path().unwrap_or(path).to_path_buf();
            Error::io(Op::ReadDir, p, io::Error::from(e))
        })?;
        if e.file_type().is_dir() {
            fs::set_permissions(e.path(), fs::Permissions::from_mode(0o700))
                .map_err(|err| Error::io(Op::Chmod, e.path(), err))?;
        }
    }
    fs::remove_dir_all(path).map_err(|e| Error::io(Op::Remove, path, e))
}
