//! What the reader read past as GNU tar does, told to the caller: a leaf
//! so that the decoding, the ACL parser and the PAX records can note them.

use std::fmt;

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

/// The quirks a `Reader` takes, each with what it did.
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
    /// A member of a kind without a body (a link, device, FIFO,
    /// directory or volume label) declaring one that is there: the body
    /// is skipped.
    BodySkipped {
        /// `hard link`, `directory`, ...
        what: &'static str,
        /// Bytes skipped.
        bytes: u64,
    },
    /// A member of a kind without a body declaring a size, the next
    /// header right after it: read without a body, as GNU tar and
    /// bsdtar read it (nothing after it is lost).
    NoBody {
        /// `hard link`, `directory`, ...
        what: &'static str,
        /// The size its header declares.
        bytes: u64,
    },
    /// The archive ends after a member without the two zero blocks
    /// that mark its end: taken as its end, as GNU tar and bsdtar take
    /// it.
    NoEndMarker,
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
            QuirkKind::NoBody { what, bytes } => write!(
                f,
                "{what} declares a size of {bytes} bytes but has no body \
                 (the next header follows it): read without one, as GNU \
                 tar and bsdtar read it"
            ),
            QuirkKind::NoEndMarker => f.write_str(
                "the archive ends without its end-of-archive blocks: taken \
                 as its end, as GNU tar and bsdtar take it",
            ),
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
