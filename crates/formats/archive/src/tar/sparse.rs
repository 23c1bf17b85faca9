//! GNU sparse maps in their four encodings, and their validation.
//!
//! - old GNU (`S` typeflag): up to 4 `(offset, numbytes)` pairs of 12-byte
//!   numeric fields in the header at 386, `isextended` at 482, the real
//!   size at 483; each extension block after the header holds 21 more
//!   pairs and its own `isextended` at 504. A pair whose `numbytes`
//!   starts with NUL ends the map (GNU tar's rule).
//! - PAX 0.0: repeated `GNU.sparse.offset` / `GNU.sparse.numbytes`
//!   records, in order; `GNU.sparse.size` is the real size.
//! - PAX 0.1: `GNU.sparse.map` = `off,len,off,len,…`; the real name is in
//!   `GNU.sparse.name`.
//! - PAX 1.0 (`GNU.sparse.major=1`, `minor=0`): the map is at the start of
//!   the member's data, decimal numbers one a line (count, then pairs),
//!   padded to a block; `GNU.sparse.realsize` and `GNU.sparse.name`.
//!
//! GNU tar ends its maps with a zero-length segment at the real size;
//! bsdtar does not. Zero-length segments are checked, then dropped.

use super::header::{self, BLOCK};
use super::pax::decimal_u64;

/// Why a sparse map does not fit its member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadMap {
    /// Segment `i`'s end does not fit in 64 bits.
    SegmentOverflows {
        /// The segment's index.
        i: usize,
        /// Its offset.
        off: u64,
        /// Its length.
        len: u64,
    },
    /// Segment `i` ends past the file's real size.
    PastRealSize {
        /// The segment's index.
        i: usize,
        /// Its offset.
        off: u64,
        /// Its length.
        len: u64,
        /// The real size.
        real: u64,
    },
    /// Segment `i` starts before the one before it ends.
    Overlaps {
        /// The segment's index.
        i: usize,
        /// Its offset.
        off: u64,
        /// Where the one before ends.
        end_prev: u64,
    },
    /// The lengths' sum does not fit in 64 bits.
    LengthsOverflow,
    /// The segments hold a different number of bytes than the member.
    StoredDiffers {
        /// What the segments add up to.
        data: u64,
        /// What the member stores.
        stored: u64,
    },
}

impl std::fmt::Display for BadMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadMap::SegmentOverflows { i, off, len } => {
                write!(f, "segment {i} ({off}+{len}) overflows")
            }
            BadMap::PastRealSize { i, off, len, real } => write!(
                f,
                "segment {i} ({off}+{len}) ends past the real size {real}"
            ),
            BadMap::Overlaps { i, off, end_prev } => write!(
                f,
                "segment {i} at {off} overlaps or precedes the one before (ending at {end_prev})"
            ),
            BadMap::LengthsOverflow => f.write_str("segment lengths overflow"),
            BadMap::StoredDiffers { data, stored } => write!(
                f,
                "segments hold {data} bytes but the member stores {stored}"
            ),
        }
    }
}

/// Checks a map against the real size and the stored data: segments in
/// ascending order, not overlapping, each within the real size, their
/// lengths adding up to the stored bytes. Returns it without zero-length
/// segments.
pub fn check_map(
    map: &[(u64, u64)],
    real: u64,
    stored: u64,
) -> Result<Vec<(u64, u64)>, BadMap> {
    let mut end_prev = 0u64;
    let mut data = 0u64;
    for (i, &(off, len)) in map.iter().enumerate() {
        let end = off.checked_add(len).ok_or(BadMap::SegmentOverflows {
            i,
            off,
            len,
        })?;
        if end > real {
            return Err(BadMap::PastRealSize { i, off, len, real });
        }
        if off < end_prev {
            return Err(BadMap::Overlaps { i, off, end_prev });
        }
        end_prev = end;
        data = data.checked_add(len).ok_or(BadMap::LengthsOverflow)?;
    }
    if data != stored {
        return Err(BadMap::StoredDiffers { data, stored });
    }
    Ok(map.iter().copied().filter(|&(_, len)| len > 0).collect())
}

/// Appends the old-GNU pairs of `area` (24 bytes each) to `map`. `ended`
/// is set at the first pair whose `numbytes` starts with NUL; a non-empty
/// pair after it is an error. Returns the pairs added.
pub fn gnu_pairs(
    area: &[u8],
    map: &mut Vec<(u64, u64)>,
    ended: &mut bool,
    max_entries: u64,
) -> Result<usize, SparseError> {
    let mut added = 0;
    for pair in area.chunks_exact(24) {
        if pair[12] == 0 {
            *ended = true;
            continue;
        }
        if *ended {
            return Err(SparseError::Bad(
                "sparse pair after the end of the map".into(),
            ));
        }
        let mut block = [0u8; BLOCK];
        block[..24].copy_from_slice(pair);
        let off = header::field::<u64>(&block, 0..12, "sparse offset")
            .map_err(|e| SparseError::Bad(e.why))?;
        let len = header::field::<u64>(&block, 12..24, "sparse numbytes")
            .map_err(|e| SparseError::Bad(e.why))?;
        push(map, (off, len), max_entries)?;
        added += 1;
    }
    Ok(added)
}

/// Why a map was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum SparseError {
    /// Malformed.
    Bad(String),
    /// More entries than the limit.
    TooMany,
}

/// Adds a pair, refusing to grow past `max_entries`.
pub fn push(
    map: &mut Vec<(u64, u64)>,
    pair: (u64, u64),
    max_entries: u64,
) -> Result<(), SparseError> {
    if map.len() as u64 >= max_entries {
        return Err(SparseError::TooMany);
    }
    map.push(pair);
    Ok(())
}

/// Parses a PAX 0.1 `GNU.sparse.map` value. The entry count is checked
/// against `max_entries` before the map is allocated.
pub fn parse_map_01(
    v: &[u8],
    max_entries: u64,
) -> Result<Vec<(u64, u64)>, SparseError> {
    if v.is_empty() {
        return Ok(Vec::new());
    }
    let numbers = v.iter().filter(|&&b| b == b',').count() + 1;
    if numbers % 2 != 0 {
        return Err(SparseError::Bad(
            "GNU.sparse.map has an odd count of numbers".into(),
        ));
    }
    if (numbers / 2) as u64 > max_entries {
        return Err(SparseError::TooMany);
    }
    let mut map = Vec::with_capacity(numbers / 2);
    let mut it = v.split(|&b| b == b',');
    while let (Some(o), Some(l)) = (it.next(), it.next()) {
        let n = |x: &[u8]| {
            decimal_u64(x).ok_or_else(|| {
                SparseError::Bad(format!(
                    "GNU.sparse.map: {:?} is not a number",
                    String::from_utf8_lossy(x)
                ))
            })
        };
        map.push((n(o)?, n(l)?));
    }
    Ok(map)
}

/// Reads the PAX 1.0 map from the start of a member's data: decimal
/// numbers one a line, the count first, the whole padded to a block.
/// `next_block` yields the member's data blocks in order, and fails once
/// the member's stored size is used up.
pub fn read_map_10(
    mut next_block: impl FnMut() -> Result<[u8; BLOCK], SparseError>,
    max_entries: u64,
) -> Result<Vec<(u64, u64)>, SparseError> {
    let mut buf: Vec<u8> = Vec::with_capacity(BLOCK);
    let mut at = 0usize;
    let mut number = || -> Result<u64, SparseError> {
        loop {
            if let Some(nl) = buf[at..].iter().position(|&b| b == b'\n') {
                let text = &buf[at..at + nl];
                let v = decimal_u64(text).ok_or_else(|| {
                    SparseError::Bad(format!(
                        "sparse map: {:?} is not a number",
                        String::from_utf8_lossy(text)
                    ))
                })?;
                at += nl + 1;
                return Ok(v);
            }
            // A number is at most 20 digits: a longer line is garbage, and
            // stopping here keeps the buffer within two blocks.
            if buf.len() - at > 20 {
                return Err(SparseError::Bad(
                    "sparse map: line too long".into(),
                ));
            }
            buf.drain(..at);
            at = 0;
            buf.extend_from_slice(&next_block()?);
        }
    };
    let count = number()?;
    if count > max_entries {
        return Err(SparseError::TooMany);
    }
    let mut map = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let off = number()?;
        let len = number()?;
        map.push((off, len));
    }
    Ok(map)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn maps_are_validated() {
        assert_eq!(
            check_map(&[(499712, 4096), (1048576, 0)], 1048576, 4096),
            Ok(vec![(499712, 4096)])
        );
        assert!(check_map(&[(0, 10), (5, 10)], 100, 20).is_err(), "overlap");
        assert!(
            check_map(&[(50, 10), (0, 10)], 100, 20).is_err(),
            "descending"
        );
        assert!(check_map(&[(95, 10)], 100, 10).is_err(), "past the end");
        assert!(check_map(&[(0, 10)], 100, 11).is_err(), "stored mismatch");
        assert!(
            check_map(&[(u64::MAX, 2)], u64::MAX, 2).is_err(),
            "overflow"
        );
    }

    #[test]
    fn map_01() {
        assert_eq!(parse_map_01(b"1,2,3,4", 10), Ok(vec![(1, 2), (3, 4)]));
        assert_eq!(parse_map_01(b"1,2,3,4", 1), Err(SparseError::TooMany));
        assert!(matches!(
            parse_map_01(b"1,2,3", 10),
            Err(SparseError::Bad(_))
        ));
        assert!(matches!(
            parse_map_01(b"1,,3,4", 10),
            Err(SparseError::Bad(_))
        ));
    }

    fn blocks(text: &[u8]) -> impl FnMut() -> Result<[u8; BLOCK], SparseError> {
        let mut body = text.to_vec();
        body.resize(text.len().div_ceil(BLOCK) * BLOCK, 0);
        let mut blocks: Vec<[u8; BLOCK]> =
            body.chunks(BLOCK).map(|c| c.try_into().unwrap()).collect();
        blocks.reverse();
        move || blocks.pop().ok_or(SparseError::Bad("end of data".into()))
    }

    #[test]
    fn map_10_across_blocks() {
        // 40 pairs of 16 bytes: numbers straddle the first block's end.
        let mut text = b"40\n".to_vec();
        let want: Vec<(u64, u64)> =
            (0..40).map(|i| (1_000_000_000_000 + i * 10, 7)).collect();
        for (o, l) in &want {
            text.extend_from_slice(format!("{o}\n{l}\n").as_bytes());
        }
        assert!(text.len() > BLOCK);
        assert_eq!(read_map_10(blocks(&text), 40), Ok(want));
        assert_eq!(read_map_10(blocks(&text), 39), Err(SparseError::TooMany));
        // The data ends before the map does.
        assert!(matches!(
            read_map_10(blocks(&text[..BLOCK]), 40),
            Err(SparseError::Bad(_))
        ));
        // A line longer than any number, or one that is not a number.
        let mut long = b"1\n".to_vec();
        long.resize(BLOCK + 10, b'0');
        assert!(matches!(
            read_map_10(blocks(&long), 40),
            Err(SparseError::Bad(_))
        ));
        assert!(matches!(
            read_map_10(blocks(b"1\n\n7\n"), 40),
            Err(SparseError::Bad(_))
        ));
    }
}
