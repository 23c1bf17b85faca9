//! fs-verity: enabled on every object where the store's filesystem has
//! it (the kernel's measure equals the object's name), and reported
//! unsupported, with the objects written all the same, where it has not.

use std::fs;
use std::path::Path;

use composefs::fsverity::measure_verity;
use zinstall_composefs::{ObjectId, Store, Verity, hex, write_image};
use zinstall_testkit::{Kind, LoopFs, Tmp, require};

use crate::tree;

/// Every object under `objects`, and its name as hex.
fn objects(objects: &Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    for d in fs::read_dir(objects).unwrap() {
        let d = d.unwrap();
        for o in fs::read_dir(d.path()).unwrap() {
            let o = o.unwrap();
            let name = format!(
                "{}{}",
                d.file_name().to_string_lossy(),
                o.file_name().to_string_lossy()
            );
            out.push((o.path(), name));
        }
    }
    out
}

// This machine's and CI's kernel is built without CONFIG_FS_VERITY, and
// no package gives it one: run with --ignored on a kernel that has it.
#[test]
#[ignore = "needs a kernel built with CONFIG_FS_VERITY (this one is not)"]
fn objects_get_fs_verity_where_the_filesystem_has_it() {
    // ext4 has fs-verity only in a kernel built with CONFIG_FS_VERITY,
    // which lists it here.
    if !require(
        Path::new("/sys/fs/ext4/features/verity").exists(),
        "the kernel's fs-verity for ext4 (CONFIG_FS_VERITY)",
    ) {
        return;
    }
    let Some(fsv) = LoopFs::require(Kind::Ext4Verity, 64 << 20) else {
        return;
    };
    let tmp = Tmp::new();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    tree::build(&src, false);
    let top = fsv.path().join("store");
    let store = Store::open(&top).unwrap();
    let image = write_image(&src, &store).unwrap();
    assert_eq!(store.verity().unwrap(), Verity::Enabled);
    let all = objects(&top.join("objects"));
    assert!(all.len() >= 4, "{all:?}");
    assert!(all.iter().any(|(_, n)| *n == hex(&image.id)));
    for (p, name) in all {
        let f = fs::File::open(&p).unwrap();
        let measured: ObjectId = measure_verity(&f)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert_eq!(hex(&measured), name, "{}", p.display());
    }
    // A store opened again, writing nothing, finds it out too.
    assert_eq!(
        Store::open(&top).unwrap().verity().unwrap(),
        Verity::Enabled
    );
}

#[test]
fn plain_ext4_says_unsupported_and_stores_all_the_same() {
    let Some(plain) = LoopFs::require(Kind::Ext4, 64 << 20) else {
        return;
    };
    let tmp = Tmp::new();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    tree::build(&src, false);
    let top = plain.path().join("store");
    // Asked before anything is written: the probe answers, and leaves
    // nothing behind.
    assert_eq!(
        Store::open(&top).unwrap().verity().unwrap(),
        Verity::Unsupported
    );
    let store = Store::open(&top).unwrap();
    let image = write_image(&src, &store).unwrap();
    assert_eq!(store.verity().unwrap(), Verity::Unsupported);
    assert_eq!(Verity::Unsupported.to_string(), "unsupported");
    for (p, name) in objects(&top.join("objects")) {
        assert!(!name.contains(".tmp-"), "left behind: {}", p.display());
        let f = fs::File::open(&p).unwrap();
        assert!(measure_verity::<ObjectId>(&f).is_err(), "{}", p.display());
    }
    store.verify(&image.id).unwrap();
}
