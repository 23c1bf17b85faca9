//! The one table of magic numbers: a compression told by a stream's first
//! bytes, skippable frames looked past.

use std::io::{self, Read, Seek, SeekFrom};

use super::format::Compression;
use super::input::read_up_to;

pub(super) const GZIP: &[u8] = &[0x1f, 0x8b];
const ZSTD: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];
const XZ: &[u8] = &[0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00];
pub(super) const LZ4: &[u8] = &[0x04, 0x22, 0x4d, 0x18];
const LZ4_LEGACY: &[u8] = &[0x02, 0x21, 0x4c, 0x18];
const LZOP: &[u8] = &[0x89, 0x4c, 0x5a, 0x4f, 0x00, 0x0d, 0x0a, 0x1a, 0x0a];
/// A bzip2 block's magic (the digits of pi) and an empty stream's
/// end-of-stream magic (those of sqrt(pi)).
const BZIP2_BLOCK: &[u8] = &[0x31, 0x41, 0x59, 0x26, 0x53, 0x59];
const BZIP2_END: &[u8] = &[0x17, 0x72, 0x45, 0x38, 0x50, 0x90];

/// Bytes of a stream's head that [`compression_of`] looks at: enough for
/// every magic, the legacy lzma header (13 bytes) and `pzstd`'s
/// skippable frame before the first real one.
pub const MAGIC_LEN: usize = 64;

/// The compression of a stream that starts with `head` (at least
/// [`MAGIC_LEN`] bytes when the stream has them). Skippable frames
/// inside `head` are looked past; one that reaches beyond it is taken for
/// zstd's (`pzstd`'s and seekable zstd's are the common ones): [`detect`]
/// reads on to the real frame.
pub fn compression_of(head: &[u8]) -> Compression {
    match tell(head, 0) {
        Told::Is(c) => c,
        Told::SkipTo(_) => Compression::Zstd,
    }
}

/// The compression of the stream `r` reads from its current position,
/// which it is left at; skippable frames are sought past, however long.
pub fn detect<R: Read + Seek>(r: &mut R) -> io::Result<Compression> {
    let start = r.stream_position()?;
    let mut head = [0u8; MAGIC_LEN];
    let mut at = 0u64;
    // Each hop passes at least a frame's 8-byte header; a file of
    // nothing but skippable frames ends the walk at its end.
    let told = loop {
        r.seek(SeekFrom::Start(start + at))?;
        let n = read_up_to(r, &mut head)?;
        let told = if at == 0 {
            tell(&head[..n], at)
        } else {
            past_skippable_frames(&head[..n], at)
        };
        match told {
            Told::SkipTo(next) if next > at => at = next,
            // A frame header cut off by the end of the stream: the
            // decoder says it is truncated.
            Told::SkipTo(_) => break Compression::Zstd,
            Told::Is(c) => break c,
        }
    };
    r.seek(SeekFrom::Start(start))?;
    Ok(told)
}

/// What a head says.
enum Told {
    /// This compression.
    Is(Compression),
    /// Skippable frames run past the head: the next frame starts at this
    /// offset of the stream.
    SkipTo(u64),
}

/// Tells `head`, which starts at offset `base` of the stream.
fn tell(head: &[u8], base: u64) -> Told {
    let at = |off: usize, magic: &[u8]| {
        head.get(off..off + magic.len()) == Some(magic)
    };
    if is_skippable_frame(head) {
        return past_skippable_frames(head, base);
    }
    let c = if at(0, GZIP) {
        Compression::Gzip
    } else if at(0, ZSTD) {
        Compression::Zstd
    } else if at(0, XZ) {
        Compression::Xz
    } else if at(0, b"BZh")
        && head.get(3).is_some_and(|l| (b'1'..=b'9').contains(l))
        && (at(4, BZIP2_BLOCK) || at(4, BZIP2_END))
    {
        Compression::Bzip2
    } else if at(0, LZ4) {
        Compression::Lz4
    } else if at(0, LZ4_LEGACY) {
        Compression::Lz4Legacy
    } else if at(0, b"LZIP\x01") {
        // The version byte too: a tar whose first member is named
        // `LZIP...` has a printable character or NUL there.
        Compression::Lzip
    } else if at(0, LZOP) {
        Compression::Lzop
    } else if at(0, &[0x1f, 0x9d]) && head.get(2).is_some_and(|&f| is_lzw(f)) {
        Compression::Compress
    } else if is_lzma_alone(head) {
        Compression::Lzma
    } else {
        Compression::None
    };
    Told::Is(c)
}

/// A zstd or lz4 skippable frame: magic `0x184D2A50` to `0x184D2A5F`,
/// little-endian.
fn is_skippable_frame(head: &[u8]) -> bool {
    head.len() >= 4
        && head[0] & 0xf0 == 0x50
        && head[1..4] == [0x2a, 0x4d, 0x18]
}

/// Walks the skippable frames at the start of `head` (offset `base`) to
/// the first real frame, whose magic tells zstd from lz4.
fn past_skippable_frames(head: &[u8], base: u64) -> Told {
    let mut off = 0usize;
    while is_skippable_frame(&head[off..]) {
        let Some(size) = head.get(off + 4..off + 8) else {
            // The frame's size is cut off by the head: read it again
            // from the frame.
            return Told::SkipTo(base + off as u64);
        };
        let size = u32::from_le_bytes([size[0], size[1], size[2], size[3]]);
        let next = off as u64 + 8 + u64::from(size);
        if next + 4 > head.len() as u64 {
            return Told::SkipTo(base + next);
        }
        off = next as usize;
    }
    let rest = &head[off..];
    Told::Is(if rest.starts_with(LZ4) {
        Compression::Lz4
    } else if rest.starts_with(LZ4_LEGACY) {
        Compression::Lz4Legacy
    } else {
        // zstd's, or neither: libzstd then says what is wrong.
        Compression::Zstd
    })
}

/// compress's flags byte: a code width of 9 to 16 bits, the two reserved
/// bits clear.
fn is_lzw(flags: u8) -> bool {
    (9..=16).contains(&(flags & 0x1f)) && flags & 0x60 == 0
}

/// A legacy `.lzma` header, checked as liblzma's decoder checks it when
/// told to be picky, and more: the properties byte (lc, lp, pb) valid
/// with lc + lp at most 4, a dictionary size of 2^n or 2^n + 2^(n-1) and
/// at least 4 KiB, the uncompressed size unknown (all ones) or under
/// 256 GiB. The format has no magic number; a tar's first member name
/// (printable bytes, then NULs) never passes the dictionary check.
fn is_lzma_alone(head: &[u8]) -> bool {
    if head.len() < 13 || head[0] >= 9 * 5 * 5 {
        return false;
    }
    let (lc, lp) = (head[0] % 9, head[0] / 9 % 5);
    let dict = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
    let mut size = [0u8; 8];
    size.copy_from_slice(&head[5..13]);
    let size = u64::from_le_bytes(size);
    let power = dict.is_power_of_two()
        || (dict.is_multiple_of(3) && (dict / 3).is_power_of_two());
    lc + lp <= 4
        && dict >= 4096
        && power
        && (size == u64::MAX || size < 1 << 38)
}
