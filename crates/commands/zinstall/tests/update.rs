//! `zinstall update` and `zinstall rollback`, and the brand hook's
//! `attach -u`: host trees changed in every way, the root compared with a
//! fresh install of the new source (`zinstall verify`: every attribute,
//! hard-link groups, xattrs); the zone's own changes kept; rollback; an
//! update killed at each stage and at random moments.

#![cfg(target_os = "linux")]

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

use zinstall_testkit::Tmp;
use zinstall_testkit::run::streams as text;

fn zinstall() -> Command {
    let mut c = zinstall_testkit::run::command(env!("CARGO_BIN_EXE_zinstall"));
    c.env("ZINSTALL_DEFAULTS", "/dev/null");
    c
}

fn run(args: &[&std::ffi::OsStr]) -> Output {
    zinstall().args(args).output().unwrap()
}

fn ok(o: Output) -> Output {
    assert!(o.status.success(), "{:?}", text(&o));
    o
}

/// A source root with trees `usr` and `lib`, a profile naming them.
struct World {
    d: Tmp,
    src: PathBuf,
    profile: PathBuf,
}

fn when(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

fn write(p: &Path, data: &str, mode: u32, mtime: u64) {
    if let Some(d) = p.parent() {
        fs::create_dir_all(d).unwrap();
    }
    fs::write(p, data).unwrap();
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
    fs::File::options()
        .write(true)
        .open(p)
        .unwrap()
        .set_modified(when(mtime))
        .unwrap();
}

fn setfattr(p: &Path, name: &str, value: &str) {
    let o = zinstall_testkit::tool("setfattr")
        .args(["-h", "-n", name, "-v", value])
        .arg(p)
        .output()
        .unwrap();
    assert!(o.status.success(), "{:?}", text(&o));
}

/// The file at `p` holds `want`.
#[track_caller]
fn assert_text(p: &Path, want: &str) {
    let got = fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    assert_eq!(got, want, "{}", p.display());
}

fn chown(p: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(gid)).unwrap();
}

impl World {
    fn new() -> World {
        let d = Tmp::new();
        let src = d.path().join("src");
        let s = |p: &str| src.join(p);
        write(&s("usr/bin/same"), "unchanged\n", 0o755, 1_600_000_000);
        write(&s("usr/bin/mod"), "version 1\n", 0o755, 1_600_000_000);
        write(&s("usr/bin/modsame"), "aaaa\n", 0o644, 1_600_000_000);
        write(&s("usr/bin/chmod"), "mode\n", 0o755, 1_600_000_000);
        write(&s("usr/bin/chown"), "owner\n", 0o644, 1_600_000_000);
        write(&s("usr/bin/gone"), "removed later\n", 0o644, 1_600_000_000);
        symlink("same", s("usr/bin/ln")).unwrap();
        write(&s("usr/bin/split1"), "linked\n", 0o644, 1_600_000_000);
        fs::hard_link(s("usr/bin/split1"), s("usr/bin/split2")).unwrap();
        write(&s("usr/bin/join1"), "joined\n", 0o644, 1_600_000_000);
        write(&s("usr/bin/join2"), "joined\n", 0o644, 1_600_000_000);
        write(
            &s("usr/lib2/d2f/inside"),
            "in a dir\n",
            0o644,
            1_600_000_000,
        );
        write(&s("usr/lib2/f2d"), "a file\n", 0o644, 1_600_000_000);
        write(&s("usr/share/xa"), "xattrs\n", 0o644, 1_600_000_000);
        setfattr(&s("usr/share/xa"), "user.a", "1");
        setfattr(&s("usr/share/xa"), "user.gone", "x");
        write(
            &s("usr/share/old/deep/f"),
            "old tree\n",
            0o644,
            1_600_000_000,
        );
        write(&s("usr/share/suid"), "suid\n", 0o4755, 1_600_000_000);
        write(&s("lib/libc.so"), "libc\n", 0o755, 1_600_000_000);
        chown(&s("lib/libc.so"), 0, 0);
        let profile = d.path().join("profile.toml");
        fs::write(
            &profile,
            format!(
                "source_root = \"{}\"\ntrees = [\"usr\", \"lib\"]\nlog = \"{}\"\n",
                src.display(),
                d.path().join("install.log").display()
            ),
        )
        .unwrap();
        World { d, src, profile }
    }

    fn zonepath(&self, name: &str) -> PathBuf {
        self.d.path().join(name)
    }

    fn install(&self, zp: &Path) {
        ok(run(&[
            "install".as_ref(),
            "--no-sync".as_ref(),
            "--profile".as_ref(),
            self.profile.as_os_str(),
            "--zonepath".as_ref(),
            zp.as_os_str(),
        ]));
    }

    fn update(&self, zp: &Path, extra: &[&str]) -> Output {
        let mut c = zinstall();
        c.arg("update")
            .arg("--profile")
            .arg(&self.profile)
            .arg("--zonepath")
            .arg(zp)
            .args(extra);
        c.output().unwrap()
    }

    /// Every kind of change a host tree sees.
    fn change_everything(&self) {
        let s = |p: &str| self.src.join(p);
        write(
            &s("usr/bin/mod"),
            "version 2, longer\n",
            0o755,
            1_700_000_000,
        );
        // Same size, new bytes and time.
        write(&s("usr/bin/modsame"), "bbbb\n", 0o644, 1_700_000_000);
        let keep = fs::metadata(s("usr/bin/chmod"))
            .unwrap()
            .modified()
            .unwrap();
        fs::set_permissions(
            s("usr/bin/chmod"),
            fs::Permissions::from_mode(0o700),
        )
        .unwrap();
        fs::File::options()
            .write(true)
            .open(s("usr/bin/chmod"))
            .unwrap()
            .set_modified(keep)
            .unwrap();
        chown(&s("usr/bin/chown"), 1234, 5678);
        fs::remove_file(s("usr/bin/gone")).unwrap();
        write(&s("usr/bin/added"), "new file\n", 0o755, 1_700_000_000);
        fs::remove_file(s("usr/bin/ln")).unwrap();
        symlink("mod", s("usr/bin/ln")).unwrap();
        // A hard link split: split2 its own copy now.
        fs::remove_file(s("usr/bin/split2")).unwrap();
        write(&s("usr/bin/split2"), "linked\n", 0o644, 1_600_000_000);
        // Two files joined into one inode.
        fs::remove_file(s("usr/bin/join2")).unwrap();
        fs::hard_link(s("usr/bin/join1"), s("usr/bin/join2")).unwrap();
        // A directory replaced by a file, a file by a directory.
        fs::remove_dir_all(s("usr/lib2/d2f")).unwrap();
        write(&s("usr/lib2/d2f"), "now a file\n", 0o644, 1_700_000_000);
        fs::remove_file(s("usr/lib2/f2d")).unwrap();
        write(
            &s("usr/lib2/f2d/child"),
            "now a dir\n",
            0o600,
            1_700_000_000,
        );
        fs::set_permissions(
            s("usr/lib2/f2d"),
            fs::Permissions::from_mode(0o750),
        )
        .unwrap();
        setfattr(&s("usr/share/xa"), "user.a", "2");
        setfattr(&s("usr/share/xa"), "user.b", "new");
        let o = zinstall_testkit::tool("setfattr")
            .args(["-x", "user.gone"])
            .arg(s("usr/share/xa"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{:?}", text(&o));
        fs::remove_dir_all(s("usr/share/old")).unwrap();
        write(
            &s("usr/share/newdir/a/b"),
            "new tree\n",
            0o644,
            1_700_000_000,
        );
        chown(&s("usr/share/newdir/a"), 42, 42);
        fs::set_permissions(
            s("usr/share/suid"),
            fs::Permissions::from_mode(0o2750),
        )
        .unwrap();
        chown(&s("lib/libc.so"), 7, 8);
    }

    /// The same world with `etc` among its trees (a merged path).
    fn with_etc(self) -> World {
        let profile = self.d.path().join("etc.toml");
        fs::write(
            &profile,
            fs::read_to_string(&self.profile).unwrap().replace(
                "trees = [\"usr\", \"lib\"]",
                "trees = [\"usr\", \"lib\", \"etc\"]",
            ),
        )
        .unwrap();
        World { profile, ..self }
    }

    /// A fresh install of the source as it is now.
    fn fresh(&self, name: &str) -> PathBuf {
        let zp = self.zonepath(name);
        self.install(&zp);
        zp.join("root")
    }

    /// A faithful copy of a root as it is now.
    fn keep_copy(&self, root: &Path, name: &str) -> PathBuf {
        let to = self.zonepath(name);
        ok(run(&["copy".as_ref(), root.as_os_str(), to.as_os_str()]));
        to
    }
}

/// What `zinstall verify A B` finds different, except the root
/// directory's own times (a fresh install's is when it was made).
fn differences(a: &Path, b: &Path) -> Vec<String> {
    let o = zinstall().arg("verify").arg(a).arg(b).output().unwrap();
    let (out, err) = text(&o);
    assert!(
        o.status.code().is_some_and(|c| c <= 1),
        "verify: {out}{err}"
    );
    out.lines()
        .filter(|l| {
            !l.starts_with(": ")
                && !l.contains("entries compared")
                && !l.contains("identical")
        })
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

fn assert_same(a: &Path, b: &Path) {
    let d = differences(a, b);
    assert!(
        d.is_empty(),
        "{} vs {}:\n{}",
        a.display(),
        b.display(),
        d.join("\n")
    );
}

fn require() -> bool {
    if !zinstall_testkit::require_root() {
        return false;
    }
    zinstall_testkit::need("setfattr");
    true
}

#[test]
fn an_update_makes_the_root_a_fresh_install_of_the_new_source() {
    if !require() {
        return;
    }
    let w = World::new();
    let zp = w.zonepath("zp");
    w.install(&zp);
    assert!(
        zp.join(".zinstall.manifest").is_file(),
        "the install records its manifest"
    );
    w.change_everything();
    let o = ok(w.update(&zp, &["--stats"]));
    let (out, err) = text(&o);
    for line in [
        "added /usr/bin/added",
        "removed /usr/bin/gone",
        "removed /usr/share/old/deep/f",
        "changed /usr/bin/mod (content, times)",
        // Same size, new bytes: a change of content, not of times.
        "changed /usr/bin/modsame (content, times)",
        "changed /usr/bin/chmod (mode)",
        "changed /usr/bin/chown (owner)",
        "changed /usr/bin/ln (target",
        "changed /usr/lib2/d2f (type)",
        "changed /usr/lib2/f2d (type)",
        "changed /usr/share/xa (",
    ] {
        assert!(out.contains(line), "{line:?} not in:\n{out}{err}");
    }
    assert!(out.contains("updated: "), "{out}");
    assert!(
        !err.contains("kept"),
        "nothing of the zone's to keep: {err}"
    );
    let fresh = w.fresh("fresh");
    assert_same(&fresh, &zp.join("root"));
    // Unchanged files share the old root's inode; changed ones do not.
    let ino = |p: PathBuf| fs::symlink_metadata(p).unwrap().ino();
    assert_eq!(
        ino(zp.join("root/usr/bin/same")),
        ino(zp.join("root.prev/usr/bin/same"))
    );
    assert_ne!(
        ino(zp.join("root/usr/bin/mod")),
        ino(zp.join("root.prev/usr/bin/mod"))
    );
    assert!(!zp.join("root.new").exists());
    assert!(!zp.join(".zinstall.update").exists());
    // Nothing changed since: nothing written, the root still the same.
    let o = ok(w.update(&zp, &["--stats", "--json"]));
    let v: serde_json::Value = serde_json::from_str(text(&o).0.trim()).unwrap();
    let stats = &v["result"]["stats"];
    assert_eq!(stats["bytes"], 0, "{v}");
    assert_eq!(stats["changed"], 0, "{v}");
    assert_eq!(stats["added"], 0, "{v}");
    assert_same(&fresh, &zp.join("root"));
}

/// Followed paths (`/usr` and `/lib` by default) become exactly what the
/// source has: the zone's edits are replaced, what it removed is put
/// back, what it added is removed, and each is named.
#[test]
fn followed_paths_become_the_source_and_the_zones_changes_are_named() {
    if !require() {
        return;
    }
    let w = World::new();
    let zp = w.zonepath("zp");
    w.install(&zp);
    let root = zp.join("root");
    // The zone edits a file the host changes, one it does not, removes
    // one, adds its own, and puts its own where the host adds one.
    fs::write(root.join("usr/bin/mod"), "edited in the zone\n").unwrap();
    fs::write(root.join("usr/bin/same"), "edited, host unchanged\n").unwrap();
    fs::set_permissions(
        root.join("lib/libc.so"),
        fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    fs::remove_file(root.join("usr/share/suid")).unwrap();
    fs::write(root.join("usr/bin/own"), "the zone's own\n").unwrap();
    fs::write(root.join("usr/share/old/zone-data"), "the zone's\n").unwrap();
    fs::write(
        root.join("usr/bin/added"),
        "the zone's, where the host adds one\n",
    )
    .unwrap();
    w.change_everything();
    let o = ok(w.update(&zp, &[]));
    let (_, err) = text(&o);
    for line in [
        "replaced /usr/bin/mod: the root's change of its content replaced",
        "replaced /usr/bin/same: the root's change of its content replaced",
        "replaced /lib/libc.so: the root's change of its mode replaced",
        "replaced /usr/share/suid: removed in the root; put back",
        "replaced /usr/bin/own: the root's own entry in a followed path",
        "replaced /usr/bin/added: the root's own entry where the new source adds one",
    ] {
        assert!(err.contains(line), "{line:?} not in:\n{err}");
    }
    assert!(!err.contains("kept "), "{err}");
    // The root is what a fresh install of the new source makes.
    let fresh = w.fresh("fresh");
    assert_same(&fresh, &root);
    // The next update has nothing to say.
    let (_, err) = text(&ok(w.update(&zp, &[])));
    assert!(!err.contains("replaced"), "{err}");
}

/// Merged paths (`/etc` by default): an entry the zone changed or
/// removed stays as the zone has it and is named; one it did not change
/// follows the source; one it added stays. `--force` replaces the
/// zone's changes there, and still leaves the zone's own entries.
#[test]
fn merged_paths_keep_the_zones_changes_and_force_replaces_them() {
    if !require() {
        return;
    }
    let w = World::new().with_etc();
    let e = |p: &str| w.src.join("etc").join(p);
    write(&e("changed-by-both"), "host 1\n", 0o644, 1_600_000_000);
    write(&e("changed-by-host"), "host 1\n", 0o644, 1_600_000_000);
    write(&e("changed-by-zone"), "host 1\n", 0o644, 1_600_000_000);
    write(&e("chmod-by-zone"), "host 1\n", 0o644, 1_600_000_000);
    write(&e("removed-by-zone"), "host 1\n", 0o644, 1_600_000_000);
    write(&e("removed-by-host"), "host 1\n", 0o644, 1_600_000_000);
    write(
        &e("removed-by-host-changed-by-zone"),
        "host 1\n",
        0o644,
        1_600_000_000,
    );
    let update = |zp: &Path, extra: &[&str]| w.update(zp, extra);
    let zp = w.zonepath("zp");
    w.install(&zp);
    let r = |p: &str| zp.join("root/etc").join(p);
    fs::write(r("changed-by-both"), "zone\n").unwrap();
    fs::write(r("changed-by-zone"), "zone\n").unwrap();
    fs::set_permissions(r("chmod-by-zone"), fs::Permissions::from_mode(0o600))
        .unwrap();
    fs::remove_file(r("removed-by-zone")).unwrap();
    fs::write(r("removed-by-host-changed-by-zone"), "zone\n").unwrap();
    fs::write(r("zones-own"), "zone\n").unwrap();
    for f in [
        "changed-by-both",
        "changed-by-host",
        "chmod-by-zone",
        "removed-by-zone",
    ] {
        write(&e(f), "host 2, longer\n", 0o644, 1_700_000_000);
    }
    for f in ["removed-by-host", "removed-by-host-changed-by-zone"] {
        fs::remove_file(e(f)).unwrap();
    }
    let (_, err) = text(&ok(update(&zp, &[])));
    for line in [
        "kept /etc/changed-by-both: changed in the root since it was recorded; the new source changes it too",
        "kept /etc/chmod-by-zone: changed in the root since it was recorded; the new source changes it too",
        "kept /etc/removed-by-zone: removed in the root since it was recorded; stays removed",
        "kept /etc/removed-by-host-changed-by-zone: changed in the root since it was recorded; the new source removes it",
    ] {
        assert!(err.contains(line), "{line:?} not in:\n{err}");
    }
    assert!(!err.contains("replaced"), "{err}");
    assert_text(&r("changed-by-both"), "zone\n");
    assert_text(&r("changed-by-host"), "host 2, longer\n");
    assert_text(&r("changed-by-zone"), "zone\n");
    assert_text(&r("chmod-by-zone"), "host 1\n");
    assert_eq!(
        fs::metadata(r("chmod-by-zone")).unwrap().mode() & 0o777,
        0o600
    );
    assert!(!r("removed-by-zone").exists());
    assert!(!r("removed-by-host").exists());
    assert_text(&r("removed-by-host-changed-by-zone"), "zone\n");
    assert_text(&r("zones-own"), "zone\n");
    // The zone's edits are named again only when the host changes the
    // file again.
    let (_, err) = text(&ok(update(&zp, &[])));
    assert!(!err.contains("kept"), "nothing new on the host: {err}");
    write(&e("changed-by-both"), "host 3\n", 0o644, 1_750_000_000);
    let (_, err) = text(&ok(update(&zp, &[])));
    assert!(err.contains("kept /etc/changed-by-both"), "{err}");
    // --force: the source's wherever it lays an entry out; the zone's
    // own entries stay.
    let (_, err) = text(&ok(update(&zp, &["--force"])));
    assert!(err.contains("replaced /etc/changed-by-both"), "{err}");
    assert_text(&r("changed-by-both"), "host 3\n");
    assert_text(&r("changed-by-zone"), "host 1\n");
    assert_text(&r("removed-by-zone"), "host 2, longer\n");
    assert_eq!(
        fs::metadata(r("chmod-by-zone")).unwrap().mode() & 0o777,
        0o644
    );
    assert_text(&r("zones-own"), "zone\n");
}

#[test]
fn rollback_restores_the_old_root_exactly_and_back_again() {
    if !require() {
        return;
    }
    let w = World::new();
    let zp = w.zonepath("zp");
    w.install(&zp);
    let root = zp.join("root");
    let before = w.keep_copy(&root, "before");
    let o = run(&["rollback".as_ref(), "--zonepath".as_ref(), zp.as_os_str()]);
    assert!(!o.status.success(), "nothing to roll back to yet");
    assert!(text(&o).1.contains("root.prev"), "{:?}", text(&o));
    w.change_everything();
    ok(w.update(&zp, &[]));
    let after = w.keep_copy(&root, "after");
    ok(run(&[
        "rollback".as_ref(),
        "--zonepath".as_ref(),
        zp.as_os_str(),
    ]));
    assert_same(&before, &root);
    assert_same(&after, &zp.join("root.prev"));
    // The manifest follows: an update from here is the same update.
    let o = ok(w.update(&zp, &["--dry-run"]));
    assert!(
        text(&o).0.contains("would add /usr/bin/added"),
        "{:?}",
        text(&o)
    );
    ok(run(&[
        "rollback".as_ref(),
        "--zonepath".as_ref(),
        zp.as_os_str(),
    ]));
    assert_same(&after, &root);
    let o = ok(w.update(&zp, &["--dry-run", "--stats"]));
    assert!(
        text(&o).0.contains("0 added, 0 removed, 0 changed"),
        "{:?}",
        text(&o)
    );
}

#[test]
fn a_dry_run_lists_and_writes_nothing() {
    if !require() {
        return;
    }
    let w = World::new();
    let zp = w.zonepath("zp");
    w.install(&zp);
    let before = w.keep_copy(&zp.join("root"), "before");
    w.change_everything();
    let o = ok(w.update(&zp, &["--dry-run", "--json"]));
    let v: serde_json::Value = serde_json::from_str(text(&o).0.trim()).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["result"]["dry_run"], true, "{v}");
    assert!(
        v["result"]["stats"]["changed"].as_u64().unwrap() >= 9,
        "{v}"
    );
    let added: Vec<&str> = v["result"]["added"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["path"].as_str().unwrap())
        .collect();
    assert!(added.contains(&"/usr/bin/added"), "{v}");
    assert_same(&before, &zp.join("root"));
    assert!(!zp.join("root.new").exists() && !zp.join("root.prev").exists());
    assert!(!zp.join(".zinstall.update").exists());
}

#[test]
fn a_root_without_a_manifest_is_updated_only_with_force() {
    if !require() {
        return;
    }
    let w = World::new();
    let zp = w.zonepath("zp");
    w.install(&zp);
    fs::remove_file(zp.join(".zinstall.manifest")).unwrap();
    w.change_everything();
    let o = w.update(&zp, &[]);
    assert_eq!(o.status.code(), Some(1), "{:?}", text(&o));
    let err = text(&o).1;
    assert!(
        err.contains("no manifest") && err.contains("--force"),
        "{err}"
    );
    ok(w.update(&zp, &["--force"]));
    // Without a manifest nothing can be told removed: the rest is fresh.
    let mut d = differences(&w.fresh("fresh"), &zp.join("root"));
    d.retain(|l| {
        !l.contains("only in the second tree")
            && !l.starts_with("usr/share:")
            && !l.starts_with("usr/bin:")
    });
    assert!(d.is_empty(), "{}", d.join("\n"));
    // Recorded now: the next update is an ordinary one.
    assert!(zp.join(".zinstall.manifest").is_file());
    ok(w.update(&zp, &[]));
}

#[test]
fn a_root_deeper_than_the_walk_goes_is_installed_unrecorded_and_refused_whole()
{
    if !require() {
        return;
    }
    let w = World::new();
    // 200 directories deep: past the manifest's 128, well short of
    // PATH_MAX.
    let deep = w.src.join(format!("usr/{}leaf", "d/".repeat(200)));
    write(&deep, "deep\n", 0o644, 1_600_000_000);
    let zp = w.zonepath("zp");
    w.install(&zp);
    assert!(zp.join("root/usr/d").is_dir());
    // Not recorded, said in the log; the zone works.
    assert!(!zp.join(".zinstall.manifest").exists());
    let log = fs::read_to_string(w.d.path().join("install.log")).unwrap();
    assert!(
        log.contains("manifest not recorded")
            && log.contains("directories deep"),
        "{log}"
    );
    let o = w.update(&zp, &[]);
    assert_eq!(o.status.code(), Some(1), "{:?}", text(&o));
    assert!(text(&o).1.contains("no manifest"), "{:?}", text(&o));
    // Forced, the clone refuses the depth, not the stack: the root is
    // the old one and nothing is left beside it.
    w.change_everything();
    let before = zinstall_testkit::listing(&zp.join("root"));
    let o = w.update(&zp, &["--force"]);
    assert_eq!(o.status.code(), Some(1), "{:?}", text(&o));
    assert!(text(&o).1.contains("directories deep"), "{:?}", text(&o));
    assert_eq!(zinstall_testkit::listing(&zp.join("root")), before);
    let left: Vec<_> = fs::read_dir(&zp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("root.") || n.starts_with(".zinstall.update"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Runs an update that stops at `stage` (`ZINSTALL_UPDATE_PAUSE`) and
/// kills it there with SIGKILL.
fn kill_at(w: &World, zp: &Path, stage: &str) {
    let mut child = zinstall()
        .env("ZINSTALL_UPDATE_PAUSE", stage)
        .arg("update")
        .arg("--profile")
        .arg(&w.profile)
        .arg("--zonepath")
        .arg(zp)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        let n = err.read_line(&mut line).unwrap();
        assert!(n > 0, "the update ended before {stage}: {:?}", child.wait());
        if line.contains(&format!("update paused at {stage}")) {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn an_update_killed_at_each_stage_leaves_a_whole_root_and_a_rerun_finishes() {
    if !require() {
        return;
    }
    for (stage, switched) in [
        ("cloned", false),
        ("applied", false),
        ("recorded", false),
        ("switched", true),
        ("settled", true),
    ] {
        let w = World::new();
        let zp = w.zonepath("zp");
        w.install(&zp);
        let root = zp.join("root");
        let before = w.keep_copy(&root, "before");
        w.change_everything();
        let fresh = w.fresh("fresh");
        kill_at(&w, &zp, stage);
        assert!(
            zp.join(".zinstall.update").exists(),
            "{stage}: the journal says an update is under way"
        );
        assert_same(if switched { &fresh } else { &before }, &root);
        // Rerun: finished or undone first, then the update (if any left).
        let o = ok(w.update(&zp, &["--stats"]));
        let (out, err) = text(&o);
        assert!(err.contains("an interrupted update was"), "{stage}: {err}");
        if switched {
            assert!(
                out.contains("0 added, 0 removed, 0 changed"),
                "{stage}: {out}"
            );
        }
        assert_same(&fresh, &root);
        assert!(!zp.join("root.new").exists(), "{stage}: root.new left");
        assert!(
            !zp.join(".zinstall.update").exists(),
            "{stage}: journal left"
        );
        assert!(
            !zp.join(".zinstall.manifest.new").exists(),
            "{stage}: manifest.new left"
        );
        ok(run(&[
            "rollback".as_ref(),
            "--zonepath".as_ref(),
            zp.as_os_str(),
        ]));
        assert_same(&before, &root);
    }
}

#[test]
fn an_update_killed_at_random_moments_leaves_old_or_new() {
    if !require() {
        return;
    }
    for delay_ms in [5u64, 30, 100] {
        let w = World::new();
        for i in 0..3000 {
            write(
                &w.src.join(format!("usr/share/many/d{}/f{i}", i / 100)),
                &format!("file {i}\n"),
                0o644,
                1_600_000_000,
            );
        }
        let zp = w.zonepath("zp");
        w.install(&zp);
        let root = zp.join("root");
        let before = w.keep_copy(&root, "before");
        w.change_everything();
        for i in (0..3000).step_by(7) {
            write(
                &w.src.join(format!("usr/share/many/d{}/f{i}", i / 100)),
                "changed\n",
                0o644,
                1_700_000_000,
            );
        }
        let fresh = w.fresh("fresh");
        let mut child = zinstall()
            .arg("update")
            .arg("--profile")
            .arg(&w.profile)
            .arg("--zonepath")
            .arg(&zp)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = child.kill();
        child.wait().unwrap();
        let old = differences(&before, &root).is_empty();
        let new = differences(&fresh, &root).is_empty();
        assert!(
            old || new,
            "killed after {delay_ms} ms: the root is neither the old nor the new one"
        );
        ok(w.update(&zp, &[]));
        assert_same(&fresh, &root);
        assert!(!zp.join("root.new").exists());
    }
}

#[test]
fn attach_u_through_the_hook_updates_the_root() {
    if !require() {
        return;
    }
    let w = World::new();
    let zp = w.zonepath("zp");
    w.install(&zp);
    let root = zp.join("root");
    let before = w.keep_copy(&root, "before");
    w.change_everything();
    // config.xml's attach hook, as zoneadm substitutes it and adds the
    // attach command's own arguments after it.
    let xml = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../etc/brand/zinstall/config.xml"),
    )
    .unwrap();
    let hook = xml
        .split("<attach>")
        .nth(1)
        .and_then(|s| s.split("</attach>").next())
        .unwrap()
        .replace("/usr/lib/brand/zinstall/brand", env!("CARGO_BIN_EXE_brand"))
        .replace("%z", "z1")
        .replace("%R", &zp.display().to_string());
    let hook_run = |args: &str| {
        Command::new("/bin/sh")
            .arg("-c")
            .arg(format!("exec {hook}{args}"))
            .env("ZINSTALL_PROFILE", &w.profile)
            .env("ZINSTALL_DEFAULTS", "/dev/null")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // A plain attach checks, and leaves the root as it is.
    let o = hook_run("");
    assert!(o.status.success(), "{:?}", text(&o));
    assert_same(&before, &root);
    let o = hook_run(" -u");
    assert!(o.status.success(), "{:?}", text(&o));
    assert!(
        text(&o).0.contains("INFO: zinstall: updated"),
        "{:?}",
        text(&o)
    );
    assert_same(&w.fresh("fresh"), &root);
}

#[test]
fn uninstall_removes_what_updates_leave() {
    if !require() {
        return;
    }
    let w = World::new();
    let zp = w.zonepath("zp");
    w.install(&zp);
    w.change_everything();
    ok(w.update(&zp, &[]));
    assert!(zp.join("root.prev").is_dir());
    ok(run(&[
        "uninstall".as_ref(),
        "--zonepath".as_ref(),
        zp.as_os_str(),
        "--log".as_ref(),
        w.d.path().join("u.log").as_os_str(),
    ]));
    let left: Vec<String> = fs::read_dir(&zp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_symlink_the_zone_planted_is_never_written_through() {
    if !require() {
        return;
    }
    let w = World::new();
    write(
        &w.src.join("etc/sub/conf"),
        "host 1\n",
        0o644,
        1_600_000_000,
    );
    let w = w.with_etc();
    let update = |zp: &Path, extra: &[&str]| w.update(zp, extra);
    let zp = w.zonepath("zp");
    w.install(&zp);
    let root = zp.join("root");
    // The zone swaps an installed directory of a followed path and one
    // of a merged path for symlinks out of the root; the host then
    // changes a file beneath each.
    let outside = w.d.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("mod"), "the host's own file\n").unwrap();
    fs::write(outside.join("conf"), "the host's own file\n").unwrap();
    fs::rename(root.join("usr/bin"), w.d.path().join("moved-bin")).unwrap();
    symlink(&outside, root.join("usr/bin")).unwrap();
    fs::rename(root.join("etc/sub"), w.d.path().join("moved-sub")).unwrap();
    symlink(&outside, root.join("etc/sub")).unwrap();
    write(
        &w.src.join("usr/bin/mod"),
        "version 2, longer\n",
        0o755,
        1_700_000_000,
    );
    write(
        &w.src.join("etc/sub/conf"),
        "host 2\n",
        0o644,
        1_700_000_000,
    );
    let sentinel = zinstall_testkit::sentinel::Sentinel::dir(&outside);
    let o = ok(update(&zp, &[]));
    let (_, err) = text(&o);
    // The followed directory is the source's again, a real one; the
    // merged one is the zone's, and nothing is written beneath it.
    assert!(
        err.contains(
            "replaced /usr/bin: the root's entry of another type replaced"
        ),
        "{err}"
    );
    assert!(err.contains("kept /etc/sub/conf"), "{err}");
    assert!(fs::symlink_metadata(root.join("usr/bin")).unwrap().is_dir());
    assert_text(&root.join("usr/bin/mod"), "version 2, longer\n");
    assert!(
        fs::symlink_metadata(root.join("etc/sub"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    sentinel.assert_unchanged("after the update");
    // Forced, the merged path's symlink is replaced by the source's
    // directory, never written through.
    let o = ok(update(&zp, &["--force"]));
    assert!(text(&o).1.contains("replaced /etc/sub"), "{:?}", text(&o));
    assert!(fs::symlink_metadata(root.join("etc/sub")).unwrap().is_dir());
    assert_text(&root.join("etc/sub/conf"), "host 2\n");
    sentinel.assert_unchanged("after the forced update");
    assert!(
        !zp.join("root.new").exists() && !zp.join(".zinstall.update").exists()
    );
}

/// A journal that says an update is under way while `root` is missing
/// (something else took it) is not "finished": nothing is renamed into
/// its place, and the error says what is left.
#[test]
fn recovery_never_finishes_a_switch_whose_root_is_missing() {
    if !require() {
        return;
    }
    let w = World::new();
    let zp = w.zonepath("zp");
    w.install(&zp);
    ok(run(&[
        "copy".as_ref(),
        zp.join("root").as_os_str(),
        zp.join("root.new").as_os_str(),
    ]));
    fs::write(zp.join(".zinstall.update"), "update 12345\n").unwrap();
    fs::rename(zp.join("root"), w.d.path().join("taken")).unwrap();
    let o = zinstall()
        .arg("rollback")
        .arg("--zonepath")
        .arg(&zp)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{:?}", text(&o));
    assert!(text(&o).1.contains("the root is missing"), "{:?}", text(&o));
    assert!(!zp.join("root").exists(), "nothing was made the root");
    assert!(
        zp.join("root.new").is_dir() && zp.join(".zinstall.update").exists()
    );
}
