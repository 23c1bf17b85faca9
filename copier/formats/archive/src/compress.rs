//! Compressed archives and images: the compression told by the first
//! bytes, never by the name, and a decoder that is read to its very end
//! so that every trailer is checked.
//!
//! - gzip: every member of a multi-member file (what `pigz` and
//!   concatenation make) is decoded; each member's CRC32 and ISIZE are
//!   checked when its end is read, which is why callers must read to the
//!   end (the tar reader's `finish` does).
//! - zstd: every frame, and skippable frames, which `pzstd` puts before
//!   each frame and seekable zstd after the last; a frame's content
//!   checksum, when it has one, is verified by libzstd. A file that
//!   starts with a skippable frame has magic `0x184D2A5?`, not zstd's
//!   `0xFD2FB528`: looking for the latter only, such a file was taken
//!   for an uncompressed tar, and its first block failed the tar header
//!   checksum.
//! - xz: every stream of a multi-stream file, stream padding included;
//!   each block's check (CRC32, CRC64 or SHA-256) is verified.
//!
//! A corrupt stream or trailer reads as an `InvalidData` error saying
//! which format and what is wrong; a stream that ends early as
//! `UnexpectedEof`; an error of the file underneath keeps its errno.

use std::io::{self, Read, Write};
use std::path::Path;

/// How a stream is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// Not compressed.
    None,
    /// gzip (`1f 8b`).
    Gzip,
    /// zstd (`28 b5 2f fd`, or a skippable frame `5? 2a 4d 18`).
    Zstd,
    /// xz (`fd 37 7a 58 5a 00`).
    Xz,
}

impl Compression {
    /// The format's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "uncompressed",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
            Compression::Xz => "xz",
        }
    }
}

const GZIP: &[u8] = &[0x1f, 0x8b];
const ZSTD: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];
const XZ: &[u8] = &[0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00];

/// Bytes of a stream's head that [`compression_of`] looks at.
pub const MAGIC_LEN: usize = 6;

/// The compression of a stream that starts with `head` (at least
/// [`MAGIC_LEN`] bytes when the stream has them).
pub fn compression_of(head: &[u8]) -> Compression {
    if head.starts_with(GZIP) {
        Compression::Gzip
    } else if head.starts_with(ZSTD) || is_skippable_frame(head) {
        Compression::Zstd
    } else if head.starts_with(XZ) {
        Compression::Xz
    } else {
        Compression::None
    }
}

/// A zstd skippable frame: magic `0x184D2A50` to `0x184D2A5F`,
/// little-endian.
fn is_skippable_frame(head: &[u8]) -> bool {
    head.len() >= 4
        && head[0] & 0xf0 == 0x50
        && head[1..4] == [0x2a, 0x4d, 0x18]
}

/// A decompressing reader; see the module documentation.
pub struct Decoder<'a> {
    inner: Box<dyn Read + 'a>,
    format: Compression,
}

/// A decoder of `r` compressed as `c` (`Compression::None` passes the
/// bytes through).
pub fn decompress<'a>(
    r: impl Read + 'a,
    c: Compression,
) -> io::Result<Decoder<'a>> {
    let inner: Box<dyn Read + 'a> = match c {
        Compression::None => Box::new(r),
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(r)),
        // Multi-frame by default; libzstd skips skippable frames and
        // verifies content checksums.
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::new(r)?),
        Compression::Xz => {
            Box::new(liblzma::read::XzDecoder::new_multi_decoder(r))
        }
    };
    Ok(Decoder { inner, format: c })
}

impl Decoder<'_> {
    /// The compression being decoded.
    pub fn compression(&self) -> Compression {
        self.format
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
        assert_eq!(compression_of(b"\xfd7zXZ"), Compression::None);
        assert_eq!(compression_of(b""), Compression::None);
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
        let mut garbage = gzip(b"hello");
        garbage.extend_from_slice(b"junk");
        assert!(read_all(&garbage).is_err());
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
