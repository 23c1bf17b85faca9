//! ACL headers become xattrs; a failed reader stays failed; damage never
//! panics.

use super::*;

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
    // A header whose checksum no longer fits it.
    let mut h = header(b"x", b'0', 10);
    h[0] = b'z';
    a.add(h, &[0u8; 10]);
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
