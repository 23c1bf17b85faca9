//! zinstalld as clients meet it: a real daemon on a real socket, the
//! `zinstall --daemon` client and raw protocol lines, concurrent jobs on
//! one worker budget, grants, cancels, signals and bad input.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use zinstall_testkit::run::text;

use serde_json::{Value, json};

use zinstall_testkit::tools;

/// The worker budget the tests give the daemon.
const BUDGET: usize = 3;

fn write(p: &Path, data: &[u8]) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, data).unwrap();
}

/// `dirs` × `files` small files under `root`.
fn tree(root: &Path, dirs: usize, files: usize) {
    for d in 0..dirs {
        for f in 0..files {
            write(
                &root.join(format!("usr/d{d}/f{f}")),
                format!("{d}/{f}").as_bytes(),
            );
        }
    }
}

/// A grant of copy and jobs to uid 65534 under /var/tmp.
const NOBODY_COPIES: &str = "[[grant]]\nusers = [65534]\noperations = \
                             [\"copy\", \"jobs\"]\nprefixes = [\"/var/tmp\"]\n";

pub(crate) struct Daemon {
    child: Child,
    dir: tempfile::TempDir,
    pub(crate) socket: PathBuf,
}

/// A scratch directory for a daemon, world-traversable so that an
/// unprivileged client can reach what its grant names.
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("zinstalld-test")
        .tempdir_in("/var/tmp")
        .unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

impl Daemon {
    /// Starts zinstalld in a scratch directory (world-traversable, so an
    /// unprivileged client can reach what its grant names) with `extra`
    /// configuration, and waits for its socket.
    pub(crate) fn start(extra: &str) -> Daemon {
        Daemon::start_in(scratch(), extra, &[])
    }

    /// [`Daemon::start`] run through `wrapper` (a command that execs the
    /// rest: `unshare --mount ...`).
    #[cfg(target_os = "linux")]
    pub(crate) fn start_wrapped(wrapper: &[&str]) -> Daemon {
        Daemon::start_in(scratch(), "", wrapper)
    }

    fn start_in(
        dir: tempfile::TempDir,
        extra: &str,
        wrapper: &[&str],
    ) -> Daemon {
        let socket = dir.path().join("zinstalld.sock");
        let config = dir.path().join("zinstalld.toml");
        let profile = dir.path().join("profile.toml");
        fs::write(
            &profile,
            format!(
                "source_root = \"{}\"\ntrees = [\"usr\"]\nlog = \"{}\"\n",
                dir.path().join("src").display(),
                dir.path().join("install.log").display()
            ),
        )
        .unwrap();
        fs::write(
            &config,
            format!(
                "copy_threads = {BUDGET}\ndefaults = \"{}\"\ncache = \"{}\"\n\
                 profile = \"{}\"\nsocket_mode = \"0666\"\n{extra}",
                Path::new("/dev/null").display(),
                dir.path().join("cache").display(),
                profile.display(),
            ),
        )
        .unwrap();
        let log = fs::File::create(dir.path().join("zinstalld.log")).unwrap();
        let daemon = env!("CARGO_BIN_EXE_zinstalld");
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(daemon);
                c
            }
            None => Command::new(daemon),
        };
        let child = cmd
            .arg("--config")
            .arg(&config)
            .arg("--socket")
            .arg(&socket)
            .stderr(log)
            .spawn()
            .unwrap();
        let d = Daemon { child, dir, socket };
        let t0 = Instant::now();
        while UnixStream::connect(&d.socket).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "zinstalld did not listen: {}",
                d.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    pub(crate) fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    pub(crate) fn log(&self) -> String {
        fs::read_to_string(self.path("zinstalld.log")).unwrap_or_default()
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The daemon's threads whose name starts with `prefix`.
    fn threads(&self, prefix: &str) -> usize {
        let Ok(tasks) = fs::read_dir(format!("/proc/{}/task", self.pid()))
        else {
            return 0;
        };
        tasks
            .filter_map(|t| {
                fs::read_to_string(t.ok()?.path().join("comm")).ok()
            })
            .filter(|n| n.starts_with(prefix))
            .count()
    }

    /// Waits until the daemon's log says `what`.
    fn wait_for_log(&self, what: &str) {
        let t0 = Instant::now();
        while !self.log().contains(what) {
            assert!(t0.elapsed() < Duration::from_secs(20), "{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, sig: i32) {
        zinstall_sys::process::signal(self.pid(), sig);
    }

    fn wait(&mut self) -> std::process::ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "daemon did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `zinstall --daemon=SOCKET ARGS`.
    pub(crate) fn zinstall(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_zinstall"))
            .arg(format!("--daemon={}", self.socket.display()))
            .args(args)
            .env_remove("ZINSTALL_DAEMON")
            .output()
            .unwrap()
    }

    /// `zinstall --daemon=SOCKET ARGS` as uid and gid 65534, no groups.
    fn zinstall_as_nobody(&self, args: &[&str]) -> Output {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_zinstall"))
            .arg(format!("--daemon={}", self.socket.display()))
            .args(args)
            .output()
            .unwrap()
    }

    pub(crate) fn connect(&self) -> Conn {
        Conn::new(UnixStream::connect(&self.socket).unwrap())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The cache's entries are immutable as root: cleared, so that the
        // scratch directory can go.
        let _ = Command::new("chattr")
            .args(["-R", "-i"])
            .arg(self.dir.path())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// A raw protocol connection.
pub(crate) struct Conn {
    out: UnixStream,
    input: BufReader<UnixStream>,
}

impl Conn {
    fn new(s: UnixStream) -> Conn {
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Conn {
            input: BufReader::new(s.try_clone().unwrap()),
            out: s,
        }
    }

    fn send(&mut self, v: &Value) {
        writeln!(self.out, "{v}").unwrap();
    }

    /// The next reply, or `None` at end of stream.
    fn reply(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.input.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(&line).unwrap()),
        }
    }

    /// Reads until a job's last reply.
    fn end(&mut self) -> Value {
        while let Some(r) = self.reply() {
            if matches!(r["reply"].as_str(), Some("done" | "error")) {
                return r;
            }
        }
        panic!("the connection ended before the job");
    }

    /// Sends a request and reads until its last reply.
    pub(crate) fn call(&mut self, v: &Value) -> Vec<Value> {
        self.send(v);
        let mut all = Vec::new();
        while let Some(r) = self.reply() {
            let end =
                matches!(r["reply"].as_str(), Some("ok" | "done" | "error"));
            all.push(r);
            if end {
                break;
            }
        }
        all
    }
}

/// The command failed with `code`, saying `what`.
fn fails_saying(o: &Output, code: i32, what: &str) {
    assert_eq!(o.status.code(), Some(code), "{}", text(o));
    assert!(text(o).contains(what), "{}", text(o));
}

fn files_under(root: &Path) -> usize {
    let mut n = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                n += 1;
            }
        }
    }
    n
}

/// A rootfs tarball, as provision and install take them.
fn rootfs_tar(path: &Path, files: usize) {
    let mut b = tar::Builder::new(Vec::new());
    for i in 0..files {
        let data = format!("file {i}\n");
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(1_600_000_000);
        b.append_data(&mut h, format!("etc/f{i}"), data.as_bytes())
            .unwrap();
    }
    fs::write(path, b.into_inner().unwrap()).unwrap();
}

#[test]
fn thirty_two_clients_mixing_jobs_succeed_within_the_budget() {
    let d = Daemon::start("");
    tree(&d.path("src"), 20, 40);
    let image = d.path("image.tar");
    rootfs_tar(&image, 200);
    let running = AtomicBool::new(true);
    let most = AtomicUsize::new(0);
    std::thread::scope(|s| {
        // Stops the sampler however the scope ends, a failed check too.
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Relaxed);
            }
        }
        let _stop = Stop(&running);
        s.spawn(|| {
            while running.load(Ordering::Relaxed) {
                most.fetch_max(d.threads("copy-"), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let clients: Vec<_> = (0..32)
            .map(|i| {
                let (d, image) = (&d, &image);
                s.spawn(move || {
                    let (args, check): (Vec<String>, PathBuf) = match i % 3 {
                        0 => {
                            let dst = d.path(&format!("copies/c{i}"));
                            (
                                vec![
                                    "copy".into(),
                                    d.path("src").display().to_string(),
                                    dst.display().to_string(),
                                ],
                                dst.join("usr"),
                            )
                        }
                        1 => {
                            let z = d.path(&format!("zones/z{i}"));
                            (
                                vec![
                                    "install".into(),
                                    "--zonepath".into(),
                                    z.display().to_string(),
                                ],
                                z.join("root/usr"),
                            )
                        }
                        _ => {
                            let out = d.path(&format!("guests/g{i}"));
                            (
                                vec![
                                    "provision".into(),
                                    image.display().to_string(),
                                    "--out".into(),
                                    out.display().to_string(),
                                ],
                                out.join("guest-0/etc"),
                            )
                        }
                    };
                    let args: Vec<&str> =
                        args.iter().map(String::as_str).collect();
                    let o = d.zinstall(&args);
                    assert!(o.status.success(), "client {i}: {}", text(&o));
                    check
                })
            })
            .collect();
        for (i, c) in clients.into_iter().enumerate() {
            let check = c.join().unwrap();
            let want = match i % 3 {
                // The image's 200 files and the guest's own hostname.
                2 => 201,
                _ => 800,
            };
            assert_eq!(
                files_under(&check),
                want,
                "client {i}: {}",
                check.display()
            );
        }
    });
    let most = most.into_inner();
    assert!(
        (1..=BUDGET).contains(&most),
        "{most} copy workers seen; the budget is {BUDGET}"
    );
    // No job started workers of its own beside the pool.
    assert_eq!(d.threads("unpack-"), 0);
}

#[test]
fn eight_provisions_of_one_image_build_it_once() {
    let d = Daemon::start("");
    let image = d.path("image.tar");
    rootfs_tar(&image, 500);
    let results: Vec<Value> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|i| {
                let d = &d;
                let image = &image;
                s.spawn(move || {
                    let mut c = d.connect();
                    let r = c.call(&json!({"v": 1, "op": "provision", "args": {
                        "image": image, "out": d.path(&format!("g{i}")), "count": 2}}));
                    r.last().unwrap().clone()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut built = 0;
    for r in &results {
        assert_eq!(r["reply"], "done", "{r}");
        assert_eq!(r["result"]["guests"].as_array().unwrap().len(), 2);
        if r["result"]["obtained"] == "built" {
            built += 1;
        }
    }
    assert_eq!(built, 1, "{results:?}");
    let cache = zinstall_provision::cache::Cache::new(d.path("cache")).unwrap();
    assert_eq!(cache.builds().unwrap(), 1);
}

/// A disk image in a format zinstall reads through qemu-img (a VDI) is
/// converted once by the daemon, with the qemu-img on its PATH, and its
/// guests read as the disk inside.
#[test]
fn the_daemon_converts_a_foreign_disk_once() {
    let d = Daemon::start("");
    let raw = d.path("disk.raw");
    let mut data = vec![0u8; 8 << 20];
    data[1 << 20..3 << 20].fill(0x5a);
    write(&raw, &data);
    let vdi = d.path("disk.vdi");
    let o = tools::tool("qemu-img")
        .args(["convert", "-q", "-f", "raw", "-O", "vdi"])
        .arg(&raw)
        .arg(&vdi)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    for (i, obtained) in [(0, "built"), (1, "reused")] {
        let mut c = d.connect();
        let r = c.call(&json!({"v": 1, "op": "provision", "args": {
            "image": vdi, "out": d.path(&format!("g{i}")), "count": 2}}));
        let r = r.last().unwrap();
        assert_eq!(r["reply"], "done", "{r}");
        assert_eq!(r["result"]["kind"], "vdi", "{r}");
        assert_eq!(r["result"]["obtained"], obtained, "{r}");
        for g in 0..2 {
            let guest = d.path(&format!("g{i}/guest-{g}.qcow2"));
            let o = tools::tool("qemu-img")
                .args(["compare", "-q", "-f", "qcow2", "-F", "raw"])
                .arg(&guest)
                .arg(&raw)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}: {}", guest.display(), text(&o));
        }
    }
}

#[test]
fn an_unprivileged_client_gets_only_what_it_is_granted() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Daemon::start(NOBODY_COPIES);
    let src = d.path("src");
    tree(&src, 2, 3);
    let secret = src.join("usr/d1/secret");
    fs::write(&secret, "root only").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    let out = d.path("nobody");
    fs::create_dir(&out).unwrap();
    std::os::unix::fs::chown(&out, Some(65534), Some(65534)).unwrap();
    let as_nobody = |args: &[&str]| d.zinstall_as_nobody(args);
    // Granted copy, but the kernel checks it as uid 65534.
    let dst = out.join("copy");
    let o = as_nobody(&["copy", src.to_str().unwrap(), dst.to_str().unwrap()]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains(&secret.display().to_string())
            && text(&o).contains("Permission denied"),
        "{}",
        text(&o)
    );
    assert!(!dst.join("usr/d1/secret").exists());
    // Not granted: install; outside the prefix: /etc.
    let o =
        as_nobody(&["install", "--zonepath", out.join("z").to_str().unwrap()]);
    fails_saying(&o, 1, "not granted install");
    let o =
        as_nobody(&["copy", "/etc/hostname", out.join("h").to_str().unwrap()]);
    assert!(
        text(&o).contains("/etc/hostname: not under a prefix"),
        "{}",
        text(&o)
    );
    // The refusals are logged with who asked.
    let log = d.log();
    let refused: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["msg"] == "refused")
        .collect();
    assert!(refused.len() >= 2, "{log}");
    assert!(refused.iter().all(|v| v["uid"] == 65534
        && v["gid"] == 65534
        && v["pid"].as_u64() > Some(0)));
    // The secret is still root's alone, and root's copy still works.
    let o = d.zinstall(&[
        "copy",
        src.to_str().unwrap(),
        d.path("rootcopy").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        fs::read_to_string(d.path("rootcopy/usr/d1/secret")).unwrap(),
        "root only"
    );
}

/// Starts a copy big enough to still be running when looked at (the tree
/// is made first: an idle connection is dropped after the I/O timeout).
fn slow_copy(d: &Daemon, detach: bool) -> (Conn, u64) {
    if !d.path("big").exists() {
        tree(&d.path("big"), 40, 250);
    }
    let mut c = d.connect();
    c.send(&json!({"v": 1, "op": "copy", "detach": detach, "args": {
        "src": d.path("big"), "dst": d.path(if detach { "big-detached" } else { "big-copy" })}}));
    let r = c.reply().unwrap();
    assert_eq!(r["reply"], "accepted", "{r}");
    let job = r["job"].as_u64().unwrap();
    (c, job)
}

fn job_state(d: &Daemon, job: u64) -> Value {
    let t0 = Instant::now();
    loop {
        let r = d
            .connect()
            .call(&json!({"v": 1, "op": "status", "args": {"job": job}}));
        let j = r.last().unwrap()["result"].clone();
        let s = j["state"].as_str().unwrap_or_default();
        if s != "running" && s != "queued" {
            return j;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "job {job} never ended"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_client_that_disconnects_cancels_its_job_unless_detached() {
    let d = Daemon::start("");
    let (c, job) = slow_copy(&d, false);
    drop(c);
    let j = job_state(&d, job);
    assert_eq!(j["state"], "cancelled", "{j}");
    assert!(d.log().contains("client gone; job cancelled"));
    let (c, job) = slow_copy(&d, true);
    drop(c);
    let j = job_state(&d, job);
    assert_eq!(j["state"], "done", "{j}");
    assert_eq!(files_under(&d.path("big-detached")), 40 * 250);
    // `zinstall jobs` lists both; `zinstall cancel` of an ended job says
    // how it ended.
    let o = d.zinstall(&["jobs"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("cancelled") && out.contains("done"), "{out}");
    let o = d.zinstall(&["cancel", &job.to_string()]);
    assert!(text(&o).contains("(done when asked)"), "{}", text(&o));
    let o = d.zinstall(&["cancel", "999999"]);
    fails_saying(&o, 1, "no job 999999");
}

#[test]
fn zinstall_cancel_stops_a_running_job() {
    let d = Daemon::start("");
    let (mut c, job) = slow_copy(&d, false);
    let o = d.zinstall(&["cancel", &job.to_string()]);
    assert!(o.status.success(), "{}", text(&o));
    let r = c.end();
    assert_eq!(r["reply"], "error", "{r}");
    assert_eq!(r["error"]["kind"], "cancelled", "{r}");
}

/// An install whose source is big enough to be killed midway.
fn slow_install(d: &Daemon) -> Conn {
    tree(&d.path("src"), 40, 300);
    let mut c = d.connect();
    c.send(&json!({"v": 1, "op": "install", "args": {"zonepath": d.path("zones/z")}}));
    assert_eq!(c.reply().unwrap()["reply"], "accepted");
    // Wait until the root is being filled.
    let t0 = Instant::now();
    while fs::read_dir(d.path("zones/z/root/usr")).map_or(0, |r| r.count()) < 3
    {
        assert!(t0.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(5));
    }
    c
}

#[test]
fn kill_9_mid_install_leaves_it_incomplete_and_the_next_install_recovers() {
    let mut d = Daemon::start("");
    let _c = slow_install(&d);
    d.signal(libc::SIGKILL);
    d.wait();
    let marker = fs::read_to_string(d.path("zones/z/.zinstall.state"))
        .unwrap_or_default();
    assert!(marker.contains("installing"), "marker: {marker:?}");
    let o = reinstall(d);
    assert!(text(&o).contains("interrupted"), "{}", text(&o));
}

/// Starts a new daemon in the stopped one's directory and socket (the
/// stale socket is replaced) and installs the zone again, completely.
fn reinstall(mut d: Daemon) -> Output {
    let dir = std::mem::replace(&mut d.dir, tempfile::tempdir().unwrap());
    drop(d);
    let d = Daemon::start_in(dir, "", &[]);
    let o = d.zinstall(&[
        "install",
        "--zonepath",
        d.path("zones/z").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(files_under(&d.path("zones/z/root/usr")), 40 * 300);
    o
}

#[test]
fn sigterm_cancels_running_installs_and_exits_0() {
    let mut d = Daemon::start("");
    let mut c = slow_install(&d);
    d.signal(libc::SIGTERM);
    let status = d.wait();
    assert_eq!(status.code(), Some(0), "{}", d.log());
    // The client heard that its install was cancelled.
    let r = c.end();
    assert_eq!(r["error"]["kind"], "cancelled", "{r}");
    // Nothing half-made is left as if installed; the next install works.
    let marker = fs::read_to_string(d.path("zones/z/.zinstall.state"))
        .unwrap_or_default();
    assert!(!marker.contains("installed"), "marker: {marker:?}");
    reinstall(d);
}

#[test]
fn bad_requests_get_errors_and_others_keep_being_served() {
    let d = Daemon::start("io_timeout_secs = 1\n");
    let mut c = d.connect();
    let kind = |r: &[Value]| {
        r.last().unwrap()["error"]["kind"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let msg = |r: &[Value]| {
        r.last().unwrap()["error"]["message"]
            .as_str()
            .unwrap()
            .to_string()
    };
    c.out.write_all(b"{not json\n").unwrap();
    let r = vec![c.reply().unwrap()];
    assert_eq!(kind(&r), "request");
    // The same connection goes on.
    let r = c.call(&json!({"v": 1, "op": "defragment"}));
    assert!(msg(&r).contains("unknown operation"), "{r:?}");
    let r = c.call(
        &json!({"v": 1, "op": "copy", "args": {"src": "rel", "dst": "/x"}}),
    );
    assert!(msg(&r).contains("must be absolute"), "{r:?}");
    let r = c.call(&json!({"v": 1, "op": "copy", "args": {"src": "/a"}}));
    assert!(msg(&r).contains("missing field `dst`"), "{r:?}");
    let r = c.call(&json!({"v": 1, "op": "copy", "args": {
        "src": d.path("nowhere"), "dst": d.path("x")}}));
    assert_eq!(kind(&r), "io", "{r:?}");
    assert!(msg(&r).contains("nowhere"), "{r:?}");
    // A line over the limit (256 KiB): an error, then the connection is
    // closed.
    let mut long = d.connect();
    let _ = long.out.write_all(&vec![b'x'; (1 << 20) + 10]);
    let r = long.reply().unwrap();
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("longer than"),
        "{r}"
    );
    assert!(long.reply().is_none());
    // Half a request, then silence: dropped after the timeout.
    let mut stall = d.connect();
    stall.out.write_all(br#"{"v":1,"op":"#).unwrap();
    let r = stall.reply().unwrap();
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no whole request"),
        "{r}"
    );
    // 1,000 connections at once; a client among them is still served.
    raise_nofile();
    let idle: Vec<UnixStream> = (0..1000)
        .filter_map(|_| UnixStream::connect(&d.socket).ok())
        .collect();
    assert_eq!(idle.len(), 1000);
    let r = d.connect().call(&json!({"v": 1, "op": "version"}));
    assert_eq!(r.last().unwrap()["reply"], "ok", "{r:?}");
    let o = d.zinstall(&[
        "copy",
        d.path("zinstalld.toml").to_str().unwrap(),
        d.path("copied.toml").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    drop(idle);
    assert!(fs::read(d.path("copied.toml")).unwrap().len() > 10);
}

fn raise_nofile() {
    let (_, hard) = zinstall_sys::process::nofile_limits().unwrap();
    zinstall_sys::process::set_nofile_soft(hard).unwrap();
}

#[test]
fn the_cli_through_the_daemon_prints_what_it_prints_alone() {
    let d = Daemon::start("");
    tree(&d.path("src"), 3, 4);
    let alone = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .env_remove("ZINSTALL_DAEMON")
        .args([
            "copy",
            d.path("src").to_str().unwrap(),
            d.path("alone").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    // ZINSTALL_DAEMON does what --daemon does.
    let served = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .env("ZINSTALL_DAEMON", &d.socket)
        .args([
            "copy",
            d.path("src").to_str().unwrap(),
            d.path("served").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        alone.status.success() && served.status.success(),
        "{}",
        text(&served)
    );
    // Same line but for the destination and the time.
    let norm = |o: &Output, dst: &str| {
        let s = String::from_utf8_lossy(&o.stdout).replace(dst, "DST");
        s.rsplit_once(", ").map(|(a, _)| a.to_string()).unwrap_or(s)
    };
    assert_eq!(
        norm(&alone, d.path("alone").to_str().unwrap()),
        norm(&served, d.path("served").to_str().unwrap())
    );
    assert!(d.log().contains("\"op\":\"copy\""));
    // A flag only a local copy has is refused, not ignored.
    let o = d.zinstall(&["copy", "--threads", "2", "/a", "/b"]);
    fails_saying(&o, 2, "not available with --daemon");
    // No daemon there: a clear error naming the socket.
    let o = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .arg("--daemon=/nonexistent/zinstalld.sock")
        .args(["copy", "/a", "/b"])
        .output()
        .unwrap();
    fails_saying(&o, 1, "/nonexistent/zinstalld.sock: connect");
    // A path with `..` is refused before anything is sent, naming it:
    // the daemon takes clean paths only. Every command that names one.
    for args in [
        &["copy", "/a/../etc", "/b"][..],
        &["copy", "/a", "../b"],
        &["install", "--zonepath", "/z/../y", "/i.tar"],
        &["install", "--zonepath", "/z", "../i.tar"],
        &["update", "--zonepath", "/z/..", "/i.tar"],
        &["uninstall", "--zonepath", "/z/../y"],
        &["provision", "../i.raw", "--count", "1", "--out", "/o"],
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_zinstall"))
            .arg("--daemon=/nonexistent/zinstalld.sock")
            .args(args)
            .output()
            .unwrap();
        fails_saying(&o, 2, "zinstalld takes paths without `..` components");
        assert!(!text(&o).contains("connect"), "{args:?}: {}", text(&o));
    }
}

#[test]
fn the_daemon_updates_and_rolls_back_roots_for_root_alone() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Daemon::start(NOBODY_COPIES);
    let src = d.path("src");
    tree(&src, 2, 3);
    let zp = d.path("zone");
    let zps = zp.to_str().unwrap();
    let o = d.zinstall(&["install", "--zonepath", zps]);
    assert!(o.status.success(), "{}", text(&o));
    let root = zp.join("root");
    // The source moves on: one file rewritten, one removed, one added.
    write(&src.join("usr/d0/f0"), b"rewritten, longer than before");
    fs::remove_file(src.join("usr/d1/f2")).unwrap();
    write(&src.join("usr/d1/new"), b"added");
    // Not root: refused before anything is read, whatever the grant.
    let o = d.zinstall_as_nobody(&["update", "--zonepath", zps]);
    fails_saying(&o, 1, "not granted update");
    // A dry run through the daemon says what a local one says.
    let o = d.zinstall(&["update", "--dry-run", "--zonepath", zps]);
    assert!(o.status.success(), "{}", text(&o));
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    for line in [
        "would add /usr/d1/new",
        "would remove /usr/d1/f2",
        "would change /usr/d0/f0 (content",
        "would update: 1 added, 1 removed,",
    ] {
        assert!(said.contains(line), "{line:?} in {said}");
    }
    assert_eq!(fs::read(root.join("usr/d0/f0")).unwrap(), b"0/0");
    // The update, its outcome typed as the local command prints it.
    let o = d.zinstall(&["update", "--json", "--zonepath", zps]);
    assert!(o.status.success(), "{}", text(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["ok"], true, "{r}");
    let stats = &r["result"]["stats"];
    assert_eq!(
        (&stats["added"], &stats["removed"], &stats["bytes"]),
        (&json!(1), &json!(1), &json!(29 + 5)),
        "{r}"
    );
    assert_eq!(
        fs::read(root.join("usr/d0/f0")).unwrap(),
        b"rewritten, longer than before"
    );
    assert_eq!(fs::read(root.join("usr/d1/new")).unwrap(), b"added");
    assert!(!root.join("usr/d1/f2").exists());
    assert!(d.log().contains("\"op\":\"update\""), "{}", d.log());
    // And back.
    let o = d.zinstall(&["rollback", "--zonepath", zps]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("rolled back"),
        "{}",
        text(&o)
    );
    assert_eq!(fs::read(root.join("usr/d0/f0")).unwrap(), b"0/0");
    assert_eq!(fs::read(root.join("usr/d1/f2")).unwrap(), b"1/2");
    assert!(!root.join("usr/d1/new").exists());
    assert!(
        String::from_utf8_lossy(&o.stdout)
            .contains("the installed root (generation 0"),
        "{}",
        text(&o)
    );
    // A root made from an image, updated through the daemon to a new
    // version of it: the layer it lacks read alone, the host's trees
    // never.
    use crate::oci::support::{
        Ent, append_layer, host_arch, layer_tar, write_layout,
    };
    let v1 = d.path("v1");
    write_layout(
        &v1,
        &[layer_tar(&[Ent::Dir("etc/"), Ent::File("etc/app", b"1\n")])],
        host_arch(),
        &|_, _| {},
    );
    let v2 = d.path("v2");
    let cp = std::process::Command::new("cp")
        .arg("-a")
        .arg(&v1)
        .arg(&v2)
        .status();
    assert!(cp.is_ok_and(|s| s.success()));
    append_layer(&v2, &layer_tar(&[Ent::File("etc/app", b"2, longer\n")]));
    let zi = d.path("zi");
    let o = d.zinstall(&[
        "install",
        "--zonepath",
        zi.to_str().unwrap(),
        v1.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let o = d.zinstall(&[
        "update",
        "--json",
        "--zonepath",
        zi.to_str().unwrap(),
        v2.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (&r["result"]["layers_read"], &r["result"]["layers_reused"]),
        (&json!(1), &json!(1)),
        "{r}"
    );
    assert_eq!(fs::read(zi.join("root/etc/app")).unwrap(), b"2, longer\n");
    assert!(!zi.join("root/usr").exists(), "nothing of the host");
}

#[test]
fn a_second_daemon_on_a_live_socket_is_refused() {
    let d = Daemon::start("");
    let o = Command::new(env!("CARGO_BIN_EXE_zinstalld"))
        .arg("--socket")
        .arg(&d.socket)
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .output()
        .unwrap();
    fails_saying(&o, 1, "another zinstalld is listening");
    let o = Command::new(env!("CARGO_BIN_EXE_zinstalld"))
        .args(["--config", "/nonexistent/zinstalld.toml"])
        .output()
        .unwrap();
    fails_saying(&o, 2, "/nonexistent/zinstalld.toml");
}

#[test]
fn sighup_reloads_the_configuration_and_keeps_it_when_broken() {
    let d = Daemon::start("");
    let config = d.path("zinstalld.toml");
    let before = fs::read_to_string(&config).unwrap();
    fs::write(&config, "copy_threads = \"many\"\n").unwrap();
    d.signal(libc::SIGHUP);
    d.wait_for_log("configuration not reloaded");
    // Still serving, on the old configuration.
    let r = d.connect().call(&json!({"v": 1, "op": "version"}));
    assert_eq!(r.last().unwrap()["result"]["workers"], BUDGET);
    // A new profile: installs now copy its source root.
    let other = d.path("other-src");
    write(&other.join("usr/only-here"), b"new profile");
    let profile = d.path("profile2.toml");
    fs::write(
        &profile,
        format!(
            "source_root = \"{}\"\ntrees = [\"usr\"]\nlog = \"{}\"\n",
            other.display(),
            d.path("install.log").display()
        ),
    )
    .unwrap();
    let old_profile = d.path("profile.toml").display().to_string();
    fs::write(
        &config,
        before.replace(&old_profile, &profile.display().to_string()),
    )
    .unwrap();
    d.signal(libc::SIGHUP);
    d.wait_for_log("configuration reloaded");
    let o = d.zinstall(&[
        "install",
        "--zonepath",
        d.path("zones/r").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        fs::read(d.path("zones/r/root/usr/only-here")).unwrap(),
        b"new profile"
    );
}

/// Device nodes through the daemon follow provision's rule: made only
/// when asked (`--allow-devices`, passed on to the daemon), the refusal
/// naming the flag; provision cannot be granted, so only root asks.
#[test]
fn the_daemon_makes_device_nodes_only_when_asked() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Daemon::start("");
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(tar::EntryType::Char);
    h.set_mode(0o666);
    h.set_device_major(1).unwrap();
    h.set_device_minor(3).unwrap();
    h.set_size(0);
    h.set_cksum();
    b.append_data(&mut h, "dev/null", &[][..]).unwrap();
    let image = d.path("dev.tar");
    fs::write(&image, b.into_inner().unwrap()).unwrap();
    let g = d.path("guests");
    let provision = |more: &[&str]| {
        let mut a = vec!["provision", image.to_str().unwrap(), "--out"];
        a.push(g.to_str().unwrap());
        a.extend_from_slice(more);
        d.zinstall(&a)
    };
    let o = provision(&[]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(
        t.contains("dev/null") && t.contains("--allow-devices"),
        "{t}"
    );
    assert!(!t.contains("profile"), "{t}");
    let o = provision(&["--allow-devices"]);
    assert!(o.status.success(), "{}", text(&o));
    use std::os::unix::fs::FileTypeExt;
    assert!(
        fs::symlink_metadata(g.join("guest-0/dev/null"))
            .unwrap()
            .file_type()
            .is_char_device()
    );
}

/// A daemon whose replies lack a field this zinstall reads (another
/// version's): `jobs`, `cancel`, `copy` and `cache list` each fail naming
/// the field, instead of printing zeros and empty strings; with `--json`
/// too, instead of passing on what it could not read.
#[test]
fn a_reply_this_zinstall_cannot_read_is_an_error_not_zeros() {
    use std::os::unix::net::UnixListener;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("other-version.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    // Each result as a daemon that renamed one field would send it.
    let replies = [
        json!({"v": 1, "reply": "ok", "result": [{"job": 3, "op": "copy",
            "what": "/a", "uid": 0, "pid": 1, "status": "running",
            "phase": "copy", "entries": 5, "bytes": 6, "started": 1,
            "elapsed_ms": 2, "detached": false}]}),
        json!({"v": 1, "reply": "ok", "result": {"job": 3, "op": "copy",
            "what": "/a", "uid": 0, "pid": 1, "state": "running",
            "phase": "copy", "entries": 5, "bytes": 6, "started": 1,
            "elapsed": 2, "detached": false}}),
        json!({"v": 1, "reply": "ok", "result": [{"kind": "tree"}]}),
        json!({"v": 1, "reply": "ok", "result": [{"job": 3, "op": "copy",
            "what": "/a", "uid": 0, "pid": 1, "status": "running",
            "phase": "copy", "entries": 5, "bytes": 6, "started": 1,
            "elapsed_ms": 2, "detached": false}]}),
    ];
    let cases: [(&[&str], &str); 4] = [
        (&["jobs"], "missing field `state`"),
        (&["cancel", "3"], "missing field `elapsed_ms`"),
        (&["cache", "list"], "missing field `name`"),
        (&["jobs", "--json"], "missing field `state`"),
    ];
    let server = std::thread::spawn(move || {
        for reply in replies {
            let (mut s, _) = listener.accept().unwrap();
            let mut line = String::new();
            BufReader::new(&s).read_line(&mut line).unwrap();
            s.write_all(format!("{reply}\n").as_bytes()).unwrap();
        }
    });
    let mut ran = 0;
    for (args, says) in cases {
        let o = Command::new(env!("CARGO_BIN_EXE_zinstall"))
            .arg(format!("--daemon={}", socket.display()))
            .args(args)
            .env_remove("ZINSTALL_DAEMON")
            .output()
            .unwrap();
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {t}");
        assert!(
            t.contains("is not one this zinstall reads"),
            "{args:?}: {t}"
        );
        assert!(t.contains(says), "{args:?}: {t}");
        assert!(!t.contains("JOB    OP"), "{args:?}: printed a table: {t}");
        ran += 1;
    }
    assert_eq!(ran, 4);
    server.join().unwrap();
}
