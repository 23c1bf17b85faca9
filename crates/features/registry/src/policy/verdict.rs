//! What judging an image comes to: the verdict, the refusal and what
//! failed, and the errors reading a policy or its signatures gives. Every
//! room of the policy reports in these terms, so they depend on none.

use std::path::PathBuf;

/// Why a policy or a signature was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The policy file could not be read or is not a policy.
    #[error("{}: {why}", path.display())]
    BadPolicy {
        /// The policy file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A registries.d file could not be read or is not one.
    #[error("{}: {why}", path.display())]
    BadRegistriesD {
        /// The file (or directory).
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A policy or registries.d file could not be read: missing, not a
    /// regular file, or larger than its kind may be
    /// ([`zinstall_core::foreign`]).
    #[error(transparent)]
    Read(#[from] zinstall_core::foreign::Error),
    /// The image is refused by the policy.
    #[error("{0}")]
    Refused(Box<Refusal>),
    /// Signatures could not be fetched (a lookaside store that answers
    /// with an error other than "not found", a file that cannot be read).
    #[error("{url}: {why}")]
    Fetch {
        /// The URL or path.
        url: String,
        /// What went wrong.
        why: String,
    },
}

/// An image the policy refused: which rule, and what failed.
#[derive(Debug)]
pub struct Refusal {
    /// The image, as named.
    pub reference: String,
    /// The policy file.
    pub policy: PathBuf,
    /// The scope whose requirements applied (`default` for the global
    /// default, `docker:""` for the transport's).
    pub scope: String,
    /// The requirement that refused it.
    pub requirement: String,
    /// What failed.
    pub why: Failed,
    /// How, in words: the key, the identities, the digests.
    pub detail: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: refused by {} scope {:?} requirement {}: {}: {}",
            self.reference,
            self.policy.display(),
            self.scope,
            self.requirement,
            self.why,
            self.detail
        )
    }
}

/// What made a requirement refuse an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Failed {
    /// The requirement is `reject`.
    Rejected,
    /// The requirement's keys could not be read.
    KeyUnreadable,
    /// No signature of the requirement's kind exists for the image.
    NoSignature,
    /// No signature is by a key the requirement names (or by one that
    /// is revoked or expired).
    WrongKey,
    /// A signature by a trusted key that has expired.
    Expired,
    /// A signature by a trusted key whose payload is not a signature
    /// claim (containers-signature(5)).
    Malformed,
    /// A signature by a trusted key for another manifest digest.
    DigestMismatch,
    /// A signature by a trusted key for this digest, claiming an identity
    /// that `signedIdentity` does not accept.
    IdentityMismatch,
}

impl Failed {
    /// Words for a message or a JSON field.
    pub fn as_str(self) -> &'static str {
        match self {
            Failed::Rejected => "rejected by rule",
            Failed::KeyUnreadable => "key unreadable",
            Failed::NoSignature => "no signature",
            Failed::WrongKey => "wrong key",
            Failed::Expired => "expired signature",
            Failed::Malformed => "malformed signature",
            Failed::DigestMismatch => "digest mismatch",
            Failed::IdentityMismatch => "identity mismatch",
        }
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One signature's rejection: how far it got, and why.
#[derive(Clone, Debug)]
pub struct SigRejection {
    /// The stage it failed at.
    pub failed: Failed,
    /// Which signature (its URL or tag) and what was wrong.
    pub detail: String,
}

/// What the policy decided, and which rule decided it.
#[derive(Clone, Debug)]
pub struct Verdict {
    /// The policy file.
    pub policy: PathBuf,
    /// The scope whose requirements applied.
    pub scope: String,
    /// Each requirement of the scope, described.
    pub requirements: Vec<String>,
    /// Accepted; or the requirement that refused, what failed and how.
    pub refusal: Option<(String, Failed, String)>,
}

impl Verdict {
    /// Whether the image may be used.
    pub fn accepted(&self) -> bool {
        self.refusal.is_none()
    }

    /// The refusal as an error naming the image.
    pub fn into_result(self, reference: &str) -> Result<Verdict, PolicyError> {
        match self.refusal {
            None => Ok(self),
            Some((requirement, why, detail)) => {
                Err(PolicyError::Refused(Box::new(Refusal {
                    reference: reference.to_string(),
                    policy: self.policy,
                    scope: self.scope,
                    requirement,
                    why,
                    detail,
                })))
            }
        }
    }
}

/// Why a requirement's keys cannot be used: the key file or text (as the
/// policy names it) and what is wrong. The image is refused for it
/// ([`Failed::KeyUnreadable`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// A key file could not be read.
    #[error("{0}")]
    Read(zinstall_core::foreign::Error),
    /// Not an OpenPGP keyring.
    #[error("{key}: not an OpenPGP keyring: {error}")]
    NotKeyring {
        /// Where the keyring came from (its path, or `keyData`).
        key: String,
        /// What rPGP said.
        error: pgp::errors::Error,
    },
    /// A key of the keyring could not be read.
    #[error("{key}: {error}")]
    BadKey {
        /// Where the keyring came from.
        key: String,
        /// What rPGP said.
        error: pgp::errors::Error,
    },
    /// A keyring without keys.
    #[error("{key}: no OpenPGP key in it")]
    NoKey {
        /// Where the keyring came from.
        key: String,
    },
    /// A `sigstoreSigned` requirement without a key.
    #[error("no public key given")]
    NoPublicKey,
    /// Not PEM text.
    #[error("{key}: not a PEM public key")]
    NotPem {
        /// Where the key came from.
        key: String,
    },
    /// PEM, but not an ECDSA P-256 public key.
    #[error("{key}: not an ECDSA P-256 public key: {error}")]
    NotP256 {
        /// Where the key came from.
        key: String,
        /// What the decoder said.
        error: p256::pkcs8::spki::Error,
    },
}
