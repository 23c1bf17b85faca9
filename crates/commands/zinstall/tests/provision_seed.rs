//! Disk guests' NoCloud seeds (`NAME-N.seed.img`), checked with the
//! tools that read them: fsck.fat and fatlabel (dosfstools), blkid,
//! mcopy (mtools), and Python's YAML reader for what cloud-init parses.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use serde_json::Value;
use zinstall_testkit::run::{s, text};
use zinstall_testkit::tmp::Tmp;
use zinstall_testkit::tools;

fn zinstall(args: &[&str]) -> Output {
    zinstall_testkit::run::output(env!("CARGO_BIN_EXE_zinstall"), args)
}

/// A 4 MiB raw disk with a little data.
pub(crate) fn disk(dir: &Path) -> PathBuf {
    let p = dir.join("disk.raw");
    let mut b = vec![0u8; 4 << 20];
    b[..4096].fill(0x5a);
    fs::write(&p, b).unwrap();
    p
}

/// A new ed25519 public key, made by ssh-keygen; its line.
fn key(dir: &Path, name: &str) -> (PathBuf, String) {
    let k = dir.join(name);
    let o = tools::tool("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f", s(&k)])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let pub_ = k.with_extension("pub");
    let line = fs::read_to_string(&pub_).unwrap().trim().to_string();
    (pub_, line)
}

/// `provision` of `image` into DIR/out with DIR/cache and `extra`.
fn provision(dir: &Path, image: &Path, extra: &[&str]) -> Output {
    let out = dir.join("out");
    let cache = dir.join("cache");
    let mut args = vec![
        "provision",
        s(image),
        "--out",
        s(&out),
        "--cache",
        s(&cache),
        "--name",
        "vm",
    ];
    args.extend_from_slice(extra);
    zinstall(&args)
}

/// A file of the seed, extracted with mcopy.
pub(crate) fn seed_file(img: &Path, name: &str) -> String {
    let o = tools::tool("mcopy")
        .args(["-n", "-i", s(img), &format!("::{name}"), "-"])
        .output()
        .unwrap();
    assert!(o.status.success(), "mcopy {name}: {}", text(&o));
    String::from_utf8(o.stdout).unwrap()
}

/// YAML as Python's yaml.safe_load reads it (cloud-init's reader), as
/// JSON.
fn yaml(doc: &str) -> Value {
    let mut c = tools::tool("python3")
        .args([
            "-c",
            "import sys, json\n\
             try:\n    import yaml\n\
             except ImportError:\n    sys.exit('python3-yaml is not installed: apt-get install python3-yaml')\n\
             print(json.dumps(yaml.safe_load(sys.stdin.read())))",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    c.stdin.take().unwrap().write_all(doc.as_bytes()).unwrap();
    let o = c.wait_with_output().unwrap();
    assert!(o.status.success(), "{}\n{doc}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A seed image as fsck.fat, fatlabel and blkid see it.
fn check_fat(img: &Path) {
    let o = tools::tool("fsck.fat")
        .args(["-n", s(img)])
        .output()
        .unwrap();
    assert!(o.status.success(), "fsck.fat -n {}: {}", s(img), text(&o));
    let o = tools::tool("fatlabel").arg(s(img)).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "cidata");
    let o = tools::tool("blkid")
        .args(["-p", "-o", "value", "-s", "LABEL", s(img)])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "cidata");
    let o = tools::tool("blkid")
        .args(["-p", "-o", "value", "-s", "TYPE", s(img)])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "vfat");
}

fn seeds_in(out: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(out)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".seed.img"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Two disk guests each get a seed cloud-init reads: a FAT filesystem
/// labelled cidata that fsck.fat finds clean, holding meta-data with
/// the guest's own instance-id and hostname, user-data with the
/// options as cloud-config, and the network-config given; the JSON
/// output names each seed, its QEMU -drive, and the random root
/// password the seed sets.
#[test]
fn each_disk_guest_gets_a_nocloud_seed_of_the_options() {
    let d = Tmp::new();
    let img = disk(d.path());
    let (alice_pub, alice) = key(d.path(), "alice");
    let (_, root) = key(d.path(), "root");
    let net = d.path().join("net.yaml");
    fs::write(&net, "version: 2\nethernets:\n  eth0:\n    dhcp4: true\n")
        .unwrap();
    let root_key = format!("root:string:{root}");
    let alice_key = format!("alice:file:{}", s(&alice_pub));
    let o = provision(
        d.path(),
        &img,
        &[
            "--count",
            "2",
            "--json",
            "--hostname",
            "web{n}",
            "--ssh-inject",
            &root_key,
            "--ssh-inject",
            &alice_key,
            "--root-password",
            "random",
            "--firstboot-command",
            "touch /first",
            "--run-command",
            "echo ran > /ran",
            "--write",
            "/etc/motd:hello: fleet",
            "--network-config",
            s(&net),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let reply: Value = serde_json::from_slice(&o.stdout).unwrap();
    let reply = &reply["result"];
    let out = d.path().join("out");
    assert_eq!(seeds_in(&out), ["vm-0.seed.img", "vm-1.seed.img"]);
    let mut ids = Vec::new();
    for n in 0..2 {
        let img = out.join(format!("vm-{n}.seed.img"));
        check_fat(&img);
        let mode = fs::symlink_metadata(&img).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "a seed may hold a password");
        let g = &reply["guests"][n];
        assert_eq!(g["seed"]["path"], s(&img), "{g}");
        assert_eq!(
            g["seed"]["drive"],
            format!("-drive file={},if=virtio,format=raw", s(&img))
        );
        let meta = yaml(&seed_file(&img, "meta-data"));
        assert_eq!(meta["local-hostname"], format!("web{n}"));
        let id = meta["instance-id"].as_str().unwrap().to_string();
        assert!(id.starts_with(&format!("vm-{n}-")), "{id}");
        assert_eq!(g["seed"]["instance_id"], id);
        ids.push(id);
        let ud = seed_file(&img, "user-data");
        assert!(ud.starts_with("#cloud-config\n"), "{ud}");
        let ud = yaml(&ud);
        assert_eq!(ud["ssh_authorized_keys"], serde_json::json!([root]));
        assert_eq!(ud["disable_root"], false);
        assert_eq!(
            ud["users"],
            serde_json::json!([
                "default",
                {"name": "alice", "ssh_authorized_keys": [alice]}
            ])
        );
        let pw = g["seed"]["root_password"].as_str().unwrap();
        assert_eq!(pw.len(), 20);
        assert_eq!(
            ud["chpasswd"],
            serde_json::json!({"expire": false, "users": [
                {"name": "root", "password": pw, "type": "text"}]})
        );
        assert_eq!(
            ud["runcmd"],
            serde_json::json!(["touch /first", "echo ran > /ran"])
        );
        assert_eq!(
            ud["write_files"],
            serde_json::json!([{"path": "/etc/motd", "content": "hello: fleet"}])
        );
        assert_eq!(ud["hostname"], format!("web{n}"));
        assert_eq!(
            seed_file(&img, "network-config"),
            fs::read_to_string(&net).unwrap()
        );
    }
    assert_ne!(ids[0], ids[1]);
    let p0 = &reply["guests"][0]["seed"]["root_password"];
    assert_ne!(p0, &reply["guests"][1]["seed"]["root_password"]);
}

/// `{n}` and `{name}` make each disk guest's commands, written files and
/// given password its own, as they do a directory guest's.
#[test]
fn values_name_each_disk_guest() {
    let d = Tmp::new();
    let img = disk(d.path());
    let o = provision(
        d.path(),
        &img,
        &[
            "--count",
            "2",
            "--firstboot-command",
            "echo {n} > /etc/guest-number",
            "--write",
            "/etc/{name}.conf:I am {name}, number {n}",
            "--root-password",
            "password:pw-{n}",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let out = d.path().join("out");
    for n in 0..2 {
        let ud = yaml(&seed_file(
            &out.join(format!("vm-{n}.seed.img")),
            "user-data",
        ));
        assert_eq!(
            ud["runcmd"],
            serde_json::json!([format!("echo {n} > /etc/guest-number")])
        );
        assert_eq!(
            ud["write_files"],
            serde_json::json!([{
                "path": format!("/etc/vm-{n}.conf"),
                "content": format!("I am vm-{n}, number {n}"),
            }])
        );
        assert_eq!(
            ud["chpasswd"]["users"][0]["password"],
            format!("pw-{n}"),
            "{ud}"
        );
    }
}

/// A user's #cloud-config gets the options merged in: its lists kept
/// and appended to, its other keys kept; a scalar both set differently
/// is refused naming the key, before any guest is made.
#[test]
fn a_cloud_config_user_data_is_merged_and_conflicts_refused() {
    let d = Tmp::new();
    let img = disk(d.path());
    let ud = d.path().join("user-data");
    fs::write(
        &ud,
        "#cloud-config\npackages: [nginx]\nruncmd:\n  - echo theirs\nusers: [default]\n",
    )
    .unwrap();
    let o = provision(
        d.path(),
        &img,
        &["--user-data", s(&ud), "--firstboot-command", "echo ours"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let seed = d.path().join("out/vm-0.seed.img");
    check_fat(&seed);
    assert!(text(&o).contains("-drive file="), "{}", text(&o));
    let got = yaml(&seed_file(&seed, "user-data"));
    assert_eq!(got["packages"], serde_json::json!(["nginx"]));
    assert_eq!(
        got["runcmd"],
        serde_json::json!(["echo theirs", "echo ours"])
    );
    assert_eq!(got["users"], serde_json::json!(["default"]));
    // No network-config given, none made.
    let o = tools::tool("mdir")
        .args(["-b", "-i", s(&seed), "::"])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&o.stdout).to_lowercase();
    assert!(listing.contains("meta-data") && listing.contains("user-data"));
    assert!(!listing.contains("network-config"), "{listing}");

    // hostname set differently by the file and by --hostname.
    fs::write(&ud, "#cloud-config\nhostname: theirs\n").unwrap();
    let d2 = Tmp::new();
    let o = provision(
        d2.path(),
        &img,
        &["--user-data", s(&ud), "--hostname", "ours{n}"],
    );
    assert!(!o.status.success());
    let e = text(&o);
    assert!(e.contains("--user-data") && e.contains(s(&ud)), "{e}");
    assert!(e.contains("sets hostname otherwise"), "{e}");
    assert!(!d2.path().join("out").exists(), "a guest was made");
    assert!(!d2.path().join("cache").exists(), "the cache was written");
}

/// A script as user-data is copied as it is when alone, and refused
/// with options that make cloud-config, naming both.
#[test]
fn a_script_user_data_is_given_alone_or_refused() {
    let d = Tmp::new();
    let img = disk(d.path());
    let ud = d.path().join("boot.sh");
    fs::write(&ud, "#!/bin/sh\necho from-script > /tmp/x\n").unwrap();
    let (_, k) = key(d.path(), "k");
    let inject = format!("root:string:{k}");
    let o = provision(
        d.path(),
        &img,
        &["--user-data", s(&ud), "--ssh-inject", &inject],
    );
    assert!(!o.status.success());
    let e = text(&o);
    assert!(e.contains("--user-data") && e.contains(s(&ud)), "{e}");
    assert!(e.contains("a script") && e.contains("--ssh-inject"), "{e}");
    assert!(!d.path().join("out").exists());

    let o = provision(d.path(), &img, &["--user-data", s(&ud)]);
    assert!(o.status.success(), "{}", text(&o));
    let seed = d.path().join("out/vm-0.seed.img");
    assert_eq!(
        seed_file(&seed, "user-data"),
        fs::read_to_string(&ud).unwrap()
    );

    // Not a cloud-init format at all.
    fs::write(&ud, "runcmd: [x]\n").unwrap();
    let d2 = Tmp::new();
    let o = provision(d2.path(), &img, &["--user-data", s(&ud)]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("must start with #cloud-config"),
        "{}",
        text(&o)
    );
}

/// A key file that holds no SSH public key is refused naming it, before
/// any guest is made or the cache written.
#[test]
fn a_bad_ssh_key_is_refused_before_any_guest() {
    let d = Tmp::new();
    let img = disk(d.path());
    let bad = d.path().join("id.pub");
    // A private key given by mistake; then an RSA body under an
    // ed25519 name.
    for content in [
        "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n",
        "ssh-ed25519 AAAAB3NzaC1yc2EAAAADAQABAAABAQ== x\n",
    ] {
        fs::write(&bad, content).unwrap();
        let inject = format!("root:file:{}", s(&bad));
        let o = provision(
            d.path(),
            &img,
            &["--count", "3", "--ssh-inject", &inject],
        );
        assert!(!o.status.success());
        let e = text(&o);
        assert!(e.contains("--ssh-inject") && e.contains(s(&bad)), "{e}");
        assert!(!d.path().join("out").exists(), "a guest was made");
        assert!(!d.path().join("cache").exists(), "the cache was written");
    }
    // Given as a string: refused as the flag is read.
    let o = provision(
        d.path(),
        &img,
        &["--ssh-inject", "root:string:ssh-ed25519 nope"],
    );
    assert!(!o.status.success());
    assert!(text(&o).contains("--ssh-inject"), "{}", text(&o));
    assert!(!d.path().join("out").exists());
}

/// A password file others may read, or an empty one, is refused naming
/// it, before any guest is made; a private one sets the password.
#[test]
fn a_password_file_must_be_private_and_not_empty() {
    let d = Tmp::new();
    let img = disk(d.path());
    let pw = d.path().join("pw");
    fs::write(&pw, "s3cret\n").unwrap();
    fs::set_permissions(&pw, fs::Permissions::from_mode(0o644)).unwrap();
    let sel = format!("file:{}", s(&pw));
    let o = provision(d.path(), &img, &["--root-password", &sel]);
    assert!(!o.status.success());
    let e = text(&o);
    assert!(e.contains("--root-password") && e.contains(s(&pw)), "{e}");
    assert!(e.contains("readable by everyone"), "{e}");
    assert!(!d.path().join("out").exists());

    fs::write(&pw, "\n").unwrap();
    fs::set_permissions(&pw, fs::Permissions::from_mode(0o600)).unwrap();
    let o = provision(d.path(), &img, &["--root-password", &sel]);
    assert!(!o.status.success());
    assert!(text(&o).contains("first line is empty"), "{}", text(&o));
    assert!(!d.path().join("out").exists());

    fs::write(&pw, "s3cret\n").unwrap();
    let o = provision(d.path(), &img, &["--root-password", &sel]);
    assert!(o.status.success(), "{}", text(&o));
    let ud = yaml(&seed_file(&d.path().join("out/vm-0.seed.img"), "user-data"));
    assert_eq!(ud["chpasswd"]["users"][0]["password"], "s3cret");
}

/// --no-seed makes disk guests without seeds; a seed already there is
/// refused without --force (a symlink there is not followed), replaced
/// with it.
#[test]
fn no_seed_makes_none_and_an_existing_seed_needs_force() {
    let d = Tmp::new();
    let img = disk(d.path());
    let o = provision(d.path(), &img, &["--count", "2", "--no-seed"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = d.path().join("out");
    assert!(out.join("vm-1.qcow2").exists());
    assert!(seeds_in(&out).is_empty(), "{:?}", seeds_in(&out));

    // A link planted where guest 0's seed goes.
    let target = d.path().join("elsewhere");
    fs::write(&target, b"keep").unwrap();
    std::os::unix::fs::symlink(&target, out.join("vm-0.seed.img")).unwrap();
    let o = provision(d.path(), &img, &["--count", "2", "--force"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(fs::read(&target).unwrap(), b"keep");
    let seed0 = out.join("vm-0.seed.img");
    assert!(fs::symlink_metadata(&seed0).unwrap().is_file());
    check_fat(&seed0);

    // Again without --force: the guest is there, refused.
    let o = provision(d.path(), &img, &["--count", "2"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("exists already"), "{}", text(&o));
    check_fat(&seed0);

    // What a disk guest takes through its seed has nowhere to go without
    // one, and what only a directory guest takes is named: refused, with
    // nothing made.
    let fresh = d.path().join("fresh");
    for (extra, says) in [
        (
            &["--no-seed", "--firstboot-command", "true"][..],
            "--no-seed",
        ),
        (&["--timezone", "UTC"][..], "--timezone"),
        (&["--password", "root:random"][..], "--password"),
    ] {
        let cache = d.path().join("cache");
        let mut a = vec!["provision", s(&img), "--out", s(&fresh)];
        a.extend_from_slice(&["--cache", s(&cache), "--count", "1"]);
        a.extend_from_slice(extra);
        let o = zinstall(&a);
        assert!(!o.status.success(), "{extra:?} passed");
        assert!(text(&o).contains(says), "{extra:?}: {}", text(&o));
        assert!(!fresh.exists(), "{extra:?} made {fresh:?}");
    }
}

/// The options only a seed takes are refused for directory guests (a
/// rootfs archive), naming them, before anything is made.
#[test]
fn seed_only_options_are_refused_for_directory_guests() {
    let d = Tmp::new();
    let root = d.path().join("root");
    fs::create_dir_all(root.join("etc")).unwrap();
    fs::write(root.join("etc/hostname"), "img\n").unwrap();
    let tarball = d.path().join("root.tar");
    let o = tools::tool("tar")
        .args(["-C", s(&root), "-cf", s(&tarball), "."])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let ud = d.path().join("user-data");
    fs::write(&ud, "#cloud-config\n").unwrap();
    let net = d.path().join("net.yaml");
    fs::write(&net, "version: 2\n").unwrap();
    let o = provision(
        d.path(),
        &tarball,
        &["--user-data", s(&ud), "--network-config", s(&net)],
    );
    assert!(!o.status.success());
    let e = text(&o);
    assert!(e.contains("--user-data, --network-config"), "{e}");
    assert!(e.contains("directory guests"), "{e}");
    assert!(!d.path().join("out").exists());
    assert!(!d.path().join("cache").exists());
}
