//! Images pulled from a real registry (Debian's docker-registry, on
//! 127.0.0.1 with a temporary config), pushed there by skopeo: by tag and
//! by digest, into installs and provisions; a tampered blob; a registry
//! whose connection breaks mid-blob, and one that goes away; eight
//! provisions of one image at once. What crosses the wire is counted in
//! the registry's own access log.

// Linux only: the tree is made with Linux's xattr namespaces (user.*,
// trusted.*, security.capability) and POSIX ACLs (setfacl, setcap).
// illumos keeps extended attributes as attribute directories and ACLs as
// NFSv4 ACLs, which these fixtures do not make.
#![cfg(target_os = "linux")]

use zinstall_testkit::tools;

use zinstall_testkit::tmp;

use crate::oci::support;

use std::fs;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use support::*;

/// A docker-registry serving from a temporary directory; stopped when
/// dropped, so that a failing assertion never leaves it running.
struct Registry {
    child: Child,
    port: u16,
    data: PathBuf,
    log: PathBuf,
}

impl Registry {
    fn start(dir: &Path) -> Registry {
        let data = dir.join("registry-data");
        let log = dir.join("registry.log");
        let config = dir.join("registry.yml");
        let port = free_port();
        fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    \
                 rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
                data.display()
            ),
        )
        .unwrap();
        // The access log (one line per request) is on standard output.
        let out = fs::File::create(&log).unwrap();
        let child = tools::tool("docker-registry")
            .args(["serve", s(&config)])
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        let r = Registry {
            child,
            port,
            data,
            log,
        };
        let t0 = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "registry did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        r
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Pushes the layout `lay`'s image `t` as `REPO:TAG`.
    fn push(&self, lay: &Path, repo_tag: &str) {
        run(
            "skopeo",
            &[
                "copy",
                "--dest-tls-verify=false",
                &format!("oci:{}:t", lay.display()),
                &format!("docker://{}/{repo_tag}", self.host()),
            ],
        );
    }

    /// Access-log lines of GETs of `path` answered with `status`.
    fn gets(&self, path: &str, status: u16) -> usize {
        let log = fs::read_to_string(&self.log).unwrap();
        log.lines()
            .filter(|l| {
                l.contains(&format!("\"GET {path} HTTP/1.1\" {status} "))
            })
            .count()
    }

    /// The file the registry serves blob `digest` from.
    fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.data
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A layout (image `t`) of two layers: a small base with /etc, then an
/// 8 MiB file, so a transfer can be cut in the middle of a blob. Returns
/// the layer blobs' digests, lowest first.
fn image(lay: &Path, seed: u64) -> Vec<String> {
    let big = zinstall_testkit::pseudo_random(8 << 20, seed);
    let base = layer_tar(&[
        Ent::Dir("etc/"),
        Ent::File("etc/os-release", b"ID=test\n"),
        Ent::Dir("usr/"),
        Ent::File("usr/base", b"base"),
    ]);
    let top = layer_tar(&[Ent::Dir("srv/"), Ent::File("srv/big", &big)]);
    write_layout(lay, &[base, top], host_arch(), &|_, _| {});
    let (_, manifest) = first_manifest(lay);
    manifest["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["digest"].as_str().unwrap().to_string())
        .collect()
}

/// The layout's image's manifest: its digest and JSON.
fn first_manifest(lay: &Path) -> (String, serde_json::Value) {
    let (path, m) = manifest_of(lay);
    let hex = path.file_name().unwrap().to_string_lossy().into_owned();
    (format!("sha256:{hex}"), m)
}

/// `zinstall provision IMAGE` of one guest with the image's own
/// identity, to compare with the image.
fn provision_cmd(image: &str, out: &Path, cache: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zinstall"));
    c.env("ZINSTALL_DEFAULTS", "/dev/null").args([
        "provision",
        image,
        "--out",
        s(out),
        "--cache",
        s(cache),
        "--keep-identity",
    ]);
    c
}

fn provision(image: &str, out: &Path, cache: &Path) -> std::process::Output {
    provision_cmd(image, out, cache).output().unwrap()
}

/// `zinstall install IMAGE` into `dir/z` with a profile of images only,
/// pulling into `cache`.
fn install(dir: &Path, cache: &Path, image: &str) -> std::process::Output {
    zinstall(&[
        "install",
        "--zonepath",
        s(&dir.join("z")),
        "--profile",
        s(&bare_profile(dir)),
        "--cache",
        s(cache),
        image,
    ])
}

fn assert_guest(guest: &Path, seed: u64) {
    assert_eq!(
        fs::read(guest.join("etc/os-release")).unwrap(),
        b"ID=test\n"
    );
    assert!(
        fs::read(guest.join("srv/big")).unwrap()
            == zinstall_testkit::pseudo_random(8 << 20, seed),
        "{}: srv/big differs from the image's",
        guest.display()
    );
}

/// By tag (the digest it resolves to printed) and by digest: the same
/// image, guests equal to what was pushed, each blob downloaded once,
/// and a second provision by digest made with no request at all, the
/// registry stopped.
#[test]
fn pull_by_tag_and_by_digest() {
    let d = tmp::Tmp::new();
    let lay = d.path().join("L");
    let layers = image(&lay, 1);
    let reg = Registry::start(d.path());
    reg.push(&lay, "test/img:v1");
    let cache = d.path().join("cache");

    let by_tag = format!("{}/test/img:v1", reg.host());
    let o = provision(&by_tag, &d.path().join("a"), &cache);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let (manifest, _) = first_manifest(&lay);
    assert!(
        out.contains(&format!("resolved {by_tag} to {manifest}")),
        "{out}"
    );
    assert_guest(&d.path().join("a/guest-0"), 1);
    for l in &layers {
        assert_eq!(reg.gets(&format!("/v2/test/img/blobs/{l}"), 200), 1, "{l}");
    }
    // The store is an OCI layout naming the image by digest and by tag;
    // layer blobs unpacked into cache entries are not kept twice.
    let index = fs::read_to_string(cache.join("oci/index.json")).unwrap();
    assert!(index.contains(&format!("{}/test/img@{manifest}", reg.host())));
    assert!(index.contains(&by_tag));
    for l in &layers {
        assert!(!blob_path(&cache.join("oci"), l).exists(), "{l} kept");
    }

    // By digest, into another cache: pulled again, the same guest.
    let by_digest = format!("{}/test/img@{manifest}", reg.host());
    let cache2 = d.path().join("cache2");
    let o = provision(&by_digest, &d.path().join("b"), &cache2);
    assert!(o.status.success(), "{}", text(&o));
    assert_guest(&d.path().join("b/guest-0"), 1);

    // A dry run resolves and checks, and writes or downloads nothing.
    let cache4 = d.path().join("cache4");
    let profile = bare_profile(d.path());
    let fetched = |reg: &Registry| {
        layers
            .iter()
            .map(|l| reg.gets(&format!("/v2/test/img/blobs/{l}"), 200))
            .collect::<Vec<_>>()
    };
    let before = fetched(&reg);
    for args in [
        vec!["provision", &by_digest, "-n", "--out", "/nonexistent/o"],
        vec!["install", "-n", "--zonepath", "/nonexistent/z", &by_digest],
    ] {
        let mut args = args.clone();
        args.extend(["--cache", s(&cache4)]);
        if args[0] == "install" {
            args.extend(["--profile", s(&profile)]);
        }
        let o = zinstall(&args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
    }
    assert!(!cache4.exists());
    assert_eq!(fetched(&reg), before, "a dry run downloaded a layer");

    // install takes the same references, pulling into --cache.
    let o = install(d.path(), &cache2, &by_digest);
    assert!(o.status.success(), "{}", text(&o));
    assert_guest(&d.path().join("z/root"), 1);

    // With the registry gone, a digest the cache holds needs nothing.
    drop(reg);
    let o = provision(&by_digest, &d.path().join("c"), &cache);
    assert!(o.status.success(), "{}", text(&o));
    assert_guest(&d.path().join("c/guest-0"), 1);
    let o = provision(&by_tag, &d.path().join("e"), &d.path().join("cache3"));
    assert!(!o.status.success());
    let msg = text(&o);
    assert!(msg.contains("/v2/test/img/manifests/v1"), "{msg}");
}

/// A blob the registry serves with other bytes than its digest: refused
/// naming the digest; no guest, no entry, nothing partial left.
#[test]
fn a_tampered_blob_is_refused_naming_its_digest() {
    let d = tmp::Tmp::new();
    let lay = d.path().join("L");
    let layers = image(&lay, 2);
    let reg = Registry::start(d.path());
    reg.push(&lay, "test/img:v1");
    let f = reg.blob_file(&layers[1]);
    let mut b = fs::read(&f).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0xff;
    fs::write(&f, b).unwrap();

    let cache = d.path().join("cache");
    let out = d.path().join("out");
    let o = provision(&format!("{}/test/img:v1", reg.host()), &out, &cache);
    assert!(!o.status.success());
    let msg = text(&o);
    assert!(msg.contains(&layers[1]), "{msg}");
    assert!(!out.join("guest-0").exists());
    let entries: Vec<_> = fs::read_dir(cache.join("entries"))
        .map(|r| r.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(
        !entries
            .iter()
            .any(|n| n.to_string_lossy().starts_with("tree-")),
        "{entries:?}"
    );
    assert!(!blob_path(&cache.join("oci"), &layers[1]).exists());
    assert_eq!(
        fs::read_dir(cache.join("oci/partial")).unwrap().count(),
        0,
        "bytes that can never be right are not kept"
    );
    // The same for install: the partial root is removed.
    let z = d.path().join("z");
    let o = install(d.path(), &cache, &format!("{}/test/img:v1", reg.host()));
    assert!(!o.status.success());
    assert!(text(&o).contains(&layers[1]), "{}", text(&o));
    assert!(!z.join("root/srv").exists());
}

/// A proxy in front of the registry that cuts the connection once
/// `budget` bytes have gone to the client (then passes everything), or
/// refuses every connection once `dead` is set.
struct Proxy {
    port: u16,
    budget: Arc<AtomicI64>,
    dead: Arc<AtomicBool>,
}

impl Proxy {
    fn start(upstream: u16, cut_after: i64) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let budget = Arc::new(AtomicI64::new(cut_after));
        let dead = Arc::new(AtomicBool::new(false));
        let (b, dd) = (budget.clone(), dead.clone());
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(client) = c else { continue };
                if dd.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream))
                else {
                    continue;
                };
                let (c2, s2) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || pipe(c2, s2, None));
                let b = b.clone();
                std::thread::spawn(move || pipe(server, client, Some(b)));
            }
        });
        Proxy { port, budget, dead }
    }
}

/// Copies `from` to `to`; with a budget, cuts both once it is spent.
fn pipe(
    mut from: TcpStream,
    mut to: TcpStream,
    budget: Option<Arc<AtomicI64>>,
) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(b) = &budget {
            let left = b.load(Ordering::SeqCst);
            if left >= 0 && left < n as i64 {
                let _ = to.write_all(&buf[..left as usize]);
                b.store(-1, Ordering::SeqCst);
                break;
            }
            if left >= 0 {
                b.fetch_sub(n as i64, Ordering::SeqCst);
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// A connection cut in the middle of a blob: the pull asks for the rest
/// (`Range`, answered 206) and the guest is whole. A registry that goes
/// away for good: the pull fails naming the blob, keeps what it got, and
/// the next pull resumes from there.
#[test]
fn broken_downloads_resume() {
    let d = tmp::Tmp::new();
    let lay = d.path().join("L");
    let layers = image(&lay, 3);
    let reg = Registry::start(d.path());
    reg.push(&lay, "test/img:v1");
    let blob = format!("/v2/test/img/blobs/{}", layers[1]);

    // Cut once, 2 MiB into the transfer.
    let proxy = Proxy::start(reg.port, 2 << 20);
    let cache = d.path().join("cache");
    let image = format!("127.0.0.1:{}/test/img:v1", proxy.port);
    let o = provision(&image, &d.path().join("a"), &cache);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(proxy.budget.load(Ordering::SeqCst) < 0, "never cut: {out}");
    assert!(out.contains("retrying"), "{out}");
    assert_eq!(reg.gets(&blob, 206), 1, "{out}");
    assert_guest(&d.path().join("a/guest-0"), 3);

    // Gone mid-blob, and stays gone: the pull gives up, keeping what it
    // got; the registry back, the next pull resumes.
    let proxy = Proxy::start(reg.port, 3 << 20);
    let dead = proxy.dead.clone();
    let budget = proxy.budget.clone();
    std::thread::spawn(move || {
        while budget.load(Ordering::SeqCst) >= 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        dead.store(true, Ordering::SeqCst);
    });
    let cache = d.path().join("cache2");
    let image = format!("127.0.0.1:{}/test/img:v1", proxy.port);
    let o = provision(&image, &d.path().join("b"), &cache);
    let msg = text(&o);
    assert!(!o.status.success(), "{msg}");
    assert!(
        msg.contains(&layers[1]) && msg.contains("next pull resumes"),
        "{msg}"
    );
    assert!(!d.path().join("b/guest-0").exists());
    let partial = cache.join("oci/partial").join(format!(
        "sha256-{}",
        layers[1].trim_start_matches("sha256:")
    ));
    let kept = fs::metadata(&partial).unwrap().len();
    assert!(kept > 0, "nothing kept");
    let before = reg.gets(&blob, 206);
    proxy.dead.store(false, Ordering::SeqCst);
    let o = provision(&image, &d.path().join("b"), &cache);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("resuming at"), "{out}");
    assert_eq!(reg.gets(&blob, 206), before + 1, "{out}");
    assert_guest(&d.path().join("b/guest-0"), 3);
}

/// Eight provisions of one image started together: each blob crosses the
/// wire once, and every guest is whole.
#[test]
fn concurrent_provisions_pull_once() {
    let d = tmp::Tmp::new();
    let lay = d.path().join("L");
    let layers = image(&lay, 4);
    let reg = Registry::start(d.path());
    reg.push(&lay, "test/img:v1");
    let cache = d.path().join("cache");
    let image = format!("{}/test/img:v1", reg.host());
    let children: Vec<_> = (0..8)
        .map(|i| {
            provision_cmd(&image, &d.path().join(format!("o{i}")), &cache)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
    }
    for i in 0..8 {
        assert_guest(&d.path().join(format!("o{i}/guest-0")), 4);
    }
    for l in &layers {
        assert_eq!(reg.gets(&format!("/v2/test/img/blobs/{l}"), 200), 1, "{l}");
    }
}

/// What is not a reference, or names nothing, is refused clearly.
#[test]
fn bad_references_are_refused() {
    let d = tmp::Tmp::new();
    let cache = d.path().join("cache");
    let o = provision("127.0.0.1:1/Test/img:v1", &d.path().join("a"), &cache);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("is not an image reference"),
        "{}",
        text(&o)
    );
    // Nothing listens on port 1: the URL is named, after the retries.
    let o = provision(
        "127.0.0.1:1/test/img@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        &d.path().join("a"),
        &cache,
    );
    assert!(!o.status.success());
    assert!(
        text(&o).contains("http://127.0.0.1:1/v2/test/img/manifests/sha256:"),
        "{}",
        text(&o)
    );
    assert!(!d.path().join("a").exists());
}

/// `cache gc` and the pulled images: an image stays while a tree entry
/// made from it stays; one only an install pulled goes with the blobs no
/// kept image shares, and partial downloads go too; a store someone is
/// reading is left alone; what stays still provisions with the registry
/// gone.
#[test]
fn gc_collects_pulled_images_nothing_uses() {
    let d = tmp::Tmp::new();
    let (la, lb) = (d.path().join("LA"), d.path().join("LB"));
    let layers_a = image(&la, 1);
    let layers_b = image(&lb, 2);
    // The same base layer: shared, so it must outlive A while B needs it.
    assert_eq!(layers_a[0], layers_b[0]);
    let reg = Registry::start(d.path());
    reg.push(&la, "test/a:v1");
    reg.push(&lb, "test/b:v1");
    let cache = d.path().join("cache");
    let store = cache.join("oci");
    let (ma, _) = first_manifest(&la);
    let (mb, _) = first_manifest(&lb);
    let b_ref = format!("{}/test/b@{mb}", reg.host());

    // B provisioned (its layer blobs dropped once unpacked), A installed
    // (its blobs kept for the next install).
    let o = provision(&b_ref, &d.path().join("g"), &cache);
    assert!(o.status.success(), "{}", text(&o));
    let o = install(d.path(), &cache, &format!("{}/test/a:v1", reg.host()));
    assert!(o.status.success(), "{}", text(&o));
    for l in &layers_a {
        assert!(blob_path(&store, l).exists(), "{l}");
    }
    let partial = store
        .join("partial")
        .join(format!("sha256-{}", "0".repeat(64)));
    fs::write(&partial, vec![7u8; 100_000]).unwrap();

    let gc = |extra: &[&str]| {
        let mut a = vec!["cache", "gc", "--cache", s(&cache), "--json"];
        a.extend(extra);
        let o = zinstall(&a);
        assert!(o.status.success(), "{}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["result"]["store"].clone()
    };
    let fate = |v: &serde_json::Value, digest: &str| {
        let d = v["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["image"] == digest)
            .unwrap_or_else(|| panic!("{digest} not in {v}"));
        (
            d["remove"].as_bool().unwrap(),
            d["why"].as_str().unwrap().to_string(),
        )
    };

    // A dry run says what would go and why, and removes nothing.
    let v = gc(&["--dry-run"]);
    let (remove_b, why_b) = fate(&v, &mb);
    assert!(!remove_b && why_b.contains("stays"), "{v}");
    assert!(fate(&v, &ma).0, "{v}");
    // A's manifest, config and top layer; the base is B's too.
    assert_eq!(v["blobs_removed"], 3, "{v}");
    assert_eq!(v["partial_removed"], 1, "{v}");
    assert!(partial.exists());
    for l in &layers_a {
        assert!(blob_path(&store, l).exists(), "{l}");
    }

    // While anyone reads the store (the lock every open image holds),
    // gc leaves it alone.
    // It holds the lock until its input closes; -o: the lock stays with
    // flock itself, not its command.
    let mut holder = Command::new("flock")
        .args([
            "-s",
            "-o",
            s(&store.join("use.lock")),
            "-c",
            "echo held; cat >/dev/null",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = [0u8; 5];
    holder
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut line)
        .unwrap();
    let v = gc(&[]);
    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    assert_eq!(v["busy"], true, "{v}");
    assert!(partial.exists() && blob_path(&store, &layers_a[1]).exists());

    // Now A goes: its own blobs, its names in index.json, the partial
    // download; B and the shared base stay.
    let v = gc(&[]);
    assert_eq!(v["busy"], false, "{v}");
    assert!(fate(&v, &ma).0 && !fate(&v, &mb).0, "{v}");
    assert!(!partial.exists());
    assert!(!blob_path(&store, &ma).exists());
    assert!(!blob_path(&store, &layers_a[1]).exists());
    assert!(blob_path(&store, &mb).exists());
    let index = fs::read_to_string(store.join("index.json")).unwrap();
    assert!(!index.contains("test/a"), "{index}");
    assert!(index.contains(&b_ref), "{index}");

    // What stays is whole: B provisions with the registry gone.
    drop(reg);
    let o = provision(&b_ref, &d.path().join("h"), &cache);
    assert!(o.status.success(), "{}", text(&o));
    assert_guest(&d.path().join("h/guest-0"), 2);

    // Its guests gone, B's tree goes, and B with it.
    for g in ["g", "h"] {
        fs::remove_dir_all(d.path().join(g)).unwrap();
    }
    let v = gc(&[]);
    assert!(fate(&v, &mb).0, "{v}");
    let left: Vec<_> = fs::read_dir(store.join("blobs/sha256"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "blobs left: {left:?}");
}

/// A short name (`img:v1`) is resolved as podman resolves it, by
/// containers-registries.conf(5): an alias, else the one search
/// registry; the install says what it stood for. With neither, the
/// message says how to write it in full instead of "no such file".
#[test]
fn short_names_resolve_by_registries_conf() {
    let d = tmp::Tmp::new();
    let lay = d.path().join("L");
    image(&lay, 3);
    let reg = Registry::start(d.path());
    reg.push(&lay, "test/img:v1");
    let conf = d.path().join("registries.conf");
    let run = |conf: &Path, image: &str, zone: &str| {
        Command::new(env!("CARGO_BIN_EXE_zinstall"))
            .env("ZINSTALL_DEFAULTS", "/dev/null")
            .env("CONTAINERS_REGISTRIES_CONF", conf)
            .args(["install", "--zonepath"])
            .arg(d.path().join(zone))
            .arg("--profile")
            .arg(bare_profile(d.path()))
            .arg("--cache")
            .arg(d.path().join("cache"))
            .arg(image)
            .current_dir(d.path())
            .output()
            .unwrap()
    };
    // An alias in a drop-in file overrides the main file's.
    fs::write(&conf, "[aliases]\n\"img\" = \"example.invalid/img\"\n").unwrap();
    fs::create_dir(d.path().join("registries.conf.d")).unwrap();
    fs::write(
        d.path().join("registries.conf.d/50-test.conf"),
        format!("[aliases]\n\"img\" = \"{}/test/img\"\n", reg.host()),
    )
    .unwrap();
    let o = run(&conf, "img:v1", "z1");
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains(&format!(
            "short name img:v1 is {}/test/img:v1",
            reg.host()
        )) && out.contains("50-test.conf"),
        "{out}"
    );
    assert_guest(&d.path().join("z1/root"), 3);
    // The one unqualified-search registry.
    let conf2 = d.path().join("search.conf");
    fs::write(
        &conf2,
        format!("unqualified-search-registries = [\"{}\"]\n", reg.host()),
    )
    .unwrap();
    let o = run(&conf2, "test/img:v1", "z2");
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("one unqualified-search registry"), "{out}");
    assert_guest(&d.path().join("z2/root"), 3);
    // Neither: what to write instead, nothing made.
    let o = run(&d.path().join("none.conf"), "debian:12", "z3");
    let out = text(&o);
    assert!(!o.status.success());
    assert!(
        out.contains("docker.io/library/debian:12")
            && out.contains("docker://debian:12")
            && !out.contains("No such file or directory"),
        "{out}"
    );
    assert!(!d.path().join("z3").exists());
}
