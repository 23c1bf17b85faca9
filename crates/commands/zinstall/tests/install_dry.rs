//! `zinstall install --dry-run`: the install's own steps, recording
//! instead of writing, checked against the install they stand for.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use zinstall_testkit::run::text;

use super::install::{world, zinstall};

/// The counts of a `--json` install's result.
fn counts(o: &Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&o.stdout);
    let last = out.lines().last().unwrap_or_default();
    let v: serde_json::Value =
        serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {out}"));
    let s = &v["result"]["stats"];
    assert!(s.is_object(), "{out}");
    serde_json::json!({
        "files": s["files"], "dirs": s["dirs"], "symlinks": s["symlinks"],
        "hardlinks": s["hardlinks"], "linked": s["linked"],
        "skipped": s["skipped"], "bytes": s["bytes"],
    })
}

/// Every path below `root`, relative, sorted.
fn paths_below(root: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = walkdir::WalkDir::new(root)
        .min_depth(1)
        .into_iter()
        .map(|e| e.unwrap().path().strip_prefix(root).unwrap().to_path_buf())
        .collect();
    v.sort();
    v
}

#[test]
fn dry_run_writes_nothing_and_counts_what_the_install_does() {
    let w = world(5);
    let (l1, l2) = (w.layer1.as_path(), w.layer2.as_path());
    let json = Path::new("--json");
    let before = paths_below(w.d.path());
    let o = zinstall(&w, &[Path::new("-n"), json, l1, l2]);
    assert!(o.status.success(), "{}", text(&o));
    let would = counts(&o);
    // No zonepath, lock, marker or log record: nothing at all changed.
    assert_eq!(paths_below(w.d.path()), before);
    assert!(!w.zonepath.exists());

    // -v lists every entry the install makes, by its path in the root.
    let o = zinstall(&w, &[Path::new("--dry-run"), Path::new("-v"), l1, l2]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(out.contains("would install into"), "{out}");
    let root = w.zonepath.join("root");
    let listed: std::collections::BTreeSet<PathBuf> = out
        .lines()
        .filter_map(|l| l.rsplit_once(" -> '"))
        .map(|(_, d)| {
            let d = d.split_once('\'').map_or(d, |(p, _)| p);
            Path::new(d).strip_prefix(&root).unwrap().to_path_buf()
        })
        .filter(|p| !p.as_os_str().is_empty())
        .collect();

    let o = zinstall(&w, &[json, l1, l2]);
    assert!(o.status.success(), "{}", text(&o));
    let made: std::collections::BTreeSet<PathBuf> =
        paths_below(&root).into_iter().collect();
    // The listing names only what was made, and everything made but
    // the directories made on the way to a listed entry.
    assert!(listed.is_subset(&made), "{listed:?}\n{made:?}");
    for p in made.difference(&listed) {
        assert!(root.join(p).is_dir(), "{p:?} made, not listed");
        assert!(listed.iter().any(|l| l.starts_with(p)), "{p:?}");
    }
    assert_eq!(counts(&o), would, "dry run and install disagree");

    // A second dry run is refused as the install would be.
    let o = zinstall(&w, &[Path::new("-n"), l1]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("installed"), "{}", text(&o));
}

#[test]
fn dry_run_refuses_a_hostile_layer_naming_the_member() {
    let w = world(1);
    let evil = w.d.path().join("evil.tar");
    let mut h = tar::Header::new_gnu();
    h.set_size(1);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    // The tar crate refuses to write `..` through set_path.
    h.as_old_mut().name[..10].copy_from_slice(b"../escaped");
    h.set_cksum();
    let mut b = tar::Builder::new(fs::File::create(&evil).unwrap());
    b.append(&h, &b"x"[..]).unwrap();
    b.finish().unwrap();
    let o = zinstall(&w, &[Path::new("-n"), &evil]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("../escaped"), "{}", text(&o));
    assert!(!w.zonepath.exists());
}

#[test]
fn dry_run_refuses_a_layout_the_install_cannot_make() {
    let w = world(1);
    // A mount point below a link: made in the staging tree, the link
    // finds its name taken.
    let mut p = fs::read_to_string(&w.profile).unwrap();
    p.push_str(
        r#"
[[link]]
path = "run"
target = "var/run"

[[dir]]
path = "run/lock"
mode = 0o1777
"#,
    );
    fs::write(&w.profile, p).unwrap();
    let real = zinstall(&w, &[]);
    assert!(!real.status.success(), "{}", text(&real));
    assert!(!w.zonepath.join("root").exists());
    let dry = zinstall(&w, &[Path::new("--dry-run")]);
    assert_eq!(dry.status.code(), real.status.code(), "{}", text(&dry));
    assert!(text(&dry).contains("link run"), "{}", text(&dry));
}

#[test]
fn dry_run_counts_the_layout_as_the_install_makes_it() {
    let w = world(3);
    // The profile's links and mount points too, beside the trees, the
    // baseline, the layers and the host file.
    let mut p = fs::read_to_string(&w.profile).unwrap();
    p.push_str(
        r#"
[[link]]
path = "bin"
target = "usr/bin"

[[link]]
path = "var/run"
target = "../run"

[[dir]]
path = "run"
mode = 0o755

[[dir]]
path = "var/tmp"
mode = 0o1777
"#,
    );
    fs::write(&w.profile, p).unwrap();
    let (l1, l2) = (w.layer1.as_path(), w.layer2.as_path());
    let json = Path::new("--json");
    let o = zinstall(&w, &[Path::new("--dry-run"), json, l1, l2]);
    assert!(o.status.success(), "{}", text(&o));
    let would = counts(&o);
    assert!(!w.zonepath.exists());
    let o = zinstall(&w, &[json, l1, l2]);
    assert!(o.status.success(), "{}", text(&o));
    let root = w.zonepath.join("root");
    assert!(root.join("var/tmp").is_dir() && root.join("bin").is_symlink());
    assert_eq!(counts(&o), would, "dry run and install disagree");
}
