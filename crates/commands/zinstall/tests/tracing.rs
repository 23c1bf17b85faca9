//! Observability as a performance engineer uses it: the bpftrace statemap
//! script against a real copy, and the recorder through the CLI.

use zinstall_testkit::tools;

use std::fs;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use zinstall_statemap::{self as statemap, Summary};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

fn tree(root: &Path, files: usize) {
    for i in 0..files {
        let p = root.join(format!("d{}/e{}/f{i}", i % 13, i % 5));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, vec![(i % 251) as u8; 2000 + (i % 50) * 1000]).unwrap();
    }
}

/// bpftrace needs tracefs; mount it if it is missing (we are root).
fn tracefs_ready() -> bool {
    if Path::new("/sys/kernel/tracing/available_events").exists() {
        return true;
    }
    Command::new("mount")
        .args(["-t", "tracefs", "tracefs", "/sys/kernel/tracing"])
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `cmd` to completion, killing it after `limit`.
fn run_bounded(mut cmd: Command, limit: Duration) -> std::process::Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut out, mut err) =
        (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let o = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut b).map(|_| b)
    });
    let e = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut err, &mut b).map(|_| b)
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} took longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::process::Output {
        status,
        stdout: o.join().unwrap().unwrap(),
        stderr: e.join().unwrap().unwrap(),
    }
}

/// The documented pipeline, `zinstall trace -o F -- zinstall copy ...`,
/// on a copy of 3000 files: a valid statemap of every thread, named,
/// each row starting when its thread does, with nothing lost at the
/// default buffer sizes.
#[test]
fn bpftrace_statemap_of_a_real_copy() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let v = tools::tool("bpftrace").arg("--version").output().unwrap();
    assert!(v.status.success(), "bpftrace --version failed");
    assert!(tracefs_ready(), "no tracefs at /sys/kernel/tracing");
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    tree(&src, 3000);
    let json = d.path().join("copy trace.json");
    let zinstall = env!("CARGO_BIN_EXE_zinstall");
    let mut cmd = Command::new(zinstall);
    cmd.env("ZINSTALL_DEFAULTS", "/dev/null")
        .arg("trace")
        .arg("-o")
        .arg(&json)
        .args(["--", zinstall, "copy", "-q", "--threads", "2"])
        .args(["--walkers", "2"])
        .arg(&src)
        .arg(d.path().join("dst with space"));
    let out = run_bounded(cmd, Duration::from_secs(180));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "zinstall trace failed: {err}");
    assert!(!err.contains("Lost"), "events lost: {err}");
    assert!(!err.contains("lost"), "events lost: {err}");
    let c = zinstall_verify::compare(
        &src,
        &d.path().join("dst with space"),
        &zinstall_verify::CompareOptions::default(),
    )
    .unwrap();
    assert!(c.is_identical(), "the traced copy is not a copy: {c}");
    // zinstall statemap reads it and draws it.
    let svg = d.path().join("copy.svg");
    let o = Command::new(zinstall)
        .arg("statemap")
        .arg(&json)
        .arg("-o")
        .arg(&svg)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{table}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for row in ["copy-0", "copy-1", "walk-0", "walk-1", "zinstall"] {
        assert!(table.lines().any(|l| l.starts_with(row)), "{row}: {table}");
    }
    let map = statemap::parse(BufReader::new(fs::File::open(&json).unwrap()))
        .unwrap();
    let states: Vec<(&str, &str)> = map
        .meta
        .states
        .iter()
        .map(|s| (s.name.as_str(), s.color.as_str()))
        .collect();
    assert_eq!(states, zinstall_statemap::SCHED_STATES);
    // One row per worker, one per walker, and the main thread, by name.
    let mut entities = map.entities();
    entities.sort();
    assert_eq!(
        entities,
        ["copy-0", "copy-1", "walk-0", "walk-1", "zinstall"]
    );
    // No gap at the start: the main thread's row starts at zero, each
    // worker's where it was created.
    let first = |e: &str| map.data.iter().find(|d| d.entity == e).unwrap();
    assert_eq!(first("zinstall").time, 0);
    for w in ["copy-0", "copy-1", "walk-0", "walk-1"] {
        let created = map
            .events
            .iter()
            .find(|e| {
                e.event == "thread-create" && e.target.as_deref() == Some(w)
            })
            .unwrap_or_else(|| panic!("no thread-create of {w}"));
        assert_eq!(created.entity, "zinstall");
        assert_eq!(first(w).time, created.time, "{w}");
        assert_eq!(first(w).state, 2, "{w} is runnable when created");
    }
    assert!(map.events.iter().all(|e| e.event != "name"));
    let s = Summary::of(&map);
    for e in &s.entities {
        let total: f64 = (0..states.len()).map(|i| e.share(i)).sum();
        assert!((total - 1.0).abs() < 1e-9, "{}: {total}", e.name);
        // Each thread ran and made system calls; each worker ends dead.
        assert!(e.time_in[0] > 0 && e.time_in[1] > 0, "{}: {s}", e.name);
    }
    for w in ["copy-0", "copy-1", "walk-0", "walk-1"] {
        let last = map.data.iter().rev().find(|d| d.entity == w).unwrap();
        assert_eq!(last.state, 7, "{w} ends dead");
    }
    let doc = fs::read_to_string(&svg).unwrap();
    assert!(doc.contains("<title>copy-0: "), "hover titles");
}

/// A saved raw trace with bpftrace's messages in it: tidied into a valid
/// statemap, the messages on stderr, and lost events fail the command.
#[test]
fn trace_tidy_keeps_messages_out_of_the_data() {
    let d = tempfile::tempdir().unwrap();
    let raw = d.path().join("raw");
    fs::write(
        &raw,
        "{\"start\":[1,0],\"title\":\"t\",\"states\":{\"on-cpu\":{\"value\":0},\"off-cpu-waiting\":{\"value\":1}}}\n\
         {\"time\":\"20\",\"entity\":\"7\",\"state\":1}\n\
         Lost 12 events\n\
         {\"time\":\"10\",\"entity\":\"7\",\"state\":0}\n\
         {\"time\":\"25\",\"entity\":\"7\",\"event\":\"name\",\"target\":\"copy-0\"}\n",
    )
    .unwrap();
    let json = d.path().join("out.json");
    let out = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .args(["trace", "--tidy"])
        .arg(&raw)
        .arg("-o")
        .arg(&json)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("bpftrace: Lost 12 events"), "{err}");
    assert!(err.contains("lost 12 events"), "{err}");
    let text = fs::read_to_string(&json).unwrap();
    assert!(!text.contains("Lost"));
    let map = statemap::parse(text.as_bytes()).unwrap();
    assert_eq!(map.entities(), ["copy-0"]);
    assert_eq!(map.data[0].time, 10);
    // Nothing to trace is a usage error.
    let out = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .arg("trace")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Write errors fail `zinstall statemap`, the last buffered ones too.
#[test]
fn statemap_write_errors_fail() {
    if !zinstall_testkit::require(Path::new("/dev/full").exists(), "/dev/full")
    {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let json = d.path().join("m.json");
    fs::write(
        &json,
        "{\"start\":[1,0],\"title\":\"t\",\"states\":{\"a\":{\"value\":0}}}\n\
         {\"time\":\"0\",\"entity\":\"x\",\"state\":0}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .arg("statemap")
        .arg(&json)
        .args(["-o", "/dev/full"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("/dev/full"), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("wrote"));
}

#[test]
fn recorder_through_the_cli() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    tree(&src, 500);
    let json = d.path().join("copy.json");
    let st = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .args(["copy", "-q", "--threads", "3", "--statemap"])
        .arg(&json)
        .arg(&src)
        .arg(d.path().join("dst"))
        .status()
        .unwrap();
    assert!(st.success());
    let svg = d.path().join("copy.svg");
    let out = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .arg("statemap")
        .arg(&json)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for row in ["walker", "worker-0", "worker-1", "worker-2", "all"] {
        assert!(text.lines().any(|l| l.starts_with(row)), "{row}: {text}");
    }
    assert!(text.contains("pool utilization:"), "{text}");
    let doc = fs::read_to_string(&svg).unwrap();
    assert!(doc.starts_with("<svg"), "default output next to the input");
    // Not statemap data: the error names the line.
    fs::write(
        &json,
        "{\"start\":[1,0],\"title\":\"t\",\"states\":{}}\nxx\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .arg("statemap")
        .arg(&json)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains(&format!("{}:2:1: not JSON", json.display())),
        "{err}"
    );
}

/// The illumos and Linux scripts declare the same states in the same
/// order with the same colours, those of `zinstall_statemap::SCHED_STATES`,
/// so their maps compare row for row. (DTrace itself does not run here;
/// this checks the script's declarations.)
#[test]
fn dtrace_and_bpftrace_scripts_declare_the_same_states() {
    let d = fs::read_to_string(repo().join("dtrace/statemap.d")).unwrap();
    let bt = fs::read_to_string(repo().join("dtrace/statemap.bt")).unwrap();
    let from_d: Vec<(String, String)> = d
        .lines()
        .filter_map(|l| l.trim().strip_prefix("STATE_METADATA("))
        .map(|l| {
            let f: Vec<&str> = l.split('"').collect();
            (f[1].to_string(), f[3].to_string())
        })
        .collect();
    let from_bt: Vec<(String, String)> = bt
        .lines()
        .filter(|l| l.contains("{\\\"value\\\":"))
        .map(|l| {
            let f: Vec<&str> = l.split("\\\"").collect();
            (f[1].to_string(), f[7].to_string())
        })
        .collect();
    let want: Vec<(String, String)> = zinstall_statemap::SCHED_STATES
        .iter()
        .map(|(n, c)| (n.to_string(), c.to_string()))
        .collect();
    assert_eq!(from_d, want);
    assert_eq!(from_bt, want);
    // The D enum lists them in the same order as the metadata.
    let enum_names: Vec<String> = d
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("STATE_") && !l.starts_with("STATE_MAX"))
        .filter(|l| l.ends_with(',') || l.ends_with("= 0,"))
        .map(|l| {
            l.trim_end_matches(',')
                .split_whitespace()
                .next()
                .unwrap()
                .trim_start_matches("STATE_")
                .to_lowercase()
                .replace('_', "-")
        })
        .collect();
    let names: Vec<String> = want.into_iter().map(|(n, _)| n).collect();
    assert_eq!(enum_names, names);
}

/// Every probe the provider defines is compiled into both binaries (a
/// probe is in the ELF notes only where the code fires it), and nothing
/// else of ours is. Probes the code fires but the provider lacks cannot
/// exist: their macros are generated from the provider.
#[test]
fn every_defined_probe_is_fired_by_both_binaries() {
    let file =
        dtrace_parser::File::from_file(&repo().join("dtrace/zinstall.d"))
            .unwrap();
    let provider = &file.providers()[0];
    assert_eq!(provider.name, "zinstall");
    let mut defined: Vec<String> = provider
        .probes
        .iter()
        .map(|p| p.name.replace("__", "-"))
        .collect();
    defined.sort();
    assert_eq!(defined.len(), 14);
    tools::need("readelf");
    for bin in [env!("CARGO_BIN_EXE_zinstall"), env!("CARGO_BIN_EXE_brand")] {
        let out = tools::tool("readelf").args(["-n", bin]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let mut fired: Vec<String> = Vec::new();
        let mut lines = text.lines();
        while let Some(l) = lines.next() {
            if l.trim_start().starts_with("Provider: zinstall")
                && let Some(name) =
                    lines.next().and_then(|n| n.trim().strip_prefix("Name: "))
            {
                fired.push(name.to_string());
            }
        }
        fired.sort();
        fired.dedup();
        assert_eq!(fired, defined, "{bin}");
    }
}

/// bpftrace complains when it cannot raise RLIMIT_MEMLOCK itself; started
/// by `zinstall trace`, even under a small locked-memory limit, it has
/// nothing to complain about (the limit was raised for it) or the
/// complaint is noise on a kernel that charges BPF memory to the cgroup
/// and is not shown.
#[test]
fn trace_under_a_small_memlock_limit_prints_no_bpftrace_error() {
    if !zinstall_testkit::require_root() {
        return;
    }
    assert!(tracefs_ready(), "no tracefs at /sys/kernel/tracing");
    let d = tempfile::tempdir().unwrap();
    let json = d.path().join("true.json");
    let mut cmd = tools::tool("prlimit");
    cmd.arg("--memlock=8192:8192")
        .arg(env!("CARGO_BIN_EXE_zinstall"))
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .arg("trace")
        .arg("-o")
        .arg(&json)
        .args(["--", "true"]);
    let out = run_bounded(cmd, Duration::from_secs(120));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "zinstall trace failed: {err}");
    assert!(!err.contains("RLIMIT_MEMLOCK"), "{err}");
    assert!(json.exists(), "no statemap written: {err}");
}

/// No entity has two states at one time in any statemap zinstall writes:
/// the reference renderer (oxidecomputer/statemap) panics on such a
/// map ("RefCell already borrowed"), and probes on two CPUs of a busy
/// machine write them. A raw trace full of them, as bpftrace would give
/// it, is tidied to one state per entity per nanosecond, the later line
/// winning; the engine's own recorder, run on a machine kept busy,
/// writes none.
#[test]
fn statemaps_never_give_an_entity_two_states_at_one_time() {
    fn no_twins(map: &statemap::Statemap, what: &str) {
        let mut seen = std::collections::HashSet::new();
        for d in &map.data {
            assert!(
                seen.insert((d.entity.clone(), d.time)),
                "{what}: {} has two states at {}",
                d.entity,
                d.time
            );
        }
    }
    let d = tempfile::tempdir().unwrap();
    // Raw bpftrace-like output: 8 threads, ticks of 0..=3 ns, so that
    // many transitions share a time; the later line at a time says 2.
    let mut raw = String::from(
        "{\"start\":[5,0],\"title\":\"t\",\"states\":{\"a\":{\"value\":0},\"b\":{\"value\":1},\"c\":{\"value\":2}}}\n",
    );
    let mut twins = 0;
    for e in 0..8u64 {
        let mut t = 0u64;
        for i in 0..20_000u64 {
            let step = (i * 7 + e * 13) % 4;
            t += step;
            if step == 0 && i > 0 {
                twins += 1;
            }
            let state = if step == 0 { 2 } else { i % 2 };
            raw.push_str(&format!(
                "{{\"time\":\"{t}\",\"entity\":\"{}\",\"state\":{state}}}\n",
                100 + e
            ));
        }
    }
    assert!(twins > 1000);
    let raw_path = d.path().join("raw.json");
    fs::write(&raw_path, &raw).unwrap();
    let tidied = d.path().join("tidy.json");
    let o = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .args(["trace", "--tidy"])
        .arg(&raw_path)
        .arg("-o")
        .arg(&tidied)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let map = statemap::parse(BufReader::new(fs::File::open(&tidied).unwrap()))
        .unwrap();
    no_twins(&map, "tidied trace");
    assert_eq!(map.data.len(), 8 * 20_000 - twins);
    // Where two were written, the later one stands.
    assert!(map.data.iter().filter(|d| d.state == 2).count() >= twins);

    // The recorder, with workers and walkers contending for 2 CPUs with
    // spinning threads.
    let src = d.path().join("src");
    tree(&src, 3000);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spinners: Vec<_> = (0..2)
        .map(|_| {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let recorded = d.path().join("rec.json");
    let o = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .args(["copy", "-q", "--threads", "8", "--walkers", "4"])
        .arg("--statemap")
        .arg(&recorded)
        .arg(&src)
        .arg(d.path().join("dst"))
        .output();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for s in spinners {
        s.join().unwrap();
    }
    let o = o.unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let map =
        statemap::parse(BufReader::new(fs::File::open(&recorded).unwrap()))
            .unwrap();
    assert!(map.data.len() > 100);
    no_twins(&map, "recorded copy");
}
