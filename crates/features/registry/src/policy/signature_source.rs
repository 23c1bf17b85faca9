//! Where a judgement gets an image's signatures: the trait the registry
//! implements, fetching only when a requirement asks, and a sigstore
//! attachment as fetched.

use super::verdict::PolicyError;

/// Signatures of an image, fetched when a requirement first asks.
pub trait Signatures {
    /// Simple-signing signatures (OpenPGP messages), each with where it
    /// came from.
    fn simple(&mut self) -> Result<Vec<(String, Vec<u8>)>, PolicyError>;
    /// Sigstore signatures: each payload, its base64 signature, and where
    /// it came from.
    fn sigstore(&mut self) -> Result<Vec<SigstoreSig>, PolicyError>;
}

/// A sigstore attachment: the payload (the layer's bytes) and the
/// `dev.cosignproject.cosign/signature` annotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SigstoreSig {
    /// Where it came from (the attachment's tag and layer digest).
    pub source: String,
    /// The layer's bytes: the JSON claim.
    pub payload: Vec<u8>,
    /// The annotation: base64 of an ASN.1 ECDSA signature.
    pub signature: String,
}
