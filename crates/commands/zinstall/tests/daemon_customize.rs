//! Customisation and NoCloud seeds through zinstalld: a real daemon on
//! a real socket makes the guests a local provision makes, from the
//! contents the client read and sent (never a path of the client's), and
//! refuses what is too big without dying.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use zinstall_testkit::run::{s, text};

use crate::customize::{
    crypt_verifies, image, key, mode, password_file, shadow,
};
use crate::daemon::Daemon;
use crate::provision_seed::{disk, seed_file};

/// What a file is, for comparing two guests: its kind and bytes (or a
/// link's target), mode, owner and group.
type Entry = (String, Vec<u8>, u32, u32, u32);

/// Every entry under `root` but the guest's own identity (hostname,
/// hosts, machine-id, SSH host keys) and its shadow (salts differ).
fn entries(root: &Path) -> BTreeMap<PathBuf, Entry> {
    let own = ["etc/hostname", "etc/hosts", "etc/machine-id", "etc/shadow"];
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            if own.iter().any(|o| rel == Path::new(o))
                || rel.starts_with("etc/ssh")
            {
                continue;
            }
            let md = fs::symlink_metadata(&p).unwrap();
            let (kind, bytes) = if md.is_dir() {
                todo.push(p.clone());
                ("dir", Vec::new())
            } else if md.is_symlink() {
                let t = fs::read_link(&p).unwrap();
                ("link", t.into_os_string().into_encoded_bytes())
            } else {
                ("file", fs::read(&p).unwrap())
            };
            let id = (kind.to_string(), bytes, md.mode(), md.uid(), md.gid());
            out.insert(rel, id);
        }
    }
    out
}

/// The customisation flags the tests give, naming files in `dir`: keys
/// for root and debian from a file only root may read, root's password
/// from a file, a file written, a first-boot script and a file copied in.
fn options(dir: &Path) -> (Vec<String>, Vec<PathBuf>, String) {
    fs::create_dir_all(dir).unwrap();
    let (k, line) = key(dir, "fleet");
    fs::set_permissions(&k, fs::Permissions::from_mode(0o600)).unwrap();
    let pw = password_file(dir, "root.pw", "s3cret-Pw\n", 0o600);
    let script = dir.join("hello.sh");
    fs::write(&script, "#!/bin/sh\necho hello > /hello\n").unwrap();
    let copied = dir.join("motd.extra");
    fs::write(&copied, "copied in\n").unwrap();
    fs::set_permissions(&copied, fs::Permissions::from_mode(0o640)).unwrap();
    let flags = vec![
        "--ssh-inject".into(),
        format!("root:file:{}", s(&k)),
        "--ssh-inject".into(),
        format!("debian:file:{}", s(&k)),
        "--root-password".into(),
        format!("file:{}", s(&pw)),
        "--write".into(),
        "/etc/motd:through the daemon".into(),
        "--firstboot".into(),
        s(&script).into(),
        "--copy-in".into(),
        format!("{}:/opt/extra", s(&copied)),
    ];
    (flags, vec![k, pw, script, copied], line)
}

/// A directory guest made through the daemon with --ssh-inject,
/// --root-password file:, --write, --firstboot and --copy-in has the
/// files, modes and owners a local provision gives it; root's hash
/// verifies the password with crypt(3).
#[test]
fn a_directory_guest_through_the_daemon_equals_a_local_one() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Daemon::start("");
    let tar = image(&d.path("img"), "SHA512");
    let (flags, _, line) = options(&d.path("client"));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let local = d.path("local");
    let mut a = vec!["provision", s(&tar), "--out", s(&local)];
    let lcache = d.path("local-cache");
    a.extend_from_slice(&["--cache", s(&lcache)]);
    a.extend_from_slice(&flags);
    let o = zinstall_testkit::run::output(env!("CARGO_BIN_EXE_zinstall"), &a);
    assert!(o.status.success(), "local: {}", text(&o));
    let served = d.path("served");
    let mut a = vec!["provision", s(&tar), "--out", s(&served)];
    a.extend_from_slice(&flags);
    let o = d.zinstall(&a);
    assert!(o.status.success(), "daemon: {}", text(&o));

    let (l, g) = (local.join("guest-0"), served.join("guest-0"));
    let keys = g.join("root/.ssh/authorized_keys");
    assert_eq!(fs::read_to_string(&keys).unwrap(), format!("{line}\n"));
    assert_eq!(mode(&keys), 0o600);
    let debian = g.join("home/debian/.ssh/authorized_keys");
    assert_eq!(fs::metadata(&debian).unwrap().uid(), 1000);
    assert_eq!(mode(&g.join("opt/extra/motd.extra")), 0o640);
    let (want, got) = (entries(&l), entries(&g));
    assert!(want.len() > 20, "{:?}", want.keys());
    for (p, e) in &want {
        assert_eq!(got.get(p), Some(e), "{p:?} differs");
    }
    assert_eq!(want.len(), got.len(), "{:?}", got.keys());
    for guest in [&l, &g] {
        let root = shadow(guest, "root");
        assert!(crypt_verifies("s3cret-Pw", &root[1]), "{root:?}");
    }
}

/// What the client sends is contents, not paths: a fake daemon's socket
/// reads the request line, which holds the key and the password but no
/// path of the files they came from.
#[test]
fn the_request_carries_contents_and_no_path_of_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("fake.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    // A client that sends nothing leaves the line empty, not the test
    // waiting.
    let server = std::thread::spawn(move || {
        let t0 = std::time::Instant::now();
        let c = loop {
            match listener.accept() {
                Ok((c, _)) => break c,
                Err(_) if t0.elapsed().as_secs() < 20 => {
                    std::thread::sleep(std::time::Duration::from_millis(20))
                }
                Err(_) => return String::new(),
            }
        };
        c.set_nonblocking(false).unwrap();
        let mut line = String::new();
        BufReader::new(&c).read_line(&mut line).unwrap();
        line
    });
    let (flags, files, key_line) = options(&dir.path().join("client"));
    let o = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .arg(format!("--daemon={}", socket.display()))
        .args(["provision", "/srv/image.tar", "--out", "/srv/guests"])
        .args(&flags)
        .env_remove("ZINSTALL_DAEMON")
        .output()
        .unwrap();
    let line = server.join().unwrap();
    assert!(!o.status.success(), "the fake daemon said nothing");
    let request: Value = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("no request ({e}): {}", text(&o)));
    let c = &request["args"]["customize"]["guests"][0];
    assert_eq!(c["keys"][0]["keys"][0], json!(key_line), "{line}");
    assert_eq!(c["passwords"][0]["secret"]["given"], json!("s3cret-Pw"));
    assert_eq!(c["firstboot"][0]["name"], json!("hello.sh"));
    assert_eq!(c["copy_in"][0]["mode"], json!(0o640));
    assert_eq!(
        request["args"]["seed"]["keys"][0]["keys"][0],
        json!(key_line)
    );
    for f in &files {
        let name = f.file_name().unwrap().to_str().unwrap();
        assert!(!line.contains(s(f)), "{f:?} is in {line}");
        if name != "hello.sh" && name != "motd.extra" {
            assert!(!line.contains(name), "{name} is in {line}");
        }
    }
}

/// A disk guest made through the daemon gets its seed, with the
/// user-data and network-config a local provision writes; the output
/// names the seed's -drive.
#[test]
fn a_disk_guest_through_the_daemon_gets_the_local_seed() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Daemon::start("");
    fs::create_dir_all(d.path("img")).unwrap();
    let img = disk(&d.path("img"));
    let (k, line) = key(&d.path("img"), "seeded");
    fs::set_permissions(&k, fs::Permissions::from_mode(0o600)).unwrap();
    let net = d.path("net.yaml");
    fs::write(&net, "version: 2\nethernets:\n  eth0:\n    dhcp4: true\n")
        .unwrap();
    let inject = format!("root:file:{}", s(&k));
    let flags = [
        "--name",
        "vm",
        "--hostname",
        "web{n}",
        "--ssh-inject",
        &inject,
        "--write",
        "/etc/motd:seeded",
        "--network-config",
        s(&net),
    ];
    let local = d.path("local");
    let mut a = vec!["provision", s(&img), "--out", s(&local)];
    let lcache = d.path("local-cache");
    a.extend_from_slice(&["--cache", s(&lcache)]);
    a.extend_from_slice(&flags);
    let o = zinstall_testkit::run::output(env!("CARGO_BIN_EXE_zinstall"), &a);
    assert!(o.status.success(), "local: {}", text(&o));
    let served = d.path("served");
    let mut a = vec!["provision", s(&img), "--out", s(&served)];
    a.extend_from_slice(&flags);
    let o = d.zinstall(&a);
    assert!(o.status.success(), "daemon: {}", text(&o));
    let seed = served.join("vm-0.seed.img");
    let drive = format!("-drive file={},if=virtio,format=raw", s(&seed));
    assert!(text(&o).contains(&drive), "{}", text(&o));
    let user_data = seed_file(&seed, "user-data");
    assert!(user_data.contains(&line), "{user_data}");
    let local_seed = local.join("vm-0.seed.img");
    for f in ["user-data", "network-config"] {
        assert_eq!(seed_file(&seed, f), seed_file(&local_seed, f), "{f}");
    }
    assert!(seed_file(&seed, "meta-data").contains("local-hostname: web0"));
}

/// `--root-password random` through the daemon: one password printed
/// per guest, once, each the one its shadow hash verifies; the daemon's
/// log holds none of them.
#[test]
fn random_passwords_through_the_daemon_are_printed_once_per_guest() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Daemon::start("");
    let tar = image(&d.path("img"), "SHA512");
    let out = d.path("guests");
    let o = d.zinstall(&[
        "provision",
        s(&tar),
        "--out",
        s(&out),
        "--count",
        "2",
        "--root-password",
        "random",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let told: Vec<(&str, &str)> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("password of root on "))
        .map(|l| l.split_once(": ").unwrap())
        .collect();
    assert_eq!(told.len(), 2, "{stdout}");
    assert_ne!(told[0].1, told[1].1);
    for (n, (path, pw)) in told.iter().enumerate() {
        let guest = out.join(format!("guest-{n}"));
        assert_eq!(*path, s(&guest));
        assert!(crypt_verifies(pw, &shadow(&guest, "root")[1]), "{pw}");
        assert!(!d.log().contains(pw), "the log has {pw}");
    }
}

/// A --user-data over the 64 KiB a request carries per file: the client
/// refuses it, saying so, and sends nothing; sent raw, the daemon
/// refuses the request and serves the next.
#[test]
fn an_oversized_user_data_is_refused_by_client_and_daemon() {
    // Provision is root's: another caller's request is refused first.
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Daemon::start("");
    fs::create_dir_all(d.path("img")).unwrap();
    let img = disk(&d.path("img"));
    let big = d.path("big.yaml");
    let filler = "# ".to_string() + &"x".repeat(70 << 10);
    fs::write(&big, format!("#cloud-config\n{filler}\n")).unwrap();
    let out = d.path("guests");
    let o = d.zinstall(&[
        "provision",
        s(&img),
        "--out",
        s(&out),
        "--user-data",
        s(&big),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("at most 64 KiB"), "{}", text(&o));
    assert!(text(&o).contains("--user-data"), "{}", text(&o));
    assert!(!out.exists());

    // 105,000 bytes as base64, within the request line's 256 KiB.
    let raw = json!({"v": 1, "op": "provision", "args": {
        "image": s(&img), "out": s(&out),
        "seed": {"user_data": "QUFB".repeat(35_000)}}});
    let r = d.connect().call(&raw);
    let last = r.last().unwrap();
    assert_eq!(last["reply"], "error", "{r:?}");
    let why = last["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("at most 64 KiB"), "{r:?}");
    assert!(!out.exists());
    let r = d.connect().call(&json!({"v": 1, "op": "version"}));
    assert_eq!(r.last().unwrap()["reply"], "ok", "{r:?}");
}

/// What a client sends is checked again by the daemon, as the options
/// are: a key that is not one, a file name with a path in it, an empty
/// run command, customisation for another number of guests, a timeout
/// past a day:
/// each refused, naming the option, no guest made, the daemon serving
/// on.
#[test]
fn the_daemon_checks_what_it_is_sent_again() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Daemon::start("");
    let tar = image(&d.path("img"), "SHA512");
    let out = d.path("guests");
    let bad = [
        (
            json!({"keys": [{"user": "root", "keys": ["ssh-ed25519 AAAA"]}]}),
            "--ssh-inject",
        ),
        (
            json!({"keys": [{"user": "../x", "keys": []}]}),
            "--ssh-inject",
        ),
        (
            json!({"copy_in": [{"name": "../../etc/passwd", "remote_dir": "/",
                             "mode": 420, "content": "eA=="}]}),
            "--copy-in",
        ),
        (
            json!({"writes": [{"path": "etc/motd", "content": "x"}]}),
            "--write",
        ),
        (
            json!({"firstboot": [{"name": "a/b", "content": "eA=="}]}),
            "--firstboot",
        ),
        (json!({"run": [{"command": " "}]}), "--run-command"),
        (
            json!({"run": [{"script": {"name": "../x", "content": "eA=="}}]}),
            "--run",
        ),
        (json!({"timezone": "../../etc/shadow"}), "--timezone"),
    ];
    for (guest, says) in bad {
        let raw = json!({"v": 1, "op": "provision", "args": {
            "image": s(&tar), "out": s(&out),
            "customize": {"guests": [guest]}}});
        let r = d.connect().call(&raw);
        let last = r.last().unwrap();
        assert_eq!(last["reply"], "error", "{says}: {r:?}");
        let why = last["error"]["message"].as_str().unwrap_or_default();
        assert!(why.contains(says), "{says}: {r:?}");
        assert!(!out.join("guest-0").exists(), "{says}: a guest was made");
    }
    for customize in [
        json!({"guests": [{}, {}]}),
        json!({"guests": [{"run": [{"command": "true"}]}],
               "run_timeout": 86_401}),
    ] {
        let raw = json!({"v": 1, "op": "provision", "args": {
            "image": s(&tar), "out": s(&out), "count": 3,
            "customize": customize}});
        let r = d.connect().call(&raw);
        assert_eq!(r.last().unwrap()["reply"], "error", "{r:?}");
        assert!(!out.join("guest-0").exists(), "{customize}: a guest");
    }
    let r = d.connect().call(&json!({"v": 1, "op": "version"}));
    assert_eq!(r.last().unwrap()["reply"], "ok", "{r:?}");
}

/// --run and --run-command through the daemon run inside each guest as
/// they do locally: in the order given, the script sent as contents,
/// the guest's log named; a failing command fails the provision, naming
/// the guest, and leaves no guest.
#[test]
fn run_commands_through_the_daemon_run_in_each_guest() {
    if !crate::customize_run::prerequisites() {
        return;
    }
    let d = Daemon::start("");
    let (tar, _) = crate::customize_run::image(&d.path("img"));
    let script = d.path("client").join("second.sh");
    fs::create_dir_all(script.parent().unwrap()).unwrap();
    fs::write(&script, "echo -n b >> /etc/order\n").unwrap();
    let out = d.path("guests");
    let o = d.zinstall(&[
        "provision",
        s(&tar),
        "--out",
        s(&out),
        "--count",
        "2",
        "--run-command",
        "echo -n a{n} > /etc/order",
        "--run",
        s(&script),
        "--run-command",
        "echo -n c$$ >> /etc/order",
        "--run-timeout",
        "30",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    for n in 0..2 {
        let order =
            fs::read_to_string(out.join(format!("guest-{n}/etc/order")));
        assert_eq!(order.unwrap(), format!("a{n}bc1"), "guest {n}");
        let log = out.join(format!("guest-{n}.run.log"));
        assert!(log.is_file(), "{log:?}");
    }
    assert!(!Path::new("/etc/order").exists(), "ran on the host");

    let failed = d.path("failed");
    let o = d.zinstall(&[
        "provision",
        s(&tar),
        "--out",
        s(&failed),
        "--run-command",
        "exit 7",
    ]);
    assert!(!o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("guest-0") && t.contains("7"), "{t}");
    assert!(
        !failed.join("guest-0").exists(),
        "the failed guest was kept"
    );
}
