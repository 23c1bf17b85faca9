//! OCI images built in memory: whiteouts, opaque directories, type
//! changes between layers and the times of the directories a layer
//! changes, as the layered unpack beneath a root leaves them.

use zinstall_testkit::run::text;
use zinstall_testkit::{require_root, tools};

use super::{
    Archive, bytes, every_kind, image, install, outcome, through_staging, world,
};

#[test]
fn an_oci_image_builds_in_memory_as_through_staging() {
    if !require_root() {
        return;
    }
    let w = world();
    // The lower layer: every kind, and what the upper one whites out,
    // hides, retypes and links to.
    let mut lower = Archive::new();
    every_kind(&mut lower);
    lower
        .dir("w/", 0o755)
        .file("w/keep", b"kept")
        .file("w/gone", &bytes(300, 20))
        .dir("w/sub/", 0o755)
        .file("w/sub/x", &bytes(200, 21))
        .dir("o/", 0o750)
        .file("o/old1", &bytes(100, 22))
        .dir("o/sub/", 0o755)
        .file("o/sub/old2", &bytes(100, 23))
        .dir("t/", 0o755)
        .file("t/f", &bytes(100, 24))
        .entry(
            "s",
            tar::EntryType::Symlink,
            0o777,
            (0, 0),
            Some("t"),
            &[],
            &[],
        )
        .dir("dd/", 0o755)
        .file("dd/x", &bytes(100, 25));
    // The upper layer: a whiteout, an opaque directory whose new entry
    // comes before its marker, a directory become a file and a symlink a
    // directory, a name whited out and made again, a hard link to a lower
    // file, and a whiteout of what is not there.
    let mut upper = Archive::new();
    upper
        .file("w/.wh.gone", b"")
        .file("o/new", &bytes(120, 26))
        .file("o/.wh..wh..opq", b"")
        .file("t", b"a file where a directory was")
        .dir("s/", 0o700)
        .file("s/in", &bytes(80, 27))
        .file("dd/.wh.x", b"")
        .file("dd/x", &bytes(150, 28))
        .entry(
            "a/h2",
            tar::EntryType::Link,
            0o644,
            (0, 0),
            Some("a/f"),
            &[],
            &[],
        )
        .file("a/.wh.nothing", b"");
    let layout = w.dir.join("layout");
    crate::oci::support::write_layout(
        &layout,
        &[lower.bytes(), upper.bytes()],
        crate::oci::support::host_arch(),
        &|_, _| {},
    );
    let mem = install(&w, "oci-mem", &layout, &[]);
    assert!(!through_staging(&mem), "{}", text(&mem));
    let staged = install(&w, "oci-staged", &layout, &["--composefs-staging"]);
    let ((m, img), (s, _)) = (image(&mem), image(&staged));
    assert_eq!(m, s, "the two builds of the OCI image differ");
    let fsck = tools::tool("fsck.erofs").arg(&img).output().unwrap();
    assert!(fsck.status.success(), "fsck.erofs: {}", text(&fsck));
}

#[test]
fn an_oci_whiteout_through_a_symlink_is_refused_alike() {
    if !require_root() {
        return;
    }
    let w = world();
    for (i, marker) in ["l/.wh.passwd", "l/.wh..wh..opq"].iter().enumerate() {
        let mut upper = Archive::new();
        upper.file(marker, b"");
        let layout = w.dir.join(format!("layout{i}"));
        crate::oci::support::write_layout(
            &layout,
            &[symlink_to_etc(), upper.bytes()],
            crate::oci::support::host_arch(),
            &|_, _| {},
        );
        let (m, s) = (format!("mem-zp-{i}"), format!("staged-zp-{i}"));
        let mem = install(&w, &m, &layout, &[]);
        let staged = install(&w, &s, &layout, &["--composefs-staging"]);
        let (a, b) = (outcome(&mem, &m), outcome(&staged, &s));
        assert!(a.is_err(), "{marker}: built: {}", text(&mem));
        assert_eq!(a, b, "{marker}");
        assert!(
            std::fs::read_to_string("/etc/passwd")
                .unwrap()
                .contains("root")
        );
    }
}

/// A layer of a symlink `l` to `/etc`, under the root's entry.
fn symlink_to_etc() -> Vec<u8> {
    let mut a = Archive::new();
    a.dir("./", 0o755).entry(
        "l",
        tar::EntryType::Symlink,
        0o777,
        (0, 0),
        Some("/etc"),
        &[],
        &[],
    );
    a.bytes()
}
