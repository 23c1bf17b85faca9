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
//! marker, a second archive there, bodies on hard links and directories,
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
mod header;
mod member;
mod pax;
mod sparse;
mod write;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::{self, Read, Seek, SeekFrom};

pub use acl::NameTable;
#[cfg(test)]
use acl::acl_from_text;
use acl::acl_to_text;
use header::BLOCK;
use pax::{Record, parse_pax};
use sparse::check_map;
pub use write::{Entry, WriteKind, Writer};

/// The record parsers on their own, for the fuzzer: what they take is
/// untrusted, and the reader's checks are only as good as theirs.
#[cfg(feature = "internals")]
pub mod internals {
    pub use super::acl::acl_from_text;
    pub use super::pax::{parse_pax, parse_time};
}

use crate::ArchiveRefusal;

/// The default bound on what one archive may hold
/// ([`Limits::max_total_bytes`]): 64 GiB, more than a root filesystem
/// holds, and refused before a bomb fills the disk. The unpack's, a
/// profile's and provisioning's defaults are this one.
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 64 << 30;

/// Bounds on what an archive may declare, checked before allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of one PAX extended header, and of all global ones together.
    pub max_pax_bytes: u64,
    /// Bytes of a GNU long name or long link.
    pub max_name_bytes: u64,
    /// Segments in one sparse map.
    pub max_sparse_entries: u64,
    /// Total of the members' declared sizes (real sizes for sparse
    /// members), plus what follows the end of the archive. Set from the
    /// profile's `max_archive_bytes`.
    pub max_total_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_pax_bytes: 1 << 20,
            max_name_bytes: 64 << 10,
            max_sparse_entries: 1 << 20,
            max_total_bytes: DEFAULT_MAX_TOTAL_BYTES,
        }
    }
}

/// What a member is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file (`0`, NUL, `7` contiguous, GNU `S` sparse).
    File,
    /// A hard link to [`Member::link`] (`1`).
    HardLink,
    /// A symbolic link to [`Member::link`] (`2`).
    Symlink,
    /// A character device (`3`).
    CharDevice,
    /// A block device (`4`).
    BlockDevice,
    /// A directory (`5`; GNU `D` dumpdirs too, whose body lists names).
    Directory,
    /// A FIFO (`6`).
    Fifo,
    /// Any other typeflag. GNU tar and libarchive extract these as
    /// regular files; the caller decides.
    Other(u8),
}

/// Extended attributes: name and raw value.
pub type Xattrs = Vec<(Vec<u8>, Vec<u8>)>;

/// One member of the archive, its extended headers applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its real name: PAX `GNU.sparse.name`, else `path`, else a GNU long
    /// name, else the header's `prefix/name`. Never empty, no NUL.
    pub name: Vec<u8>,
    /// The link target of a hard link or symlink.
    pub link: Option<Vec<u8>>,
    /// What it is.
    pub kind: Kind,
    /// Permission and special bits (`& 0o7777`; the type is in `kind`).
    /// With an access ACL, the permission bits are those the ACL gives
    /// (`user::`, `mask::` or else `group::`, `other::`), which is what
    /// the kernel makes of the mode when the ACL is set: bsdtar stores
    /// the `group::` bits in the mode field where the file had the
    /// mask's. Set the mode before the ACL xattr: a later chmod would
    /// narrow the ACL's mask to the mode's group bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Owner's name, possibly empty.
    pub uname: Vec<u8>,
    /// Group's name, possibly empty.
    pub gname: Vec<u8>,
    /// Modification time: seconds (may be negative) and nanoseconds.
    pub mtime: (i64, u32),
    /// Access time, when the archive has one.
    pub atime: Option<(i64, u32)>,
    /// The file's real size (for a sparse file, holes included).
    pub size: u64,
    /// Bytes of data the body yields (for a sparse file, the segments'
    /// data only; a PAX 1.0 map before them is not counted).
    pub stored_size: u64,
    /// For a sparse file, its data segments as `(offset, length)` in the
    /// real file: ascending, not overlapping, within `size`, none empty.
    pub sparse: Option<Vec<(u64, u64)>>,
    /// Extended attributes, name and raw value, each name once; ACLs
    /// stored as text appear here as `system.posix_acl_access` /
    /// `system.posix_acl_default`.
    pub xattrs: Xattrs,
    /// Device major and minor (devices only; 0 otherwise).
    pub dev: (u32, u32),
    /// Offset of the first body byte, counted from where the reader
    /// started (for [`Reader::seekable`], an offset in the file).
    pub data_offset: u64,
    /// Offset of the member's first header (its first extended header).
    pub header_offset: u64,
}

impl Member {
    /// The name for messages.
    pub fn name_lossy(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }

    /// Where the body's bytes go: `(offset in the real file, length,
    /// offset of that data in the archive)`, one item per segment; a
    /// plain file with data is one segment at 0.
    pub fn segments(&self) -> Vec<(u64, u64, u64)> {
        let mut at = self.data_offset;
        match &self.sparse {
            Some(map) => map
                .iter()
                .map(|&(off, len)| {
                    let seg = (off, len, at);
                    at += len;
                    seg
                })
                .collect(),
            None if self.stored_size > 0 => vec![(0, self.stored_size, at)],
            None => Vec::new(),
        }
    }
}

/// What is wrong with an archive.
#[derive(Debug)]
#[non_exhaustive]
pub enum TarErrorKind {
    /// Reading the underlying stream failed (a decompressor's corruption
    /// errors arrive here too).
    Io(io::Error),
    /// The stream ends inside this part of a member.
    Truncated(&'static str),
    /// The header's checksum does not match its bytes.
    Checksum {
        /// The checksum field (`u64::MAX` when not a number).
        stored: u64,
        /// The sum of the bytes.
        computed: u64,
    },
    /// A header field cannot be decoded or is out of range.
    Field {
        /// Its name.
        field: &'static str,
        /// Why.
        why: String,
    },
    /// A PAX extended header is malformed or holds a bad value.
    Pax(String),
    /// A sparse map is malformed or inconsistent.
    Sparse(String),
    /// An ACL record cannot be turned into an xattr.
    Acl(String),
    /// Something else about the member's structure is wrong.
    Malformed(String),
    /// A format feature this reader does not take.
    Unsupported(String),
    /// A bound of [`Limits`] was hit.
    Limit {
        /// What was counted.
        what: &'static str,
        /// The limit.
        limit: u64,
    },
}

/// An error naming the member (when there is one) and its offset.
#[derive(Debug)]
pub struct TarError {
    /// The member's name (lossy), empty before a name is known.
    pub member: String,
    /// Offset of the member's first header, or of the failing block.
    pub offset: u64,
    /// What is wrong.
    pub kind: TarErrorKind,
}

impl fmt::Display for TarErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TarErrorKind::Io(e) => write!(f, "read failed: {e}"),
            TarErrorKind::Truncated(part) => {
                write!(f, "truncated in the {part}")
            }
            TarErrorKind::Checksum { stored, computed } => {
                if *stored == u64::MAX {
                    write!(
                        f,
                        "header checksum field is not a number (bytes sum to {computed})"
                    )
                } else {
                    write!(
                        f,
                        "header checksum mismatch: field says {stored}, bytes sum to {computed}"
                    )
                }
            }
            TarErrorKind::Field { field, why } => {
                write!(f, "bad {field} field: {why}")
            }
            TarErrorKind::Pax(why) => {
                write!(f, "bad PAX extended header: {why}")
            }
            TarErrorKind::Sparse(why) => write!(f, "bad sparse map: {why}"),
            TarErrorKind::Acl(why) => write!(f, "bad ACL: {why}"),
            TarErrorKind::Malformed(why) => f.write_str(why),
            TarErrorKind::Unsupported(why) => write!(f, "unsupported: {why}"),
            TarErrorKind::Limit { what, limit } => {
                write!(f, "{what} exceed the limit of {limit}")
            }
        }
    }
}

impl fmt::Display for TarError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.member.is_empty() {
            write!(f, "at offset {}: {}", self.offset, self.kind)
        } else {
            write!(
                f,
                "member {:?} (header at offset {}): {}",
                self.member, self.offset, self.kind
            )
        }
    }
}

impl std::error::Error for TarError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            TarErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<TarError> for io::Error {
    /// Truncation reads as `UnexpectedEof`, I/O errors keep their kind,
    /// the rest is `InvalidData`; [`TarError::from_io`] gets it back.
    fn from(e: TarError) -> io::Error {
        let kind = match &e.kind {
            TarErrorKind::Truncated(_) => io::ErrorKind::UnexpectedEof,
            TarErrorKind::Io(io) => io.kind(),
            _ => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, e)
    }
}

impl TarError {
    /// The `TarError` inside an `io::Error` from a [`Body`] read, or the
    /// `io::Error` itself as [`TarErrorKind::Io`] (member unknown).
    pub fn from_io(e: io::Error) -> TarError {
        let e = if e.get_ref().is_some_and(|i| i.is::<TarError>()) {
            let kind = e.kind();
            match e.into_inner().map(|i| i.downcast::<TarError>()) {
                Some(Ok(t)) => return *t,
                _ => io::Error::from(kind),
            }
        } else {
            e
        };
        TarError {
            member: String::new(),
            offset: 0,
            kind: TarErrorKind::Io(e),
        }
    }

    /// Is this the stream ending early (in the tar data or beneath it)?
    pub fn is_truncated(&self) -> bool {
        match &self.kind {
            TarErrorKind::Truncated(_) => true,
            TarErrorKind::Io(e) => e.kind() == io::ErrorKind::UnexpectedEof,
            _ => false,
        }
    }

    /// What this error means for the archive as a whole: the member it
    /// met (if any) and either the reason that member is refused
    /// (truncation, limits and corruption each with their
    /// [`ArchiveRefusal`]) or, for a failed read of the file itself, the
    /// I/O error.
    pub fn into_refusal(self) -> (String, Result<ArchiveRefusal, io::Error>) {
        let reason = match self.kind {
            TarErrorKind::Io(e) if e.raw_os_error().is_some() => {
                return (self.member, Err(e));
            }
            TarErrorKind::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                ArchiveRefusal::Truncated {
                    what: format!("compressed stream ({e})"),
                }
            }
            TarErrorKind::Io(e) => ArchiveRefusal::Corrupt(e.to_string()),
            TarErrorKind::Truncated(part) => {
                ArchiveRefusal::Truncated { what: part.into() }
            }
            TarErrorKind::Limit { what, limit } => {
                ArchiveRefusal::LimitExceeded {
                    what: what.into(),
                    limit,
                }
            }
            TarErrorKind::Unsupported(why) => {
                ArchiveRefusal::UnsupportedEntryType(why)
            }
            other => ArchiveRefusal::Corrupt(format!(
                "{other} (at offset {})",
                self.offset
            )),
        };
        (self.member, Ok(reason))
    }
}

/// Something GNU tar and bsdtar read without failing that this reader
/// read too, and what it did about it: told to the caller (the unpack
/// makes a notice of each), never silently.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quirk {
    /// The member it concerns (lossy), empty for the archive as a whole.
    pub member: String,
    /// Offset of the member's first header, or of the bytes concerned.
    pub offset: u64,
    /// What was met and done.
    pub kind: QuirkKind,
}

/// The quirks a [`Reader`] takes, each with what it did.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QuirkKind {
    /// Non-zero bytes after the end-of-archive marker, not a tar header:
    /// ignored, as GNU tar and bsdtar ignore them.
    TrailingData {
        /// Bytes read after the end marker (zeros included).
        bytes: u64,
    },
    /// Another archive follows the end marker (`cat a.tar b.tar`): not
    /// read, as GNU tar without `-i` does not read it.
    ConcatenatedArchive {
        /// The name in the first header that was not read.
        next_member: String,
    },
    /// A hard link or directory declaring a body: the body is skipped.
    BodySkipped {
        /// `hard link` or `directory`.
        what: &'static str,
        /// Bytes skipped.
        bytes: u64,
    },
    /// Two or more GNU long names (`L`) or long links (`K`) for one
    /// member: the last is used, as GNU tar uses it.
    RepeatedLongName {
        /// A long link target rather than a long name.
        link: bool,
    },
    /// A PAX sparse member without `GNU.sparse.name`: extracted under
    /// the name its header gives, as GNU tar extracts it.
    SparseWithoutName,
    /// An old GNU sparse extension block holding no pairs: read as the
    /// end of the map, as GNU tar reads it.
    EmptySparseExtension,
    /// A PAX header with no records and no member after it, before the
    /// end of the archive: ignored.
    EmptyPaxHeader,
    /// A PAX time with junk after the number or more than 9 fraction
    /// digits: its parsable prefix is used (to the nanosecond).
    TimeJunk {
        /// The keyword, `mtime` or `atime`.
        key: String,
        /// The value as the archive has it.
        value: String,
    },
    /// An access or default ACL with named entries and no mask: the mask
    /// is computed as `setfacl` computes it (the union of the group
    /// class's permissions).
    AclMaskComputed,
    /// An ACL entry naming a user or group unknown here and giving no
    /// numeric id: dropped.
    AclEntryDropped {
        /// The entry as the archive has it.
        entry: String,
    },
    /// A Solaris/star ACL header (typeflag `A`): skipped, as GNU tar and
    /// bsdtar skip it.
    SolarisAcl,
    /// The Red Hat PAX keyword `RHT.security.selinux`: read as the
    /// `security.selinux` xattr, as bsdtar reads it.
    SelinuxLabel,
}

impl fmt::Display for QuirkKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuirkKind::TrailingData { bytes } => write!(
                f,
                "{bytes} bytes with non-zero data after the end of the \
                 archive ignored"
            ),
            QuirkKind::ConcatenatedArchive { next_member } => write!(
                f,
                "a second archive after the end of the archive not read \
                 (its first member: {next_member:?}); GNU tar reads it \
                 only with -i"
            ),
            QuirkKind::BodySkipped { what, bytes } => {
                write!(f, "{what} declares a body of {bytes} bytes: skipped")
            }
            QuirkKind::RepeatedLongName { link } => write!(
                f,
                "several GNU long {} records for one member: the last used",
                if *link { "link" } else { "name" }
            ),
            QuirkKind::SparseWithoutName => f.write_str(
                "PAX sparse member without GNU.sparse.name: extracted under \
                 its header name",
            ),
            QuirkKind::EmptySparseExtension => f.write_str(
                "empty GNU sparse extension block read as the end of the map",
            ),
            QuirkKind::EmptyPaxHeader => f.write_str(
                "empty PAX header before the end of the archive ignored",
            ),
            QuirkKind::TimeJunk { key, value } => write!(
                f,
                "PAX {key}={value:?} is not a plain time: its leading \
                 number used"
            ),
            QuirkKind::AclMaskComputed => f.write_str(
                "ACL with named entries and no mask: mask computed as \
                 setfacl does",
            ),
            QuirkKind::AclEntryDropped { entry } => write!(
                f,
                "ACL entry {entry:?} names no id and no one known here: \
                 dropped"
            ),
            QuirkKind::SolarisAcl => {
                f.write_str("Solaris ACL header (typeflag A) skipped")
            }
            QuirkKind::SelinuxLabel => f.write_str(
                "RHT.security.selinux read as the security.selinux xattr",
            ),
        }
    }
}

impl fmt::Display for Quirk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.member.is_empty() {
            write!(f, "at offset {}: {}", self.offset, self.kind)
        } else {
            write!(f, "member {:?}: {}", self.member, self.kind)
        }
    }
}

/// Skips `n` bytes by seeking (only for [`Reader::seekable`]).
type SeekFn<R> = fn(&mut R, u64) -> io::Result<u64>;

/// Reads members one after another from a tar stream.
pub struct Reader<R> {
    inner: R,
    limits: Limits,
    names: Option<NameTable>,
    /// Position of the stream when the reader was made.
    base: u64,
    /// Bytes consumed since.
    pos: u64,
    seek: Option<SeekFn<R>>,
    /// Length of the file (seekable readers), to see truncation before
    /// seeking past the end.
    len: Option<u64>,
    /// Body bytes of the current member not yet read.
    remaining: u64,
    /// Padding after the current member's body.
    padding: u64,
    member: String,
    header_offset: u64,
    /// Global PAX records in force, by keyword.
    globals: BTreeMap<Vec<u8>, Vec<u8>>,
    global_bytes: u64,
    total: u64,
    done: bool,
    failed: bool,
    /// Quirks met and not yet taken by the caller.
    quirks: Vec<Quirk>,
}

impl<R: Read> Reader<R> {
    /// A reader of the tar stream `inner`. Bodies not read are skipped by
    /// reading them. ACL entries that name a user or group without an id
    /// are resolved against the host's `/etc/passwd` and `/etc/group`
    /// (read when first needed); see [`Reader::with_names`].
    pub fn new(inner: R, limits: Limits) -> Self {
        Reader {
            inner,
            limits,
            names: None,
            base: 0,
            pos: 0,
            seek: None,
            len: None,
            remaining: 0,
            padding: 0,
            member: String::new(),
            header_offset: 0,
            globals: BTreeMap::new(),
            global_bytes: 0,
            total: 0,
            done: false,
            failed: false,
            quirks: Vec::new(),
        }
    }

    /// Resolves ACL names with `names` instead of the host's files
    /// ([`NameTable::empty`] refuses them).
    pub fn with_names(mut self, names: NameTable) -> Self {
        self.names = Some(names);
        self
    }

    /// Offset of the next byte the reader will consume, counted like
    /// [`Member::data_offset`].
    pub fn position(&self) -> u64 {
        self.base + self.pos
    }

    /// The stream underneath.
    pub fn into_inner(self) -> R {
        self.inner
    }

    /// The quirks met since the last call (in [`Reader::next`] and
    /// [`Reader::read_rest`]), in order.
    pub fn take_quirks(&mut self) -> Vec<Quirk> {
        std::mem::take(&mut self.quirks)
    }

    /// Notes a quirk of the current member.
    fn quirk(&mut self, kind: QuirkKind) {
        self.quirks.push(Quirk {
            member: self.member.clone(),
            offset: self.header_offset,
            kind,
        });
    }

    fn err(&self, kind: TarErrorKind) -> TarError {
        TarError {
            member: self.member.clone(),
            offset: self.header_offset,
            kind,
        }
    }

    /// Reads until `buf` is full or the stream ends; returns the count.
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize, TarError> {
        let mut n = 0;
        while n < buf.len() {
            match self.inner.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.err(TarErrorKind::Io(e))),
            }
        }
        self.pos += n as u64;
        Ok(n)
    }

    /// A whole block; `part` names it if the stream ends inside it.
    fn block(&mut self, part: &'static str) -> Result<[u8; BLOCK], TarError> {
        let mut b = [0u8; BLOCK];
        if self.fill(&mut b)? != BLOCK {
            return Err(self.err(TarErrorKind::Truncated(part)));
        }
        Ok(b)
    }

    /// Exactly `n` bytes (`n` already checked against a limit).
    fn bytes(
        &mut self,
        n: u64,
        part: &'static str,
    ) -> Result<Vec<u8>, TarError> {
        let len = usize::try_from(n)
            .map_err(|_| self.err(TarErrorKind::Truncated(part)))?;
        let mut v = vec![0u8; len];
        if self.fill(&mut v)? != len {
            return Err(self.err(TarErrorKind::Truncated(part)));
        }
        self.skip(pad(n), part)?;
        Ok(v)
    }

    fn skip(&mut self, n: u64, part: &'static str) -> Result<(), TarError> {
        if n == 0 {
            return Ok(());
        }
        if let Some(seek) = self.seek {
            let to = self
                .position()
                .checked_add(n)
                .ok_or_else(|| self.err(TarErrorKind::Truncated(part)))?;
            if self.len.is_some_and(|len| to > len) {
                return Err(self.err(TarErrorKind::Truncated(part)));
            }
            seek(&mut self.inner, to)
                .map_err(|e| self.err(TarErrorKind::Io(e)))?;
            self.pos += n;
            return Ok(());
        }
        let mut left = n;
        let mut buf = [0u8; 8192];
        while left > 0 {
            let want = left.min(buf.len() as u64) as usize;
            let got = self.fill(&mut buf[..want])?;
            if got == 0 {
                return Err(self.err(TarErrorKind::Truncated(part)));
            }
            left -= got as u64;
        }
        Ok(())
    }

    /// The next member, its extended headers applied; `None` at the end of
    /// the archive. What is left of the previous member's body is skipped
    /// first. After an error the reader stays failed.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Member>, TarError> {
        if self.done {
            return Ok(None);
        }
        if self.failed {
            return Err(self.err(TarErrorKind::Malformed(
                "the reader stopped at an earlier error".into(),
            )));
        }
        let r = self.next_member();
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    fn next_member(&mut self) -> Result<Option<Member>, TarError> {
        self.skip(self.remaining, "body")?;
        self.remaining = 0;
        self.skip(self.padding, "padding")?;
        self.padding = 0;
        self.member.clear();
        let mut ext = Extensions::default();
        let mut first_offset = None;
        loop {
            let offset = self.position();
            self.header_offset = *first_offset.get_or_insert(offset);
            let mut block = [0u8; BLOCK];
            let got = self.fill(&mut block)?;
            if got == 0 || (got == BLOCK && header::is_zero(&block)) {
                // An empty PAX header says nothing: before the end marker
                // it is no sign of a lost member (GNU tar and bsdtar end
                // there quietly).
                let empty_pax = got == BLOCK
                    && ext.long_name.is_none()
                    && ext.long_link.is_none()
                    && ext.pax.as_ref().is_some_and(Vec::is_empty);
                if empty_pax {
                    self.quirk(QuirkKind::EmptyPaxHeader);
                } else if ext.any() {
                    return Err(self.err(TarErrorKind::Truncated(
                        "member after its extended headers",
                    )));
                }
                // GNU tar and libarchive both stop at the first zero
                // block, and accept a stream ending on a block boundary.
                self.done = true;
                return Ok(None);
            }
            if got != BLOCK {
                return Err(self.err(TarErrorKind::Truncated("header")));
            }
            if let Err((stored, computed)) = header::check_sum(&block) {
                if self.member.is_empty() {
                    self.member = lossy(header::cstr(&block[..100]));
                }
                return Err(
                    self.err(TarErrorKind::Checksum { stored, computed })
                );
            }
            let typ = block[156];
            match typ {
                b'x' | b'g' => {
                    self.pax_header(&block, typ == b'g', &mut ext)?
                }
                b'L' | b'K' => self.long_name(&block, typ == b'L', &mut ext)?,
                b'V' => {
                    // A GNU volume label names the archive, not a file.
                    if ext.any() {
                        return Err(self.err(TarErrorKind::Malformed(
                            "extended headers before a volume label".into(),
                        )));
                    }
                    let size = self.stored_size(&block)?;
                    self.count(size)?;
                    self.skip(size, "volume label")?;
                    self.skip(pad(size), "volume label")?;
                    first_offset = None;
                }
                b'A' => {
                    // A Solaris ACL header (star, Solaris tar) for the
                    // member after it: GNU tar and bsdtar skip it as an
                    // unknown extended header, and so does this reader.
                    let size = self.stored_size(&block)?;
                    self.count(size)?;
                    let was = std::mem::replace(
                        &mut self.member,
                        lossy(header::cstr(&block[..100])),
                    );
                    self.skip(size, "Solaris ACL header")?;
                    self.skip(pad(size), "Solaris ACL header")?;
                    self.quirk(QuirkKind::SolarisAcl);
                    self.member = was;
                    first_offset = None;
                }
                b'M' | b'N' => {
                    return Err(self.err(TarErrorKind::Unsupported(format!(
                        "GNU {} member",
                        if typ == b'M' {
                            "multi-volume continuation"
                        } else {
                            "old long-name"
                        }
                    ))));
                }
                _ => return self.member(&block, ext).map(Some),
            }
        }
    }

    /// A PAX extended header (`x`, for the next member) or a global one
    /// (`g`, for every member after it), within their byte limits.
    fn pax_header(
        &mut self,
        block: &[u8; BLOCK],
        is_global: bool,
        ext: &mut Extensions,
    ) -> Result<(), TarError> {
        let size = self.stored_size(block)?;
        let limit = self.limits.max_pax_bytes;
        let left = if is_global {
            limit.saturating_sub(self.global_bytes)
        } else {
            limit
        };
        if size > left {
            return Err(self.err(TarErrorKind::Limit {
                what: if is_global {
                    "global PAX header bytes"
                } else {
                    "PAX extended header bytes"
                },
                limit,
            }));
        }
        let data = self.bytes(size, "PAX extended header")?;
        let records =
            parse_pax(&data).map_err(|why| self.err(TarErrorKind::Pax(why)))?;
        if is_global {
            return self.add_globals(&records);
        }
        if ext.pax.is_some() {
            return Err(self.err(TarErrorKind::Malformed(
                "two PAX extended headers for one member".into(),
            )));
        }
        let owned: Vec<(Vec<u8>, Vec<u8>)> = records
            .iter()
            .map(|r| (r.key.to_vec(), r.value.to_vec()))
            .collect();
        if let Some((_, p)) = owned.iter().rev().find(|(k, _)| k == b"path") {
            self.member = lossy(p);
        }
        ext.pax = Some(owned);
        Ok(())
    }

    /// A GNU long name (`L`) or long link target (`K`) for the next
    /// member. Of two of a kind (Android's tar writes them) the last is
    /// used, as GNU tar uses it.
    fn long_name(
        &mut self,
        block: &[u8; BLOCK],
        is_name: bool,
        ext: &mut Extensions,
    ) -> Result<(), TarError> {
        let size = self.stored_size(block)?;
        if size > self.limits.max_name_bytes {
            return Err(self.err(TarErrorKind::Limit {
                what: "long name bytes",
                limit: self.limits.max_name_bytes,
            }));
        }
        let data = self.bytes(size, "GNU long name")?;
        let name = header::cstr(&data).to_vec();
        let slot = if is_name {
            &mut ext.long_name
        } else {
            &mut ext.long_link
        };
        if slot.is_some() {
            // Said once the member's name is known.
            ext.repeated
                .push(QuirkKind::RepeatedLongName { link: !is_name });
        }
        *slot = Some(name);
        if is_name && let Some(n) = &ext.long_name {
            self.member = lossy(n);
        }
        Ok(())
    }

    fn stored_size(&self, block: &[u8; BLOCK]) -> Result<u64, TarError> {
        header::field::<u64>(block, 124..136, "size")
            .map_err(|e| self.field_err(e))
    }

    fn field_err(&self, e: header::FieldError) -> TarError {
        self.err(TarErrorKind::Field {
            field: e.field,
            why: e.why,
        })
    }

    /// Counts `n` declared bytes against the total limit.
    fn count(&mut self, n: u64) -> Result<(), TarError> {
        let limit = self.limits.max_total_bytes;
        match self.total.checked_add(n) {
            Some(t) if t <= limit => {
                self.total = t;
                Ok(())
            }
            _ => Err(self.err(TarErrorKind::Limit {
                what: "total declared bytes",
                limit,
            })),
        }
    }

    fn add_globals(&mut self, records: &[Record<'_>]) -> Result<(), TarError> {
        for r in records {
            // These make no sense for every member and readers disagree on
            // them (libarchive ignores global headers): refused.
            if matches!(r.key, b"path" | b"linkpath" | b"size")
                || r.key.starts_with(b"GNU.sparse.")
            {
                return Err(self.err(TarErrorKind::Pax(format!(
                    "global header sets {:?}",
                    lossy(r.key)
                ))));
            }
            let old = if r.value.is_empty() {
                self.globals.remove(r.key)
            } else {
                self.globals.insert(r.key.to_vec(), r.value.to_vec())
            };
            if let Some(v) = old {
                self.global_bytes -= (r.key.len() + v.len()) as u64;
            }
            if !r.value.is_empty() {
                self.global_bytes += (r.key.len() + r.value.len()) as u64;
            }
        }
        if self.global_bytes > self.limits.max_pax_bytes {
            return Err(self.err(TarErrorKind::Limit {
                what: "global PAX header bytes",
                limit: self.limits.max_pax_bytes,
            }));
        }
        Ok(())
    }

    /// A reader of the current member's body: exactly its stored bytes
    /// (for a sparse member, its segments' data in order). Ending early
    /// is an `UnexpectedEof` error holding a [`TarError`] naming the
    /// member.
    pub fn body(&mut self) -> Body<'_, R> {
        Body { r: self }
    }

    /// Body bytes of the current member not yet read.
    pub fn body_remaining(&self) -> u64 {
        self.remaining
    }

    /// Skips the rest of the current member's body (the next
    /// [`Reader::next`] would too).
    pub fn skip_body(&mut self) -> Result<(), TarError> {
        let n = self.remaining;
        self.skip(n, "body")?;
        self.remaining = 0;
        Ok(())
    }

    /// After [`Reader::next`] returned `None`: reads the rest of the
    /// stream, so a decompressor beneath reaches its end and checks its
    /// trailer, and returns the stream. See [`Reader::read_rest`].
    pub fn finish(mut self) -> Result<R, TarError> {
        self.read_rest()?;
        Ok(self.inner)
    }

    /// After [`Reader::next`] returned `None`: reads the rest of the
    /// stream to its end, counting it against the total limit (a bomb
    /// hidden after the end marker is still refused), so a decompressor
    /// beneath checks its trailer.
    ///
    /// Zeros there are tar's padding. Anything else is noted as a quirk
    /// and not read as members: GNU tar and bsdtar stop at the first end
    /// marker too (a Maven-built tarball ends with a stray byte, `cat
    /// a.tar b.tar` makes an archive whose second half only `tar -i`
    /// reads). Reading on past an end marker would make an archive mean
    /// something other than what GNU tar extracts from it, so it is not
    /// done; the quirk names the second archive's first member.
    pub fn read_rest(&mut self) -> Result<(), TarError> {
        if !self.done {
            return Err(self.err(TarErrorKind::Malformed(
                "the rest read before the end of the archive".into(),
            )));
        }
        self.member.clear();
        // Whole blocks, so that a header after the marker is seen whole.
        let mut buf = vec![0u8; 128 * BLOCK];
        let start = self.position();
        let mut first_data: Option<u64> = None;
        let mut next_member = None;
        loop {
            let at = self.position();
            let n = self.fill(&mut buf)?;
            if n == 0 {
                break;
            }
            self.count(n as u64)?;
            if first_data.is_some() {
                continue;
            }
            let Some(i) = buf[..n].iter().position(|&b| b != 0) else {
                continue;
            };
            first_data = Some(at + i as u64);
            // A header at a block boundary: another archive.
            let block_start = i - i % BLOCK;
            if let Ok(block) = <[u8; BLOCK]>::try_from(
                &buf[block_start..][..BLOCK.min(n - block_start)],
            ) && header::check_sum(&block).is_ok()
            {
                first_data = Some(at + block_start as u64);
                next_member = Some(lossy(header::cstr(&block[..100])));
            }
        }
        if let Some(off) = first_data {
            self.header_offset = off;
            let kind = match next_member {
                Some(next_member) => {
                    QuirkKind::ConcatenatedArchive { next_member }
                }
                None => QuirkKind::TrailingData {
                    bytes: self.position() - start,
                },
            };
            self.quirk(kind);
        }
        Ok(())
    }
}

impl<R: Read + Seek> Reader<R> {
    /// A reader of a plain tar file: bodies are skipped by seeking, and a
    /// body reaching past the end of the file is refused when its member
    /// is returned. Offsets are offsets in the file.
    pub fn seekable(mut inner: R, limits: Limits) -> io::Result<Self> {
        let base = inner.stream_position()?;
        let len = inner.seek(SeekFrom::End(0))?;
        inner.seek(SeekFrom::Start(base))?;
        let mut r = Reader::new(inner, limits);
        r.base = base;
        r.len = Some(len);
        r.seek = Some(|inner, to| inner.seek(SeekFrom::Start(to)));
        Ok(r)
    }
}

/// The body of the current member; see [`Reader::body`].
pub struct Body<'a, R> {
    r: &'a mut Reader<R>,
}

impl<R: Read> Read for Body<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let r = &mut *self.r;
        if r.remaining == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(r.remaining).unwrap_or(usize::MAX));
        let n = loop {
            match r.inner.read(&mut buf[..want]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    r.failed = true;
                    return Err(r.err(TarErrorKind::Io(e)).into());
                }
                Ok(n) => break n,
            }
        };
        if n == 0 {
            r.failed = true;
            return Err(r.err(TarErrorKind::Truncated("body")).into());
        }
        r.pos += n as u64;
        r.remaining -= n as u64;
        Ok(n)
    }
}

/// Padding after `n` bytes of data, to the next block.
fn pad(n: u64) -> u64 {
    (BLOCK as u64 - n % BLOCK as u64) % BLOCK as u64
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Extension headers seen before a member.
#[derive(Default)]
struct Extensions {
    pax: Option<Vec<(Vec<u8>, Vec<u8>)>>,
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
    /// Long names or links given more than once.
    repeated: Vec<QuirkKind>,
}

impl Extensions {
    fn any(&self) -> bool {
        self.pax.is_some()
            || self.long_name.is_some()
            || self.long_link.is_some()
    }
}

/// What PAX records say about a member, globals first, later records
/// overriding earlier ones.
#[derive(Default)]
struct Overrides {
    path: Option<Vec<u8>>,
    linkpath: Option<Vec<u8>>,
    size: Option<u64>,
    uid: Option<u32>,
    gid: Option<u32>,
    uname: Option<Vec<u8>>,
    gname: Option<Vec<u8>>,
    mtime: Option<(i64, u32)>,
    atime: Option<(i64, u32)>,
    devmajor: Option<u32>,
    devminor: Option<u32>,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    xattr_index: HashMap<Vec<u8>, usize>,
    acl_access: Option<Vec<u8>>,
    acl_default: Option<Vec<u8>>,
    sparse: SparseRecords,
    /// Quirks the records showed, for the reader to report.
    notes: Vec<QuirkKind>,
}

#[derive(Default)]
struct SparseRecords {
    any: bool,
    major: Option<u64>,
    minor: Option<u64>,
    name: Option<Vec<u8>>,
    had_name: bool,
    realsize: Option<u64>,
    size: Option<u64>,
    numblocks: Option<u64>,
    pairs: Vec<(u64, u64)>,
    offset_pending: bool,
    map: Option<Vec<u8>>,
}

enum ApplyError {
    Bad(String),
    TooMany,
}

impl From<String> for ApplyError {
    fn from(s: String) -> Self {
        ApplyError::Bad(s)
    }
}

impl Overrides {
    fn apply(
        &mut self,
        key: &[u8],
        v: &[u8],
        limits: &Limits,
    ) -> Result<(), ApplyError> {
        let bad = |what: &str| {
            ApplyError::Bad(format!("{}={:?}: {what}", lossy(key), lossy(v)))
        };
        let num =
            |v: &[u8]| pax::decimal_u64(v).ok_or_else(|| bad("not a number"));
        let id = |v: &[u8]| {
            pax::decimal_u64(v)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| bad("not a 32-bit number"))
        };
        let name = |v: &[u8]| {
            if v.contains(&0) {
                Err(bad("NUL byte in a name"))
            } else if v.len() as u64 > limits.max_name_bytes {
                Err(ApplyError::Bad(format!(
                    "{} is longer than the name limit of {}",
                    lossy(key),
                    limits.max_name_bytes
                )))
            } else {
                Ok(v.to_vec())
            }
        };
        // An empty value unsets a standard keyword (POSIX); for xattrs it
        // is an empty value, which is valid.
        let empty = v.is_empty();
        match key {
            b"path" => self.path = if empty { None } else { Some(name(v)?) },
            b"linkpath" => {
                self.linkpath = if empty { None } else { Some(name(v)?) }
            }
            b"size" => self.size = if empty { None } else { Some(num(v)?) },
            b"uid" => self.uid = if empty { None } else { Some(id(v)?) },
            b"gid" => self.gid = if empty { None } else { Some(id(v)?) },
            b"uname" => self.uname = (!empty).then(|| v.to_vec()),
            b"gname" => self.gname = (!empty).then(|| v.to_vec()),
            b"mtime" | b"atime" => {
                let t = if empty {
                    None
                } else {
                    let (t, exact) = pax::parse_time_prefix(v)
                        .ok_or_else(|| bad("not a time"))?;
                    if !exact {
                        self.notes.push(QuirkKind::TimeJunk {
                            key: lossy(key),
                            value: lossy(v),
                        });
                    }
                    Some(t)
                };
                if key == b"mtime" {
                    self.mtime = t;
                } else {
                    self.atime = t;
                }
            }
            b"SCHILY.devmajor" => {
                self.devmajor = if empty { None } else { Some(id(v)?) }
            }
            b"SCHILY.devminor" => {
                self.devminor = if empty { None } else { Some(id(v)?) }
            }
            b"SCHILY.acl.access" => {
                self.acl_access = (!empty).then(|| v.to_vec())
            }
            b"SCHILY.acl.default" => {
                self.acl_default = (!empty).then(|| v.to_vec())
            }
            // Red Hat's tar stores the label under its own keyword;
            // bsdtar reads it as the xattr, and so does this reader (GNU
            // tar reads only the SCHILY spelling and drops it).
            b"RHT.security.selinux" => {
                self.set_xattr(b"security.selinux".to_vec(), v.to_vec())?;
                self.notes.push(QuirkKind::SelinuxLabel);
            }
            _ if key.starts_with(b"SCHILY.xattr.") => {
                self.set_xattr(
                    key[b"SCHILY.xattr.".len()..].to_vec(),
                    v.to_vec(),
                )?;
            }
            _ if key.starts_with(b"LIBARCHIVE.xattr.") => {
                let n = pax::url_decode(&key[b"LIBARCHIVE.xattr.".len()..])
                    .ok_or_else(|| bad("bad %-escape in the name"))?;
                let value =
                    pax::base64_decode(v).ok_or_else(|| bad("bad base64"))?;
                self.set_xattr(n, value)?;
            }
            _ if key.starts_with(b"GNU.sparse.") => {
                self.apply_sparse(key, v, limits)?
            }
            // ctime, charset, comment, SCHILY.dev/ino/nlink/fflags, …:
            // nothing to apply, as POSIX says of unknown keywords.
            _ => {}
        }
        Ok(())
    }

    fn set_xattr(
        &mut self,
        name: Vec<u8>,
        value: Vec<u8>,
    ) -> Result<(), ApplyError> {
        if name.is_empty() || name.contains(&0) {
            return Err(ApplyError::Bad(format!(
                "bad xattr name {:?}",
                lossy(&name)
            )));
        }
        // One value per name: bsdtar writes each xattr twice (LIBARCHIVE
        // and SCHILY), and a later record overrides an earlier one.
        match self.xattr_index.get(&name) {
            Some(&i) => self.xattrs[i].1 = value,
            None => {
                self.xattr_index.insert(name.clone(), self.xattrs.len());
                self.xattrs.push((name, value));
            }
        }
        Ok(())
    }

    fn apply_sparse(
        &mut self,
        key: &[u8],
        v: &[u8],
        limits: &Limits,
    ) -> Result<(), ApplyError> {
        let s = &mut self.sparse;
        s.any = true;
        let num = || {
            pax::decimal_u64(v).ok_or_else(|| {
                ApplyError::Bad(format!(
                    "{}={:?}: not a number",
                    lossy(key),
                    lossy(v)
                ))
            })
        };
        match &key[b"GNU.sparse.".len()..] {
            b"major" => s.major = Some(num()?),
            b"minor" => s.minor = Some(num()?),
            b"realsize" => s.realsize = Some(num()?),
            b"size" => s.size = Some(num()?),
            b"numblocks" => {
                let n = num()?;
                if n > limits.max_sparse_entries {
                    return Err(ApplyError::TooMany);
                }
                s.numblocks = Some(n);
            }
            b"name" => {
                if v.is_empty() || v.contains(&0) {
                    return Err(ApplyError::Bad("bad GNU.sparse.name".into()));
                }
                if v.len() as u64 > limits.max_name_bytes {
                    return Err(ApplyError::Bad(
                        "GNU.sparse.name longer than the name limit".into(),
                    ));
                }
                s.name = Some(v.to_vec());
                s.had_name = true;
            }
            b"map" => s.map = Some(v.to_vec()),
            b"offset" => {
                if s.offset_pending {
                    return Err(ApplyError::Bad(
                        "two GNU.sparse.offset records in a row".into(),
                    ));
                }
                let off = num()?;
                sparse::push(&mut s.pairs, (off, 0), limits.max_sparse_entries)
                    .map_err(|_| ApplyError::TooMany)?;
                s.offset_pending = true;
            }
            b"numbytes" => {
                if !s.offset_pending {
                    return Err(ApplyError::Bad(
                        "GNU.sparse.numbytes without an offset".into(),
                    ));
                }
                let len = num()?;
                if let Some(last) = s.pairs.last_mut() {
                    last.1 = len;
                }
                s.offset_pending = false;
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod test;
