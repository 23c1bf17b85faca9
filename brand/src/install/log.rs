//! The structured log: JSON lines, one record per step, appended to the
//! file the profile names.

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::Mutex;

use slog::{Drain, Logger, o};

/// A JSON-lines logger appending to `path`, or, if it cannot be opened
/// (not root, no such directory), a logger that drops records, with the
/// reason to tell the user.
pub fn open(path: &Path, argv: &[String]) -> (Logger, Option<String>) {
    match OpenOptions::new().create(true).append(true).open(path) {
        Ok(f) => {
            let drain = slog_json::Json::new(f)
                .set_newlines(true)
                .add_default_keys()
                .build();
            // One writer at a time: records stay whole lines.
            let drain = Mutex::new(drain).fuse();
            let log = Logger::root(
                drain,
                o!("pid" => std::process::id(), "argv" => argv.join(" ")),
            );
            (log, None)
        }
        Err(e) => (
            Logger::root(slog::Discard, o!()),
            Some(format!("log {} not written: {e}", path.display())),
        ),
    }
}
