//! `zinstall provision --dry-run`'s findings, as JSON and as text.

use serde::Serialize;
use zinstall_provision as provision;

use crate::output;

/// What a dry run found, as `--dry-run --json` prints it. Paths are
/// strings, lossy for names that are not UTF-8.
#[derive(Serialize)]
pub(crate) struct DryRunSummary {
    /// Always true: this is a dry run's result.
    dry_run: bool,
    /// The image, as named.
    image: String,
    /// Its kind, described.
    kind: String,
    /// `reuse`, `rebuild` or `build`: what the cache would do.
    cache: &'static str,
    /// The entry reused or rebuilt.
    entry: Option<String>,
    /// Why an entry would be rebuilt: how it was found altered.
    altered: Option<String>,
    /// The guests that would be made, in order.
    guests: Vec<String>,
    /// The disk guests' seeds that would be made, in order.
    seeds: Vec<String>,
}

fn lossy(p: &std::path::Path) -> String {
    p.to_string_lossy().into_owned()
}

impl DryRunSummary {
    /// What the dry run `p` of `image` found.
    pub(crate) fn of(
        image: &std::path::Path,
        p: &provision::ProvisionDryRun,
    ) -> Self {
        use zinstall_provision::cache::WouldObtain;
        let (cache, entry, altered) = match &p.would {
            WouldObtain::Reuse(e) => ("reuse", Some(e.name()), None),
            WouldObtain::Rebuild(r) => {
                ("rebuild", Some(r.old.name()), Some(r.why.clone()))
            }
            WouldObtain::Build => ("build", None, None),
        };
        DryRunSummary {
            dry_run: true,
            image: lossy(image),
            kind: p.image.describe(),
            cache,
            entry,
            altered,
            guests: p.guests.iter().map(|g| lossy(g)).collect(),
            seeds: p.seeds.iter().map(|g| lossy(g)).collect(),
        }
    }

    /// The findings as text: the cache's part, then each guest.
    pub(crate) fn print(&self) {
        let entry = self.entry.as_deref().unwrap_or_default();
        let what = match self.cache {
            "reuse" => format!("reuse cache entry {entry}"),
            "rebuild" => format!(
                "rebuild cache entry {entry} (altered: {})",
                self.altered.as_deref().unwrap_or_default()
            ),
            _ => "read the image once into a new cache entry".to_string(),
        };
        output::out(format_args!(
            "would {what} for {} ({})",
            self.image, self.kind
        ));
        for g in &self.guests {
            output::out(format_args!("would make {g}"));
        }
        for g in &self.seeds {
            output::out(format_args!("would make seed {g}"));
        }
    }
}
