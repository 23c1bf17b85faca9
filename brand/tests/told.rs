//! Messages that tell the truth about a failure: a full destination
//! said once, with what is left; a note on profiles only where the
//! profile decided the outcome, naming only files that exist; a refused
//! install that leaves the zonepath as it was, or says what is left; an
//! update of a zonepath never installed saying what to run instead.

use std::fs;
use std::process::Command;
use zinstall_testkit::run::streams as text;

use zinstall_testkit::Tmp;

fn zinstall() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zinstall"));
    c.env("ZINSTALL_DEFAULTS", "/dev/null");
    c
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
    // Three times what the filesystem holds, in many files, so that
    // many entries fail.
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
