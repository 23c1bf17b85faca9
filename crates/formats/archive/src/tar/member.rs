//! What the reader returns for each member: its kind, attributes and
//! where its body lies. Plain values, named by the decoding and by callers.

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
    /// started (for `Reader::seekable`, an offset in the file).
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
