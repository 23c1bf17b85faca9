//! A dry run of an unpack goes through the unpack's own reader: it
//! refuses what the unpack refuses and counts what the unpack makes.

use std::fs;

use zinstall_engine::unpack::{self, UnpackOptions, UnpackReport};
use zinstall_engine::{ArchiveRefusal, Error};

fn header(name: &str, kind: tar::EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(0o644);
    h.set_mtime(1_600_000_000);
    h.set_uid(0);
    h.set_gid(0);
    h
}

fn append(b: &mut tar::Builder<Vec<u8>>, mut h: tar::Header, data: &[u8]) {
    h.set_cksum();
    b.append(&h, data).unwrap();
}

fn link(b: &mut tar::Builder<Vec<u8>>, kind: tar::EntryType, n: &str, t: &str) {
    let mut h = header(n, kind, 0);
    h.as_old_mut().linkname[..t.len()].copy_from_slice(t.as_bytes());
    append(b, h, &[]);
}

/// A PAX header for the next member.
fn pax(b: &mut tar::Builder<Vec<u8>>, key: &[u8], value: &[u8]) {
    let rest = 1 + key.len() + 1 + value.len() + 1;
    let mut len = rest + 1;
    while len.to_string().len() + rest != len {
        len += 1;
    }
    let mut body = format!("{len} ").into_bytes();
    body.extend_from_slice(key);
    body.push(b'=');
    body.extend_from_slice(value);
    body.push(b'\n');
    let h = header("PaxHeader", tar::EntryType::XHeader, body.len() as u64);
    append(b, h, &body);
}

/// `data` unpacked into a new root, and dry-run into another.
fn both(
    data: &[u8],
) -> (Result<UnpackReport, Error>, Result<UnpackReport, Error>) {
    let d = tempfile::tempdir().unwrap();
    let archive = d.path().join("a.tar");
    fs::write(&archive, data).unwrap();
    let root = d.path().join("root");
    fs::create_dir(&root).unwrap();
    let opts = UnpackOptions::default();
    let real = unpack::unpack(&archive, &root, &opts);
    let dry = unpack::dry_run(&archive, &d.path().join("dry"), &opts);
    (real, dry)
}

fn refusal(r: Result<UnpackReport, Error>, what: &str) -> ArchiveRefusal {
    match r {
        Err(Error::Archive { reason, .. }) => reason,
        other => panic!("{what}: {other:?}"),
    }
}

/// A hard link to the root itself, and a member whose metadata is
/// corrupt (a NUL in an xattr's name): the unpack refuses both, and so
/// does its dry run, for the same reason.
#[test]
fn dry_run_refuses_what_the_unpack_refuses() {
    let mut b = tar::Builder::new(Vec::new());
    append(&mut b, header("a", tar::EntryType::Regular, 2), b"a\n");
    link(&mut b, tar::EntryType::Link, "l", "./");
    let (real, dry) = both(&b.into_inner().unwrap());
    let real = refusal(real, "unpack of a link to the root");
    assert!(matches!(real, ArchiveRefusal::HardLinkOutside), "{real:?}");
    let dry = refusal(dry, "dry run of a link to the root");
    assert_eq!(format!("{dry:?}"), format!("{real:?}"));

    let mut b = tar::Builder::new(Vec::new());
    pax(&mut b, b"SCHILY.xattr.user.a\0b", b"v");
    append(&mut b, header("x", tar::EntryType::Regular, 2), b"x\n");
    let (real, dry) = both(&b.into_inner().unwrap());
    let real = refusal(real, "unpack of a NUL in an xattr name");
    assert!(matches!(real, ArchiveRefusal::Corrupt(_)), "{real:?}");
    let dry = refusal(dry, "dry run of a NUL in an xattr name");
    assert_eq!(format!("{dry:?}"), format!("{real:?}"));
}

/// Directories, files, symlinks, hard links and a FIFO: the dry run
/// counts each kind as the unpack makes it.
#[test]
fn dry_run_counts_what_the_unpack_makes() {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = header("etc/", tar::EntryType::Directory, 0);
    h.set_mode(0o755);
    append(&mut b, h, &[]);
    append(&mut b, header("etc/a", tar::EntryType::Regular, 3), b"aa\n");
    let big = vec![7u8; 3 << 20];
    append(
        &mut b,
        header("etc/big", tar::EntryType::Regular, big.len() as u64),
        &big,
    );
    let mut h = header("usr/", tar::EntryType::Directory, 0);
    h.set_mode(0o755);
    append(&mut b, h, &[]);
    append(&mut b, header("usr/b", tar::EntryType::Regular, 0), &[]);
    link(&mut b, tar::EntryType::Symlink, "usr/s", "b");
    link(&mut b, tar::EntryType::Symlink, "etc/t", "../usr/b");
    link(&mut b, tar::EntryType::Link, "usr/h", "etc/a");
    link(&mut b, tar::EntryType::Link, "usr/i", "usr/s");
    append(&mut b, header("usr/p", tar::EntryType::Fifo, 0), &[]);
    let (real, dry) = both(&b.into_inner().unwrap());
    let (real, dry) = (real.unwrap().stats, dry.unwrap().stats);
    let counts = |s: &zinstall_engine::Stats| {
        (
            s.dirs,
            s.files,
            s.bytes,
            s.symlinks,
            s.hardlinks,
            s.specials,
            s.skipped,
        )
    };
    assert_eq!(counts(&real), (2, 3, 3 + (3 << 20), 2, 2, 1, 0));
    assert_eq!(counts(&dry), counts(&real));
}
