//! `REGISTRY/REPO[:TAG][@DIGEST]`, as docker and skopeo write it.

use std::fmt;

use zinstall_oci::Digest;

use crate::error::{RegistryError as Error, Result};

/// An image in a registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// The registry as named: `HOST[:PORT]` (`docker.io` for Docker Hub).
    pub registry: String,
    /// The repository: `PATH/NAME`.
    pub repository: String,
    /// The tag, if one was given.
    pub tag: Option<String>,
    /// The manifest's digest, if one was given; it then decides, the tag
    /// is only a name.
    pub digest: Option<Digest>,
    /// The short name this was resolved from (`debian:12`), and how
    /// (crate::shortnames); `None` when given in full.
    pub short_name: Option<(String, String)>,
}

/// Repository paths, tags and hosts are short; anything longer is not a
/// reference (docker's limit for the whole name is 255).
const MAX_LEN: usize = 512;

impl Reference {
    /// Whether `s` is meant as a registry reference rather than a path:
    /// it starts `docker://`, or its first component names a host (has a
    /// `.` or a `:`, or is `localhost`) and the rest parses. A bare name
    /// (`debian:12`) is not taken for Docker Hub: it would too easily be a
    /// mistyped file name.
    pub fn looks_like(s: &str) -> bool {
        if s.starts_with("docker://") {
            return true;
        }
        match s.split_once('/') {
            Some((host, rest)) => {
                !rest.is_empty()
                    && !host.starts_with('.')
                    && (host.contains('.')
                        || host.contains(':')
                        || host == "localhost")
                    && Reference::parse(s).is_ok()
            }
            None => false,
        }
    }

    /// Parses `[docker://]REGISTRY/REPO[:TAG][@DIGEST]`; with `docker://`
    /// the registry may be left out (Docker Hub, `library/` for a
    /// one-component name).
    pub fn parse(text: &str) -> Result<Reference> {
        let bad = |why: &str| Error::BadReference {
            text: text.to_string(),
            why: why.to_string(),
        };
        if text.len() > MAX_LEN {
            return Err(bad("longer than any reference"));
        }
        let (s, hub_default) = match text.strip_prefix("docker://") {
            Some(rest) => (rest, true),
            None => (text, false),
        };
        let (name, digest) = match s.split_once('@') {
            Some((n, d)) => {
                (n, Some(Digest::parse(d).map_err(|w| bad(&w.to_string()))?))
            }
            None => (s, None),
        };
        // A tag is after the last ':' that follows the last '/'.
        let slash = name.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match name[slash..].rfind(':') {
            Some(i) => (&name[..slash + i], Some(&name[slash + i + 1..])),
            None => (name, None),
        };
        if let Some(t) = tag
            && !valid_tag(t)
        {
            return Err(bad(&format!(
                "tag {t:?}: letters, digits, '_', '.', '-', at most 128"
            )));
        }
        let (registry, repository) = match name.split_once('/') {
            Some((h, rest))
                if h.contains('.') || h.contains(':') || h == "localhost" =>
            {
                (h.to_string(), rest.to_string())
            }
            _ if hub_default => {
                let repo = if name.contains('/') {
                    name.to_string()
                } else {
                    format!("library/{name}")
                };
                ("docker.io".to_string(), repo)
            }
            _ => return Err(bad("no registry (REGISTRY/REPO)")),
        };
        if !valid_host(&registry) {
            return Err(bad(&format!(
                "registry {registry:?} is not HOST[:PORT]"
            )));
        }
        if !repository.split('/').all(valid_component) {
            return Err(bad(&format!(
                "repository {repository:?}: lowercase letters and digits, \
                 separated by '.', '_', '__', '-' or '/'"
            )));
        }
        if tag.is_none() && digest.is_none() {
            return Err(bad(
                "no tag or digest (REGISTRY/REPO:TAG or REGISTRY/REPO@sha256:...)",
            ));
        }
        Ok(Reference {
            registry,
            repository,
            tag: tag.map(str::to_string),
            digest,
            short_name: None,
        })
    }

    /// What to ask the registry's manifest endpoint for: the digest if
    /// there is one, else the tag.
    pub fn manifest_ref(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.clone(),
            (None, None) => unreachable!("parse requires a tag or digest"),
        }
    }

    /// The same image by digest: `REGISTRY/REPO@DIGEST`.
    pub fn with_digest(&self, digest: &Digest) -> Reference {
        Reference {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            tag: None,
            digest: Some(digest.clone()),
            short_name: self.short_name.clone(),
        }
    }

    /// The host the API is served from (Docker Hub's differs from its
    /// name).
    pub fn api_host(&self) -> &str {
        if self.registry == "docker.io" {
            "registry-1.docker.io"
        } else {
            &self.registry
        }
    }

    /// Whether the registry is on this host's loopback, where plain HTTP
    /// is taken (as docker does), since nothing crosses a network.
    pub fn is_loopback(&self) -> bool {
        let host = match self.registry.rsplit_once(':') {
            Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => &self.registry,
        };
        host == "localhost"
            || host == "[::1]"
            || host
                .parse::<std::net::Ipv4Addr>()
                .is_ok_and(|a| a.is_loopback())
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

fn valid_tag(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-')
        })
}

/// `[a-z0-9]+` runs joined by `.`, `_`, `__` or dashes, as the
/// distribution spec has it.
fn valid_component(c: &str) -> bool {
    let b = c.as_bytes();
    if b.is_empty()
        || !b[0].is_ascii_alphanumeric()
        || !b[b.len() - 1].is_ascii_alphanumeric()
    {
        return false;
    }
    let mut sep = 0usize;
    for &ch in b {
        if ch.is_ascii_lowercase() || ch.is_ascii_digit() {
            sep = 0;
        } else if matches!(ch, b'.' | b'_' | b'-') {
            sep += 1;
            // "__" is allowed, "..", "._" are not; dashes may repeat.
            if sep > 1 && ch != b'-' && !(ch == b'_' && sep == 2) {
                return false;
            }
        } else {
            return false;
        }
    }
    true
}

fn valid_host(h: &str) -> bool {
    let (host, port) = match h.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || h.starts_with('[') => {
            (host, Some(port))
        }
        _ => (h, None),
    };
    if let Some(p) = port
        && p.parse::<u16>().is_err()
    {
        return false;
    }
    if host.starts_with('[') && host.ends_with(']') {
        return host[1..host.len() - 1]
            .parse::<std::net::Ipv6Addr>()
            .is_ok();
    }
    !host.is_empty()
        && host.split('.').all(|l| {
            !l.is_empty()
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn references_parse_as_docker_writes_them() {
        let r = Reference::parse("127.0.0.1:5000/test/deb:12").unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "test/deb");
        assert_eq!(r.tag.as_deref(), Some("12"));
        assert!(r.is_loopback());
        let r = Reference::parse(&format!("ghcr.io/a/b@{D}")).unwrap();
        assert_eq!(r.manifest_ref(), D);
        assert!(!r.is_loopback());
        let r = Reference::parse("docker://debian:12").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str()),
            ("docker.io", "library/debian")
        );
        assert_eq!(r.api_host(), "registry-1.docker.io");
        let r = Reference::parse(&format!("localhost/x:t@{D}")).unwrap();
        assert_eq!(r.to_string(), format!("localhost/x:t@{D}"));
    }

    #[test]
    fn what_is_not_a_reference_is_refused_or_not_taken_for_one() {
        for bad in [
            "127.0.0.1:5000/deb",              // neither tag nor digest
            "127.0.0.1:5000/Deb:1",            // uppercase repository
            "127.0.0.1:5000/a/../b:1",         // path games
            "127.0.0.1:99999/a:1",             // port
            "127.0.0.1:5000/a@sha256:../../x", // digest
            "127.0.0.1:5000/a:-x",             // tag
            "debian:12",                       // no registry
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad}");
        }
        for path in
            ["images/deb.tar", "./a.b/c:1", "deb.tar", "/var/tmp/img:ref"]
        {
            assert!(!Reference::looks_like(path), "{path}");
        }
        assert!(Reference::looks_like("registry.example/a/b:1"));
        assert!(Reference::looks_like("docker://alpine:3"));
    }
}
