//! Contents stored by many workers while the walk goes on give the same
//! tree, the same image and the same counts as one worker does.

use std::fs;
use std::path::Path;

use zinstall_composefs::{ScanOptions, Store, hex, write_image_with};
use zinstall_testkit::{Tmp, is_root, pseudo_random};

use crate::tree;

/// Many directories of small, inline-sized and large files, some hard
/// linked across directories, some with the same contents.
fn many(src: &Path) {
    for d in 0..24 {
        let dir = src.join(format!("d{d:02}/e{}", d % 5));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..40u64 {
            let n = match f % 4 {
                0 => (f as usize) % 65,
                1 => 65 + (f as usize * 97) % 9000,
                2 => 40_000 + d * 1000,
                _ => 300,
            };
            // Every 7th file repeats another's contents: one object.
            let seed = if f % 7 == 0 { 7 } else { d as u64 * 100 + f };
            fs::write(dir.join(format!("f{f}")), pseudo_random(n, seed))
                .unwrap();
        }
        if d > 0 {
            let prev = src.join(format!("d{:02}/e{}/f2", d - 1, (d - 1) % 5));
            fs::hard_link(&prev, dir.join("link")).unwrap();
        }
    }
}

#[test]
fn many_workers_write_the_image_one_worker_writes() {
    let tmp = Tmp::new();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    tree::build(&src, is_root());
    many(&src);
    let one = |workers: usize, store: &str| {
        let store = Store::open(&tmp.path().join(store)).unwrap();
        write_image_with(
            &src,
            &store,
            &ScanOptions {
                workers,
                adopt: false,
                known: None,
            },
        )
        .unwrap()
    };
    let serial = one(1, "serial");
    assert!(serial.counts.objects > 500, "{:?}", serial.counts);
    assert!(serial.counts.inline > 200, "{:?}", serial.counts);
    for (workers, store) in [(8, "eight"), (3, "three"), (0, "per-cpu")] {
        let image = one(workers, store);
        assert_eq!(
            hex(&image.id),
            hex(&serial.id),
            "{workers} workers made another image"
        );
        assert_eq!(image.counts, serial.counts, "{workers} workers");
        assert_eq!(
            fs::read(
                tmp.path()
                    .join(store)
                    .join("objects")
                    .join(zinstall_composefs::object_path(&image.id))
            )
            .unwrap(),
            fs::read(
                tmp.path()
                    .join("serial/objects")
                    .join(zinstall_composefs::object_path(&serial.id))
            )
            .unwrap()
        );
    }
    // The same store again: every object found, none written.
    let again = one(8, "eight");
    assert_eq!(again.id, serial.id);
    assert_eq!(again.counts.written, 0, "{:?}", again.counts);
}
