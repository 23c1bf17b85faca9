//! `zinstall provision --format composefs`: guests that are composefs
//! roots of one image made once in the cache's store, each with its own
//! upper layer; compared with tree guests of the same image, built once,
//! kept apart, undone whole on failure, refused for disk images, their
//! entry's ref collected with the entry, and the same through zinstalld.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use zinstall_testkit::run::text;

use crate::composefs_mount::{
    Unmounts, composefs_mounts, is_mounted, zinstall,
};

/// A small root filesystem as a tar: /etc with a hostname and a
/// machine-id, a large file and a symlink.
fn rootfs_tar(dir: &Path) -> PathBuf {
    let r = dir.join("rootfs");
    fs::create_dir_all(r.join("etc")).unwrap();
    fs::create_dir_all(r.join("usr/lib")).unwrap();
    fs::write(r.join("etc/hostname"), b"image\n").unwrap();
    fs::write(
        r.join("etc/machine-id"),
        b"0123456789abcdef0123456789abcdef\n",
    )
    .unwrap();
    fs::write(r.join("etc/hosts"), b"127.0.0.1 localhost\n").unwrap();
    for i in 0..20u32 {
        let data: Vec<u8> =
            (0..20_000u32).map(|j| ((i * 7 + j) % 251) as u8).collect();
        fs::write(r.join(format!("usr/lib/f{i}")), data).unwrap();
    }
    std::os::unix::fs::symlink("usr/lib", r.join("lib")).unwrap();
    let tar = dir.join("rootfs.tar");
    let o = Command::new("tar")
        .arg("-C")
        .arg(&r)
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    tar
}

fn provision(image: &Path, out: &Path, cache: &Path, more: &[&str]) -> Output {
    zinstall()
        .arg("provision")
        .arg(image)
        .arg("--out")
        .arg(out)
        .arg("--cache")
        .arg(cache)
        .args(more)
        .output()
        .unwrap()
}

fn json(o: &Output) -> Value {
    assert!(o.status.success(), "{}", text(o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The paths `zinstall verify A B` finds different.
fn differing(a: &Path, b: &Path) -> Vec<String> {
    let o = zinstall()
        .args(["verify", "--json"])
        .arg(a)
        .arg(b)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut paths: Vec<String> = v["result"]["differences"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|d| d["path"].as_str().unwrap().to_string())
        .collect();
    paths.dedup();
    paths
}

/// Every object file in the store, by path.
fn objects(store: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in fs::read_dir(store.join("objects")).unwrap() {
        for f in fs::read_dir(d.unwrap().path()).unwrap() {
            out.push(f.unwrap().path());
        }
    }
    out.sort();
    out
}

/// Three composefs guests of a tar, left mounted: each is the tree
/// guest of the same image but for the identity files every guest has
/// its own (hostname, machine-id), which differ between composefs guests
/// as between tree guests; the JSON says composefs, the image and the
/// mount command; the identity went into each guest's upper/ and the
/// store was written once.
#[test]
fn composefs_guests_are_the_tree_guests_of_the_image() {
    if !composefs_mounts() {
        return;
    }
    let tmp = zinstall_testkit::Tmp::new();
    let image = rootfs_tar(tmp.path());
    let cache = tmp.path().join("cache");
    let (trees, cfs) = (tmp.path().join("trees"), tmp.path().join("cfs"));
    json(&provision(
        &image,
        &trees,
        &cache,
        &["--count", "3", "--json"],
    ));
    let _guards: Vec<Unmounts> = (0..3)
        .map(|i| Unmounts(cfs.join(format!("guest-{i}/root"))))
        .collect();
    let v = json(&provision(
        &image,
        &cfs,
        &cache,
        &["--count", "3", "--json", "--format", "composefs", "--mount"],
    ));
    let guests = v["result"]["guests"].as_array().unwrap();
    assert_eq!(guests.len(), 3, "{v}");
    let id = guests[0]["image"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 64, "{v}");
    let store = cache.join("composefs");
    assert!(
        store
            .join("objects")
            .join(&id[..2])
            .join(&id[2..])
            .is_file()
    );
    let mut hostnames = Vec::new();
    for (i, g) in guests.iter().enumerate() {
        let dir = cfs.join(format!("guest-{i}"));
        assert_eq!(g["kind"], "composefs", "{g}");
        assert_eq!(g["image"], id.as_str(), "{g}");
        assert_eq!(g["mounted"], true, "{g}");
        assert_eq!(
            g["mount"].as_str().unwrap(),
            format!("zinstall mount {}", dir.display())
        );
        let root = dir.join("root");
        assert!(is_mounted(&root), "guest-{i} is not mounted");
        let tree = trees.join(format!("guest-{i}"));
        assert_eq!(
            differing(&tree, &root),
            ["etc/hostname", "etc/machine-id"],
            "guest-{i} differs from the tree guest beyond its identity"
        );
        let hostname = fs::read_to_string(root.join("etc/hostname")).unwrap();
        assert_eq!(hostname.trim(), format!("guest-{i}"));
        assert_eq!(
            fs::read_to_string(dir.join("upper/etc/hostname")).unwrap(),
            hostname
        );
        hostnames.push(fs::read(root.join("etc/machine-id")).unwrap());
        let record: Value = serde_json::from_slice(
            &fs::read(dir.join("composefs.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(record["image"], id.as_str());
        assert_eq!(record["store"], store.to_str().unwrap());
    }
    hostnames.sort();
    hostnames.dedup();
    assert_eq!(hostnames.len(), 3, "machine-ids repeat");
    // The tree guests' own identities differ as these do.
    assert_eq!(
        differing(&trees.join("guest-0"), &trees.join("guest-1")),
        ["etc/hostname", "etc/machine-id"]
    );
}

/// A second provision of the same image writes no object and reuses
/// the entry's ref; a guest's change stays in its upper/, unseen by the
/// other guests and leaving the store as it was.
#[test]
fn the_image_is_made_once_and_guests_keep_their_changes_apart() {
    if !composefs_mounts() {
        return;
    }
    let tmp = zinstall_testkit::Tmp::new();
    let image = rootfs_tar(tmp.path());
    let cache = tmp.path().join("cache");
    let store = cache.join("composefs");
    let cfs = ["--format", "composefs", "--keep-identity", "--json"];
    let first = json(&provision(&image, &tmp.path().join("a"), &cache, &cfs));
    let before = objects(&store);
    let stamps: Vec<_> = before
        .iter()
        .map(|p| fs::symlink_metadata(p).unwrap().modified().unwrap())
        .collect();
    let refs: Vec<_> = fs::read_dir(store.join("images/refs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(refs.len(), 1, "{refs:?}");
    let entry = first["result"]["entry"].as_str().unwrap();
    assert_eq!(refs[0], format!("entry-{entry}"));

    let out = tmp.path().join("b");
    let second = json(&provision(
        &image,
        &out,
        &cache,
        &[
            "--format",
            "composefs",
            "--keep-identity",
            "--json",
            "--count",
            "2",
        ],
    ));
    assert_eq!(second["result"]["obtained"], "reused");
    assert_eq!(
        second["result"]["guests"][0]["image"],
        first["result"]["guests"][0]["image"]
    );
    assert_eq!(objects(&store), before, "objects were added");
    let again: Vec<_> = before
        .iter()
        .map(|p| fs::symlink_metadata(p).unwrap().modified().unwrap())
        .collect();
    assert_eq!(again, stamps, "objects were rewritten");
    // No guest needed a change: none was mounted to make it.
    assert!(
        fs::read_dir(out.join("guest-0/upper"))
            .unwrap()
            .next()
            .is_none()
    );

    let (g0, g1) = (out.join("guest-0"), out.join("guest-1"));
    let _guards = (Unmounts(g0.join("root")), Unmounts(g1.join("root")));
    for g in [&g0, &g1] {
        let o = zinstall().arg("mount").arg(g).output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
    }
    fs::write(g0.join("root/etc/mine"), b"guest-0's\n").unwrap();
    fs::remove_file(g0.join("root/usr/lib/f3")).unwrap();
    assert!(!g1.join("root/etc/mine").exists());
    assert!(g1.join("root/usr/lib/f3").exists());
    for g in [&g0, &g1] {
        let o = zinstall().arg("unmount").arg(g).output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
    }
    assert_eq!(fs::read(g0.join("upper/etc/mine")).unwrap(), b"guest-0's\n");
    assert!(fs::read_dir(g1.join("upper")).unwrap().next().is_none());
    assert_eq!(objects(&store), before);
}

/// The processes' mounts at or below `dir`.
fn mounts_under(dir: &Path) -> Vec<String> {
    let dir = fs::canonicalize(dir).unwrap();
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|m| Path::new(m).starts_with(&dir))
        .collect()
}

/// A failure mid-way undoes the whole run: a guest name already taken
/// (after a first guest was made and left mounted), and a
/// `--run-command` that fails inside the mounted guest, each leave no
/// guest of the run and nothing mounted; what was there before stays.
#[test]
fn a_failed_provision_leaves_no_guest_and_no_mount() {
    if !composefs_mounts() {
        return;
    }
    let tmp = zinstall_testkit::Tmp::new();
    let image = rootfs_tar(tmp.path());
    let cache = tmp.path().join("cache");
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    fs::write(out.join("guest-1"), b"someone's\n").unwrap();
    let _guard = Unmounts(out.join("guest-0/root"));
    let o = provision(
        &image,
        &out,
        &cache,
        &["--count", "3", "--format", "composefs", "--mount"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("guest-1"), "{}", text(&o));
    assert_eq!(mounts_under(tmp.path()), Vec::<String>::new());
    assert!(!out.join("guest-0").exists(), "guest-0 was left");
    assert_eq!(fs::read(out.join("guest-1")).unwrap(), b"someone's\n");

    let out = tmp.path().join("run");
    let o = provision(
        &image,
        &out,
        &cache,
        &[
            "--count",
            "2",
            "--format",
            "composefs",
            "--run-command",
            "false",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("--run-command"), "{}", text(&o));
    assert_eq!(mounts_under(tmp.path()), Vec::<String>::new());
    assert!(!out.join("guest-0").exists(), "guest-0 was left");
}

/// A disk image makes no composefs guests: refused before anything is
/// made, saying why and what to do.
#[test]
fn disk_images_are_refused() {
    let tmp = zinstall_testkit::Tmp::new();
    let raw = tmp.path().join("disk.raw");
    let f = fs::File::create(&raw).unwrap();
    f.set_len(4 << 20).unwrap();
    let out = tmp.path().join("out");
    let o = provision(
        &raw,
        &out,
        &tmp.path().join("cache"),
        &["--format", "composefs"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let said = text(&o);
    assert!(
        said.contains("composefs guests are made of tree images"),
        "{said}"
    );
    assert!(said.contains("without --format composefs"), "{said}");
    assert!(!out.exists());
    // A format of no guest is a usage error naming the two.
    let o = provision(
        &raw,
        &out,
        &tmp.path().join("cache"),
        &["--format", "erofs"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("tree or composefs"), "{}", text(&o));
    // --mount is composefs guests' alone.
    let o = provision(&raw, &out, &tmp.path().join("cache"), &["--mount"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("--format composefs"), "{}", text(&o));
}

/// `cache gc` removes a collected tree entry's composefs ref with it,
/// and keeps it while a guest uses the entry.
#[test]
fn gc_removes_a_collected_entrys_ref() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let tmp = zinstall_testkit::Tmp::new();
    let image = rootfs_tar(tmp.path());
    let cache = tmp.path().join("cache");
    let out = tmp.path().join("out");
    json(&provision(
        &image,
        &out,
        &cache,
        &["--format", "composefs", "--keep-identity", "--json"],
    ));
    let refs = cache.join("composefs/images/refs");
    let gc = || {
        let o = zinstall()
            .args(["cache", "gc", "--cache"])
            .arg(&cache)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
    };
    gc();
    assert_eq!(
        fs::read_dir(&refs).unwrap().count(),
        1,
        "a used entry's ref went"
    );
    fs::remove_dir_all(&out).unwrap();
    gc();
    assert_eq!(fs::read_dir(&refs).unwrap().count(), 0, "the ref stayed");
}

/// Through zinstalld: `--format composefs` reaches the daemon, which
/// makes the same guests, mounted with `--mount`.
#[test]
fn the_daemon_makes_composefs_guests() {
    if !composefs_mounts() {
        return;
    }
    let d = crate::daemon::Daemon::start("");
    let image = rootfs_tar(&d.path(""));
    let out = d.path("guests");
    let _guards = (
        Unmounts(out.join("guest-0/root")),
        Unmounts(out.join("guest-1/root")),
    );
    let o = d.zinstall(&[
        "provision",
        image.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--count",
        "2",
        "--format",
        "composefs",
        "--mount",
        "--json",
    ]);
    let v = json(&o);
    let guests = v["result"]["guests"].as_array().unwrap();
    assert_eq!(guests.len(), 2, "{v}");
    for (i, g) in guests.iter().enumerate() {
        assert_eq!(g["kind"], "composefs", "{g}");
        let dir = out.join(format!("guest-{i}"));
        assert!(dir.join("composefs.json").is_file());
        assert!(is_mounted(&dir.join("root")));
        assert_eq!(
            fs::read_to_string(dir.join("root/etc/hostname"))
                .unwrap()
                .trim(),
            format!("guest-{i}")
        );
    }
    assert!(
        d.path("cache/composefs/images/refs")
            .read_dir()
            .unwrap()
            .count()
            == 1
    );
}

/// zinstalld in a mount namespace of its own (as systemd's
/// ProtectSystem= runs it): guests left mounted would be seen by no one,
/// so --mount is refused saying why; without it the guests are made, their
/// identity set through a mount that stays in the daemon's namespace.
#[test]
fn a_daemon_in_its_own_mount_namespace_refuses_mount_and_makes_guests() {
    if !composefs_mounts() {
        return;
    }
    zinstall_testkit::tools::need("unshare");
    let d = crate::daemon::Daemon::start_wrapped(&[
        "unshare",
        "--mount",
        "--propagation",
        "slave",
        "--",
    ]);
    let image = rootfs_tar(&d.path(""));
    let out = d.path("guests");
    let (image, out_s) = (image.to_str().unwrap(), out.to_str().unwrap());
    let args = [
        "provision",
        image,
        "--out",
        out_s,
        "--count",
        "2",
        "--format",
        "composefs",
    ];
    let o = d.zinstall(&[&args[..], &["--mount"]].concat());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("another mount namespace"), "{}", text(&o));
    assert!(text(&o).contains("zinstall mount"), "{}", text(&o));
    assert!(!out.join("guest-0").exists());

    let o = d.zinstall(&args);
    assert!(o.status.success(), "{}\n{}", text(&o), d.log());
    for i in 0..2 {
        let dir = out.join(format!("guest-{i}"));
        assert!(dir.join("composefs.json").is_file());
        // Not mounted here: the daemon's mounts stayed in its namespace.
        assert!(!is_mounted(&dir.join("root")));
        let _guard = Unmounts(dir.join("root"));
        let o = zinstall().arg("mount").arg(&dir).output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        assert_eq!(
            fs::read_to_string(dir.join("root/etc/hostname"))
                .unwrap()
                .trim(),
            format!("guest-{i}")
        );
    }
}

/// `--force` over composefs guests left mounted: each is unmounted,
/// removed and made anew (its upper layer's changes gone), and left
/// mounted again with `--mount`.
#[test]
fn force_replaces_mounted_composefs_guests() {
    if !composefs_mounts() {
        return;
    }
    let tmp = zinstall_testkit::Tmp::new();
    let image = rootfs_tar(tmp.path());
    let cache = tmp.path().join("cache");
    let out = tmp.path().join("out");
    let root = out.join("guest-0/root");
    let _guard = Unmounts(root.clone());
    let args = ["--format", "composefs", "--mount"];
    let o = provision(&image, &out, &cache, &args);
    assert!(o.status.success(), "{}", text(&o));
    // The text line says the form, the image and how to unmount it.
    let said = String::from_utf8_lossy(&o.stdout);
    let dir = out.join("guest-0");
    assert!(said.contains("composefs, image "), "{said}");
    assert!(
        said.contains(&format!("zinstall unmount {}", dir.display())),
        "{said}"
    );
    fs::write(root.join("etc/mine"), b"x").unwrap();
    let o = provision(&image, &out, &cache, &args);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        is_mounted(&root),
        "a refused run unmounted a guest it did not make"
    );
    let forced = ["--format", "composefs", "--mount", "--json", "--force"];
    json(&provision(&image, &out, &cache, &forced));
    assert!(is_mounted(&root));
    assert!(
        !root.join("etc/mine").exists(),
        "the old guest's change stayed"
    );
    assert!(!out.join("guest-0/upper/etc/mine").exists());
    // Mounted once: the old mount was taken down, not stacked under.
    let canon = fs::canonicalize(&root).unwrap();
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let n = mounts
        .lines()
        .filter(|l| l.split(' ').nth(4) == canon.to_str())
        .count();
    assert_eq!(n, 1, "{mounts}");
}

/// `cache gc` through zinstalld sweeps the cache's composefs store as a
/// local one does: once the guests and their entry are gone, the image
/// and its objects go, and the reply says so.
#[test]
fn cache_gc_through_the_daemon_sweeps_the_store() {
    if !composefs_mounts() {
        return;
    }
    let d = crate::daemon::Daemon::start("");
    let image = rootfs_tar(&d.path(""));
    let out = d.path("guests");
    let o = d.zinstall(&[
        "provision",
        image.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--format",
        "composefs",
        "--keep-identity",
        "--json",
    ]);
    json(&o);
    let store = d.path("cache/composefs");
    let before = objects(&store);
    assert!(before.len() > 1, "{before:?}");
    let gc = |more: &[&str]| {
        let mut args = vec!["cache", "gc"];
        args.extend_from_slice(more);
        let o = d.zinstall(&args);
        assert!(o.status.success(), "{}", text(&o));
        o
    };
    // In use: everything stays, and the text says what the store kept.
    let o = gc(&[]);
    assert!(text(&o).contains("composefs store"), "{}", text(&o));
    assert_eq!(objects(&store), before);
    fs::remove_dir_all(&out).unwrap();
    let v = json(&gc(&["--json"]));
    let c = &v["result"]["composefs"];
    assert_eq!(
        c["objects_removed"].as_u64(),
        Some(before.len() as u64),
        "{v}"
    );
    assert_eq!(c["images_kept"].as_u64(), Some(0), "{v}");
    assert!(objects(&store).is_empty(), "{:?}", objects(&store));
}
