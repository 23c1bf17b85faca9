//! `zinstall install` of archives that hold nothing: Docker's empty layer
//! (1,024 zero bytes) as a plain tarball and as a layer inside an OCI
//! image. GNU tar extracts nothing from it and succeeds; so does the
//! install, saying so. (Each quirk of the tar reader is compared with GNU
//! tar in crates/engine/tests/tar_quirks.rs.)

use zinstall_testkit::tools;

use crate::oci::support;

use std::fs;
use std::path::Path;

use support::*;

/// Installs `image` with a profile of images only into `dir/zp`, asking
/// for the outcome as JSON.
fn install(dir: &Path, image: &str) -> std::process::Output {
    let profile = bare_profile(dir);
    let zp = dir.join("zp");
    zinstall(&[
        "install",
        "--json",
        "--profile",
        s(&profile),
        "--zonepath",
        s(&zp),
        image,
    ])
}

/// The notices of a `--json` outcome on stdout: `(kind, text)`.
fn notices(o: &std::process::Output) -> Vec<(String, String)> {
    let v: serde_json::Value = String::from_utf8_lossy(&o.stdout)
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON outcome: {}", text(o)));
    v["result"]["notices"]
        .as_array()
        .unwrap_or_else(|| panic!("no notices in {v}"))
        .iter()
        .map(|n| {
            (
                n["kind"].as_str().unwrap().to_string(),
                n["notice"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Docker's empty layer alone installs an empty root, with a notice; GNU
/// tar extracts nothing from it and succeeds too.
#[test]
fn an_empty_tarball_installs_nothing_and_says_so() {
    let d = tempfile::tempdir().unwrap();
    let tarball = d.path().join("empty.tar");
    fs::write(&tarball, [0u8; 1024]).unwrap();
    let gnu = d.path().join("gnu");
    fs::create_dir(&gnu).unwrap();
    let o = tools::tool("tar")
        .arg("-xf")
        .arg(&tarball)
        .arg("-C")
        .arg(&gnu)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(fs::read_dir(&gnu).unwrap().count(), 0);
    let o = install(d.path(), s(&tarball));
    assert!(o.status.success(), "{}", text(&o));
    let root = d.path().join("zp/root");
    assert_eq!(fs::read_dir(&root).unwrap().count(), 0);
    let n = notices(&o);
    assert!(
        n.iter().any(|(kind, what)| kind == "archive_quirk"
            && what.contains("archive has no members")
            && what.contains("empty.tar")),
        "{n:?}"
    );
}

/// An OCI image whose middle layer is Docker's empty layer installs the
/// layers around it.
#[test]
fn an_image_with_an_empty_layer_installs() {
    let d = tempfile::tempdir().unwrap();
    let lay = d.path().join("L");
    write_layout(
        &lay,
        &[
            layer_tar(&[Ent::Dir("etc/"), Ent::File("etc/first", b"1\n")]),
            vec![0u8; 1024],
            layer_tar(&[Ent::File("etc/third", b"3\n")]),
        ],
        host_arch(),
        &|_, _| {},
    );
    let o = install(d.path(), &format!("{}:t", lay.display()));
    assert!(o.status.success(), "{}", text(&o));
    let root = d.path().join("zp/root");
    assert_eq!(fs::read(root.join("etc/first")).unwrap(), b"1\n");
    assert_eq!(fs::read(root.join("etc/third")).unwrap(), b"3\n");
    let n = notices(&o);
    assert!(
        n.iter()
            .any(|(_, what)| what.contains("archive has no members")),
        "{n:?}"
    );
}
