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

use zinstall_testkit::tmp;

use crate::oci::support;

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use base64::Engine;
use p256::ecdsa::signature::Signer;
use serde_json::{Value, json};
use support::*;

/// A docker-registry serving from a temporary directory; stopped when
/// dropped.
struct Registry {
    child: Child,
    port: u16,
}

impl Registry {
    fn start(dir: &Path) -> Registry {
        let data = dir.join("registry-data");
        let config = dir.join("registry.yml");
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    \
                 rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
                data.display()
            ),
        )
        .unwrap();
        let log = fs::File::create(dir.join("registry.log")).unwrap();
        let child = tools::tool("docker-registry")
            .args(["serve", s(&config)])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let r = Registry { child, port };
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

    /// One HTTP/1.1 request; the status, the headers (lowercased
    /// names) and the body.
    fn http(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> (u16, Vec<(String, String)>, Vec<u8>) {
        let mut c = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        write!(
            c,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: {content_type}\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            self.host(),
            body.len()
        )
        .unwrap();
        c.write_all(body).unwrap();
        let mut r = BufReader::new(c);
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let status: u16 = line.split(' ').nth(1).unwrap().parse().unwrap();
        let mut headers = Vec::new();
        loop {
            line.clear();
            r.read_line(&mut line).unwrap();
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            let (k, v) = l.split_once(':').unwrap();
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).unwrap();
        (status, headers, rest)
    }

    /// Uploads `bytes` as a blob of `repo` (the registry API's two
    /// steps); returns its digest.
    fn put_blob(&self, repo: &str, bytes: &[u8]) -> String {
        let digest = format!("sha256:{}", sha256(bytes));
        let (st, h, _) = self.http(
            "POST",
            &format!("/v2/{repo}/blobs/uploads/"),
            "text/plain",
            b"",
        );
        assert_eq!(st, 202, "upload of a blob to {repo}");
        let loc = &h.iter().find(|(k, _)| k == "location").unwrap().1;
        let loc = loc
            .strip_prefix(&format!("http://{}", self.host()))
            .unwrap_or(loc);
        let sep = if loc.contains('?') { '&' } else { '?' };
        let (st, _, b) = self.http(
            "PUT",
            &format!("{loc}{sep}digest={digest}"),
            "application/octet-stream",
            bytes,
        );
        assert_eq!(st, 201, "{}", String::from_utf8_lossy(&b));
        digest
    }

    fn put_manifest(
        &self,
        repo: &str,
        reference: &str,
        media_type: &str,
        bytes: &[u8],
    ) {
        let (st, _, b) = self.http(
            "PUT",
            &format!("/v2/{repo}/manifests/{reference}"),
            media_type,
            bytes,
        );
        assert_eq!(st, 201, "{}", String::from_utf8_lossy(&b));
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A throwaway GNUPGHOME with keys made by gpg: the signer's and
/// another's.
struct Gpg {
    home: PathBuf,
}

impl Gpg {
    fn new(dir: &Path) -> Gpg {
        let home = dir.join("gnupg");
        fs::create_dir_all(&home).unwrap();
        fs::set_permissions(
            &home,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        Gpg { home }
    }

    fn gpg(&self, args: &[&str]) -> Output {
        let o = tools::tool("gpg")
            .env("GNUPGHOME", &self.home)
            .args(["--batch", "--yes"])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "gpg {args:?}: {}", text(&o));
        o
    }

    /// Makes a key for `uid` (no passphrase); returns its fingerprint,
    /// and writes its public key (binary, as `gpg --export` writes) to
    /// `out`.
    fn key(&self, uid: &str, out: &Path) -> String {
        self.gpg(&[
            "--passphrase",
            "",
            "--quick-gen-key",
            uid,
            "default",
            "default",
            "never",
        ]);
        let o = self.gpg(&["--with-colons", "--list-keys", uid]);
        let listing = String::from_utf8_lossy(&o.stdout).into_owned();
        let fpr = listing
            .lines()
            .find(|l| l.starts_with("fpr:"))
            .and_then(|l| l.split(':').nth(9))
            .unwrap()
            .to_string();
        self.gpg(&["--output", s(out), "--export", &fpr]);
        fpr
    }
}

/// Everything the cases share: a registry, keys, a lookaside store and
/// the registries.d naming it.
struct World {
    d: tmp::Tmp,
    reg: Registry,
    gpg: Gpg,
    signer: String,
    key: PathBuf,
    other_key: PathBuf,
    sigs: PathBuf,
    regd: PathBuf,
    sigstore_key: p256::ecdsa::SigningKey,
    sigstore_pub: PathBuf,
    other_sigstore_pub: PathBuf,
}

impl World {
    fn new() -> World {
        let d = tmp::Tmp::new();
        let reg = Registry::start(d.path());
        let gpg = Gpg::new(d.path());
        let key = d.path().join("signer.gpg");
        let other_key = d.path().join("other.gpg");
        let signer = gpg.key("Image Signer <signer@example.com>", &key);
        gpg.key("Someone Else <else@example.com>", &other_key);
        let sigs = d.path().join("lookaside");
        fs::create_dir_all(&sigs).unwrap();
        let regd = d.path().join("registries.d");
        fs::create_dir_all(&regd).unwrap();
        fs::write(
            regd.join("test.yaml"),
            format!(
                "docker:\n  {host}:\n    lookaside: file://{sigs}\n  {host}/sig:\n    \
                 use-sigstore-attachments: true\n",
                host = reg.host(),
                sigs = sigs.display()
            ),
        )
        .unwrap();
        let sigstore_key =
            p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).unwrap();
        let other = p256::ecdsa::SigningKey::from_slice(&[9u8; 32]).unwrap();
        let pem = |k: &p256::ecdsa::SigningKey, name: &str| {
            use p256::pkcs8::EncodePublicKey;
            let p = d.path().join(name);
            let text = k
                .verifying_key()
                .to_public_key_pem(p256::pkcs8::LineEnding::LF)
                .unwrap();
            fs::write(&p, text).unwrap();
            p
        };
        let sigstore_pub = pem(&sigstore_key, "cosign.pub");
        let other_sigstore_pub = pem(&other, "other-cosign.pub");
        World {
            d,
            reg,
            gpg,
            signer,
            key,
            other_key,
            sigs,
            regd,
            sigstore_key,
            sigstore_pub,
            other_sigstore_pub,
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.d.path().join(p)
    }

    /// Pushes a one-layer image (its file's contents `seed`) as
    /// `repo_tag`, signed by the signer when `sign`; returns the
    /// manifest digest in the registry.
    fn push(&self, seed: &str, repo_tag: &str, sign: bool) -> String {
        let lay = self.path(&format!("layout-{seed}"));
        if !lay.exists() {
            let layer = layer_tar(&[
                Ent::Dir("etc/"),
                Ent::File("etc/os-release", b"ID=test\n"),
                Ent::File("etc/seed", seed.as_bytes()),
            ]);
            write_layout(&lay, &[layer], host_arch(), &|_, _| {});
        }
        let digest_file = self.path("digest");
        let mut c = tools::tool("skopeo");
        c.env("GNUPGHOME", &self.gpg.home)
            .args([
                "--insecure-policy",
                "--registries.d",
                s(&self.regd),
                "copy",
                "--quiet",
            ])
            .args(["--dest-tls-verify=false", "--digestfile", s(&digest_file)]);
        if sign {
            c.args(["--sign-by", &self.signer]);
        }
        let o = c
            .arg(format!("oci:{}:t", lay.display()))
            .arg(format!("docker://{}/{repo_tag}", self.reg.host()))
            .output()
            .unwrap();
        assert!(o.status.success(), "skopeo copy: {}", text(&o));
        fs::read_to_string(&digest_file).unwrap().trim().to_string()
    }

    /// Copies `from` to `to` within the registry, signatures left
    /// behind (the same manifest digest under another name).
    fn retag(&self, from: &str, to: &str) {
        let o = tools::tool("skopeo")
            .args([
                "--insecure-policy",
                "--registries.d",
                s(&self.regd),
                "copy",
                "--quiet",
            ])
            .args([
                "--src-tls-verify=false",
                "--dest-tls-verify=false",
                "--remove-signatures",
            ])
            .arg(format!("docker://{}/{from}", self.reg.host()))
            .arg(format!("docker://{}/{to}", self.reg.host()))
            .output()
            .unwrap();
        assert!(o.status.success(), "skopeo copy: {}", text(&o));
    }

    /// The lookaside directory of `repo`'s manifest `digest`.
    fn sig_dir(&self, repo: &str, digest: &str) -> PathBuf {
        self.sigs
            .join(format!("{repo}@{}", digest.replace(':', "=")))
    }

    /// Writes `policy` (JSON) to a file of its own; returns its path.
    fn policy(&self, name: &str, policy: &Value) -> PathBuf {
        let p = self.path(&format!("{name}.json"));
        fs::write(&p, serde_json::to_vec_pretty(policy).unwrap()).unwrap();
        p
    }

    /// A policy rejecting everything but `scope`, whose requirements are
    /// `reqs`.
    fn scoped(&self, name: &str, scope: &str, reqs: Value) -> PathBuf {
        let scope = format!("{}/{scope}", self.reg.host());
        self.policy(
            name,
            &json!({"default": [{"type": "reject"}],
                    "transports": {"docker": {scope: reqs}}}),
        )
    }

    fn signed_by(&self, key: &Path) -> Value {
        json!([{"type": "signedBy", "keyType": "GPGKeys", "keyPath": key}])
    }

    /// `zinstall image verify --json`: its exit status and verdict.
    fn verify(&self, policy: &Path, repo_tag: &str) -> (i32, Value) {
        let o = zinstall(&[
            "image",
            "verify",
            "--json",
            "--policy",
            s(policy),
            "--registries.d",
            s(&self.regd),
            &format!("{}/{repo_tag}", self.reg.host()),
        ]);
        let v: Value = String::from_utf8_lossy(&o.stdout)
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("no JSON: {}", text(&o)));
        (o.status.code().unwrap(), v)
    }

    /// Whether `skopeo copy --policy` accepts the image, and what it
    /// says.
    fn skopeo_accepts(&self, policy: &Path, repo_tag: &str) -> (bool, String) {
        let out = self.path("skopeo-out");
        let _ = fs::remove_dir_all(&out);
        let o = tools::tool("skopeo")
            .args([
                "--policy",
                s(policy),
                "--registries.d",
                s(&self.regd),
                "copy",
                "--quiet",
            ])
            .arg("--src-tls-verify=false")
            .arg(format!("docker://{}/{repo_tag}", self.reg.host()))
            .arg(format!("dir:{}", out.display()))
            .output()
            .unwrap();
        (o.status.success(), text(&o))
    }

    /// zinstall's verdict (and the failure it names) equals skopeo's on
    /// the same policy and image.
    fn judged(
        &self,
        case: &str,
        policy: &Path,
        repo_tag: &str,
        accepted: bool,
        failed: &str,
    ) {
        let (code, v) = self.verify(policy, repo_tag);
        let result = &v["result"];
        let verdict = if accepted { "accepted" } else { "rejected" };
        assert_eq!(result["verdict"], verdict, "{case}: {v}");
        assert_eq!(code, if accepted { 0 } else { 1 }, "{case}: {v}");
        if !accepted {
            assert_eq!(result["failed"], failed, "{case}: {v}");
        }
        let (sk, said) = self.skopeo_accepts(policy, repo_tag);
        assert_eq!(sk, accepted, "{case}: skopeo's verdict differs: {said}");
        // And for the same reason, as skopeo words it.
        let skopeo_says = match failed {
            "" => "",
            "wrong key" => "Invalid GPG signature",
            "no signature" => "no signature exists",
            "identity mismatch" => "Signature for identity",
            "digest mismatch" => "Signature for digest",
            "rejected by rule" => "is rejected by policy",
            other => panic!("{case}: no skopeo wording for {other}"),
        };
        assert!(said.contains(skopeo_says), "{case}: skopeo says {said}");
        eprintln!(
            "VERDICT {case}: zinstall {verdict} ({}) skopeo {} ({})",
            result["failed"].as_str().unwrap_or("-"),
            if sk { "accepted" } else { "rejected" },
            said.trim().lines().last().unwrap_or("-")
        );
    }

    /// Attaches a sigstore signature of `payload` by `key` to manifest
    /// `digest` of `repo`, as the attachment layout has it: the payload
    /// a layer blob of media type simplesigning, the base64 DER
    /// signature in its annotation, the manifest tagged `sha256-HEX.sig`.
    fn attach(
        &self,
        repo: &str,
        digest: &str,
        payload: &[u8],
        key: &p256::ecdsa::SigningKey,
    ) {
        let sig: p256::ecdsa::Signature = key.sign(payload);
        let sig = base64::engine::general_purpose::STANDARD
            .encode(sig.to_der().as_bytes());
        let config = br#"{"architecture":"","config":{},"created":"0001-01-01T00:00:00Z","history":[{"created":"0001-01-01T00:00:00Z"}],"os":"","rootfs":{"type":"layers","diff_ids":[]}}"#;
        let layer = self.reg.put_blob(repo, payload);
        let config_digest = self.reg.put_blob(repo, config);
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "size": config.len(),
                "digest": config_digest,
            },
            "layers": [{
                "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
                "size": payload.len(),
                "digest": layer,
                "annotations": {"dev.cosignproject.cosign/signature": sig},
            }],
        });
        self.reg.put_manifest(
            repo,
            &format!("{}.sig", digest.replace(':', "-")),
            "application/vnd.oci.image.manifest.v1+json",
            &serde_json::to_vec(&manifest).unwrap(),
        );
    }
}

/// A cosign payload claiming `reference` for `digest`, as cosign writes
/// it (containers-signature(5), type "cosign container image
/// signature").
fn cosign_payload(reference: &str, digest: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "critical": {
            "identity": {"docker-reference": reference},
            "image": {"docker-manifest-digest": digest},
            "type": "cosign container image signature",
        },
        "optional": null,
    }))
    .unwrap()
}

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
