//! Walk-only mode: the walker's work without the copying.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use zinstall_engine::{Plan, Tunables};

fn write(path: &Path, data: &[u8]) {
    if let Some(p) = path.parent() {
        fs::create_dir_all(p).unwrap();
    }
    fs::write(path, data).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// Files at several depths, symlinks, a hard link, a FIFO, an empty
/// directory and a read-only one.
fn tree(root: &Path) {
    for d in 0..5 {
        for f in 0..7 {
            write(&root.join(format!("d{d}/sub/f{f}")), &vec![b'x'; f * 100]);
        }
        symlink(format!("sub/f{d}"), root.join(format!("d{d}/link"))).unwrap();
    }
    write(&root.join("top"), b"top");
    fs::hard_link(root.join("top"), root.join("d0/top-again")).unwrap();
    fs::create_dir_all(root.join("empty/deeper")).unwrap();
    let status = std::process::Command::new("mkfifo")
        .arg(root.join("d1/fifo"))
        .status()
        .unwrap();
    assert!(status.success());
    write(&root.join("ro/inside"), b"r");
    fs::set_permissions(root.join("ro"), fs::Permissions::from_mode(0o555))
        .unwrap();
}

/// Every path under `root` (itself excluded), relative, sorted.
fn listing(root: &Path) -> Vec<(PathBuf, fs::FileType)> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                todo.push(e.path());
            }
            let rel = e.path().strip_prefix(root).unwrap().to_path_buf();
            out.push((rel, ft));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn walk_only_makes_only_directories_and_counts_what_a_copy_counts() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    tree(&src);
    let tunables = Tunables {
        copy_threads: 3,
        copy_batch: 4,
        ..Tunables::default()
    };

    let copy = Plan::new(&src, d.path().join("copy"))
        .tunables(tunables)
        .run()
        .unwrap();
    let walked = Plan::new(&src, d.path().join("walked"))
        .tunables(tunables)
        .walk_only(true)
        .run()
        .unwrap();

    let made = listing(&d.path().join("walked"));
    let not_dirs: Vec<_> = made.iter().filter(|(_, ft)| !ft.is_dir()).collect();
    assert!(not_dirs.is_empty(), "walk-only wrote {not_dirs:?}");
    let src_dirs: Vec<_> = listing(&src)
        .into_iter()
        .filter(|(_, ft)| ft.is_dir())
        .map(|(p, _)| p)
        .collect();
    let made_dirs: Vec<_> = made.into_iter().map(|(p, _)| p).collect();
    assert_eq!(made_dirs, src_dirs, "every directory is made, as in a copy");
    let src_entries = listing(&src).len() as u64 + 1;
    assert_eq!(copy.stats.entries(), src_entries, "{}", copy.stats);
    assert_eq!(
        walked.stats.entries(),
        copy.stats.entries(),
        "walk-only: {}; copy: {}",
        walked.stats,
        copy.stats
    );
    assert_eq!(walked.stats.dirs, copy.stats.dirs);
    assert_eq!(walked.stats.symlinks, copy.stats.symlinks);
    assert_eq!(walked.stats.specials, 1);
    // The walker does not stat files: a later name is counted as a file.
    assert_eq!(copy.stats.hardlinks, 1);
    assert_eq!(walked.stats.files, copy.stats.files + copy.stats.hardlinks);
    assert_eq!(walked.stats.bytes, 0);
    assert!(walked.stats.workers.is_empty(), "the walkers discard");

    // Directory metadata is the workers' work in a copy: walk-only
    // leaves directories as made.
    let mode =
        |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&d.path().join("walked/ro")), 0o700);
    assert_eq!(mode(&d.path().join("copy/ro")), 0o555);
}

#[test]
fn walk_only_of_a_single_file_writes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("one");
    write(&src, b"data");
    let dst = d.path().join("out");
    let r = Plan::new(&src, &dst).walk_only(true).run().unwrap();
    assert_eq!(r.stats.files, 1);
    assert_eq!(r.stats.bytes, 0);
    assert!(fs::symlink_metadata(&dst).is_err(), "nothing written");
}
