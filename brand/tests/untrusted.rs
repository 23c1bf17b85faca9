//! Images, archives and zonepaths that try to make `zinstall install` and
//! `uninstall` write outside the root. Each case keeps a sentinel
//! directory outside the zonepath and checks that nothing in it changed
//! (names, contents, modes, times), whatever the command's outcome.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Everything about a tree that a write into it would change.
type Snapshot = BTreeMap<PathBuf, (u32, i64, i64, Vec<u8>)>;

fn snapshot(dir: &Path) -> Snapshot {
    let mut out = BTreeMap::new();
    for e in walkdir::WalkDir::new(dir).follow_links(false) {
        let e = e.unwrap();
        let md = e.path().symlink_metadata().unwrap();
        let data = if md.is_file() {
            fs::read(e.path()).unwrap()
        } else if md.file_type().is_symlink() {
            fs::read_link(e.path())
                .unwrap()
                .into_os_string()
                .into_encoded_bytes()
        } else {
            Vec::new()
        };
        out.insert(
            e.path().to_path_buf(),
            (md.mode(), md.mtime(), md.mtime_nsec(), data),
        );
    }
    out
}

/// A member of a test layer.
enum E<'a> {
    File(&'a str, &'a [u8]),
    Dir(&'a str),
    Symlink(&'a str, &'a str),
    HardLink(&'a str, &'a str),
}

/// A zinstall layer holding `entries` under `root/`.
fn layer(path: &Path, entries: &[E<'_>]) {
    let mut b = tar::Builder::new(Vec::new());
    let head = |size: u64, mode: u32, t: tar::EntryType| {
        let mut h = tar::Header::new_gnu();
        h.set_size(size);
        h.set_mode(mode);
        h.set_mtime(1_600_000_000);
        h.set_entry_type(t);
        h
    };
    let meta = br#"{"v":"1","t":"layer"}"#;
    let mut h = head(meta.len() as u64, 0o444, tar::EntryType::Regular);
    b.append_data(&mut h, "zinstall.json", &meta[..]).unwrap();
    for e in entries {
        match *e {
            E::File(n, data) => {
                let mut h =
                    head(data.len() as u64, 0o644, tar::EntryType::Regular);
                b.append_data(&mut h, format!("root/{n}"), data).unwrap();
            }
            E::Dir(n) => {
                let mut h = head(0, 0o755, tar::EntryType::Directory);
                b.append_data(&mut h, format!("root/{n}"), &[][..]).unwrap();
            }
            E::Symlink(n, target) | E::HardLink(n, target) => {
                let t = if matches!(e, E::Symlink(..)) {
                    tar::EntryType::Symlink
                } else {
                    tar::EntryType::Link
                };
                let mut h = head(0, 0o777, t);
                b.append_link(&mut h, format!("root/{n}"), target).unwrap();
            }
        }
    }
    fs::write(path, b.into_inner().unwrap()).unwrap();
}

/// A scratch world: a small source tree, a sentinel outside everything,
/// a host file some levels deep, and a profile copying both.
struct World {
    d: tempfile::TempDir,
    sentinel: PathBuf,
    host_file: PathBuf,
}

impl World {
    fn new(files: usize) -> World {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src/usr/share/data");
        fs::create_dir_all(&src).unwrap();
        for i in 0..files {
            let sub = src.join(format!("d{}", i % 50));
            fs::create_dir_all(&sub).unwrap();
            fs::write(sub.join(format!("f{i}")), format!("file {i}")).unwrap();
        }
        let sentinel = d.path().join("sentinel");
        fs::create_dir_all(sentinel.join("deeper")).unwrap();
        fs::write(sentinel.join("keep"), b"host data").unwrap();
        fs::write(sentinel.join("deeper/conf"), b"host conf").unwrap();
        fs::set_permissions(&sentinel, fs::Permissions::from_mode(0o751))
            .unwrap();
        let host_file = d.path().join("hostfiles/etc/default/conf");
        fs::create_dir_all(host_file.parent().unwrap()).unwrap();
        fs::write(&host_file, b"FROM_HOST=1\n").unwrap();
        let w = World {
            d,
            sentinel,
            host_file,
        };
        w.profile(std::slice::from_ref(&w.host_file));
        w
    }

    fn path(&self, p: &str) -> PathBuf {
        self.d.path().join(p)
    }

    fn profile(&self, host_files: &[PathBuf]) {
        let list: Vec<String> =
            host_files.iter().map(|p| format!("{p:?}")).collect();
        fs::write(
            self.path("profile.toml"),
            format!(
                "source_root = {:?}\ntrees = [\"usr\"]\nlog = {:?}\n\
                 max_archive_bytes = 100000000\nallow_devices = false\n\
                 [host_files]\npaths = [{}]\n",
                self.path("src"),
                self.path("install.log"),
                list.join(", ")
            ),
        )
        .unwrap();
    }

    fn install(&self, zonepath: &Path, layers: &[PathBuf]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_zinstall"))
            .arg("install")
            .arg("--zonepath")
            .arg(zonepath)
            .arg("--profile")
            .arg(self.path("profile.toml"))
            .args(layers)
            .output()
            .unwrap()
    }

    fn uninstall(&self, zonepath: &Path) -> Output {
        Command::new(env!("CARGO_BIN_EXE_zinstall"))
            .args(["uninstall", "-F", "--zonepath"])
            .arg(zonepath)
            .output()
            .unwrap()
    }
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The host file's path inside a root, relative: `tmp/.../etc/default/conf`.
fn rel_in_root(p: &Path) -> PathBuf {
    p.strip_prefix("/").unwrap().to_path_buf()
}

/// A relative symlink target that climbs out of `depth` directories and
/// then names `to` (absolute), like `../../..//sentinel`.
fn climbing(depth: usize, to: &Path) -> String {
    let mut s = "../".repeat(depth + 8);
    s.push_str(to.strip_prefix("/").unwrap().to_str().unwrap());
    s
}

#[test]
fn host_files_are_never_written_through_a_planted_symlink() {
    let w = World::new(20);
    let before = snapshot(&w.sentinel);
    let rel = rel_in_root(&w.host_file);
    let comps: Vec<_> = rel.components().collect();
    let mut cases = 0;
    // A link at every directory level of the host file's destination,
    // absolute and climbing, and at the file's own name.
    for level in 0..comps.len() {
        let at: PathBuf = comps[..=level].iter().collect();
        let at = at.to_str().unwrap().to_string();
        let leaf = level == comps.len() - 1;
        let targets = if leaf {
            vec![
                w.sentinel.join("keep").display().to_string(),
                climbing(level, &w.sentinel.join("keep")),
            ]
        } else {
            vec![
                w.sentinel.display().to_string(),
                climbing(level, &w.sentinel),
            ]
        };
        for (i, target) in targets.iter().enumerate() {
            let l = w.path(&format!("l-{level}-{i}.tar"));
            layer(&l, &[E::Symlink(&at, target)]);
            let zp = w.path(&format!("zp-{level}-{i}"));
            let out = w.install(&zp, &[l]);
            cases += 1;
            assert_eq!(
                snapshot(&w.sentinel),
                before,
                "link at {at} -> {target}: {}",
                text(&out)
            );
            if leaf {
                // The link is replaced by the host file, never written
                // through.
                assert!(out.status.success(), "leaf {at}: {}", text(&out));
                let got = zp.join("root").join(&rel);
                assert!(
                    !got.symlink_metadata().unwrap().file_type().is_symlink()
                );
                assert_eq!(fs::read(&got).unwrap(), b"FROM_HOST=1\n");
            } else {
                assert!(!out.status.success(), "link at {at}: {}", text(&out));
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(
                    err.contains(&format!("{at} is a symlink inside the root")),
                    "the error names the link at {at}: {err}"
                );
            }
        }
    }
    assert_eq!(cases, comps.len() * 2);
}

#[test]
fn a_link_planted_by_one_layer_is_not_followed_by_the_next() {
    let w = World::new(5);
    let before = snapshot(&w.sentinel);
    let l1 = w.path("plant.tar");
    layer(
        &l1,
        &[
            E::Symlink("a", w.sentinel.to_str().unwrap()),
            E::Symlink("b", "../../../../../../../../../.."),
        ],
    );
    let sent = w
        .sentinel
        .strip_prefix("/")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let attacks: Vec<(String, Vec<E<'_>>)> = vec![
        ("file through a".into(), vec![E::File("a/pwned", b"x")]),
        ("dir through a".into(), vec![E::Dir("a/deeper/x")]),
        (
            "file through b".into(),
            vec![E::File(&format!("b/{sent}/pwned").leak()[..], b"x")],
        ),
        (
            "hard link through a".into(),
            vec![E::HardLink("h", "root/a/keep")],
        ),
        (
            "symlink through a".into(),
            vec![E::Symlink("a/s", "/etc/passwd")],
        ),
        (
            "replace a's target".into(),
            vec![E::File("a/keep", b"overwritten")],
        ),
    ];
    for (what, entries) in &attacks {
        let l2 = w.path("attack.tar");
        layer(&l2, entries);
        let zp = w.path("zp-layers");
        let out = w.install(&zp, &[l1.clone(), l2]);
        assert!(!out.status.success(), "{what}: {}", text(&out));
        assert_eq!(snapshot(&w.sentinel), before, "{what}: {}", text(&out));
        // The failed install removed its partial root, links and all,
        // without following them.
        assert!(!zp.join("root").exists(), "{what}");
    }
}

#[test]
fn the_zonepath_root_lock_and_state_are_never_followed() {
    let w = World::new(5);
    let victim = w.path("victim-file");
    fs::write(&victim, b"do not truncate").unwrap();
    let before = snapshot(&w.sentinel);
    let victim_before = fs::read(&victim).unwrap();
    for name in ["root", ".zinstall.lock", ".zinstall.state"] {
        let zp = w.path(&format!("zp-{}", name.trim_start_matches('.')));
        fs::create_dir(&zp).unwrap();
        let target = if name == "root" { &w.sentinel } else { &victim };
        symlink(target, zp.join(name)).unwrap();
        let out = w.install(&zp, &[]);
        assert!(!out.status.success(), "{name}: {}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("symlink"),
            "{name}: the error says why: {}",
            text(&out)
        );
        let out = w.uninstall(&zp);
        assert_eq!(snapshot(&w.sentinel), before, "{name}: {}", text(&out));
        assert_eq!(fs::read(&victim).unwrap(), victim_before, "{name}");
        assert_eq!(
            fs::metadata(&victim).unwrap().permissions().mode() & 0o777,
            0o644,
            "{name}"
        );
    }
}

#[test]
fn a_deep_layer_installs_and_any_depth_uninstalls() {
    let w = World::new(5);
    // 3000 levels: far past PATH_MAX as a path.
    let mut name = String::from("d");
    let mut entries = Vec::new();
    let mut names = Vec::new();
    for _ in 0..3000 {
        names.push(name.clone());
        name.push_str("/d");
    }
    for n in &names {
        entries.push(E::Dir(n));
    }
    let leaf = format!("{}/leaf", names.last().unwrap());
    entries.push(E::File(&leaf, b"deep"));
    let l = w.path("deep.tar");
    layer(&l, &entries);
    let zp = w.path("zp-deep");
    let out = w.install(&zp, &[l]);
    assert!(out.status.success(), "{}", text(&out));
    let out = w.uninstall(&zp);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!zp.join("root").exists());

    // A tenant builds a deeper tree inside an installed root, with
    // read-only directories; uninstall still removes it.
    let out = w.install(&zp, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let top = fs::File::open(zp.join("root")).unwrap();
    let mut fd = std::os::fd::OwnedFd::from(top);
    for _ in 0..5000 {
        use std::os::fd::{AsRawFd, FromRawFd};
        let n = c"t";
        // SAFETY: valid descriptor and name.
        unsafe {
            assert_eq!(libc::mkdirat(fd.as_raw_fd(), n.as_ptr(), 0o755), 0);
            let next = libc::openat(
                fd.as_raw_fd(),
                n.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY,
            );
            assert!(next >= 0);
            libc::fchmod(fd.as_raw_fd(), 0o555);
            fd = std::os::fd::OwnedFd::from_raw_fd(next);
        }
    }
    drop(fd);
    let out = w.uninstall(&zp);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!zp.join("root").exists());
}

#[test]
fn uninstall_never_crosses_into_a_mount() {
    if !is_root() {
        eprintln!(
            "skipped: uninstall_never_crosses_into_a_mount: needs root (bind mount)"
        );
        return;
    }
    let w = World::new(5);
    let zp = w.path("zp-mount");
    let out = w.install(&zp, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let before = snapshot(&w.sentinel);
    let mnt = zp.join("root/mnt/host");
    fs::create_dir_all(&mnt).unwrap();
    let st = Command::new("mount")
        .arg("--bind")
        .arg(&w.sentinel)
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(st.success(), "mount --bind");
    let out = w.uninstall(&zp);
    let umounted = Command::new("umount").arg(&mnt).status().unwrap();
    assert!(umounted.success());
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("mnt/host"),
        "names the mount point: {}",
        text(&out)
    );
    assert_eq!(snapshot(&w.sentinel), before);
    // Everything else is gone; the mount point's parents remain.
    assert!(!zp.join("root/usr").exists());
    let out = w.uninstall(&zp);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn a_directory_swapped_for_a_symlink_during_the_install_is_not_followed() {
    let w = World::new(3000);
    let before = snapshot(&w.sentinel);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut runs = 0;
    let mut swapped = 0;
    while runs < 10 && Instant::now() < deadline {
        let zp = w.path(&format!("zp-race{runs}"));
        fs::create_dir(&zp).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let stop = Arc::clone(&stop);
            let data = zp.join("root/usr/share/data");
            let sentinel = w.sentinel.clone();
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    for i in 0..50 {
                        let d = data.join(format!("d{i}"));
                        let aside = data.join(format!("aside{i}"));
                        if fs::rename(&d, &aside).is_ok()
                            && symlink(&sentinel, &d).is_ok()
                        {
                            n += 1;
                        }
                    }
                    std::thread::yield_now();
                }
                n
            })
        };
        let out = w.install(&zp, &[]);
        stop.store(true, Ordering::Relaxed);
        swapped += swapper.join().unwrap();
        assert_eq!(snapshot(&w.sentinel), before, "run {runs}: {}", text(&out));
        let out = w.uninstall(&zp);
        assert_eq!(
            snapshot(&w.sentinel),
            before,
            "uninstall {runs}: {}",
            text(&out)
        );
        runs += 1;
    }
    assert!(
        swapped > 0,
        "the race was never run: no directory was swapped"
    );
}
