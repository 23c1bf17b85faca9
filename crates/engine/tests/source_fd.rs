//! The source is resolved once and then read only through descriptors:
//! a directory of the source path (or the root the source is held
//! beneath) exchanged for a symlink to somewhere else, while runs go on,
//! never makes a run read from there. Roots handed over already open
//! ([`Root::from_fd`], [`Root::open_no_symlinks`]) are used as they are,
//! never reopened by path. Plain runs (no root) keep their meaning for
//! every spelling of a source.

// renameat2 and /proc are Linux's.
#![cfg(target_os = "linux")]

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use zinstall_engine::{EntryKind, Error, Listener, Plan, Tunables};

/// Bytes only the files outside the root hold.
const MARKER: &[u8] = b"OUTSIDE-THE-ROOT-7f3a9c";
/// What the files inside the root hold.
const INSIDE: &[u8] = b"inside";

/// A race must see at least this many exchanges...
const MIN_SWAPS: u64 = 2000;
/// ...and this many runs, unless this much time has passed.
const MIN_RUNS: usize = 3000;
const RACE_TIME: Duration = Duration::from_secs(12);

fn write(path: &Path, data: &[u8]) {
    if let Some(p) = path.parent() {
        fs::create_dir_all(p).unwrap();
    }
    fs::write(path, data).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

fn tunables() -> Tunables {
    Tunables {
        copy_threads: 1,
        copy_batch: 4,
        ..Tunables::default()
    }
}

/// A thread exchanging two names until stopped.
struct Swapper {
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
    handle: Option<JoinHandle<()>>,
}

impl Swapper {
    fn start(a: PathBuf, b: PathBuf) -> Swapper {
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let (s, n) = (Arc::clone(&stop), Arc::clone(&swaps));
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                assert!(
                    zinstall_testkit::exchange(&a, &b),
                    "exchange {}",
                    a.display()
                );
                n.fetch_add(1, Ordering::Relaxed);
                // A moment in each state, so that lookups get through
                // (some runs copy) as often as they meet the symlink.
                std::thread::sleep(Duration::from_micros(20));
            }
        });
        Swapper {
            stop,
            swaps,
            handle: Some(handle),
        }
    }

    fn swaps(&self) -> u64 {
        self.swaps.load(Ordering::Relaxed)
    }

    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().unwrap();
        }
        self.swaps()
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The source paths a run listed.
#[derive(Debug, Default)]
struct Names(Mutex<Vec<PathBuf>>);

impl Listener for Names {
    fn entry(&self, src: &Path, _dst: &Path, _kind: EntryKind) {
        self.0.lock().unwrap().push(src.to_path_buf());
    }
}

/// Fails if anything under `top` (not following symlinks) holds the
/// marker or bears an outside-only name.
fn assert_clean(top: &Path) {
    let Ok(md) = fs::symlink_metadata(top) else {
        return;
    };
    if md.is_file() {
        let data = fs::read(top).unwrap();
        assert!(
            !data.windows(MARKER.len()).any(|w| w == MARKER),
            "{} holds bytes from outside the root",
            top.display()
        );
        return;
    }
    if !md.is_dir() {
        return;
    }
    for e in fs::read_dir(top).unwrap() {
        let e = e.unwrap();
        assert_ne!(
            e.file_name(),
            "secret",
            "{} came from outside the root",
            e.path().display()
        );
        assert_clean(&e.path());
    }
}

/// The outcome of one raced run: a copy of what is inside, or an error
/// about the swapped directory.
fn check_raced_failure(f: &zinstall_engine::Failure) {
    for e in &f.errors {
        assert!(
            matches!(e, Error::Beneath { .. } | Error::Io { .. }),
            "unexpected error in a raced run: {e}"
        );
    }
}

/// Copies `src` (beneath `root`, whose `a` is exchanged with the
/// symlink `s` pointing outside) again and again; `verify` checks each
/// finished destination.
fn race(
    root: &Path,
    src: &Path,
    dry_check: impl Fn(&zinstall_engine::Report, &Names),
) {
    let racer = Swapper::start(root.join("a"), root.join("s"));
    let t0 = Instant::now();
    let (mut runs, mut ok) = (0usize, 0usize);
    while (racer.swaps() < MIN_SWAPS || runs < MIN_RUNS)
        && t0.elapsed() < RACE_TIME
    {
        let dst = root.join(format!("out/{runs}"));
        let names = Arc::new(Names::default());
        let dry = runs % 4 == 3;
        let r = Plan::new(src, &dst)
            .within(root)
            .source_within(root)
            .tunables(tunables())
            .listener(Arc::clone(&names) as Arc<dyn Listener>)
            .dry_run(dry)
            .run();
        match &r {
            Ok(report) => {
                ok += 1;
                if dry {
                    dry_check(report, &names);
                }
            }
            Err(f) => check_raced_failure(f),
        }
        for n in names.0.lock().unwrap().iter() {
            assert_ne!(
                n.file_name().unwrap_or_default(),
                "secret",
                "a run listed {} from outside the root",
                n.display()
            );
        }
        assert_clean(&dst);
        let _ = fs::remove_dir_all(&dst);
        let _ = fs::remove_file(&dst);
        runs += 1;
    }
    let swaps = racer.stop();
    let took = t0.elapsed();
    eprintln!("{runs} runs ({ok} finished), {swaps} exchanges in {took:?}");
    assert!(swaps >= MIN_SWAPS, "only {swaps} exchanges in {took:?}");
    assert!(took <= Duration::from_secs(60), "took {took:?}");
    assert!(ok > 0, "no run of {runs} finished");
}

/// `root/a` (the source's directory) and `root/s` (a symlink to
/// `outside`, which holds the same names with the marker, and more).
fn raced_layout(d: &Path) -> PathBuf {
    let root = d.join("root");
    let outside = d.join("outside");
    write(&root.join("a/src/one"), INSIDE);
    write(&root.join("a/src/sub/two"), INSIDE);
    write(&root.join("a/file"), INSIDE);
    write(&outside.join("src/one"), MARKER);
    write(&outside.join("src/secret"), MARKER);
    write(&outside.join("src/sub/two"), MARKER);
    write(&outside.join("file"), &MARKER.repeat(100));
    symlink(&outside, root.join("s")).unwrap();
    fs::create_dir(root.join("out")).unwrap();
    root
}

/// A directory source whose parent is exchanged with a symlink to
/// outside the root while runs copy it: every copy is of the inside
/// tree, or the run fails; no byte from outside arrives.
#[test]
fn directory_source_is_read_beneath_the_root_while_its_parent_is_swapped() {
    let d = tempfile::tempdir().unwrap();
    let root = raced_layout(d.path());
    race(&root, &root.join("a/src"), |report, names| {
        assert_eq!(report.stats.files, 2, "{:?}", names.0.lock().unwrap());
    });
}

/// A single-file source, likewise: its bytes come from inside the root.
#[test]
fn file_source_is_read_beneath_the_root_while_its_parent_is_swapped() {
    let d = tempfile::tempdir().unwrap();
    let root = raced_layout(d.path());
    race(&root, &root.join("a/file"), |report, _| {
        assert_eq!(report.stats.bytes, INSIDE.len() as u64);
    });
}

/// The root itself, opened once with every component checked and handed
/// to the plan, is renamed away and its path made a symlink to outside:
/// the run reads the directory that was opened, through its descriptor.
#[test]
fn an_open_source_root_is_read_after_its_path_is_swapped() {
    let d = tempfile::tempdir().unwrap();
    let base = d.path().canonicalize().unwrap();
    let parent = base.join("user");
    let root = parent.join("grant");
    let outside = base.join("outside");
    write(&root.join("src/one"), INSIDE);
    write(&root.join("file"), INSIDE);
    write(&outside.join("src/one"), MARKER);
    write(&outside.join("src/secret"), MARKER);
    write(&outside.join("file"), MARKER);
    let dst_parent = base.join("dst-user");
    let dst_root = dst_parent.join("grant");
    fs::create_dir_all(&dst_root).unwrap();
    let dst_outside = base.join("dst-outside");
    fs::create_dir(&dst_outside).unwrap();

    let src_root =
        zinstall_engine::beneath::Root::open_no_symlinks(&root).unwrap();
    let into =
        zinstall_engine::beneath::Root::open_no_symlinks(&dst_root).unwrap();
    // Both parents are someone else's: the roots' paths now lead out.
    fs::rename(&root, parent.join("grant.real")).unwrap();
    symlink(&outside, &root).unwrap();
    fs::rename(&dst_root, dst_parent.join("grant.real")).unwrap();
    symlink(&dst_outside, &dst_root).unwrap();

    let r = Plan::new(root.join("src"), dst_root.join("tree"))
        .source_within_root(src_root.clone())
        .within_root(into.clone())
        .run()
        .unwrap();
    assert_eq!(r.stats.files, 1);
    let r = Plan::new(root.join("file"), dst_root.join("file"))
        .source_within_root(src_root.clone())
        .within_root(into.clone())
        .run()
        .unwrap();
    assert_eq!(r.stats.bytes, INSIDE.len() as u64);
    let names = Arc::new(Names::default());
    let r = Plan::new(root.join("src"), base.join("dry"))
        .source_within_root(src_root)
        .listener(Arc::clone(&names) as Arc<dyn Listener>)
        .dry_run(true)
        .run()
        .unwrap();
    assert_eq!(r.stats.files, 1, "{:?}", names.0.lock().unwrap());

    let landed = dst_parent.join("grant.real");
    assert_eq!(fs::read(landed.join("tree/one")).unwrap(), INSIDE);
    assert_eq!(fs::read(landed.join("file")).unwrap(), INSIDE);
    assert_clean(&landed);
    assert_eq!(fs::read_dir(&dst_outside).unwrap().count(), 0);
}

/// A symlink in any component, the last included, is refused and named;
/// a path of plain directories opens.
#[test]
fn open_no_symlinks_refuses_a_symlink_anywhere_and_names_it() {
    let d = tempfile::tempdir().unwrap();
    let base = d.path().canonicalize().unwrap();
    fs::create_dir_all(base.join("real/dir")).unwrap();
    symlink(base.join("real"), base.join("link")).unwrap();
    symlink(base.join("real/dir"), base.join("real/dirlink")).unwrap();
    for (path, at) in [
        (base.join("link/dir"), base.join("link")),
        (base.join("real/dirlink"), base.join("real/dirlink")),
    ] {
        match zinstall_engine::beneath::Root::open_no_symlinks(&path) {
            Err(Error::Beneath {
                at: a,
                met: zinstall_engine::Met::Symlink,
                ..
            }) => assert_eq!(a, at, "{}", path.display()),
            other => panic!("{}: {other:?}", path.display()),
        }
    }
    let clean = base.join("real/dir");
    let root =
        zinstall_engine::beneath::Root::open_no_symlinks(&clean).unwrap();
    assert_eq!(root.path(), clean);
    assert!(
        zinstall_engine::beneath::Root::open_no_symlinks(Path::new("rel"))
            .is_err()
    );
}

/// A descriptor of a file is no root; one of a directory is.
#[test]
fn from_fd_refuses_what_is_not_a_directory() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("file");
    write(&file, b"x");
    let fd = std::os::fd::OwnedFd::from(fs::File::open(&file).unwrap());
    match zinstall_engine::beneath::Root::from_fd(fd, &file) {
        Err(Error::Refused { path, .. }) => assert_eq!(path, file),
        other => panic!("{other:?}"),
    }
    let fd = std::os::fd::OwnedFd::from(fs::File::open(d.path()).unwrap());
    let root = zinstall_engine::beneath::Root::from_fd(fd, d.path()).unwrap();
    assert_eq!(root.path(), d.path());
}

/// Without a root, every spelling of a source copies what the caller
/// named: a file, a symlink (as a symlink), a directory, a relative
/// path, and a directory named with a trailing `/` or `/.` or through a
/// symlink with a trailing `/` (followed, as `cp -a` does).
#[test]
fn plain_sources_in_every_spelling() {
    // Beneath the working directory, to name it by a relative path
    // without changing the process's working directory.
    let d = tempfile::tempdir_in(".").unwrap();
    let rel = Path::new(d.path().file_name().unwrap());
    let base = d.path().canonicalize().unwrap();
    write(&base.join("tree/one"), INSIDE);
    write(&base.join("tree/sub/two"), INSIDE);
    write(&base.join("file"), INSIDE);
    symlink("tree", base.join("link")).unwrap();
    let out = |n: &str| base.join("out").join(n);
    fs::create_dir(base.join("out")).unwrap();

    Plan::new(base.join("file"), out("file")).run().unwrap();
    assert_eq!(fs::read(out("file")).unwrap(), INSIDE);

    let r = Plan::new(base.join("link"), out("link")).run().unwrap();
    assert_eq!(r.stats.symlinks, 1);
    assert_eq!(fs::read_link(out("link")).unwrap(), Path::new("tree"));

    for (n, src) in [
        ("dir", base.join("tree")),
        ("relative", rel.join("tree")),
        ("relative-file", rel.join("file")),
        (
            "slash",
            PathBuf::from(format!("{}/", base.join("tree").display())),
        ),
        ("dot", base.join("tree/.")),
        ("up", base.join("tree/sub/..")),
        (
            "link-slash",
            PathBuf::from(format!("{}/", base.join("link").display())),
        ),
    ] {
        let r = Plan::new(&src, out(n))
            .run()
            .unwrap_or_else(|f| panic!("{}: {f}", src.display()));
        if n == "relative-file" {
            assert_eq!(fs::read(out(n)).unwrap(), INSIDE);
            continue;
        }
        assert_eq!(r.stats.files, 2, "{}", src.display());
        assert_eq!(fs::read(out(n).join("sub/two")).unwrap(), INSIDE, "{n}");
    }
    // Into an existing directory, under the source's own name.
    fs::create_dir(out("into")).unwrap();
    Plan::new(rel.join("file"), out("into")).run().unwrap();
    assert_eq!(fs::read(out("into/file")).unwrap(), INSIDE);
    // Through a file as if a directory: the source's lookup fails, named.
    let f = Plan::new(base.join("file/x"), out("none"))
        .run()
        .unwrap_err();
    assert_eq!(f.first().unwrap().path(), base.join("file/x"));
}

/// Beneath a root, the source may be the root itself, and a source's
/// last component that is a symlink is copied as one, a trailing `/`
/// notwithstanding: nothing beneath a root is followed.
#[test]
fn sources_beneath_a_root_follow_nothing() {
    let d = tempfile::tempdir().unwrap();
    let base = d.path().canonicalize().unwrap();
    let root = base.join("root");
    let outside = base.join("outside");
    write(&root.join("tree/one"), INSIDE);
    write(&outside.join("secret"), MARKER);
    symlink(&outside, root.join("out-link")).unwrap();
    let r = Plan::new(&root, base.join("whole"))
        .source_within(&root)
        .run()
        .unwrap();
    assert_eq!(r.stats.files, 1);
    assert_eq!(r.stats.symlinks, 1);
    let slash = PathBuf::from(format!("{}/", root.join("out-link").display()));
    let r = Plan::new(&slash, base.join("l"))
        .source_within(&root)
        .run()
        .unwrap();
    assert_eq!(r.stats.symlinks, 1);
    assert_eq!(fs::read_link(base.join("l")).unwrap(), outside);
    // A symlink on the way is named.
    let f = Plan::new(root.join("out-link/secret"), base.join("s"))
        .source_within(&root)
        .run()
        .unwrap_err();
    match f.first().unwrap() {
        Error::Beneath { at, .. } => assert_eq!(at, &root.join("out-link")),
        e => panic!("{e}"),
    }
    assert!(!base.join("s").exists());
}
