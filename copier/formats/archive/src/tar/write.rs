//! Writing tar members: a ustar header, preceded by a PAX extended header
//! whenever a value does not fit ustar exactly (long names and link
//! targets, large ids and sizes, nanosecond times, extended attributes).
//! What it writes, this crate's reader and GNU tar read back unchanged.

use std::io::{self, Read, Write};

use super::Kind;
use super::header::BLOCK;

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
    /// Extended attributes, written as `SCHILY.xattr.NAME` records (ACLs
    /// and file capabilities included).
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
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
    /// file (a body that ends early is an `UnexpectedEof` error: the
    /// archive would be corrupt). Other kinds have no body.
    pub fn append(&mut self, e: &Entry, body: impl Read) -> io::Result<()> {
        if e.name.is_empty() || e.name.contains(&0) || e.link.contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a member name or link target is empty or holds NUL",
            ));
        }
        let size = if e.kind == WriteKind::File { e.size } else { 0 };
        let mut name = e.name.clone();
        if e.kind == WriteKind::Directory && !name.ends_with(b"/") {
            name.push(b'/');
        }
        let mut pax: Vec<u8> = Vec::new();
        let (prefix, short) = match split_ustar_name(&name) {
            Some(p) => p,
            None => {
                record(&mut pax, b"path", &name);
                (Vec::new(), name[..name.len().min(100)].to_vec())
            }
        };
        if e.link.len() > 100 {
            record(&mut pax, b"linkpath", &e.link);
        }
        const MAX8: u64 = 0o7777777;
        const MAX12: u64 = 0o77777777777;
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
        for (k, v) in &e.xattrs {
            let mut key = b"SCHILY.xattr.".to_vec();
            key.extend_from_slice(k);
            record(&mut pax, &key, v);
        }
        if !pax.is_empty() {
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
            self.write(&pax)?;
            self.pad(pax.len() as u64)?;
        }
        let mut h = [0u8; BLOCK];
        put(&mut h[0..100], &short);
        octal(&mut h[100..108], u64::from(e.mode & 0o7777));
        octal(&mut h[108..116], u64::from(e.uid).min(MAX8));
        octal(&mut h[116..124], u64::from(e.gid).min(MAX8));
        octal(&mut h[124..136], size.min(MAX12));
        octal(&mut h[136..148], secs.clamp(0, MAX12 as i64) as u64);
        h[156] = typeflag(e.kind);
        put(&mut h[157..257], &e.link[..e.link.len().min(100)]);
        ustar_magic(&mut h);
        if matches!(e.kind, WriteKind::CharDevice | WriteKind::BlockDevice) {
            octal(&mut h[329..337], u64::from(e.dev.0).min(MAX8));
            octal(&mut h[337..345], u64::from(e.dev.1).min(MAX8));
        }
        put(&mut h[345..500], &prefix);
        checksum(&mut h);
        self.write(&h)?;
        if size > 0 {
            let n = io::copy(&mut body.take(size), &mut WriteCount(self))?;
            if n != size {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("body ended after {n} of {size} bytes"),
                ));
            }
            self.pad(size)?;
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
