//! The daemon's replies, typed: each is sent by the daemon (or a granted
//! job's process) and read by the client through the same type (a job's
//! travels from the job to the wire in a `JobResult`), and the
//! local commands print their `--json` from the same types, so the two
//! ways of running a command answer alike and a field renamed on one side
//! is an error on the other, never a zero. Paths are strings, lossy where
//! not UTF-8 (as every `--json` shows them).

use std::path::Path;

use serde::{Deserialize, Serialize};

/// A path as the replies carry it.
fn lossy(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// One notice: something seen and not kept, how often, and an example.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NoticeInfo {
    /// Its kind's name.
    pub kind: String,
    /// The notice as the CLI prints it.
    pub notice: String,
    /// How many entries it was seen on.
    pub count: u64,
    /// The first of them (lossy where not UTF-8).
    pub example: String,
}

impl NoticeInfo {
    /// The notices of a run.
    pub fn of(n: &[zinstall_engine::Notice]) -> Vec<NoticeInfo> {
        n.iter()
            .map(|n| NoticeInfo {
                kind: n.kind.name().to_string(),
                notice: n.to_string(),
                count: n.count,
                example: n.example.to_string_lossy().into_owned(),
            })
            .collect()
    }
}

/// A copy's result, wherever it ran (the daemon, or a granted job's own
/// process). Paths are lossy where not UTF-8.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CopyReply {
    /// What was copied.
    pub src: String,
    /// Where to.
    pub dst: String,
    /// The run's counts and timings.
    pub stats: zinstall_engine::Stats,
    /// What it noticed and did not keep.
    pub notices: Vec<NoticeInfo>,
}

impl CopyReply {
    /// The reply of a copy from `src` to `dst` that ended with `stats`
    /// and `notices`, wherever it ran.
    pub fn new(
        src: &Path,
        dst: &Path,
        stats: zinstall_engine::Stats,
        notices: Vec<NoticeInfo>,
    ) -> CopyReply {
        CopyReply {
            src: lossy(src),
            dst: lossy(dst),
            stats,
            notices,
        }
    }
}

/// An install's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InstallReply {
    /// The zonepath installed (lossy where not UTF-8).
    pub zonepath: String,
    /// The copies' and unpacks' counts and timings.
    pub stats: zinstall_engine::Stats,
    /// What they noticed and did not keep.
    pub notices: Vec<NoticeInfo>,
    /// `tree` or `composefs` (a daemon before composefs installs sent
    /// none: a tree).
    #[serde(default = "tree")]
    pub format: String,
    /// A composefs install's image, beside the other fields.
    #[serde(default, flatten, skip_serializing_if = "Option::is_none")]
    pub composefs: Option<Box<ComposefsInstall>>,
}

fn tree() -> String {
    "tree".to_string()
}

/// A composefs install's outcome: its image in the store, as
/// `zinstall install --format composefs --json` prints it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComposefsInstall {
    /// The image's ID (hex).
    pub image: String,
    /// The image's object, a file in the store.
    pub image_path: String,
    /// The store (lossy where not UTF-8).
    pub store: String,
    /// The ref that keeps the image from `cache gc`.
    #[serde(rename = "ref")]
    pub ref_name: String,
    /// `enabled` or `unsupported`: whether the objects are verified on
    /// read.
    pub verity: String,
    /// Regular files stored as objects (each inode once).
    pub objects: u64,
    /// Of those, objects written (the rest were there).
    pub objects_written: u64,
    /// Bytes of the objects written.
    pub bytes_written: u64,
    /// Regular files kept inline in the image.
    pub inline: u64,
    /// Objects named by the digest the unpacker took as it wrote them.
    pub objects_named_by_unpacker: u64,
}

#[cfg(target_os = "linux")]
impl ComposefsInstall {
    /// The outcome of the install `m`.
    pub fn of(m: &zinstall_install::composefs::Installed) -> ComposefsInstall {
        let lossy = |p: &std::path::Path| p.to_string_lossy().into_owned();
        let c = m.image.counts;
        ComposefsInstall {
            image: zinstall_composefs::hex(&m.image.id),
            image_path: lossy(&m.store.object_path(&m.image.id)),
            store: lossy(m.store.path()),
            ref_name: m.ref_name.clone(),
            verity: m
                .store
                .verity()
                .map_or_else(|_| "unsupported".to_string(), |v| v.to_string()),
            objects: c.objects,
            objects_written: c.written,
            bytes_written: c.bytes_written,
            inline: c.inline,
            objects_named_by_unpacker: c.named_by_writer,
        }
    }
}

/// An uninstall's or a rollback's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ZonepathReply {
    /// The zonepath (lossy where not UTF-8).
    pub zonepath: String,
    /// A rollback's: the root it switched back to, when one was left by
    /// an interrupted switch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered: Option<String>,
    /// A rollback's: which root is in place now, and which is
    /// `root.prev`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A provisioning's outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProvisionReply {
    /// The image provisioned from.
    pub image: String,
    /// Its kind, as told.
    pub kind: String,
    /// The cache entry the guests come from.
    pub entry: String,
    /// The entry's tree or disk.
    pub payload: String,
    /// SHA-256 of the image, hex.
    pub sha256: String,
    /// `built`, `rebuilt` or `reused`.
    pub obtained: String,
    /// How long building the entry took, when it was built now.
    pub build_ms: Option<u64>,
    /// What was noticed and accepted building the entry.
    pub notices: Vec<String>,
    /// The entry found altered and replaced, if any.
    pub replaced: Option<ReplacedInfo>,
    /// The guests, in order.
    pub guests: Vec<GuestInfo>,
}

/// An altered cache entry a provisioning replaced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplacedInfo {
    /// Its name.
    pub entry: String,
    /// What changed.
    pub why: String,
}

/// One guest made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GuestInfo {
    /// Its directory or overlay file.
    pub path: String,
    /// How long it took.
    pub ms: u64,
    /// The line the CLI prints for it.
    pub shown: String,
    /// Its hostname, if set.
    pub hostname: Option<String>,
    /// Its machine-id, if one was made.
    pub machine_id: Option<String>,
    /// The SSH host key files made.
    pub ssh_host_keys: Vec<String>,
    /// `tree`, `composefs` or `qcow2`.
    pub kind: String,
    /// A composefs guest's image ID (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// A composefs guest's: left mounted on its `root/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mounted: Option<bool>,
    /// A composefs guest's: the command that mounts it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount: Option<String>,
    /// A tree's: cloned by reflink.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reflinked: Option<bool>,
    /// A disk's: its virtual size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_size: Option<u64>,
    /// A disk's NoCloud seed, if one was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<SeedInfo>,
    /// A directory guest's `random` passwords, told once: never kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passwords: Vec<PasswordInfo>,
    /// A directory guest's log of its `--run` and `--run-command`
    /// output, when any ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_log: Option<String>,
}

/// A password made for a directory guest's user (`random`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PasswordInfo {
    /// The user.
    pub user: String,
    /// The password.
    pub password: String,
}

/// A disk guest's NoCloud seed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeedInfo {
    /// The seed image.
    pub path: String,
    /// The QEMU option that attaches it.
    pub drive: String,
    /// Its `instance-id`.
    pub instance_id: String,
    /// Its `local-hostname`.
    pub hostname: String,
    /// The root password made for the guest (`--root-password random`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_password: Option<String>,
}

impl ProvisionReply {
    /// `r`, provisioned from `image`.
    pub fn of(image: &Path, r: &zinstall_provision::ProvisionReport) -> Self {
        use zinstall_provision::cache::Obtained;
        let (obtained, build_ms) = match r.obtained {
            Obtained::Built(t) => ("built", Some(t.as_millis() as u64)),
            Obtained::Rebuilt(t) => ("rebuilt", Some(t.as_millis() as u64)),
            Obtained::Reused => ("reused", None),
        };
        ProvisionReply {
            image: lossy(image),
            kind: r.image.describe(),
            entry: r.entry.name(),
            payload: lossy(&r.entry.payload()),
            sha256: r.entry.sha256.clone(),
            obtained: obtained.to_string(),
            build_ms,
            notices: r.notices.clone(),
            replaced: r.replaced.as_ref().map(|o| ReplacedInfo {
                entry: o.old.name(),
                why: o.why.clone(),
            }),
            guests: r.guests.iter().map(GuestInfo::of).collect(),
        }
    }
}

impl GuestInfo {
    /// The guest `g`, as a reply tells it.
    fn of(g: &zinstall_provision::Guest) -> Self {
        use zinstall_provision::GuestKind;
        let (kind, reflinked, virtual_size) = match g.kind {
            GuestKind::Tree { reflinked } => ("tree", Some(reflinked), None),
            GuestKind::Composefs { .. } => ("composefs", None, None),
            GuestKind::Disk { virtual_size } => {
                ("qcow2", None, Some(virtual_size))
            }
        };
        let (image, mounted) = match &g.kind {
            GuestKind::Composefs { image, mounted } => {
                (Some(image.clone()), Some(*mounted))
            }
            _ => (None, None),
        };
        GuestInfo {
            path: lossy(&g.path),
            ms: g.took.as_millis() as u64,
            shown: g.to_string(),
            hostname: g.identity.hostname.clone(),
            machine_id: g.identity.machine_id.clone(),
            ssh_host_keys: g.identity.host_keys.clone(),
            kind: kind.to_string(),
            mount: image
                .as_ref()
                .map(|_| format!("zinstall mount {}", lossy(&g.path))),
            image,
            mounted,
            reflinked,
            virtual_size,
            seed: g.seed.as_ref().map(|s| SeedInfo {
                path: lossy(&s.path),
                drive: format!(
                    "-drive file={},if=virtio,format=raw",
                    lossy(&s.path)
                ),
                instance_id: s.instance_id.clone(),
                hostname: s.hostname.clone(),
                root_password: s.root_password.clone(),
            }),
            passwords: g
                .customized
                .passwords
                .iter()
                .map(|(user, password)| PasswordInfo {
                    user: user.clone(),
                    password: password.clone(),
                })
                .collect(),
            run_log: g.customized.ran.log.as_deref().map(lossy),
        }
    }
}

/// One cache entry, as `cache list` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CacheEntryReply {
    /// `tree`, `disk` or `layer`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// SHA-256 of the image it was made from, hex.
    pub sha256: String,
    /// 0, or one more for each rebuild after an altered generation.
    pub generation: u32,
    /// Its tree or disk.
    pub payload: String,
    /// Bytes on disk.
    pub size: u64,
    /// When it was built (seconds since the epoch).
    pub created: u64,
    /// When guests were last made from it (seconds since the epoch).
    pub last_used: u64,
    /// The image it was built from.
    pub source: String,
    /// Guests made from it still at their paths.
    pub guests: Vec<String>,
    /// An OCI image tree's layer entries.
    pub layers: Vec<String>,
    /// An OCI layer's image entries.
    pub used_by: Vec<String>,
    /// `altered`, `immutable` or `stamped`.
    pub state: String,
    /// Why it no longer counts, if found altered.
    pub altered: Option<String>,
    /// Its payload carries the immutable flag.
    pub immutable: bool,
}

impl CacheEntryReply {
    /// The cache's entries, oldest first.
    pub fn list(entries: &[zinstall_provision::cache::EntryInfo]) -> Vec<Self> {
        entries
            .iter()
            .map(|e| {
                let state = match (&e.altered, e.immutable) {
                    (Some(_), _) => "altered",
                    (None, true) => "immutable",
                    (None, false) => "stamped",
                };
                CacheEntryReply {
                    kind: e.entry.kind.as_str().to_string(),
                    name: e.entry.name(),
                    sha256: e.entry.sha256.clone(),
                    generation: e.entry.generation,
                    payload: lossy(&e.entry.payload()),
                    size: e.size,
                    created: e.created,
                    last_used: e.last_used,
                    source: e.source.clone(),
                    guests: e.users.iter().map(|u| lossy(u)).collect(),
                    layers: e.layers.clone(),
                    used_by: e.used_by.clone(),
                    state: state.to_string(),
                    altered: e.altered.clone(),
                    immutable: e.immutable,
                }
            })
            .collect()
    }
}

/// What `cache gc` decided and did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GcReply {
    /// Nothing was removed; what would be is told.
    pub dry_run: bool,
    /// The entries removed.
    pub removed: Vec<String>,
    /// Bytes freed (or that would be).
    pub freed: u64,
    /// Stale scratch directories removed.
    pub stale_builds_removed: u64,
    /// Entries kept because a guest uses them or they are locked.
    pub kept_in_use: u64,
    /// Every entry, oldest first, with what was decided and why.
    pub decisions: Vec<GcEntryDecision>,
    /// What was done to the pulled images.
    pub store: StoreGcInfo,
    /// What was done to the composefs store, if the cache has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub composefs: Option<zinstall_provision::cache::ComposefsSweep>,
}

/// What gc decided about one cache entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GcEntryDecision {
    /// Its name.
    pub entry: String,
    /// Its size on disk.
    pub size: u64,
    /// Removed (or would be).
    pub remove: bool,
    /// Why.
    pub why: String,
}

/// What gc did to the images pulled into the cache's store.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoreGcInfo {
    /// Someone was reading the store: nothing was decided.
    pub busy: bool,
    /// Bytes freed (or that would be).
    pub freed: u64,
    /// Blobs removed (or that would be).
    pub blobs_removed: u64,
    /// Partial downloads removed (or that would be).
    pub partial_removed: u64,
    /// The store's size after.
    pub size_after: u64,
    /// Each image, oldest first, with what was decided and why.
    pub decisions: Vec<StoreImageDecision>,
}

/// What gc decided about one pulled image.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoreImageDecision {
    /// Its top digest.
    pub image: String,
    /// The names it was pulled by.
    pub names: Vec<String>,
    /// Bytes of its blobs in the store.
    pub size: u64,
    /// Removed (or would be).
    pub remove: bool,
    /// Why.
    pub why: String,
}

impl GcReply {
    /// `r`, from a run that was a dry run or not.
    pub fn of(r: &zinstall_provision::cache::GcReport, dry_run: bool) -> Self {
        GcReply {
            dry_run,
            removed: r.removed.iter().map(|e| e.name()).collect(),
            freed: r.freed,
            stale_builds_removed: r.scratch_removed as u64,
            kept_in_use: r.kept_in_use as u64,
            decisions: r
                .decisions
                .iter()
                .map(|g| GcEntryDecision {
                    entry: g.entry.name(),
                    size: g.size,
                    remove: g.remove,
                    why: g.why.clone(),
                })
                .collect(),
            store: StoreGcInfo {
                busy: r.store.busy,
                freed: r.store.freed,
                blobs_removed: r.store.blobs_removed as u64,
                partial_removed: r.store.partial_removed as u64,
                size_after: r.store.size_after,
                decisions: r
                    .store
                    .decisions
                    .iter()
                    .map(|d| StoreImageDecision {
                        image: d.image.digest.clone(),
                        names: d.image.names.clone(),
                        size: d.image.size,
                        remove: d.remove,
                        why: d.why.clone(),
                    })
                    .collect(),
            },
            composefs: r.composefs.clone(),
        }
    }
}
