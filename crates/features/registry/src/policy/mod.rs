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
mod invalid;
pub mod payload;
pub mod registries_d;
pub mod rules;
mod signature_source;
pub mod sigstore;
#[cfg(test)]
mod tests;
mod verdict;

use std::path::{Path, PathBuf};

pub use identity::{DockerRef, SignedIdentity};
pub use invalid::Invalid;
pub use registries_d::RegistriesD;
pub use rules::{Policy, Requirement};
pub use signature_source::{Signatures, SigstoreSig};
pub use verdict::{
    Failed, KeyError, PolicyError, Refusal, SigRejection, Verdict,
};

/// The system's policy, as podman reads it: the user's
/// `$HOME/.config/containers/policy.json` if it exists, else
/// `/etc/containers/policy.json`.
pub const SYSTEM_POLICY: &str = "/etc/containers/policy.json";

/// The system's registries.d, as podman reads it (the user's
/// `$HOME/.config/containers/registries.d` first, if it exists).
pub const SYSTEM_REGISTRIES_D: &str = "/etc/containers/registries.d";

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
