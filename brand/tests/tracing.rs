//! Observability as a performance engineer uses it: the bpftrace statemap
//! script against a real copy, and the recorder through the CLI.

#[path = "../../copier/tests/common/tools.rs"]
mod tools;

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use copier::statemap::{self, Summary};

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
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

#[test]
fn bpftrace_statemap_of_a_real_copy() {
    let name = "bpftrace_statemap_of_a_real_copy";
    if !is_root() {
        eprintln!("skipped: {name}: needs root");
        return;
    }
    if tools::tool("bpftrace").arg("--version").output().is_err() {
        eprintln!("skipped: {name}: bpftrace not installed");
        return;
    }
    if !tracefs_ready() {
        eprintln!("skipped: {name}: no tracefs");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    tree(&src, 3000);
    let go = d.path().join("go");
    // The copy starts only once bpftrace has printed its metadata, which
    // it does after every probe is attached.
    let script = format!(
        "while [ ! -e '{}' ]; do sleep 0.05; done; exec '{}' copy -q \
         --threads 2 '{}' '{}'",
        go.display(),
        env!("CARGO_BIN_EXE_zinstall"),
        src.display(),
        d.path().join("dst").display()
    );
    let mut copy = Command::new("sh").arg("-c").arg(&script).spawn().unwrap();
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // As in the script's USAGE: bpftrace's per-CPU output sorted by time,
    // the metadata line first.
    let pipeline = format!(
        "bpftrace -q '{}' {} {start} | (IFS= read -r meta; \
         printf '%s\\n' \"$meta\"; sort -t'\"' -k4,4n)",
        repo().join("dtrace/statemap.bt").display(),
        copy.id()
    );
    let mut bt = Command::new("sh")
        .arg("-c")
        .arg(&pipeline)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(bt.stdout.take().unwrap());
    let mut text = String::new();
    let t0 = Instant::now();
    loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if line.contains("\"states\"") {
            fs::write(&go, b"").unwrap();
        }
        text.push_str(&line);
        assert!(t0.elapsed() < Duration::from_secs(120), "bpftrace hung");
    }
    let status = bt.wait().unwrap();
    assert!(copy.wait().unwrap().success(), "the traced copy failed");
    assert!(status.success(), "bpftrace failed: {status}");
    let map = statemap::parse(text.as_bytes()).unwrap();
    let names: Vec<&str> =
        map.meta.states.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "on-cpu",
            "on-cpu-syscall",
            "off-cpu-waiting",
            "off-cpu-blocked",
            "off-cpu-io-read",
            "off-cpu-io-write",
            "off-cpu-dead"
        ]
    );
    let entities = map.entities();
    // The main thread (walker) and two workers.
    assert!(entities.len() >= 3, "{entities:?}");
    assert!(entities.contains(&copy.id().to_string()), "{entities:?}");
    let s = Summary::of(&map);
    for e in &s.entities {
        let total: f64 = (0..names.len()).map(|i| e.share(i)).sum();
        assert!((total - 1.0).abs() < 1e-9, "{}: {total}", e.name);
    }
    let syscall = s.all.time_in[1];
    assert!(syscall > 0, "no time in system calls: {s}");
    assert!(
        map.events.iter().any(|e| e.event == "thread-create"),
        "no thread-create events"
    );
}

#[test]
fn recorder_through_the_cli() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    tree(&src, 500);
    let json = d.path().join("copy.json");
    let st = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .env("ZINSTALL_DEFAULTS", "/nonexistent")
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
    assert!(err.contains("line 2: not JSON"), "{err}");
}

/// The illumos and Linux scripts declare the same states in the same
/// order, so their maps compare row for row. (DTrace itself does not run
/// here; this checks the script's declarations.)
#[test]
fn dtrace_and_bpftrace_scripts_declare_the_same_states() {
    let d = fs::read_to_string(repo().join("dtrace/statemap.d")).unwrap();
    let bt = fs::read_to_string(repo().join("dtrace/statemap.bt")).unwrap();
    let from_d: Vec<String> = d
        .lines()
        .filter_map(|l| l.trim().strip_prefix("STATE_METADATA("))
        .map(|l| l.split('"').nth(1).unwrap().to_string())
        .collect();
    let from_bt: Vec<String> = bt
        .lines()
        .filter(|l| l.contains("{\\\"value\\\":"))
        .map(|l| l.split("\\\"").nth(1).unwrap().to_string())
        .collect();
    assert_eq!(from_d.len(), 7, "{from_d:?}");
    assert_eq!(from_d, from_bt);
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
    assert_eq!(enum_names, from_d);
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
    assert_eq!(defined.len(), 11);
    if tools::tool("readelf").arg("--version").output().is_err() {
        eprintln!("skipped: every_defined_probe_is_fired: no readelf");
        return;
    }
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
