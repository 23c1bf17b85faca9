//! The bounds an archive is read within: kept apart so that every part of
//! the reader, and its callers, can name them without the reader itself.

/// The default bound on what one archive may hold
/// ([`Limits::max_total_bytes`]): 64 GiB, more than a root filesystem
/// holds, and refused before a bomb fills the disk. The unpack's, a
/// profile's and provisioning's defaults are this one.
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 64 << 30;

/// Bounds on what an archive may declare, checked before allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of one PAX extended header, and of all global ones together.
    pub max_pax_bytes: u64,
    /// Bytes of a GNU long name or long link.
    pub max_name_bytes: u64,
    /// Segments in one sparse map.
    pub max_sparse_entries: u64,
    /// Total of the members' declared sizes (real sizes for sparse
    /// members), plus what follows the end of the archive. Set from the
    /// profile's `max_archive_bytes`.
    pub max_total_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_pax_bytes: 1 << 20,
            max_name_bytes: 64 << 10,
            max_sparse_entries: 1 << 20,
            max_total_bytes: DEFAULT_MAX_TOTAL_BYTES,
        }
    }
}
