//! Passwords into a guest's `/etc/shadow`: hashed with the method its
//! own `/etc/login.defs` names (`ENCRYPT_METHOD`), as `passwd(1)` in the
//! guest would, through RustCrypto's yescrypt and SHA-crypt.

use std::fs;
use std::io::Read;

use password_hash::PasswordHasher;
use zinstall_engine::beneath::Dir;
use zinstall_engine::{Error as FsError, Op};

use super::plan::{MAX_ACCOUNTS, NewPassword, Secret, refuse};
use crate::error::ProvisionError;

/// How passwords are hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Method {
    /// `$y$`: Debian 11+, Fedora 35+, Ubuntu 22.04+.
    Yescrypt,
    /// `$6$`.
    Sha512,
}

/// The method `login.defs` names; SHA-512 where it names none or one
/// this does not make, with a notice saying so.
pub(crate) fn method(login_defs: Option<&str>) -> (Method, Option<String>) {
    let named = login_defs.and_then(|t| {
        t.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("ENCRYPT_METHOD"))
                .then(|| w.next().unwrap_or_default().to_string())
        })
    });
    match named.as_deref() {
        Some("YESCRYPT") => (Method::Yescrypt, None),
        Some("SHA512") => (Method::Sha512, None),
        None => (Method::Sha512, None),
        Some(other) => (
            Method::Sha512,
            Some(format!(
                "/etc/login.defs names ENCRYPT_METHOD {other}; passwords \
                 are hashed with SHA512 instead"
            )),
        ),
    }
}

/// `n` bytes from the system's random device.
// The system's random device: not a file of the image or the caller.
#[allow(clippy::disallowed_methods)]
pub(crate) fn random_bytes(n: usize) -> Result<Vec<u8>, ProvisionError> {
    let mut b = vec![0u8; n];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| ProvisionError::io(Op::Read, "/dev/urandom", e))?;
    Ok(b)
}

/// A new password of 16 letters and digits (95 bits).
fn random_password() -> Result<String, ProvisionError> {
    const ALPHABET: &[u8] =
        b"abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let mut out = String::new();
    while out.len() < 16 {
        for b in random_bytes(32)? {
            // Rejection keeps every letter equally likely.
            let limit = 256 - 256 % ALPHABET.len();
            if (b as usize) < limit && out.len() < 16 {
                out.push(ALPHABET[b as usize % ALPHABET.len()] as char);
            }
        }
    }
    Ok(out)
}

/// `password` hashed with `method` and a new salt, as crypt(3) writes
/// it.
pub(crate) fn hash(
    method: Method,
    password: &str,
) -> Result<String, ProvisionError> {
    let failed = |e: password_hash::Error| {
        ProvisionError::io(
            Op::Write,
            "/etc/shadow",
            std::io::Error::other(format!("hashing a password: {e}")),
        )
    };
    Ok(match method {
        Method::Yescrypt => yescrypt::Yescrypt::default()
            .hash_password_with_salt(password.as_bytes(), &random_bytes(16)?)
            .map_err(failed)?
            .to_string(),
        // 12 bytes: the 16 characters SHA-crypt's salt holds.
        Method::Sha512 => sha_crypt::ShaCrypt::SHA512
            .hash_password_with_salt(password.as_bytes(), &random_bytes(12)?)
            .map_err(failed)?
            .to_string(),
    })
}

/// Days since 1970-01-01: shadow's `lastchg`.
fn today() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400)
}

/// What setting passwords in one guest told: the random ones made
/// (user, password), and a notice about the method, if any.
#[derive(Debug, Default)]
pub(crate) struct Set {
    /// `random` passwords, to tell the caller once.
    pub random: Vec<(String, String)>,
    /// Said about the hashing method.
    pub notice: Option<String>,
}

/// Sets each password in the guest's `/etc/shadow` (opened as `etc`),
/// keeping every other field and line, the file's mode and owner;
/// `lastchg` becomes today.
pub(crate) fn set_passwords(
    etc: &Dir,
    passwords: &[NewPassword],
) -> Result<Set, ProvisionError> {
    let mut set = Set::default();
    if passwords.is_empty() {
        return Ok(set);
    }
    let defs = match etc.stat("login.defs")? {
        Some(f) if f.is_file() => Some(
            String::from_utf8_lossy(
                &etc.read_file("login.defs", MAX_ACCOUNTS)?,
            )
            .into_owned(),
        ),
        _ => None,
    };
    let (method, notice) = method(defs.as_deref());
    set.notice = notice;
    let shown = etc.path().join("shadow");
    let text = String::from_utf8(etc.read_file("shadow", MAX_ACCOUNTS)?)
        .map_err(|_| {
            FsError::io(
                Op::Read,
                &shown,
                std::io::Error::other("not UTF-8 text"),
            )
        })?;
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    for p in passwords {
        let field = match &p.secret {
            Secret::Disabled => "*".to_string(),
            Secret::Given(pw) => hash(method, pw)?,
            Secret::Random => {
                let pw = random_password()?;
                let h = hash(method, &pw)?;
                set.random.push((p.user.clone(), pw));
                h
            }
        };
        let field = if p.locked { format!("!{field}") } else { field };
        let line = lines
            .iter_mut()
            .find(|l| l.split(':').next() == Some(p.user.as_str()))
            .ok_or_else(|| {
                refuse(
                    p.option,
                    &p.user,
                    &shown,
                    format!("the guest's /etc/shadow has no {}", p.user),
                )
            })?;
        let mut f: Vec<String> = line.split(':').map(String::from).collect();
        f.resize(f.len().max(9), String::new());
        f[1] = field;
        f[2] = today().to_string();
        *line = f.join(":");
    }
    let mut out = lines.join("\n");
    out.push('\n');
    let (mode, owner) = match etc.stat("shadow")? {
        Some(f) => (f.mode, Some((f.uid, f.gid))),
        None => (0o640, None),
    };
    etc.replace_file("shadow", out.as_bytes(), mode, owner)?;
    Ok(set)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn the_method_is_the_one_login_defs_names() {
        let m = |t: &str| method(Some(t)).0;
        assert_eq!(m("# x\nENCRYPT_METHOD YESCRYPT\n"), Method::Yescrypt);
        assert_eq!(m("ENCRYPT_METHOD SHA512"), Method::Sha512);
        assert_eq!(method(None), (Method::Sha512, None));
        let (got, notice) = method(Some("ENCRYPT_METHOD MD5\n"));
        assert_eq!(got, Method::Sha512);
        assert!(notice.unwrap().contains("MD5"));
        assert!(hash(Method::Yescrypt, "pw").unwrap().starts_with("$y$"));
        assert!(hash(Method::Sha512, "pw").unwrap().starts_with("$6$"));
    }
}
