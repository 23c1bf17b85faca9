//! The engine's behaviour on real trees: refusals, merging, sparse files,
//! errors that name their path, and robustness against a changing source.

use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use zinstall_engine::{Error, Op, Plan, Refusal, Tunables};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

fn write(path: &Path, data: &[u8]) {
    if let Some(p) = path.parent() {
        fs::create_dir_all(p).unwrap();
    }
    fs::write(path, data).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

fn small_tree(root: &Path) {
    write(&root.join("a/one"), b"one");
    write(&root.join("a/b/two"), b"two two");
    write(&root.join("three"), &vec![7u8; 300_000]);
    symlink("a/one", root.join("link")).unwrap();
}

fn tunables(threads: usize, batch: usize) -> Tunables {
    Tunables {
        copy_threads: threads,
        copy_batch: batch,
        ..Tunables::default()
    }
}

#[test]
fn copies_into_missing_destination_with_parents() {
    let d = tmp();
    let src = d.path().join("src");
    small_tree(&src);
    let dst = d.path().join("x/y/dst");
    let r = Plan::new(&src, &dst).run().unwrap();
    assert_eq!(r.stats.files, 3);
    assert_eq!(r.stats.dirs, 3);
    assert_eq!(r.stats.symlinks, 1);
    assert_eq!(r.stats.bytes, 3 + 7 + 300_000);
    assert_eq!(fs::read(dst.join("a/b/two")).unwrap(), b"two two");
    assert_eq!(fs::read_link(dst.join("link")).unwrap(), Path::new("a/one"));
    assert_eq!(r.stats.workers.len(), Tunables::default().copy_threads);
    let jobs: u64 = r.stats.workers.iter().map(|w| w.jobs).sum();
    assert_eq!(jobs, 4, "every non-directory entry is one job");
}

#[test]
fn refuses_non_empty_destination_and_destination_inside_source() {
    let d = tmp();
    let src = d.path().join("src");
    small_tree(&src);
    let dst = d.path().join("dst");
    write(&dst.join("already"), b"x");
    let f = Plan::new(&src, &dst).run().unwrap_err();
    assert!(
        matches!(
            f.first(),
            Some(Error::Refused { reason: Refusal::NotEmpty, path }) if path == &dst
        ),
        "{f}"
    );
    assert_eq!(fs::read_dir(&dst).unwrap().count(), 1, "nothing written");

    let inside = src.join("a/copy");
    let f = Plan::new(&src, &inside).run().unwrap_err();
    assert!(
        matches!(
            f.first(),
            Some(Error::Refused {
                reason: Refusal::DestinationInsideSource,
                ..
            })
        ),
        "{f}"
    );
    assert!(!inside.exists());
}

#[test]
fn single_file_source_goes_to_path_or_into_directory() {
    let d = tmp();
    let src = d.path().join("f");
    write(&src, b"data");
    fs::set_permissions(&src, fs::Permissions::from_mode(0o640)).unwrap();
    let to_path = d.path().join("g");
    Plan::new(&src, &to_path).run().unwrap();
    assert_eq!(fs::read(&to_path).unwrap(), b"data");
    assert_eq!(fs::metadata(&to_path).unwrap().mode() & 0o7777, 0o640);
    let dir = d.path().join("dir");
    fs::create_dir(&dir).unwrap();
    Plan::new(&src, &dir).run().unwrap();
    assert_eq!(fs::read(dir.join("f")).unwrap(), b"data");
    let f = Plan::new(&src, &to_path).run().unwrap_err();
    assert!(
        matches!(
            f.first(),
            Some(Error::Refused {
                reason: Refusal::Exists,
                ..
            })
        ),
        "{f}"
    );
}

#[test]
fn merge_replaces_what_differs_and_keeps_what_matches() {
    let d = tmp();
    let src = d.path().join("src");
    small_tree(&src);
    let dst = d.path().join("dst");
    Plan::new(&src, &dst).run().unwrap();
    let kept_ino = fs::metadata(dst.join("three")).unwrap().ino();
    let old_ino = fs::metadata(dst.join("a/one")).unwrap().ino();
    write(&src.join("a/one"), b"changed");
    write(&src.join("new/file"), b"new");
    fs::remove_file(src.join("link")).unwrap();
    symlink("three", src.join("link")).unwrap();
    let r = Plan::new(&src, &dst).merge(true).run().unwrap();
    assert_eq!(fs::read(dst.join("a/one")).unwrap(), b"changed");
    assert_ne!(fs::metadata(dst.join("a/one")).unwrap().ino(), old_ino);
    assert_eq!(fs::metadata(dst.join("three")).unwrap().ino(), kept_ino);
    assert_eq!(fs::read(dst.join("new/file")).unwrap(), b"new");
    assert_eq!(fs::read_link(dst.join("link")).unwrap(), Path::new("three"));
    assert!(r.stats.unchanged >= 2, "{:?}", r.stats);
    // No replacement temporaries are left behind.
    for e in walk(&dst) {
        let name = e.file_name().unwrap().to_string_lossy().into_owned();
        assert!(!name.starts_with(".zi"), "leftover {}", e.display());
    }
    // A directory where a file must go is a conflict, not a deletion.
    fs::remove_file(dst.join("three")).unwrap();
    fs::create_dir(dst.join("three")).unwrap();
    write(&dst.join("three/user-data"), b"keep me");
    let f = Plan::new(&src, &dst).merge(true).run().unwrap_err();
    assert!(
        matches!(
            f.first(),
            Some(Error::Refused {
                reason: Refusal::DirectoryInTheWay,
                ..
            })
        ),
        "{f}"
    );
    // The message says which is the directory.
    assert_eq!(
        f.first().unwrap().to_string(),
        format!(
            "{}: a directory, where the source has a non-directory (one is \
             never replaced by the other)",
            dst.join("three").display()
        )
    );
    assert_eq!(fs::read(dst.join("three/user-data")).unwrap(), b"keep me");
    // And the reverse: a file where the source has a directory.
    fs::remove_dir_all(dst.join("a")).unwrap();
    write(&dst.join("a"), b"a file");
    let f = Plan::new(&src, &dst).merge(true).run().unwrap_err();
    assert!(
        f.errors.iter().any(|e| e.to_string()
            == format!(
                "{}: not a directory, where the source has a directory (one \
                 is never replaced by the other)",
                dst.join("a").display()
            )),
        "{f}"
    );
}

fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        for e in fs::read_dir(&p).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            }
            out.push(e.path());
        }
    }
    out
}

/// A 4 GiB file holding 3 MiB of data copies as 3 MiB: holes stay holes.
#[test]
fn sparse_file_stays_sparse() {
    let d = tmp();
    let src = d.path().join("src");
    fs::create_dir(&src).unwrap();
    let big = src.join("disk.img");
    let mut f = fs::File::create(&big).unwrap();
    let chunk = vec![0x5au8; 1 << 20];
    for off in [0u64, 1 << 30, 3 << 30] {
        f.seek(SeekFrom::Start(off)).unwrap();
        f.write_all(&chunk).unwrap();
    }
    f.set_len(4 << 30).unwrap();
    drop(f);
    let dst = d.path().join("dst");
    let r = Plan::new(&src, &dst).run().unwrap();
    assert_eq!(r.stats.bytes, 4 << 30);
    let copy = dst.join("disk.img");
    let md = fs::metadata(&copy).unwrap();
    assert_eq!(md.len(), 4 << 30);
    let allocated = md.blocks() * 512;
    assert!(
        allocated <= 4 << 20,
        "copy allocates {allocated} bytes for 3 MiB of data"
    );
    let mut got = vec![0u8; 1 << 20];
    let c = fs::File::open(&copy).unwrap();
    use std::os::unix::fs::FileExt;
    for off in [0u64, 1 << 30, 3 << 30] {
        c.read_exact_at(&mut got, off).unwrap();
        assert!(got == chunk, "data at {off} differs");
    }
    c.read_exact_at(&mut got, 2 << 30).unwrap();
    assert!(got.iter().all(|&b| b == 0), "hole reads as zeros");
}

#[test]
fn copies_for_every_thread_and_batch_setting() {
    let d = tmp();
    let src = d.path().join("src");
    for i in 0..150 {
        write(
            &src.join(format!("d{}/f{i}", i % 7)),
            format!("{i}").as_bytes(),
        );
    }
    for (t, b) in [(1, 1), (2, 7), (8, 128), (3, 1000)] {
        let dst = d.path().join(format!("dst-{t}-{b}"));
        let r = Plan::new(&src, &dst)
            .tunables(tunables(t, b))
            .run()
            .unwrap();
        assert_eq!(r.stats.files, 150, "threads {t} batch {b}");
        for i in 0..150 {
            let p = dst.join(format!("d{}/f{i}", i % 7));
            assert_eq!(fs::read(&p).unwrap(), format!("{i}").as_bytes());
        }
    }
}

#[test]
fn bad_tunables_are_refused_before_anything_is_written() {
    let d = tmp();
    let src = d.path().join("src");
    small_tree(&src);
    let dst = d.path().join("dst");
    let f = Plan::new(&src, &dst)
        .tunables(tunables(0, 1))
        .run()
        .unwrap_err();
    assert!(f.to_string().contains("COPY_THREADS=0"), "{f}");
    assert!(!dst.exists());
}

#[test]
fn missing_source_names_it() {
    let d = tmp();
    let f = Plan::new(d.path().join("nope"), d.path().join("dst"))
        .run()
        .unwrap_err();
    let e = f.first().unwrap();
    assert_eq!(e.op(), Some(Op::Stat));
    assert!(e.path().ends_with("nope"), "{e}");
}

/// A source that changes under the copy gives errors that name paths, or
/// a complete copy, never a panic or a hang.
#[test]
fn changing_source_never_panics() {
    let d = tmp();
    let src = d.path().join("src");
    for i in 0..2000 {
        write(&src.join(format!("d{}/f{i}", i % 20)), b"x");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let (src, stop) = (src.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let p = src.join(format!("d{}/f{}", i % 20, i % 2000));
                // Delete, or swap a file for a directory or a symlink.
                let _ = fs::remove_file(&p);
                match i % 3 {
                    0 => drop(fs::create_dir(&p)),
                    1 => drop(symlink("elsewhere", &p)),
                    _ => {}
                }
                i += 7;
            }
        })
    };
    for round in 0..5 {
        let dst = d.path().join(format!("dst{round}"));
        match Plan::new(&src, &dst).tunables(tunables(4, 8)).run() {
            Ok(_) => {}
            Err(f) => {
                for e in &f.errors {
                    assert!(
                        e.path().starts_with(&src)
                            || e.path().starts_with(&dst),
                        "error without a tree path: {e}"
                    );
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    churn.join().unwrap();
}

/// A full destination filesystem: a clean ENOSPC error naming the file,
/// and no partial file under the name that failed.
#[test]
fn full_destination_is_a_clean_error() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = tmp();
    let src = d.path().join("src");
    for i in 0..8 {
        write(&src.join(format!("f{i}")), &vec![i as u8; 1 << 20]);
    }
    let mnt = d.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(st.success(), "mount tmpfs");
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _u = Unmount(mnt.clone());
    let dst = mnt.join("dst");
    let f = Plan::new(&src, &dst)
        .tunables(tunables(2, 1))
        .run()
        .unwrap_err();
    let e = f
        .errors
        .iter()
        .find(|e| e.raw_os_error() == Some(libc::ENOSPC))
        .unwrap_or_else(|| panic!("no ENOSPC among: {f}"));
    assert!(e.to_string().contains("No space left on device"), "{e}");
    let failed = match e {
        Error::Io {
            target: Some(t), ..
        } => t.clone(),
        other => other.path().to_path_buf(),
    };
    assert!(failed.starts_with(&dst), "{e}");
    assert!(!failed.exists(), "partial file left: {}", failed.display());
}

/// `src` copied onto `dst` as `plan` says, dry and then for real: the
/// counts of what each did with the entries (dirs aside).
fn dry_and_real(
    plan: impl Fn(Plan) -> Plan,
    src: &Path,
    dst: &Path,
) -> [(u64, u64, u64, u64); 2] {
    let counts = |dry: bool| {
        let s = plan(Plan::new(src, dst)).dry_run(dry).run().unwrap().stats;
        (s.files, s.specials, s.unchanged, s.symlinks)
    };
    [counts(true), counts(false)]
}

fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(made.success(), "mkfifo {}", path.display());
}

/// Merging, the dry run decides what to do with each entry as the copy
/// does: a FIFO like the one there is left alone (the dry run used to
/// count it made); as a layer, every entry is written and a directory in
/// the way of a file is removed (the dry run used to count a like file
/// unchanged and refuse the directory).
#[test]
fn a_dry_run_decides_as_the_copy_does() {
    let d = tmp();
    let (src, dst) = (d.path().join("src"), d.path().join("dst"));
    write(&src.join("f"), b"same");
    write(&src.join("g"), b"new");
    mkfifo(&src.join("p"));
    symlink("f", src.join("s")).unwrap();
    Plan::new(&src, &dst).run().unwrap();
    fs::remove_file(dst.join("g")).unwrap();
    fs::create_dir(dst.join("g")).unwrap();
    write(&dst.join("g/inside"), b"x");
    let layer = |p: Plan| p.layered(true);
    let [dry, real] = dry_and_real(layer, &src, &dst);
    assert_eq!(real, (2, 1, 0, 1));
    assert_eq!(dry, real);
    let merge = |p: Plan| p.merge(true);
    let [dry, real] = dry_and_real(merge, &src, &dst);
    assert_eq!(real, (0, 0, 3, 1));
    assert_eq!(dry, real);
}

/// A dry run meets what the copy meets, as the copy does: a layer's
/// directory where the destination has a file replaces the file (the
/// dry run used to refuse it as a conflict), a top destination that is
/// a symlink inside the root is refused (the dry run used to follow
/// it), and one that is a dangling symlink fails to be made.
#[test]
fn a_dry_run_meets_the_destination_as_the_copy_does() {
    let d = tmp();
    let (src, dst) = (d.path().join("src"), d.path().join("dst"));
    write(&src.join("d/f"), b"in d");
    write(&src.join("g"), b"g");
    write(&dst.join("d"), b"a file where the layer has a directory");
    let layer = |p: Plan| p.layered(true);
    let [dry, real] = dry_and_real(layer, &src, &dst);
    assert_eq!(real, (2, 0, 0, 0));
    assert_eq!(dry, real);

    let root = d.path().join("root");
    fs::create_dir_all(root.join("real")).unwrap();
    symlink("real", root.join("top")).unwrap();
    for dry in [true, false] {
        let f = Plan::new(&src, root.join("top"))
            .within(&root)
            .dry_run(dry)
            .run()
            .unwrap_err();
        assert!(
            matches!(f.errors.as_slice(), [Error::Beneath { .. }]),
            "dry {dry}: {f}"
        );
    }
    assert_eq!(fs::read_dir(root.join("real")).unwrap().count(), 0);

    // A dangling symlink named as the destination: the copy's mkdir
    // fails on it, and so does the dry run (it used to call it a
    // conflict of its own).
    let dangling = d.path().join("dangling");
    symlink("nowhere", &dangling).unwrap();
    for dry in [true, false] {
        let f = Plan::new(&src, &dangling).dry_run(dry).run().unwrap_err();
        assert!(
            matches!(f.errors.as_slice(), [Error::Io { op: Op::Mkdir, .. }]),
            "dry {dry}: {f}"
        );
    }
}

/// Merging, a later name of an inode whose first name is written anew is
/// linked anew, dry as for real: what is at its place was a link to the
/// first name's old copy, not to the one the copy makes (the dry run
/// used to find the old copy there and count the later name unchanged).
#[test]
fn a_dry_run_links_later_names_to_a_first_name_made_anew() {
    let d = tmp();
    let (src, dst) = (d.path().join("src"), d.path().join("dst"));
    write(&src.join("a"), b"old");
    fs::hard_link(src.join("a"), src.join("b")).unwrap();
    Plan::new(&src, &dst).run().unwrap();
    write(&src.join("a"), b"new and longer");
    let stats = |dry: bool| {
        let s = Plan::new(&src, &dst)
            .merge(true)
            .dry_run(dry)
            .run()
            .unwrap()
            .stats;
        (s.files, s.hardlinks, s.unchanged)
    };
    let dry = stats(true);
    let real = stats(false);
    assert_eq!(real, (1, 1, 0));
    assert_eq!(dry, real);
}
