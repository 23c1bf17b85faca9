//! What an install laid out: `ZONEPATH/.zinstall.manifest`, recorded
//! beside the state marker when an install (or an update) completes, and
//! read by the next update to tell what the new source changed and what
//! the zone itself changed since.
//!
//! One entry per path in the root: its type, mode, owner, modification
//! time, size, symlink target, device number, hard-link group, a digest
//! of its extended attributes, and for a regular file an XXH3-128 hash of
//! its content. XXH3 is not a cryptographic hash: it tells a file the
//! zone edited from the one installed (as dpkg tells a changed conffile),
//! and the zone's root could only make its own edit look unchanged,
//! which keeps its own file, never writes one of the host's. It hashes
//! several times faster than SHA-256, so recording costs about a read of
//! the root from the page cache it was just written through.
//!
//! Each entry also holds the inode number and change time the file had
//! when it was recorded: when both still match, the content is the one
//! hashed and an update need not read it again (no write, `chmod`,
//! `chown` or link leaves the change time as it was).
//!
//! The file is zstd-compressed JSON lines: a header, then the entries
//! sorted by path. Written beside and renamed over, synced, as the
//! marker is; read back with every length bounded ([`MAX_FILE`],
//! [`MAX_LINE`], [`MAX_ENTRIES`]) before it sizes anything.

// Reads and writes by path here are converted to zinstall_core::foreign
// and the engine's beneath writer with this module's rewrite.

mod digest;
mod file;
mod format;
mod pending;
mod record;
#[cfg(test)]
mod test;

#[cfg(target_os = "linux")]
pub(crate) use digest::read_sized;
#[cfg(target_os = "linux")]
pub use digest::xattrs;
pub use digest::{
    digest_of, file_digest, hash_copy, hash_file, hash_reader, xattr_alias,
    xattrs_digest, xattrs_fd,
};
pub use file::{clear, parse, read, sync_dir, write};
/// The version of the manifests this zinstall writes.
pub const CURRENT_VERSION: u32 = format::VERSION;
pub use format::{
    ArchiveRecord, Entry, Header, ImageRecord, MANIFEST, MANIFEST_NEW,
    MANIFEST_PREV, MAX_DEPTH, MAX_ENTRIES, MAX_FILE, MAX_LINE, Made, Manifest,
    ManifestError, Recipe, hex, unhex,
};
pub(crate) use pending::{Pending, pending};
pub(crate) use record::{deep_pool, mount_of, same_mount};
pub use record::{entry_of, origin_of, record, record_with};
