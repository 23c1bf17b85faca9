//! Short names (`debian:12`) resolved as podman, skopeo and buildah
//! resolve them, by containers-registries.conf(5): an alias from the
//! `[aliases]` tables first, else the one registry of
//! `unqualified-search-registries`. Read from
//! `/etc/containers/registries.conf` (or `$CONTAINERS_REGISTRIES_CONF`)
//! and then each `*.conf` of the directory beside it with `.d` added, in
//! name order, a later file's alias winning.
//!
//! Several search registries are not tried in turn: which one answered
//! would decide what is installed, which is the spoofing short-name
//! enforcement exists against, and there is no terminal to ask. The
//! choices are named instead.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use zinstall_core::foreign::{self, Follow, Kind};

use crate::error::{RegistryError as Error, Result};
use crate::reference::Reference;

/// The system's registries.conf.
pub const REGISTRIES_CONF: &str = "/etc/containers/registries.conf";

/// A registries.conf larger than this is not one.
const CONF: Kind = Kind::Other {
    what: "a registries.conf",
    cap: 1 << 20,
};

/// What the registries.conf files say about short names.
#[derive(Clone, Debug, Default)]
pub struct ShortNames {
    /// Short name (no tag) → fully-qualified repository, with the file
    /// that said so.
    aliases: BTreeMap<String, (String, PathBuf)>,
    /// `unqualified-search-registries`, with the file that set it.
    search: Option<(Vec<String>, PathBuf)>,
    /// Files read, for messages.
    read: Vec<PathBuf>,
}

#[derive(Deserialize)]
struct Conf {
    #[serde(rename = "unqualified-search-registries")]
    search: Option<Vec<String>>,
    #[serde(default)]
    aliases: BTreeMap<String, String>,
}

impl ShortNames {
    /// The system's: `$CONTAINERS_REGISTRIES_CONF` or
    /// [`REGISTRIES_CONF`], and its `.d` directory. Files that do not
    /// exist are skipped; one that cannot be read or parsed is an error
    /// naming it.
    pub fn system() -> Result<ShortNames> {
        let conf = std::env::var_os("CONTAINERS_REGISTRIES_CONF")
            .map_or_else(|| PathBuf::from(REGISTRIES_CONF), PathBuf::from);
        Self::load(&conf)
    }

    /// `conf`, then the `*.conf` files of `conf` + `.d` in name order.
    pub fn load(conf: &Path) -> Result<ShortNames> {
        let mut s = ShortNames::default();
        s.read_file(conf)?;
        let mut dir = conf.as_os_str().to_owned();
        dir.push(".d");
        let dir = PathBuf::from(dir);
        let mut drop_ins: Vec<PathBuf> = match fs::read_dir(&dir) {
            Ok(d) => d
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "conf"))
                .collect(),
            Err(_) => Vec::new(),
        };
        drop_ins.sort();
        for f in drop_ins {
            s.read_file(&f)?;
        }
        Ok(s)
    }

    fn read_file(&mut self, path: &Path) -> Result<()> {
        // The administrator's file, maybe a link to the real one: what it
        // leads to must be a regular file within the cap.
        let text = match foreign::read_optional(path, Follow::Yes, CONF) {
            Ok(Some(t)) => t,
            Ok(None) => return Ok(()),
            Err(e) => return Err(Error::io("read", path, e.into())),
        };
        self.add(path, &text)
    }

    /// The configuration of one registries.conf's `text`, read from
    /// `path` (named in errors and in how a name was resolved).
    pub fn parse(path: &Path, text: &str) -> Result<ShortNames> {
        let mut s = ShortNames::default();
        s.add(path, text)?;
        Ok(s)
    }

    /// Adds what the file `path` says, its `text`, over what earlier
    /// files said.
    fn add(&mut self, path: &Path, text: &str) -> Result<()> {
        let conf: Conf = toml::from_str(text).map_err(|e| {
            Error::io(
                "parse",
                path,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    e.message().to_string(),
                ),
            )
        })?;
        for (name, target) in conf.aliases {
            self.aliases.insert(name, (target, path.to_path_buf()));
        }
        if let Some(search) = conf.search {
            self.search = Some((search, path.to_path_buf()));
        }
        self.read.push(path.to_path_buf());
        Ok(())
    }

    /// `text` (`NAME[:TAG][@DIGEST]`, no registry) as a full reference,
    /// and how it was found.
    pub fn resolve(&self, text: &str) -> Result<(Reference, String)> {
        let (name, rest) = split_name(text);
        if let Some((target, file)) = self.aliases.get(name) {
            let r = Reference::parse(&format!("{target}{rest}"))?;
            return Ok((
                r,
                format!("the alias {name:?} in {}", file.display()),
            ));
        }
        let files = || {
            if self.read.is_empty() {
                format!("{} (not there)", REGISTRIES_CONF)
            } else {
                self.read
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        let full = |registry: &str| {
            let repo = if registry == "docker.io" && !name.contains('/') {
                format!("library/{name}")
            } else {
                name.to_string()
            };
            format!("{registry}/{repo}{rest}")
        };
        match &self.search {
            Some((regs, file)) if regs.len() == 1 => {
                let r = Reference::parse(&full(&regs[0]))?;
                Ok((
                    r,
                    format!(
                        "the one unqualified-search registry in {}",
                        file.display()
                    ),
                ))
            }
            Some((regs, file)) if regs.len() > 1 => Err(Error::BadReference {
                text: text.to_string(),
                why: format!(
                    "no such file, and as a short name it is ambiguous: \
                     {} lists {} unqualified-search registries and no alias \
                     names it; write the one meant: {}",
                    file.display(),
                    regs.len(),
                    regs.iter()
                        .map(|r| full(r))
                        .collect::<Vec<_>>()
                        .join(" or ")
                ),
            }),
            _ => Err(Error::BadReference {
                text: text.to_string(),
                why: format!(
                    "no such file, and as a short name no alias or \
                     unqualified-search registry resolves it (read: {}); \
                     write the full reference, e.g. {} or docker://{text}",
                    files(),
                    full("docker.io")
                ),
            }),
        }
    }
}

/// `debian:12@sha256:…` → (`debian`, `:12@sha256:…`).
fn split_name(text: &str) -> (&str, &str) {
    let end = text.find('@').unwrap_or(text.len());
    let slash = text[..end].rfind('/').map_or(0, |i| i + 1);
    let colon = text[slash..end].find(':').map(|i| slash + i);
    let cut = colon.unwrap_or(end);
    (&text[..cut], &text[cut..])
}

/// Whether `s` reads as a short name: lowercase repository components,
/// and a tag or a digest (a bare word stays a file name: `rootfs` missing
/// is a missing file, not a pull).
pub fn looks_short(s: &str) -> bool {
    let (name, rest) = split_name(s);
    !name.is_empty()
        && !rest.is_empty()
        && !s.starts_with('.')
        && !s.starts_with('/')
        && name.split('/').all(|c| {
            !c.is_empty()
                && c.bytes().all(|b| {
                    b.is_ascii_lowercase()
                        || b.is_ascii_digit()
                        || matches!(b, b'.' | b'_' | b'-')
                })
                && !c.starts_with(['.', '_', '-'])
        })
        && !name.split('/').next().is_some_and(|h| h.contains('.'))
}

#[cfg(test)]
mod test {
    use super::*;

    fn conf(dir: &Path, main: &str, drop_ins: &[(&str, &str)]) -> PathBuf {
        let p = dir.join("registries.conf");
        fs::write(&p, main).unwrap();
        fs::create_dir_all(dir.join("registries.conf.d")).unwrap();
        for (n, t) in drop_ins {
            fs::write(dir.join("registries.conf.d").join(n), t).unwrap();
        }
        p
    }

    #[test]
    fn aliases_first_then_the_one_search_registry() {
        let d = tempfile::tempdir().unwrap();
        let p = conf(
            d.path(),
            "unqualified-search-registries = [\"docker.io\"]\n\
             [aliases]\n\"fedora\" = \"registry.fedoraproject.org/fedora\"\n",
            &[(
                "10-mine.conf",
                "[aliases]\n\"fedora\" = \"quay.io/mine/fedora\"\n",
            )],
        );
        let s = ShortNames::load(&p).unwrap();
        let (r, how) = s.resolve("fedora:40").unwrap();
        assert_eq!(r.to_string(), "quay.io/mine/fedora:40");
        assert!(how.contains("10-mine.conf"), "{how}");
        let (r, how) = s.resolve("debian:12").unwrap();
        assert_eq!(r.to_string(), "docker.io/library/debian:12");
        assert!(how.contains("one unqualified-search registry"), "{how}");
        let (r, _) = s.resolve("myorg/app:1").unwrap();
        assert_eq!(r.to_string(), "docker.io/myorg/app:1");
    }

    #[test]
    fn several_search_registries_or_none_name_the_choices() {
        let d = tempfile::tempdir().unwrap();
        let p = conf(
            d.path(),
            "unqualified-search-registries = [\"quay.io\", \"docker.io\"]\n",
            &[],
        );
        let e = ShortNames::load(&p)
            .unwrap()
            .resolve("debian:12")
            .unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("quay.io/debian:12 or docker.io/library/debian:12"),
            "{m}"
        );
        let e = ShortNames::load(&d.path().join("none.conf"))
            .unwrap()
            .resolve("debian:12")
            .unwrap_err();
        let m = e.to_string();
        assert!(m.contains("docker.io/library/debian:12"), "{m}");
        assert!(m.contains("docker://debian:12"), "{m}");
    }

    #[test]
    fn what_reads_as_a_short_name() {
        for s in ["debian:12", "library/debian:12", "alpine@sha256:abc"] {
            assert!(looks_short(s), "{s}");
        }
        for s in [
            "debian",
            "rootfs.tar",
            "./x:1",
            "/x:1",
            "Debian:12",
            "a//b:1",
        ] {
            assert!(!looks_short(s), "{s}");
        }
    }
}
