//! Extended headers before a member, and what their PAX records say
//! about it (global ones first): applied by the decoding over the header's
//! fields.

use std::collections::HashMap;

use super::header::lossy;
use super::limits::Limits;
use super::pax;
use super::quirk::QuirkKind;
use super::sparse;

/// Extension headers seen before a member.
#[derive(Default)]
pub(super) struct Extensions {
    pub(super) pax: Option<Vec<(Vec<u8>, Vec<u8>)>>,
    pub(super) long_name: Option<Vec<u8>>,
    pub(super) long_link: Option<Vec<u8>>,
    /// Long names or links given more than once.
    pub(super) repeated: Vec<QuirkKind>,
}

impl Extensions {
    pub(super) fn any(&self) -> bool {
        self.pax.is_some()
            || self.long_name.is_some()
            || self.long_link.is_some()
    }
}

/// What PAX records say about a member, globals first, later records
/// overriding earlier ones.
#[derive(Default)]
pub(super) struct Overrides {
    pub(super) path: Option<Vec<u8>>,
    pub(super) linkpath: Option<Vec<u8>>,
    pub(super) size: Option<u64>,
    pub(super) uid: Option<u32>,
    pub(super) gid: Option<u32>,
    pub(super) uname: Option<Vec<u8>>,
    pub(super) gname: Option<Vec<u8>>,
    pub(super) mtime: Option<(i64, u32)>,
    pub(super) atime: Option<(i64, u32)>,
    pub(super) devmajor: Option<u32>,
    pub(super) devminor: Option<u32>,
    pub(super) xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    pub(super) xattr_index: HashMap<Vec<u8>, usize>,
    pub(super) acl_access: Option<Vec<u8>>,
    pub(super) acl_default: Option<Vec<u8>>,
    pub(super) sparse: SparseRecords,
    /// Quirks the records showed, for the reader to report.
    pub(super) notes: Vec<QuirkKind>,
}

#[derive(Default)]
pub(super) struct SparseRecords {
    pub(super) any: bool,
    pub(super) major: Option<u64>,
    pub(super) minor: Option<u64>,
    pub(super) name: Option<Vec<u8>>,
    pub(super) had_name: bool,
    pub(super) realsize: Option<u64>,
    pub(super) size: Option<u64>,
    pub(super) numblocks: Option<u64>,
    pub(super) pairs: Vec<(u64, u64)>,
    pub(super) offset_pending: bool,
    pub(super) map: Option<Vec<u8>>,
}

pub(super) enum ApplyError {
    Bad(String),
    TooMany,
}

impl From<String> for ApplyError {
    fn from(s: String) -> Self {
        ApplyError::Bad(s)
    }
}

/// One PAX record being applied: its keyword and value, and the limits
/// a name in it is held to.
struct Record<'a> {
    key: &'a [u8],
    v: &'a [u8],
    limits: &'a Limits,
}

impl Record<'_> {
    fn bad(&self, what: &str) -> ApplyError {
        ApplyError::Bad(format!(
            "{}={:?}: {what}",
            lossy(self.key),
            lossy(self.v)
        ))
    }

    fn num(&self) -> Result<u64, ApplyError> {
        pax::decimal_u64(self.v).ok_or_else(|| self.bad("not a number"))
    }

    fn id(&self) -> Result<u32, ApplyError> {
        pax::decimal_u64(self.v)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| self.bad("not a 32-bit number"))
    }

    fn name(&self) -> Result<Vec<u8>, ApplyError> {
        if self.v.contains(&0) {
            Err(self.bad("NUL byte in a name"))
        } else if self.v.len() as u64 > self.limits.max_name_bytes {
            Err(ApplyError::Bad(format!(
                "{} is longer than the name limit of {}",
                lossy(self.key),
                self.limits.max_name_bytes
            )))
        } else {
            Ok(self.v.to_vec())
        }
    }
}

impl Overrides {
    pub(super) fn apply(
        &mut self,
        key: &[u8],
        v: &[u8],
        limits: &Limits,
    ) -> Result<(), ApplyError> {
        let r = Record { key, v, limits };
        // An empty value unsets a standard keyword (POSIX); for xattrs it
        // is an empty value, which is valid.
        let empty = v.is_empty();
        match key {
            b"path" => self.path = if empty { None } else { Some(r.name()?) },
            b"linkpath" => {
                self.linkpath = if empty { None } else { Some(r.name()?) }
            }
            b"size" => self.size = if empty { None } else { Some(r.num()?) },
            b"uid" => self.uid = if empty { None } else { Some(r.id()?) },
            b"gid" => self.gid = if empty { None } else { Some(r.id()?) },
            b"uname" => self.uname = (!empty).then(|| v.to_vec()),
            b"gname" => self.gname = (!empty).then(|| v.to_vec()),
            b"mtime" | b"atime" => self.apply_time(&r)?,
            b"SCHILY.devmajor" => {
                self.devmajor = if empty { None } else { Some(r.id()?) }
            }
            b"SCHILY.devminor" => {
                self.devminor = if empty { None } else { Some(r.id()?) }
            }
            b"SCHILY.acl.access" => {
                self.acl_access = (!empty).then(|| v.to_vec())
            }
            b"SCHILY.acl.default" => {
                self.acl_default = (!empty).then(|| v.to_vec())
            }
            _ => self.apply_xattr_or_sparse(&r)?,
        }
        Ok(())
    }

    /// An `mtime` or `atime` record; junk after the time is a quirk
    /// noted, not an error.
    fn apply_time(&mut self, r: &Record<'_>) -> Result<(), ApplyError> {
        let t = if r.v.is_empty() {
            None
        } else {
            let (t, exact) = pax::parse_time_prefix(r.v)
                .ok_or_else(|| r.bad("not a time"))?;
            if !exact {
                self.notes.push(QuirkKind::TimeJunk {
                    key: lossy(r.key),
                    value: lossy(r.v),
                });
            }
            Some(t)
        };
        if r.key == b"mtime" {
            self.mtime = t;
        } else {
            self.atime = t;
        }
        Ok(())
    }

    /// A record of an extended attribute (in any vendor's spelling) or of
    /// a GNU sparse map; any other keyword is ignored.
    fn apply_xattr_or_sparse(
        &mut self,
        r: &Record<'_>,
    ) -> Result<(), ApplyError> {
        let (key, v) = (r.key, r.v);
        match key {
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
                    .ok_or_else(|| r.bad("bad %-escape in the name"))?;
                let value =
                    pax::base64_decode(v).ok_or_else(|| r.bad("bad base64"))?;
                self.set_xattr(n, value)?;
            }
            _ if key.starts_with(b"GNU.sparse.") => {
                self.apply_sparse(key, v, r.limits)?
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
