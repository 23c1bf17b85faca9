//! zinstalld's granted jobs as an attacker meets them: a real daemon on
//! a real socket, clients as unprivileged uids (`setpriv`). A granted
//! copy runs in a process of the caller's own (its uids and groups, no
//! capability, no descriptor but its own), reads only through the
//! descriptors of its grant however the paths are swapped meanwhile, and
//! one user's jobs can neither starve root's nor grow the daemon.

// renameat2 and /proc are Linux's.
#![cfg(target_os = "linux")]

use crate::boundary::harness;

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use zinstall_testkit::run::s;

use harness::*;

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
}

/// A world-traversable scratch directory under /var/tmp (the callers
/// must reach it; the test's own temporary directory may not let them).
fn scratch(name: &str) -> tempfile::TempDir {
    let t = tempfile::Builder::new()
        .prefix(name)
        .tempdir_in("/var/tmp")
        .unwrap();
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    t
}

fn grant(prefix: &Path, extra: &str) -> String {
    format!(
        "{extra}\n[[grant]]\nusers = [{CALLER}, {OTHER}]\noperations = [\"copy\", \
         \"jobs\", \"status\", \"cancel\"]\nprefixes = [\"{}\"]\n",
        prefix.display()
    )
}

/// `dirs` directories of `files` files each under `root`, owned by
/// `uid`.
fn tree(root: &Path, dirs: usize, files: usize, uid: u32) {
    for d in 0..dirs {
        let dir = root.join(format!("d{d}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..files {
            fs::write(dir.join(format!("f{f}")), format!("{d}/{f}")).unwrap();
        }
        chown(&dir, uid);
    }
    chown(root, uid);
}

/// The job's state, as root sees it.
fn job(d: &Daemon, id: u64) -> serde_json::Value {
    let mut c = d.connect();
    c.send(&json!({"v": 1, "op": "status", "args": {"job": id}}));
    c.end()["result"].clone()
}

/// The fields of /proc/PID/status that say who a process is.
fn status_of(pid: u32) -> std::collections::HashMap<String, String> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((
                k.to_string(),
                v.split_whitespace().collect::<Vec<_>>().join(" "),
            ))
        })
        .collect()
}

/// A slow granted copy started by `uid` with extra groups; the job's
/// process is caught (stopped with SIGSTOP) while it works, and what it
/// is and holds is read from /proc: the caller's uids, gids and groups
/// in every slot, no capability in any set, no_new_privs, and no
/// descriptor but /dev/null, its control socket and what lies under the
/// grant. Cancelled, it is gone within the grace.
#[test]
fn a_granted_copy_runs_in_a_process_that_is_the_caller() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let base = scratch("zinstall-jobproc");
    let prefix = base.path().join("grant");
    fs::create_dir(&prefix).unwrap();
    chown(&prefix, CALLER);
    tree(&prefix.join("src"), 300, 100, CALLER);
    let d = Daemon::start(&grant(&prefix, ""));
    let client = zinstall_testkit::tool("setpriv")
        .args([
            &format!("--reuid={CALLER}"),
            &format!("--regid={CALLER}"),
            "--groups=100,4242",
            "--",
        ])
        .arg(env!("CARGO_BIN_EXE_zinstall"))
        .arg(format!("--daemon={}", d.socket.display()))
        .args(["copy", s(&prefix.join("src")), s(&prefix.join("dst"))])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let (id, pid) = loop {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no job process seen: {}",
            d.log()
        );
        let mut c = d.connect();
        c.send(&json!({"v": 1, "op": "jobs"}));
        let jobs = c.end()["result"].clone();
        let found = jobs.as_array().into_iter().flatten().find_map(|j| {
            Some((j["job"].as_u64()?, j["process"].as_u64()? as u32))
        });
        if let Some(f) = found {
            break f;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    // Once it has copied something, it has read its order: by then it
    // must be wholly the caller.
    while job(&d, id)["entries"].as_u64().unwrap_or(0) == 0 {
        assert!(
            Path::new(&format!("/proc/{pid}")).exists(),
            "the job's process ended before it was seen at work"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // A process this test's daemon started.
    zinstall_sys::process::signal(pid, libc::SIGSTOP);
    // kill returns before every thread has stopped: until then a worker
    // may still open or close a descriptor under the listing below.
    wait_stopped(pid);
    let st = status_of(pid);
    let fds: Vec<(String, String)> = fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let to = fs::read_link(e.path()).unwrap_or_default();
            (
                e.file_name().to_string_lossy().into_owned(),
                s(&to).to_string(),
            )
        })
        .collect();
    zinstall_sys::process::signal(pid, libc::SIGCONT);
    let me = format!("{CALLER} {CALLER} {CALLER} {CALLER}");
    assert_eq!(st.get("Uid"), Some(&me), "{st:?}");
    assert_eq!(st.get("Gid"), Some(&me), "{st:?}");
    let mut groups: Vec<&str> = st
        .get("Groups")
        .map(|g| g.split(' ').collect())
        .unwrap_or_default();
    groups.sort_unstable();
    assert_eq!(groups, ["100", "4242"], "{st:?}");
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(
            st.get(set).map(String::as_str),
            Some("0000000000000000"),
            "{set}: {st:?}"
        );
    }
    assert_eq!(st.get("NoNewPrivs").map(String::as_str), Some("1"));
    assert_eq!(st.get("Name").map(String::as_str), Some("zinstalld-job"));
    assert_eq!(st.get("PPid"), Some(&d.child.id().to_string()), "{st:?}");
    // The control socket (some threads hold their own copy of it), and
    // no other.
    let sockets: std::collections::BTreeSet<&str> = fds
        .iter()
        .filter(|(_, t)| t.starts_with("socket:"))
        .map(|(_, t)| t.as_str())
        .collect();
    assert_eq!(sockets.len(), 1, "{fds:?}");
    for (fd, to) in &fds {
        assert!(
            to == "/dev/null"
                || to.starts_with("socket:")
                || Path::new(to).starts_with(&prefix),
            "descriptor {fd} of the job's process is {to}: {fds:?}"
        );
    }
    // Cancelled: the process ends (SIGTERM, then SIGKILL after 5 s) and
    // the job says so.
    let mut c = d.connect();
    c.send(&json!({"v": 1, "op": "cancel", "args": {"job": id}}));
    c.end();
    let t0 = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists()
        && status_of(pid)
            .get("State")
            .is_none_or(|s| !s.starts_with('Z'))
    {
        assert!(
            t0.elapsed() < Duration::from_secs(8),
            "the job's process lives on"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut client = client;
    let _ = client.wait();
    let t0 = Instant::now();
    loop {
        let state = job(&d, id)["state"].as_str().unwrap_or("").to_string();
        if state == "cancelled" {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "job {id} is {state}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every file's content and every symlink's target under `dir`, none of
/// which may hold any of `forbidden`.
fn assert_clean(dir: &Path, forbidden: &[&str], what: &str) {
    for f in files_in(dir) {
        let p = dir.join(&f);
        let is_link =
            fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink());
        // A link's own text, never what it leads to (this test is root).
        let bytes = if is_link {
            fs::read_link(&p)
                .map(|t| t.as_os_str().as_bytes().to_vec())
                .unwrap_or_default()
        } else {
            fs::read(&p).unwrap_or_default()
        };
        let text = String::from_utf8_lossy(&bytes);
        for bad in forbidden {
            assert!(
                !text.contains(bad),
                "{what}: {f} holds {bad:?}, read from outside the grant: {text}"
            );
        }
    }
}

/// Swaps `path` with a symlink to `target` thousands of times while the
/// caller copies each of `sources` again and again into `out`: nothing
/// read from outside the grant ever arrives.
fn race(
    d: &Daemon,
    path: &Path,
    target: &Path,
    sources: &[PathBuf],
    out: &Path,
    forbidden: &[&str],
) {
    let link = path.with_extension("swap");
    symlink(target, &link).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let swapper = {
        let (stop, swaps, path, link) = (
            stop.clone(),
            swaps.clone(),
            path.to_path_buf(),
            link.clone(),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if zinstall_testkit::exchange(&path, &link) {
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let t0 = Instant::now();
    let mut runs = 0;
    while (swaps.load(Ordering::Relaxed) < 3000 || runs < 300)
        && t0.elapsed() < Duration::from_secs(40)
    {
        for src in sources {
            let dst = out.join(format!("c{runs}"));
            let _ = d.zinstall_as(CALLER, &["copy", s(src), s(&dst)]);
            runs += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    // Put things back where they were (after an odd number of swaps).
    if fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        zinstall_testkit::exchange(path, &link);
    }
    fs::remove_file(&link).unwrap();
    let swaps = swaps.load(Ordering::Relaxed);
    assert!(
        swaps >= 3000 && runs >= 40,
        "the race was not run: {swaps} swaps, {runs} copies"
    );
    assert_clean(out, forbidden, &format!("{} swapped", path.display()));
}

/// A directory of the source path swapped for a symlink to a tree
/// outside the grant (one the caller could read itself): no byte from
/// outside the prefix arrives.
#[test]
fn source_directories_swapped_for_links_yield_nothing_from_outside() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let base = scratch("zinstall-srcswap");
    let prefix = base.path().join("grant");
    let outside = base.path().join("outside");
    for p in [&prefix, &outside] {
        fs::create_dir(p).unwrap();
        chown(p, CALLER);
    }
    // Inside: grant/s/a/tree; outside: outside/tree, as the caller could
    // plant it, holding what the caller must not get through the daemon.
    let inside = prefix.join("s/a/tree");
    fs::create_dir_all(&inside).unwrap();
    fs::write(inside.join("f"), "inside").unwrap();
    // Readable by the caller: outside its grant all the same.
    let stolen = outside.join("tree");
    fs::create_dir(&stolen).unwrap();
    fs::write(stolen.join("f"), "OUTSIDE").unwrap();
    for p in ["s", "s/a"] {
        chown(&prefix.join(p), CALLER);
    }
    let out = prefix.join("out");
    fs::create_dir(&out).unwrap();
    chown(&out, CALLER);
    let d = Daemon::start(&grant(&prefix, ""));
    race(
        &d,
        &prefix.join("s/a"),
        &outside,
        &[inside.clone(), inside.join("f")],
        &out,
        &["OUTSIDE"],
    );
}

/// The same race aimed at `/proc/self/fd`, while root's copies of a
/// root-only directory run (the daemon holds its directories open
/// then): nothing under the root-only directory, and none of the
/// daemon's descriptors, reaches the caller.
#[test]
fn a_source_swapped_for_proc_self_fd_reaches_nothing_of_the_daemons() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let base = scratch("zinstall-procswap");
    let prefix = base.path().join("grant");
    fs::create_dir_all(prefix.join("s/a")).unwrap();
    for p in ["", "s", "s/a"] {
        chown(&prefix.join(p), CALLER);
    }
    let d = Daemon::start(&grant(&prefix, ""));
    let secret = base.path().join("secret");
    fs::create_dir(&secret).unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o700)).unwrap();
    tree(&secret.join("inner"), 50, 40, 0);
    for e in files_in(&secret) {
        fs::write(secret.join(&e), "SECRET").unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let rooters: Vec<_> = (0..2)
        .map(|r| {
            let (stop, secret, sock) =
                (stop.clone(), secret.clone(), d.socket.clone());
            let copies = base.path().join(format!("rootcopies{r}"));
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let dst = copies.join(n.to_string());
                    let _ = Command::new(env!("CARGO_BIN_EXE_zinstall"))
                        .arg(format!("--daemon={}", sock.display()))
                        .args(["copy", s(&secret), s(&dst)])
                        .output();
                    let _ = fs::remove_dir_all(&dst);
                    n += 1;
                }
            })
        })
        .collect();
    // Each descriptor as itself (its link's text is where the daemon's
    // descriptor points) and as a directory to read a file from.
    let sources: Vec<PathBuf> = (0..40)
        .flat_map(|fd| {
            [
                prefix.join(format!("s/a/{fd}")),
                prefix.join(format!("s/a/{fd}/f0")),
            ]
        })
        .collect();
    let proc_out = prefix.join("out-proc");
    fs::create_dir(&proc_out).unwrap();
    chown(&proc_out, CALLER);
    race(
        &d,
        &prefix.join("s/a"),
        Path::new("/proc/self/fd"),
        &sources,
        &proc_out,
        &[
            "SECRET",
            "secret",
            "zinstalld",
            "socket:",
            "pipe:",
            "anon_inode",
        ],
    );
    stop.store(true, Ordering::Relaxed);
    for r in rooters {
        r.join().unwrap();
    }
}

/// The prefix itself, under a directory the caller owns, swapped for a
/// symlink to outside while copies run: nothing from outside arrives,
/// and nothing is written there.
#[test]
fn a_prefix_swapped_for_a_link_yields_nothing_from_outside() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let base = scratch("zinstall-prefixswap");
    let mine = base.path().join("mine");
    fs::create_dir(&mine).unwrap();
    chown(&mine, CALLER);
    let prefix = mine.join("grant");
    fs::create_dir(&prefix).unwrap();
    fs::create_dir(prefix.join("tree")).unwrap();
    fs::write(prefix.join("tree/f"), "inside").unwrap();
    chown(&prefix.join("tree"), CALLER);
    chown(&prefix, CALLER);
    let outside = base.path().join("outside");
    fs::create_dir_all(outside.join("tree")).unwrap();
    fs::write(outside.join("tree/f"), "OUTSIDE").unwrap();
    let out = base.path().join("out");
    fs::create_dir(&out).unwrap();
    chown(&out, CALLER);
    // Copies go from the prefix to a second grant the swap does not touch.
    let d = Daemon::start(&format!(
        "{}[[grant]]\nusers = [{CALLER}]\noperations = [\"copy\"]\nprefixes = [\"{}\"]\n",
        grant(&prefix, ""),
        out.display()
    ));
    race(
        &d,
        &prefix,
        &outside,
        &[prefix.join("tree")],
        &out,
        &["OUTSIDE"],
    );
    let planted = files_in(&outside);
    assert_eq!(planted, ["tree/f"], "written outside: {planted:?}");
}

/// One uid queueing detached copies as fast as it can: past its share
/// (max_jobs_per_uid) it is told busy; root's copy meanwhile is not
/// delayed behind them, another uid's job still runs, and the daemon's
/// threads stay within its budget.
#[test]
fn one_user_flooding_jobs_neither_starves_root_nor_grows_the_daemon() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let base = scratch("zinstall-flood");
    let prefix = base.path().join("grant");
    fs::create_dir(&prefix).unwrap();
    chown(&prefix, CALLER);
    tree(&prefix.join("src"), 40, 100, CALLER);
    let d =
        // Two places a lane; each uid's share is the default, 4.
        Daemon::start(&grant(&prefix, "max_jobs = 2"));
    let threads = |d: &Daemon| {
        fs::read_dir(format!("/proc/{}/task", d.child.id()))
            .map(|t| t.count())
            .unwrap_or(0)
    };
    let before = threads(&d);
    const FLOOD: &str = r#"
import json, socket, sys
path, n, src, dst = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
accepted = busy = 0
for i in range(n):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    req = {"v": 1, "op": "copy", "detach": True,
           "args": {"src": src, "dst": "%s/%d" % (dst, i)}}
    s.sendall((json.dumps(req) + "\n").encode())
    r = json.loads(s.makefile().readline())
    if r.get("reply") == "accepted":
        accepted += 1
    elif r.get("error", {}).get("kind") == "busy":
        busy += 1
    s.close()
print(accepted, busy)
"#;
    let o = as_uid(CALLER)
        .args([
            // The system's Python, which other uids may run.
            "/usr/bin/python3",
            "-c",
            FLOOD,
            s(&d.socket),
            "60",
            s(&prefix.join("src")),
            s(&prefix),
        ])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(o.status.success(), "{said} {}", text(&o));
    assert_eq!(said, "4 56", "accepted and busy of 60 detached copies");
    let during = threads(&d);
    // Root's copy of an empty directory is not queued behind them.
    let empty = base.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let t0 = Instant::now();
    let o = d.zinstall(&["copy", s(&empty), s(&base.path().join("rootcopy"))]);
    let took = t0.elapsed();
    assert!(o.status.success(), "{}", text(&o));
    assert!(took < Duration::from_secs(2), "root's copy took {took:?}");
    // Another uid's copy is served in its turn, not after all of them.
    let theirs = prefix.join("other");
    fs::create_dir(&theirs).unwrap();
    chown(&theirs, OTHER);
    let t0 = Instant::now();
    let o = d.zinstall_as(
        OTHER,
        &["copy", s(&prefix.join("src/d0")), s(&theirs.join("copy"))],
    );
    let other_took = t0.elapsed();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        during <= before + 2 * 2 + 8,
        "daemon threads: {before} before, {during} with a flood queued"
    );
    assert!(
        other_took < Duration::from_secs(30),
        "the other uid's copy took {other_took:?}"
    );
}

/// Waits until every thread of `pid` is stopped (state `T`), for at most
/// 10 s.
fn wait_stopped(pid: u32) {
    let t0 = std::time::Instant::now();
    loop {
        let all = fs::read_dir(format!("/proc/{pid}/task"))
            .map(|tasks| {
                tasks.flatten().all(|t| {
                    fs::read_to_string(t.path().join("stat")).is_ok_and(|st| {
                        // The state follows the parenthesised name.
                        st.rsplit_once(") ")
                            .is_some_and(|(_, rest)| rest.starts_with('T'))
                    })
                })
            })
            .unwrap_or(false);
        if all {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the job's process {pid} did not stop"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The job's id and process of the first job `d` lists with a process.
fn job_with_process(d: &Daemon) -> (u64, u32) {
    let t0 = Instant::now();
    loop {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no job process seen: {}",
            d.log()
        );
        let mut c = d.connect();
        c.send(&json!({"v": 1, "op": "jobs"}));
        let jobs = c.end()["result"].clone();
        let found = jobs.as_array().into_iter().flatten().find_map(|j| {
            Some((j["job"].as_u64()?, j["process"].as_u64()? as u32))
        });
        if let Some(f) = found {
            return f;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A caller stops its own job's process (SIGSTOP) while it holds the
/// granted workers: another uid's 10-file copy still finishes at once
/// (the stopped job holds only its share), and the stopped job is
/// failed and killed once it has made no progress for job_stall_secs,
/// its share given back.
#[test]
fn a_stopped_job_holds_only_its_share_and_is_failed_when_it_stalls() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let base = scratch("zinstall-stopped");
    let prefix = base.path().join("grant");
    fs::create_dir(&prefix).unwrap();
    chown(&prefix, CALLER);
    tree(&prefix.join("src"), 300, 100, CALLER);
    let theirs = prefix.join("other");
    fs::create_dir(&theirs).unwrap();
    tree(&theirs.join("src"), 1, 10, OTHER);
    chown(&theirs, OTHER);
    let d = Daemon::start(&grant(&prefix, "job_stall_secs = 3"));
    let mut client = as_uid(CALLER)
        .arg(env!("CARGO_BIN_EXE_zinstall"))
        .arg(format!("--daemon={}", d.socket.display()))
        .args(["copy", s(&prefix.join("src")), s(&prefix.join("dst"))])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (id, pid) = job_with_process(&d);
    while job(&d, id)["entries"].as_u64().unwrap_or(0) == 0 {
        std::thread::sleep(Duration::from_millis(2));
    }
    // A process this test's daemon started, stopped as its caller may.
    zinstall_sys::process::signal(pid, libc::SIGSTOP);
    wait_stopped(pid);
    let stopped_at = Instant::now();
    let t0 = Instant::now();
    let o = d.zinstall_as(
        OTHER,
        &["copy", s(&theirs.join("src/d0")), s(&theirs.join("copy"))],
    );
    let other_took = t0.elapsed();
    assert!(o.status.success(), "{}", text(&o));
    eprintln!(
        "MEASURE beside a stopped job: another uid's 10-file copy took {} ms",
        other_took.as_millis()
    );
    assert!(
        other_took < Duration::from_secs(2),
        "the other uid's copy took {other_took:?} beside a stopped job"
    );
    // The stopped job: failed as stalled within its window (and a tick).
    let failed = loop {
        let j = job(&d, id);
        if j["state"] == "failed" {
            break j;
        }
        assert!(
            stopped_at.elapsed() < Duration::from_secs(15),
            "the stopped job is {}: {}",
            j["state"],
            d.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let stalled_after = stopped_at.elapsed();
    eprintln!(
        "MEASURE stopped job failed after {} ms (job_stall_secs = 3)",
        stalled_after.as_millis()
    );
    assert_eq!(failed["error"]["kind"], "stalled", "{failed}");
    let msg = failed["error"]["message"].as_str().unwrap_or("");
    assert!(msg.contains("stopped making progress"), "{msg}");
    assert!(stalled_after >= Duration::from_secs(2), "{stalled_after:?}");
    // Its process is gone (killed, reaped).
    let t0 = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists()
        && status_of(pid)
            .get("State")
            .is_none_or(|s| !s.starts_with('Z'))
    {
        assert!(t0.elapsed() < Duration::from_secs(8), "it lives on");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = client.wait();
}

/// Ten uids each keeping four long granted copies going: an eleventh
/// uid's 10-file copy is served in its turn (a new uid before another's
/// fifth, the turns of the flood's jobs passed on each second), within
/// seconds, not after the flood's copies.
#[test]
fn an_eleventh_uid_is_served_beside_ten_uids_flooding() {
    if !zinstall_testkit::require_root() {
        return;
    }
    const FLOODERS: u32 = 10;
    const FIRST: u32 = 64000;
    let base = scratch("zinstall-eleven");
    let prefix = base.path().join("grant");
    fs::create_dir(&prefix).unwrap();
    let uids: Vec<u32> = (FIRST..FIRST + FLOODERS + 1).collect();
    // The flood's copies are long (8,000 files each, read by every
    // flooder from one tree anyone may read): a job that waited for one
    // of them to end would wait for seconds.
    let flood_src = prefix.join("flood");
    tree(&flood_src, 40, 200, 0);
    for &u in &uids {
        let home = prefix.join(format!("u{u}"));
        fs::create_dir(&home).unwrap();
        if u == FIRST + FLOODERS {
            tree(&home.join("src"), 1, 10, u);
        }
        chown(&home, u);
    }
    let users = uids
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let d = Daemon::start(&format!(
        "[[grant]]\nusers = [{users}]\noperations = [\"copy\", \"jobs\"]\n\
         prefixes = [\"{}\"]\n",
        prefix.display()
    ));
    const FLOOD: &str = r#"
import json, os, shutil, socket, sys, threading
path, src, dst, stop = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
done = [0]
def loop(k):
    i = 0
    while not os.path.exists(stop):
        out = "%s/%d-%d" % (dst, k, i)
        i += 1
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        req = {"v": 1, "op": "copy", "args": {"src": src, "dst": out}}
        s.sendall((json.dumps(req) + "\n").encode())
        f = s.makefile()
        for line in f:
            r = json.loads(line)
            if r.get("reply") in ("done", "error"):
                break
        s.close()
        shutil.rmtree(out, ignore_errors=True)
        done[0] += 1
ts = [threading.Thread(target=loop, args=(k,)) for k in range(4)]
for t in ts: t.start()
for t in ts: t.join()
print(done[0])
"#;
    let stop = base.path().join("stop");
    let flood: Vec<std::process::Child> = uids[..FLOODERS as usize]
        .iter()
        .map(|&u| {
            let home = prefix.join(format!("u{u}"));
            as_uid(u)
                .args(["/usr/bin/python3", "-c", FLOOD])
                .args([s(&d.socket), s(&flood_src), s(&home), s(&stop)])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    // Wait until the flood fills the lane: every place taken, more
    // queued or waiting for workers.
    let t0 = Instant::now();
    let busy = loop {
        let mut c = d.connect();
        c.send(&json!({"v": 1, "op": "jobs"}));
        let jobs = c.end()["result"].clone();
        let active = jobs
            .as_array()
            .into_iter()
            .flatten()
            .filter(|j| {
                matches!(j["state"].as_str(), Some("queued" | "running"))
            })
            .count();
        if active >= 30 {
            break active;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the flood did not build up: {active} active"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let eleventh = *uids.last().unwrap();
    let home = prefix.join(format!("u{eleventh}"));
    let t0 = Instant::now();
    let o = d.zinstall_as(
        eleventh,
        &["copy", s(&home.join("src/d0")), s(&home.join("copy"))],
    );
    let took = t0.elapsed();
    // The flood's clients go: their jobs are cancelled.
    fs::write(&stop, b"").unwrap();
    for mut c in flood {
        let _ = c.kill();
        let _ = c.wait();
    }
    eprintln!(
        "MEASURE an 11th uid's 10-file copy beside {busy} active flood jobs \
         of 8,000 files each: {} ms",
        took.as_millis()
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(files_under(&home.join("copy")), 10);
    assert!(
        took < Duration::from_secs(3),
        "the 11th uid waited {took:?}"
    );
}

/// Regular files under `dir`.
fn files_under(dir: &Path) -> usize {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                n += 1;
            }
        }
    }
    n
}

/// The daemon's resident memory and its peak, from /proc, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let st = status_of(pid);
    let kib = |k: &str| {
        st.get(k)
            .and_then(|v| v.split(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    (kib("VmRSS"), kib("VmHWM"))
}

/// Fifty granted copies, each failing on 100 unreadable files under long
/// paths: the daemon's log grows by a bounded amount (each failure a
/// line of a few hundred bytes, and only a uid's share of them), its
/// memory hardly moves, a `jobs` reply stays under 1 MiB with every
/// failure summed up, `status` gives one job's errors (100, bounded),
/// and another user's finished job is still listed.
#[test]
fn fifty_failing_copies_cost_a_bounded_log_memory_and_reply() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let base = scratch("zinstall-failing");
    let prefix = base.path().join("grant");
    fs::create_dir(&prefix).unwrap();
    // 100 files only root may read, under a path of ~2,000 bytes.
    let mut deep = prefix.join("src");
    for i in 0..8 {
        deep.push(format!("{i}{}", "d".repeat(240)));
    }
    fs::create_dir_all(&deep).unwrap();
    for i in 0..100 {
        let f = deep.join(format!("{i}{}", "f".repeat(200)));
        fs::write(&f, b"secret").unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o000)).unwrap();
    }
    let mut p = deep.clone();
    while p != prefix {
        chown(&p, CALLER);
        p.pop();
    }
    chown(&prefix, CALLER);
    let theirs = prefix.join("other");
    fs::create_dir(&theirs).unwrap();
    tree(&theirs.join("src"), 1, 2, OTHER);
    chown(&theirs, OTHER);
    let d = Daemon::start(&grant(&prefix, "keep_finished = 60"));
    // Another user's finished job first.
    let o = d.zinstall_as(
        OTHER,
        &["copy", s(&theirs.join("src")), s(&theirs.join("copy"))],
    );
    assert!(o.status.success(), "{}", text(&o));
    let log_before = d.log().len();
    let (_, hwm_before) = memory_kib(d.child.id());
    let failed = Arc::new(AtomicUsize::new(0));
    std::thread::scope(|sc| {
        for t in 0..4 {
            let (d, prefix, failed) = (&d, &prefix, Arc::clone(&failed));
            sc.spawn(move || {
                for i in (t..50).step_by(4) {
                    let dst = prefix.join(format!("dst{i}"));
                    let o = d.zinstall_as(
                        CALLER,
                        &["copy", s(&prefix.join("src")), s(&dst)],
                    );
                    if !o.status.success() {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(failed.load(Ordering::Relaxed), 50, "every copy fails");
    let grown = d.log().len() - log_before;
    let (rss, hwm) = memory_kib(d.child.id());
    let mut raw = String::new();
    {
        use std::io::BufRead;
        let mut r = std::io::BufReader::new(
            std::os::unix::net::UnixStream::connect(&d.socket).unwrap(),
        );
        let mut w = r.get_ref().try_clone().unwrap();
        use std::io::Write;
        w.write_all(b"{\"v\":1,\"op\":\"jobs\"}\n").unwrap();
        r.read_line(&mut raw).unwrap();
    }
    let jobs: serde_json::Value = serde_json::from_str(&raw).unwrap();
    let list = jobs["result"].as_array().unwrap().clone();
    let failed_ids: Vec<u64> = list
        .iter()
        .filter(|j| j["state"] == "failed")
        .filter_map(|j| j["job"].as_u64())
        .collect();
    let mut status_raw = String::new();
    {
        use std::io::{BufRead, Write};
        let mut r = std::io::BufReader::new(
            std::os::unix::net::UnixStream::connect(&d.socket).unwrap(),
        );
        let mut w = r.get_ref().try_clone().unwrap();
        writeln!(
            w,
            "{}",
            json!({"v": 1, "op": "status", "args": {"job": failed_ids[0]}})
        )
        .unwrap();
        r.read_line(&mut status_raw).unwrap();
    }
    let status: serde_json::Value = serde_json::from_str(&status_raw).unwrap();
    eprintln!(
        "MEASURE 50 failing copies: log +{} KiB, daemon RSS {} MiB (peak {} \
         MiB, {} MiB before), jobs reply {} KiB, status reply {} KiB",
        grown >> 10,
        rss >> 10,
        hwm >> 10,
        hwm_before >> 10,
        raw.len() >> 10,
        status_raw.len() >> 10
    );
    assert!(grown < 256 << 10, "the log grew by {} KiB", grown >> 10);
    assert!(
        d.log().lines().all(|l| l.len() <= 64 << 10),
        "a log line is longer than 64 KiB"
    );
    assert!(
        hwm.saturating_sub(hwm_before) < 64 << 10,
        "the daemon's peak memory grew by {} MiB",
        hwm.saturating_sub(hwm_before) >> 10
    );
    assert!(raw.len() < 1 << 20, "a jobs reply of {} bytes", raw.len());
    assert_eq!(failed_ids.len(), 50, "every failure is listed");
    for j in list.iter().filter(|j| j["state"] == "failed") {
        assert!(j["error"]["errors"].is_null(), "{}", j["error"]);
        let m = j["error"]["message"].as_str().unwrap();
        assert!(m.len() < 1024 && m.contains("more errors"), "{m}");
    }
    // Another user's record is kept beside the 50 failures.
    assert!(
        list.iter()
            .any(|j| j["uid"] == OTHER && j["state"] == "done"),
        "uid {OTHER}'s job was pushed out"
    );
    // One job's detail: its 100 errors, each bounded.
    let errors = status["result"]["error"]["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 100);
    assert!(errors.iter().all(|e| e.as_str().unwrap().len() <= 1100));
    assert!(status_raw.len() < 256 << 10, "{} bytes", status_raw.len());
}
