//! `signedIdentity`: which docker reference a signature may claim for an
//! image, compared as containers/image compares them (fully expanded
//! names: `busybox` is `docker.io/library/busybox`).

use serde::Deserialize;

use super::invalid::Invalid;

/// A docker reference: `NAME[:TAG][@DIGEST]`, its name fully expanded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DockerRef {
    /// `HOST[:PORT]/PATH`.
    pub name: String,
    /// The tag, if any.
    pub tag: Option<String>,
    /// The digest (`ALGO:HEX`), if any.
    pub digest: Option<String>,
}

impl DockerRef {
    /// Parses `text` as docker's `ParseNormalizedNamed` does: a first
    /// component with no `.` or `:` that is not `localhost` is a Docker
    /// Hub path.
    pub fn parse(text: &str) -> Result<DockerRef, Invalid> {
        if text.is_empty() || text.len() > 512 {
            return Err(Invalid::NotReference(text.into()));
        }
        let (rest, digest) = match text.split_once('@') {
            Some((n, d)) => {
                let ok = d.split_once(':').is_some_and(|(a, h)| {
                    !a.is_empty()
                        && !h.is_empty()
                        && h.bytes().all(|b| b.is_ascii_hexdigit())
                });
                if !ok {
                    return Err(Invalid::Digest {
                        text: text.into(),
                        digest: d.into(),
                    });
                }
                (n, Some(d.to_string()))
            }
            None => (text, None),
        };
        let slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[slash..].rfind(':') {
            Some(i) => {
                (&rest[..slash + i], Some(rest[slash + i + 1..].to_string()))
            }
            None => (rest, None),
        };
        if tag.as_deref().is_some_and(|t| {
            t.is_empty()
                || t.len() > 128
                || !t
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        }) {
            return Err(Invalid::Tag(text.into()));
        }
        let name = match name.split_once('/') {
            Some((h, _))
                if h.contains('.') || h.contains(':') || h == "localhost" =>
            {
                name.to_string()
            }
            Some(_) => format!("docker.io/{name}"),
            None => format!("docker.io/library/{name}"),
        };
        let path = name.split_once('/').map_or("", |(_, p)| p);
        if path.is_empty()
            || !path.split('/').all(|c| {
                !c.is_empty()
                    && c.bytes().all(|b| {
                        b.is_ascii_lowercase()
                            || b.is_ascii_digit()
                            || b"._-".contains(&b)
                    })
            })
        {
            return Err(Invalid::Repository(text.into()));
        }
        Ok(DockerRef { name, tag, digest })
    }

    /// Tagged or with a digest (not a repository alone).
    pub fn is_name_only(&self) -> bool {
        self.tag.is_none() && self.digest.is_none()
    }
}

impl std::fmt::Display for DockerRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// What identity a signature must claim (containers-policy.json(5)).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum SignedIdentity {
    /// The claim equals the image's reference (both tagged, or both by
    /// digest).
    #[serde(rename = "matchExact")]
    MatchExact,
    /// Tagged image (with or without a digest): the claim equals it;
    /// by digest alone: a claim in the same repository. A claim naming
    /// a repository alone never matches.
    #[default]
    #[serde(rename = "matchRepoDigestOrExact")]
    MatchRepoDigestOrExact,
    /// Same repository (a claim naming the repository alone too, as
    /// containers/image takes it).
    #[serde(rename = "matchRepository")]
    MatchRepository,
    /// The claim equals this reference.
    #[serde(rename = "exactReference")]
    ExactReference {
        /// A tagged or digested reference.
        #[serde(rename = "dockerReference")]
        docker_reference: String,
    },
    /// The claim is in this repository.
    #[serde(rename = "exactRepository")]
    ExactRepository {
        /// A repository.
        #[serde(rename = "dockerRepository")]
        docker_repository: String,
    },
    /// The image's name with `prefix` replaced by `signed_prefix`, then
    /// matchRepoDigestOrExact.
    #[serde(rename = "remapIdentity")]
    RemapIdentity {
        /// What the image's name starts with.
        prefix: String,
        /// What the claim's name starts with instead.
        #[serde(rename = "signedPrefix")]
        signed_prefix: String,
    },
}

impl SignedIdentity {
    /// Refuses what containers/image refuses when reading the policy.
    pub fn validate(&self) -> Result<(), Invalid> {
        match self {
            SignedIdentity::ExactReference { docker_reference } => {
                let r = DockerRef::parse(docker_reference)?;
                if r.is_name_only() {
                    return Err(Invalid::NotExactReference(
                        docker_reference.clone(),
                    ));
                }
            }
            SignedIdentity::ExactRepository { docker_repository } => {
                let r = DockerRef::parse(docker_repository)?;
                if !r.is_name_only() {
                    return Err(Invalid::NotRepository(
                        docker_repository.clone(),
                    ));
                }
            }
            SignedIdentity::RemapIdentity {
                prefix,
                signed_prefix,
            } => {
                for p in [prefix, signed_prefix] {
                    if !valid_prefix(p) {
                        return Err(Invalid::Prefix(p.clone()));
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Its name in the policy.
    pub fn name(&self) -> &'static str {
        match self {
            SignedIdentity::MatchExact => "matchExact",
            SignedIdentity::MatchRepoDigestOrExact => "matchRepoDigestOrExact",
            SignedIdentity::MatchRepository => "matchRepository",
            SignedIdentity::ExactReference { .. } => "exactReference",
            SignedIdentity::ExactRepository { .. } => "exactRepository",
            SignedIdentity::RemapIdentity { .. } => "remapIdentity",
        }
    }

    /// Whether a signature claiming `signed` is accepted for `image`.
    pub fn matches(&self, image: &DockerRef, signed: &DockerRef) -> bool {
        match self {
            SignedIdentity::MatchExact => {
                !image.is_name_only()
                    && !signed.is_name_only()
                    && image.to_string() == signed.to_string()
            }
            SignedIdentity::MatchRepoDigestOrExact => {
                repo_digest_or_exact(image, signed)
            }
            SignedIdentity::MatchRepository => image.name == signed.name,
            SignedIdentity::ExactReference { docker_reference } => {
                DockerRef::parse(docker_reference).is_ok_and(|want| {
                    !signed.is_name_only()
                        && want.to_string() == signed.to_string()
                })
            }
            SignedIdentity::ExactRepository { docker_repository } => {
                DockerRef::parse(docker_repository)
                    .is_ok_and(|want| want.name == signed.name)
            }
            SignedIdentity::RemapIdentity {
                prefix,
                signed_prefix,
            } => {
                let mut remapped = image.clone();
                if let Some(rest) = strip_prefix(&image.name, prefix) {
                    remapped.name = format!("{signed_prefix}{rest}");
                }
                repo_digest_or_exact(&remapped, signed)
            }
        }
    }

    /// Described for a message: `matchRepository`,
    /// `exactReference=REF`.
    pub fn describe(&self) -> String {
        match self {
            SignedIdentity::ExactReference { docker_reference } => {
                format!("exactReference {docker_reference}")
            }
            SignedIdentity::ExactRepository { docker_repository } => {
                format!("exactRepository {docker_repository}")
            }
            SignedIdentity::RemapIdentity {
                prefix,
                signed_prefix,
            } => format!("remapIdentity {prefix} -> {signed_prefix}"),
            other => other.name().to_string(),
        }
    }
}

/// containers/image's matchRepoDigestOrExactReferenceValues.
fn repo_digest_or_exact(image: &DockerRef, signed: &DockerRef) -> bool {
    // A claim of a repository alone names no image: refused before
    // anything else, whatever the image.
    if signed.is_name_only() {
        return false;
    }
    if image.tag.is_some() {
        // A tagged image (a tag and a digest together too, as
        // containers/image's NamedTagged case takes it): the claim must
        // be this very reference.
        image.to_string() == signed.to_string()
    } else if image.digest.is_some() {
        // By digest: the digest was checked against the manifest before
        // the signature was looked at; any claim in the repository will do.
        image.name == signed.name
    } else {
        false
    }
}

/// `name` with `prefix` taken off at a component boundary (the whole
/// name, or up to a `/`).
fn strip_prefix<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = name.strip_prefix(prefix)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// A remapIdentity prefix: a host, or a repository namespace, no tag or
/// digest.
fn valid_prefix(p: &str) -> bool {
    if p.is_empty() || p.contains('@') {
        return false;
    }
    match p.split_once('/') {
        None => true,
        Some((_, path)) => {
            !path.is_empty()
                && DockerRef::parse(p)
                    .is_ok_and(|r| r.is_name_only() && r.name == p)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str) -> DockerRef {
        DockerRef::parse(s).unwrap()
    }

    #[test]
    fn names_expand_as_docker_does() {
        assert_eq!(r("busybox").name, "docker.io/library/busybox");
        assert_eq!(r("a/b:1").to_string(), "docker.io/a/b:1");
        assert_eq!(
            r("localhost/x@sha256:ab").digest.as_deref(),
            Some("sha256:ab")
        );
        assert_eq!(r("h:5000/x/y:t").name, "h:5000/x/y");
        assert!(DockerRef::parse("h:5000/X").is_err());
    }

    #[test]
    fn identities_match_as_the_man_page_says() {
        let tagged = r("h/ns/app:1");
        let by_digest = r("h/ns/app@sha256:aa");
        use SignedIdentity::*;
        assert!(MatchRepoDigestOrExact.matches(&tagged, &r("h/ns/app:1")));
        assert!(!MatchRepoDigestOrExact.matches(&tagged, &r("h/ns/app:2")));
        assert!(MatchRepoDigestOrExact.matches(&by_digest, &r("h/ns/app:2")));
        assert!(
            !MatchRepoDigestOrExact.matches(&by_digest, &r("h/ns/other:2"))
        );
        assert!(!MatchExact.matches(&by_digest, &r("h/ns/app:2")));
        assert!(MatchRepository.matches(&tagged, &r("h/ns/app")));
        let remap = RemapIdentity {
            prefix: "mirror:5000/v".into(),
            signed_prefix: "vendor.example.com".into(),
        };
        assert!(remap.matches(
            &r("mirror:5000/v/p/i:1"),
            &r("vendor.example.com/p/i:1")
        ));
        assert!(
            !remap.matches(
                &r("mirror:5000/vx/i:1"),
                &r("vendor.example.com/x/i:1")
            )
        );
        let exact = ExactRepository {
            docker_repository: "vendor.example.com/p".into(),
        };
        assert!(exact.matches(&tagged, &r("vendor.example.com/p:9")));
    }
}
