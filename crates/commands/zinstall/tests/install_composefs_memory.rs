//! `install --format composefs` of archives alone, as root, builds the
//! image in memory (each body straight into the store, no staging tree).
//! The image must be the one the staging build makes of the same
//! archive, byte for byte (the same image ID); what it cannot model goes
//! through staging, saying why; what the tree unpack refuses, it refuses
//! with the same words, leaving nothing.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use zinstall_testkit::run::text;
use zinstall_testkit::{require_root, tools};

fn zinstall() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zinstall"))
}

/// Builds an archive member by member, with PAX records where asked.
struct Archive {
    b: tar::Builder<Vec<u8>>,
}

impl Archive {
    fn new() -> Archive {
        Archive {
            b: tar::Builder::new(Vec::new()),
        }
    }

    fn pax(&mut self, records: &[(&str, &[u8])]) {
        if !records.is_empty() {
            self.b
                .append_pax_extensions(records.iter().copied())
                .unwrap();
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn entry(
        &mut self,
        name: &str,
        kind: tar::EntryType,
        mode: u32,
        owner: (u64, u64),
        link: Option<&str>,
        data: &[u8],
        pax: &[(&str, &[u8])],
    ) -> &mut Archive {
        self.pax(pax);
        let mut h = tar::Header::new_ustar();
        h.set_path(name).unwrap();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(owner.0);
        h.set_gid(owner.1);
        h.set_mtime(1_600_000_000);
        h.set_size(data.len() as u64);
        if let Some(l) = link {
            h.set_link_name(l).unwrap();
        }
        if matches!(kind, tar::EntryType::Char) {
            h.set_device_major(1).unwrap();
            h.set_device_minor(3).unwrap();
        }
        h.set_cksum();
        self.b.append(&h, data).unwrap();
        self
    }

    fn dir(&mut self, name: &str, mode: u32) -> &mut Archive {
        self.entry(
            name,
            tar::EntryType::Directory,
            mode,
            (0, 0),
            None,
            &[],
            &[],
        )
    }

    fn file(&mut self, name: &str, data: &[u8]) -> &mut Archive {
        self.entry(
            name,
            tar::EntryType::Regular,
            0o644,
            (0, 0),
            None,
            data,
            &[],
        )
    }

    fn write(&mut self, path: &Path) -> PathBuf {
        fs::write(path, self.bytes()).unwrap();
        path.to_path_buf()
    }

    fn bytes(&mut self) -> Vec<u8> {
        let b = std::mem::replace(&mut self.b, tar::Builder::new(Vec::new()));
        b.into_inner().unwrap()
    }
}

/// An ACL in its extended attribute's form: each entry's tag, permissions
/// and id.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = vec![2, 0, 0, 0];
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Every kind of member, and later members over earlier ones: what the
/// build in memory must leave as the tree unpack leaves it.
fn every_kind(a: &mut Archive) {
    let cap: &[u8] = &[
        0, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    let mtime: &[u8] = b"1600000000.123456789";
    a.entry(
        "./",
        tar::EntryType::Directory,
        0o751,
        (0, 0),
        None,
        &[],
        &[],
    )
    .entry(
        "a/",
        tar::EntryType::Directory,
        0o750,
        (12, 34),
        None,
        &[],
        &[("SCHILY.xattr.user.dir", b"1")],
    )
    .file("a/f", &bytes(1000, 1))
    .file("a/f", &bytes(2000, 2))
    .entry(
        "a/h",
        tar::EntryType::Link,
        0o644,
        (0, 0),
        Some("a/f"),
        &[],
        &[],
    )
    .file("a/f", &bytes(3000, 3))
    .entry(
        "a/s",
        tar::EntryType::Symlink,
        0o777,
        (5, 6),
        Some("f"),
        &[],
        &[],
    )
    .file("a/big", &bytes(3 << 20, 4))
    .file("a/empty", b"")
    .file("a/tiny", b"ten bytes!")
    .entry(
        "a/suid",
        tar::EntryType::Regular,
        0o4755,
        (0, 0),
        None,
        &bytes(500, 5),
        &[("SCHILY.xattr.security.capability", cap), ("mtime", mtime)],
    )
    .entry(
        "a/x",
        tar::EntryType::Regular,
        0o600,
        (1000, 1000),
        None,
        &bytes(70, 6),
        &[
            ("SCHILY.xattr.user.note", b"kept"),
            ("SCHILY.xattr.trusted.t", b"v"),
        ],
    )
    .dir("d/", 0o755)
    .dir("d/", 0o700)
    .file("e", b"a file, then a directory")
    .dir("e/", 0o755)
    .entry(
        "g/",
        tar::EntryType::Directory,
        0o2775,
        (0, 50),
        None,
        &[],
        &[],
    )
    .file("g/in", &bytes(100, 7))
    .entry("p", tar::EntryType::Fifo, 0o640, (0, 0), None, &[], &[])
    .entry("c", tar::EntryType::Char, 0o600, (0, 0), None, &[], &[]);
    // ACLs, which the kernel keeps in step with the mode: a file's, and a
    // directory's access and default ones (as journald's directory has).
    let rich = acl(&[
        (0x01, 6, u32::MAX),
        (0x02, 7, 1000),
        (0x04, 4, u32::MAX),
        (0x10, 7, u32::MAX),
        (0x20, 4, u32::MAX),
    ]);
    let plain = acl(&[
        (0x01, 6, u32::MAX),
        (0x04, 4, u32::MAX),
        (0x20, 0, u32::MAX),
    ]);
    a.entry(
        "a/acl",
        tar::EntryType::Regular,
        0o640,
        (0, 0),
        None,
        &bytes(90, 8),
        &[("SCHILY.xattr.system.posix_acl_access", &rich[..])],
    )
    .entry(
        "a/acl-as-mode",
        tar::EntryType::Regular,
        0o644,
        (0, 0),
        None,
        &bytes(91, 8),
        &[("SCHILY.xattr.system.posix_acl_access", &plain[..])],
    )
    .entry(
        "j/",
        tar::EntryType::Directory,
        0o2755,
        (0, 999),
        None,
        &[],
        &[
            ("SCHILY.xattr.system.posix_acl_access", &rich[..]),
            ("SCHILY.xattr.system.posix_acl_default", &rich[..]),
        ],
    )
    .file("j/in", &bytes(200, 9))
    .entry(
        "k/",
        tar::EntryType::Directory,
        0o750,
        (0, 0),
        None,
        &[],
        &[("SCHILY.xattr.system.posix_acl_access", &plain[..])],
    );
}

struct World {
    _d: tempfile::TempDir,
    dir: PathBuf,
    profile: PathBuf,
}

fn world() -> World {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().to_path_buf();
    let profile = dir.join("p.toml");
    fs::write(
        &profile,
        format!(
            "source_root = \"/\"\ntrees = []\nallow_devices = true\nlog = \"{}\"\n",
            dir.join("log").display()
        ),
    )
    .unwrap();
    World {
        _d: d,
        dir,
        profile,
    }
}

/// `install --format composefs --json` of `archive` into `name`.
fn install(w: &World, name: &str, archive: &Path, extra: &[&str]) -> Output {
    zinstall()
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .args(["install", "--json", "--format", "composefs", "--profile"])
        .arg(&w.profile)
        .arg("--zonepath")
        .arg(w.dir.join(name))
        .arg("--cache")
        .arg(w.dir.join(format!("{name}.cache")))
        .args(extra)
        .arg(archive)
        .output()
        .unwrap()
}

/// The image ID of a successful install, and its image file.
fn image(o: &Output) -> (String, PathBuf) {
    assert!(o.status.success(), "{}", text(o));
    let last = String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    let v: serde_json::Value = serde_json::from_str(&last)
        .unwrap_or_else(|e| panic!("{e}: {}", text(o)));
    let r = &v["result"];
    (
        r["image"].as_str().unwrap().to_string(),
        PathBuf::from(r["image_path"].as_str().unwrap()),
    )
}

fn through_staging(o: &Output) -> bool {
    String::from_utf8_lossy(&o.stderr).contains("built through a staging tree")
}

#[test]
fn the_build_in_memory_gives_the_image_the_staging_build_gives() {
    if !require_root() {
        return;
    }
    let w = world();
    let mut a = Archive::new();
    every_kind(&mut a);
    let tar = a.write(&w.dir.join("kinds.tar"));
    let gz = w.dir.join("kinds.tar.gz");
    let mut enc = flate2::write::GzEncoder::new(
        fs::File::create(&gz).unwrap(),
        flate2::Compression::fast(),
    );
    enc.write_all(&fs::read(&tar).unwrap()).unwrap();
    enc.finish().unwrap();
    for (n, archive) in [("plain", &tar), ("gzip", &gz)] {
        let mem = install(&w, &format!("{n}-mem"), archive, &[]);
        assert!(!through_staging(&mem), "{n}: {}", text(&mem));
        let staged = install(
            &w,
            &format!("{n}-staged"),
            archive,
            &["--composefs-staging"],
        );
        let ((m, img), (s, _)) = (image(&mem), image(&staged));
        assert_eq!(m, s, "{n}: the two builds' images differ");
        let fsck = tools::tool("fsck.erofs").arg(&img).output().unwrap();
        assert!(fsck.status.success(), "{n}: fsck.erofs: {}", text(&fsck));
    }
    // One worker: the reader stores each body itself.
    let serial = w.dir.join("serial.defaults");
    fs::write(&serial, "COPY_THREADS=1\n").unwrap();
    let one = zinstall()
        .env("ZINSTALL_DEFAULTS", &serial)
        .args(["install", "--json", "--format", "composefs", "--profile"])
        .arg(&w.profile)
        .arg("--zonepath")
        .arg(w.dir.join("serial"))
        .arg("--cache")
        .arg(w.dir.join("serial.cache"))
        .arg(&tar)
        .output()
        .unwrap();
    assert!(!through_staging(&one), "{}", text(&one));
    let staged = install(&w, "again-staged", &tar, &["--composefs-staging"]);
    assert_eq!(image(&one).0, image(&staged).0, "one worker: images differ");
}

/// A member the build in memory leaves to staging: what it is, its
/// name, its owner and its PAX records.
type Odd<'a> = (&'a str, &'a str, (u64, u64), &'a [(&'a str, &'a [u8])]);

#[test]
fn what_the_build_in_memory_cannot_model_goes_through_staging() {
    if !require_root() {
        return;
    }
    let w = world();
    // An access ACL: the kernel keeps it in step with the mode.
    let cases: [Odd; 3] = [
        (
            "an SELinux label",
            "a/label",
            (0, 0),
            &[(
                "SCHILY.xattr.security.selinux",
                b"system_u:object_r:bin_t:s0\0",
            )],
        ),
        (
            "a time past 2038",
            "a/late",
            (0, 0),
            &[("mtime", b"4102444800")],
        ),
        ("an owner of -1", "a/nobody", (4_294_967_295, 0), &[]),
    ];
    for (i, (what, member, owner, pax)) in cases.into_iter().enumerate() {
        let mut a = Archive::new();
        every_kind(&mut a);
        a.entry(
            member,
            tar::EntryType::Regular,
            0o640,
            owner,
            None,
            &bytes(300, 9),
            pax,
        );
        let tar = a.write(&w.dir.join(format!("odd{i}.tar")));
        let mem = install(&w, &format!("mem{i}"), &tar, &[]);
        assert!(through_staging(&mem), "{what}: {}", text(&mem));
        assert!(
            text(&mem).contains(member),
            "{what}: names it: {}",
            text(&mem)
        );
        let staged =
            install(&w, &format!("staged{i}"), &tar, &["--composefs-staging"]);
        assert_eq!(image(&mem).0, image(&staged).0, "{what}");
    }
}

/// `zinstall verify` of the mounted roots of `a` and `b`: each difference
/// it prints.
fn differences(w: &World, a: &str, b: &str) -> Vec<String> {
    for zp in [a, b] {
        let o = zinstall()
            .args(["mount", "--zonepath"])
            .arg(w.dir.join(zp))
            .output()
            .unwrap();
        assert!(o.status.success(), "mount {zp}: {}", text(&o));
    }
    let o = zinstall()
        .args(["verify", "--json"])
        .arg(w.dir.join(a).join("root"))
        .arg(w.dir.join(b).join("root"))
        .output()
        .unwrap();
    for zp in [a, b] {
        let u = zinstall()
            .arg("unmount")
            .arg(w.dir.join(zp))
            .output()
            .unwrap();
        assert!(u.status.success(), "unmount {zp}: {}", text(&u));
    }
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
    v["result"]["differences"]
        .as_array()
        .unwrap_or_else(|| panic!("no differences list: {}", text(&o)))
        .iter()
        .map(|d| d.to_string())
        .collect()
}

#[test]
fn a_baseline_and_a_layer_build_in_memory_as_through_staging() {
    if !require_root() || !zinstall_testkit::composefs_mounts() {
        return;
    }
    let w = world();
    let mut base = Archive::new();
    every_kind(&mut base);
    let base = base.write(&w.dir.join("base.tar"));
    // The second archive: files into the first's directories (a set-group-ID
    // one among them), over its files and links, and new parents of its own.
    let mut layer = Archive::new();
    layer
        .file("a/f", &bytes(4000, 11))
        .file("a/new", &bytes(5000, 12))
        .file("g/sub/deeper/file", &bytes(200, 13))
        .file("fresh/parent/file", &bytes(90, 14))
        .dir("d/", 0o711);
    let layer = layer.write(&w.dir.join("layer.tar"));
    let run = |name: &str, extra: &[&str]| {
        zinstall()
            .env("ZINSTALL_DEFAULTS", "/dev/null")
            .args(["install", "--format", "composefs", "--profile"])
            .arg(&w.profile)
            .arg("--zonepath")
            .arg(w.dir.join(name))
            .arg("--cache")
            .arg(w.dir.join("cache"))
            .args(extra)
            .arg(&base)
            .arg(&layer)
            .output()
            .unwrap()
    };
    let mem = run("mem", &[]);
    assert!(
        mem.status.success() && !through_staging(&mem),
        "{}",
        text(&mem)
    );
    let staged = run("staged", &["--composefs-staging"]);
    assert!(staged.status.success(), "{}", text(&staged));
    // Directories made or changed while installing carry the time they
    // were: the only difference allowed.
    let found = differences(&w, "mem", "staged");
    eprintln!("{} differences: {found:?}", found.len());
    for d in &found {
        assert!(d.contains("mtime"), "{d}");
    }
}

#[test]
fn the_build_in_memory_refuses_what_the_tree_unpack_refuses() {
    if !require_root() {
        return;
    }
    let w = world();
    let cases: Vec<(&str, Archive)> = vec![
        ("through a symlink", {
            let mut a = Archive::new();
            a.entry(
                "l",
                tar::EntryType::Symlink,
                0o777,
                (0, 0),
                Some("/tmp"),
                &[],
                &[],
            )
            .file("l/x", b"out");
            a
        }),
        ("a file over a directory", {
            let mut a = Archive::new();
            a.dir("d/", 0o755).file("d", b"over");
            a
        }),
        ("a directory over a symlink", {
            let mut a = Archive::new();
            a.entry(
                "l",
                tar::EntryType::Symlink,
                0o777,
                (0, 0),
                Some("x"),
                &[],
                &[],
            )
            .dir("l/", 0o755);
            a
        }),
        ("a hard link to nothing", {
            let mut a = Archive::new();
            a.entry(
                "h",
                tar::EntryType::Link,
                0o644,
                (0, 0),
                Some("gone"),
                &[],
                &[],
            );
            a
        }),
        ("a hard link to a directory", {
            let mut a = Archive::new();
            a.dir("d/", 0o755).entry(
                "h",
                tar::EntryType::Link,
                0o644,
                (0, 0),
                Some("d"),
                &[],
                &[],
            );
            a
        }),
    ];
    for (i, (what, mut a)) in cases.into_iter().enumerate() {
        let tar = a.write(&w.dir.join(format!("bad{i}.tar")));
        let mem = install(&w, &format!("mem{i}"), &tar, &[]);
        let staged =
            install(&w, &format!("staged{i}"), &tar, &["--composefs-staging"]);
        assert!(!mem.status.success(), "{what}: installed: {}", text(&mem));
        // The outcome's message, the zonepath's name aside.
        let error = |o: &Output| {
            let out = String::from_utf8_lossy(&o.stdout);
            let line = out
                .lines()
                .find(|l| l.contains("\"error\""))
                .unwrap_or("{}");
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            v["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .replace(&format!("staged{i}"), "ZP")
                .replace(&format!("mem{i}"), "ZP")
        };
        // The same refusal; the staging build adds that it removed the
        // partial tree it had made.
        let (m, st) = (error(&mem), error(&staged));
        assert!(st.starts_with(&m), "{what}: {m:?} against {st:?}");
        assert!(!error(&mem).is_empty(), "{what}: {}", text(&mem));
        assert!(
            !w.dir.join(format!("mem{i}")).exists(),
            "{what}: zonepath left"
        );
        let refs = w.dir.join(format!("mem{i}.cache/composefs/images/refs"));
        let left = fs::read_dir(&refs).map_or(0, |r| r.count());
        assert_eq!(left, 0, "{what}: a ref was left");
    }
}

/// An error's message as both builds give it: a path in the root from the
/// root down (the staging build's root is elsewhere), and without the
/// staging build's word on its partial tree.
fn normal(message: &str, zp: &str) -> String {
    let message = message.replace(zp, "ZP");
    let message = message
        .strip_suffix(" (the partial root was removed)")
        .unwrap_or(&message);
    message
        .split(' ')
        .map(|w| match w.rfind("/root/") {
            Some(i) => format!("ROOT/{}", &w[i + 6..]),
            None => w.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The outcome of an install for comparing: the image ID, or the error's
/// message as [`normal`] gives it.
fn outcome(o: &Output, zp: &str) -> Result<String, String> {
    let last = String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    let v: serde_json::Value = serde_json::from_str(&last)
        .unwrap_or_else(|e| panic!("{e}: {}", text(o)));
    match v["result"]["image"].as_str() {
        Some(id) if o.status.success() => Ok(id.to_string()),
        _ => Err(normal(
            v["error"]["message"].as_str().unwrap_or_default(),
            zp,
        )),
    }
}

mod oci;
mod random;

#[test]
fn a_file_made_in_a_directory_with_a_default_acl_goes_through_staging() {
    if !require_root() {
        return;
    }
    let w = world();
    let mut base = Archive::new();
    every_kind(&mut base);
    let base = base.write(&w.dir.join("base.tar"));
    // In a later archive: `j` has its default ACL by then, and gives it.
    let mut layer = Archive::new();
    layer.file("j/new", &bytes(100, 30));
    let layer = layer.write(&w.dir.join("layer.tar"));
    let o = zinstall()
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .args(["install", "--format", "composefs", "--profile"])
        .arg(&w.profile)
        .arg("--zonepath")
        .arg(w.dir.join("zp"))
        .arg("--cache")
        .arg(w.dir.join("cache"))
        .arg(&base)
        .arg(&layer)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(through_staging(&o), "{}", text(&o));
    assert!(text(&o).contains("j/new"), "names the member: {}", text(&o));
}
