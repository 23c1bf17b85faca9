//! Writing an empty qcow2 overlay over a raw base.
//!
//! An empty overlay needs four things, one cluster each (64 KiB): the
//! header with the backing file's format and absolute name (cluster 0),
//! the refcount table (cluster 1) pointing at one refcount block
//! (cluster 2) that counts clusters 0 to 2 and the L1 table, and the L1
//! table itself, all zeros (cluster 3 on; several clusters above 4 TiB).
//! No L2 table and no data: every read falls through to the base until
//! the guest writes. This is the layout `qemu-img create -f qcow2 -F raw
//! -b BASE` produces, less the optional feature-name table; `qemu-img
//! check` finds it clean.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::error::{Error, Problem, Result};

const CLUSTER_BITS: u32 = 16;
const CLUSTER: u64 = 1 << CLUSTER_BITS;
const HEADER_LENGTH: usize = 112;
const EXT_BACKING_FORMAT: u32 = 0xe279_2aca;
/// QEMU refuses L1 tables above 32 MiB; so do we.
const MAX_L1_CLUSTERS: u64 = (32 << 20) / CLUSTER;

/// The largest virtual size of an overlay written here (64 KiB clusters,
/// a 32 MiB L1 table): 2 PiB. `qemu-img` refuses larger ones too.
pub const MAX_OVERLAY_SIZE: u64 = (32 << 20) / 8 * (CLUSTER * (CLUSTER / 8));

/// Creates `overlay` (which must not exist), backed by `base` (an
/// absolute path) of format `base_format`, with `virtual_size` bytes
/// (rounded up to 512, as qemu-img does). Returns the virtual size
/// written. A partial file is removed on error.
pub fn create_overlay(
    overlay: &Path,
    base: &Path,
    base_format: &str,
    virtual_size: u64,
) -> Result<u64> {
    let invalid = |why: String| Error::problem(overlay, Problem::Invalid(why));
    let name = backing_name(overlay, base)?;
    // Checked before rounding: near u64::MAX the rounding would wrap to a
    // 0-byte disk.
    if virtual_size > MAX_OVERLAY_SIZE {
        return Err(Error::problem(
            overlay,
            Problem::TooLarge {
                size: virtual_size,
                cluster_size: CLUSTER,
            },
        ));
    }
    let size = virtual_size.next_multiple_of(512);
    let per_l2 = CLUSTER * (CLUSTER / 8);
    let l1_size = size.div_ceil(per_l2);
    let l1_clusters = (l1_size * 8).div_ceil(CLUSTER);
    if l1_clusters > MAX_L1_CLUSTERS {
        return Err(invalid(format!(
            "virtual size {size} needs an L1 table of {l1_clusters} clusters; \
             at most {MAX_L1_CLUSTERS} (32 MiB) are allowed"
        )));
    }
    let out = overlay_bytes(size, l1_size, base_format.as_bytes(), name);
    write_new(overlay, &out)?;
    Ok(size)
}

/// The backing file's name as the header holds it: `base`, absolute and
/// at most 1023 bytes.
fn backing_name<'b>(overlay: &Path, base: &'b Path) -> Result<&'b [u8]> {
    let invalid = |why: String| Error::problem(overlay, Problem::Invalid(why));
    if !base.is_absolute() {
        return Err(invalid(format!(
            "backing file {} must be an absolute path (a relative one is \
             resolved against the overlay's directory)",
            base.display()
        )));
    }
    let name = base.as_os_str().as_bytes();
    if name.len() > 1023 {
        return Err(invalid(format!(
            "backing file name is {} bytes; the limit is 1023",
            name.len()
        )));
    }
    Ok(name)
}

/// The whole overlay of `size` bytes, its L1 table `l1_size` entries,
/// over a base of format `fmt` named `name`: header, refcount table and
/// block, and the empty L1 table.
fn overlay_bytes(size: u64, l1_size: u64, fmt: &[u8], name: &[u8]) -> Vec<u8> {
    let l1_clusters = (l1_size * 8).div_ceil(CLUSTER);
    let mut out = vec![0u8; (3 * CLUSTER + l1_size * 8) as usize];
    let put32 = |b: &mut [u8], at: usize, v: u32| {
        b[at..at + 4].copy_from_slice(&v.to_be_bytes())
    };
    let put64 = |b: &mut [u8], at: usize, v: u64| {
        b[at..at + 8].copy_from_slice(&v.to_be_bytes())
    };
    // Header extension: backing format, padded to 8; then the end marker,
    // then the backing file name.
    let ext_end = HEADER_LENGTH + 8 + fmt.len().div_ceil(8) * 8;
    let name_at = ext_end + 8;
    out[..4].copy_from_slice(b"QFI\xfb");
    put32(&mut out, 4, 3);
    put64(&mut out, 8, name_at as u64);
    put32(&mut out, 16, name.len() as u32);
    put32(&mut out, 20, CLUSTER_BITS);
    put64(&mut out, 24, size);
    put32(&mut out, 36, l1_size as u32);
    put64(&mut out, 40, if l1_size > 0 { 3 * CLUSTER } else { 0 });
    put64(&mut out, 48, CLUSTER);
    put32(&mut out, 56, 1);
    put32(&mut out, 96, 4);
    put32(&mut out, 100, HEADER_LENGTH as u32);
    put32(&mut out, HEADER_LENGTH, EXT_BACKING_FORMAT);
    put32(&mut out, HEADER_LENGTH + 4, fmt.len() as u32);
    out[HEADER_LENGTH + 8..HEADER_LENGTH + 8 + fmt.len()].copy_from_slice(fmt);
    out[name_at..name_at + name.len()].copy_from_slice(name);
    // Refcount table entry 0: the block at cluster 2.
    put64(&mut out, CLUSTER as usize, 2 * CLUSTER);
    // That block: 16-bit refcounts of the header, table, block, and L1.
    for c in 0..3 + l1_clusters {
        let at = (2 * CLUSTER + c * 2) as usize;
        out[at..at + 2].copy_from_slice(&1u16.to_be_bytes());
    }
    out
}

/// Writes `out` to the new file `overlay`; a partial file is removed.
fn write_new(overlay: &Path, out: &[u8]) -> Result<()> {
    // A new file of ours (O_EXCL: never through a link).
    #[allow(clippy::disallowed_methods)]
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(overlay)
        .map_err(|e| Error::io(overlay, "create", e))?;
    if let Err(e) = f.write_all(out) {
        drop(f);
        let _already_failing = std::fs::remove_file(overlay);
        return Err(Error::io(overlay, "write", e));
    }
    Ok(())
}
