//! Refs: names for images, laid out as composefs-rs's repository does,
//! replaced whole, and refused when the name could leave `images/refs`.

use std::fs;

use zinstall_composefs::{Store, hex, object_path, valid_ref_name};
use zinstall_testkit::Tmp;

#[test]
fn a_ref_names_an_image_through_its_images_link() {
    let t = Tmp::new();
    let store = Store::open(&t.path().join("store")).unwrap();
    let a = store.put_bytes(&[7u8; 5000]).unwrap().id;
    let b = store.put_bytes(&[8u8; 5000]).unwrap().id;
    assert_eq!(store.read_ref("guest-1").unwrap(), None);
    store.add_ref("guest-1", &a).unwrap();
    let images = t.path().join("store/images");
    assert_eq!(
        fs::read_link(images.join(hex(&a))).unwrap(),
        std::path::Path::new("../objects").join(object_path(&a))
    );
    assert_eq!(
        fs::read_link(images.join("refs/guest-1")).unwrap(),
        std::path::Path::new("..").join(hex(&a))
    );
    assert_eq!(store.read_ref("guest-1").unwrap(), Some(a.clone()));
    store.add_ref("guest-1", &b).unwrap();
    store.add_ref("other", &a).unwrap();
    assert_eq!(
        store.refs().unwrap(),
        vec![("guest-1".to_string(), b.clone()), ("other".to_string(), a)]
    );
    assert!(store.remove_ref("guest-1").unwrap());
    assert!(!store.remove_ref("guest-1").unwrap());
    assert_eq!(store.refs().unwrap().len(), 1);
    // No temporary name is left behind.
    for d in [images.clone(), images.join("refs")] {
        for e in fs::read_dir(&d).unwrap() {
            let n = e.unwrap().file_name();
            assert!(!n.to_string_lossy().starts_with(".tmp"), "{n:?} in {d:?}");
        }
    }
}

#[test]
fn ref_names_that_could_leave_the_refs_directory_are_refused() {
    let t = Tmp::new();
    let store = Store::open(&t.path().join("store")).unwrap();
    let a = store.put_bytes(&[1u8; 100]).unwrap().id;
    for bad in ["", ".", "..", "../x", "a/b", ".hidden", "a\0b", "é"] {
        assert!(!valid_ref_name(bad), "{bad:?}");
        let e = store.add_ref(bad, &a).unwrap_err();
        assert!(
            e.to_string().contains("not an object name")
                || e.to_string().contains("refs"),
            "{e}"
        );
    }
    assert!(valid_ref_name("entry-tree-0123abcd.1"));
    assert!(store.refs().unwrap().is_empty());
    // A ref to an image the store does not have is refused.
    let missing =
        zinstall_composefs::of_bytes(b"not stored at all, not stored");
    let e = store.add_ref("x", &missing).unwrap_err();
    assert!(e.to_string().contains(&object_path(&missing)), "{e}");
}

#[test]
fn a_record_reads_back_and_a_bad_one_is_refused() {
    use zinstall_composefs::{RECORD, Record};
    let t = Tmp::new();
    let store = Store::open(&t.path().join("store")).unwrap();
    let id = store.put_bytes(&[3u8; 9000]).unwrap().id;
    let dir = t.path().join("guest");
    fs::create_dir(&dir).unwrap();
    let fd: std::os::fd::OwnedFd = fs::File::open(&dir).unwrap().into();
    assert_eq!(Record::read(&fd, &dir).unwrap(), None);
    let r = Record::new(store.path(), &id, "guest-1");
    r.write(&fd, &dir).unwrap();
    assert_eq!(Record::read(&fd, &dir).unwrap(), Some(r.clone()));
    assert_eq!(r.image_id(&dir).unwrap(), id);
    fs::write(
        dir.join(RECORD),
        br#"{"store":"/s","image":"zz","ref":"x"}"#,
    )
    .unwrap();
    let e = Record::read(&fd, &dir).unwrap_err();
    assert!(e.to_string().contains(RECORD), "{e}");
    fs::remove_file(dir.join(RECORD)).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.join(RECORD)).unwrap();
    assert!(Record::read(&fd, &dir).is_err());
}
