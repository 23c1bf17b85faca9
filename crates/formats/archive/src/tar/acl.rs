//! POSIX ACLs from their text form in PAX records to the kernel's xattr
//! form.
//!
//! Two writers, two dialects of the same text (`tag:qualifier:perms`):
//!
//! - GNU tar (`--acls`) stores `acl_to_text(3)` output in
//!   `SCHILY.acl.access` / `SCHILY.acl.default`: one entry a line, named
//!   entries by name (`user:uucp:rwx`), or by number when the id has no
//!   name on the writing host. With `--xattrs-include='*'` it also stores
//!   the raw `system.posix_acl_*` xattrs.
//! - star and bsdtar store the same keys comma-separated, in no set order,
//!   with the numeric id as a fourth field on named entries
//!   (`user:uucp:rwx:10`).
//!
//! Ids: a fourth field wins, always (the id is what the writer saw; the
//! name on this host may be someone else). Without one, a numeric
//! qualifier is the id. Only a bare name is looked up, in a [`NameTable`]
//! (the host's `/etc/passwd` and `/etc/group` by default, as GNU tar and
//! bsdtar do when they extract); an entry whose name it does not know is
//! dropped, with a quirk saying so, as GNU tar warns and goes on.
//!
//! Named entries without a mask (as star may write them) get the mask
//! `setfacl` computes: the union of the permissions of the group class
//! (named users, the owning group, named groups).
//!
//! The result is the kernel's `posix_acl_xattr` layout: a little-endian
//! `u32` version 2, then `u16 tag, u16 perm, u32 id` entries sorted by tag
//! then id, `u32::MAX` as the id of the unnamed entries.

use std::collections::HashMap;

use super::quirk::QuirkKind;

const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const GROUP: u16 = 0x08;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;
const UNDEFINED_ID: u32 = u32::MAX;
const VERSION: u32 = 2;

/// User and group names to ids, for ACL entries that give only a name.
#[derive(Clone, Debug, Default)]
pub struct NameTable {
    users: HashMap<Vec<u8>, u32>,
    groups: HashMap<Vec<u8>, u32>,
}

impl NameTable {
    /// A table that knows no names: ACL entries naming a user or group
    /// without an id are refused.
    pub fn empty() -> Self {
        NameTable::default()
    }

    /// Parses `passwd(5)` and `group(5)` contents (the first and third
    /// fields of each line). Malformed lines are skipped; the first line
    /// for a name wins, as with `getpwnam(3)` on files.
    pub fn parse(passwd: &[u8], group: &[u8]) -> Self {
        fn table(text: &[u8]) -> HashMap<Vec<u8>, u32> {
            let mut m = HashMap::new();
            for line in text.split(|&b| b == b'\n') {
                let mut f = line.split(|&b| b == b':');
                let (Some(name), Some(_), Some(id)) =
                    (f.next(), f.next(), f.next())
                else {
                    continue;
                };
                let id = std::str::from_utf8(id)
                    .ok()
                    .and_then(|s| s.parse::<u32>().ok());
                if let Some(id) = id
                    && !name.is_empty()
                {
                    m.entry(name.to_vec()).or_insert(id);
                }
            }
            m
        }
        NameTable {
            users: table(passwd),
            groups: table(group),
        }
    }

    /// The host's `/etc/passwd` and `/etc/group`; a file that cannot be
    /// read contributes no names.
    // The host's own account files, not a file anyone named.
    #[allow(clippy::disallowed_methods)]
    pub fn host() -> Self {
        let passwd = std::fs::read("/etc/passwd").unwrap_or_default();
        let group = std::fs::read("/etc/group").unwrap_or_default();
        NameTable::parse(&passwd, &group)
    }

    /// The uid of a user name.
    pub fn uid(&self, name: &[u8]) -> Option<u32> {
        self.users.get(name).copied()
    }

    /// The gid of a group name.
    pub fn gid(&self, name: &[u8]) -> Option<u32> {
        self.groups.get(name).copied()
    }
}

/// Why a text ACL does not become an xattr.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadAcl {
    /// An entry (shown) that does not parse.
    Entry(String, EntryFlaw),
    /// Not exactly one entry of this kind (`user::`, `group::`, `other::`).
    NeedsOne(&'static str),
    /// More than one `mask::` entry.
    TwoMasks,
    /// A named user or group twice.
    Twice,
}

/// What is wrong with one ACL entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryFlaw {
    /// Its tag is none of user, group, mask, other.
    UnknownTag,
    /// It has the wrong number of fields.
    Malformed,
    /// Its permissions are not `rwx`/`-` letters, each once.
    BadPermissions,
    /// Its fourth field is not a number.
    BadId,
}

impl std::fmt::Display for BadAcl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadAcl::Entry(entry, flaw) => {
                let flaw = match flaw {
                    EntryFlaw::UnknownTag => "unknown tag",
                    EntryFlaw::Malformed => "malformed",
                    EntryFlaw::BadPermissions => "bad permissions",
                    EntryFlaw::BadId => "bad id",
                };
                write!(f, "ACL entry {entry:?}: {flaw}")
            }
            BadAcl::NeedsOne(what) => {
                write!(f, "ACL needs exactly one {what} entry")
            }
            BadAcl::TwoMasks => f.write_str("ACL has more than one mask entry"),
            BadAcl::Twice => {
                f.write_str("ACL names the same user or group twice")
            }
        }
    }
}

/// Turns a text ACL (GNU tar's or star/bsdtar's) into the value of a
/// `system.posix_acl_access` or `system.posix_acl_default` xattr. Bare
/// names are resolved through `names`. An empty text gives `None`.
#[cfg(any(test, feature = "internals"))]
pub fn acl_from_text(
    text: &[u8],
    names: &NameTable,
) -> Result<Option<Vec<u8>>, BadAcl> {
    acl_from_text_noting(text, names, &mut Vec::new())
}

/// [`acl_from_text`], with what it mended (a computed mask, dropped
/// entries) pushed to `notes`.
pub(super) fn acl_from_text_noting(
    text: &[u8],
    names: &NameTable,
    notes: &mut Vec<QuirkKind>,
) -> Result<Option<Vec<u8>>, BadAcl> {
    let mut entries: Vec<(u16, u16, u32)> = Vec::new();
    for raw in text.split(|&b| b == b',' || b == b'\n') {
        let raw = match raw.iter().position(|&b| b == b'#') {
            Some(c) => &raw[..c],
            None => raw,
        };
        let entry = raw.trim_ascii();
        if entry.is_empty() {
            continue;
        }
        match parse_entry(entry, names)? {
            Some(e) => entries.push(e),
            None => notes.push(QuirkKind::AclEntryDropped {
                entry: String::from_utf8_lossy(entry).into_owned(),
            }),
        }
    }
    if entries.is_empty() {
        return Ok(None);
    }
    entries.sort_by_key(|&(tag, _, id)| (tag, id));
    let count = |t: u16| entries.iter().filter(|e| e.0 == t).count();
    for (tag, what) in [
        (USER_OBJ, "user::"),
        (GROUP_OBJ, "group::"),
        (OTHER, "other::"),
    ] {
        if count(tag) != 1 {
            return Err(BadAcl::NeedsOne(what));
        }
    }
    if count(MASK) > 1 {
        return Err(BadAcl::TwoMasks);
    }
    if (count(USER) > 0 || count(GROUP) > 0) && count(MASK) == 0 {
        let perm = entries
            .iter()
            .filter(|e| matches!(e.0, USER | GROUP_OBJ | GROUP))
            .fold(0, |acc, e| acc | e.1);
        entries.push((MASK, perm, UNDEFINED_ID));
        entries.sort_by_key(|&(tag, _, id)| (tag, id));
        notes.push(QuirkKind::AclMaskComputed);
    }
    if entries.windows(2).any(|w| {
        (w[0].0, w[0].2) == (w[1].0, w[1].2)
            && (w[0].0 == USER || w[0].0 == GROUP)
    }) {
        return Err(BadAcl::Twice);
    }
    let mut out = Vec::with_capacity(4 + 8 * entries.len());
    out.extend_from_slice(&VERSION.to_le_bytes());
    for (tag, perm, id) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    Ok(Some(out))
}

/// The text form of an ACL in the kernel's xattr form, as star and
/// bsdtar write it: comma-separated entries, named entries by their
/// numeric id with the id again as a fourth field
/// (`user::rw-,user:1000:rwx:1000,group::r--,mask::rwx,other::r--`).
/// GNU tar (which drops the fourth field and takes a numeric qualifier
/// as the id), libarchive and [`acl_from_text`] all read it back to the
/// same ids, whatever names the extracting host has. `None` if the
/// value is not a well-formed ACL (an unknown tag, a bad length): the
/// caller keeps the raw xattr then.
pub fn acl_to_text(value: &[u8]) -> Option<Vec<u8>> {
    let (version, entries) = value.split_first_chunk::<4>()?;
    if u32::from_le_bytes(*version) != VERSION
        || entries.is_empty()
        || entries.len() % 8 != 0
    {
        return None;
    }
    let mut out = Vec::with_capacity(entries.len() * 3);
    for e in entries.chunks_exact(8) {
        let tag = u16::from_le_bytes([e[0], e[1]]);
        let perm = u16::from_le_bytes([e[2], e[3]]);
        let id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
        if perm & !7 != 0 {
            return None;
        }
        let word: &[u8] = match tag {
            USER_OBJ | USER => b"user",
            GROUP_OBJ | GROUP => b"group",
            MASK => b"mask",
            OTHER => b"other",
            _ => return None,
        };
        if !out.is_empty() {
            out.push(b',');
        }
        out.extend_from_slice(word);
        out.push(b':');
        let named = matches!(tag, USER | GROUP);
        if named {
            if id == UNDEFINED_ID {
                return None;
            }
            out.extend_from_slice(id.to_string().as_bytes());
        }
        out.push(b':');
        for (bit, c) in [(4, b'r'), (2, b'w'), (1, b'x')] {
            out.push(if perm & bit != 0 { c } else { b'-' });
        }
        if named {
            out.push(b':');
            out.extend_from_slice(id.to_string().as_bytes());
        }
    }
    Some(out)
}

/// The permission bits (`0o777`) an access ACL in the kernel's xattr form
/// gives a file: `user::`, then `mask::` (or `group::` without a mask),
/// then `other::`, as the kernel sets the mode when the ACL is applied.
/// `None` if the value is not a well-formed ACL.
pub fn acl_mode_bits(value: &[u8]) -> Option<u32> {
    let (version, entries) = value.split_first_chunk::<4>()?;
    if u32::from_le_bytes(*version) != VERSION || entries.len() % 8 != 0 {
        return None;
    }
    let (mut user, mut group, mut mask, mut other) = (None, None, None, None);
    for e in entries.chunks_exact(8) {
        let tag = u16::from_le_bytes([e[0], e[1]]);
        let perm = u32::from(u16::from_le_bytes([e[2], e[3]]) & 7);
        match tag {
            USER_OBJ => user = Some(perm),
            GROUP_OBJ => group = Some(perm),
            MASK => mask = Some(perm),
            OTHER => other = Some(perm),
            _ => {}
        }
    }
    Some(user? << 6 | mask.or(group)? << 3 | other?)
}

/// One entry; `None` for a named entry whose name is unknown here and
/// that gives no id.
fn parse_entry(
    entry: &[u8],
    names: &NameTable,
) -> Result<Option<(u16, u16, u32)>, BadAcl> {
    let show = || String::from_utf8_lossy(entry).into_owned();
    let fields: Vec<&[u8]> = entry.split(|&b| b == b':').collect();
    let tag_word = fields[0];
    let named_kind = match tag_word {
        b"user" | b"u" => Some(true),
        b"group" | b"g" => Some(false),
        b"mask" | b"m" | b"other" | b"o" => None,
        _ => return Err(BadAcl::Entry(show(), EntryFlaw::UnknownTag)),
    };
    let Some(is_user) = named_kind else {
        // mask::perms or mask:perms
        let perms = match fields.as_slice() {
            [_, p] | [_, b"", p] => p,
            _ => return Err(BadAcl::Entry(show(), EntryFlaw::Malformed)),
        };
        let tag = if matches!(tag_word, b"mask" | b"m") {
            MASK
        } else {
            OTHER
        };
        return Ok(Some((
            tag,
            parse_perms(perms).ok_or_else(|| bad_perms(show()))?,
            UNDEFINED_ID,
        )));
    };
    let (qualifier, perms, id_field) = match fields.as_slice() {
        [_, q, p] => (*q, *p, None),
        [_, q, p, id] => (*q, *p, Some(*id)),
        _ => return Err(BadAcl::Entry(show(), EntryFlaw::Malformed)),
    };
    let perm = parse_perms(perms).ok_or_else(|| bad_perms(show()))?;
    if qualifier.is_empty() {
        return Ok(Some((
            if is_user { USER_OBJ } else { GROUP_OBJ },
            perm,
            UNDEFINED_ID,
        )));
    }
    let numeric = |v: &[u8]| {
        std::str::from_utf8(v)
            .ok()
            .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<u32>().ok())
            .filter(|&id| id != UNDEFINED_ID)
    };
    let id = match id_field {
        Some(f) => {
            numeric(f).ok_or_else(|| BadAcl::Entry(show(), EntryFlaw::BadId))?
        }
        None => match numeric(qualifier) {
            Some(id) => id,
            None => {
                let found = if is_user {
                    names.uid(qualifier)
                } else {
                    names.gid(qualifier)
                };
                match found {
                    Some(id) => id,
                    None => return Ok(None),
                }
            }
        },
    };
    Ok(Some((if is_user { USER } else { GROUP }, perm, id)))
}

fn bad_perms(entry: String) -> BadAcl {
    BadAcl::Entry(entry, EntryFlaw::BadPermissions)
}

/// `rwx`, with `-` for absent bits, in any order, each letter once.
fn parse_perms(p: &[u8]) -> Option<u16> {
    if p.is_empty() || p.len() > 3 {
        return None;
    }
    let mut perm = 0u16;
    for &b in p {
        let bit = match b {
            b'r' => 4,
            b'w' => 2,
            b'x' => 1,
            b'-' => continue,
            _ => return None,
        };
        if perm & bit != 0 {
            return None;
        }
        perm |= bit;
    }
    Some(perm)
}

#[cfg(test)]
mod test {
    /// star's form with an id after the name: five entries, version 2.
    #[test]
    fn a_text_acl_becomes_an_xattr_and_back() {
        use super::*;
        let x = acl_from_text(
            b"user::rw-,group::r--,other::r--,user:uucp:rwx:10,mask::rwx",
            &NameTable::empty(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(&x[..4], &2u32.to_le_bytes());
        assert_eq!(x.len(), 4 + 5 * 8);
        let text =
            b"user::rw-,user:1000:rwx:1000,group::r--,mask::rwx,other::r--";
        let x = acl_from_text(text, &NameTable::empty()).unwrap().unwrap();
        assert_eq!(acl_to_text(&x).unwrap(), text);
    }

    use super::*;

    fn hex(v: &[u8]) -> String {
        v.iter().map(|b| format!("{b:02x}")).collect()
    }

    // What the kernel returns for `setfacl -m u:10:rwx,g:20:r-x` on a
    // 0644 file (read with `getfattr -e hex`).
    const KERNEL: &str = "0200000001000600ffffffff020007000a00000004000400\
                          ffffffff080005001400000010000700ffffffff20000400ffffffff";

    #[test]
    fn gnu_tar_text_with_names() {
        let names =
            NameTable::parse(b"uucp:x:10:10::/:/bin/sh\n", b"dialout:x:20:\n");
        let text = b"user::rw-\nuser:uucp:rwx\ngroup::r--\ngroup:dialout:r-x\nmask::rwx\nother::r--\n";
        assert_eq!(hex(&acl_from_text(text, &names).unwrap().unwrap()), KERNEL);
        // Unknown names, no ids: those entries dropped, each said.
        let mut notes = Vec::new();
        let v = acl_from_text_noting(text, &NameTable::empty(), &mut notes)
            .unwrap()
            .unwrap();
        assert_eq!(v.len(), 4 + 4 * 8);
        assert_eq!(
            notes,
            [
                QuirkKind::AclEntryDropped {
                    entry: "user:uucp:rwx".into()
                },
                QuirkKind::AclEntryDropped {
                    entry: "group:dialout:r-x".into()
                }
            ]
        );
    }

    #[test]
    fn star_text_with_ids_ignores_names() {
        let names = NameTable::parse(b"uucp:x:99:99::/:/bin/sh\n", b"");
        let text = b"user::rw-,group::r--,other::r--,user:uucp:rwx:10,group:dialout:r-x:20,mask::rwx";
        assert_eq!(hex(&acl_from_text(text, &names).unwrap().unwrap()), KERNEL);
    }

    #[test]
    fn numeric_qualifiers_and_comments() {
        let text = b"user::rw-\nuser:10:rwx\t#effective:rwx\ngroup::r--\ngroup:20:r-x\nmask:rwx\no::r";
        assert_eq!(
            hex(&acl_from_text(text, &NameTable::empty()).unwrap().unwrap()),
            KERNEL
        );
    }

    #[test]
    fn mode_bits_from_the_mask() {
        let v: Vec<u8> = (0..KERNEL.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&KERNEL[i..i + 2], 16).unwrap())
            .collect();
        assert_eq!(acl_mode_bits(&v), Some(0o674));
        assert_eq!(acl_mode_bits(&v[..10]), None);
        let minimal =
            acl_from_text(b"u::rw,g::r,o::-", &NameTable::empty()).unwrap();
        assert_eq!(acl_mode_bits(&minimal.unwrap()), Some(0o640));
    }

    #[test]
    fn text_written_reads_back_exactly() {
        let v: Vec<u8> = (0..KERNEL.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&KERNEL[i..i + 2], 16).unwrap())
            .collect();
        let text = acl_to_text(&v).unwrap();
        assert_eq!(
            text,
            b"user::rw-,user:10:rwx:10,group::r--,group:20:r-x:20,mask::rwx,other::r--"
        );
        // Whatever names this host gives 10 and 20.
        let names = NameTable::parse(b"ten:x:99:99::/:/bin/sh\n", b"");
        assert_eq!(acl_from_text(&text, &names).unwrap().unwrap(), v);
        // Not an ACL: no text.
        assert_eq!(acl_to_text(&v[..10]), None);
        assert_eq!(acl_to_text(&2u32.to_le_bytes()), None);
        let mut bad_tag = v.clone();
        bad_tag[4] = 0x40;
        assert_eq!(acl_to_text(&bad_tag), None);
    }

    /// Named entries without a mask: the mask setfacl computes (the
    /// group class's union), as `setfacl -m u:10:rwx,g:20:r-x` on a 0644
    /// file gives.
    #[test]
    fn a_missing_mask_is_computed() {
        let mut notes = Vec::new();
        let v = acl_from_text_noting(
            b"user::rw-,user:10:rwx,group::r--,group:20:r-x,other::r--",
            &NameTable::empty(),
            &mut notes,
        )
        .unwrap()
        .unwrap();
        assert_eq!(hex(&v), KERNEL);
        assert_eq!(notes, [QuirkKind::AclMaskComputed]);
    }

    #[test]
    fn invalid_acls() {
        let e = NameTable::empty();
        for bad in [
            &b"user::rw-,group::r--"[..],
            b"user::rw-,group::r--,other::r--,user:10:rwx,user:10:r,mask::rwx",
            b"user::rw-,group::r--,other::r--,other::r--",
            b"user::rwq,group::r--,other::r--",
            b"user::rww,group::r--,other::r--",
            b"bogus::rw-",
            b"user:a:b:c:d",
            b"user::rw-,group::r--,other::r--,user:x:r:4294967295,mask::r",
        ] {
            assert!(
                acl_from_text(bad, &e).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(acl_from_text(b"", &e), Ok(None));
    }
}
