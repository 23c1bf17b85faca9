//! `signedBy`: simple-signing signatures, OpenPGP messages (as gpg
//! `--sign` makes them: compressed, one-pass signed, the claim as literal
//! data), verified with rPGP against the policy's keyrings.

use std::io::Read;

use pgp::composed::{Message, PublicOrSecret, SignedPublicKey};
use pgp::packet::SignatureType;
use pgp::types::{KeyDetails, VerifyingKey};

use super::Failed;
use super::payload::MAX_PAYLOAD;

/// The public keys of a `signedBy` requirement.
pub struct Keyring {
    keys: Vec<SignedPublicKey>,
    sources: String,
}

/// Whether `key`'s primary key has been revoked by itself.
fn revoked(key: &SignedPublicKey) -> bool {
    key.details.revocation_signatures.iter().any(|sig| {
        sig.typ() == Some(SignatureType::KeyRevocation)
            && sig.verify_key(&key.primary_key).is_ok()
    })
}

/// The keys of `key` that may make signatures, as gpg takes them: the
/// primary key unless revoked; each subkey bound to it (with the
/// subkey's own back-signature when it signs) and not revoked.
fn signing_keys(key: &SignedPublicKey) -> Vec<&dyn VerifyingKey> {
    if revoked(key) {
        return Vec::new();
    }
    let mut out: Vec<&dyn VerifyingKey> = vec![key];
    for sub in &key.public_subkeys {
        let bound = sub.signatures.iter().any(|sig| {
            sig.typ() == Some(SignatureType::SubkeyBinding)
                && sig.key_flags().sign()
                && sig
                    .verify_subkey_binding(&key.primary_key, &sub.key)
                    .is_ok()
                && sig.embedded_signature().is_some_and(|back| {
                    back.verify_primary_key_binding(&sub.key, &key.primary_key)
                        .is_ok()
                })
        });
        let revoked = sub.signatures.iter().any(|sig| {
            sig.typ() == Some(SignatureType::SubkeyRevocation)
                && sig
                    .verify_subkey_binding(&key.primary_key, &sub.key)
                    .is_ok()
        });
        if bound && !revoked {
            out.push(sub);
        }
    }
    out
}

impl Keyring {
    /// Reads each keyring (binary, as `gpg --export` writes, or
    /// armored), named by where it came from.
    pub fn parse(rings: &[(String, Vec<u8>)]) -> Result<Keyring, String> {
        let mut keys = Vec::new();
        for (source, bytes) in rings {
            let parsed =
                PublicOrSecret::from_reader_many(&bytes[..]).map_err(|e| {
                    format!("{source}: not an OpenPGP keyring: {e}")
                })?;
            let before = keys.len();
            for k in parsed.0 {
                match k.map_err(|e| format!("{source}: {e}"))? {
                    PublicOrSecret::Public(k) => keys.push(k),
                    PublicOrSecret::Secret(k) => keys.push(k.to_public_key()),
                }
            }
            if keys.len() == before {
                return Err(format!("{source}: no OpenPGP key in it"));
            }
        }
        Ok(Keyring {
            keys,
            sources: rings
                .iter()
                .map(|(s, _)| s.as_str())
                .collect::<Vec<_>>()
                .join(","),
        })
    }

    /// The fingerprints of the keys (primary keys), for messages.
    pub fn fingerprints(&self) -> Vec<String> {
        self.keys
            .iter()
            .map(|k| format!("{:X}", k.fingerprint()))
            .collect()
    }

    /// The signed payload of `signature` if a key of this keyring (a
    /// primary key or a subkey) made it.
    pub fn verify(
        &self,
        signature: &[u8],
    ) -> Result<Vec<u8>, (Failed, String)> {
        let malformed = |why: String| (Failed::Malformed, why);
        let msg = if signature.starts_with(b"-----BEGIN") {
            Message::from_armor(signature).map(|(m, _)| m)
        } else {
            Message::from_bytes(signature)
        }
        .map_err(|e| malformed(format!("not an OpenPGP message: {e}")))?;
        let mut msg = if msg.is_compressed() {
            msg.decompress()
                .map_err(|e| malformed(format!("cannot decompress: {e}")))?
        } else {
            msg
        };
        let mut data = Vec::new();
        (&mut msg)
            .take(MAX_PAYLOAD as u64 + 1)
            .read_to_end(&mut data)
            .map_err(|e| malformed(format!("cannot read: {e}")))?;
        if data.len() > MAX_PAYLOAD {
            return Err(malformed(format!(
                "payload larger than {MAX_PAYLOAD} bytes"
            )));
        }
        if !msg.is_signed() {
            return Err(malformed("the message is not signed".into()));
        }
        for key in &self.keys {
            if signing_keys(key).into_iter().any(|k| msg.verify(k).is_ok()) {
                return Ok(data);
            }
        }
        Err((
            Failed::WrongKey,
            format!(
                "not signed by a key in {} ({})",
                self.sources,
                self.fingerprints().join(", ")
            ),
        ))
    }
}
