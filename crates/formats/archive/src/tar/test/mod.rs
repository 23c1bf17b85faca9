//! Reader tests on archives built by hand, hostile ones first among them:
//! the archive builders here, the cases by concern in the modules.

use std::io::Read;

use super::*;

mod acls_and_damage;
mod headers;
mod notes;
mod sparse;

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
