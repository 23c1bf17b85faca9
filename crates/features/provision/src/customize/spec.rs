//! The values of the customisation options, parsed and checked as
//! virt-customize(1) spells them, before any guest is made: an SSH key
//! that is not one, a password file anyone may read, a `--write` without
//! its content are refused here, naming the option and the value.
//!
//! Reading the files these values name (a key file, a password file) is
//! the caller's: through `zinstall_core::foreign`, as every file the
//! project did not make.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use base64::Engine;

/// Why an option's value was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    /// The option, as typed (`--ssh-inject`).
    pub option: &'static str,
    /// The value as given, cut to 200 bytes.
    pub value: String,
    /// What is wrong with it, and what it should be.
    pub why: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}: {}", self.option, self.value, self.why)
    }
}

impl std::error::Error for SpecError {}

fn refuse(
    option: &'static str,
    value: &str,
    why: impl Into<String>,
) -> SpecError {
    let mut cut = value.len().min(200);
    while !value.is_char_boundary(cut) {
        cut -= 1;
    }
    SpecError {
        option,
        value: value[..cut].to_string(),
        why: why.into(),
    }
}

/// Where an SSH public key comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// `file:FILENAME`: a public key file (read by the caller, checked
    /// with [`SshPublicKey::parse`]).
    File(PathBuf),
    /// `string:KEY_STRING`: the key itself, already checked.
    String(SshPublicKey),
}

/// `--ssh-inject USER:file:FILENAME` or `USER:string:KEY_STRING`.
///
/// virt-customize's bare `USER` (the caller's `~/.ssh/*.pub`) is refused:
/// which keys a daemon's or root's home holds is not what a fleet should
/// be given by accident.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshInject {
    /// The guest's user, looked up in the guest's own `/etc/passwd`.
    pub user: String,
    /// The key.
    pub key: KeySource,
}

impl FromStr for SshInject {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, SpecError> {
        const OPT: &str = "--ssh-inject";
        let (user, rest) = match s.split_once(':') {
            Some(p) => p,
            None => {
                return Err(refuse(
                    OPT,
                    s,
                    "give the key: USER:file:KEY.pub or USER:string:KEY",
                ));
            }
        };
        check_user(OPT, s, user)?;
        let key = match rest.split_once(':') {
            Some(("file", path)) if !path.is_empty() => {
                KeySource::File(PathBuf::from(path))
            }
            Some(("string", key)) => KeySource::String(
                SshPublicKey::parse(key)
                    .map_err(|why| refuse(OPT, s, why.to_string()))?,
            ),
            _ => {
                return Err(refuse(
                    OPT,
                    s,
                    "after USER: file:KEY.pub or string:KEY",
                ));
            }
        };
        Ok(SshInject {
            user: user.to_string(),
            key,
        })
    }
}

/// An OpenSSH public key line: its type, its body as given (base64), and
/// the comment, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshPublicKey {
    /// `ssh-ed25519`, `ssh-rsa`, ...
    pub kind: String,
    /// The base64 body, as given.
    pub body: String,
    /// What follows the body, trimmed; may be empty.
    pub comment: String,
}

/// The key types OpenSSH's `authorized_keys` takes without options.
const KEY_TYPES: &[&str] = &[
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
];

/// Why a line is not an SSH public key.
#[derive(Debug, thiserror::Error)]
pub enum KeyLineError {
    /// More than one line.
    #[error("one key, on one line")]
    Lines,
    /// A private key.
    #[error("this is a private key: give the .pub file")]
    Private,
    /// A type this project does not know (its first 40 characters).
    #[error(
        "not an SSH public key: it starts with {start:?}, not one of {known}",
        known = KEY_TYPES.join(", ")
    )]
    Type {
        /// How the line starts.
        start: String,
    },
    /// A body that is not base64.
    #[error("the body of this {0} key is not base64")]
    NotBase64(String),
    /// A body that is not a key of its type.
    #[error("the body of this {0} key is not a {0} key: damaged, or cut")]
    Damaged(String),
}

impl SshPublicKey {
    /// Checks one key line (`TYPE BASE64 [COMMENT]`): a known type, a body
    /// that is base64 and whose first field (a length-prefixed string) is
    /// that same type, as `ssh-keygen -l` would check. A private key, a
    /// certificate, or two keys on one line are refused.
    pub fn parse(line: &str) -> Result<Self, KeyLineError> {
        let line = line.trim();
        if line.contains('\n') {
            return Err(KeyLineError::Lines);
        }
        if line.starts_with("-----BEGIN") {
            return Err(KeyLineError::Private);
        }
        let mut words = line.splitn(3, [' ', '\t']);
        let kind = words.next().unwrap_or_default();
        let body = words.next().unwrap_or_default();
        let comment = words.next().unwrap_or_default().trim();
        if !KEY_TYPES.contains(&kind) {
            return Err(KeyLineError::Type {
                start: kind.chars().take(40).collect(),
            });
        }
        let blob = base64::engine::general_purpose::STANDARD
            .decode(body)
            .map_err(|_| KeyLineError::NotBase64(kind.into()))?;
        let fields = ssh_strings(&blob);
        let want = match kind {
            "ssh-ed25519" => 2,
            "ssh-rsa" | "sk-ssh-ed25519@openssh.com" => 3,
            "sk-ecdsa-sha2-nistp256@openssh.com" => 4,
            _ => 3,
        };
        let whole = fields.as_ref().is_some_and(|f| {
            f.len() == want
                && f[0] == kind.as_bytes()
                && (kind != "ssh-ed25519" || f[1].len() == 32)
        });
        if !whole {
            return Err(KeyLineError::Damaged(kind.into()));
        }
        Ok(SshPublicKey {
            kind: kind.to_string(),
            body: body.to_string(),
            comment: comment.to_string(),
        })
    }

    /// The line as `authorized_keys` holds it.
    pub fn line(&self) -> String {
        if self.comment.is_empty() {
            format!("{} {}", self.kind, self.body)
        } else {
            format!("{} {} {}", self.kind, self.body, self.comment)
        }
    }
}

/// The length-prefixed strings (RFC 4251) a key's blob is made of, if
/// they fill it exactly.
fn ssh_strings(mut blob: &[u8]) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    while !blob.is_empty() {
        let n = u32::from_be_bytes(blob.get(..4)?.try_into().ok()?) as usize;
        out.push(blob.get(4..4usize.checked_add(n)?)?);
        blob = &blob[4 + n..];
    }
    Some(out)
}

/// A password, as `--root-password` and `--password USER:` take it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Password {
    /// `file:FILENAME`: the first line of the file (read by the caller:
    /// it must be non-empty and not readable by others).
    File(PathBuf),
    /// `password:PASSWORD`: given on the command line (visible to `ps`;
    /// virt-customize takes it too).
    Plain(String),
    /// `random`: a new one per guest, printed once.
    Random,
    /// `disabled`: no password login (`*` in shadow).
    Disabled,
    /// `locked:SELECTOR`: the account locked (`!` before the hash) with
    /// that password behind the lock.
    Locked(Box<Password>),
}

impl Password {
    fn parse(
        option: &'static str,
        whole: &str,
        s: &str,
    ) -> Result<Self, SpecError> {
        Ok(match s.split_once(':') {
            None if s == "random" => Password::Random,
            None if s == "disabled" => Password::Disabled,
            Some(("file", p)) if !p.is_empty() => Password::File(p.into()),
            Some(("password", p)) if !p.is_empty() => {
                Password::Plain(p.to_string())
            }
            Some(("locked", rest)) => {
                let inner = Password::parse(option, whole, rest)?;
                if matches!(inner, Password::Locked(_)) {
                    return Err(refuse(
                        option,
                        whole,
                        "locked: once is enough",
                    ));
                }
                Password::Locked(Box::new(inner))
            }
            _ => {
                return Err(refuse(
                    option,
                    whole,
                    "one of file:FILENAME, password:PASSWORD, random, \
                     disabled, or locked: before one of them",
                ));
            }
        })
    }
}

impl FromStr for Password {
    type Err = SpecError;

    /// `--root-password SELECTOR`.
    fn from_str(s: &str) -> Result<Self, SpecError> {
        Password::parse("--root-password", s, s)
    }
}

/// `--password USER:SELECTOR`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserPassword {
    /// The guest's user, looked up in the guest's own `/etc/passwd`.
    pub user: String,
    /// The password.
    pub password: Password,
}

impl FromStr for UserPassword {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, SpecError> {
        const OPT: &str = "--password";
        let Some((user, sel)) = s.split_once(':') else {
            return Err(refuse(OPT, s, "USER:SELECTOR, e.g. debian:random"));
        };
        check_user(OPT, s, user)?;
        Ok(UserPassword {
            user: user.to_string(),
            password: Password::parse(OPT, s, sel)?,
        })
    }
}

/// `--write FILE:CONTENT`: CONTENT written as the whole of FILE (an
/// absolute path in the guest), with `\n` in CONTENT as virt-customize
/// takes it literally: the content is what was typed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteFile {
    /// Where in the guest, absolute.
    pub path: PathBuf,
    /// The file's bytes.
    pub content: String,
}

impl FromStr for WriteFile {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, SpecError> {
        const OPT: &str = "--write";
        let Some((path, content)) = s.split_once(':') else {
            return Err(refuse(OPT, s, "FILE:CONTENT"));
        };
        Ok(WriteFile {
            path: guest_path(OPT, s, path)?,
            content: content.to_string(),
        })
    }
}

/// `--copy-in LOCALPATH:REMOTEDIR`: a file or tree of this host copied
/// into a directory of the guest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyIn {
    /// On this host.
    pub local: PathBuf,
    /// In the guest, absolute: a directory, made if missing.
    pub remote_dir: PathBuf,
}

impl FromStr for CopyIn {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, SpecError> {
        const OPT: &str = "--copy-in";
        let Some((local, remote)) = s.rsplit_once(':') else {
            return Err(refuse(OPT, s, "LOCALPATH:REMOTEDIR"));
        };
        if local.is_empty() {
            return Err(refuse(OPT, s, "LOCALPATH is empty"));
        }
        Ok(CopyIn {
            local: local.into(),
            remote_dir: guest_path(OPT, s, remote)?,
        })
    }
}

/// `--run SCRIPT` or `--run-command CMD`: run inside a directory guest
/// as it is made, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunStep {
    /// A script of this host, run by the guest's `/bin/sh`.
    Script(PathBuf),
    /// A command, run by the guest's `/bin/sh -c`.
    Command(String),
}

impl RunStep {
    /// The option as typed, for messages (`--run-command "true"`).
    pub fn shown(&self) -> String {
        match self {
            RunStep::Script(p) => {
                format!("--run {:?}", p.display().to_string())
            }
            RunStep::Command(c) => format!("--run-command {c:?}"),
        }
    }
}

/// A user name as useradd(8) takes it, so that nothing else (a path, an
/// option) passes for one.
fn check_user(
    option: &'static str,
    whole: &str,
    user: &str,
) -> Result<(), SpecError> {
    let ok = !user.is_empty()
        && user.len() <= 32
        && !user.starts_with('-')
        && user
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-$".contains(c));
    if ok {
        Ok(())
    } else {
        Err(refuse(
            option,
            whole,
            format!("{user:?} is not a user name"),
        ))
    }
}

/// An absolute path in the guest, without `..`: where it lands is
/// decided beneath the guest's root, never by the value.
fn guest_path(
    option: &'static str,
    whole: &str,
    p: &str,
) -> Result<PathBuf, SpecError> {
    let path = PathBuf::from(p);
    if !path.is_absolute() {
        return Err(refuse(
            option,
            whole,
            format!("{p:?} is not an absolute path in the guest"),
        ));
    }
    if path
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(refuse(option, whole, format!("{p:?} has a .. component")));
    }
    Ok(path)
}

/// A script's name as the guest keeps it: letters, digits, `.`, `_`
/// and `-`; anything else `_`.
pub(crate) fn script_name(base: &str) -> String {
    let n: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if n.is_empty() || n.starts_with('.') {
        format!("script{n}")
    } else {
        n
    }
}

#[cfg(test)]
mod test {
    use super::*;

    // ssh-keygen -t ed25519: a real public key.
    const ED25519: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGUIIneqcKVwnMcEYpp271QRxxyB/8nvI7/wSLl0eF78 alice@host";

    #[test]
    fn keys_are_checked_as_keys() {
        let k = SshPublicKey::parse(ED25519).unwrap();
        assert_eq!(k.kind, "ssh-ed25519");
        assert_eq!(k.comment, "alice@host");
        assert_eq!(k.line(), ED25519);
        // ssh-keygen -t rsa and -t ecdsa.
        for good in [
            "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQDpJ/NvRKp27/MLNEWlmssMfaJMx+ILlKF20YSkjJidyzbOt6sFHiLyhJuknT718Zq20Fx/b3hLjGharrD8qJXHgmqkJtIBjMcBNkUUidBxvzln7Nt1daauftI6xCSybo+YJhsb267rGa9h7zZMntRHDpDUg6ndutnwsFSyyyv+4Q6kwa3hjERtdKsk+48MGuc1YfJjS/fE2VT88k/Wkm9fIvgqI9OTvMExWAHLqpzZdIw/6CT6zMsmLORJkt1Jw/r/ddQfuL2b6Jo2sZNhoOlOaB5GPpLE2Cuqr9oMN9r0pI+f3Oivv+7ywQw+ivJrxQnP+V4lCVXY5eCndXXaO/w5",
            "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBITqEe2D7ND48a2edMULqBl6fpLZl0kiE7UNjzMV7yy11FlmSJyDqO8Q1PYHU7AUhDljqippVWUF3oSdCxveyes=",
        ] {
            assert!(SshPublicKey::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "hello world",
            "-----BEGIN OPENSSH PRIVATE KEY-----",
            "ssh-ed25519 !!!notbase64",
            // An RSA body under an ed25519 name.
            "ssh-ed25519 AAAAB3NzaC1yc2EAAAADAQABAAABAQ==",
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5",
            "ssh-dss AAAAB3NzaC1kc3MAAACBAP==",
        ] {
            assert!(SshPublicKey::parse(bad).is_err(), "{bad:?} passed");
        }
    }

    #[test]
    fn option_values_parse_as_virt_customize_spells_them() {
        let s: SshInject = format!("root:string:{ED25519}").parse().unwrap();
        assert_eq!(s.user, "root");
        assert!(matches!(s.key, KeySource::String(_)));
        let s: SshInject = "debian:file:/k/id.pub".parse().unwrap();
        assert_eq!(s.key, KeySource::File("/k/id.pub".into()));
        assert!("root".parse::<SshInject>().is_err());
        assert!("root:string:nope".parse::<SshInject>().is_err());
        assert!("../x:file:/k".parse::<SshInject>().is_err());

        assert_eq!("random".parse::<Password>().unwrap(), Password::Random);
        assert_eq!("disabled".parse::<Password>().unwrap(), Password::Disabled);
        assert_eq!(
            "file:/s/pw".parse::<Password>().unwrap(),
            Password::File("/s/pw".into())
        );
        assert_eq!(
            "locked:random".parse::<Password>().unwrap(),
            Password::Locked(Box::new(Password::Random))
        );
        assert!("secret".parse::<Password>().is_err());
        assert!("file:".parse::<Password>().is_err());
        let u: UserPassword = "debian:password:hunter2".parse().unwrap();
        assert_eq!(u.password, Password::Plain("hunter2".into()));

        let w: WriteFile = "/etc/motd:hello: there".parse().unwrap();
        assert_eq!(w.path, PathBuf::from("/etc/motd"));
        assert_eq!(w.content, "hello: there");
        assert!("etc/motd:x".parse::<WriteFile>().is_err());
        assert!("/etc/../x:y".parse::<WriteFile>().is_err());
        let c: CopyIn = "/srv/app:/opt".parse().unwrap();
        assert_eq!(c.remote_dir, PathBuf::from("/opt"));
        assert!("/srv/app:opt".parse::<CopyIn>().is_err());
    }
}
