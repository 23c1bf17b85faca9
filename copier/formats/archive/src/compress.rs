//! Compressed archives and images: the compression told by the first
//! bytes, never by the name, and a decoder that is read to its very end
//! so that every trailer is checked. This is the one table of magic
//! numbers: the unpacker, the OCI reader and provisioning's image
//! detection all ask [`compression_of`] or [`detect`].
//!
//! Read:
//!
//! - gzip (`1f 8b`): every member of a multi-member file (what `pigz`
//!   and concatenation make) is decoded; each member's CRC32 and ISIZE
//!   are checked when its end is read, which is why callers must read to
//!   the end (the tar reader's `finish` does). After the last member,
//!   zeros (padding) and bytes that do not start a member are ignored as
//!   `gzip -d` ignores them ("trailing garbage ignored"), and recorded
//!   ([`Decoder::ignored`]) for the caller to report.
//! - zstd (`28 b5 2f fd`): every frame, and skippable frames, which
//!   `pzstd` puts before each frame and seekable zstd after the last; a
//!   frame's content checksum, when it has one, is verified by libzstd.
//! - xz (`fd 37 7a 58 5a 00`): every stream of a multi-stream file,
//!   stream padding included; each block's check (CRC32, CRC64 or
//!   SHA-256) is verified.
//! - bzip2 (`BZh` and a level, then a block's `1AY&SY` or an empty
//!   stream's end `17 72 45 38 50 90`): every stream of a multi-stream
//!   file (what `pbzip2` and concatenation make); each block's CRC and
//!   each stream's combined CRC are verified.
//! - lz4 frames (`04 22 4d 18`): every frame, skippable frames skipped;
//!   the header checksum, block checksums and content checksum (when the
//!   frame has them) and the content size (when given) are verified, and
//!   a frame without its end mark is truncated, not short.
//!
//! A file that starts with a skippable frame (`5? 2a 4d 18`, shared by
//! zstd and lz4) is told by the first real frame after it: taken for
//! zstd by its skippable frame alone, an lz4 file read as corrupt zstd.
//!
//! Told, not read, and refused with the command that converts them
//! ([`Compression::convert_command`]): legacy lzma (`.lzma`, no integrity
//! check at all), lzip (`LZIP`), lzop (`89 LZO 00 0d 0a 1a 0a`),
//! compress (`1f 9d`, `.Z`) and the legacy lz4 frame (`02 21 4c 18`, no
//! checksum and no end mark, so a truncated file reads as a shorter one).
//! Taken for a tar, their bytes were reported as a damaged tar header.
//!
//! A corrupt stream or trailer reads as an `InvalidData` error saying
//! which format and what is wrong; a stream that ends early as
//! `UnexpectedEof`; an error of the file underneath keeps its errno.

use std::fmt;
use std::io::{self, BufRead, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::ArchiveRefusal;

/// How a stream is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// Not compressed.
    None,
    /// gzip (`1f 8b`).
    Gzip,
    /// zstd (`28 b5 2f fd`, possibly after skippable frames).
    Zstd,
    /// xz (`fd 37 7a 58 5a 00`).
    Xz,
    /// bzip2 (`BZh1` to `BZh9`, then a block or end-of-stream magic).
    Bzip2,
    /// lz4 frames (`04 22 4d 18`, possibly after skippable frames).
    Lz4,
    /// The legacy lz4 frame (`02 21 4c 18`, `lz4 -l`): not read.
    Lz4Legacy,
    /// Legacy lzma (`.lzma`, `xz --format=lzma`): not read.
    Lzma,
    /// lzip (`LZIP` and version 1): not read.
    Lzip,
    /// lzop (`89 4c 5a 4f 00 0d 0a 1a 0a`): not read.
    Lzop,
    /// compress, `.Z` (`1f 9d`): not read.
    Compress,
}

impl Compression {
    /// The format's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "uncompressed",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
            Compression::Xz => "xz",
            Compression::Bzip2 => "bzip2",
            Compression::Lz4 => "lz4",
            Compression::Lz4Legacy => "legacy lz4 (lz4 -l)",
            Compression::Lzma => "legacy lzma (.lzma)",
            Compression::Lzip => "lzip",
            Compression::Lzop => "lzop",
            Compression::Compress => "compress (.Z)",
        }
    }

    /// The usual file name suffix: `.gz`, `.zst`, `.bz2`; empty for
    /// [`Compression::None`].
    pub fn suffix(self) -> &'static str {
        match self {
            Compression::None => "",
            Compression::Gzip => ".gz",
            Compression::Zstd => ".zst",
            Compression::Xz => ".xz",
            Compression::Bzip2 => ".bz2",
            Compression::Lz4 | Compression::Lz4Legacy => ".lz4",
            Compression::Lzma => ".lzma",
            Compression::Lzip => ".lz",
            Compression::Lzop => ".lzo",
            Compression::Compress => ".Z",
        }
    }

    /// Whether [`decompress`] reads it.
    pub fn is_read(self) -> bool {
        self.decompressor().is_none()
    }

    /// For a format that is not read, the command that decompresses it
    /// to standard output (each tool's own, or `gzip`, which reads
    /// `.Z`).
    fn decompressor(self) -> Option<&'static str> {
        match self {
            Compression::Lz4Legacy => Some("lz4 -dc"),
            Compression::Lzma => Some("xz -dc"),
            Compression::Lzip => Some("lzip -dc"),
            Compression::Lzop => Some("lzop -dc"),
            Compression::Compress => Some("gzip -dc"),
            _ => None,
        }
    }

    /// For a format that is not read, the command that converts the file
    /// `path` into a zstd-compressed one zinstall reads:
    /// `lzip -dc x.tar.lz | zstd -o x.tar.zst`.
    pub fn convert_command(self, path: &Path) -> Option<String> {
        let tool = self.decompressor()?;
        let shown = path.to_string_lossy();
        let stem = [
            ".tar.lz4",
            ".tar.lzma",
            ".tlz",
            ".tar.lz",
            ".tar.lzo",
            ".tzo",
            ".tar.Z",
            ".taz",
            ".lz4",
            ".lzma",
            ".lz",
            ".lzo",
            ".Z",
        ]
        .iter()
        .find_map(|s| shown.strip_suffix(s))
        .unwrap_or(&shown);
        let out = if stem.ends_with(".tar") {
            format!("{stem}.zst")
        } else {
            format!("{stem}.tar.zst")
        };
        Some(format!(
            "{tool} {} | zstd -o {}",
            shell_quoted(&shown),
            shell_quoted(&out)
        ))
    }

    /// The refusal of a file `path` compressed in a format that is not
    /// read, naming the format and the command that converts it; `None`
    /// for a format that is read.
    pub fn refusal(self, path: &Path) -> Option<ArchiveRefusal> {
        Some(ArchiveRefusal::UnreadCompression {
            format: self.name().into(),
            convert: self.convert_command(path)?,
        })
    }
}

/// `s` as one shell word: as it is when that is safe, quoted otherwise.
fn shell_quoted(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+,:@%".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

const GZIP: &[u8] = &[0x1f, 0x8b];
const ZSTD: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];
const XZ: &[u8] = &[0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00];
const LZ4: &[u8] = &[0x04, 0x22, 0x4d, 0x18];
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

/// What a decoder read past and ignored, as the format's own tool does;
/// the caller reports it ([`Decoder::ignored`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ignored {
    /// `len` zero bytes after the last gzip member, at byte `at` of the
    /// compressed stream: padding (`gzip -d` ignores it silently).
    GzipPadding {
        /// Where they start in the compressed stream.
        at: u64,
        /// How many.
        len: u64,
    },
    /// `len` bytes after the last gzip member, at byte `at` of the
    /// compressed stream, that do not start a member (`gzip -d`:
    /// "decompression OK, trailing garbage ignored").
    GzipGarbage {
        /// Where they start in the compressed stream.
        at: u64,
        /// How many.
        len: u64,
    },
}

impl fmt::Display for Ignored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ignored::GzipPadding { at, len } => write!(
                f,
                "{len} zero bytes after the last gzip member (at byte {at}) \
                 ignored as padding, as gzip -d ignores them"
            ),
            Ignored::GzipGarbage { at, len } => write!(
                f,
                "{len} bytes after the last gzip member (at byte {at}) are \
                 not a gzip member: ignored, as gzip -d ignores them \
                 (\"trailing garbage ignored\")"
            ),
        }
    }
}

/// Where a decoder records what it ignored; a clone reads it after the
/// decoder has been handed on and read to its end.
#[derive(Clone, Debug, Default)]
pub struct IgnoredLog(Arc<Mutex<Vec<Ignored>>>);

impl IgnoredLog {
    fn push(&self, i: Ignored) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(i);
    }

    /// What was ignored so far, in the order met.
    pub fn take(&self) -> Vec<Ignored> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// A buffered reader whose next bytes can be looked at before a decoder
/// takes them (a gzip member's or lz4 frame's magic may straddle two of
/// the inner reader's buffers), counting the bytes taken, and noting
/// whether a read met the end of the stream.
struct Peeked<R> {
    inner: R,
    /// Bytes looked at and not yet taken, before `inner`'s.
    front: Vec<u8>,
    /// Bytes taken.
    taken: u64,
    /// A read (not a peek) met the end.
    met_end: bool,
}

impl<R: BufRead> Peeked<R> {
    fn new(inner: R) -> Self {
        Peeked {
            inner,
            front: Vec::new(),
            taken: 0,
            met_end: false,
        }
    }

    /// The next `n` bytes, or fewer where the stream ends.
    fn peek(&mut self, n: usize) -> io::Result<&[u8]> {
        while self.front.len() < n {
            let b = self.inner.fill_buf()?;
            if b.is_empty() {
                break;
            }
            let k = b.len().min(n - self.front.len());
            self.front.extend_from_slice(&b[..k]);
            self.inner.consume(k);
        }
        Ok(&self.front[..n.min(self.front.len())])
    }

    /// Reads and discards the rest: how many bytes, and whether `check`
    /// held for every piece of them.
    fn skip_rest(
        &mut self,
        check: impl Fn(&[u8]) -> bool,
    ) -> io::Result<(u64, bool)> {
        let mut n = 0u64;
        let mut all = true;
        loop {
            let b = self.fill_buf()?;
            if b.is_empty() {
                return Ok((n, all));
            }
            all &= check(b);
            let k = b.len();
            n += k as u64;
            self.consume(k);
        }
    }
}

impl<R: BufRead> Read for Peeked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let b = self.fill_buf()?;
        let k = b.len().min(buf.len());
        buf[..k].copy_from_slice(&b[..k]);
        self.consume(k);
        if k == 0 && !buf.is_empty() {
            self.met_end = true;
        }
        Ok(k)
    }
}

impl<R: BufRead> BufRead for Peeked<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.front.is_empty() {
            self.inner.fill_buf()
        } else {
            Ok(&self.front)
        }
    }

    fn consume(&mut self, n: usize) {
        if self.front.is_empty() {
            self.inner.consume(n);
        } else {
            self.front.drain(..n);
        }
        self.taken += n as u64;
    }
}

/// gzip members one after another, as `gzip -d` reads them: after the
/// last, zeros and bytes that are not a member are read, ignored and
/// logged.
struct GzipMembers<R: BufRead> {
    /// The member being read, or (between members) none.
    member: Option<flate2::bufread::GzDecoder<Peeked<R>>>,
    /// The input between members.
    input: Option<Peeked<R>>,
    /// The first member has been started.
    started: bool,
    ignored: IgnoredLog,
}

impl<R: BufRead> GzipMembers<R> {
    fn new(r: R, ignored: IgnoredLog) -> Self {
        GzipMembers {
            member: None,
            input: Some(Peeked::new(r)),
            started: false,
            ignored,
        }
    }

    /// Between members: starts the next one; false at the end, having
    /// read and logged anything after the last member. An error leaves
    /// the input where it was.
    fn next_member(&mut self) -> io::Result<bool> {
        let Some(input) = self.input.as_mut() else {
            return Ok(false);
        };
        let head = input.peek(2)?;
        if head.is_empty() && self.started {
            self.input = None;
            return Ok(false);
        }
        // The first member is read whatever it starts with: its header
        // is checked by the decoder.
        if !self.started || head == GZIP {
            self.started = true;
            self.member =
                self.input.take().map(flate2::bufread::GzDecoder::new);
            return Ok(true);
        }
        let at = input.taken;
        let (len, zeros) = input.skip_rest(|b| b.iter().all(|&x| x == 0))?;
        self.ignored.push(if zeros {
            Ignored::GzipPadding { at, len }
        } else {
            Ignored::GzipGarbage { at, len }
        });
        self.input = None;
        Ok(false)
    }
}

impl<R: BufRead> Read for GzipMembers<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if let Some(m) = &mut self.member {
                let n = m.read(buf)?;
                if n > 0 {
                    return Ok(n);
                }
            }
            // The member's trailer (CRC32, ISIZE) is checked: on to the
            // input after it.
            if let Some(m) = self.member.take() {
                self.input = Some(m.into_inner());
            }
            if !self.next_member()? {
                return Ok(0);
            }
        }
    }
}

/// lz4 frames one after another, skippable frames skipped; `lz4_flex`
/// reads each frame and checks its checksums.
struct Lz4Frames<R: BufRead> {
    frames: lz4_flex::frame::FrameDecoder<Peeked<R>>,
    /// A frame is being read.
    in_frame: bool,
}

/// A skippable frame's magic, lz4's and zstd's, without its low nibble.
const SKIPPABLE: u32 = 0x184d_2a50;

impl<R: BufRead> Lz4Frames<R> {
    fn new(r: R) -> Self {
        Lz4Frames {
            frames: lz4_flex::frame::FrameDecoder::new(Peeked::new(r)),
            in_frame: false,
        }
    }

    /// Between frames: skips skippable frames; false at the end of the
    /// stream, true before an lz4 frame.
    fn next_frame(&mut self) -> io::Result<bool> {
        let input = self.frames.get_mut();
        loop {
            let head = input.peek(8)?;
            if head.is_empty() {
                return Ok(false);
            }
            if head.starts_with(LZ4) {
                return Ok(true);
            }
            if head.len() < 4 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "a frame's magic number is cut off",
                ));
            }
            let magic =
                u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
            if magic & !0xf != SKIPPABLE {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "at byte {}: {magic:#010x} is not an lz4 frame's \
                         magic number",
                        input.taken
                    ),
                ));
            }
            if head.len() < 8 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "a skippable frame's header is cut off",
                ));
            }
            let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            let want = 8 + u64::from(len);
            let got =
                io::copy(&mut input.by_ref().take(want), &mut io::sink())?;
            if got < want {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "a skippable frame is cut off",
                ));
            }
        }
    }
}

impl<R: BufRead> Read for Lz4Frames<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if !self.in_frame {
                if !self.next_frame()? {
                    return Ok(0);
                }
                self.in_frame = true;
            }
            let n = self.frames.read(buf)?;
            if n > 0 {
                return Ok(n);
            }
            // lz4_flex ends a frame at its end mark, having read exactly
            // the frame, but also where the input ends between blocks:
            // only the first is a frame's end.
            if self.frames.get_ref().met_end {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "a frame ends without its end mark",
                ));
            }
            self.in_frame = false;
        }
    }
}

/// Compressed bytes read from the source at a time. Each decoder buffers
/// its input once, with this many bytes (libzstd's own input size), so
/// a caller passes the source unbuffered: a second buffer would copy
/// every byte once more, and one larger than a core's cache would send
/// them through memory between the read and the decoding.
pub const STREAM_BUFFER: usize = 128 << 10;

/// A decompressing reader; see the module documentation.
pub struct Decoder<'a> {
    inner: Box<dyn Read + Send + 'a>,
    format: Compression,
    ignored: IgnoredLog,
}

/// A decoder of `r` compressed as `c` (`Compression::None` passes the
/// bytes through), reading `r` [`STREAM_BUFFER`] bytes at a time. A format that is not read is an `Unsupported` error
/// naming it and the command that decompresses it.
pub fn decompress<'a>(
    r: impl Read + Send + 'a,
    c: Compression,
) -> io::Result<Decoder<'a>> {
    let ignored = IgnoredLog::default();
    let inner: Box<dyn Read + Send + 'a> = match c {
        Compression::None => {
            Box::new(io::BufReader::with_capacity(STREAM_BUFFER, r))
        }
        Compression::Gzip => {
            let r = io::BufReader::with_capacity(STREAM_BUFFER, r);
            Box::new(GzipMembers::new(r, ignored.clone()))
        }
        // Multi-frame by default; libzstd skips skippable frames and
        // verifies content checksums.
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::new(r)?),
        Compression::Xz => {
            Box::new(liblzma::bufread::XzDecoder::new_multi_decoder(
                io::BufReader::with_capacity(STREAM_BUFFER, r),
            ))
        }
        Compression::Bzip2 => Box::new(bzip2::bufread::MultiBzDecoder::new(
            io::BufReader::with_capacity(STREAM_BUFFER, r),
        )),
        Compression::Lz4 => Box::new(Lz4Frames::new(
            io::BufReader::with_capacity(STREAM_BUFFER, r),
        )),
        Compression::Lz4Legacy
        | Compression::Lzma
        | Compression::Lzip
        | Compression::Lzop
        | Compression::Compress => {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "compressed with {}, which zinstall does not read: \
                     decompress it first ({})",
                    c.name(),
                    c.decompressor().unwrap_or_default()
                ),
            ));
        }
    };
    Ok(Decoder {
        inner,
        format: c,
        ignored,
    })
}

impl Decoder<'_> {
    /// The compression being decoded.
    pub fn compression(&self) -> Compression {
        self.format
    }

    /// Where the decoder records what it ignored (after the last gzip
    /// member); read it once the stream has been read to its end.
    pub fn ignored(&self) -> IgnoredLog {
        self.ignored.clone()
    }

    /// Reads and discards the rest of the stream, so that the last
    /// member's, frame's or stream's trailer is checked; returns the
    /// count of decompressed bytes discarded.
    pub fn finish(&mut self) -> io::Result<u64> {
        io::copy(self, &mut io::sink())
    }
}

impl Read for Decoder<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf).map_err(|e| {
            // Errors of the file itself keep their errno, and truncation
            // its kind; anything else is the decoder finding the data bad.
            if self.format == Compression::None
                || e.raw_os_error().is_some()
                || matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::UnexpectedEof
                )
            {
                if e.kind() == io::ErrorKind::UnexpectedEof
                    && self.format != Compression::None
                {
                    return io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("{} stream truncated: {e}", self.format.name()),
                    );
                }
                e
            } else {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{} stream corrupt: {e}", self.format.name()),
                )
            }
        })
    }
}

/// The compression a file name asks for: `.tar.zst`/`.tzst` zstd,
/// `.tar.gz`/`.tgz` gzip, `.tar.xz`/`.txz` xz, `.tar` none; `None` for
/// any other name.
pub fn compression_for_name(name: &Path) -> Option<Compression> {
    let n = name.file_name()?.to_str()?;
    let ends = |sfx: &[&str]| sfx.iter().any(|s| n.ends_with(s));
    if ends(&[".tar.zst", ".tzst"]) {
        Some(Compression::Zstd)
    } else if ends(&[".tar.gz", ".tgz"]) {
        Some(Compression::Gzip)
    } else if ends(&[".tar.xz", ".txz"]) {
        Some(Compression::Xz)
    } else if ends(&[".tar"]) {
        Some(Compression::None)
    } else {
        None
    }
}

/// A compressing writer; [`Encoder::finish`] writes the trailer and
/// returns the output.
pub enum Encoder<W: Write> {
    /// Passed through.
    None(W),
    /// gzip, default level.
    Gzip(flate2::write::GzEncoder<W>),
    /// zstd level 3 with a content checksum.
    Zstd(zstd::stream::write::Encoder<'static, W>),
    /// xz preset 6 with a CRC64 check.
    Xz(liblzma::write::XzEncoder<W>),
}

impl<W: Write> Encoder<W> {
    /// An encoder of `c` onto `w`.
    pub fn new(w: W, c: Compression) -> io::Result<Self> {
        Ok(match c {
            Compression::None => Encoder::None(w),
            Compression::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(
                w,
                flate2::Compression::default(),
            )),
            Compression::Zstd => {
                let mut e = zstd::stream::write::Encoder::new(w, 3)?;
                e.include_checksum(true)?;
                Encoder::Zstd(e)
            }
            Compression::Xz => {
                Encoder::Xz(liblzma::write::XzEncoder::new(w, 6))
            }
            c => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("zinstall does not write {}", c.name()),
                ));
            }
        })
    }

    /// Ends the stream (trailer, checksum) and returns the output.
    pub fn finish(self) -> io::Result<W> {
        match self {
            Encoder::None(w) => Ok(w),
            Encoder::Gzip(e) => e.finish(),
            Encoder::Zstd(e) => e.finish(),
            Encoder::Xz(e) => e.finish(),
        }
    }
}

impl<W: Write> Write for Encoder<W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Encoder::None(w) => w.write(b),
            Encoder::Gzip(e) => e.write(b),
            Encoder::Zstd(e) => e.write(b),
            Encoder::Xz(e) => e.write(b),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Encoder::None(w) => w.flush(),
            Encoder::Gzip(e) => e.flush(),
            Encoder::Zstd(e) => e.flush(),
            Encoder::Xz(e) => e.flush(),
        }
    }
}

/// Reads until `buf` is full or the stream ends.
pub fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod test {
    use super::*;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::fast(),
        );
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn read_all(v: &[u8]) -> io::Result<Vec<u8>> {
        let mut d = decompress(v, compression_of(v))?;
        let mut out = Vec::new();
        d.read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn magic() {
        assert_eq!(compression_of(&[0x1f, 0x8b, 8]), Compression::Gzip);
        assert_eq!(
            compression_of(&[0x28, 0xb5, 0x2f, 0xfd]),
            Compression::Zstd
        );
        assert_eq!(
            compression_of(&[0x50, 0x2a, 0x4d, 0x18]),
            Compression::Zstd
        );
        assert_eq!(
            compression_of(&[0x5e, 0x2a, 0x4d, 0x18]),
            Compression::Zstd
        );
        assert_eq!(
            compression_of(&[0x60, 0x2a, 0x4d, 0x18]),
            Compression::None
        );
        assert_eq!(compression_of(b"\xfd7zXZ\0"), Compression::Xz);
        assert_eq!(compression_of(b"BZh91AY&SY"), Compression::Bzip2);
        // An empty bzip2 stream: end-of-stream magic, then its CRC.
        assert_eq!(
            compression_of(b"BZh9\x17\x72\x45\x38\x50\x90\0\0\0\0"),
            Compression::Bzip2
        );
        assert_eq!(
            compression_of(b"BZh0\x31\x41\x59\x26\x53\x59"),
            Compression::None
        );
        assert_eq!(compression_of(b"BZh9"), Compression::None);
        assert_eq!(
            compression_of(&[4, 0x22, 0x4d, 0x18, 0x64]),
            Compression::Lz4
        );
        assert_eq!(
            compression_of(&[2, 0x21, 0x4c, 0x18]),
            Compression::Lz4Legacy
        );
        assert_eq!(compression_of(b"LZIP\x01\x0c"), Compression::Lzip);
        assert_eq!(
            compression_of(b"\x89LZO\0\r\n\x1a\n\x10"),
            Compression::Lzop
        );
        assert_eq!(compression_of(&[0x1f, 0x9d, 0x90]), Compression::Compress);
        assert_eq!(compression_of(&[0x1f, 0x9d, 0x08]), Compression::None);
        // xz --format=lzma -6: lc=3 lp=0 pb=2, 8 MiB, size unknown.
        let mut lzma = vec![0x5d, 0, 0, 0x80, 0];
        lzma.extend_from_slice(&[0xff; 8]);
        assert_eq!(compression_of(&lzma), Compression::Lzma);
        // 3 MiB (2^n + 2^(n-1)) and a known size.
        let mut lzma3 = vec![0x5d, 0, 0, 0x30, 0];
        lzma3.extend_from_slice(&1000u64.to_le_bytes());
        assert_eq!(compression_of(&lzma3), Compression::Lzma);
        lzma3[3] = 0x31;
        assert_eq!(compression_of(&lzma3), Compression::None);
        assert_eq!(compression_of(&lzma[..12]), Compression::None);
        // Tar heads whose first names start like these formats.
        for name in [&b"]"[..], b"]abcdefghijklm", b"LZIP-notes", b"BZh9x"] {
            let mut block = vec![0u8; 512];
            block[..name.len()].copy_from_slice(name);
            block[257..262].copy_from_slice(b"ustar");
            assert_eq!(compression_of(&block), Compression::None, "{name:?}");
        }
        assert_eq!(compression_of(b"\xfd7zXZ"), Compression::None);
        assert_eq!(compression_of(b""), Compression::None);
    }

    /// Skippable frames are shared by zstd and lz4: the first real frame
    /// after them tells which, however far it is.
    #[test]
    fn skippable_frames_are_looked_past() {
        let skip = |len: u32| {
            let mut v = vec![0x5a, 0x2a, 0x4d, 0x18];
            v.extend_from_slice(&len.to_le_bytes());
            v.resize(8 + len as usize, 7);
            v
        };
        for (real, want) in [
            (&[0x28, 0xb5, 0x2f, 0xfd][..], Compression::Zstd),
            (&[0x04, 0x22, 0x4d, 0x18], Compression::Lz4),
            (&[0x02, 0x21, 0x4c, 0x18], Compression::Lz4Legacy),
        ] {
            let mut near = skip(4);
            near.extend_from_slice(&skip(0));
            near.extend_from_slice(real);
            assert_eq!(compression_of(&near), want);
            let mut far = skip(100_000);
            far.extend_from_slice(&skip(3));
            far.extend_from_slice(real);
            far.extend_from_slice(&[0; 10]);
            let mut c = io::Cursor::new(&far);
            c.set_position(0);
            assert_eq!(detect(&mut c).unwrap(), want);
            assert_eq!(c.position(), 0);
        }
        // Only skippable frames: zstd, whose decoder reads it as empty.
        let only = skip(3);
        assert_eq!(
            detect(&mut io::Cursor::new(&only)).unwrap(),
            Compression::Zstd
        );
        let mut cut = skip(3);
        cut.extend_from_slice(&[0x50, 0x2a, 0x4d]);
        assert_eq!(
            detect(&mut io::Cursor::new(&cut)).unwrap(),
            Compression::Zstd
        );
        let mut plain = io::Cursor::new(b"plain text".to_vec());
        assert_eq!(detect(&mut plain).unwrap(), Compression::None);
    }

    /// The formats not read are refused naming the command that
    /// converts them.
    #[test]
    fn formats_not_read_name_their_converter() {
        let e = decompress(&b""[..], Compression::Lzip).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
        assert!(e.to_string().contains("lzip -dc"), "{e}");
        for (c, path, want) in [
            (
                Compression::Lzip,
                "/a/x.tar.lz",
                "lzip -dc /a/x.tar.lz | zstd -o /a/x.tar.zst",
            ),
            (
                Compression::Lzma,
                "x.tar.lzma",
                "xz -dc x.tar.lzma | zstd -o x.tar.zst",
            ),
            (
                Compression::Lzop,
                "x.tzo",
                "lzop -dc x.tzo | zstd -o x.tar.zst",
            ),
            (
                Compression::Compress,
                "my x.tar.Z",
                "gzip -dc 'my x.tar.Z' | zstd -o 'my x.tar.zst'",
            ),
            (
                Compression::Lz4Legacy,
                "blob",
                "lz4 -dc blob | zstd -o blob.tar.zst",
            ),
        ] {
            assert!(!c.is_read());
            assert_eq!(c.convert_command(Path::new(path)).unwrap(), want);
            let r = c.refusal(Path::new(path)).unwrap().to_string();
            assert!(r.contains(c.name()) && r.contains(want), "{r}");
        }
        for c in [Compression::Gzip, Compression::Bzip2, Compression::Lz4] {
            assert!(c.is_read() && c.refusal(Path::new("x")).is_none());
        }
    }

    #[test]
    fn bzip2_streams_and_crcs() {
        let bz = |d: &[u8]| {
            let mut e = bzip2::write::BzEncoder::new(
                Vec::new(),
                bzip2::Compression::fast(),
            );
            e.write_all(d).unwrap();
            e.finish().unwrap()
        };
        let mut two = bz(b"hello ");
        two.extend_from_slice(&bz(b"world"));
        assert_eq!(compression_of(&two), Compression::Bzip2);
        assert_eq!(read_all(&two).unwrap(), b"hello world");
        // The second stream's combined CRC, just before its end.
        let mut bad = two.clone();
        let n = bad.len();
        bad[n - 2] ^= 0x10;
        let e = read_all(&bad).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        assert!(e.to_string().starts_with("bzip2 stream corrupt"), "{e}");
        let e = read_all(&two[..two.len() - 3]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
    }

    #[test]
    fn lz4_frames_skippable_frames_and_checksums() {
        let lz4 = |d: &[u8], info: lz4_flex::frame::FrameInfo| {
            let mut e = lz4_flex::frame::FrameEncoder::with_frame_info(
                info,
                Vec::new(),
            );
            e.write_all(d).unwrap();
            e.finish().unwrap()
        };
        let checked = lz4_flex::frame::FrameInfo::new()
            .content_checksum(true)
            .block_checksums(true);
        let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let mut v = vec![0x5f, 0x2a, 0x4d, 0x18, 2, 0, 0, 0, 9, 9];
        v.extend_from_slice(&lz4(b"hello ", checked.clone()));
        v.extend_from_slice(&[0x50, 0x2a, 0x4d, 0x18, 0, 0, 0, 0]);
        v.extend_from_slice(&lz4(&big, lz4_flex::frame::FrameInfo::new()));
        assert_eq!(compression_of(&v), Compression::Lz4);
        let out = read_all(&v).unwrap();
        assert_eq!(&out[..6], b"hello ");
        assert_eq!(&out[6..], &big[..]);
        // The content checksum is the frame's last 4 bytes.
        let mut bad = lz4(b"hello", checked.clone());
        let n = bad.len();
        bad[n - 1] ^= 1;
        let e = read_all(&bad).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        // Cut between blocks (before the end mark) and inside a block.
        let whole = lz4(&big, lz4_flex::frame::FrameInfo::new());
        let e = read_all(&whole[..whole.len() - 4]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
        let e = read_all(&whole[..whole.len() - 100]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
        let mut junk = whole.clone();
        junk.extend_from_slice(b"junk");
        let e = read_all(&junk).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    }

    /// Streams cut and flipped at every few bytes: the decoders give
    /// data or one of the promised errors, never a panic or a hang.
    #[test]
    fn damaged_streams_give_errors_of_the_promised_kinds() {
        let data: Vec<u8> =
            (0..20_000u32).map(|i| (i * 7 % 13) as u8).collect();
        let mut lz4 = lz4_flex::frame::FrameEncoder::new(Vec::new());
        lz4.write_all(&data).unwrap();
        let mut bz = bzip2::write::BzEncoder::new(
            Vec::new(),
            bzip2::Compression::fast(),
        );
        bz.write_all(&data).unwrap();
        let mut gz = gzip(&data);
        gz.extend_from_slice(&gzip(b"second"));
        for good in [lz4.finish().unwrap(), bz.finish().unwrap(), gz] {
            let c = compression_of(&good);
            for at in (0..good.len()).step_by(3) {
                let mut flipped = good.clone();
                flipped[at] ^= 0x5a;
                for bytes in [&good[..at], &flipped[..]] {
                    let Ok(mut d) = decompress(bytes, c) else {
                        continue;
                    };
                    if let Err(e) = d.finish() {
                        assert!(
                            matches!(
                                e.kind(),
                                io::ErrorKind::InvalidData
                                    | io::ErrorKind::UnexpectedEof
                            ),
                            "{c:?} at {at}: {e}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn gzip_members_and_trailers() {
        let mut two = gzip(b"hello ");
        two.extend_from_slice(&gzip(b"world"));
        assert_eq!(read_all(&two).unwrap(), b"hello world");
        // CRC32 is the 8 bytes before the end (then ISIZE).
        let mut bad = gzip(b"hello");
        let n = bad.len();
        bad[n - 8] ^= 1;
        let e = read_all(&bad).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        let mut bad = gzip(b"hello");
        let n = bad.len();
        bad[n - 1] ^= 1;
        assert!(read_all(&bad).is_err(), "bad ISIZE");
        let good = gzip(b"hello");
        let e = read_all(&good[..good.len() - 3]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
    }

    /// After the last member, as `gzip -d`: zeros are padding, other
    /// bytes garbage, both read and ignored, and logged; a member after
    /// them is not looked for, but a corrupt member after a good one is
    /// still corrupt.
    #[test]
    fn gzip_trailing_zeros_and_garbage_are_ignored_and_logged() {
        let read_logged = |v: &[u8]| {
            let mut d = decompress(v, Compression::Gzip).unwrap();
            let log = d.ignored();
            let mut out = Vec::new();
            d.read_to_end(&mut out).map(|_| (out, log.take()))
        };
        let one = gzip(b"hello");
        let n = one.len() as u64;
        let mut padded = one.clone();
        padded.extend_from_slice(&[0; 1000]);
        assert_eq!(
            read_logged(&padded).unwrap(),
            (
                b"hello".to_vec(),
                vec![Ignored::GzipPadding { at: n, len: 1000 }]
            )
        );
        let mut garbage = one.clone();
        garbage.extend_from_slice(b"junk\0\0");
        garbage.extend_from_slice(&gzip(b"unseen"));
        let (out, log) = read_logged(&garbage).unwrap();
        assert_eq!(out, b"hello");
        assert_eq!(
            log,
            vec![Ignored::GzipGarbage {
                at: n,
                len: 6 + n + 1
            }]
        );
        assert!(log[0].to_string().contains("trailing garbage ignored"));
        // A single byte after the member is not the start of one either.
        let mut one_byte = one.clone();
        one_byte.push(0x1f);
        assert_eq!(
            read_logged(&one_byte).unwrap().1,
            vec![Ignored::GzipGarbage { at: n, len: 1 }]
        );
        assert_eq!(read_logged(&one).unwrap().1, vec![]);
        let mut bad_second = one.clone();
        let mut second = gzip(b"world");
        let m = second.len();
        second[m - 8] ^= 1;
        bad_second.extend_from_slice(&second);
        let e = read_logged(&bad_second).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    }

    #[test]
    fn zstd_skippable_frames_and_checksum() {
        let mut frame = Vec::new();
        let mut e = zstd::stream::write::Encoder::new(&mut frame, 3).unwrap();
        e.include_checksum(true).unwrap();
        e.write_all(b"hello").unwrap();
        e.finish().unwrap();
        let mut skippable =
            vec![0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 1, 2, 3, 4];
        skippable.extend_from_slice(&frame);
        skippable.extend_from_slice(&frame);
        skippable.extend_from_slice(&[0x5f, 0x2a, 0x4d, 0x18, 0, 0, 0, 0]);
        assert_eq!(read_all(&skippable).unwrap(), b"hellohello");
        // The content checksum is the frame's last 4 bytes.
        let mut bad = frame.clone();
        let n = bad.len();
        bad[n - 1] ^= 1;
        let e = read_all(&bad).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        let e = read_all(&frame[..frame.len() - 2]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
    }

    #[test]
    fn xz_streams() {
        let xz = |d: &[u8]| {
            let mut e = liblzma::write::XzEncoder::new(Vec::new(), 1);
            e.write_all(d).unwrap();
            e.finish().unwrap()
        };
        let mut two = xz(b"hello ");
        two.extend_from_slice(&xz(b"world"));
        assert_eq!(read_all(&two).unwrap(), b"hello world");
        let good = xz(b"hello");
        let mut bad = good.clone();
        // The block's CRC64 sits before the index and footer.
        let n = bad.len();
        bad[n - 30] ^= 1;
        assert!(read_all(&bad).is_err());
        let e = read_all(&good[..good.len() - 5]).unwrap_err();
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::UnexpectedEof | io::ErrorKind::InvalidData
            ),
            "{e}"
        );
    }
}
