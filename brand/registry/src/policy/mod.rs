//! Who may have made an image: a containers-policy.json(5) trust policy,
//! read and judged as containers/image (podman, skopeo, CRI-O) does, and
//! the signatures it asks for, found where containers-registries.d(5)
//! says (a lookaside store for simple signing, the registry's sigstore
//! attachments).
//!
//! The policy is judged on an image's manifest digest before any of its
//! layers is fetched ([`crate::Registry::open`]): a refusal
//! ([`PolicyError::Refused`]) names the policy file, the scope and the
//! requirement that decided, and what failed.
//!
//! - [`rules`]: the policy file, its scopes and requirements;
//! - [`identity`]: `signedIdentity`, docker references compared;
//! - [`payload`]: the signed JSON claim, as containers-signature(5) has it;
//! - [`gpg`]: `signedBy`, simple signing with OpenPGP keys (rPGP);
//! - [`sigstore`]: `sigstoreSigned`, ECDSA P-256 keys (RustCrypto);
//! - [`registries_d`]: where signatures are looked for.

pub mod gpg;
pub mod identity;
pub mod payload;
pub mod registries_d;
pub mod rules;
pub mod sigstore;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

pub use identity::{DockerRef, SignedIdentity};
pub use registries_d::RegistriesD;
pub use rules::{Policy, Requirement};

/// The system's policy, as podman reads it: the user's
/// `$HOME/.config/containers/policy.json` if it exists, else
/// `/etc/containers/policy.json`.
pub const SYSTEM_POLICY: &str = "/etc/containers/policy.json";

/// The system's registries.d, as podman reads it (the user's
/// `$HOME/.config/containers/registries.d` first, if it exists).
pub const SYSTEM_REGISTRIES_D: &str = "/etc/containers/registries.d";

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

/// A policy with the registries.d that says where signatures are.
#[derive(Clone, Debug)]
pub struct Trust {
    /// The policy.
    pub policy: Policy,
    /// Where signatures are looked for.
    pub registries_d: RegistriesD,
}

impl Trust {
    /// Reads `policy` and `registries_d` (each defaulting to the
    /// system's, as podman finds them). `Ok(None)` when no policy was
    /// named and the system has none.
    pub fn load(
        policy: Option<&Path>,
        registries_d: Option<&Path>,
    ) -> Result<Option<Trust>, PolicyError> {
        let policy = match policy {
            Some(p) => p.to_path_buf(),
            None => match system_policy() {
                Some(p) => p,
                None => return Ok(None),
            },
        };
        let policy = Policy::read(&policy)?;
        let dir =
            registries_d.map_or_else(system_registries_d, Path::to_path_buf);
        let registries_d = RegistriesD::read(&dir)?;
        Ok(Some(Trust {
            policy,
            registries_d,
        }))
    }
}

/// The policy file podman would read, if there is one.
pub fn system_policy() -> Option<PathBuf> {
    let user = std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join(".config/containers/policy.json"));
    user.into_iter()
        .chain([PathBuf::from(SYSTEM_POLICY)])
        .find(|p| p.exists())
}

/// The registries.d podman would read.
pub fn system_registries_d() -> PathBuf {
    std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join(".config/containers/registries.d"))
        .filter(|p| p.is_dir())
        .unwrap_or_else(|| PathBuf::from(SYSTEM_REGISTRIES_D))
}
