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

/// Reports a failure the way the command was asked to: with `--json`,
/// `{"error": {"message": ..., FIELDS}}` on standard output (with
/// `fields`' members: path, op, errno...), so that a script reads an
/// object whatever went wrong and however early; otherwise the message
/// on standard error.
pub fn fail(json: bool, message: impl std::fmt::Display, fields: Value) {
    if !json {
        crate::output::error(message);
        return;
    }
    let mut error = serde_json::Map::new();
    error.insert("message".into(), Value::String(message.to_string()));
    if let Value::Object(m) = fields {
        error.extend(m.into_iter().filter(|(_, v)| !v.is_null()));
    }
    print(&serde_json::json!({ "error": error }));
}

/// The fields an engine error carries: path, operation, errno.
pub fn fields(e: &copier::Error) -> Value {
    serde_json::json!({
        "path": path(e.path()),
        "op": e.op().map(|o| o.as_str()),
        "errno": e.raw_os_error(),
    })
}

/// The fields of a provisioning error: path (when there is one), errno.
pub fn provision_fields(e: &zinstall_provision::ProvisionError) -> Value {
    serde_json::json!({
        "path": (!e.path().as_os_str().is_empty()).then(|| path(e.path())),
        "errno": e.raw_os_error(),
    })
}
