//! Walks beneath a root met with symlinks, deep chains and read-only
//! trees: what is refused is named, and nothing outside is touched.

// Tests make and read their own fixtures by path.
#![allow(clippy::disallowed_methods)]

use std::ffi::CString;
use std::fs::{self, File};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::error::{Error, Met};
use crate::sys::posix::at;

/// A path 3,000 levels deep is made and opened through a chain that
/// holds a few dozen descriptors; going up and down again reaches
/// the same directories.
#[test]
fn deep_chains_hold_few_descriptors() {
    let d = zinstall_testkit::Tmp::new();
    let top = Root::open(d.path()).unwrap();
    let mut chain = Chain::new(Arc::clone(top.fd()));
    let parts: Vec<CString> = (0..3000)
        .map(|i| CString::new(format!("d{}", i % 7)).unwrap())
        .collect();
    let ino = |fd: &OwnedFd| at::fstat(fd).unwrap().st_ino;
    let mut inodes = Vec::new();
    for k in 1..=parts.len() {
        let fd = chain.open(&parts[..k], Some(0o755)).unwrap();
        inodes.push(ino(&fd));
        assert!(
            chain.held() <= Chain::RECENT + Chain::MAX_CHECKPOINTS + 1,
            "{} descriptors at depth {k}",
            chain.held()
        );
    }
    for k in [1500, 3000, 7, 2999, 1, 3000, 64] {
        let fd = chain.open(&parts[..k], None).unwrap();
        assert_eq!(ino(&fd), inodes[k - 1], "depth {k}");
    }
    // A symlink deep down is met and named by its level.
    let fd = chain.open(&parts[..2000], None).unwrap();
    symlinkat_for_test(&fd, "s");
    let mut via = parts[..2000].to_vec();
    via.push(CString::new("s").unwrap());
    via.push(CString::new("x").unwrap());
    match chain.open(&via, Some(0o755)) {
        Err(WalkFail::Met(2000, Met::Symlink)) => {}
        other => panic!("{:?}", other.map(|_| ())),
    }
}

fn symlinkat_for_test(dir: &OwnedFd, name: &str) {
    let name = CString::new(name).unwrap();
    let target = CString::new("/").unwrap();
    at::symlink(&target, dir.as_raw_fd(), &name).unwrap();
}

#[test]
fn symlinks_on_the_way_are_refused_and_named() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("root");
    let outside = d.path().join("outside");
    fs::create_dir_all(root.join("real/deeper")).unwrap();
    fs::create_dir(&outside).unwrap();
    symlink(&outside, root.join("link")).unwrap();
    symlink("../..", root.join("real/up")).unwrap();
    fs::write(root.join("file"), b"x").unwrap();
    let r = Root::open(&root).unwrap();
    assert!(r.dir(Path::new("real/deeper"), None).is_ok());
    for (rel, at, met) in [
        ("link/x", "link", Met::Symlink),
        ("real/up/outside", "real/up", Met::Symlink),
        ("file/x", "file", Met::NotADirectory),
    ] {
        let e = r.dir(Path::new(rel), Some(0o755)).unwrap_err();
        match e {
            Error::Beneath { at: a, met: m, .. } => {
                assert_eq!(a, root.join(at), "{rel}");
                assert_eq!(m, met, "{rel}");
            }
            e => panic!("{rel}: {e}"),
        }
    }
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
    let made = r.dir(Path::new("new/a/b"), Some(0o750)).unwrap();
    assert_eq!(made.path(), root.join("new/a/b"));
    let m = fs::metadata(root.join("new/a")).unwrap();
    assert!(m.is_dir());
    assert!(r.dir(Path::new("../x"), None).is_err());
    assert!(r.dir(Path::new("/etc"), None).is_err());
    // The root itself a symlink: refused.
    symlink(&outside, d.path().join("rootlink")).unwrap();
    assert!(matches!(
        Root::open(&d.path().join("rootlink")),
        Err(Error::Beneath {
            met: Met::Symlink,
            ..
        })
    ));
}

#[test]
fn read_only_deep_trees_are_removed_and_links_out_are_not_followed() {
    let d = tempfile::tempdir().unwrap();
    let tree = d.path().join("tree");
    let outside = d.path().join("outside");
    fs::create_dir_all(tree.join("ro/inner")).unwrap();
    fs::write(tree.join("ro/inner/f"), b"x").unwrap();
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("keep"), b"host").unwrap();
    fs::set_permissions(&outside, fs::Permissions::from_mode(0o751)).unwrap();
    symlink(&outside, tree.join("ro/trap")).unwrap();
    // Deeper than PATH_MAX allows by path.
    let mut fd: OwnedFd = File::open(&tree).unwrap().into();
    for _ in 0..1500 {
        let n = c"dd";
        at::mkdir(fd.as_raw_fd(), n, 0o755).unwrap();
        fd = at::open_dir(fd.as_raw_fd(), n).unwrap();
    }
    let f = at::create_file(fd.as_raw_fd(), c"leaf").unwrap();
    drop(f);
    at::fchmod(&fd, 0o555).unwrap();
    for p in ["ro/inner", "ro"] {
        fs::set_permissions(tree.join(p), fs::Permissions::from_mode(0o555))
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
