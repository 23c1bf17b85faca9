//! Filesystem helpers shared by the library's callers.

use std::ffi::CString;
use std::fs::{self, File};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path};

use crate::error::{Error, Op, Result};
use crate::sys::{self, posix::at};

/// Removes a tree without following symlinks, making directories
/// writable first so read-only ones (0555 in an extracted root) do not
/// stop the removal. Each directory is made writable through a descriptor
/// opened beneath the tree with no symlink followed, so a directory
/// swapped for a symlink meanwhile cannot redirect the change outside it.
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
    let top: OwnedFd = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| Error::io(Op::Open, path, e))?
        .into();
    for e in walkdir::WalkDir::new(path).follow_links(false) {
        let e = e.map_err(|e| {
            let p = e.path().unwrap_or(path).to_path_buf();
            Error::io(Op::ReadDir, p, io::Error::from(e))
        })?;
        if e.file_type().is_dir() {
            let rel = e.path().strip_prefix(path).unwrap_or(Path::new(""));
            let dir = open_beneath(&top, rel)
                .map_err(|err| Error::io(Op::Open, e.path(), err))?;
            at::fchmod(&dir, 0o700)
                .map_err(|err| Error::io(Op::Chmod, e.path(), err))?;
        }
    }
    // std's remove_dir_all does not follow symlinks either.
    fs::remove_dir_all(path).map_err(|e| Error::io(Op::Remove, path, e))
}

/// Opens the directory `rel` beneath `top` following no symlink: openat2
/// where the kernel has it, else one `O_NOFOLLOW` component at a time.
fn open_beneath(top: &OwnedFd, rel: &Path) -> io::Result<File> {
    let parts = rel
        .components()
        .map(|c| match c {
            Component::Normal(n) => CString::new(n.as_bytes())
                .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL)),
            _ => Err(io::Error::from_raw_os_error(libc::EINVAL)),
        })
        .collect::<io::Result<Vec<_>>>()?;
    if parts.is_empty() {
        return Ok(File::from(top.try_clone()?));
    }
    let joined = CString::new(rel.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    if let Some(fd) = sys::open_dir_beneath(top.as_raw_fd(), &joined)? {
        return Ok(File::from(fd));
    }
    open_by_components(top, &parts)
}

/// Opens `parts` beneath `top`, each with `O_NOFOLLOW`.
fn open_by_components(top: &OwnedFd, parts: &[CString]) -> io::Result<File> {
    let mut cur = top.try_clone()?;
    for p in parts {
        cur = at::open_dir(cur.as_raw_fd(), p)?;
    }
    Ok(File::from(cur))
}

#[cfg(test)]
mod test {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn top(p: &Path) -> OwnedFd {
        File::open(p).unwrap().into()
    }

    #[test]
    fn directories_are_opened_beneath_without_symlinks() {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("tree");
        let outside = d.path().join("outside");
        fs::create_dir_all(tree.join("real/deeper")).unwrap();
        fs::create_dir(&outside).unwrap();
        symlink(&outside, tree.join("link")).unwrap();
        symlink("..", tree.join("real/up")).unwrap();
        let t = top(&tree);
        assert!(open_beneath(&t, Path::new("real/deeper")).is_ok());
        // What a directory swapped for a symlink mid-walk would look like.
        for rel in ["link", "real/up", "real/up/link", "../outside"] {
            assert!(open_beneath(&t, Path::new(rel)).is_err(), "{rel}");
        }
        // The walk used where the kernel has no openat2.
        let parts = |r: &str| -> Vec<CString> {
            r.split('/').map(|c| CString::new(c).unwrap()).collect()
        };
        assert!(open_by_components(&t, &parts("real/deeper")).is_ok());
        for rel in ["link", "real/up", "real/up/link"] {
            assert!(open_by_components(&t, &parts(rel)).is_err(), "{rel}");
        }
    }

    #[test]
    fn read_only_trees_are_removed_and_links_out_are_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("tree");
        let outside = d.path().join("outside");
        fs::create_dir_all(tree.join("ro/inner")).unwrap();
        fs::write(tree.join("ro/inner/f"), b"x").unwrap();
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("keep"), b"host").unwrap();
        fs::set_permissions(&outside, fs::Permissions::from_mode(0o751))
            .unwrap();
        symlink(&outside, tree.join("ro/trap")).unwrap();
        for p in ["ro/inner", "ro"] {
            fs::set_permissions(
                tree.join(p),
                fs::Permissions::from_mode(0o555),
            )
            .unwrap();
        }
        remove_tree(&tree).unwrap();
        assert!(!tree.exists());
        assert_eq!(fs::read(outside.join("keep")).unwrap(), b"host");
        let mode = fs::metadata(&outside).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o751);
        // Gone already is fine; a file is removed as a file.
        remove_tree(&tree).unwrap();
        fs::write(&tree, b"f").unwrap();
        remove_tree(&tree).unwrap();
        assert!(!tree.exists());
    }
}
