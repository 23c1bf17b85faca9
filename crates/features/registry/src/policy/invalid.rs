//! What is wrong with a policy's text: a docker reference, a
//! `signedIdentity`, a requirement or a scope. The policy file is the
//! caller's to name ([`super::PolicyError::BadPolicy`]).

/// A part of a policy that containers/image would refuse.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Invalid {
    /// Empty or longer than any reference.
    #[error("{0:?} is not a docker reference")]
    NotReference(String),
    /// A digest that is not `ALGO:HEX`.
    #[error("{text:?}: digest {digest:?} is not ALGO:HEX")]
    Digest {
        /// The reference.
        text: String,
        /// Its digest part.
        digest: String,
    },
    /// A tag that is empty, too long or of other characters.
    #[error("{0:?}: bad tag")]
    Tag(String),
    /// A repository name of other characters or without a path.
    #[error("{0:?}: bad repository name")]
    Repository(String),
    /// `exactReference` naming a repository alone.
    #[error("exactReference {0:?} has no tag or digest")]
    NotExactReference(String),
    /// `exactRepository` naming a tag or digest.
    #[error("exactRepository {0:?} is not a repository")]
    NotRepository(String),
    /// A `remapIdentity` prefix that is not a host or namespace.
    #[error(
        "remapIdentity prefix {0:?} is not a host, namespace or repository"
    )]
    Prefix(String),
    /// A `signedBy` key type other than `GPGKeys`.
    #[error("signedBy keyType {0:?}: only \"GPGKeys\" is known")]
    KeyType(String),
    /// None or more than one of the ways to give keys.
    #[error("{0} needs exactly one of keyPath, keyPaths and keyData")]
    KeySource(&'static str),
    /// `keyData` that is not base64.
    #[error("keyData is not base64: {0}")]
    KeyData(base64::DecodeError),
    /// A `*` other than in `*.DOMAIN`.
    #[error("a wildcard is *.DOMAIN")]
    Wildcard,
    /// A scope without `/` that is not a host.
    #[error("not a host[:port]")]
    Host,
    /// A scope written other than as its reference expands.
    #[error("not in the fully expanded form (as {0})")]
    NotExpanded(String),
}
