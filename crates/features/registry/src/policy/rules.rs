//! The policy file: its scopes, the requirements of each, and how an
//! image is judged by them (containers/image's `IsRunningImageAllowed`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine;
use serde::Deserialize;
use zinstall_core::foreign::{self, Follow, Kind};

use super::identity::{DockerRef, SignedIdentity};
use super::invalid::Invalid;
use super::signature_source::Signatures;
use super::verdict::{Failed, KeyError, PolicyError, SigRejection, Verdict};
use super::{gpg, payload, sigstore};

/// Transports containers/image knows; their scopes other than docker's
/// are kept but never used (zinstall pulls from registries only).
const TRANSPORTS: &[&str] = &[
    "docker",
    "atomic",
    "dir",
    "oci",
    "oci-archive",
    "docker-archive",
    "docker-daemon",
    "containers-storage",
    "ostree",
    "sif",
    "tarball",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    default: Vec<Requirement>,
    #[serde(default)]
    transports: BTreeMap<String, BTreeMap<String, Vec<Requirement>>>,
}

/// Where a requirement's keys are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Keys {
    /// Files (`keyPath`, `keyPaths`).
    Paths(Vec<PathBuf>),
    /// The keys themselves (`keyData`, base64 in the policy).
    Data(Vec<u8>),
}

impl Keys {
    fn read(&self) -> Result<Vec<(String, Vec<u8>)>, KeyError> {
        match self {
            Keys::Paths(ps) => ps
                .iter()
                .map(|p| {
                    // The administrator's policy names them: a link to the
                    // key is followed, and what it leads to checked.
                    foreign::read(p, Follow::Yes, Kind::Key)
                        .map(|b| (p.display().to_string(), b))
                        .map_err(KeyError::Read)
                })
                .collect(),
            Keys::Data(d) => Ok(vec![("keyData".to_string(), d.clone())]),
        }
    }

    fn describe(&self) -> String {
        match self {
            Keys::Paths(ps) => ps
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(","),
            Keys::Data(_) => "keyData".to_string(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSignedBy {
    #[serde(rename = "keyType")]
    key_type: String,
    #[serde(rename = "keyPath")]
    key_path: Option<PathBuf>,
    #[serde(rename = "keyPaths")]
    key_paths: Option<Vec<PathBuf>>,
    #[serde(rename = "keyData")]
    key_data: Option<String>,
    #[serde(rename = "signedIdentity", default)]
    signed_identity: SignedIdentity,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSigstore {
    #[serde(rename = "keyPath")]
    key_path: Option<PathBuf>,
    #[serde(rename = "keyPaths")]
    key_paths: Option<Vec<PathBuf>>,
    #[serde(rename = "keyData")]
    key_data: Option<String>,
    #[serde(rename = "signedIdentity", default)]
    signed_identity: SignedIdentity,
}

#[derive(Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
enum RawRequirement {
    #[serde(rename = "insecureAcceptAnything")]
    InsecureAcceptAnything {},
    #[serde(rename = "reject")]
    Reject {},
    #[serde(rename = "signedBy")]
    SignedBy(RawSignedBy),
    #[serde(rename = "sigstoreSigned")]
    SigstoreSigned(RawSigstore),
}

/// One requirement of a scope.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawRequirement")]
pub enum Requirement {
    /// Any image.
    InsecureAcceptAnything,
    /// No image.
    Reject,
    /// A simple-signing signature by one of these OpenPGP keys.
    SignedBy {
        /// The keyrings.
        keys: Keys,
        /// What the signature must claim.
        identity: SignedIdentity,
    },
    /// A sigstore signature by one of these public keys.
    SigstoreSigned {
        /// The keys (PEM).
        key: Keys,
        /// What the signature must claim.
        identity: SignedIdentity,
    },
}

fn key_data(d: &str) -> Result<Vec<u8>, Invalid> {
    base64::engine::general_purpose::STANDARD
        .decode(d.trim())
        .map_err(Invalid::KeyData)
}

impl TryFrom<RawRequirement> for Requirement {
    type Error = Invalid;

    fn try_from(raw: RawRequirement) -> Result<Requirement, Invalid> {
        Ok(match raw {
            RawRequirement::InsecureAcceptAnything {} => {
                Requirement::InsecureAcceptAnything
            }
            RawRequirement::Reject {} => Requirement::Reject,
            RawRequirement::SignedBy(s) => {
                if s.key_type != "GPGKeys" {
                    return Err(Invalid::KeyType(s.key_type));
                }
                let keys = match (s.key_path, s.key_paths, s.key_data) {
                    (Some(p), None, None) => Keys::Paths(vec![p]),
                    (None, Some(ps), None) if !ps.is_empty() => Keys::Paths(ps),
                    (None, None, Some(d)) => Keys::Data(key_data(&d)?),
                    _ => {
                        return Err(Invalid::KeySource("signedBy"));
                    }
                };
                s.signed_identity.validate()?;
                Requirement::SignedBy {
                    keys,
                    identity: s.signed_identity,
                }
            }
            RawRequirement::SigstoreSigned(s) => {
                // As containers/image: exactly one source of keys, and
                // keyPaths not empty.
                let key = match (s.key_path, s.key_paths, s.key_data) {
                    (Some(p), None, None) => Keys::Paths(vec![p]),
                    (None, Some(ps), None) if !ps.is_empty() => Keys::Paths(ps),
                    (None, None, Some(d)) => Keys::Data(key_data(&d)?),
                    _ => {
                        return Err(Invalid::KeySource("sigstoreSigned"));
                    }
                };
                s.signed_identity.validate()?;
                Requirement::SigstoreSigned {
                    key,
                    identity: s.signed_identity,
                }
            }
        })
    }
}

impl Requirement {
    /// Described for a message: its type, keys and identity rule.
    pub fn describe(&self) -> String {
        match self {
            Requirement::InsecureAcceptAnything => {
                "insecureAcceptAnything".into()
            }
            Requirement::Reject => "reject".into(),
            Requirement::SignedBy { keys, identity } => format!(
                "signedBy(GPGKeys {}, signedIdentity {})",
                keys.describe(),
                identity.describe()
            ),
            Requirement::SigstoreSigned { key, identity } => format!(
                "sigstoreSigned({}, signedIdentity {})",
                key.describe(),
                identity.describe()
            ),
        }
    }

    /// Whether judging it needs signatures (anything but the two that
    /// decide alone).
    pub fn needs_signatures(&self) -> bool {
        matches!(
            self,
            Requirement::SignedBy { .. } | Requirement::SigstoreSigned { .. }
        )
    }

    /// Whether the image (its identity, its manifest's digest, its
    /// signatures) satisfies this requirement; an error only when the
    /// signatures could not be looked up.
    fn judge(
        &self,
        image: &DockerRef,
        digest: &str,
        sigs: &mut dyn Signatures,
    ) -> Result<Judgement, PolicyError> {
        match self {
            Requirement::InsecureAcceptAnything => Ok(Judgement::Met),
            Requirement::Reject => Ok(Judgement::unmet(
                Failed::Rejected,
                "the policy rejects every image in this scope",
            )),
            Requirement::SignedBy { keys, identity } => {
                judge_simple(keys, identity, image, digest, sigs)
            }
            Requirement::SigstoreSigned { key, identity } => {
                judge_sigstore(key, identity, image, digest, sigs)
            }
        }
    }
}

/// Judges the image's simple-signing signatures against `keys` and
/// `identity`.
fn judge_simple(
    keys: &Keys,
    identity: &SignedIdentity,
    image: &DockerRef,
    digest: &str,
    sigs: &mut dyn Signatures,
) -> Result<Judgement, PolicyError> {
    let keyring = match keys.read().and_then(|k| gpg::Keyring::parse(&k)) {
        Ok(k) => k,
        Err(why) => {
            return Ok(Judgement::unmet(
                Failed::KeyUnreadable,
                why.to_string(),
            ));
        }
    };
    let found = sigs.simple()?;
    let r = found
        .iter()
        .map(|(source, bytes)| {
            keyring
                .verify(bytes)
                .and_then(|p| {
                    payload::check_simple(&p, digest, image, identity)
                })
                .map(|_| ())
                .map_err(|(failed, why)| SigRejection {
                    failed,
                    detail: format!("{source}: {why}"),
                })
        })
        .collect::<Vec<_>>();
    Ok(verdict("simple-signing", r))
}

/// Judges the image's sigstore signatures against `key` and `identity`.
fn judge_sigstore(
    key: &Keys,
    identity: &SignedIdentity,
    image: &DockerRef,
    digest: &str,
    sigs: &mut dyn Signatures,
) -> Result<Judgement, PolicyError> {
    let key = match key.read().and_then(|k| sigstore::Keys::parse(&k)) {
        Ok(k) => k,
        Err(why) => {
            return Ok(Judgement::unmet(
                Failed::KeyUnreadable,
                why.to_string(),
            ));
        }
    };
    let found = sigs.sigstore()?;
    let r = found
        .iter()
        .map(|s| {
            key.verify(&s.payload, &s.signature)
                .and_then(|()| {
                    payload::check_sigstore(&s.payload, digest, image, identity)
                })
                .map_err(|(failed, why)| SigRejection {
                    failed,
                    detail: format!("{}: {why}", s.source),
                })
        })
        .collect::<Vec<_>>();
    Ok(verdict("sigstore", r))
}

/// What the signatures of `kind` found, one result each, add up to: met
/// by any one accepted; else unmet, said by the one that got furthest.
fn verdict(kind: &str, rejections: Vec<Result<(), SigRejection>>) -> Judgement {
    if rejections.is_empty() {
        return Judgement::unmet(
            Failed::NoSignature,
            format!("a {kind} signature is required, but none exists"),
        );
    }
    if rejections.iter().any(Result::is_ok) {
        return Judgement::Met;
    }
    // The signature that got furthest says most of what is wrong.
    let errs: Vec<SigRejection> =
        rejections.into_iter().filter_map(Result::err).collect();
    let failed = errs
        .iter()
        .map(|e| e.failed)
        .max()
        .unwrap_or(Failed::WrongKey);
    let detail = errs
        .iter()
        .map(|e| e.detail.clone())
        .collect::<Vec<_>>()
        .join("; ");
    Judgement::unmet(failed, detail)
}

/// What judging an image against one requirement found.
enum Judgement {
    /// The image satisfies the requirement.
    Met,
    /// It does not.
    Unmet {
        /// What failed.
        failed: Failed,
        /// The details, for the message.
        detail: String,
    },
}

impl Judgement {
    fn unmet(failed: Failed, detail: impl Into<String>) -> Judgement {
        Judgement::Unmet {
            failed,
            detail: detail.into(),
        }
    }
}

/// A trust policy: the global default and the docker transport's
/// scopes.
#[derive(Clone, Debug)]
pub struct Policy {
    /// The file it was read from.
    pub path: PathBuf,
    /// `sha256:HEX` of the file's bytes: which policy a cache record was
    /// judged by.
    pub digest: String,
    default: Vec<Requirement>,
    docker: BTreeMap<String, Vec<Requirement>>,
}

impl Policy {
    /// Reads and checks `path`: strictly, as containers/image does
    /// (unknown fields or requirement types refuse the whole file).
    pub fn read(path: &Path) -> Result<Policy, PolicyError> {
        let bytes = foreign::read(path, Follow::Yes, Kind::Policy)?;
        Policy::parse(path, &bytes)
    }

    /// Parses policy `bytes`, read from `path`.
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Policy, PolicyError> {
        let bad = |why: String| PolicyError::BadPolicy {
            path: path.to_path_buf(),
            why,
        };
        let raw: RawPolicy = serde_json::from_slice(bytes).map_err(|e| {
            bad(format!("not a containers-policy.json(5) policy: {e}"))
        })?;
        if raw.default.is_empty() {
            return Err(bad("\"default\" has no requirements".into()));
        }
        let mut docker = BTreeMap::new();
        for (transport, scopes) in raw.transports {
            if !TRANSPORTS.contains(&transport.as_str()) {
                return Err(bad(format!("unknown transport {transport:?}")));
            }
            for (scope, reqs) in scopes {
                if reqs.is_empty() {
                    return Err(bad(format!(
                        "{transport} scope {scope:?} has no requirements"
                    )));
                }
                if transport == "docker" {
                    validate_docker_scope(&scope).map_err(|why| {
                        bad(format!("docker scope {scope:?}: {why}"))
                    })?;
                    docker.insert(scope, reqs);
                }
            }
        }
        let mut h = zinstall_oci::Hasher::new(zinstall_oci::Algorithm::Sha256);
        h.update(bytes);
        Ok(Policy {
            path: path.to_path_buf(),
            digest: h.finish().to_string(),
            default: raw.default,
            docker,
        })
    }

    /// The scope that applies to `image` and its requirements: the most
    /// specific docker scope (the reference itself, its repository, each
    /// namespace up to the host, then `*.DOMAIN` wildcards), the
    /// transport's `""`, else the global default.
    pub fn requirements_for(
        &self,
        image: &DockerRef,
    ) -> (String, &[Requirement]) {
        for scope in scopes_of(image) {
            if let Some(r) = self.docker.get(&scope) {
                return (scope, r);
            }
        }
        if let Some(r) = self.docker.get("") {
            return ("docker:\"\"".to_string(), r);
        }
        ("default".to_string(), &self.default)
    }

    /// Whether the policy can decide about `image` without signatures.
    pub fn needs_signatures(&self, image: &DockerRef) -> bool {
        self.requirements_for(image)
            .1
            .iter()
            .any(Requirement::needs_signatures)
    }

    /// Judges `image` (whose manifest hashes to `digest`): every
    /// requirement of its scope must be satisfied; the first that is not
    /// decides the refusal.
    pub fn evaluate(
        &self,
        image: &DockerRef,
        digest: &str,
        sigs: &mut dyn Signatures,
    ) -> Result<Verdict, PolicyError> {
        let (scope, reqs) = self.requirements_for(image);
        let mut refusal = None;
        for req in reqs {
            if let Judgement::Unmet { failed, detail } =
                req.judge(image, digest, sigs)?
            {
                refusal = Some((req.describe(), failed, detail));
                break;
            }
        }
        Ok(Verdict {
            policy: self.path.clone(),
            scope,
            requirements: reqs.iter().map(Requirement::describe).collect(),
            refusal,
        })
    }
}

/// Scopes looked up for `image`, most specific first, as
/// containers/image's docker transport lists them.
pub fn scopes_of(image: &DockerRef) -> Vec<String> {
    let mut out = Vec::new();
    // An image named by tag and digest (a reference containers/image's
    // docker transport refuses) is scoped by its digest, which decides
    // what is pulled.
    if image.digest.is_some() || image.tag.is_some() {
        let mut exact = image.clone();
        if exact.digest.is_some() {
            exact.tag = None;
        }
        out.push(exact.to_string());
    }
    let mut name = image.name.as_str();
    loop {
        out.push(name.to_string());
        match name.rfind('/') {
            Some(i) => name = &name[..i],
            None => break,
        }
    }
    let mut host = name.split(':').next().unwrap_or(name);
    while let Some(i) = host.find('.') {
        host = &host[i + 1..];
        out.push(format!("*.{host}"));
    }
    out
}

fn validate_docker_scope(scope: &str) -> Result<(), Invalid> {
    if scope.is_empty() {
        return Ok(());
    }
    if let Some(domain) = scope.strip_prefix("*.") {
        if domain.is_empty() || domain.contains(['*', '/', ':']) {
            return Err(Invalid::Wildcard);
        }
        return Ok(());
    }
    if scope.contains('*') {
        return Err(Invalid::Wildcard);
    }
    if !scope.contains('/') {
        // A host[:port].
        return if scope
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b))
        {
            Ok(())
        } else {
            Err(Invalid::Host)
        };
    }
    let r = DockerRef::parse(scope)?;
    if r.to_string() != scope {
        return Err(Invalid::NotExpanded(r.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_specific_scope_wins() {
        let p = Policy::parse(
            Path::new("p.json"),
            br#"{"default":[{"type":"reject"}],"transports":{"docker":{
                "reg.example.com:5000/ns":[{"type":"insecureAcceptAnything"}],
                "reg.example.com:5000/ns/app:1":[{"type":"reject"}],
                "*.example.com":[{"type":"insecureAcceptAnything"}]}}}"#,
        )
        .unwrap();
        let scope =
            |s: &str| p.requirements_for(&DockerRef::parse(s).unwrap()).0;
        assert_eq!(
            scope("reg.example.com:5000/ns/app:1"),
            "reg.example.com:5000/ns/app:1"
        );
        assert_eq!(
            scope("reg.example.com:5000/ns/app:2"),
            "reg.example.com:5000/ns"
        );
        assert_eq!(scope("reg.example.com:5000/other:2"), "*.example.com");
        assert_eq!(scope("quay.io/x:1"), "default");
    }

    #[test]
    fn unknown_requirements_refuse_the_file() {
        let e = Policy::parse(
            Path::new("/etc/p.json"),
            br#"{"default":[{"type":"acceptIfSunny"}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("/etc/p.json: ") && e.contains("acceptIfSunny"),
            "{e}"
        );
        let e = Policy::parse(
            Path::new("/etc/p.json"),
            br#"{"default":[{"type":"signedBy","keyType":"GPGKeys"}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("exactly one of keyPath"), "{e}");
    }
}
