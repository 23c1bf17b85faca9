//! Which members carry a body, as GNU tar and bsdtar read them, for
//! every typeflag; and archives that end without their end marker. Each
//! archive is extracted by GNU tar, bsdtar and zinstall, and what each
//! made of the members after the one in question compared.

// Linux only: the archives hold device nodes, made as root makes them.
#![cfg(target_os = "linux")]

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use zinstall_engine::Error;
use zinstall_engine::unpack::{self, UnpackOptions};
use zinstall_testkit::tool;

use crate::tar_support::{
    Scene, gnu_archive, gzip, header, quirk, quirks, same, zinstall,
};

const B: usize = 512;

/// The members that follow the one under test.
const AFTER: [&str; 2] = ["a.txt", "b.txt"];

/// `first.txt`, then a header of typeflag `typ` whose size field says
/// 512 but with no body after it, then `a.txt` and `b.txt`, then the
/// end marker. Where the tar takes the typeflag to carry a body, `a.txt`'s
/// header is read as that body and `a.txt` is lost.
fn archive(typ: u8) -> Vec<u8> {
    let mut a = Vec::new();
    let mut file = |name: &str, data: &[u8]| {
        a.extend_from_slice(&header(
            name.as_bytes(),
            b'0',
            data.len() as u64,
            b"",
        ));
        a.extend_from_slice(data);
        a.resize(a.len().div_ceil(B) * B, 0);
    };
    file("first.txt", b"first\n");
    let (name, link): (&[u8], &[u8]) = match typ {
        b'1' | b'2' => (b"t", b"first.txt"),
        b'5' | b'D' => (b"t/", b""),
        _ => (b"t", b""),
    };
    let mut rest = header(name, typ, B as u64, link).to_vec();
    let mut file2 = |name: &str, data: &[u8]| {
        rest.extend_from_slice(&header(
            name.as_bytes(),
            b'0',
            data.len() as u64,
            b"",
        ));
        rest.extend_from_slice(data);
        rest.resize(rest.len().div_ceil(B) * B, 0);
    };
    file2("a.txt", b"aaaa\n");
    file2("b.txt", b"bbbb\n");
    a.extend_from_slice(&rest);
    a.extend_from_slice(&[0u8; 2 * B]);
    a
}

/// Which of [`AFTER`] a tool extracted into `root`.
fn after(root: &Path) -> BTreeSet<&'static str> {
    AFTER
        .into_iter()
        .filter(|f| root.join(f).exists())
        .collect()
}

/// What `program -xf archive` extracts of [`AFTER`] (whatever its exit
/// status: both go on past damage, or stop, as their readers do).
fn extracted(
    s: &Scene,
    program: &str,
    archive: &Path,
) -> BTreeSet<&'static str> {
    let root = s.root(program);
    tool(program)
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(&root)
        .output()
        .unwrap();
    after(&root)
}

/// For every typeflag: whether GNU tar and bsdtar read the header after
/// it as the next member, recorded as measured (GNU tar 1.34, bsdtar
/// 3.6.2; the same table is beside `bodiless` in the archive crate);
/// zinstall reads it as the next member exactly where both do, and
/// where only bsdtar does (`V`), so that nothing is lost. Where it
/// reads no body, the notice names the member and both tars' trees
/// after it agree with zinstall's.
#[test]
fn every_typeflag_has_a_body_as_both_tars_read_it() {
    let s = Scene::new();
    // (typeflag, GNU tar reads a.txt, bsdtar reads a.txt)
    let table: &[(u8, bool, bool)] = &[
        (b'0', false, false),
        (0, false, false),
        (b'1', true, true),
        (b'2', true, true),
        (b'3', true, true),
        (b'4', true, true),
        (b'5', true, true),
        (b'6', true, true),
        (b'7', false, false),
        (b'g', false, false),
        (b'x', false, false),
        (b'K', false, false),
        (b'L', false, false),
        (b'S', false, false),
        (b'D', false, false),
        (b'M', false, false),
        (b'N', false, false),
        (b'V', false, true),
        (b'A', false, false),
        (b'X', false, false),
        (b'Q', false, false),
    ];
    let both = BTreeSet::from(AFTER);
    for &(typ, gnu_reads, bsd_reads) in table {
        let shown = if typ == 0 {
            "NUL".into()
        } else {
            (typ as char).to_string()
        };
        let path = s.write(&format!("type-{typ}.tar"), &archive(typ));
        let gnu = extracted(&s, "tar", &path);
        let bsd = extracted(&s, "bsdtar", &path);
        assert_eq!(
            gnu.contains("a.txt"),
            gnu_reads,
            "{shown}: GNU tar kept {gnu:?}"
        );
        assert_eq!(
            bsd.contains("a.txt"),
            bsd_reads,
            "{shown}: bsdtar kept {bsd:?}"
        );
        let root = s.root("zinstall");
        // Device nodes are made, as both tars make them as root.
        let opts = UnpackOptions {
            allow_devices: true,
            ..UnpackOptions::default()
        };
        let got = unpack::unpack(&path, &root, &opts);
        if gnu_reads || bsd_reads {
            let r = got.unwrap_or_else(|e| panic!("{shown}: {e}"));
            assert_eq!(after(&root), both, "{shown}");
            if gnu_reads && bsd_reads {
                // Both made the same tree (t is whatever it is).
                let gnu_root = s.dir.join("tar");
                let bsd_root = s.dir.join("bsdtar");
                assert_eq!(after(&gnu_root), both, "{shown}");
                assert_eq!(after(&bsd_root), both, "{shown}");
                for f in AFTER {
                    assert_eq!(
                        fs::read(root.join(f)).unwrap(),
                        fs::read(gnu_root.join(f)).unwrap(),
                        "{shown}: {f}"
                    );
                }
            }
            let (_, count, example) = quirk(&r, "but has no body");
            assert_eq!(count, 1, "{shown}: {:?}", quirks(&r));
            if typ != b'V' {
                assert!(
                    example.ends_with('t') || example.ends_with("t/"),
                    "{shown}: {example}"
                );
            }
        } else {
            // The header after it is taken for its body, as both take
            // it: zinstall then refuses the rest as damaged (or, for `M`
            // and `N`, the member itself), never extracting a.txt.
            match got {
                Err(Error::Archive { .. }) => {}
                Ok(_) => assert!(!root.join("a.txt").exists(), "{shown}"),
                Err(e) => panic!("{shown}: {e}"),
            }
        }
    }
}

/// A directory whose size field is non-zero, the next header right
/// after it (the member a reader taking a body would lose): the tree
/// equals GNU tar's and bsdtar's, compressed or not, the notice names
/// the directory. A directory whose body is there is still skipped.
#[test]
fn a_directory_with_a_size_loses_no_member() {
    let s = Scene::new();
    let plain = s.write("dir-size.tar", &archive(b'5'));
    for path in [plain.clone(), gzip(&plain)] {
        let (z, r) = zinstall(&s, &path);
        let gnu = s.root("gnu");
        let st = tool("tar")
            .arg("-xf")
            .arg(&path)
            .arg("-C")
            .arg(&gnu)
            .status()
            .unwrap();
        assert!(st.success(), "GNU tar failed on {}", path.display());
        assert_eq!(after(&z), BTreeSet::from(AFTER));
        let bsd = s.root("bsd");
        let st = tool("bsdtar")
            .arg("-xf")
            .arg(&path)
            .arg("-C")
            .arg(&bsd)
            .status()
            .unwrap();
        assert!(st.success(), "bsdtar failed on {}", path.display());
        for f in ["first.txt", "a.txt", "b.txt"] {
            assert_eq!(
                fs::read(z.join(f)).unwrap(),
                fs::read(gnu.join(f)).unwrap()
            );
            assert_eq!(
                fs::read(z.join(f)).unwrap(),
                fs::read(bsd.join(f)).unwrap()
            );
        }
        assert!(z.join("t").is_dir());
        assert_eq!(
            quirk(&r, "directory declares a size of 512 bytes but has no body"),
            (
                "directory declares a size of 512 bytes but has no body (the next \
                 header follows it): read without one, as GNU tar and bsdtar read it"
                    .into(),
                1,
                "t/".into()
            )
        );
    }
}

/// An archive cut right after its last member, at a header boundary
/// (no end-of-archive blocks): GNU tar and bsdtar extract it; so does
/// zinstall, the same tree, with a notice. Cut inside a header or a
/// body it is still refused as truncated.
#[test]
fn an_archive_without_its_end_marker_extracts_with_a_notice() {
    let s = Scene::new();
    let whole = gnu_archive(&s, "whole", &[("etc/a", "a\n"), ("etc/b", "b\n")]);
    // etc/a and etc/b: a header and a block each.
    let end = 4 * B;
    assert!(
        whole[end..].iter().all(|&b| b == 0),
        "GNU tar's layout changed"
    );
    let cut = s.write("cut.tar", &whole[..end]);
    for path in [cut.clone(), gzip(&cut)] {
        let (z, r) = zinstall(&s, &path);
        let gnu = s.root("gnu");
        let st = tool("tar")
            .arg("-xf")
            .arg(&path)
            .arg("-C")
            .arg(&gnu)
            .status()
            .unwrap();
        assert!(st.success(), "GNU tar failed on {}", path.display());
        same(&gnu, &z);
        let bsd = s.root("bsd");
        let st = tool("bsdtar")
            .arg("-xf")
            .arg(&path)
            .arg("-C")
            .arg(&bsd)
            .status()
            .unwrap();
        assert!(st.success(), "bsdtar failed on {}", path.display());
        assert_eq!(fs::read(bsd.join("etc/b")).unwrap(), b"b\n");
        let (what, count, example) =
            quirk(&r, "without its end-of-archive blocks");
        assert_eq!(
            what,
            format!(
                "at offset {end}: the archive ends without its end-of-archive \
                 blocks: taken as its end, as GNU tar and bsdtar take it"
            )
        );
        assert_eq!((count, example), (1, path.display().to_string()));
    }
    // The whole archive says nothing of the kind.
    let full = s.write("whole.tar", &whole);
    let (_, r) = zinstall(&s, &full);
    assert!(quirks(&r).is_empty(), "{:?}", quirks(&r));
    for (name, len, what) in [
        ("in-header.tar", 2 * B + 300, "header"),
        ("in-body.tar", 3 * B + 1, "body"),
    ] {
        let p = s.write(name, &whole[..len]);
        match unpack::unpack(&p, &s.root("t"), &UnpackOptions::default()) {
            Err(e @ Error::Archive { .. }) => {
                assert!(e.to_string().contains("truncated"), "{name}: {e}");
                assert!(e.to_string().contains(what), "{name}: {e}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}
