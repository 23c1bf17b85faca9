//! How a header block and the extended headers before it become a
//! [`Member`]: its PAX records applied over the header's fields, its name
//! and link, its attributes, and (for a sparse file) the map read from
//! wherever its format keeps it. One step per function, each refusing
//! what it cannot read with an error naming the member.

use std::io::Read;

use super::acl::{self, NameTable};
use super::error::{TarError, TarErrorKind};
use super::extended::{ApplyError, Extensions, Overrides};
use super::header::{self, BLOCK, Format, lossy, pad};
use super::member::{Kind, Member, Xattrs};
use super::quirk::QuirkKind;
use super::reader::Reader;
use super::sparse::{self, SparseError, check_map};

/// A member's attributes from its header and PAX records.
struct Attributes {
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: (i64, u32),
    atime: Option<(i64, u32)>,
    uname: Vec<u8>,
    gname: Vec<u8>,
    dev: (u32, u32),
}

/// Where a member's data is: its real size, the bytes of data stored
/// after any map, and the segments of a sparse file.
struct Layout {
    real: u64,
    data: u64,
    sparse: Option<Vec<(u64, u64)>>,
}

/// How a sparse member's map is kept.
enum SparseFormat {
    None,
    /// Old GNU (`S` typeflag): in the header and extension blocks.
    OldGnu,
    /// PAX 1.0: at the head of the body.
    Pax10,
    /// PAX 0.1 (`GNU.sparse.map`) or 0.0 (offset/numbytes pairs).
    Pax0,
}

impl<R: Read> Reader<R> {
    /// Builds the member of header `block` with its extensions, reads what
    /// precedes its data (old GNU sparse blocks, a PAX 1.0 map), and sets
    /// up its body.
    pub(super) fn member(
        &mut self,
        block: &[u8; BLOCK],
        ext: Extensions,
    ) -> Result<Member, TarError> {
        let format = header::format(block);
        let typ = block[156];
        let mut o = self.overrides(&ext)?;
        let name = self.member_name(block, format, &mut o, ext.long_name)?;
        // Reported once the member's name is known.
        for q in ext.repeated.into_iter().chain(std::mem::take(&mut o.notes)) {
            self.quirk(q);
        }
        let kind = kind_of(typ, name.last() == Some(&b'/'));
        let link = self.link(block, kind, &mut o, ext.long_link)?;
        let attrs = self.attributes(block, format, kind, &mut o)?;
        let stored = match o.size {
            Some(s) => s,
            None => self.stored_size(block)?,
        };
        let bodiless = bodiless(kind, typ);
        let xattrs = self.xattrs(&mut o)?;
        let mode = match xattrs
            .iter()
            .find(|(n, _)| n == b"system.posix_acl_access")
            .and_then(|(_, v)| acl::acl_mode_bits(v))
        {
            Some(bits) => attrs.mode & 0o7000 | bits,
            None => attrs.mode,
        };
        let kept = if bodiless.is_some() { 0 } else { stored };
        let layout = self.layout(block, typ, format, kind, &mut o, kept)?;
        if let Some(what) = bodiless
            && stored > 0
        {
            let kind = if self.body_follows(stored)? {
                QuirkKind::BodySkipped {
                    what,
                    bytes: stored,
                }
            } else {
                QuirkKind::NoBody {
                    what,
                    bytes: stored,
                }
            };
            self.quirk(kind);
        }
        let data_offset = self.position();
        if let Some(len) = self.len
            && data_offset
                .checked_add(layout.data)
                .is_none_or(|end| end > len)
        {
            return Err(self.err(TarErrorKind::Truncated("body")));
        }
        self.remaining = layout.data;
        self.padding = pad(kept);
        Ok(Member {
            name,
            link,
            kind,
            mode,
            uid: attrs.uid,
            gid: attrs.gid,
            uname: attrs.uname,
            gname: attrs.gname,
            mtime: attrs.mtime,
            atime: attrs.atime,
            size: layout.real,
            stored_size: layout.data,
            sparse: layout.sparse,
            xattrs,
            dev: attrs.dev,
            data_offset,
            header_offset: self.header_offset,
        })
    }

    /// The global PAX records, then the member's own, applied in order.
    fn overrides(&mut self, ext: &Extensions) -> Result<Overrides, TarError> {
        let mut o = Overrides::default();
        let globals = std::mem::take(&mut self.globals);
        let applied = globals
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
            .chain(
                ext.pax
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.as_slice(), v.as_slice())),
            )
            .try_for_each(|(k, v)| o.apply(k, v, &self.limits));
        self.globals = globals;
        applied.map_err(|e| match e {
            ApplyError::Bad(why) => self.err(TarErrorKind::Pax(why)),
            ApplyError::TooMany => self.err(TarErrorKind::Limit {
                what: "sparse map entries",
                limit: self.limits.max_sparse_entries,
            }),
        })?;
        if o.sparse.offset_pending {
            return Err(self.err(TarErrorKind::Pax(
                "GNU.sparse.offset without GNU.sparse.numbytes".into(),
            )));
        }
        Ok(o)
    }

    /// The real name: `GNU.sparse.name`, else `path`, else a GNU long
    /// name, else the header's; never empty, no NUL. Errors from here on
    /// name the member by it.
    fn member_name(
        &mut self,
        block: &[u8; BLOCK],
        format: Format,
        o: &mut Overrides,
        long_name: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, TarError> {
        let name = o
            .sparse
            .name
            .take()
            .or(o.path.take())
            .or(long_name)
            .unwrap_or_else(|| header::name(block, format));
        self.member = lossy(&name);
        if name.is_empty() {
            return Err(self.err(TarErrorKind::Malformed("empty name".into())));
        }
        if name.contains(&0) {
            return Err(self
                .err(TarErrorKind::Malformed("NUL byte in the name".into())));
        }
        Ok(name)
    }

    /// A hard link's or symlink's target: `linkpath`, else a GNU long
    /// link, else the header's.
    fn link(
        &self,
        block: &[u8; BLOCK],
        kind: Kind,
        o: &mut Overrides,
        long_link: Option<Vec<u8>>,
    ) -> Result<Option<Vec<u8>>, TarError> {
        if !matches!(kind, Kind::HardLink | Kind::Symlink) {
            return Ok(None);
        }
        let l = o
            .linkpath
            .take()
            .or(long_link)
            .unwrap_or_else(|| header::cstr(&block[157..257]).to_vec());
        if l.contains(&0) {
            return Err(self.err(TarErrorKind::Malformed(
                "NUL byte in the link target".into(),
            )));
        }
        Ok(Some(l))
    }

    /// Mode, owners, times and device numbers: PAX records over the
    /// header's fields.
    fn attributes(
        &self,
        block: &[u8; BLOCK],
        format: Format,
        kind: Kind,
        o: &mut Overrides,
    ) -> Result<Attributes, TarError> {
        let f = |r: std::ops::Range<usize>, n| {
            header::field::<u32>(block, r, n).map_err(|e| self.field_err(e))
        };
        let time = |r: std::ops::Range<usize>, n| {
            header::field::<i64>(block, r, n).map_err(|e| self.field_err(e))
        };
        let mode = f(100..108, "mode")? & 0o7777;
        let uid = match o.uid {
            Some(v) => v,
            None => f(108..116, "uid")?,
        };
        let gid = match o.gid {
            Some(v) => v,
            None => f(116..124, "gid")?,
        };
        let mtime = match o.mtime {
            Some(t) => t,
            None => (time(136..148, "mtime")?, 0),
        };
        let atime = match o.atime {
            Some(t) => Some(t),
            None if format == Format::Gnu && block[345] != 0 => {
                Some((time(345..357, "atime")?, 0))
            }
            None => None,
        };
        let (uname, gname) = if format == Format::V7 {
            (Vec::new(), Vec::new())
        } else {
            (
                header::cstr(&block[265..297]).to_vec(),
                header::cstr(&block[297..329]).to_vec(),
            )
        };
        let dev = match kind {
            Kind::CharDevice | Kind::BlockDevice if format != Format::V7 => (
                match o.devmajor {
                    Some(v) => v,
                    None => f(329..337, "devmajor")?,
                },
                match o.devminor {
                    Some(v) => v,
                    None => f(337..345, "devminor")?,
                },
            ),
            _ => (0, 0),
        };
        Ok(Attributes {
            mode,
            uid,
            gid,
            mtime,
            atime,
            uname: o.uname.take().unwrap_or(uname),
            gname: o.gname.take().unwrap_or(gname),
            dev,
        })
    }

    /// The member's xattrs, with text ACLs turned into xattrs unless the
    /// raw `system.posix_acl_*` xattr is there too (it is exact; GNU tar
    /// with `--xattrs-include='*'` stores both).
    fn xattrs(&mut self, o: &mut Overrides) -> Result<Xattrs, TarError> {
        let mut xattrs = std::mem::take(&mut o.xattrs);
        for (text, name) in [
            (o.acl_access.take(), &b"system.posix_acl_access"[..]),
            (o.acl_default.take(), &b"system.posix_acl_default"[..]),
        ] {
            let Some(text) = text else { continue };
            if xattrs.iter().any(|(n, _)| n == name) {
                continue;
            }
            let names = self.names.get_or_insert_with(NameTable::host);
            let mut notes = Vec::new();
            let v = acl::acl_from_text_noting(&text, names, &mut notes)
                .map_err(|why| self.err(TarErrorKind::Acl(why.to_string())))?;
            for q in notes {
                self.quirk(q);
            }
            if let Some(v) = v {
                xattrs.push((name.to_vec(), v));
            }
        }
        Ok(xattrs)
    }

    /// The member's real size and where its data is: for a sparse file,
    /// which of the sparse formats it uses, checked against the others,
    /// and its map read and checked against its sizes. The real size is
    /// counted against the total limit before any map is read.
    fn layout(
        &mut self,
        block: &[u8; BLOCK],
        typ: u8,
        format: Format,
        kind: Kind,
        o: &mut Overrides,
        stored: u64,
    ) -> Result<Layout, TarError> {
        let how = self.sparse_format(typ, format, kind, o)?;
        let sp = &o.sparse;
        let real = match how {
            SparseFormat::OldGnu => {
                header::field::<u64>(block, 483..495, "realsize")
                    .map_err(|e| self.field_err(e))?
            }
            SparseFormat::Pax10 | SparseFormat::Pax0 => {
                sp.realsize.or(sp.size).ok_or_else(|| {
                    self.err(TarErrorKind::Sparse(
                        "no GNU.sparse.realsize or .size".into(),
                    ))
                })?
            }
            SparseFormat::None => stored,
        };
        // `GNU.sparse.name` went into the name; without it the name is
        // the placeholder `GNUSparseFile.NNNN/...` GNU tar wrote.
        let needs_name = matches!(how, SparseFormat::Pax10)
            || matches!(how, SparseFormat::Pax0) && sp.map.is_some();
        if needs_name && !sp.had_name {
            // GNU tar extracts it under the name it has (path, long name
            // or header): so does this reader, and says so.
            self.quirk(QuirkKind::SparseWithoutName);
        }
        // Before anything more is read or allocated for this member.
        self.count(real.max(stored))?;
        let (map, map_bytes) = match how {
            SparseFormat::None => {
                return Ok(Layout {
                    real,
                    data: stored,
                    sparse: None,
                });
            }
            SparseFormat::OldGnu => (self.old_gnu_map(block)?, 0),
            SparseFormat::Pax10 => self.pax10_map(stored)?,
            SparseFormat::Pax0 => match &o.sparse.map {
                Some(text) => (
                    sparse::parse_map_01(text, self.limits.max_sparse_entries)
                        .map_err(|e| self.sparse_err(e))?,
                    0,
                ),
                None => (std::mem::take(&mut o.sparse.pairs), 0),
            },
        };
        let data = stored - map_bytes;
        if let Some(n) = o.sparse.numblocks
            && !matches!(how, SparseFormat::Pax10)
            && n != map.len() as u64
        {
            return Err(self.err(TarErrorKind::Sparse(format!(
                "GNU.sparse.numblocks is {n} but the map has {} entries",
                map.len()
            ))));
        }
        let sparse = check_map(&map, real, data)
            .map_err(|why| self.err(TarErrorKind::Sparse(why.to_string())))?;
        Ok(Layout {
            real,
            data,
            sparse: Some(sparse),
        })
    }

    /// Which sparse format the member uses, if any; two at once, a map on
    /// something that is not a file, or a version other than 1.0 is
    /// refused.
    fn sparse_format(
        &self,
        typ: u8,
        format: Format,
        kind: Kind,
        o: &Overrides,
    ) -> Result<SparseFormat, TarError> {
        let sp = &o.sparse;
        let version10 = match (sp.major, sp.minor) {
            (None, None) => false,
            (Some(1), Some(0)) => true,
            (major, minor) => {
                return Err(self.err(TarErrorKind::Unsupported(format!(
                    "GNU sparse format {}.{}",
                    major.map_or("?".into(), |v| v.to_string()),
                    minor.map_or("?".into(), |v| v.to_string())
                ))));
            }
        };
        let old_gnu = typ == b'S';
        if (sp.any || old_gnu) && kind != Kind::File {
            return Err(self
                .err(TarErrorKind::Sparse("sparse map on a non-file".into())));
        }
        if sp.any && old_gnu {
            return Err(self.err(TarErrorKind::Sparse(
                "both an old GNU and a PAX sparse map".into(),
            )));
        }
        if old_gnu && format != Format::Gnu {
            return Err(self.err(TarErrorKind::Sparse(
                "sparse typeflag on a header without the GNU magic".into(),
            )));
        }
        Ok(if old_gnu {
            SparseFormat::OldGnu
        } else if version10 {
            SparseFormat::Pax10
        } else if sp.any {
            SparseFormat::Pax0
        } else {
            SparseFormat::None
        })
    }

    fn sparse_err(&self, e: SparseError) -> TarError {
        match e {
            SparseError::Bad(why) => self.err(TarErrorKind::Sparse(why)),
            SparseError::TooMany => self.err(TarErrorKind::Limit {
                what: "sparse map entries",
                limit: self.limits.max_sparse_entries,
            }),
        }
    }

    /// An old GNU sparse map: four pairs in the header, then extension
    /// blocks while each says another follows.
    fn old_gnu_map(
        &mut self,
        block: &[u8; BLOCK],
    ) -> Result<Vec<(u64, u64)>, TarError> {
        let max_entries = self.limits.max_sparse_entries;
        let mut map = Vec::new();
        let mut ended = false;
        sparse::gnu_pairs(&block[386..482], &mut map, &mut ended, max_entries)
            .map_err(|e| self.sparse_err(e))?;
        let mut extended = block[482] != 0;
        while extended {
            let ext_block = self.block("sparse extension block")?;
            let added = sparse::gnu_pairs(
                &ext_block[..504],
                &mut map,
                &mut ended,
                max_entries,
            )
            .map_err(|e| self.sparse_err(e))?;
            extended = ext_block[504] != 0;
            if added == 0 {
                // GNU tar stops reading the map at a block with no pair
                // (what follows is data); one that says another block
                // follows would be read otherwise by libarchive, so it
                // is refused.
                if extended {
                    return Err(self.err(TarErrorKind::Sparse(
                        "empty extension block followed by another".into(),
                    )));
                }
                self.quirk(QuirkKind::EmptySparseExtension);
            }
        }
        Ok(map)
    }

    /// A PAX 1.0 sparse map, read from the head of the body (never past
    /// the member's stored bytes), and how many bytes it took.
    fn pax10_map(
        &mut self,
        stored: u64,
    ) -> Result<(Vec<(u64, u64)>, u64), TarError> {
        let max_entries = self.limits.max_sparse_entries;
        let mut consumed = 0u64;
        // The reader's own error (truncation) is kept whole.
        let mut failure = None;
        let map = sparse::read_map_10(
            || {
                consumed += BLOCK as u64;
                if consumed > stored {
                    return Err(SparseError::Bad(
                        "map runs past the member's data".into(),
                    ));
                }
                self.block("sparse map").map_err(|e| {
                    failure = Some(e);
                    SparseError::Bad(String::new())
                })
            },
            max_entries,
        );
        if let Some(e) = failure {
            return Err(e);
        }
        Ok((map.map_err(|e| self.sparse_err(e))?, consumed))
    }
}

/// What a member is called in a notice, for the kinds that carry no
/// body in GNU tar or bsdtar whatever their size field says; `None` for
/// those that carry one in both.
///
/// Measured with GNU tar 1.34 and bsdtar 3.6.2 (libarchive): a header
/// of each typeflag with size 512 and no body, then two files, each
/// archive extracted by both (`crates/engine/tests/tar_types.rs` runs this
/// again). "body" means the next header was taken for its body (that
/// member lost), "none" that it was read as the next member:
///
/// | typeflag                              | GNU tar | bsdtar |
/// |---------------------------------------|---------|--------|
/// | `0`, NUL, `7`, `S`, `D`               | body    | body   |
/// | `1`, `2`, `3`, `4`, `5`, `6`          | none    | none   |
/// | `x`, `g`, `K`, `L`, `X`               | body    | body   |
/// | `M`, `N`                              | body    | body   |
/// | `V` (volume label)                    | body    | none   |
/// | `A` (Solaris ACL) and unknown letters | body    | body   |
///
/// `V` is read as bsdtar reads it (nothing lost; walk.rs), and `M`
/// and `N` are refused whole. For the kinds here, a body that is really
/// there (old archivers wrote the file's data after a hard link) is
/// skipped as both tars skip it, by the check in `body_follows`.
pub(super) fn bodiless(kind: Kind, typ: u8) -> Option<&'static str> {
    match kind {
        Kind::HardLink => Some("hard link"),
        Kind::Symlink => Some("symbolic link"),
        Kind::CharDevice => Some("character device"),
        Kind::BlockDevice => Some("block device"),
        Kind::Fifo => Some("FIFO"),
        // A GNU dumpdir's body lists the directory's names.
        Kind::Directory if typ != b'D' => Some("directory"),
        _ => None,
    }
}

/// The kind a typeflag gives (a plain file whose name ends in `/` is a
/// directory, as old archivers wrote them).
fn kind_of(typ: u8, ends_with_slash: bool) -> Kind {
    match typ {
        b'0' | 0 if ends_with_slash => Kind::Directory,
        b'0' | 0 | b'7' | b'S' => Kind::File,
        b'1' => Kind::HardLink,
        b'2' => Kind::Symlink,
        b'3' => Kind::CharDevice,
        b'4' => Kind::BlockDevice,
        b'5' | b'D' => Kind::Directory,
        b'6' => Kind::Fifo,
        other => Kind::Other(other),
    }
}
