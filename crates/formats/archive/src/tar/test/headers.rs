//! Headers: pax records, GNU long names, ustar numbers, checksums,
//! truncation and offsets.

use std::io::Cursor;

use super::*;

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
    assert!(
        matches!(
            e.kind,
            TarErrorKind::Checksum {
                stored: Some(_),
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("header checksum mismatch"), "{e}");
    assert_eq!(e.member, "g");
    // A field that is not a number says so.
    let mut h = header(b"f", b'0', 0);
    h[148..156].copy_from_slice(b"zzzzzzz\0");
    let mut a = Ar::default();
    a.add(h, b"");
    let e = read(&a.end()).unwrap_err();
    assert!(
        matches!(e.kind, TarErrorKind::Checksum { stored: None, .. }),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("header checksum field is not a number"),
        "{e}"
    );
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
