//! The compressing writer, for the formats zinstall writes.

use std::io::{self, Write};

use super::format::Compression;

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
