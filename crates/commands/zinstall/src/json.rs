//! `--json` output, for scripts: one schema for every command, told by
//! its `schema` number (zinstall(8), JSON OUTPUT). The last line on
//! standard output is the outcome,
//!
//! ```text
//! {"schema":1,"command":"copy","ok":true,"result":{...}}
//! {"schema":1,"command":"copy","ok":false,"result":{...},"error":{"message":...}}
//! ```
//!
//! `result` is what the command did (also when it failed part way, where
//! it has something to say), `error` why it failed: `message`, and where
//! known `path`, `op`, `errno`, `kind`. Commands that report steps as
//! they go (install) print `{"schema":1,"command":...,"event":TEXT}`
//! lines before it.

use std::path::Path;
use std::sync::OnceLock;

use serde_json::{Map, Value};

/// The version of the schema; raised when a field changes meaning or
/// goes (new fields may come without).
pub const SCHEMA: u64 = 1;

/// The command running, as its outcome names it.
static COMMAND: OnceLock<String> = OnceLock::new();

/// Names the command the outcome is of (once, before it runs).
pub fn set_command(name: &str) {
    let _ = COMMAND.set(name.to_string());
}

fn head() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("schema".into(), SCHEMA.into());
    m.insert(
        "command".into(),
        Value::String(COMMAND.get().map_or("zinstall", String::as_str).into()),
    );
    m
}

/// One of the daemon's typed replies as JSON (what the daemon would send
/// for the same command).
pub fn typed(r: &impl serde::Serialize) -> Value {
    // Strings, numbers, and lists and structs of them: nothing that
    // cannot become a JSON value.
    serde_json::to_value(r).unwrap_or(Value::Null)
}

/// Prints the outcome of a command that succeeded.
pub fn result(r: Value) {
    outcome(true, Some(r), None);
}

/// Prints an outcome: whether the command did what was asked, what it
/// did, and why it failed.
pub fn outcome(ok: bool, result: Option<Value>, error: Option<Value>) {
    let mut m = head();
    m.insert("ok".into(), ok.into());
    if let Some(r) = result {
        m.insert("result".into(), r);
    }
    if let Some(e) = error {
        m.insert("error".into(), e);
    }
    print(&Value::Object(m));
}

/// Prints a step as it happens.
pub fn event(text: &str) {
    let mut m = head();
    m.insert("event".into(), Value::String(text.into()));
    print(&Value::Object(m));
}

/// No fields beside an error's message.
pub const NO_FIELDS: Value = Value::Null;

/// An error object: `message`, and `fields`' members that are not null.
pub fn error(message: impl std::fmt::Display, fields: Value) -> Value {
    let mut error = Map::new();
    error.insert("message".into(), Value::String(message.to_string()));
    if let Value::Object(m) = fields {
        error.extend(m.into_iter().filter(|(_, v)| !v.is_null()));
    }
    Value::Object(error)
}

/// An engine run's counts and timings (the daemon sends the same).
pub fn stats(s: &zinstall_engine::Stats) -> Value {
    typed(s)
}

/// What was noticed and not kept (the daemon sends the same).
pub fn notices(n: &[zinstall_engine::Notice]) -> Value {
    typed(&zinstall_daemon::protocol::NoticeInfo::of(n))
}

/// A path as JSON: a string (lossy for names that are not UTF-8).
pub fn path(p: &Path) -> Value {
    Value::String(p.to_string_lossy().into_owned())
}

/// Prints `v` as one line.
fn print(v: &Value) {
    crate::output::out(v);
}

/// Reports a failure the way the command was asked to: with `--json`,
/// the outcome with `ok` false and the `error` (`message` and `fields`'
/// members: path, op, errno...) on standard output, so that a script
/// reads an object whatever went wrong and however early; otherwise the
/// message on standard error.
pub fn fail(json: bool, message: impl std::fmt::Display, fields: Value) {
    if !json {
        crate::output::error(message);
        return;
    }
    outcome(false, None, Some(error(message, fields)));
}

/// The fields an engine error carries: path, operation, errno.
pub fn fields(e: &zinstall_engine::Error) -> Value {
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

/// The fields of a trust policy error: the policy file, and for a
/// refusal the scope, the requirement and what failed.
pub fn policy_fields(e: &zinstall_registry::policy::PolicyError) -> Value {
    use zinstall_registry::policy::PolicyError as P;
    match e {
        P::BadPolicy { path: p, .. } | P::BadRegistriesD { path: p, .. } => {
            serde_json::json!({ "path": path(p) })
        }
        P::Refused(r) => serde_json::json!({
            "reference": r.reference,
            "policy": path(&r.policy),
            "scope": r.scope,
            "requirement": r.requirement,
            "failed": r.why.as_str(),
        }),
        P::Fetch { url, .. } => serde_json::json!({ "url": url }),
        P::Read(e) => {
            serde_json::json!({ "path": path(&e.path), "op": e.op.to_string() })
        }
        _ => Value::Null,
    }
}

/// A trust policy's verdict on an image: `accepted`, the policy, the
/// scope and its requirements, and for a refusal the requirement, what
/// failed and how.
pub fn verdict(
    reference: &str,
    digest: &str,
    v: &zinstall_registry::policy::Verdict,
) -> Value {
    serde_json::json!({
        "reference": reference,
        "digest": digest,
        "verdict": if v.accepted() { "accepted" } else { "rejected" },
        "policy": path(&v.policy),
        "scope": v.scope,
        "requirements": v.requirements,
        "requirement": v.refusal.as_ref().map(|r| r.0.clone()),
        "failed": v.refusal.as_ref().map(|r| r.1.as_str()),
        "detail": v.refusal.as_ref().map(|r| r.2.clone()),
    })
}
