//! `signedBy`: simple-signing signatures, OpenPGP messages (as gpg
//! `--sign` makes them: compressed, one-pass signed, the claim as literal
//! data), verified with rPGP against the policy's keyrings.

use std::io::Read;
use std::time::{SystemTime, UNIX_EPOCH};

use pgp::composed::{Message, PublicOrSecret, SignedPublicKey};
use pgp::packet::{Signature, SignatureType};
use pgp::types::{KeyDetails, Tag, Timestamp, VerifyingKey};

use super::payload::MAX_PAYLOAD;
use super::verdict::{Failed, KeyError};

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

/// Whether `lifetime` from `from` has run out (a zero or absent
/// lifetime never does).
fn run_out(from: Timestamp, lifetime: Option<pgp::types::Duration>) -> bool {
    let Some(d) = lifetime else {
        return false;
    };
    let d: std::time::Duration = d.into();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |n| n.as_secs());
    d.as_secs() != 0 && u64::from(from.as_secs()) + d.as_secs() < now
}

/// The self-signatures of `key` that verify against its primary key:
/// its user IDs' certifications and its direct-key signatures. A
/// certification by another key, or a packet that does not verify,
/// says nothing of the key's expiry (gpg and containers/image take only
/// valid self-signatures), so it is left out here.
fn valid_self_sigs(key: &SignedPublicKey) -> impl Iterator<Item = &Signature> {
    let primary = &key.primary_key;
    let certs = key.details.users.iter().flat_map(move |u| {
        u.signatures.iter().filter(move |s| {
            s.verify_certification(primary, Tag::UserId, &u.id).is_ok()
        })
    });
    let direct = key
        .details
        .direct_signatures
        .iter()
        .filter(move |s| s.verify_key(primary).is_ok());
    certs.chain(direct)
}

/// The key expiration time of the newest of `sigs` (self-signatures).
fn newest_expiry<'a>(
    sigs: impl Iterator<Item = &'a Signature>,
) -> Option<pgp::types::Duration> {
    sigs.filter(|s| s.created().is_some())
        .max_by_key(|s| s.created().map(Timestamp::as_secs))
        .and_then(Signature::key_expiration_time)
}

/// The keys of `key` that may make signatures, as gpg takes them: the
/// primary key unless revoked or expired; each subkey bound to it (with
/// the subkey's own back-signature when it signs), neither revoked nor
/// expired.
fn signing_keys(key: &SignedPublicKey) -> Vec<&dyn VerifyingKey> {
    if revoked(key)
        || run_out(
            key.primary_key.created_at(),
            newest_expiry(valid_self_sigs(key)),
        )
    {
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
        let expired = run_out(
            sub.key.created_at(),
            newest_expiry(
                sub.signatures
                    .iter()
                    .filter(|s| s.typ() == Some(SignatureType::SubkeyBinding)),
            ),
        );
        if bound && !revoked && !expired {
            out.push(sub);
        }
    }
    out
}

impl Keyring {
    /// Reads each keyring (binary, as `gpg --export` writes, or
    /// armored), named by where it came from.
    pub fn parse(rings: &[(String, Vec<u8>)]) -> Result<Keyring, KeyError> {
        let mut keys = Vec::new();
        for (source, bytes) in rings {
            let parsed = PublicOrSecret::from_reader_many(&bytes[..]).map_err(
                |error| KeyError::NotKeyring {
                    key: source.clone(),
                    error,
                },
            )?;
            let before = keys.len();
            for k in parsed.0 {
                match k.map_err(|error| KeyError::BadKey {
                    key: source.clone(),
                    error,
                })? {
                    PublicOrSecret::Public(k) => keys.push(k),
                    PublicOrSecret::Secret(k) => keys.push(k.to_public_key()),
                }
            }
            if keys.len() == before {
                return Err(KeyError::NoKey {
                    key: source.clone(),
                });
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
            for k in signing_keys(key) {
                let Ok(sig) = msg.verify(k) else {
                    continue;
                };
                if let Some(made) = sig.created()
                    && run_out(made, sig.signature_expiration_time())
                {
                    return Err((
                        Failed::Expired,
                        format!(
                            "the signature by {:X} has expired",
                            key.fingerprint()
                        ),
                    ));
                }
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
