//! `zinstall provision`'s customisation of directory guests, as
//! virt-customize(1) does it: keys, passwords checked with the system's
//! crypt(3), first-boot units checked by systemd-analyze, files, time
//! zones; bad input refused before any guest, the cache never written.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use zinstall_testkit::run::{s, text};
use zinstall_testkit::tmp::Tmp;
use zinstall_testkit::tools;

fn zinstall(args: &[&str]) -> Output {
    zinstall_testkit::run::output(env!("CARGO_BIN_EXE_zinstall"), args)
}

fn run(cmd: &mut Command) -> Output {
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{cmd:?}: {}", text(&o));
    o
}

/// A small Debian-like root as a tar made by GNU tar: root and `debian`
/// (uid 1000, home /home/debian), their shadow lines, login.defs naming
/// `method`, and Europe/Berlin copied from this host's zoneinfo.
pub(crate) fn image(dir: &Path, method: &str) -> PathBuf {
    let r = dir.join(format!("root-{method}"));
    for d in ["etc", "root", "home/debian", "usr/share/zoneinfo/Europe"] {
        fs::create_dir_all(r.join(d)).unwrap();
    }
    fs::write(
        r.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/bash\n\
         debian:x:1000:1000:Debian:/home/debian:/bin/bash\n",
    )
    .unwrap();
    fs::write(
        r.join("etc/shadow"),
        "root:*:19000:0:99999:7:::\ndebian:!:19000:0:99999:7:::\n",
    )
    .unwrap();
    fs::set_permissions(
        r.join("etc/shadow"),
        fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    fs::write(
        r.join("etc/login.defs"),
        format!("# as Debian ships it\nENCRYPT_METHOD {method}\n"),
    )
    .unwrap();
    fs::write(r.join("etc/debian_version"), "12.8\n").unwrap();
    let tz = Path::new("/usr/share/zoneinfo/Europe/Berlin");
    assert!(
        tz.exists(),
        "tzdata is not installed: apt-get install tzdata"
    );
    fs::copy(tz, r.join("usr/share/zoneinfo/Europe/Berlin")).unwrap();
    let tar = dir.join(format!("root-{method}.tar"));
    // Owners as numbers, so debian's home is 1000 whatever this host
    // calls it.
    run(Command::new("tar")
        .arg("-C")
        .arg(&r)
        .args(["--numeric-owner", "--owner=0", "--group=0", "-cf", s(&tar)])
        .args(["./etc", "./root", "./usr"]));
    run(Command::new("tar")
        .arg("-C")
        .arg(&r)
        .args(["--numeric-owner", "--owner=1000", "--group=1000", "-rf"])
        .args([s(&tar), "./home"]));
    tar
}

/// A real ed25519 public key, made by ssh-keygen.
pub(crate) fn key(dir: &Path, name: &str) -> (PathBuf, String) {
    let k = dir.join(name);
    run(tools::tool("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&k));
    let public = k.with_extension("pub");
    let line = fs::read_to_string(&public).unwrap().trim().to_string();
    (public, line)
}

/// A password file of the caller's alone.
pub(crate) fn password_file(
    dir: &Path,
    name: &str,
    content: &str,
    mode: u32,
) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, content).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    p
}

/// The shadow line of `user` in the guest, split into its fields.
pub(crate) fn shadow(guest: &Path, user: &str) -> Vec<String> {
    let t = fs::read_to_string(guest.join("etc/shadow")).unwrap();
    t.lines()
        .find(|l| l.starts_with(&format!("{user}:")))
        .unwrap_or_else(|| panic!("{user} in {t}"))
        .split(':')
        .map(String::from)
        .collect()
}

/// Whether this system's crypt(3) (through Python's crypt module, which
/// calls libcrypt) takes `password` for `hash`.
pub(crate) fn crypt_verifies(password: &str, hash: &str) -> bool {
    let o = run(tools::tool("python3")
        .args(["-W", "ignore", "-c"])
        .arg(
            "import crypt,sys; \
             print(crypt.crypt(sys.argv[1], sys.argv[2]) == sys.argv[2])",
        )
        .args([password, hash]));
    String::from_utf8_lossy(&o.stdout).trim() == "True"
}

fn days_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 86_400
}

pub(crate) fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Every file under `dir` with its bytes or link target, for comparing
/// trees (a cache entry before and after).
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>, u32)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let md = fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(dir).unwrap().to_path_buf();
            if md.is_dir() {
                todo.push(p);
                out.push((rel, Vec::new(), md.mode()));
            } else if md.file_type().is_symlink() {
                let t = fs::read_link(&p).unwrap();
                out.push((rel, t.into_os_string().into_encoded_bytes(), 0));
            } else {
                out.push((rel, fs::read(&p).unwrap(), md.mode()));
            }
        }
    }
    out.sort();
    out
}

/// The cache entry's tree, as `provision --json` names it.
fn payload(o: &Output) -> PathBuf {
    let v: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim())
            .unwrap_or_else(|e| panic!("{e}: {}", text(o)));
    PathBuf::from(v["result"]["payload"].as_str().unwrap_or_else(|| {
        v["payload"].as_str().unwrap_or_else(|| panic!("{v}"))
    }))
}

#[test]
fn guests_get_keys_passwords_files_and_time_zone() {
    let d = Tmp::new();
    let tar = image(d.path(), "SHA512");
    let (k1, line1) = key(d.path(), "alice");
    let (_, line2) = key(d.path(), "bob");
    let pw =
        password_file(d.path(), "root.pw", "Root pass 1\nignored\n", 0o600);
    let local = d.path().join("payload");
    fs::create_dir_all(local.join("sub")).unwrap();
    fs::write(local.join("sub/data"), b"tree data").unwrap();
    fs::write(d.path().join("one.conf"), b"one file").unwrap();
    fs::set_permissions(
        d.path().join("one.conf"),
        fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    let (cache, out) = (d.path().join("cache"), d.path().join("out"));
    let o = zinstall(&[
        "provision",
        s(&tar),
        "--count",
        "2",
        "--cache",
        s(&cache),
        "--out",
        s(&out),
        "--ssh-host-keys",
        "keep",
        "--root-password",
        &format!("file:{}", s(&pw)),
        "--password",
        "debian:random",
        "--ssh-inject",
        &format!("debian:file:{}", s(&k1)),
        // The same key again, and a second: appended once each.
        "--ssh-inject",
        &format!("debian:string:{line1}"),
        "--ssh-inject",
        &format!("debian:string:{line2}"),
        "--write",
        "/etc/motd:guest {n} of {name}",
        "--copy-in",
        &format!("{}:/opt/app", s(&local)),
        "--copy-in",
        &format!("{}:/etc/app", s(&d.path().join("one.conf"))),
        "--timezone",
        "Europe/Berlin",
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    for n in 0..2 {
        let g = out.join(format!("guest-{n}"));
        // Root's password, from the file's first line, as crypt(3) checks
        // it; every other shadow field kept, lastchg today.
        let root = shadow(&g, "root");
        assert!(root[1].starts_with("$6$"), "{root:?}");
        assert!(crypt_verifies("Root pass 1", &root[1]), "{root:?}");
        assert!(!crypt_verifies("ignored", &root[1]));
        assert_eq!(root[2], days_now().to_string());
        assert_eq!(root[3..], ["0", "99999", "7", "", "", ""]);
        assert_eq!(mode(&g.join("etc/shadow")), 0o640);
        // debian's random password, printed once, naming the guest.
        let said = t
            .lines()
            .find(|l| {
                l.starts_with("password of debian on ")
                    && l.contains(&format!("guest-{n}:"))
            })
            .unwrap_or_else(|| panic!("no password for guest-{n}: {t}"));
        let random = said.rsplit(' ').next().unwrap();
        assert_eq!(random.len(), 16, "{said}");
        let debian = shadow(&g, "debian");
        assert!(crypt_verifies(random, &debian[1]), "{said} {debian:?}");

        let ssh = g.join("home/debian/.ssh");
        let keys = fs::read_to_string(ssh.join("authorized_keys")).unwrap();
        assert_eq!(keys, format!("{line1}\n{line2}\n"));
        assert_eq!(mode(&ssh), 0o700);
        assert_eq!(mode(&ssh.join("authorized_keys")), 0o600);
        if zinstall_testkit::require_root() {
            for p in [&ssh, &ssh.join("authorized_keys")] {
                let md = fs::metadata(p).unwrap();
                assert_eq!((md.uid(), md.gid()), (1000, 1000), "{p:?}");
            }
        }

        assert_eq!(
            fs::read_to_string(g.join("etc/motd")).unwrap(),
            format!("guest {n} of guest-{n}")
        );
        assert_eq!(
            fs::read(g.join("opt/app/payload/sub/data")).unwrap(),
            b"tree data"
        );
        assert_eq!(fs::read(g.join("etc/app/one.conf")).unwrap(), b"one file");
        assert_eq!(mode(&g.join("etc/app/one.conf")), 0o640);
        assert_eq!(
            fs::read_link(g.join("etc/localtime")).unwrap(),
            Path::new("../usr/share/zoneinfo/Europe/Berlin")
        );
        assert_eq!(
            fs::read_to_string(g.join("etc/timezone")).unwrap(),
            "Europe/Berlin\n"
        );
    }
    // Each guest's own random password, each told once.
    assert_eq!(t.matches("password of debian on ").count(), 2, "{t}");
    assert_ne!(
        shadow(&out.join("guest-0"), "debian")[1],
        shadow(&out.join("guest-1"), "debian")[1]
    );
}

#[test]
fn yescrypt_guests_get_yescrypt_hashes() {
    let d = Tmp::new();
    let tar = image(d.path(), "YESCRYPT");
    let out = d.path().join("out");
    let o = zinstall(&[
        "provision",
        s(&tar),
        "--cache",
        s(&d.path().join("cache")),
        "--out",
        s(&out),
        "--ssh-host-keys",
        "keep",
        "--root-password",
        "password:correct horse",
        "--password",
        "debian:locked:disabled",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let g = out.join("guest-0");
    let root = shadow(&g, "root");
    assert!(root[1].starts_with("$y$"), "{root:?}");
    assert!(crypt_verifies("correct horse", &root[1]));
    assert!(!crypt_verifies("correct horsE", &root[1]));
    assert_eq!(shadow(&g, "debian")[1], "!*");
}

/// The systemd-analyze verdict on the guest's unit, with the guest as
/// the root its paths are found in.
fn verify_unit(guest: &Path) -> Output {
    tools::tool("systemd-analyze")
        .current_dir(guest)
        .args(["verify", "--man=no", "--recursive-errors=no"])
        .arg(format!("--root={}", s(guest)))
        .arg("etc/systemd/system/zinstall-firstboot.service")
        .output()
        .unwrap()
}

#[test]
fn firstboot_scripts_get_a_one_shot_unit_systemd_accepts() {
    let d = Tmp::new();
    let tar = image(d.path(), "SHA512");
    let script = d.path().join("setup web.sh");
    fs::write(&script, "#!/bin/sh\necho set up\n").unwrap();
    let out = d.path().join("out");
    let o = zinstall(&[
        "provision",
        s(&tar),
        "--count",
        "2",
        "--cache",
        s(&d.path().join("cache")),
        "--out",
        s(&out),
        "--ssh-host-keys",
        "keep",
        "--firstboot",
        s(&script),
        "--firstboot-command",
        "echo guest {n} > /var/tmp/first",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    for n in 0..2 {
        let g = out.join(format!("guest-{n}"));
        let lib = g.join("usr/lib/zinstall-firstboot");
        let scripts: Vec<String> = fs::read_dir(lib.join("scripts"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(scripts, ["0001-setup_web.sh", "0002-command"]);
        assert_eq!(
            fs::read_to_string(lib.join("scripts/0002-command")).unwrap(),
            format!("#!/bin/sh\necho guest {n} > /var/tmp/first\n")
        );
        assert_eq!(mode(&lib.join("scripts/0001-setup_web.sh")), 0o755);
        assert_eq!(mode(&lib.join("firstboot.sh")), 0o755);
        let unit = g.join("etc/systemd/system/zinstall-firstboot.service");
        let text_unit = fs::read_to_string(&unit).unwrap();
        assert!(
            text_unit.contains(
                "ConditionPathExists=!/var/lib/zinstall-firstboot/ran"
            ),
            "{text_unit}"
        );
        assert_eq!(
            fs::read_link(g.join(
                "etc/systemd/system/multi-user.target.wants/\
                     zinstall-firstboot.service"
            ))
            .unwrap(),
            Path::new("/etc/systemd/system/zinstall-firstboot.service")
        );
        let v = verify_unit(&g);
        assert!(v.status.success(), "systemd-analyze verify: {}", text(&v));
    }
    // The verdict means something: a runner that cannot run is refused.
    let g = out.join("guest-0");
    let runner = g.join("usr/lib/zinstall-firstboot/firstboot.sh");
    fs::set_permissions(&runner, fs::Permissions::from_mode(0o644)).unwrap();
    assert!(!verify_unit(&g).status.success());

    // The runner, run against a copy of the guest (its paths moved
    // there): each script once, in order, then the marker; a second run
    // runs nothing.
    let sandbox = d.path().join("sandbox");
    fs::create_dir_all(&sandbox).unwrap();
    let g1 = out.join("guest-1");
    let body =
        fs::read_to_string(g1.join("usr/lib/zinstall-firstboot/firstboot.sh"))
            .unwrap()
            .replace("/usr/lib/", &format!("{}/usr/lib/", s(&g1)))
            .replace("/var/lib/", &format!("{}/var/lib/", s(&sandbox)))
            .replace("/etc/systemd/", &format!("{}/etc/systemd/", s(&g1)))
            .replace("/run/systemd/system", s(&sandbox));
    let script1 = g1.join("usr/lib/zinstall-firstboot/scripts/0002-command");
    fs::write(
        &script1,
        format!("#!/bin/sh\necho ran >> {}/log\n", s(&sandbox)),
    )
    .unwrap();
    let runner1 = sandbox.join("runner.sh");
    fs::write(&runner1, body).unwrap();
    run(Command::new("sh").arg(&runner1));
    run(Command::new("sh").arg(&runner1));
    assert_eq!(fs::read_to_string(sandbox.join("log")).unwrap(), "ran\n");
    assert!(sandbox.join("var/lib/zinstall-firstboot/ran").exists());
    assert!(
        !g1.join("etc/systemd/system/multi-user.target.wants/zinstall-firstboot.service")
            .exists()
    );
}

#[test]
fn illumos_zones_get_an_smf_manifest() {
    let d = Tmp::new();
    let r = d.path().join("zone");
    for p in ["etc", "lib/svc/method", "usr/lib"] {
        fs::create_dir_all(r.join(p)).unwrap();
    }
    fs::write(r.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    let tar = d.path().join("zone.tar");
    run(Command::new("tar")
        .arg("-C")
        .arg(&r)
        .args(["-cf", s(&tar), "."]));
    let out = d.path().join("out");
    let o = zinstall(&[
        "provision",
        s(&tar),
        "--cache",
        s(&d.path().join("cache")),
        "--out",
        s(&out),
        "--ssh-host-keys",
        "keep",
        "--firstboot-command",
        "touch /var/tmp/first",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let g = out.join("guest-0");
    let manifest = g.join("var/svc/manifest/site/zinstall-firstboot.xml");
    let xml = fs::read_to_string(&manifest).unwrap();
    assert!(xml.contains("site/zinstall-firstboot"), "{xml}");
    assert!(xml.contains("/usr/lib/zinstall-firstboot/firstboot.sh"));
    run(tools::tool("xmllint").arg("--noout").arg(&manifest));
    assert!(!g.join("etc/systemd").exists());
    assert!(
        g.join("usr/lib/zinstall-firstboot/scripts/0001-command")
            .exists()
    );
}

#[test]
fn a_customize_file_is_the_same_as_the_flags() {
    let d = Tmp::new();
    let tar = image(d.path(), "SHA512");
    let (k, line) = key(d.path(), "carol");
    let file = d.path().join("fleet.customize");
    fs::write(
        &file,
        format!(
            "# the fleet's customisation\n\
             \n\
             ssh-inject debian:file:{}\n\
             write /etc/motd:guest {{n}}\n\
             timezone:Europe/Berlin\n\
             firstboot-command echo hello\n\
             root-password disabled\n",
            s(&k)
        ),
    )
    .unwrap();
    let cache = d.path().join("cache");
    let provision = |out: &Path, extra: &[&str]| {
        let mut a =
            vec!["provision", s(&tar), "--count", "2", "--cache", s(&cache)];
        a.extend(["--out", s(out), "--ssh-host-keys", "keep"]);
        a.extend(["--machine-id", "keep", "--hostname", "same"]);
        a.extend(extra.iter().copied());
        let o = zinstall(&a);
        assert!(o.status.success(), "{}", text(&o));
    };
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    provision(&a, &["--customize", s(&file)]);
    let inject = format!("debian:file:{}", s(&k));
    provision(
        &b,
        &[
            "--ssh-inject",
            &inject,
            "--write",
            "/etc/motd:guest {n}",
            "--timezone",
            "Europe/Berlin",
            "--firstboot-command",
            "echo hello",
            "--root-password",
            "disabled",
        ],
    );
    for n in 0..2 {
        let (ga, gb) =
            (a.join(format!("guest-{n}")), b.join(format!("guest-{n}")));
        let mut sa = snapshot(&ga);
        let mut sb = snapshot(&gb);
        // lastchg is today in both; the trees are otherwise the same.
        sa.retain(|(p, ..)| p != Path::new("etc/shadow"));
        sb.retain(|(p, ..)| p != Path::new("etc/shadow"));
        assert_eq!(sa, sb, "guest-{n}");
        assert_eq!(shadow(&ga, "root")[1], "*");
        assert_eq!(shadow(&gb, "root")[1], "*");
        assert_eq!(
            fs::read_to_string(ga.join("home/debian/.ssh/authorized_keys"))
                .unwrap(),
            format!("{line}\n")
        );
        assert_eq!(
            fs::read_to_string(ga.join("etc/motd")).unwrap(),
            format!("guest {n}")
        );
    }
    // A line it does not take is refused, naming the file and the line.
    fs::write(&file, "# x\ninstall vim\n").unwrap();
    let o = zinstall(&[
        "provision",
        s(&tar),
        "--cache",
        s(&cache),
        "--out",
        s(&d.path().join("c")),
        "--customize",
        s(&file),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("line 2"), "{}", text(&o));
    assert!(!d.path().join("c").exists());
}

#[test]
fn a_symlink_the_image_planted_for_ssh_is_not_followed() {
    let d = Tmp::new();
    image(d.path(), "SHA512");
    let outside = d.path().join("outside");
    fs::create_dir(&outside).unwrap();
    // The image's ~debian/.ssh is a link out of the guest.
    let r = d.path().join("root-SHA512");
    std::os::unix::fs::symlink(&outside, r.join("home/debian/.ssh")).unwrap();
    let planted = d.path().join("planted.tar");
    run(Command::new("tar")
        .arg("-C")
        .arg(&r)
        .args(["-cf", s(&planted), "."]));
    let (_, line) = key(d.path(), "dave");
    let out = d.path().join("out");
    let o = zinstall(&[
        "provision",
        s(&planted),
        "--count",
        "2",
        "--cache",
        s(&d.path().join("cache")),
        "--out",
        s(&out),
        "--ssh-host-keys",
        "keep",
        "--ssh-inject",
        &format!("debian:string:{line}"),
    ]);
    let t = text(&o);
    // Refused, naming the link; nothing written where it leads; the
    // guest removed.
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains("home/debian/.ssh") && t.contains("symlink"),
        "{t}"
    );
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0, "{t}");
    assert!(!out.join("guest-0").exists(), "{t}");
}

#[test]
fn bad_customisation_is_refused_before_any_guest() {
    let d = Tmp::new();
    let tar = image(d.path(), "SHA512");
    let cache = d.path().join("cache");
    // The entry made once, with --json to learn where it is.
    let o = zinstall(&[
        "provision",
        s(&tar),
        "--cache",
        s(&cache),
        "--out",
        s(&d.path().join("first")),
        "--ssh-host-keys",
        "keep",
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let entry = payload(&o);
    let before = snapshot(&entry);
    let empty = password_file(d.path(), "empty.pw", "", 0o600);
    let open = password_file(d.path(), "open.pw", "secret\n", 0o644);
    let (k, _) = key(d.path(), "erin");
    let not_key = d.path().join("not.pub");
    fs::write(&not_key, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 cut short\n")
        .unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "--ssh-inject".into(),
                "debian:string:ssh-rsa notakey".into(),
            ],
            "ssh-rsa",
        ),
        (
            vec![
                "--ssh-inject".into(),
                format!("debian:file:{}", s(&not_key)),
            ],
            "not.pub",
        ),
        (
            vec!["--root-password".into(), format!("file:{}", s(&empty))],
            "empty",
        ),
        (
            vec!["--password".into(), format!("debian:file:{}", s(&open))],
            "0644",
        ),
        (
            vec!["--ssh-inject".into(), format!("mallory:file:{}", s(&k))],
            "mallory",
        ),
        (vec!["--password".into(), "nobody:random".into()], "nobody"),
        (
            vec!["--firstboot".into(), s(&d.path().join("missing.sh")).into()],
            "missing.sh",
        ),
        (
            vec!["--timezone".into(), "Mars/Olympus".into()],
            "Mars/Olympus",
        ),
        (
            vec!["--timezone".into(), "../../etc/passwd".into()],
            "time zone",
        ),
        (
            vec!["--write".into(), "etc/motd:relative".into()],
            "absolute",
        ),
        (
            vec![
                "--copy-in".into(),
                format!("{}:/opt", s(&d.path().join("nope"))),
            ],
            "nope",
        ),
    ];
    for (args, says) in &cases {
        let out = d.path().join("out");
        let mut a =
            vec!["provision", s(&tar), "--count", "2", "--cache", s(&cache)];
        a.extend(["--out", s(&out), "--ssh-host-keys", "keep"]);
        a.extend(args.iter().map(String::as_str));
        let o = zinstall(&a);
        let t = text(&o);
        assert!(!o.status.success(), "{args:?} passed: {t}");
        assert!(t.contains(says), "{args:?}: {t}");
        assert!(!out.exists(), "{args:?} left {out:?}: {t}");
        assert_eq!(snapshot(&entry), before, "{args:?} wrote the cache entry");
    }
    // A random password is told once in JSON too, with its user.
    let o = zinstall(&[
        "provision",
        s(&tar),
        "--cache",
        s(&cache),
        "--out",
        s(&d.path().join("json")),
        "--root-password",
        "random",
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let pw = &v["result"]["guests"][0]["passwords"][0];
    assert_eq!(pw["user"], "root", "{v}");
    assert_eq!(pw["password"].as_str().map(str::len), Some(16), "{v}");
    // Disk images have no directory to customise: refused, not ignored.
    let raw = d.path().join("disk.raw");
    fs::write(&raw, vec![0u8; 1 << 20]).unwrap();
    let o = zinstall(&[
        "provision",
        s(&raw),
        "--cache",
        s(&cache),
        "--out",
        s(&d.path().join("disk")),
        "--timezone",
        "UTC",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("directory guests"), "{}", text(&o));
    assert!(!d.path().join("disk").exists());
}
