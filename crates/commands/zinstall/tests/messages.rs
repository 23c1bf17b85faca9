//! What the binaries say when something is wrong, as a user meets it: a
//! file that does not parse, an option that takes a value, a command
//! that only reads, `--json` on every failure.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};
use zinstall_testkit::run::streams as text;

use zinstall_testkit::Tmp;

fn bin(name: &str) -> Command {
    let path = match name {
        "zinstall" => env!("CARGO_BIN_EXE_zinstall"),
        "zinstalld" => env!("CARGO_BIN_EXE_zinstalld"),
        "brand" => env!("CARGO_BIN_EXE_brand"),
        _ => unreachable!("{name}"),
    };
    let mut c = Command::new(path);
    c.env("ZINSTALL_DEFAULTS", "/dev/null");
    c
}

fn zinstall() -> Command {
    bin("zinstall")
}

/// A TOML file with an error on its second line.
fn broken_toml(path: &Path, first: &str) {
    fs::write(path, format!("{first}\nlog = = 3\n")).unwrap();
}

#[test]
fn parser_errors_show_file_line_column_the_line_and_a_caret() {
    let d = Tmp::new();
    let profile = d.path().join("profile.toml");
    broken_toml(&profile, "trees = [\"usr\"]");
    let caret = "  |\n2 | log = = 3\n  |       ^\n";

    let o = zinstall()
        .args(["install", "-n", "--zonepath"])
        .arg(d.path().join("z"))
        .arg("--profile")
        .arg(&profile)
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(
        err,
        format!(
            "zinstall: error: profile {}:2:7: extra `=`, expected nothing\n{caret}",
            profile.display()
        )
    );

    let config = d.path().join("zinstalld.toml");
    broken_toml(&config, "copy_threads = 2");
    let o = bin("zinstalld")
        .arg("--config")
        .arg(&config)
        .arg("--socket")
        .arg(d.path().join("sock"))
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(
        err,
        format!(
            "zinstalld: error: {}:2:7: extra `=`, expected nothing\n{caret}",
            config.display()
        )
    );
    assert!(!d.path().join("sock").exists());

    // The zoneadm hook, as zoneadm shows a brand's errors.
    fs::create_dir(d.path().join("z")).unwrap();
    let o = bin("brand")
        .env("ZINSTALL_PROFILE", &profile)
        .args(["-z", "z", "-R"])
        .arg(d.path().join("z"))
        .arg("install")
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(254), "{err}");
    assert_eq!(
        err,
        format!(
            "ERROR: zinstall: profile {}:2:7: extra `=`, expected nothing\n{caret}",
            profile.display()
        )
    );

    // A statemap that is not JSON.
    let map = d.path().join("map.json");
    fs::write(&map, "{\"start\": [0, 0],\n \"title\": nope}\n").unwrap();
    let o = zinstall().arg("statemap").arg(&map).output().unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(
        err,
        format!(
            "zinstall: error: {}:2:12: not JSON: expected ident\n  |\n\
             2 |  \"title\": nope}}\n  |            ^\n",
            map.display()
        )
    );
}

/// Every line of stdout is a JSON object; returns the last.
fn last_json(o: &Output) -> serde_json::Value {
    let (out, err) = text(o);
    assert!(!out.trim().is_empty(), "nothing on stdout; stderr: {err}");
    let mut last = serde_json::Value::Null;
    for line in out.lines() {
        last = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}\n{out}"));
    }
    last
}

#[test]
fn json_gives_an_object_on_stdout_for_every_failure() {
    let d = Tmp::new();
    let src = d.path().join("src");
    fs::create_dir_all(src.join("a")).unwrap();
    fs::write(src.join("a/f"), "x").unwrap();
    let missing = d.path().join("missing");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let out = s(&d.path().join("out"));
    let cache = s(&d.path().join("cache"));
    // (arguments, exit status, what the message says)
    let cases: Vec<(Vec<String>, i32, String)> = vec![
        // Before anything starts: a bad option, a bad tunable, a bad
        // profile, an image that is not there, a cache that is not there.
        (
            vec![
                "copy".into(),
                "--json".into(),
                "--bogus".into(),
                s(&src),
                out.clone(),
            ],
            2,
            "unexpected argument '--bogus'".into(),
        ),
        (
            vec![
                "copy".into(),
                "--json".into(),
                "--threads".into(),
                "0".into(),
                s(&src),
                out.clone(),
            ],
            2,
            "--threads".into(),
        ),
        (
            vec![
                "install".into(),
                "--json".into(),
                "--zonepath".into(),
                out.clone(),
                "--profile".into(),
                s(&missing),
            ],
            2,
            s(&missing),
        ),
        (
            vec![
                "provision".into(),
                "--json".into(),
                s(&missing),
                "--out".into(),
                out.clone(),
                "--cache".into(),
                cache.clone(),
            ],
            1,
            s(&missing),
        ),
        (
            vec![
                "provision".into(),
                "--json".into(),
                "-n".into(),
                s(&missing),
                "--out".into(),
                out.clone(),
                "--cache".into(),
                cache.clone(),
            ],
            1,
            s(&missing),
        ),
        (
            vec![
                "provision".into(),
                "--json".into(),
                "--threads".into(),
                "x".into(),
                s(&missing),
                "--out".into(),
                out.clone(),
            ],
            2,
            "--threads".into(),
        ),
        (
            vec!["verify".into(), "--json".into(), s(&src), s(&missing)],
            2,
            s(&missing),
        ),
        (
            vec![
                "cache".into(),
                "--cache".into(),
                cache.clone(),
                "list".into(),
                "--json".into(),
            ],
            1,
            cache.clone(),
        ),
        (
            vec![
                "cache".into(),
                "--cache".into(),
                cache.clone(),
                "gc".into(),
                "--json".into(),
            ],
            1,
            cache.clone(),
        ),
        (
            vec![
                "--daemon=".to_string() + &s(&missing),
                "copy".into(),
                "--json".into(),
                s(&src),
                out.clone(),
            ],
            1,
            s(&missing),
        ),
        // Later: the copy or install itself fails.
        (
            vec!["copy".into(), "--json".into(), s(&missing), out.clone()],
            1,
            s(&missing),
        ),
        (
            vec![
                "install".into(),
                "--json".into(),
                "-n".into(),
                "--zonepath".into(),
                out.clone(),
                "--source-root".into(),
                s(&missing),
            ],
            1,
            s(&missing),
        ),
    ];
    for (args, status, says) in cases {
        let o = zinstall().args(&args).output().unwrap();
        assert_eq!(o.status.code(), Some(status), "{args:?}: {:?}", text(&o));
        let v = last_json(&o);
        let message = v["error"]["message"]
            .as_str()
            .or_else(|| v["errors"][0]["message"].as_str())
            .unwrap_or_else(|| panic!("{args:?}: no error in {v}"));
        assert!(message.contains(&says), "{args:?}: {message}");
        assert_ne!(v["ok"], true, "{args:?}: {v}");
    }
    assert!(!Path::new(&out).exists());
    assert!(!Path::new(&cache).exists());
}

#[test]
fn reading_creates_nothing_and_a_named_file_must_be_there() {
    let d = Tmp::new();
    let cache = d.path().join("typo-cache");
    for args in [&["list"][..], &["gc"], &["gc", "--dry-run"]] {
        let o = zinstall()
            .arg("cache")
            .arg("--cache")
            .arg(&cache)
            .args(args)
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {out}{err}");
        assert_eq!(
            err,
            format!(
                "zinstall: error: open {}: No such file or directory (os \
                 error 2)\n",
                cache.display()
            ),
            "{args:?}"
        );
        assert!(out.is_empty(), "{out}");
        assert!(!cache.exists(), "{args:?} made the cache");
    }
    // A directory that is no cache is not made one.
    let o = zinstall()
        .arg("cache")
        .arg("--cache")
        .arg(d.path())
        .arg("gc")
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert!(
        err.contains("not a zinstall cache (no entries/ in it)"),
        "{err}"
    );
    assert!(!d.path().join("entries").exists());

    // ZINSTALL_DEFAULTS naming a missing file, as --defaults would.
    fs::create_dir(d.path().join("src")).unwrap();
    let gone = d.path().join("gone-defaults");
    for how in ["env", "flag"] {
        let mut c = zinstall();
        c.arg("copy");
        if how == "env" {
            c.env("ZINSTALL_DEFAULTS", &gone);
        } else {
            c.arg("--defaults").arg(&gone);
        }
        let o = c
            .arg(d.path().join("src"))
            .arg(d.path().join("dst"))
            .output()
            .unwrap();
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{how}: {err}");
        assert!(err.contains(&gone.display().to_string()), "{how}: {err}");
        assert!(!d.path().join("dst").exists(), "{how}");
    }
}

#[test]
fn optional_values_take_no_positional_and_help_shows_every_brace() {
    let d = Tmp::new();
    let image = d.path().join("disk.raw");
    fs::write(&image, vec![0u8; 1 << 16]).unwrap();
    let out = d.path().join("out");
    let cache = d.path().join("cache");
    // --qemu-img then the image: the image is the image.
    let o = zinstall()
        .args(["provision", "-n", "--qemu-img"])
        .arg(&image)
        .arg("--out")
        .arg(&out)
        .arg("--cache")
        .arg(&cache)
        .output()
        .unwrap();
    let (stdout, err) = text(&o);
    assert!(o.status.success(), "{stdout}{err}");
    assert!(
        stdout.contains(&format!("for {} (", image.display())),
        "{stdout}"
    );
    // A path is given with =.
    let o = zinstall()
        .arg("provision")
        .arg("-n")
        .arg("--qemu-img=/usr/bin/qemu-img")
        .arg(&image)
        .arg("--out")
        .arg(&out)
        .arg("--cache")
        .arg(&cache)
        .output()
        .unwrap();
    assert!(o.status.success(), "{:?}", text(&o));
    assert!(!out.exists() && !cache.exists());

    let o = zinstall().args(["provision", "--help"]).output().unwrap();
    let help = String::from_utf8(o.stdout).unwrap();
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        help.contains(
            "Guests' hostname: {n} is the guest's number, {name} its name \
             (default {name}); a disk guest's seed sets it too"
        ),
        "{help}"
    );
    assert!(!help.contains('\u{1b}'), "{help:?}");
}

/// `zinstall trace` in a mount namespace of its own where tracefs is not
/// mounted, as root or (through setpriv) as nobody.
fn trace_without_tracefs(as_nobody: bool, out: &Path) -> Output {
    let zinstall = env!("CARGO_BIN_EXE_zinstall");
    let run = if as_nobody {
        format!(
            "exec setpriv --reuid=65534 --regid=65534 --clear-groups {zinstall}"
        )
    } else {
        format!("exec {zinstall}")
    };
    zinstall_testkit::tool("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "umount /sys/kernel/debug 2>/dev/null; \
             umount /sys/kernel/tracing 2>/dev/null; \
             if [ -d /sys/kernel/tracing/events ]; then exit 99; fi; \
             {run} trace -o {} -- /bin/true",
            out.display()
        ))
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .output()
        .unwrap()
}

#[test]
fn trace_mounts_tracefs_or_says_how() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let _ = zinstall_testkit::tool("bpftrace");
    let _ = zinstall_testkit::tool("setpriv");
    let d = Tmp::new();
    std::os::unix::fs::chown(d.path(), Some(65534), Some(65534)).unwrap();
    let o = trace_without_tracefs(true, &d.path().join("nobody.json"));
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(
        err,
        "zinstall: error: tracefs is not mounted on /sys/kernel/tracing, and \
         bpftrace needs it for the scheduler's tracepoints: as root, run \
         `mount -t tracefs tracefs /sys/kernel/tracing`, then run zinstall \
         trace as root (bpftrace needs root too)\n"
    );
    let out = d.path().join("root.json");
    let o = trace_without_tracefs(false, &out);
    let (stdout, err) = text(&o);
    assert!(o.status.success(), "{stdout}{err}");
    assert!(
        err.contains(
            "zinstall: note: mounted tracefs on /sys/kernel/tracing for \
             bpftrace"
        ),
        "{err}"
    );
    assert!(stdout.contains("state changes"), "{stdout}");
    assert!(out.is_file());
    // The namespace went with the process: this one's tracefs is as it was.
}

#[test]
fn messages_name_the_problem() {
    let d = Tmp::new();
    let src = d.path().join("src");
    fs::create_dir_all(src.join("a")).unwrap();
    fs::write(src.join("a/f"), "one").unwrap();

    // An --out that is a file: said before anything is extracted.
    let image = d.path().join("disk.raw");
    fs::write(&image, vec![0u8; 1 << 16]).unwrap();
    let file = d.path().join("a-file");
    fs::write(&file, "x").unwrap();
    let cache = d.path().join("cache");
    let o = zinstall()
        .arg("provision")
        .arg(&image)
        .arg("--out")
        .arg(&file)
        .arg("--cache")
        .arg(&cache)
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(
        err,
        format!(
            "zinstall: error: {}: not a directory; the guests are made \
             inside the directory --out names (it is made if missing)\n",
            file.display()
        )
    );
    assert!(!cache.exists());

    // One guest, one file: singular words, sizes and times as the
    // progress line shows them.
    let o = zinstall()
        .arg("provision")
        .arg(&image)
        .arg("--out")
        .arg(d.path().join("guests"))
        .arg("--cache")
        .arg(&cache)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("qcow2 overlay, 64.00 KiB, "), "{out}");
    assert!(out.contains("provisioned 1 guest from "), "{out}");
    assert!(out.contains(", extracted once in "), "{out}");
    let o = zinstall()
        .arg("copy")
        .arg(&src)
        .arg(d.path().join("one"))
        .output()
        .unwrap();
    let (out, _) = text(&o);
    assert!(
        out.contains(": 1 file, 2 dirs, 0 symlinks, 0 hard links, 3 B in "),
        "{out}"
    );

    // Merging, which one is the directory.
    let dst = d.path().join("merge");
    fs::create_dir_all(dst.join("a/f")).unwrap();
    let o = zinstall()
        .args(["copy", "--merge"])
        .arg(&src)
        .arg(&dst)
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert!(
        err.contains(&format!(
            "zinstall: error: {}: a directory, where the source has a \
             non-directory (one is never replaced by the other)",
            dst.join("a/f").display()
        )),
        "{err}"
    );

    // Installed already: what to run, not an attach zinstall lacks.
    let profile = d.path().join("p.toml");
    fs::write(
        &profile,
        format!(
            "source_root = {:?}\ntrees = [\"a\"]\nlog = {:?}\n",
            src,
            d.path().join("log")
        ),
    )
    .unwrap();
    let install = || {
        zinstall()
            .args(["install", "--profile"])
            .arg(&profile)
            .arg("--zonepath")
            .arg(d.path().join("z"))
            .output()
            .unwrap()
    };
    assert!(install().status.success());
    let (_, err) = text(&install());
    assert!(
        err.contains(
            "to replace it, uninstall it first (zinstall uninstall \
             --zonepath, or zoneadm uninstall for a zone)"
        ) && !err.contains("attach"),
        "{err}"
    );

    // A typo is not answered with a command users do not have.
    let o = zinstall().arg("complet").output().unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2));
    assert!(!err.contains("completions"), "{err}");
    assert!(err.contains("'copy'"), "{err}");

    // --daemon where it does not apply is refused, not ignored.
    for args in [
        &["verify", "a", "b"][..],
        &["statemap", "x.json"],
        &["tune", "--runs", "1"],
        &["trace", "--", "true"],
        &["image", "create", "a", "b.tar"],
    ] {
        let o = zinstall()
            .arg("--daemon=/nonexistent.sock")
            .args(args)
            .output()
            .unwrap();
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.starts_with(&format!(
                "zinstall: error: --daemon does not apply to {}, which \
                 always runs here",
                args[0]
            )),
            "{args:?}: {err}"
        );
    }
}

/// `zinstall copy SRC DST` run by nobody (setpriv), with no defaults
/// file.
fn copy_as_nobody(src: &Path, dst: &Path) -> std::process::Output {
    zinstall_testkit::tool("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_zinstall"))
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .arg("copy")
        .arg(src)
        .arg(dst)
        .output()
        .unwrap()
}

#[test]
fn an_unreadable_directory_is_named_once() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Tmp::new();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let src = d.path().join("src");
    fs::create_dir_all(src.join("locked")).unwrap();
    fs::write(src.join("locked/x"), "x").unwrap();
    fs::set_permissions(src.join("locked"), fs::Permissions::from_mode(0o700))
        .unwrap();
    let o = copy_as_nobody(&src, &d.path().join("dst"));
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let errors: Vec<&str> =
        err.lines().filter(|l| l.contains(": error: ")).collect();
    assert_eq!(
        errors,
        [format!(
            "zinstall: error: readdir {}: Permission denied (os error 13)",
            src.join("locked").display()
        )]
    );
}

/// Run by a user other than root, a copy of a setuid-root and a
/// setgid-root file is that user's, without the set-id bits (as `cp -a`
/// by that user ends), said once; the user's own setuid file keeps its
/// bit.
#[test]
fn a_user_copy_drops_set_id_bits_of_owners_it_cannot_keep() {
    if !zinstall_testkit::require_root() {
        return;
    }
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let d = Tmp::new();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let src = d.path().join("src");
    fs::create_dir(&src).unwrap();
    for (name, mode) in [("suid", 0o4755), ("sgid", 0o2755), ("mine", 0o4755)] {
        fs::write(src.join(name), "#!/bin/sh\n").unwrap();
        if name == "mine" {
            // Before the mode: chown clears set-id bits.
            std::os::unix::fs::chown(src.join(name), Some(65534), Some(65534))
                .unwrap();
        }
        fs::set_permissions(src.join(name), fs::Permissions::from_mode(mode))
            .unwrap();
    }
    let dst = d.path().join("dst");
    let o = copy_as_nobody(&src, &dst);
    let (_, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let mode = |n: &str| fs::metadata(dst.join(n)).unwrap().mode() & 0o7777;
    assert_eq!(mode("suid"), 0o755, "{err}");
    assert_eq!(mode("sgid"), 0o755, "{err}");
    assert_eq!(mode("mine"), 0o4755, "{err}");
    assert_eq!(fs::metadata(dst.join("suid")).unwrap().uid(), 65534);
    assert_eq!(
        err.matches("setuid/setgid bits not kept").count(),
        1,
        "{err}"
    );
}

/// `zinstall ARGS` run on a terminal (`script` gives it one); what the
/// terminal received.
fn on_a_terminal(args: &[&std::ffi::OsStr]) -> String {
    let mut line = env!("CARGO_BIN_EXE_zinstall").to_string();
    for a in args {
        line.push(' ');
        line.push_str(&format!("'{}'", a.to_str().unwrap()));
    }
    let o = zinstall_testkit::tool("script")
        .args(["-q", "-e", "-c"])
        .arg(&line)
        .arg("/dev/null")
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .env("COLUMNS", "100")
        .output()
        .unwrap();
    let t = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{line}: {t}");
    t
}

#[test]
fn progress_shows_how_far_where_the_size_is_known() {
    let d = Tmp::new();
    let src = d.path().join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("d/data"), vec![7u8; 4 << 20]).unwrap();
    let layer = d.path().join("layer.tar");
    let o = Command::new("tar")
        .arg("-cf")
        .arg(&layer)
        .arg("-C")
        .arg(&src)
        .arg(".")
        .output()
        .unwrap();
    assert!(o.status.success(), "tar: {o:?}");
    let profile = d.path().join("p.toml");
    fs::write(
        &profile,
        format!(
            "source_root = {:?}\ntrees = [\"d\"]\nlog = {:?}\nimages_over_host = true\n",
            src,
            d.path().join("log")
        ),
    )
    .unwrap();
    let p = |p: &Path| p.as_os_str().to_owned();
    let s = |s: &str| std::ffi::OsString::from(s);
    // An install: the tree with a spinner, the archive with a bar.
    let t = on_a_terminal(&[
        &s("install"),
        &s("--profile"),
        &p(&profile),
        &s("--zonepath"),
        &p(&d.path().join("z")),
        &p(&layer),
    ]);
    // Each part is drawn as it begins (later draws depend on timing).
    let spinner = |t: &str| t.contains(" entries, ") || t.contains(" entry, ");
    let tree = t
        .split("replicating /d ")
        .nth(1)
        .unwrap_or_else(|| panic!("{t}"));
    assert!(spinner(tree), "{t}");
    assert!(t.contains("unpacking layer.tar ["), "{t}");
    assert!(t.contains("   0% of 4.00 MiB, 0s left"), "{t}");
    // A copy, whose size is not known: a spinner only.
    let t = on_a_terminal(&[&s("copy"), &p(&src), &p(&d.path().join("c"))]);
    assert!(t.contains("copying ") && spinner(&t), "{t}");
    assert!(!t.contains('%'), "{t}");
    // Provisioning two directory guests: the image read, then the second
    // guest's copy of a tree the first one counted.
    let t = on_a_terminal(&[
        &s("provision"),
        &p(&layer),
        &s("--count"),
        &s("2"),
        &s("--keep-identity"),
        &s("--out"),
        &p(&d.path().join("guests")),
        &s("--cache"),
        &p(&d.path().join("cache")),
    ]);
    let parts: Vec<&str> = t.split("made ").collect();
    assert_eq!(parts.len(), 3, "{t}");
    assert!(parts[0].contains("% of 4.00 MiB, "), "the image read: {t}");
    assert!(
        spinner(parts[0]),
        "the first guest's copy, of a tree not yet counted: {t}"
    );
    assert!(
        parts[1].contains("% of 4.00 MiB, "),
        "the second guest's copy of the tree the first counted: {t}"
    );
    // Not on a terminal: no bar at all.
    let o = zinstall()
        .arg("copy")
        .arg(&src)
        .arg(d.path().join("c2"))
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(!out.contains('\r') && !err.contains('\r'), "{out}{err}");
    assert!(
        !out.contains('\u{1b}') && !err.contains('\u{1b}'),
        "{out}{err}"
    );
}
