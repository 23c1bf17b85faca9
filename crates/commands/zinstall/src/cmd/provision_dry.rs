//! `zinstall provision --dry-run`'s findings, as JSON and as text.

use serde_json::Value;
use zinstall_provision as provision;

use crate::output;

/// What a dry run found, as `--dry-run --json` prints it.
pub(crate) fn dry_run_json(
    image: &std::path::Path,
    p: &provision::ProvisionDryRun,
) -> Value {
    use zinstall_provision::cache::WouldObtain;
    let (would, entry, why) = match &p.would {
        WouldObtain::Reuse(e) => ("reuse", Some(e.name()), None),
        WouldObtain::Rebuild(r) => {
            ("rebuild", Some(r.old.name()), Some(r.why.clone()))
        }
        WouldObtain::Build => ("build", None, None),
    };
    serde_json::json!({
        "dry_run": true,
        "image": image,
        "kind": p.image.describe(),
        "cache": would,
        "entry": entry,
        "altered": why,
        "guests": p.guests,
        "seeds": p.seeds,
    })
}

/// A dry run's findings as text: the cache's part, then each guest.
pub(crate) fn print_dry_run(v: &Value) {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let what = match v["cache"].as_str() {
        Some("reuse") => format!("reuse cache entry {}", s(&v["entry"])),
        Some("rebuild") => format!(
            "rebuild cache entry {} (altered: {})",
            s(&v["entry"]),
            s(&v["altered"])
        ),
        _ => "read the image once into a new cache entry".to_string(),
    };
    output::out(format_args!(
        "would {what} for {} ({})",
        s(&v["image"]),
        s(&v["kind"])
    ));
    for g in v["guests"].as_array().into_iter().flatten() {
        output::out(format_args!("would make {}", s(g)));
    }
    for g in v["seeds"].as_array().into_iter().flatten() {
        output::out(format_args!("would make seed {}", s(g)));
    }
}
