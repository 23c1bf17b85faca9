//! `zinstall update` from what a root was made from: an image root
//! updated from its image alone (never from the host), to new image
//! versions (reading only the layers it lacks), refused where what it is
//! given contradicts its recipe; host files laid as at the install; a
//! package database that follows the files it describes; ACLs inherited
//! from above never reaching the new root, on ext4 and XFS; a root in
//! use refused; a rollback point that an edit in place does not reach
//! (XFS); what rollback says.

#![cfg(target_os = "linux")]

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use zinstall_testkit::{Kind, LoopFs};

use crate::oci::support::{
    Ent, append_layer, host_arch, layer_tar, s, text, write_layout, zinstall,
};

#[track_caller]
fn ok(o: Output) -> Output {
    assert!(o.status.success(), "{}", text(&o));
    o
}

#[track_caller]
fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `zinstall verify` finds the two roots alike (times of access aside,
/// and the root directory's own times: a fresh install's is when it was
/// made).
#[track_caller]
fn same(a: &Path, b: &Path) {
    let o = zinstall(&["verify", "--no-atime", s(a), s(b)]);
    let out = String::from_utf8_lossy(&o.stdout);
    let differ: Vec<&str> = out
        .lines()
        .filter(|l| {
            !l.starts_with(": ")
                && !l.contains("entries compared")
                && !l.contains("identical")
        })
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert!(
        o.status.code().is_some_and(|c| c <= 1) && differ.is_empty(),
        "{} vs {}:\n{}",
        a.display(),
        b.display(),
        text(&o)
    );
}

/// The JSON result of a command run with `--json`.
#[track_caller]
fn result(o: &Output) -> Value {
    let out = String::from_utf8_lossy(&o.stdout);
    let v: Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("{e}: {}", text(o)));
    v["result"].clone()
}

/// A profile that would copy this host's `/usr` and `/etc` into a root
/// installed without images (the Linux default), and lays images alone.
fn host_profile(dir: &Path) -> PathBuf {
    let p = dir.join("host.toml");
    fs::write(
        &p,
        format!(
            "source_root = \"/\"\ntrees = [\"usr\", \"etc\"]\nlog = \"{}\"\nimages_over_host = false\n",
            dir.join("install.log").display()
        ),
    )
    .unwrap();
    p
}

/// A source tree at `dir/src` holding `files` (relative path, content),
/// a profile reading `trees` from it, and a root installed from it at
/// `dir/zp`: the source, the profile and the zonepath.
fn tree_root(
    dir: &Path,
    trees: &[&str],
    files: &[(&str, &str)],
) -> (PathBuf, PathBuf, PathBuf) {
    let src = dir.join("src");
    for (p, data) in files {
        let p = src.join(p);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, data).unwrap();
    }
    let profile = dir.join("p.toml");
    let trees: Vec<String> = trees.iter().map(|t| format!("{t:?}")).collect();
    fs::write(
        &profile,
        format!(
            "source_root = \"{}\"\ntrees = [{}]\nlog = \"/dev/null\"\n",
            src.display(),
            trees.join(", ")
        ),
    )
    .unwrap();
    let zp = dir.join("zp");
    ok(zinstall(&[
        "install",
        "--no-sync",
        "--profile",
        s(&profile),
        "--zonepath",
        s(&zp),
    ]));
    (src, profile, zp)
}

fn layer1() -> Vec<u8> {
    layer_tar(&[
        Ent::Dir("usr/"),
        Ent::Dir("usr/bin/"),
        Ent::File("usr/bin/tool", b"tool 1\n"),
        Ent::File("usr/bin/other", b"other 1\n"),
        Ent::Dir("etc/"),
        Ent::File("etc/hostname", b"image\n"),
        Ent::File("etc/app.conf", b"conf 1\n"),
        Ent::Dir("var/"),
        Ent::Dir("var/lib/"),
        Ent::Dir("var/lib/dpkg/"),
        Ent::File("var/lib/dpkg/status", b"Package: tool\nVersion: 1\n"),
        Ent::Dir("var/log/"),
    ])
}

fn layer2() -> Vec<u8> {
    layer_tar(&[
        Ent::File("usr/bin/tool", b"tool 2, longer\n"),
        Ent::File("etc/app.conf", b"conf 2, longer\n"),
        Ent::File("etc/.wh.hostname", b""),
        Ent::File("var/lib/dpkg/status", b"Package: tool\nVersion: 2\n"),
        Ent::Dir("var/lib/newpkg/"),
        Ent::File("var/lib/newpkg/state", b"new\n"),
        Ent::File("var/log/app.log", b"the image's log\n"),
        Ent::HardLink("usr/bin/tool-link", "usr/bin/other"),
    ])
}

/// Version 1 at `dir/v1`, version 2 (v1 plus one layer) at `dir/v2`.
fn versions(dir: &Path) -> (PathBuf, PathBuf) {
    let v1 = dir.join("v1");
    write_layout(&v1, &[layer1()], host_arch(), &|_, _| {});
    let v2 = dir.join("v2");
    ok(std::process::Command::new("cp")
        .arg("-a")
        .arg(&v1)
        .arg(&v2)
        .output()
        .unwrap());
    append_layer(&v2, &layer2());
    (v1, v2)
}

fn install(profile: &Path, zp: &Path, image: &Path) {
    ok(zinstall(&[
        "install",
        "--no-sync",
        "--profile",
        s(profile),
        "--zonepath",
        s(zp),
        s(image),
    ]));
}

fn update(profile: &Path, zp: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "update",
        "--json",
        "--profile",
        s(profile),
        "--zonepath",
        s(zp),
    ];
    args.extend_from_slice(extra);
    zinstall(&args)
}

/// A root made from an image alone is updated from that image alone:
/// with the same image (given or not) nothing changes and nothing of the
/// host comes in, although the profile names the host's /usr and /etc.
/// A new version that adds a layer reads that layer alone and gives the
/// root a fresh install of the new version has; one whose first layer
/// differs is read whole, with the same result.
#[test]
fn an_image_root_follows_its_image_and_never_the_host() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let profile = host_profile(d.path());
    let (v1, v2) = versions(d.path());
    let zp = d.path().join("zp");
    install(&profile, &zp, &v1);
    let root = zp.join("root");
    let before: Vec<String> = zinstall_testkit::listing(&root);
    for extra in [&[][..], &[s(&v1)][..]] {
        let o = ok(update(&profile, &zp, extra));
        let r = result(&o);
        assert_eq!(r["stats"]["added"], 0, "{r}");
        assert_eq!(r["stats"]["changed"], 0, "{r}");
        assert_eq!(r["layers_read"], 0, "{r}");
        assert_eq!(zinstall_testkit::listing(&root), before);
    }
    assert!(
        !root.join("etc/shadow").exists() && !root.join("usr/lib").exists()
    );
    assert_eq!(read(&root.join("etc/hostname")), "image\n");
    // Version 2: one layer read, the first as recorded.
    let o = ok(update(&profile, &zp, &[s(&v2)]));
    let r = result(&o);
    assert_eq!(
        (r["layers_read"].as_u64(), r["layers_reused"].as_u64()),
        (Some(1), Some(1)),
        "{r}"
    );
    let fresh = d.path().join("fresh2");
    install(&profile, &fresh, &v2);
    same(&fresh.join("root"), &root);
    assert_eq!(
        fs::metadata(root.join("usr/bin/tool-link")).unwrap().ino(),
        fs::metadata(root.join("usr/bin/other")).unwrap().ino(),
        "a layer's hard link to a lower layer's file"
    );
    // No image named: the recorded one (version 2 now), nothing to do.
    let r = result(&ok(update(&profile, &zp, &[])));
    assert_eq!(r["stats"]["changed"], 0, "{r}");
    // A rebuilt image (its first layer differs): every layer read.
    let v3 = d.path().join("v3");
    let rebuilt = layer_tar(&[
        Ent::Dir("usr/"),
        Ent::Dir("usr/bin/"),
        Ent::File("usr/bin/tool", b"tool 3\n"),
        Ent::File("usr/bin/other", b"other 3\n"),
        Ent::Dir("etc/"),
        Ent::File("etc/app.conf", b"conf 1\n"),
        Ent::Dir("var/"),
        Ent::Dir("var/lib/"),
        Ent::Dir("var/lib/dpkg/"),
        Ent::File("var/lib/dpkg/status", b"Package: tool\nVersion: 3\n"),
        Ent::Dir("var/log/"),
    ]);
    write_layout(&v3, &[rebuilt, layer2()], host_arch(), &|_, _| {});
    let r = result(&ok(update(&profile, &zp, &[s(&v3)])));
    assert_eq!(
        (r["layers_read"].as_u64(), r["layers_reused"].as_u64()),
        (Some(2), Some(0)),
        "{r}"
    );
    let fresh3 = d.path().join("fresh3");
    install(&profile, &fresh3, &v3);
    same(&fresh3.join("root"), &root);
    assert_eq!(read(&root.join("usr/bin/other")), "other 3\n");
}

/// The update's layers read again when the zone changed a file of a
/// followed path that the new layers do not: the image's copy is put
/// back. /etc merges; /var is kept (what the zone has there stays, what
/// the image adds where it has nothing is made) but for the package
/// database, which follows the files it describes.
#[test]
fn an_image_update_replaces_usr_merges_etc_keeps_var() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let profile = host_profile(d.path());
    let (v1, v2) = versions(d.path());
    let zp = d.path().join("zp");
    install(&profile, &zp, &v1);
    let root = zp.join("root");
    fs::write(root.join("etc/app.conf"), "the zone's conf\n").unwrap();
    fs::write(root.join("usr/bin/other"), "the zone's edit\n").unwrap();
    fs::write(root.join("usr/bin/tool"), "the zone's tool\n").unwrap();
    fs::write(
        root.join("var/lib/dpkg/status"),
        "Package: tool\nVersion: zone\n",
    )
    .unwrap();
    fs::write(root.join("var/log/app.log"), "the zone's log\n").unwrap();
    let o = ok(update(&profile, &zp, &[s(&v2)]));
    let r = result(&o);
    let names = |k: &str| -> Vec<String> {
        r[k].as_array()
            .unwrap()
            .iter()
            .map(|x| {
                format!(
                    "{} {}",
                    x["path"].as_str().unwrap(),
                    x["why"].as_str().unwrap()
                )
            })
            .collect()
    };
    let (kept, replaced) = (names("kept"), names("replaced"));
    // usr/bin/other: unchanged by v2, changed by the zone: the image's
    // copy is put back, which only the first layer holds.
    assert_eq!(r["layers_read"], 2, "{r}");
    assert!(
        replaced.iter().any(|l| l.starts_with("/usr/bin/other ")),
        "{replaced:?}"
    );
    assert!(
        replaced.iter().any(|l| l.starts_with("/usr/bin/tool ")),
        "{replaced:?}"
    );
    assert!(
        replaced
            .iter()
            .any(|l| l.starts_with("/var/lib/dpkg/status ")),
        "{replaced:?}"
    );
    assert!(
        kept.iter()
            .any(|l| l.starts_with("/etc/app.conf changed in the root")),
        "{kept:?}"
    );
    assert!(
        kept.iter().any(|l| l == "/var/log/app.log a kept path: the root's own entry where the new source adds one"),
        "{kept:?}"
    );
    assert_eq!(read(&root.join("usr/bin/other")), "other 1\n");
    assert_eq!(read(&root.join("usr/bin/tool")), "tool 2, longer\n");
    assert_eq!(
        read(&root.join("var/lib/dpkg/status")),
        "Package: tool\nVersion: 2\n"
    );
    assert_eq!(read(&root.join("etc/app.conf")), "the zone's conf\n");
    assert_eq!(read(&root.join("var/log/app.log")), "the zone's log\n");
    assert!(!root.join("etc/hostname").exists(), "the whiteout applies");
    // Where the zone has nothing in kept /var, the image's is made.
    assert_eq!(read(&root.join("var/lib/newpkg/state")), "new\n");
}

/// What the update is given that the recipe contradicts is refused
/// before anything is written, naming both.
#[test]
fn what_contradicts_the_recipe_is_refused_naming_both() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let profile = host_profile(d.path());
    let (v1, v2) = versions(d.path());
    // An image root: no trees, and as many images as it was made from.
    let zp = d.path().join("zp");
    install(&profile, &zp, &v1);
    let keep = d.path().join("keep");
    ok(zinstall(&["copy", s(&zp.join("root")), s(&keep)]));
    for (extra, says) in [
        (
            vec!["--source-root", "/"],
            "--source-root names where trees come from",
        ),
        (
            vec![s(&v1), s(&v2)],
            "give a new version of each of its 1 image(s)",
        ),
    ] {
        let o = update(&profile, &zp, &extra);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let t = text(&o);
        assert!(t.contains(says), "{t}");
        assert!(
            t.contains(&format!(
                "the root was made from the image {}",
                v1.display()
            )),
            "{t}"
        );
        assert!(t.contains("nothing was changed"), "{t}");
        same(&keep, &zp.join("root"));
        assert!(!zp.join("root.prev").exists());
    }
    // A root of trees: no image, and its own trees.
    let src = d.path().join("src");
    fs::create_dir_all(src.join("usr/bin")).unwrap();
    fs::write(src.join("usr/bin/a"), "a\n").unwrap();
    let tp = d.path().join("trees.toml");
    fs::write(
        &tp,
        format!(
            "source_root = \"{}\"\ntrees = [\"usr\"]\nlog = \"/dev/null\"\n",
            src.display()
        ),
    )
    .unwrap();
    let zt = d.path().join("zt");
    ok(zinstall(&[
        "install",
        "--no-sync",
        "--profile",
        s(&tp),
        "--zonepath",
        s(&zt),
    ]));
    let o = update(&tp, &zt, &[s(&v1)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o)
            .contains("a root made from the host's trees is updated from them"),
        "{}",
        text(&o)
    );
    let o = update(&profile, &zt, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!(
            "the root was made from the trees /usr of {}",
            src.display()
        )),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("trees /usr, /etc"), "{}", text(&o));
    // The same trees read from elsewhere: said, not guessed.
    let elsewhere = d.path().join("elsewhere.toml");
    fs::write(
        &elsewhere,
        "source_root = \"/\"\ntrees = [\"usr\"]\nlog = \"/dev/null\"\n",
    )
    .unwrap();
    let o = update(&elsewhere, &zt, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("give --source-root / to update it from there"),
        "{}",
        text(&o)
    );
    assert!(!zt.join("root.prev").exists());
    ok(update(
        &elsewhere,
        &zt,
        &["--source-root", s(&src), "--dry-run"],
    ));
}

/// A host file is laid as the install laid it: one that is a link whose
/// target the root lacks stays the copy of what it leads to, never the
/// tree's link, and is not rewritten when nothing changed.
#[test]
fn host_files_are_laid_as_at_the_install() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    fs::create_dir_all(src.join("etc")).unwrap();
    fs::create_dir_all(src.join("run/resolve")).unwrap();
    fs::write(src.join("run/resolve/stub.conf"), "nameserver 127.0.0.53\n")
        .unwrap();
    symlink("../run/resolve/stub.conf", src.join("etc/resolv.conf")).unwrap();
    fs::write(src.join("etc/hosts"), "127.0.0.1 localhost\n").unwrap();
    let tree = src.strip_prefix("/").unwrap();
    let host_file = src.join("etc/resolv.conf");
    let profile = d.path().join("p.toml");
    fs::write(
        &profile,
        format!(
            "source_root = \"/\"\ntrees = [\"{t}\"]\nlog = \"/dev/null\"\n\n[[rule]]\npattern = \"{t}/run\"\naction = \"skip\"\n\n[host_files]\npaths = [\"{h}\"]\n",
            t = tree.display(),
            h = host_file.display()
        ),
    )
    .unwrap();
    let zp = d.path().join("zp");
    ok(zinstall(&[
        "install",
        "--no-sync",
        "--profile",
        s(&profile),
        "--zonepath",
        s(&zp),
    ]));
    let in_root = zp.join("root").join(tree).join("etc/resolv.conf");
    let md = fs::symlink_metadata(&in_root).unwrap();
    assert!(md.is_file(), "the install copies it by content");
    let ino = md.ino();
    let r = result(&ok(update(&profile, &zp, &[])));
    assert_eq!(r["stats"]["changed"], 0, "{r}");
    assert_eq!(r["stats"]["bytes"], 0, "{r}");
    let md = fs::symlink_metadata(&in_root).unwrap();
    assert!(md.is_file() && md.ino() == ino, "not replaced");
    assert_eq!(read(&in_root), "nameserver 127.0.0.53\n");
    // The host's changes to it come in as the install would take them.
    fs::write(src.join("run/resolve/stub.conf"), "nameserver 10.0.0.1\n")
        .unwrap();
    let r = result(&ok(update(&profile, &zp, &[])));
    assert_eq!(r["stats"]["changed"], 1, "{r}");
    let md = fs::symlink_metadata(&in_root).unwrap();
    assert!(md.is_file());
    assert_eq!(read(&in_root), "nameserver 10.0.0.1\n");
}

/// A root made from a system's trees whose packages were upgraded: the
/// package database (followed, inside kept /var) changes with the files
/// it describes, the zone's edit of a package's file is replaced, its
/// /etc edit kept, its logs and home kept, and the root's database
/// describes the files the root holds.
#[test]
fn a_package_database_follows_the_files_it_describes() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("deb");
    let w = |p: &str, data: &str| {
        let p = src.join(p);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, data).unwrap();
    };
    let package = |v: u32| {
        w("usr/bin/hello", &format!("hello {v}\n"));
        w("usr/share/doc/hello/changelog", &format!("version {v}\n"));
        w("etc/hello.conf", &format!("conf {v}\n"));
        w(
            "var/lib/dpkg/status",
            &format!(
                "Package: hello\nStatus: install ok installed\nVersion: {v}\n"
            ),
        );
        w(
            "var/lib/dpkg/info/hello.md5sums",
            &format!("{}  usr/bin/hello\n", sha(&format!("hello {v}\n"))),
        );
    };
    package(1);
    w("var/log/dpkg.log", "host log\n");
    let profile = d.path().join("deb.toml");
    fs::write(
        &profile,
        format!("source_root = \"{}\"\ntrees = [\"usr\", \"etc\", \"var\"]\nlog = \"/dev/null\"\n", src.display()),
    )
    .unwrap();
    let zp = d.path().join("zp");
    ok(zinstall(&[
        "install",
        "--no-sync",
        "--profile",
        s(&profile),
        "--zonepath",
        s(&zp),
    ]));
    let root = zp.join("root");
    // The zone edits the program and the conffile, logs, and keeps a
    // user's file.
    fs::write(root.join("usr/bin/hello"), "patched in the zone\n").unwrap();
    fs::write(root.join("etc/hello.conf"), "the zone's conf\n").unwrap();
    fs::write(root.join("var/log/dpkg.log"), "the zone's log\n").unwrap();
    fs::create_dir_all(root.join("home/u")).unwrap();
    fs::write(root.join("home/u/notes"), "mine\n").unwrap();
    package(2);
    w("var/log/dpkg.log", "host log, upgraded\n");
    let r = result(&ok(update(&profile, &zp, &[])));
    let kept: Vec<&str> = r["kept"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["path"].as_str().unwrap())
        .collect();
    assert!(
        kept.contains(&"/etc/hello.conf")
            && kept.contains(&"/var/log/dpkg.log"),
        "{r}"
    );
    let replaced: Vec<&str> = r["replaced"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["path"].as_str().unwrap())
        .collect();
    assert!(replaced.contains(&"/usr/bin/hello"), "{r}");
    // The database says version 2, and version 2 is what is there.
    let status = read(&root.join("var/lib/dpkg/status"));
    assert!(status.contains("Version: 2"), "{status}");
    let sums = read(&root.join("var/lib/dpkg/info/hello.md5sums"));
    let (sum, file) = sums.trim().split_once("  ").unwrap();
    assert_eq!(
        sha(&read(&root.join(file))),
        sum,
        "the database describes the file"
    );
    assert_eq!(
        read(&root.join("usr/share/doc/hello/changelog")),
        "version 2\n"
    );
    assert_eq!(read(&root.join("etc/hello.conf")), "the zone's conf\n");
    assert_eq!(read(&root.join("var/log/dpkg.log")), "the zone's log\n");
    assert_eq!(read(&root.join("home/u/notes")), "mine\n");
}

fn sha(s: &str) -> String {
    crate::oci::support::sha256(s.as_bytes())
}

/// Every ACL attribute of each entry beneath `root` (the root too),
/// as `PATH: NAME`.
fn acls(root: &Path) -> Vec<String> {
    fn walk(root: &Path, p: &Path, out: &mut Vec<String>) {
        let md = fs::symlink_metadata(p).unwrap();
        if md.file_type().is_symlink() {
            return;
        }
        let rel = p.strip_prefix(root).unwrap().display().to_string();
        for (n, _) in zinstall_testkit::xattrs(p) {
            let n = String::from_utf8_lossy(&n).into_owned();
            if n.contains("acl") || n.contains("ACL") {
                out.push(format!("{rel}: {n}"));
            }
        }
        if md.is_dir() {
            let mut names: Vec<_> = fs::read_dir(p)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            names.sort();
            for n in names {
                walk(root, &n, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out
}

/// A default ACL above the root and inside it is never inherited by
/// what the update makes: every directory and file of the new root has
/// exactly its source's attributes. On XFS (which lists its ACLs twice)
/// the update works, again and again.
#[test]
fn acls_from_above_never_reach_what_the_update_makes() {
    for kind in [Kind::Ext4, Kind::Xfs] {
        let Some(fs_) = LoopFs::require(kind, 512 << 20) else {
            return;
        };
        zinstall_testkit::need("setfacl");
        let d = fs_.path();
        let (src, profile, zp) = tree_root(
            d,
            &["usr", "etc"],
            &[
                ("usr/share/a/file", "1\n"),
                ("usr/bin/tool", "1\n"),
                ("etc/conf.d/a", "1\n"),
            ],
        );
        let w = |p: &str, data: &str| {
            let p = src.join(p);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, data).unwrap();
        };
        let setfacl = |args: &[&str]| {
            ok(zinstall_testkit::tool("setfacl")
                .args(args)
                .output()
                .unwrap());
        };
        // A default above the root (root.new is made there), and one the
        // zone sets on a directory of a merged path, which it keeps.
        setfacl(&["-d", "-m", "u:nobody:rwx", s(&zp)]);
        setfacl(&["-d", "-m", "u:nobody:rwx", s(&zp.join("root/etc/conf.d"))]);
        for round in 1..=3 {
            w(&format!("usr/share/new{round}/deep/file"), "new\n");
            w(&format!("etc/conf.d/new{round}/deep/file"), "new\n");
            w("usr/bin/tool", &format!("{round}\n"));
            w("etc/conf.d/a", &format!("{round}\n"));
            let o = update(&profile, &zp, &[]);
            assert!(o.status.success(), "{kind:?} round {round}: {}", text(&o));
            let found: Vec<String> = acls(&zp.join("root"))
                .into_iter()
                .filter(|l| !l.contains("SGI_ACL"))
                .collect();
            assert_eq!(
                found,
                ["etc/conf.d: system.posix_acl_default"],
                "{kind:?} round {round}: only the zone's own"
            );
            assert_eq!(
                read(&zp.join("root/usr/bin/tool")),
                format!("{round}\n")
            );
        }
    }
}

/// A process working in the root, or holding it as its root, makes the
/// update refuse, naming it, with nothing changed; `--live` goes ahead.
#[test]
fn a_root_in_use_is_refused_unless_live() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let (src, profile, zp) =
        tree_root(d.path(), &["usr"], &[("usr/bin/a", "1\n")]);
    fs::write(src.join("usr/bin/a"), "2\n").unwrap();
    // One working in the root, one holding a file of it open.
    for how in ["cwd", "fd"] {
        let mut c = std::process::Command::new("sleep");
        c.arg("60");
        if how == "cwd" {
            c.current_dir(zp.join("root/usr"));
        } else {
            c.stdin(fs::File::open(zp.join("root/usr/bin/a")).unwrap());
        }
        let mut child = c.spawn().unwrap();
        // The command keeps the file it was given: this process lets go.
        drop(c);
        std::thread::sleep(std::time::Duration::from_millis(200));
        let o = update(&profile, &zp, &[]);
        let _ = child.kill();
        let _ = child.wait();
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{how}: {t}");
        assert!(
            t.contains(&format!("process {} (sleep)", child.id())),
            "{how}: {t}"
        );
        assert!(t.contains("--live"), "{t}");
        // A Linux root is no zone: what to stop is said as it is here.
        assert!(
            t.contains("stop the container or guest using it (or the process)")
                && !t.contains("stop the zone"),
            "{t}"
        );
        assert_eq!(read(&zp.join("root/usr/bin/a")), "1\n");
        assert!(!zp.join("root.prev").exists());
    }
    let mut child = std::process::Command::new("sleep")
        .arg("60")
        .current_dir(zp.join("root/usr"))
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let o = update(&profile, &zp, &["--live"]);
    let _ = child.kill();
    let _ = child.wait();
    ok(o);
    assert_eq!(read(&zp.join("root/usr/bin/a")), "2\n");
}

/// On XFS the previous root shares unchanged files copy-on-write, on
/// btrfs it is a snapshot of the root (a subvolume): an edit in place in
/// the root after the update does not reach it, and a rollback gives the
/// old content back. On ext4 it shares them by hard link, and the update
/// says so. What each rollback says is which root is in place.
#[test]
fn the_rollback_point_stays_one_where_the_filesystem_clones() {
    for kind in [Kind::Xfs, Kind::Btrfs, Kind::Ext4] {
        let Some(fs_) = LoopFs::require(kind, 512 << 20) else {
            return;
        };
        let (src, profile, zp) = tree_root(
            fs_.path(),
            &["usr"],
            &[
                ("usr/bin/same", "as installed\n"),
                ("usr/bin/changes", "1\n"),
            ],
        );
        fs::write(src.join("usr/bin/changes"), "2\n").unwrap();
        let o = ok(update(&profile, &zp, &[]));
        let r = result(&o);
        let want = match kind {
            Kind::Xfs => "reflink",
            // The install made the root a subvolume: snapshotted whole.
            Kind::Btrfs => "snapshot",
            Kind::Ext4 | Kind::Ext4Verity => "hardlink",
        };
        assert_eq!(r["method"], want, "{kind:?}: {r}");
        if let Kind::Xfs = kind {
            assert!(zinstall_testkit::shares_extents(
                &zp.join("root.prev/usr/bin/same")
            ));
        }
        // Edited in place, as an editor that does not replace the file.
        let mut f = fs::OpenOptions::new()
            .write(true)
            .open(zp.join("root/usr/bin/same"))
            .unwrap();
        f.write_all(b"EDITED").unwrap();
        drop(f);
        let prev = read(&zp.join("root.prev/usr/bin/same"));
        match kind {
            Kind::Xfs | Kind::Btrfs => assert_eq!(prev, "as installed\n"),
            Kind::Ext4 | Kind::Ext4Verity => {
                assert_eq!(prev, "EDITEDtalled\n", "shared by hard link")
            }
        }
        let o = ok(zinstall(&["rollback", "--zonepath", s(&zp)]));
        let t = text(&o);
        assert!(t.contains("the installed root (generation 0"), "{t}");
        assert!(t.contains("root.prev holds the root of update 1"), "{t}");
        if let Kind::Xfs | Kind::Btrfs = kind {
            assert_eq!(read(&zp.join("root/usr/bin/same")), "as installed\n");
        }
        assert_eq!(read(&zp.join("root/usr/bin/changes")), "1\n");
        let o = ok(zinstall(&["rollback", "--zonepath", s(&zp)]));
        let t = text(&o);
        assert!(t.contains("the root of update 1 ("), "{t}");
        assert!(t.contains("root.prev holds the installed root"), "{t}");
        assert_eq!(read(&zp.join("root/usr/bin/changes")), "2\n");
        if let Kind::Ext4 = kind {
            fs::write(src.join("usr/bin/changes"), "3\n").unwrap();
            let o = ok(zinstall(&[
                "update",
                "--profile",
                s(&profile),
                "--zonepath",
                s(&zp),
            ]));
            assert!(
                text(&o).contains(
                    "shares unchanged files with the root by hard link"
                ),
                "{}",
                text(&o)
            );
        }
    }
}

/// The manifest an install records from the hashes its workers took as
/// they wrote (not reading the files back) is the one a walk that reads
/// every file records: for an OCI image with whiteouts and a hard link to
/// a lower layer, a plain tar (bodies copied in the kernel), a compressed
/// one, and a sparse file.
#[test]
fn the_manifest_recorded_while_writing_is_what_reading_records() {
    use zinstall_install::manifest;
    let d = tempfile::tempdir().unwrap();
    let profile = crate::oci::support::bare_profile(d.path());
    let (_, v2) = versions(d.path());
    let plain = d.path().join("plain.tar");
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    {
        let mut b = tar::Builder::new(fs::File::create(&plain).unwrap());
        for (p, data) in [
            ("usr/a", &b"small"[..]),
            ("usr/big", &big[..]),
            ("usr/empty", &b""[..]),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_mode(0o644);
            h.set_size(data.len() as u64);
            h.set_mtime(1_700_000_000);
            b.append_data(&mut h, p, data).unwrap();
        }
        b.finish().unwrap();
    }
    let gz = d.path().join("plain.tar.gz");
    fs::write(&gz, crate::oci::support::gzip(&fs::read(&plain).unwrap()))
        .unwrap();
    let sparse_dir = d.path().join("sp");
    fs::create_dir_all(&sparse_dir).unwrap();
    let sp = fs::File::create(sparse_dir.join("holes")).unwrap();
    sp.set_len(8 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(
        &sp,
        b"data in the middle",
        4 << 20,
    )
    .unwrap();
    drop(sp);
    let sparse_tar = d.path().join("sparse.tar");
    ok(zinstall_testkit::tool("tar")
        .args(["--sparse", "-C"])
        .arg(&sparse_dir)
        .arg("-cf")
        .arg(&sparse_tar)
        .arg("holes")
        .output()
        .unwrap());
    for (n, image) in [&v2, &plain, &gz, &sparse_tar].iter().enumerate() {
        let zp = d.path().join(format!("zp{n}"));
        install(&profile, &zp, image);
        let recorded =
            manifest::read(&zp, manifest::MANIFEST).unwrap().unwrap();
        let read = manifest::record(&zp.join("root"), &[], Vec::new()).unwrap();
        let strip = |m: &manifest::Manifest| -> Vec<manifest::Entry> {
            m.entries
                .iter()
                .map(|e| manifest::Entry {
                    i: None,
                    o: None,
                    ..e.clone()
                })
                .collect()
        };
        assert_eq!(strip(&recorded), strip(&read), "{}", image.display());
        assert!(
            recorded.entries.iter().any(|e| e.k == 'f'),
            "{}",
            image.display()
        );
        // A tarball is named by the SHA-256 of its bytes.
        let r = recorded.header.recipe.expect("a recipe");
        if n > 0 {
            let want = format!(
                "sha256:{}",
                crate::oci::support::sha256(&fs::read(image).unwrap())
            );
            assert_eq!(r.images[0].digest, want, "{}", image.display());
            assert_eq!(r.images[0].kind, "tarball");
        } else {
            assert_eq!(r.images[0].kind, "oci");
            assert_eq!(r.images[0].layers.len(), 2);
        }
    }
}

/// A root made from a tarball follows it by its bytes: the same
/// tarball is not unpacked again; a rewritten one (the same size and
/// time, other bytes) is, and the root is what a fresh install of it
/// makes.
#[test]
fn a_tarball_root_is_told_by_its_digest() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let profile = host_profile(d.path());
    let tarball = d.path().join("root.tar");
    let make = |body: &[u8]| {
        let mut b = tar::Builder::new(fs::File::create(&tarball).unwrap());
        for dir in ["etc/", "usr/", "usr/bin/"] {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Directory);
            h.set_mode(0o755);
            h.set_size(0);
            h.set_mtime(1_700_000_000);
            b.append_data(&mut h, dir, &[][..]).unwrap();
        }
        for (p, data) in [("etc/app", body), ("usr/bin/tool", &b"tool\n"[..])] {
            let mut h = tar::Header::new_gnu();
            h.set_mode(0o644);
            h.set_size(data.len() as u64);
            h.set_mtime(1_700_000_000);
            b.append_data(&mut h, p, data).unwrap();
        }
        b.finish().unwrap();
        drop(b);
        let f = fs::File::options().write(true).open(&tarball).unwrap();
        f.set_modified(
            std::time::UNIX_EPOCH
                + std::time::Duration::from_secs(1_700_000_000),
        )
        .unwrap();
    };
    make(b"one\n");
    let zp = d.path().join("zp");
    install(&profile, &zp, &tarball);
    let r = result(&ok(update(&profile, &zp, &[])));
    assert_eq!(
        (r["layers_read"].as_u64(), r["layers_reused"].as_u64()),
        (Some(0), Some(1)),
        "{r}"
    );
    // Same size, same time, other bytes.
    make(b"two\n");
    let r = result(&ok(update(&profile, &zp, &[])));
    assert_eq!(
        (r["layers_read"].as_u64(), r["layers_reused"].as_u64()),
        (Some(1), Some(0)),
        "{r}"
    );
    assert_eq!(read(&zp.join("root/etc/app")), "two\n");
    let fresh = d.path().join("fresh");
    install(&profile, &fresh, &tarball);
    same(&fresh.join("root"), &zp.join("root"));
}

/// A bind mount of another directory of the same filesystem inside the
/// root is a mount point to the update, as a tmpfs would be: not walked,
/// not cloned, nothing of it removed; the update succeeds.
#[test]
fn a_bind_mount_in_the_root_is_a_mount_point() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let (src, profile, zp) =
        tree_root(d.path(), &["usr"], &[("usr/bin/a", "1\n")]);
    let elsewhere = d.path().join("elsewhere");
    fs::create_dir_all(elsewhere.join("sub")).unwrap();
    fs::write(elsewhere.join("sub/data"), "not the zone's\n").unwrap();
    let at = zp.join("root/usr/mounted");
    fs::create_dir(&at).unwrap();
    let mount = zinstall_testkit::fsops::Mount::bind(&elsewhere, &at);
    fs::write(src.join("usr/bin/a"), "2\n").unwrap();
    let o = update(&profile, &zp, &[]);
    drop(mount);
    ok(o);
    assert_eq!(read(&zp.join("root/usr/bin/a")), "2\n");
    assert_eq!(read(&elsewhere.join("sub/data")), "not the zone's\n");
}
