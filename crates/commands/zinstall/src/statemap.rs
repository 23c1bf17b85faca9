//! Writing the engine's recordings as statemap files.

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::Path;

use zinstall_engine::Recording;

/// Writes `rec` to `path` as statemap JSON.
pub fn save(rec: &Recording, title: &str, path: &Path) -> io::Result<()> {
    let f = File::create(path).map_err(|e| with_path(e, "create", path))?;
    let host = crate::sys::hostname();
    zinstall_statemap::write_json(
        rec,
        title,
        host.as_deref(),
        "Thread",
        BufWriter::new(f),
    )
    .map_err(|e| with_path(e, "write", path))
}

fn with_path(e: io::Error, op: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{op} {}: {e}", path.display()))
}
