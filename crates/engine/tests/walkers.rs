//! Several walker threads: a copy made by 1, 2, 4 or 16 walkers is the
//! source, whatever order they find names in; the first error or a
//! cancel stops every one of them; a dry run walks the same way; a pool
//! lends walkers from its budget.

// Linux only: the fidelity tree is made with Linux's xattr namespaces and
// POSIX ACLs (see fidelity.rs).
#![cfg(target_os = "linux")]

use crate::common;
use zinstall_testkit::fsops;
use zinstall_testkit::sentinel;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::{build_fidelity_tree, is_root, set_times};
use fsops::{Racer, mkdir_deep, swap_for_symlink};
use sentinel::Sentinel;
use zinstall_engine::{
    Cancel, Error, Failure, Plan, Pool, Progress, Refusal, Report, Tunables,
};
use zinstall_testkit::Tmp;
use zinstall_verify::{self as verify, CompareOptions};

const WALKERS: [usize; 4] = [1, 2, 4, 16];

fn tunables(walkers: usize) -> Tunables {
    Tunables {
        copy_threads: 3,
        copy_walkers: walkers,
        copy_batch: 8,
        ..Tunables::default()
    }
}

fn copy(src: &Path, dst: &Path, walkers: usize) -> Report {
    Plan::new(src, dst)
        .tunables(tunables(walkers))
        .run()
        .unwrap_or_else(|f| {
            panic!("copy {} with {walkers} walkers:\n{f}", src.display())
        })
}

/// Panics listing every difference; `atime` off for trees others read.
fn assert_same(a: &Path, b: &Path, atime: bool, what: &str) {
    let opts = CompareOptions {
        sparse: true,
        atime,
        ..CompareOptions::default()
    };
    let c = verify::compare(a, b, &opts).unwrap();
    assert!(
        c.is_identical(),
        "{what}: {} and {} differ:\n{c}",
        a.display(),
        b.display()
    );
    assert!(c.entries_compared > 0);
}

/// Threads of this process whose name starts with `prefix`.
fn threads_named(prefix: &str) -> usize {
    fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|n| n.starts_with(prefix))
        .count()
}

fn write(p: &Path, data: &[u8]) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, data).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
}

/// `dirs` directories of `files` files each, every file with a second
/// name in the next directory (the last's in the first), so that the two
/// names of an inode are read by different walkers; returns the number
/// of later names.
fn linked_across(root: &Path, dirs: usize, files: usize) -> u64 {
    for d in 0..dirs {
        for f in 0..files {
            write(
                &root.join(format!("l{d}/f{f}")),
                format!("{d}.{f}").as_bytes(),
            );
        }
    }
    for d in 0..dirs {
        for f in 0..files {
            let next = (d + 1) % dirs;
            fs::hard_link(
                root.join(format!("l{d}/f{f}")),
                root.join(format!("l{next}/g{d}.{f}")),
            )
            .unwrap();
        }
    }
    (dirs * files) as u64
}

#[test]
fn the_fidelity_tree_is_copied_identically_by_any_number_of_walkers() {
    let d = Tmp::new();
    let src = d.path().join("src");
    build_fidelity_tree(&src);
    let later = linked_across(&src.join("across"), 40, 5);
    // Times of the directories just filled, which the copy must keep.
    for e in fs::read_dir(src.join("across")).unwrap() {
        set_times(&e.unwrap().path(), (1_500_000_000, 7), (1_400_000_000, 9));
    }
    set_times(&src.join("across"), (1_500_000_000, 7), (1_300_000_000, 1));
    for w in WALKERS {
        let dst = d.path().join(format!("dst-{w}"));
        let r = copy(&src, &dst, w);
        assert_same(&src, &dst, true, &format!("{w} walkers"));
        assert_eq!(r.stats.hardlinks, 3 + later, "{w} walkers");
        assert_eq!(r.stats.walkers.len(), w);
        let dirs: u64 = r.stats.walkers.iter().map(|x| x.dirs).sum();
        assert_eq!(dirs, r.stats.dirs, "each directory read once");
    }
}

/// Names, links and modes a hostile tree holds: every byte a name may
/// have, links aimed out of the tree and at themselves, restrictive and
/// special modes, every kind of entry, deep and wide directories.
fn hostile_tree(root: &Path) {
    let names = root.join("names");
    for n in [
        &b"new\nline"[..],
        b"tab\there",
        b"bad\xff\xfe",
        b"-rf",
        b" leading space",
        b"...",
        b"back\\slash",
        b"star*?[x]",
        b"\x01\x1b[2J",
    ] {
        write(&names.join(OsStr::from_bytes(n)), n);
        let dir = [n, b"-d"].concat();
        fs::create_dir_all(names.join(OsStr::from_bytes(&dir))).unwrap();
    }
    write(&names.join("x".repeat(255)), b"255");
    let links = root.join("links");
    fs::create_dir_all(&links).unwrap();
    for (name, target) in [
        ("abs", "/etc/passwd"),
        ("up", "../../../../../../../../etc"),
        ("dangling", "no/such/thing"),
        ("self", "self"),
        ("a", "b"),
        ("b", "a"),
        ("dir", "../names"),
        ("outdir", "/usr"),
    ] {
        symlink(target, links.join(name)).unwrap();
    }
    // Restrictive and special modes, directories filled first.
    for (p, mode) in [
        ("modes/ro", 0o555),
        ("modes/sticky", 0o1777),
        ("modes/private", 0o700),
    ] {
        write(&root.join(p).join("inside"), b"m");
        fs::set_permissions(root.join(p), fs::Permissions::from_mode(mode))
            .unwrap();
    }
    for (p, mode) in [("modes/setuid", 0o4755), ("modes/setgid", 0o2711)] {
        write(&root.join(p), b"#!/bin/sh\n");
        fs::set_permissions(root.join(p), fs::Permissions::from_mode(mode))
            .unwrap();
    }
    // A FIFO and a socket, each with a second name elsewhere.
    let special = root.join("special");
    fs::create_dir_all(&special).unwrap();
    let fifo = special.join("fifo");
    zinstall_testkit::mkfifo(&fifo, 0o640);
    fs::hard_link(&fifo, root.join("names/fifo-too")).unwrap();
    drop(std::os::unix::net::UnixListener::bind(special.join("sock")).unwrap());
    // A deep chain, and a directory of many small directories.
    let mut deep = root.join("deep");
    for i in 0..200 {
        deep.push(format!("{i}"));
    }
    write(&deep.join("bottom"), b"deep");
    for i in 0..300 {
        write(
            &root.join(format!("wide/w{i}/f")),
            format!("{i}").as_bytes(),
        );
    }
    if is_root() {
        // Only root reads what no one may.
        write(&root.join("modes/none"), b"none");
        fs::set_permissions(
            root.join("modes/none"),
            fs::Permissions::from_mode(0o000),
        )
        .unwrap();
        let closed = root.join("modes/closed");
        write(&closed.join("secret"), b"closed");
        fs::set_permissions(&closed, fs::Permissions::from_mode(0o000))
            .unwrap();
        std::os::unix::fs::lchown(links.join("abs"), Some(4321), Some(8765))
            .unwrap();
        std::os::unix::fs::chown(
            root.join("wide/w7"),
            Some(65534),
            Some(65534),
        )
        .unwrap();
    } else {
        zinstall_testkit::unmet(
            "root, for the unreadable modes and owned links",
        );
    }
    // Old times on every directory, deepest first.
    let mut dirs = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        if fs::symlink_metadata(&p).unwrap().is_dir() {
            dirs.push(p.clone());
            if let Ok(rd) = fs::read_dir(&p) {
                stack.extend(rd.map(|e| e.unwrap().path()));
            }
        }
    }
    for (i, p) in dirs.iter().rev().enumerate() {
        set_times(p, (1_600_000_000, 3), (1_500_000_000 + i as i64, 777));
    }
}

#[test]
fn a_hostile_tree_is_copied_identically_by_any_number_of_walkers() {
    let d = Tmp::new();
    let src = d.path().join("src");
    hostile_tree(&src);
    for w in WALKERS {
        let dst = d.path().join(format!("dst-{w}"));
        let r = copy(&src, &dst, w);
        assert_same(&src, &dst, true, &format!("{w} walkers"));
        assert_eq!(r.stats.hardlinks, 1, "{w} walkers: the FIFO's second name");
        // Links aimed out were copied as links, never followed.
        let out = dst.join("links/outdir");
        assert!(fs::symlink_metadata(&out).unwrap().file_type().is_symlink());
        assert_eq!(fs::read_link(&out).unwrap(), Path::new("/usr"));
    }
}

/// While 16 walkers copy, a racing thread swaps source directories for
/// symlinks to a sentinel outside the tree: the copy may fail (a
/// directory changed type) but never reads through the link, and the
/// sentinel is untouched.
#[test]
fn source_directories_swapped_for_symlinks_are_never_followed() {
    let d = Tmp::new();
    let outside = d.path().join("outside");
    let s = Sentinel::dir(&outside);
    let mut raced = 0;
    for run in 0..20 {
        let src = d.path().join(format!("src{run}"));
        for i in 0..60 {
            for f in 0..20 {
                write(&src.join(format!("d{i:02}/e/f{f}")), b"x");
            }
        }
        let dirs: Vec<PathBuf> =
            (0..60).map(|i| src.join(format!("d{i:02}/e"))).collect();
        let target = outside.clone();
        let mut n = 0u64;
        let racer = Racer::start(move || {
            let mut swapped = 0;
            for dir in &dirs {
                n += 1;
                swapped += u64::from(swap_for_symlink(dir, &target, n));
            }
            swapped
        });
        let dst = d.path().join(format!("dst{run}"));
        let r = Plan::new(&src, &dst).tunables(tunables(16)).run();
        raced += racer.stop();
        if let Err(f) = &r {
            assert!(
                f.errors.iter().all(|e| matches!(
                    e,
                    Error::Refused {
                        reason: Refusal::ChangedType,
                        ..
                    } | Error::Io { .. }
                )),
                "{f}"
            );
        }
        // Nothing of the sentinel was read into the copy.
        let mut stack = vec![dst.clone()];
        while let Some(p) = stack.pop() {
            let Ok(rd) = fs::read_dir(&p) else { continue };
            for e in rd {
                let e = e.unwrap();
                assert!(
                    !["keep", "inner", "hostname"]
                        .contains(&e.file_name().to_str().unwrap_or("")),
                    "{} came through a swapped link",
                    e.path().display()
                );
                if e.file_type().unwrap().is_dir() {
                    stack.push(e.path());
                }
            }
        }
        s.assert_unchanged(&format!("run {run}"));
        if raced > 100 {
            break;
        }
    }
    assert!(raced > 0, "the race never swapped a directory");
}

/// /usr/share with 1, 2, 4 and 16 walkers: a real tree of tens of
/// thousands of entries. Access times are not compared: other processes
/// read /usr/share meanwhile.
#[test]
fn usr_share_is_copied_identically_by_any_number_of_walkers() {
    let src = Path::new("/usr/share");
    if !zinstall_testkit::require(src.is_dir(), "/usr/share") {
        return;
    }
    // A journaled ext4 of its own: the root filesystem here has no
    // journal, and ext4 without one makes creating files after
    // deleting many very slow (see bench/README.md).
    let Some(fs) = zinstall_testkit::LoopFs::require(
        zinstall_testkit::Kind::Ext4,
        3 << 30,
    ) else {
        return;
    };
    for w in WALKERS {
        let dst = fs.path().join(format!("share-{w}"));
        let r = Plan::new(src, &dst)
            .tunables(Tunables {
                copy_walkers: w,
                ..Tunables::default()
            })
            .run()
            .unwrap_or_else(|f| panic!("{w} walkers: {f}"));
        assert_same(src, &dst, false, &format!("{w} walkers"));
        assert_eq!(r.stats.walkers.len(), w);
        fs::remove_dir_all(&dst).unwrap();
    }
}

/// Raises the flag once `after` entries are done.
#[derive(Debug)]
struct CancelAfter {
    done: AtomicU64,
    after: u64,
    cancel: Cancel,
}

impl Progress for CancelAfter {
    fn advance(&self, entries: u64, _bytes: u64) {
        if self.done.fetch_add(entries, Ordering::Relaxed) + entries
            >= self.after
        {
            self.cancel.cancel();
        }
    }
}

/// Directories and files under `root`, counted without following links.
fn entries_under(root: &Path) -> u64 {
    let mut n = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            n += 1;
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            }
        }
    }
    n
}

/// 64 top directories of 40 directories of 5 files.
fn big_tree(root: &Path) -> u64 {
    for t in 0..64 {
        for s in 0..40 {
            for f in 0..5 {
                write(&root.join(format!("t{t}/s{s}/f{f}")), b"data");
            }
        }
    }
    entries_under(root)
}

/// A failure is reported, no walker or worker thread outlives the run,
/// and far less than the tree was made.
fn stopped_early(f: &Failure, dst: &Path, total: u64) {
    assert_eq!(threads_named("walk-"), 0, "a walker outlived the run");
    assert_eq!(threads_named("copy-"), 0, "a worker outlived the run");
    let made = entries_under(dst);
    assert!(
        made < total / 2,
        "{made} of {total} entries made after: {f}"
    );
}

#[test]
fn the_first_error_stops_every_walker() {
    // It counts this process's threads: no other test may run in it.
    if !zinstall_testkit::alone() {
        return;
    }
    let d = Tmp::new();
    let src = d.path().join("src");
    let total = big_tree(&src);
    for w in [2, 16] {
        // Every top directory's first subdirectory is blocked by a file
        // at the destination: the first walker to reach one fails.
        let dst = d.path().join(format!("dst-{w}"));
        for t in 0..64 {
            write(&dst.join(format!("t{t}/s0")), b"in the way");
        }
        let f = Plan::new(&src, &dst)
            .tunables(tunables(w))
            .merge(true)
            .run()
            .unwrap_err();
        let first = f.first().unwrap();
        assert!(
            matches!(first, Error::Refused { reason: Refusal::Conflict, path }
                if path.file_name() == Some(OsStr::new("s0"))),
            "{w} walkers: first error {first}"
        );
        // Each walker records at most the error it met before it saw the
        // run stop.
        assert!(f.errors.len() <= w, "{w} walkers: {f}");
        stopped_early(&f, &dst, total + 64);
    }
}

#[test]
fn a_cancel_stops_every_walker() {
    // It counts this process's threads: no other test may run in it.
    if !zinstall_testkit::alone() {
        return;
    }
    let d = Tmp::new();
    let src = d.path().join("src");
    let total = big_tree(&src);
    for w in [2, 16] {
        let cancel = Cancel::new();
        let dst = d.path().join(format!("dst-{w}"));
        let f = Plan::new(&src, &dst)
            .tunables(tunables(w))
            .cancel(cancel.clone())
            .progress(Arc::new(CancelAfter {
                done: AtomicU64::new(0),
                after: 200,
                cancel,
            }))
            .run()
            .unwrap_err();
        assert!(
            matches!(f.first(), Some(Error::Cancelled { .. })),
            "{w} walkers: {f}"
        );
        stopped_early(&f, &dst, total);
    }
}

/// A dry run walks with the same walkers and counts what the copy does.
#[test]
fn a_dry_run_with_walkers_counts_what_the_copy_does() {
    let d = Tmp::new();
    let src = d.path().join("src");
    hostile_tree(&src);
    linked_across(&src.join("across"), 20, 4);
    let dst = d.path().join("dst");
    let done = copy(&src, &dst, 4).stats;
    for w in WALKERS {
        let dry = d.path().join(format!("dry-{w}"));
        let r = Plan::new(&src, &dry)
            .tunables(tunables(w))
            .dry_run(true)
            .run()
            .unwrap();
        let s = &r.stats;
        assert_eq!(
            (
                s.files,
                s.dirs,
                s.symlinks,
                s.hardlinks,
                s.specials,
                s.bytes
            ),
            (
                done.files,
                done.dirs,
                done.symlinks,
                done.hardlinks,
                done.specials,
                done.bytes
            ),
            "{w} walkers"
        );
        assert_eq!(s.walkers.len(), w);
        assert!(!dry.exists(), "a dry run made {}", dry.display());
    }
}

/// A pool lends its runs walkers from its budget: a run wanting more
/// gets the budget; a run finding it spent still walks, with one.
#[test]
fn a_pool_lends_walkers_from_its_budget() {
    let d = Tmp::new();
    let src = d.path().join("src");
    for i in 0..40 {
        write(&src.join(format!("d{i}/f")), b"f");
    }
    let pool = Pool::new(2).unwrap().with_walkers(3);
    assert_eq!(pool.walkers(), 3);
    let run = |dst: &str, want: usize| {
        Plan::new(&src, d.path().join(dst))
            .tunables(tunables(want))
            .pool(pool.clone())
            .run()
            .unwrap()
    };
    assert_eq!(run("a", 8).stats.walkers.len(), 3, "the whole budget");
    assert_eq!(run("b", 2).stats.walkers.len(), 2, "what it asked for");
    assert_same(&src, &d.path().join("a"), true, "pooled");
    // Each run gave back what it took.
    assert_eq!(run("c", 8).stats.walkers.len(), 3);
}

/// `find DIR -printf` of depth, type, mode and modification time of
/// every entry: find descends by descriptor, so it lists trees deeper
/// than a path can name.
fn listing(dir: &Path) -> String {
    let o = zinstall_testkit::tool("find")
        .arg(dir)
        .args(["-printf", "%d %y %m %T@ %s\\n"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// A chain deeper than a path can name is copied by 16 walkers, every
/// directory with its mode and time (set, after its contents, through a
/// descriptor reopened from the directory below it).
#[test]
fn a_chain_deeper_than_a_path_is_copied() {
    let d = Tmp::new();
    let src = d.path().join("src");
    fs::create_dir(&src).unwrap();
    mkdir_deep(&src, 5000, "d");
    let dst = d.path().join("dst");
    let r = copy(&src, &dst, 16);
    assert_eq!((r.stats.dirs, r.stats.files), (5001, 1));
    let (a, b) = (listing(&src), listing(&dst));
    assert_eq!(a.lines().count(), 5002);
    assert!(a == b, "the copy's listing differs");
}
