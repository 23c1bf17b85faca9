//! Images of a real tree: erofs-utils reads them (fsck.erofs passes,
//! dump.erofs lists every entry), large files are objects and small ones
//! inline, the same tree gives the same ID and writes nothing new.

use std::fs;
use std::path::Path;
use std::process::Command;

use zinstall_composefs::{
    INLINE_MAX, ObjectId, Op, Store, hex, image_bytes, of_bytes, write_image,
};
use zinstall_testkit::{Tmp, is_root, tool};

use crate::tree;

fn run(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Every file under `dir`, recursively.
fn count_files(dir: &Path) -> usize {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                count_files(&e.path())
            } else {
                1
            }
        })
        .sum()
}

/// Each directory under `dir` (relative, `""` for the top) and its names.
fn directories(dir: &Path, rel: &Path, out: &mut Vec<(String, Vec<String>)>) {
    let mut names = Vec::new();
    for e in fs::read_dir(dir.join(rel)).unwrap() {
        let e = e.unwrap();
        names.push(e.file_name().to_string_lossy().into_owned());
        if e.file_type().unwrap().is_dir() {
            directories(dir, &rel.join(e.file_name()), out);
        }
    }
    out.push((format!("/{}", rel.display()), names));
}

#[test]
fn erofs_utils_read_the_image_and_list_every_entry() {
    let tmp = Tmp::new();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    tree::build(&src, is_root());
    let store = Store::open(&tmp.path().join("store")).unwrap();
    let image = write_image(&src, &store).unwrap();
    assert!(image.written);
    store.verify(&image.id).unwrap();
    let img = store.object_path(&image.id);
    assert_eq!(fs::metadata(&img).unwrap().len(), image.size);

    run(tool("fsck.erofs").arg(&img));
    let sb = run(tool("dump.erofs").arg("-s").arg(&img));
    assert!(sb.contains("Filesystem magic number"), "{sb}");

    let mut dirs = Vec::new();
    directories(&src, Path::new(""), &mut dirs);
    for (dir, names) in dirs {
        let ls = run(tool("dump.erofs")
            .arg("--ls")
            .arg(format!("--path={dir}"))
            .arg(&img));
        for n in names {
            assert!(
                ls.lines().any(|l| l.split_whitespace().last() == Some(&n)),
                "dump.erofs --ls {dir} lacks {n}:\n{ls}"
            );
        }
    }

    // Files over the inline threshold are objects; the others are not.
    for name in ["large", "just65", "block", "setuid", "dir/sub/deeper/file"] {
        let data = fs::read(src.join(name)).unwrap();
        assert!(data.len() as u64 > INLINE_MAX);
        let id = of_bytes(&data);
        assert!(store.contains(&id).unwrap(), "{name} is not an object");
        store.verify(&id).unwrap();
    }
    for name in ["small.txt", "exactly64", "empty"] {
        let data = fs::read(src.join(name)).unwrap();
        assert!(data.len() as u64 <= INLINE_MAX);
        assert!(!store.contains(&of_bytes(&data)).unwrap(), "{name}");
    }
    // large, its copy and its links: one object.
    let c = image.counts;
    assert_eq!(c.written + 1, c.objects, "{c:?}");
    assert_eq!(
        count_files(&tmp.path().join("store/objects")) as u64,
        c.written + 1,
        "the objects and the image"
    );
}

#[test]
fn the_same_tree_again_writes_no_object_and_has_the_same_id() {
    let tmp = Tmp::new();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    tree::build(&src, is_root());
    let objects = tmp.path().join("store/objects");
    let store = Store::open(&tmp.path().join("store")).unwrap();
    let first = write_image(&src, &store).unwrap();
    let files = count_files(&objects);
    let second = write_image(&src, &store).unwrap();
    assert_eq!(second.id, first.id);
    assert!(!second.written);
    assert_eq!(second.counts.written, 0, "{:?}", second.counts);
    assert_eq!(second.counts.bytes_written, 0);
    assert_eq!(count_files(&objects), files);

    // A copy of the tree elsewhere is the same image.
    let copy = tmp.path().join("copy");
    run(tool("cp").arg("-a").arg(&src).arg(&copy));
    assert_eq!(write_image(&copy, &store).unwrap().id, first.id);
    assert_eq!(count_files(&objects), files);

    // One changed time is another image, with the same objects.
    let t = fs::File::options()
        .write(true)
        .open(src.join("large"))
        .unwrap();
    t.set_modified(std::time::UNIX_EPOCH).unwrap();
    let third = write_image(&src, &store).unwrap();
    assert_ne!(third.id, first.id);
    assert_eq!(third.counts.written, 0);
    assert_eq!(count_files(&objects), files + 1);
}

#[test]
fn a_symlink_as_the_tree_is_not_followed() {
    let tmp = Tmp::new();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("f"), b"f").unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&src, &link).unwrap();
    let store = Store::open(&tmp.path().join("store")).unwrap();
    let e = write_image(&link, &store).unwrap_err();
    assert_eq!(e.op, Op::Open, "{e}");
    assert!(e.to_string().contains(&link.display().to_string()), "{e}");
}

#[test]
fn the_image_id_is_composefs_rs_s_for_the_same_tree() {
    let tmp = Tmp::new();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    tree::build(&src, is_root());
    let store = Store::open(&tmp.path().join("store")).unwrap();
    let ours = write_image(&src, &store).unwrap();

    // composefs-rs's reader (the one `cfsctl create-image` uses), with
    // hard links kept, then its writer: the same image, byte for byte.
    let parent = fs::File::open(tmp.path()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let theirs = rt
        .block_on(composefs::fs::read_filesystem::<ObjectId>(
            parent.into(),
            "src".into(),
            None,
        ))
        .unwrap();
    let bytes = image_bytes(theirs, &src).unwrap();
    assert_eq!(hex(&of_bytes(&bytes)), hex(&ours.id));
    assert_eq!(
        fs::read(store.object_path(&ours.id)).unwrap(),
        bytes.to_vec()
    );
}
