//! `zinstall copy` as users of cp, rsync and tar expect it: going on past
//! what cannot be read, saying where other filesystems are mounted, and
//! excluding by name at any depth; `install` strict where copy is not.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use zinstall_testkit::run::streams as text;

use zinstall_testkit::Tmp;

const NOBODY: u32 = 65534;

/// `zinstall` with no defaults file of the machine's.
fn zinstall() -> Command {
    zinstall_testkit::run::command(env!("CARGO_BIN_EXE_zinstall"))
}

/// `zinstall` run as nobody (by root, through setpriv).
fn zinstall_as_nobody() -> Command {
    let mut c = zinstall_testkit::tool("setpriv");
    c.args([
        &format!("--reuid={NOBODY}"),
        &format!("--regid={NOBODY}"),
        "--clear-groups",
        "--",
    ])
    .arg(env!("CARGO_BIN_EXE_zinstall"))
    .env("ZINSTALL_DEFAULTS", "/dev/null");
    c
}

fn write(path: &Path, data: &str, mode: u32) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, data).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// A scratch directory nobody can enter, with `out/` nobody owns.
fn scratch() -> Tmp {
    let d = Tmp::new();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let out = d.path().join("out");
    fs::create_dir(&out).unwrap();
    std::os::unix::fs::chown(&out, Some(NOBODY), Some(NOBODY)).unwrap();
    d
}

/// Two files nobody cannot read, in two directories, beside readable
/// ones.
fn partly_readable(src: &Path) {
    write(&src.join("etc/motd"), "hello\n", 0o644);
    write(&src.join("etc/shadow"), "root:*:\n", 0o600);
    write(&src.join("var/lib/state"), "ok\n", 0o644);
    write(&src.join("var/lib/private.key"), "key\n", 0o600);
    write(&src.join("usr/bin/tool"), "#!/bin/sh\n", 0o755);
}

#[test]
fn copy_goes_on_past_unreadable_files_and_names_each() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = scratch();
    let src = d.path().join("src");
    partly_readable(&src);
    let dst = d.path().join("out/copy");
    let o = zinstall_as_nobody()
        .arg("copy")
        .arg(&src)
        .arg(&dst)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    for f in ["etc/shadow", "var/lib/private.key"] {
        let line = format!(
            "zinstall: error: open {}: Permission denied (os error 13)",
            src.join(f).display()
        );
        assert!(err.lines().any(|l| l == line), "{line} in:\n{err}");
    }
    for (f, data) in [
        ("etc/motd", "hello\n"),
        ("var/lib/state", "ok\n"),
        ("usr/bin/tool", "#!/bin/sh\n"),
    ] {
        assert_eq!(fs::read_to_string(dst.join(f)).unwrap(), data, "{f}");
    }
    assert!(
        out.contains("3 files, 6 dirs") && out.contains("; 2 errors (above)"),
        "{out}"
    );

    // --json: the same errors, each with its path and operation.
    let o = zinstall_as_nobody()
        .args(["copy", "--json"])
        .arg(&src)
        .arg(d.path().join("out/json"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("and 1 more")
    );
    let v = &v["result"];
    assert_eq!(v["stats"]["files"], 3);
    let mut failed: Vec<(String, String)> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["op"].as_str().unwrap().into(),
                e["path"].as_str().unwrap().into(),
            )
        })
        .collect();
    failed.sort();
    let path = |f: &str| src.join(f).to_string_lossy().into_owned();
    assert_eq!(
        failed,
        [
            ("open".into(), path("etc/shadow")),
            ("open".into(), path("var/lib/private.key"))
        ]
    );
}

#[test]
fn install_stops_at_its_first_error_and_says_why() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = scratch();
    let src = d.path().join("src");
    partly_readable(&src);
    let profile = d.path().join("profile.toml");
    fs::write(
        &profile,
        format!(
            "source_root = {:?}\ntrees = [\"etc\", \"var\", \"usr\"]\n\
             log = {:?}\n",
            src,
            d.path().join("out/install.log")
        ),
    )
    .unwrap();
    let zonepath = d.path().join("out/z");
    let o = zinstall_as_nobody()
        .args(["install", "--profile"])
        .arg(&profile)
        .arg("--zonepath")
        .arg(&zonepath)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(
        err.contains("Permission denied")
            && err.contains(
                "an install stops at its first error, since a root with \
                 holes is not a root"
            )
            && err.contains("the partial root was removed"),
        "{err}"
    );
    assert!(!zonepath.join("root").exists());
}

/// A tmpfs mounted at a path, unmounted on drop.
struct Mounted(std::path::PathBuf);

impl Mounted {
    fn tmpfs(at: &Path) -> Mounted {
        fs::create_dir_all(at).unwrap();
        let o = zinstall_testkit::tool("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(at)
            .output()
            .unwrap();
        assert!(o.status.success(), "mount: {o:?}");
        Mounted(at.to_path_buf())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn copy_names_each_mount_point_it_does_not_cross() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Tmp::new();
    let src = d.path().join("src");
    write(&src.join("etc/motd"), "hello\n", 0o644);
    let proc_ = Mounted::tmpfs(&src.join("proc"));
    let run = Mounted::tmpfs(&src.join("var/run"));
    write(&proc_.0.join("1/status"), "running\n", 0o644);
    write(&run.0.join("pid"), "1\n", 0o644);
    let note = |m: &Mounted| {
        format!(
            "zinstall: note: {}: another filesystem is mounted here; \
             copied as an empty directory (not crossing filesystems)",
            m.0.display()
        )
    };
    // The default, -x and --one-file-system, and the last of two.
    for (i, flags) in [
        &[][..],
        &["-x"],
        &["--one-file-system"],
        &["--cross-fs", "-x"],
    ]
    .into_iter()
    .enumerate()
    {
        let dst = d.path().join(format!("dst{i}"));
        let o = zinstall()
            .arg("copy")
            .args(flags)
            .arg(&src)
            .arg(&dst)
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{flags:?}: {out}{err}");
        for m in [&proc_, &run] {
            assert!(err.lines().any(|l| l == note(m)), "{flags:?}: {err}");
        }
        assert!(dst.join("proc").is_dir() && dst.join("var/run").is_dir());
        assert!(!dst.join("proc/1").exists(), "{flags:?}");
        assert_eq!(
            fs::read_to_string(dst.join("etc/motd")).unwrap(),
            "hello\n"
        );
    }
    // --json: one notice per mount point, with its kind.
    let o = zinstall()
        .args(["copy", "--json"])
        .arg(&src)
        .arg(d.path().join("json"))
        .output()
        .unwrap();
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut mounts: Vec<&str> = v["result"]["notices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "mount_point")
        .map(|n| n["example"].as_str().unwrap())
        .collect();
    mounts.sort();
    let shown = |m: &Mounted| m.0.to_string_lossy().into_owned();
    assert_eq!(mounts, [shown(&proc_), shown(&run)]);
    // --cross-fs (and -x then --cross-fs) copies what is mounted.
    for (i, flags) in [&["--cross-fs"][..], &["-x", "--cross-fs"]]
        .into_iter()
        .enumerate()
    {
        let dst = d.path().join(format!("cross{i}"));
        let o = zinstall()
            .arg("copy")
            .args(flags)
            .arg(&src)
            .arg(&dst)
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}{err}");
        assert!(!err.contains("mounted here"), "{err}");
        assert_eq!(
            fs::read_to_string(dst.join("proc/1/status")).unwrap(),
            "running\n"
        );
    }
    // Help says which is the default.
    let o = zinstall().args(["copy", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&o.stdout).replace('\n', " ");
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        help.contains("-x, --one-file-system Stay on SRC's filesystem, as cp -x and rsync -x do (the default)")
            && help.contains("--cross-fs Descend into directories on other filesystems"),
        "{help}"
    );
}

/// Every file under `root`, relative, sorted.
fn files(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = walkdir::WalkDir::new(root)
        .into_iter()
        .map(Result::unwrap)
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            e.path()
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    v.sort();
    v
}

#[test]
fn excludes_match_names_at_any_depth_and_paths_from_the_source() {
    let d = Tmp::new();
    let src = d.path().join("src");
    for f in [
        "app.log",
        "var/log/deep/syslog.log",
        "src/.git/HEAD",
        "src/main.c",
        "src/main.o",
        "tmp/scratch",
        "usr/tmp/kept",
    ] {
        write(&src.join(f), "x", 0o644);
    }
    let list = d.path().join("excludes");
    fs::write(&list, "# objects\n*.o\n\n; anchored\n/tmp\n").unwrap();
    let dst = d.path().join("dst");
    let o = zinstall()
        .args(["copy", "--exclude", "*.log", "--exclude", ".git"])
        .arg("--exclude-from")
        .arg(&list)
        .arg(&src)
        .arg(&dst)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert_eq!(files(&dst), ["src/main.c", "usr/tmp/kept"]);
    assert!(out.contains("5 skipped"), "{out}");

    // The list from standard input.
    let o = zinstall()
        .args(["copy", "--exclude-from", "-"])
        .arg(&src)
        .arg(d.path().join("stdin"))
        .stdin(fs::File::open(&list).unwrap())
        .output()
        .unwrap();
    assert!(o.status.success(), "{:?}", text(&o));
    assert!(!files(&d.path().join("stdin")).contains(&"src/main.o".into()));

    // A list that is not there: an error naming it, nothing copied.
    let missing = d.path().join("no-such-list");
    let o = zinstall()
        .arg("copy")
        .arg("--exclude-from")
        .arg(&missing)
        .arg(&src)
        .arg(d.path().join("none"))
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "zinstall: error: read {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
    assert!(!d.path().join("none").exists());
}

#[test]
fn cp_and_rsync_spellings_are_taken() {
    let d = Tmp::new();
    let src = d.path().join("src");
    for f in [
        "var/cache/apt/a.deb",
        "var/cache/x",
        "var/cached",
        "etc/motd",
    ] {
        write(&src.join(f), "x", 0o644);
    }
    // `-a` and `-aH`, as typed after cp and rsync; rsync's `dir/***`.
    let dst = d.path().join("dst");
    let o = zinstall()
        .args(["copy", "-aH", "--exclude", "var/cache/***"])
        .arg(&src)
        .arg(&dst)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert_eq!(files(&dst), ["etc/motd", "var/cached"]);
    assert!(!dst.join("var/cache").exists());
    let o = zinstall()
        .args(["copy", "--archive"])
        .arg(&src)
        .arg(d.path().join("long"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{:?}", text(&o));
    assert_eq!(files(&d.path().join("long")).len(), 4);

    // `***` other than at the end: an error naming it, nothing copied.
    let o = zinstall()
        .args(["copy", "-a", "--exclude", "var/***/apt"])
        .arg(&src)
        .arg(d.path().join("bad"))
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("var/***/apt"), "{err}");
    assert!(!d.path().join("bad").exists());
}

/// A tree with modes, a hard link and a deeper directory, for the
/// spellings that keep what copy always keeps.
fn kept_tree(src: &Path) {
    write(&src.join("etc/shadow"), "root:*:\n", 0o600);
    write(&src.join("usr/bin/tool"), "#!/bin/sh\n", 0o755);
    fs::hard_link(src.join("usr/bin/tool"), src.join("usr/bin/alias")).unwrap();
}

#[test]
fn cp_and_rsync_flags_that_keep_everything_change_nothing() {
    let d = Tmp::new();
    let src = d.path().join("src");
    kept_tree(&src);
    let want = zinstall_testkit::listing(&src);
    for (i, flags) in [
        &["-r"][..],
        &["-R"],
        &["--recursive"],
        &["-p"],
        &["--preserve"],
        &["--preserve=all"],
        &["--preserve=mode,ownership,timestamps,links,xattr"],
        &["-rp"],
        &["-aHv"],
        &["-a", "-r", "-p", "-H"],
    ]
    .iter()
    .enumerate()
    {
        let dst = d.path().join(format!("dst{i}"));
        let o = zinstall()
            .arg("copy")
            .args(*flags)
            .arg(&src)
            .arg(&dst)
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{flags:?}: {out}{err}");
        // Nothing extra is said, as for -a.
        assert!(!err.contains("note:"), "{flags:?}: {err}");
        assert_eq!(zinstall_testkit::listing(&dst), want, "{flags:?}");
        let ino = |p: &str| zinstall_testkit::fsops::ino(&dst.join(p));
        assert_eq!(ino("usr/bin/tool"), ino("usr/bin/alias"), "{flags:?}");
    }
}

#[test]
fn rsync_z_is_taken_with_a_note_that_it_does_nothing_here() {
    let d = Tmp::new();
    let src = d.path().join("src");
    kept_tree(&src);
    for (i, flags) in [&["-avz"][..], &["-z"], &["--compress", "-a"]]
        .iter()
        .enumerate()
    {
        let dst = d.path().join(format!("dst{i}"));
        let o = zinstall()
            .arg("copy")
            .args(*flags)
            .arg(&src)
            .arg(&dst)
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{flags:?}: {out}{err}");
        let notes: Vec<_> =
            err.lines().filter(|l| l.contains("note:")).collect();
        assert_eq!(
            notes,
            [
                "zinstall: note: -z (compress in transit) has no meaning for \
              a local copy: nothing is sent over a network; ignored"
            ],
            "{flags:?}: {err}"
        );
        assert_eq!(
            fs::read_to_string(dst.join("etc/shadow")).unwrap(),
            "root:*:\n"
        );
    }
}

#[test]
fn habits_that_mean_something_else_are_answered_with_what_to_do() {
    let d = Tmp::new();
    let src = d.path().join("src");
    kept_tree(&src);
    let dst = d.path().join("dst");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let zp = s(&d.path().join("z"));
    let tarball = s(&d.path().join("root.tar"));
    let delete = "zinstall copy never deletes: into an empty DST it makes \
                  an exact copy, and --merge replaces the entries that \
                  differ and keeps the rest; to make DST exact, copy into a \
                  new directory; to bring an installed root in line with \
                  its profile, removing what the source no longer has, run \
                  zinstall update --zonepath ZONEPATH";
    let tar = format!(
        "zinstall install is not tar: it takes the zonepath with \
         --zonepath and the archives as arguments: zinstall install \
         --zonepath {zp} {tarball}"
    );
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            vec!["copy".into(), "-a".into(), "--delete".into()],
            delete.into(),
        ),
        (
            vec!["copy".into(), "--delete-after".into(), "-aH".into()],
            delete.into(),
        ),
        (
            vec!["copy".into(), "--no-preserve=mode".into()],
            "zinstall copy always keeps owners, modes, times, ACLs, xattrs, \
             links and holes and cannot drop any of them; use cp \
             --no-preserve for a copy without them"
                .into(),
        ),
        (
            vec![
                "install".into(),
                "-C".into(),
                zp.clone(),
                "-xf".into(),
                tarball.clone(),
            ],
            tar.clone(),
        ),
        (
            vec![
                "install".into(),
                "-xf".into(),
                tarball.clone(),
                format!("-C{zp}"),
            ],
            tar.clone(),
        ),
        (
            vec![
                "install".into(),
                "--directory".into(),
                zp.clone(),
                "--extract".into(),
                format!("--file={tarball}"),
            ],
            tar.clone(),
        ),
    ];
    for (args, said) in cases {
        for json in [false, true] {
            let mut c = zinstall();
            c.args(&args);
            if args[0] == "copy" {
                c.arg(&src).arg(&dst);
            }
            let o = c.args(json.then_some("--json")).output().unwrap();
            let (out, err) = text(&o);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {out}{err}");
            if json {
                let v: serde_json::Value = serde_json::from_str(&out)
                    .unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"));
                assert_eq!(v["error"]["message"], *said, "{args:?}");
            } else {
                assert_eq!(
                    err.trim_end(),
                    format!("zinstall: error: {said}"),
                    "{args:?}"
                );
            }
            assert!(!dst.exists() && !Path::new(&zp).exists(), "{args:?}");
        }
    }
}

#[test]
fn a_value_written_after_a_space_to_an_equals_option_is_refused() {
    let d = Tmp::new();
    let src = d.path().join("src");
    kept_tree(&src);
    let dst = d.path().join("dst");
    let sock = d.path().join("zinstalld.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let other = d.path().join("daemon-socket");
    let _other = std::os::unix::net::UnixListener::bind(&other).unwrap();
    let named = d.path().join("socket-file");
    let said = |flag: &str, value: &Path| {
        format!(
            "zinstall: error: {flag} takes its value after an =: write \
             {flag}={v} (a bare {flag} takes the default, and {v} would be \
             read as the command's next argument)",
            v = value.display()
        )
    };
    let cases: Vec<(Vec<&std::ffi::OsStr>, String)> = vec![
        // Read as the source today, the copy going to the daemon.
        (
            vec![
                "copy".as_ref(),
                "--daemon".as_ref(),
                sock.as_ref(),
                src.as_ref(),
            ],
            said("--daemon", &sock),
        ),
        // A socket by its type, whatever its name.
        (
            vec![
                "copy".as_ref(),
                "--daemon".as_ref(),
                other.as_ref(),
                src.as_ref(),
            ],
            said("--daemon", &other),
        ),
        // Before the command: read as the command.
        (
            vec![
                "--daemon".as_ref(),
                sock.as_ref(),
                "copy".as_ref(),
                src.as_ref(),
                dst.as_ref(),
            ],
            said("--daemon", &sock),
        ),
        // One argument too many after the shift.
        (
            vec![
                "copy".as_ref(),
                "--daemon".as_ref(),
                named.as_ref(),
                src.as_ref(),
                dst.as_ref(),
            ],
            said("--daemon", &named),
        ),
        (
            vec![
                "provision".as_ref(),
                "-n".as_ref(),
                "--qemu-img".as_ref(),
                "/usr/bin/qemu-img".as_ref(),
                src.as_ref(),
                "--out".as_ref(),
                dst.as_ref(),
            ],
            said("--qemu-img", Path::new("/usr/bin/qemu-img")),
        ),
    ];
    for (args, want) in cases {
        let o = zinstall().args(&args).output().unwrap();
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {out}{err}");
        assert_eq!(err.trim_end(), want, "{args:?}");
        assert!(!dst.exists(), "{args:?}");
    }
    // The = form and a bare flag before a command are as they were.
    let o = zinstall()
        .arg("copy")
        .arg(format!("--daemon={}", d.path().join("none.sock").display()))
        .arg(&src)
        .arg(&dst)
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert!(!err.contains("takes its value after an ="), "{err}");
}
