//! zinstall's archive format: tar members read exactly as GNU tar reads
//! them, the names they may carry, the `zinstall.json` that says what a
//! layer is, and telling compressed streams apart by their bytes.
//!
//! Everything here reads bytes and returns values; nothing touches the
//! filesystem beyond the reader it is given. Where members land is the
//! engine's business (`zinstall_engine::unpack`), which checks every name with
//! [`names::check`] and writes beneath the root's descriptor.
//!
//! * [`tar::Reader`]: members in order, with PAX, GNU long names, every
//!   GNU sparse form, xattrs and ACLs, bounded by [`tar::Limits`].
//! * [`compress`]: gzip, zstd, xz, bzip2 and lz4 told by their magic
//!   bytes and read to their checked end; legacy lzma, lzip, lzop,
//!   compress and legacy lz4 told and refused with the command that
//!   converts them.
//! * [`names`]: a member's name made into checked components, or the
//!   reason it is refused ([`ArchiveRefusal`]).
//! * [`ArchiveMeta`]: a zinstall layer's or baseline's first member.
//!
//! ```
//! use zinstall_archive::compress::{Compression, compression_of};
//! assert_eq!(compression_of(&[0x28, 0xb5, 0x2f, 0xfd, 0, 0]), Compression::Zstd);
//! assert_eq!(compression_of(b"plain!"), Compression::None);
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

/// A stream read and decompressed ahead on a thread of its own.
pub mod ahead;
/// Telling compressed archives and images apart (the one table of magic
/// numbers) and decoding gzip, zstd, xz, bzip2 and lz4, read to their end
/// so that trailers are checked.
pub mod compress;
/// The first member of a zinstall layer or baseline: `zinstall.json`.
pub mod meta;
/// Checking archive names before they touch the filesystem.
pub mod names;
mod refusal;
/// Reading tar members exactly (PAX, GNU long names, every GNU sparse
/// form, xattrs and ACLs), bounded against bombs.
pub mod tar;

pub use meta::{ArchiveKind, ArchiveMeta};
pub use refusal::ArchiveRefusal;
