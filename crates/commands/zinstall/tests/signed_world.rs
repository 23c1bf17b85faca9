//! What the signed-image tests share: a real registry (Debian's
//! docker-registry on 127.0.0.1), keys made by gpg, a lookaside store
//! and the registries.d naming it, and zinstall's and skopeo's verdicts
//! on the same image and policy.

// Linux only: docker-registry, skopeo and gpg are run as Debian ships
// them.
#![cfg(target_os = "linux")]

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Output};
use std::time::{Duration, Instant};

use base64::Engine;
use p256::ecdsa::signature::Signer;
use serde_json::{Value, json};
use zinstall_testkit::{tmp, tools};

use crate::oci::support::*;

/// A docker-registry serving from a temporary directory; stopped when
/// dropped.
pub(crate) struct Registry {
    pub(crate) child: Child,
    pub(crate) port: u16,
}

impl Registry {
    pub(crate) fn start(dir: &Path) -> Registry {
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

    pub(crate) fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// One HTTP/1.1 request; the status, the headers (lowercased
    /// names) and the body.
    pub(crate) fn http(
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
    pub(crate) fn put_blob(&self, repo: &str, bytes: &[u8]) -> String {
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

    pub(crate) fn put_manifest(
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
pub(crate) struct Gpg {
    pub(crate) home: PathBuf,
}

impl Gpg {
    pub(crate) fn new(dir: &Path) -> Gpg {
        let home = dir.join("gnupg");
        fs::create_dir_all(&home).unwrap();
        fs::set_permissions(
            &home,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        Gpg { home }
    }

    pub(crate) fn gpg(&self, args: &[&str]) -> Output {
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
    pub(crate) fn key(&self, uid: &str, out: &Path) -> String {
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
pub(crate) struct World {
    pub(crate) d: tmp::Tmp,
    pub(crate) reg: Registry,
    pub(crate) gpg: Gpg,
    pub(crate) signer: String,
    pub(crate) key: PathBuf,
    pub(crate) other_key: PathBuf,
    pub(crate) sigs: PathBuf,
    pub(crate) regd: PathBuf,
    pub(crate) sigstore_key: p256::ecdsa::SigningKey,
    pub(crate) sigstore_pub: PathBuf,
    pub(crate) other_sigstore_pub: PathBuf,
}

impl World {
    pub(crate) fn new() -> World {
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

    pub(crate) fn path(&self, p: &str) -> PathBuf {
        self.d.path().join(p)
    }

    /// Pushes a one-layer image (its file's contents `seed`) as
    /// `repo_tag`, signed by the signer when `sign`; returns the
    /// manifest digest in the registry.
    pub(crate) fn push(
        &self,
        seed: &str,
        repo_tag: &str,
        sign: bool,
    ) -> String {
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
    pub(crate) fn retag(&self, from: &str, to: &str) {
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
    pub(crate) fn sig_dir(&self, repo: &str, digest: &str) -> PathBuf {
        self.sigs
            .join(format!("{repo}@{}", digest.replace(':', "=")))
    }

    /// Writes `policy` (JSON) to a file of its own; returns its path.
    pub(crate) fn policy(&self, name: &str, policy: &Value) -> PathBuf {
        let p = self.path(&format!("{name}.json"));
        fs::write(&p, serde_json::to_vec_pretty(policy).unwrap()).unwrap();
        p
    }

    /// A policy rejecting everything but `scope`, whose requirements are
    /// `reqs`.
    pub(crate) fn scoped(
        &self,
        name: &str,
        scope: &str,
        reqs: Value,
    ) -> PathBuf {
        let scope = format!("{}/{scope}", self.reg.host());
        self.policy(
            name,
            &json!({"default": [{"type": "reject"}],
                    "transports": {"docker": {scope: reqs}}}),
        )
    }

    pub(crate) fn signed_by(&self, key: &Path) -> Value {
        json!([{"type": "signedBy", "keyType": "GPGKeys", "keyPath": key}])
    }

    /// `zinstall image verify --json`: its exit status and verdict.
    pub(crate) fn verify(&self, policy: &Path, repo_tag: &str) -> (i32, Value) {
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
    pub(crate) fn skopeo_accepts(
        &self,
        policy: &Path,
        repo_tag: &str,
    ) -> (bool, String) {
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
    pub(crate) fn judged(
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
    pub(crate) fn attach(
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
pub(crate) fn cosign_payload(reference: &str, digest: &str) -> Vec<u8> {
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
