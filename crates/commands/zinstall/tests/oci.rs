//! OCI images as install sources: layouts built with umoci (whiteouts,
//! opaque directories, hard links, symlinks, xattrs, capabilities)
//! installed by zinstall and compared with `umoci unpack`; hand-made
//! layouts for what umoci never writes, and hostile ones.

use zinstall_testkit::tmp;

pub(crate) mod support;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::Path;

use serde_json::json;
use support::*;
use zinstall_testkit::is_root;

/// Installs `image` with a profile of images only into `dir/zp`.
fn install(dir: &Path, image: &str, extra: &[&str]) -> std::process::Output {
    let profile = bare_profile(dir);
    let zp = dir.join("zp");
    let mut args =
        vec!["install", "--profile", s(&profile), "--zonepath", s(&zp)];
    args.extend_from_slice(extra);
    args.push(image);
    zinstall(&args)
}

fn verify_same(a: &Path, b: &Path) {
    let o = zinstall(&["verify", "--no-atime", s(a), s(b)]);
    assert!(
        o.status.success(),
        "{} vs {}:\n{}",
        a.display(),
        b.display(),
        text(&o)
    );
}

/// A umoci image of three layers (two committed by umoci, recording
/// deletions as whiteouts; one by hand with an opaque directory and
/// same-layer whiteouts), installed by zinstall from the layout and from
/// skopeo's oci-archive, equals umoci's own unpack on every attribute.
#[test]
fn install_equals_umoci_unpack() {
    // umoci unpack keeps owners only as root.
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let lay = d.path().join("L");
    let image = format!("{}:t", lay.display());
    let bundle = d.path().join("B");
    let r = bundle.join("rootfs");
    run("umoci", &["init", "--layout", s(&lay)]);
    run("umoci", &["new", "--image", &image]);
    run("umoci", &["unpack", "--image", &image, s(&bundle)]);
    let w = |p: &str, data: &[u8], mode: u32| {
        let p = r.join(p);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, data).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    };
    w("usr/bin/tool", b"#!/bin/sh\necho tool\n", 0o755);
    w("usr/bin/suid", b"suid", 0o4755);
    w("usr/bin/ping", b"ping", 0o755);
    w("usr/lib/libx.so.1", b"library one", 0o644);
    symlink("libx.so.1", r.join("usr/lib/libx.so")).unwrap();
    fs::hard_link(r.join("usr/bin/tool"), r.join("usr/bin/tool2")).unwrap();
    w("etc/conf", b"secret", 0o600);
    std::os::unix::fs::chown(r.join("etc/conf"), Some(1000), Some(1000))
        .unwrap();
    run(
        "setfattr",
        &["-n", "user.note", "-v", "kept", s(&r.join("etc/conf"))],
    );
    run("setcap", &["cap_net_raw+ep", s(&r.join("usr/bin/ping"))]);
    for p in [
        "old/sub/deep/f",
        "gone/x",
        "keep/a",
        "keep/b",
        "replace_me/inside",
        "will_link",
        "opq/lower1",
        "opq/sub/lower2",
    ] {
        w(p, p.as_bytes(), 0o644);
    }
    run("umoci", &["repack", "--image", &image, s(&bundle)]);
    fs::remove_dir_all(&bundle).unwrap();
    // Layer two: deletions umoci records as whiteouts, a directory become
    // a file, a file become a symlink, a mode and a content change.
    run("umoci", &["unpack", "--image", &image, s(&bundle)]);
    fs::remove_dir_all(r.join("old")).unwrap();
    fs::remove_file(r.join("keep/a")).unwrap();
    fs::remove_dir_all(r.join("replace_me")).unwrap();
    w("replace_me", b"now a file", 0o644);
    fs::remove_file(r.join("will_link")).unwrap();
    symlink("usr/bin/tool", r.join("will_link")).unwrap();
    fs::set_permissions(r.join("keep/b"), fs::Permissions::from_mode(0o700))
        .unwrap();
    w("usr/lib/libx.so.1", b"library two", 0o644);
    w("new/dir/file", b"new", 0o640);
    run("umoci", &["repack", "--image", &image, s(&bundle)]);
    // Layer three, by hand: umoci writes no opaque directories. Members
    // come in an order a tool may choose: a file, then a whiteout of it
    // (the same layer's file stays); a whiteout of a lower directory,
    // then the directory again; a file in a lower directory with no
    // entry for it (whose times stay the lower layer's).
    let third = layer_tar(&[
        Ent::Dir("opq/"),
        Ent::File("opq/.wh..wh..opq", b""),
        Ent::File("opq/new", b"opaque's own"),
        Ent::Dir("opq/sub/"),
        Ent::File("opq/sub/mine", b"mine"),
        Ent::File("keep/later", b"stays"),
        Ent::File("keep/.wh.later", b""),
        Ent::File(".wh.gone", b""),
        Ent::Dir("gone/"),
        Ent::File("gone/y", b"y"),
        Ent::File("usr/bin/added", b"added"),
    ]);
    append_layer(&lay, &third);
    let members = layer_members(&lay);
    assert_eq!(members.len(), 3);
    assert!(
        members[1].iter().any(|m| m.ends_with(".wh.old"))
            && members[1].iter().any(|m| m.ends_with("keep/.wh.a")),
        "umoci's layer two has its whiteouts: {:?}",
        members[1]
    );
    assert!(members[2].iter().any(|m| m.ends_with(".wh..wh..opq")));
    let theirs = d.path().join("U");
    run("umoci", &["unpack", "--image", &image, s(&theirs)]);
    let u = theirs.join("rootfs");
    // What the layers say, on umoci's side: the comparison is not of two
    // empty trees.
    assert!(!u.join("old").exists() && !u.join("keep/a").exists());
    assert!(u.join("keep/later").exists() && u.join("gone/y").exists());
    assert!(!u.join("gone/x").exists() && !u.join("opq/lower1").exists());
    assert!(!u.join("opq/sub/lower2").exists());

    let o = install(d.path(), &image, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let root = d.path().join("zp/root");
    verify_same(&u, &root);
    let caps = run("getcap", &[s(&root.join("usr/bin/ping"))]);
    assert!(String::from_utf8_lossy(&caps.stdout).contains("cap_net_raw"));
    let tool = fs::metadata(root.join("usr/bin/tool")).unwrap();
    assert_eq!(tool.nlink(), 2);
    assert_eq!(
        fs::metadata(root.join("usr/bin/suid")).unwrap().mode() & 0o7777,
        0o4755
    );

    // The same image as skopeo writes an oci-archive.
    {
        let archive = d.path().join("image.tar");
        run(
            "skopeo",
            &[
                "copy",
                "-q",
                &format!("oci:{}:t", lay.display()),
                &format!("oci-archive:{}:t", archive.display()),
            ],
        );
        let d2 = tempfile::tempdir().unwrap();
        let o = install(d2.path(), s(&archive), &[]);
        assert!(o.status.success(), "{}", text(&o));
        verify_same(&u, &d2.path().join("zp/root"));
    }
}

/// Whiteouts remove only what lower layers left, whatever the order of
/// the layer's members; a lower directory becomes a file; whiteouts are
/// never written. Checked by what the root holds, as anyone.
#[test]
fn whiteouts_apply_to_lower_layers_only() {
    let d = tempfile::tempdir().unwrap();
    let lay = d.path().join("L");
    let one = layer_tar(&[
        Ent::Dir("a/"),
        Ent::File("a/x", b"x"),
        Ent::File("a/y", b"y"),
        Ent::Dir("d/"),
        Ent::File("d/old", b"old"),
        Ent::Dir("d/sub/"),
        Ent::File("d/sub/old", b"old"),
        Ent::Dir("t/"),
        Ent::File("t/in", b"in"),
        Ent::Symlink("s", "a/y"),
    ]);
    let two = layer_tar(&[
        Ent::File("a/new", b"new"),
        Ent::File("a/.wh.new", b""),
        Ent::File("a/.wh.x", b""),
        Ent::Dir("d/sub/"),
        Ent::File("d/sub/mine", b"mine"),
        Ent::File("d/.wh..wh..opq", b""),
        Ent::File("d/mine", b"mine"),
        Ent::File("t", b"a file now"),
        Ent::File(".wh.s", b""),
        Ent::File("a/.wh.never-there", b""),
    ]);
    write_layout(&lay, &[one, two], host_arch(), &|_, _| {});
    let o = install(d.path(), s(&lay), &[]);
    assert!(o.status.success(), "{}", text(&o));
    let root = d.path().join("zp/root");
    let names = |p: &str| {
        let mut v: Vec<String> = fs::read_dir(root.join(p))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names("a"), ["new", "y"]);
    assert_eq!(names("d"), ["mine", "sub"]);
    assert_eq!(names("d/sub"), ["mine"]);
    assert_eq!(fs::read(root.join("t")).unwrap(), b"a file now");
    assert!(fs::symlink_metadata(root.join("s")).is_err());
    assert_eq!(names(""), ["a", "d", "t"]);
}

/// Hostile or broken images are refused with an error naming what is
/// wrong, before or while their layers are unpacked; nothing is left in
/// the zonepath's root, and nothing outside it is touched.
#[test]
fn hostile_images_are_refused_and_nothing_is_left() {
    let ok_layer = || layer_tar(&[Ent::Dir("etc/"), Ent::File("etc/f", b"f")]);
    type Setup = Box<dyn Fn(&Path, &Path)>;
    let zeros = "0".repeat(64);
    let foreign = format!("linux/{}", foreign_arch());
    let not_host = format!("not linux/{}", host_arch());
    let cases: Vec<(&str, Setup, Vec<&str>)> = vec![
        (
            "a blob whose content does not match its digest",
            Box::new(move |lay, _| {
                write_layout(lay, &[ok_layer()], host_arch(), &|_, _| {});
                let (_, m) = first_manifest(lay);
                let digest =
                    m["layers"][0]["digest"].as_str().unwrap().to_string();
                let p = blob_path(lay, &digest);
                let mut b = fs::read(&p).unwrap();
                let n = b.len();
                b[n - 9] ^= 0xff;
                fs::write(p, b).unwrap();
            }),
            vec!["content hashes to"],
        ),
        (
            "a layer whose uncompressed digest is not its diff_id",
            Box::new(move |lay, _| {
                write_layout(lay, &[ok_layer()], host_arch(), &|what, v| {
                    if what == "config" {
                        v["rootfs"]["diff_ids"][0] =
                            json!(format!("sha256:{}", "0".repeat(64)));
                    }
                });
            }),
            vec!["diff_id", &zeros],
        ),
        (
            "a digest with ../ in the index",
            Box::new(move |lay, _| {
                write_layout(lay, &[ok_layer()], host_arch(), &|what, v| {
                    if what == "index" {
                        v["manifests"][0]["digest"] =
                            json!("sha256:../../../../etc/passwd");
                    }
                });
            }),
            vec!["index.json", "../../../../etc/passwd"],
        ),
        (
            "a manifest claiming a huge size",
            Box::new(move |lay, _| {
                write_layout(lay, &[ok_layer()], host_arch(), &|what, v| {
                    if what == "index" {
                        v["manifests"][0]["size"] = json!(1u64 << 40);
                    }
                });
            }),
            vec!["1099511627776 bytes", "refused before reading"],
        ),
        (
            "a whiteout reaching out with ..",
            Box::new(move |lay, _| {
                let evil = layer_tar(&[Ent::RawName(b"etc/../../.wh.victim")]);
                write_layout(lay, &[ok_layer(), evil], host_arch(), &|_, _| {});
            }),
            vec![".. component"],
        ),
        (
            "a whiteout naming ..",
            Box::new(move |lay, _| {
                let evil = layer_tar(&[Ent::RawName(b"etc/.wh..")]);
                write_layout(lay, &[ok_layer(), evil], host_arch(), &|_, _| {});
            }),
            vec!["names no entry"],
        ),
        (
            "a whiteout through a symlink the image planted",
            Box::new(move |lay, outside| {
                let one = layer_tar(&[
                    Ent::Dir("etc/"),
                    Ent::Symlink("link", outside.to_str().unwrap()),
                ]);
                let two = layer_tar(&[Ent::File("link/.wh.victim", b"")]);
                write_layout(lay, &[one, two], host_arch(), &|_, _| {});
            }),
            vec!["link/.wh.victim", "through a symlink"],
        ),
        (
            "an image for another architecture",
            Box::new(move |lay, _| {
                write_layout(lay, &[ok_layer()], foreign_arch(), &|_, _| {});
            }),
            vec![&foreign, &not_host, "--platform"],
        ),
        (
            "a non-distributable layer",
            Box::new(move |lay, _| {
                write_layout(lay, &[ok_layer()], host_arch(), &|what, v| {
                    if what == "manifest" {
                        v["layers"][0]["mediaType"] = json!(
                            "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
                        );
                    }
                });
            }),
            vec!["nondistributable", "media type"],
        ),
    ];
    for (what, setup, want) in cases {
        let d = tempfile::tempdir().unwrap();
        let outside = d.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("victim"), b"host file").unwrap();
        fs::write(d.path().join("victim"), b"host file").unwrap();
        let lay = d.path().join("L");
        setup(&lay, &outside);
        let o = install(d.path(), s(&lay), &[]);
        let t = text(&o);
        assert!(!o.status.success(), "{what}: installed:\n{t}");
        for w in &want {
            assert!(t.contains(w), "{what}: no {w:?} in:\n{t}");
        }
        assert!(
            !d.path().join("zp/root").exists(),
            "{what}: root left:\n{t}"
        );
        assert_eq!(fs::read(outside.join("victim")).unwrap(), b"host file");
        assert_eq!(fs::read(d.path().join("victim")).unwrap(), b"host file");
    }
}

/// An image for another platform installs when that platform is named.
#[test]
fn platform_named_installs_a_foreign_image() {
    let d = tempfile::tempdir().unwrap();
    let lay = d.path().join("L");
    write_layout(
        &lay,
        &[layer_tar(&[Ent::File("hello", b"hi")])],
        foreign_arch(),
        &|_, _| {},
    );
    let platform = format!("linux/{}", foreign_arch());
    let o = install(
        d.path(),
        &format!("{}:t", lay.display()),
        &["--platform", &platform],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(fs::read(d.path().join("zp/root/hello")).unwrap(), b"hi");
    let o =
        zinstall(&["install", "--platform", "linux", "--zonepath", "x", "y"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("OS/ARCH"), "{}", text(&o));
}

fn first_manifest(lay: &Path) -> (std::path::PathBuf, serde_json::Value) {
    let index: serde_json::Value =
        serde_json::from_slice(&fs::read(lay.join("index.json")).unwrap())
            .unwrap();
    let p = blob_path(lay, index["manifests"][0]["digest"].as_str().unwrap());
    let v = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
    (p, v)
}

/// Names in `cache/entries` starting with `prefix`, directories only.
fn entries(cache: &Path, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(cache.join("entries"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix))
        .collect();
    v.sort();
    v
}

fn provision(image: &str, out: &Path, cache: &Path, count: &str) {
    let o = zinstall(&[
        "provision",
        image,
        "--count",
        count,
        "--out",
        s(out),
        "--cache",
        s(cache),
        // The image's own files, to compare with the image.
        "--keep-identity",
    ]);
    assert!(o.status.success(), "{}", text(&o));
}

/// Two OCI images sharing a base layer: the base is cached once, each
/// image's tree is built from the cached layers, guests hold what the
/// layers say, and gc removes a layer once no image entry it keeps uses
/// it. Hand-made layouts, so it runs as anyone.
#[test]
fn provision_caches_shared_layers_once() {
    let d = tmp::Tmp::new();
    let base = layer_tar(&[
        Ent::Dir("etc/"),
        Ent::File("etc/os", b"base"),
        Ent::Dir("usr/"),
        Ent::File("usr/old", b"old"),
        Ent::Dir("var/"),
        Ent::File("var/x", b"x"),
    ]);
    let a2 = layer_tar(&[
        Ent::File("usr/.wh.old", b""),
        Ent::File("usr/a", b"a"),
        Ent::Dir("var/"),
        Ent::File("var/.wh..wh..opq", b""),
        Ent::File("var/mine", b"mine"),
    ]);
    let b2 = layer_tar(&[Ent::File("etc/b", b"b")]);
    let (la, lb) = (d.path().join("A"), d.path().join("B"));
    write_layout(&la, &[base.clone(), a2], host_arch(), &|_, _| {});
    write_layout(&lb, &[base.clone(), b2], host_arch(), &|_, _| {});
    let cache = d.path().join("cache");
    let (oa, ob) = (d.path().join("oa"), d.path().join("ob"));
    provision(&format!("{}:t", la.display()), &oa, &cache, "2");
    provision(s(&lb), &ob, &cache, "1");
    let base_entry = format!("layer-{}", sha256(&base));
    let layers = entries(&cache, "layer-");
    assert_eq!(layers.len(), 3, "{layers:?}");
    assert!(layers.contains(&base_entry), "{layers:?}");
    assert_eq!(entries(&cache, "tree-").len(), 2);
    let names = |p: &Path| {
        let mut v: Vec<String> = walk(p);
        v.sort();
        v
    };
    assert_eq!(
        names(&oa.join("guest-1")),
        ["etc", "etc/os", "usr", "usr/a", "var", "var/mine"]
    );
    assert_eq!(
        names(&ob.join("guest-0")),
        ["etc", "etc/b", "etc/os", "usr", "usr/old", "var", "var/x"]
    );
    // Provisioned again: nothing built.
    let o = zinstall(&[
        "provision",
        s(&la),
        "--count",
        "1",
        "--out",
        s(&d.path().join("oc")),
        "--cache",
        s(&cache),
        "--keep-identity",
    ]);
    assert!(text(&o).contains("cached"), "{}", text(&o));
    let o = zinstall(&["cache", "--cache", s(&cache), "list"]);
    let list = text(&o);
    assert_eq!(list.matches("\nlayer ").count(), 3, "{list}");
    assert!(list.contains("in 2 images, shared: tree-"), "{list}");
    // The same as JSON: each image by its manifest digest and name, its
    // layers, its guests, when last used; the base layer in both.
    let o = zinstall(&["cache", "--cache", s(&cache), "list", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["command"], "cache", "{v}");
    let all = v["result"].as_array().unwrap();
    let base = all
        .iter()
        .find(|e| e["name"] == base_entry.as_str())
        .unwrap();
    assert_eq!(base["used_by"].as_array().unwrap().len(), 2, "{base}");
    let trees: Vec<_> = all.iter().filter(|e| e["kind"] == "tree").collect();
    assert_eq!(trees.len(), 2);
    for t in &trees {
        let layers = t["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 2, "{t}");
        assert!(layers.contains(&json!(base_entry)), "{t}");
        assert!(t["last_used"].as_u64() >= t["created"].as_u64(), "{t}");
        assert!(base["last_used"].as_u64() >= t["last_used"].as_u64());
        assert!(!t["guests"].as_array().unwrap().is_empty(), "{t}");
    }
    let a = trees
        .iter()
        .find(|t| t["source"].as_str().unwrap().contains("/A"))
        .unwrap();
    assert_eq!(a["guests"].as_array().unwrap().len(), 3, "{a}");
    // Image A's guests gone: its tree and its own layer go, the base
    // stays for B.
    for g in ["oa", "oc"] {
        fs::remove_dir_all(d.path().join(g)).unwrap();
    }
    let o = zinstall(&["cache", "--cache", s(&cache), "gc"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("a layer of tree-"), "{}", text(&o));
    assert_eq!(entries(&cache, "tree-").len(), 1);
    assert_eq!(entries(&cache, "layer-").len(), 2);
    assert!(entries(&cache, "layer-").contains(&base_entry));
    fs::remove_dir_all(&ob).unwrap();
    let o = zinstall(&["cache", "--cache", s(&cache), "gc"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(entries(&cache, "").is_empty(), "{}", text(&o));
}

/// Every path under `root`, relative.
fn walk(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            out.push(
                p.strip_prefix(root).unwrap().to_string_lossy().into_owned(),
            );
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            }
        }
    }
    out
}

/// Guests of two umoci images sharing their base layer equal what umoci
/// unpacks, on every attribute; the base is cached once.
#[test]
fn provision_guests_equal_umoci_unpack() {
    // umoci unpack keeps owners only as root.
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = tmp::Tmp::new();
    let la = d.path().join("A");
    let ia = format!("{}:t", la.display());
    let bundle = d.path().join("B");
    let r = bundle.join("rootfs");
    run("umoci", &["init", "--layout", s(&la)]);
    run("umoci", &["new", "--image", &ia]);
    run("umoci", &["unpack", "--image", &ia, s(&bundle)]);
    for (p, mode) in [
        ("usr/bin/tool", 0o755),
        ("usr/bin/suid", 0o4755),
        ("etc/a", 0o600),
        ("srv/x/y", 0o644),
        ("opq/low", 0o644),
    ] {
        let p = r.join(p);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, p.to_string_lossy().as_bytes()).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    }
    symlink("tool", r.join("usr/bin/t")).unwrap();
    fs::hard_link(r.join("usr/bin/tool"), r.join("usr/bin/tool2")).unwrap();
    run(
        "setfattr",
        &["-n", "user.k", "-v", "v", s(&r.join("etc/a"))],
    );
    run("umoci", &["repack", "--image", &ia, s(&bundle)]);
    fs::remove_dir_all(&bundle).unwrap();
    // B starts as a copy of A: the same base layer, blob and diff_id.
    let lb = d.path().join("Lb");
    run("cp", &["-a", s(&la), s(&lb)]);
    let ib = format!("{}:t", lb.display());
    for (image, change) in [(&ia, 0), (&ib, 1)] {
        run("umoci", &["unpack", "--image", image, s(&bundle)]);
        if change == 0 {
            fs::remove_dir_all(r.join("srv/x")).unwrap();
            fs::write(r.join("etc/a"), b"changed").unwrap();
        } else {
            fs::remove_file(r.join("usr/bin/suid")).unwrap();
            fs::create_dir(r.join("srv/new")).unwrap();
        }
        run("umoci", &["repack", "--image", image, s(&bundle)]);
        fs::remove_dir_all(&bundle).unwrap();
    }
    append_layer(
        &la,
        &layer_tar(&[
            Ent::Dir("opq/"),
            Ent::File("opq/.wh..wh..opq", b""),
            Ent::File("opq/high", b"high"),
        ]),
    );
    let cache = d.path().join("cache");
    for (image, out) in [(&ia, "oa"), (&ib, "ob")] {
        let theirs = d.path().join(format!("u{out}"));
        run("umoci", &["unpack", "--image", image, s(&theirs)]);
        provision(image, &d.path().join(out), &cache, "1");
        verify_same(
            &theirs.join("rootfs"),
            &d.path().join(out).join("guest-0"),
        );
    }
    // Base, A's two, B's one.
    assert_eq!(entries(&cache, "layer-").len(), 4);
    assert_eq!(entries(&cache, "tree-").len(), 2);
}

/// A layer's hard link to a file of a lower layer (as `ln` in a build
/// step may leave one): install and provision make the same links as
/// `umoci unpack` does, whether this layer replaces the target after the
/// link or before it, into directories only this layer has, and across
/// three layers.
#[test]
fn hard_links_to_lower_layers_install_and_provision_alike() {
    let d = tmp::Tmp::new();
    let lay = d.path().join("L");
    let one = layer_tar(&[
        Ent::Dir("./"),
        Ent::Dir("etc/"),
        Ent::File("etc/a", b"lower"),
        Ent::Dir("usr/"),
        Ent::File("usr/keep", b"keep"),
        Ent::File("usr/gone", b"gone"),
    ]);
    let two = layer_tar(&[
        // Linked before the target is replaced: the lower file.
        Ent::HardLink("etc/b", "etc/a"),
        Ent::File("etc/a", b"replaced"),
        // After: this layer's own file.
        Ent::HardLink("etc/c", "etc/a"),
        // Into directories no layer has an entry for.
        Ent::HardLink("x/y/l", "usr/keep"),
        // Over a lower layer's file of that name.
        Ent::HardLink("usr/gone", "usr/keep"),
    ]);
    let three =
        layer_tar(&[Ent::Dir("srv/"), Ent::HardLink("srv/b2", "etc/b")]);
    write_layout(&lay, &[one, two, three], host_arch(), &|_, _| {});

    // A dry run reads every layer through and counts its members (the
    // layers' own counts: etc/ is in two of them), writing nothing.
    let o = install(d.path(), s(&lay), &["-n"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("4 files, 3 dirs, 0 symlinks, 5 hard links, 21 B in "),
        "{t}"
    );
    assert!(!d.path().join("zp/root").exists());

    let o = install(d.path(), s(&lay), &[]);
    assert!(o.status.success(), "{}", text(&o));
    let root = d.path().join("zp/root");
    let cache = d.path().join("cache");
    provision(s(&lay), &d.path().join("g"), &cache, "1");
    let guest = d.path().join("g/guest-0");
    for r in [&root, &guest] {
        let ino = |p: &str| fs::symlink_metadata(r.join(p)).unwrap().ino();
        let read = |p: &str| fs::read(r.join(p)).unwrap();
        assert_eq!(read("etc/a"), b"replaced", "{}", r.display());
        assert_eq!(read("etc/b"), b"lower", "{}", r.display());
        assert_eq!(ino("etc/c"), ino("etc/a"), "{}", r.display());
        assert_ne!(ino("etc/b"), ino("etc/a"), "{}", r.display());
        assert_eq!(ino("x/y/l"), ino("usr/keep"), "{}", r.display());
        assert_eq!(ino("usr/gone"), ino("usr/keep"), "{}", r.display());
        assert_eq!(ino("srv/b2"), ino("etc/b"), "{}", r.display());
    }
    // x and x/y have no entry in any layer: each unpack makes them when
    // it runs, so their times are each one's own.
    for dir in ["x/y", "x"] {
        run("touch", &["-r", s(&root.join(dir)), s(&guest.join(dir))]);
    }
    verify_same(&root, &guest);
    if is_root() {
        let theirs = d.path().join("u");
        run(
            "umoci",
            &[
                "unpack",
                "--image",
                &format!("{}:t", lay.display()),
                s(&theirs),
            ],
        );
        // umoci also leaves the root's time its own.
        for dir in ["x/y", "x", ""] {
            let theirs = theirs.join("rootfs").join(dir);
            run("touch", &["-r", s(&guest.join(dir)), s(&theirs)]);
        }
        verify_same(&theirs.join("rootfs"), &guest);
    } else {
        zinstall_testkit::unmet(
            "root, for the umoci comparison (umoci keeps owners only as root)",
        );
    }

    // A link to a file no layer below holds is refused, naming it, and
    // no guest is made.
    let bad = d.path().join("Bad");
    write_layout(
        &bad,
        &[
            layer_tar(&[Ent::Dir("etc/"), Ent::File("etc/a", b"a")]),
            layer_tar(&[Ent::HardLink("etc/b", "etc/nowhere")]),
        ],
        host_arch(),
        &|_, _| {},
    );
    let out = d.path().join("gb");
    let o = zinstall(&[
        "provision",
        s(&bad),
        "--out",
        s(&out),
        "--cache",
        s(&cache),
        "--keep-identity",
    ]);
    assert!(!o.status.success());
    let msg = text(&o);
    assert!(msg.contains("etc/b") && msg.contains("hard link"), "{msg}");
    assert!(!out.join("guest-0").exists());
    assert!(
        entries(&cache, "tree-").len() == 1,
        "{:?}",
        entries(&cache, "tree-")
    );
}

/// An upper layer that turns a lower symlink or file into a directory
/// and puts whiteouts inside it, opaque or not, at any depth: install
/// and provision give what `umoci unpack` gives, and the symlink's
/// target is never touched. A whiteout beneath a lower symlink the layer
/// does not replace is refused by both, naming the layer and the member,
/// not a path of the cache.
#[test]
fn whiteouts_in_what_an_upper_layer_made_a_directory() {
    let d = tmp::Tmp::new();
    let lay = d.path().join("L");
    let one = layer_tar(&[
        Ent::Dir("t/"),
        Ent::File("t/x", b"x"),
        Ent::File("t/y", b"y"),
        Ent::Symlink("s1", "t"),
        Ent::Symlink("s2", "t"),
        Ent::Symlink("s3", "t"),
        Ent::File("f1", b"f"),
        Ent::File("f2", b"f"),
        Ent::Dir("n/"),
        Ent::Symlink("n/s", "../t"),
    ]);
    let two = layer_tar(&[
        // A symlink made a directory, a whiteout inside.
        Ent::Dir("s1/"),
        Ent::File("s1/.wh.x", b""),
        Ent::File("s1/new", b"n"),
        // ... an opaque one.
        Ent::Dir("s2/"),
        Ent::File("s2/.wh..wh..opq", b""),
        Ent::File("s2/mine", b"m"),
        // ... a whiteout two levels down.
        Ent::Dir("s3/"),
        Ent::Dir("s3/b/"),
        Ent::File("s3/b/.wh.c", b""),
        // A file made a directory, whiteouts inside.
        Ent::Dir("f1/"),
        Ent::File("f1/.wh.x", b""),
        Ent::File("f1/z", b"z"),
        Ent::Dir("f2/"),
        Ent::File("f2/.wh..wh..opq", b""),
        // A symlink in a lower directory, opaque.
        Ent::Dir("n/s/"),
        Ent::File("n/s/.wh..wh..opq", b""),
        Ent::File("n/s/k", b"k"),
    ]);
    write_layout(&lay, &[one, two], host_arch(), &|_, _| {});
    let o = install(d.path(), s(&lay), &[]);
    assert!(o.status.success(), "{}", text(&o));
    let root = d.path().join("zp/root");
    let cache = d.path().join("cache");
    provision(s(&lay), &d.path().join("g"), &cache, "1");
    let guest = d.path().join("g/guest-0");
    for r in [&root, &guest] {
        let names = |p: &str| {
            let mut v: Vec<String> = fs::read_dir(r.join(p))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names("s1"), ["new"], "{}", r.display());
        assert_eq!(names("s2"), ["mine"], "{}", r.display());
        assert_eq!(names("s3"), ["b"], "{}", r.display());
        assert_eq!(names("f1"), ["z"], "{}", r.display());
        assert!(names("f2").is_empty(), "{}", r.display());
        assert_eq!(names("n/s"), ["k"], "{}", r.display());
        // What the symlinks pointed at is untouched.
        assert_eq!(names("t"), ["x", "y"], "{}", r.display());
    }
    // The root directory has no entry in either layer: each unpack
    // makes it when it runs.
    run("touch", &["-r", s(&root), s(&guest)]);
    verify_same(&root, &guest);
    if zinstall_testkit::require_root() {
        let theirs = d.path().join("u");
        run(
            "umoci",
            &[
                "unpack",
                "--image",
                &format!("{}:t", lay.display()),
                s(&theirs),
            ],
        );
        let theirs = theirs.join("rootfs");
        run("touch", &["-r", s(&guest), s(&theirs)]);
        verify_same(&theirs, &root);
        verify_same(&theirs, &guest);
    }

    // A whiteout beneath a lower symlink this layer leaves a symlink:
    // refused by both, naming the layer's blob and the member.
    let bad = d.path().join("Bad");
    write_layout(
        &bad,
        &[
            layer_tar(&[
                Ent::Dir("t/"),
                Ent::File("t/x", b"x"),
                Ent::Symlink("s", "t"),
            ]),
            layer_tar(&[Ent::File("s/.wh.x", b"")]),
        ],
        host_arch(),
        &|_, _| {},
    );
    let (layer_blob, _) = {
        let (_, m) = first_manifest(&bad);
        let digest = m["layers"][1]["digest"].as_str().unwrap().to_string();
        (blob_path(&bad, &digest), digest)
    };
    let d2 = tmp::Tmp::new();
    let o = install(d2.path(), s(&bad), &[]);
    assert!(!o.status.success());
    let msg = text(&o);
    assert!(msg.contains("s/.wh.x") && msg.contains("symlink"), "{msg}");
    let out = d.path().join("gb");
    let o = zinstall(&[
        "provision",
        s(&bad),
        "--out",
        s(&out),
        "--cache",
        s(&cache),
        "--keep-identity",
    ]);
    assert!(!o.status.success());
    let msg = text(&o);
    assert!(
        msg.contains(s(&layer_blob)) && msg.contains("s/.wh.x"),
        "{msg}"
    );
    assert!(msg.contains("symlink"), "{msg}");
    assert!(!msg.contains("scratch"), "{msg}");
    assert!(!out.join("guest-0").exists());
}

/// A zstd layer of a few KB holding one 256 MiB member of zeros
/// (not sparse-declared): install and provision write it as a hole, so
/// it takes no space in the root, the cache or the guest; what it reads
/// as is the same.
#[test]
fn a_zstd_layer_of_zeros_is_written_as_holes() {
    use std::io::Read;
    let d = tmp::Tmp::new();
    let lay = d.path().join("L");
    let size = 256u64 << 20;
    write_zstd_layout(&lay, &|w| {
        let mut b = tar::Builder::new(w);
        let mut h = tar::Header::new_ustar();
        h.set_mode(0o644);
        h.set_mtime(1_700_000_000);
        h.set_size(size);
        h.set_cksum();
        b.append_data(&mut h, "var/zero.img", std::io::repeat(0).take(size))
            .unwrap();
        let mut h = tar::Header::new_ustar();
        h.set_mode(0o644);
        h.set_size(5);
        h.set_cksum();
        b.append_data(&mut h, "etc/after", &b"after"[..]).unwrap();
        b.finish().unwrap();
    });
    let blob = fs::read_dir(lay.join("blobs/sha256"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .max()
        .unwrap();
    assert!(blob < 1 << 20, "the layer is {blob} bytes");
    let o = install(d.path(), s(&lay), &[]);
    assert!(o.status.success(), "{}", text(&o));
    provision(s(&lay), &d.path().join("g"), &d.path().join("cache"), "1");
    for r in [d.path().join("zp/root"), d.path().join("g/guest-0")] {
        let md = fs::metadata(r.join("var/zero.img")).unwrap();
        assert_eq!(md.len(), size);
        assert!(
            md.blocks() * 512 < 1 << 20,
            "{}: {} bytes allocated",
            r.display(),
            md.blocks() * 512
        );
        assert_eq!(fs::read(r.join("etc/after")).unwrap(), b"after");
    }
    // Nothing anywhere holds those bytes: the root, the cache's layer
    // and image entries, the guest.
    let mut allocated = 0;
    for e in walkdir::WalkDir::new(d.path()) {
        allocated += e.unwrap().metadata().unwrap().blocks() * 512;
    }
    assert!(allocated < 16 << 20, "{allocated} bytes allocated in all");
}
