//! Installs as users run them: the Linux command and the zoneadm hook,
//! on generated source roots, baselines and layers.

use zinstall_testkit::tools;

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use zinstall_testkit::run::text;

use zinstall_testkit::is_root;

fn write(p: &Path, data: &[u8]) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, data).unwrap();
}

/// A zinstall archive: `zinstall.json` of `kind`, then `entries` (name,
/// data) under `root/`, plus one member outside it.
fn archive(path: &Path, kind: &str, entries: &[(&str, &[u8])]) {
    let mut b = tar::Builder::new(Vec::new());
    let mut add = |name: &str, data: &[u8], mode: u32| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_mtime(1_600_000_000);
        h.set_uid(0);
        h.set_gid(0);
        b.append_data(&mut h, name, data).unwrap();
    };
    add(
        "zinstall.json",
        format!("{{\"v\":\"1\",\"t\":\"{kind}\"}}\n").as_bytes(),
        0o444,
    );
    for (name, data) in entries {
        add(&format!("root/{name}"), data, 0o644);
    }
    add("README", b"outside root/", 0o644);
    let bytes = b.into_inner().unwrap();
    let gz = path.extension().is_some_and(|e| e == "gz");
    if gz {
        let mut e = flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::fast(),
        );
        e.write_all(&bytes).unwrap();
        fs::write(path, e.finish().unwrap()).unwrap();
    } else {
        fs::write(path, bytes).unwrap();
    }
}

pub(crate) struct World {
    pub(crate) d: tempfile::TempDir,
    pub(crate) profile: PathBuf,
    pub(crate) zonepath: PathBuf,
    pub(crate) layer1: PathBuf,
    pub(crate) layer2: PathBuf,
}

/// A source root with usr, lib and sbin; a baseline; two layers; a
/// profile that exercises every rule.
pub(crate) fn world(files_per_dir: usize) -> World {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    for i in 0..files_per_dir {
        write(
            &src.join(format!("usr/bin/tool{i}")),
            format!("#!tool {i}").as_bytes(),
        );
        write(
            &src.join(format!("usr/lib/libx{i}.so.1")),
            format!("lib {i}").as_bytes(),
        );
        write(&src.join(format!("usr/share/doc/d{i}")), &vec![b'd'; 5000]);
        write(&src.join(format!("sbin/s{i}")), b"sbin");
    }
    write(&src.join("lib/svc/manifest/system.xml"), b"manifest");
    write(&src.join("lib/svc/method/net"), b"method");
    write(&src.join("lib/gzonly/secret"), b"global zone only");
    symlink("libx0.so.1", src.join("usr/lib/libx.so")).unwrap();
    let host = d.path().join("host/etc/default/init");
    write(&host, b"TZ=UTC\n");
    let gzonly = d.path().join("gzonly.txt");
    fs::write(&gzonly, "# global zone only\nlib/gzonly\n").unwrap();
    let bdir = d.path().join("baseline");
    fs::create_dir(&bdir).unwrap();
    archive(
        &bdir.join("files.tar.gz"),
        "baseline",
        &[
            ("etc/motd", b"baseline motd\n"),
            ("etc/passwd", b"root:x:0:0::/root:/bin/sh\n"),
        ],
    );
    let layer1 = d.path().join("layer1.tar");
    archive(
        &layer1,
        "layer",
        &[("etc/motd", b"layer one\n"), ("opt/app/v1", b"1")],
    );
    let layer2 = d.path().join("layer2.tar.gz");
    archive(
        &layer2,
        "layer",
        &[
            ("opt/app/v1", b"replaced by layer two"),
            ("opt/app/v2", b"2"),
        ],
    );
    let profile = d.path().join("profile.toml");
    fs::write(
        &profile,
        format!(
            r#"source_root = "{src}"
trees = ["usr", "lib", "sbin"]
log = "{log}"
# A zone's way: layers over the replicated trees.
images_over_host = true

[[rule]]
pattern = "usr/bin/**"
action = "link"
prefix = "/system"

[[rule]]
pattern = "**/*.so*"
action = "relative-link"
prefix = "/system"

[prune]
paths = ["lib/svc/manifest"]
list_file = "{gzonly}"

[baseline]
file = "files.tar.gz"
search = ["{nowhere}", "{bdir}"]
required = true

[host_files]
paths = ["{host}"]
"#,
            src = src.display(),
            log = d.path().join("install.log").display(),
            gzonly = gzonly.display(),
            nowhere = d.path().join("nowhere").display(),
            bdir = bdir.display(),
            host = host.display(),
        ),
    )
    .unwrap();
    let zonepath = d.path().join("zones/z1");
    World {
        profile,
        zonepath,
        layer1,
        layer2,
        d,
    }
}

pub(crate) fn zinstall(w: &World, extra: &[&Path]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zinstall"));
    c.env("ZINSTALL_DEFAULTS", "/dev/null")
        .arg("install")
        .arg("--profile")
        .arg(&w.profile)
        .arg("--zonepath")
        .arg(&w.zonepath);
    for e in extra {
        c.arg(e);
    }
    c.output().unwrap()
}

fn hook(w: &World, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_brand"))
        .env("ZINSTALL_PROFILE", &w.profile)
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .args(["-z", "z1", "-R"])
        .arg(&w.zonepath)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn install_applies_every_rule_baseline_layers_and_host_files() {
    let w = world(20);
    let o = zinstall(&w, &[&w.layer1, &w.layer2]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let root = w.zonepath.join("root");
    // Copies.
    assert_eq!(fs::read(root.join("usr/share/doc/d3")).unwrap().len(), 5000);
    assert_eq!(
        fs::read(root.join("lib/svc/method/net")).unwrap(),
        b"method"
    );
    // Absolute links into the global zone's tree.
    assert_eq!(
        fs::read_link(root.join("usr/bin/tool7")).unwrap(),
        Path::new("/system/usr/bin/tool7")
    );
    // Relative links, one level per directory.
    assert_eq!(
        fs::read_link(root.join("usr/lib/libx2.so.1")).unwrap(),
        Path::new("../../system/usr/lib/libx2.so.1")
    );
    // Symlinks in the source stay symlinks (rules apply to files).
    assert_eq!(
        fs::read_link(root.join("usr/lib/libx.so")).unwrap(),
        Path::new("libx0.so.1")
    );
    // Pruned: the manifests, and what the list file names.
    assert!(!root.join("lib/svc/manifest").exists());
    assert!(!root.join("lib/gzonly").exists());
    // Baseline, then layers in order.
    assert_eq!(
        fs::read(root.join("etc/passwd")).unwrap(),
        b"root:x:0:0::/root:/bin/sh\n"
    );
    assert_eq!(fs::read(root.join("etc/motd")).unwrap(), b"layer one\n");
    assert_eq!(
        fs::read(root.join("opt/app/v1")).unwrap(),
        b"replaced by layer two"
    );
    assert_eq!(fs::read(root.join("opt/app/v2")).unwrap(), b"2");
    assert!(!root.join("README").exists());
    // Host files at their own path.
    let host = w.d.path().join("host/etc/default/init");
    let rel = host.strip_prefix("/").unwrap();
    assert_eq!(fs::read(root.join(rel)).unwrap(), b"TZ=UTC\n");
    assert_eq!(fs::metadata(&root).unwrap().mode() & 0o777, 0o755);
    assert_eq!(
        fs::read_to_string(w.zonepath.join(".zinstall.state")).unwrap(),
        "installed\n"
    );
    // What zoneadm users read.
    assert!(out.contains("INFO: zinstall: replicated /usr: "), "{out}");
    assert!(
        out.contains("INFO: zinstall: unpacking baseline archive..."),
        "{out}"
    );
    assert!(
        // A Linux root is no zone.
        out.contains("INFO: zinstall: install of root z1 complete"),
        "{out}"
    );
    // The structured log has every step.
    let log = fs::read_to_string(w.d.path().join("install.log")).unwrap();
    let steps = log
        .lines()
        .filter(|l| l.contains("\"msg\":\"step\""))
        .count();
    // Three trees, three archives, the host file, and the flush.
    assert_eq!(steps, 3 + 3 + 1 + 1, "{log}");
    assert!(log.contains("\"step\":\"flush\""), "{log}");
    assert!(out.contains("flushing the root to disk"), "{out}");
    for l in log.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert!(v["argv"].as_str().unwrap().contains("install"));
    }
    // The images as a JSON array; the totals the console shows.
    let record = |msg: &str| -> serde_json::Value {
        let l = log
            .lines()
            .find(|l| l.contains(&format!("\"msg\":\"{msg}\"")))
            .unwrap_or_else(|| panic!("no {msg} record: {log}"));
        serde_json::from_str(l).unwrap()
    };
    let images = record("install")["images"].clone();
    assert_eq!(images.as_array().map(Vec::len), Some(2), "{images}");
    let done = record("install complete");
    let files = done["files"].as_u64().unwrap();
    assert!(
        out.contains(&format!("complete: {files} files, ")),
        "log says {files} files: {out}"
    );
    // A second install of an installed zonepath is refused, the root
    // kept; uninstall removes the root and zinstall's files; uninstalling
    // again finds nothing to lose; a root zinstall did not make needs -F.
    let o = zinstall(&w, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("already installed"), "{}", text(&o));
    assert!(root.join("opt/app/v2").exists());
    let un = |force: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_zinstall"));
        c.args(["uninstall", "--log"])
            .arg(w.d.path().join("u.log"))
            .arg("--zonepath")
            .arg(&w.zonepath);
        if force {
            c.arg("-F");
        }
        c.output().unwrap()
    };
    let o = un(false);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!root.exists());
    assert_eq!(fs::read_dir(&w.zonepath).unwrap().count(), 0);
    assert!(un(false).status.success());
    write(&root.join("data"), b"not zinstall's");
    let o = un(false);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("zinstall uninstall -F"), "{}", text(&o));
    assert!(root.join("data").exists());
    assert!(un(true).status.success());
    assert!(!root.exists());
}

#[test]
fn hostile_layer_fails_cleanly_and_nothing_outside_changes() {
    let w = world(3);
    let outside = w.d.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("sentinel"), b"untouched").unwrap();
    let evil = w.d.path().join("evil.tar");
    let mut b = tar::Builder::new(Vec::new());
    let meta = b"{\"v\":\"1\",\"t\":\"layer\"}\n";
    let mut h = tar::Header::new_gnu();
    h.set_size(meta.len() as u64);
    h.set_mode(0o444);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    b.append_data(&mut h, "zinstall.json", &meta[..]).unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    h.set_mode(0o777);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    b.append_link(&mut h, "root/escape", &outside).unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_size(11);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    b.append_data(&mut h, "root/escape/sentinel", &b"overwritten"[..])
        .unwrap();
    fs::write(&evil, b.into_inner().unwrap()).unwrap();
    // Through the hook (zoneadm makes the zonepath first): 254, the
    // partial root removed, zoneadm can retry.
    fs::create_dir_all(&w.zonepath).unwrap();
    let o = hook(&w, &["install", evil.to_str().unwrap()]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(254), "{out}");
    assert!(
        out.contains("root/escape/sentinel") && out.contains("symlink"),
        "{out}"
    );
    assert!(out.contains("partial root was removed"), "{out}");
    assert_eq!(fs::read(outside.join("sentinel")).unwrap(), b"untouched");
    assert!(!w.zonepath.join("root").exists());
    assert!(!w.zonepath.join(".zinstall.state").exists());
    // A baseline given as a layer fails before anything is written.
    let base = w.d.path().join("baseline/files.tar.gz");
    let o = hook(&w, &["install", base.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(254), "{}", text(&o));
    assert!(
        text(&o).contains("is a baseline, not a layer"),
        "{}",
        text(&o)
    );
    assert!(!w.zonepath.join("root").exists());
    // A file that is not a tar archive at all.
    let junk = w.d.path().join("junk.tar");
    fs::write(&junk, vec![0x5au8; 4096]).unwrap();
    let o = hook(&w, &["install", junk.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(254));
    assert!(text(&o).contains("junk.tar"), "{}", text(&o));
    assert!(!w.zonepath.join("root").exists());
    // And then a good install works.
    fs::create_dir_all(&w.zonepath).unwrap();
    let o = hook(&w, &["install", w.layer1.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn hook_statuses_for_every_subcommand() {
    let w = world(1);
    fs::create_dir_all(&w.zonepath).unwrap();
    let code = |args: &[&str]| hook(&w, args).status.code();
    assert_eq!(code(&["verify_adm", "boot"]), Some(0));
    assert_eq!(code(&["verify_adm", "notacommand", "x", "y"]), Some(0));
    assert_eq!(code(&["query", "datasets"]), Some(0));
    assert!(hook(&w, &["query", "datasets"]).stdout.is_empty());
    assert_eq!(code(&["query", "somethingelse"]), Some(0));
    assert_eq!(code(&["prestatechange", "2", "1"]), Some(0));
    assert_eq!(code(&["poststatechange", "4", "4"]), Some(0));
    assert_eq!(code(&["prestatechange", "1", "1"]), Some(253));
    assert_eq!(code(&["sysboot"]), Some(0));
    // Not hooks of this brand (zoneadm's built-ins apply).
    assert_eq!(code(&["detach"]), Some(253));
    assert_eq!(code(&["clone", "z0"]), Some(253));
    // Nothing to attach.
    assert_eq!(code(&["attach"]), Some(255));
    assert_eq!(code(&["bogus"]), Some(253));
    assert_eq!(code(&["uninstall", "-Q"]), Some(253));
    // Uninstall of a zonepath with nothing in it: nothing to lose.
    assert_eq!(code(&["uninstall"]), Some(0));
    assert_eq!(code(&["install"]), Some(0));
    assert_eq!(code(&["attach"]), Some(0));
    assert_eq!(code(&["uninstall", "-F"]), Some(0));
    // A bad profile fails before the root: 254, never 1.
    fs::write(&w.profile, "nonsense = 1\n").unwrap();
    let o = hook(&w, &["install"]);
    assert_eq!(o.status.code(), Some(254));
    assert!(text(&o).contains("nonsense"), "{}", text(&o));
    let xml = w.d.path().join("zone.xml");
    fs::write(
        &xml,
        r#"<zone name="z1" zonepath="/z" brand="zinstall" ip-type="shared"/>"#,
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_brand"))
        .args(["verify_cfg"])
        .arg(&xml)
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0));
    assert!(text(&o).contains("ip-type=exclusive"), "{}", text(&o));
    fs::write(&xml, r#"<zone name="z1" zonepath="/z" brand="zinstall" ip-type="exclusive"/>"#).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_brand"))
        .args(["verify_cfg"])
        .arg(&xml)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn a_second_install_fails_at_once_naming_the_holder() {
    let w = world(1);
    fs::create_dir_all(&w.zonepath).unwrap();
    let lock_path = w.zonepath.join(".zinstall.lock");
    let mut f = fs::File::create(&lock_path).unwrap();
    writeln!(f, "{}", std::process::id()).unwrap();
    f.lock().unwrap();
    let t0 = Instant::now();
    let o = zinstall(&w, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(t0.elapsed() < Duration::from_secs(30));
    let out = text(&o);
    assert!(
        out.contains(&format!("held by pid {}", std::process::id())),
        "{out}"
    );
    // Another process holds it: never 254, which would have zoneadm
    // clean the root that process is writing.
    let o = hook(&w, &["uninstall", "-F"]);
    assert_eq!(o.status.code(), Some(255), "{}", text(&o));
    let o = hook(&w, &["install"]);
    assert_eq!(o.status.code(), Some(255), "{}", text(&o));
    f.unlock().unwrap();
    drop(f);
    fs::remove_file(&lock_path).unwrap();
    assert!(zinstall(&w, &[]).status.success());
}

#[test]
fn a_killed_install_is_cleaned_and_redone_by_the_next() {
    let w = world(1500);
    // Slow the copy down enough to kill it mid-way: one worker, batch 1.
    let mut c = Command::new(env!("CARGO_BIN_EXE_zinstall"));
    c.env("ZINSTALL_DEFAULTS", "/dev/null")
        .args(["install", "--threads", "1", "--batch", "1", "--profile"])
        .arg(&w.profile)
        .arg("--zonepath")
        .arg(&w.zonepath)
        .stdout(std::process::Stdio::null());
    let mut child = c.spawn().unwrap();
    let marker = w.zonepath.join(".zinstall.state");
    let t0 = Instant::now();
    while !marker.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "install never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Killed as soon as the marker says it started: 1,500 files one at a
    // time take far longer than the 5 ms poll, so the kill lands mid-way.
    child.kill().unwrap();
    child.wait().unwrap();
    let state = fs::read_to_string(&marker).unwrap();
    assert_eq!(
        state, "installing\n",
        "the install must be killed mid-way for this test to mean anything"
    );
    // Plant something the clean-up must remove.
    write(&w.zonepath.join("root/stale-from-killed-run"), b"x");
    let o = zinstall(&w, &[]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("cleaning up an interrupted install"), "{out}");
    assert!(!w.zonepath.join("root/stale-from-killed-run").exists());
    assert_eq!(fs::read_to_string(&marker).unwrap(), "installed\n");
    let docs = fs::read_dir(w.zonepath.join("root/usr/share/doc"))
        .unwrap()
        .count();
    assert_eq!(docs, 1500);
}

#[test]
fn uninstall_never_follows_symlinks_out_of_the_root() {
    let w = world(1);
    assert!(zinstall(&w, &[]).status.success());
    let victim = w.d.path().join("victim");
    fs::create_dir(&victim).unwrap();
    fs::write(victim.join("keep"), b"host data").unwrap();
    symlink(&victim, w.zonepath.join("root/trap")).unwrap();
    symlink(victim.join("keep"), w.zonepath.join("root/trap-file")).unwrap();
    fs::create_dir(w.zonepath.join("root/ro")).unwrap();
    fs::write(w.zonepath.join("root/ro/x"), b"x").unwrap();
    fs::set_permissions(
        w.zonepath.join("root/ro"),
        fs::Permissions::from_mode(0o555),
    )
    .unwrap();
    let o = hook(&w, &["uninstall", "-F"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(fs::read(victim.join("keep")).unwrap(), b"host data");
    assert!(!w.zonepath.join("root").exists());
}

/// As an ordinary user: ownership cannot be kept, which is said once.
#[test]
fn install_works_without_root() {
    let w = world(5);
    if !is_root() {
        let o = zinstall(&w, &[&w.layer1]);
        assert!(o.status.success(), "{}", text(&o));
        return;
    }
    zinstall_testkit::need("setpriv");
    // Let nobody read the world and write the zonepath's parent; the
    // sources stay root-owned, so their owners cannot be kept.
    let mut p = w.d.path().to_path_buf();
    loop {
        let m = fs::metadata(&p).unwrap().permissions().mode();
        fs::set_permissions(&p, fs::Permissions::from_mode(m | 0o755)).unwrap();
        if !p.pop() || p == Path::new("/") || p == Path::new("/tmp") {
            break;
        }
    }
    // Sticky, as /tmp: writable by nobody, yet nobody else can swap what
    // is on the way to the zonepath (a zonepath under a directory others
    // could rename entries of is refused).
    let zones = w.zonepath.parent().unwrap();
    fs::create_dir_all(zones).unwrap();
    fs::set_permissions(zones, fs::Permissions::from_mode(0o1777)).unwrap();
    fs::set_permissions(w.d.path(), fs::Permissions::from_mode(0o1777))
        .unwrap();
    let o = tools::tool("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_zinstall"))
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .args(["install", "--profile"])
        .arg(&w.profile)
        .arg("--log")
        .arg(w.d.path().join("nobody.log"))
        .arg("--zonepath")
        .arg(&w.zonepath)
        .arg(&w.layer1)
        .output()
        .unwrap();
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert_eq!(
        out.matches("ownership not kept").count(),
        1,
        "said once: {out}"
    );
    let md = fs::metadata(w.zonepath.join("root/usr/share/doc/d0")).unwrap();
    assert_eq!(md.uid(), 65534);
}

/// Copies the host file `p` into `src` at its place under the host's
/// real directories (`/lib64/x` lands in `usr/lib64/x` on a merged-/usr
/// host); a symlink is copied as one, and what it points to too.
fn mirror(src: &Path, p: &Path) {
    let dir = fs::canonicalize(p.parent().unwrap()).unwrap();
    let host = dir.join(p.file_name().unwrap());
    let dst = src.join(host.strip_prefix("/").unwrap());
    if fs::symlink_metadata(&dst).is_ok() {
        return;
    }
    fs::create_dir_all(dst.parent().unwrap()).unwrap();
    if fs::symlink_metadata(&host)
        .unwrap()
        .file_type()
        .is_symlink()
    {
        symlink(fs::read_link(&host).unwrap(), &dst).unwrap();
        mirror(src, &fs::canonicalize(&host).unwrap());
    } else {
        fs::copy(&host, &dst).unwrap();
    }
}

/// The shipped Linux profile makes a root that runs a shell in a chroot:
/// merged-/usr links (the loader is found through /lib64), mount points
/// with their modes, a host file that links outside the root copied by
/// content. The trees come from this machine, cut down to what sh and ls
/// need (their ldd closure), so the test stays quick.
#[test]
fn linux_profile_root_runs_a_shell_in_chroot() {
    if !zinstall_testkit::require_root() {
        return;
    }
    if !zinstall_testkit::require(
        Path::new("/usr/bin/sh").exists() && Path::new("/usr/bin/ls").exists(),
        "/usr/bin/sh and /usr/bin/ls on this machine",
    ) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    for bin in ["/usr/bin/sh", "/usr/bin/ls"] {
        mirror(&src, Path::new(bin));
        let o = tools::tool("ldd").arg(bin).output().unwrap();
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
            // "/lib64/ld-linux-x86-64.so.2 (0x...)".
            if let Some(path) =
                line.split_whitespace().find(|w| w.starts_with('/'))
            {
                mirror(&src, Path::new(path));
            }
        }
    }
    write(&src.join("etc/passwd"), b"root:x:0:0:root:/root:/bin/sh\n");
    write(&src.join("etc/machine-id"), b"0123456789abcdef\n");
    // The shipped profile, with /etc/os-release (a link to
    // ../usr/lib/os-release, which this root lacks) as a host file too.
    let shipped = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../etc/zinstall/profile-linux.toml"),
    )
    .unwrap();
    let host_files: Vec<&str> = ["/etc/resolv.conf", "/etc/os-release"]
        .into_iter()
        .filter(|p| Path::new(p).exists())
        .collect();
    let profile = d.path().join("linux.toml");
    fs::write(
        &profile,
        shipped.replace(
            "paths = [\"/etc/resolv.conf\"]",
            &format!("paths = {host_files:?}"),
        ),
    )
    .unwrap();
    let zonepath = d.path().join("zp");
    let o = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .args(["install", "--profile"])
        .arg(&profile)
        .arg("--source-root")
        .arg(&src)
        .arg("--log")
        .arg(d.path().join("log"))
        .arg("--zonepath")
        .arg(&zonepath)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let root = zonepath.join("root");
    for (l, t) in [
        ("bin", "usr/bin"),
        ("sbin", "usr/sbin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
    ] {
        assert_eq!(fs::read_link(root.join(l)).unwrap(), Path::new(t));
    }
    for (dir, mode) in [
        ("dev", 0o755),
        ("proc", 0o555),
        ("sys", 0o555),
        ("run", 0o755),
        ("tmp", 0o1777),
        ("var/tmp", 0o1777),
        ("root", 0o700),
    ] {
        let md = fs::symlink_metadata(root.join(dir)).unwrap();
        assert!(md.is_dir(), "{dir}");
        assert_eq!(md.mode() & 0o7777, mode, "{dir}");
        assert_eq!(fs::read_dir(root.join(dir)).unwrap().count(), 0, "{dir}");
    }
    assert!(!root.join("etc/machine-id").exists());
    if host_files.contains(&"/etc/os-release") {
        let md = fs::symlink_metadata(root.join("etc/os-release")).unwrap();
        assert!(md.is_file(), "copied by content, not a dangling link");
        assert_eq!(
            fs::read(root.join("etc/os-release")).unwrap(),
            fs::read("/etc/os-release").unwrap()
        );
    }
    let o = Command::new("chroot")
        .arg(&root)
        .args(["/bin/sh", "-c", "echo ok"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "ok\n", "{}", text(&o));
    let o = Command::new("chroot")
        .arg(&root)
        .args(["/usr/bin/ls", "/"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("lib64"));
}

/// `install --json`: every line is JSON, the steps as events, then the
/// result with the totals; a failure as an error naming the stage.
#[test]
fn install_reports_json_lines() {
    let w = world(2);
    let run = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_zinstall"));
        c.env("ZINSTALL_DEFAULTS", "/dev/null")
            .args(["install", "--json", "--profile"])
            .arg(&w.profile)
            .arg("--zonepath")
            .arg(&w.zonepath)
            .arg(&w.layer1);
        c.output().unwrap()
    };
    let o = run();
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    assert!(lines.len() > 3, "{out}");
    assert!(
        lines[..lines.len() - 1]
            .iter()
            .all(|v| v["event"].is_string())
    );
    let last = &lines[lines.len() - 1]["result"];
    assert!(last["stats"]["files"].as_u64().unwrap() > 0, "{out}");
    // Installed already: refused, nothing changed.
    let o = run();
    assert_eq!(o.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let last: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["error"]["stage"], "Refused", "{stdout}");
    assert!(
        last["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already installed"),
        "{stdout}"
    );
}

/// A plain rootfs tarball (no zinstall.json, as Debian and Alpine ship
/// them: `./`, `./etc/...`), compressed, is an install image: unpacked
/// over the root with its modes, links and owners.
#[test]
fn plain_rootfs_tarballs_are_images() {
    let w = world(2);
    let tree = w.d.path().join("rootfs");
    fs::create_dir_all(tree.join("etc")).unwrap();
    fs::create_dir_all(tree.join("usr/local/bin")).unwrap();
    fs::write(tree.join("etc/hostname"), b"guest\n").unwrap();
    let tool = tree.join("usr/local/bin/tool");
    fs::write(&tool, b"#!/bin/sh\n").unwrap();
    fs::set_permissions(&tool, fs::Permissions::from_mode(0o4755)).unwrap();
    std::os::unix::fs::symlink("tool", tree.join("usr/local/bin/t")).unwrap();
    fs::hard_link(&tool, tree.join("usr/local/bin/tool2")).unwrap();
    for (name, flag) in [
        ("r.tar.zst", "--zstd"),
        ("r.tar.gz", "--gzip"),
        ("r.tar", "--no-auto-compress"),
    ] {
        let out = w.d.path().join(name);
        let st = tools::tool("tar")
            .args(["--numeric-owner", "--xattrs", flag, "-C"])
            .arg(&tree)
            .arg("-cf")
            .arg(&out)
            .arg(".")
            .status()
            .unwrap();
        assert!(st.success());
        let _ = fs::remove_dir_all(&w.zonepath);
        let o = zinstall(&w, &[&out]);
        assert!(o.status.success(), "{name}: {}", text(&o));
        let root = w.zonepath.join("root");
        assert_eq!(fs::read(root.join("etc/hostname")).unwrap(), b"guest\n");
        let md = fs::symlink_metadata(root.join("usr/local/bin/tool")).unwrap();
        assert_eq!(md.mode() & 0o7777, 0o4755, "{name}: setuid kept");
        assert_eq!(
            fs::read_link(root.join("usr/local/bin/t")).unwrap(),
            Path::new("tool")
        );
        let md2 = fs::metadata(root.join("usr/local/bin/tool2")).unwrap();
        assert_eq!(md.ino(), md2.ino(), "{name}: hard link kept");
        // The profile's trees are there too: the tarball is a layer.
        assert!(root.join("usr/share").is_dir(), "{name}");
    }
}

/// A plain tarball is held to the same rules as a zinstall layer: a
/// symlink it plants and then writes through, or a `..` name, is
/// refused and nothing lands outside the root.
#[test]
fn hostile_plain_tarballs_are_refused() {
    let w = world(2);
    let outside = w.d.path().join("outside");
    fs::create_dir_all(&outside).unwrap();
    let cases: [&[(&str, Option<&str>)]; 2] = [
        &[
            ("./planted", Some(outside.to_str().unwrap())),
            ("./planted/passwd", None),
        ],
        &[("./ok", None), ("../../outside/x", None)],
    ];
    for (i, entries) in cases.iter().enumerate() {
        let mut b = tar::Builder::new(Vec::new());
        for (name, link) in entries.iter() {
            let mut h = tar::Header::new_gnu();
            h.set_mode(0o644);
            h.set_mtime(0);
            match link {
                Some(target) => {
                    h.set_entry_type(tar::EntryType::Symlink);
                    h.set_size(0);
                    b.append_link(&mut h, name, target).unwrap();
                }
                None => {
                    h.set_size(3);
                    // The tar crate refuses `..` in a path it sets itself.
                    let raw = name.as_bytes();
                    h.as_gnu_mut().unwrap().name[..raw.len()]
                        .copy_from_slice(raw);
                    h.set_cksum();
                    b.append(&h, &b"bad"[..]).unwrap();
                }
            }
        }
        let path = w.d.path().join(format!("hostile{i}.tar"));
        fs::write(&path, b.into_inner().unwrap()).unwrap();
        let _ = fs::remove_dir_all(&w.zonepath);
        let o = zinstall(&w, &[&path]);
        assert_eq!(o.status.code(), Some(1), "case {i}: {}", text(&o));
        let why = ["symlink", ".."][i];
        assert!(text(&o).contains(why), "case {i}: {}", text(&o));
        assert!(
            fs::read_dir(&outside).unwrap().next().is_none(),
            "case {i}: something was written outside the root"
        );
        assert!(!w.zonepath.join("root").exists(), "case {i}: root left");
    }
}
