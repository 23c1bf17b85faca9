//! Sparse members in every GNU format, and sparse bombs.

use std::io::Cursor;

use super::*;

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
