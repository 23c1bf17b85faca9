//! The sweep, end to end on a tiny tree with the real binary: `zinstall
//! tune` and the benchmark's measuring and CSV. No timings are asserted.

use std::fs;
use std::process::Command;

use zinstall_tune::peers::Tool;
use zinstall_tune::report;
use zinstall_tune::sweep::{self, Bench, Grid};
use zinstall_tune::trees::{self, Shape};

#[test]
fn a_tiny_sweep_runs_and_writes_every_row() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("usr");
    trees::generate(Shape::Usr, &src, 0.02, false).unwrap();
    let grid = Grid {
        threads: vec![1, 2],
        batches: vec![1, 8],
        walkers: Vec::new(),
    };
    let mut tools = grid.tools();
    tools.push(Tool::Cp);
    tools.push(Tool::ZinstallSync);
    let zinstall = std::path::PathBuf::from(env!("CARGO_BIN_EXE_zinstall"));
    let mut lines = Vec::new();
    let mut log = |l: &str| lines.push(l.to_string());
    let mut b = Bench {
        src: &src,
        dst: d.path().join("dst"),
        zinstall: &zinstall,
        bench: &zinstall,
        runs: 2,
        cold: false,
        durable: true,
        log: &mut log,
    };
    let m = b.measure(&tools).unwrap();
    assert!(m.wrong.is_empty(), "{:?}", m.wrong);
    assert_eq!(m.samples.len(), 6);
    assert!(m.samples.iter().all(|s| s.times.len() == 2));
    // Each run also to the end of its flush: never sooner than the run.
    assert_eq!(m.durable.len(), 6);
    for (plain, durable) in m.samples.iter().zip(&m.durable) {
        assert_eq!(durable.tool, format!("{}; sync -f", plain.tool));
        assert_eq!(durable.times.len(), 2);
        for (p, d) in plain.times.iter().zip(&durable.times) {
            assert!(d >= p, "{}: {d:?} < {p:?}", durable.tool);
        }
    }
    assert!(m.samples.iter().any(|s| s.tool == "zinstall 8x128 --sync"));
    let csv = report::csv("usr", &m.samples);
    assert_eq!(csv.lines().count(), 1 + 6 * 2);
    assert!(
        csv.lines().any(|l| l.starts_with("usr,zinstall 2x8,1,")),
        "{csv}"
    );
    assert!(csv.lines().any(|l| l.starts_with("usr,cp -a,0,")), "{csv}");
    let (p, _) = sweep::best(&m.samples, &grid).unwrap();
    assert!(grid.threads.contains(&p.threads));
    assert!(grid.batches.contains(&p.batch));
    assert_eq!(p.walkers, None);
    assert_eq!(lines.len(), 12, "one line per timed run");
    assert!(
        lines.iter().all(|l| l.contains("with sync -f")),
        "{lines:?}"
    );
    assert!(!d.path().join("dst").exists(), "copies are removed");
}

#[test]
fn tune_reports_and_writes_the_defaults_file_keeping_comments() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("tree");
    trees::generate(Shape::Usr, &src, 0.02, false).unwrap();
    let defaults = d.path().join("zinstall");
    let shipped = include_str!("../../../../etc/default/zinstall");
    fs::write(&defaults, shipped).unwrap();
    let dest = d.path().join("dest");
    fs::create_dir(&dest).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .args([
            "tune",
            "--threads",
            "1,2",
            "--batch",
            "4,16",
            "--runs",
            "1",
            "--write",
            "--dest",
        ])
        .arg(&dest)
        .arg("--defaults")
        .arg(&defaults)
        .arg(&src)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("best: COPY_THREADS="), "{out}");
    assert!(out.contains("x cp -a"), "{out}");
    let text = fs::read_to_string(&defaults).unwrap();
    let f = zinstall_engine::DefaultsFile::parse(&defaults, text.as_bytes())
        .unwrap();
    let t = zinstall_engine::Tunables::from_defaults(&f).unwrap();
    assert!(
        [1, 2].contains(&t.copy_threads) && [4, 16].contains(&t.copy_batch)
    );
    let comments = |s: &str| s.lines().filter(|l| l.starts_with('#')).count();
    assert_eq!(comments(&text), comments(shipped));
    assert_eq!(
        fs::read_dir(&dest).unwrap().count(),
        0,
        "nothing left under --dest"
    );
}

/// `zinstall tune --walkers`: walkers swept beside threads and batch, a
/// row per point, the best written with its walkers.
#[test]
fn tune_sweeps_walkers_and_writes_them() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("tree");
    trees::generate(Shape::Usr, &src, 0.02, false).unwrap();
    let defaults = d.path().join("zinstall");
    fs::write(&defaults, include_str!("../../../../etc/default/zinstall"))
        .unwrap();
    let dest = d.path().join("dest");
    fs::create_dir(&dest).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .args(["tune", "--threads", "2", "--batch", "8"])
        .args(["--walkers", "1,3", "--runs", "1", "--write", "--dest"])
        .arg(&dest)
        .arg("--defaults")
        .arg(&defaults)
        .arg(&src)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for row in ["| zinstall 2x8 w1 |", "| zinstall 2x8 w3 |"] {
        assert!(out.contains(row), "{row}: {out}");
    }
    // One run a point: the best is one sample, and --write says so.
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("warning: one run per point"), "{err}");
    assert!(err.contains("written despite the warnings above"), "{err}");
    assert!(out.contains("best: COPY_THREADS=2 COPY_BATCH=8 COPY_WALKERS="));
    let text = fs::read_to_string(&defaults).unwrap();
    let f = zinstall_engine::DefaultsFile::parse(&defaults, text.as_bytes())
        .unwrap();
    let t = zinstall_engine::Tunables::from_defaults(&f).unwrap();
    assert!([1, 3].contains(&t.copy_walkers), "{text}");
    // An empty list is a usage error.
    let o = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .args(["tune", "--walkers", "0"])
        .arg(&src)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

/// `zinstall tune --statemap DIR`: a statemap and its drawing per grid
/// point, and a table of where the workers' time went.
#[test]
fn tune_records_a_statemap_per_point() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("tree");
    trees::generate(Shape::Usr, &src, 0.02, false).unwrap();
    let dest = d.path().join("dest");
    fs::create_dir(&dest).unwrap();
    let maps = d.path().join("maps");
    let o = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .args(["tune", "--threads", "1,2", "--batch", "8", "--runs", "1"])
        .arg("--dest")
        .arg(&dest)
        .arg("--statemap")
        .arg(&maps)
        .arg(&src)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("workers waiting for the walker"), "{out}");
    // As root with bpftrace, the scheduler's view too.
    let traced = zinstall_testkit::is_root()
        && std::env::var_os("PATH").is_some_and(|p| {
            std::env::split_paths(&p).any(|d| d.join("bpftrace").is_file())
        });
    for t in [1, 2] {
        let stem = format!("zinstall-{t}x8");
        let row = out
            .lines()
            .find(|l| l.starts_with(&format!("| {t} x 8 |")))
            .unwrap_or_else(|| panic!("no row for {t} x 8: {out}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert!(cells[3].ends_with('%'), "{row}");
        let json = maps.join(format!("{stem}.statemap.json"));
        let map =
            zinstall_statemap::parse(&fs::read(&json).unwrap()[..]).unwrap();
        let named = |p: &str| {
            map.entities().iter().filter(|e| e.starts_with(p)).count()
        };
        assert_eq!(named("worker-"), t, "{t} workers");
        assert_eq!(
            named("walker-"),
            zinstall_engine::Tunables::default().walkers(),
            "the default walkers"
        );
        assert!(maps.join(format!("{stem}.svg")).is_file());
        assert_eq!(
            maps.join(format!("{stem}.sched.json")).is_file(),
            traced,
            "{stem}"
        );
        if traced {
            assert!(cells[4].ends_with('%') && cells[5].ends_with('%'));
            assert!(maps.join(format!("{stem}.sched.svg")).is_file());
        }
    }
    assert!(maps.join("shares.md").is_file());
    assert_eq!(fs::read_dir(&dest).unwrap().count(), 0);
}

/// A sweep on a machine kept busy by other work warns that its best
/// point measures the load.
#[test]
fn tune_on_a_busy_machine_warns() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("tree");
    trees::generate(Shape::Usr, &src, 0.02, false).unwrap();
    let dest = d.path().join("dest");
    fs::create_dir(&dest).unwrap();
    // Every CPU spinning, in this process: not the sweep's.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let spinners: Vec<_> = (0..cpus)
        .map(|_| {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let o = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .args(["tune", "--threads", "1,2", "--batch", "8", "--runs", "3"])
        .arg("--dest")
        .arg(&dest)
        .arg(&src)
        .output();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for s in spinners {
        s.join().unwrap();
    }
    let o = o.unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("warning: other processes used")
            && err.contains("of the CPUs during the sweep"),
        "{err}"
    );
    assert!(!err.contains("one run per point"), "{err}");
}
