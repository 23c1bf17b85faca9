//! containers-registries.d(5): where an image's signatures are looked
//! for. The `*.yaml` files of a directory, merged; the most specific
//! `docker` scope wins over `default-docker`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::identity::DockerRef;
use super::rules::scopes_of;
use super::verdict::PolicyError;

/// Where signatures are when no section applies: root's built-in
/// store (containers-registries.d(5), "Built-in Defaults").
pub const DEFAULT_LOOKASIDE: &str = "file:///var/lib/containers/sigstore";

/// One configuration section.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Section {
    /// Where signatures are read.
    pub lookaside: Option<String>,
    /// Where signatures are written (not read by zinstall).
    #[serde(rename = "lookaside-staging")]
    pub lookaside_staging: Option<String>,
    /// The older name of `lookaside`.
    pub sigstore: Option<String>,
    /// The older name of `lookaside-staging`.
    #[serde(rename = "sigstore-staging")]
    pub sigstore_staging: Option<String>,
    /// Whether sigstore attachments are read from the registry.
    #[serde(rename = "use-sigstore-attachments")]
    pub use_sigstore_attachments: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(rename = "default-docker")]
    default_docker: Option<Section>,
    docker: Option<BTreeMap<String, Section>>,
}

/// The merged configuration of a registries.d directory.
#[derive(Clone, Debug, Default)]
pub struct RegistriesD {
    /// The directory.
    pub dir: PathBuf,
    default_docker: Option<Section>,
    docker: BTreeMap<String, Section>,
}

impl RegistriesD {
    /// Reads `dir`'s `*.yaml` files; a directory that does not exist is
    /// an empty configuration (as containers/image takes it). A scope
    /// configured twice refuses the configuration, naming both files.
    pub fn read(dir: &Path) -> Result<RegistriesD, PolicyError> {
        let mut out = RegistriesD {
            dir: dir.to_path_buf(),
            ..RegistriesD::default()
        };
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(out);
            }
            Err(e) => {
                return Err(PolicyError::BadRegistriesD {
                    path: dir.to_path_buf(),
                    why: format!("read: {e}"),
                });
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
        for path in files {
            let text = zinstall_core::foreign::read_to_string(
                &path,
                zinstall_core::foreign::Follow::Yes,
                zinstall_core::foreign::Kind::Config,
            )?;
            out.add(&path, &text, &mut seen)?;
        }
        Ok(out)
    }

    /// The configuration of one registries.d file's `text`, read from
    /// `path` (named in errors).
    pub fn parse(path: &Path, text: &str) -> Result<RegistriesD, PolicyError> {
        let mut out = RegistriesD {
            dir: path.parent().unwrap_or(Path::new("")).to_path_buf(),
            ..RegistriesD::default()
        };
        out.add(path, text, &mut BTreeMap::new())?;
        Ok(out)
    }

    /// Merges the file `path`, its `text`, into what earlier files said;
    /// `seen` says which file configured each scope.
    fn add(
        &mut self,
        path: &Path,
        text: &str,
        seen: &mut BTreeMap<String, PathBuf>,
    ) -> Result<(), PolicyError> {
        let bad = |why: String| PolicyError::BadRegistriesD {
            path: path.to_path_buf(),
            why,
        };
        if text.trim().is_empty() {
            return Ok(());
        }
        let f: File = serde_yaml_ng::from_str(text).map_err(|e| {
            bad(format!("not a containers-registries.d(5) file: {e}"))
        })?;
        let mut claim = |scope: &str| match seen
            .insert(scope.to_string(), path.to_path_buf())
        {
            Some(first) => Err(bad(format!(
                "{scope} is configured in {} too",
                first.display()
            ))),
            None => Ok(()),
        };
        if let Some(d) = f.default_docker {
            claim("default-docker")?;
            self.default_docker = Some(d);
        }
        for (scope, section) in f.docker.unwrap_or_default() {
            claim(&scope)?;
            self.docker.insert(scope, section);
        }
        Ok(())
    }

    /// The sections that name `image`, most specific first (the
    /// reference, its repository, each namespace, `*.DOMAIN`), then
    /// `default-docker`: each setting is taken from the first that has
    /// it, as containers/image takes it.
    fn sections<'a>(
        &'a self,
        image: &DockerRef,
    ) -> impl Iterator<Item = &'a Section> + 'a {
        scopes_of(image)
            .into_iter()
            .filter_map(|s| self.docker.get(&s))
            .chain(self.default_docker.as_ref())
    }

    /// Where `image`'s simple-signing signatures are read: the first
    /// `lookaside` (or its older name `sigstore`) configured for it, else
    /// root's built-in store.
    pub fn lookaside(&self, image: &DockerRef) -> String {
        self.sections(image)
            .find_map(|s| s.lookaside.clone().or_else(|| s.sigstore.clone()))
            // zinstall runs as root: root's built-in store.
            .unwrap_or_else(|| DEFAULT_LOOKASIDE.to_string())
    }

    /// Whether sigstore attachments are read for `image`.
    pub fn use_sigstore_attachments(&self, image: &DockerRef) -> bool {
        self.sections(image)
            .find_map(|s| s.use_sigstore_attachments)
            .unwrap_or(false)
    }
}

/// The URL of signature `n` (from 1) of manifest `digest` of `image`
/// under the lookaside `base`: `BASE/PATH@ALGO=HEX/signature-N`.
pub fn signature_url(
    base: &str,
    image: &DockerRef,
    digest: &str,
    n: usize,
) -> String {
    let path = image.name.split_once('/').map_or("", |(_, p)| p);
    let (algo, hex) = digest.split_once(':').unwrap_or(("sha256", digest));
    format!(
        "{}/{path}@{algo}={hex}/signature-{n}",
        base.trim_end_matches('/')
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_setting_comes_from_the_most_specific_section_having_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("a.yaml"),
            "docker:\n  reg.example.com:\n    lookaside: file:///sigs\n  \
             reg.example.com/ns/app:\n    use-sigstore-attachments: true\n  \
             '*.example.com':\n    sigstore: https://other/sigs\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("b.yaml"),
            "default-docker:\n  lookaside: file:///default\n",
        )
        .unwrap();
        let d = RegistriesD::read(dir.path()).unwrap();
        let r = |s: &str| DockerRef::parse(s).unwrap();
        assert_eq!(d.lookaside(&r("reg.example.com/ns/app:1")), "file:///sigs");
        assert!(d.use_sigstore_attachments(&r("reg.example.com/ns/app:1")));
        assert!(!d.use_sigstore_attachments(&r("reg.example.com/ns/other:1")));
        assert_eq!(d.lookaside(&r("x.example.com/a:1")), "https://other/sigs");
        assert_eq!(d.lookaside(&r("quay.io/a:1")), "file:///default");
        assert_eq!(
            signature_url(
                "file:///sigs/",
                &r("reg.example.com/ns/app:1"),
                "sha256:ab",
                2
            ),
            "file:///sigs/ns/app@sha256=ab/signature-2"
        );
        std::fs::write(
            dir.path().join("c.yaml"),
            "docker:\n  reg.example.com:\n    lookaside: file:///again\n",
        )
        .unwrap();
        let e = RegistriesD::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("c.yaml") && e.contains("a.yaml"), "{e}");
    }
}
