//! zinstalld as an attacker meets it: a real daemon on a real socket,
//! clients as unprivileged uids (`setpriv`), and a registry on the
//! loopback answering as the test says. A caller gets nothing it could
//! not take itself (capabilities, trusted attributes, paths outside its
//! grant, a zonepath another user planted), and no client or registry
//! holds the daemon: dripping clients, dripping or silent registries,
//! blobs that claim a terabyte, partial downloads poisoned by another
//! registry.

use zinstall_testkit::tools;

use crate::oci::support;

pub(crate) mod harness;

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use zinstall_testkit::run::s;

use serde_json::json;

use harness::*;

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
}

/// An extended attribute of `p` (not followed), if it has it.
fn xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let o = tools::tool("getfattr")
        .args(["-h", "--only-values", "-n", name])
        .arg(p)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    o.status.success().then_some(o.stdout)
}

fn grant(prefix: &Path) -> String {
    format!(
        "[[grant]]\nusers = [{CALLER}, {OTHER}]\noperations = [\"copy\", \"jobs\", \
         \"status\", \"cancel\"]\nprefixes = [\"{}\"]\n",
        prefix.display()
    )
}

/// A capability-bearing binary, a trusted.* file and a setuid-root file,
/// all world-readable, copied by a caller through its grant: the copy is
/// the caller's with none of them, as `cp -a` run by the caller would
/// end; root's own copy keeps everything.
#[test]
fn a_granted_copy_takes_no_privilege_from_the_daemon() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let g = Granted::new();
    let (d, prefix) = (&g.d, &g.prefix);
    let src = prefix.join("src");
    fs::create_dir_all(&src).unwrap();
    let bin = src.join("tool");
    fs::copy("/bin/true", &bin).unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    let o = tools::tool("setcap")
        .args(["cap_sys_admin,cap_setuid+ep"])
        .arg(&bin)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let trusted = src.join("trusted");
    fs::write(&trusted, "t").unwrap();
    let o = tools::tool("setfattr")
        .args(["-n", "trusted.zinstall", "-v", "secret"])
        .arg(&trusted)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let suid = src.join("suid");
    fs::copy("/bin/true", &suid).unwrap();
    fs::set_permissions(&suid, fs::Permissions::from_mode(0o4755)).unwrap();
    assert!(xattr(&bin, "security.capability").is_some());

    let mine = prefix.join("mine");
    fs::create_dir(&mine).unwrap();
    chown(&mine, CALLER);
    let dst = mine.join("copy");
    let o = d.zinstall_as(CALLER, &["copy", s(&src), s(&dst)]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for f in ["tool", "trusted", "suid"] {
        let md = fs::symlink_metadata(dst.join(f)).unwrap();
        assert_eq!(md.uid(), CALLER, "{f} is not the caller's");
    }
    assert_eq!(
        xattr(&dst.join("tool"), "security.capability"),
        None,
        "the caller got a binary with file capabilities: {out}"
    );
    assert_eq!(
        xattr(&dst.join("trusted"), "trusted.zinstall"),
        None,
        "{out}"
    );
    let mode = fs::metadata(dst.join("suid")).unwrap().mode();
    assert_eq!(mode & 0o7777, 0o755, "a set-id bit of root's kept: {out}");
    // trusted.* is not even listed to a caller without CAP_SYS_ADMIN, as
    // with `cp -a` by that user: gone without a word.
    for notice in ["security.capability", "setuid/setgid"] {
        assert!(out.contains(notice), "no notice of {notice}: {out}");
    }
    // Root's copy keeps everything.
    let o = d.zinstall(&["copy", s(&src), s(&d.path("rootcopy"))]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(xattr(&d.path("rootcopy/tool"), "security.capability").is_some());
    assert_eq!(
        xattr(&d.path("rootcopy/trusted"), "trusted.zinstall").as_deref(),
        Some(&b"secret"[..])
    );
    assert_eq!(
        fs::metadata(d.path("rootcopy/suid")).unwrap().mode() & 0o7777,
        0o4755
    );
}

/// A prefix, a directory the caller owns outside it, and a daemon
/// granting the caller copies under the prefix.
struct Granted {
    d: Daemon,
    prefix: PathBuf,
    outside: PathBuf,
    base: tempfile::TempDir,
}

impl Granted {
    fn new() -> Granted {
        let base = tempfile::Builder::new()
            .prefix("zinstall-grant")
            .tempdir_in("/var/tmp")
            .unwrap();
        fs::set_permissions(base.path(), fs::Permissions::from_mode(0o755))
            .unwrap();
        let prefix = base.path().join("grant");
        let d = Daemon::start(&grant(&prefix));
        let outside = base.path().join("outside");
        for p in [&prefix, &outside] {
            fs::create_dir_all(p).unwrap();
            chown(p, CALLER);
        }
        fs::write(prefix.join("file"), "in the prefix").unwrap();
        fs::create_dir(prefix.join("tree")).unwrap();
        fs::write(prefix.join("tree/f"), "f").unwrap();
        chown(&prefix.join("tree"), CALLER);
        Granted {
            d,
            prefix,
            outside,
            base,
        }
    }

    fn copy(&self, src: &Path, dst: &Path) -> std::process::Output {
        self.d.zinstall_as(CALLER, &["copy", s(src), s(dst)])
    }

    fn outside_untouched(&self, what: &str) {
        let left = files_in(&self.outside);
        assert!(
            left.iter().all(|f| f == "planted"),
            "{what}: written outside the prefix: {left:?}"
        );
    }
}

/// Symlinks at, above and below the prefix, as source and destination:
/// every one is refused naming it, and nothing is written outside.
#[test]
fn granted_paths_are_resolved_beneath_the_prefix() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let g = Granted::new();
    let p = &g.prefix;
    fs::write(g.outside.join("planted"), "outside").unwrap();
    chown(&g.outside.join("planted"), CALLER);
    // At: the destination itself a link out. Above: a link to the
    // prefix's parent. Below: a link to a directory inside the prefix
    // (followed neither: no symlink is).
    symlink(&g.outside, p.join("out")).unwrap();
    symlink("..", p.join("up")).unwrap();
    fs::create_dir(p.join("real")).unwrap();
    chown(&p.join("real"), CALLER);
    symlink("real", p.join("in")).unwrap();
    for (src, dst, met) in [
        (p.join("tree"), p.join("out"), "out"),
        (p.join("file"), p.join("out/x"), "out"),
        (p.join("tree"), p.join("up/outside/x"), "up"),
        (p.join("tree"), p.join("in/x"), "in"),
        (p.join("out/planted"), p.join("stolen"), "out"),
        (p.join("up/outside/planted"), p.join("stolen"), "up"),
    ] {
        let o = g.copy(&src, &dst);
        let out = text(&o);
        assert!(!o.status.success(), "{} -> {}: {out}", s(&src), s(&dst));
        assert!(
            out.contains(&format!("{}/{met}", s(p))) && out.contains("symlink"),
            "{} -> {}: {out}",
            s(&src),
            s(&dst)
        );
        g.outside_untouched(&format!("{} -> {}", s(&src), s(&dst)));
        assert!(!p.join("stolen").exists());
    }
    // A prefix that is itself a symlink is not followed either.
    let linked = g.base.path().join("linked");
    let d2 = Daemon::start(&grant(&linked));
    symlink(&g.outside, &linked).unwrap();
    let o = d2.zinstall_as(
        CALLER,
        &["copy", s(&p.join("tree")), s(&linked.join("x"))],
    );
    assert!(!o.status.success(), "{}", text(&o));
    g.outside_untouched("a linked prefix");
    // What stays inside works, and reports the paths it used.
    let o = g.copy(&p.join("tree"), &p.join("real/copy"));
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(fs::read(p.join("real/copy/f")).unwrap(), b"f");
}

/// The destination swapped for a symlink to outside the prefix over and
/// over while copies run: some copies meet the link and are refused,
/// none writes through it.
#[test]
fn a_destination_swapped_for_a_symlink_never_leads_outside() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let g = Granted::new();
    let src = g.prefix.join("tree");
    for i in 0..20 {
        fs::write(src.join(format!("g{i}")), "x").unwrap();
    }
    let dst = g.prefix.join("dst");
    let aside = g.prefix.join("aside");
    fs::create_dir(&aside).unwrap();
    let link = g.prefix.join("link");
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let swapper = {
        let (stop, swaps) = (stop.clone(), swaps.clone());
        let (dst, aside, link, outside) =
            (dst.clone(), aside.clone(), link.clone(), g.outside.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // A copy's directory goes aside (still inside the
                // prefix); a link to outside takes its place, briefly.
                if fs::symlink_metadata(&dst).is_ok_and(|m| m.is_dir()) {
                    let _ = fs::rename(&dst, aside.join(n.to_string()));
                    n += 1;
                }
                let _ = fs::remove_file(&link);
                if symlink(&outside, &link).is_ok()
                    && fs::rename(&link, &dst).is_ok()
                {
                    swaps.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_micros(200));
                    if fs::symlink_metadata(&dst)
                        .is_ok_and(|m| m.file_type().is_symlink())
                    {
                        let _ = fs::remove_file(&dst);
                    }
                }
            }
        })
    };
    let (mut refused, mut done) = (0, 0);
    let t0 = Instant::now();
    while (swaps.load(Ordering::Relaxed) < 2000 || refused < 3)
        && t0.elapsed() < Duration::from_secs(60)
    {
        let o = g.copy(&src, &dst);
        if o.status.success() {
            done += 1;
        } else if text(&o).contains("symlink") {
            refused += 1;
        }
        g.outside_untouched("a swapped destination");
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    g.outside_untouched("a swapped destination");
    let swaps = swaps.load(Ordering::Relaxed);
    assert!(
        swaps >= 2000 && refused >= 3,
        "the race was not exercised: {swaps} swaps, {refused} copies met \
         the link, {done} done"
    );
}

/// A zonepath that is a symlink, or that sits in a sticky world-writable
/// directory owned by another user, is refused by the CLI, the brand hook
/// and the daemon, and its target is left as it was.
#[test]
fn zonepaths_that_could_be_redirected_are_refused() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Daemon::start("");
    let target = d.path("target");
    fs::create_dir(&target).unwrap();
    fs::set_permissions(&target, fs::Permissions::from_mode(0o755)).unwrap();
    let tmp = d.path("tmp");
    fs::create_dir(&tmp).unwrap();
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o1777)).unwrap();
    // Planted by another user in a /tmp-like directory: a link, and a
    // directory of its own.
    let link = tmp.join("zlink");
    symlink(&target, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(CALLER), Some(CALLER)).unwrap();
    let theirs = tmp.join("ztheirs");
    fs::create_dir(&theirs).unwrap();
    chown(&theirs, CALLER);
    let profile = support::bare_profile(d.dir.path());
    let untouched = |what: &str| {
        for dir in [&target, &theirs] {
            let md = fs::metadata(dir).unwrap();
            assert_eq!(md.mode() & 0o7777, 0o755, "{what}: {}", s(dir));
            assert!(
                fs::read_dir(dir).unwrap().next().is_none(),
                "{what}: {} was written into",
                s(dir)
            );
        }
    };
    fs::set_permissions(&theirs, fs::Permissions::from_mode(0o755)).unwrap();
    for z in [&link, &theirs] {
        let o = support::zinstall(&[
            "install",
            "--zonepath",
            s(z),
            "--profile",
            s(&profile),
        ]);
        let out = text(&o);
        assert!(!o.status.success(), "{out}");
        assert!(out.contains(s(z)) && out.contains("unsafe path"), "{out}");
        untouched("zinstall install");
        let o = Command::new(env!("CARGO_BIN_EXE_brand"))
            .env("ZINSTALL_PROFILE", &profile)
            .args(["-z", "z1", "-R", s(z), "install"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(255), "{}", text(&o));
        assert!(text(&o).contains("unsafe path"), "{}", text(&o));
        untouched("the brand hook");
        let mut c = d.connect();
        c.send(&json!({"v": 1, "op": "install", "args": {
            "zonepath": z, "profile": profile}}));
        let r = c.end();
        assert_eq!(r["reply"], "error", "{r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("unsafe path"),
            "{r}"
        );
        untouched("zinstalld");
    }
    // Made by root in the sticky directory, a zonepath is fine.
    let ok = tmp.join("zroot");
    let o = support::zinstall(&[
        "install",
        "--zonepath",
        s(&ok),
        "--profile",
        s(&profile),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(fs::metadata(&ok).unwrap().mode() & 0o7777, 0o700);
}

/// Python that connects `n` times to the socket and sends a byte on each
/// every 200 ms, for `secs` seconds; prints how many connections the
/// daemon answered "busy".
const DRIPPER: &str = r#"
import socket, sys, time
path, n, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
conns, busy = [], 0
for _ in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.setblocking(False)
    conns.append(s)
print("connected", flush=True)
end = time.time() + secs
while time.time() < end:
    for s in list(conns):
        try:
            data = s.recv(4096)
            if b"busy" in data:
                busy += 1
            conns.remove(s)
            continue
        except BlockingIOError:
            pass
        try:
            s.send(b" ")
        except OSError:
            conns.remove(s)
    time.sleep(0.2)
print("busy", busy, flush=True)
"#;

/// Python asking for `version` once; prints the seconds it took.
const ASKER: &str = r#"
import socket, sys, time
t = time.time()
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall(b'{"v":1,"op":"version"}\n')
reply = s.makefile().readline()
print(round(time.time() - t, 3), reply.strip(), flush=True)
"#;

/// The system's Python, which other uids may run (a per-user one in
/// root's home may not be).
fn python() -> &'static str {
    let system = "/usr/bin/python3";
    if Path::new(system).exists() {
        system
    } else {
        assert!(tools::have("python3"), "python3 is not installed");
        "python3"
    }
}

/// Forty connections from one uid dripping a byte at a time: the daemon
/// keeps them to the per-uid limit (the rest told it is busy) and drops
/// each at its request deadline; root and another uid are answered at
/// once all along.
#[test]
fn dripping_clients_of_one_uid_keep_no_one_else_out() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Daemon::start(
        "max_connections = 16\nmax_connections_per_uid = 4\nio_timeout_secs = 3\n",
    );
    let mut dripper = as_uid(CALLER)
        .args([python(), "-c", DRIPPER, s(&d.socket), "40", "6"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(dripper.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line.trim(), "connected");
    for round in 0..4 {
        for who in [0, OTHER] {
            let mut c = if who == 0 {
                Command::new(python())
            } else {
                let mut c = as_uid(who);
                c.arg(python());
                c
            };
            let o = c.args(["-c", ASKER, s(&d.socket)]).output().unwrap();
            let said = String::from_utf8_lossy(&o.stdout).into_owned();
            let secs: f64 = said
                .split_whitespace()
                .next()
                .and_then(|x| x.parse().ok())
                .unwrap_or(f64::MAX);
            assert!(
                said.contains("\"reply\":\"ok\"") && secs < 2.0,
                "round {round}, uid {who}: {said} {}",
                d.log()
            );
        }
        std::thread::sleep(Duration::from_millis(800));
    }
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(dripper.wait().unwrap().success());
    let busy: usize = rest
        .trim()
        .strip_prefix("busy ")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(busy >= 36 - 4, "only {busy} of 40 told busy: {rest}");
    // The CLI shows a busy daemon as busy, not as a broken pipe.
    let hold: Vec<_> = (0..4)
        .map(|_| {
            as_uid(OTHER)
                .args([python(), "-c", DRIPPER, s(&d.socket), "1", "4"])
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let o = d.zinstall_as(OTHER, &["jobs"]);
    for mut h in hold {
        let _ = h.wait();
    }
    assert!(
        text(&o).contains("zinstalld: busy")
            && !text(&o).contains("Broken pipe"),
        "{}",
        text(&o)
    );
}

/// The stored units, for what the daemon needs of them.
fn unit_families() -> BTreeSet<String> {
    let unit = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../etc/systemd/zinstalld.service"),
    )
    .unwrap();
    unit.lines()
        .filter_map(|l| l.strip_prefix("RestrictAddressFamilies="))
        .flat_map(|v| v.split_whitespace().map(str::to_string))
        .collect()
}

/// The daemon pulls an image from a registry on the loopback while
/// strace records every socket it opens: the pull works, and each
/// address family it used is one zinstalld.service allows.
#[test]
fn a_pull_through_the_daemon_uses_only_families_the_unit_allows() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let lay = tempfile::tempdir().unwrap();
    image(lay.path(), 100_000, &|_, _| {});
    let reg = FakeRegistry::serve(lay.path());
    let trace = tempfile::NamedTempFile::new().unwrap();
    let mut d = Daemon::start_with(
        "",
        &[
            "strace",
            "-f",
            "-qq",
            "-e",
            "trace=socket",
            "-o",
            s(trace.path()),
        ],
    );
    let out = d.path("guests");
    let o = d.zinstall(&["provision", &reg.reference(), "--out", s(&out)]);
    let log = d.log();
    stop_traced(&mut d);
    assert!(o.status.success(), "{}\n{log}", text(&o));
    assert_eq!(
        fs::read(out.join("guest-0/etc/os-release")).unwrap(),
        b"ID=test\n"
    );
    let used: BTreeSet<String> = fs::read_to_string(trace.path())
        .unwrap()
        .lines()
        .filter_map(|l| l.split("socket(").nth(1))
        .filter_map(|rest| rest.split(',').next())
        .map(str::to_string)
        .collect();
    let allowed = unit_families();
    assert!(used.contains("AF_INET"), "no pull was traced: {used:?}");
    assert!(
        used.is_subset(&allowed),
        "zinstalld used {used:?}; the unit allows {allowed:?}"
    );
    // Registries on IPv6 too.
    assert!(allowed.contains("AF_INET6"), "{allowed:?}");
}

/// Stops a daemon started under strace: SIGTERM to the traced daemon
/// (strace's child), then strace exits with it.
fn stop_traced(d: &mut Daemon) {
    let strace = d.child.id();
    let children =
        fs::read_to_string(format!("/proc/{strace}/task/{strace}/children"))
            .unwrap_or_default();
    for pid in children.split_whitespace().filter_map(|p| p.parse().ok()) {
        d.signal(pid, libc::SIGTERM);
    }
    let t0 = Instant::now();
    while d.child.try_wait().unwrap().is_none() {
        assert!(t0.elapsed() < Duration::from_secs(20), "{}", d.log());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Root's provision of an image whose layer drips, cancelled: the job
/// ends within seconds, leaving no blob and no cache entry, only what a
/// later pull may resume. Then a registry that sends nothing at all, and
/// SIGTERM: the daemon cancels the pull and exits 0 promptly.
#[test]
fn a_dripping_or_silent_registry_is_cancelled_and_stopped_promptly() {
    let lay = tempfile::tempdir().unwrap();
    let (layer, bytes) = image(lay.path(), 200_000, &|_, _| {});
    let reg = FakeRegistry::serve(lay.path());
    reg.set(&layer, Serve::Drip(bytes.clone()));
    let mut d = Daemon::start("");
    let mut c = d.connect();
    c.send(&json!({"v": 1, "op": "provision", "args": {
        "image": reg.reference(), "out": d.path("g")}}));
    let job = c.reply().unwrap()["job"].as_u64().unwrap();
    reg.wait_for(&layer);
    std::thread::sleep(Duration::from_millis(500));
    let t0 = Instant::now();
    let o = d.zinstall(&["cancel", &job.to_string()]);
    assert!(o.status.success(), "{}", text(&o));
    let r = c.end();
    let took = t0.elapsed();
    assert_eq!(r["error"]["kind"], "cancelled", "{r}");
    assert!(took < Duration::from_secs(3), "cancel took {took:?}");
    let store = d.path("cache/oci");
    let hex = layer.trim_start_matches("sha256:");
    assert!(!store.join("blobs/sha256").join(hex).exists());
    let partial = files_in(&store.join("partial"));
    assert!(
        partial
            .iter()
            .all(|f| f == &format!("sha256-{hex}") || f.ends_with(".from")),
        "{partial:?}"
    );
    let o = d.zinstall(&["cache", "list", "--json"]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        r#"{"command":"cache","ok":true,"result":[],"schema":1}"#,
        "{}",
        text(&o)
    );

    // Silent, then SIGTERM.
    reg.set(&layer, Serve::Silent(bytes));
    let before = reg.count(&layer);
    let mut c = d.connect();
    c.send(&json!({"v": 1, "op": "provision", "args": {
        "image": reg.reference(), "out": d.path("h")}}));
    assert_eq!(c.reply().unwrap()["reply"], "accepted");
    let t0 = Instant::now();
    while reg.count(&layer) == before {
        assert!(t0.elapsed() < Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(500));
    let t0 = Instant::now();
    d.signal(d.child.id(), libc::SIGTERM);
    let status = loop {
        if let Some(s) = d.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "zinstalld still running {:?} after SIGTERM: {}",
            t0.elapsed(),
            d.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "{}", d.log());
    assert_eq!(c.end()["error"]["kind"], "cancelled");
    assert!(!store.join("blobs/sha256").join(hex).exists());
}

/// `zinstall provision` as the CLI runs it, into `cache`.
fn provision(
    image: &str,
    out: &Path,
    cache: &Path,
    extra: &[&str],
) -> std::process::Output {
    let mut args =
        vec!["provision", image, "--out", s(out), "--cache", s(cache)];
    args.extend(extra);
    support::zinstall(&args)
}

/// Blobs bounded before and while they stream: a layer whose descriptor
/// claims a terabyte is refused before a byte of it is fetched, naming
/// the bound; one announcing more bytes than it declares, or sending
/// more, is cut off; nothing of either is kept.
#[test]
fn registry_blobs_are_bounded_by_what_they_declare_and_the_limit() {
    let lay = tempfile::tempdir().unwrap();
    let (layer, _) = image(lay.path(), 100_000, &|what, v| {
        if what == "manifest" {
            v["layers"][0]["size"] = json!(1u64 << 40);
        }
    });
    let reg = FakeRegistry::serve(lay.path());
    reg.set(&layer, Serve::Endless(64 << 20));
    let d = tempfile::tempdir().unwrap();
    let cache = d.path().join("cache");
    let o = provision(
        &reg.reference(),
        &d.path().join("g"),
        &cache,
        &["--max-archive-size", "1G"],
    );
    let out = text(&o);
    assert!(!o.status.success(), "{out}");
    assert!(
        out.contains(&layer) && out.contains(&(1u64 << 40).to_string()),
        "{out}"
    );
    assert_eq!(reg.count(&layer), 0, "the terabyte blob was asked for");
    assert_eq!(files_in(&cache.join("oci/partial")), Vec::<String>::new());

    // Declared honestly, but the registry sends more than that.
    let lay = tempfile::tempdir().unwrap();
    let (layer, bytes) = image(lay.path(), 100_000, &|_, _| {});
    let reg = FakeRegistry::serve(lay.path());
    let mut longer = bytes.clone();
    longer.extend(vec![0u8; 1 << 20]);
    for how in [Serve::Bytes(longer.clone()), Serve::Endless(8 << 20)] {
        reg.set(&layer, how);
        let cache = d.path().join(format!("cache{}", reg.count("GET")));
        let o = provision(&reg.reference(), &d.path().join("h"), &cache, &[]);
        let out = text(&o);
        assert!(!o.status.success(), "{out}");
        assert!(out.contains(&layer) && out.contains("bytes"), "{out}");
        assert_eq!(files_in(&cache.join("oci/partial")), Vec::<String>::new());
        assert!(!support::blob_path(&cache.join("oci"), &layer).exists());
    }
}

/// A registry that sends other bytes for a layer and breaks off midway
/// leaves a partial download; an honest registry's pull of the same
/// layer into the same cache then works (the partial, not its own, is
/// discarded). A registry that serves wrong bytes whole is refused with
/// its URL named.
#[test]
fn a_poisoned_partial_download_never_breaks_an_honest_pull() {
    let lay = tempfile::tempdir().unwrap();
    let (layer, bytes) = image(lay.path(), 400_000, &|_, _| {});
    let mut poison = bytes.clone();
    for b in poison.iter_mut() {
        *b ^= 0x5a;
    }
    let bad = FakeRegistry::serve(lay.path());
    bad.set(&layer, Serve::Cut(poison.clone(), poison.len() / 2));
    let d = tempfile::tempdir().unwrap();
    let cache = d.path().join("cache");
    let o = provision(&bad.reference(), &d.path().join("a"), &cache, &[]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("next pull resumes"), "{}", text(&o));
    let hex = layer.trim_start_matches("sha256:");
    let partial = cache.join("oci/partial").join(format!("sha256-{hex}"));
    assert!(fs::metadata(&partial).unwrap().len() > 0);

    let honest = FakeRegistry::serve(lay.path());
    let o = provision(&honest.reference(), &d.path().join("b"), &cache, &[]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("discarded"), "{out}");
    assert_eq!(
        fs::read(d.path().join("b/guest-0/etc/os-release")).unwrap(),
        b"ID=test\n"
    );

    // The same registry, left a poisoned partial by an earlier pull from
    // it: the blob is fetched whole once more before anything is said.
    let lay2 = tempfile::tempdir().unwrap();
    let (layer2, bytes2) = image(lay2.path(), 300_000, &|_, _| {});
    let reg = FakeRegistry::serve(lay2.path());
    let mut poison2 = bytes2.clone();
    poison2[10] ^= 1;
    reg.set(&layer2, Serve::Cut(poison2.clone(), poison2.len() / 2));
    let cache2 = d.path().join("cache2");
    let o = provision(&reg.reference(), &d.path().join("c"), &cache2, &[]);
    assert!(!o.status.success(), "{}", text(&o));
    reg.set(&layer2, Serve::Bytes(bytes2));
    let o = provision(&reg.reference(), &d.path().join("c"), &cache2, &[]);
    assert!(o.status.success(), "{}", text(&o));

    // Wrong bytes, whole: refused, naming the URL that served them.
    reg.set(&layer2, Serve::Bytes(poison2));
    let cache3 = d.path().join("cache3");
    let o = provision(&reg.reference(), &d.path().join("e"), &cache3, &[]);
    let out = text(&o);
    assert!(!o.status.success(), "{out}");
    assert!(
        out.contains(&format!(
            "http://127.0.0.1:{}/v2/test/img/blobs/{layer2}",
            reg.port
        )),
        "{out}"
    );
    assert_eq!(files_in(&cache3.join("oci/partial")), Vec::<String>::new());
}

/// A transfer that brings too little per window is given up and retried,
/// then fails naming the stall; failures no retry mends (a 4xx, a name
/// that does not resolve) are not retried at all.
#[test]
fn stalls_are_retried_and_permanent_failures_are_not() {
    use zinstall_engine::oci::{Platform, Select};
    use zinstall_registry::{Reference, Registry, Stall};
    let lay = tempfile::tempdir().unwrap();
    let (_, _) = image(lay.path(), 10_000, &|_, _| {});
    let (_, manifest) = support::manifest_of(lay.path());
    let config = manifest["config"]["digest"].as_str().unwrap().to_string();
    let cfg_bytes = fs::read(support::blob_path(lay.path(), &config)).unwrap();
    let reg = FakeRegistry::serve(lay.path());
    reg.set(&config, Serve::Drip(cfg_bytes));
    let store = tempfile::tempdir().unwrap();
    let select = Select {
        reference: None,
        platform: Platform::host(),
    };
    let r = Reference::parse(&reg.reference()).unwrap();
    let t0 = Instant::now();
    let e = Registry::new(store.path())
        .retries(1)
        .stall(Stall {
            window: Duration::from_secs(1),
            min_bytes: 1000,
        })
        .open(&r, &select)
        .unwrap_err()
        .to_string();
    assert!(e.contains("stalled"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert_eq!(reg.count(&config), 2, "{e}");

    reg.set(&config, Serve::Status(403));
    let store = tempfile::tempdir().unwrap();
    let e = Registry::new(store.path())
        .open(&r, &select)
        .unwrap_err()
        .to_string();
    assert!(e.contains("403"), "{e}");
    assert_eq!(reg.count(&config), 3, "a 403 was retried: {e}");

    let t0 = Instant::now();
    let r = Reference::parse("no-such-host.invalid:5000/test/img:t").unwrap();
    let e = Registry::new(store.path())
        .insecure(vec!["no-such-host.invalid:5000".into()])
        .open(&r, &select)
        .unwrap_err()
        .to_string();
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "{e}: {:?}",
        t0.elapsed()
    );
    assert!(!e.contains("attempts"), "{e}");
}

/// A lookaside that sends a signature's body at 1,200 bytes a second,
/// above the stall floor (32 KiB in 30 s): the fetch ends at its
/// deadline (`--fetch-deadline 2` here; 60 s by default), naming it,
/// instead of holding the pull for as long as the body takes.
#[test]
fn a_trickling_signature_lookaside_ends_at_the_fetch_deadline() {
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpListener;
    let d = tempfile::tempdir().unwrap();
    let lay = d.path().join("layout");
    image(&lay, 64, &|_, _| {});
    let reg = FakeRegistry::serve(&lay);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicUsize::new(0));
    {
        let (stop, served) = (Arc::clone(&stop), Arc::clone(&served));
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { continue };
                let (stop, served) = (Arc::clone(&stop), Arc::clone(&served));
                std::thread::spawn(move || {
                    let mut r = BufReader::new(c.try_clone().unwrap());
                    let mut line = String::new();
                    while r.read_line(&mut line).is_ok_and(|n| n > 2) {
                        line.clear();
                    }
                    let _ = c.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 60000\r\n\r\n",
                    );
                    // 120 bytes every 100 ms: 1,200 B/s.
                    for _ in 0..500 {
                        if stop.load(Ordering::Relaxed)
                            || c.write_all(&[b'x'; 120]).is_err()
                        {
                            return;
                        }
                        served.fetch_add(120, Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(100));
                    }
                });
            }
        });
    }
    let regd = d.path().join("registries.d");
    fs::create_dir(&regd).unwrap();
    fs::write(
        regd.join("lookaside.yaml"),
        format!(
            "docker:\n  127.0.0.1:{}:\n    lookaside: http://127.0.0.1:{port}\n",
            reg.port
        ),
    )
    .unwrap();
    let key = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../features/registry/src/policy/testdata/public-key.gpg");
    let policy = d.path().join("policy.json");
    fs::write(
        &policy,
        json!({"default": [{"type": "signedBy", "keyType": "GPGKeys",
                            "keyPath": key}]})
        .to_string(),
    )
    .unwrap();
    let t0 = Instant::now();
    let o = support::zinstall(&[
        "image",
        "verify",
        "--fetch-deadline",
        "2",
        "--policy",
        s(&policy),
        "--registries.d",
        s(&regd),
        &reg.reference(),
    ]);
    let took = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let t = text(&o);
    eprintln!(
        "MEASURE trickling lookaside: ended after {} ms, {} bytes received",
        took.as_millis(),
        served.load(Ordering::Relaxed)
    );
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("deadline"), "{t}");
    assert!(took < Duration::from_secs(10), "took {took:?}: {t}");
}
