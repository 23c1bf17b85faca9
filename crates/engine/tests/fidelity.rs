//! A copy is the source tree: every kind of entry and every attribute,
//! for every thread and batch setting; and the comparison that says so
//! notices each kind of difference.

// Linux only: the tree is made with Linux's xattr namespaces (user.*,
// trusted.*, security.capability) and POSIX ACLs (setfacl, setcap).
// illumos keeps extended attributes as attribute directories and ACLs as
// NFSv4 ACLs, which these fixtures do not make.
#![cfg(target_os = "linux")]

use crate::common;

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use common::{assert_same_tree, build_fidelity_tree, copy_tree, is_root};
use zinstall_testkit::loopfs::{self, Kind, LoopFs};
use zinstall_verify::{self as verify, CompareOptions, DiffKind};

#[test]
fn round_trip_for_every_thread_and_batch_setting() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    let info = build_fidelity_tree(&src);
    for threads in [1, 2, 8] {
        for batch in [1, 7, 128] {
            let dst = d.path().join(format!("dst-{threads}-{batch}"));
            let r = copy_tree(&src, &dst, threads, batch);
            assert_same_tree(&src, &dst);
            assert_eq!(
                r.stats.hardlinks, 3,
                "two later names of h0, one of the symlink"
            );
            if is_root() {
                assert!(r.notices.is_empty(), "{:?}", r.notices);
            }
        }
    }
    if !info.root_parts {
        zinstall_testkit::unmet(
            "root, for owners, devices, capability and ACLs",
        );
    }
}

/// Root-only attributes, checked with the system's own tools as well.
#[test]
fn capability_acl_owner_and_devices_survive() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    let info = build_fidelity_tree(&src);
    let dst = d.path().join("dst");
    copy_tree(&src, &dst, 4, 16);
    let rel = |p: &Path| dst.join(p.strip_prefix(&src).unwrap());
    let cap = rel(info.cap_file.as_ref().unwrap());
    let out = zinstall_testkit::tool("getcap").arg(&cap).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("cap_net_raw=ep"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = zinstall_testkit::tool("getfacl")
        .args(["-c", "-d"])
        .arg(dst.join("a/b"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("group:5678:rwx"));
    let md =
        fs::symlink_metadata(rel(info.owned_file.as_ref().unwrap())).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((md.uid(), md.gid()), (1234, 5678));
    let dev =
        fs::symlink_metadata(rel(info.char_dev.as_ref().unwrap())).unwrap();
    assert_eq!(dev.rdev(), libc::makedev(1, 3));
    assert_same_tree(&src, &dst);
}

/// Each kind of difference is noticed, on exactly the entry changed.
#[test]
fn comparison_notices_each_difference() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    let info = build_fidelity_tree(&src);
    let opts = CompareOptions::default();
    let mut round = 0;
    let mut check = |mutate: &dyn Fn(&Path),
                     rel: &str,
                     want: &dyn Fn(&DiffKind) -> bool| {
        round += 1;
        let dst = d.path().join(format!("m{round}"));
        copy_tree(&src, &dst, 2, 8);
        mutate(&dst);
        let c = verify::compare(&src, &dst, &opts).unwrap();
        assert_eq!(c.differences.len(), 1, "{rel}: {c}");
        assert_eq!(c.differences[0].path, Path::new(rel), "{c}");
        assert!(want(&c.differences[0].kind), "{rel}: {c}");
    };
    let r =
        |p: &Path| p.strip_prefix(&src).unwrap().to_str().unwrap().to_string();
    let setuid = r(&info.setuid_file);
    check(
        &|dst| {
            let p = dst.join(&setuid);
            let t = fs::metadata(&p).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
            keep_times(&p, &t);
        },
        &setuid,
        &|k| {
            matches!(
                k,
                DiffKind::Mode {
                    a: 0o4755,
                    b: 0o755
                }
            )
        },
    );
    let big = r(&info.big_file);
    check(
        &|dst| {
            let p = dst.join(&big);
            let t = fs::metadata(&p).unwrap();
            let mut data = fs::read(&p).unwrap();
            data[1_500_000] ^= 1;
            fs::write(&p, data).unwrap();
            keep_times(&p, &t);
        },
        &big,
        &|k| matches!(k, DiffKind::Content { offset: 1_500_000 }),
    );
    check(
        &|dst| {
            let p = dst.join("links/dangling");
            let (t, parent) = (times_of(&p), times_of(&dst.join("links")));
            fs::remove_file(&p).unwrap();
            symlink("elsewhere", &p).unwrap();
            restore(&p, t);
            restore(&dst.join("links"), parent);
        },
        "links/dangling",
        &|k| matches!(k, DiffKind::SymlinkTarget),
    );
    let one = r(&info.xattr_file);
    check(
        &|dst| {
            let p = dst.join(&one);
            let t = fs::metadata(&p).unwrap();
            let st = zinstall_testkit::tool("setfattr")
                .args(["-x", "user.binary"])
                .arg(&p)
                .status()
                .unwrap();
            assert!(st.success());
            keep_times(&p, &t);
        },
        &one,
        &|k| matches!(k, DiffKind::Xattr { name } if name == "user.binary"),
    );
    check(
        &|dst| {
            let p = dst.join(&one);
            let md = fs::symlink_metadata(&p).unwrap();
            use std::os::unix::fs::MetadataExt;
            common::set_times(
                &p,
                (md.atime(), md.atime_nsec()),
                (md.mtime(), md.mtime_nsec() + 1),
            );
        },
        &one,
        &|k| matches!(k, DiffKind::Mtime { .. }),
    );
    let h2 = r(&info.hardlinks[2]);
    check(
        &|dst| {
            // Same content, same times, but no longer the same inode.
            let p = dst.join(&h2);
            let t = fs::metadata(&p).unwrap();
            let parent = times_of(p.parent().unwrap());
            let data = fs::read(&p).unwrap();
            // Reading changed the shared inode's access time: put it back.
            keep_times(&p, &t);
            fs::remove_file(&p).unwrap();
            fs::write(&p, data).unwrap();
            fs::set_permissions(&p, t.permissions()).unwrap();
            keep_times(&p, &t);
            restore(p.parent().unwrap(), parent);
            if is_root() {
                use std::os::unix::fs::MetadataExt;
                std::os::unix::fs::lchown(&p, Some(t.uid()), Some(t.gid()))
                    .unwrap();
            }
        },
        &h2,
        &|k| matches!(k, DiffKind::HardLinks),
    );
    check(
        &|dst| {
            let parent = times_of(&dst.join("names"));
            fs::remove_file(dst.join("names/with space")).unwrap();
            restore(&dst.join("names"), parent);
        },
        "names/with space",
        &|k| matches!(k, DiffKind::OnlyInA),
    );
    if is_root() {
        let owned = r(info.owned_file.as_ref().unwrap());
        check(
            &|dst| {
                std::os::unix::fs::lchown(dst.join(&owned), Some(1), Some(5678))
                    .unwrap()
            },
            &owned,
            &|k| {
                matches!(
                    k,
                    DiffKind::Owner {
                        a: (1234, 5678),
                        b: (1, 5678)
                    }
                )
            },
        );
        let cap = r(info.cap_file.as_ref().unwrap());
        check(
            &|dst| {
                let p = dst.join(&cap);
                let t = fs::metadata(&p).unwrap();
                let st = zinstall_testkit::tool("setcap")
                    .arg("-r")
                    .arg(&p)
                    .status()
                    .unwrap();
                assert!(st.success());
                keep_times(&p, &t);
            },
            &cap,
            &|k| matches!(k, DiffKind::Xattr { name } if name == "security.capability"),
        );
    } else {
        zinstall_testkit::unmet(
            "root, for the owner and capability differences",
        );
    }
}

/// Puts back the times a mutation changed, so only the mutation shows.
fn keep_times(p: &Path, md: &fs::Metadata) {
    use std::os::unix::fs::MetadataExt;
    common::set_times(
        p,
        (md.atime(), md.atime_nsec()),
        (md.mtime(), md.mtime_nsec()),
    );
}

type Times = ((i64, i64), (i64, i64));

fn times_of(p: &Path) -> Times {
    use std::os::unix::fs::MetadataExt;
    let md = fs::symlink_metadata(p).unwrap();
    ((md.atime(), md.atime_nsec()), (md.mtime(), md.mtime_nsec()))
}

fn restore(p: &Path, t: Times) {
    common::set_times(p, t.0, t.1);
}

/// On XFS and btrfs every file is cloned (its extents shared); on ext4
/// none is, and the copy is the same either way.
#[test]
fn reflink_where_the_filesystem_shares_extents() {
    for (kind, clones) in
        [(Kind::Xfs, true), (Kind::Btrfs, true), (Kind::Ext4, false)]
    {
        let Some(fs) = LoopFs::require(kind, 512 << 20) else {
            return;
        };
        let src = fs.path().join("src");
        fs::create_dir_all(src.join("sub")).unwrap();
        for i in 0..5 {
            fs::write(
                src.join(format!("sub/f{i}")),
                zinstall_testkit::pseudo_random((i + 1) << 20, i as u64),
            )
            .unwrap();
        }
        let dst = fs.path().join("dst");
        let r = copy_tree(&src, &dst, 2, 4);
        assert_same_tree(&src, &dst);
        if clones {
            assert_eq!(r.stats.reflinked, 5, "{kind:?}: {:?}", r.stats);
            for i in 0..5 {
                let p = dst.join(format!("sub/f{i}"));
                assert!(
                    loopfs::shares_extents(&p),
                    "{kind:?}: {} shares no extents",
                    p.display()
                );
            }
        } else {
            assert_eq!(r.stats.reflinked, 0, "{kind:?}");
            assert!(!loopfs::shares_extents(&dst.join("sub/f0")));
        }
    }
}
