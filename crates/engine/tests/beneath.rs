//! The library's writers stay beneath the root they are given: unpacking
//! into a root that already holds links aimed out of it, merging into a
//! destination that does, removing a tree whose directories are swapped
//! for symlinks meanwhile, that holds mounts, or that is deeper than a
//! path can name; and copying pseudo-files whose size says nothing of
//! their content.
//!
//! The sentinel and filesystem helpers are the brand's hostile-test
//! helpers (std and libc only), shared rather than copied.

use zinstall_testkit::fsops;
use zinstall_testkit::sentinel;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fsops::{
    Cases, Mount, Racer, climbing, file_beneath, lstat_beneath, mkdir_deep,
    needs_root, relative, swap_for_symlink,
};
use sentinel::Sentinel;
use zinstall_archive::ArchiveKind;
use zinstall_engine::unpack::{self as archive, UnpackOptions};
use zinstall_engine::{Error, Plan, Tunables};

fn opts(threads: usize) -> UnpackOptions {
    UnpackOptions {
        tunables: Tunables {
            copy_threads: threads,
            copy_batch: 4,
            ..Tunables::default()
        },
        expect: Some(ArchiveKind::Layer),
        ..UnpackOptions::default()
    }
}

/// A layer: `zinstall.json`, then the entries (name under `root/`, type,
/// link target, data).
fn layer(entries: &[(&str, tar::EntryType, &str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut add =
        |name: &str, kind: tar::EntryType, target: &str, data: &[u8]| {
            let mut h = tar::Header::new_gnu();
            h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
            h.as_old_mut().linkname[..target.len()]
                .copy_from_slice(target.as_bytes());
            h.set_entry_type(kind);
            h.set_size(data.len() as u64);
            h.set_mode(if kind == tar::EntryType::Directory {
                0o755
            } else {
                0o644
            });
            h.set_mtime(1_600_000_000);
            h.set_uid(0);
            h.set_gid(0);
            h.set_cksum();
            b.append(&h, data).unwrap();
        };
    add(
        "zinstall.json",
        tar::EntryType::Regular,
        "",
        b"{\"v\":\"1\",\"t\":\"layer\"}\n",
    );
    for (name, kind, target, data) in entries {
        add(&format!("root/{name}"), *kind, target, data);
    }
    b.into_inner().unwrap()
}

/// How a planted link is aimed at the sentinel.
fn aims(from: &Path, to: &Path) -> [(&'static str, PathBuf); 3] {
    [
        ("absolute", to.to_path_buf()),
        ("relative", relative(from, to)),
        ("climbing", climbing(to)),
    ]
}

/// A root already holding a link (a previous layer's, or a tenant's) at
/// `etc`, `usr/lib` or a leaf, aimed at a sentinel; a layer then writes
/// every kind of entry through it. Refused, or placed inside the root
/// through no symlink; the sentinel never changes.
#[test]
fn unpacking_never_follows_links_already_in_the_root() {
    use tar::EntryType as T;
    type Entry = (&'static str, T, &'static str, &'static [u8]);
    let writes: [(&str, &str, Entry); 7] = [
        ("etc", "etc/pwned", ("etc/pwned", T::Regular, "", b"pwned")),
        ("etc", "etc/keep", ("etc/keep", T::Regular, "", b"pwned")),
        (
            "usr/lib",
            "usr/lib/sub",
            ("usr/lib/sub/", T::Directory, "", b""),
        ),
        (
            "usr/lib",
            "usr/lib/ln",
            ("usr/lib/ln", T::Symlink, "x", b""),
        ),
        ("etc", "etc/fifo", ("etc/fifo", T::Fifo, "", b"")),
        ("etc", "grab", ("grab", T::Link, "root/etc/keep", b"")),
        // The leaf itself: replace the link or refuse.
        (
            "etc/passwd",
            "etc/passwd",
            ("etc/passwd", T::Regular, "", b"root"),
        ),
    ];
    let mut cases = Cases::default();
    for (link, inside, entry) in writes {
        for threads in [1, 4] {
            let d = tempfile::tempdir().unwrap();
            let root = d.path().join("zone/root");
            let s = Sentinel::dir(&d.path().join("sentinel"));
            let parent = Path::new(link).parent().unwrap();
            let target = if link == "etc/passwd" {
                s.path.join("keep")
            } else {
                s.path.clone()
            };
            for (aim, t) in aims(&root.join(parent), &target) {
                let what = format!(
                    "{:?} entry root/{} with {link} a symlink ({aim}), {threads} workers",
                    entry.1, entry.0
                );
                cases.run(&what.clone(), || {
                    let _ = fs::remove_dir_all(&root);
                    fs::create_dir_all(root.join(parent)).unwrap();
                    symlink(&t, root.join(link)).unwrap();
                    let data = layer(&[entry]);
                    let file = d.path().join("layer.tar");
                    fs::write(&file, data).unwrap();
                    let r = archive::unpack(&file, &root, &opts(threads));
                    eprintln!(
                        "{what}: {}",
                        r.as_ref().map_or_else(
                            |e| e.to_string(),
                            |_| "unpacked".into()
                        )
                    );
                    s.assert_unchanged(&format!(
                        "{what}: {:?}",
                        r.as_ref().err()
                    ));
                    match r {
                        Err(Error::Archive { entry, .. }) => assert!(
                            entry.contains(link) || entry.contains(inside),
                            "{what}: refused, naming {entry:?}"
                        ),
                        Err(e) => panic!("{what}: not a refusal: {e}"),
                        Ok(_) => {
                            if let Err(e) =
                                lstat_beneath(&root, Path::new(inside))
                            {
                                panic!("{what}: unpacked, but {e}");
                            }
                        }
                    }
                });
            }
        }
    }
    cases.finish();
}

/// A merge copy into a destination whose directories (and one leaf) are
/// symlinks aimed at a sentinel.
#[test]
fn merging_never_writes_through_links_in_the_destination() {
    let files = ["a/top", "a/b/mid", "a/b/keep", "a/b/c/low"];
    let mut cases = Cases::default();
    for level in ["a", "a/b", "a/b/c", "a/b/keep"] {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        for f in files {
            fs::create_dir_all(src.join(f).parent().unwrap()).unwrap();
            fs::write(src.join(f), f).unwrap();
        }
        let s = Sentinel::dir(&d.path().join("sentinel"));
        let dst = d.path().join("dst");
        let from = dst.join(Path::new(level).parent().unwrap());
        let target = if level.ends_with("keep") {
            s.path.join("keep")
        } else {
            s.path.clone()
        };
        for (aim, t) in aims(&from, &target) {
            let what = format!("merge with {level} a symlink ({aim})");
            cases.run(&what.clone(), || {
                let _ = fs::remove_dir_all(&dst);
                fs::create_dir_all(&from).unwrap();
                symlink(&t, dst.join(level)).unwrap();
                let r = Plan::new(&src, &dst).merge(true).run();
                s.assert_unchanged(&format!(
                    "{what}: {:?}",
                    r.as_ref().err().map(|f| f.to_string())
                ));
                if let Err(f) = &r {
                    let text = f.to_string();
                    assert!(
                        text.contains(dst.join(level).to_str().unwrap()),
                        "{what}: the failure does not name the link: {text}"
                    );
                } else {
                    for f in files {
                        if let Err(e) =
                            file_beneath(&dst, Path::new(f), f.as_bytes())
                        {
                            panic!("{what}: merged, but {e}");
                        }
                    }
                }
            });
        }
    }
    cases.finish();
}

/// `remove_tree` on a tree deeper than a path can name (made with
/// mkdirat).
#[test]
fn remove_tree_removes_trees_deeper_than_a_path() {
    let d = tempfile::tempdir().unwrap();
    let tree = d.path().join("tree");
    fs::create_dir(&tree).unwrap();
    mkdir_deep(&tree, 3000, "d");
    let r = zinstall_engine::fsutil::remove_tree(&tree);
    let shown = r.as_ref().err().map(|e| {
        let t = e.to_string();
        format!("{}... ({} characters)", &t[..t.len().min(300)], t.len())
    });
    assert!(r.is_ok(), "remove_tree of a 3000-deep tree: {shown:?}");
    assert!(!tree.exists());
}

/// `remove_tree` on a tree with a sentinel bind-mounted inside: the
/// mount and all in it stay, and the error names the mount point.
#[test]
fn remove_tree_does_not_cross_mount_points() {
    if !needs_root() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let s = Sentinel::dir(&d.path().join("sentinel"));
    let tree = d.path().join("tree");
    fs::create_dir_all(tree.join("mnt/host")).unwrap();
    fs::write(tree.join("file"), b"x").unwrap();
    let m = Mount::bind(&s.path, &tree.join("mnt/host"));
    let r = zinstall_engine::fsutil::remove_tree(&tree);
    s.assert_unchanged(&format!(
        "{:?}",
        r.as_ref().err().map(|e| e.to_string())
    ));
    assert!(m.is_mounted(), "the mount went");
    let e = r
        .expect_err("the mount point cannot have been removed")
        .to_string();
    assert!(
        e.contains(tree.join("mnt/host").to_str().unwrap()),
        "the error does not name the mount point: {e}"
    );
}

/// `remove_tree` while a racing thread swaps its directories for
/// symlinks aimed at a sentinel (moving them aside inside the tree).
#[test]
fn remove_tree_with_directories_swapped_for_symlinks() {
    let d = tempfile::tempdir().unwrap();
    let s = Sentinel::dir(&d.path().join("sentinel"));
    let t0 = Instant::now();
    let mut swaps = 0;
    for run in 0..20 {
        if t0.elapsed() > Duration::from_secs(8) {
            break;
        }
        let tree = d.path().join(format!("tree{run}"));
        for i in 0..30 {
            let dir = tree.join(format!("d{i:02}"));
            fs::create_dir_all(&dir).unwrap();
            for f in 0..40 {
                fs::write(dir.join(format!("f{f}")), b"x").unwrap();
            }
        }
        let racer = {
            let (tree, target) = (tree.clone(), s.path.clone());
            let mut n = 0;
            Racer::start(move || {
                let mut k = 0;
                for i in 0..30 {
                    n += 1;
                    let dir = tree.join(format!("d{i:02}"));
                    k += u64::from(swap_for_symlink(&dir, &target, n));
                }
                k
            })
        };
        let r = zinstall_engine::fsutil::remove_tree(&tree);
        swaps += racer.stop();
        s.assert_unchanged(&format!(
            "run {run}: {:?}",
            r.as_ref().err().map(|e| e.to_string())
        ));
    }
    eprintln!("{swaps} directories swapped; sentinel unchanged");
}

/// Pseudo-files (st_size 0 in procfs, 4096 in sysfs) copied by the
/// library: the content to its end, and the byte count is what was
/// written; or an error.
#[test]
fn pseudo_files_are_copied_to_their_end() {
    let d = tempfile::tempdir().unwrap();
    let mut cases = Cases::default();
    for src in [
        "/proc/version",
        "/proc/sys/kernel/ostype",
        "/sys/kernel/mm/transparent_hugepage/enabled",
    ] {
        let Ok(want) = fs::read(src) else {
            eprintln!("not tried: {src} cannot be read here");
            continue;
        };
        cases.run(src, || {
            let dst = d.path().join(Path::new(src).file_name().unwrap());
            let _ = fs::remove_file(&dst);
            match Plan::new(src, &dst).run() {
                Err(f) => assert!(f.to_string().contains(src), "{f}"),
                Ok(r) => {
                    let got = fs::read(&dst).unwrap();
                    assert_eq!(
                        String::from_utf8_lossy(&got),
                        String::from_utf8_lossy(&want),
                        "{src}: the copy is not what a read gives"
                    );
                    assert_eq!(
                        r.stats.bytes,
                        got.len() as u64,
                        "{src}: byte count"
                    );
                }
            }
        });
    }
    cases.finish();
}
