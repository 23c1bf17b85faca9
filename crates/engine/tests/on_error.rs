//! What a run does past a failed entry ([`OnError`]): going on as `cp -a`
//! does, or stopping as an install must.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use zinstall_engine::{Credentials, Error, OnError, Op, Plan, Pool, Tunables};
use zinstall_testkit::Tmp;

fn nobody() -> Credentials {
    Credentials {
        uid: 65534,
        gid: 65534,
        groups: vec![65534],
    }
}

fn write(path: &Path, data: &str, mode: u32) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, data).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// A tree that nobody can read only part of: a file and a directory
/// (with a file in it) are root's alone, in two different directories;
/// the rest is readable, in directories of unusual modes whose metadata
/// must still be applied.
fn tree(src: &Path) {
    write(&src.join("a/one"), "one", 0o644);
    write(&src.join("a/secret"), "root only", 0o600);
    write(&src.join("b/two"), "two", 0o644);
    write(&src.join("b/hidden/inner"), "in hidden", 0o644);
    fs::set_permissions(
        src.join("b/hidden"),
        fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    write(&src.join("c/three"), "three", 0o644);
    fs::set_permissions(src.join("c"), fs::Permissions::from_mode(0o705))
        .unwrap();
    fs::set_permissions(src.join("a"), fs::Permissions::from_mode(0o755))
        .unwrap();
}

/// A scratch directory nobody can reach, with an output directory
/// nobody owns.
fn scratch() -> (Tmp, std::path::PathBuf) {
    let d = Tmp::new();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let out = d.path().join("out");
    fs::create_dir(&out).unwrap();
    std::os::unix::fs::chown(&out, Some(65534), Some(65534)).unwrap();
    (d, out)
}

/// Several walkers: which of them meets a failure must not matter.
fn tunables() -> Tunables {
    Tunables {
        copy_threads: 2,
        copy_walkers: 4,
        copy_batch: 1,
        ..Tunables::default()
    }
}

#[test]
fn going_on_copies_everything_readable_and_names_every_failure() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let (d, out) = scratch();
    let src = d.path().join("src");
    tree(&src);
    for pooled in [false, true] {
        let dst = out.join(if pooled { "pooled" } else { "own" });
        let mut plan = Plan::new(&src, &dst)
            .tunables(tunables())
            .acting_as(nobody())
            .on_error(OnError::KeepGoing);
        if pooled {
            plan = plan.pool(Pool::new(2).unwrap());
        }
        let f = plan.run().unwrap_err();
        let mut failed: Vec<(&str, &Path, Option<i32>)> = f
            .errors
            .iter()
            .map(|e| (e.op().unwrap().as_str(), e.path(), e.raw_os_error()))
            .collect();
        failed.sort();
        let secret = src.join("a/secret");
        let hidden = src.join("b/hidden");
        assert_eq!(
            failed,
            [
                ("open", secret.as_path(), Some(libc::EACCES)),
                ("readdir", hidden.as_path(), Some(libc::EACCES)),
            ],
            "{f}"
        );
        // The path once, and the system's words: not walkdir's "IO error
        // for operation on" around the path a second time.
        let readdir = f.errors.iter().find(|e| e.op() == Some(Op::ReadDir));
        assert_eq!(
            readdir.unwrap().to_string(),
            format!(
                "readdir {}: Permission denied (os error 13)",
                hidden.display()
            )
        );
        assert_eq!(f.report.stats.files, 3, "{f}");
        for (name, data) in
            [("a/one", "one"), ("b/two", "two"), ("c/three", "three")]
        {
            assert_eq!(fs::read_to_string(dst.join(name)).unwrap(), data);
        }
        assert!(!dst.join("a/secret").exists());
        assert!(!dst.join("b/hidden/inner").exists());
        // Directories got their metadata although entries in them failed.
        for dir in ["a", "b", "c"] {
            let (s, t) = (
                fs::metadata(src.join(dir)).unwrap(),
                fs::metadata(dst.join(dir)).unwrap(),
            );
            assert_eq!(t.mode(), s.mode(), "{dir}");
            assert_eq!(
                (t.mtime(), t.mtime_nsec()),
                (s.mtime(), s.mtime_nsec()),
                "{dir}"
            );
        }
    }
}

#[test]
fn stopping_is_the_default_and_leaves_directories_unfinished() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let (d, out) = scratch();
    let src = d.path().join("src");
    // One directory whose only entry fails: stopping, its copy never
    // gets the source's mode (it stays the 0700 it was made with).
    write(&src.join("d/secret"), "root only", 0o600);
    fs::set_permissions(src.join("d"), fs::Permissions::from_mode(0o755))
        .unwrap();
    let dst = out.join("stop");
    let f = Plan::new(&src, &dst)
        .tunables(tunables())
        .acting_as(nobody())
        .run()
        .unwrap_err();
    assert!(
        matches!(f.errors.as_slice(),
            [Error::Io { op: Op::Open, path, .. }] if path == &src.join("d/secret")),
        "{f}"
    );
    let mode = fs::metadata(dst.join("d")).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o700);
    // Going on, the same tree's directory is finished.
    let dst = out.join("go-on");
    Plan::new(&src, &dst)
        .tunables(tunables())
        .acting_as(nobody())
        .on_error(OnError::KeepGoing)
        .run()
        .unwrap_err();
    let mode = fs::metadata(dst.join("d")).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o755);
}

#[test]
fn going_on_a_dry_run_names_every_failure_too() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let (d, out) = scratch();
    let src = d.path().join("src");
    tree(&src);
    let dst = out.join("dry");
    let f = Plan::new(&src, &dst)
        .tunables(tunables())
        .acting_as(nobody())
        .dry_run(true)
        .on_error(OnError::KeepGoing)
        .run()
        .unwrap_err();
    // A dry run opens each file as the copy does, so it meets the same
    // failures: the unreadable file as well as the unreadable directory.
    let mut failed: Vec<_> =
        f.errors.iter().map(|e| (e.op(), e.path())).collect();
    failed.sort_by_key(|(_, path)| path.to_path_buf());
    assert_eq!(
        failed,
        [
            (Some(Op::Open), src.join("a/secret").as_path()),
            (Some(Op::ReadDir), src.join("b/hidden").as_path()),
        ],
        "{f}"
    );
    assert_eq!(f.report.stats.files, 3, "{f}");
    assert!(!dst.exists());
}
