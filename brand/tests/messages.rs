//! What the binaries say when something is wrong, as a user meets it: a
//! file that does not parse, an option that takes a value, a command
//! that only reads, `--json` on every failure.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

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

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
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
                ) && hint.contains(
                    "/etc/zinstall/profile-zone.toml for a sparse illumos zone"
                ),
                "{hint}"
            );
        } else {
            assert!(
                hint.ends_with(
                    "the profile was the built-in default (there is no \
                     /etc/zinstall/profile.toml), for a Linux root \
                     filesystem; for a sparse illumos zone use --profile \
                     /etc/zinstall/profile-zone.toml (see zinstall(5))"
                ),
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
