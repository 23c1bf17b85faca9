//! `--json` output: one JSON object on standard output per command, with
//! the fields the log records carry, for scripts.

use std::path::Path;

use serde_json::Value;

/// An engine run's counts and timings (the daemon sends the same).
pub fn stats(s: &copier::Stats) -> Value {
    zinstall_daemon::protocol::stats_json(s)
}

/// What was noticed and not kept.
pub fn notices(n: &[copier::Notice]) -> Value {
    zinstall_daemon::protocol::notices_json(n)
}

/// A path as JSON: a string (lossy for names that are not UTF-8).
pub fn path(p: &Path) -> Value {
    Value::String(p.to_string_lossy().into_owned())
}

/// Prints `v` as one line.
pub fn print(v: &Value) {
    crate::output::out(v);
}
