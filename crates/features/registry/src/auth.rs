//! Credentials for a registry, from the files podman, skopeo and docker
//! keep them in (containers-auth.json(5)): `$REGISTRY_AUTH_FILE`, else
//! `$XDG_RUNTIME_DIR/containers/auth.json`, else
//! `$HOME/.docker/config.json`. Only the first file that exists is read,
//! as those tools do.
//!
//! In that file, as docker and podman look: a credential helper named
//! for the registry (`credHelpers`), else the registry's `auths` entry
//! (`auth`, base64 of `USER:PASSWORD`, or an `identitytoken`), else the
//! default helper (`credsStore`). A helper is the program
//! `docker-credential-NAME` on `PATH`, run as `docker-credential-NAME
//! get` with the registry on its standard input; it answers
//! `{"Username": ..., "Secret": ...}` (a `Username` of `<token>` makes
//! the secret an identity token: a refresh token the registry's token
//! service exchanges for access), or says it has none.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine;
use zinstall_core::foreign::{self, Follow, Kind};

use crate::error::{RegistryError as Error, Result};

/// An auth file is a few KiB.
const AUTH_FILE: Kind = Kind::Other {
    what: "an auth file",
    cap: 1 << 20,
};

/// What a helper may print: a few KiB.
const MAX_HELPER_OUTPUT: u64 = 1 << 20;

/// A user and password for one registry, or an identity token.
#[derive(Clone)]
pub struct Credentials {
    pub(crate) user: String,
    pub(crate) password: String,
    /// A refresh token for the registry's token service (`password` is
    /// then empty).
    pub(crate) identity_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password or the token.
        match self.identity_token {
            Some(_) => write!(f, "Credentials(identity token)"),
            None => write!(f, "Credentials({})", self.user),
        }
    }
}

/// Where credential helpers are looked for: `PATH` (the default), or
/// directories given.
#[derive(Clone, Debug, Default)]
pub struct HelperPath(Option<OsString>);

impl HelperPath {
    /// These directories, `:`-separated as `PATH`.
    pub fn dirs(path: impl Into<OsString>) -> HelperPath {
        HelperPath(Some(path.into()))
    }

    fn find(&self, program: &str) -> Option<PathBuf> {
        let path = self.0.clone().or_else(|| std::env::var_os("PATH"))?;
        std::env::split_paths(&path)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
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
/// exists (or from the helper it names, found on `helpers`); `None` if
/// it has none for it. A file that exists but cannot be read or parsed,
/// or a helper that is missing or fails, is an error naming it.
pub fn find(
    registry: &str,
    files: &[PathBuf],
    helpers: &HelperPath,
) -> Result<Option<Credentials>> {
    let Some(file) = files.iter().find(|p| p.is_file()) else {
        return Ok(None);
    };
    let bytes = foreign::read(file, Follow::Yes, AUTH_FILE)
        .map_err(|e| Error::io("read", file, e.into()))?;
    let bad = |why: String| Error::Auth {
        registry: registry.to_string(),
        why: format!("{}: {why}", file.display()),
    };
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    // Keys may be a bare host or a URL (docker's old form).
    let names_registry = |k: &str| {
        let k = k
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        let k = k.split('/').next().unwrap_or(k);
        k == registry || (registry == "docker.io" && k == "index.docker.io")
    };
    let helper_for = v
        .get("credHelpers")
        .and_then(|h| h.as_object())
        .and_then(|h| h.iter().find(|(k, _)| names_registry(k)))
        .and_then(|(_, n)| n.as_str());
    if let Some(name) = helper_for {
        return run_helper(registry, name, "credHelpers", file, helpers);
    }
    let entry = v
        .get("auths")
        .and_then(|a| a.as_object())
        .and_then(|a| a.iter().find(|(k, _)| names_registry(k)))
        .map(|(_, e)| e);
    if let Some(e) = entry {
        if let Some(t) = e
            .get("identitytoken")
            .and_then(|t| t.as_str())
            .filter(|t| !t.is_empty())
        {
            return Ok(Some(Credentials {
                user: String::new(),
                password: String::new(),
                identity_token: Some(t.to_string()),
            }));
        }
        if let Some(encoded) = e
            .get("auth")
            .and_then(|a| a.as_str())
            .filter(|a| !a.is_empty())
        {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| bad(format!("auth for {registry}: {e}")))?;
            let raw = String::from_utf8(raw)
                .map_err(|_| bad(format!("auth for {registry}: not UTF-8")))?;
            let Some((user, password)) = raw.split_once(':') else {
                return Err(bad(format!(
                    "auth for {registry}: not USER:PASSWORD"
                )));
            };
            return Ok(Some(Credentials {
                user: user.to_string(),
                password: password.to_string(),
                identity_token: None,
            }));
        }
    }
    match v.get("credsStore").and_then(|n| n.as_str()) {
        Some(name) if !name.is_empty() => {
            run_helper(registry, name, "credsStore", file, helpers)
        }
        _ => Ok(None),
    }
}

/// Asks helper `name` for `registry`'s credentials.
fn run_helper(
    registry: &str,
    name: &str,
    key: &str,
    file: &Path,
    helpers: &HelperPath,
) -> Result<Option<Credentials>> {
    let fail = |why: String| Error::Auth {
        registry: registry.to_string(),
        why: format!(
            "credential helper {name:?} ({key} in {}): {why}",
            file.display()
        ),
    };
    // A name, never a path: the file picks a program among the
    // docker-credential-* ones on PATH, nothing else.
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        || name.starts_with('.')
    {
        return Err(fail("not a helper name".into()));
    }
    let program = format!("docker-credential-{name}");
    let Some(path) = helpers.find(&program) else {
        return Err(fail(format!("{program} is not on PATH")));
    };
    // Docker Hub's credentials are stored under its old index URL.
    let server = if registry == "docker.io" {
        "https://index.docker.io/v1/"
    } else {
        registry
    };
    let Some(out) = ask_helper(&path, server, &fail)? else {
        return Ok(None);
    };
    credentials_of(&out, &fail)
}

/// Runs the helper at `path` (`get`) for `server`: what it answered, or
/// `None` when it has no credentials for it.
fn ask_helper(
    path: &Path,
    server: &str,
    fail: &dyn Fn(String) -> Error,
) -> Result<Option<Vec<u8>>> {
    let mut child = Command::new(path)
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        // Its questions (a keychain passphrase) reach the user.
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| fail(format!("run {}: {e}", path.display())))?;
    let wrote = child
        .stdin
        .take()
        .map(|mut i| i.write_all(server.as_bytes()))
        .unwrap_or(Ok(()));
    let mut out = Vec::new();
    let read = child
        .stdout
        .take()
        .map(|o| o.take(MAX_HELPER_OUTPUT + 1).read_to_end(&mut out))
        .unwrap_or(Ok(0));
    let status = child
        .wait()
        .map_err(|e| fail(format!("wait for {}: {e}", path.display())))?;
    let text = String::from_utf8_lossy(&out).trim().to_string();
    if !status.success() {
        // The helpers' protocol says "not found" in these words.
        if text.contains("credentials not found") {
            return Ok(None);
        }
        return Err(fail(format!("{status}: {text}")));
    }
    if let Err(e) = wrote.and(read.map(|_| ())) {
        return Err(fail(format!("talk to {}: {e}", path.display())));
    }
    if out.len() as u64 > MAX_HELPER_OUTPUT {
        return Err(fail("answered more than a credential".into()));
    }
    Ok(Some(out))
}

/// The credentials a helper's answer `out` gives, if any: an identity
/// token when its user is `<token>`.
fn credentials_of(
    out: &[u8],
    fail: &dyn Fn(String) -> Error,
) -> Result<Option<Credentials>> {
    #[derive(serde::Deserialize)]
    struct Answer {
        #[serde(rename = "Username", default)]
        username: String,
        #[serde(rename = "Secret", default)]
        secret: String,
    }
    let a: Answer = serde_json::from_slice(out)
        .map_err(|e| fail(format!("its answer is not JSON: {e}")))?;
    if a.secret.is_empty() {
        return Ok(None);
    }
    Ok(Some(if a.username == "<token>" {
        Credentials {
            user: String::new(),
            password: String::new(),
            identity_token: Some(a.secret),
        }
    } else {
        Credentials {
            user: a.username,
            password: a.secret,
            identity_token: None,
        }
    }))
}

#[cfg(test)]
// Tests make and read their own fixtures by path.
#[allow(clippy::disallowed_methods)]
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
        let none = HelperPath::dirs(d.path().join("no-helpers"));
        let c = find("reg.example:5000", &files, &none).unwrap().unwrap();
        assert_eq!((c.user.as_str(), c.password.as_str()), ("u", "p w"));
        let hub = find("docker.io", &files, &none).unwrap().unwrap();
        assert_eq!(hub.user, "x");
        assert!(find("other.example", &files, &none).unwrap().is_none());
        std::fs::write(&f, "{").unwrap();
        let e = find("reg.example:5000", &files, &none)
            .unwrap_err()
            .to_string();
        assert!(e.contains("auth.json"), "{e}");
    }

    /// A helper script that answers as docker-credential-* helpers do,
    /// logging what it was asked.
    fn helper(dir: &Path, name: &str, body: &str) {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join(format!("docker-credential-{name}"));
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }

    #[test]
    fn helpers_are_asked_as_docker_asks_them() {
        let d = tempfile::tempdir().unwrap();
        let bin = d.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let log = d.path().join("asked");
        helper(
            &bin,
            "fleet",
            &format!(
                "[ \"$1\" = get ] || exit 3; read server; echo \"$server\" >> {}; \
                 case $server in \
                   reg.example) echo '{{\"ServerURL\":\"reg.example\",\"Username\":\"bot\",\"Secret\":\"s3\"}}';; \
                   tok.example) echo '{{\"Username\":\"<token>\",\"Secret\":\"refresh\"}}';; \
                   https://index.docker.io/v1/) echo '{{\"Username\":\"hub\",\"Secret\":\"h\"}}';; \
                   *) echo 'credentials not found in native keychain'; exit 1;; \
                 esac",
                log.display()
            ),
        );
        helper(&bin, "broken", "echo 'keychain locked' ; exit 2");
        let f = d.path().join("config.json");
        std::fs::write(
            &f,
            r#"{"credHelpers":{"reg.example":"fleet","tok.example":"fleet","bad.example":"broken","esc.example":"../../bin/sh","gone.example":"absent"},
                "auths":{"reg.example":{"auth":"eDp5"},"plain.example":{"auth":"eDp5"}},
                "credsStore":"fleet"}"#,
        )
        .unwrap();
        let files = vec![f];
        let path = HelperPath::dirs(&bin);
        // credHelpers wins over auths.
        let c = find("reg.example", &files, &path).unwrap().unwrap();
        assert_eq!((c.user.as_str(), c.password.as_str()), ("bot", "s3"));
        assert!(c.identity_token.is_none());
        let t = find("tok.example", &files, &path).unwrap().unwrap();
        assert_eq!(t.identity_token.as_deref(), Some("refresh"));
        assert!(!format!("{t:?}").contains("refresh"));
        // auths before the default store.
        let p = find("plain.example", &files, &path).unwrap().unwrap();
        assert_eq!(p.user, "x");
        // The default store, asked for Docker Hub by its index URL.
        let h = find("docker.io", &files, &path).unwrap().unwrap();
        assert_eq!(h.user, "hub");
        // The store has nothing: no credentials, no error.
        assert!(find("none.example", &files, &path).unwrap().is_none());
        let asked = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            asked.lines().collect::<Vec<_>>(),
            [
                "reg.example",
                "tok.example",
                "https://index.docker.io/v1/",
                "none.example"
            ]
        );
        // Failures name the helper, the key and the file.
        let e = find("bad.example", &files, &path).unwrap_err().to_string();
        assert!(
            e.contains("\"broken\"")
                && e.contains("credHelpers")
                && e.contains("config.json")
                && e.contains("keychain locked"),
            "{e}"
        );
        let e = find("esc.example", &files, &path).unwrap_err().to_string();
        assert!(e.contains("not a helper name"), "{e}");
        let e = find("gone.example", &files, &path).unwrap_err().to_string();
        assert!(e.contains("docker-credential-absent is not on PATH"), "{e}");
    }
}
