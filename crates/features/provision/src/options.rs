//! How a provisioning is asked for: [`ProvisionOptions`], built by
//! [`ProvisionOptions::new`] from the [`ProvisionRequest`] that a command
//! line and a daemon's client both make; each directory guest's identity
//! choices; and the defaults and bounds every caller shares.
//!
//! Near a leaf: it names only the customisation options' values and
//! their wire form (`customize::spec`, `customize::wire`, themselves
//! leaves), so that every module can name it.

use std::path::PathBuf;
use std::sync::Arc;

use crate::customize::spec::{Password, RunStep, SshInject, WriteFile};
use crate::customize::wire::CustomizeRequest;
use serde::{Deserialize, Serialize};
use zinstall_engine::Tunables;
use zinstall_engine::unpack::UnpackOptions;

/// Where the cache lives unless the caller names another place.
pub const DEFAULT_CACHE: &str = zinstall_core::paths::CACHE;

/// The mode of every disk guest (a qcow2 overlay), native or made by
/// `qemu-img`: it holds what the guest writes, so it is its owner's
/// alone.
pub(crate) const OVERLAY_MODE: u32 = 0o600;

/// `s` with `{n}` and `{name}` made guest `n`'s (named `name`): how
/// every per-guest value (hostname, customisation, seed) names its guest.
pub(crate) fn for_guest(s: &str, n: usize, name: &str) -> String {
    s.replace("{n}", &n.to_string()).replace("{name}", name)
}

/// What a caller asks of one provisioning: the choices `zinstall
/// provision`'s flags and a `zinstalld` client's request both carry.
/// [`ProvisionOptions::new`] turns it into options, with every default
/// filled in there.
#[derive(Clone, Debug, Default)]
pub struct ProvisionRequest {
    /// Guests to make.
    pub count: usize,
    /// Where the guests go.
    pub out: PathBuf,
    /// Guests are named `NAME-0` ... `NAME-(count-1)`.
    pub name: String,
    /// Virtual size of disk guests; never below the base's.
    pub size: Option<u64>,
    /// The image's expected SHA-256 (hex), if known.
    pub sha256: Option<String>,
    /// The bound on what the image may unpack or decompress to (see
    /// [`ProvisionOptions::max_archive_bytes`]); `None`: the archive
    /// library's ([`zinstall_archive::tar::DEFAULT_MAX_TOTAL_BYTES`]).
    pub max_archive_bytes: Option<u64>,
    /// Make the image's device nodes
    /// ([`ProvisionOptions::allow_devices`]).
    pub allow_devices: bool,
    /// Directory guests keep the image's hostname, machine-id and SSH
    /// host keys; otherwise each gets its own, except what is chosen
    /// below.
    pub keep_identity: bool,
    /// Directory guests' hostname pattern (`{n}`, `{name}`).
    pub hostname: Option<String>,
    /// What to do with `/etc/machine-id`.
    pub machine_id: Option<MachineId>,
    /// What to do with the SSH host keys.
    pub ssh_host_keys: Option<HostKeys>,
    /// Replace guests already at the guests' paths.
    pub force: bool,
    /// The platform an OCI image must be for; `None`: the host's.
    pub platform: Option<zinstall_engine::oci::Platform>,
    /// What each disk guest's NoCloud seed holds; `None`: disk guests
    /// get no seed.
    pub seed: Option<SeedRequest>,
    /// What form tree guests take: a copy, or a composefs root.
    pub format: GuestFormat,
    /// Leave each composefs guest mounted on its `root/`.
    pub mount: bool,
}

/// The form of a guest made from a tree image.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum GuestFormat {
    /// A directory tree of its own, cloned by reflink or copied.
    #[default]
    Tree,
    /// A composefs root: the entry's image, made once in the cache's
    /// composefs store, mounted under an overlay whose upper layer is
    /// the guest's own (Linux).
    Composefs,
}

/// A word that is none of an option's choices.
#[derive(Debug, thiserror::Error)]
#[error("{given:?}: {choices}")]
pub struct UnknownChoice {
    /// The word given.
    pub given: String,
    /// What the choices are, as a sentence.
    pub choices: &'static str,
}

fn unknown(given: &str, choices: &'static str) -> UnknownChoice {
    UnknownChoice {
        given: given.into(),
        choices,
    }
}

impl GuestFormat {
    /// `tree` or `composefs`.
    pub fn parse(s: &str) -> Result<Self, UnknownChoice> {
        match s {
            "tree" => Ok(GuestFormat::Tree),
            "composefs" => Ok(GuestFormat::Composefs),
            _ => Err(unknown(s, "the format is tree or composefs")),
        }
    }
}

/// What a disk guest's NoCloud seed (`NAME-N.seed.img`, what
/// `cloud-localds` makes) holds beyond its `meta-data`: the
/// customisation options as cloud-config, merged into `--user-data`'s,
/// and `--network-config`. The files named are read, and their contents
/// checked, before the first guest is made.
#[derive(Clone, Debug, Default)]
pub struct SeedRequest {
    /// `--ssh-inject`: `ssh_authorized_keys` (root's at the top level,
    /// another user's in a `users` entry).
    pub ssh_inject: Vec<SshInject>,
    /// `--root-password`: `chpasswd`, or root's password made unusable.
    pub root_password: Option<Password>,
    /// `--firstboot-command`: `runcmd`.
    pub firstboot_commands: Vec<String>,
    /// `--run-command`: `runcmd` too (a disk guest runs nothing before
    /// it boots).
    pub run_commands: Vec<String>,
    /// `--write`: `write_files`.
    pub writes: Vec<WriteFile>,
    /// `--hostname` when given (`{n}`, `{name}`): `hostname` in the
    /// cloud-config; `local-hostname` is always set, to this or the
    /// guest's name.
    pub hostname: Option<String>,
    /// `--user-data FILE`: a `#cloud-config` the options are merged
    /// into, or another cloud-init format given as it is.
    pub user_data: Option<Supplied>,
    /// `--network-config FILE`: copied as `network-config`.
    pub network_config: Option<Supplied>,
}

/// A file a seed option names: on this host, or its contents as a
/// client sent them (a daemon never opens a path a client named).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Supplied {
    /// A file to read.
    File(PathBuf),
    /// Its contents, read by the client.
    Sent(Vec<u8>),
}

impl Supplied {
    /// The path messages name: the file's, or what stands for a sent
    /// one.
    pub fn shown(&self, option: &str) -> PathBuf {
        match self {
            Supplied::File(p) => p.clone(),
            Supplied::Sent(_) => PathBuf::from(format!("({option} as sent)")),
        }
    }
}

/// How to provision.
#[derive(Clone, Debug)]
pub struct ProvisionOptions {
    /// Guests to make.
    pub count: usize,
    /// Where the guests go.
    pub out: PathBuf,
    /// Guests are named `NAME-0` ... `NAME-(count-1)`.
    pub name: String,
    /// Virtual size of disk guests; never below the base's.
    pub size: Option<u64>,
    /// The cache's root directory.
    pub cache: PathBuf,
    /// The image's expected SHA-256 (hex), if known.
    pub sha256: Option<String>,
    /// Make overlays with this `qemu-img` instead of natively; it also
    /// converts a qcow2 image the native reader refuses for a feature it
    /// lacks.
    pub qemu_img: Option<PathBuf>,
    /// A directory beneath which a qcow2 image's backing and data file
    /// names may lead when they are absolute or have `..` (see
    /// [`zinstall_qcow2::ChainOptions`]); without it only names beside
    /// the image are followed.
    pub backing_dir: Option<PathBuf>,
    /// The key of an encrypted qcow2 image: a file holding exactly the
    /// passphrase, given to `qemu-img`, which decrypts the image.
    pub secret_file: Option<PathBuf>,
    /// Workers for extraction, conversion and copies.
    pub tunables: Tunables,
    /// Bound on what an archive may unpack to, on a compressed disk
    /// image decompressed, and on the data a qcow2 image's clusters
    /// write.
    pub max_archive_bytes: u64,
    /// Make an image's device nodes (a root filesystem's `/dev`); refused
    /// otherwise, naming the member. Only root can make them: a guest's
    /// device node is a way into this host's devices for whoever can
    /// reach the guest's directory, so it is asked for, never assumed.
    pub allow_devices: bool,
    /// Stops extraction, conversion and copies at their next entry when
    /// raised.
    pub cancel: Option<zinstall_engine::Cancel>,
    /// Do copies and unpacks on this shared pool (a service's worker
    /// budget); conversions then use one thread.
    pub pool: Option<zinstall_engine::Pool>,
    /// Hears of each entry written: an archive's members unpacked into
    /// the cache, each directory guest's entries (`-v`).
    pub listener: Option<Arc<dyn zinstall_engine::Listener>>,
    /// Each directory guest's own hostname, machine-id and SSH host keys,
    /// or the image's. Disk guests are never changed.
    pub identity: IdentityOptions,
    /// Replace a guest already at a guest's path instead of failing.
    pub force: bool,
    /// The platform an OCI image must be for (and the one chosen from a
    /// multi-platform index); `None`: the host's.
    pub platform: Option<zinstall_engine::oci::Platform>,
    /// What each disk guest's NoCloud seed holds; `None`: no seed.
    pub seed: Option<SeedRequest>,
    /// What form tree guests take.
    pub format: GuestFormat,
    /// Leave each composefs guest mounted on its `root/`.
    pub mount: bool,
    /// What virt-customize(1) would do to each directory guest (keys,
    /// passwords, first-boot scripts, files): checked before the first
    /// guest is made, applied to each after its identity. Disk guests
    /// are never changed.
    pub customize: CustomizeOptions,
    /// The same, as a client sent it, every file already read
    /// (zinstalld's): planned from its contents, checked as the options
    /// are; `None`: [`customize`](Self::customize) alone.
    pub customize_sent: Option<CustomizeRequest>,
    /// How images named by registry reference are pulled (into the
    /// cache's `oci/` store).
    pub pull: zinstall_registry::PullOptions,
    /// Hears how far each step is: through the image file as the cache
    /// entry is made (its length is known), through each OCI layer blob,
    /// and through each directory guest's copy (the first one's size is
    /// not known; the others' is the first one's).
    pub progress: Option<Arc<dyn zinstall_engine::Progress>>,
}

impl ProvisionOptions {
    /// The most guests one provisioning makes. Each is a file or a tree
    /// and a cache user record; far more than any host runs, and small
    /// enough that bookkeeping per guest stays small.
    pub const MAX_GUESTS: usize = 65536;

    /// The options for `request`, the cache at `cache`; what a caller
    /// runs it with (`qemu_img`, `tunables`, `cancel`, `pool`,
    /// `listener`, `pull`, `progress`) is left at its default for the
    /// caller to set: none, the built-in tunables, the engine's own
    /// workers.
    pub fn new(request: ProvisionRequest, cache: impl Into<PathBuf>) -> Self {
        let r = request;
        ProvisionOptions {
            count: r.count,
            out: r.out,
            name: r.name,
            size: r.size,
            cache: cache.into(),
            sha256: r.sha256,
            qemu_img: None,
            backing_dir: None,
            secret_file: None,
            tunables: Tunables::default(),
            max_archive_bytes: r
                .max_archive_bytes
                .unwrap_or(zinstall_archive::tar::DEFAULT_MAX_TOTAL_BYTES),
            allow_devices: r.allow_devices,
            cancel: None,
            pool: None,
            listener: None,
            identity: IdentityOptions::chosen(
                r.keep_identity,
                r.hostname,
                r.machine_id,
                r.ssh_host_keys,
            ),
            force: r.force,
            platform: r.platform,
            seed: r.seed,
            format: r.format,
            mount: r.mount,
            customize: CustomizeOptions::default(),
            customize_sent: None,
            pull: Default::default(),
            progress: None,
        }
    }

    /// How an image's archive (or an OCI layer) is unpacked into the
    /// cache: these knobs, devices only if allowed, owners when root.
    pub(crate) fn unpack(&self) -> UnpackOptions {
        UnpackOptions {
            tunables: self.tunables,
            expect: None,
            allow_devices: self.allow_devices,
            max_bytes: self.max_archive_bytes,
            preserve_owner: None,
            cancel: self.cancel.clone(),
            pool: self.pool.clone(),
            listener: self.listener.clone(),
            whiteouts: Default::default(),
            progress: self.progress.clone(),
            // The cache flushes the entry before it publishes it.
            durable: true,
            contents: None,
            digest: false,
        }
    }
}

/// The customisation options' values as given, each in the spelling
/// virt-customize(1) documents for the option of the same name; `{n}`
/// and `{name}` in them are the guest's number and name. They are
/// parsed and checked (and the files they name read) before the first
/// guest is made.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CustomizeOptions {
    /// `--ssh-inject USER:file:KEY.pub` or `USER:string:KEY`.
    pub ssh_inject: Vec<String>,
    /// `--root-password SELECTOR`.
    pub root_password: Option<String>,
    /// `--password USER:SELECTOR`.
    pub password: Vec<String>,
    /// `--firstboot SCRIPT`: scripts on this host, run once at the
    /// guest's first boot.
    pub firstboot: Vec<PathBuf>,
    /// `--firstboot-command CMD`: run by `sh -c` once at the first boot.
    pub firstboot_command: Vec<String>,
    /// `--write FILE:CONTENT`.
    pub write: Vec<String>,
    /// `--copy-in LOCALPATH:REMOTEDIR`.
    pub copy_in: Vec<String>,
    /// `--timezone TZ`, a name under `/usr/share/zoneinfo`.
    pub timezone: Option<String>,
    /// `--run SCRIPT` and `--run-command CMD`, in the order given: run
    /// in each directory guest as it is made; a disk guest's seed takes
    /// the commands as cloud-config `runcmd`.
    pub run: Vec<RunStep>,
    /// `--run-timeout SECS`: how long each of them may run;
    /// `None`: [`DEFAULT_RUN_TIMEOUT`].
    pub run_timeout: Option<u64>,
}

/// How long a `--run` or `--run-command` may run in a guest unless the
/// caller says otherwise, in seconds.
pub const DEFAULT_RUN_TIMEOUT: u64 = 600;

/// The longest `--run-timeout`, in seconds (a day): a provision, local
/// or a daemon's job, is not held longer by one command.
pub const MAX_RUN_TIMEOUT: u64 = 86_400;

impl CustomizeOptions {
    /// Whether nothing is asked for (a timeout alone asks nothing).
    pub fn is_empty(&self) -> bool {
        let asked = CustomizeOptions {
            run_timeout: None,
            ..self.clone()
        };
        asked == CustomizeOptions::default()
    }

    /// The `--run-command` values, in order (what a seed's `runcmd`
    /// takes).
    pub fn run_commands(&self) -> Vec<String> {
        self.run
            .iter()
            .filter_map(|r| match r {
                RunStep::Command(c) => Some(c.clone()),
                RunStep::Script(_) => None,
            })
            .collect()
    }
}

/// What to do with `/etc/machine-id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MachineId {
    /// A new random ID per guest, as systemd makes one (a v4 UUID in 32
    /// hex digits): the guests differ from the start and the caller
    /// learns each guest's ID.
    Generate,
    /// `uninitialized`: systemd (247 and later) treats the next boot as
    /// the first, makes the ID then and runs its first-boot units.
    FirstBoot,
    /// As in the image.
    Keep,
}

/// What to do with `/etc/ssh/ssh_host_*_key`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostKeys {
    /// New keys of the image's types, made with `ssh-keygen`.
    Generate,
    /// Removed, for the guest to make at boot (cloud-init,
    /// `sshd-keygen`, `ssh-keygen -A`).
    Remove,
    /// As in the image.
    Keep,
}

impl MachineId {
    /// `generate`, `first-boot` or `keep`.
    pub fn parse(s: &str) -> Result<Self, UnknownChoice> {
        match s {
            "generate" => Ok(MachineId::Generate),
            "first-boot" => Ok(MachineId::FirstBoot),
            "keep" => Ok(MachineId::Keep),
            _ => Err(unknown(
                s,
                "the machine-id is generate, first-boot or keep",
            )),
        }
    }
}

impl HostKeys {
    /// `generate`, `remove` or `keep`.
    pub fn parse(s: &str) -> Result<Self, UnknownChoice> {
        match s {
            "generate" => Ok(HostKeys::Generate),
            "remove" => Ok(HostKeys::Remove),
            "keep" => Ok(HostKeys::Keep),
            _ => Err(unknown(s, "SSH host keys are generate, remove or keep")),
        }
    }
}

/// How each guest is given its identity.
#[derive(Clone, Debug)]
pub struct IdentityOptions {
    /// The hostname: `{n}` is the guest's number, `{name}` its name;
    /// `None` keeps the image's.
    pub hostname: Option<String>,
    /// `/etc/machine-id`.
    pub machine_id: MachineId,
    /// SSH host keys.
    pub host_keys: HostKeys,
    /// The `ssh-keygen` to make keys with.
    pub ssh_keygen: PathBuf,
}

impl IdentityOptions {
    /// The image's identity, untouched: guests are exact copies.
    pub(crate) fn keep() -> Self {
        IdentityOptions {
            hostname: None,
            machine_id: MachineId::Keep,
            host_keys: HostKeys::Keep,
            ssh_keygen: PathBuf::from("ssh-keygen"),
        }
    }

    /// Each guest its own: hostname its name, a new machine-id, new host
    /// keys.
    pub(crate) fn unique() -> Self {
        IdentityOptions {
            hostname: Some("{name}".into()),
            machine_id: MachineId::Generate,
            host_keys: HostKeys::Generate,
            ssh_keygen: PathBuf::from("ssh-keygen"),
        }
    }

    /// [`unique`](Self::unique) with what a caller chose instead, or
    /// [`keep`](Self::keep) when it asked to keep the image's identity.
    pub(crate) fn chosen(
        keep: bool,
        hostname: Option<String>,
        machine_id: Option<MachineId>,
        host_keys: Option<HostKeys>,
    ) -> Self {
        let base = if keep { Self::keep() } else { Self::unique() };
        IdentityOptions {
            hostname: hostname.or(base.hostname),
            machine_id: machine_id.unwrap_or(base.machine_id),
            host_keys: host_keys.unwrap_or(base.host_keys),
            ssh_keygen: base.ssh_keygen,
        }
    }

    /// Whether anything is changed at all.
    pub(crate) fn changes_anything(&self) -> bool {
        self.hostname.is_some()
            || self.machine_id != MachineId::Keep
            || self.host_keys != HostKeys::Keep
    }
}

#[cfg(test)]
mod test {
    use std::path::Path;

    use super::*;

    /// What is not asked for gets the one default there is: the archive
    /// library's bound, a unique identity, the engine's own workers.
    #[test]
    fn a_request_gets_the_defaults() {
        let request = ProvisionRequest {
            count: 3,
            out: "/guests".into(),
            name: "vm".into(),
            ..Default::default()
        };
        let o = ProvisionOptions::new(request, DEFAULT_CACHE);
        assert_eq!((o.count, o.name.as_str()), (3, "vm"));
        assert_eq!(o.out, Path::new("/guests"));
        assert_eq!(o.cache, Path::new("/var/cache/zinstall"));
        assert_eq!(o.max_archive_bytes, 64 << 30);
        assert_eq!(o.identity.hostname.as_deref(), Some("{name}"));
        assert_eq!(o.identity.machine_id, MachineId::Generate);
        assert_eq!(o.identity.host_keys, HostKeys::Generate);
        assert!(o.qemu_img.is_none() && o.cancel.is_none());
        assert!(o.pool.is_none() && o.progress.is_none());
        assert_eq!(o.tunables, Tunables::default());
    }

    /// What is asked for is what the options say; choices override the
    /// identity kept, one by one.
    #[test]
    fn a_request_is_taken_as_asked() {
        let request = ProvisionRequest {
            count: 1,
            out: "/guests".into(),
            name: "vm".into(),
            size: Some(1 << 30),
            sha256: Some("ab".repeat(32)),
            max_archive_bytes: Some(1 << 20),
            allow_devices: true,
            keep_identity: true,
            hostname: None,
            machine_id: Some(MachineId::FirstBoot),
            ssh_host_keys: None,
            force: true,
            platform: Some("linux/arm64".parse().unwrap()),
            seed: None,
            format: GuestFormat::Composefs,
            mount: true,
        };
        let o = ProvisionOptions::new(request, "/srv/cache");
        assert_eq!((o.format, o.mount), (GuestFormat::Composefs, true));
        assert_eq!(o.cache, Path::new("/srv/cache"));
        assert_eq!(o.size, Some(1 << 30));
        assert_eq!(o.sha256, Some("ab".repeat(32)));
        assert_eq!(o.max_archive_bytes, 1 << 20);
        assert_eq!(o.unpack().max_bytes, 1 << 20);
        assert!(o.allow_devices && o.unpack().allow_devices && o.force);
        assert_eq!(o.identity.hostname, None);
        assert_eq!(o.identity.machine_id, MachineId::FirstBoot);
        assert_eq!(o.identity.host_keys, HostKeys::Keep);
        assert_eq!(o.platform.unwrap().to_string(), "linux/arm64");
    }
}
