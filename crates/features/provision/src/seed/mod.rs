//! Each disk guest's NoCloud seed, `NAME-N.seed.img` beside its overlay:
//! what `cloud-localds` makes, written natively. A FAT image labelled
//! `cidata` holds `meta-data` (the guest's own `instance-id` and
//! `local-hostname`), `user-data` (the customisation options as
//! cloud-config, merged into `--user-data`'s) and, when given,
//! `network-config`.
//!
//! [`prepare`] reads and checks everything the seeds need before the
//! first guest is made; [`Seed::write`] makes one guest's.

mod cloud_config;
mod fat;
pub mod sent;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_norway::{Mapping, Value};
use zinstall_core::foreign::{self, Follow, Kind};
use zinstall_engine::Op;

use crate::customize::spec::{KeySource, Password, SshPublicKey};
use crate::error::{ProvisionError, ProvisionError as Error};
use crate::identity;
use crate::options::{SeedRequest, Supplied};
use cloud_config::RootPassword;

/// One guest's seed, made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeedMade {
    /// The seed image, beside the overlay.
    pub path: PathBuf,
    /// Its `instance-id`.
    pub instance_id: String,
    /// Its `local-hostname`.
    pub hostname: String,
    /// The root password made for this guest (`--root-password
    /// random`), told once.
    pub root_password: Option<String>,
}

/// What a user-data file is.
#[derive(Clone, Debug)]
enum UserData {
    /// None given.
    None,
    /// `#cloud-config`: the options are merged into it.
    CloudConfig(Mapping),
    /// Another cloud-init format (its name), given as it is.
    Other(&'static str, Vec<u8>),
}

/// A root password before it is made per guest.
#[derive(Clone, Debug)]
enum PasswordPlan {
    Given(RootPassword),
    Random,
}

/// Everything the seeds are made from, read and checked.
#[derive(Clone, Debug)]
pub(crate) struct Seed {
    keys: Vec<(String, String)>,
    password: Option<PasswordPlan>,
    locked: bool,
    runcmd: Vec<String>,
    writes: Vec<(String, String)>,
    hostname: Option<String>,
    user: UserData,
    user_path: Option<PathBuf>,
    network_config: Option<Vec<u8>>,
}

fn refused(
    option: &str,
    path: impl Into<PathBuf>,
    why: impl Into<String>,
) -> ProvisionError {
    ProvisionError::Seed {
        option: option.to_string(),
        path: path.into(),
        why: why.into(),
    }
}

/// The options a request sets that make cloud-config, by flag.
fn options_set(r: &SeedRequest) -> Vec<&'static str> {
    [
        ("--ssh-inject", !r.ssh_inject.is_empty()),
        ("--root-password", r.root_password.is_some()),
        ("--firstboot-command", !r.firstboot_commands.is_empty()),
        ("--run-command", !r.run_commands.is_empty()),
        ("--write", !r.writes.is_empty()),
    ]
    .into_iter()
    .filter_map(|(f, set)| set.then_some(f))
    .collect()
}

/// The options a request sets that only a disk guest's seed takes; for
/// refusing them for directory guests (the customisation options a seed
/// shares with them are applied beneath a directory guest's root).
pub(crate) fn disk_only(r: &SeedRequest) -> Vec<&'static str> {
    let mut v = Vec::new();
    if r.user_data.is_some() {
        v.push("--user-data");
    }
    if r.network_config.is_some() {
        v.push("--network-config");
    }
    v
}

/// Reads and checks what the seeds of guests named `name`-N need: key
/// files hold SSH public keys, a password file is not empty and not
/// readable by others, user-data is a cloud-init format (and, when not
/// `#cloud-config`, no option is to be merged into it), network-config
/// is YAML; and guest 0's seed is composed, so that a conflict between
/// `--user-data` and the options is found now.
pub(crate) fn prepare(
    r: &SeedRequest,
    name: &str,
    meta_hostname: Option<&str>,
) -> Result<Seed, ProvisionError> {
    let mut keys = Vec::new();
    for inject in &r.ssh_inject {
        match &inject.key {
            KeySource::String(k) => keys.push((inject.user.clone(), k.line())),
            KeySource::File(p) => {
                for k in key_file(p)? {
                    keys.push((inject.user.clone(), k.line()));
                }
            }
        }
    }
    let (password, locked) = match &r.root_password {
        None => (None, false),
        Some(Password::Locked(inner)) => (Some(password(inner)?), true),
        Some(p) => (Some(password(p)?), false),
    };
    let (user, user_path) = match &r.user_data {
        None => (UserData::None, None),
        Some(s) => (user_data(s)?, Some(s.shown("--user-data"))),
    };
    if let (UserData::Other(kind, _), Some(p)) = (&user, &user_path) {
        let mut set = options_set(r);
        if r.hostname.is_some() {
            set.push("--hostname");
        }
        if !set.is_empty() {
            return Err(refused(
                "--user-data",
                p,
                format!(
                    "is {kind}, which cloud-config cannot be merged into, \
                     and {} make cloud-config: put them in a \
                     #cloud-config user-data, or give the file alone",
                    set.join(", ")
                ),
            ));
        }
    }
    let network_config = match &r.network_config {
        None => None,
        Some(s) => Some(network_config(s)?),
    };
    let seed = Seed {
        keys,
        password,
        locked,
        runcmd: r
            .firstboot_commands
            .iter()
            .chain(&r.run_commands)
            .cloned()
            .collect(),
        writes: r
            .writes
            .iter()
            .map(|w| (w.path.display().to_string(), w.content.clone()))
            .collect(),
        hostname: r.hostname.clone(),
        user,
        user_path,
        network_config,
    };
    seed.compose(name, 0, meta_hostname)?;
    Ok(seed)
}

/// The keys of a public key file: each line that is not empty or a
/// comment, each checked.
pub(crate) fn key_file(p: &Path) -> Result<Vec<SshPublicKey>, ProvisionError> {
    const OPT: &str = "--ssh-inject";
    let text = foreign::read_to_string(p, Follow::Yes, Kind::Key)
        .map_err(|e| refused(OPT, p, e.to_string()))?;
    let keys = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            SshPublicKey::parse(l)
                .map_err(|why| refused(OPT, p, why.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if keys.is_empty() {
        return Err(refused(OPT, p, "holds no key: give a .pub file"));
    }
    Ok(keys)
}

/// A password as the seed sets it, a password file read and checked.
fn password(p: &Password) -> Result<PasswordPlan, ProvisionError> {
    Ok(match p {
        Password::Plain(s) => {
            PasswordPlan::Given(RootPassword::Text(s.clone()))
        }
        Password::Random => PasswordPlan::Random,
        Password::Disabled | Password::Locked(_) => {
            PasswordPlan::Given(RootPassword::Disabled)
        }
        Password::File(f) => {
            PasswordPlan::Given(RootPassword::Text(password_line(f)?))
        }
    })
}

/// The first line of the password file `f`: not readable by everyone,
/// not empty.
pub(crate) fn password_line(f: &Path) -> Result<String, ProvisionError> {
    const OPT: &str = "--root-password";
    let file = foreign::open(f, Follow::Yes)
        .map_err(|e| refused(OPT, f, e.to_string()))?;
    let mode = file
        .metadata()
        .map_err(|e| refused(OPT, f, e.to_string()))?
        .permissions()
        .mode();
    if mode & 0o004 != 0 {
        return Err(refused(
            OPT,
            f,
            format!(
                "is readable by everyone (mode {:04o}): chmod o-r it \
                         first",
                mode & 0o7777
            ),
        ));
    }
    let bytes = foreign::read_file(&file, f, Kind::Secret)
        .map_err(|e| refused(OPT, f, e.to_string()))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| refused(OPT, f, "is not UTF-8 text"))?;
    let first = text.lines().next().unwrap_or_default();
    if first.is_empty() {
        return Err(refused(
            OPT,
            f,
            "its first line is empty: the password is the first line",
        ));
    }
    Ok(first.to_string())
}

/// The formats cloud-init tells by their first bytes, besides
/// `#cloud-config`.
const OTHER_FORMATS: &[(&str, &str)] = &[
    ("#!", "a script"),
    ("Content-Type: multipart/", "MIME multi-part"),
    ("#include", "an include file"),
    ("#cloud-boothook", "a boothook"),
    ("#part-handler", "a part-handler"),
    ("#cloud-config-archive", "a cloud-config archive"),
    ("#cloud-config-jsonp", "a cloud-config JSON patch"),
    ("#upstart-job", "an upstart job"),
    ("\x1f\u{8b}", "gzip-compressed"),
];

/// The bytes of a file a seed option names: read here, or as sent.
pub(crate) fn supplied(
    option: &str,
    s: &Supplied,
) -> Result<Vec<u8>, ProvisionError> {
    match s {
        Supplied::File(p) => foreign::read(p, Follow::Yes, Kind::Config)
            .map_err(|e| refused(option, p, e.to_string())),
        Supplied::Sent(b) => Ok(b.clone()),
    }
}

/// A user-data file, told by its first line as cloud-init tells it.
fn user_data(s: &Supplied) -> Result<UserData, ProvisionError> {
    const OPT: &str = "--user-data";
    let bytes = supplied(OPT, s)?;
    let shown = s.shown(OPT);
    let p = shown.as_path();
    if bytes.starts_with(b"\x1f\x8b") {
        return Ok(UserData::Other("gzip-compressed", bytes));
    }
    let first = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
    if first.trim_ascii_end() == b"#cloud-config" {
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| refused(OPT, p, "#cloud-config that is not UTF-8"))?;
        return Ok(UserData::CloudConfig(yaml_mapping(OPT, p, text)?));
    }
    for (head, kind) in OTHER_FORMATS {
        if bytes.starts_with(head.as_bytes()) {
            return Ok(UserData::Other(kind, bytes));
        }
    }
    Err(refused(
        OPT,
        p,
        "is not cloud-init user-data: it must start with #cloud-config, \
         #! (a script), Content-Type: multipart/, #include or another \
         format cloud-init knows",
    ))
}

/// `text` as a YAML mapping (an empty document is an empty one).
fn yaml_mapping(
    option: &str,
    p: &Path,
    text: &str,
) -> Result<Mapping, ProvisionError> {
    let v: Value = serde_norway::from_str(text)
        .map_err(|e| refused(option, p, format!("is not YAML: {e}")))?;
    match v {
        Value::Null => Ok(Mapping::new()),
        Value::Mapping(m) => Ok(m),
        _ => Err(refused(option, p, "is YAML but not a mapping of keys")),
    }
}

/// A network-config file: YAML (version 1 or 2), copied as it is.
fn network_config(s: &Supplied) -> Result<Vec<u8>, ProvisionError> {
    const OPT: &str = "--network-config";
    let bytes = supplied(OPT, s)?;
    let shown = s.shown(OPT);
    let p = shown.as_path();
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| refused(OPT, p, "is not UTF-8 text"))?;
    let m = yaml_mapping(OPT, p, text)?;
    let has_version = m.contains_key("version")
        || m.get("network").is_some_and(|n| n.get("version").is_some());
    if !has_version {
        return Err(refused(
            OPT,
            p,
            "has no version: network-config is version: 1 or version: 2",
        ));
    }
    Ok(bytes)
}

/// The files of one seed.
struct Composed {
    meta_data: String,
    user_data: Vec<u8>,
    instance_id: String,
    hostname: String,
    root_password: Option<String>,
    volume_id: u32,
}

impl Seed {
    /// Guest `n`'s files (of guests named `name`-N).
    fn compose(
        &self,
        name: &str,
        n: usize,
        meta_hostname: Option<&str>,
    ) -> Result<Composed, ProvisionError> {
        let guest = format!("{name}-{n}");
        let hostname =
            identity::hostname(meta_hostname.unwrap_or("{name}"), n, &guest)
                .map_err(ProvisionError::BadHostname)?;
        let mut id = [0u8; 8];
        getrandom::fill(&mut id).map_err(|e| {
            Error::io(Op::Read, "getrandom", std::io::Error::other(e))
        })?;
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let instance_id = format!("{guest}-{hex}");
        let root_password = match &self.password {
            Some(PasswordPlan::Random) => Some(random_password()?),
            _ => None,
        };
        let x = |s: &str| crate::options::for_guest(s, n, &guest);
        let password = match &self.password {
            None => None,
            Some(PasswordPlan::Given(RootPassword::Text(t))) => {
                Some(RootPassword::Text(x(t)))
            }
            Some(PasswordPlan::Given(p)) => Some(p.clone()),
            Some(PasswordPlan::Random) => {
                root_password.clone().map(RootPassword::Text)
            }
        };
        let explicit = self
            .hostname
            .as_deref()
            .map(|p| identity::hostname(p, n, &guest))
            .transpose()
            .map_err(ProvisionError::BadHostname)?;
        let ours = cloud_config::generate(&cloud_config::Options {
            keys: &self.keys,
            password,
            locked: self.locked,
            runcmd: self.runcmd.iter().map(|c| x(c)).collect(),
            writes: self.writes.iter().map(|(p, c)| (x(p), x(c))).collect(),
            hostname: explicit,
        });
        let user_data = self.user_data(ours)?;
        let mut meta = Mapping::new();
        meta.insert("instance-id".into(), instance_id.clone().into());
        meta.insert("local-hostname".into(), hostname.clone().into());
        let meta_data = serde_norway::to_string(&meta)
            .map_err(|e| refused("meta-data", "", e.to_string()))?;
        Ok(Composed {
            meta_data,
            user_data,
            instance_id,
            hostname,
            root_password,
            volume_id: u32::from_be_bytes([id[0], id[1], id[2], id[3]]),
        })
    }

    /// The user-data of a guest whose options make the cloud-config
    /// `ours`: the user's own file as it is, ours alone, or the user's
    /// cloud-config merged with ours (a key both set otherwise refused).
    fn user_data(&self, ours: Mapping) -> Result<Vec<u8>, ProvisionError> {
        Ok(match &self.user {
            UserData::Other(_, bytes) => bytes.clone(),
            UserData::None => render(&ours)?,
            UserData::CloudConfig(theirs) => {
                let mut merged = theirs.clone();
                let conflicts = cloud_config::merge(&mut merged, ours);
                if !conflicts.is_empty() {
                    return Err(refused(
                        "--user-data",
                        self.user_path.clone().unwrap_or_default(),
                        format!(
                            "sets {} otherwise than the options do: give it \
                             in one place",
                            conflicts.join(", ")
                        ),
                    ));
                }
                render(&merged)?
            }
        })
    }

    /// Writes guest `n`'s seed at `path` (which must not exist: a
    /// replaced one is removed first by the caller).
    pub(crate) fn write(
        &self,
        path: &Path,
        name: &str,
        n: usize,
        meta_hostname: Option<&str>,
    ) -> Result<SeedMade, ProvisionError> {
        let c = self.compose(name, n, meta_hostname)?;
        let mut files: Vec<(&str, &[u8])> = vec![
            ("meta-data", c.meta_data.as_bytes()),
            ("user-data", &c.user_data),
        ];
        if let Some(nc) = &self.network_config {
            files.push(("network-config", nc));
        }
        let bytes = fat::image(&files, c.volume_id)
            .map_err(|e| Error::io(Op::Write, path, e))?;
        write_new(path, &bytes)?;
        Ok(SeedMade {
            path: path.to_path_buf(),
            instance_id: c.instance_id,
            hostname: c.hostname,
            root_password: c.root_password,
        })
    }
}

fn render(m: &Mapping) -> Result<Vec<u8>, ProvisionError> {
    cloud_config::render(m)
        .map(String::into_bytes)
        .map_err(|e| refused("user-data", "", e.to_string()))
}

/// 20 characters of letters and digits, from the system's random
/// source.
fn random_password() -> Result<String, ProvisionError> {
    const SET: &[u8] =
        b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let mut out = String::with_capacity(20);
    while out.len() < 20 {
        let mut b = [0u8; 32];
        getrandom::fill(&mut b).map_err(|e| {
            Error::io(Op::Read, "getrandom", std::io::Error::other(e))
        })?;
        // Rejection keeps every character equally likely.
        let limit = 256 - 256 % SET.len();
        for x in b {
            if (x as usize) < limit && out.len() < 20 {
                out.push(SET[x as usize % SET.len()] as char);
            }
        }
    }
    Ok(out)
}

/// `bytes` as the new file `path`, whole or not at all: written to a
/// private temporary name beside it and synced, then linked at `path`
/// (which fails if anything, a symlink too, is there: nothing is
/// followed or replaced), the directory synced.
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), ProvisionError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{file_name}.{}.partial", std::process::id()));
    // A new file of ours (O_EXCL: never through a link); private, as
    // overlays are: it may hold a password.
    #[allow(clippy::disallowed_methods)]
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(crate::options::OVERLAY_MODE)
        .open(&tmp)
        .map_err(|e| Error::io(Op::Create, &tmp, e))?;
    let placed = f
        .write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| Error::io(Op::Write, &tmp, e))
        .and_then(|()| {
            fs::hard_link(&tmp, path).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    ProvisionError::GuestExists(path.to_path_buf())
                } else {
                    Error::io2(Op::Link, &tmp, path, e)
                }
            })
        });
    drop(f);
    let removed = fs::remove_file(&tmp);
    placed?;
    removed.map_err(|e| Error::io(Op::Remove, &tmp, e))?;
    // The directory we just wrote in, to make the new name durable.
    #[allow(clippy::disallowed_methods)]
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(Op::Sync, dir, e))
}
