//! Signature verdicts where the claim, the key or the policy's keys are
//! unusual: a claim naming a repository alone, a key that expired by its
//! own self-signatures (a newer certification by another key, or a
//! forged self-signature, beside them), an image named by tag and digest
//! together, and `keyPaths`. Each verdict is compared with skopeo's on
//! the same image and policy where skopeo can judge it; where it cannot,
//! with what containers/image's source decides, said at the case.

// Linux only: docker-registry, skopeo and gpg are run as Debian ships
// them.
#![cfg(target_os = "linux")]

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::json;
use zinstall_testkit::tools;

use crate::oci::support::*;
use crate::signed_world::{Gpg, World, cosign_payload};

/// The manifest `repo_tag` has in the registry, written to a file.
fn manifest(w: &World, repo_tag: &str) -> PathBuf {
    let o = tools::tool("skopeo")
        .args(["inspect", "--raw", "--tls-verify=false"])
        .arg(format!("docker://{}/{repo_tag}", w.reg.host()))
        .output()
        .unwrap();
    assert!(o.status.success(), "skopeo inspect: {}", text(&o));
    let p = w.path(&format!("manifest-{}", repo_tag.replace(['/', ':'], "-")));
    fs::write(&p, &o.stdout).unwrap();
    p
}

/// `skopeo standalone-sign`: a signature of `manifest` claiming
/// `identity`, by key `fpr` of the keys in `home`, put in the lookaside
/// as `repo`'s digest's signature number `n`.
#[allow(clippy::too_many_arguments)]
fn sign_as(
    w: &World,
    home: &Path,
    fpr: &str,
    manifest: &Path,
    identity: &str,
    repo: &str,
    digest: &str,
    n: u32,
) {
    let sig = w.path("standalone.sig");
    let o = tools::tool("skopeo")
        .env("GNUPGHOME", home)
        .args(["standalone-sign", s(manifest), identity, fpr, "-o", s(&sig)])
        .output()
        .unwrap();
    assert!(o.status.success(), "skopeo standalone-sign: {}", text(&o));
    let dir = w.sig_dir(repo, digest);
    fs::create_dir_all(&dir).unwrap();
    fs::rename(&sig, dir.join(format!("signature-{n}"))).unwrap();
}

fn signed_by_with(w: &World, identity: serde_json::Value) -> serde_json::Value {
    json!([{"type": "signedBy", "keyType": "GPGKeys", "keyPath": w.key,
            "signedIdentity": identity}])
}

/// A signature whose claim names the repository alone (no tag, no
/// digest), the image pulled by digest: containers/image refuses such a
/// claim before anything else in matchRepoDigestOrExact (the default),
/// matchExact and remapIdentity, and takes it in matchRepository and
/// exactRepository, which compare names only; skopeo's verdicts say the
/// same and zinstall's equal them.
#[test]
fn a_claim_of_a_repository_alone_is_judged_as_skopeo_judges_it() {
    let w = World::new();
    let host = w.reg.host();
    let digest = w.push("name-only", "signed/bare:v1", false);
    let m = manifest(&w, "signed/bare:v1");
    let claim = format!("{host}/signed/bare");
    sign_as(
        &w,
        &w.gpg.home,
        &w.signer,
        &m,
        &claim,
        "signed/bare",
        &digest,
        1,
    );
    let image = format!("signed/bare@{digest}");
    for (case, identity, accepted) in [
        (
            "matchRepoDigestOrExact",
            json!({"type": "matchRepoDigestOrExact"}),
            false,
        ),
        ("matchExact", json!({"type": "matchExact"}), false),
        (
            "remapIdentity",
            json!({"type": "remapIdentity", "prefix": format!("{host}/signed"),
                   "signedPrefix": format!("{host}/signed")}),
            false,
        ),
        ("matchRepository", json!({"type": "matchRepository"}), true),
        (
            "exactRepository",
            json!({"type": "exactRepository", "dockerRepository": claim}),
            true,
        ),
    ] {
        let p = w.scoped(
            &format!("bare-{case}"),
            "signed",
            signed_by_with(&w, identity),
        );
        let failed = if accepted { "" } else { "identity mismatch" };
        w.judged(
            &format!("name-only claim, {case}"),
            &p,
            &image,
            accepted,
            failed,
        );
    }
}

/// Packet offsets as `gpg --list-packets` shows them: `(offset, header
/// length, body length, tag, signature class)` for each packet.
fn packets(g: &Gpg, file: &Path) -> Vec<(usize, usize, usize, u32, String)> {
    let o = g.gpg(&["--list-packets", s(file)]);
    let mut out: Vec<(usize, usize, usize, u32, String)> = Vec::new();
    for l in String::from_utf8_lossy(&o.stdout).lines() {
        if let Some(rest) = l.strip_prefix("# off=") {
            let field = |k: &str| {
                rest.split_whitespace()
                    .find_map(|f| f.strip_prefix(k))
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap()
            };
            let off = rest.split_whitespace().next().unwrap().parse().unwrap();
            out.push((
                off,
                field("hlen="),
                field("plen="),
                field("tag=") as u32,
                String::new(),
            ));
        } else if let Some(i) = l.find("sigclass ") {
            out.last_mut().unwrap().4 = l[i + 9..].trim().to_string();
        }
    }
    out
}

/// A key made in 2020 to expire after two days (gpg's faked time), the
/// image signed by it while it was valid; today it has expired, as
/// containers/image (gpgme) sees it: refused by skopeo and by zinstall
/// with its key file as exported after another key certified it later
/// (a newer certification that carries no expiry), and with a forged
/// newer self-signature saying "never expires" spliced in (it does not
/// verify, so gpg drops it); accepted by both once a real self-signature
/// renews it.
#[test]
fn a_key_expired_by_its_own_signatures_stays_expired() {
    let w = World::new();
    let g = Gpg::new(&w.path("expiring"));
    let at = |t: &str, args: &[&str]| {
        let mut a = vec![
            "--faked-system-time",
            t,
            "--pinentry-mode",
            "loopback",
            "--passphrase",
            "",
        ];
        a.extend_from_slice(args);
        g.gpg(&a);
    };
    at(
        "20200101T000000",
        &[
            "--quick-gen-key",
            "Expiring <exp@example.com>",
            "default",
            "default",
            "2d",
        ],
    );
    at(
        "20190101T000000",
        &[
            "--quick-gen-key",
            "Certifier <cert@example.com>",
            "default",
            "default",
            "never",
        ],
    );
    let listing = g.gpg(&["--with-colons", "--list-keys", "exp@example.com"]);
    let fpr = String::from_utf8_lossy(&listing.stdout)
        .lines()
        .find(|l| l.starts_with("fpr:"))
        .and_then(|l| l.split(':').nth(9))
        .unwrap()
        .to_string();

    let digest = w.push("expiring", "signed/expiring:v1", false);
    let m = manifest(&w, "signed/expiring:v1");
    // Signed while the key was valid: gpg (through skopeo's gpgme) reads
    // its time from gpg.conf.
    let conf = g.home.join("gpg.conf");
    fs::write(&conf, "faked-system-time 20200101T010000\n").unwrap();
    let claim = format!("{}/signed/expiring:v1", w.reg.host());
    sign_as(&w, &g.home, &fpr, &m, &claim, "signed/expiring", &digest, 1);
    fs::remove_file(&conf).unwrap();

    at(
        "20200101T120000",
        &["-u", "cert@example.com", "--quick-sign-key", &fpr],
    );
    let certified = w.path("certified.gpg");
    g.gpg(&["--output", s(&certified), "--export", &fpr]);
    let p = packets(&g, &certified);
    assert!(
        p.iter().any(|x| x.3 == 2 && x.4 == "0x10"),
        "no third-party certification in {p:?}"
    );
    at("20200102T000000", &["--quick-set-expire", &fpr, "0"]);
    let renewed = w.path("renewed.gpg");
    g.gpg(&["--output", s(&renewed), "--export", &fpr]);

    // The renewed key's self-signature, one byte of its signature
    // changed, put after the user ID of the expired key.
    let r = fs::read(&renewed).unwrap();
    let (off, hlen, plen, _, _) = packets(&g, &renewed)
        .into_iter()
        .find(|x| x.3 == 2 && x.4 == "0x13")
        .unwrap();
    let mut forged_sig = r[off..off + hlen + plen].to_vec();
    *forged_sig.last_mut().unwrap() ^= 0x55;
    let c = fs::read(&certified).unwrap();
    let uid = p.iter().find(|x| x.3 == 13).unwrap();
    let at_uid_end = uid.0 + uid.1 + uid.2;
    let mut forged = c[..at_uid_end].to_vec();
    forged.extend_from_slice(&forged_sig);
    forged.extend_from_slice(&c[at_uid_end..]);
    let forged_path = w.path("forged.gpg");
    fs::write(&forged_path, forged).unwrap();

    for (case, key, accepted) in [
        (
            "expired key, newer third-party certification",
            &certified,
            false,
        ),
        (
            "expired key, forged newer self-signature",
            &forged_path,
            false,
        ),
        ("key renewed by its own self-signature", &renewed, true),
    ] {
        let p = w.scoped(
            &format!("key-{}", key.file_stem().unwrap().to_string_lossy()),
            "signed",
            w.signed_by(key),
        );
        let failed = if accepted { "" } else { "wrong key" };
        w.judged(case, &p, "signed/expiring:v1", accepted, failed);
    }
}

/// An image named by tag and digest together. skopeo cannot be asked:
/// containers/image's docker transport refuses such a reference ("Docker
/// references with both a tag and digest are currently not supported",
/// checked here). Its policy code (policy_reference_match.go) takes
/// such an image as tagged (reference.NamedTagged), so matchExact,
/// matchRepoDigestOrExact and remapIdentity want a claim of exactly
/// `NAME:TAG@DIGEST`: a claim of `NAME:TAG` is refused, one of
/// `NAME:TAG@DIGEST` accepted; exactReference compares the claim with its
/// own reference; matchRepository compares names.
#[test]
fn tag_and_digest_together_are_judged_as_containers_image_judges_them() {
    let w = World::new();
    let host = w.reg.host();
    let digest = w.push("both", "signed/both:v1", true);
    let image = format!("signed/both:v1@{digest}");
    let (sk, said) = w.skopeo_accepts(
        &w.scoped("both-sk", "signed", w.signed_by(&w.key)),
        &image,
    );
    assert!(
        !sk && said.contains("both a tag and digest"),
        "skopeo: {said}"
    );

    let check = |case: &str, identity: serde_json::Value, verdict: &str| {
        let p = w.scoped(
            &format!("both-{}", case.replace(' ', "-")),
            "signed",
            signed_by_with(&w, identity),
        );
        let (code, v) = w.verify(&p, &image);
        assert_eq!(v["result"]["verdict"], verdict, "{case}: {v}");
        assert_eq!(
            code,
            if verdict == "accepted" { 0 } else { 1 },
            "{case}: {v}"
        );
        if verdict == "rejected" {
            assert_eq!(
                v["result"]["failed"], "identity mismatch",
                "{case}: {v}"
            );
        }
        eprintln!("VERDICT tag and digest, {case}: {verdict}");
    };
    let exact_ref = format!("{host}/signed/both:v1@{digest}");
    // Only skopeo's own signature, claiming NAME:TAG.
    check(
        "default, claim of the tag",
        json!({"type": "matchRepoDigestOrExact"}),
        "rejected",
    );
    check(
        "matchExact, claim of the tag",
        json!({"type": "matchExact"}),
        "rejected",
    );
    check(
        "remapIdentity, claim of the tag",
        json!({"type": "remapIdentity", "prefix": format!("{host}/signed"),
               "signedPrefix": format!("{host}/signed")}),
        "rejected",
    );
    check(
        "matchRepository, claim of the tag",
        json!({"type": "matchRepository"}),
        "accepted",
    );
    check(
        "exactReference NAME:TAG@DIGEST, claim of the tag",
        json!({"type": "exactReference", "dockerReference": exact_ref}),
        "rejected",
    );
    // A second signature claiming NAME:TAG@DIGEST.
    let m = manifest(&w, "signed/both:v1");
    sign_as(
        &w,
        &w.gpg.home,
        &w.signer,
        &m,
        &exact_ref,
        "signed/both",
        &digest,
        2,
    );
    check(
        "default, claim of both",
        json!({"type": "matchRepoDigestOrExact"}),
        "accepted",
    );
    check(
        "matchExact, claim of both",
        json!({"type": "matchExact"}),
        "accepted",
    );
    check(
        "exactReference NAME:TAG@DIGEST, claim of both",
        json!({"type": "exactReference", "dockerReference": exact_ref}),
        "accepted",
    );
}

/// `keyPaths`, a list of key files, for signedBy (judged by skopeo too)
/// and sigstoreSigned (skopeo 1.9 does not know it there: "Unknown key
/// \"keyPaths\""; judged as containers/image's policy_config_sigstore.go
/// reads it: any of the keys, exactly one of keyPath, keyPaths and
/// keyData, the list not empty). keyPath and keyPaths together refuse
/// the policy, as skopeo refuses it.
#[test]
fn key_paths_list_the_keys_of_a_requirement() {
    let w = World::new();
    let host = w.reg.host();
    w.push("one", "signed/app:v1", true);
    let either = w.scoped(
        "paths-either",
        "signed",
        json!([{"type": "signedBy", "keyType": "GPGKeys", "keyPaths": [w.other_key, w.key]}]),
    );
    w.judged(
        "keyPaths, the signer's among them",
        &either,
        "signed/app:v1",
        true,
        "",
    );
    let neither = w.scoped(
        "paths-neither",
        "signed",
        json!([{"type": "signedBy", "keyType": "GPGKeys", "keyPaths": [w.other_key]}]),
    );
    w.judged(
        "keyPaths, the signer's not among them",
        &neither,
        "signed/app:v1",
        false,
        "wrong key",
    );

    let refused = |p: &Path, image: &str| {
        let o = zinstall(&[
            "image",
            "verify",
            "--policy",
            s(p),
            &format!("{host}/{image}"),
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(
            text(&o).contains("exactly one of keyPath, keyPaths and keyData"),
            "{}",
            text(&o)
        );
        assert!(text(&o).contains(&p.display().to_string()), "{}", text(&o));
    };
    let both = w.scoped(
        "paths-both",
        "signed",
        json!([{"type": "signedBy", "keyType": "GPGKeys", "keyPath": w.key, "keyPaths": [w.key]}]),
    );
    refused(&both, "signed/app:v1");
    let (sk, said) = w.skopeo_accepts(&both, "signed/app:v1");
    assert!(
        !sk && said.contains("Exactly one of keyPath, keyPaths and keyData"),
        "skopeo: {said}"
    );

    let digest = w.push("two", "sig/app:v1", false);
    w.attach(
        "sig/app",
        &digest,
        &cosign_payload(&format!("{host}/sig/app:v1"), &digest),
        &w.sigstore_key,
    );
    let sigstore = |name: &str, keys: serde_json::Value| {
        w.scoped(
            name,
            "sig",
            json!([{"type": "sigstoreSigned", "keyPaths": keys}]),
        )
    };
    let check = |p: &Path, verdict: &str| {
        let (code, v) = w.verify(p, "sig/app:v1");
        assert_eq!(v["result"]["verdict"], verdict, "{v}");
        assert_eq!(code, if verdict == "accepted" { 0 } else { 1 }, "{v}");
        if verdict == "rejected" {
            assert_eq!(v["result"]["failed"], "wrong key", "{v}");
        }
    };
    check(
        &sigstore("sig-either", json!([w.other_sigstore_pub, w.sigstore_pub])),
        "accepted",
    );
    check(
        &sigstore("sig-neither", json!([w.other_sigstore_pub])),
        "rejected",
    );
    let sig_both = w.scoped(
        "sig-both",
        "sig",
        json!([{"type": "sigstoreSigned", "keyPath": w.sigstore_pub, "keyPaths": [w.sigstore_pub]}]),
    );
    refused(&sig_both, "sig/app:v1");
    refused(&sigstore("sig-empty", json!([])), "sig/app:v1");
}
