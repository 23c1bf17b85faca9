//! Each operation's arguments as the wire carries them: unknown fields
//! refused, defaults filled, exclude patterns bounded as they are read.

use serde::{Deserialize, Serialize};

use super::path::{CleanPath, ImageArg};
#[cfg(doc)]
use zinstall_provision::customize::wire::MAX_SENT_FILE;
use zinstall_provision::customize::wire::{CustomizeRequest, SeedSent};

/// The most exclude patterns one request may carry: thousands of short
/// patterns in one line would otherwise cost many times the line in
/// memory (a string each) before the request is refused.
pub const MAX_EXCLUDES: usize = 4096;

/// Reads a list of patterns, refusing the one past [`MAX_EXCLUDES`]
/// before it is built.
fn bounded_excludes<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<String>, D::Error> {
    struct Patterns;
    impl<'de> serde::de::Visitor<'de> for Patterns {
        type Value = Vec<String>;
        fn expecting(
            &self,
            f: &mut std::fmt::Formatter<'_>,
        ) -> std::fmt::Result {
            write!(f, "a list of at most {MAX_EXCLUDES} patterns")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Vec<String>, A::Error> {
            let mut out = Vec::new();
            while let Some(p) = seq.next_element::<String>()? {
                if out.len() == MAX_EXCLUDES {
                    return Err(serde::de::Error::custom(format!(
                        "more than {MAX_EXCLUDES} exclude patterns"
                    )));
                }
                out.push(p);
            }
            Ok(out)
        }
    }
    d.deserialize_seq(Patterns)
}

/// `copy`: like `zinstall copy SRC DST`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CopyArgs {
    /// The source, absolute.
    pub src: CleanPath,
    /// The destination, absolute.
    pub dst: CleanPath,
    /// Copy into a non-empty destination.
    #[serde(default)]
    pub merge: bool,
    /// Flush the destination filesystem at the end.
    #[serde(default)]
    pub sync: bool,
    /// Skip what these exclude patterns match (as `--exclude` reads
    /// them: a name at any depth, or a path with a `/`); at most
    /// [`MAX_EXCLUDES`].
    #[serde(default, deserialize_with = "bounded_excludes")]
    pub exclude: Vec<String>,
    /// Skip special files that cannot be made for lack of privilege,
    /// with a notice (as `--skip-special`).
    #[serde(default)]
    pub skip_special: bool,
}

/// `install`: like `zinstall install ZONEPATH`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstallArgs {
    /// The zonepath, absolute; the root is `ZONEPATH/root`.
    pub zonepath: CleanPath,
    /// The zone's name (default: the zonepath's last component).
    #[serde(default)]
    pub zone: Option<String>,
    /// The profile (default: the daemon's).
    #[serde(default)]
    pub profile: Option<CleanPath>,
    /// Images applied in order.
    #[serde(default)]
    pub images: Vec<ImageArg>,
    /// Copy the trees from this root instead of the profile's.
    #[serde(default)]
    pub source_root: Option<CleanPath>,
    /// Write the install log here instead of the profile's path.
    #[serde(default)]
    pub log: Option<CleanPath>,
    /// The platform OCI images must be for (`OS/ARCH[/VARIANT]`;
    /// default: the daemon host's).
    #[serde(default)]
    pub platform: Option<String>,
    /// The root's form (default `tree`); sent only when not a tree, so
    /// that a daemon without the field reads every other install.
    #[serde(default, skip_serializing_if = "RootFormat::is_tree")]
    pub format: RootFormat,
}

/// The form of an installed root.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum RootFormat {
    /// A directory tree in `ZONEPATH/root`.
    #[default]
    Tree,
    /// An image in the daemon's composefs store, recorded in
    /// `ZONEPATH/composefs.json` (Linux).
    Composefs,
}

impl RootFormat {
    /// True for a tree.
    pub fn is_tree(&self) -> bool {
        *self == RootFormat::Tree
    }
}

/// `uninstall`: like `zinstall uninstall ZONEPATH`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UninstallArgs {
    /// The zonepath, absolute.
    pub zonepath: CleanPath,
    /// Remove a root that has content and no install marker.
    #[serde(default)]
    pub foreign: bool,
}

/// `update`: like `zinstall update --zonepath ZONEPATH`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateArgs {
    /// The zonepath of an installed root, absolute.
    pub zonepath: CleanPath,
    /// The profile (default: the daemon's).
    #[serde(default)]
    pub profile: Option<CleanPath>,
    /// New versions of the images the root was made from (none: the
    /// recorded ones).
    #[serde(default)]
    pub images: Vec<ImageArg>,
    /// Read the trees from this root instead of the recorded one.
    #[serde(default)]
    pub source_root: Option<CleanPath>,
    /// The source wins in merged paths too; update a root without a
    /// manifest.
    #[serde(default)]
    pub force: bool,
    /// Say what would change; write nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Update even while a process uses the root.
    #[serde(default)]
    pub live: bool,
    /// The platform a new image version must be for (`os/arch[/variant]`).
    #[serde(default)]
    pub platform: Option<String>,
}

/// `rollback`: like `zinstall rollback --zonepath ZONEPATH`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollbackArgs {
    /// The zonepath, absolute.
    pub zonepath: CleanPath,
}

/// `provision`: like `zinstall provision IMAGE`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvisionArgs {
    /// The image, absolute.
    pub image: ImageArg,
    /// Where the guests go, absolute.
    pub out: CleanPath,
    /// How many guests.
    #[serde(default = "one")]
    pub count: usize,
    /// Guests are NAME-0 …
    #[serde(default = "guest")]
    pub name: String,
    /// Virtual size of disk guests, in bytes.
    #[serde(default)]
    pub size: Option<u64>,
    /// The image's expected SHA-256.
    #[serde(default)]
    pub sha256: Option<String>,
    /// Keep the image's hostname, machine-id and SSH host keys in
    /// directory guests.
    #[serde(default)]
    pub keep_identity: bool,
    /// Directory guests' hostname pattern (`{n}`, `{name}`); default
    /// the guest's name.
    #[serde(default)]
    pub hostname: Option<String>,
    /// `generate` (default), `first-boot` or `keep`.
    #[serde(default)]
    pub machine_id: Option<zinstall_provision::identity::MachineId>,
    /// `generate` (default), `remove` or `keep`.
    #[serde(default)]
    pub ssh_host_keys: Option<zinstall_provision::identity::HostKeys>,
    /// Replace guests already there.
    #[serde(default)]
    pub force: bool,
    /// The platform an OCI image must be for (`OS/ARCH[/VARIANT]`;
    /// default: the daemon host's).
    #[serde(default)]
    pub platform: Option<String>,
    /// The most an image may unpack or decompress to, and a registry
    /// blob may declare, in bytes (as `--max-archive-size`; default the
    /// CLI's, `zinstall_archive::tar::DEFAULT_MAX_TOTAL_BYTES`).
    #[serde(default)]
    pub max_archive_size: Option<u64>,
    /// Make the image's device nodes (provision is root's alone: it
    /// cannot be granted).
    #[serde(default)]
    pub allow_devices: bool,
    /// Directory guests' customisation (`--ssh-inject`, `--write`, ...),
    /// every file it names read by the client and carried as contents,
    /// each at most [`MAX_SENT_FILE`] bytes. Boxed, as `seed`: the
    /// request's variants stay of a size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customize: Option<Box<CustomizeRequest>>,
    /// Disk guests' NoCloud seeds, files carried as contents too;
    /// `None`: disk guests get no seed (`--no-seed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<Box<SeedSent>>,
    /// `tree` (default) or `composefs`: what form a tree image's guests
    /// take (`--format`).
    #[serde(default)]
    pub format: zinstall_provision::GuestFormat,
    /// Leave each composefs guest mounted on its `root/` (`--mount`).
    #[serde(default)]
    pub mount: bool,
}

fn one() -> usize {
    1
}

fn guest() -> String {
    "guest".into()
}

/// `cache-gc`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GcArgs {
    /// Say what would be removed, remove nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Keep the cache under this many bytes.
    #[serde(default)]
    pub max_size: Option<u64>,
    /// Let disk entries go whose recorded guests are found nowhere.
    #[serde(default)]
    pub release_missing: bool,
}

/// `status` and `cancel`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRef {
    /// The job's id.
    pub job: u64,
}
