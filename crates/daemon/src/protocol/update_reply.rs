//! What an update did, as `update` replies and `zinstall update --json`
//! prints it: made from the install crate's report.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// One path an update added, removed or changed, and what changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpdateChange {
    /// The path as the zone sees it (`/usr/...`).
    pub path: String,
    /// What changed (`content`, `mode`, `owner`, `times`, ...); empty
    /// for an addition or a removal.
    #[serde(default)]
    pub what: Vec<String>,
}

/// A path an update left as the zone has it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpdateKept {
    /// The path as the zone sees it.
    pub path: String,
    /// Why it was kept.
    pub why: String,
}

/// An update's counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UpdateCounts {
    /// Entries added.
    pub added: u64,
    /// Entries removed.
    pub removed: u64,
    /// Entries changed.
    pub changed: u64,
    /// Entries kept as the zone has them.
    pub kept: u64,
    /// The zone's changes replaced.
    #[serde(default)]
    pub replaced: u64,
    /// Bytes of content written.
    pub bytes: u64,
    /// Entries shared with the old root or made without content.
    pub shared: u64,
}

/// What an update did (or, dry, would do): the reply of `update`, and
/// what `zinstall update --json` prints, wherever it ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpdateReply {
    /// The zonepath.
    pub zonepath: String,
    /// Nothing was written.
    pub dry_run: bool,
    /// An interrupted update or rollback finished or undone first.
    #[serde(default)]
    pub recovered: Option<String>,
    /// Entries added.
    pub added: Vec<UpdateChange>,
    /// Entries removed.
    pub removed: Vec<UpdateChange>,
    /// Entries changed.
    pub changed: Vec<UpdateChange>,
    /// Entries the zone changed, left as they are (merged and kept
    /// paths).
    pub kept: Vec<UpdateKept>,
    /// The zone's changes the source's replaced (followed paths).
    #[serde(default)]
    pub replaced: Vec<UpdateKept>,
    /// How unchanged entries are shared with the previous root, now
    /// `root.prev`: `reflink` (copy-on-write) or `hardlink` (an edit in
    /// place in the root reaches `root.prev` too); empty when nothing
    /// was written.
    #[serde(default)]
    pub method: String,
    /// What the root is made from now.
    #[serde(default)]
    pub recipe: String,
    /// Image layers read, and those the recorded entries stood for.
    #[serde(default)]
    pub layers_read: u64,
    /// See `layers_read`.
    #[serde(default)]
    pub layers_reused: u64,
    /// The counts.
    pub stats: UpdateCounts,
}

impl UpdateReply {
    /// The reply for `report`, an update of `zonepath`.
    pub fn of(
        zonepath: &Path,
        report: &zinstall_install::update::Report,
    ) -> UpdateReply {
        let lossy = |p: &Path| p.to_string_lossy().into_owned();
        let changes = |v: &[zinstall_install::update::Change]| {
            v.iter()
                .map(|c| UpdateChange {
                    path: lossy(&c.path),
                    what: c.what.iter().map(|w| w.to_string()).collect(),
                })
                .collect()
        };
        let kept = |v: &[zinstall_install::update::Kept]| {
            v.iter()
                .map(|k| UpdateKept {
                    path: lossy(&k.path),
                    why: k.why.to_string(),
                })
                .collect()
        };
        UpdateReply {
            zonepath: lossy(zonepath),
            dry_run: report.dry_run,
            recovered: report.recovered.map(str::to_string),
            added: changes(&report.added),
            removed: changes(&report.removed),
            changed: changes(&report.changed),
            kept: kept(&report.kept),
            replaced: kept(&report.replaced),
            method: report.method.to_string(),
            recipe: report.recipe.clone(),
            layers_read: report.layers_read as u64,
            layers_reused: report.layers_reused as u64,
            stats: UpdateCounts {
                added: report.added.len() as u64,
                removed: report.removed.len() as u64,
                changed: report.changed.len() as u64,
                kept: report.kept.len() as u64,
                replaced: report.replaced.len() as u64,
                bytes: report.bytes,
                shared: report.shared,
            },
        }
    }
}
