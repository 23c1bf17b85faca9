//! Blocks of zeros left as holes: how every body read from a stream is
//! written, so that a small archive declaring a huge file of zeros takes
//! no space. A leaf both writers use.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Blocks of zeros this size, at this alignment in the file, are left as
/// holes: the usual filesystem block.
pub(super) const HOLE_BLOCK: u64 = 4096;

/// Writes `data` at offset `at` of `f`, leaving every whole block of
/// zeros (aligned in the file) unwritten: a hole once the file's length
/// is set. A member read from a stream is written so, sparse-declared or
/// not, so that a small compressed archive declaring a huge file of
/// zeros takes no space: what it reads as is the same. Returns the
/// offset after the last byte written (`at` if none was).
pub(super) fn write_data(f: &File, data: &[u8], at: u64) -> io::Result<u64> {
    let mut run: Option<usize> = None;
    let mut written = at;
    let mut i = 0usize;
    while i < data.len() {
        let pos = at + i as u64;
        let step = (HOLE_BLOCK - pos % HOLE_BLOCK) as usize;
        let end = (i + step).min(data.len());
        let whole = end - i == HOLE_BLOCK as usize;
        if whole && is_zero(&data[i..end]) {
            if let Some(s) = run.take() {
                f.write_all_at(&data[s..i], at + s as u64)?;
                written = at + i as u64;
            }
        } else if run.is_none() {
            run = Some(i);
        }
        i = end;
    }
    if let Some(s) = run {
        f.write_all_at(&data[s..], at + s as u64)?;
        written = at + data.len() as u64;
    }
    Ok(written)
}

fn is_zero(block: &[u8]) -> bool {
    // A comparison with a block of zeros is a memcmp: vectorised by libc
    // whatever the build.
    static ZEROS: [u8; HOLE_BLOCK as usize] = [0; HOLE_BLOCK as usize];
    block == &ZEROS[..block.len()]
}

#[cfg(test)]
// Tests make and read their own fixtures by path.
#[allow(clippy::disallowed_methods)]
mod test {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;

    /// Whole aligned blocks of zeros are not written; the file reads the
    /// same once its length is set, and the end returned says whether
    /// it must be.
    #[test]
    fn zero_blocks_are_left_as_holes() {
        let d = zinstall_testkit::Tmp::new();
        let p = d.path().join("f");
        let mut data = vec![7u8; 100];
        data.resize(100 + 3 * 4096 + 4096 - 100, 0);
        data.extend_from_slice(&[9u8; 50]);
        data.resize(7 * 4096, 0);
        let f = File::create(&p).unwrap();
        let end = write_data(&f, &data, 0).unwrap();
        assert_eq!(end, 5 * 4096);
        f.set_len(data.len() as u64).unwrap();
        drop(f);
        assert_eq!(fs_read(&p), data);
        let blocks = std::fs::metadata(&p).unwrap().blocks() * 512;
        assert!(blocks <= 3 * 4096, "{blocks} bytes allocated");
        // Written from an offset that is not a block boundary: the
        // partial first block is written whatever it holds.
        let f = File::create(&p).unwrap();
        assert_eq!(write_data(&f, &[0u8; 5000], 100).unwrap(), 5100);
        // Nothing but zeros: nothing written.
        assert_eq!(write_data(&f, &[0u8; 8192], 8192).unwrap(), 8192);
    }

    fn fs_read(p: &Path) -> Vec<u8> {
        std::fs::read(p).unwrap()
    }
}
