//! `zinstall` as a user runs it: exit codes, messages, summaries.

use zinstall_testkit::tools;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use zinstall_testkit::run::streams as text;

fn zinstall() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zinstall"));
    // A defaults file on the test machine must not change the results.
    c.env("ZINSTALL_DEFAULTS", "/dev/null");
    c.env_remove("ZINSTALL_COPY_THREADS")
        .env_remove("ZINSTALL_COPY_WALKERS")
        .env_remove("ZINSTALL_COPY_BATCH")
        .env_remove("ZINSTALL_COPY_BUFSIZE");
    c
}

use zinstall_testkit::is_root;

fn tree(root: &Path) {
    fs::create_dir_all(root.join("a/b")).unwrap();
    fs::write(root.join("a/b/f"), b"hello").unwrap();
    fs::write(root.join("g"), vec![1u8; 100_000]).unwrap();
}

#[test]
fn copy_prints_one_summary_line_and_stats_on_request() {
    let d = tempfile::tempdir().unwrap();
    tree(&d.path().join("src"));
    let o = zinstall()
        .arg("copy")
        .arg(d.path().join("src"))
        .arg(d.path().join("dst"))
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.contains("2 files, 3 dirs"), "{out}");
    assert!(out.contains("97.66 KiB in "), "{out}");

    let o = zinstall()
        .args(["copy", "--stats", "--threads", "3"])
        .arg(d.path().join("src"))
        .arg(d.path().join("dst2"))
        .output()
        .unwrap();
    let (out, _) = text(&o);
    assert!(out.contains("worker-2:"), "{out}");
    assert!(!out.contains("worker-3:"), "{out}");
    assert!(out.contains("walkers: 1 "), "{out}");
    assert!(out.contains("  walker-0: 3 dirs, 4 entries"), "{out}");

    let o = zinstall()
        .args(["copy", "-q"])
        .arg(d.path().join("src"))
        .arg(d.path().join("dst3"))
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(o.stdout.is_empty());
}

/// COPY_WALKERS as every knob: flag over environment over file, each
/// bad value named where it came from; `--stats` has a line per walker.
#[test]
fn walkers_come_from_flag_environment_or_file() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    for i in 0..12 {
        fs::create_dir_all(src.join(format!("d{i}/e"))).unwrap();
        fs::write(src.join(format!("d{i}/e/f")), b"x").unwrap();
    }
    let defaults = d.path().join("defaults");
    fs::write(&defaults, "COPY_WALKERS=3\n").unwrap();
    let walkers = |args: &[&str], env: Option<&str>, dst: &str| {
        let mut c = zinstall();
        c.env("ZINSTALL_DEFAULTS", &defaults)
            .args(["copy", "--stats"])
            .args(args)
            .arg(&src)
            .arg(d.path().join(dst));
        if let Some(v) = env {
            c.env("ZINSTALL_COPY_WALKERS", v);
        }
        let o = c.output().unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{err}");
        out.lines().filter(|l| l.starts_with("  walker-")).count()
    };
    assert_eq!(walkers(&[], None, "file"), 3);
    assert_eq!(walkers(&[], Some("5"), "env"), 5);
    assert_eq!(walkers(&["--walkers", "2"], Some("5"), "flag"), 2);
    // 0: one per 4 workers, one per 4 cores at most.
    let auto = zinstall_engine::Tunables {
        copy_threads: 9,
        copy_walkers: 0,
        ..zinstall_engine::Tunables::default()
    };
    assert_eq!(
        walkers(&["--walkers", "0", "--threads", "9"], None, "auto"),
        auto.walkers()
    );
    let o = zinstall()
        .args(["copy", "--walkers", "257"])
        .arg(&src)
        .arg(d.path().join("bad"))
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "--walkers: COPY_WALKERS=257: out of range (must be 0 to 256)"
        ),
        "{err}"
    );
    assert!(!d.path().join("bad").exists(), "nothing written");
    let o = zinstall()
        .env("ZINSTALL_COPY_WALKERS", "many")
        .arg("copy")
        .arg(&src)
        .arg(d.path().join("bad"))
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert!(
        err.contains("ZINSTALL_COPY_WALKERS: COPY_WALKERS=many"),
        "{err}"
    );
}

#[test]
fn malformed_defaults_file_names_file_and_line() {
    let d = tempfile::tempdir().unwrap();
    tree(&d.path().join("src"));
    let defaults = d.path().join("zinstall");
    fs::write(&defaults, "# ok\nCOPY_THREADS=4\nCOPY BATCH = 3\n").unwrap();
    let o = zinstall()
        .arg("copy")
        .arg("--defaults")
        .arg(&defaults)
        .arg(d.path().join("src"))
        .arg(d.path().join("dst"))
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("{}:3: malformed", defaults.display())),
        "{err}"
    );
    assert!(err.contains("COPY BATCH = 3"), "{err}");
    assert!(!d.path().join("dst").exists());

    fs::write(&defaults, "COPY_BUFSIZE=100\n").unwrap();
    let o = zinstall()
        .env("ZINSTALL_DEFAULTS", &defaults)
        .arg("copy")
        .arg(d.path().join("src"))
        .arg(d.path().join("dst"))
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(":1: COPY_BUFSIZE=100: out of range"), "{err}");
}

/// A typo'd key is an error naming the line and the key meant; a file
/// named by --defaults that is not there is an error naming it; sizes
/// and trailing comments are read.
#[test]
fn defaults_typos_missing_files_sizes_and_comments() {
    let d = tempfile::tempdir().unwrap();
    tree(&d.path().join("src"));
    let defaults = d.path().join("zinstall");
    let copy = |defaults: &Path, dst: &str| {
        zinstall()
            .arg("copy")
            .arg("--defaults")
            .arg(defaults)
            .arg(d.path().join("src"))
            .arg(d.path().join(dst))
            .output()
            .unwrap()
    };
    fs::write(&defaults, "COPY_BATCH=64\nCOPY_THREAD=4\n").unwrap();
    let o = copy(&defaults, "dst1");
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{}:2: unknown key COPY_THREAD (did you mean COPY_THREADS?)",
            defaults.display()
        )),
        "{err}"
    );
    assert!(!d.path().join("dst1").exists());

    let missing = d.path().join("not-there");
    let o = copy(&missing, "dst2");
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("not-there"), "{err}");
    assert!(!d.path().join("dst2").exists());

    fs::write(
        &defaults,
        "COPY_THREADS=2   # two cores\nCOPY_BUFSIZE=64K\n",
    )
    .unwrap();
    let o = copy(&defaults, "dst3");
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(d.path().join("dst3/a/b/f").exists());
}

#[test]
fn failed_copy_exits_1_naming_the_path() {
    let d = tempfile::tempdir().unwrap();
    tree(&d.path().join("src"));
    fs::create_dir(d.path().join("dst")).unwrap();
    fs::write(d.path().join("dst/x"), b"x").unwrap();
    let o = zinstall()
        .arg("copy")
        .arg(d.path().join("src"))
        .arg(d.path().join("dst"))
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("destination is not empty"), "{err}");
    assert!(err.contains(&d.path().join("dst").display().to_string()));
}

/// An unreadable file is an error naming it. Root reads anything, so as
/// root the copy runs as `nobody` through setpriv(1).
#[test]
fn unreadable_source_file_is_named() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    tree(&src);
    let secret = src.join("a/secret");
    fs::write(&secret, b"s").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o000)).unwrap();
    let dst = d.path().join("dst");
    let mut cmd = if is_root() {
        // Let nobody reach the tree and write the destination.
        for p in [d.path(), src.as_path(), &src.join("a"), &src.join("a/b")] {
            fs::set_permissions(p, fs::Permissions::from_mode(0o777)).unwrap();
        }
        let mut c = tools::tool("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_zinstall"))
            .env("ZINSTALL_DEFAULTS", "/dev/null");
        c
    } else {
        zinstall()
    };
    let o = cmd.arg("copy").arg(&src).arg(&dst).output().unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("open {}: Permission denied", secret.display())),
        "{err}"
    );
}

#[test]
fn verify_says_identical_or_lists_differences() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    tree(&src);
    let dst = d.path().join("dst");
    assert!(
        zinstall()
            .args(["copy", "-q"])
            .arg(&src)
            .arg(&dst)
            .status()
            .unwrap()
            .success()
    );
    let o = zinstall()
        .arg("verify")
        .arg(&src)
        .arg(&dst)
        .output()
        .unwrap();
    let (out, _) = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.starts_with("identical: 5 entries compared"), "{out}");
    fs::set_permissions(dst.join("g"), fs::Permissions::from_mode(0o600))
        .unwrap();
    fs::write(dst.join("a/b/f"), b"HELLO").unwrap();
    let o = zinstall()
        .args(["verify", "--no-atime"])
        .arg(&src)
        .arg(&dst)
        .output()
        .unwrap();
    let (out, _) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("a/b/f: content differs at byte 0"), "{out}");
    assert!(out.contains("g: mode 0644 vs 0600"), "{out}");
    let o = zinstall()
        .arg("verify")
        .arg(&src)
        .arg(d.path().join("none"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

/// `--exclude` skips what matches, at any depth, and what is beneath it;
/// `--json` says what was done as one object a script can read.
#[test]
fn copy_excludes_globs_and_reports_json() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    tree(&src);
    fs::create_dir_all(src.join("cache/deep")).unwrap();
    fs::write(src.join("cache/deep/x"), b"x").unwrap();
    fs::write(src.join("a/b/skip.log"), b"log").unwrap();
    let dst = d.path().join("dst");
    let o = zinstall()
        .args([
            "copy",
            "--json",
            "--exclude",
            "cache",
            "--exclude",
            "**/*.log",
        ])
        .arg(&src)
        .arg(&dst)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(!dst.join("cache").exists());
    assert!(!dst.join("a/b/skip.log").exists());
    assert_eq!(fs::read(dst.join("a/b/f")).unwrap(), b"hello");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON object: {out}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(v["schema"], 1, "{v}");
    assert_eq!(v["command"], "copy", "{v}");
    assert_eq!(v["ok"], true, "{v}");
    assert!(v.get("error").is_none(), "{v}");
    let r = &v["result"];
    assert_eq!(r["stats"]["files"], 2, "{v}");
    assert_eq!(r["stats"]["skipped"], 2, "{v}");
    assert_eq!(r["stats"]["bytes"], 100_005, "{v}");
    assert!(r["errors"].as_array().unwrap().is_empty(), "{v}");

    // A failure is in the object too, with the path and the operation.
    let o = zinstall()
        .args(["copy", "--json"])
        .arg(d.path().join("missing"))
        .arg(d.path().join("dst2"))
        .output()
        .unwrap();
    let (out, _) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["ok"], false, "{v}");
    for e in [&v["result"]["errors"][0], &v["error"]] {
        assert!(e["path"].as_str().unwrap().ends_with("missing"), "{v}");
        assert_eq!(e["errno"], libc::ENOENT, "{v}");
        assert!(e["op"].is_string(), "{v}");
    }

    // A glob that does not compile is refused before anything is copied.
    let o = zinstall()
        .args(["copy", "--exclude", "a["])
        .arg(&src)
        .arg(d.path().join("dst3"))
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("a["), "{err}");
    assert!(!d.path().join("dst3").exists());
}

#[test]
fn verify_reports_json() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("a");
    tree(&a);
    let b = d.path().join("b");
    let o = zinstall()
        .arg("copy")
        .arg("-q")
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    assert!(o.status.success());
    fs::write(b.join("a/b/f"), b"HELLO").unwrap();
    let o = zinstall()
        .args(["verify", "--json", "--no-atime"])
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!((&v["command"], &v["ok"]), (&"verify".into(), &false.into()));
    assert_eq!(v["error"]["kind"], "differences", "{v}");
    let v = &v["result"];
    assert_eq!(v["identical"], false, "{v}");
    let diffs = v["differences"].as_array().unwrap();
    assert!(
        diffs.iter().any(|d| d["path"] == "a/b/f"),
        "the changed file is named: {v}"
    );
}

/// The `'src' -> 'dst'` lines of a `-v` run: the destinations, sorted.
fn listed(out: &str) -> Vec<String> {
    let mut v: Vec<String> = out
        .lines()
        .filter_map(|l| l.split_once("' -> '"))
        .map(|(_, d)| d.split_once('\'').map_or(d, |(p, _)| p).to_string())
        .collect();
    v.sort();
    v
}

/// A tree with every kind the listing names: directories, files, a
/// hard link, a symlink, a FIFO.
fn rich_tree(root: &Path) {
    tree(root);
    fs::hard_link(root.join("g"), root.join("a/g2")).unwrap();
    std::os::unix::fs::symlink("b/f", root.join("a/l")).unwrap();
    zinstall_testkit::mkfifo(&root.join("a/p"), 0o600);
}

fn copy_json(args: &[&str], src: &Path, dst: &Path) -> serde_json::Value {
    let o = zinstall()
        .arg("copy")
        .args(args)
        .arg("--json")
        .arg(src)
        .arg(dst)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["ok"], true, "{v}");
    v["result"].clone()
}

#[test]
fn copy_dry_run_writes_nothing_and_says_what_copy_does() {
    let d = tempfile::tempdir().unwrap();
    let (src, dst) = (d.path().join("src"), d.path().join("dst"));
    rich_tree(&src);

    let o = zinstall()
        .args(["copy", "-n", "-v"])
        .arg(&src)
        .arg(&dst)
        .output()
        .unwrap();
    let (dry, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(!dst.exists(), "a dry run made the destination");
    assert!(
        dry.lines().last().unwrap().starts_with("would copy "),
        "{dry}"
    );
    assert!(dry.contains("(hard link)"), "{dry}");
    let would = copy_json(&["--dry-run"], &src, &dst);
    assert!(!dst.exists());
    assert_eq!(would["dry_run"], true);

    let o = zinstall()
        .args(["copy", "-v"])
        .arg(&src)
        .arg(&dst)
        .output()
        .unwrap();
    let (real, err) = text(&o);
    assert!(o.status.success(), "{err}");
    // The dry run lists exactly what the copy lists, which is every entry
    // of the result.
    assert_eq!(listed(&dry), listed(&real));
    let mut made: Vec<String> = walkdir::WalkDir::new(&dst)
        .into_iter()
        .map(|e| e.unwrap().path().display().to_string())
        .collect();
    made.sort();
    assert_eq!(listed(&real), made);
    let did = copy_json(&[], &src, &d.path().join("dst2"));
    for k in [
        "files",
        "dirs",
        "symlinks",
        "hardlinks",
        "specials",
        "bytes",
    ] {
        assert_eq!(would["stats"][k], did["stats"][k], "{k}");
    }

    // Merging over an identical copy: nothing to write but directories.
    // The files, the later name of one and the FIFO are left alone, by
    // the dry run as by the merge.
    let again = copy_json(&["-n", "--merge"], &src, &dst);
    assert_eq!(again["stats"]["unchanged"], 4, "{again}");
    assert_eq!(again["stats"]["files"], 0, "{again}");
    let merged = copy_json(&["--merge"], &src, &dst);
    for k in ["files", "symlinks", "hardlinks", "specials", "unchanged"] {
        assert_eq!(again["stats"][k], merged["stats"][k], "{k}");
    }
    fs::write(src.join("a/b/f"), b"changed").unwrap();
    let again = copy_json(&["-n", "--merge"], &src, &dst);
    assert_eq!(again["stats"]["files"], 1, "{again}");
    assert_eq!(fs::read(dst.join("a/b/f")).unwrap(), b"hello");
}

#[test]
fn copy_dry_run_refuses_what_copy_refuses() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    tree(&src);
    let full = d.path().join("full");
    fs::create_dir(&full).unwrap();
    fs::write(full.join("x"), b"x").unwrap();
    for (dst, says) in [
        (full.clone(), "not empty"),
        (src.join("a/inside"), "inside"),
    ] {
        let o = zinstall()
            .args(["copy", "-n"])
            .arg(&src)
            .arg(&dst)
            .output()
            .unwrap();
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(says), "{err}");
        assert!(err.contains(&dst.display().to_string()), "{err}");
    }
    assert!(!src.join("a/inside").exists());
    assert_eq!(fs::read_dir(&full).unwrap().count(), 1);
    // A dry run has no statemap or sync to write.
    let o = zinstall()
        .args(["copy", "-n", "--sync"])
        .arg(&src)
        .arg(d.path().join("x"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = zinstall()
        .args(["--daemon=/nonexistent/sock", "copy", "-n"])
        .arg(&src)
        .arg(d.path().join("x"))
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--dry-run"), "{err}");
}
