//! What `zinstall cache` prints: the entries as a table, gc's decisions,
//! the disk entries in use; the same locally and through zinstalld.

use std::time::{SystemTime, UNIX_EPOCH};

use zinstall_daemon::replies::{CacheEntryReply, GcReply};

use crate::output;

/// The cache's entries as a table.
pub fn print_cache_list(entries: &[CacheEntryReply]) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    output::out(
        "kind  sha256          size        age   used  guests  state      source",
    );
    for e in entries {
        let generation = match e.generation {
            0 => String::new(),
            g => format!(".{g}"),
        };
        output::out(format_args!(
            "{:<5} {:<14}  {:>9}  {:>5}  {:>5}  {:>6}  {:<9}  {}",
            e.kind,
            format!("{}{generation}", e.sha256.get(..12).unwrap_or(&e.sha256)),
            human(e.size),
            age(now.saturating_sub(e.created)),
            age(now.saturating_sub(e.last_used)),
            e.guests.len(),
            e.state,
            e.source
        ));
        if let Some(why) = &e.altered {
            output::out(format_args!("      altered: {why}"));
        }
        for u in &e.guests {
            output::out(format_args!("      used by {u}"));
        }
        if !e.layers.is_empty() {
            output::out(format_args!(
                "      {} layers: {}",
                e.layers.len(),
                e.layers.join(" ")
            ));
        }
        if !e.used_by.is_empty() {
            let n = e.used_by.len();
            let shared = if n > 1 { ", shared" } else { "" };
            output::out(format_args!(
                "      in {n} image{}{shared}: {}",
                if n == 1 { "" } else { "s" },
                e.used_by.join(" ")
            ));
        }
    }
}

/// What gc decided, one line per entry and a total.
pub fn print_gc(r: &GcReply) {
    let fate = |remove: bool| match (remove, r.dry_run) {
        (true, true) => "would remove",
        (true, false) => "removed",
        (false, _) => "kept",
    };
    for d in &r.decisions {
        output::out(format_args!("{} {}: {}", fate(d.remove), d.entry, d.why));
    }
    let store = &r.store;
    for d in &store.decisions {
        output::out(format_args!(
            "{} pulled image {} ({}): {}",
            fate(d.remove),
            d.image,
            d.names.join(", "),
            d.why
        ));
    }
    if store.busy {
        output::out(format_args!(
            "left the pulled images alone: a pull, install or provision \
             is reading them now"
        ));
    } else if !store.decisions.is_empty() || store.partial_removed > 0 {
        output::out(format_args!(
            "pulled images: {} {} and {} ({}); {} stay",
            if r.dry_run { "would remove" } else { "removed" },
            output::count(store.blobs_removed, "blob", "blobs"),
            output::count(
                store.partial_removed,
                "partial download",
                "partial downloads"
            ),
            human(store.freed),
            human(store.size_after)
        ));
    }
    if let Some(c) = &r.composefs {
        print_composefs_sweep(c);
    }
    if r.dry_run {
        let would = r.decisions.iter().filter(|d| d.remove).count() as u64;
        output::out(format_args!(
            "would remove {} ({}); kept {} in use",
            output::count(would, "entry", "entries"),
            human(r.freed),
            r.kept_in_use
        ));
    } else {
        output::out(format_args!(
            "removed {} ({}) and {}; kept {} in use",
            output::count(r.removed.len() as u64, "entry", "entries"),
            human(r.freed),
            output::count(
                r.stale_builds_removed,
                "stale build",
                "stale builds"
            ),
            r.kept_in_use
        ));
    }
}

/// What gc did to the composefs store, one line.
pub(crate) fn print_composefs_sweep(
    c: &zinstall_provision::cache::ComposefsSweep,
) {
    output::out(format_args!(
        "composefs store {}: {} {} ({}), {} and {} of interrupted runs; \
         kept {} of {}",
        output::show(&c.store),
        if c.dry_run { "would remove" } else { "removed" },
        output::count(c.objects_removed, "object", "objects"),
        human(c.bytes_removed),
        output::count(c.links_removed, "image link", "image links"),
        output::count(c.leftovers_removed, "leftover", "leftovers"),
        output::count(c.objects_kept, "object", "objects"),
        output::count(c.images_kept, "image", "images"),
    ));
}

/// `cache in-use`'s lines (directory: why), or its JSON array.
pub(crate) fn print_in_use(
    disks: &[(zinstall_provision::cache::Entry, String)],
    json: bool,
) {
    if json {
        let list: Vec<InUse> = disks
            .iter()
            .map(|(e, why)| InUse {
                entry: e.name(),
                dir: e.dir.display().to_string(),
                why: why.clone(),
            })
            .collect();
        crate::json::result(crate::json::typed(&list));
    } else {
        for (e, why) in disks {
            output::out(format_args!("{}: {why}", e.dir.display()));
        }
    }
}

fn human(b: u64) -> String {
    indicatif::HumanBytes(b).to_string()
}

fn age(s: u64) -> String {
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// One disk entry guests still read, as `cache in-use --json` lists it.
#[derive(serde::Serialize)]
struct InUse {
    entry: String,
    dir: String,
    why: String,
}
