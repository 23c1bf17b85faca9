//! Collecting a store: what a ref's image uses stays, the rest goes
//! (objects, image links, leftovers of interrupted runs older than an
//! hour); a dry run removes nothing; verify_all finds a bad object.

use std::fs;
use std::path::Path;

use zinstall_composefs::{Store, hex, object_path, of_bytes, write_image};
use zinstall_testkit::{Tmp, pseudo_random, tool};

/// Sets `p`'s modification time two hours back.
fn age(p: &Path) {
    let o = tool("touch")
        .args(["-h", "-d", "2 hours ago"])
        .arg(p)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Every object's name (hex) in the store.
fn names(top: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for d in fs::read_dir(top.join("objects")).unwrap() {
        let d = d.unwrap();
        for o in fs::read_dir(d.path()).unwrap() {
            let o = o.unwrap();
            out.push(format!(
                "{}{}",
                d.file_name().to_string_lossy(),
                o.file_name().to_string_lossy()
            ));
        }
    }
    out.sort();
    out
}

#[test]
fn sweep_keeps_what_a_ref_uses_and_removes_the_rest() {
    let tmp = Tmp::new();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for (dir, seed) in [(&a, 1u64), (&b, 2)] {
        fs::create_dir_all(dir.join("sub")).unwrap();
        fs::write(dir.join("shared"), pseudo_random(50_000, 100)).unwrap();
        fs::write(dir.join("own"), pseudo_random(60_000, seed)).unwrap();
        fs::write(dir.join("sub/own2"), pseudo_random(70_000, seed + 10))
            .unwrap();
        fs::write(dir.join("small"), b"inline").unwrap();
    }
    let top = tmp.path().join("store");
    let store = Store::open(&top).unwrap();
    let ia = write_image(&a, &store).unwrap();
    let ib = write_image(&b, &store).unwrap();
    store.add_ref("keep-a", &ia.id).unwrap();
    store.add_ref("gone-b", &ib.id).unwrap();
    store.remove_ref("gone-b").unwrap();
    // Leftovers: temporary objects and staging trees, old and new.
    let xx = top.join("objects").join(&hex(&ia.id)[..2]);
    fs::write(xx.join(".tmp-1-1"), b"old partial").unwrap();
    age(&xx.join(".tmp-1-1"));
    fs::write(xx.join(".tmp-1-2"), b"a run going on").unwrap();
    fs::create_dir_all(top.join("staging/old/root/etc")).unwrap();
    age(&top.join("staging/old"));
    fs::create_dir_all(top.join("staging/new/root")).unwrap();

    let before = names(&top);
    let want_a: Vec<String> = {
        let mut v: Vec<String> = store
            .image_objects(&ia.id)
            .unwrap()
            .iter()
            .map(hex)
            .collect();
        v.push(hex(&ia.id));
        v.sort();
        v
    };
    assert_eq!(want_a.len(), 4, "three objects and the image: {want_a:?}");
    let b_only = [
        hex(&ib.id),
        hex(&of_bytes(&pseudo_random(60_000, 2))),
        hex(&of_bytes(&pseudo_random(70_000, 12))),
    ];

    let dry = store.sweep(true).unwrap();
    assert_eq!(names(&top), before, "a dry run removed something");
    assert!(top.join("staging/old").exists());
    assert_eq!(dry.images_kept, 1, "{dry:?}");
    assert_eq!(dry.objects_removed, 4, "B's three and a partial: {dry:?}");
    assert_eq!(dry.links_removed, 1, "{dry:?}");
    assert_eq!(dry.leftovers_removed, 1, "{dry:?}");

    let r = store.sweep(false).unwrap();
    assert_eq!(r, dry, "the sweep did other than its dry run said");
    assert!(r.bytes_removed >= 130_000, "{r:?}");
    let mut after = names(&top);
    after.retain(|n| !n.contains(".tmp-"));
    assert_eq!(after, want_a);
    assert!(xx.join(".tmp-1-2").exists(), "a running write's file went");
    assert!(!xx.join(".tmp-1-1").exists());
    for n in &b_only {
        assert!(!top.join("objects").join(&n[..2]).join(&n[2..]).exists());
    }
    assert!(!top.join("images").join(hex(&ib.id)).exists());
    assert!(top.join("images").join(hex(&ia.id)).exists());
    assert!(!top.join("staging/old").exists());
    assert!(top.join("staging/new").exists());
    // What stays is whole: the image reads, its objects match.
    for n in &want_a {
        store
            .verify(&zinstall_composefs::parse_hex(n).unwrap())
            .unwrap();
    }
    let o = tool("fsck.erofs")
        .arg(top.join("objects").join(object_path(&ia.id)))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Nothing is left to remove.
    let again = store.sweep(false).unwrap();
    assert_eq!(again.objects_removed + again.links_removed, 0, "{again:?}");
}

#[test]
fn verify_all_names_each_bad_object() {
    let tmp = Tmp::new();
    let store = Store::open(&tmp.path().join("store")).unwrap();
    let good = store.put_bytes(&pseudo_random(9000, 1)).unwrap().id;
    let bad = store.put_bytes(&pseudo_random(9000, 2)).unwrap().id;
    let r = store.verify_all().unwrap();
    assert_eq!((r.objects, r.bad.len()), (2, 0), "{r:?}");
    let p = store.object_path(&bad);
    let mut data = fs::read(&p).unwrap();
    data[100] ^= 1;
    fs::write(&p, &data).unwrap();
    let r = store.verify_all().unwrap();
    assert_eq!(r.objects, 2);
    assert_eq!(r.bad.len(), 1, "{r:?}");
    assert!(r.bad[0].is_mismatch());
    assert_eq!(r.bad[0].path, p);
    store.verify(&good).unwrap();
}
