//! A tar member reader for untrusted archives, reading the way GNU tar and
//! libarchive read.
//!
//! It decodes ustar, old GNU and PAX headers (checksums verified, numeric
//! fields octal or GNU base-256 with checked arithmetic), GNU long names
//! and links, PAX local and global extended headers cut by their length
//! prefix (values may hold newlines and NULs), xattrs in their SCHILY and
//! LIBARCHIVE spellings, text POSIX ACLs (turned into the kernel's xattr
//! form), and GNU sparse files in every encoding
//! (old GNU `S`, PAX 0.0, 0.1 and 1.0). A member reports its real name,
//! real size and, when sparse, a checked map.
//!
//! # Bounds
//!
//! Every size read from the archive is checked against [`Limits`] before
//! anything is allocated for it: PAX headers, long names, sparse maps, and
//! the total of the members' declared sizes (a sparse member counts with
//! its real size), so a small archive declaring a huge tree is refused
//! before anything is written. A stream that ends inside a member is an
//! error ("truncated"), never a short file.
//!
//! # Quirks
//!
//! What GNU tar and bsdtar read past, this reader reads too, as GNU tar
//! reads it, and says so: each is a [`Quirk`] naming the member (taken
//! with [`Reader::take_quirks`]), never silence. Bytes after the end
//! marker, a second archive there, no end marker at all, sizes and
//! bodies on links, devices and directories,
//! repeated GNU long names, unusual sparse layouts, empty PAX headers,
//! PAX times with junk, ACLs without a mask or naming unknown users,
//! Solaris ACL headers and Red Hat's SELinux keyword: see
//! [`QuirkKind`]. Nothing here touches what a member's name may be: the
//! caller checks names ([`crate::names`]).
//!
//! # Use
//!
//! ```
//! use std::io::Read;
//! use zinstall_archive::tar::{Kind, Limits, Reader};
//!
//! # fn archive() -> Vec<u8> {
//! #     let mut b = tar::Builder::new(Vec::new());
//! #     let mut h = tar::Header::new_ustar();
//! #     h.set_size(2); h.set_mode(0o644); h.set_cksum();
//! #     b.append_data(&mut h, "a.txt", &b"hi"[..]).unwrap();
//! #     b.into_inner().unwrap()
//! # }
//! let bytes = archive();
//! let mut r = Reader::new(&bytes[..], Limits::default());
//! while let Some(m) = r.next()? {
//!     if m.kind == Kind::File && m.sparse.is_none() {
//!         let mut body = Vec::new();
//!         r.body().read_to_end(&mut body)?;
//!         assert_eq!((m.name.as_slice(), body.as_slice()), (&b"a.txt"[..], &b"hi"[..]));
//!     }
//!     // Bodies not read are skipped by the next call.
//! }
//! r.finish()?; // the rest of the stream read, to its end
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Why not the `tar` crate's reader
//!
//! It splits PAX records at newlines, so a value holding 0x0a (binary
//! capabilities do) loses its record and the ones after it; its header
//! size accessors ignore the PAX `size` (a member with ustar size 0 and
//! PAX size 2048 was extracted empty); its base-256 decoder drops all but
//! the last 8 bytes and the sign; it knows no PAX sparse form. Nothing of
//! it is used here.
//!
//! For a plain tar file, [`Reader::seekable`] skips bodies by seeking and
//! [`Member::data_offset`] (with [`Member::segments`] for sparse members)
//! tells where each body lies, so a caller can copy ranges of the file.

#![forbid(unsafe_code)]

mod acl;
mod decode;
mod error;
mod extended;
mod header;
mod limits;
mod looks;
mod member;
mod pax;
mod quirk;
mod reader;
mod sparse;
mod walk;
mod write;

pub use acl::NameTable;
pub use error::{TarError, TarErrorKind};
/// A tar block's size.
pub use header::BLOCK;
pub use limits::{DEFAULT_MAX_TOTAL_BYTES, Limits};
pub use looks::not_tar;
pub use member::{Kind, Member, Xattrs};
pub use quirk::{Quirk, QuirkKind};
pub use reader::{Body, Reader};
pub use write::{Entry, WriteKind, Writer};

/// The record parsers on their own, for the fuzzer: what they take is
/// untrusted, and the reader's checks are only as good as theirs.
#[cfg(feature = "internals")]
pub mod internals {
    pub use super::acl::acl_from_text;
    pub use super::pax::{parse_pax, parse_time};
}

// What the unit tests build archives and check maps with.
#[cfg(test)]
use {crate::ArchiveRefusal, acl::acl_from_text, sparse::check_map};

#[cfg(test)]
mod test;
