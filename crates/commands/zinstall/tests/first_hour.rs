//! What a new user does in the first hour, tried as they would: Ctrl-C
//! in the middle of a copy and of an install, a listing piped to `head`,
//! an unrelated directory given as a zonepath, a dry run after an
//! interrupted install, an install that fails in a zonepath it made.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use zinstall_testkit::Tmp;
use zinstall_testkit::run::streams as text;

fn zinstall() -> Command {
    zinstall_testkit::run::command(env!("CARGO_BIN_EXE_zinstall"))
}

/// A tree of `n` small files in directories of 100, big enough that a
/// copy of it is still running when the test signals it.
fn tree(root: &Path, n: usize) {
    for i in 0..n {
        let d = root.join(format!("d{:03}", i / 100));
        if i % 100 == 0 {
            fs::create_dir_all(&d).unwrap();
        }
        fs::write(d.join(format!("f{i}")), format!("file {i}\n").repeat(40))
            .unwrap();
    }
}

/// Sends `signal` to `child` as soon as `started` is true, and waits.
fn signal_when(
    mut child: Child,
    signal: &str,
    started: impl Fn() -> bool,
) -> std::process::Output {
    let t0 = Instant::now();
    while !started() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the run never started"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before it could be signalled: {:?}",
            child.wait_with_output().map(|o| text(&o))
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let k = zinstall_testkit::tool("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(k.success());
    child.wait_with_output().unwrap()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn entries(dir: &Path) -> usize {
    walkdir::WalkDir::new(dir).into_iter().count()
}

#[test]
fn ctrl_c_stops_a_copy_that_merge_then_finishes() {
    let d = Tmp::new();
    let src = d.path().join("src");
    tree(&src, 10_000);
    let dst = d.path().join("dst");
    for (signal, status) in [("INT", 130), ("TERM", 143), ("HUP", 129)] {
        let _ = fs::remove_dir_all(&dst);
        let child = zinstall()
            .args(["copy", "--threads", "1", "--walkers", "1"])
            .arg(&src)
            .arg(&dst)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let o = signal_when(child, signal, || {
            fs::read_dir(&dst).is_ok_and(|mut r| r.next().is_some())
        });
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(status), "{signal}: {out}{err}");
        assert!(err.contains("copy stopped"), "{signal}: {err}");
        assert!(err.contains("--merge"), "{signal}: {err}");
        assert!(entries(&dst) < entries(&src), "{signal}: not stopped");
    }
    // What the message says finishes it does.
    let o = zinstall()
        .args(["copy", "-q", "--merge"])
        .arg(&src)
        .arg(&dst)
        .output()
        .unwrap();
    assert!(o.status.success(), "{:?}", text(&o));
    let c = zinstall_verify::compare(
        &src,
        &dst,
        &zinstall_verify::CompareOptions::default(),
    )
    .unwrap();
    assert!(c.is_identical(), "{c}");
}

#[test]
fn a_closed_stdout_stops_a_listing_copy() {
    let d = Tmp::new();
    let src = d.path().join("src");
    tree(&src, 20_000);
    let dst = d.path().join("dst");
    let mut child = zinstall()
        .args(["copy", "-v", "--threads", "1"])
        .arg(&src)
        .arg(&dst)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `| head -1`: one line read, then the pipe closed.
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 64];
    std::io::Read::read(&mut out, &mut first).unwrap();
    drop(out);
    let o = child.wait_with_output().unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(141), "{err}");
    assert!(err.contains("standard output was closed"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(entries(&dst) < entries(&src), "the copy went on");
}

/// A profile that replicates `tree` from `dir`.
fn tree_profile(dir: &Path, tree: &str) -> std::path::PathBuf {
    let p = dir.join("profile.toml");
    fs::write(
        &p,
        format!(
            "source_root = \"{}\"\ntrees = [\"{tree}\"]\nlog = \"{}\"\n",
            dir.display(),
            dir.join("install.log").display()
        ),
    )
    .unwrap();
    p
}

/// An install with `profile` into `zonepath`, sent `signal` as soon as
/// `root` (a tree it copies) has an entry.
fn signal_install(
    profile: &Path,
    zonepath: &Path,
    signal: &str,
    root: &Path,
) -> std::process::Output {
    let child = zinstall()
        .args(["install", "--threads", "1", "--profile"])
        .arg(profile)
        .arg("--zonepath")
        .arg(zonepath)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    signal_when(child, signal, || {
        fs::read_dir(root).is_ok_and(|mut r| r.next().is_some())
    })
}

#[test]
fn ctrl_c_stops_an_install_which_removes_what_it_made() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Tmp::new();
    tree(&d.path().join("big"), 10_000);
    let profile = tree_profile(d.path(), "big");
    let zonepath = d.path().join("zones/z1");
    let root = zonepath.join("root/big");
    let o = signal_install(&profile, &zonepath, "INT", &root);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(130), "{out}{err}");
    assert!(
        err.contains("interrupted (SIGINT): install stopped"),
        "{err}"
    );
    // The root, the marker, the lock and the zonepath the install made:
    // all gone.
    assert!(!zonepath.exists(), "{err}");
    assert!(err.contains("which this install made"), "{err}");
    assert!(d.path().join("zones").exists());
}

#[test]
fn an_unrelated_directory_is_not_taken_as_a_zonepath() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Tmp::new();
    fs::create_dir(d.path().join("empty")).unwrap();
    let profile = tree_profile(d.path(), "empty");
    let mine = d.path().join("projects");
    fs::create_dir(&mine).unwrap();
    fs::set_permissions(&mine, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(mine.join("notes.txt"), "mine\n").unwrap();
    let o = zinstall()
        .arg("install")
        .arg("--profile")
        .arg(&profile)
        .arg("--zonepath")
        .arg(&mine)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(
        err.contains(&format!("{} is not empty", mine.display()))
            && err.contains("notes.txt")
            && err.contains("no zinstall marker"),
        "{err}"
    );
    // Untouched: its mode, its one file, nothing added.
    let mode = fs::metadata(&mine).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o755);
    assert_eq!(names(&mine), ["notes.txt"]);

    // An empty directory, and one with an empty `root`, are fine.
    let empty = d.path().join("ready");
    fs::create_dir_all(empty.join("root")).unwrap();
    let o = zinstall()
        .args(["install", "--profile"])
        .arg(&profile)
        .arg("--zonepath")
        .arg(&empty)
        .output()
        .unwrap();
    assert!(o.status.success(), "{:?}", text(&o));
    assert!(empty.join("root/empty").is_dir());
}

#[test]
fn a_dry_run_after_an_interrupted_install_tells_the_truth() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Tmp::new();
    tree(&d.path().join("big"), 10_000);
    let profile = tree_profile(d.path(), "big");
    let zonepath = d.path().join("z");
    let root = zonepath.join("root/big");
    // Killed outright: nothing of the install's runs, its marker stays.
    let o = signal_install(&profile, &zonepath, "KILL", &root);
    assert_eq!(o.status.code(), None);
    assert!(zonepath.join(".zinstall.state").exists());
    let o = zinstall()
        .args(["install", "--dry-run", "--profile"])
        .arg(&profile)
        .arg("--zonepath")
        .arg(&zonepath)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(!format!("{out}{err}").contains("--merge"), "{out}{err}");
    assert!(out.contains("would install into"), "{out}");
    assert!(out.contains("10000 files"), "{out}");
    // And the install its dry run describes does what it said.
    let o = zinstall()
        .args(["install", "--profile"])
        .arg(&profile)
        .arg("--zonepath")
        .arg(&zonepath)
        .output()
        .unwrap();
    assert!(o.status.success(), "{:?}", text(&o));
    assert_eq!(entries(&root), entries(&d.path().join("big")));
}

#[test]
fn a_failed_install_removes_the_zonepath_it_made() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Tmp::new();
    fs::create_dir(d.path().join("empty")).unwrap();
    let profile = tree_profile(d.path(), "empty");
    // Not a tar: the install fails after it made the zonepath.
    let bad = d.path().join("bad.tar");
    fs::write(&bad, vec![b'x'; 4096]).unwrap();
    let zonepath = d.path().join("new/z");
    let o = zinstall()
        .arg("install")
        .arg("--profile")
        .arg(&profile)
        .arg("--zonepath")
        .arg(&zonepath)
        .arg(&bad)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(!zonepath.exists(), "{err}");
    assert!(
        err.contains(&format!(
            "removed {}, which this install made",
            zonepath.display()
        )),
        "{err}"
    );
    // One it did not make stays, empty, as it was.
    let given = d.path().join("given");
    fs::create_dir(&given).unwrap();
    let o = zinstall()
        .arg("install")
        .arg("--profile")
        .arg(&profile)
        .arg("--zonepath")
        .arg(&given)
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{:?}", text(&o));
    assert!(given.is_dir());
    assert_eq!(names(&given), Vec::<String>::new());
}

#[test]
fn verify_compares_what_copy_keeps() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Tmp::new();
    let a = d.path().join("a");
    fs::create_dir_all(a.join("mnt")).unwrap();
    fs::write(a.join("file"), "x\n").unwrap();
    let b = d.path().join("b");
    let o = zinstall()
        .args(["copy", "-q"])
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    assert!(o.status.success(), "{:?}", text(&o));
    // Read since: its access time moves, as packing or comparing it
    // would move it.
    let later = std::time::SystemTime::now() + Duration::from_secs(3600);
    fs::File::options()
        .write(true)
        .open(a.join("file"))
        .unwrap()
        .set_times(fs::FileTimes::new().set_accessed(later))
        .unwrap();
    // A filesystem mounted in A after the copy: copy would not cross it.
    let m = zinstall_testkit::tool("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(a.join("mnt"))
        .status()
        .unwrap();
    assert!(m.success(), "mount tmpfs");
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _mounted = Unmount(a.join("mnt"));
    fs::write(a.join("mnt/on-tmpfs"), "y\n").unwrap();
    // The mount point's own metadata is what B's directory has.
    let b_mnt = fs::metadata(a.join("mnt")).unwrap();
    fs::set_permissions(b.join("mnt"), b_mnt.permissions()).unwrap();
    fs::File::open(b.join("mnt"))
        .unwrap()
        .set_modified(b_mnt.modified().unwrap())
        .unwrap();
    std::os::unix::fs::chown(b.join("mnt"), Some(0), Some(0)).unwrap();

    let verify = |extra: &[&str]| {
        zinstall()
            .arg("verify")
            .args(extra)
            .arg(&a)
            .arg(&b)
            .output()
            .unwrap()
    };
    let o = verify(&[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.starts_with("identical"), "{out}");
    let o = verify(&["--atime"]);
    let (out, _) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("file: atime"), "{out}");
    let o = verify(&["--cross-fs"]);
    let (out, _) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("mnt/on-tmpfs"), "{out}");
}

#[test]
fn an_image_install_on_linux_is_the_image_alone() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Tmp::new();
    tree(&d.path().join("host"), 10);
    let image_tree = d.path().join("image");
    fs::create_dir_all(image_tree.join("etc")).unwrap();
    fs::write(image_tree.join("etc/os-release"), "ID=test\n").unwrap();
    let image = d.path().join("rootfs.tar");
    let t = zinstall_testkit::tool("tar")
        .arg("-C")
        .arg(&image_tree)
        .arg("-cf")
        .arg(&image)
        .arg(".")
        .status()
        .unwrap();
    assert!(t.success());
    let profile = |over: Option<bool>| {
        let p = d.path().join(format!("profile-{over:?}.toml"));
        let mut text = format!(
            "source_root = \"{}\"\ntrees = [\"host\"]\nlog = \"{}\"\n",
            d.path().display(),
            d.path().join("install.log").display()
        );
        if let Some(o) = over {
            text.push_str(&format!("images_over_host = {o}\n"));
        }
        text.push_str("[[link]]\npath = \"bin\"\ntarget = \"usr/bin\"\n");
        fs::write(&p, text).unwrap();
        p
    };
    let install = |profile: &Path, zonepath: &Path| {
        zinstall()
            .arg("install")
            .arg("--profile")
            .arg(profile)
            .arg("--zonepath")
            .arg(zonepath)
            .arg(&image)
            .output()
            .unwrap()
    };
    // The default on Linux, and the packaged Linux profile's setting.
    for (p, name) in
        [(profile(None), "default"), (profile(Some(false)), "false")]
    {
        let z = d.path().join(format!("alone-{name}"));
        let o = install(&p, &z);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}{err}");
        assert!(out.contains("laying out the images alone"), "{out}");
        assert_eq!(names(&z.join("root")), ["etc"]);
        assert_eq!(names(&z.join("root/etc")), ["os-release"]);
    }
    let z = d.path().join("over");
    let o = install(&profile(Some(true)), &z);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("laying the images over the host's /host"),
        "{out}"
    );
    assert_eq!(names(&z.join("root")), ["bin", "etc", "host"]);
    // Without an image, the profile's host parts are the install.
    let z = d.path().join("host-only");
    let o = zinstall()
        .arg("install")
        .arg("--profile")
        .arg(profile(None))
        .arg("--zonepath")
        .arg(&z)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(!out.contains("images"), "{out}");
    assert_eq!(names(&z.join("root")), ["bin", "host"]);
}

#[test]
fn only_commands_the_daemon_runs_offer_daemon() {
    let help = |cmd: &[&str]| {
        let o = zinstall().args(cmd).arg("--help").output().unwrap();
        assert!(o.status.success(), "{cmd:?}");
        text(&o).0
    };
    for cmd in [
        &["copy"][..],
        &["install"],
        &["uninstall"],
        &["provision"],
        &["cache", "list"],
        &["jobs"],
        &["cancel"],
    ] {
        assert!(help(cmd).contains("--daemon"), "{cmd:?}");
    }
    for (cmd, operands) in [
        (&["verify"][..], &["a", "b"][..]),
        (&["statemap"], &["a"]),
        (&["trace"], &["--", "true"]),
        (&["tune"], &[]),
        (&["image", "create"], &["a", "b.tar"]),
    ] {
        assert!(!help(cmd).contains("--daemon"), "{cmd:?}");
        // Given anyway, before or after the command: refused, saying why.
        let name = cmd[0];
        let after = zinstall()
            .args(cmd)
            .arg("--daemon=/nonexistent")
            .args(operands)
            .output()
            .unwrap();
        let before = zinstall()
            .arg("--daemon=/nonexistent")
            .args(cmd)
            .args(operands)
            .output()
            .unwrap();
        for o in [after, before] {
            let (_, err) = text(&o);
            assert_eq!(o.status.code(), Some(2), "{cmd:?}: {err}");
            assert!(
                err.contains(&format!("--daemon does not apply to {name}")),
                "{cmd:?}: {err}"
            );
            assert!(!err.contains("tip:"), "{err}");
        }
    }
    // After a command it runs, it is taken: here, no daemon answers.
    let o = zinstall()
        .args(["copy", "--daemon=/nonexistent/sock", "a", "b"])
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert!(err.contains("/nonexistent/sock: connect"), "{err}");
}

/// Every `--json` outcome has one shape: `schema`, `command`, `ok`, and
/// `result` or `error` (zinstall(8), JSON OUTPUT), from a copy, an
/// install, a provision, a verify, an image, the cache and a usage error
/// alike.
#[test]
fn every_json_outcome_has_one_schema() {
    let d = Tmp::new();
    let src = d.path().join("src");
    tree(&src, 20);
    let tar = d.path().join("l.tar");
    let cache = d.path().join("cache");
    let zonepath = d.path().join("z");
    fs::create_dir(d.path().join("none")).unwrap();
    let profile = tree_profile(d.path(), "none");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let runs: Vec<(&str, bool, Vec<String>)> = vec![
        (
            "copy",
            true,
            vec!["copy".into(), s(&src), s(&d.path().join("c"))],
        ),
        (
            "verify",
            true,
            vec!["verify".into(), s(&src), s(&d.path().join("c"))],
        ),
        (
            "image",
            true,
            vec!["image".into(), "create".into(), s(&src), s(&tar)],
        ),
        (
            "install",
            true,
            vec![
                "install".into(),
                "--profile".into(),
                s(&profile),
                "--zonepath".into(),
                s(&zonepath),
                s(&tar),
            ],
        ),
        (
            "provision",
            true,
            vec![
                "provision".into(),
                s(&tar),
                "--cache".into(),
                s(&cache),
                "--out".into(),
                s(&d.path().join("guests")),
            ],
        ),
        (
            "cache",
            true,
            vec!["cache".into(), "list".into(), "--cache".into(), s(&cache)],
        ),
        (
            "copy",
            false,
            vec![
                "copy".into(),
                s(&d.path().join("missing")),
                s(&d.path().join("m")),
            ],
        ),
        ("verify", false, vec!["verify".into(), "--bogus".into()]),
    ];
    for (command, ok, args) in runs {
        let o = zinstall().args(&args).arg("--json").output().unwrap();
        let (out, err) = text(&o);
        assert_eq!(o.status.success(), ok, "{args:?}: {out}{err}");
        let last = out
            .lines()
            .last()
            .unwrap_or_else(|| panic!("{args:?}: {err}"));
        let v: serde_json::Value = serde_json::from_str(last).unwrap();
        assert_eq!(v["schema"], 1, "{v}");
        assert_eq!(v["command"], command, "{v}");
        assert_eq!(v["ok"], ok, "{v}");
        if ok {
            assert!(v["result"].is_object() || v["result"].is_array(), "{v}");
            assert!(v.get("error").is_none(), "{v}");
        } else {
            assert!(v["error"]["message"].is_string(), "{v}");
        }
        // Every line before the last is an event of the same command.
        for l in out.lines().rev().skip(1) {
            let e: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(
                (&e["schema"], &e["command"]),
                (&1.into(), &command.into())
            );
            assert!(e["event"].is_string(), "{e}");
        }
    }
}

/// A cache the caller may not write: the error, then what to do.
#[test]
fn a_cache_not_yours_gets_a_hint() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Tmp::new();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let src = d.path().join("src");
    tree(&src, 3);
    let tar = d.path().join("r.tar");
    let t = zinstall_testkit::tool("tar")
        .arg("-C")
        .arg(&src)
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .status()
        .unwrap();
    assert!(t.success());
    fs::set_permissions(&tar, fs::Permissions::from_mode(0o644)).unwrap();
    let out = d.path().join("out");
    fs::create_dir(&out).unwrap();
    std::os::unix::fs::chown(&out, Some(65534), Some(65534)).unwrap();
    let cache = d.path().join("cache");
    let o = zinstall_testkit::tool("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_zinstall"))
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .arg("provision")
        .arg(&tar)
        .arg("--cache")
        .arg(&cache)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("Permission denied"), "{err}");
    assert!(
        err.contains(&format!(
            "the cache {} is not yours to write: run as root, give --cache DIR",
            cache.display()
        )),
        "{err}"
    );
}
