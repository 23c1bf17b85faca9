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

mod decode;
mod encode;
mod format;
mod gzip;
mod ignored;
mod input;
mod lz4;
mod magic;

pub use decode::{Decoder, STREAM_BUFFER, decompress};
pub use encode::Encoder;
pub use format::{Compression, compression_for_name};
pub use ignored::{Ignored, IgnoredLog};
pub use input::read_up_to;
pub use magic::{MAGIC_LEN, compression_of, detect};

#[cfg(test)]
mod test;
