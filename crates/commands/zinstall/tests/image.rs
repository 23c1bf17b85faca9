//! `zinstall image create`: a tree packed into a layer comes back
//! identical through `zinstall install`, and GNU tar reads it too.

use zinstall_testkit::tools;

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::process::Command;
use zinstall_testkit::run::text;

use zinstall_testkit::is_root;

fn zinstall() -> Command {
    zinstall_testkit::run::command(env!("CARGO_BIN_EXE_zinstall"))
}

/// A tree with what a root holds: modes with special bits, a long name,
/// links of both kinds, a FIFO, extended attributes; as root also a
/// file capability, owners and a device node.
fn tree(root: &Path) {
    fs::create_dir_all(root.join("usr/bin")).unwrap();
    fs::create_dir_all(root.join("tmp")).unwrap();
    fs::set_permissions(root.join("tmp"), fs::Permissions::from_mode(0o1777))
        .unwrap();
    let su = root.join("usr/bin/su");
    fs::write(&su, vec![7u8; 300_000]).unwrap();
    fs::set_permissions(&su, fs::Permissions::from_mode(0o4755)).unwrap();
    fs::hard_link(&su, root.join("usr/bin/su2")).unwrap();
    symlink("su", root.join("usr/bin/s")).unwrap();
    let long = root.join("d".repeat(90)).join("f".repeat(120));
    fs::create_dir_all(long.parent().unwrap()).unwrap();
    fs::write(&long, b"long").unwrap();
    zinstall_testkit::mkfifo(&root.join("fifo"), 0o640);
    let st = tools::tool("setfattr")
        .args(["-n", "user.note", "-v", "hello"])
        .arg(root.join("usr/bin/s").with_file_name("su"))
        .status()
        .unwrap();
    assert!(st.success());
    if is_root() {
        let st = tools::tool("setcap")
            .arg("cap_net_raw+ep")
            .arg(&su)
            .status()
            .unwrap();
        assert!(st.success());
        std::os::unix::fs::chown(root.join("tmp"), Some(1234), Some(5678))
            .unwrap();
        let st = Command::new("mknod")
            .arg(root.join("null"))
            .args(["c", "1", "3"])
            .status()
            .unwrap();
        assert!(st.success());
    } else {
        zinstall_testkit::unmet(
            "root, for the capability, owner and device checks",
        );
    }
}

#[test]
fn a_packed_tree_installs_back_identical() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    tree(&src);
    let profile = d.path().join("p.toml");
    fs::write(
        &profile,
        format!(
            "source_root = \"/\"\ntrees = []\nallow_devices = true\nlog = \"{}\"\n",
            d.path().join("log").display()
        ),
    )
    .unwrap();
    for name in ["l.tar.zst", "l.tar.gz", "l.tar.xz", "l.tar"] {
        let out = d.path().join(name);
        let o = zinstall()
            .args(["image", "create", "--json"])
            .arg(&src)
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{name}: {}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
        assert_eq!(v["result"]["stats"]["hardlinks"], 1, "{v}");
        let zp = d.path().join(format!("zp-{name}"));
        let o = zinstall()
            .args(["install", "--profile"])
            .arg(&profile)
            .arg("--zonepath")
            .arg(&zp)
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{name}: {}", text(&o));
        let o = zinstall()
            .arg("verify")
            .arg(&src)
            .arg(zp.join("root"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{name}: {}", text(&o));
        assert!(text(&o).contains("identical"), "{}", text(&o));
    }
    // GNU tar lists it: the long name and the hard link as tar sees them.
    let o = tools::tool("tar")
        .arg("-tvf")
        .arg(d.path().join("l.tar.zst"))
        .output()
        .unwrap();
    let listing = text(&o);
    assert!(o.status.success(), "{listing}");
    assert!(listing.contains(&"f".repeat(120)), "{listing}");
    assert!(
        listing.contains("root/usr/bin/su2 link to root/usr/bin/su")
            || listing.contains("root/usr/bin/su link to root/usr/bin/su2"),
        "{listing}"
    );
}

#[test]
fn bad_names_and_existing_outputs_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("f"), b"x").unwrap();
    let o = zinstall()
        .args(["image", "create"])
        .arg(&src)
        .arg(d.path().join("out.zip"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("out.zip"), "{}", text(&o));
    let existing = d.path().join("out.tar");
    fs::write(&existing, b"keep").unwrap();
    let o = zinstall()
        .args(["image", "create"])
        .arg(&src)
        .arg(&existing)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(fs::read(&existing).unwrap(), b"keep");
    // A source that is not there: nothing is left behind.
    let o = zinstall()
        .args(["image", "create"])
        .arg(d.path().join("missing"))
        .arg(d.path().join("new.tar"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("missing"), "{}", text(&o));
    let left: Vec<_> = fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "only src and out.tar: {left:?}");
}

/// Packing reads every file, and reading a file moves its access time
/// (relatime moves one older than a day at once): the tree packed and
/// the tree installed back from the pack then differ in access times
/// only, which `verify` leaves out unless asked.
#[test]
fn a_tree_read_while_packed_verifies_identical() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    fs::create_dir_all(src.join("etc")).unwrap();
    let old = std::time::SystemTime::UNIX_EPOCH
        + std::time::Duration::from_secs(1_000_000_000);
    for i in 0..50 {
        let f = src.join(format!("etc/f{i}"));
        fs::write(&f, vec![b'x'; 1000 + i]).unwrap();
        fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_times(fs::FileTimes::new().set_accessed(old))
            .unwrap();
    }
    let profile = d.path().join("p.toml");
    fs::write(
        &profile,
        format!(
            "source_root = \"/\"\ntrees = []\nlog = \"{}\"\n",
            d.path().join("log").display()
        ),
    )
    .unwrap();
    let out = d.path().join("l.tar");
    let o = zinstall()
        .args(["image", "create"])
        .arg(&src)
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    // Read again, as a second pack or a compare would.
    for i in 0..50 {
        fs::read(src.join(format!("etc/f{i}"))).unwrap();
    }
    let zp = d.path().join("zp");
    let o = zinstall()
        .args(["install", "--profile"])
        .arg(&profile)
        .arg("--zonepath")
        .arg(&zp)
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let verify = |extra: &[&str]| {
        zinstall()
            .arg("verify")
            .args(extra)
            .arg(&src)
            .arg(zp.join("root"))
            .output()
            .unwrap()
    };
    let o = verify(&[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("identical"), "{}", text(&o));
    // The access times did move: asked for, they differ.
    let o = verify(&["--atime"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("atime"), "{}", text(&o));
}

/// `zinstall image composefs`: the image's ID on standard output, its
/// object in the store; the same tree again writes nothing and prints
/// the same ID; `--json` says the counts; a missing tree fails naming it.
#[cfg(target_os = "linux")]
#[test]
fn composefs_prints_the_image_id_and_writes_each_object_once() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    tree(&root);
    let store = tmp.path().join("store");
    let o = zinstall()
        .args(["image", "composefs", "--store"])
        .arg(&store)
        .arg(&root)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let id = String::from_utf8(o.stdout).unwrap().trim().to_string();
    assert_eq!(id.len(), 64, "{id}");
    let image = store.join("objects").join(&id[..2]).join(&id[2..]);
    let fsck = tools::tool("fsck.erofs").arg(&image).output().unwrap();
    assert!(fsck.status.success(), "{}", text(&fsck));

    let o = zinstall()
        .args(["image", "composefs", "--json", "--store"])
        .arg(&store)
        .arg(&root)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["result"]["image"], id.as_str(), "{v}");
    assert_eq!(v["result"]["objects_written"], 0, "{v}");
    assert!(v["result"]["objects"].as_u64().unwrap() >= 1, "{v}");
    // Without fs-verity in the kernel (no ext4 feature listed), no
    // filesystem has it: the outcome says so.
    if !std::path::Path::new("/sys/fs/ext4/features/verity").exists() {
        assert_eq!(v["result"]["verity"], "unsupported", "{v}");
    } else {
        assert!(v["result"]["verity"].is_string(), "{v}");
    }

    let missing = tmp.path().join("missing");
    let o = zinstall()
        .args(["image", "composefs", "--store"])
        .arg(&store)
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&missing.display().to_string()),
        "{}",
        text(&o)
    );
}

/// `--ref NAME` names the image, which keeps it and its objects through
/// a sweep of the store (`cache gc` of a cache whose only content is
/// the store); an image no ref names goes; a bad ref name is refused
/// before anything is written.
#[cfg(target_os = "linux")]
#[test]
fn composefs_ref_keeps_an_image_through_gc() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let store = cache.join("composefs");
    fs::create_dir(&cache).unwrap();
    let image_of = |root: &Path, more: &[&str]| {
        let o = zinstall()
            .args(["image", "composefs", "--store"])
            .arg(&store)
            .args(more)
            .arg(root)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8(o.stdout).unwrap().trim().to_string()
    };
    let kept_root = tmp.path().join("kept");
    tree(&kept_root);
    let loose_root = tmp.path().join("loose");
    tree(&loose_root);
    fs::write(loose_root.join("only-here"), vec![0x42u8; 10_000]).unwrap();
    let kept = image_of(&kept_root, &["--ref", "mine"]);
    let loose = image_of(&loose_root, &[]);
    let object = |id: &str| store.join("objects").join(&id[..2]).join(&id[2..]);
    assert!(object(&kept).is_file() && object(&loose).is_file());
    assert_eq!(
        fs::read_link(store.join("images/refs/mine")).unwrap(),
        Path::new("..").join(&kept)
    );
    let o = zinstall()
        .args(["cache", "gc", "--cache"])
        .arg(&cache)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        object(&kept).is_file(),
        "the ref'd image went: {}",
        text(&o)
    );
    assert!(!object(&loose).exists(), "the loose image stayed");
    // Every object the kept image needs is still there: storing the same
    // tree again writes nothing.
    let o = zinstall()
        .args(["image", "composefs", "--json", "--store"])
        .arg(&store)
        .arg(&kept_root)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["result"]["objects_written"], 0, "{v}");
    let before = fs::read_dir(store.join("objects")).unwrap().count();
    let o = zinstall()
        .args(["image", "composefs", "--ref", "../escape", "--store"])
        .arg(&store)
        .arg(&loose_root)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--ref"), "{}", text(&o));
    assert_eq!(fs::read_dir(store.join("objects")).unwrap().count(), before);
    assert!(!tmp.path().join("escape").exists());
}
