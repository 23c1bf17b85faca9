//! Writing the engine's recordings as statemap files.

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::Path;

use copier::Recording;

/// This machine's name, for a statemap's title.
pub fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// Writes `rec` to `path` as statemap JSON.
pub fn save(rec: &Recording, title: &str, path: &Path) -> io::Result<()> {
    let f = File::create(path).map_err(|e| with_path(e, "create", path))?;
    let host = hostname();
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
