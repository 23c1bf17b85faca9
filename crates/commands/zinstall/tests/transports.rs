//! Images named as skopeo, podman and umoci name them
//! (containers-transports(5): `oci:DIR:TAG`, `oci-archive:FILE`,
//! `docker-archive:FILE:REF`), `docker save` archives given as a plain
//! path, and files that are not archives at all.

use std::fs;
use std::path::{Path, PathBuf};

use crate::oci::support::{bare_profile, run, s, text, zinstall};

/// Installs `image` with a profile of images only into `dir/NAME`.
fn install(
    dir: &Path,
    name: &str,
    image: &str,
) -> (PathBuf, std::process::Output) {
    let profile = bare_profile(dir);
    let zp = dir.join(name);
    let o = zinstall(&[
        "install",
        "--profile",
        s(&profile),
        "--zonepath",
        s(&zp),
        image,
    ]);
    (zp.join("root"), o)
}

fn installed(dir: &Path, name: &str, image: &str) -> PathBuf {
    let (root, o) = install(dir, name, image);
    assert!(o.status.success(), "{image}: {}", text(&o));
    root
}

fn refused(dir: &Path, name: &str, image: &str) -> String {
    let (root, o) = install(dir, name, image);
    assert!(!o.status.success(), "{image} installed: {}", text(&o));
    assert!(!root.exists(), "{image}: a root was left behind");
    text(&o)
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

/// A umoci layout at `dir/L` with image `t` of two layers (the second
/// deletes a file of the first, as a whiteout, and adds one), and the
/// same image again as `u` with a third layer.
fn umoci_image(dir: &Path) -> PathBuf {
    let lay = dir.join("L");
    let bundle = dir.join("B");
    let image = format!("{}:t", lay.display());
    run("umoci", &["init", "--layout", s(&lay)]);
    run("umoci", &["new", "--image", &image]);
    let layer = |image: &str, edit: &dyn Fn(&Path)| {
        let _ = fs::remove_dir_all(&bundle);
        run(
            "umoci",
            &["unpack", "--rootless", "--image", image, s(&bundle)],
        );
        edit(&bundle.join("rootfs"));
        run("umoci", &["repack", "--image", image, s(&bundle)]);
    };
    layer(&image, &|r| {
        fs::create_dir_all(r.join("etc")).unwrap();
        fs::write(r.join("etc/gone"), "lower\n").unwrap();
        fs::write(r.join("etc/kept"), "kept\n").unwrap();
    });
    layer(&image, &|r| {
        fs::remove_file(r.join("etc/gone")).unwrap();
        fs::write(r.join("etc/upper"), "upper\n").unwrap();
    });
    let u = format!("{}:u", lay.display());
    run("umoci", &["tag", "--image", &image, "u"]);
    layer(&u, &|r| fs::write(r.join("etc/third"), "3\n").unwrap());
    lay
}

/// Runs a Python script with `args`; it must succeed.
fn python(script: &str, args: &[&str]) {
    let mut a = vec!["-c", script];
    a.extend_from_slice(args);
    run("python3", &a);
}

/// Rewrites the docker-archive `src` as `dst`: `manifest.json`'s entries
/// and every config passed through `edit` (Python source on `m`, the
/// list, and `configs`, name to parsed JSON), layers gzipped if `gzip`.
const REWRITE: &str = r#"
import gzip, io, json, sys, tarfile
src, dst, edit, gz = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
t = tarfile.open(src)
m = json.load(t.extractfile("manifest.json"))
configs = {e["Config"]: json.load(t.extractfile(e["Config"])) for e in m}
exec(edit)
layers = {l for e in m for l in e["Layers"]}
out = tarfile.open(dst, "w", format=tarfile.USTAR_FORMAT)
def put(name, data):
    i = tarfile.TarInfo(name); i.size = len(data); out.addfile(i, io.BytesIO(data))
for i in t.getmembers():
    if i.name == "manifest.json":
        continue
    if i.name in configs:
        put(i.name, json.dumps(configs[i.name]).encode())
    elif i.isfile() and i.name in layers and gz:
        put(i.name, gzip.compress(t.extractfile(i).read()))
    else:
        out.addfile(i, t.extractfile(i) if i.isfile() else None)
put("manifest.json", json.dumps(m).encode())
out.close()
"#;

/// A tar holding the images of the docker-archives `srcs`, one
/// `manifest.json` listing them all, as `docker save A B` writes it.
const MERGE: &str = r#"
import io, json, sys, tarfile
out = tarfile.open(sys.argv[1], "w", format=tarfile.USTAR_FORMAT)
m, seen = [], set()
for src in sys.argv[2:]:
    t = tarfile.open(src)
    for i in t.getmembers():
        if i.name == "manifest.json":
            m += json.load(t.extractfile(i))
        elif i.name != "repositories" and i.name not in seen:
            seen.add(i.name)
            out.addfile(i, t.extractfile(i) if i.isfile() else None)
b = json.dumps(m).encode()
i = tarfile.TarInfo("manifest.json"); i.size = len(b); out.addfile(i, io.BytesIO(b))
out.close()
"#;

/// `oci:DIR:TAG`, `oci:DIR` (its only image) and `oci-archive:FILE`
/// install what `DIR:TAG` installs; none is taken for a registry short
/// name.
#[test]
fn oci_transports_install_as_paths_do() {
    let d = tmp();
    let lay = umoci_image(d.path());
    let one = d.path().join("one");
    // A layout of image `t` alone, for `oci:DIR` and the oci-archive.
    run(
        "skopeo",
        &[
            "copy",
            &format!("oci:{}:t", s(&lay)),
            &format!("oci:{}", s(&one)),
        ],
    );
    let archive = d.path().join("a.tar");
    run(
        "skopeo",
        &[
            "copy",
            &format!("oci:{}:t", s(&lay)),
            &format!("oci-archive:{}", s(&archive)),
        ],
    );
    let by_path = installed(d.path(), "path", &format!("{}:t", s(&lay)));
    assert_eq!(
        fs::read_to_string(by_path.join("etc/upper")).unwrap(),
        "upper\n"
    );
    assert!(!by_path.join("etc/gone").exists());
    for (name, image) in [
        ("oci-tag", format!("oci:{}:t", s(&lay))),
        ("oci-only", format!("oci:{}", s(&one))),
        ("archive", format!("oci-archive:{}", s(&archive))),
    ] {
        let root = installed(d.path(), name, &image);
        verify_same(&by_path, &root);
    }
    let other = installed(d.path(), "oci-u", &format!("oci:{}:u", s(&lay)));
    assert_eq!(fs::read_to_string(other.join("etc/third")).unwrap(), "3\n");
    // A transport's missing path is named as such, with no registry advice.
    let e = refused(
        d.path(),
        "missing",
        &format!("oci-archive:{}", s(&d.path().join("no.tar"))),
    );
    assert!(e.contains("no.tar") && !e.contains("docker.io"), "{e}");
}

/// A `docker save`-format archive (written by skopeo, as docker writes
/// it) installs the image it holds, named `docker-archive:FILE`,
/// `docker-archive:FILE:REF`, or as a plain path (with a notice saying
/// what it was taken for): never its `manifest.json` and layer files.
/// Gzipped layers install alike.
#[test]
fn docker_archives_install_the_image_they_hold() {
    let d = tmp();
    let lay = umoci_image(d.path());
    let archive = d.path().join("d.tar");
    run(
        "skopeo",
        &[
            "copy",
            &format!("oci:{}:t", s(&lay)),
            &format!("docker-archive:{}:foo/bar:v1", s(&archive)),
        ],
    );
    let gz = d.path().join("gz.tar");
    python(REWRITE, &[s(&archive), s(&gz), "", "1"]);
    let by_oci = installed(d.path(), "oci", &format!("oci:{}:t", s(&lay)));
    for (name, image) in [
        ("named", format!("docker-archive:{}", s(&archive))),
        (
            "tagged",
            format!("docker-archive:{}:foo/bar:v1", s(&archive)),
        ),
        (
            "full",
            format!("docker-archive:{}:docker.io/foo/bar:v1", s(&archive)),
        ),
        ("gzip", format!("docker-archive:{}", s(&gz))),
    ] {
        let root = installed(d.path(), name, &image);
        assert!(!root.join("manifest.json").exists(), "{image}");
        verify_same(&by_oci, &root);
    }
    let (root, o) = install(d.path(), "sniffed", s(&archive));
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains(&format!(
            "{} is a docker-archive (as docker save writes it)",
            s(&archive)
        )),
        "{}",
        text(&o)
    );
    assert!(
        !root.join("manifest.json").exists()
            && !root.join("repositories").exists()
    );
    verify_same(&by_oci, &root);
    let e = refused(
        d.path(),
        "untagged",
        &format!("docker-archive:{}:foo/bar:v9", s(&archive)),
    );
    assert!(
        e.contains(
            "no image tagged \"foo/bar:v9\" (tags: docker.io/foo/bar:v1)"
        ),
        "{e}"
    );
}

/// An archive of two images, given without a REF, is refused naming the
/// tags to choose from; with one, that image is installed.
#[test]
fn docker_archive_of_several_images_needs_a_tag() {
    let d = tmp();
    let lay = umoci_image(d.path());
    let (a, b) = (d.path().join("a.tar"), d.path().join("b.tar"));
    for (tag, file, name) in [("t", &a, "foo/bar:v1"), ("u", &b, "foo/baz:v2")]
    {
        run(
            "skopeo",
            &[
                "copy",
                &format!("oci:{}:{tag}", s(&lay)),
                &format!("docker-archive:{}:{name}", s(file)),
            ],
        );
    }
    let both = d.path().join("both.tar");
    python(MERGE, &[s(&both), s(&a), s(&b)]);
    for image in [format!("docker-archive:{}", s(&both)), s(&both).to_string()]
    {
        let e = refused(d.path(), "zp", &image);
        assert!(
            e.contains("2 images (tags: docker.io/foo/bar:v1, docker.io/foo/baz:v2); name one as docker-archive:FILE:TAG"),
            "{e}"
        );
    }
    let by_oci = installed(d.path(), "oci", &format!("oci:{}:u", s(&lay)));
    for (name, image) in [
        ("tag", format!("docker-archive:{}:foo/baz:v2", s(&both))),
        ("index", format!("docker-archive:{}:@1", s(&both))),
    ] {
        verify_same(&by_oci, &installed(d.path(), name, &image));
    }
}

/// A layer whose bytes are not the config's diff_id is refused, naming
/// the layer, and nothing is left; a plain layer and a gzipped one alike.
#[test]
fn docker_archive_layer_not_its_diff_id_is_refused() {
    let d = tmp();
    let lay = umoci_image(d.path());
    let archive = d.path().join("d.tar");
    run(
        "skopeo",
        &[
            "copy",
            &format!("oci:{}:t", s(&lay)),
            &format!("docker-archive:{}:foo/bar:v1", s(&archive)),
        ],
    );
    let fake = format!("sha256:{}", "0".repeat(64));
    let edit = format!(
        "[c['rootfs']['diff_ids'].__setitem__(1, '{fake}') for c in configs.values()]"
    );
    for (name, gz) in [("plain", "0"), ("gzip", "1")] {
        let bad = d.path().join(format!("{name}.tar"));
        python(REWRITE, &[s(&archive), s(&bad), &edit, gz]);
        let e = refused(d.path(), name, &format!("docker-archive:{}", s(&bad)));
        assert!(
            e.contains(&format!("not to the config's diff_id {fake}")),
            "{name}: {e}"
        );
        assert!(
            e.contains(".tar (layer 2 of 2): uncompressed, it hashes to"),
            "{name}: {e}"
        );
    }
}

/// An HTML page or JSON saved as `app.tar`, `app.tar.zst` or
/// `app.tar.gz` (compressed or not) is said not to be an archive, naming
/// what it looks like and how it starts; a tar cut short in its first
/// header is still said to be truncated.
#[test]
fn a_file_that_is_no_archive_is_named_for_what_it_is() {
    let d = tmp();
    let html = "<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head></html>\n";
    let plain_html = d.path().join("app.tar.zst");
    fs::write(&plain_html, html).unwrap();
    let tar_html = d.path().join("app.tar");
    fs::write(&tar_html, html).unwrap();
    let zst_html = d.path().join("real.tar.zst");
    run("zstd", &["-q", "-f", s(&tar_html), "-o", s(&zst_html)]);
    let shown = r#"it looks like an HTML page (it starts with "<!DOCTYPE html>\n<html><head><title>404 N"…)"#;
    for (i, f) in [&plain_html, &tar_html, &zst_html].into_iter().enumerate() {
        let e = refused(d.path(), &format!("zp{i}"), s(f));
        assert!(
            e.contains(&format!("{}: not an archive: {shown}", s(f))),
            "{e}"
        );
        assert!(!e.contains("truncated"), "{e}");
    }
    let json = d.path().join("app.tar.gz");
    fs::write(&json, "{\"errors\":[{\"code\":\"UNAUTHORIZED\"}]}").unwrap();
    let e = refused(d.path(), "json", s(&json));
    assert!(e.contains("not an archive: it looks like JSON (it starts with \"{\\\"errors\\\""), "{e}");
    // A real tar cut inside its first header is truncated, not "no archive".
    let src = d.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), "x").unwrap();
    let whole = d.path().join("whole.tar");
    run("tar", &["-cf", s(&whole), "-C", s(&src), "f"]);
    let cut = d.path().join("cut.tar");
    fs::write(&cut, &fs::read(&whole).unwrap()[..300]).unwrap();
    let e = refused(d.path(), "cut", s(&cut));
    assert!(
        e.contains("truncated") && !e.contains("not an archive"),
        "{e}"
    );
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Through the daemon, `oci:DIR:TAG` with a relative DIR is the client's
/// DIR (made absolute there), not a registry short name.
#[test]
fn daemon_takes_a_transport_name_from_the_client_directory() {
    use crate::oci::support::{Ent, host_arch, layer_tar, write_layout};
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = crate::daemon::Daemon::start("");
    write_layout(
        &d.path("lay"),
        &[layer_tar(&[Ent::Dir("etc/"), Ent::File("etc/app", b"1\n")])],
        host_arch(),
        &|_, _| {},
    );
    let zp = d.path("zp");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .arg(format!("--daemon={}", d.socket.display()))
        .args(["install", "--zonepath", s(&zp), "oci:lay:t"])
        .current_dir(d.path(""))
        .env_remove("ZINSTALL_DAEMON")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(fs::read(zp.join("root/etc/app")).unwrap(), b"1\n");
}

/// A root installed from `oci:DIR:TAG` and `docker-archive:FILE` with
/// relative paths records them absolute, transport and reference kept:
/// `update` run elsewhere opens the same images again, and a layer added
/// to the tag since is laid on.
#[test]
fn update_opens_a_transport_name_again_from_anywhere() {
    let d = tmp();
    let lay = umoci_image(d.path());
    run(
        "skopeo",
        &[
            "copy",
            &format!("oci:{}:t", s(&lay)),
            &format!(
                "docker-archive:{}:foo/bar:v1",
                s(&d.path().join("d.tar"))
            ),
        ],
    );
    let profile = bare_profile(d.path());
    let at = |args: &[&str], cwd: &Path| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_zinstall"))
            .env("ZINSTALL_DEFAULTS", "/dev/null")
            .args(args)
            .current_dir(cwd)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o));
    };
    let (zp, zd) = (d.path().join("zp"), d.path().join("zd"));
    at(
        &[
            "install",
            "--profile",
            s(&profile),
            "--zonepath",
            s(&zp),
            "oci:L:t",
        ],
        d.path(),
    );
    at(
        &[
            "install",
            "--profile",
            s(&profile),
            "--zonepath",
            s(&zd),
            "docker-archive:d.tar:foo/bar:v1",
        ],
        d.path(),
    );
    // A third layer on `t`.
    let bundle = d.path().join("B2");
    let image = format!("{}:t", s(&lay));
    run(
        "umoci",
        &["unpack", "--rootless", "--image", &image, s(&bundle)],
    );
    fs::write(bundle.join("rootfs/etc/later"), "later\n").unwrap();
    run("umoci", &["repack", "--image", &image, s(&bundle)]);
    for zonepath in [&zp, &zd] {
        at(
            &[
                "update",
                "--profile",
                s(&profile),
                "--zonepath",
                s(zonepath),
            ],
            Path::new("/"),
        );
    }
    assert_eq!(
        fs::read_to_string(zp.join("root/etc/later")).unwrap(),
        "later\n"
    );
    assert!(!zd.join("root/etc/later").exists());
    assert!(
        zd.join("root/etc/upper").exists()
            && !zd.join("root/manifest.json").exists()
    );
}

/// `provision` takes the same names: a docker save archive (by
/// transport and as a plain path) and `oci:DIR:TAG` give guests of the
/// image's files, as its install has them.
#[test]
fn provision_takes_transport_names_and_docker_archives() {
    let d = tmp();
    let lay = umoci_image(d.path());
    let archive = d.path().join("d.tar");
    run(
        "skopeo",
        &[
            "copy",
            &format!("oci:{}:t", s(&lay)),
            &format!("docker-archive:{}:foo/bar:v1", s(&archive)),
        ],
    );
    let by_oci = installed(d.path(), "oci", &format!("oci:{}:t", s(&lay)));
    let cache = d.path().join("cache");
    for (i, image) in [
        format!("oci:{}:t", s(&lay)),
        format!("docker-archive:{}", s(&archive)),
        s(&archive).to_string(),
    ]
    .iter()
    .enumerate()
    {
        let out = d.path().join(format!("g{i}"));
        let o = zinstall(&[
            "provision",
            image,
            "--count",
            "1",
            "--out",
            s(&out),
            "--cache",
            s(&cache),
            "--keep-identity",
        ]);
        assert!(o.status.success(), "{image}: {}", text(&o));
        let guest = out.join("guest-0");
        assert!(!guest.join("manifest.json").exists(), "{image}");
        verify_same(&by_oci, &guest);
    }
}
