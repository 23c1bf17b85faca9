//! Exclude patterns as rsync reads them: a name at any depth without a
//! slash, a path anchored at the source with one; lists of them in files.

use std::fs;
use std::path::Path;

use zinstall_engine::rules::{self, Rule};
use zinstall_engine::{Action, Error, Op, Plan};
use zinstall_testkit::Tmp;

fn write(p: &Path) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, p.to_string_lossy().as_bytes()).unwrap();
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

fn copy_excluding(src: &Path, dst: &Path, patterns: &[&str]) -> Vec<String> {
    let patterns: Vec<String> =
        patterns.iter().map(|p| p.to_string()).collect();
    let set = rules::excludes(&patterns).unwrap().unwrap();
    // Several walkers: each matches the names it reads.
    let walkers = zinstall_engine::Tunables {
        copy_walkers: 4,
        ..zinstall_engine::Tunables::default()
    };
    let r = Plan::new(src, dst)
        .tunables(walkers)
        .rules(set, Path::new(""))
        .run()
        .unwrap();
    let kept = files(dst);
    // A dry run skips the same entries.
    let set = rules::excludes(&patterns).unwrap().unwrap();
    let dry = Plan::new(src, dst.with_extension("dry"))
        .tunables(walkers)
        .rules(set, Path::new(""))
        .dry_run(true)
        .run()
        .unwrap();
    assert_eq!(dry.stats.files, r.stats.files);
    assert_eq!(dry.stats.skipped, r.stats.skipped);
    kept
}

#[test]
fn a_name_matches_at_any_depth_and_a_path_only_where_it_is() {
    let d = Tmp::new();
    let src = d.path().join("src");
    for f in [
        "top.log",
        "top.txt",
        "a/x.log",
        "a/b/c/y.log",
        "a/b/keep.txt",
        "a/cache/z",
        "cache/w",
        "var/cache/v",
        "var/lib/data",
        "x/var/lib/data",
        "a/top.txt",
        "build/out",
        "a/build/out",
    ] {
        write(&src.join(f));
    }
    let kept = copy_excluding(
        &src,
        &d.path().join("1"),
        &["*.log", "cache", "/top.txt", "var/lib", "build/"],
    );
    assert_eq!(
        kept,
        ["a/b/keep.txt", "a/top.txt", "x/var/lib/data"],
        "*.log and cache and build/ at any depth; /top.txt and var/lib \
         only at the top"
    );
    // `**` crosses directories (none too) in an anchored pattern.
    let kept = copy_excluding(&src, &d.path().join("2"), &["a/**/*.txt"]);
    for gone in ["a/b/keep.txt", "a/top.txt"] {
        assert!(!kept.contains(&gone.to_string()), "{gone}: {kept:?}");
    }
    assert!(kept.contains(&"top.txt".to_string()), "{kept:?}");
}

#[test]
fn patterns_become_skip_rules() {
    for (given, glob) in [
        ("*.log", "**/*.log"),
        (".git/", "**/.git"),
        ("/tmp", "tmp"),
        ("//tmp/", "tmp"),
        ("var/cache", "var/cache"),
        ("var/cache/", "var/cache"),
    ] {
        let r = Rule::exclude(given);
        assert_eq!((r.pattern.as_str(), &r.action), (glob, &Action::Skip));
    }
}

#[test]
fn exclude_files_read_as_rsync_reads_them() {
    let d = Tmp::new();
    let list = d.path().join("excludes");
    fs::write(&list, "# build output\n*.o\r\n\n; editor files\n*~\n/tmp\n")
        .unwrap();
    assert_eq!(
        rules::read_exclude_file(&list).unwrap(),
        ["*.o", "*~", "/tmp"]
    );
    let missing = d.path().join("missing");
    let e = rules::read_exclude_file(&missing).unwrap_err();
    assert!(
        matches!(&e, Error::Io { op: Op::Read, path, .. } if path == &missing),
        "{e}"
    );
    assert!(
        e.to_string()
            .starts_with(&format!("read {}:", missing.display()))
    );
    let e = rules::excludes(&["/".to_string()]).unwrap_err();
    assert!(e.to_string().contains("empty exclude pattern"), "{e}");
    let e = rules::excludes(&["a/[b".to_string()]).unwrap_err();
    assert!(e.to_string().contains("\"a/[b\""), "{e}");
}
