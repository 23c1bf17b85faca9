//! What GNU tar and bsdtar take and the reader notes as a quirk: data
//! past the end, bodies on links, repeated names, empty headers, odd pax
//! values; and the limits on what a header may claim.

use std::io::Cursor;

use super::*;

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
    // No kind of these has a body in GNU tar or bsdtar: with the next
    // header right after, none is read; with data there, it is skipped.
    for (typ, what) in [
        (b'1', "hard link"),
        (b'2', "symbolic link"),
        (b'3', "character device"),
        (b'4', "block device"),
        (b'5', "directory"),
        (b'6', "FIFO"),
    ] {
        for body in [&[][..], &[7u8; 10][..]] {
            let mut a = Ar::default();
            let mut h = header(b"x", typ, 10);
            h[157] = b'y';
            set_sum(&mut h);
            a.add(h, body).file(b"after", b"z");
            let (got, q) = quirks(&a.end());
            assert_eq!(got.len(), 2, "type {}", typ as char);
            assert_eq!(got[1].1, b"z");
            let want = if body.is_empty() {
                QuirkKind::NoBody { what, bytes: 10 }
            } else {
                QuirkKind::BodySkipped { what, bytes: 10 }
            };
            assert_eq!((q[0].kind.clone(), q[0].member.as_str()), (want, "x"));
        }
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
