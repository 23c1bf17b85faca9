//! A store on a full filesystem: the write fails naming the object's
//! temporary file, and leaves no temporary file, no name for partial
//! contents and no image behind; the objects written before stay whole.

use std::fs;
use std::path::Path;

use zinstall_composefs::{Op, Store, of_bytes, write_image};
use zinstall_testkit::{Kind, LoopFs, Tmp, pseudo_random};

/// Every file under `dir` whose name starts with `.tmp-`, and the count
/// of the others.
fn files(dir: &Path, tmp: &mut Vec<String>, others: &mut usize) {
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            files(&e.path(), tmp, others);
        } else if e.file_name().to_string_lossy().starts_with(".tmp-") {
            tmp.push(e.path().display().to_string());
        } else {
            *others += 1;
        }
    }
}

#[test]
fn a_full_disk_leaves_no_partial_object_and_no_image() {
    let Some(small) = LoopFs::require(Kind::Ext4, 16 << 20) else {
        return;
    };
    let tmp = Tmp::new();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    let fits = pseudo_random(4 << 20, 21);
    fs::write(src.join("fits"), &fits).unwrap();
    let top = small.path().join("store");
    let store = Store::open(&top).unwrap();
    let first = write_image(&src, &store).unwrap();
    fs::write(src.join("too-large"), pseudo_random(32 << 20, 22)).unwrap();

    let e = write_image(&src, &store).unwrap_err();
    assert!(matches!(e.op, Op::Write | Op::Sync), "{e}");
    assert!(e.to_string().contains(&top.display().to_string()), "{e}");
    let (mut temporary, mut others) = (Vec::new(), 0);
    files(&top.join("objects"), &mut temporary, &mut others);
    assert!(temporary.is_empty(), "left behind: {temporary:?}");
    assert_eq!(others, 2, "the first image and its one object, no more");
    let id = of_bytes(&fits);
    assert!(store.contains(&id).unwrap());
    store.verify(&id).unwrap();

    // With room, the same store takes the tree.
    store.verify(&first.id).unwrap();
    fs::remove_file(src.join("too-large")).unwrap();
    let image = write_image(&src, &store).unwrap();
    assert_eq!(image.counts.written, 0, "{:?}", image.counts);
    store.verify(&image.id).unwrap();
}
