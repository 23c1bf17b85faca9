//! Files written into the store whole or not at all, with the store's
//! permissions: the pull, the fetcher, gc and signature records all
//! write this way.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::{RegistryError, Result};

/// Blobs are readable by their owner only: an image from a registry that
/// wanted credentials is no one else's to read, and cache entries made
/// from a pulled image take these permissions.
pub const BLOB_MODE: u32 = 0o600;

/// Writes `dir/name` whole or not at all: a temporary file, synced, then
/// renamed over it.
// Writes the store's own file, made here, never followed.
#[allow(clippy::disallowed_methods)]
pub(crate) fn write_atomic(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    mode: u32,
) -> Result<()> {
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    let dst = dir.join(name);
    let r = (|| {
        let mut f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(|e| RegistryError::io("open", &tmp, e))?;
        f.write_all(bytes)
            .and_then(|()| f.sync_all())
            .map_err(|e| RegistryError::io("write", &tmp, e))?;
        fs::rename(&tmp, &dst).map_err(|e| RegistryError::io("rename", &dst, e))
    })();
    if r.is_err() {
        let _already_failing = fs::remove_file(&tmp);
    }
    r
}
