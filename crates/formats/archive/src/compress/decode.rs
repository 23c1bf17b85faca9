//! The decompressing reader: each format's decoder behind one `Read`,
//! its errors told apart as the file's, truncation or corruption.

use std::io::{self, Read};

use super::format::Compression;
use super::gzip::GzipMembers;
use super::ignored::IgnoredLog;
use super::lz4::Lz4Frames;

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
