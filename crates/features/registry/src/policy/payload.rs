//! The signed claim (containers-signature(5)): which manifest digest,
//! which docker reference. Read strictly, as the format asks: unknown
//! members of `critical` refuse the signature.

use serde::Deserialize;

use super::identity::{DockerRef, SignedIdentity};
use super::verdict::Failed;

/// `critical.type` of a simple-signing signature.
pub const SIMPLE_TYPE: &str = "atomic container signature";

/// `critical.type` of a sigstore (cosign) payload.
pub const SIGSTORE_TYPE: &str = "cosign container image signature";

/// The largest payload read.
pub const MAX_PAYLOAD: usize = 4 << 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Claim {
    critical: Critical,
    // Present in every claim (may be null in cosign's); its contents are
    // not relied on.
    #[allow(dead_code)]
    optional: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Critical {
    #[serde(rename = "type")]
    kind: String,
    image: Image,
    identity: Identity,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    digest: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Identity {
    #[serde(rename = "docker-reference")]
    reference: String,
}

/// A claim that passed: what it said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// `critical.image.docker-manifest-digest`.
    pub digest: String,
    /// `critical.identity.docker-reference`.
    pub reference: String,
}

/// Checks a simple-signing payload (already verified as signed by a
/// trusted key) against the manifest `digest` and `image`'s identity.
pub fn check_simple(
    payload: &[u8],
    digest: &str,
    image: &DockerRef,
    identity: &SignedIdentity,
) -> Result<Claimed, (Failed, String)> {
    check(payload, SIMPLE_TYPE, digest, image, identity)
}

/// The same for a sigstore payload.
pub fn check_sigstore(
    payload: &[u8],
    digest: &str,
    image: &DockerRef,
    identity: &SignedIdentity,
) -> Result<(), (Failed, String)> {
    check(payload, SIGSTORE_TYPE, digest, image, identity).map(|_| ())
}

fn check(
    payload: &[u8],
    kind: &str,
    digest: &str,
    image: &DockerRef,
    identity: &SignedIdentity,
) -> Result<Claimed, (Failed, String)> {
    let malformed = |why: String| (Failed::Malformed, why);
    if payload.len() > MAX_PAYLOAD {
        return Err(malformed(format!(
            "payload larger than {MAX_PAYLOAD} bytes"
        )));
    }
    let not_claim =
        |e: String| malformed(format!("payload is not a signature claim: {e}"));
    let value: serde_json::Value = serde_json::from_slice(payload)
        .map_err(|e| not_claim(e.to_string()))?;
    // Exactly `critical` and `optional` (which may be null), as the
    // format has it.
    if value
        .as_object()
        .is_none_or(|o| !o.contains_key("optional"))
    {
        return Err(not_claim("no \"optional\" member".into()));
    }
    let claim: Claim =
        serde_json::from_value(value).map_err(|e| not_claim(e.to_string()))?;
    let c = claim.critical;
    if c.kind != kind {
        return Err(malformed(format!(
            "critical.type is {:?}, not {kind:?}",
            c.kind
        )));
    }
    if c.image.digest != digest {
        return Err((
            Failed::DigestMismatch,
            format!(
                "signed manifest digest {}, the manifest is {digest}",
                c.image.digest
            ),
        ));
    }
    let signed = DockerRef::parse(&c.identity.reference)
        .map_err(|why| malformed(format!("critical.identity: {why}")))?;
    if !identity.matches(image, &signed) {
        return Err((
            Failed::IdentityMismatch,
            format!(
                "signed identity {signed} does not satisfy signedIdentity {} for {image}",
                identity.describe()
            ),
        ));
    }
    Ok(Claimed {
        digest: c.image.digest,
        reference: c.identity.reference,
    })
}

/// A simple-signing payload claiming `reference` for `digest` (for
/// tests and for a signer).
pub fn simple_payload(reference: &str, digest: &str) -> Vec<u8> {
    claim_json(SIMPLE_TYPE, reference, digest)
}

/// A sigstore payload claiming `reference` for `digest`.
pub fn sigstore_payload(reference: &str, digest: &str) -> Vec<u8> {
    claim_json(SIGSTORE_TYPE, reference, digest)
}

fn claim_json(kind: &str, reference: &str, digest: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "critical": {
            "identity": {"docker-reference": reference},
            "image": {"docker-manifest-digest": digest},
            "type": kind,
        },
        "optional": null,
    }))
    .expect("a JSON value serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_checked_member_by_member() {
        let img = DockerRef::parse("h/a:1").unwrap();
        let id = SignedIdentity::default();
        let p = simple_payload("h/a:1", "sha256:aa");
        assert!(check_simple(&p, "sha256:aa", &img, &id).is_ok());
        assert_eq!(
            check_simple(&p, "sha256:bb", &img, &id).unwrap_err().0,
            Failed::DigestMismatch
        );
        let other = DockerRef::parse("h/b:1").unwrap();
        assert_eq!(
            check_simple(&p, "sha256:aa", &other, &id).unwrap_err().0,
            Failed::IdentityMismatch
        );
        assert_eq!(
            check_sigstore(&p, "sha256:aa", &img, &id).unwrap_err().0,
            Failed::Malformed
        );
        let extra = br#"{"critical":{"type":"atomic container signature","image":{"docker-manifest-digest":"sha256:aa"},"identity":{"docker-reference":"h/a:1"},"x":1},"optional":{}}"#;
        assert_eq!(
            check_simple(extra, "sha256:aa", &img, &id).unwrap_err().0,
            Failed::Malformed
        );
        let no_optional = br#"{"critical":{"type":"atomic container signature","image":{"docker-manifest-digest":"sha256:aa"},"identity":{"docker-reference":"h/a:1"}}}"#;
        assert_eq!(
            check_simple(no_optional, "sha256:aa", &img, &id)
                .unwrap_err()
                .0,
            Failed::Malformed
        );
    }
}
