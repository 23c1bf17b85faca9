//! Nothing an image, a tenant or a racing process puts in a root may make
//! zinstall write outside it.
//!
//! Every case keeps a sentinel outside the root (see `hostile/sentinel.rs`)
//! whose whole state is compared after the command: it must never change.
//! The command itself may refuse (exit non-zero, naming the offending
//! path) or succeed harmlessly (what it wrote is inside the root, reached
//! through no symlink). These tests drive the binaries only, so that they
//! hold whatever the engine does inside.

use zinstall_testkit::fsops;
use zinstall_testkit::sentinel;
mod composefs;
mod support;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fsops::{
    Cases, Mount, Racer, climbing, file_beneath, lstat_beneath, mkdir_deep,
    needs_root, relative, swap_for_symlink,
};
use sentinel::Sentinel;
use support::{
    Layer, Out, ProfileSpec, Zone, refused_or_harmless, run, wait_bounded,
    zinstall,
};

/// How a planted symlink names the sentinel.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Aim {
    /// `/abs/path/to/sentinel`
    Absolute,
    /// `../../sentinel`, just enough `..`
    Relative,
    /// `../../../(40 times)/abs/path/to/sentinel`
    Climbing,
    /// a relative link to a sibling, which is the relative link out
    Chained,
}

const AIMS: [Aim; 4] =
    [Aim::Absolute, Aim::Relative, Aim::Climbing, Aim::Chained];

/// Adds to `layer` a symlink at `rel` (inside the root at `root`) aimed at
/// `target` the way `aim` says, with the directories above it.
pub(crate) fn plant(
    layer: &mut Layer,
    root: &Path,
    rel: &Path,
    target: &Path,
    aim: Aim,
) {
    let parent = rel.parent().unwrap_or(Path::new(""));
    let mut above = PathBuf::new();
    for c in parent.components() {
        above.push(c);
        layer.dir(above.to_str().unwrap());
    }
    let from = root.join(parent);
    let name = rel.to_str().unwrap();
    match aim {
        Aim::Absolute => layer.symlink(name, target),
        Aim::Relative => layer.symlink(name, &relative(&from, target)),
        Aim::Climbing => layer.symlink(name, &climbing(target)),
        Aim::Chained => {
            let hop = parent.join(".hop");
            layer.symlink(hop.to_str().unwrap(), &relative(&from, target));
            layer.symlink(name, Path::new(".hop"))
        }
    };
}

/// Every proper prefix of `rel`, then `rel` itself: `etc`, `etc/default`,
/// `etc/default/init`.
fn levels(rel: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut p = PathBuf::new();
    for c in rel.components() {
        p.push(c);
        out.push(p.clone());
    }
    out
}

/// The first of a few two-level host files this machine has.
fn two_level_host_file() -> PathBuf {
    let candidates = [
        "/etc/default/useradd",
        "/etc/default/locale",
        "/etc/security/limits.conf",
        "/etc/ssl/openssl.cnf",
        "/etc/apt/sources.list",
    ];
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|p| fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
        .unwrap_or_else(|| {
            panic!("none of {candidates:?} is a regular file on this machine")
        })
}

/// Case 1: a layer plants a symlink at one level of a host file's
/// destination (a directory above it, or the file itself), aimed at a
/// sentinel; the host-file step must refuse or replace, never write
/// through it.
#[test]
fn host_files_never_go_through_links_a_layer_planted() {
    let hostname = PathBuf::from("/etc/hostname");
    assert!(
        fs::symlink_metadata(&hostname).is_ok_and(|m| m.is_file()),
        "/etc/hostname must be a regular file on this machine"
    );
    let deep = two_level_host_file();
    // One more, deep in a scratch directory, so every level of a long
    // path is tried too.
    let scratch = tempfile::tempdir().unwrap();
    let own = scratch.path().join("host/etc/default/init");
    fs::create_dir_all(own.parent().unwrap()).unwrap();
    fs::write(&own, b"TZ=UTC\n").unwrap();
    let mut cases = Cases::default();
    for (host, aims) in [
        (&hostname, &AIMS[..]),
        (&deep, &AIMS[..]),
        (&own, &AIMS[..1]),
    ] {
        let rel = host.strip_prefix("/").unwrap().to_path_buf();
        let content = fs::read(host).unwrap();
        for level in levels(&rel) {
            // The leaf is aimed at a file and at a directory.
            let at_dirs: &[bool] = if level == rel {
                &[false, true]
            } else {
                &[true]
            };
            for (&aim, &at_dir) in aims
                .iter()
                .flat_map(|a| at_dirs.iter().map(move |d| (a, d)))
            {
                let what = format!(
                    "host file {} with {} a symlink ({aim:?}) to the sentinel {}",
                    host.display(),
                    level.display(),
                    if at_dir { "directory" } else { "file" }
                );
                cases.run(&what.clone(), || {
                    let z = Zone::new();
                    z.write_profile(&ProfileSpec {
                        trees: &["usr"],
                        host_files: &[host.as_path()],
                        ..ProfileSpec::default()
                    });
                    let sdir = Sentinel::dir(&z.outside("sentinel"));
                    let sfile = Sentinel::file(&z.outside("sentinel-file"));
                    let target = if at_dir { &sdir.path } else { &sfile.path };
                    let mut l = Layer::new("layer");
                    plant(&mut l, &z.root, &level, target, aim);
                    let layer = l.write(&z.outside("planted.tar"));
                    let o = z.install(&[&layer]);
                    eprintln!("{what}: {}", o.brief());
                    sdir.assert_unchanged(&format!("{what}\n{}", o.all()));
                    sfile.assert_unchanged(&format!("{what}\n{}", o.all()));
                    refused_or_harmless(
                        &what,
                        &o,
                        &[
                            z.root.join(&level).display().to_string(),
                            host.display().to_string(),
                        ],
                        || file_beneath(&z.root, &rel, &content),
                    );
                });
            }
        }
    }
    cases.finish();
}

/// One case of a link planted earlier (baseline or layer) and used later.
struct Later {
    what: &'static str,
    /// The planting archive is the baseline, not a first layer.
    baseline: bool,
    aim: Aim,
    /// Fills the second layer; `a` is the planted link.
    second: fn(&mut Layer),
    /// Members a refusal may name (the entry, or the path through the
    /// link).
    names: &'static [&'static str],
    /// What a harmless success leaves, inside the root.
    inside: &'static str,
}

/// Case 2: a link planted by the baseline or a first layer (`root/a`,
/// aimed at a sentinel directory) and used by the next layer: a file,
/// a directory, a symlink and hard links through it. The sentinel holds
/// `keep`, which the second layer also tries to replace and link to.
#[test]
fn a_link_planted_by_one_archive_is_not_followed_by_the_next() {
    let cases = [
        Later {
            what: "layer 2 file through layer 1's absolute link",
            baseline: false,
            aim: Aim::Absolute,
            second: |l| {
                l.file("a/pwned", b"pwned");
            },
            names: &["a/pwned"],
            inside: "a/pwned",
        },
        Later {
            what: "layer 2 file through layer 1's relative link",
            baseline: false,
            aim: Aim::Relative,
            second: |l| {
                l.file("a/pwned", b"pwned");
            },
            names: &["a/pwned"],
            inside: "a/pwned",
        },
        Later {
            what: "layer 2 file replacing a sentinel file through the link",
            baseline: false,
            aim: Aim::Climbing,
            second: |l| {
                l.file("a/keep", b"pwned");
            },
            names: &["a/keep"],
            inside: "a/keep",
        },
        Later {
            what: "layer 2 directory through the link",
            baseline: false,
            aim: Aim::Chained,
            second: |l| {
                l.dir("a/newdir").file("a/newdir/f", b"pwned");
            },
            names: &["a/newdir"],
            inside: "a/newdir/f",
        },
        Later {
            what: "layer 2 symlink through the link",
            baseline: false,
            aim: Aim::Absolute,
            second: |l| {
                l.symlink("a/ln", Path::new("/etc/passwd"));
            },
            names: &["a/ln"],
            inside: "a/ln",
        },
        Later {
            what: "layer 2 hard link named through the link (to a sentinel file)",
            baseline: false,
            aim: Aim::Absolute,
            second: |l| {
                l.hardlink("grab", "a/keep");
            },
            names: &["grab", "a/keep"],
            inside: "grab",
        },
        Later {
            what: "layer 2 hard link made through the link (into the sentinel)",
            baseline: false,
            aim: Aim::Relative,
            second: |l| {
                l.file("x", b"x").hardlink("a/x", "x");
            },
            names: &["a/x"],
            inside: "a/x",
        },
        Later {
            what: "layer file through the baseline's link",
            baseline: true,
            aim: Aim::Absolute,
            second: |l| {
                l.file("a/pwned", b"pwned");
            },
            names: &["a/pwned"],
            inside: "a/pwned",
        },
        Later {
            what: "layer directory through the baseline's relative link",
            baseline: true,
            aim: Aim::Relative,
            second: |l| {
                l.dir("a/sub");
            },
            names: &["a/sub"],
            inside: "a/sub",
        },
    ];
    let mut results = Cases::default();
    for c in &cases {
        let what = format!("{} ({:?})", c.what, c.aim);
        results.run(&what.clone(), || {
            let z = Zone::new();
            let s = Sentinel::dir(&z.outside("sentinel"));
            let mut first =
                Layer::new(if c.baseline { "baseline" } else { "layer" });
            plant(&mut first, &z.root, Path::new("a"), &s.path, c.aim);
            let bdir = z.outside("baseline");
            fs::create_dir(&bdir).unwrap();
            let mut images = Vec::new();
            if c.baseline {
                first.write(&bdir.join("baseline.tar"));
                z.write_profile(&ProfileSpec {
                    trees: &["usr"],
                    baseline_dir: Some(&bdir),
                    ..ProfileSpec::default()
                });
            } else {
                images.push(first.write(&z.outside("layer1.tar")));
            }
            let mut second = Layer::new("layer");
            (c.second)(&mut second);
            images.push(second.write(&z.outside("layer2.tar")));
            let refs: Vec<&Path> =
                images.iter().map(PathBuf::as_path).collect();
            let o = z.install(&refs);
            eprintln!("{what}: {}", o.brief());
            s.assert_unchanged(&format!("{what}\n{}", o.all()));
            let names: Vec<String> = c
                .names
                .iter()
                .flat_map(|n| {
                    [format!("root/{n}"), z.root.join(n).display().to_string()]
                })
                .collect();
            refused_or_harmless(&what, &o, &names, || {
                lstat_beneath(&z.root, Path::new(c.inside)).map(|_| ())
            });
        });
    }
    results.finish();
}

/// Runs `attempt` until `limit` runs or `budget` time has passed, or the
/// sentinel changes; panics naming the run that changed it.
fn repeat_race(
    s: &Sentinel,
    runs: usize,
    budget: Duration,
    mut attempt: impl FnMut(usize) -> (Out, u64),
) {
    let t0 = Instant::now();
    let mut swapped = 0;
    let mut done = 0;
    for i in 0..runs {
        if i > 0 && t0.elapsed() > budget {
            break;
        }
        let (o, n) = attempt(i);
        swapped += n;
        done += 1;
        let c = s.changes();
        assert!(
            c.is_empty(),
            "run {i}: with {n} directories swapped for symlinks to the sentinel \
             during the run, the sentinel {} changed:\n{c}{}",
            s.path.display(),
            o.all()
        );
        if !o.ok() {
            assert!(
                !o.stderr.trim().is_empty(),
                "run {i}: failed without saying why\n{}",
                o.all()
            );
        }
    }
    eprintln!("{done} runs, {swapped} directories swapped, sentinel unchanged");
    assert!(
        swapped > 0,
        "the racer never swapped a directory in {done} runs: the race was not exercised"
    );
}

const RACE_DIRS: usize = 40;
const RACE_FILES: usize = 100;

/// Swaps each `root/usr/dNN` for a symlink to `target` as soon as it is a
/// real directory.
fn usr_racer(root: &Path, target: &Path) -> Racer {
    let (root, target) = (root.to_path_buf(), target.to_path_buf());
    let mut n = 0;
    Racer::start(move || {
        let mut swapped = 0;
        for d in 0..RACE_DIRS {
            let dir = root.join(format!("usr/d{d:02}"));
            n += 1;
            swapped += u64::from(swap_for_symlink(&dir, &target, n));
        }
        swapped
    })
}

/// Case 3: while the trees are replicated, a racing thread renames each
/// directory of the root being written and puts a symlink to the sentinel
/// in its place. Repeated (fresh zonepath each run) so the window is hit.
#[test]
fn directories_swapped_for_symlinks_during_replication() {
    let mut z = Zone::new();
    z.big_usr(RACE_DIRS, RACE_FILES);
    let s = Sentinel::dir(&z.outside("sentinel"));
    repeat_race(&s, 20, Duration::from_secs(15), |i| {
        z.use_zonepath(&format!("race{i}"));
        let racer = usr_racer(&z.root, &s.path);
        let child = z
            .install_cmd(&["--threads", "2", "--batch", "8"], &[])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let o = wait_bounded(child, Duration::from_secs(60));
        (o, racer.stop())
    });
}

/// Case 3, uninstalling: the same swaps while the root is removed.
#[test]
fn directories_swapped_for_symlinks_during_uninstall() {
    let mut z = Zone::new();
    z.big_usr(RACE_DIRS, RACE_FILES / 2);
    let s = Sentinel::dir(&z.outside("sentinel"));
    repeat_race(&s, 4, Duration::from_secs(9), |i| {
        z.use_zonepath(&format!("race{i}"));
        z.install_ok();
        let child = z
            .uninstall_cmd(true)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let racer = usr_racer(&z.root, &s.path);
        let o = wait_bounded(child, Duration::from_secs(60));
        (o, racer.stop())
    });
}

/// Case 4: `ZONEPATH/root` is a symlink to a sentinel directory (with
/// files, and empty: an empty one looks like a fresh root), for install
/// and uninstall.
#[test]
fn a_root_that_is_a_symlink_is_not_followed() {
    let mut cases = Cases::default();
    for (cmd, empty, state) in [
        ("install", false, None),
        ("install", true, None),
        ("install", true, Some("installing")),
        ("uninstall -F", false, None),
        ("uninstall -F", true, Some("installing")),
        ("uninstall", false, Some("installed")),
    ] {
        let what = format!(
            "{cmd}, root -> {} sentinel directory, marker {state:?}",
            if empty { "empty" } else { "full" }
        );
        cases.run(&what.clone(), || {
            let z = Zone::new();
            let s = if empty {
                Sentinel::empty_dir(&z.outside("sentinel"))
            } else {
                Sentinel::dir(&z.outside("sentinel"))
            };
            fs::create_dir_all(&z.zonepath).unwrap();
            symlink(&s.path, &z.root).unwrap();
            if let Some(st) = state {
                fs::write(
                    z.zonepath.join(".zinstall.state"),
                    format!("{st}\n"),
                )
                .unwrap();
            }
            let o = match cmd {
                "install" => z.install(&[]),
                "uninstall -F" => z.uninstall(true),
                _ => z.uninstall(false),
            };
            eprintln!("{what}: {}", o.brief());
            s.assert_unchanged(&format!("{what}\n{}", o.all()));
            let names = [z.root.display().to_string()];
            refused_or_harmless(&what, &o, &names, || {
                let md = fs::symlink_metadata(&z.root);
                match (cmd, md) {
                    ("install", Ok(m)) if m.is_dir() => Ok(()),
                    ("install", _) => Err("root is not a directory".into()),
                    (_, Err(_)) => Ok(()),
                    (_, Ok(_)) => {
                        Err("the root (a symlink) is still there".into())
                    }
                }
            });
        });
    }
    cases.finish();
}

/// Case 4: the lock file and the state marker are symlinks to a sentinel
/// file (or directory): never chmod, truncate or write what they name.
#[test]
fn lock_and_state_symlinks_are_not_followed() {
    let mut cases = Cases::default();
    for name in [".zinstall.lock", ".zinstall.state"] {
        for to_dir in [false, true] {
            for cmd in ["install", "uninstall -F", "uninstall"] {
                let what = format!(
                    "{cmd} with {name} -> sentinel {}",
                    if to_dir { "directory" } else { "file" }
                );
                cases.run(&what.clone(), || {
                    let z = Zone::new();
                    let s = if to_dir {
                        Sentinel::dir(&z.outside("sentinel"))
                    } else {
                        Sentinel::file(&z.outside("sentinel-file"))
                    };
                    if cmd == "install" {
                        fs::create_dir_all(&z.zonepath).unwrap();
                    } else {
                        // An installed zone whose tenant (or anyone with
                        // the zonepath) planted the link afterwards.
                        z.install_ok();
                        let _ = fs::remove_file(z.zonepath.join(name));
                    }
                    let link = z.zonepath.join(name);
                    symlink(&s.path, &link).unwrap();
                    let o = match cmd {
                        "install" => z.install(&[]),
                        "uninstall -F" => z.uninstall(true),
                        _ => z.uninstall(false),
                    };
                    eprintln!("{what}: {}", o.brief());
                    s.assert_unchanged(&format!("{what}\n{}", o.all()));
                    refused_or_harmless(
                        &what,
                        &o,
                        &[link.display().to_string()],
                        || match fs::symlink_metadata(&link) {
                            Ok(m) if m.file_type().is_symlink() => {
                                Err(format!("{name} is still the symlink"))
                            }
                            _ => Ok(()),
                        },
                    );
                });
            }
        }
    }
    cases.finish();
}

/// Installs `z`, makes `root/mnt/host` and returns it.
fn installed_with_mount_point(z: &Zone) -> PathBuf {
    z.install_ok();
    let at = z.root.join("mnt/host");
    fs::create_dir_all(&at).unwrap();
    fs::write(z.root.join("mnt/beside"), b"removable").unwrap();
    at
}

/// Checks what an uninstall did with a mount in the root: the sentinel
/// (what is mounted) is intact, the mount is still there, and the output
/// names it.
fn assert_mount_left(what: &str, o: &Out, m: &Mount, at: &Path, s: &Sentinel) {
    s.assert_unchanged(&format!("{what}\n{}", o.all()));
    assert!(
        m.is_mounted(),
        "{what}: the mount at {} is gone\n{}",
        at.display(),
        o.all()
    );
    assert!(
        o.stdout.contains(at.to_str().unwrap())
            || o.stderr.contains(at.to_str().unwrap()),
        "{what}: the output does not name the mount point {}\n{}",
        at.display(),
        o.all()
    );
}

/// Case 5: a directory of the host bind-mounted into an installed root
/// (same filesystem: only the mount, not the device, tells it apart), and
/// a host file bind-mounted over a file of the root. `uninstall -F` must
/// leave both mounts and all that is in them, and say so.
#[test]
fn uninstall_stops_at_bind_mounts() {
    if !needs_root() {
        return;
    }
    let z = Zone::new();
    let s = Sentinel::dir(&z.outside("sentinel"));
    let sf = Sentinel::file(&z.outside("sentinel-file"));
    let at = installed_with_mount_point(&z);
    let file_at = z.root.join("usr/lib/libc.so.1");
    let m = Mount::bind(&s.path, &at);
    let mf = Mount::bind(&sf.path, &file_at);
    let o = z.uninstall(true);
    sf.assert_unchanged(&format!(
        "uninstall -F over a file bind mount\n{}",
        o.all()
    ));
    assert!(mf.is_mounted(), "the file bind mount is gone\n{}", o.all());
    assert_mount_left("uninstall -F over a bind mount", &o, &m, &at, &s);
}

/// Case 5: another filesystem (a tmpfs) mounted in the root.
#[test]
fn uninstall_stops_at_other_filesystems() {
    if !needs_root() {
        return;
    }
    let z = Zone::new();
    let at = installed_with_mount_point(&z);
    let m = Mount::tmpfs(&at);
    let s = Sentinel::dir(&at.join("data"));
    let o = z.uninstall(true);
    assert_mount_left("uninstall -F over a tmpfs", &o, &m, &at, &s);
}

const DEEP: usize = 3000;

/// Writes `installing` into the zonepath's marker, as a killed install
/// leaves it.
fn mark_interrupted(z: &Zone) {
    fs::write(z.zonepath.join(".zinstall.state"), "installing\n").unwrap();
}

/// Uninstalls with -F and checks that the whole root went.
fn uninstall_all(z: &Zone, what: &str) {
    let o = z.uninstall(true);
    assert!(o.ok(), "{what}: uninstall -F failed\n{}", o.all());
    z.assert_root_removed(what, &o);
}

/// Case 6: a layer 3000 levels deep either installs or fails cleanly, and
/// in both cases uninstall, and the next install's clean-up, remove all
/// of it.
#[test]
fn a_very_deep_layer_is_installed_or_refused_and_always_removable() {
    let z = Zone::new();
    let name = format!("{}leaf", "d/".repeat(DEEP));
    let layer = Layer::new("layer")
        .file(&name, b"deep")
        .write(&z.outside("deep.tar"));
    let o = z.install(&[&layer]);
    eprintln!("a {DEEP}-deep layer: {}", o.brief());
    if o.ok() {
        // Interrupted after that: the next install cleans it.
        reinstall_cleans(&z, "d", &format!("a {DEEP}-deep interrupted root"));
        // Installed and uninstalled straight away.
        let o = z.install(&[&layer]);
        assert!(o.ok(), "second deep install\n{}", o.all());
        uninstall_all(&z, &format!("a {DEEP}-deep installed root"));
    } else {
        assert!(
            o.stderr.contains("root/d/d/d") || o.stderr.contains("deep.tar"),
            "the failure does not name the archive or entry\n{}",
            o.all()
        );
        assert!(
            !o.stderr.contains("partial root remains"),
            "a failed deep install could not remove its partial root\n{}",
            o.all()
        );
        uninstall_all(&z, "after a refused deep layer");
    }
}

/// Case 6: a tenant builds a 3000-deep tree inside an installed root
/// (with mkdirat, as paths could not); uninstall and a reinstall's
/// clean-up must remove it.
#[test]
fn a_tenant_built_deep_tree_is_removed() {
    let z = Zone::new();
    z.install_ok();
    fs::create_dir(z.root.join("home")).unwrap();
    mkdir_deep(&z.root.join("home"), DEEP, "t");
    uninstall_all(&z, &format!("a {DEEP}-deep tenant tree"));
    z.install_ok();
    fs::create_dir(z.root.join("home")).unwrap();
    mkdir_deep(&z.root.join("home"), DEEP, "t");
    reinstall_cleans(
        &z,
        "home",
        &format!("an interrupted root holding a {DEEP}-deep tree"),
    );
}

/// Marks `z` interrupted, reinstalls, checks the clean-up removed
/// `root/leftover`, then uninstalls.
fn reinstall_cleans(z: &Zone, leftover: &str, what: &str) {
    mark_interrupted(z);
    let o = z.install(&[]);
    assert!(o.ok(), "reinstall over {what}\n{}", o.all());
    assert!(
        fs::symlink_metadata(z.root.join(leftover)).is_err(),
        "the reinstall's clean-up over {what} left root/{leftover}\n{}",
        o.all()
    );
    uninstall_all(z, "after the reinstall");
}

/// The exact byte count `zinstall copy --stats` gives (`data: N bytes`;
/// the summary line has them in KiB, MiB...).
fn reported_bytes(o: &Out) -> u64 {
    let line = o
        .stdout
        .lines()
        .find(|l| l.starts_with("data: "))
        .unwrap_or_else(|| panic!("no data line (--stats)\n{}", o.all()));
    let count = line
        .strip_prefix("data: ")
        .and_then(|l| l.split(" bytes").next())
        .unwrap_or_default();
    count
        .parse()
        .unwrap_or_else(|_| panic!("no byte count in {line:?}"))
}

fn copy(src: &Path, dst: &Path, extra: &[&str]) -> Out {
    run(zinstall().arg("copy").args(extra).arg(src).arg(dst))
}

/// Case 7: pseudo-files whose size says 0 (procfs) or 4096 (sysfs) are
/// copied to their end: what `cat` reads, or an error; never an empty or
/// zero-padded file with exit 0.
#[test]
fn pseudo_files_are_copied_to_their_end() {
    let d = tempfile::tempdir().unwrap();
    let thp = Path::new("/sys/kernel/mm/transparent_hugepage");
    let mut files: Vec<PathBuf> = [
        "/proc/version",
        "/proc/sys/kernel/ostype",
        "/proc/sys/kernel/osrelease",
        "/proc/cmdline",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    for f in ["enabled", "defrag", "hpage_pmd_size", "use_zero_page"] {
        files.push(thp.join(f));
    }
    let mut failures = Vec::new();
    let mut tried = 0;
    for (i, src) in files.iter().enumerate() {
        let Ok(want) = fs::read(src) else {
            eprintln!("not tried: {} cannot be read here", src.display());
            continue;
        };
        tried += 1;
        let size = fs::metadata(src).unwrap().len();
        let dst = d.path().join(format!("copy{i}"));
        let o = copy(src, &dst, &["--stats"]);
        if !o.ok() {
            if !o.stderr.contains(src.to_str().unwrap()) {
                failures.push(format!(
                    "{}: failed without naming it\n{}",
                    src.display(),
                    o.all()
                ));
            }
            continue;
        }
        let got = fs::read(&dst).unwrap();
        if got != want {
            failures.push(format!(
                "{} (st_size {size}): exit 0 but the copy holds {} bytes {:?}, \
                 cat gives {} bytes {:?}",
                src.display(),
                got.len(),
                String::from_utf8_lossy(&got[..got.len().min(80)]),
                want.len(),
                String::from_utf8_lossy(&want)
            ));
        }
        let n = reported_bytes(&o);
        if n != got.len() as u64 {
            failures.push(format!(
                "{}: {n} bytes reported, {} written",
                src.display(),
                got.len()
            ));
        }
    }
    assert!(tried >= 3, "too few pseudo-files readable here");
    assert!(
        failures.is_empty(),
        "{} problems:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The byte a file being rewritten holds at `offset`: never 0, so a
/// zero-padded copy shows.
fn pattern(offset: usize) -> u8 {
    (offset % 251) as u8 + 1
}

/// Case 7: a file that a writer keeps truncating and growing again while
/// `zinstall copy` runs. Each copy that exits 0 must be the file as it
/// was at some moment (a prefix of the pattern, no zeros) and its size
/// must be the byte count reported.
#[test]
fn a_file_changing_during_the_copy_is_copied_whole_or_reported() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("changing");
    const MAX: usize = 24 << 20;
    const CHUNK: usize = 256 << 10;
    let data: Vec<u8> = (0..MAX).map(pattern).collect();
    fs::write(&src, &data).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, src) = (Arc::clone(&stop), src.clone());
        std::thread::spawn(move || {
            use std::io::Write;
            let mut f = fs::OpenOptions::new().write(true).open(&src).unwrap();
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) {
                f.set_len(0).unwrap();
                let mut off = 0;
                while off < MAX && !stop.load(Ordering::Relaxed) {
                    use std::os::unix::fs::FileExt;
                    f.write_all_at(&data[off..off + CHUNK], off as u64)
                        .unwrap();
                    off += CHUNK;
                }
                f.flush().unwrap();
                rounds += 1;
            }
            rounds
        })
    };
    let t0 = Instant::now();
    let mut results = Vec::new();
    let mut torn = Vec::new();
    for i in 0..20 {
        if t0.elapsed() > Duration::from_secs(12) {
            break;
        }
        for threads in ["1", "4"] {
            let dst = d.path().join(format!("copy{i}-{threads}"));
            let o = copy(&src, &dst, &["--threads", threads, "--stats"]);
            if !o.ok() {
                results.push("error");
                assert!(
                    o.stderr.contains(src.to_str().unwrap()),
                    "copy {i}: failed without naming the source\n{}",
                    o.all()
                );
                continue;
            }
            results.push("ok");
            let got = fs::read(&dst).unwrap();
            let first_bad = got
                .iter()
                .enumerate()
                .find(|(k, b)| **b != pattern(*k))
                .map(|(k, _)| k);
            let n = reported_bytes(&o);
            if first_bad.is_some() || n != got.len() as u64 {
                torn.push(format!(
                    "copy {i} ({threads} threads): exit 0, {} bytes written, {n} \
                     reported, first byte not from the file: {first_bad:?}",
                    got.len()
                ));
            }
            let _ = fs::remove_file(&dst);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = writer.join().unwrap();
    eprintln!(
        "{} copies ({results:?}); the writer rewrote the file {rounds} times",
        results.len()
    );
    assert!(
        torn.is_empty(),
        "{} of {} copies were torn:\n{}",
        torn.len(),
        results.len(),
        torn.join("\n")
    );
}

/// Case 8: `zinstall copy --merge` into a destination holding symlinks
/// at intermediate levels (and at a leaf) aimed at the sentinel.
#[test]
fn copy_merge_never_writes_through_planted_links() {
    let files = [
        "a/top",
        "a/b/mid",
        "a/b/keep",
        "a/b/c/low",
        "a/b/c/etc/hostname",
    ];
    let mut cases = Cases::default();
    for (level, aim) in [
        ("a", Aim::Absolute),
        ("a/b", Aim::Relative),
        ("a/b/c", Aim::Climbing),
        ("a/b", Aim::Chained),
        ("a/b/c/etc", Aim::Absolute),
        ("a/b/keep", Aim::Absolute),
        ("a/b/keep", Aim::Relative),
    ] {
        let what = format!(
            "copy --merge with {level} a symlink ({aim:?}) to the sentinel"
        );
        cases.run(&what.clone(), || {
            let d = tempfile::tempdir().unwrap();
            let src = d.path().join("src");
            for f in files {
                let p = src.join(f);
                fs::create_dir_all(p.parent().unwrap()).unwrap();
                fs::write(&p, f.as_bytes()).unwrap();
            }
            let s = Sentinel::dir(&d.path().join("sentinel"));
            let dst = d.path().join("dst");
            let rel = Path::new(level);
            let from = dst.join(rel.parent().unwrap());
            fs::create_dir_all(&from).unwrap();
            fs::write(dst.join("unrelated"), b"x").unwrap();
            let target = if level.ends_with("keep") {
                s.path.join("keep")
            } else {
                s.path.clone()
            };
            let link = dst.join(rel);
            match aim {
                Aim::Absolute => symlink(&target, &link).unwrap(),
                Aim::Relative => {
                    symlink(relative(&from, &target), &link).unwrap()
                }
                Aim::Climbing => symlink(climbing(&target), &link).unwrap(),
                Aim::Chained => {
                    symlink(relative(&from, &target), from.join(".hop"))
                        .unwrap();
                    symlink(".hop", &link).unwrap();
                }
            }
            let o = copy(&src, &dst, &["--merge"]);
            eprintln!("{what}: {}", o.brief());
            s.assert_unchanged(&format!("{what}\n{}", o.all()));
            refused_or_harmless(
                &what,
                &o,
                &[link.display().to_string()],
                || {
                    files.iter().try_for_each(|f| {
                        file_beneath(&dst, Path::new(f), f.as_bytes())
                    })
                },
            );
        });
    }
    cases.finish();
}

/// The sentinel helper itself notices what the tests rely on it to.
#[test]
fn the_sentinel_notices_every_kind_of_change() {
    let d = tempfile::tempdir().unwrap();
    type Change = (&'static str, fn(&Path));
    let changes: [Change; 6] = [
        ("content", |p| fs::write(p.join("keep"), b"x").unwrap()),
        ("mode", |p| {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(p, fs::Permissions::from_mode(0o700)).unwrap()
        }),
        ("new name", |p| fs::write(p.join("new"), b"").unwrap()),
        ("removal", |p| fs::remove_file(p.join("sub/inner")).unwrap()),
        ("hard link", |p| {
            fs::hard_link(p.join("keep"), p.join("../elsewhere")).unwrap()
        }),
        ("same content rewritten", |p| {
            fs::write(p.join("keep"), sentinel::CONTENT).unwrap()
        }),
    ];
    for (i, (what, change)) in changes.iter().enumerate() {
        let s = Sentinel::dir(&d.path().join(format!("s{i}/s")));
        assert!(s.changes().is_empty(), "{what}: changed before anything");
        // mtimes are whole seconds plus a fixed fraction; any write now
        // gives another.
        change(&s.path);
        assert!(!s.changes().is_empty(), "{what} went unnoticed");
    }
}
