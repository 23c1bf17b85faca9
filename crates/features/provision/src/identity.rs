//! Each directory guest's own identity: its hostname, its machine-id,
//! its SSH host keys. Guests copied from one image are otherwise
//! identical, and two machines with one machine-id or one host key
//! confuse journald, DHCP leases, D-Bus and every SSH client.
//!
//! Every change is made beneath the guest's root without following a
//! symlink ([`zinstall_engine::beneath`]): a file is replaced by
//! renaming a new one over it, so the cached image the guest was copied
//! (or reflinked) from is never written, and the directories changed
//! keep their times.
//!
//! The choices themselves ([`IdentityOptions`], [`MachineId`],
//! [`HostKeys`]) are options like the others, defined with them and
//! named here too.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::customize::kept;
use crate::error::{HostnameError, HostnameProblem, ProvisionError};
pub use crate::options::{HostKeys, IdentityOptions, MachineId};
use zinstall_engine::beneath::{Dir, Root};
use zinstall_engine::{Error as FsError, Op};

/// What one guest was given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GuestIdentity {
    /// Its hostname, if set.
    pub hostname: Option<String>,
    /// Its machine-id, if one was generated.
    pub machine_id: Option<String>,
    /// The host key files made (`ssh_host_ed25519_key`...), or removed.
    pub host_keys: Vec<String>,
}

/// Linux's `HOST_NAME_MAX`.
const HOST_NAME_MAX: usize = 64;
/// The most of an identity file read back (`/etc/hosts` is the largest).
const MAX_FILE: u64 = 1 << 20;

/// The hostname `pattern` gives guest `n` named `name`, checked: labels
/// of letters, digits and hyphens joined by dots (RFC 1123), at most 64
/// bytes.
pub(crate) fn hostname(
    pattern: &str,
    n: usize,
    name: &str,
) -> Result<String, HostnameError> {
    let h = crate::options::for_guest(pattern, n, name);
    let bad = |problem| {
        Err(HostnameError {
            hostname: h.clone(),
            pattern: pattern.into(),
            problem,
        })
    };
    if h.is_empty() || h.len() > HOST_NAME_MAX {
        return bad(HostnameProblem::Length);
    }
    for label in h.split('.') {
        if label.is_empty()
            || label.starts_with('-')
            || label.ends_with('-')
            || !label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return bad(HostnameProblem::Label);
        }
    }
    Ok(h)
}

/// Checks what [`apply`] will need before any guest is made: the
/// hostname pattern, and `ssh-keygen` when keys are to be generated.
pub(crate) fn check(
    opts: &IdentityOptions,
    name: &str,
) -> Result<(), ProvisionError> {
    if let Some(p) = &opts.hostname {
        hostname(p, 0, &format!("{name}-0"))
            .map_err(ProvisionError::BadHostname)?;
    }
    if opts.host_keys == HostKeys::Generate {
        // `-?` only prints usage: is the program there and runnable?
        let ran = Command::new(&opts.ssh_keygen)
            .arg("-?")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if let Err(source) = ran {
            return Err(ProvisionError::Program {
                program: opts.ssh_keygen.clone(),
                target: "SSH host keys (or use --ssh-host-keys remove or \
                         keep)"
                    .into(),
                source,
            });
        }
    }
    Ok(())
}

/// Gives the directory guest at `root`, number `n` named `name`, its own
/// identity. A guest without `/etc` (not a Unix root) is left as it is.
pub(crate) fn apply(
    root: &Path,
    n: usize,
    name: &str,
    opts: &IdentityOptions,
) -> Result<GuestIdentity, ProvisionError> {
    let mut made = GuestIdentity::default();
    if !opts.changes_anything() {
        return Ok(made);
    }
    let r = Root::open(root)?;
    let etc = match r.dir(Path::new("etc"), None) {
        Ok(d) => d,
        Err(FsError::Io { error, .. })
            if error.kind() == std::io::ErrorKind::NotFound =>
        {
            return Ok(made);
        }
        Err(e) => return Err(e.into()),
    };
    etc.keeping_times(|| -> Result<(), ProvisionError> {
        if let Some(p) = &opts.hostname {
            let h =
                hostname(p, n, name).map_err(ProvisionError::BadHostname)?;
            set_hostname(&etc, &h)?;
            made.hostname = Some(h);
        }
        made.machine_id = machine_id(&r, &etc, opts.machine_id)?;
        Ok(())
    })?;
    made.host_keys = host_keys(&r, &made, opts)?;
    Ok(made)
}

/// `/etc/hostname`, and the `127.0.1.1` line of `/etc/hosts` where the
/// image has one (Debian's way of resolving its own name).
fn set_hostname(etc: &Dir, h: &str) -> zinstall_engine::Result<()> {
    let (mode, owner) = kept(etc, "hostname", 0o644)?;
    etc.replace_file("hostname", format!("{h}\n").as_bytes(), mode, owner)?;
    if etc.stat("hosts")?.is_some_and(|f| f.is_file()) {
        let hosts = etc.read_file("hosts", MAX_FILE)?;
        let text = String::from_utf8_lossy(&hosts);
        let short = h.split('.').next().unwrap_or(h);
        let names = if short == h {
            h.to_string()
        } else {
            format!("{h} {short}")
        };
        let mut changed = false;
        let lines: Vec<String> = text
            .lines()
            .map(|l| {
                if l.split_whitespace().next() == Some("127.0.1.1") {
                    changed = true;
                    format!("127.0.1.1\t{names}")
                } else {
                    l.to_string()
                }
            })
            .collect();
        if changed {
            let (mode, owner) = kept(etc, "hosts", 0o644)?;
            let mut out = lines.join("\n");
            out.push('\n');
            etc.replace_file("hosts", out.as_bytes(), mode, owner)?;
        }
    }
    Ok(())
}

/// `/etc/machine-id` (only where the image has one: without it systemd
/// already treats a boot as the first), and D-Bus's copy where it is a
/// file of its own.
fn machine_id(
    r: &Root,
    etc: &Dir,
    how: MachineId,
) -> zinstall_engine::Result<Option<String>> {
    if how == MachineId::Keep
        || !etc.stat("machine-id")?.is_some_and(|f| f.is_file())
    {
        return Ok(None);
    }
    let (mode, owner) = kept(etc, "machine-id", 0o444)?;
    let dbus = match r.dir(Path::new("var/lib/dbus"), None) {
        Ok(d) if d.stat("machine-id")?.is_some_and(|f| f.is_file()) => Some(d),
        _ => None,
    };
    match how {
        MachineId::Generate => {
            let id = new_machine_id()?;
            let line = format!("{id}\n");
            etc.replace_file("machine-id", line.as_bytes(), mode, owner)?;
            if let Some(d) = dbus {
                let (mode, owner) = kept(&d, "machine-id", 0o444)?;
                d.keeping_times(|| {
                    d.replace_file("machine-id", line.as_bytes(), mode, owner)
                })?;
            }
            Ok(Some(id))
        }
        MachineId::FirstBoot => {
            etc.replace_file("machine-id", b"uninitialized\n", mode, owner)?;
            if let Some(d) = dbus {
                // D-Bus falls back to /etc/machine-id.
                d.keeping_times(|| d.remove_file("machine-id"))?;
            }
            Ok(None)
        }
        MachineId::Keep => Ok(None),
    }
}

/// 128 random bits as systemd's `sd_id128_randomize` makes them: a v4
/// UUID (version and variant bits set), in 32 lowercase hex digits.
// The system's random device, 16 bytes of it.
#[allow(clippy::disallowed_methods)]
fn new_machine_id() -> zinstall_engine::Result<String> {
    let mut b = [0u8; 16];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| FsError::io(Op::Read, "/dev/urandom", e))?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// The image's SSH host keys, replaced by new ones of the same types or
/// removed; the names of the key files made or removed.
fn host_keys(
    r: &Root,
    made: &GuestIdentity,
    opts: &IdentityOptions,
) -> Result<Vec<String>, ProvisionError> {
    if opts.host_keys == HostKeys::Keep {
        return Ok(Vec::new());
    }
    let ssh = match r.dir(Path::new("etc/ssh"), None) {
        Ok(d) => d,
        Err(FsError::Io { error, .. })
            if error.kind() == std::io::ErrorKind::NotFound =>
        {
            return Ok(Vec::new());
        }
        Err(e) => return Err(e.into()),
    };
    let keys: Vec<String> = ssh
        .names()?
        .into_iter()
        .filter(|n| n.starts_with("ssh_host_") && n.ends_with("_key"))
        .collect();
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let comment =
        format!("root@{}", made.hostname.as_deref().unwrap_or("localhost"));
    let scratch = match opts.host_keys {
        HostKeys::Generate => Some(private_dir()?),
        _ => None,
    };
    let result = ssh.keeping_times(|| -> Result<_, ProvisionError> {
        let mut done = Vec::new();
        for key in &keys {
            let public = format!("{key}.pub");
            match &scratch {
                None => {
                    ssh.remove_file(key)?;
                    ssh.remove_file(&public)?;
                }
                Some(dir) => {
                    let kind =
                        &key["ssh_host_".len()..key.len() - "_key".len()];
                    let (private, public_bytes) = keygen(
                        &opts.ssh_keygen,
                        kind,
                        &comment,
                        dir,
                        &ssh.path().join(key),
                    )?;
                    let (mode, owner) = kept(&ssh, key, 0o600)?;
                    ssh.replace_file(key, &private, mode, owner)?;
                    let (mode, owner) = kept(&ssh, &public, 0o644)?;
                    ssh.replace_file(&public, &public_bytes, mode, owner)?;
                }
            }
            done.push(key.clone());
        }
        Ok(done)
    });
    if let Some(dir) = scratch {
        let _scratch = fs::remove_dir_all(dir);
    }
    result
}

/// Makes one key pair of `kind` in `dir` (this process's own) and reads
/// it back: the private key and the public one. `target` is the guest's
/// key file, for messages.
fn keygen(
    program: &Path,
    kind: &str,
    comment: &str,
    dir: &Path,
    target: &Path,
) -> Result<(Vec<u8>, Vec<u8>), ProvisionError> {
    let failed =
        |status: String, stderr: String| ProvisionError::ProgramFailed {
            program: program.to_path_buf(),
            target: target.to_path_buf(),
            status,
            stderr,
        };
    // The type comes from a name in the image: only those ssh-keygen
    // knows reach its command line.
    if !matches!(kind, "rsa" | "ecdsa" | "ed25519" | "dsa") {
        return Err(failed(
            "not run".into(),
            format!("unknown host key type {kind:?}"),
        ));
    }
    let path = dir.join(format!("key-{kind}"));
    let o = Command::new(program)
        .args(["-q", "-t", kind, "-N", "", "-C", comment, "-f"])
        .arg(&path)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| ProvisionError::Program {
            program: program.to_path_buf(),
            target: target.to_path_buf(),
            source,
        })?;
    if !o.status.success() {
        return Err(failed(
            o.status.to_string(),
            String::from_utf8_lossy(&o.stderr).trim().to_string(),
        ));
    }
    let public = path.with_file_name(format!("key-{kind}.pub"));
    // What ssh-keygen just wrote in our scratch, read as a secret.
    let read = |p: &Path| {
        zinstall_core::foreign::read(
            p,
            zinstall_core::foreign::Follow::No,
            zinstall_core::foreign::Kind::Secret,
        )
        .map_err(|e| ProvisionError::io(Op::Read, p, e.into()))
    };
    let pair = (read(&path)?, read(&public)?);
    let _scratch = (fs::remove_file(&path), fs::remove_file(&public));
    Ok(pair)
}

/// A new 0700 directory only this process uses, for ssh-keygen's output.
fn private_dir() -> zinstall_engine::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let base = std::env::temp_dir();
    for i in 0..100u32 {
        // Unique per thread too: a daemon provisions in parallel.
        let d = base.join(format!(
            "zinstall-keys.{}.{:?}.{i}",
            std::process::id(),
            std::thread::current().id()
        ));
        match fs::DirBuilder::new().mode(0o700).create(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(FsError::io(Op::Mkdir, d, e)),
        }
    }
    Err(FsError::io(
        Op::Mkdir,
        base,
        std::io::Error::other("no free name for a private directory"),
    ))
}
