//! `--json` output: one JSON object on standard output per command, with
//! the fields the log records carry, for scripts.

use std::path::Path;

use serde_json::{Value, json};

/// An engine run's counts and timings.
pub fn stats(s: &copier::Stats) -> Value {
    json!({
        "files": s.files,
        "dirs": s.dirs,
        "symlinks": s.symlinks,
        "hardlinks": s.hardlinks,
        "linked": s.redirects,
        "specials": s.specials,
        "skipped": s.skipped,
        "unchanged": s.unchanged,
        "bytes": s.bytes,
        "reflinked": s.reflinked,
        "kernel_copied": s.kernel_copied,
        "buffered": s.buffered,
        "ms": s.elapsed.as_millis() as u64,
        "walker_blocked_ms": s.walker_blocked.as_millis() as u64,
        "workers": s.workers.iter().map(|w| json!({
            "jobs": w.jobs,
            "batches": w.batches,
            "bytes": w.bytes,
            "busy_ms": w.busy.as_millis() as u64,
        })).collect::<Vec<_>>(),
    })
}

/// What was noticed and not kept.
pub fn notices(n: &[copier::Notice]) -> Value {
    n.iter()
        .map(|n| {
            json!({
                "notice": n.to_string(),
                "count": n.count,
                "example": path(&n.example),
            })
        })
        .collect()
}

/// A path as JSON: a string (lossy for names that are not UTF-8).
pub fn path(p: &Path) -> Value {
    Value::String(p.to_string_lossy().into_owned())
}

/// Prints `v` as one line.
pub fn print(v: &Value) {
    crate::output::out(v);
}
