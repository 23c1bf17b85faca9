//! The format's fixed numbers and big-endian fields, and the bounds the
//! reader keeps to: shared by the header, the reader, the conversion, the
//! overlays and the errors that name them.

pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        a.copy_from_slice(s);
    }
    u32::from_be_bytes(a)
}

pub(crate) fn be64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        a.copy_from_slice(s);
    }
    u64::from_be_bytes(a)
}

/// QEMU's limit on an L1 table (`QCOW_MAX_L1_SIZE`, 32 MiB) in entries.
/// It refuses images whose table is larger, so none in use needs more;
/// it also bounds what opening an image allocates.
pub const MAX_L1_ENTRIES: u64 = (32 << 20) / 8;

/// The largest virtual size an image with `cluster_bits` can have: a full
/// L1 table of L2 tables of `cluster_size / 8` entries each.
pub fn max_virtual_size(cluster_bits: u32) -> u64 {
    let cs = 1u64 << cluster_bits;
    MAX_L1_ENTRIES.saturating_mul(cs * (cs / 8))
}

/// L1 entries a virtual size needs with `cluster_bits` and L2 tables of
/// `1 << l2_bits` entries (`None` past [`MAX_L1_ENTRIES`]).
pub(crate) fn l1_entries_for(
    size: u64,
    cluster_bits: u32,
    l2_bits: u32,
) -> Option<u64> {
    let n = size.div_ceil(1u64 << (cluster_bits + l2_bits));
    (n <= MAX_L1_ENTRIES).then_some(n)
}

/// Bits 9-55 of L1, L2 and refcount-table entries: a host offset.
pub(crate) const OFFSET_MASK: u64 = 0x00ff_ffff_ffff_fe00;

/// Images in a backing chain at most, the top one included.
pub const MAX_CHAIN: usize = 16;
