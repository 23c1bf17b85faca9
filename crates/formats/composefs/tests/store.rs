//! The object store: names are fs-verity digests (checked against an
//! implementation written here from the kernel's documentation), the
//! layout is composefs's, an object is written once, and a corrupted one
//! is found.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use sha2::{Digest, Sha256};
use zinstall_composefs::{Store, hex, object_path, of_bytes};
use zinstall_testkit::{Tmp, pseudo_random};

/// fs-verity's file digest (Documentation/filesystems/fsverity.rst):
/// SHA-256 Merkle tree of 4 KiB blocks, each level's last block zero
/// padded, then the SHA-256 of the 256-byte descriptor.
fn fsverity_sha256(data: &[u8]) -> String {
    let root: Vec<u8> = if data.is_empty() {
        vec![0; 32]
    } else {
        let mut level = data.to_vec();
        loop {
            let mut next = Vec::new();
            for chunk in level.chunks(4096) {
                let mut block = chunk.to_vec();
                block.resize(4096, 0);
                next.extend_from_slice(&Sha256::digest(&block));
            }
            if next.len() == 32 {
                break next;
            }
            level = next;
        }
    };
    let mut desc = vec![1u8, 1, 12, 0, 0, 0, 0, 0];
    desc.extend_from_slice(&(data.len() as u64).to_le_bytes());
    desc.extend_from_slice(&root);
    desc.resize(256, 0);
    Sha256::digest(&desc)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

const SIZES: [usize; 9] = [
    0,
    1,
    64,
    4095,
    4096,
    4097,
    128 * 4096,
    128 * 4096 + 1,
    128 * 128 * 4096 + 7,
];

#[test]
fn names_are_fs_verity_digests() {
    let tmp = Tmp::new();
    let store = Store::open(&tmp.path().join("store")).unwrap();
    for (i, &n) in SIZES.iter().enumerate() {
        let data = pseudo_random(n, i as u64);
        let want = fsverity_sha256(&data);
        assert_eq!(hex(&of_bytes(&data)), want, "{n} bytes in memory");
        let p = tmp.path().join(format!("f{i}"));
        fs::write(&p, &data).unwrap();
        let f = zinstall_core::foreign::open(
            &p,
            zinstall_core::foreign::Follow::No,
        )
        .unwrap();
        let put = store.put_file(&f, &p).unwrap();
        assert_eq!(hex(&put.id), want, "{n} bytes from a file");
        assert_eq!(put.size, n as u64);
        assert!(put.written);
        let obj = store.object_path(&put.id);
        assert_eq!(fs::read(&obj).unwrap(), data, "{}", obj.display());
    }
}

#[test]
fn objects_lie_where_composefs_puts_them() {
    let tmp = Tmp::new();
    let top = tmp.path().join("store");
    let store = Store::open(&top).unwrap();
    let put = store.put_bytes(b"contents of an object").unwrap();
    let h = hex(&put.id);
    let rel = object_path(&put.id);
    assert_eq!(rel, format!("{}/{}", &h[..2], &h[2..]));
    assert_eq!(h.len(), 64);
    let p = top.join("objects").join(&rel);
    assert_eq!(store.object_path(&put.id), p);
    let md = fs::symlink_metadata(&p).unwrap();
    assert!(md.is_file());
    assert_eq!(md.permissions().mode() & 0o7777, 0o644);
    assert_eq!(fs::read(&p).unwrap(), b"contents of an object");
    // Nothing but the object in its directory: no temporary file left.
    let left: Vec<_> = fs::read_dir(p.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![Path::new(&rel).file_name().unwrap()]);
}

#[test]
fn an_object_present_is_not_written_again() {
    let tmp = Tmp::new();
    let store = Store::open(&tmp.path().join("store")).unwrap();
    let data = pseudo_random(100_000, 9);
    let first = store.put_bytes(&data).unwrap();
    assert!(first.written);
    let p = store.object_path(&first.id);
    let before = fs::symlink_metadata(&p).unwrap();
    let src = tmp.path().join("src");
    fs::write(&src, &data).unwrap();
    let f =
        zinstall_core::foreign::open(&src, zinstall_core::foreign::Follow::No)
            .unwrap();
    let again = store.put_file(&f, &src).unwrap();
    assert_eq!(again.id, first.id);
    assert!(!again.written);
    assert!(!store.put_bytes(&data).unwrap().written);
    let after = fs::symlink_metadata(&p).unwrap();
    assert_eq!(before.ino(), after.ino(), "the object was replaced");
    // Reopening the store finds it too.
    let reopened = Store::open(&tmp.path().join("store")).unwrap();
    assert!(reopened.contains(&first.id).unwrap());
}

#[test]
fn verify_finds_a_corrupted_object() {
    let tmp = Tmp::new();
    let store = Store::open(&tmp.path().join("store")).unwrap();
    let data = pseudo_random(50_000, 11);
    let id = store.put_bytes(&data).unwrap().id;
    store.verify(&id).unwrap();
    let p = store.object_path(&id);

    let mut bad = data.clone();
    bad[30_000] ^= 1;
    fs::write(&p, &bad).unwrap();
    let e = store.verify(&id).unwrap_err();
    assert!(e.is_mismatch(), "{e}");
    let msg = e.to_string();
    assert!(msg.contains(&p.display().to_string()), "{msg}");
    assert!(msg.contains(&hex(&of_bytes(&bad))), "{msg}");

    fs::write(&p, &data[..49_999]).unwrap();
    assert!(store.verify(&id).unwrap_err().is_mismatch());

    // A symlink in its place is not followed, not an object.
    fs::remove_file(&p).unwrap();
    let elsewhere = tmp.path().join("elsewhere");
    fs::write(&elsewhere, &data).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &p).unwrap();
    let e = store.verify(&id).unwrap_err();
    assert!(!e.is_mismatch(), "{e}");
    assert_eq!(e.op, zinstall_composefs::Op::Open, "{e}");

    fs::remove_file(&p).unwrap();
    let e = store.verify(&id).unwrap_err();
    assert_eq!(e.op, zinstall_composefs::Op::Open, "{e}");
    assert!(!store.contains(&id).unwrap());
}

#[test]
fn a_bad_object_is_replaced_by_the_next_put() {
    let tmp = Tmp::new();
    let top = tmp.path().join("store");
    let data = pseudo_random(70_000, 12);
    let id = Store::open(&top).unwrap().put_bytes(&data).unwrap().id;
    let p = Store::open(&top).unwrap().object_path(&id);
    // A crash before the store's sync: the name is there, the contents
    // are short (the size tells), or as long but wrong (the digest does).
    for bad in [data[..4096].to_vec(), {
        let mut b = data.clone();
        b[69_999] ^= 0x80;
        b
    }] {
        fs::write(&p, &bad).unwrap();
        // A new Store value, as after a restart: it has checked nothing.
        let store = Store::open(&top).unwrap();
        let put = store.put_bytes(&data).unwrap();
        assert!(put.written && put.replaced, "{put:?}");
        assert_eq!(fs::read(&p).unwrap(), data);
        store.verify(&id).unwrap();
        // Checked now, and good: the next put writes nothing.
        let again = store.put_bytes(&data).unwrap();
        assert!(!again.written && !again.replaced, "{again:?}");
    }
    // A good object met by a new value is re-hashed, found good, kept.
    let before = fs::symlink_metadata(&p).unwrap().ino();
    let put = Store::open(&top).unwrap().put_bytes(&data).unwrap();
    assert!(!put.written && !put.replaced, "{put:?}");
    assert_eq!(fs::symlink_metadata(&p).unwrap().ino(), before);
}

/// The image of the tree at `src` written into the store at `top`, then
/// its large file's object cut short, as a crash before the store's sync
/// leaves it: the image, the large file's contents and its object.
fn image_with_a_bad_object(
    src: &Path,
    top: &Path,
) -> (zinstall_composefs::Image, Vec<u8>, std::path::PathBuf) {
    let first =
        zinstall_composefs::write_image(src, &Store::open(top).unwrap())
            .unwrap();
    let large = fs::read(src.join("large")).unwrap();
    let p = Store::open(top).unwrap().object_path(&of_bytes(&large));
    fs::write(&p, &large[..large.len() / 2]).unwrap();
    (first, large, p)
}

#[test]
fn an_image_written_over_a_bad_object_reads_right() {
    let tmp = Tmp::new();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    crate::tree::build(&src, false);
    let top = tmp.path().join("store");
    let (first, large, p) = image_with_a_bad_object(&src, &top);

    let store = Store::open(&top).unwrap();
    let image = zinstall_composefs::write_image(&src, &store).unwrap();
    assert_eq!(image.id, first.id);
    assert_eq!(image.counts.replaced, 1, "{:?}", image.counts);
    assert_eq!(image.counts.written, 1, "{:?}", image.counts);
    assert_eq!(fs::read(&p).unwrap(), large);
    // The image itself was checked too, and is what erofs-utils reads.
    store.verify(&image.id).unwrap();
    let o = zinstall_testkit::tool("fsck.erofs")
        .arg(store.object_path(&image.id))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn an_adopted_tree_replaces_a_bad_object_and_leaves_a_good_ones_copy() {
    let tmp = Tmp::new();
    let top = tmp.path().join("store");
    let (src, staged) = (tmp.path().join("src"), tmp.path().join("staged"));
    for d in [&src, &staged] {
        fs::create_dir(d).unwrap();
        crate::tree::build(d, false);
    }
    let (first, large, p) = image_with_a_bad_object(&src, &top);

    // Adopted, as an install's staging tree is: moved in where the name
    // is free or taken by bad contents; left where a good copy is there.
    let store = Store::open(&top).unwrap();
    let opts = zinstall_composefs::ScanOptions {
        adopt: true,
        ..Default::default()
    };
    let image =
        zinstall_composefs::write_image_with(&staged, &store, &opts).unwrap();
    assert_eq!(image.id, first.id);
    assert_eq!(image.counts.replaced, 1, "{:?}", image.counts);
    assert_eq!(image.counts.written, 1, "{:?}", image.counts);
    assert_eq!(fs::read(&p).unwrap(), large);
    // The bad object's contents are under four names, two inodes: the
    // first met moved in; the other then found it good and stayed.
    let gone = ["large", "large.link", "dir/sub/large.link2", "large.copy"]
        .iter()
        .filter(|n| !staged.join(n).exists())
        .count();
    assert_eq!(gone, 1, "the bad object was not replaced by a move");
    assert!(staged.join("just65").exists(), "a good object's copy moved");
    let md = fs::symlink_metadata(&p).unwrap();
    assert_eq!(md.permissions().mode() & 0o7777, 0o644);
    store.verify(&image.id).unwrap();
}
