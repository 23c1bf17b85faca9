//! The descriptor budget, in the engine: a run never holds more of it
//! than it has, however small, and still finishes (nothing waits on what
//! waits on it), whatever the tree's shape: wide, deep with a subdirectory
//! beside every level (its pinned directories let go of and reopened
//! beneath their ancestors), hard links across directories (their first
//! directory reopened for the later names), and runs sharing one pool.

use std::fs;
use std::path::Path;

use zinstall_engine::{Descriptors, Plan, Pool, Tunables};
use zinstall_verify::{CompareOptions, compare};

use zinstall_testkit::Tmp;

fn tunables(walkers: usize) -> Tunables {
    Tunables {
        copy_threads: 2,
        copy_walkers: walkers,
        copy_batch: 8,
        ..Tunables::default()
    }
}

/// Copies `src` to `dst` on a pool of 2 workers whose budget is `total`
/// descriptors; checks the copy and the high-water mark.
fn copy_within(src: &Path, dst: &Path, walkers: usize, total: usize) {
    let pool = Pool::new(2)
        .unwrap()
        .with_walkers(walkers)
        .with_descriptors(Descriptors::with_total(1024, total));
    let r = Plan::new(src, dst)
        .tunables(tunables(walkers))
        .pool(pool.clone())
        .run()
        .unwrap_or_else(|f| panic!("{:?}", f.errors));
    assert_eq!(r.stats.fd_budget, total as u64);
    assert!(r.stats.fd_peak > 0, "the walk took no descriptors");
    assert!(
        r.stats.fd_peak <= r.stats.fd_budget,
        "{} descriptors held, budget {}",
        r.stats.fd_peak,
        r.stats.fd_budget
    );
    assert_eq!(pool.descriptors().held(), 0, "every slot given back");
    let c = compare(src, dst, &CompareOptions::default()).unwrap();
    assert!(c.is_identical(), "{c}");
}

#[test]
fn a_wide_tree_is_copied_within_a_budget_of_ten() {
    let d = Tmp::new();
    let src = d.path().join("src");
    for i in 0..2_000 {
        let dir = src.join(format!("d{i}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..3 {
            fs::write(dir.join(format!("f{f}")), format!("{i}/{f}")).unwrap();
        }
    }
    copy_within(&src, &d.path().join("dst"), 4, 10);
}

/// Every level of a chain has a second subdirectory, queued while the
/// walk goes down the first: each level is pinned open for it, more than
/// the budget allows, so the walk lets go of pins and reopens them.
#[test]
fn a_deep_tree_with_siblings_is_copied_within_a_budget_of_ten() {
    let d = Tmp::new();
    let src = d.path().join("src");
    let mut cur = src.clone();
    for i in 0..300 {
        fs::create_dir_all(cur.join("side")).unwrap();
        fs::write(cur.join("side/f"), format!("{i}")).unwrap();
        fs::write(cur.join("f"), format!("{i}")).unwrap();
        cur = cur.join("d");
    }
    fs::create_dir_all(&cur).unwrap();
    copy_within(&src, &d.path().join("dst"), 1, 10);
    copy_within(&src, &d.path().join("dst4"), 4, 18);
}

/// Hard links whose names are far apart: the first name's directory is
/// not held for the later ones.
#[test]
fn hard_links_across_directories_are_kept_within_a_budget() {
    let d = Tmp::new();
    let src = d.path().join("src");
    for i in 0..200 {
        let a = src.join(format!("a{i}"));
        let b = src.join(format!("z/b{i}"));
        fs::create_dir_all(&a).unwrap();
        fs::create_dir_all(&b).unwrap();
        fs::write(a.join("f"), format!("{i}")).unwrap();
        fs::hard_link(a.join("f"), b.join("f")).unwrap();
    }
    copy_within(&src, &d.path().join("dst"), 2, 10);
}

/// Two runs at once on one pool share its budget.
#[test]
fn runs_on_one_pool_share_its_budget() {
    let d = Tmp::new();
    let pool = Pool::new(2)
        .unwrap()
        .with_walkers(4)
        .with_descriptors(Descriptors::with_total(1024, 12));
    for t in ["a", "b"] {
        for i in 0..500 {
            let dir = d.path().join(t).join(format!("d{i}"));
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("f"), format!("{i}")).unwrap();
        }
    }
    std::thread::scope(|s| {
        for t in ["a", "b"] {
            let (pool, d) = (pool.clone(), &d);
            s.spawn(move || {
                let src = d.path().join(t);
                let dst = d.path().join(format!("{t}-copy"));
                let r = Plan::new(&src, &dst)
                    .tunables(tunables(2))
                    .pool(pool)
                    .run()
                    .unwrap_or_else(|f| panic!("{:?}", f.errors));
                assert!(r.stats.fd_peak <= 12);
                let c =
                    compare(&src, &dst, &CompareOptions::default()).unwrap();
                assert!(c.is_identical(), "{c}");
            });
        }
    });
    assert!(pool.descriptors().peak() <= 12);
    assert_eq!(pool.descriptors().held(), 0);
}
