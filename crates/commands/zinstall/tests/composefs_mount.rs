//! `zinstall mount` and `zinstall unmount` of composefs roots: the
//! kernel's real EROFS and overlay mounts of an image made by `zinstall
//! image composefs`, a root's changes kept in its upper layer, the
//! read-only form, the mount(8) lines `--print` gives run by mount(8),
//! and each wrong root refused saying what is wrong.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub(crate) use zinstall_testkit::composefs_mounts;
use zinstall_testkit::run::text;

pub(crate) fn zinstall() -> Command {
    zinstall_testkit::run::command(env!("CARGO_BIN_EXE_zinstall"))
}

/// True if something is mounted at `at`.
pub(crate) fn is_mounted(at: &Path) -> bool {
    let want = fs::canonicalize(at).unwrap_or(at.to_path_buf());
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(want.to_str().unwrap()))
}

/// Unmounts `at` (lazily, as often as something is there) when dropped,
/// so a failing test leaves no mount behind.
pub(crate) struct Unmounts(pub PathBuf);

impl Drop for Unmounts {
    fn drop(&mut self) {
        for _ in 0..4 {
            if !is_mounted(&self.0) {
                break;
            }
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

fn run(c: &mut Command) -> Output {
    c.output().unwrap()
}

/// A small tree, its composefs image in `store`, and a root directory
/// `dir` with its record, `root/`, `upper/` and `work/`. The image's ID.
fn root_of_image(tmp: &Path, dir: &Path) -> (PathBuf, String) {
    let src = tmp.join("src");
    fs::create_dir_all(src.join("etc")).unwrap();
    fs::create_dir_all(src.join("usr/lib")).unwrap();
    fs::write(src.join("etc/hostname"), b"image\n").unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(src.join("usr/lib/big"), &big).unwrap();
    let store = tmp.join("store");
    let o = run(zinstall()
        .args(["image", "composefs", "--store"])
        .arg(&store)
        .arg(&src));
    assert!(o.status.success(), "{}", text(&o));
    let id = String::from_utf8(o.stdout).unwrap().trim().to_string();
    for d in ["root", "upper", "work"] {
        fs::create_dir_all(dir.join(d)).unwrap();
    }
    let record = serde_json::json!({
        "store": store, "image": id, "ref": "entry-test",
    });
    fs::write(dir.join("composefs.json"), record.to_string()).unwrap();
    (store, id)
}

/// Every file's bytes under `dir`, by path.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                stack.push(p);
            } else if m.is_file() {
                out.push((p.clone(), fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// Mounted writable: the image's files read through, a file written and
/// one deleted; unmounted, the changes are in upper/ (a whiteout for the
/// deleted one), the store and its image unchanged; mounted again, the
/// changes are still there. A second unmount fails saying nothing is
/// mounted.
#[test]
fn a_writable_mount_keeps_changes_in_upper_and_the_store_as_it_was() {
    if !composefs_mounts() {
        return;
    }
    let tmp = zinstall_testkit::Tmp::new();
    let dir = tmp.path().join("guest");
    let (store, _) = root_of_image(tmp.path(), &dir);
    let before = files(&store);
    let root = dir.join("root");
    let _guard = Unmounts(root.clone());

    let o = run(zinstall().arg("mount").arg(&dir));
    assert!(o.status.success(), "{}", text(&o));
    assert!(is_mounted(&root));
    assert_eq!(fs::read(root.join("etc/hostname")).unwrap(), b"image\n");
    assert_eq!(
        fs::read(root.join("usr/lib/big")).unwrap(),
        fs::read(tmp.path().join("src/usr/lib/big")).unwrap()
    );
    fs::write(root.join("etc/new"), b"written\n").unwrap();
    fs::remove_file(root.join("usr/lib/big")).unwrap();

    let o = run(zinstall().arg("unmount").arg(&dir));
    assert!(o.status.success(), "{}", text(&o));
    assert!(!is_mounted(&root));
    assert_eq!(fs::read(dir.join("upper/etc/new")).unwrap(), b"written\n");
    let whiteout = fs::symlink_metadata(dir.join("upper/usr/lib/big")).unwrap();
    use std::os::unix::fs::FileTypeExt;
    assert!(whiteout.file_type().is_char_device(), "{whiteout:?}");
    assert_eq!(files(&store), before, "the store changed");
    assert!(
        fs::read_dir(&root).unwrap().next().is_none(),
        "root/ not empty"
    );

    let o = run(zinstall().arg("mount").arg(&dir));
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(fs::read(root.join("etc/new")).unwrap(), b"written\n");
    assert!(!root.join("usr/lib/big").exists());
    let o = run(zinstall().arg("unmount").arg(&dir));
    assert!(o.status.success(), "{}", text(&o));

    let o = run(zinstall().arg("unmount").arg(&dir));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let said = text(&o);
    assert!(said.contains(&root.display().to_string()), "{said}");
    assert!(said.contains("nothing is mounted"), "{said}");
}

/// `--read-only` mounts the image alone: reads work, writes fail with
/// EROFS, and upper/ stays empty. `--zonepath` names the same directory.
#[test]
fn a_read_only_mount_refuses_writes() {
    if !composefs_mounts() {
        return;
    }
    let tmp = zinstall_testkit::Tmp::new();
    let dir = tmp.path().join("zone");
    root_of_image(tmp.path(), &dir);
    let root = dir.join("root");
    let _guard = Unmounts(root.clone());
    let o = run(zinstall()
        .args(["mount", "--read-only", "--zonepath"])
        .arg(&dir));
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(fs::read(root.join("etc/hostname")).unwrap(), b"image\n");
    let e = fs::write(root.join("etc/new"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    let o = run(zinstall().arg("unmount").arg(&dir));
    assert!(o.status.success(), "{}", text(&o));
    assert!(fs::read_dir(dir.join("upper")).unwrap().next().is_none());
}

/// A record naming an image the store lacks, a root/ that is a symlink,
/// and a directory with no record: each refused, naming the path and
/// what is wrong, with nothing mounted.
#[test]
fn wrong_roots_are_refused_saying_why() {
    if !composefs_mounts() {
        return;
    }
    let tmp = zinstall_testkit::Tmp::new();
    let dir = tmp.path().join("guest");
    let (_, id) = root_of_image(tmp.path(), &dir);

    let missing = tmp.path().join("missing");
    fs::create_dir(&missing).unwrap();
    for d in ["root", "upper", "work"] {
        fs::create_dir(missing.join(d)).unwrap();
    }
    let other =
        format!("{}{}", if &id[..1] == "0" { "1" } else { "0" }, &id[1..]);
    let record = fs::read_to_string(dir.join("composefs.json"))
        .unwrap()
        .replace(&id, &other);
    fs::write(missing.join("composefs.json"), record).unwrap();
    let o = run(zinstall().arg("mount").arg(&missing));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("image is not in the store"),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains(&other[2..]), "{}", text(&o));
    assert!(!is_mounted(&missing.join("root")));

    let linked = tmp.path().join("linked");
    fs::create_dir(&linked).unwrap();
    for d in ["upper", "work"] {
        fs::create_dir(linked.join(d)).unwrap();
    }
    let elsewhere = tmp.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, linked.join("root")).unwrap();
    fs::copy(dir.join("composefs.json"), linked.join("composefs.json"))
        .unwrap();
    let _guard = Unmounts(elsewhere.clone());
    let o = run(zinstall().arg("mount").arg(&linked));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let said = text(&o);
    assert!(said.contains("not a directory"), "{said}");
    assert!(said.contains(&linked.join("root").display().to_string()));
    assert!(!is_mounted(&elsewhere), "mounted through the symlink");

    let plain = tmp.path().join("src");
    let o = run(zinstall().arg("mount").arg(&plain));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let said = text(&o);
    assert!(said.contains("not a composefs root"), "{said}");
    assert!(said.contains(&plain.display().to_string()), "{said}");
}

/// `mount --print` writes commands that, run by sh and mount(8), mount
/// the same root: the image's files read through, a write lands in
/// upper/.
#[test]
fn printed_mount_lines_mount_the_root() {
    if !composefs_mounts() {
        return;
    }
    let tmp = zinstall_testkit::Tmp::new();
    let dir = tmp.path().join("guest");
    let (_, id) = root_of_image(tmp.path(), &dir);
    let o = run(zinstall().args(["mount", "--print"]).arg(&dir));
    assert!(o.status.success(), "{}", text(&o));
    let lines = String::from_utf8(o.stdout).unwrap();
    assert!(lines.contains("mount -t erofs -o ro "), "{lines}");
    assert!(lines.contains("metacopy=on"), "{lines}");
    let root = dir.join("root");
    let lower = PathBuf::from("/run/zinstall/composefs").join(&id);
    let _guards = (Unmounts(root.clone()), Unmounts(lower.clone()));
    assert!(!is_mounted(&root), "--print mounted");
    let sh = run(Command::new("sh").args(["-ec", &lines]));
    assert!(sh.status.success(), "{lines}\n{}", text(&sh));
    assert!(is_mounted(&root) && is_mounted(&lower));
    assert_eq!(fs::read(root.join("etc/hostname")).unwrap(), b"image\n");
    assert_eq!(
        fs::read(root.join("usr/lib/big")).unwrap(),
        fs::read(tmp.path().join("src/usr/lib/big")).unwrap()
    );
    fs::write(root.join("etc/new"), b"x").unwrap();
    assert_eq!(fs::read(dir.join("upper/etc/new")).unwrap(), b"x");
    drop(_guards);
    let _ = fs::remove_dir(&lower);
}
