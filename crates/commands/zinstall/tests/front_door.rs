//! zinstalld's front door as an attacker meets it: a real daemon on a
//! real socket, clients as other uids (`setpriv` running this binary's
//! `client` below). Nothing is spent on a request before its caller is
//! known and the request is sane; what a client sends is never repeated
//! whole; refusals cost a bounded number of log lines; a uid without a
//! grant gets one refusal; a few uids together cannot keep every other
//! one out; and the install log is never written through a link.

use crate::boundary::harness;

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use harness::*;

/// Env: the socket the client connects to (unset: not run as a client).
const SOCKET: &str = "FRONT_DOOR_SOCKET";
/// Env: the lines sent on each connection, one reply read after each
/// (`@op:N`: a request whose operation's name is N bytes).
const LINES: &str = "FRONT_DOOR_LINES";
/// Env: how many connections, one after the other.
const REPEAT: &str = "FRONT_DOOR_REPEAT";
/// Env: hold that many connections (each served `version` first) until
/// standard input closes.
const HOLD: &str = "FRONT_DOOR_HOLD";

/// A client run as another uid by the tests here (`as_client`): its
/// replies, one JSON line each on standard output (their length, kind and
/// the start of their message), `{"closed":true}` when the daemon ended
/// a connection before a reply.
#[test]
#[ignore = "run as another uid by the tests in this file"]
fn client() {
    let Ok(socket) = std::env::var(SOCKET) else {
        return;
    };
    let out = std::io::stdout();
    let mut out = out.lock();
    if let Ok(n) = std::env::var(HOLD) {
        let n: usize = n.parse().unwrap();
        let mut held = Vec::new();
        for _ in 0..n {
            let s = UnixStream::connect(&socket).unwrap();
            let mut c = Conn::new(s);
            c.send(&json!({"v": 1, "op": "version"}));
            let r = c.reply().unwrap();
            assert_eq!(r["reply"], "ok", "{r}");
            held.push(c);
        }
        writeln!(out, "held").unwrap();
        out.flush().unwrap();
        let mut rest = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut rest);
        return;
    }
    let lines: Vec<Vec<u8>> = std::env::var(LINES)
        .unwrap()
        .split('\n')
        .map(|l| match l.strip_prefix("@op:") {
            Some(n) => {
                let name = "x".repeat(n.parse().unwrap());
                format!(r#"{{"v":1,"op":"{name}"}}"#).into_bytes()
            }
            None => l.as_bytes().to_vec(),
        })
        .collect();
    let repeat: usize = std::env::var(REPEAT)
        .map(|n| n.parse().unwrap())
        .unwrap_or(1);
    for _ in 0..repeat {
        let s = UnixStream::connect(&socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut input = BufReader::new(s.try_clone().unwrap());
        let mut s = s;
        for l in &lines {
            // The daemon may close before it read the whole line.
            let _ = s.write_all(l).and_then(|()| s.write_all(b"\n"));
            let mut reply = String::new();
            match input.read_line(&mut reply) {
                Ok(n) if n > 0 => {
                    let v: Value = serde_json::from_str(&reply).unwrap();
                    let message = v["error"]["message"].as_str().unwrap_or("");
                    let start: String = message.chars().take(300).collect();
                    let line = json!({
                        "len": reply.len(),
                        "reply": v["reply"],
                        "kind": v["error"]["kind"],
                        "message": start,
                    });
                    writeln!(out, "{line}").unwrap();
                }
                _ => {
                    writeln!(out, "{}", json!({"closed": true})).unwrap();
                    break;
                }
            }
        }
    }
}

/// `client` as `uid`, sending `lines` on each of `repeat` connections
/// one after the other: its replies.
fn as_client(
    d: &Daemon,
    uid: u32,
    lines: &[&str],
    repeat: usize,
) -> Vec<Value> {
    let o = client_command(d, uid)
        .env(LINES, lines.join("\n"))
        .env(REPEAT, repeat.to_string())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &Value| v.is_object())
        .collect()
}

/// `client` as `uid` holding `n` idle connections (each served once),
/// until the returned child's standard input is closed.
fn holding(d: &Daemon, uid: u32, n: usize) -> Child {
    let mut c = client_command(d, uid)
        .env(HOLD, n.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Past libtest's own lines.
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let mut seen = String::new();
    for _ in 0..10 {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 || line.trim() == "held" {
            seen.push_str(&line);
            break;
        }
        seen.push_str(&line);
    }
    assert!(seen.ends_with("held\n"), "uid {uid}: {seen}: {}", d.log());
    // What libtest prints at the end is read too, so that its summary
    // meets a reader rather than a closed pipe.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    c
}

fn client_command(d: &Daemon, uid: u32) -> Command {
    let mut c = as_uid(uid);
    c.arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "front_door::client",
            "--ignored",
            "--nocapture",
            "--quiet",
        ])
        .args(["--test-threads", "1"])
        .env(SOCKET, &d.socket);
    c
}

fn log_size(d: &Daemon) -> u64 {
    fs::metadata(d.path("zinstalld.log")).unwrap().len()
}

/// The daemon's log records, parsed.
fn records(d: &Daemon) -> Vec<Value> {
    d.log()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// 200 requests naming a 1 MB operation, from a uid without a grant,
/// cost the log little, and no reply repeats the name: those under the
/// line limit are quoted by their first 200 bytes and their length.
#[test]
fn long_operation_names_are_never_repeated_whole() {
    if !zinstall_testkit::require_root() {
        return;
    }
    zinstall_testkit::need("setpriv");
    let d = Daemon::start(&format!(
        "[[grant]]\nusers = [{CALLER}]\noperations = [\"jobs\"]\n"
    ));
    let before = log_size(&d);
    let t0 = Instant::now();
    let replies = as_client(&d, 40001, &["@op:1000000"], 200);
    assert_eq!(replies.len(), 200, "{:?}", &replies[..3.min(replies.len())]);
    for r in &replies {
        assert!(r["len"].as_u64().unwrap() < 1024, "{r}");
    }
    // A name under the line limit from a granted uid: told, cut.
    let replies = as_client(&d, CALLER, &["@op:100000"; 3], 1);
    assert_eq!(replies.len(), 3, "{replies:?}");
    for r in &replies {
        assert!(r["len"].as_u64().unwrap() < 1024, "{r}");
        let m = r["message"].as_str().unwrap();
        assert!(m.contains("unknown operation"), "{m}");
        assert!(m.contains("…(100000 bytes)"), "{m}");
    }
    let grown = log_size(&d) - before;
    assert!(grown < 256 << 10, "the log grew by {grown} bytes");
    assert!(t0.elapsed() < Duration::from_secs(60));
}

/// The peak memory of a process, from `/proc/PID/status`, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .unwrap()
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kb << 10
}

/// 31 connections at once, each sending a line of `{"a":0}` objects (a
/// mebibyte, or just under the line limit; in a copy's arguments or as
/// the request itself): the daemon's peak memory hardly moves, and each
/// gets an error.
#[test]
fn lines_of_objects_cost_the_daemon_little_memory() {
    let d = Daemon::start("");
    let r = d.connect().call_one(&json!({"v": 1, "op": "version"}));
    assert_eq!(r["reply"], "ok", "{r}");
    let before = peak_rss(d.child.id());
    let objects = |bytes: usize| {
        let n = bytes / 8;
        let mut s = String::with_capacity(bytes + 16);
        for i in 0..n {
            if i > 0 {
                s.push(',');
            }
            s.push_str(r#"{"a":0}"#);
        }
        s
    };
    let big = objects(1 << 20);
    let under = objects(200 << 10);
    let lines = [
        format!(r#"{{"v":1,"op":"copy","args":[{big}]}}"#),
        format!(
            r#"{{"v":1,"op":"copy","args":{{"src":"/a","dst":"/b","exclude":[{under}]}}}}"#
        ),
        format!(r#"{{"args":[{under}],"op":"copy","v":1}}"#),
        format!("{{{}}}", under.replace(['{', '}'], "")),
    ];
    let t0 = Instant::now();
    for line in &lines {
        let threads: Vec<_> = (0..31)
            .map(|_| {
                let socket = d.socket.clone();
                let line = line.clone();
                std::thread::spawn(move || {
                    let mut c = Conn::new(UnixStream::connect(socket).unwrap());
                    let _ = c.out.write_all(line.as_bytes());
                    let _ = c.out.write_all(b"\n");
                    c.reply()
                })
            })
            .collect();
        for t in threads {
            let r = t.join().unwrap().expect("a reply");
            assert_eq!(r["error"]["kind"], "request", "{r}");
        }
    }
    let grown = peak_rss(d.child.id()).saturating_sub(before);
    assert!(grown < 64 << 20, "peak memory grew by {} MiB", grown >> 20);
    assert!(t0.elapsed() < Duration::from_secs(60));
}

/// Thousands of refusals in a few seconds (busy connections from one uid,
/// denied requests from another) log a few lines each, and summary lines
/// that account for every other one.
#[test]
fn refusal_floods_log_a_few_lines_and_a_summary() {
    if !zinstall_testkit::require_root() {
        return;
    }
    zinstall_testkit::need("setpriv");
    let d = Daemon::start(&format!(
        "max_connections_per_uid = 1\nrefusal_log_window_secs = 1\n\
         [[grant]]\nusers = [{CALLER}, {OTHER}]\noperations = [\"jobs\"]\n"
    ));
    let mut holder = holding(&d, CALLER, 1);
    let busy = as_client(&d, CALLER, &[r#"{"v":1,"op":"jobs"}"#], 2000);
    assert_eq!(busy.len(), 2000);
    assert!(busy.iter().all(|r| r["kind"] == "busy"), "{:?}", busy[0]);
    let denied = [r#"{"v":1,"op":"cache-list"}"#; 2000];
    let replies = as_client(&d, OTHER, &denied, 1);
    assert_eq!(replies.len(), 2000);
    assert!(
        replies.iter().all(|r| r["kind"] == "denied"),
        "{:?}",
        replies[0]
    );
    drop(holder.stdin.take());
    let _ = holder.wait();
    // Every refusal is a line or counted in a summary, once its window
    // ended (the accept loop sums them up within a tick).
    let accounted = |uid: u32, msg: &str| {
        let recs = records(&d);
        let lines = recs
            .iter()
            .filter(|r| r["uid"] == uid && r["msg"] == msg)
            .count() as u64;
        let summed: u64 = recs
            .iter()
            .filter(|r| {
                r["uid"] == uid
                    && r["msg"].as_str().is_some_and(|m| {
                        m.contains(&format!(
                            "more refusals from uid {uid} in the last 1 s"
                        ))
                    })
            })
            .map(|r| r["count"].as_u64().unwrap())
            .sum();
        (lines, summed)
    };
    let t0 = Instant::now();
    loop {
        let (busy_lines, busy_summed) = accounted(CALLER, "busy");
        let (denied_lines, denied_summed) = accounted(OTHER, "refused");
        if busy_lines + busy_summed == 2000
            && denied_lines + denied_summed == 2000
        {
            assert!(busy_lines <= 5 * 10, "{busy_lines} busy lines");
            assert!(denied_lines <= 5 * 10, "{denied_lines} refused lines");
            assert!(busy_summed > 0 && denied_summed > 0);
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "busy {busy_lines}+{busy_summed}, refused {denied_lines}+{denied_summed}: {}",
            d.log()
                .lines()
                .rev()
                .take(20)
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        d.log().lines().count() < 200,
        "{} lines",
        d.log().lines().count()
    );
}

/// A uid that no grant names may ask `version`; anything else, or a bad
/// request, gets one refusal and the connection is closed.
#[test]
fn a_uid_without_a_grant_gets_one_refusal() {
    if !zinstall_testkit::require_root() {
        return;
    }
    zinstall_testkit::need("setpriv");
    let d = Daemon::start(&format!(
        "[[grant]]\nusers = [{CALLER}]\noperations = [\"jobs\"]\n"
    ));
    let version = r#"{"v":1,"op":"version"}"#;
    let r = as_client(&d, 40002, &[r#"{"v":1,"op":"jobs"}"#, version], 1);
    assert_eq!(r.len(), 2, "{r:?}");
    assert_eq!(r[0]["kind"], "denied", "{r:?}");
    assert!(
        r[0]["message"]
            .as_str()
            .unwrap()
            .contains("uid 40002 has no grant"),
        "{r:?}"
    );
    assert_eq!(r[1]["closed"], true, "{r:?}");
    let r = as_client(&d, 40002, &["{not json", version], 1);
    assert_eq!(r[0]["kind"], "request", "{r:?}");
    assert_eq!(r[1]["closed"], true, "{r:?}");
    let r = as_client(&d, 40002, &[version, version], 1);
    assert!(r.iter().all(|r| r["reply"] == "ok"), "{r:?}");
    // A granted uid's refusal leaves its connection open.
    let r =
        as_client(&d, CALLER, &[r#"{"v":1,"op":"cache-list"}"#, version], 1);
    assert_eq!(r[0]["kind"], "denied", "{r:?}");
    assert_eq!(r[1]["reply"], "ok", "{r:?}");
}

/// 20 uids holding every place with idle connections: one more uid still
/// gets in (the oldest idle connection of a largest holder makes room),
/// and root too.
#[test]
fn many_uids_holding_every_place_leave_room_for_one_more() {
    if !zinstall_testkit::require_root() {
        return;
    }
    zinstall_testkit::need("setpriv");
    let d =
        Daemon::start("max_connections = 40\nmax_connections_per_uid = 4\n");
    let mut holders: Vec<Child> =
        (40000..40020).map(|uid| holding(&d, uid, 2)).collect();
    // Served `version`, and holding on.
    holders.push(holding(&d, 40030, 1));
    assert!(
        d.log().contains("connection closed to make room"),
        "{}",
        d.log()
    );
    // Every place is taken again: a uid holding as many as the most any
    // holds is told the daemon is busy.
    let r = as_client(&d, 40019, &[r#"{"v":1,"op":"version"}"#], 1);
    assert_eq!(r[0]["kind"], "busy", "{r:?}");
    assert!(
        r[0]["message"]
            .as_str()
            .unwrap()
            .contains("max_connections"),
        "{r:?}"
    );
    let r = d.connect().call_one(&json!({"v": 1, "op": "version"}));
    assert_eq!(r["reply"], "ok", "{r}");
    for h in &mut holders {
        drop(h.stdin.take());
    }
    for mut h in holders {
        let _ = h.wait();
    }
}

/// A symlink planted at the install log's path is not followed: its
/// target is unchanged, a note names the link, and the install goes on.
#[test]
fn a_symlink_at_the_install_log_is_not_followed() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = tempfile::Builder::new()
        .prefix("front-door-log")
        .tempdir_in("/var/tmp")
        .unwrap();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let src = d.path().join("src");
    fs::create_dir_all(src.join("usr/bin")).unwrap();
    fs::write(src.join("usr/bin/tool"), "tool").unwrap();
    let victim = d.path().join("victim");
    fs::write(&victim, "root's own file\n").unwrap();
    let logs = d.path().join("logs");
    fs::create_dir(&logs).unwrap();
    let log = logs.join("install.log");
    symlink(&victim, &log).unwrap();
    let profile = d.path().join("profile.toml");
    fs::write(
        &profile,
        format!(
            "source_root = \"{}\"\ntrees = [\"usr\"]\nlog = \"{}\"\n",
            src.display(),
            log.display()
        ),
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .args(["install", "--profile"])
        .arg(&profile)
        .arg("--zonepath")
        .arg(d.path().join("z"))
        .output()
        .unwrap();
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert_eq!(fs::read_to_string(&victim).unwrap(), "root's own file\n");
    assert!(
        out.contains(&format!("{} is a symlink", log.display())),
        "{out}"
    );
    assert!(d.path().join("z/root/usr/bin/tool").exists());
    // The same through --log, and a directory anyone may write is
    // refused too.
    let open = d.path().join("open");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .args(["install", "--profile"])
        .arg(&profile)
        .arg("--log")
        .arg(open.join("install.log"))
        .arg("--zonepath")
        .arg(d.path().join("z2"))
        .output()
        .unwrap();
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("writable by everyone"), "{out}");
    assert!(!open.join("install.log").exists());
}

trait CallOne {
    fn call_one(&mut self, v: &Value) -> Value;
}

impl CallOne for Conn {
    fn call_one(&mut self, v: &Value) -> Value {
        self.send(v);
        self.reply().expect("a reply")
    }
}
