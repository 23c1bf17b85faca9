//! A zinstalld on a scratch socket, clients as other uids (setpriv), and
//! a registry on the loopback that serves what a test tells it to,
//! hostile answers included.

// Shared by the tests of one binary, each using a part.
#![allow(dead_code)]

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::oci::support;

/// Unprivileged uids the clients run as (nobody, and one beside it).
pub const CALLER: u32 = 65534;
pub const OTHER: u32 = 65533;

pub struct Daemon {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
}

impl Daemon {
    /// zinstalld in a world-traversable scratch directory with `extra`
    /// configuration, its socket open to all (grants decide).
    pub fn start(extra: &str) -> Daemon {
        Daemon::start_with(extra, &[])
    }

    /// The same, run under `wrapper` (e.g. strace) when not empty.
    pub fn start_with(extra: &str, wrapper: &[&str]) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("zinstalld-boundary")
            .tempdir_in("/var/tmp")
            .unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))
            .unwrap();
        let socket = dir.path().join("zinstalld.sock");
        let config = dir.path().join("zinstalld.toml");
        fs::write(
            &config,
            format!(
                "copy_threads = 2\ndefaults = \"{}\"\ncache = \"{}\"\n\
                 socket_mode = \"0666\"\n{extra}",
                Path::new("/dev/null").display(),
                dir.path().join("cache").display(),
            ),
        )
        .unwrap();
        let log = fs::File::create(dir.path().join("zinstalld.log")).unwrap();
        let mut cmd = match wrapper.split_first() {
            Some((prog, args)) => {
                let mut c = zinstall_testkit::tool(prog);
                c.args(args).arg(env!("CARGO_BIN_EXE_zinstalld"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_zinstalld")),
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

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.path("zinstalld.log")).unwrap_or_default()
    }

    /// `zinstall --daemon=SOCKET ARGS` as root.
    pub fn zinstall(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_zinstall"))
            .arg(format!("--daemon={}", self.socket.display()))
            .args(args)
            .env_remove("ZINSTALL_DAEMON")
            .output()
            .unwrap()
    }

    /// The same as `uid` (its own gid, no other group).
    pub fn zinstall_as(&self, uid: u32, args: &[&str]) -> Output {
        as_uid(uid)
            .arg(env!("CARGO_BIN_EXE_zinstall"))
            .arg(format!("--daemon={}", self.socket.display()))
            .args(args)
            .output()
            .unwrap()
    }

    pub fn connect(&self) -> Conn {
        Conn::new(UnixStream::connect(&self.socket).unwrap())
    }

    /// Sends `sig` to the daemon (`pid`: the daemon's, if the child is a
    /// wrapper).
    pub fn signal(&self, pid: u32, sig: i32) {
        zinstall_sys::process::signal(pid, sig);
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = Command::new("chattr")
            .args(["-R", "-i"])
            .arg(self.dir.path())
            .stderr(Stdio::null())
            .status();
    }
}

/// `setpriv` to `uid` (gid the same, no supplementary groups).
pub fn as_uid(uid: u32) -> Command {
    let mut c = zinstall_testkit::tool("setpriv");
    c.args([
        &format!("--reuid={uid}"),
        &format!("--regid={uid}"),
        "--clear-groups",
        "--",
    ]);
    c
}

/// A raw protocol connection.
pub struct Conn {
    pub out: UnixStream,
    pub input: BufReader<UnixStream>,
}

impl Conn {
    pub fn new(s: UnixStream) -> Conn {
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Conn {
            input: BufReader::new(s.try_clone().unwrap()),
            out: s,
        }
    }

    pub fn send(&mut self, v: &Value) {
        writeln!(self.out, "{v}").unwrap();
    }

    pub fn reply(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.input.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(&line).unwrap()),
        }
    }

    /// Reads until a job's last reply.
    pub fn end(&mut self) -> Value {
        while let Some(r) = self.reply() {
            if matches!(r["reply"].as_str(), Some("done" | "error" | "ok")) {
                return r;
            }
        }
        panic!("the connection ended before the reply");
    }
}

pub fn text(o: &Output) -> String {
    support::text(o)
}

/// What the fake registry does with a request for a blob.
#[derive(Clone)]
pub enum Serve {
    /// The bytes, whole (and from an offset, for a `Range`).
    Bytes(Vec<u8>),
    /// The bytes' length announced, then one byte every 300 ms.
    Drip(Vec<u8>),
    /// The bytes' length announced, then nothing, ever.
    Silent(Vec<u8>),
    /// The bytes' length announced, the first `n` sent, the connection
    /// cut.
    Cut(Vec<u8>, usize),
    /// No length announced; zeros until `n` bytes were sent, then cut.
    Endless(usize),
    /// A status and nothing else.
    Status(u16),
}

/// A registry on 127.0.0.1 serving one repository's manifest (by tag
/// `t` and by digest) and blobs as told; every request line logged.
pub struct FakeRegistry {
    pub port: u16,
    pub repo: String,
    blobs: Arc<Mutex<HashMap<String, Serve>>>,
    pub requests: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl FakeRegistry {
    /// Serves the image of the layout `lay` (its blobs as they are).
    pub fn serve(lay: &Path) -> FakeRegistry {
        let mut blobs = HashMap::new();
        for e in fs::read_dir(lay.join("blobs/sha256")).unwrap() {
            let e = e.unwrap();
            let digest = format!("sha256:{}", e.file_name().to_string_lossy());
            blobs.insert(digest, Serve::Bytes(fs::read(e.path()).unwrap()));
        }
        let (manifest_path, _) = support::manifest_of(lay);
        let manifest = fs::read(manifest_path).unwrap();
        let manifest_digest = format!("sha256:{}", support::sha256(&manifest));
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let r = FakeRegistry {
            port,
            repo: "test/img".into(),
            blobs: Arc::new(Mutex::new(blobs)),
            requests: Arc::new(Mutex::new(Vec::new())),
            stop: Arc::new(AtomicBool::new(false)),
        };
        let (blobs, requests, stop) =
            (r.blobs.clone(), r.requests.clone(), r.stop.clone());
        std::thread::spawn(move || {
            for c in l.incoming() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(c) = c else { continue };
                let (blobs, requests, stop) =
                    (blobs.clone(), requests.clone(), stop.clone());
                let (m, md) = (manifest.clone(), manifest_digest.clone());
                std::thread::spawn(move || {
                    handle(c, &m, &md, &blobs, &requests, &stop)
                });
            }
        });
        r
    }

    /// `127.0.0.1:PORT/test/img:t`.
    pub fn reference(&self) -> String {
        format!("127.0.0.1:{}/{}:t", self.port, self.repo)
    }

    pub fn set(&self, digest: &str, how: Serve) {
        self.blobs.lock().unwrap().insert(digest.to_string(), how);
    }

    /// Requests whose line contains `what`.
    pub fn count(&self, what: &str) -> usize {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(what))
            .count()
    }

    /// Waits until a request containing `what` came.
    pub fn wait_for(&self, what: &str) {
        let t0 = Instant::now();
        while self.count(what) == 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "no request for {what}: {:?}",
                self.requests.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for FakeRegistry {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn handle(
    mut c: TcpStream,
    manifest: &[u8],
    manifest_digest: &str,
    blobs: &Mutex<HashMap<String, Serve>>,
    requests: &Mutex<Vec<String>>,
    stop: &AtomicBool,
) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match c.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let line = head.lines().next().unwrap_or_default().to_string();
    let from: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Range: bytes="))
        .or_else(|| head.lines().find_map(|l| l.strip_prefix("range: bytes=")))
        .and_then(|r| r.trim_end_matches('-').parse().ok())
        .unwrap_or(0);
    requests.lock().unwrap().push(format!("{line} from={from}"));
    let path = line.split(' ').nth(1).unwrap_or_default().to_string();
    let mut respond = |status: &str, headers: &str, body: &[u8]| {
        let _ = write!(
            c,
            "HTTP/1.1 {status}\r\nConnection: close\r\n{headers}\r\n"
        );
        let _ = c.write_all(body);
    };
    if path == "/v2/" {
        return respond("200 OK", "Content-Length: 2\r\n", b"{}");
    }
    if path.contains("/manifests/") {
        let r = path.rsplit('/').next().unwrap_or_default();
        if r == "t" || r == manifest_digest {
            return respond(
                "200 OK",
                &format!(
                    "Content-Type: application/vnd.oci.image.manifest.v1+json\r\n\
                     Content-Length: {}\r\n",
                    manifest.len()
                ),
                manifest,
            );
        }
        return respond("404 Not Found", "Content-Length: 0\r\n", b"");
    }
    let digest = path.rsplit('/').next().unwrap_or_default();
    let Some(how) = blobs.lock().unwrap().get(digest).cloned() else {
        return respond("404 Not Found", "Content-Length: 0\r\n", b"");
    };
    let partial = |bytes: &[u8]| {
        if from > 0 && from < bytes.len() {
            (
                "206 Partial Content".to_string(),
                format!(
                    "Content-Range: bytes {from}-{}/{}\r\nContent-Length: {}\r\n",
                    bytes.len() - 1,
                    bytes.len(),
                    bytes.len() - from
                ),
                from,
            )
        } else {
            (
                "200 OK".to_string(),
                format!("Content-Length: {}\r\n", bytes.len()),
                0,
            )
        }
    };
    match how {
        Serve::Bytes(b) => {
            let (status, headers, at) = partial(&b);
            respond(&status, &headers, &b[at..]);
        }
        Serve::Drip(b) => {
            let (status, headers, at) = partial(&b);
            respond(&status, &headers, b"");
            for x in &b[at..] {
                if stop.load(Ordering::SeqCst) || c.write_all(&[*x]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        }
        Serve::Silent(b) => {
            let (status, headers, _) = partial(&b);
            respond(&status, &headers, b"");
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Serve::Cut(b, n) => {
            let (status, headers, at) = partial(&b);
            let end = n.max(at).min(b.len());
            respond(&status, &headers, &b[at..end]);
            let _ = c.shutdown(Shutdown::Both);
        }
        Serve::Endless(n) => {
            respond("200 OK", "", b"");
            let zeros = vec![0u8; 64 << 10];
            let mut sent = 0;
            while sent < n && !stop.load(Ordering::SeqCst) {
                if c.write_all(&zeros).is_err() {
                    break;
                }
                sent += zeros.len();
            }
            let _ = c.shutdown(Shutdown::Both);
        }
        Serve::Status(s) => {
            respond(&format!("{s} Refused"), "Content-Length: 0\r\n", b"");
        }
    }
}

/// A layout (image `t`) of one gzipped layer holding `etc/os-release`
/// and `srv/data` (`size` pseudo-random bytes, so that it does not
/// shrink); `tweak` as [`support::write_layout`]'s. Returns the layer's
/// digest and its bytes.
pub fn image(
    lay: &Path,
    size: usize,
    tweak: &dyn Fn(&str, &mut Value),
) -> (String, Vec<u8>) {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let data: Vec<u8> = (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let layer = support::layer_tar(&[
        support::Ent::Dir("etc/"),
        support::Ent::File("etc/os-release", b"ID=test\n"),
        support::Ent::Dir("srv/"),
        support::Ent::File("srv/data", &data),
    ]);
    support::write_layout(lay, &[layer], support::host_arch(), tweak);
    let (_, m) = support::manifest_of(lay);
    let digest = m["layers"][0]["digest"].as_str().unwrap().to_string();
    let bytes = fs::read(support::blob_path(lay, &digest)).unwrap();
    (digest, bytes)
}

/// The files under `dir` (recursively), as paths relative to it.
pub fn files_in(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.push(
                    e.path().strip_prefix(dir).unwrap().display().to_string(),
                );
            }
        }
    }
    out.sort();
    out
}
