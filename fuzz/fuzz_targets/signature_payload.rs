//! A signature as a lookaside or a registry serves it: an OpenPGP
//! message verified against a real public key (rPGP parses it whole),
//! and the signed JSON payload checked against an image as
//! containers-signature(5) has it, both simple-signing and sigstore.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use zinstall_registry::policy::gpg::Keyring;
use zinstall_registry::policy::payload::{check_sigstore, check_simple};
use zinstall_registry::policy::{DockerRef, SignedIdentity};

/// The registry crate's test key.
const KEY: &[u8] = include_bytes!(
    "../../crates/features/registry/src/policy/testdata/public-key.gpg"
);

fn keyring() -> &'static Keyring {
    static K: OnceLock<Keyring> = OnceLock::new();
    K.get_or_init(|| {
        Keyring::parse(&[("public-key.gpg".to_string(), KEY.to_vec())])
            .expect("the test key parses")
    })
}

fuzz_target!(|data: &[u8]| {
    let _ = keyring().verify(data);
    let image =
        DockerRef::parse("reg.example.com/ns/app:1").expect("a reference");
    let digest = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    for identity in [SignedIdentity::default(), SignedIdentity::MatchRepository]
    {
        let _ = check_simple(data, digest, &image, &identity);
        let _ = check_sigstore(data, digest, &image, &identity);
    }
});
