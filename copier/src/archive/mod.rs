//! Unpacking untrusted tar archives (tar, tar.gz, tar.zst) into a root,
//! in parallel, without ever writing outside it.
//!
//! # What stays outside
//!
//! Every name is checked before anything is done with it: an absolute
//! name, or one with a `..` component anywhere, is refused (the long names
//! of PAX and GNU headers included: the checked name is the one the entry
//! ends up with). Directories on the way to an entry are opened beneath
//! the root's descriptor, on Linux with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)`, elsewhere one component at a time with
//! `O_NOFOLLOW`: no symlink is ever followed, so a symlink the archive
//! created (or one already in the root) cannot take a later entry
//! elsewhere. Everything is then made with `*at` calls on that directory
//! descriptor and a single-component name. Hard links must name a target
//! inside the root reached without symlinks. Device nodes need
//! [`UnpackOptions::allow_devices`]. A file never replaces a directory,
//! nor a directory a symlink. The total of the entries' sizes is bounded
//! ([`UnpackOptions::max_bytes`]), against decompression bombs.
//!
//! The first refused entry stops the unpack with an error naming the
//! archive, the entry and the reason.
//!
//! # Parallel bodies
//!
//! One thread reads the stream: it decodes, checks and orders entries, and
//! makes directories, symlinks, hard links and special files itself (they
//! are cheap, and later entries depend on them). A file body up to 1 MiB
//! is read into memory and handed to the worker pool, which creates,
//! writes and finishes files in parallel; bodies in flight are bounded by
//! a shared byte budget, so memory stays flat whatever the archive. A
//! larger body is written by the reader itself, streaming, since the
//! stream cannot be read ahead of it anyway. A hard link waits until every
//! queued file is written, so its target exists. Directory metadata is
//! applied last, deepest first, so that a read-only directory does not
//! stop its own contents.
//!
//! With one thread (`copy_threads = 1`) the reader does everything itself:
//! the serial unpack.

/// Telling and decoding compressed archives and images (gzip, zstd, xz),
/// read to their end so that trailers are checked.
pub mod compress;
mod meta;
pub(crate) mod names;
/// Reading tar members exactly (PAX, GNU long names, every GNU sparse
/// form, xattrs and ACLs), bounded against bombs.
pub mod tar;
mod unpack;

pub use meta::{ArchiveKind, ArchiveMeta};
pub use unpack::{UnpackOptions, UnpackReport, peek_kind, unpack, unpack_from};
