//! Signed images: a trust policy (containers-policy.json(5)) judged
//! before any layer is fetched. Images are pushed to a real registry
//! (Debian's docker-registry on 127.0.0.1) and signed by the real tool
//! (`skopeo copy --sign-by`, a key made by gpg in a throwaway GNUPGHOME,
//! signatures in a `file://` lookaside named by a registries.d file);
//! sigstore signatures are made here as containers-signature(5) and the
//! sigstore attachment layout have them (Debian's skopeo does not make
//! them). Every simple-signing verdict is compared with `skopeo copy
//! --policy`'s on the same image and policy.

// Linux only: docker-registry, skopeo and gpg are run as Debian ships
// them.
#![cfg(target_os = "linux")]

use zinstall_testkit::tools;

use crate::oci::support;

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};
use support::*;

use crate::signed_world::*;

/// Simple signing, case by case, each verdict equal to skopeo's on the
/// same image and policy: accepted with the right key; refused for the
/// wrong key, a signature claiming another tag (wrong identity), no
/// signature, a manifest changed under its tag after signing, a
/// signature of another digest, one replayed onto another repository,
/// a `reject` by scope; accepted by an insecureAcceptAnything scope.
#[test]
fn simple_signing_verdicts_equal_skopeos() {
    let w = World::new();
    let host = w.reg.host();
    let app = w.push("one", "signed/app:v1", true);
    assert!(w.sig_dir("signed/app", &app).join("signature-1").exists());
    let right = w.scoped("right", "signed", w.signed_by(&w.key));
    let wrong = w.scoped("wrong", "signed", w.signed_by(&w.other_key));

    w.judged("accept (right key)", &right, "signed/app:v1", true, "");
    w.judged("wrong key", &wrong, "signed/app:v1", false, "wrong key");

    // The same manifest under another tag: its signature claims v1.
    w.retag("signed/app:v1", "signed/app:v2");
    w.judged(
        "wrong identity",
        &right,
        "signed/app:v2",
        false,
        "identity mismatch",
    );

    w.push("two", "signed/unsigned:v1", false);
    w.judged(
        "unsigned",
        &right,
        "signed/unsigned:v1",
        false,
        "no signature",
    );

    // Signed, then another manifest pushed under the same tag.
    w.push("three", "signed/changed:v1", true);
    let changed = w.push("four", "signed/changed:v1", false);
    w.judged(
        "manifest changed after signing",
        &right,
        "signed/changed:v1",
        false,
        "no signature",
    );

    // A signature of another digest put where this one's would be.
    let dir = w.sig_dir("signed/changed", &changed);
    fs::create_dir_all(&dir).unwrap();
    fs::copy(
        w.sig_dir("signed/app", &app).join("signature-1"),
        dir.join("signature-1"),
    )
    .unwrap();
    w.judged(
        "signature for another digest",
        &right,
        "signed/changed:v1",
        false,
        "digest mismatch",
    );

    // The signed manifest and its signature copied to another
    // repository: the signature names the first.
    w.retag("signed/app:v1", "signed/copy:v1");
    let dir = w.sig_dir("signed/copy", &app);
    fs::create_dir_all(&dir).unwrap();
    fs::copy(
        w.sig_dir("signed/app", &app).join("signature-1"),
        dir.join("signature-1"),
    )
    .unwrap();
    w.judged(
        "signature replayed onto another repository",
        &right,
        "signed/copy:v1",
        false,
        "identity mismatch",
    );

    // A scope for the one tag rejects it, its repository's accepts.
    let reject = w.policy(
        "reject",
        &json!({"default": [{"type": "reject"}], "transports": {"docker": {
            format!("{host}/signed/app"): w.signed_by(&w.key),
            format!("{host}/signed/app:v1"): [{"type": "reject"}]}}}),
    );
    w.judged(
        "reject by scope",
        &reject,
        "signed/app:v1",
        false,
        "rejected by rule",
    );
    let (_, v) = w.verify(&reject, "signed/app:v1");
    assert_eq!(v["result"]["scope"], format!("{host}/signed/app:v1"), "{v}");
    assert_eq!(v["result"]["requirement"], "reject", "{v}");

    let anything = w.policy(
        "anything",
        &json!({"default": [{"type": "reject"}], "transports": {"docker": {
            format!("{host}/signed/unsigned"): [{"type": "insecureAcceptAnything"}]}}}),
    );
    w.judged(
        "insecureAcceptAnything by scope",
        &anything,
        "signed/unsigned:v1",
        true,
        "",
    );
    w.judged(
        "default reject",
        &anything,
        "signed/app:v1",
        false,
        "rejected by rule",
    );

    // signedIdentity kinds that accept what the default refuses.
    let by_repo = w.scoped(
        "by-repo",
        "signed",
        json!([{"type": "signedBy", "keyType": "GPGKeys", "keyPath": w.key,
                "signedIdentity": {"type": "matchRepository"}}]),
    );
    w.judged(
        "matchRepository, another tag",
        &by_repo,
        "signed/app:v2",
        true,
        "",
    );
    let remap = w.scoped(
        "remap",
        "signed",
        json!([{"type": "signedBy", "keyType": "GPGKeys", "keyData":
                base64::engine::general_purpose::STANDARD.encode(fs::read(&w.key).unwrap()),
                "signedIdentity": {"type": "remapIdentity",
                    "prefix": format!("{host}/signed/copy"),
                    "signedPrefix": format!("{host}/signed/app")}}]),
    );
    w.judged(
        "remapIdentity onto the signed repository",
        &remap,
        "signed/copy:v1",
        true,
        "",
    );
}

/// A refusal names the policy file, the scope, the requirement and what
/// failed; and a pull (provision) refused leaves nothing in the cache
/// nor a guest; the same pull accepted makes the guest and records the
/// verification in the store.
#[test]
fn a_refused_pull_leaves_nothing_and_an_accepted_one_is_recorded() {
    let w = World::new();
    let host = w.reg.host();
    w.push("one", "signed/app:v1", true);
    w.push("two", "signed/unsigned:v1", false);
    let policy = w.scoped("right", "signed", w.signed_by(&w.key));
    let cache = w.path("cache");
    let pull = |image: &str, out: &Path| {
        Command::new(env!("CARGO_BIN_EXE_zinstall"))
            .env("ZINSTALL_DEFAULTS", "/dev/null")
            .args(["provision", &format!("{host}/{image}"), "--out", s(out)])
            .args(["--cache", s(&cache), "--keep-identity"])
            .args(["--policy", s(&policy), "--registries.d", s(&w.regd)])
            .output()
            .unwrap()
    };
    let out = w.path("guest-refused");
    let o = pull("signed/unsigned:v1", &out);
    let said = text(&o);
    assert_eq!(o.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!("refused by {}", policy.display()))
            && said.contains(&format!("scope \"{host}/signed\""))
            && said.contains("requirement signedBy(GPGKeys")
            && said.contains("no signature"),
        "{said}"
    );
    assert!(!out.exists(), "a refused pull made {}", out.display());
    let blobs: Vec<_> = walkdir::WalkDir::new(&cache)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_type().is_file()
                && e.path().components().any(|c| c.as_os_str() == "blobs")
        })
        .map(|e| e.path().to_path_buf())
        .collect();
    assert!(blobs.is_empty(), "a refused pull left {blobs:?}");
    let index =
        fs::read_to_string(cache.join("oci/index.json")).unwrap_or_default();
    assert!(!index.contains("signed/unsigned"), "{index}");

    let out = w.path("guest");
    let o = pull("signed/app:v1", &out);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("accepted by"), "{}", text(&o));
    assert_eq!(fs::read(out.join("guest-0/etc/seed")).unwrap(), b"one");
    let records: Vec<_> = walkdir::WalkDir::new(&cache)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.path().parent().is_some_and(|p| p.ends_with("trust")))
        .map(|e| e.path().to_path_buf())
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    let rec: Value =
        serde_json::from_slice(&fs::read(&records[0]).unwrap()).unwrap();
    assert_eq!(rec["policy"], s(&policy));
    assert_eq!(rec["scope"], format!("{host}/signed"));
    assert_eq!(rec["simple"].as_array().unwrap().len(), 1, "{rec}");

    // The cached image by digest, judged again by a policy that now
    // refuses it: no guest.
    let digest = rec["digest"].as_str().unwrap().to_string();
    let strict = w.scoped("strict", "signed", w.signed_by(&w.other_key));
    let out = w.path("guest-again");
    let o = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .args([
            "provision",
            &format!("{host}/signed/app@{digest}"),
            "--out",
            s(&out),
        ])
        .args(["--cache", s(&cache), "--keep-identity"])
        .args(["--policy", s(&strict), "--registries.d", s(&w.regd)])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("wrong key"), "{}", text(&o));
    assert!(!out.exists());
}

/// Sigstore signatures (attachments in the registry, a P-256 key):
/// accepted with the right key; refused for another key, for a payload
/// of another digest, for an image with no attachment, and by a
/// signedBy policy (simple signing) that the attachment does not
/// satisfy.
#[test]
fn sigstore_attachments_are_verified() {
    let w = World::new();
    let host = w.reg.host();
    let digest = w.push("one", "sig/app:v1", false);
    w.attach(
        "sig/app",
        &digest,
        &cosign_payload(&format!("{host}/sig/app:v1"), &digest),
        &w.sigstore_key,
    );
    let other_digest = w.push("two", "sig/other:v1", false);
    w.attach(
        "sig/other",
        &other_digest,
        &cosign_payload(&format!("{host}/sig/other:v1"), &digest),
        &w.sigstore_key,
    );
    w.push("three", "sig/none:v1", false);
    let sigstore = |name: &str, key: &Path| {
        w.scoped(
            name,
            "sig",
            json!([{"type": "sigstoreSigned", "keyPath": key}]),
        )
    };
    let right = sigstore("sig-right", &w.sigstore_pub);
    let wrong = sigstore("sig-wrong", &w.other_sigstore_pub);
    let check =
        |policy: &Path, image: &str, verdict: &str, failed: Option<&str>| {
            let (code, v) = w.verify(policy, image);
            assert_eq!(v["result"]["verdict"], verdict, "{image}: {v}");
            assert_eq!(code, if verdict == "accepted" { 0 } else { 1 });
            if let Some(f) = failed {
                assert_eq!(v["result"]["failed"], f, "{image}: {v}");
            }
            eprintln!(
                "VERDICT sigstore {image}: {verdict} {}",
                failed.unwrap_or("")
            );
        };
    check(&right, "sig/app:v1", "accepted", None);
    check(&wrong, "sig/app:v1", "rejected", Some("wrong key"));
    check(&right, "sig/other:v1", "rejected", Some("digest mismatch"));
    check(&right, "sig/none:v1", "rejected", Some("no signature"));
    let gpg = w.scoped("sig-gpg", "sig", w.signed_by(&w.key));
    check(&gpg, "sig/app:v1", "rejected", Some("no signature"));
    // The key given inline (keyData) decides as the file does.
    let inline = w.scoped(
        "sig-inline",
        "sig",
        json!([{"type": "sigstoreSigned", "keyData":
            base64::engine::general_purpose::STANDARD.encode(fs::read(&w.sigstore_pub).unwrap())}]),
    );
    check(&inline, "sig/app:v1", "accepted", None);
}

/// A policy with an unknown requirement type is refused whole, naming
/// the file; `image verify` exits 2 and nothing is judged.
#[test]
fn an_unknown_requirement_refuses_the_policy() {
    let w = World::new();
    w.push("one", "signed/app:v1", true);
    let p =
        w.policy("bad", &json!({"default": [{"type": "signedByMoonlight"}]}));
    let o = zinstall(&[
        "image",
        "verify",
        "--policy",
        s(&p),
        &format!("{}/signed/app:v1", w.reg.host()),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("{}:", p.display()))
            && text(&o).contains("signedByMoonlight"),
        "{}",
        text(&o)
    );
}

/// zinstalld judges every pull by its own policy (zinstalld.toml's
/// `policy`), whatever the caller: a signed image is provisioned, an
/// unsigned one refused with nothing left in the cache.
#[test]
fn the_daemon_enforces_its_own_policy() {
    let w = World::new();
    let host = w.reg.host();
    w.push("one", "signed/app:v1", true);
    w.push("two", "signed/unsigned:v1", false);
    let policy = w.scoped("daemon", "signed", w.signed_by(&w.key));
    let dir = w.path("daemon");
    fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("zinstalld.sock");
    let config = dir.join("zinstalld.toml");
    let profile = dir.join("profile.toml");
    fs::write(
        &profile,
        format!(
            "source_root = \"/\"\ntrees = []\nlog = \"{}\"\n",
            dir.join("install.log").display()
        ),
    )
    .unwrap();
    fs::write(
        &config,
        format!(
            "defaults = \"/dev/null\"\ncache = \"{}\"\nprofile = \"{}\"\npolicy = \"{}\"\n\
             registries_d = \"{}\"\n",
            dir.join("cache").display(),
            profile.display(),
            policy.display(),
            w.regd.display()
        ),
    )
    .unwrap();
    let log = fs::File::create(dir.join("zinstalld.log")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_zinstalld"))
        .arg("--config")
        .arg(&config)
        .arg("--socket")
        .arg(&socket)
        .stderr(log)
        .spawn()
        .unwrap();
    struct Kill<'a>(&'a mut Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _kill = Kill(&mut child);
    let t0 = Instant::now();
    while UnixStream::connect(&socket).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "zinstalld did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let call = |image: &str, out: &Path| -> Value {
        let mut s = UnixStream::connect(&socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let req = json!({"v": 1, "op": "provision", "args": {
            "image": format!("{host}/{image}"), "out": out, "count": 1, "keep_identity": true}});
        writeln!(s, "{req}").unwrap();
        let mut r = BufReader::new(s);
        let mut line = String::new();
        loop {
            line.clear();
            assert!(r.read_line(&mut line).unwrap() > 0, "the daemon hung up");
            let v: Value = serde_json::from_str(&line).unwrap();
            if matches!(v["reply"].as_str(), Some("done" | "error")) {
                return v;
            }
        }
    };
    let refused = dir.join("refused");
    let v = call("signed/unsigned:v1", &refused);
    assert_eq!(v["reply"], "error", "{v}");
    let msg = v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        msg.contains("no signature") && msg.contains(s(&policy)),
        "{v}"
    );
    assert!(!refused.exists());
    let blobs = walkdir::WalkDir::new(dir.join("cache"))
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_type().is_file()
                && e.path().components().any(|c| c.as_os_str() == "blobs")
        })
        .count();
    assert_eq!(blobs, 0, "a refused pull left blobs in the daemon's cache");
    // No caller brings a policy of its own to the daemon.
    let anything = w.policy(
        "anything",
        &json!({"default": [{"type": "insecureAcceptAnything"}]}),
    );
    let o = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .arg(format!("--daemon={}", socket.display()))
        .args([
            "provision",
            &format!("{host}/signed/unsigned:v1"),
            "--out",
            s(&refused),
        ])
        .args(["--policy", s(&anything)])
        .env_remove("ZINSTALL_DAEMON")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--policy"), "{}", text(&o));
    assert!(!refused.exists());
    let out = dir.join("guest");
    let v = call("signed/app:v1", &out);
    assert_eq!(v["reply"], "done", "{v}");
    assert_eq!(
        fs::read(out.join("guest-0/etc/seed")).unwrap(),
        b"one",
        "{v}"
    );
}

/// An install profile's `policy` judges the images an install pulls;
/// `--policy` names another instead. A refused install leaves no image
/// in the root.
#[test]
fn the_install_profile_names_the_policy() {
    let w = World::new();
    let host = w.reg.host();
    w.push("two", "signed/unsigned:v1", false);
    let strict = w.scoped("strict", "signed", w.signed_by(&w.key));
    let anything = w.policy(
        "anything",
        &json!({"default": [{"type": "insecureAcceptAnything"}]}),
    );
    let profile = w.path("profile.toml");
    fs::write(
        &profile,
        format!(
            "source_root = \"/\"\ntrees = []\nlog = \"{}\"\npolicy = \"{}\"\n",
            w.path("install.log").display(),
            strict.display()
        ),
    )
    .unwrap();
    let install = |zonepath: &Path, extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_zinstall"))
            .env("ZINSTALL_DEFAULTS", "/dev/null")
            .args([
                "install",
                "--zonepath",
                s(zonepath),
                "--profile",
                s(&profile),
            ])
            .args([
                "--cache",
                s(&w.path("cache")),
                "--registries.d",
                s(&w.regd),
            ])
            .args(extra)
            .arg(format!("{host}/signed/unsigned:v1"))
            .output()
            .unwrap()
    };
    let z = w.path("z1");
    let o = install(&z, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("refused by {}", strict.display()))
            && text(&o).contains("no signature"),
        "{}",
        text(&o)
    );
    assert!(!z.join("root/etc/seed").exists());
    let z = w.path("z2");
    let o = install(&z, &["--policy", s(&anything)]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(fs::read(z.join("root/etc/seed")).unwrap(), b"two");
}

/// Signatures served over HTTP (a lookaside `http://` URL, here
/// python3's http.server on the signatures skopeo wrote): found as from
/// a directory, a missing one (404) meaning no more signatures; the
/// verdicts equal skopeo's.
#[test]
fn an_http_lookaside_serves_signatures() {
    let w = World::new();
    let host = w.reg.host();
    w.push("one", "signed/app:v1", true);
    w.push("two", "signed/unsigned:v1", false);
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = tools::tool("python3")
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--directory",
        ])
        .arg(&w.sigs)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Kill<'a>(&'a mut Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _kill = Kill(&mut server);
    let t0 = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "http.server did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let regd = w.path("registries-http.d");
    fs::create_dir_all(&regd).unwrap();
    fs::write(
        regd.join("http.yaml"),
        format!("docker:\n  {host}/signed:\n    lookaside: http://127.0.0.1:{port}\n"),
    )
    .unwrap();
    let policy = w.scoped("http", "signed", w.signed_by(&w.key));
    for (image, accepted) in
        [("signed/app:v1", true), ("signed/unsigned:v1", false)]
    {
        let o = zinstall(&[
            "image",
            "verify",
            "--json",
            "--policy",
            s(&policy),
            "--registries.d",
            s(&regd),
            &format!("{host}/{image}"),
        ]);
        let v: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
        assert_eq!(
            v["result"]["verdict"],
            if accepted { "accepted" } else { "rejected" },
            "{image}: {v}"
        );
        if !accepted {
            assert_eq!(v["result"]["failed"], "no signature", "{v}");
        }
        let out = w.path("skopeo-http-out");
        let _ = fs::remove_dir_all(&out);
        let sk = tools::tool("skopeo")
            .args([
                "--policy",
                s(&policy),
                "--registries.d",
                s(&regd),
                "copy",
                "--quiet",
            ])
            .arg("--src-tls-verify=false")
            .arg(format!("docker://{host}/{image}"))
            .arg(format!("dir:{}", out.display()))
            .output()
            .unwrap();
        assert_eq!(
            sk.status.success(),
            accepted,
            "{image}: skopeo: {}",
            text(&sk)
        );
        eprintln!(
            "VERDICT http lookaside {image}: zinstall and skopeo accepted={accepted}"
        );
    }
}
