//! A seed's request as a client sends it to zinstalld: every file it
//! names read by the client ([`resolve`], with the checks a local
//! provision makes), and made back into a request from the contents
//! alone ([`request`], checked again), so that the daemon opens no path
//! a client named.

use std::path::Path;

use crate::customize::spec::{
    KeySource, Password, SpecError, SshInject, WriteFile,
};
use crate::customize::wire::{
    MAX_SENT_FILE, SeedSent, SentKeys, SentPassword, SentSecret, SentWrite,
};
use crate::error::ProvisionError;
use crate::options::{SeedRequest, Supplied};

fn refused(option: &str, why: impl Into<String>) -> ProvisionError {
    ProvisionError::Seed {
        option: option.to_string(),
        path: std::path::PathBuf::new(),
        why: why.into(),
    }
}

fn spec(e: SpecError) -> ProvisionError {
    refused(e.option, format!("{:?}: {}", e.value, e.why))
}

/// A file's bytes for the request, refused past [`MAX_SENT_FILE`].
fn bounded(option: &str, s: &Supplied) -> Result<Vec<u8>, ProvisionError> {
    let bytes = super::supplied(option, s)?;
    if bytes.len() > MAX_SENT_FILE {
        return Err(ProvisionError::Seed {
            option: option.to_string(),
            path: s.shown(option),
            why: format!(
                "{} bytes: zinstalld is sent files of at most {} KiB each; \
                 run without --daemon, or make it smaller",
                bytes.len(),
                MAX_SENT_FILE >> 10
            ),
        });
    }
    Ok(bytes)
}

/// A password as sent: a file's first line read, with its checks.
fn sent_password(p: &Password) -> Result<SentPassword, ProvisionError> {
    let (inner, locked) = match p {
        Password::Locked(inner) => (inner.as_ref(), true),
        p => (p, false),
    };
    let secret = match inner {
        Password::Plain(s) => SentSecret::Given(s.clone()),
        Password::File(f) => SentSecret::Given(super::password_line(f)?),
        Password::Random => SentSecret::Random,
        Password::Disabled | Password::Locked(_) => SentSecret::Disabled,
    };
    Ok(SentPassword {
        user_option: false,
        user: "root".into(),
        secret,
        locked,
    })
}

/// `r` with every file it names read, for sending.
pub fn resolve(r: &SeedRequest) -> Result<SeedSent, ProvisionError> {
    let mut keys = Vec::new();
    for inject in &r.ssh_inject {
        let lines = match &inject.key {
            KeySource::String(k) => vec![k.line()],
            KeySource::File(p) => {
                let lines: Vec<String> =
                    super::key_file(p)?.iter().map(|k| k.line()).collect();
                let len: usize = lines.iter().map(|l| l.len() + 1).sum();
                if len > MAX_SENT_FILE {
                    return Err(too_big("--ssh-inject", p, len));
                }
                lines
            }
        };
        keys.push(SentKeys {
            user: inject.user.clone(),
            keys: lines,
        });
    }
    Ok(SeedSent {
        keys,
        root_password: r
            .root_password
            .as_ref()
            .map(sent_password)
            .transpose()?,
        firstboot_commands: r.firstboot_commands.clone(),
        run_commands: r.run_commands.clone(),
        writes: r
            .writes
            .iter()
            .map(|w| SentWrite {
                path: w.path.clone(),
                content: w.content.clone(),
            })
            .collect(),
        user_data: r
            .user_data
            .as_ref()
            .map(|s| bounded("--user-data", s))
            .transpose()?,
        network_config: r
            .network_config
            .as_ref()
            .map(|s| bounded("--network-config", s))
            .transpose()?,
    })
}

fn too_big(option: &str, p: &Path, len: usize) -> ProvisionError {
    ProvisionError::Seed {
        option: option.to_string(),
        path: p.to_path_buf(),
        why: format!(
            "{len} bytes: zinstalld is sent files of at most {} KiB each",
            MAX_SENT_FILE >> 10
        ),
    }
}

/// The request a client sent, every value checked as the options are;
/// `hostname` is the provision's `--hostname`.
pub fn request(
    s: &SeedSent,
    hostname: Option<&str>,
) -> Result<SeedRequest, ProvisionError> {
    let mut ssh_inject = Vec::new();
    for k in &s.keys {
        if k.keys.is_empty() {
            return Err(refused("--ssh-inject", format!("{}: no key", k.user)));
        }
        for line in &k.keys {
            let v = format!("{}:string:{line}", k.user);
            ssh_inject.push(v.parse::<SshInject>().map_err(spec)?);
        }
    }
    let root_password = match &s.root_password {
        None => None,
        Some(p) => {
            let inner = match &p.secret {
                SentSecret::Given(t) if !t.is_empty() && !t.contains('\n') => {
                    Password::Plain(t.clone())
                }
                SentSecret::Given(_) => {
                    return Err(refused(
                        "--root-password",
                        "an empty password, or one of more than a line",
                    ));
                }
                SentSecret::Random => Password::Random,
                SentSecret::Disabled => Password::Disabled,
            };
            Some(if p.locked {
                Password::Locked(Box::new(inner))
            } else {
                inner
            })
        }
    };
    let writes = s
        .writes
        .iter()
        .map(|w| {
            format!("{}:{}", w.path.to_string_lossy(), w.content)
                .parse::<WriteFile>()
                .map_err(spec)
        })
        .collect::<Result<_, _>>()?;
    Ok(SeedRequest {
        ssh_inject,
        root_password,
        firstboot_commands: s.firstboot_commands.clone(),
        run_commands: s.run_commands.clone(),
        writes,
        hostname: hostname.map(str::to_string),
        user_data: s.user_data.clone().map(Supplied::Sent),
        network_config: s.network_config.clone().map(Supplied::Sent),
    })
}
