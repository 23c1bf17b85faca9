//! Writing tar members: a ustar header, preceded by a PAX extended header
//! whenever a value does not fit ustar exactly (long names and link
//! targets, large ids and sizes, nanosecond times, extended attributes,
//! ACLs, sparse files). What it writes, this crate's reader, GNU tar and
//! libarchive (bsdtar) read back unchanged:
//!
//! - POSIX ACLs (the `system.posix_acl_access` / `_default` xattrs) go in
//!   `SCHILY.acl.access` / `SCHILY.acl.default` records, the text GNU tar
//!   (`--acls`) and libarchive restore, by numeric id
//!   ([`acl_to_text`](super::acl::acl_to_text)); the raw xattr is written only
//!   when its value is not an ACL those tools could read.
//! - A sparse file is a PAX 1.0 sparse member, as `tar -S --format=pax`
//!   writes it: `GNU.sparse.major=1`, `minor=0`, its real name in
//!   `GNU.sparse.name` and size in `GNU.sparse.realsize`, the header
//!   naming a `GNUSparseFile.0/` placeholder, and the body the map (count
//!   and offset/length pairs in decimal, one a line, padded to a block)
//!   followed by the data segments.

use std::io::{self, Read, Write};

use super::header::BLOCK;
use super::member::Kind;

/// One member to write. Names are relative and use `/`; a directory's
/// name may end in `/` or not.
#[derive(Clone, Debug, Default)]
pub struct Entry {
    /// The member's name.
    pub name: Vec<u8>,
    /// Its type ([`Kind::Other`] is refused).
    pub kind: WriteKind,
    /// Permission bits with setuid, setgid and sticky (`0o7777`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time: seconds since the epoch and nanoseconds.
    pub mtime: (i64, u32),
    /// Bytes of data (regular files only).
    pub size: u64,
    /// A symlink's target, or the member a hard link names.
    pub link: Vec<u8>,
    /// Device numbers (major, minor) of a device node.
    pub dev: (u32, u32),
    /// Extended attributes, written as `SCHILY.xattr.NAME` records (file
    /// capabilities included); POSIX ACLs as `SCHILY.acl.*` text.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// For a sparse regular file, its data segments `(offset, length)`:
    /// ascending, not overlapping, within `size` (the real size, holes
    /// included). The body then yields the segments' bytes only, in
    /// order.
    pub sparse: Option<Vec<(u64, u64)>>,
}

/// The member types a writer makes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WriteKind {
    /// A regular file.
    #[default]
    File,
    /// A hard link to [`Entry::link`].
    HardLink,
    /// A symlink to [`Entry::link`].
    Symlink,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// A directory.
    Directory,
    /// A FIFO.
    Fifo,
}

impl From<WriteKind> for Kind {
    fn from(k: WriteKind) -> Kind {
        match k {
            WriteKind::File => Kind::File,
            WriteKind::HardLink => Kind::HardLink,
            WriteKind::Symlink => Kind::Symlink,
            WriteKind::CharDevice => Kind::CharDevice,
            WriteKind::BlockDevice => Kind::BlockDevice,
            WriteKind::Directory => Kind::Directory,
            WriteKind::Fifo => Kind::Fifo,
        }
    }
}

fn typeflag(k: WriteKind) -> u8 {
    match k {
        WriteKind::File => b'0',
        WriteKind::HardLink => b'1',
        WriteKind::Symlink => b'2',
        WriteKind::CharDevice => b'3',
        WriteKind::BlockDevice => b'4',
        WriteKind::Directory => b'5',
        WriteKind::Fifo => b'6',
    }
}

/// Writes members to `W`; [`Writer::finish`] writes the end-of-archive
/// blocks and returns `W`.
pub struct Writer<W: Write> {
    out: W,
    written: u64,
}

impl<W: Write> Writer<W> {
    /// A writer onto `out`.
    pub fn new(out: W) -> Self {
        Writer { out, written: 0 }
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Writes `e`, then exactly `e.size` bytes of `body` for a regular
    /// file (for a sparse one, the bytes of its segments); a body that
    /// ends early is an `UnexpectedEof` error: the archive would be
    /// corrupt. Other kinds have no body.
    pub fn append(&mut self, e: &Entry, body: impl Read) -> io::Result<()> {
        check_names(e)?;
        let map = match (&e.sparse, e.kind) {
            (Some(map), WriteKind::File) => Some(sparse_map_text(map, e.size)?),
            _ => None,
        };
        // Bytes of data the body yields, and of the member's data area
        // (the map first, when sparse).
        let (data, size) = match (&map, e.kind) {
            (Some((text, data)), _) => (*data, text.len() as u64 + data),
            (None, WriteKind::File) => (e.size, e.size),
            _ => (0, 0),
        };
        let mut name = e.name.clone();
        if e.kind == WriteKind::Directory && !name.ends_with(b"/") {
            name.push(b'/');
        }
        let names = pax_records(e, &name, map.is_some(), size);
        if !names.pax.is_empty() {
            self.write_pax_header(&names, e.mtime.0)?;
        }
        self.write(&ustar_header(e, &names, size))?;
        if let Some((text, _)) = &map {
            self.write(text)?;
        }
        self.write_body(body, data)?;
        self.pad(size)?;
        Ok(())
    }

    /// Writes the PAX extended header holding `names.pax`, named after
    /// the member it precedes.
    fn write_pax_header(&mut self, names: &Names, secs: i64) -> io::Result<()> {
        let (pax, short) = (&names.pax, &names.short);
        let mut h = [0u8; BLOCK];
        let mut pname = b"PaxHeaders/".to_vec();
        pname.extend_from_slice(&short[..short.len().min(89)]);
        put(&mut h[0..100], &pname);
        octal(&mut h[100..108], 0o644);
        octal(&mut h[108..116], 0);
        octal(&mut h[116..124], 0);
        octal(&mut h[124..136], pax.len() as u64);
        octal(&mut h[136..148], secs.clamp(0, MAX12 as i64) as u64);
        h[156] = b'x';
        ustar_magic(&mut h);
        checksum(&mut h);
        self.write(&h)?;
        self.write(pax)?;
        self.pad(pax.len() as u64)
    }

    /// Copies exactly `data` bytes of `body`; one that ends early is an
    /// `UnexpectedEof` error.
    fn write_body(&mut self, body: impl Read, data: u64) -> io::Result<()> {
        if data == 0 {
            return Ok(());
        }
        let n = io::copy(&mut body.take(data), &mut WriteCount(self))?;
        if n != data {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("body ended after {n} of {data} bytes"),
            ));
        }
        Ok(())
    }

    /// Writes the two zero blocks that end an archive and returns the
    /// output.
    pub fn finish(mut self) -> io::Result<W> {
        self.write(&[0u8; 2 * BLOCK])?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn write(&mut self, b: &[u8]) -> io::Result<()> {
        self.out.write_all(b)?;
        self.written += b.len() as u64;
        Ok(())
    }

    fn pad(&mut self, len: u64) -> io::Result<()> {
        let rem = (len % BLOCK as u64) as usize;
        if rem != 0 {
            self.write(&[0u8; BLOCK][..BLOCK - rem])?;
        }
        Ok(())
    }
}

/// The largest value an 8-byte octal ustar field holds.
const MAX8: u64 = 0o7777777;
/// The largest value a 12-byte octal ustar field holds.
const MAX12: u64 = 0o77777777777;

/// Refuses a member whose name is empty or whose name or link target
/// holds a NUL: no reader could read it back.
fn check_names(e: &Entry) -> io::Result<()> {
    if e.name.is_empty() || e.name.contains(&0) || e.link.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a member name or link target is empty or holds NUL",
        ));
    }
    Ok(())
}

/// What a member's headers name it: the ustar prefix and name fields,
/// and the PAX records for whatever ustar cannot hold exactly.
struct Names {
    prefix: Vec<u8>,
    short: Vec<u8>,
    pax: Vec<u8>,
}

/// The PAX records of `e` (named `name`, its data area `size` bytes)
/// and the ustar name fields they stand beside.
fn pax_records(e: &Entry, name: &[u8], sparse: bool, size: u64) -> Names {
    let mut pax: Vec<u8> = Vec::new();
    let (prefix, short) = if sparse {
        record(&mut pax, b"GNU.sparse.major", b"1");
        record(&mut pax, b"GNU.sparse.minor", b"0");
        record(&mut pax, b"GNU.sparse.name", name);
        record(
            &mut pax,
            b"GNU.sparse.realsize",
            e.size.to_string().as_bytes(),
        );
        (Vec::new(), sparse_placeholder(name))
    } else {
        match split_ustar_name(name) {
            Some(p) => p,
            None => {
                record(&mut pax, b"path", name);
                (Vec::new(), name[..name.len().min(100)].to_vec())
            }
        }
    };
    if e.link.len() > 100 {
        record(&mut pax, b"linkpath", &e.link);
    }
    if u64::from(e.uid) > MAX8 {
        record(&mut pax, b"uid", e.uid.to_string().as_bytes());
    }
    if u64::from(e.gid) > MAX8 {
        record(&mut pax, b"gid", e.gid.to_string().as_bytes());
    }
    if size > MAX12 {
        record(&mut pax, b"size", size.to_string().as_bytes());
    }
    let (secs, nanos) = e.mtime;
    if nanos != 0 || secs < 0 || secs as u64 > MAX12 {
        record(&mut pax, b"mtime", time_text(secs, nanos).as_bytes());
    }
    xattr_records(&mut pax, &e.xattrs);
    Names { prefix, short, pax }
}

/// Appends a record per extended attribute: a POSIX ACL GNU tar and
/// libarchive can read as `SCHILY.acl.*` text, anything else as
/// `SCHILY.xattr.NAME`.
fn xattr_records(pax: &mut Vec<u8>, xattrs: &[(Vec<u8>, Vec<u8>)]) {
    for (k, v) in xattrs {
        let acl_key: Option<&[u8]> = match k.as_slice() {
            b"system.posix_acl_access" => Some(b"SCHILY.acl.access"),
            b"system.posix_acl_default" => Some(b"SCHILY.acl.default"),
            _ => None,
        };
        if let Some(key) = acl_key
            && let Some(text) = super::acl::acl_to_text(v)
        {
            record(pax, key, &text);
            continue;
        }
        let mut key = b"SCHILY.xattr.".to_vec();
        key.extend_from_slice(k);
        record(pax, &key, v);
    }
}

/// The ustar header block of `e`, its fields clamped to what ustar holds
/// (the PAX records before it carry the exact values).
fn ustar_header(e: &Entry, names: &Names, size: u64) -> [u8; BLOCK] {
    let mut h = [0u8; BLOCK];
    put(&mut h[0..100], &names.short);
    octal(&mut h[100..108], u64::from(e.mode & 0o7777));
    octal(&mut h[108..116], u64::from(e.uid).min(MAX8));
    octal(&mut h[116..124], u64::from(e.gid).min(MAX8));
    octal(&mut h[124..136], size.min(MAX12));
    octal(&mut h[136..148], e.mtime.0.clamp(0, MAX12 as i64) as u64);
    h[156] = typeflag(e.kind);
    put(&mut h[157..257], &e.link[..e.link.len().min(100)]);
    ustar_magic(&mut h);
    if matches!(e.kind, WriteKind::CharDevice | WriteKind::BlockDevice) {
        octal(&mut h[329..337], u64::from(e.dev.0).min(MAX8));
        octal(&mut h[337..345], u64::from(e.dev.1).min(MAX8));
    }
    put(&mut h[345..500], &names.prefix);
    checksum(&mut h);
    h
}

/// Counts body bytes through the writer.
struct WriteCount<'a, W: Write>(&'a mut Writer<W>);

impl<W: Write> Write for WriteCount<'_, W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.write(b)?;
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.out.flush()
    }
}

/// A sparse map as PAX 1.0 puts it before the data: the count, then each
/// offset and length, decimal, one a line, padded with NULs to a block;
/// a file ending in a hole (or all hole) ends with a zero-length segment
/// at its real size, as GNU tar writes it. Returns the text and the
/// bytes of data the segments hold. A map that is not ascending,
/// overlaps or passes `real` is refused.
fn sparse_map_text(
    map: &[(u64, u64)],
    real: u64,
) -> io::Result<(Vec<u8>, u64)> {
    let bad = |why: &str| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("sparse map: {why}"),
        )
    };
    let mut end = 0u64;
    let mut data = 0u64;
    for &(off, len) in map {
        if off < end {
            return Err(bad("segments overlap or are out of order"));
        }
        end = off
            .checked_add(len)
            .ok_or_else(|| bad("segment overflows"))?;
        if end > real {
            return Err(bad("a segment ends past the real size"));
        }
        data += len;
    }
    let tail = (end < real || map.is_empty()).then_some((real, 0));
    let count = map.len() + usize::from(tail.is_some());
    let mut text = format!("{count}\n").into_bytes();
    for (off, len) in map.iter().chain(tail.iter()) {
        text.extend_from_slice(format!("{off}\n{len}\n").as_bytes());
    }
    text.resize(text.len().next_multiple_of(BLOCK), 0);
    Ok((text, data))
}

/// The header name of a PAX 1.0 sparse member, for readers that know no
/// sparse files: `GNUSparseFile.0/` and the last part of the real name,
/// as GNU tar names it (with 0 for its process id, so that an archive
/// does not depend on the process that wrote it).
fn sparse_placeholder(name: &[u8]) -> Vec<u8> {
    let base = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
    let mut p = b"GNUSparseFile.0/".to_vec();
    p.extend_from_slice(&base[..base.len().min(100 - p.len())]);
    p
}

/// `name` as ustar's (prefix, name) pair, if it fits exactly: a name of
/// up to 100 bytes, or a split at a `/` into at most 155 and 100.
fn split_ustar_name(name: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    if name.len() <= 100 {
        return Some((Vec::new(), name.to_vec()));
    }
    // A directory's trailing slash stays with the last part.
    let body = name.strip_suffix(b"/").unwrap_or(name);
    (0..body.len())
        .rev()
        .filter(|&i| body[i] == b'/')
        .find(|&i| i <= 155 && name.len() - i - 1 <= 100 && i > 0)
        .map(|i| (name[..i].to_vec(), name[i + 1..].to_vec()))
}

/// One PAX record: `LEN KEY=VALUE\n`, LEN counting itself.
fn record(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    let body = key.len() + value.len() + 3; // ' ', '=', '\n'
    let mut len = body + 1;
    while len != body + len.to_string().len() {
        len = body + len.to_string().len();
    }
    out.extend_from_slice(len.to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(key);
    out.push(b'=');
    out.extend_from_slice(value);
    out.push(b'\n');
}

/// A PAX time: `SECS[.NNNNNNNNN]`, negative times as GNU tar writes them
/// (the fraction counts up from the negative second).
fn time_text(secs: i64, nanos: u32) -> String {
    if nanos == 0 {
        secs.to_string()
    } else if secs < 0 {
        format!("-{}.{:09}", -(secs + 1), 1_000_000_000 - nanos)
    } else {
        format!("{secs}.{nanos:09}")
    }
}

fn put(field: &mut [u8], v: &[u8]) {
    field[..v.len()].copy_from_slice(v);
}

/// An octal field, NUL-terminated, zero-padded.
fn octal(field: &mut [u8], v: u64) {
    let n = field.len() - 1;
    let s = format!("{v:0n$o}");
    field[..n].copy_from_slice(s.as_bytes());
    field[n] = 0;
}

fn ustar_magic(h: &mut [u8; BLOCK]) {
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
}

fn checksum(h: &mut [u8; BLOCK]) {
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
}

#[cfg(test)]
mod test {
    use super::super::{Limits, Reader};
    use super::*;

    fn entry(name: &str, kind: WriteKind) -> Entry {
        Entry {
            name: name.as_bytes().to_vec(),
            kind,
            mode: 0o644,
            mtime: (1_700_000_000, 0),
            ..Entry::default()
        }
    }

    /// Whatever is written is read back exactly, PAX where needed.
    #[test]
    fn members_read_back_exactly() {
        let long = format!("{}/{}", "d".repeat(120), "f".repeat(120));
        let mut w = Writer::new(Vec::new());
        let mut f = entry("a/file", WriteKind::File);
        f.size = 5;
        f.mode = 0o4755;
        f.uid = 4_000_000_000;
        f.gid = 7;
        f.mtime = (1_700_000_000, 123_456_789);
        f.xattrs = vec![(b"security.capability".to_vec(), vec![1, 0, 0, 2, 0])];
        w.append(&f, &b"hello"[..]).unwrap();
        let mut l = entry(&long, WriteKind::Symlink);
        l.link = "t".repeat(300).into_bytes();
        w.append(&l, io::empty()).unwrap();
        let mut d = entry("a", WriteKind::Directory);
        d.mtime = (-5, 250_000_000);
        w.append(&d, io::empty()).unwrap();
        let mut c = entry("dev/null", WriteKind::CharDevice);
        c.dev = (1, 3);
        w.append(&c, io::empty()).unwrap();
        let bytes = w.finish().unwrap();
        assert_eq!(bytes.len() % BLOCK, 0);

        let mut r = Reader::new(&bytes[..], Limits::default());
        let m = r.next().unwrap().unwrap();
        assert_eq!(m.name, b"a/file");
        assert_eq!(
            (m.mode, m.uid, m.gid, m.size),
            (0o4755, 4_000_000_000, 7, 5)
        );
        assert_eq!(m.mtime, (1_700_000_000, 123_456_789));
        assert_eq!(m.xattrs, f.xattrs);
        let mut body = Vec::new();
        r.body().read_to_end(&mut body).unwrap();
        assert_eq!(body, b"hello");
        let m = r.next().unwrap().unwrap();
        assert_eq!(m.name, long.as_bytes());
        assert_eq!(m.kind, Kind::Symlink);
        assert_eq!(m.link, Some(l.link.clone()));
        let m = r.next().unwrap().unwrap();
        assert_eq!(m.kind, Kind::Directory);
        assert_eq!(m.mtime, (-5, 250_000_000));
        let m = r.next().unwrap().unwrap();
        assert_eq!((m.kind, m.dev), (Kind::CharDevice, (1, 3)));
        assert!(r.next().unwrap().is_none());
    }

    /// A sparse file is a PAX 1.0 member: its map and real size read
    /// back, its data only stored, its real name kept.
    #[test]
    fn sparse_files_are_pax_1_0_members() {
        let name = format!("root/{}/disk.img", "d".repeat(150));
        let mut w = Writer::new(Vec::new());
        let mut f = entry(&name, WriteKind::File);
        f.size = 10 << 20;
        f.sparse = Some(vec![(4096, 5), (1 << 20, 3)]);
        w.append(&f, &b"helloabc"[..]).unwrap();
        // All hole.
        let mut h = entry("root/empty", WriteKind::File);
        h.size = 1 << 30;
        h.sparse = Some(Vec::new());
        w.append(&h, io::empty()).unwrap();
        w.append(&entry("root/after", WriteKind::File), io::empty())
            .unwrap();
        let bytes = w.finish().unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("GNU.sparse.major=1\n"), "{text}");
        assert!(text.contains("GNU.sparse.minor=0\n"));
        assert!(text.contains("GNUSparseFile.0/disk.img"));
        // The map ends with GNU tar's zero-length segment at the end.
        assert!(text.contains("3\n4096\n5\n1048576\n3\n10485760\n0\n"));

        let mut r = Reader::new(&bytes[..], Limits::default());
        let m = r.next().unwrap().unwrap();
        assert_eq!(m.name, name.as_bytes());
        assert_eq!(m.size, 10 << 20);
        assert_eq!(m.sparse, Some(vec![(4096, 5), (1 << 20, 3)]));
        let mut body = Vec::new();
        r.body().read_to_end(&mut body).unwrap();
        assert_eq!(body, b"helloabc");
        let m = r.next().unwrap().unwrap();
        assert_eq!((m.name.as_slice(), m.size), (&b"root/empty"[..], 1 << 30));
        assert_eq!(m.sparse, Some(Vec::new()));
        let m = r.next().unwrap().unwrap();
        assert_eq!(m.name, b"root/after");
        assert!(r.next().unwrap().is_none());

        // A map that is not one is refused before anything is written.
        let mut w = Writer::new(Vec::new());
        for bad in [vec![(10, 5), (12, 1)], vec![(0, 11)]] {
            let mut f = entry("f", WriteKind::File);
            f.size = 10;
            f.sparse = Some(bad);
            let e = w.append(&f, io::empty()).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        }
        assert_eq!(w.written(), 0);
    }

    /// ACLs are `SCHILY.acl.*` text by id, read back as the same xattr;
    /// a value that is no ACL stays a raw xattr.
    #[test]
    fn acls_are_written_as_text() {
        let acl = super::super::acl::acl_from_text(
            b"u::rw,u:1000:rwx,g::r,g:20:r-x,m::rwx,o::r",
            &super::super::NameTable::empty(),
        )
        .unwrap()
        .unwrap();
        let mut w = Writer::new(Vec::new());
        let mut f = entry("f", WriteKind::File);
        f.xattrs = vec![
            (b"system.posix_acl_access".to_vec(), acl.clone()),
            (b"system.posix_acl_default".to_vec(), b"junk".to_vec()),
        ];
        w.append(&f, io::empty()).unwrap();
        let bytes = w.finish().unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains(
            "SCHILY.acl.access=user::rw-,user:1000:rwx:1000,group::r--,\
             group:20:r-x:20,mask::rwx,other::r--\n"
        ));
        assert!(!text.contains("SCHILY.xattr.system.posix_acl_access"));
        assert!(text.contains("SCHILY.xattr.system.posix_acl_default=junk"));
        let mut r = Reader::new(&bytes[..], Limits::default())
            .with_names(super::super::NameTable::empty());
        let m = r.next().unwrap().unwrap();
        assert!(
            m.xattrs
                .contains(&(b"system.posix_acl_access".to_vec(), acl))
        );
    }

    #[test]
    fn short_bodies_and_bad_names_are_errors() {
        let mut w = Writer::new(Vec::new());
        let mut f = entry("f", WriteKind::File);
        f.size = 10;
        let e = w.append(&f, &b"abc"[..]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        let e = w.append(&entry("a\0b", WriteKind::File), io::empty());
        assert!(e.is_err());
    }

    #[test]
    fn pax_record_lengths_count_themselves() {
        for n in [0, 1, 5, 80, 90, 95, 96, 97, 990, 995, 9990] {
            let mut out = Vec::new();
            record(&mut out, b"path", &vec![b'x'; n]);
            let sp = out.iter().position(|&b| b == b' ').unwrap();
            let len: usize =
                std::str::from_utf8(&out[..sp]).unwrap().parse().unwrap();
            assert_eq!(len, out.len(), "value of {n} bytes");
        }
    }
}
