//! Credentials for a registry, from the files podman, skopeo and docker
//! keep them in (containers-auth.json(5)): `$REGISTRY_AUTH_FILE`, else
//! `$XDG_RUNTIME_DIR/containers/auth.json`, else
//! `$HOME/.docker/config.json`. Only the first file that exists is read,
//! as those tools do. Credential helpers are not run.

use std::io::Read;
use std::path::{Path, PathBuf};

use base64::Engine;

use crate::error::{RegistryError as Error, Result};

/// An auth file is a few KiB.
const MAX_AUTH_FILE: u64 = 1 << 20;

/// A user and password for one registry.
#[derive(Clone)]
pub struct Credentials {
    pub(crate) user: String,
    pub(crate) password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        write!(f, "Credentials({})", self.user)
    }
}

/// The auth files looked at, in order.
pub fn auth_files() -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(p) = std::env::var_os("REGISTRY_AUTH_FILE") {
        v.push(PathBuf::from(p));
    }
    if let Some(p) = std::env::var_os("XDG_RUNTIME_DIR") {
        v.push(Path::new(&p).join("containers/auth.json"));
    }
    if let Some(p) = std::env::var_os("HOME") {
        v.push(Path::new(&p).join(".docker/config.json"));
    }
    v
}

/// The credentials for `registry` in the first auth file of `files` that
/// exists; `None` if it has none for it. A file that exists but cannot be
/// read or parsed is an error naming it.
pub fn find(registry: &str, files: &[PathBuf]) -> Result<Option<Credentials>> {
    let Some(file) = files.iter().find(|p| p.is_file()) else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    std::fs::File::open(file)
        .and_then(|f| f.take(MAX_AUTH_FILE + 1).read_to_end(&mut bytes))
        .map_err(|e| Error::io("read", file, e))?;
    let bad = |why: String| Error::Auth {
        registry: registry.to_string(),
        why: format!("{}: {why}", file.display()),
    };
    if bytes.len() as u64 > MAX_AUTH_FILE {
        return Err(bad("larger than an auth file".into()));
    }
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    let Some(auths) = v.get("auths").and_then(|a| a.as_object()) else {
        return Ok(None);
    };
    // Keys may be a bare host or a URL (docker's old form).
    let entry = auths.iter().find(|(k, _)| {
        let k = k
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        let k = k.split('/').next().unwrap_or(k);
        k == registry || (registry == "docker.io" && k == "index.docker.io")
    });
    let Some((_, e)) = entry else { return Ok(None) };
    let Some(encoded) = e.get("auth").and_then(|a| a.as_str()) else {
        return Ok(None);
    };
    let raw = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| bad(format!("auth for {registry}: {e}")))?;
    let raw = String::from_utf8(raw)
        .map_err(|_| bad(format!("auth for {registry}: not UTF-8")))?;
    let Some((user, password)) = raw.split_once(':') else {
        return Err(bad(format!("auth for {registry}: not USER:PASSWORD")));
    };
    Ok(Some(Credentials {
        user: user.to_string(),
        password: password.to_string(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_existing_file_gives_the_registry_its_login() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("auth.json");
        // "u:p w" and "x:y"
        std::fs::write(
            &f,
            r#"{"auths":{"reg.example:5000":{"auth":"dTpwIHc="},"https://index.docker.io/v1/":{"auth":"eDp5"}}}"#,
        )
        .unwrap();
        let files = vec![d.path().join("absent.json"), f.clone()];
        let c = find("reg.example:5000", &files).unwrap().unwrap();
        assert_eq!((c.user.as_str(), c.password.as_str()), ("u", "p w"));
        assert_eq!(find("docker.io", &files).unwrap().unwrap().user, "x");
        assert!(find("other.example", &files).unwrap().is_none());
        std::fs::write(&f, "{").unwrap();
        let e = find("reg.example:5000", &files).unwrap_err().to_string();
        assert!(e.contains("auth.json"), "{e}");
    }
}
