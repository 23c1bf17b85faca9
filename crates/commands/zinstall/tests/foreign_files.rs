//! Files the project did not make, as an attacker plants them: a trust
//! policy, a key file, a registries.d file or a `file://` lookaside
//! signature that is a link to `/dev/zero`, or a FIFO nobody writes to.
//! Each is refused at once, naming the file and what it is, with the
//! process's memory small: nothing is read without end, nothing waits.

// /dev/zero, FIFOs, prlimit and wait4 as Linux has them.
#![cfg(target_os = "linux")]

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use zinstall_testkit::run::s;

use crate::boundary::harness::{self, FakeRegistry};
use crate::oci::support;

/// The longest a refusal may take: a FIFO that held the run would be
/// killed here, and the run would fail.
const TIMEOUT: Duration = Duration::from_secs(20);

/// What a run came to.
struct Ran {
    ok: bool,
    out: String,
    max_rss_kib: u64,
    took: Duration,
}

/// Runs `zinstall ARGS` with at most 2 GiB of address space (a run that
/// reads /dev/zero whole fails there rather than taking the machine),
/// killed after [`TIMEOUT`].
fn zinstall_bounded(dir: &Path, args: &[&str]) -> Ran {
    let mut cmd = zinstall_testkit::tool("prlimit");
    cmd.arg(format!("--as={}", 2u64 << 30))
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_zinstall"))
        .args(args)
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .env("HOME", dir);
    let log = dir.join("zinstall.log");
    cmd.stdout(fs::File::create(&log).unwrap())
        .stderr(fs::File::options().append(true).open(&log).unwrap());
    let t0 = Instant::now();
    // Reaped by wait4 below, which gives its peak memory too.
    #[allow(clippy::zombie_processes)]
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    let done = Arc::new(AtomicBool::new(false));
    let watch = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                if t0.elapsed() > TIMEOUT {
                    zinstall_sys::process::signal(pid, libc::SIGKILL);
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let reaped = zinstall_sys::support::wait_with_rusage(pid).unwrap();
    done.store(true, Ordering::SeqCst);
    watch.join().unwrap();
    Ran {
        ok: reaped.ok,
        out: fs::read_to_string(&log).unwrap(),
        max_rss_kib: reaped.max_rss_kib,
        took: t0.elapsed(),
    }
}

/// The run was refused promptly, in little memory, saying `what`.
fn refused(r: &Ran, case: &str, what: &str) {
    assert!(!r.ok, "{case}: accepted: {}", r.out);
    assert!(
        r.took < TIMEOUT,
        "{case}: still running after {TIMEOUT:?} (killed): {}",
        r.out
    );
    assert!(
        r.out.contains(what),
        "{case}: does not say {what:?}: {}",
        r.out
    );
    // A zinstall that reads nothing large stays near its own size
    // (~10 MiB); reading /dev/zero whole takes gigabytes.
    assert!(
        r.max_rss_kib < 64 << 10,
        "{case}: peak memory {} MiB",
        r.max_rss_kib >> 10
    );
    eprintln!(
        "MEASURE {case}: refused in {} ms, peak {} MiB",
        r.took.as_millis(),
        r.max_rss_kib >> 10
    );
}

/// Makes `at` a link to /dev/zero or a FIFO, as `how` says.
fn plant(at: &Path, how: &str) {
    let _ = fs::remove_file(at);
    match how {
        "zero" => symlink("/dev/zero", at).unwrap(),
        _ => zinstall_testkit::mkfifo(at, 0o644),
    }
}

/// A registries.d naming `lookaside` for the fake registry's host.
fn registries_d(dir: &Path, port: u16, lookaside: &Path) -> PathBuf {
    let d = dir.join("registries.d");
    fs::create_dir_all(&d).unwrap();
    fs::write(
        d.join("test.yaml"),
        format!(
            "docker:\n  127.0.0.1:{port}:\n    lookaside: file://{}\n",
            lookaside.display()
        ),
    )
    .unwrap();
    d
}

/// A policy whose default is signedBy the key file `key`.
fn policy(dir: &Path, key: &Path) -> PathBuf {
    let p = dir.join("policy.json");
    fs::write(
        &p,
        json!({"default": [{"type": "signedBy", "keyType": "GPGKeys",
                            "keyPath": key}]})
        .to_string(),
    )
    .unwrap();
    p
}

/// A real public key (the registry crate's test key).
fn real_key(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../features/registry/src/policy/testdata/public-key.gpg");
    let k = dir.join("real.gpg");
    fs::copy(src, &k).unwrap();
    k
}

/// `zinstall image verify` with a policy, a key file, a registries.d
/// file and a lookaside signature each made a link to /dev/zero, then a
/// FIFO: each is refused within seconds and a few MiB, naming the file
/// and what it is.
#[test]
fn devices_and_fifos_as_policy_key_signature_or_registries_d_are_refused() {
    if !zinstall_testkit::alone() {
        return;
    }
    let d = zinstall_testkit::Tmp::new();
    let dir = d.path();
    let lay = dir.join("layout");
    harness::image(&lay, 64, &|_, _| {});
    let reg = FakeRegistry::serve(&lay);
    let (manifest, _) = support::manifest_of(&lay);
    let digest = support::sha256(&fs::read(manifest).unwrap());
    let sigs = dir.join("lookaside");
    let sig_dir = sigs.join(format!("{}@sha256={digest}", reg.repo));
    fs::create_dir_all(&sig_dir).unwrap();
    let regd = registries_d(dir, reg.port, &sigs);
    let reference = reg.reference();
    let verify = |policy: &Path, regd: &Path| {
        zinstall_bounded(
            dir,
            &[
                "image",
                "verify",
                "--policy",
                s(policy),
                "--registries.d",
                s(regd),
                &reference,
            ],
        )
    };
    for how in ["zero", "fifo"] {
        let what = if how == "zero" {
            "is a character device"
        } else {
            "is a FIFO"
        };
        // The policy itself.
        let planted = dir.join(format!("policy-{how}.json"));
        plant(&planted, how);
        refused(&verify(&planted, &regd), &format!("policy ({how})"), what);
        // A registries.d file beside a good one.
        let bad_regd = dir.join(format!("registries-{how}.d"));
        fs::create_dir_all(&bad_regd).unwrap();
        plant(&bad_regd.join("zz.yaml"), how);
        let good = policy(dir, &real_key(dir));
        refused(
            &verify(&good, &bad_regd),
            &format!("registries.d ({how})"),
            what,
        );
        // The key file the policy names.
        let key = dir.join(format!("key-{how}.gpg"));
        plant(&key, how);
        let p = policy(dir, &key);
        refused(&verify(&p, &regd), &format!("key file ({how})"), what);
        // The lookaside signature, with a real key: a link is refused as
        // a link (never followed), a FIFO as a FIFO.
        let p = policy(dir, &real_key(dir));
        plant(&sig_dir.join("signature-1"), how);
        let sig_what = if how == "zero" {
            "is a symbolic link"
        } else {
            "is a FIFO"
        };
        refused(&verify(&p, &regd), &format!("signature ({how})"), sig_what);
    }
}

/// zinstalld with a policy that is a link to /dev/zero: each job that
/// pulls is refused naming it, and the daemon's memory stays small (it
/// served the next request).
#[test]
fn the_daemons_policy_as_a_link_to_dev_zero_is_refused_per_job() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = zinstall_testkit::Tmp::new();
    let planted = d.path().join("policy.json");
    symlink("/dev/zero", &planted).unwrap();
    let daemon = harness::Daemon::start(&format!(
        "policy = \"{}\"\n",
        planted.display()
    ));
    let zonepath = d.path().join("zone");
    for _ in 0..3 {
        let o = daemon.zinstall(&[
            "install",
            "--zonepath",
            s(&zonepath),
            "127.0.0.1:1/none/such:t",
        ]);
        let t = harness::text(&o);
        assert!(!o.status.success(), "{t}");
        assert!(t.contains("is a character device"), "{t}");
    }
    let hwm = fs::read_to_string(format!("/proc/{}/status", daemon.child.id()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap();
    assert!(
        hwm < 128 << 10,
        "the daemon's peak memory: {} MiB",
        hwm >> 10
    );
    eprintln!(
        "MEASURE daemon with a /dev/zero policy: peak {} MiB",
        hwm >> 10
    );
    // Still serving.
    let o = daemon.zinstall(&["jobs"]);
    assert!(o.status.success(), "{}", harness::text(&o));
}
