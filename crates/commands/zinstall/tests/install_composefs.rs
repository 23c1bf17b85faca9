//! `zinstall install --format composefs`: the root's contents moved into
//! the cache's object store and its metadata into an EROFS image; the
//! image mounted under overlayfs equals a plain install of the same
//! source; store objects carry no owner's bits; a second install writes
//! nothing new; a full store leaves no record, ref or staging tree; and
//! uninstall removes what the install made.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use zinstall_testkit::fsops::Mount;
use zinstall_testkit::run::text;
use zinstall_testkit::{Kind, LoopFs, pseudo_random, require_root, tools};

fn zinstall() -> Command {
    zinstall_testkit::run::command(env!("CARGO_BIN_EXE_zinstall"))
}

fn run(cmd: &mut Command) {
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{cmd:?}: {}", text(&o));
}

/// A root's worth of every kind of entry: large and small files, hard
/// links, symlinks, a device node, a setuid file, a file capability, a
/// POSIX ACL, another owner and nanosecond times.
fn tree(root: &Path) {
    fs::create_dir_all(root.join("usr/bin")).unwrap();
    fs::create_dir_all(root.join("etc/deep/er")).unwrap();
    fs::write(root.join("usr/bin/tool"), pseudo_random(300_000, 1)).unwrap();
    fs::hard_link(root.join("usr/bin/tool"), root.join("usr/bin/tool2"))
        .unwrap();
    fs::write(root.join("usr/bin/same"), pseudo_random(300_000, 1)).unwrap();
    fs::write(root.join("usr/bin/su"), pseudo_random(9000, 2)).unwrap();
    fs::set_permissions(
        root.join("usr/bin/su"),
        fs::Permissions::from_mode(0o4755),
    )
    .unwrap();
    fs::write(root.join("usr/bin/ping"), pseudo_random(7000, 3)).unwrap();
    run(tools::tool("setcap")
        .arg("cap_net_raw+ep")
        .arg(root.join("usr/bin/ping")));
    fs::write(root.join("etc/small"), b"small\n").unwrap();
    fs::write(root.join("etc/acl"), pseudo_random(5000, 4)).unwrap();
    run(tools::tool("setfacl")
        .args(["-m", "u:1234:rwx"])
        .arg(root.join("etc/acl")));
    for i in 0..40 {
        fs::write(
            root.join(format!("etc/deep/er/f{i}")),
            pseudo_random(100 + i * 400, 10 + i as u64),
        )
        .unwrap();
    }
    symlink("../etc/small", root.join("usr/small")).unwrap();
    symlink("/nowhere", root.join("dangling")).unwrap();
    std::os::unix::fs::chown(root.join("etc/deep"), Some(1234), Some(5678))
        .unwrap();
    std::os::unix::fs::chown(root.join("usr/bin/tool"), Some(1001), Some(1002))
        .unwrap();
    run(Command::new("mknod")
        .arg(root.join("null"))
        .args(["c", "1", "3"]));
    run(tools::tool("touch")
        .args(["-h", "-d", "2021-03-04 05:06:07.123456789"])
        .arg(root.join("usr/bin/su"))
        .arg(root.join("usr/small")));
}

struct World {
    _d: tempfile::TempDir,
    dir: PathBuf,
    profile: PathBuf,
    tar: PathBuf,
}

fn world(base: Option<&Path>) -> World {
    let d = match base {
        Some(b) => tempfile::tempdir_in(b).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let dir = d.path().to_path_buf();
    let src = dir.join("src");
    tree(&src);
    let profile = dir.join("p.toml");
    fs::write(
        &profile,
        format!(
            "source_root = \"/\"\ntrees = []\nallow_devices = true\nlog = \"{}\"\n",
            dir.join("log").display()
        ),
    )
    .unwrap();
    let tar = dir.join("l.tar");
    run(zinstall().args(["image", "create"]).arg(&src).arg(&tar));
    World {
        _d: d,
        dir,
        profile,
        tar,
    }
}

fn install(w: &World, zp: &Path, cache: &Path, extra: &[&str]) -> Output {
    zinstall()
        .args(["install", "--json", "--profile"])
        .arg(&w.profile)
        .arg("--zonepath")
        .arg(zp)
        .arg("--cache")
        .arg(cache)
        .args(extra)
        .arg(&w.tar)
        .output()
        .unwrap()
}

fn result(o: &Output) -> serde_json::Value {
    let last = String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    let v: serde_json::Value = serde_json::from_str(&last)
        .unwrap_or_else(|e| panic!("{e}: {}", text(o)));
    v["result"].clone()
}

/// Every regular file under `dir`.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd {
        let e = e.unwrap();
        let t = e.file_type().unwrap();
        if t.is_dir() {
            files(&e.path(), out);
        } else if t.is_file() {
            out.push(e.path());
        }
    }
}

#[test]
fn a_composefs_install_mounts_as_the_plain_install() {
    if !require_root() {
        return;
    }
    let w = world(None);
    let cache = w.dir.join("cache");
    let plain = w.dir.join("plain");
    let o = install(&w, &plain, &cache, &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(result(&o)["format"], "tree", "{}", text(&o));
    let zp = w.dir.join("zp");
    let o = install(&w, &zp, &cache, &["--format", "composefs"]);
    assert!(o.status.success(), "{}", text(&o));
    let r = result(&o);
    assert_eq!(r["format"], "composefs", "{r}");
    let store = cache.join("composefs");
    assert_eq!(r["store"], store.display().to_string(), "{r}");
    let id = r["image"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 64, "{r}");
    // The record, the empty mount point, the overlay's directories.
    let rec: serde_json::Value =
        serde_json::from_slice(&fs::read(zp.join("composefs.json")).unwrap())
            .unwrap();
    assert_eq!(rec["image"], id.as_str());
    assert_eq!(rec["store"], store.display().to_string());
    let ref_name = rec["ref"].as_str().unwrap().to_string();
    assert!(ref_name.starts_with("install-"), "{rec}");
    assert_eq!(
        fs::read_link(store.join("images/refs").join(&ref_name)).unwrap(),
        Path::new("..").join(&id)
    );
    assert_eq!(fs::read_dir(zp.join("root")).unwrap().count(), 0);
    assert!(zp.join("upper").is_dir() && zp.join("work").is_dir());
    // No staging tree is left (built in memory, none is made).
    let staging = store.join("staging");
    assert!(
        !staging.exists() || fs::read_dir(&staging).unwrap().count() == 0,
        "a staging tree was left"
    );

    // Named as the unpacker wrote them, not read back (a hard link's
    // second name has no record: it may be read).
    let (objs, named) = (
        r["objects"].as_u64().unwrap(),
        r["objects_named_by_unpacker"].as_u64().unwrap(),
    );
    assert!(objs >= 45 && named + 1 >= objs && named <= objs, "{r}");

    let image = store.join("objects").join(&id[..2]).join(&id[2..]);
    let fsck = tools::tool("fsck.erofs").arg(&image).output().unwrap();
    assert!(fsck.status.success(), "{}", text(&fsck));
    // Every object: 0644, the store's owner, no extended attribute.
    let mut objects = Vec::new();
    files(&store.join("objects"), &mut objects);
    assert!(objects.len() >= 40, "{objects:?}");
    for p in &objects {
        let md = fs::symlink_metadata(p).unwrap();
        assert_eq!(md.permissions().mode() & 0o7777, 0o644, "{}", p.display());
        assert_eq!((md.uid(), md.gid()), (0, 0), "{}", p.display());
        let x = zinstall_testkit::xattrs(p);
        assert!(x.is_empty(), "{}: {x:?}", p.display());
    }

    // Mounted as the install's printed lines say: equal to the plain one.
    let (_erofs, _overlay) =
        mount_printed(&w.dir.join("lower"), &store, &id, &zp);
    assert_identical(&plain, &zp);
    let su = fs::symlink_metadata(zp.join("root/usr/bin/su")).unwrap();
    assert_eq!(su.permissions().mode() & 0o7777, 0o4755);
    let caps = zinstall_testkit::xattrs(&zp.join("root/usr/bin/ping"));
    assert!(
        caps.iter().any(|(n, _)| n == b"security.capability"),
        "{caps:?}"
    );
    assert_eq!(
        fs::symlink_metadata(zp.join("root/usr/bin/tool"))
            .unwrap()
            .uid(),
        1001
    );

    // Mounted, the root cannot be uninstalled.
    let o = zinstall()
        .args(["uninstall", "--zonepath"])
        .arg(&zp)
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("mount point"), "{}", text(&o));
    drop(_overlay);
    drop(_erofs);

    // A second install of the same source writes no object.
    let zp2 = w.dir.join("zp2");
    let o = install(&w, &zp2, &cache, &["--format", "composefs"]);
    assert!(o.status.success(), "{}", text(&o));
    let r2 = result(&o);
    assert_eq!(r2["image"], id.as_str(), "{r2}");
    assert_eq!(r2["objects_written"], 0, "{r2}");
    let mut again = Vec::new();
    files(&store.join("objects"), &mut again);
    assert_eq!(again.len(), objects.len());
    // Each zonepath holds its own ref.
    let rec2: serde_json::Value =
        serde_json::from_slice(&fs::read(zp2.join("composefs.json")).unwrap())
            .unwrap();
    assert_ne!(rec2["ref"], rec["ref"]);

    // A second install into the same zonepath is refused.
    let o = install(&w, &zp, &cache, &["--format", "composefs"]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("uninstall"), "{}", text(&o));

    // Uninstalled: the record, the ref and the directories are gone.
    let o = zinstall()
        .args(["uninstall", "--zonepath"])
        .arg(&zp)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    for name in ["composefs.json", "root", "upper", "work"] {
        assert!(!zp.join(name).exists(), "{name} left");
    }
    assert!(!store.join("images/refs").join(&ref_name).exists());
    assert!(
        store
            .join("images/refs")
            .join(rec2["ref"].as_str().unwrap())
            .exists()
    );
}

/// Mounts the image `id` of `store` at `zp/root` read-only as the
/// install's printed lines say, its EROFS at `lower`.
fn mount_printed(
    lower: &Path,
    store: &Path,
    id: &str,
    zp: &Path,
) -> (Mount, Mount) {
    let image = store.join("objects").join(&id[..2]).join(&id[2..]);
    fs::create_dir(lower).unwrap();
    let erofs = Mount::with_args(&["-t", "erofs", "-o", "ro"], &image, lower);
    let opts = format!(
        "ro,lowerdir={}::{},redirect_dir=on,metacopy=on",
        lower.display(),
        store.join("objects").display()
    );
    let overlay = Mount::with_args(
        &["-t", "overlay", "-o", &opts],
        Path::new("overlay"),
        &zp.join("root"),
    );
    (erofs, overlay)
}

/// `zinstall verify` finds the roots of `a` and `b` identical.
fn assert_identical(a: &Path, b: &Path) {
    let o = zinstall()
        .arg("verify")
        .arg(a.join("root"))
        .arg(b.join("root"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("identical"), "{}", text(&o));
}

/// The install of `images` in order, with `profile`.
fn install_images(
    profile: &Path,
    zp: &Path,
    cache: &Path,
    extra: &[&str],
    images: &[&Path],
) -> serde_json::Value {
    let o = zinstall()
        .args(["install", "--json", "--profile"])
        .arg(profile)
        .arg("--zonepath")
        .arg(zp)
        .arg("--cache")
        .arg(cache)
        .args(extra)
        .args(images)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    result(&o)
}

/// The unpacker names each file as it writes it. A later layer that
/// gives a file other bytes of the same size, or makes it a symlink, is
/// stored as that layer left it; a root with a host tree in it is read
/// back instead, as the unpacker did not write all of it.
#[test]
fn files_are_named_as_the_unpacker_left_them_or_read_back() {
    if !require_root() {
        return;
    }
    let w = world(None);
    let l2 = w.dir.join("l2");
    fs::create_dir_all(l2.join("usr/bin")).unwrap();
    fs::create_dir_all(l2.join("etc/deep/er")).unwrap();
    fs::write(l2.join("usr/bin/su"), pseudo_random(9000, 77)).unwrap();
    fs::write(l2.join("etc/deep/er/f3"), pseudo_random(100 + 3 * 400, 78))
        .unwrap();
    symlink("small", l2.join("etc/acl")).unwrap();
    let tar2 = w.dir.join("l2.tar");
    run(zinstall().args(["image", "create"]).arg(&l2).arg(&tar2));
    let cache = w.dir.join("cache");
    let (plain, zp) = (w.dir.join("plain"), w.dir.join("zp"));
    let layers = [w.tar.as_path(), tar2.as_path()];
    install_images(&w.profile, &plain, &cache, &[], &layers);
    let r = install_images(
        &w.profile,
        &zp,
        &cache,
        &["--format", "composefs"],
        &layers,
    );
    // All but a hard link's second name, perhaps.
    let (objs, named) = (
        r["objects"].as_u64().unwrap(),
        r["objects_named_by_unpacker"].as_u64().unwrap(),
    );
    assert!(objs >= 44 && named + 1 >= objs, "{r}");
    let id = r["image"].as_str().unwrap();
    let store = cache.join("composefs");
    let mounted = mount_printed(&w.dir.join("lower"), &store, id, &zp);
    assert_identical(&plain, &zp);
    assert_eq!(
        fs::read(zp.join("root/usr/bin/su")).unwrap(),
        pseudo_random(9000, 77)
    );
    drop(mounted);

    // A host tree beside the image: every file is read and hashed.
    let host = w.dir.join("host");
    fs::create_dir_all(host.join("opt")).unwrap();
    fs::write(host.join("opt/host-file"), pseudo_random(5000, 79)).unwrap();
    let profile = w.dir.join("host.toml");
    fs::write(
        &profile,
        format!(
            "source_root = \"{}\"\ntrees = [\"opt\"]\nimages_over_host = true\n\
             allow_devices = true\nlog = \"{}\"\n",
            host.display(),
            w.dir.join("log").display()
        ),
    )
    .unwrap();
    let (plain2, zp2) = (w.dir.join("plain2"), w.dir.join("zp2"));
    install_images(&profile, &plain2, &cache, &[], &[&w.tar]);
    let r = install_images(
        &profile,
        &zp2,
        &cache,
        &["--format", "composefs"],
        &[&w.tar],
    );
    assert_eq!(r["objects_named_by_unpacker"], 0, "{r}");
    assert!(r["objects"].as_u64().unwrap() >= 46, "{r}");
    let id = r["image"].as_str().unwrap();
    let _mounted = mount_printed(&w.dir.join("lower2"), &store, id, &zp2);
    assert_identical(&plain2, &zp2);
}

/// update and rollback refuse a composefs root, naming its record, and
/// change nothing.
#[test]
fn update_and_rollback_refuse_a_composefs_root_saying_why() {
    if !require_root() {
        return;
    }
    let w = world(None);
    let (cache, zp) = (w.dir.join("cache"), w.dir.join("zp"));
    install_images(
        &w.profile,
        &zp,
        &cache,
        &["--format", "composefs"],
        &[&w.tar],
    );
    let before = fs::read(zp.join("composefs.json")).unwrap();
    for args in [
        vec!["update", "--profile", w.profile.to_str().unwrap()],
        vec!["rollback"],
    ] {
        let o = zinstall()
            .args(&args)
            .arg("--zonepath")
            .arg(&zp)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
        let said = text(&o);
        assert!(
            said.contains("composefs root")
                && said
                    .contains(&zp.join("composefs.json").display().to_string()),
            "{args:?}: {said}"
        );
    }
    assert_eq!(fs::read(zp.join("composefs.json")).unwrap(), before);
    assert!(!zp.join("root.prev").exists() && !zp.join("root.new").exists());
}

#[test]
fn a_full_store_leaves_no_record_ref_or_staging_tree() {
    // Built in memory (the default here) and through a staging tree.
    for how in [&[][..], &["--composefs-staging"][..]] {
        full_store(how);
    }
}

fn full_store(how: &[&str]) {
    let Some(small) = LoopFs::require(Kind::Ext4, 24 << 20) else {
        return;
    };
    let w = world(None);
    // More than the store's filesystem holds.
    let big = w.dir.join("big");
    fs::create_dir(&big).unwrap();
    fs::create_dir(big.join("root")).unwrap();
    fs::write(big.join("root/huge"), pseudo_random(40 << 20, 9)).unwrap();
    let tar = w.dir.join("big.tar");
    run(zinstall()
        .args(["image", "create"])
        .arg(big.join("root"))
        .arg(&tar));
    let cache = small.path().join("cache");
    let zp = w.dir.join("zp");
    let o = zinstall()
        .args(["install", "--profile"])
        .arg(&w.profile)
        .arg("--zonepath")
        .arg(&zp)
        .arg("--cache")
        .arg(&cache)
        .args(["--format", "composefs"])
        .args(how)
        .arg(&tar)
        .output()
        .unwrap();
    assert!(!o.status.success(), "{how:?}: {}", text(&o));
    assert!(text(&o).contains("No space left"), "{how:?}: {}", text(&o));
    // The zonepath this install made is gone again, as after a failed
    // plain install.
    assert!(!zp.exists(), "{how:?}: {} was left", zp.display());
    assert!(text(&o).contains("which this install made"), "{}", text(&o));
    let store = cache.join("composefs");
    let refs = store.join("images/refs");
    assert!(
        !refs.exists() || fs::read_dir(&refs).unwrap().count() == 0,
        "{how:?}: a ref was left"
    );
    // Built in memory, the install makes no staging tree at all.
    let staging = store.join("staging");
    assert!(
        !staging.exists() || fs::read_dir(&staging).unwrap().count() == 0,
        "{how:?}: a staging tree was left"
    );
    // With room (the same tree without the huge file) it installs.
    let o = install(&w, &zp, &cache, &["--format", "composefs"]);
    assert!(o.status.success(), "{how:?}: {}", text(&o));
    assert!(zp.join("composefs.json").exists());
}

#[test]
fn a_composefs_dry_run_says_what_it_would_do_and_makes_nothing() {
    let w = world(None);
    let zp = w.dir.join("zp");
    let cache = w.dir.join("cache");
    let o = zinstall()
        .args(["install", "--dry-run", "--profile"])
        .arg(&w.profile)
        .arg("--zonepath")
        .arg(&zp)
        .arg("--cache")
        .arg(&cache)
        .args(["--format", "composefs"])
        .arg(&w.tar)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("composefs"), "{t}");
    assert!(t.contains("composefs.json"), "{t}");
    assert!(!zp.exists());
    assert!(!cache.join("composefs").exists());
}

/// zinstalld installs in composefs form as the CLI does, into its
/// cache's store, and its uninstall removes such a root.
#[test]
fn the_daemon_installs_composefs_roots_as_the_cli_does() {
    if !require_root() {
        return;
    }
    let w = world(None);
    let plain = w.dir.join("plain");
    install_images(&w.profile, &plain, &w.dir.join("cache"), &[], &[&w.tar]);
    let d = crate::daemon::Daemon::start("");
    let zp = d.path("zp");
    let (zps, tar, profile) = (
        zp.to_str().unwrap(),
        w.tar.to_str().unwrap(),
        w.profile.to_str().unwrap(),
    );
    let o = d.zinstall(&[
        "install",
        "--json",
        "--format",
        "composefs",
        "--profile",
        profile,
        "--zonepath",
        zps,
        tar,
    ]);
    assert!(o.status.success(), "{}\n{}", text(&o), d.log());
    let r = result(&o);
    assert_eq!(r["format"], "composefs", "{r}");
    let store = d.path("cache/composefs");
    assert_eq!(r["store"], store.display().to_string(), "{r}");
    assert!(r["objects_named_by_unpacker"].as_u64().unwrap() > 40, "{r}");
    let id = r["image"].as_str().unwrap().to_string();
    let rec: serde_json::Value =
        serde_json::from_slice(&fs::read(zp.join("composefs.json")).unwrap())
            .unwrap();
    assert_eq!(rec["image"], id.as_str(), "{rec}");
    let mounted = mount_printed(&d.path("lower"), &store, &id, &zp);
    assert_identical(&plain, &zp);
    drop(mounted);

    // Without --json: the lines the CLI prints, how to mount it.
    let zp2 = d.path("zp2");
    let o = d.zinstall(&[
        "install",
        "--format",
        "composefs",
        "--profile",
        profile,
        "--zonepath",
        zp2.to_str().unwrap(),
        tar,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("composefs image {id}")),
        "{}",
        text(&o)
    );
    assert!(
        text(&o).contains("zinstall mount --zonepath"),
        "{}",
        text(&o)
    );

    let o = d.zinstall(&["uninstall", "--zonepath", zps]);
    assert!(o.status.success(), "{}\n{}", text(&o), d.log());
    assert!(!zp.join("composefs.json").exists() && !zp.join("root").exists());
    let refs: Vec<_> = fs::read_dir(store.join("images/refs"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(refs.len(), 1, "{refs:?}");
}

#[test]
fn cache_gc_sweeps_the_store_and_cache_verify_finds_a_bad_object() {
    if !require_root() {
        return;
    }
    let w = world(None);
    let cache = w.dir.join("cache");
    let extra = w.dir.join("extra");
    fs::create_dir_all(extra.join("opt")).unwrap();
    fs::write(extra.join("opt/only-here"), pseudo_random(123_456, 77)).unwrap();
    let extra_tar = w.dir.join("extra.tar");
    run(zinstall()
        .args(["image", "create"])
        .arg(&extra)
        .arg(&extra_tar));
    let (zp1, zp2) = (w.dir.join("zp1"), w.dir.join("zp2"));
    let o = install(
        &w,
        &zp1,
        &cache,
        &["--format", "composefs", extra_tar.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = install(&w, &zp2, &cache, &["--format", "composefs"]);
    assert!(o.status.success(), "{}", text(&o));
    let kept_image = result(&o)["image"].as_str().unwrap().to_string();
    let o = zinstall()
        .args(["uninstall", "--zonepath"])
        .arg(&zp1)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    // A staging tree a killed install left, two hours ago.
    let store = cache.join("composefs");
    let killed = store.join("staging/killed");
    fs::create_dir_all(killed.join("root/etc")).unwrap();
    run(tools::tool("touch")
        .args(["-d", "2 hours ago"])
        .arg(&killed));
    let mut before = Vec::new();
    files(&store.join("objects"), &mut before);

    let gc = |dry: bool| {
        let mut c = zinstall();
        c.args(["cache", "gc", "--json", "--cache"]).arg(&cache);
        if dry {
            c.arg("--dry-run");
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        result(&o)["composefs"].clone()
    };
    let dry = gc(true);
    let mut now = Vec::new();
    files(&store.join("objects"), &mut now);
    assert_eq!(now.len(), before.len(), "a dry run removed objects");
    assert!(killed.exists());
    // zp1's image and the file only it had.
    assert_eq!(dry["objects_removed"], 2, "{dry}");
    assert_eq!(dry["leftovers_removed"], 1, "{dry}");
    assert_eq!(dry["images_kept"], 1, "{dry}");
    let done = gc(false);
    assert_eq!(done["objects_removed"], 2, "{done}");
    assert!(done["bytes_removed"].as_u64().unwrap() >= 123_456, "{done}");
    assert!(!killed.exists());
    let mut after = Vec::new();
    files(&store.join("objects"), &mut after);
    assert_eq!(after.len(), before.len() - 2);
    assert!(
        store
            .join("objects")
            .join(&kept_image[..2])
            .join(&kept_image[2..])
            .exists()
    );

    let verify = || {
        zinstall()
            .args(["cache", "verify", "--cache"])
            .arg(&cache)
            .output()
            .unwrap()
    };
    let o = verify();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("0 bad"), "{}", text(&o));
    // Every object zp2's image needs is still there and whole: a second
    // install of the same source writes nothing.
    let zp3 = w.dir.join("zp3");
    let o = install(&w, &zp3, &cache, &["--format", "composefs"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(result(&o)["objects_written"], 0, "{}", text(&o));

    let victim = after
        .iter()
        .find(|p| {
            p != &&store
                .join("objects")
                .join(&kept_image[..2])
                .join(&kept_image[2..])
        })
        .unwrap();
    let mut data = fs::read(victim).unwrap();
    data[10] ^= 0x40;
    fs::write(victim, &data).unwrap();
    let o = verify();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&victim.display().to_string()),
        "{}",
        text(&o)
    );
}

#[test]
fn a_relative_cache_is_recorded_by_its_absolute_path() {
    let w = world(None);
    let o = zinstall()
        .current_dir(&w.dir)
        .args(["install", "--profile"])
        .arg(&w.profile)
        .args(["--zonepath", "zp", "--cache", "rel-cache"])
        .args(["--format", "composefs"])
        .arg(&w.tar)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let rec: serde_json::Value = serde_json::from_slice(
        &fs::read(w.dir.join("zp/composefs.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        rec["store"],
        w.dir.join("rel-cache/composefs").display().to_string(),
        "{rec}"
    );
}

/// A writable mount shows its top directory from `upper/`: the install
/// gives `upper/` the owner, mode and time of the image's top, so the
/// mounted root equals the plain install there too.
#[test]
fn a_writable_mount_shows_the_top_directory_of_the_image() {
    if !crate::composefs_mount::composefs_mounts() {
        return;
    }
    let w = world(None);
    let src = w.dir.join("src");
    fs::set_permissions(&src, fs::Permissions::from_mode(0o751)).unwrap();
    std::os::unix::fs::chown(&src, Some(1001), Some(1002)).unwrap();
    run(Command::new("touch")
        .args(["-h", "-d", "@1577934245.678901234"])
        .arg(&src));
    fs::remove_file(&w.tar).unwrap();
    run(zinstall().args(["image", "create"]).arg(&src).arg(&w.tar));
    let cache = w.dir.join("cache");
    let (plain, zp) = (w.dir.join("plain"), w.dir.join("zp"));
    for (dir, extra) in [(&plain, &[][..]), (&zp, &["--format", "composefs"])] {
        let o = install(&w, dir, &cache, extra);
        assert!(o.status.success(), "{}", text(&o));
    }
    let o = zinstall().args(["mount", "--zonepath"]).arg(&zp).output();
    let o = o.unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let _unmounts = crate::composefs_mount::Unmounts(zp.join("root"));
    let top = fs::symlink_metadata(zp.join("root")).unwrap();
    assert_eq!(top.permissions().mode() & 0o7777, 0o751);
    assert_eq!((top.uid(), top.gid()), (1001, 1002));
    assert_eq!((top.mtime(), top.mtime_nsec()), (1577934245, 678901234));
    assert_identical(&plain, &zp);
}
