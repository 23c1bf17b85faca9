//! `sigstoreSigned` with a public key: an ECDSA P-256 signature (ASN.1
//! DER, base64 in the attachment's `dev.cosignproject.cosign/signature`
//! annotation) over the payload's bytes with SHA-256, as cosign makes
//! them.

use base64::Engine;
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{DerSignature, VerifyingKey};
use p256::pkcs8::DecodePublicKey;

use super::verdict::{Failed, KeyError};

/// Media type of a sigstore signature layer.
pub const SIMPLESIGNING_TYPE: &str =
    "application/vnd.dev.cosign.simplesigning.v1+json";

/// The annotation holding the signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

/// The public keys of a `sigstoreSigned` requirement (`keyPath`,
/// `keyPaths` or `keyData`): a signature by any of them will do.
pub struct Keys(Vec<Key>);

impl Keys {
    /// Reads each PEM key, named by where it came from.
    pub fn parse(keys: &[(String, Vec<u8>)]) -> Result<Keys, KeyError> {
        if keys.is_empty() {
            return Err(KeyError::NoPublicKey);
        }
        keys.iter()
            .map(|(source, pem)| Key::parse(source, pem))
            .collect::<Result<Vec<_>, _>>()
            .map(Keys)
    }

    /// Whether `signature` (base64 DER) over `payload` is one of these
    /// keys'.
    pub fn verify(
        &self,
        payload: &[u8],
        signature: &str,
    ) -> Result<(), (Failed, String)> {
        let mut last = None;
        for k in &self.0 {
            match k.verify(payload, signature) {
                Ok(()) => return Ok(()),
                // Malformed for one key is malformed for all.
                Err(e) if e.0 != Failed::WrongKey => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        match last {
            Some(_) if self.0.len() > 1 => Err((
                Failed::WrongKey,
                format!(
                    "not signed by a key in {}",
                    self.0
                        .iter()
                        .map(|k| k.source.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            )),
            Some(e) => Err(e),
            None => Err((Failed::WrongKey, "no public key given".into())),
        }
    }
}

/// A sigstore public key.
pub struct Key {
    key: VerifyingKey,
    source: String,
}

impl Key {
    /// Reads a PEM `PUBLIC KEY` (as `cosign generate-key-pair` writes
    /// `cosign.pub`).
    pub fn parse(source: &str, pem: &[u8]) -> Result<Key, KeyError> {
        let text = std::str::from_utf8(pem)
            .map_err(|_| KeyError::NotPem { key: source.into() })?;
        let key = VerifyingKey::from_public_key_pem(text.trim()).map_err(
            |error| KeyError::NotP256 {
                key: source.into(),
                error,
            },
        )?;
        Ok(Key {
            key,
            source: source.to_string(),
        })
    }

    /// Whether `signature` (base64 DER) is this key's over `payload`.
    pub fn verify(
        &self,
        payload: &[u8],
        signature: &str,
    ) -> Result<(), (Failed, String)> {
        let der = base64::engine::general_purpose::STANDARD
            .decode(signature.trim())
            .map_err(|e| {
                (Failed::Malformed, format!("signature is not base64: {e}"))
            })?;
        let sig = DerSignature::try_from(der.as_slice()).map_err(|e| {
            (Failed::Malformed, format!("not an ECDSA signature: {e}"))
        })?;
        self.key.verify(payload, &sig).map_err(|_| {
            (
                Failed::WrongKey,
                format!("not signed by the key in {}", self.source),
            )
        })
    }
}
