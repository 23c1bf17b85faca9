//! Real roots in, real roots out. A root with every hard case a
//! debootstrap'd system has (device nodes, setuid and setgid files, a
//! file capability, access and default ACLs, sparse files, hard links, a
//! FIFO, extended attributes, owners and modes of every kind, nanosecond
//! times, symlinks absolute, relative and dangling, long and non-UTF-8
//! names), built here from files the test makes, is packed by `zinstall
//! image create`, by GNU tar, bsdtar and umoci, installed and provisioned, and
//! compared attribute by attribute with its source by `zinstall verify`
//! and, independently, by the system's own tools (`find -printf`,
//! `getfattr`, `getfacl`, `stat`). GNU tar and bsdtar extract a zinstall
//! layer with its ACLs and holes. A tree thousands of levels deep goes
//! through install and provision in memory that grows by a small
//! constant per level.
//!
//! Linux only: it drives Linux's xattr, ACL and capability tools and
//! reads a child's peak memory with wait4.

#![cfg(target_os = "linux")]

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use zinstall_testkit::run::{s, text};

use zinstall_testkit::{Tmp, require_root, tool};

use crate::oci::support;

fn zinstall(args: &[&str]) -> Output {
    zinstall_testkit::run::output(env!("CARGO_BIN_EXE_zinstall"), args)
}

/// Runs `program args`, which must succeed; its stdout.
fn run(program: &str, args: &[&str]) -> String {
    let o = tool(program).args(args).output().unwrap();
    assert!(o.status.success(), "{program} {args:?}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs `sh -c script` in `dir`, which must succeed; its stdout.
fn sh(dir: &Path, script: &str) -> String {
    let o = tool("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{script}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn write(root: &Path, rel: &str, data: &[u8], mode: u32) -> PathBuf {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, data).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    p
}

/// A root as debootstrap leaves one, with every hard case, made by the
/// tools a build script would use.
fn debootstrap_like(r: &Path) {
    for d in [
        "bin",
        "sbin",
        "etc/apt",
        "usr/lib/x86_64-linux-gnu",
        "usr/share",
        "var/lib/dpkg",
        "var/log/journal",
        "run",
        "dev/pts",
        "home/user",
    ] {
        fs::create_dir_all(r.join(d)).unwrap();
    }
    fs::create_dir_all(r.join("tmp")).unwrap();
    fs::set_permissions(r.join("tmp"), fs::Permissions::from_mode(0o1777))
        .unwrap();
    fs::create_dir_all(r.join("root")).unwrap();
    fs::set_permissions(r.join("root"), fs::Permissions::from_mode(0o700))
        .unwrap();
    // Device nodes as debootstrap makes them (MAKEDEV's set), with their
    // modes and groups (tty 5, disk 6).
    for (name, kind, maj, min, mode, gid) in [
        ("null", "c", 1, 3, 0o666, 0),
        ("zero", "c", 1, 5, 0o666, 0),
        ("full", "c", 1, 7, 0o666, 0),
        ("random", "c", 1, 8, 0o666, 0),
        ("urandom", "c", 1, 9, 0o666, 0),
        ("tty", "c", 5, 0, 0o666, 5),
        ("console", "c", 5, 1, 0o600, 0),
        ("ptmx", "c", 5, 2, 0o666, 5),
        ("loop0", "b", 7, 0, 0o660, 6),
    ] {
        let p = r.join("dev").join(name);
        run(
            "mknod",
            &[
                "-m",
                &format!("{mode:o}"),
                s(&p),
                kind,
                &maj.to_string(),
                &min.to_string(),
            ],
        );
        std::os::unix::fs::lchown(&p, Some(0), Some(gid)).unwrap();
    }
    symlink("/proc/self/fd", r.join("dev/fd")).unwrap();
    run("mkfifo", &["-m", "600", s(&r.join("run/initctl"))]);
    // setuid, setgid, a capability.
    write(r, "usr/bin/passwd", &[0x7f; 4000], 0o4755);
    let wall = write(r, "usr/bin/wall", b"wall", 0o755);
    // chown clears setgid: the mode after.
    std::os::unix::fs::chown(&wall, Some(0), Some(5)).unwrap();
    fs::set_permissions(&wall, fs::Permissions::from_mode(0o2755)).unwrap();
    let ping = write(r, "usr/bin/ping", &[0x45; 9000], 0o755);
    run("setcap", &["cap_net_raw+ep", s(&ping)]);
    // Hard links, across directories.
    let perl = write(r, "usr/bin/perl", &[1u8; 12_000], 0o755);
    fs::hard_link(&perl, r.join("usr/bin/perl5.36.0")).unwrap();
    fs::hard_link(&perl, r.join("bin/perl-again")).unwrap();
    // Sparse files: data in a hole-y image, and one all hole.
    let img = r.join("var/lib/disk.img");
    run("truncate", &["-s", "64M", s(&img)]);
    let mut f = fs::OpenOptions::new().write(true).open(&img).unwrap();
    use std::io::{Seek, SeekFrom};
    for off in [1u64 << 20, 33 << 20] {
        f.seek(SeekFrom::Start(off)).unwrap();
        f.write_all(&[0xa5; 8192]).unwrap();
    }
    drop(f);
    run("truncate", &["-s", "32M", s(&r.join("var/log/lastlog"))]);
    // ACLs: systemd's journal directory (a default ACL), a file with
    // named entries.
    run(
        "setfacl",
        &[
            "-m",
            "g:4:r-x,d:g:4:r-x,d:u::rwx,d:g::r-x,d:o::r-x",
            s(&r.join("var/log/journal")),
        ],
    );
    let acl = write(r, "etc/shadow-acl", b"secret", 0o640);
    run("setfacl", &["-m", "u:1000:r--,g:42:rw-", s(&acl)]);
    // xattrs of every namespace a root uses.
    let note =
        write(r, "etc/apt/sources.list", b"deb http://x y main\n", 0o644);
    run(
        "setfattr",
        &["-n", "user.origin", "-v", "debootstrap", s(&note)],
    );
    run(
        "setfattr",
        &["-n", "trusted.overlay.test", "-v", "0x00ff0a", s(&note)],
    );
    // Owners and modes.
    let home = r.join("home/user");
    write(r, "home/user/.profile", b"# profile\n", 0o600);
    for p in [&home, &home.join(".profile")] {
        std::os::unix::fs::chown(p, Some(1000), Some(1000)).unwrap();
    }
    fs::set_permissions(&home, fs::Permissions::from_mode(0o750)).unwrap();
    write(r, "etc/dpkg-file", b"x", 0o444);
    // Symlinks of each kind.
    symlink("/usr/share/zoneinfo/Etc/UTC", r.join("etc/localtime")).unwrap();
    symlink("usr/bin", r.join("bin/usrbin")).unwrap();
    symlink("nowhere/at/all", r.join("etc/dangling")).unwrap();
    // A long name and one that is not UTF-8.
    write(r, &format!("usr/share/{}", "n".repeat(180)), b"long", 0o644);
    let odd = r
        .join("usr/share")
        .join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
    fs::write(&odd, b"latin-1").unwrap();
    // Nanosecond times, the directories' last.
    sh(
        r,
        "find . -depth -exec touch -h -d '2024-02-29 12:34:56.123456789' {} +",
    );
}

/// What the system's own tools say of every entry under `root`: type,
/// mode, owner, size (files), time to the nanosecond, link target, the
/// other names of its inode, device numbers, extended attributes
/// (`getfattr`, hex) and ACLs (`getfacl`); and, apart, the blocks of
/// each file (to compare holes).
struct Snapshot {
    entries: BTreeMap<String, String>,
    blocks: BTreeMap<String, u64>,
}

fn snapshot(root: &Path) -> Snapshot {
    let mut entries: BTreeMap<String, String> = BTreeMap::new();
    let mut blocks = BTreeMap::new();
    let mut inodes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let listing = sh(
        root,
        "find . -printf '%P\\0%y\\0%#m\\0%U\\0%G\\0%s\\0%T@\\0%l\\0%i\\0%b\\0'",
    );
    let fields: Vec<&str> = listing.split('\0').collect();
    for f in fields.chunks_exact(10) {
        let path = format!("/{}", f[0]);
        let size = if f[1] == "d" { "-" } else { f[5] };
        entries.insert(
            path.clone(),
            format!(
                "type {} mode {} owner {}:{} size {size} mtime {} link {:?}",
                f[1], f[2], f[3], f[4], f[6], f[7]
            ),
        );
        if f[1] == "f" {
            blocks.insert(path.clone(), f[9].parse().unwrap());
            inodes.entry(f[8].to_string()).or_default().push(path);
        }
    }
    for names in inodes.values().filter(|v| v.len() > 1) {
        for n in names {
            let e = entries.get_mut(n).unwrap();
            e.push_str(&format!(" links {names:?}"));
        }
    }
    let devs = sh(
        root,
        "find . \\( -type b -o -type c \\) -exec stat -c '%n %t:%T' {} +",
    );
    for line in devs.lines() {
        let (n, d) = line.rsplit_once(' ').unwrap();
        let path = n.trim_start_matches('.').to_string();
        entries
            .get_mut(&path)
            .unwrap()
            .push_str(&format!(" dev {d}"));
    }
    for (cmd, what) in [
        ("getfattr -h -R -d -m - -e hex . 2>/dev/null", "xattrs"),
        ("getfacl -R -P -n -p . 2>/dev/null", "acl"),
    ] {
        let out = sh(root, cmd);
        for block in out.split("\n\n").filter(|b| !b.trim().is_empty()) {
            let mut lines = block.lines();
            let head = lines.next().unwrap();
            let name = head.strip_prefix("# file: ").unwrap_or(head);
            // getfattr names `a/b`, getfacl `./a/b`, both `.` the top;
            // both escape bytes that are not printable.
            let key = match name.strip_prefix("./").unwrap_or(name) {
                "." => "/".to_string(),
                rel => format!("/{rel}"),
            };
            let body: Vec<&str> =
                lines.filter(|l| !l.starts_with("# ")).collect();
            let e = entries
                .entry(key)
                .or_insert_with(|| format!("(only in {what})"));
            e.push_str(&format!(" {what} {body:?}"));
        }
    }
    Snapshot { entries, blocks }
}

/// Every difference between the snapshots of `a` and `b`, in words;
/// files with holes in `a` must not have more than 64 KiB more blocks
/// in `b`.
fn differences(a: &Snapshot, b: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    for (k, va) in &a.entries {
        match b.entries.get(k) {
            None => out.push(format!("{k}: only in A")),
            Some(vb) if vb != va => {
                out.push(format!("{k}:\n   A {va}\n   B {vb}"))
            }
            _ => {}
        }
    }
    for k in b.entries.keys().filter(|k| !a.entries.contains_key(*k)) {
        out.push(format!("{k}: only in B"));
    }
    for (k, &ba) in &a.blocks {
        if let Some(&bb) = b.blocks.get(k)
            && bb > ba + 128
        {
            out.push(format!("{k}: {ba} blocks in A, {bb} in B (holes lost)"));
        }
    }
    out
}

/// The snapshot of a source root sees every hard case: a comparison with
/// it is not one of empty strings.
fn assert_covers(a: &Snapshot) {
    let has = |k: &str, what: &str| {
        let e = a.entries.get(k).unwrap_or_else(|| panic!("{k} missing"));
        assert!(e.contains(what), "{k}: {what:?} not in {e}");
    };
    has("/dev/loop0", "dev 7:0");
    has("/dev/loop0", "type b mode 0660 owner 0:6");
    has("/usr/bin/passwd", "mode 04755");
    has("/usr/bin/wall", "mode 02755 owner 0:5");
    has("/usr/bin/ping", "security.capability=0x");
    has("/etc/apt/sources.list", "trusted.overlay.test=0x00ff0a");
    has("/etc/apt/sources.list", "user.origin=0x");
    has("/etc/shadow-acl", "user:1000:r--");
    has("/var/log/journal", "default:group:4:r-x");
    has("/usr/bin/perl", "/bin/perl-again");
    has("/run/initctl", "type p mode 0600");
    has("/home/user", "mode 0750 owner 1000:1000");
    has("/etc/dangling", "nowhere/at/all");
    has("/tmp", "mode 01777");
    has("/usr/bin", "mtime 1709210096.1234567890");
    assert!(a.blocks["/var/lib/disk.img"] < 1024, "the source is sparse");
}

fn assert_same(what: &str, a: &Path, b: &Path) {
    let diffs = differences(&snapshot(a), &snapshot(b));
    assert!(
        diffs.is_empty(),
        "{what}: {} differences between {} and {}:\n{}",
        diffs.len(),
        a.display(),
        b.display(),
        diffs.join("\n")
    );
    let o = zinstall(&["verify", "--no-atime", "--sparse", s(a), s(b)]);
    assert!(o.status.success(), "{what}: zinstall verify: {}", text(&o));
}

fn profile(dir: &Path) -> PathBuf {
    let p = dir.join("profile.toml");
    fs::write(
        &p,
        format!(
            "source_root = \"/\"\ntrees = []\nallow_devices = true\n\
             log = \"{}\"\n",
            dir.join("install.log").display()
        ),
    )
    .unwrap();
    p
}

fn install(dir: &Path, zonepath: &Path, image: &str) -> PathBuf {
    let o = zinstall(&[
        "install",
        "--profile",
        s(&profile(dir)),
        "--zonepath",
        s(zonepath),
        image,
    ]);
    assert!(o.status.success(), "install {image}: {}", text(&o));
    zonepath.join("root")
}

fn provision(dir: &Path, out: &Path, image: &str) -> PathBuf {
    let o = zinstall(&[
        "provision",
        image,
        "--out",
        s(out),
        "--cache",
        s(&dir.join("cache")),
        "--keep-identity",
        "--allow-devices",
    ]);
    assert!(o.status.success(), "provision {image}: {}", text(&o));
    out.join("guest-0")
}

/// The root packed by `zinstall image create`, by GNU tar (`-S --xattrs
/// --acls`) and by bsdtar (`--acls --xattrs`), each installed and
/// provisioned, is the source on every attribute; packed by umoci,
/// install and provision give what `umoci unpack` gives.
#[test]
fn a_debootstrap_like_root_survives_every_packer() {
    if !require_root() {
        return;
    }
    let d = Tmp::new();
    let src = d.path().join("src");
    debootstrap_like(&src);
    assert_covers(&snapshot(&src));
    let layer = d.path().join("layer.tar.zst");
    let o = zinstall(&["image", "create", s(&src), s(&layer)]);
    assert!(o.status.success(), "{}", text(&o));
    let gnu = d.path().join("gnu.tar");
    run(
        "tar",
        &[
            "--xattrs",
            "--xattrs-include=*",
            "--acls",
            "--numeric-owner",
            "-S",
            "--format=pax",
            "-C",
            s(&src),
            "-cf",
            s(&gnu),
            ".",
        ],
    );
    let bsd = d.path().join("bsd.tar");
    run(
        "bsdtar",
        &[
            "--acls",
            "--xattrs",
            "--numeric-owner",
            "--format=pax",
            "-C",
            s(&src),
            "-cf",
            s(&bsd),
            ".",
        ],
    );
    for (name, image) in [
        ("zinstall layer", &layer),
        ("GNU tar", &gnu),
        ("bsdtar", &bsd),
    ] {
        let tag = name.replace(' ', "-");
        let root =
            install(d.path(), &d.path().join(format!("zp-{tag}")), s(image));
        assert_same(&format!("install from the {name}"), &src, &root);
        let guest =
            provision(d.path(), &d.path().join(format!("g-{tag}")), s(image));
        assert_same(&format!("provision from the {name}"), &src, &guest);
    }
    // umoci: its layer from the same tree, then its own unpack.
    let lay = d.path().join("oci");
    let image = format!("{}:t", lay.display());
    let bundle = d.path().join("bundle");
    run("umoci", &["init", "--layout", s(&lay)]);
    run("umoci", &["new", "--image", &image]);
    run("umoci", &["unpack", "--image", &image, s(&bundle)]);
    fs::remove_dir_all(bundle.join("rootfs")).unwrap();
    run("cp", &["-a", s(&src), s(&bundle.join("rootfs"))]);
    run("umoci", &["repack", "--image", &image, s(&bundle)]);
    let theirs = d.path().join("umoci");
    run("umoci", &["unpack", "--image", &image, s(&theirs)]);
    let theirs = theirs.join("rootfs");
    // Not two empty trees: umoci carried the devices, the capability and
    // the hard links.
    assert!(theirs.join("dev/loop0").exists());
    let caps = run("getcap", &[s(&theirs.join("usr/bin/ping"))]);
    assert!(caps.contains("cap_net_raw"), "{caps}");
    let root = install(d.path(), &d.path().join("zp-umoci"), &image);
    assert_same("install from umoci's image", &theirs, &root);
    let guest = provision(d.path(), &d.path().join("g-umoci"), &image);
    assert_same("provision from umoci's image", &theirs, &guest);
}

/// GNU tar (`--acls`) and bsdtar extract a zinstall layer with its ACLs
/// (written as `SCHILY.acl.*`, which they read) and its holes (a PAX 1.0
/// sparse member), and everything else the layer keeps.
#[test]
fn gnu_tar_and_bsdtar_restore_a_zinstall_layer() {
    if !require_root() {
        return;
    }
    let d = Tmp::new();
    let src = d.path().join("src");
    debootstrap_like(&src);
    let layer = d.path().join("layer.tar");
    let o = zinstall(&["image", "create", s(&src), s(&layer)]);
    assert!(o.status.success(), "{}", text(&o));
    let listing = run("tar", &["-tvf", s(&layer)]);
    assert!(listing.contains("root/var/lib/disk.img"), "{listing}");
    assert!(!listing.contains("GNUSparseFile"), "{listing}");
    let gnu = d.path().join("gnu");
    fs::create_dir(&gnu).unwrap();
    // --acls alone restores ACLs (GNU tar's xattrs other than user.*
    // need --xattrs-include, and then it would restore ACLs from their
    // xattr form as well).
    run(
        "tar",
        &[
            "--acls",
            "--numeric-owner",
            "-xpf",
            s(&layer),
            "-C",
            s(&gnu),
        ],
    );
    let bsd = d.path().join("bsd");
    fs::create_dir(&bsd).unwrap();
    run(
        "bsdtar",
        &[
            "--acls",
            "--xattrs",
            "--numeric-owner",
            "-xpf",
            s(&layer),
            "-C",
            s(&bsd),
        ],
    );
    for (name, root) in
        [("GNU tar", gnu.join("root")), ("bsdtar", bsd.join("root"))]
    {
        let acl =
            run("getfacl", &["-n", "-p", s(&root.join("etc/shadow-acl"))]);
        assert!(
            acl.contains("user:1000:r--") && acl.contains("group:42:rw-"),
            "{name}: {acl}"
        );
        let dacl =
            run("getfacl", &["-n", "-p", s(&root.join("var/log/journal"))]);
        assert!(dacl.contains("default:group:4:r-x"), "{name}: {dacl}");
        let a = snapshot(&src);
        assert_covers(&a);
        let mut b = snapshot(&root);
        if name == "GNU tar" {
            // Without --xattrs GNU tar restores no capability or trusted
            // xattr: compare those entries on the rest only.
            for k in ["/usr/bin/ping", "/etc/apt/sources.list"] {
                b.entries.insert(k.into(), a.entries[k].clone());
            }
        }
        let diffs = differences(&a, &b);
        assert!(diffs.is_empty(), "{name}:\n{}", diffs.join("\n"));
        let du = run("du", &["-k", s(&root.join("var/lib/disk.img"))]);
        let kib: u64 = du.split_whitespace().next().unwrap().parse().unwrap();
        assert!(
            kib < 1024,
            "{name}: {kib} KiB allocated of a sparse 64 MiB file"
        );
    }
}

/// Runs zinstall with `args`, at most `nofile` descriptors open; its
/// success, its output, and its peak resident memory in KiB (the
/// kernel's count, from `wait4`).
fn measured(
    dir: &Path,
    args: &[&str],
    nofile: Option<u64>,
) -> (bool, String, u64) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_zinstall"));
    cmd.env("ZINSTALL_DEFAULTS", "/dev/null").args(args);
    let r = zinstall_testkit::run::limited(
        &mut cmd,
        nofile.map(|n| (n, n)),
        &dir.join("measured.log"),
    );
    (r.ok, r.out, r.max_rss_kib)
}

/// Trees thousands of levels deep, as OCI images: installed with at most
/// 64 descriptors open (none held per level) and provisioned, in memory
/// that grows by a small constant per level: the peak at the larger
/// depth over the peak at the smaller one, per level added. Provision
/// copies the layer's tree with the engine's walk, which reads each
/// directory relative to its parent's descriptor and holds none per
/// level, within its descriptor budget, so the same descriptor limit
/// holds for it. A directory still being copied keeps its name and a
/// link to its parent, not its paths, so a level costs a constant there
/// too (crates/commands/zinstall/tests/descriptors.rs holds it to 2 KB
/// a level); the bound here is the looser one of when each level kept
/// its paths.
#[test]
fn deep_trees_install_and_provision_in_bounded_memory() {
    // Peak memory is measured: see zinstall_testkit::run::limited.
    if !zinstall_testkit::alone() {
        return;
    }
    let d = Tmp::new();
    let profile = d.path().join("profile.toml");
    fs::write(
        &profile,
        format!(
            "source_root = \"/\"\ntrees = []\nlog = \"{}\"\n",
            d.path().join("log").display()
        ),
    )
    .unwrap();
    let slope = |peaks: &[u64], levels: u64| {
        peaks[1].saturating_sub(peaks[0]) * 1024 / levels
    };
    let mut peaks = Vec::new();
    for depth in [1000, 3000] {
        let lay = support::deep_image(d.path(), depth);
        let zp = d.path().join(format!("zp-{depth}"));
        let (ok, out, kib) = measured(
            d.path(),
            &[
                "install",
                "--profile",
                s(&profile),
                "--zonepath",
                s(&zp),
                s(&lay),
            ],
            Some(64),
        );
        assert!(ok, "install {depth} deep: {out}");
        assert!(out.contains(&format!("{depth} dirs")), "{out}");
        peaks.push(kib);
    }
    let per_level = slope(&peaks, 2000);
    assert!(
        per_level <= 4096,
        "install: peaks of {peaks:?} KiB at 1000 and 3000 levels: {per_level} bytes a level"
    );
    let mut peaks = Vec::new();
    for depth in [1000, 3000] {
        let lay = support::deep_image(d.path(), depth);
        let out = d.path().join(format!("g-{depth}"));
        let (ok, log, kib) = measured(
            d.path(),
            &[
                "provision",
                s(&lay),
                "--out",
                s(&out),
                "--cache",
                s(&d.path().join("cache")),
                "--keep-identity",
            ],
            Some(64),
        );
        assert!(ok, "provision {depth} deep: {log}");
        // Deeper than PATH_MAX: counted by find, which descends by
        // descriptor.
        let found = Command::new("find")
            .arg(out.join("guest-0"))
            .args(["-mindepth", &depth.to_string(), "-type", "d", "-name", "d"])
            .output()
            .unwrap();
        assert!(found.status.success(), "find {depth} deep");
        let lines = String::from_utf8_lossy(&found.stdout).lines().count();
        assert_eq!(
            lines, 1,
            "provision {depth} deep: directories at depth {depth} and below"
        );
        peaks.push(kib);
    }
    let per_level = slope(&peaks, 2000);
    assert!(
        per_level <= 16384,
        "provision: peaks of {peaks:?} KiB at 1000 and 3000 levels: {per_level} bytes a level"
    );
}
