//! The image mounted as composefs mounts it: the EROFS image read-only on
//! a loop device, under an overlay with the store's objects as its
//! data-only lower layer; every entry of the mounted tree equals the
//! source's.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use zinstall_composefs::{Store, write_image};
use zinstall_testkit::fsops::Mount;
use zinstall_testkit::{
    Tmp, composefs_mounts, has_filesystem, kernel, require, require_root,
};

use crate::{compare, tree};

#[test]
fn the_mounted_image_is_the_tree() {
    if !require_root()
        || !require(
            kernel() >= (6, 5),
            "Linux 6.5 or later (overlayfs data-only lower layers)",
        )
        || !require(has_filesystem("erofs"), "the kernel's erofs filesystem")
        || !require(has_filesystem("overlay"), "the kernel's overlayfs")
    {
        return;
    }
    let tmp = Tmp::new();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    tree::build(&src, true);
    let top = tmp.path().join("store");
    let store = Store::open(&top).unwrap();
    let image = write_image(&src, &store).unwrap();

    let (meta, root) = (tmp.path().join("meta"), tmp.path().join("root"));
    fs::create_dir(&meta).unwrap();
    fs::create_dir(&root).unwrap();
    let img = store.object_path(&image.id);
    let _erofs =
        Mount::with_args(&["-t", "erofs", "-o", "ro,loop"], &img, &meta);
    let opts = format!(
        "ro,lowerdir={}::{},redirect_dir=on,metacopy=on",
        meta.display(),
        top.join("objects").display()
    );
    let _overlay = Mount::with_args(
        &["-t", "overlay", "-o", &opts],
        Path::new("overlay"),
        &root,
    );

    let diffs = compare::differences(&src, &root);
    assert!(
        diffs.is_empty(),
        "the mounted image differs:\n{}",
        diffs.join("\n")
    );
    // And the comparison tells a change: a mode, a time, contents.
    fs::set_permissions(src.join("setgid"), fs::Permissions::from_mode(0o711))
        .unwrap();
    fs::write(src.join("dir/sub/deeper/file"), b"changed").unwrap();
    let d = compare::differences(&src, &root).join("\n");
    assert!(d.contains("setgid: mode"), "{d}");
    assert!(d.contains("dir/sub/deeper/file: mtime"), "{d}");
    assert!(d.contains("dir/sub/deeper/file: contents"), "{d}");
    // The contents come from the store: the image alone has a large
    // file's size but none of its bytes.
    let (bare, real) = (meta.join("large"), src.join("large"));
    assert_eq!(
        fs::symlink_metadata(&bare).unwrap().len(),
        tree::LARGE as u64
    );
    assert_ne!(fs::read(&bare).ok(), Some(fs::read(&real).unwrap()));
    // The comparison saw what it should: a capability, an ACL, a device.
    let caps = zinstall_testkit::xattrs(&root.join("ping"));
    assert!(
        caps.iter().any(|(n, _)| n == b"security.capability"),
        "{caps:?}"
    );
    let acl = zinstall_testkit::xattrs(&root.join("acl"));
    assert!(
        acl.iter().any(|(n, _)| n == b"system.posix_acl_access"),
        "{acl:?}"
    );
    let dacl = zinstall_testkit::xattrs(&root.join("acl.dir"));
    assert!(
        dacl.iter().any(|(n, _)| n == b"system.posix_acl_default"),
        "{dacl:?}"
    );
}

/// `Root::mount` mounts a record's image by descriptor: writable, the
/// tree read through equals the source, and a write lands in upper/;
/// read-only, writes fail; `unmount` undoes each and then says nothing
/// is mounted.
#[test]
fn a_root_mounted_by_descriptor_is_the_tree() {
    use zinstall_composefs::{MountVerity, Record, Root, unmount};
    if !composefs_mounts() {
        return;
    }
    let tmp = Tmp::new();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    tree::build(&src, true);
    let store = Store::open(&tmp.path().join("store")).unwrap();
    let image = write_image(&src, &store).unwrap();
    let dir = tmp.path().join("guest");
    for d in ["", "root", "upper", "work"] {
        fs::create_dir(dir.join(d)).unwrap();
    }
    let fd: std::os::fd::OwnedFd = fs::File::open(&dir).unwrap().into();
    Record::new(store.path(), &image.id, "entry-t")
        .write(&fd, &dir)
        .unwrap();
    let root = Root::open(&dir).unwrap();
    let at = dir.join("root");
    // A writable overlay's top directory shows upper/'s attributes, as
    // provision gives upper/ the image root's; and a merged directory's
    // link count is always 1 (overlayfs does not count subdirectories).
    let touched = std::process::Command::new("touch")
        .arg("-r")
        .arg(&src)
        .arg(dir.join("upper"))
        .status()
        .unwrap();
    assert!(touched.success());
    let src_mode = fs::symlink_metadata(&src).unwrap().permissions();
    fs::set_permissions(dir.join("upper"), src_mode).unwrap();

    root.mount(false, MountVerity::IfPresent).unwrap();
    let mut diffs = compare::differences(&src, &at);
    diffs.retain(|d| !d.starts_with(": nlink"));
    fs::write(at.join("written"), b"w").unwrap();
    unmount(&at).unwrap();
    assert!(diffs.is_empty(), "the mount differs:\n{}", diffs.join("\n"));
    assert_eq!(fs::read(dir.join("upper/written")).unwrap(), b"w");

    root.mount(true, MountVerity::Off).unwrap();
    let e = fs::write(at.join("again"), b"w").unwrap_err();
    root.unmount().unwrap();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    let e = root.unmount().unwrap_err();
    assert!(e.to_string().contains("nothing is mounted"), "{e}");
    // Requiring fs-verity mounts only an image that has it, and is
    // refused, saying so, for one that has none (this store's objects
    // have none where the filesystem lacks fs-verity).
    let f = store.open_object(&image.id).unwrap();
    let has = composefs::fsverity::measure_verity_opt::<
        zinstall_composefs::ObjectId,
    >(&f)
    .ok()
    .flatten()
    .is_some();
    match root.mount(false, MountVerity::Require) {
        Ok(()) => {
            root.unmount().unwrap();
            assert!(has, "required fs-verity of an image without it");
        }
        Err(e) => {
            assert!(!has, "{e}");
            assert!(e.to_string().contains("fs-verity is required"), "{e}");
        }
    }
}

/// The loop devices whose backing file is `image`.
fn loops_backing(image: &Path) -> Vec<String> {
    let want = fs::canonicalize(image).unwrap();
    let mut found = Vec::new();
    for e in fs::read_dir("/sys/block").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let backing = e.path().join("loop/backing_file");
        if let Ok(b) = fs::read_to_string(&backing)
            && Path::new(b.trim()) == want
        {
            found.push(name);
        }
    }
    found
}

/// With the image on a loop device (what a kernel without file-backed
/// EROFS gets): the mounted root is the tree, the device is read-only
/// over the image object, and the kernel frees it once unmounted.
#[test]
fn a_root_mounted_through_a_loop_device_is_the_tree_and_frees_it() {
    use zinstall_composefs::{
        Backing, Layers, MountVerity, Mounting, mount_root, unmount,
    };
    if !composefs_mounts()
        || !require(
            Path::new("/dev/loop-control").exists(),
            "loop devices (/dev/loop-control)",
        )
    {
        return;
    }
    let tmp = Tmp::new();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    tree::build(&src, true);
    let store = Store::open(&tmp.path().join("store")).unwrap();
    let image = write_image(&src, &store).unwrap();
    let img = store.object_path(&image.id);
    let guest = tmp.path().join("guest");
    fs::create_dir_all(guest.join("root")).unwrap();
    let parent = fs::File::open(&guest).unwrap();
    let at = guest.join("root");
    let how = Mounting {
        layers: Layers::ReadOnly,
        verity: MountVerity::Off,
        backing: Backing::Loop,
    };
    let parent_fd = std::os::fd::AsFd::as_fd(&parent);
    mount_root(&store, &image.id, parent_fd, "root", &at, how).unwrap();
    let loops = loops_backing(&img);
    let ro = loops.iter().all(|l| {
        fs::read_to_string(format!("/sys/block/{l}/ro"))
            .unwrap()
            .trim()
            == "1"
    });
    let mut diffs = compare::differences(&src, &at);
    diffs.retain(|d| !d.starts_with(": nlink"));
    unmount(&at).unwrap();
    assert_eq!(loops.len(), 1, "loop devices over the image: {loops:?}");
    assert!(ro, "{loops:?} is writable");
    assert!(diffs.is_empty(), "the mount differs:\n{}", diffs.join("\n"));
    // Detached by the kernel (autoclear) once the mount let it go.
    let deadline =
        std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !loops_backing(&img).is_empty()
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(loops_backing(&img), Vec::<String>::new());
}
