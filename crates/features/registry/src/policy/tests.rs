//! The verifiers checked against published examples (containers/image's
//! fixtures, see testdata/README): a simple-signing signature gpg made,
//! and a cosign signature with its key.

use super::identity::{DockerRef, SignedIdentity};
use super::{Failed, gpg, payload, sigstore};

const SIGNED_DIGEST: &str =
    "sha256:20bf21ed457b390829cdbeec8795a7bea1626991fda603e0d01b4e7f60427e55";

#[test]
fn a_published_simple_signing_signature_verifies() {
    let ring = |name: &str, bytes: &[u8]| {
        gpg::Keyring::parse(&[(name.to_string(), bytes.to_vec())]).unwrap()
    };
    let right =
        ring("public-key.gpg", include_bytes!("testdata/public-key.gpg"));
    let wrong = ring(
        "public-key-2.gpg",
        include_bytes!("testdata/public-key-2.gpg"),
    );
    let sig = include_bytes!("testdata/image.signature");
    let claim = right.verify(sig).unwrap();
    let image = DockerRef::parse("testing/manifest:latest").unwrap();
    let by_repo = SignedIdentity::MatchRepository;
    let c =
        payload::check_simple(&claim, SIGNED_DIGEST, &image, &by_repo).unwrap();
    assert_eq!(c.reference, "testing/manifest");
    // The claim names no tag: a tagged image is not it exactly.
    let exact = SignedIdentity::default();
    assert_eq!(
        payload::check_simple(&claim, SIGNED_DIGEST, &image, &exact)
            .unwrap_err()
            .0,
        Failed::IdentityMismatch
    );
    assert_eq!(wrong.verify(sig).unwrap_err().0, Failed::WrongKey);
    assert_eq!(
        right
            .verify(include_bytes!("testdata/expired.signature"))
            .unwrap_err()
            .0,
        Failed::Expired
    );
    // One byte changed in the signed data: no key made that.
    let mut bent = sig.to_vec();
    let n = bent.len();
    bent[n - 40] ^= 1;
    assert!(right.verify(&bent).is_err());
}

#[test]
fn signatures_by_subkeys_count_unless_revoked() {
    let ring = |bytes: &[u8]| {
        gpg::Keyring::parse(&[("ring".to_string(), bytes.to_vec())]).unwrap()
    };
    let with_subkey =
        ring(include_bytes!("testdata/public-key-with-subkey.gpg"));
    with_subkey
        .verify(include_bytes!("testdata/subkey.signature"))
        .unwrap();
    let revoked = ring(include_bytes!(
        "testdata/public-key-with-revoked-subkey.gpg"
    ));
    assert_eq!(
        revoked
            .verify(include_bytes!("testdata/subkey-revoked.signature"))
            .unwrap_err()
            .0,
        Failed::WrongKey
    );
}

const COSIGN_PUB: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEFNLqFhf4fiN6o/glAuYnq2jYUeL0
vRuLu/z39pmbVwS9ff5AYnlwaP9sxREajdLY9ynM6G1sy6AAmb7Z63TsLg==
-----END PUBLIC KEY-----
";

const COSIGN_PAYLOAD: &str = r#"{"critical":{"identity":{"docker-reference":"192.168.64.2:5000/cosign-signed-single-sample"},"image":{"docker-manifest-digest":"sha256:634a8f35b5f16dcf4aaa0822adc0b1964bb786fca12f6831de8ddc45e5986a00"},"type":"cosign container image signature"},"optional":null}"#;

const COSIGN_SIGNATURE: &str = "MEYCIQDmtamqYPjMg81nqeBhptrPls44aA/r7PwLmspINJY4MwIhANKRpqe2E9UCBtGFdPoz/8jAbaQm4uP4h+IpwKTE6ClR";

#[test]
fn a_published_cosign_signature_verifies() {
    let key =
        sigstore::Key::parse("cosign.pub", COSIGN_PUB.as_bytes()).unwrap();
    key.verify(COSIGN_PAYLOAD.as_bytes(), COSIGN_SIGNATURE)
        .unwrap();
    let image = DockerRef::parse(
        "192.168.64.2:5000/cosign-signed-single-sample:latest",
    )
    .unwrap();
    let digest = "sha256:634a8f35b5f16dcf4aaa0822adc0b1964bb786fca12f6831de8ddc45e5986a00";
    payload::check_sigstore(
        COSIGN_PAYLOAD.as_bytes(),
        digest,
        &image,
        &SignedIdentity::MatchRepository,
    )
    .unwrap();
    let bent = COSIGN_PAYLOAD.replace("634a", "634b");
    assert_eq!(
        key.verify(bent.as_bytes(), COSIGN_SIGNATURE).unwrap_err().0,
        Failed::WrongKey
    );
}
