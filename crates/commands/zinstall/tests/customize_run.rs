//! `zinstall provision --run SCRIPT` and `--run-command CMD` in directory
//! guests, as virt-customize(1) runs them: inside each guest, with its
//! own `/proc`, `/dev` and PIDs, no network, `/sys` read-only, a fixed
//! environment; output in a log per guest; a failure or a timeout fails
//! the guest, naming it; the cache and the host untouched.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use zinstall_testkit::run::{s, text};
use zinstall_testkit::tmp::Tmp;
use zinstall_testkit::tools;

fn zinstall(args: &[&str]) -> Output {
    zinstall_testkit::run::output(env!("CARGO_BIN_EXE_zinstall"), args)
}

const BUSYBOX: &str = "/bin/busybox";

/// Whether this test can run: as root (namespaces and mounts), with a
/// static busybox to make a guest's shell from.
pub(crate) fn prerequisites() -> bool {
    zinstall_testkit::require_root()
        && zinstall_testkit::require(
            Path::new(BUSYBOX).exists(),
            "/bin/busybox (apt-get install busybox-static)",
        )
}

/// A small merged-/usr root (`/bin` a symlink to `usr/bin`) whose shell
/// and tools are this host's static busybox, with the directories a
/// command's mounts go on, as a tar; and the tree it was made from.
pub(crate) fn image(dir: &Path) -> (PathBuf, PathBuf) {
    let r = dir.join("root");
    for d in ["usr/bin", "etc", "proc", "sys", "dev", "tmp", "root"] {
        fs::create_dir_all(r.join(d)).unwrap();
    }
    symlink("usr/bin", r.join("bin")).unwrap();
    fs::copy(BUSYBOX, r.join("usr/bin/busybox")).unwrap();
    for tool in [
        "sh", "echo", "id", "ls", "cat", "sleep", "test", "touch", "env",
        "grep", "hostname",
    ] {
        symlink("busybox", r.join("usr/bin").join(tool)).unwrap();
    }
    fs::write(r.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    fs::write(r.join("tmp/from-image"), "").unwrap();
    let tar = dir.join("root.tar");
    let o = tools::tool("tar")
        .args(["-C", s(&r), "--numeric-owner", "-cf", s(&tar), "."])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    (tar, r)
}

/// Every entry under `dir`: path, bytes or link target, mode.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>, u32)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let md = fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(dir).unwrap().to_path_buf();
            if md.file_type().is_symlink() {
                let t = fs::read_link(&p).unwrap();
                out.push((rel, t.into_os_string().into_encoded_bytes(), 0));
            } else if md.is_dir() {
                todo.push(p);
                out.push((rel, Vec::new(), md.mode()));
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
        panic!("{v}");
    }))
}

/// The mount points of this (the host's) mount namespace under `dir`.
fn mounts_under(dir: &Path) -> Vec<String> {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|m| m.starts_with(s(dir)))
        .collect()
}

fn read(p: impl AsRef<Path>) -> String {
    let p = p.as_ref();
    fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The image's own programs run the commands, and an image may be
/// hostile: they run as root without the capabilities that reach past
/// the guest (no device nodes, no mounts, no modules), with the kernel's
/// sysctls read-only.
#[test]
fn commands_run_without_the_capabilities_that_reach_the_host() {
    if !prerequisites() {
        return;
    }
    let d = Tmp::new();
    let (tar, _) = image(d.path());
    let out = d.path().join("out");
    let cmd = "grep CapBnd /proc/self/status > /etc/capbnd; \
         if busybox mknod /tmp/disk b 8 0 2>/etc/mknod.err; \
         then echo made; else echo refused; fi > /etc/mknod; \
         if busybox mount -t tmpfs none /root 2>/etc/mount.err; \
         then echo mounted; else echo refused; fi > /etc/mount; \
         if echo 1 2>/etc/sysctl.err > /proc/sys/kernel/sysrq; \
         then echo written; else echo refused; fi > /etc/sysctl";
    let o = zinstall(&[
        "provision",
        s(&tar),
        "--keep-identity",
        "--cache",
        s(&d.path().join("cache")),
        "--out",
        s(&out),
        "--run-command",
        cmd,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let g = out.join("guest-0");
    // CHOWN, DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER, FSETID, KILL, SETGID,
    // SETUID, SETPCAP, NET_BIND_SERVICE, SYS_CHROOT, AUDIT_WRITE, SETFCAP.
    let want: u64 = [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 18, 29, 31]
        .iter()
        .map(|c| 1u64 << c)
        .sum();
    let bnd = read(g.join("etc/capbnd"));
    let got = u64::from_str_radix(bnd.split_whitespace().nth(1).unwrap(), 16)
        .unwrap_or_else(|e| panic!("{bnd:?}: {e}"));
    assert_eq!(got, want, "CapBnd {got:#x}, kept {want:#x}");
    for (f, err) in
        [("mknod", "mknod"), ("mount", "mount"), ("sysctl", "sysctl")]
    {
        let said = read(g.join(format!("etc/{f}")));
        let why = read(g.join(format!("etc/{err}.err")));
        assert_eq!(said, "refused\n", "{f}: {why}");
    }
    assert!(!g.join("tmp/disk").exists());
}

/// What each guest's command saw: its number, root's uid, itself as PID
/// 1 with a /proc of its own, no network but a loopback, /sys read-only,
/// a /dev of the usual nodes, a /tmp of its own, the fixed environment;
/// commands and scripts in the order given; each guest's log; the cache
/// entry, the host's files and its mount table as they were.
#[test]
fn commands_run_inside_each_guest_in_namespaces_of_their_own() {
    if !prerequisites() {
        return;
    }
    let d = Tmp::new();
    let (tar, tree) = image(d.path());
    let cache = d.path().join("cache");
    let out = d.path().join("out");
    let script = d.path().join("setup.sh");
    fs::write(
        &script,
        "echo script output\necho b >> /etc/order\nls /tmp > /etc/tmp-seen\n",
    )
    .unwrap();
    let host_marker = "/etc/zinstall-run-test-ran";
    let cmd = format!(
        "echo {{n}} > {host_marker}; id -u > /etc/uid; echo $$ > /etc/pid; \
         ls /proc/1/ > /etc/pid1; cat /proc/net/dev > /etc/net; \
         if touch /sys/probe 2>/etc/sys.err; then echo writable; \
         else echo read-only; fi > /etc/sys; ls /dev > /etc/dev; \
         env > /etc/env; hostname zinstall-run-test; echo a >> /etc/order"
    );
    let o = zinstall(&[
        "provision",
        s(&tar),
        "--count",
        "2",
        "--json",
        "--keep-identity",
        "--cache",
        s(&cache),
        "--out",
        s(&out),
        "--run-command",
        &cmd,
        "--run",
        s(&script),
        "--run-command",
        "echo c >> /etc/order",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let entry = payload(&o);
    let reply: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for n in 0..2 {
        let g = out.join(format!("guest-{n}"));
        let log_at = out.join(format!("guest-{n}.run.log"));
        let told = &reply["result"]["guests"][n];
        assert_eq!(told["run_log"], s(&log_at), "{told}");
        assert_eq!(read(g.join(&host_marker[1..])), format!("{n}\n"));
        assert_eq!(read(g.join("etc/uid")), "0\n");
        assert_eq!(read(g.join("etc/pid")), "1\n", "not PID 1 of its own");
        assert!(read(g.join("etc/pid1")).contains("status"));
        let net = read(g.join("etc/net"));
        let ifaces: Vec<&str> = net
            .lines()
            .skip(2)
            .filter_map(|l| l.split(':').next())
            .map(str::trim)
            .collect();
        assert_eq!(ifaces, ["lo"], "{net}");
        assert_eq!(read(g.join("etc/sys")), "read-only\n");
        assert!(read(g.join("etc/sys.err")).contains("Read-only"));
        let dev = read(g.join("etc/dev"));
        for node in ["null", "zero", "full", "random", "urandom", "tty"] {
            assert!(dev.lines().any(|l| l == node), "no /dev/{node}: {dev}");
        }
        let env = read(g.join("etc/env"));
        for v in ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C"]
        {
            assert!(env.lines().any(|l| l == v), "{v} not in {env}");
        }
        assert!(!env.contains("TERM="), "{env}");
        assert!(!env.contains("CARGO"), "the caller's environment: {env}");
        // The script ran between the two commands, as given, with a /tmp
        // of its own: the image's /tmp is not what it saw.
        assert_eq!(read(g.join("etc/order")), "a\nb\nc\n");
        assert_eq!(read(g.join("etc/tmp-seen")), "");
        assert!(g.join("tmp/from-image").exists());
        let log = read(&log_at);
        assert!(log.contains("## --run-command"), "{log}");
        assert!(log.contains("script output"), "{log}");
        assert!(log.contains("exited with status 0"), "{log}");
    }
    assert!(!Path::new(host_marker).exists(), "ran on the host");
    assert_ne!(
        zinstall_testkit::run::output("hostname", &[]).stdout,
        b"zinstall-run-test\n",
        "the host's name changed"
    );
    assert_eq!(snapshot(&entry), snapshot(&tree), "the cache entry changed");
    assert_eq!(
        mounts_under(d.path()),
        Vec::<String>::new(),
        "mounts leaked"
    );
}

/// A command that exits non-zero (given by a --customize file) fails
/// its guest: the error names the guest, the command, its status and the
/// log, which holds what it printed; no guest is left, the cache entry
/// is unchanged.
#[test]
fn a_failing_command_fails_its_guest_and_names_it() {
    if !prerequisites() {
        return;
    }
    let d = Tmp::new();
    let (tar, tree) = image(d.path());
    let out = d.path().join("out");
    let file = d.path().join("fleet.customize");
    fs::write(
        &file,
        "# guest 1 fails\nrun-command test {n} = 0 || { echo failing {n}; \
         exit 3; }\n",
    )
    .unwrap();
    let o = zinstall(&[
        "provision",
        s(&tar),
        "--count",
        "2",
        "--keep-identity",
        "--cache",
        s(&d.path().join("cache")),
        "--out",
        s(&out),
        "--customize",
        s(&file),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = text(&o);
    let guest = out.join("guest-1");
    let log = out.join("guest-1.run.log");
    assert!(e.contains(&format!("guest {}", guest.display())), "{e}");
    assert!(e.contains("--run-command \"test 1 = 0"), "{e}");
    assert!(e.contains("exited with status 3"), "{e}");
    assert!(e.contains(s(&log)), "{e}");
    assert!(read(&log).contains("failing 1"));
    assert!(!guest.exists() && !out.join("guest-0").exists());
    let entries = d.path().join("cache/entries");
    let entry = fs::read_dir(&entries)
        .unwrap()
        .map(|e| e.unwrap().path().join("tree"))
        .find(|t| t.is_dir())
        .unwrap_or_else(|| panic!("no entry in {}", entries.display()));
    assert_eq!(snapshot(&entry), snapshot(&tree));
}

/// A command past --run-timeout is killed, with what it started in the
/// background, within a few seconds; the guest is named.
#[test]
fn a_command_past_its_timeout_is_killed_with_its_processes() {
    if !prerequisites() {
        return;
    }
    let d = Tmp::new();
    let (tar, _) = image(d.path());
    let out = d.path().join("out");
    let t0 = Instant::now();
    let o = zinstall(&[
        "provision",
        s(&tar),
        "--keep-identity",
        "--cache",
        s(&d.path().join("cache")),
        "--out",
        s(&out),
        "--run-timeout",
        "2",
        "--run-command",
        "sleep 3131 & sleep 3131",
    ]);
    let took = t0.elapsed();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(took < Duration::from_secs(20), "took {took:?}");
    let e = text(&o);
    assert!(e.contains(s(&out.join("guest-0"))), "{e}");
    assert!(e.contains("--run-timeout (2 s)"), "{e}");
    let left: Vec<String> = fs::read_dir("/proc")
        .unwrap()
        .filter_map(|p| fs::read(p.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains("3131"))
        .collect();
    assert!(left.is_empty(), "left running: {left:?}");
}

/// Bad input is refused before any guest is made: a --run script that
/// is missing or not a file, an image without /bin/sh, a --run for a
/// disk image (a disk guest's seed takes commands, not scripts).
#[test]
fn bad_run_input_is_refused_before_any_guest() {
    let d = Tmp::new();
    let root = d.path().join("noshell");
    fs::create_dir_all(root.join("etc")).unwrap();
    fs::write(root.join("etc/hostname"), "x\n").unwrap();
    let tar = d.path().join("noshell.tar");
    let o = tools::tool("tar")
        .args(["-C", s(&root), "-cf", s(&tar), "."])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let disk = d.path().join("disk.raw");
    fs::write(&disk, vec![0x5au8; 1 << 20]).unwrap();
    let script = d.path().join("ok.sh");
    fs::write(&script, "true\n").unwrap();
    let missing = d.path().join("missing.sh");
    let cases: [(&Path, [&str; 2], &str); 4] = [
        (&tar, ["--run", s(&missing)], "give a script on this host"),
        (&tar, ["--run", s(d.path())], "not a regular file"),
        (&tar, ["--run-command", "true"], "the image has no /bin/sh"),
        (&disk, ["--run", s(&script)], "--run:"),
    ];
    let cache = d.path().join("cache");
    for (image, flags, says) in cases {
        let out = d.path().join("out");
        let mut args = vec![
            "provision",
            s(image),
            "--keep-identity",
            "--cache",
            s(&cache),
            "--out",
            s(&out),
        ];
        args.extend(flags);
        let o = zinstall(&args);
        assert!(!o.status.success(), "{flags:?}: {}", text(&o));
        assert!(text(&o).contains(says), "{flags:?}: {}", text(&o));
        assert!(!out.exists(), "{flags:?} made {out:?}");
    }
}

/// The processes under /proc whose command line holds `mark`.
fn running(mark: &str) -> Vec<String> {
    fs::read_dir("/proc")
        .unwrap()
        .filter_map(|p| fs::read(p.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(mark))
        .collect()
}

/// A provision stopped (SIGTERM, as zinstalld's cancel stops a job) while
/// a guest's command runs kills the command with every process it
/// started at once, not at --run-timeout, and removes the guests.
#[test]
fn a_cancelled_provision_kills_the_command_it_runs() {
    if !prerequisites() {
        return;
    }
    let d = Tmp::new();
    let (tar, _) = image(d.path());
    let out = d.path().join("out");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .args([
            "provision",
            s(&tar),
            "--keep-identity",
            "--count",
            "2",
            "--cache",
            s(&d.path().join("cache")),
            "--out",
            s(&out),
            "--run-timeout",
            "30",
            "--run-command",
            "sleep 4242 & sleep 4242",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while running("sleep 4242").len() < 2 {
        assert!(t0.elapsed() < Duration::from_secs(120), "never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let stopped = Instant::now();
    // SAFETY: a signal to our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let o = child.wait_with_output().unwrap();
    let took = stopped.elapsed();
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        took < Duration::from_secs(10),
        "took {took:?}: {}",
        text(&o)
    );
    assert!(running("sleep 4242").is_empty(), "left running");
    let left: Vec<_> = fs::read_dir(&out)
        .map(|r| r.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    // The guest's log stays, saying why its command ended; no guest does.
    assert!(
        left.iter()
            .all(|n| n.to_string_lossy().ends_with(".run.log")),
        "guests left: {left:?}"
    );
    let log = fs::read_to_string(out.join("guest-0.run.log")).unwrap();
    assert!(log.contains("the run was cancelled"), "{log}");
}
