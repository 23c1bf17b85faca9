//! Runs sharing one worker pool: faithful copies and unpacks, never more
//! workers than the pool has, a small run not starved by a large one, and
//! runs acting as another user checked as that user.

// Linux only: the tree is made with Linux's xattr namespaces (user.*,
// trusted.*, security.capability) and POSIX ACLs (setfacl, setcap).
// illumos keeps extended attributes as attribute directories and ACLs as
// NFSv4 ACLs, which these fixtures do not make.
#![cfg(target_os = "linux")]

use crate::common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use zinstall_engine::unpack::{UnpackOptions, unpack};
use zinstall_engine::{Credentials, Error, Op, Plan, Pool, Tunables};

fn tree(root: &Path, dirs: usize, files: usize) {
    for d in 0..dirs {
        let dir = root.join(format!("d{d}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..files {
            fs::write(dir.join(format!("f{f}")), format!("{d}/{f}")).unwrap();
        }
    }
}

/// This process's threads whose name starts with `prefix`.
fn threads_named(prefix: &str) -> usize {
    fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|n| n.starts_with(prefix))
        .count()
}

fn tunables(threads: usize) -> Tunables {
    Tunables {
        copy_threads: threads,
        copy_batch: 16,
        ..Tunables::default()
    }
}

#[test]
fn concurrent_runs_on_one_pool_copy_faithfully_within_its_workers() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    common::build_fidelity_tree(&src);
    tree(&src.join("many"), 20, 50);
    // Named apart from the other tests' pools, which run meanwhile.
    let pool = Pool::named(2, "shared").unwrap();
    assert_eq!(pool.threads(), 2);
    let running = AtomicBool::new(true);
    let most = AtomicUsize::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            while running.load(Ordering::Relaxed) {
                most.fetch_max(threads_named("shared-"), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        let runs: Vec<_> = (0..6)
            .map(|i| {
                let (src, dst) = (&src, d.path().join(format!("dst{i}")));
                let pool = pool.clone();
                s.spawn(move || {
                    // Each run asks for 8 workers of its own; the pool's 2
                    // are all it gets.
                    Plan::new(src, &dst)
                        .tunables(tunables(8))
                        .pool(pool)
                        .run()
                        .map(|r| (dst, r))
                })
            })
            .collect();
        for r in runs {
            let (dst, report) =
                r.join().unwrap().unwrap_or_else(|f| panic!("{f}"));
            common::assert_same_tree(&src, &dst);
            assert!(report.stats.files > 1000, "{}", report.stats);
            // Only pool threads did jobs.
            assert!(report.stats.workers.len() <= 2);
        }
        running.store(false, Ordering::Relaxed);
    });
    let most = most.into_inner();
    assert!((1..=2).contains(&most), "{most} pool threads seen");
}

#[test]
fn a_small_run_behind_a_large_one_is_not_made_to_wait_for_it() {
    let d = tempfile::tempdir().unwrap();
    let big = d.path().join("big");
    tree(&big, 50, 100);
    let small = d.path().join("small");
    tree(&small, 2, 5);
    let pool = Pool::new(1).unwrap();
    let big_done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let b = s.spawn(|| {
            let r = Plan::new(&big, d.path().join("big-out"))
                .tunables(tunables(1))
                .pool(pool.clone())
                .run();
            big_done.store(true, Ordering::SeqCst);
            r
        });
        // Wait until the large run is under way on the only worker.
        while fs::read_dir(d.path().join("big-out")).map_or(0, |r| r.count())
            < 5
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        Plan::new(&small, d.path().join("small-out"))
            .tunables(tunables(1))
            .pool(pool.clone())
            .run()
            .unwrap();
        // The small run's batches went between the large run's.
        assert!(
            !big_done.load(Ordering::SeqCst),
            "the small run finished only after the large one"
        );
        b.join().unwrap().unwrap();
    });
    common::assert_same_tree(&small, &d.path().join("small-out"));
    common::assert_same_tree(&big, &d.path().join("big-out"));
}

#[test]
fn an_unpack_on_a_pool_matches_one_with_its_own_workers() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    tree(&src, 10, 30);
    fs::write(src.join("big"), zinstall_testkit::pseudo_random(3 << 20, 7))
        .unwrap();
    let archive = d.path().join("layer.tar");
    let mut b = tar::Builder::new(fs::File::create(&archive).unwrap());
    b.append_dir_all(".", &src).unwrap();
    b.finish().unwrap();
    drop(b);
    let pool = Pool::new(2).unwrap();
    for (name, pool) in [("own", None), ("pooled", Some(pool))] {
        let root = d.path().join(name);
        fs::create_dir(&root).unwrap();
        let opts = UnpackOptions {
            tunables: tunables(4),
            pool,
            ..UnpackOptions::default()
        };
        let report = unpack(&archive, &root, &opts).unwrap();
        assert_eq!(report.stats.files, 301, "{name}");
        for f in ["d3/f7", "d9/f29", "big"] {
            assert_eq!(
                fs::read(root.join(f)).unwrap(),
                fs::read(src.join(f)).unwrap(),
                "{name}: {f}"
            );
        }
    }
}

fn nobody() -> Credentials {
    Credentials {
        uid: 65534,
        gid: 65534,
        groups: vec![65534],
    }
}

#[test]
fn a_run_acting_as_a_user_cannot_read_what_that_user_cannot() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = tempfile::Builder::new().tempdir_in("/var/tmp").unwrap();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let src = d.path().join("src");
    tree(&src, 2, 3);
    let secret = src.join("d1/secret");
    fs::write(&secret, "root only").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    let out = d.path().join("out");
    fs::create_dir(&out).unwrap();
    std::os::unix::fs::chown(&out, Some(65534), Some(65534)).unwrap();
    let pool = Pool::new(2).unwrap();
    for pool in [None, Some(pool)] {
        let dst = out.join(if pool.is_some() { "pooled" } else { "own" });
        let mut plan = Plan::new(&src, &dst)
            .tunables(tunables(2))
            .acting_as(nobody());
        if let Some(p) = pool {
            plan = plan.pool(p);
        }
        let failure = plan.run().unwrap_err();
        assert!(
            failure.errors.iter().any(|e| matches!(e,
                Error::Io { op: Op::Open, path, .. } if path == &secret)
                && e.io_error().unwrap().raw_os_error() == Some(libc::EACCES)),
            "{failure}"
        );
        assert!(!dst.join("d1/secret").exists());
        // What was written is the user's, as if the user had copied it
        // (how much was written before the error stopped the walkers
        // depends on which of them read what first).
        let mut written = vec![dst.clone()];
        while let Some(p) = written.pop() {
            let md = fs::symlink_metadata(&p).unwrap();
            assert_eq!((md.uid(), md.gid()), (65534, 65534), "{p:?}");
            if md.is_dir() && fs::read_dir(&p).is_ok() {
                written.extend(
                    fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()),
                );
            }
        }
    }
    // This thread is root again: the secret reads.
    assert_eq!(fs::read_to_string(&secret).unwrap(), "root only");
    // A destination the user may not write is refused as the user.
    let f = Plan::new(src.join("d0"), d.path().join("not-theirs"))
        .acting_as(nobody())
        .run()
        .unwrap_err();
    assert!(
        f.first()
            .and_then(Error::io_error)
            .and_then(|e| e.raw_os_error())
            == Some(libc::EACCES),
        "{f}"
    );
}
