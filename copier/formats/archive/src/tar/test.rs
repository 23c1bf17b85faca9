//! Reader tests on archives built by hand, hostile ones first among them.

use std::io::{Cursor, Read};

use super::*;

/// Sets the header checksum.
fn set_sum(b: &mut [u8; BLOCK]) {
    b[148..156].copy_from_slice(b"        ");
    let sum: u64 = b.iter().map(|&x| u64::from(x)).sum();
    b[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
}

fn num(b: &mut [u8; BLOCK], range: std::ops::Range<usize>, v: u64) {
    let w = range.len() - 1;
    let s = format!("{v:0w$o}\0");
    if s.len() == range.len() {
        b[range].copy_from_slice(s.as_bytes());
    } else {
        // GNU base-256.
        let f = &mut b[range];
        f.fill(0);
        let n = f.len();
        f[n - 8..].copy_from_slice(&v.to_be_bytes());
        f[0] |= 0x80;
    }
}

fn header(name: &[u8], typ: u8, size: u64) -> [u8; BLOCK] {
    let mut b = [0u8; BLOCK];
    b[..name.len()].copy_from_slice(name);
    num(&mut b, 100..108, 0o644);
    num(&mut b, 108..116, 1000);
    num(&mut b, 116..124, 100);
    num(&mut b, 124..136, size);
    num(&mut b, 136..148, 1_700_000_000);
    b[156] = typ;
    b[257..263].copy_from_slice(b"ustar\0");
    b[263..265].copy_from_slice(b"00");
    b[265..269].copy_from_slice(b"user");
    b[297..302].copy_from_slice(b"group");
    set_sum(&mut b);
    b
}

fn pax(records: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in records {
        let body = k.len() + v.len() + 3; // ' ', '=', '\n'
        let mut len = body + 1;
        while len != body + len.to_string().len() {
            len = body + len.to_string().len();
        }
        out.extend_from_slice(format!("{len} ").as_bytes());
        out.extend_from_slice(k);
        out.push(b'=');
        out.extend_from_slice(v);
        out.push(b'\n');
    }
    out
}

#[derive(Default)]
struct Ar(Vec<u8>);

impl Ar {
    fn add(&mut self, h: [u8; BLOCK], data: &[u8]) -> &mut Self {
        self.0.extend_from_slice(&h);
        self.0.extend_from_slice(data);
        self.0.resize(self.0.len().div_ceil(BLOCK) * BLOCK, 0);
        self
    }

    fn pax(&mut self, typ: u8, records: &[(&[u8], &[u8])]) -> &mut Self {
        let data = pax(records);
        self.add(header(b"PaxHeader", typ, data.len() as u64), &data)
    }

    fn file(&mut self, name: &[u8], data: &[u8]) -> &mut Self {
        self.add(header(name, b'0', data.len() as u64), data)
    }

    fn end(&mut self) -> Vec<u8> {
        self.0.extend_from_slice(&[0u8; 2 * BLOCK]);
        std::mem::take(&mut self.0)
    }
}

fn all(
    bytes: &[u8],
    limits: Limits,
) -> Result<Vec<(Member, Vec<u8>)>, TarError> {
    let mut r = Reader::new(bytes, limits).with_names(NameTable::empty());
    let mut out = Vec::new();
    while let Some(m) = r.next()? {
        let mut body = Vec::new();
        r.body().read_to_end(&mut body).map_err(TarError::from_io)?;
        out.push((m, body));
    }
    r.finish()?;
    Ok(out)
}

fn read(bytes: &[u8]) -> Result<Vec<(Member, Vec<u8>)>, TarError> {
    all(bytes, Limits::default())
}

#[test]
fn pax_size_overrides_a_zero_ustar_size() {
    let body = vec![7u8; 2048];
    let mut a = Ar::default();
    a.pax(b'x', &[(b"size", b"2048")]);
    a.add(header(b"big", b'0', 0), &body);
    let got = read(&a.end()).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0.size, 2048);
    assert_eq!(got[0].0.stored_size, 2048);
    assert_eq!(got[0].1, body);
}

#[test]
fn pax_values_keep_newlines_and_nuls() {
    let cap = b"\x01\x00\x00\x02\x0a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00";
    let mut a = Ar::default();
    a.pax(
        b'x',
        &[
            (b"SCHILY.xattr.security.capability", cap),
            (b"SCHILY.xattr.user.nl", b"a\nb\n"),
            (b"LIBARCHIVE.xattr.user.nl", b"YQpiCg"),
            (b"LIBARCHIVE.xattr.user.a%3Db", b"eA"),
            (b"SCHILY.xattr.user.empty", b""),
            (b"path", b"dir/with\nnewline"),
            (b"mtime", b"-315619199.75"),
            (b"atime", b"1.5"),
            (b"uid", b"4000000000"),
            (b"uname", b"someone"),
        ],
    );
    a.file(b"short", b"x");
    let got = read(&a.end()).unwrap();
    let m = &got[0].0;
    assert_eq!(m.name, b"dir/with\nnewline");
    assert_eq!(m.mtime, (-315_619_200, 250_000_000));
    assert_eq!(m.atime, Some((1, 500_000_000)));
    assert_eq!(m.uid, 4_000_000_000);
    assert_eq!(m.gid, 100);
    assert_eq!(m.uname, b"someone");
    assert_eq!(m.gname, b"group");
    assert_eq!(
        m.xattrs,
        vec![
            (b"security.capability".to_vec(), cap.to_vec()),
            (b"user.nl".to_vec(), b"a\nb\n".to_vec()),
            (b"user.a=b".to_vec(), b"x".to_vec()),
            (b"user.empty".to_vec(), b"".to_vec()),
        ]
    );
}

#[test]
fn bad_pax_values_are_errors() {
    for rec in [
        (&b"size"[..], &b"12x"[..]),
        (b"size", b"-1"),
        (b"uid", b"4294967296"),
        (b"mtime", b"soon"),
        (b"path", b"a\0b"),
        (b"SCHILY.xattr.", b"v"),
        (b"LIBARCHIVE.xattr.user.x", b"!!"),
    ] {
        let mut a = Ar::default();
        a.pax(b'x', &[rec]);
        a.file(b"f", b"");
        let e = read(&a.end()).unwrap_err();
        assert!(matches!(e.kind, TarErrorKind::Pax(_)), "{rec:?}: {e}");
    }
}

#[test]
fn global_headers_apply_to_later_members() {
    let mut a = Ar::default();
    a.file(b"before", b"");
    a.pax(
        b'g',
        &[
            (b"uname", b"g"),
            (b"SCHILY.xattr.user.g", b"1"),
            (b"mtime", b"5"),
        ],
    );
    a.file(b"one", b"");
    a.pax(b'x', &[(b"uname", b"local"), (b"mtime", b"")]);
    a.file(b"two", b"");
    a.pax(b'g', &[(b"uname", b"")]);
    a.file(b"three", b"");
    let got = read(&a.end()).unwrap();
    let names: Vec<_> = got
        .iter()
        .map(|(m, _)| (m.uname.clone(), m.mtime.0))
        .collect();
    assert_eq!(
        names,
        vec![
            (b"user".to_vec(), 1_700_000_000),
            (b"g".to_vec(), 5),
            (b"local".to_vec(), 1_700_000_000),
            (b"user".to_vec(), 5),
        ]
    );
    assert_eq!(got[3].0.xattrs, vec![(b"user.g".to_vec(), b"1".to_vec())]);

    for key in [&b"path"[..], b"size", b"GNU.sparse.map"] {
        let mut a = Ar::default();
        a.pax(b'g', &[(key, b"1")]);
        a.file(b"f", b"");
        assert!(read(&a.end()).is_err());
    }
}

#[test]
fn gnu_long_names_and_links() {
    let long = vec![b'n'; 300];
    let target = vec![b't'; 200];
    let mut name_data = long.clone();
    name_data.push(0);
    let mut a = Ar::default();
    a.add(
        header(b"././@LongLink", b'L', name_data.len() as u64),
        &name_data,
    );
    a.add(header(b"././@LongLink", b'K', target.len() as u64), &target);
    a.add(header(b"short", b'2', 0), b"");
    let got = read(&a.end()).unwrap();
    assert_eq!(got[0].0.name, long);
    assert_eq!(got[0].0.kind, Kind::Symlink);
    assert_eq!(got[0].0.link.as_deref(), Some(&target[..]));

    // A long-name bomb is refused on its declared size.
    let mut a = Ar::default();
    a.add(header(b"././@LongLink", b'L', 1 << 40), b"");
    let e = read(&a.0).unwrap_err();
    assert!(
        matches!(
            e.kind,
            TarErrorKind::Limit {
                what: "long name bytes",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn ustar_prefix_and_numbers() {
    let mut h = header(b"name", b'0', 0);
    h[345..351].copy_from_slice(b"prefix");
    // A pre-1970 mtime in base-256, as GNU tar writes it.
    h[136..148].fill(0xff);
    h[140..148].copy_from_slice(&(-315_619_200i64).to_be_bytes());
    set_sum(&mut h);
    let mut a = Ar::default();
    a.add(h, b"");
    let got = read(&a.end()).unwrap();
    assert_eq!(got[0].0.name, b"prefix/name");
    assert_eq!(got[0].0.mtime, (-315_619_200, 0));

    let mut h = header(b"dev", b'3', 0);
    num(&mut h, 329..337, 4);
    num(&mut h, 337..345, 1 << 22); // base-256 minor
    set_sum(&mut h);
    let mut a = Ar::default();
    a.add(h, b"");
    let got = read(&a.end()).unwrap();
    assert_eq!(got[0].0.dev, (4, 1 << 22));
}

#[test]
fn bad_checksum() {
    let mut h = header(b"f", b'0', 0);
    h[0] = b'g';
    let mut a = Ar::default();
    a.add(h, b"");
    let e = read(&a.end()).unwrap_err();
    assert!(matches!(e.kind, TarErrorKind::Checksum { .. }), "{e}");
    assert_eq!(e.member, "g");
}

#[test]
fn lying_pax_length() {
    let mut a = Ar::default();
    let data = b"30 path=short\n".to_vec();
    a.add(header(b"PaxHeader", b'x', data.len() as u64), &data);
    a.file(b"f", b"");
    let e = read(&a.end()).unwrap_err();
    assert!(matches!(e.kind, TarErrorKind::Pax(_)), "{e}");
}

#[test]
fn truncation_everywhere_is_an_error() {
    let mut a = Ar::default();
    a.file(b"f", &[1u8; 700]);
    let full = a.end();
    // In the header, the body, the padding; never a short file.
    for cut in [100, 512 + 10, 512 + 700, 512 + 1000] {
        let e = read(&full[..cut]).unwrap_err();
        assert!(e.is_truncated(), "cut {cut}: {e}");
    }
    // Ending on a block boundary without end blocks is the end.
    assert_eq!(read(&full[..1536]).unwrap().len(), 1);
}

#[test]
fn huge_pax_size_then_end_of_stream() {
    let mut a = Ar::default();
    a.pax(b'x', &[(b"size", b"10737418240")]);
    a.add(header(b"big", b'0', 0), &[5u8; 512]);
    let bytes = a.0.clone();
    // A stream: the member is returned, its body runs out.
    let mut r = Reader::new(&bytes[..], Limits::default());
    let m = r.next().unwrap().unwrap();
    assert_eq!(m.size, 10 << 30);
    let e = std::io::copy(&mut r.body(), &mut std::io::sink()).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    let e = TarError::from_io(e);
    assert_eq!(e.member, "big");
    assert!(e.is_truncated());
    let (member, reason) = e.into_refusal();
    assert_eq!(member, "big");
    assert!(
        matches!(&reason, Ok(ArchiveRefusal::Truncated { what }) if what == "body"),
        "{reason:?}"
    );
    // Skipped instead of read: the same.
    let mut r = Reader::new(&bytes[..], Limits::default());
    r.next().unwrap().unwrap();
    assert!(r.next().unwrap_err().is_truncated());
    // A seekable file: refused when the member is returned.
    let mut r =
        Reader::seekable(Cursor::new(bytes), Limits::default()).unwrap();
    let e = r.next().unwrap_err();
    assert!(e.is_truncated(), "{e}");
}

#[test]
fn seekable_offsets() {
    let mut a = Ar::default();
    a.file(b"a", &[1u8; 10]);
    a.pax(b'x', &[(b"path", b"b")]);
    a.file(b"bb", &[2u8; 600]);
    let bytes = a.end();
    let mut r = Reader::seekable(Cursor::new(bytes.clone()), Limits::default())
        .unwrap();
    let a = r.next().unwrap().unwrap();
    assert_eq!((a.header_offset, a.data_offset), (0, 512));
    let b = r.next().unwrap().unwrap();
    assert_eq!((b.header_offset, b.data_offset), (1024, 2560));
    assert_eq!(&bytes[2560..2560 + 600], &[2u8; 600][..]);
    assert_eq!(b.segments(), vec![(0, 600, 2560)]);
    assert!(r.next().unwrap().is_none());
    r.finish().unwrap();
}

/// Reads `bytes` to the end; returns the members and every quirk.
fn quirks(bytes: &[u8]) -> (Vec<(Member, Vec<u8>)>, Vec<Quirk>) {
    let mut r =
        Reader::new(bytes, Limits::default()).with_names(NameTable::empty());
    let mut out = Vec::new();
    while let Some(m) = r.next().unwrap() {
        let mut body = Vec::new();
        r.body().read_to_end(&mut body).unwrap();
        out.push((m, body));
    }
    r.read_rest().unwrap();
    (out, r.take_quirks())
}

#[test]
fn what_follows_the_end_is_read_and_noted() {
    let mut a = Ar::default();
    a.file(b"f", b"x");
    let mut bytes = a.end();
    bytes.extend_from_slice(&[0u8; 8192]);
    let (got, q) = quirks(&bytes);
    assert_eq!((got.len(), q), (1, vec![]));
    // A stray byte, garbage: ignored, said.
    for tail in [&b"\n"[..], b"garbage"] {
        let mut b = bytes.clone();
        b.extend_from_slice(tail);
        let (got, q) = quirks(&b);
        assert_eq!(got.len(), 1);
        assert_eq!(q.len(), 1, "{q:?}");
        assert_eq!(q[0].offset, bytes.len() as u64);
        assert_eq!(
            q[0].kind,
            QuirkKind::TrailingData {
                // The end marker's second block, the zeros, the tail.
                bytes: (BLOCK + 8192 + tail.len()) as u64
            }
        );
    }
    // A second archive: not read, its first member named.
    let mut b = bytes.clone();
    b.extend_from_slice(&Ar::default().file(b"second", b"y").end());
    let (got, q) = quirks(&b);
    assert_eq!(got.len(), 1);
    assert_eq!(
        q[0].kind,
        QuirkKind::ConcatenatedArchive {
            next_member: "second".into()
        }
    );
    assert_eq!(q[0].offset, bytes.len() as u64);
    // What follows still counts against the total.
    let limits = Limits {
        max_total_bytes: 4096,
        ..Limits::default()
    };
    let mut r = Reader::new(&b[..], limits);
    while r.next().unwrap().is_some() {}
    assert!(matches!(
        r.read_rest().unwrap_err().kind,
        TarErrorKind::Limit { .. }
    ));
}

#[test]
fn bodies_on_links_and_dirs() {
    // Symlinks, devices and FIFOs with a body: refused.
    for typ in [b'2', b'3', b'6'] {
        let mut a = Ar::default();
        a.add(header(b"x", typ, 10), &[0u8; 10]);
        assert!(read(&a.end()).is_err(), "type {}", typ as char);
    }
    // Hard links and directories: the body skipped, said.
    for (typ, what) in [(b'1', "hard link"), (b'5', "directory")] {
        let mut a = Ar::default();
        let mut h = header(b"x", typ, 600);
        h[157] = b'y';
        set_sum(&mut h);
        a.add(h, &[7u8; 600]).file(b"after", b"z");
        let bytes = a.end();
        let (got, q) = quirks(&bytes);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].0.stored_size, got[0].1.len()), (0, 0));
        assert_eq!(
            (got[1].0.name.as_slice(), got[1].1.as_slice()),
            (&b"after"[..], &b"z"[..])
        );
        assert_eq!(q[0].kind, QuirkKind::BodySkipped { what, bytes: 600 });
        assert_eq!(q[0].member, "x");
        // Seekable, the same; a body cut short is still truncation.
        let mut r =
            Reader::seekable(Cursor::new(bytes.clone()), Limits::default())
                .unwrap();
        assert_eq!(r.next().unwrap().unwrap().name, b"x");
        assert_eq!(r.next().unwrap().unwrap().name, b"after");
        let cut = &bytes[..BLOCK + 100];
        let mut r =
            Reader::seekable(Cursor::new(cut.to_vec()), Limits::default())
                .unwrap();
        let e = r.next().and_then(|_| r.next()).unwrap_err();
        assert!(e.is_truncated(), "{e}");
        // The skipped body counts against the total.
        let limits = Limits {
            max_total_bytes: 500,
            ..Limits::default()
        };
        assert!(all(&bytes, limits).is_err());
    }
}

#[test]
fn repeated_long_names_the_last_wins() {
    let long = |name: &[u8], typ: u8| {
        let mut v = name.to_vec();
        v.push(0);
        (header(b"././@LongLink", typ, v.len() as u64), v)
    };
    let mut a = Ar::default();
    let (h, d) = long(b"first/name", b'L');
    a.add(h, &d);
    let (h, d) = long(b"second/name", b'L');
    a.add(h, &d);
    a.file(b"short", b"body");
    let (h, d) = long(b"nope", b'K');
    a.add(h, &d);
    let (h, d) = long(b"target", b'K');
    a.add(h, &d);
    a.add(header(b"l", b'2', 0), b"");
    let (got, q) = quirks(&a.end());
    assert_eq!(got[0].0.name, b"second/name");
    assert_eq!(got[1].0.link.as_deref(), Some(&b"target"[..]));
    assert_eq!(q.len(), 2);
    assert_eq!(q[0].member, "second/name");
    assert_eq!(q[0].kind, QuirkKind::RepeatedLongName { link: false });
    assert_eq!(q[1].kind, QuirkKind::RepeatedLongName { link: true });
}

#[test]
fn empty_archives_and_headers() {
    // Docker's empty layer; a volume label alone; an empty PAX header.
    assert_eq!(quirks(&[0u8; 1024]), (vec![], vec![]));
    let mut v = header(b"label", b'V', 0);
    v[257..265].copy_from_slice(b"ustar  \0");
    set_sum(&mut v);
    assert_eq!(quirks(&Ar::default().add(v, b"").end()).0.len(), 0);
    let (got, q) =
        quirks(&Ar::default().add(header(b"PaxHeader", b'x', 0), b"").end());
    assert!(got.is_empty());
    assert_eq!(q[0].kind, QuirkKind::EmptyPaxHeader);
    // Before a member, an empty PAX header is nothing at all.
    let (got, q) = quirks(
        &Ar::default()
            .add(header(b"PaxHeader", b'x', 0), b"")
            .file(b"f", b"x")
            .end(),
    );
    assert_eq!((got.len(), q.len()), (1, 0));
}

#[test]
fn pax_times_with_junk_and_selinux_labels() {
    let mut a = Ar::default();
    a.pax(
        b'x',
        &[
            (b"mtime", b"1350244992.02396010XYZ"),
            (b"RHT.security.selinux", b"system_u:object_r:etc_t:s0"),
        ],
    );
    a.file(b"t", b"");
    a.pax(b'x', &[(b"atime", b"not a time")]);
    a.file(b"u", b"");
    let bytes = a.end();
    let mut r = Reader::new(&bytes[..], Limits::default());
    let t = r.next().unwrap().unwrap();
    assert_eq!(t.mtime, (1350244992, 23_960_100));
    assert_eq!(
        t.xattrs,
        vec![(
            b"security.selinux".to_vec(),
            b"system_u:object_r:etc_t:s0".to_vec()
        )]
    );
    let q = r.take_quirks();
    assert_eq!(q.len(), 2);
    assert_eq!(q[0].member, "t");
    assert!(
        matches!(&q[0].kind, QuirkKind::TimeJunk { key, .. } if key == "mtime")
    );
    assert_eq!(q[1].kind, QuirkKind::SelinuxLabel);
    // No number at all: still refused.
    assert!(matches!(r.next().unwrap_err().kind, TarErrorKind::Pax(_)));
}

#[test]
fn solaris_acl_headers_are_skipped() {
    let mut a = Ar::default();
    let acl = b"01000000\0user::rw-,group::r--,mask:r--,other:---\0";
    a.add(header(b"f", b'A', acl.len() as u64), acl);
    a.file(b"f", b"data");
    let (got, q) = quirks(&a.end());
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, b"data");
    assert_eq!(q[0].kind, QuirkKind::SolarisAcl);
    assert_eq!((q[0].member.as_str(), q[0].offset), ("f", 0));
}

#[test]
fn total_declared_bytes_limit() {
    let mut a = Ar::default();
    a.file(b"a", &[0u8; 600]);
    a.file(b"b", &[0u8; 600]);
    let bytes = a.end();
    let limits = Limits {
        max_total_bytes: 1000,
        ..Limits::default()
    };
    let e = all(&bytes, limits).unwrap_err();
    assert_eq!(e.member, "b");
    assert!(matches!(
        e.kind,
        TarErrorKind::Limit {
            what: "total declared bytes",
            limit: 1000
        }
    ));
    let (_, reason) = e.into_refusal();
    let msg = reason.unwrap().to_string();
    assert!(
        msg.contains("total declared bytes exceed the limit of 1000"),
        "{msg}"
    );
}

#[test]
fn pax_header_bomb() {
    let mut a = Ar::default();
    a.add(header(b"PaxHeader", b'x', 1 << 40), b"");
    let e = read(&a.0).unwrap_err();
    assert!(matches!(
        e.kind,
        TarErrorKind::Limit {
            what: "PAX extended header bytes",
            ..
        }
    ));
}

fn sparse_pax_00(map: &[(u64, u64)], real: u64, data: &[u8]) -> Vec<u8> {
    let real = real.to_string();
    let mut recs: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (b"GNU.sparse.size".to_vec(), real.into_bytes()),
        (
            b"GNU.sparse.numblocks".to_vec(),
            map.len().to_string().into_bytes(),
        ),
    ];
    for (o, l) in map {
        recs.push((b"GNU.sparse.offset".to_vec(), o.to_string().into_bytes()));
        recs.push((
            b"GNU.sparse.numbytes".to_vec(),
            l.to_string().into_bytes(),
        ));
    }
    let refs: Vec<(&[u8], &[u8])> =
        recs.iter().map(|(k, v)| (&k[..], &v[..])).collect();
    let mut a = Ar::default();
    a.pax(b'x', &refs);
    a.file(b"sparse", data);
    a.end()
}

#[test]
fn sparse_00() {
    let got = read(&sparse_pax_00(
        &[(10, 3), (100, 2), (200, 0)],
        200,
        b"abcde",
    ))
    .unwrap();
    let (m, body) = &got[0];
    assert_eq!(m.name, b"sparse");
    assert_eq!(m.size, 200);
    assert_eq!(m.stored_size, 5);
    assert_eq!(m.sparse.as_deref(), Some(&[(10, 3), (100, 2)][..]));
    assert_eq!(body, b"abcde");
    assert_eq!(m.segments(), vec![(10, 3, 1536), (100, 2, 1539)]);

    for (map, real, why) in [
        (&[(10u64, 3u64), (11, 2)][..], 200, "overlap"),
        (&[(100, 3), (10, 2)], 200, "descending"),
        (&[(10, 3), (199, 2)], 200, "past the end"),
        (&[(10, 3), (100, 3)], 200, "more data than stored"),
    ] {
        let e = read(&sparse_pax_00(map, real, b"abcde")).unwrap_err();
        assert!(matches!(e.kind, TarErrorKind::Sparse(_)), "{why}: {e}");
    }
}

#[test]
fn sparse_01_and_10() {
    let mut a = Ar::default();
    a.pax(
        b'x',
        &[
            (b"GNU.sparse.size", b"300"),
            (b"GNU.sparse.numblocks", b"2"),
            (b"GNU.sparse.name", b"real/name"),
            (b"GNU.sparse.map", b"0,2,298,2"),
        ],
    );
    a.file(b"./GNUSparseFile.1/name", b"abcd");
    let got = read(&a.end()).unwrap();
    assert_eq!(got[0].0.name, b"real/name");
    assert_eq!(got[0].0.sparse.as_deref(), Some(&[(0, 2), (298, 2)][..]));
    assert_eq!(got[0].1, b"abcd");

    let mut data = b"2\n0\n2\n298\n2\n".to_vec();
    data.resize(BLOCK, 0);
    data.extend_from_slice(b"abcd");
    let mut a = Ar::default();
    a.pax(
        b'x',
        &[
            (b"GNU.sparse.major", b"1"),
            (b"GNU.sparse.minor", b"0"),
            (b"GNU.sparse.name", b"real10"),
            (b"GNU.sparse.realsize", b"300"),
        ],
    );
    a.file(b"./GNUSparseFile.1/real10", &data);
    let bytes = a.end();
    let got = read(&bytes).unwrap();
    assert_eq!(got[0].0.name, b"real10");
    assert_eq!(got[0].0.stored_size, 4);
    assert_eq!(got[0].1, b"abcd");
    let mut r = Reader::seekable(Cursor::new(bytes.clone()), Limits::default())
        .unwrap();
    let m = r.next().unwrap().unwrap();
    assert_eq!(&bytes[m.data_offset as usize..][..4], b"abcd");

    // Without GNU.sparse.name: the header's name, as GNU tar uses it.
    let mut a = Ar::default();
    a.pax(
        b'x',
        &[
            (b"GNU.sparse.major", b"1"),
            (b"GNU.sparse.minor", b"0"),
            (b"GNU.sparse.realsize", b"300"),
        ],
    );
    a.file(b"./GNUSparseFile.1/x", &data);
    let (got, q) = quirks(&a.end());
    assert_eq!(got[0].0.name, b"./GNUSparseFile.1/x");
    assert_eq!(got[0].1, b"abcd");
    assert_eq!(q[0].kind, QuirkKind::SparseWithoutName);
    // An unknown version.
    let mut a = Ar::default();
    a.pax(
        b'x',
        &[(b"GNU.sparse.major", b"2"), (b"GNU.sparse.minor", b"0")],
    );
    a.file(b"x", b"");
    assert!(matches!(
        read(&a.end()).unwrap_err().kind,
        TarErrorKind::Unsupported(_)
    ));
}

/// An old GNU sparse header with `pairs` (more than 4 go to extension
/// blocks).
fn old_gnu_sparse(pairs: &[(u64, u64)], real: u64, data: &[u8]) -> Vec<u8> {
    let mut h = header(b"oldsparse", b'S', data.len() as u64);
    h[257..265].copy_from_slice(b"ustar  \0");
    h[265..297].fill(0);
    h[297..329].fill(0);
    let entry = |b: &mut [u8; BLOCK], at: usize, (o, l): (u64, u64)| {
        num(b, at..at + 12, o);
        num(b, at + 12..at + 24, l);
    };
    for (i, &p) in pairs.iter().take(4).enumerate() {
        entry(&mut h, 386 + 24 * i, p);
    }
    num(&mut h, 483..495, real);
    let rest: Vec<_> = pairs.iter().skip(4).copied().collect();
    h[482] = u8::from(!rest.is_empty());
    set_sum(&mut h);
    let mut out = h.to_vec();
    let chunks: Vec<_> = rest.chunks(21).collect();
    for (ci, chunk) in chunks.iter().enumerate() {
        let mut e = [0u8; BLOCK];
        for (i, &p) in chunk.iter().enumerate() {
            entry(&mut e, 24 * i, p);
        }
        e[504] = u8::from(ci + 1 < chunks.len());
        out.extend_from_slice(&e);
    }
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(BLOCK) * BLOCK + 2 * BLOCK, 0);
    out
}

#[test]
fn old_gnu_sparse_with_extension_blocks() {
    let pairs: Vec<(u64, u64)> = (0..30).map(|i| (i * 1000, 1)).collect();
    let data = vec![9u8; 30];
    let bytes = old_gnu_sparse(&pairs, 30_000, &data);
    let got = read(&bytes).unwrap();
    assert_eq!(got[0].0.kind, Kind::File);
    assert_eq!(got[0].0.size, 30_000);
    assert_eq!(got[0].0.sparse.as_deref(), Some(&pairs[..]));
    assert_eq!(got[0].1, data);
    // Header plus two extension blocks before the data.
    assert_eq!(got[0].0.data_offset, 3 * BLOCK as u64);

    let limits = Limits {
        max_sparse_entries: 20,
        ..Limits::default()
    };
    let e = all(&bytes, limits).unwrap_err();
    assert!(
        matches!(
            e.kind,
            TarErrorKind::Limit {
                what: "sparse map entries",
                ..
            }
        ),
        "{e}"
    );
    // An empty last extension block ends the map, as GNU tar reads it;
    // one saying another follows is refused.
    let mut bytes = old_gnu_sparse(&pairs[..4], 30_000, &data[..4]);
    bytes[482] = 1;
    let mut h: [u8; BLOCK] = bytes[..BLOCK].try_into().unwrap();
    set_sum(&mut h);
    let mut with_empty = h.to_vec();
    with_empty.extend_from_slice(&[0u8; BLOCK]);
    with_empty.extend_from_slice(&bytes[BLOCK..]);
    let (got, q) = quirks(&with_empty);
    assert_eq!(got[0].1, &data[..4]);
    assert_eq!(got[0].0.sparse.as_deref(), Some(&pairs[..4]));
    assert_eq!(q[0].kind, QuirkKind::EmptySparseExtension);
    with_empty[BLOCK + 504] = 1;
    assert!(read(&with_empty).is_err());
    // Overlapping.
    let e = read(&old_gnu_sparse(&[(0, 2), (1, 1)], 10, b"abc")).unwrap_err();
    assert!(matches!(e.kind, TarErrorKind::Sparse(_)), "{e}");
}

#[test]
fn sparse_bomb_is_refused_by_the_total_limit() {
    // 3 GiB declared in a few blocks.
    let bytes = sparse_pax_00(&[(3 << 30, 0)], 3 << 30, b"");
    assert!(bytes.len() < 4096);
    assert_eq!(read(&bytes).unwrap()[0].0.size, 3 << 30);
    let limits = Limits {
        max_total_bytes: 1 << 30,
        ..Limits::default()
    };
    let e = all(&bytes, limits).unwrap_err();
    assert!(
        matches!(
            e.kind,
            TarErrorKind::Limit {
                what: "total declared bytes",
                ..
            }
        ),
        "{e}"
    );
    let bytes = old_gnu_sparse(&[(3 << 30, 0)], 3 << 30, b"");
    assert!(all(&bytes, limits).is_err());
}

#[test]
fn sparse_map_count_bomb() {
    let mut a = Ar::default();
    a.pax(
        b'x',
        &[
            (b"GNU.sparse.major", b"1"),
            (b"GNU.sparse.minor", b"0"),
            (b"GNU.sparse.name", b"n"),
            (b"GNU.sparse.realsize", b"10"),
        ],
    );
    let mut data = b"18446744073709551615\n".to_vec();
    data.resize(BLOCK, 0);
    a.file(b"x", &data);
    let e = read(&a.end()).unwrap_err();
    assert!(
        matches!(
            e.kind,
            TarErrorKind::Limit {
                what: "sparse map entries",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn text_acls_become_xattrs_unless_raw_ones_exist() {
    let mut a = Ar::default();
    a.pax(
        b'x',
        &[(
            b"SCHILY.acl.access",
            b"user::rw-,group::r--,other::r--,user:x:rwx:10,mask::rwx",
        )],
    );
    a.file(b"f", b"");
    a.pax(
        b'x',
        &[
            (b"SCHILY.acl.access", b"user::rw-,group::r--,other::r--"),
            (b"SCHILY.xattr.system.posix_acl_access", b"raw"),
        ],
    );
    a.file(b"g", b"");
    a.pax(
        b'x',
        &[(
            b"SCHILY.acl.default",
            b"user::rw-\nuser:nobody-here:r\ngroup::r--\nmask::r\nother::r--\n",
        )],
    );
    a.file(b"h", b"");
    let bytes = a.end();
    let mut r = Reader::new(&bytes[..], Limits::default())
        .with_names(NameTable::empty());
    let f = r.next().unwrap().unwrap();
    assert_eq!(f.xattrs.len(), 1);
    assert_eq!(f.xattrs[0].0, b"system.posix_acl_access");
    assert_eq!(f.xattrs[0].1.len(), 4 + 5 * 8);
    let g = r.next().unwrap().unwrap();
    assert_eq!(
        g.xattrs,
        vec![(b"system.posix_acl_access".to_vec(), b"raw".to_vec())]
    );
    // An unknown name without an id: that entry dropped, said.
    let h = r.next().unwrap().unwrap();
    assert_eq!(h.xattrs[0].0, b"system.posix_acl_default");
    assert_eq!(h.xattrs[0].1.len(), 4 + 4 * 8);
    let q = r.take_quirks();
    assert_eq!(q.len(), 1);
    assert_eq!(q[0].member, "h");
    assert_eq!(
        q[0].kind,
        QuirkKind::AclEntryDropped {
            entry: "user:nobody-here:r".into()
        }
    );
}

#[test]
fn acls_without_a_mask_get_setfacls() {
    let mut a = Ar::default();
    a.pax(
        b'x',
        &[(
            b"SCHILY.acl.access",
            b"user::rw-,user:10:r-x:10,group::r--,group:20:-w-:20,other::---",
        )],
    );
    a.file(b"f", b"");
    let (got, q) = quirks(&a.end());
    let with_mask = acl_from_text(
        b"user::rw-,user:10:r-x:10,group::r--,group:20:-w-:20,mask::rwx,other::---",
        &NameTable::empty(),
    )
    .unwrap()
    .unwrap();
    assert_eq!(got[0].0.xattrs[0].1, with_mask);
    assert_eq!(got[0].0.mode, 0o670);
    assert_eq!(q[0].kind, QuirkKind::AclMaskComputed);
}

#[test]
fn a_reader_stays_failed() {
    let mut a = Ar::default();
    a.add(header(b"x", b'2', 10), &[0u8; 10]);
    a.file(b"y", b"");
    let bytes = a.end();
    let mut r = Reader::new(&bytes[..], Limits::default());
    assert!(r.next().is_err());
    assert!(r.next().is_err());
}

#[test]
fn pax_header_without_member() {
    let mut a = Ar::default();
    a.pax(b'x', &[(b"path", b"p")]);
    let e = read(&a.end()).unwrap_err();
    assert!(e.is_truncated(), "{e}");
}

/// Every truncation and many byte flips of archives in each format are
/// read without a panic, and whatever is returned keeps its promises.
#[test]
fn damage_never_panics() {
    let mut a = Ar::default();
    a.pax(b'g', &[(b"uname", b"g")]);
    a.pax(
        b'x',
        &[
            (b"path", b"p"),
            (b"SCHILY.xattr.user.a", b"1\n2"),
            (b"SCHILY.acl.access", b"u::rw,g::r,o::r,u:x:r:5,m::r"),
        ],
    );
    a.file(b"f", &[3u8; 700]);
    let mut long = b"l".repeat(200);
    long.push(0);
    a.add(header(b"././@LongLink", b'L', long.len() as u64), &long);
    a.add(header(b"s", b'2', 0), b"");
    let mut bytes = a.end();
    bytes.truncate(bytes.len() - 2 * BLOCK);
    bytes.extend_from_slice(&old_gnu_sparse(
        &[(5, 2), (100, 3)],
        200,
        b"abcde",
    ));
    bytes.extend_from_slice(&sparse_pax_00(&[(0, 1)], 9, b"z"));
    let check = |b: &[u8]| {
        if let Ok(got) = read(b) {
            for (m, body) in got {
                assert_eq!(body.len() as u64, m.stored_size);
                if let Some(map) = &m.sparse {
                    assert!(check_map(map, m.size, m.stored_size).is_ok());
                }
                assert!(!m.name.is_empty() && !m.name.contains(&0));
            }
        }
    };
    for cut in 0..bytes.len() {
        check(&bytes[..cut]);
    }
    // A simple xorshift: deterministic, no dependency.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..5_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut b = bytes.clone();
        let at = (x % b.len() as u64) as usize;
        b[at] ^= (x >> 32) as u8 | 1;
        check(&b);
    }
}
