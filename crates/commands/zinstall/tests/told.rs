//! Messages that tell the truth about a failure: a full destination
//! said once, with what is left; a note on profiles only where the
//! profile decided the outcome, naming only files that exist; a refused
//! install that leaves the zonepath as it was, or says what is left; an
//! update of a zonepath never installed saying what to run instead.

use std::fs;
use std::path::Path;
use std::process::Command;
use zinstall_testkit::run::streams as text;

use zinstall_testkit::Tmp;

fn zinstall() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zinstall"));
    c.env("ZINSTALL_DEFAULTS", "/dev/null");
    c
}

/// Three times what an 8 MiB filesystem holds, in many files, so that
/// many entries fail.
fn more_than_fits(src: &Path) {
    for i in 0..48 {
        let dir = src.join(format!("d{i:02}"));
        fs::create_dir_all(&dir).unwrap();
        for j in 0..16 {
            fs::write(
                dir.join(format!("f{j:02}")),
                zinstall_testkit::pseudo_random(32 << 10, (i * 16 + j) as u64),
            )
            .unwrap();
        }
    }
}

#[test]
fn a_full_destination_is_said_once_with_what_is_left() {
    let Some(fs_) = zinstall_testkit::LoopFs::require(
        zinstall_testkit::Kind::Ext4,
        8 << 20,
    ) else {
        return;
    };
    let d = Tmp::new();
    let src = d.path().join("src");
    more_than_fits(&src);
    let dst = fs_.path().join("dst");
    let o = zinstall().arg("copy").arg(&src).arg(&dst).output().unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    let full: Vec<_> = err
        .lines()
        .filter(|l| l.contains("No space left on device"))
        .collect();
    assert_eq!(full.len(), 1, "one line for the full disk:\n{err}");
    let line = full[0];
    let head =
        format!("zinstall: error: {}'s filesystem is full: ", dst.display());
    assert!(line.starts_with(&head), "{line}");
    let n: u64 = line[head.len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|e| panic!("{e}: {line}"));
    assert!(n > 100, "most of 768 files fail: {line}");
    // The first error, with its operation and the path it failed on.
    let first = line.split("(first: ").nth(1).unwrap_or_default();
    assert!(
        first.contains(&format!("{}/d", dst.display()))
            && first.contains("No space left on device"),
        "{line}"
    );
    assert!(
        line.ends_with(&format!(
            "what was copied is left in {}: free space and run the same \
             copy with --merge to finish it",
            dst.display()
        )),
        "{line}"
    );
    assert!(!err.contains("more errors"), "{err}");
    assert!(dst.join("d00").is_dir(), "the partial copy is left");
}

#[test]
fn an_update_of_a_zonepath_never_installed_says_what_to_run() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Tmp::new();
    let empty = d.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let missing = d.path().join("missing");
    for (zp, state) in [
        (&empty, "no install is recorded there"),
        (&missing, "it does not exist"),
    ] {
        let o = zinstall()
            .args(["update", "--zonepath"])
            .arg(zp)
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{out}{err}");
        let z = zp.display();
        assert_eq!(
            err.trim_end(),
            format!(
                "zinstall: error: update {z}: {z} was never installed by \
                 zinstall ({state}), so there is no root to update: install \
                 one with zinstall install --zonepath {z} [IMAGE...]"
            ),
        );
        assert!(!missing.exists());
    }
}

#[test]
fn a_failing_default_profile_names_itself_and_the_other() {
    let d = Tmp::new();
    // A source root without the trees a Linux root is made of.
    fs::create_dir(d.path().join("src")).unwrap();
    for json in [false, true] {
        let o = zinstall()
            .args(["install", "-n", "--source-root"])
            .arg(d.path().join("src"))
            .arg("--zonepath")
            .arg(d.path().join("z"))
            .args(json.then_some("--json"))
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{out}{err}");
        let hint = if json {
            let v: serde_json::Value =
                serde_json::from_str(out.lines().last().unwrap()).unwrap();
            v["error"]["hint"].as_str().unwrap().to_string()
        } else {
            let line = err.lines().find(|l| l.starts_with("zinstall: note: "));
            line.unwrap_or_else(|| panic!("no note: {err}")).to_string()
        };
        if Path::new("/etc/zinstall/profile.toml").exists() {
            // This machine has one installed: it is named, and so is the
            // other.
            assert!(
                hint.contains(
                    "the profile was the default, /etc/zinstall/profile.toml"
                ),
                "{hint}"
            );
        } else {
            assert!(
                hint.contains(
                    "the profile was the built-in default (there is no \
                     /etc/zinstall/profile.toml), for a Linux root \
                     filesystem; for a sparse illumos zone "
                ),
                "{hint}"
            );
        }
        // The other profile is named as a file to give only where it is.
        let other = "/etc/zinstall/profile-zone.toml";
        if Path::new(other).exists() {
            assert!(
                hint.ends_with(&format!(
                    "use --profile {other} (see zinstall(5))"
                )),
                "{hint}"
            );
        } else {
            assert!(
                hint.ends_with(&format!(
                    "write a profile and give it with --profile (there is \
                     no {other}, which the packages install) (see \
                     zinstall(5))"
                )),
                "{hint}"
            );
        }
    }
    // A profile named on the command line is the user's choice: no note.
    let p = d.path().join("p.toml");
    fs::write(&p, "trees = [\"usr\"]\n").unwrap();
    let o = zinstall()
        .args(["install", "-n", "--profile"])
        .arg(&p)
        .arg("--source-root")
        .arg(d.path().join("src"))
        .arg("--zonepath")
        .arg(d.path().join("z"))
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("note:"), "{err}");
}

#[test]
fn the_note_on_profiles_follows_only_failures_the_profile_decided() {
    let d = Tmp::new();
    // A real archive cut short: the failure is the image's, the same
    // under any profile.
    let tree = d.path().join("tree");
    fs::create_dir_all(tree.join("etc")).unwrap();
    fs::write(tree.join("etc/big"), vec![7u8; 64 << 10]).unwrap();
    let whole = d.path().join("whole.tar");
    let o = zinstall_testkit::tool("tar")
        .arg("-cf")
        .arg(&whole)
        .arg("-C")
        .arg(&tree)
        .arg("etc")
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let cut = d.path().join("cut.tar");
    fs::write(&cut, &fs::read(&whole).unwrap()[..20_000]).unwrap();
    for json in [false, true] {
        let o = zinstall()
            .args(["install", "-n", "--zonepath"])
            .arg(d.path().join("z"))
            .arg(&cut)
            .args(json.then_some("--json"))
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{out}{err}");
        assert!(
            out.contains("truncated") || err.contains("truncated"),
            "{out}{err}"
        );
        assert!(!err.contains("note:") && !err.contains("profile"), "{err}");
        if json {
            let v: serde_json::Value =
                serde_json::from_str(out.lines().last().unwrap()).unwrap();
            assert!(v["error"]["hint"].is_null(), "{v}");
        }
    }
}

#[test]
fn a_refused_install_leaves_the_zonepath_as_it_was_or_says_what_is_left() {
    use std::os::unix::fs::PermissionsExt;
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Tmp::new();
    let src = d.path().join("src");
    fs::create_dir_all(src.join("usr/bin")).unwrap();
    fs::write(src.join("usr/bin/tool"), "x\n").unwrap();
    let profile = d.path().join("p.toml");
    fs::write(
        &profile,
        format!(
            "source_root = {src:?}\ntrees = [\"usr\"]\nlog = {:?}\n",
            d.path().join("install.log")
        ),
    )
    .unwrap();
    // A zonepath of 0755 whose root zinstall did not make: refused.
    let zp = d.path().join("z");
    fs::create_dir_all(zp.join("root/etc")).unwrap();
    fs::write(zp.join("root/etc/hostname"), "mine\n").unwrap();
    fs::set_permissions(&zp, fs::Permissions::from_mode(0o755)).unwrap();
    let o = zinstall()
        .args(["install", "--profile"])
        .arg(&profile)
        .arg("--zonepath")
        .arg(&zp)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(err.contains("(nothing was changed)"), "{err}");
    let mode = fs::metadata(&zp).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o755, "{err}");
    assert!(
        err.contains(&format!("set {} back to mode 0755", zp.display())),
        "{err}"
    );
    let mut names: Vec<_> = fs::read_dir(&zp)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["root"], "{err}");

    // A zonepath this install made, refused at an image that is not
    // there: removed, lock and all, and nothing was changed.
    let made = d.path().join("made");
    let o = zinstall()
        .args(["install", "--profile"])
        .arg(&profile)
        .arg("--zonepath")
        .arg(&made)
        .arg(d.path().join("no-such.tar"))
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(!made.exists(), "{err}");
    assert!(!err.contains("is left"), "{err}");
}

#[test]
fn an_install_onto_a_full_filesystem_says_so_once() {
    let Some(fs_) = zinstall_testkit::LoopFs::require(
        zinstall_testkit::Kind::Ext4,
        8 << 20,
    ) else {
        return;
    };
    let d = Tmp::new();
    let src = d.path().join("src");
    more_than_fits(&src.join("data"));
    let profile = d.path().join("p.toml");
    fs::write(
        &profile,
        format!(
            "source_root = {src:?}\ntrees = [\"data\"]\nlog = {:?}\n",
            d.path().join("install.log")
        ),
    )
    .unwrap();
    let zp = fs_.path().join("z");
    let o = zinstall()
        .args(["install", "--threads", "8", "--profile"])
        .arg(&profile)
        .arg("--zonepath")
        .arg(&zp)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert_eq!(
        err.matches("No space left on device").count(),
        1,
        "said once:\n{err}"
    );
    assert!(
        err.contains("replicate /data: the root's filesystem is full (first: ")
            && err.contains(
                "an install stops at its first error, since a root with \
                 holes is not a root (the partial root was removed)"
            ),
        "{err}"
    );
    assert!(!zp.exists(), "{err}");
}
