//! `zinstall provision` and `zinstall cache` end to end, with real
//! qemu-img, real archives, and several processes at once.

use zinstall_testkit::tools;

use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use zinstall_testkit::run::{s, text};

use tmp::Tmp;
use zinstall_testkit::tmp;

fn zinstall(args: &[&str]) -> Output {
    zinstall_testkit::run::output(env!("CARGO_BIN_EXE_zinstall"), args)
}

fn run(cmd: &mut Command) {
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// 64 MiB raw disk with a few MiB of data in places.
fn disk(dir: &Path) -> PathBuf {
    let p = dir.join("disk.raw");
    let mut f = fs::File::create(&p).unwrap();
    for (i, off) in [0u64, 9 << 20, 40 << 20].iter().enumerate() {
        f.seek(SeekFrom::Start(*off)).unwrap();
        let data: Vec<u8> = (0..(1 << 20))
            .map(|j: u32| (j % 251) as u8 ^ (i as u8 * 77))
            .collect();
        f.write_all(&data).unwrap();
    }
    f.set_len(64 << 20).unwrap();
    p
}

/// A small rootfs directory.
fn rootfs(dir: &Path) -> PathBuf {
    let r = dir.join("rootfs");
    for i in 0..50 {
        let p = r.join(format!("usr/lib/m{}/f{i}", i % 5));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, vec![i as u8; 10_000 + i * 100]).unwrap();
    }
    fs::create_dir_all(r.join("etc")).unwrap();
    fs::write(r.join("etc/hostname"), b"guest\n").unwrap();
    std::os::unix::fs::symlink("usr/lib", r.join("lib")).unwrap();
    r
}

fn raw_of(img: &Path, out: &Path) -> Vec<u8> {
    run(tools::tool("qemu-img").args([
        "convert",
        "-q",
        "-O",
        "raw",
        s(img),
        s(out),
    ]));
    fs::read(out).unwrap()
}

#[test]
fn every_kind_of_image_gives_correct_guests() {
    let d = Tmp::new();
    let raw = disk(d.path());
    let want = fs::read(&raw).unwrap();
    let gz = d.path().join("disk.img.gz");
    run(Command::new("sh").arg("-c").arg(format!(
        "gzip -c {} > {}",
        s(&raw),
        s(&gz)
    )));
    let zst = d.path().join("disk.img.zst");
    run(tools::tool("zstd").args(["-q", "-f", "-o", s(&zst), s(&raw)]));
    let qcow = d.path().join("disk.qcow2");
    run(tools::tool("qemu-img").args([
        "convert",
        "-q",
        "-c",
        "-O",
        "qcow2",
        s(&raw),
        s(&qcow),
    ]));
    let cache = d.path().join("cache");
    for (i, img) in [&raw, &gz, &zst, &qcow].iter().enumerate() {
        let out = d.path().join(format!("out{i}"));
        let o = zinstall(&[
            "provision",
            s(img),
            "--count",
            "2",
            "--out",
            s(&out),
            "--cache",
            s(&cache),
            "--size",
            "1G",
        ]);
        assert!(o.status.success(), "{}", text(&o));
        for g in 0..2 {
            let ov = out.join(format!("guest-{g}.qcow2"));
            let check = tools::tool("qemu-img")
                .args(["check", s(&ov)])
                .output()
                .unwrap();
            assert!(
                check.status.success(),
                "{}",
                String::from_utf8_lossy(&check.stdout)
            );
            let info = tools::tool("qemu-img")
                .args(["info", "--output=json", "--backing-chain", s(&ov)])
                .output()
                .unwrap();
            let chain: serde_json::Value =
                serde_json::from_slice(&info.stdout).unwrap();
            assert_eq!(chain[0]["virtual-size"], 1u64 << 30);
            assert_eq!(chain[0]["backing-filename-format"], "raw");
            let base = chain[0]["backing-filename"].as_str().unwrap();
            assert!(
                base.starts_with(s(&fs::canonicalize(&cache).unwrap())),
                "{base}"
            );
            let got = raw_of(&ov, &d.path().join(format!("read{i}{g}.raw")));
            assert!(
                got[..want.len()] == want[..],
                "guest {g} of image {i} differs"
            );
            assert!(got[want.len()..].iter().all(|&b| b == 0));
        }
    }
    // raw, raw.gz and raw.zst hold the same bytes: one entry; the qcow2
    // file's bytes differ: a second.
    let log = fs::read_to_string(cache.join("builds.log")).unwrap();
    assert_eq!(
        log.lines().count(),
        4,
        "one build per distinct image file:\n{log}"
    );
    let entries: Vec<_> = fs::read_dir(cache.join("entries"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(
        entries.len(),
        4,
        "keyed by each image's own bytes: {entries:?}"
    );
    let base = entries[0].join("base.raw");
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    assert_eq!(
        fs::metadata(&base).unwrap().permissions().mode() & 0o777,
        0o444
    );
    assert!(
        fs::metadata(&base).unwrap().blocks() * 512 < 8 << 20,
        "base kept sparse"
    );
}

#[test]
fn a_guest_write_stays_in_its_overlay() {
    let d = Tmp::new();
    let raw = disk(d.path());
    let want = fs::read(&raw).unwrap();
    let out = d.path().join("out");
    for extra in [&[][..], &["--qemu-img"][..]] {
        let mut args = vec![
            "provision",
            s(&raw),
            "--count",
            "2",
            "--out",
            s(&out),
            "--cache",
        ];
        let cache = d.path().join(format!("cache{}", extra.len()));
        args.push(s(&cache));
        args.extend_from_slice(extra);
        args.extend([
            "--name",
            if extra.is_empty() { "native" } else { "qemu" },
        ]);
        let o = zinstall(&args);
        assert!(o.status.success(), "{}", text(&o));
    }
    for name in ["native", "qemu"] {
        let g0 = out.join(format!("{name}-0.qcow2"));
        let g1 = out.join(format!("{name}-1.qcow2"));
        run(tools::tool("qemu-io").args([
            "-f",
            "qcow2",
            "-c",
            "write -P 0x5a 1M 128k",
            s(&g0),
        ]));
        let a = raw_of(&g0, &d.path().join(format!("{name}a.raw")));
        let b = raw_of(&g1, &d.path().join(format!("{name}b.raw")));
        assert!(
            a[1 << 20..(1 << 20) + (128 << 10)]
                .iter()
                .all(|&x| x == 0x5a)
        );
        assert!(b == want, "{name}: the write shows in the other guest");
    }
    let entries: Vec<_> = fs::read_dir(d.path().join("cache0/entries"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert!(
        fs::read(entries[0].join("base.raw")).unwrap() == want,
        "the base changed"
    );
}

#[test]
fn rootfs_archives_give_directory_guests() {
    let d = Tmp::new();
    let root = rootfs(d.path());
    let tzst = d.path().join("rootfs.tar.zst");
    // PAX keeps nanosecond times, so the guests compare exactly.
    run(tools::tool("tar").args([
        "--zstd",
        "--format=posix",
        "-cf",
        s(&tzst),
        "-C",
        s(&root),
        ".",
    ]));
    let out = d.path().join("out");
    let o = zinstall(&[
        "provision",
        s(&tzst),
        "--count",
        "3",
        "--out",
        s(&out),
        "--cache",
        s(&d.path().join("cache")),
        // Exact copies: what is compared here is the extraction.
        "--keep-identity",
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("tree, parallel copy") || t.contains("tree, reflink clone"),
        "{t}"
    );
    for g in 0..3 {
        let guest = out.join(format!("guest-{g}"));
        let c = zinstall_verify::compare(
            &root,
            &guest,
            &zinstall_verify::CompareOptions {
                atime: false,
                ..Default::default()
            },
        )
        .unwrap();
        // The top directory is the cache's, made when extracted.
        assert!(
            c.differences.iter().all(|x| x.path.as_os_str().is_empty()),
            "{c}"
        );
    }
    let list =
        zinstall(&["cache", "list", "--cache", s(&d.path().join("cache"))]);
    let lt = text(&list);
    assert!(lt.contains("tree") && lt.contains("guest-2"), "{lt}");
    // Guests gone: gc removes the entry.
    fs::remove_dir_all(&out).unwrap();
    let gc = zinstall(&["cache", "gc", "--cache", s(&d.path().join("cache"))]);
    assert!(text(&gc).contains("removed 1 entry ("), "{}", text(&gc));
}

#[test]
fn tree_guests_are_reflinked_on_xfs() {
    let Some(xfs) = zinstall_testkit::LoopFs::require(
        zinstall_testkit::Kind::Xfs,
        512 << 20,
    ) else {
        return;
    };
    let d = Tmp::new();
    let mnt = xfs.path().to_path_buf();
    let root = rootfs(d.path());
    let tar = d.path().join("rootfs.tar");
    run(tools::tool("tar").args(["-cf", s(&tar), "-C", s(&root), "."]));
    let o = zinstall(&[
        "provision",
        s(&tar),
        "--count",
        "2",
        "--out",
        s(&mnt.join("guests")),
        "--cache",
        s(&mnt.join("cache")),
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert_eq!(t.matches("tree, reflink clone").count(), 2, "{t}");
}

#[test]
fn concurrent_provisioning_extracts_once() {
    let d = Tmp::new();
    let raw = disk(d.path());
    let zst = d.path().join("disk.zst");
    run(tools::tool("zstd").args(["-q", "-f", "-o", s(&zst), s(&raw)]));
    let cache = d.path().join("cache");
    let children: Vec<_> = (0..4)
        .map(|i| {
            Command::new(env!("CARGO_BIN_EXE_zinstall"))
                .env("ZINSTALL_DEFAULTS", "/dev/null")
                .args([
                    "provision",
                    s(&zst),
                    "--count",
                    "2",
                    "--name",
                    &format!("p{i}"),
                ])
                .args(["--out", s(&d.path().join("out")), "--cache", s(&cache)])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
    }
    let log = fs::read_to_string(cache.join("builds.log")).unwrap();
    assert_eq!(log.lines().count(), 1, "exactly one extraction:\n{log}");
    let want = fs::read(&raw).unwrap();
    for i in 0..4 {
        for g in 0..2 {
            let ov = d.path().join(format!("out/p{i}-{g}.qcow2"));
            assert!(raw_of(&ov, &d.path().join("check.raw")) == want);
        }
    }
}

#[test]
fn a_killed_extraction_leaves_no_entry() {
    let d = Tmp::new();
    // A slow-to-inflate image: 200 MB of random data, gzip.
    let raw = d.path().join("big.raw");
    run(Command::new("sh").arg("-c").arg(format!(
        "head -c 200000000 /dev/urandom > {0} && gzip -1 -c {0} > {0}.gz",
        s(&raw)
    )));
    let gz = d.path().join("big.raw.gz");
    let cache = d.path().join("cache");
    let mut child = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .args([
            "provision",
            s(&gz),
            "--out",
            s(&d.path().join("out")),
            "--cache",
            s(&cache),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while fs::read_dir(cache.join("scratch"))
        .map(|mut r| r.next().is_none())
        .unwrap_or(true)
    {
        assert!(t0.elapsed() < Duration::from_secs(60), "no build started");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Killed as soon as its scratch directory appears: inflating 200 MB
    // takes far longer than the 10 ms poll.
    child.kill().unwrap();
    let status = child.wait().unwrap();
    let entries = fs::read_dir(cache.join("entries"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().is_dir())
        .count();
    assert!(
        !status.success(),
        "the build finished before the kill: the race was not exercised"
    );
    assert_eq!(entries, 0, "a killed build published an entry");
    let gc = zinstall(&["cache", "gc", "--cache", s(&cache)]);
    assert!(text(&gc).contains("and 1 stale build;"), "{}", text(&gc));
    assert_eq!(fs::read_dir(cache.join("scratch")).unwrap().count(), 0);
}

#[test]
fn bad_images_leave_nothing_behind() {
    let d = Tmp::new();
    let raw = disk(d.path());
    let cache = d.path().join("cache");
    let out = d.path().join("out");
    let zst = d.path().join("disk.zst");
    run(tools::tool("zstd").args(["-q", "-f", "-o", s(&zst), s(&raw)]));
    let cut = d.path().join("cut.zst");
    let bytes = fs::read(&zst).unwrap();
    fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let tgz = d.path().join("root.tar.gz");
    run(tools::tool("tar").args([
        "-czf",
        s(&tgz),
        "-C",
        s(&rootfs(d.path())),
        ".",
    ]));
    let bad_gz = d.path().join("bad.tar.gz");
    let mut b = fs::read(&tgz).unwrap();
    let n = b.len();
    for x in &mut b[n / 3..n / 3 + 200] {
        *x ^= 0xa5;
    }
    fs::write(&bad_gz, b).unwrap();
    let backed = d.path().join("backed.qcow2");
    run(tools::tool("qemu-img").args([
        "create",
        "-q",
        "-f",
        "qcow2",
        "-F",
        "raw",
        "-b",
        s(&raw),
        s(&backed),
    ]));
    let wrong = "ab".repeat(32);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec![s(&cut)], "corrupt image"),
        (vec![s(&bad_gz)], "corrupt"),
        (vec![s(&zst), "--sha256", &wrong], "checksum mismatch"),
        (vec![s(&backed)], "refused: an absolute name"),
    ];
    for (args, want) in cases {
        let mut a = vec!["provision", "--out", s(&out), "--cache", s(&cache)];
        a.extend(args.iter());
        let o = zinstall(&a);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{t}");
        assert!(t.contains(want), "{want}: {t}");
        assert!(t.contains(args[0]), "names the image: {t}");
        let entries = fs::read_dir(cache.join("entries"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().is_dir())
            .count();
        assert_eq!(entries, 0, "{want}: an entry was left");
        assert_eq!(
            fs::read_dir(cache.join("scratch")).unwrap().count(),
            0,
            "{want}: scratch left"
        );
    }
}

#[test]
fn a_full_cache_disk_is_a_clean_error() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Tmp::new();
    let raw = disk(d.path());
    let zst = d.path().join("disk.zst");
    run(tools::tool("zstd").args(["-q", "-f", "-o", s(&zst), s(&raw)]));
    let mnt = d.path().join("small");
    fs::create_dir(&mnt).unwrap();
    run(Command::new("mount").args([
        "-t",
        "tmpfs",
        "-o",
        "size=2m",
        "tmpfs",
        s(&mnt),
    ]));
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _u = Unmount(mnt.clone());
    let o = zinstall(&[
        "provision",
        s(&zst),
        "--out",
        s(&d.path().join("out")),
        "--cache",
        s(&mnt),
    ]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("No space left on device"), "{t}");
    assert_eq!(
        fs::read_dir(mnt.join("scratch")).unwrap().count(),
        0,
        "scratch removed"
    );
    let entries = fs::read_dir(mnt.join("entries"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().is_dir())
        .count();
    assert_eq!(entries, 0);
}

/// The `result` of a `--json` outcome (zinstall(8), JSON OUTPUT).
fn json_of(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", text(o));
    let out = String::from_utf8_lossy(&o.stdout);
    let v: serde_json::Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!((&v["schema"], &v["ok"]), (&1.into(), &true.into()), "{v}");
    v["result"].clone()
}

#[test]
fn dry_run_json_and_listing() {
    let d = Tmp::new();
    let tarball = d.path().join("rootfs.tar");
    run(Command::new("tar").arg("-C").arg(rootfs(d.path())).args([
        "-cf",
        s(&tarball),
        ".",
    ]));
    let (cache, out) = (d.path().join("cache"), d.path().join("out"));
    let args = |extra: &[&str]| {
        let mut v = vec!["provision", s(&tarball), "--count", "2"];
        v.extend(["--cache", s(&cache), "--out", s(&out)]);
        v.extend(extra.iter().copied());
        zinstall(&v)
    };

    // Nothing there yet: the dry run would build, makes nothing.
    let v = json_of(&args(&["-n", "--json"]));
    assert_eq!(v["cache"], "build", "{v}");
    assert_eq!(v["kind"], "tar", "{v}");
    assert_eq!(v["guests"].as_array().unwrap().len(), 2, "{v}");
    assert!(!cache.exists() && !out.exists());

    // The real run's JSON: each guest, the entry; -v is off with --json.
    let v = json_of(&args(&["--json"]));
    assert_eq!(v["obtained"], "built", "{v}");
    let guests = v["guests"].as_array().unwrap();
    assert_eq!(guests.len(), 2);
    for g in guests {
        assert_eq!(g["kind"], "tree");
        assert!(Path::new(g["path"].as_str().unwrap()).is_dir(), "{g}");
    }
    let entry = v["entry"].as_str().unwrap().to_string();
    assert!(Path::new(v["payload"].as_str().unwrap()).is_dir(), "{v}");

    // cache list --json names the same entry and its two guests.
    let l = json_of(&zinstall(&[
        "cache",
        "list",
        "--json",
        "--cache",
        s(&cache),
    ]));
    let l = l.as_array().unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!(l[0]["name"], entry.as_str());
    assert_eq!(l[0]["guests"].as_array().unwrap().len(), 2, "{l:?}");
    assert!(entry.ends_with(l[0]["sha256"].as_str().unwrap()));

    // Now the dry run finds the entry by the file alone, and refuses
    // guests that are there, as the run would.
    let o = args(&["-n"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("guest-0"), "{}", text(&o));
    let other = d.path().join("other");
    let o = zinstall(&[
        "provision",
        s(&tarball),
        "-n",
        "--json",
        "--cache",
        s(&cache),
        "--out",
        s(&other),
    ]);
    let v = json_of(&o);
    assert_eq!(v["cache"], "reuse", "{v}");
    assert_eq!(v["entry"], entry.as_str(), "{v}");
    assert!(!other.exists());
    let o = zinstall(&[
        "provision",
        s(&tarball),
        "-n",
        "--cache",
        s(&cache),
        "--out",
        s(&other),
        "--sha256",
        &"0".repeat(64),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));

    // -v lists each guest's entries as it is copied.
    let o = zinstall(&[
        "provision",
        s(&tarball),
        "-v",
        "--cache",
        s(&cache),
        "--out",
        s(&other),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let listing = String::from_utf8_lossy(&o.stdout);
    let hostname = other.join("guest-0/etc/hostname");
    assert!(
        listing.contains(&format!("-> '{}'", hostname.display())),
        "{listing}"
    );
    let files = listing.lines().filter(|l| l.contains("' -> '")).count();
    // 50 files, the hostname, the symlink and the directories (top, etc,
    // usr, usr/lib and 5 below it).
    assert_eq!(files, 50 + 1 + 1 + 9, "{listing}");
}

/// A dry run of an image whose name is not UTF-8 tells it, lossily, as
/// text and as JSON, as every other path is told.
#[test]
fn dry_run_tells_a_name_that_is_not_utf8() {
    use std::os::unix::ffi::OsStrExt;
    let d = Tmp::new();
    let tarball = d.path().join(std::ffi::OsStr::from_bytes(b"r\xff.tar"));
    run(Command::new("tar")
        .arg("-C")
        .arg(rootfs(d.path()))
        .arg("-cf")
        .arg(&tarball)
        .arg("."));
    let dry = |json: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_zinstall"));
        c.arg("provision").arg(&tarball).arg("-n");
        c.arg("--cache").arg(d.path().join("cache"));
        c.arg("--out").arg(d.path().join("out"));
        c.args(json.then_some("--json")).output().unwrap()
    };
    let o = dry(false);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("r\u{fffd}.tar (tar)"), "{}", text(&o));
    let v = json_of(&dry(true));
    assert_eq!(v["image"], d.path().join("r\u{fffd}.tar").to_str().unwrap());
    assert_eq!(v["cache"], "build", "{v}");
}

/// A rootfs with an identity: hostname, hosts, machine-id (and D-Bus's
/// copy), SSH host keys of two types.
fn rootfs_with_identity(dir: &Path) -> PathBuf {
    let r = rootfs(dir);
    fs::write(r.join("etc/hostname"), b"image\n").unwrap();
    fs::write(
        r.join("etc/hosts"),
        b"127.0.0.1\tlocalhost\n127.0.1.1\timage\n::1\tlocalhost\n",
    )
    .unwrap();
    let id = b"0123456789abcdef0123456789abcdef\n";
    fs::write(r.join("etc/machine-id"), id).unwrap();
    fs::create_dir_all(r.join("var/lib/dbus")).unwrap();
    fs::write(r.join("var/lib/dbus/machine-id"), id).unwrap();
    fs::create_dir_all(r.join("etc/ssh")).unwrap();
    fs::write(r.join("etc/ssh/sshd_config"), b"Port 22\n").unwrap();
    for t in ["ed25519", "rsa"] {
        let key = r.join(format!("etc/ssh/ssh_host_{t}_key"));
        run(tools::tool("ssh-keygen")
            .args(["-q", "-t", t, "-N", "", "-f"])
            .arg(&key));
    }
    r
}

fn sha_of(p: &Path) -> Vec<u8> {
    fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn directory_guests_get_their_own_identity_and_nothing_else_differs() {
    let d = Tmp::new();
    let tarball = d.path().join("rootfs.tar");
    run(Command::new("tar")
        .arg("-C")
        .arg(rootfs_with_identity(d.path()))
        .args(["-cf", s(&tarball), "."]));
    let (cache, out) = (d.path().join("cache"), d.path().join("out"));
    let o = zinstall(&[
        "provision",
        s(&tarball),
        "--count",
        "2",
        "--cache",
        s(&cache),
        "--out",
        s(&out),
        "--hostname",
        "vm-{n}.test",
        "--json",
    ]);
    let v = json_of(&o);
    let (g0, g1) = (out.join("guest-0"), out.join("guest-1"));
    assert_eq!(sha_of(&g0.join("etc/hostname")), b"vm-0.test\n");
    assert_eq!(sha_of(&g1.join("etc/hostname")), b"vm-1.test\n");
    let hosts = String::from_utf8(sha_of(&g1.join("etc/hosts"))).unwrap();
    assert!(hosts.contains("127.0.1.1\tvm-1.test vm-1\n"), "{hosts}");
    assert!(hosts.starts_with("127.0.0.1\tlocalhost\n"), "{hosts}");
    let ids: Vec<String> = v["guests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["machine_id"].as_str().unwrap().to_string())
        .collect();
    assert_ne!(ids[0], ids[1]);
    for (g, id) in [(&g0, &ids[0]), (&g1, &ids[1])] {
        let want = format!("{id}\n").into_bytes();
        assert_eq!(sha_of(&g.join("etc/machine-id")), want);
        assert_eq!(sha_of(&g.join("var/lib/dbus/machine-id")), want);
        assert!(id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()));
        // Version 4, as systemd makes them.
        assert_eq!(&id[12..13], "4", "{id}");
        let key = g.join("etc/ssh/ssh_host_ed25519_key");
        let md = fs::metadata(&key).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o777,
            0o600
        );
    }
    for k in ["ssh_host_ed25519_key", "ssh_host_rsa_key.pub"] {
        assert_ne!(
            sha_of(&g0.join("etc/ssh").join(k)),
            sha_of(&g1.join("etc/ssh").join(k)),
            "{k}"
        );
    }
    // The cache's tree is the image's, untouched.
    let payload = PathBuf::from(v["payload"].as_str().unwrap());
    assert_eq!(sha_of(&payload.join("etc/hostname")), b"image\n");

    // Nothing else differs: the two guests, attribute by attribute, and
    // the directories changed kept their times.
    let o = zinstall(&["verify", "--json", "--no-atime", s(&g0), s(&g1)]);
    let v: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim())
            .unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
    let mut differ: Vec<String> = v["result"]["differences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap().to_string())
        .collect();
    differ.sort();
    differ.dedup();
    let mut expected: Vec<String> = [
        "etc/hostname",
        "etc/hosts",
        "etc/machine-id",
        "var/lib/dbus/machine-id",
        "etc/ssh/ssh_host_ed25519_key",
        "etc/ssh/ssh_host_ed25519_key.pub",
        "etc/ssh/ssh_host_rsa_key",
        "etc/ssh/ssh_host_rsa_key.pub",
    ]
    .map(String::from)
    .to_vec();
    expected.sort();
    assert_eq!(differ, expected, "{v}");

    // first-boot and remove; a guest there needs --force.
    let args = |extra: &[&str]| {
        let mut a = vec!["provision", s(&tarball), "--cache", s(&cache)];
        a.extend(["--out", s(&out), "--machine-id", "first-boot"]);
        a.extend(["--ssh-host-keys", "remove"]);
        a.extend(extra.iter().copied());
        zinstall(&a)
    };
    let o = args(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("--force"), "{}", text(&o));
    let o = args(&["--force"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(sha_of(&g0.join("etc/machine-id")), b"uninitialized\n");
    assert!(!g0.join("var/lib/dbus/machine-id").exists());
    assert!(!g0.join("etc/ssh/ssh_host_rsa_key").exists());
    assert!(g0.join("etc/ssh/sshd_config").exists());
    assert_eq!(sha_of(&g0.join("etc/hostname")), b"guest-0\n");

    // --keep-identity: an exact copy of the image.
    let o = zinstall(&[
        "provision",
        s(&tarball),
        "--cache",
        s(&cache),
        "--out",
        s(&out),
        "--name",
        "same",
        "--keep-identity",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let o = zinstall(&[
        "verify",
        "--no-atime",
        s(&payload),
        s(&out.join("same-0")),
    ]);
    assert!(o.status.success(), "{}", text(&o));

    // A pattern that makes no hostname is refused before anything.
    let o = zinstall(&[
        "provision",
        s(&tarball),
        "--cache",
        s(&cache),
        "--out",
        s(&d.path().join("none")),
        "--hostname",
        "bad_name-{n}",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("bad_name-0"), "{}", text(&o));
    assert!(!d.path().join("none").exists());
}

#[test]
fn identity_never_writes_through_a_symlink_in_the_guest() {
    let d = Tmp::new();
    let r = rootfs(d.path());
    let outside = d.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("hostname"), b"host's own\n").unwrap();
    // The image's /etc/hostname is a symlink to a file outside; its
    // /etc/ssh a symlink to a directory outside.
    fs::remove_file(r.join("etc/hostname")).unwrap();
    std::os::unix::fs::symlink(
        outside.join("hostname"),
        r.join("etc/hostname"),
    )
    .unwrap();
    std::os::unix::fs::symlink(&outside, r.join("etc/ssh")).unwrap();
    fs::write(outside.join("ssh_host_rsa_key"), b"outside key").unwrap();
    let tarball = d.path().join("rootfs.tar");
    run(Command::new("tar")
        .arg("-C")
        .arg(&r)
        .args(["-cf", s(&tarball), "."]));
    let out = d.path().join("out");
    let o = zinstall(&[
        "provision",
        s(&tarball),
        "--cache",
        s(&d.path().join("cache")),
        "--out",
        s(&out),
    ]);
    let t = text(&o);
    // The hostname link is replaced by a file; the ssh link is refused,
    // and the failed guest removed.
    assert_eq!(fs::read(outside.join("hostname")).unwrap(), b"host's own\n");
    assert_eq!(
        fs::read(outside.join("ssh_host_rsa_key")).unwrap(),
        b"outside key"
    );
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("etc/ssh") && t.contains("symlink"), "{t}");
    assert!(!out.join("guest-0").exists(), "{t}");
}

/// The largest file under `dir` (apparent size), and all the bytes
/// allocated there, as `du` counts them.
fn largest_and_allocated(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let (mut largest, mut blocks) = (0, 0);
    for e in walkdir::WalkDir::new(dir).follow_links(false) {
        let md = e.unwrap().metadata().unwrap();
        if md.is_file() {
            largest = largest.max(md.len());
            blocks += md.blocks() * 512;
        }
    }
    (largest, blocks)
}

/// Small images that decompress to more than `--max-archive-size`: a
/// zstd raw disk of zeros, a qcow2 whose tables point 8,192 guest
/// clusters at one cluster of data, a compressed qcow2 file larger than
/// the bound. Each is refused naming the bound, before or while it is
/// written, and nothing larger than the bound is left anywhere, in the
/// cache or the output.
#[test]
fn disk_bombs_are_refused_with_nothing_left() {
    let d = Tmp::new();
    let limit = 64u64 << 20;
    // 1 GiB of zeros, zstd: 33 KB.
    let zeros = d.path().join("zeros.raw");
    fs::File::create(&zeros).unwrap().set_len(1 << 30).unwrap();
    let raw_bomb = d.path().join("bomb.raw.zst");
    run(tools::tool("zstd").args(["-q", "-1", "-o", s(&raw_bomb), s(&zeros)]));
    fs::remove_file(&zeros).unwrap();
    // One 64 KiB cluster of data, mapped at every guest cluster of the
    // first L2 table: 512 MiB of data from a 400 KB file.
    let one = d.path().join("one.raw");
    fs::write(&one, vec![0x41u8; 65536]).unwrap();
    let alias = d.path().join("alias.qcow2");
    run(tools::tool("qemu-img").args([
        "convert",
        "-q",
        "-f",
        "raw",
        "-O",
        "qcow2",
        "-o",
        "cluster_size=65536",
        s(&one),
        s(&alias),
    ]));
    run(tools::tool("qemu-img").args(["resize", "-q", s(&alias), "1G"]));
    {
        let mut f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&alias)
            .unwrap();
        let be = |b: &[u8]| u64::from_be_bytes(b.try_into().unwrap());
        let mut h = [0u8; 104];
        std::io::Read::read_exact(&mut f, &mut h).unwrap();
        let l1 = be(&h[40..48]);
        let mut e = [0u8; 8];
        f.seek(SeekFrom::Start(l1)).unwrap();
        std::io::Read::read_exact(&mut f, &mut e).unwrap();
        let l2 = be(&e) & 0x00ff_ffff_ffff_fe00;
        f.seek(SeekFrom::Start(l2)).unwrap();
        std::io::Read::read_exact(&mut f, &mut e).unwrap();
        assert_ne!(be(&e), 0, "the data cluster is mapped");
        f.seek(SeekFrom::Start(l2)).unwrap();
        f.write_all(&e.repeat(8192)).unwrap();
    }
    assert!(fs::metadata(&alias).unwrap().len() < 1 << 20);
    // A qcow2 file of 96 MiB, every cluster allocated (zeros), zstd.
    let big_q = d.path().join("big.qcow2");
    run(tools::tool("qemu-img").args([
        "create",
        "-q",
        "-f",
        "qcow2",
        "-o",
        "preallocation=full",
        s(&big_q),
        "96M",
    ]));
    let q_bomb = d.path().join("big.qcow2.zst");
    run(tools::tool("zstd").args(["-q", "-1", "-o", s(&q_bomb), s(&big_q)]));
    fs::remove_file(&big_q).unwrap();
    for bomb in [&raw_bomb, &alias, &q_bomb] {
        assert!(fs::metadata(bomb).unwrap().len() < 1 << 20, "{bomb:?}");
    }

    let cache = d.path().join("cache");
    let out = d.path().join("out");
    for (image, want) in [
        (&raw_bomb, "larger than 67108864 bytes"),
        (&alias, "536870912 bytes of data, more than 67108864"),
        (&q_bomb, "larger than 67108864 bytes"),
    ] {
        let o = zinstall(&[
            "provision",
            s(image),
            "--out",
            s(&out),
            "--cache",
            s(&cache),
            "--max-archive-size",
            "64M",
        ]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{t}");
        assert!(t.contains(want) && t.contains("--max-archive-size"), "{t}");
        assert!(t.contains(s(image)), "names the image: {t}");
        let (largest, allocated) = largest_and_allocated(&cache);
        assert!(
            largest <= limit,
            "{}: a file of {largest} bytes left",
            image.display()
        );
        assert!(
            allocated <= limit,
            "{}: {allocated} bytes left",
            image.display()
        );
        assert!(!out.exists(), "{}: guests made", image.display());
        assert_eq!(
            fs::read_dir(cache.join("scratch")).unwrap().count(),
            0,
            "{}: scratch left",
            image.display()
        );
    }
}

/// Device nodes: refused unless asked for with --allow-devices, the
/// refusal naming the member and the flag (provision takes no profile);
/// asked for, as root, made in every guest; and a cache entry that holds
/// them serves only provisions that ask for them too.
#[test]
fn device_nodes_are_made_only_when_asked() {
    let d = Tmp::new();
    let r = d.path().join("rootfs");
    fs::create_dir_all(r.join("etc")).unwrap();
    fs::write(r.join("etc/hostname"), b"x\n").unwrap();
    let tarball = d.path().join("root.tar");
    let cache = d.path().join("cache");
    if zinstall_testkit::is_root() {
        fs::create_dir_all(r.join("dev")).unwrap();
        run(tools::tool("mknod").args([
            "-m",
            "666",
            s(&r.join("dev/null")),
            "c",
            "1",
            "3",
        ]));
        run(tools::tool("tar").args(["-cf", s(&tarball), "-C", s(&r), "."]));
    } else {
        // Not root, no mknod: the tar crate writes the member.
        let mut b = tar::Builder::new(fs::File::create(&tarball).unwrap());
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Char);
        h.set_mode(0o666);
        h.set_device_major(1).unwrap();
        h.set_device_minor(3).unwrap();
        h.set_size(0);
        h.set_cksum();
        b.append_data(&mut h, "dev/null", &[][..]).unwrap();
        b.finish().unwrap();
    }
    let provision = |out: &str, allow: bool| {
        let out = d.path().join(out);
        let mut a = vec![
            "provision",
            s(&tarball),
            "--out",
            s(&out),
            "--cache",
            s(&cache),
            "--keep-identity",
        ];
        if allow {
            a.push("--allow-devices");
        }
        (zinstall(&a), out)
    };
    let (o, out) = provision("a", false);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains("dev/null") && t.contains("--allow-devices"),
        "{t}"
    );
    assert!(!t.contains("profile"), "{t}");
    assert!(!out.exists());
    if !zinstall_testkit::require_root() {
        return;
    }
    let (o, out) = provision("b", true);
    assert!(o.status.success(), "{}", text(&o));
    let md = fs::symlink_metadata(out.join("guest-0/dev/null")).unwrap();
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    assert!(md.file_type().is_char_device());
    // (1, 3), as the member says: this host's null device.
    assert_eq!(md.rdev(), fs::metadata("/dev/null").unwrap().rdev());
    // The entry holds a device now; without the flag it is not reused.
    let (o, out) = provision("c", false);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains("device nodes") && t.contains("--allow-devices"),
        "{t}"
    );
    assert!(!out.exists());
}

fn qemu_io_in(img: &Path, cmds: &[&str]) {
    let mut c = tools::tool("qemu-io");
    c.args(["-f", "qcow2"]);
    for cmd in cmds {
        c.args(["-c", cmd]);
    }
    run(c.arg(img));
}

/// `qemu-img create -q ARGS` in `dir` (relative backing names).
fn create_in(dir: &Path, args: &[&str]) {
    run(tools::tool("qemu-img")
        .current_dir(dir)
        .arg("create")
        .arg("-q")
        .args(args));
}

/// Provisions one guest of `image` into `out` and returns the JSON
/// report, the guest's disk as raw, and the standard error.
fn provision_one(
    image: &Path,
    cache: &Path,
    out: &Path,
    extra: &[&str],
) -> (serde_json::Value, Vec<u8>, String) {
    let _ = fs::remove_dir_all(out);
    let mut a = vec!["provision", s(image), "--json", "--name", "g"];
    a.extend(["--cache", s(cache), "--out", s(out)]);
    a.extend(extra.iter().copied());
    let o = zinstall(&a);
    let v = json_of(&o);
    let raw = out.with_extension("raw");
    let _ = fs::remove_file(&raw);
    let got = raw_of(&out.join("g-0.qcow2"), &raw);
    (v, got, String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn qcow2_chains_provision_their_flattened_image() {
    let d = Tmp::new();
    let dir = d.path().join("images");
    fs::create_dir(&dir).unwrap();
    let (cache, out) = (d.path().join("cache"), d.path().join("out"));
    create_in(&dir, &["-f", "raw", "base.raw", "64M"]);
    fs::copy(disk(d.path()), dir.join("base.raw")).unwrap();
    create_in(
        &dir,
        &["-f", "qcow2", "-F", "raw", "-b", "base.raw", "mid.qcow2"],
    );
    qemu_io_in(
        &dir.join("mid.qcow2"),
        &["write -P 0x5a 0 64k", "write -z 9M 1M"],
    );
    create_in(
        &dir,
        &[
            "-f",
            "qcow2",
            "-o",
            "lazy_refcounts=on",
            "-F",
            "qcow2",
            "-b",
            "mid.qcow2",
            "top.qcow2",
            "80M",
        ],
    );
    let top = dir.join("top.qcow2");
    qemu_io_in(
        &top,
        &[
            "write -P 0x6b 40M 64k",
            "write -z 0 4k",
            "write -P 0x7c 70M 1M",
        ],
    );
    let want = raw_of(&top, &d.path().join("want.raw"));
    let (v, got, err) = provision_one(&top, &cache, &out, &[]);
    assert!(got == want, "the guest is not the flattened chain: {err}");
    assert_eq!(v["obtained"], "built");
    let first = v["entry"].as_str().unwrap().to_string();
    // The same chain again: the entry is found (and a dry run says so).
    let dry = |want: &str| {
        let a = [
            "provision",
            s(&top),
            "--json",
            "--dry-run",
            "--cache",
            s(&cache),
            "--out",
            s(&out),
        ];
        let v = json_of(&zinstall(&a));
        assert_eq!(v["cache"], want, "{v}");
    };
    dry("reuse");
    let (v, _, _) = provision_one(&top, &cache, &out, &[]);
    assert_eq!(v["obtained"], "reused");
    assert_eq!(v["entry"], first.as_str());
    // A write into the chain's middle image: another entry, of the new
    // content, though the top file is unchanged.
    let before = fs::metadata(&top).unwrap();
    qemu_io_in(&dir.join("mid.qcow2"), &["write -P 0x3c 20M 64k"]);
    dry("build");
    let want = raw_of(&top, &d.path().join("want2.raw"));
    assert!(fs::metadata(&top).unwrap().len() == before.len());
    let (v, got, _) = provision_one(&top, &cache, &out, &[]);
    assert_eq!(v["obtained"], "built");
    assert_ne!(
        v["entry"],
        first.as_str(),
        "the cache key ignores the chain"
    );
    assert!(got == want, "the guest has the old chain's content");
    // Dirty lazy refcounts: read as they are, with a notice naming the
    // image; the image is not changed.
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&top)
        .unwrap();
    let mut b = [0u8; 1];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, 79).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[b[0] | 1], 79).unwrap();
    drop(f);
    let image_bytes = fs::read(&top).unwrap();
    let (v, got, _) = provision_one(&top, &cache, &out, &[]);
    assert!(got == want);
    let notices = v["notices"].to_string();
    assert!(
        notices.contains("dirty") && notices.contains(s(&top)),
        "{v}"
    );
    assert!(
        fs::read(&top).unwrap() == image_bytes,
        "the image was changed"
    );
    // Told on the terminal too, when the entry is built.
    let cache2 = d.path().join("cache2");
    let mut a = vec!["provision", s(&top), "--name", "h"];
    a.extend(["--cache", s(&cache2), "--out", s(&out)]);
    let o = zinstall(&a);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("note: ") && text(&o).contains("dirty"),
        "{}",
        text(&o)
    );
    // An absolute backing name: refused, unless beneath --backing-dir.
    create_in(
        &dir,
        &[
            "-f",
            "qcow2",
            "-F",
            "raw",
            "-b",
            s(&dir.join("base.raw")),
            "abs.qcow2",
        ],
    );
    let abs = dir.join("abs.qcow2");
    let a = ["provision", s(&abs), "--cache", s(&cache), "--out", s(&out)];
    let o = zinstall(&a);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(s(&abs)) && text(&o).contains("absolute name"),
        "{}",
        text(&o)
    );
    let want = raw_of(&abs, &d.path().join("want3.raw"));
    let (_, got, _) =
        provision_one(&abs, &cache, &out, &["--backing-dir", s(&dir)]);
    assert!(got == want);
}

#[test]
fn qcow2_images_the_reader_lacks_a_feature_for_go_to_qemu_img_when_asked() {
    let d = Tmp::new();
    let (cache, out) = (d.path().join("cache"), d.path().join("out"));
    let img = d.path().join("future.qcow2");
    create_in(d.path(), &["-f", "qcow2", "future.qcow2", "8M"]);
    qemu_io_in(&img, &["write -P 0x5a 0 64k"]);
    // Incompatible feature bit 20, which no reader knows yet.
    let f = fs::OpenOptions::new().write(true).open(&img).unwrap();
    std::os::unix::fs::FileExt::write_all_at(
        &f,
        &(1u64 << 20).to_be_bytes(),
        72,
    )
    .unwrap();
    drop(f);
    let base = ["provision", s(&img), "--cache", s(&cache), "--out", s(&out)];
    let o = zinstall(&base);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("unknown incompatible features")
            && text(&o).contains("pass --qemu-img"),
        "{}",
        text(&o)
    );
    // Asked, qemu-img is run on it (and refuses it too, in its words).
    let mut a = base.to_vec();
    a.push("--qemu-img");
    let o = zinstall(&a);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("qemu-img") && text(&o).contains("nsupported"),
        "{}",
        text(&o)
    );
    // A LUKS image: refused saying how to decrypt it, with or without
    // --qemu-img.
    let o = tools::qemu_img_luks(
        d.path(),
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "--object",
            "secret,id=sec0,data=abc",
            "-o",
            "encrypt.format=luks,encrypt.key-secret=sec0,encrypt.iter-time=10",
            "luks.qcow2",
            "1M",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let luks = d.path().join("luks.qcow2");
    let opts = format!(
        "driver=qcow2,file.filename={},encrypt.key-secret=sec0",
        s(&luks)
    );
    run(tools::tool("qemu-io").args([
        "--object",
        "secret,id=sec0,data=abc",
        "--image-opts",
        &opts,
        "-c",
        "write -P 0x5a 64k 128k",
    ]));
    for extra in [&[][..], &["--qemu-img"][..]] {
        let mut a = vec![
            "provision",
            s(&luks),
            "--cache",
            s(&cache),
            "--out",
            s(&out),
        ];
        a.extend_from_slice(extra);
        let o = zinstall(&a);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let t = text(&o);
        assert!(
            t.contains("LUKS") && t.contains("encrypt.key-secret=sec0"),
            "{t}"
        );
        assert!(t.contains("--secret-file"), "{t}");
    }
    // With its key in a file: decrypted by qemu-img, fenced.
    let key = d.path().join("key");
    fs::write(&key, b"abc").unwrap();
    let want = d.path().join("want.raw");
    run(tools::tool("qemu-img").args([
        "convert",
        "--object",
        "secret,id=sec0,data=abc",
        "--image-opts",
        &opts,
        "-O",
        "raw",
        s(&want),
    ]));
    let want = fs::read(&want).unwrap();
    assert!(want[64 << 10..192 << 10].iter().all(|&b| b == 0x5a));
    let (v, got, _) =
        provision_one(&luks, &cache, &out, &["--secret-file", s(&key)]);
    assert!(got == want, "the guest is not the decrypted image");
    assert!(v["notices"].to_string().contains("converted by"), "{v}");
    // A wrong key: qemu-img's refusal, though the image's base is in
    // the cache.
    let wrong = d.path().join("wrong");
    fs::write(&wrong, b"abd").unwrap();
    let a = [
        "provision",
        s(&luks),
        "--cache",
        s(&cache),
        "--out",
        s(&out),
        "--secret-file",
        s(&wrong),
    ];
    let o = zinstall(&a);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("qemu-img"), "{}", text(&o));
}
