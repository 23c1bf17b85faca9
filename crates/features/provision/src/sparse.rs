//! Writing a stream into a sparse file.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

/// Zero blocks of this size become holes: the usual filesystem block.
const BLOCK: usize = 4096;

/// Copies `src` into `dst` (an empty file), leaving every all-zero
/// 4 KiB block as a hole, and sets the length to what was read. Returns
/// the bytes read and the bytes actually written.
pub fn write_sparse(
    src: &mut impl Read,
    dst: &File,
    buf: &mut [u8],
    mut progress: impl FnMut(u64),
) -> io::Result<(u64, u64)> {
    let (mut off, mut written) = (0u64, 0u64);
    loop {
        let n = zinstall_archive::compress::read_up_to(src, buf)?;
        if n == 0 {
            break;
        }
        let data = &buf[..n];
        // Coalesce runs of non-zero blocks into one write.
        let mut run_start: Option<usize> = None;
        for (i, block) in data.chunks(BLOCK).enumerate() {
            let at = i * BLOCK;
            if is_zero(block) {
                if let Some(s) = run_start.take() {
                    dst.write_all_at(&data[s..at], off + s as u64)?;
                    written += (at - s) as u64;
                }
            } else if run_start.is_none() {
                run_start = Some(at);
            }
        }
        if let Some(s) = run_start {
            dst.write_all_at(&data[s..], off + s as u64)?;
            written += (n - s) as u64;
        }
        off += n as u64;
        progress(off);
        if n < buf.len() {
            break;
        }
    }
    dst.set_len(off)?;
    Ok((off, written))
}

fn is_zero(block: &[u8]) -> bool {
    // An OR over the whole block, without an early exit, so that the
    // compiler vectorises it; a 4 KiB block costs a few dozen cycles.
    block.iter().fold(0u8, |acc, &b| acc | b) == 0
}
