//! Archives GNU tar and bsdtar extract that are not quite well made: each
//! is unpacked by zinstall and by GNU tar (or bsdtar, where it is the one
//! that reads the quirk, or `setfacl` for what ACLs should become), and
//! the trees compared; zinstall says what it did in a notice naming the
//! member. What protects the root is still refused.
//!
//! Archives come from GNU tar where it writes the quirk (`-P`, `-V`,
//! concatenation, trailing bytes) and are built here byte by byte where
//! no tool at hand does (star's and Android's records, old archivers'
//! bodies on links, Red Hat's SELinux keyword).

// Linux only: ACLs and xattrs are compared as Linux stores them.
#![cfg(target_os = "linux")]

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use zinstall_archive::ArchiveKind;
use zinstall_engine::unpack::{self, UnpackOptions};
use zinstall_engine::{ArchiveRefusal, Error};
use zinstall_testkit::tool;

use crate::tar_support::*;

/// A stray byte after the end (as a Maven-built tarball has), garbage
/// after it, and a second archive after it (`cat a.tar b.tar`): GNU tar
/// stops at the first end marker and extracts the first archive; so does
/// zinstall, naming what it did not read. Compressed, the stream is still
/// read to its end and its trailer checked.
#[test]
fn what_follows_the_end_marker_is_ignored_and_named() {
    let s = Scene::new();
    let one = gnu_archive(&s, "one", &[("etc/a", "a\n"), ("etc/b", "b\n")]);
    let two = gnu_archive(&s, "two", &[("usr/second", "2\n")]);
    let cases: [(&str, Vec<u8>, &str); 3] = [
        (
            "stray",
            [&one[..], b"\n"].concat(),
            "non-zero data after the end",
        ),
        (
            "garbage",
            [&one[..], b"non-zero data"].concat(),
            "non-zero data after the end",
        ),
        (
            "concatenated",
            [&one[..], &two[..]].concat(),
            "second archive after the end of the archive not read (its \
             first member: \"usr/second\")",
        ),
    ];
    for (name, bytes, said) in cases {
        let plain = s.write(&format!("{name}.tar"), &bytes);
        for archive in [plain.clone(), gzip(&plain)] {
            let (z, r) = zinstall(&s, &archive);
            let (g, _) = gnu_tar(&s, &archive, 0);
            same(&g, &z);
            assert!(z.join("etc/b").is_file(), "{name}");
            assert!(!z.join("usr").exists(), "{name}: read past the end");
            let (what, count, example) = quirk(&r, said);
            assert!(what.contains("at offset"), "{what}");
            assert_eq!(count, 1);
            assert_eq!(example, archive.display().to_string());
        }
    }
    // A compressed stream damaged after the end marker is still refused:
    // it is read to its end and its checksum checked.
    let plain = s.write("damaged.tar", &[&one[..], b"\n"].concat());
    let mut gz = fs::read(gzip(&plain)).unwrap();
    let n = gz.len();
    gz[n - 8] ^= 0xff; // the CRC32 in the trailer
    let bad = s.write("damaged.tar.gz", &gz);
    let root = s.root("damaged");
    let e = unpack::unpack(&bad, &root, &UnpackOptions::default()).unwrap_err();
    assert!(matches!(e, Error::Archive { .. }), "{e}");
}

/// Old archivers gave hard links and directories a body: GNU tar skips
/// it (saying "Skipping to next header"), bsdtar too; zinstall skips it
/// and says which member had one.
#[test]
fn bodies_on_hard_links_and_directories_are_skipped() {
    let s = Scene::new();
    let mut a = Ar::default();
    a.file("a.txt", b"hello\n");
    a.raw(header(b"b.txt", b'1', 6, b"a.txt"), b"hello\n");
    a.raw(header(b"d/", b'5', 600, b""), &[b'x'; 600]);
    a.file("d/f", b"in d\n");
    let plain = s.write("bodies.tar", &a.end());
    for archive in [plain.clone(), gzip(&plain)] {
        let (z, r) = zinstall(&s, &archive);
        let (g, err) = gnu_tar(&s, &archive, 2);
        assert!(err.contains("Skipping to next header"), "{err}");
        same(&g, &z);
        assert_eq!(
            fs::metadata(z.join("b.txt")).unwrap().ino(),
            fs::metadata(z.join("a.txt")).unwrap().ino()
        );
        assert_eq!(
            quirk(&r, "hard link declares a body of 6 bytes: skipped"),
            (
                "hard link declares a body of 6 bytes: skipped".into(),
                1,
                "b.txt".into()
            )
        );
        assert_eq!(quirk(&r, "directory declares").2, "d/", "{:?}", quirks(&r));
    }
}

/// Android's tar writes two long-name records for one member: GNU tar
/// and bsdtar use the last; so does zinstall, saying so.
#[test]
fn repeated_gnu_long_names_the_last_wins() {
    let s = Scene::new();
    let mut a = Ar::default();
    a.member("././@LongLink", b'L', b"first/name\0");
    a.member("././@LongLink", b'L', b"second/name\0");
    a.file("short", b"body\n");
    a.member("././@LongLink", b'K', b"nowhere\0");
    a.member("././@LongLink", b'K', b"second/name\0");
    a.raw(header(b"hard", b'1', 0, b"zz"), b"");
    let archive = s.write("long.tar", &a.end());
    let (z, r) = zinstall(&s, &archive);
    let (g, _) = gnu_tar(&s, &archive, 0);
    same(&g, &z);
    assert_eq!(fs::read(z.join("second/name")).unwrap(), b"body\n");
    assert_eq!(fs::metadata(z.join("hard")).unwrap().nlink(), 2);
    let (_, _, example) =
        quirk(&r, "several GNU long name records for one member");
    assert_eq!(example, "second/name");
    assert_eq!(quirk(&r, "several GNU long link records").2, "hard");
}

/// `archive` with the records named `key` taken out of its first
/// member's PAX header (lengths, size and checksum made right again).
fn without_pax_record(archive: &[u8], key: &[u8]) -> Vec<u8> {
    assert_eq!(archive[156], b'x', "the first member has a PAX header");
    let size = usize::from_str_radix(
        std::str::from_utf8(&archive[124..135]).unwrap(),
        8,
    )
    .unwrap();
    let data = &archive[B..B + size];
    let mut kept = Vec::new();
    let mut at = 0;
    let mut dropped = 0;
    while at < data.len() {
        let sp = at + data[at..].iter().position(|&b| b == b' ').unwrap();
        let len: usize =
            std::str::from_utf8(&data[at..sp]).unwrap().parse().unwrap();
        let rec = &data[at..at + len];
        if rec[sp - at + 1..].starts_with(&[key, b"="].concat()) {
            dropped += 1;
        } else {
            kept.extend_from_slice(rec);
        }
        at += len;
    }
    assert_eq!(dropped, 1, "{}", String::from_utf8_lossy(key));
    let mut h: [u8; B] = archive[..B].try_into().unwrap();
    h[124..136].copy_from_slice(format!("{:011o}\0", kept.len()).as_bytes());
    sum(&mut h);
    let mut out = h.to_vec();
    out.extend_from_slice(&kept);
    out.resize(out.len().div_ceil(B) * B, 0);
    out.extend_from_slice(&archive[B + size.div_ceil(B) * B..]);
    out
}

/// GNU sparse members laid out as GNU tar's own writer never lays them
/// out: PAX 1.0 and 0.1 (GNU tar's, one record taken out) without
/// `GNU.sparse.name` (GNU tar extracts them under the name the header
/// has, `GNUSparseFile.N/…`), and an old GNU map whose last extension
/// block is empty (read as the map's end).
#[test]
fn unusual_sparse_members_extract_as_gnu_tar_does() {
    let s = Scene::new();
    let src = s.root("sparse-src");
    let f = fs::File::create(src.join("holes")).unwrap();
    f.set_len(3 << 20).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(b"start", 0).unwrap();
    f.write_all_at(b"middle", 1 << 20).unwrap();
    drop(f);
    for version in ["1.0", "0.1"] {
        let made = s.dir.join(format!("sparse-{version}.tar"));
        let st = tool("tar")
            .args([
                "--numeric-owner",
                "--format=pax",
                "--sparse",
                &format!("--sparse-version={version}"),
                "-C",
            ])
            .arg(&src)
            .arg("-cf")
            .arg(&made)
            .arg("holes")
            .status()
            .unwrap();
        assert!(st.success());
        let bytes =
            without_pax_record(&fs::read(&made).unwrap(), b"GNU.sparse.name");
        let archive = s.write(&format!("noname-{version}.tar"), &bytes);
        let (z, r) = zinstall(&s, &archive);
        let (g, _) = gnu_tar(&s, &archive, 0);
        same(&g, &z);
        let t = tree(&z);
        assert!(t.iter().any(|l| l.starts_with("GNUSparseFile.")), "{t:?}");
        assert!(!t.iter().any(|l| l.starts_with("holes")), "{t:?}");
        let (_, _, example) = quirk(&r, "without GNU.sparse.name");
        assert!(example.contains("GNUSparseFile."), "{example}");
    }

    // Old GNU: two pairs and the end segment in the header, then an
    // extension block with no pairs. GNU tar's reading of hand-made old
    // maps is its own (it drops what its writer would not write); bsdtar
    // reads this one as zinstall does.
    let mut h = header(b"old", b'S', 4, b"");
    h[257..265].copy_from_slice(b"ustar  \0");
    for (i, (off, len)) in
        [(10u64, 2u64), (100, 2), (300, 0)].iter().enumerate()
    {
        let at = 386 + 24 * i;
        h[at..at + 12].copy_from_slice(format!("{off:011o}\0").as_bytes());
        h[at + 12..at + 24].copy_from_slice(format!("{len:011o}\0").as_bytes());
    }
    h[482] = 1;
    h[483..495].copy_from_slice(format!("{:011o}\0", 300).as_bytes());
    sum(&mut h);
    let mut bytes = h.to_vec();
    bytes.extend_from_slice(&[0u8; B]);
    let mut data = b"abcd".to_vec();
    data.resize(B, 0);
    bytes.extend_from_slice(&data);
    bytes.extend_from_slice(&[0u8; 2 * B]);
    let archive = s.write("old.tar", &bytes);
    let (z, r) = zinstall(&s, &archive);
    same(&bsdtar(&s, &archive), &z);
    let mut want = vec![0u8; 300];
    want[10..12].copy_from_slice(b"ab");
    want[100..102].copy_from_slice(b"cd");
    assert_eq!(fs::read(z.join("old")).unwrap(), want);
    assert_eq!(quirk(&r, "empty GNU sparse extension block").2, "old");
}

/// Archives with no member: Docker's empty layer (1,024 zero bytes),
/// what GNU tar writes for no files (10,240), a volume label alone, an
/// empty PAX header alone. GNU tar extracts nothing and succeeds; so
/// does zinstall, saying the archive had nothing. A zinstall layer
/// must still carry its `zinstall.json`.
#[test]
fn empty_archives_unpack_to_nothing_with_a_notice() {
    let s = Scene::new();
    let gnu_empty = s.dir.join("gnu-empty.tar");
    let label = s.dir.join("label.tar");
    for (out, extra) in [(&gnu_empty, &[][..]), (&label, &["-V", "a label"])] {
        let st = tool("tar")
            .arg("-cf")
            .arg(out)
            .args(extra)
            .args(["-T", "/dev/null"])
            .status()
            .unwrap();
        assert!(st.success());
    }
    assert_eq!(fs::read(&label).unwrap()[156], b'V');
    let docker = s.write("docker.tar", &[0u8; 1024]);
    let empty_x = s.write(
        "empty-pax.tar",
        &Ar::default()
            .raw(header(b"PaxHeader", b'x', 0, b""), b"")
            .end(),
    );
    for archive in [docker, gnu_empty, label, empty_x] {
        let (z, r) = zinstall(&s, &archive);
        let (g, _) = gnu_tar(&s, &archive, 0);
        same(&g, &z);
        assert!(tree(&z).is_empty());
        let (_, _, example) = quirk(&r, "archive has no members");
        assert_eq!(example, archive.display().to_string());
        assert_eq!(unpack::peek_kind(&archive).unwrap(), None);
        let opts = UnpackOptions {
            expect: Some(ArchiveKind::Layer),
            ..UnpackOptions::default()
        };
        match unpack::unpack(&archive, &s.root("layer"), &opts) {
            Err(Error::Archive {
                reason: ArchiveRefusal::MissingMetadata,
                ..
            }) => {}
            other => panic!("{}: {other:?}", archive.display()),
        }
    }
    let r = unpack::dry_run(
        &s.write("again.tar", &[0u8; 1024]),
        &s.root("dry-run"),
        &UnpackOptions::default(),
    )
    .unwrap();
    quirk(&r, "archive has no members");
}

/// PAX times with junk after the fraction, or more digits than
/// nanoseconds: GNU tar and bsdtar take the number they start with; so
/// does zinstall, saying so.
#[test]
fn pax_times_with_junk_take_their_leading_number() {
    let s = Scene::new();
    let mut a = Ar::default();
    a.pax(&[("mtime", b"1350244992.02396010XYZ")]);
    a.file("t.txt", b"t\n");
    a.pax(&[("mtime", b"1350244992.1234567891")]);
    a.file("u.txt", b"u\n");
    let archive = s.write("times.tar", &a.end());
    let (z, r) = zinstall(&s, &archive);
    let (g, _) = gnu_tar(&s, &archive, 0);
    same(&g, &z);
    same(&bsdtar(&s, &archive), &z);
    let m = fs::metadata(z.join("t.txt")).unwrap();
    assert_eq!((m.mtime(), m.mtime_nsec()), (1350244992, 23_960_100));
    let (what, _, example) = quirk(&r, "1350244992.02396010XYZ");
    assert!(what.contains("leading number used"), "{what}");
    assert_eq!(example, "t.txt");
    assert_eq!(quirk(&r, "1350244992.1234567891").2, "u.txt");
}

/// Absolute names, as `tar -P` writes them: GNU tar removes the leading
/// `/` from names and hard link targets and extracts beneath its
/// directory; so does zinstall, with a notice counting them. Symlink
/// targets stay as they are (never followed beneath the root); `..` is
/// still refused, and nothing is written outside the root.
#[test]
fn absolute_names_land_beneath_the_root() {
    let s = Scene::new();
    let src = s.root("abs-src");
    fs::write(src.join("passwd"), b"root:x:0:0::/:/bin/sh\n").unwrap();
    fs::hard_link(src.join("passwd"), src.join("passwd.link")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", src.join("sl")).unwrap();
    let archive = s.dir.join("abs.tar");
    let st = tool("tar")
        .args(["--numeric-owner", "-cPf"])
        .arg(&archive)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success());
    // What the archive names, outside any root: it must stay as it is.
    fs::write(src.join("passwd"), b"the source, untouched\n").unwrap();
    let (z, r) = zinstall(&s, &archive);
    let (g, err) = gnu_tar(&s, &archive, 0);
    assert!(
        err.contains("Removing leading `/' from member names"),
        "{err}"
    );
    same(&g, &z);
    let inside = z.join(src.strip_prefix("/").unwrap());
    assert_eq!(
        fs::read(inside.join("passwd")).unwrap(),
        b"root:x:0:0::/:/bin/sh\n"
    );
    assert_eq!(fs::metadata(inside.join("passwd.link")).unwrap().nlink(), 2);
    assert_eq!(
        fs::read_link(inside.join("sl")).unwrap(),
        Path::new("/etc/passwd")
    );
    assert_eq!(
        fs::read(src.join("passwd")).unwrap(),
        b"the source, untouched\n"
    );
    let (_, count, example) =
        quirk(&r, "leading `/' removed from member names");
    assert!(count >= 4, "{count}");
    assert!(example.starts_with('/'), "{example}");
    assert_eq!(quirk(&r, "leading `/' removed from hard link targets").1, 1);

    // Still refused: `..` after the slash, a hard link out, a write
    // through an absolute symlink the archive planted.
    let outside = s.root("outside");
    fs::write(outside.join("sentinel"), b"keep").unwrap();
    let through = format!("{}", outside.display());
    let cases: Vec<(Vec<u8>, ArchiveRefusal)> = vec![
        (
            Ar::default().file("/../outside/sentinel", b"x").end(),
            ArchiveRefusal::DotDot,
        ),
        (
            Ar::default()
                .raw(header(b"/grab", b'1', 0, b"/../outside/sentinel"), b"")
                .end(),
            ArchiveRefusal::HardLinkOutside,
        ),
        (
            Ar::default()
                .raw(header(b"/up", b'2', 0, through.as_bytes()), b"")
                .file("/up/sentinel", b"overwritten")
                .end(),
            ArchiveRefusal::ThroughSymlink,
        ),
    ];
    for (bytes, want) in cases {
        let archive = s.write("hostile.tar", &bytes);
        let root = s.root("hostile");
        match unpack::unpack(&archive, &root, &UnpackOptions::default()) {
            Err(Error::Archive { reason, .. }) if reason == want => {}
            other => panic!("{want:?}: {other:?}"),
        }
        assert_eq!(fs::read(outside.join("sentinel")).unwrap(), b"keep");
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 1);
    }
}

/// The ACL `setfacl --set TEXT` gives a 0644 file, as the kernel keeps
/// it (mode and xattr).
fn setfacl(s: &Scene, text: &str) -> (u32, Vec<(String, Vec<u8>)>) {
    let p = s.dir.join("acl-reference");
    let _ = fs::remove_file(&p);
    fs::write(&p, b"").unwrap();
    let st = tool("setfacl")
        .args(["--set", text])
        .arg(&p)
        .status()
        .unwrap();
    assert!(st.success(), "setfacl --set {text}");
    (fs::metadata(&p).unwrap().mode() & 0o7777, xattrs(&p))
}

/// star-style ACLs GNU tar and bsdtar both fail to set: named entries
/// and no mask (zinstall computes it as setfacl does), names unknown on
/// this host without an id (that entry dropped, the others kept; with an
/// id, the id kept), and a Solaris ACL header (skipped). Each compared
/// with what setfacl makes of the ACL zinstall says it set.
#[test]
fn acl_quirks_are_mended_as_setfacl_would() {
    let s = Scene::new();
    let mut a = Ar::default();
    a.pax(&[(
        "SCHILY.acl.access",
        b"user::rw-,user:10:r-x:10,group::r--,group:20:-w-:20,other::---",
    )]);
    a.file("nomask", b"n\n");
    a.pax(&[(
        "SCHILY.acl.access",
        b"user::rw-\nuser:no-such-user-zinstall:rwx\nuser:bin:r--\n\
          user:no-such-user-either:r--:1234\ngroup::r--\nmask::rwx\nother::---\n",
    )]);
    a.file("unknown", b"u\n");
    a.member(
        "solaris",
        b'A',
        b"01000000\x003\x00user::rw-,group::r--,mask:r--,other:---\x00",
    );
    a.file("solaris", b"s\n");
    let archive = s.write("acls.tar", &a.end());
    let (z, r) = zinstall(&s, &archive);
    let got = |n: &str| {
        let p = z.join(n);
        (fs::metadata(&p).unwrap().mode() & 0o7777, xattrs(&p))
    };
    assert_eq!(
        got("nomask"),
        setfacl(&s, "u::rw-,u:10:r-x,g::r--,g:20:-w-,o::---")
    );
    assert_eq!(
        got("unknown"),
        setfacl(&s, "u::rw-,u:bin:r--,u:1234:r--,g::r--,m::rwx,o::---")
    );
    assert_eq!(quirk(&r, "mask computed as setfacl does").2, "nomask");
    let (what, _, example) = quirk(&r, "no-such-user-zinstall");
    assert!(what.contains("dropped"), "{what}");
    assert_eq!(example, "unknown");
    assert!(
        !quirks(&r)
            .iter()
            .any(|q| q.0.contains("no-such-user-either")),
        "an entry with an id is kept"
    );
    assert_eq!(quirk(&r, "Solaris ACL header").2, "solaris");
    // GNU tar extracts the Solaris header as a file, then the member
    // over it: the same tree for what it holds.
    let (g, err) = gnu_tar(&s, &archive, 0);
    assert!(err.contains("Unknown file type 'A'"), "{err}");
    let solaris = |t: Vec<String>| {
        t.into_iter()
            .filter(|l| l.starts_with("solaris:"))
            .collect::<Vec<_>>()
    };
    assert_eq!(solaris(tree(&g)), solaris(tree(&z)));
    assert_eq!(solaris(tree(&z)).len(), 1);
}

/// Red Hat's tar stores the SELinux label as `RHT.security.selinux`:
/// bsdtar sets it as the `security.selinux` xattr; so does zinstall.
#[test]
fn rht_selinux_labels_become_the_xattr() {
    // security.* xattrs need privilege.
    if !zinstall_testkit::require_root() {
        return;
    }
    let s = Scene::new();
    let mut a = Ar::default();
    a.pax(&[("RHT.security.selinux", b"system_u:object_r:etc_t:s0")]);
    a.file("labelled", b"l\n");
    let archive = s.write("selinux.tar", &a.end());
    let (z, r) = zinstall(&s, &archive);
    same(&bsdtar(&s, &archive), &z);
    assert_eq!(
        xattrs(&z.join("labelled")),
        vec![(
            "security.selinux".to_string(),
            b"system_u:object_r:etc_t:s0".to_vec()
        )]
    );
    assert_eq!(quirk(&r, "RHT.security.selinux").2, "labelled");
}
