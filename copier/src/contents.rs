//! Content hashes (and extended attributes) taken as files are written,
//! so that a caller recording the tree it laid out (an install's
//! manifest) need not open and read each file back.
//!
//! An unpack given a [`Contents`] ([`crate::unpack::UnpackOptions`])
//! hashes each regular file's body as its worker writes it (from memory,
//! from the stream's chunks, or read back from the range of the plain
//! tar file the kernel copied it from) and records the hash under the
//! file's path in the root. Every member that is not a file, and every
//! whiteout, forgets what was recorded at and beneath its path, so a hash
//! is never left under a path that now holds something else; a path
//! with none recorded (a sparse file, a hard link, a file some other step
//! wrote) is for the caller to read. A hash is taken for the size it was
//! written at: a caller checks the size it finds before trusting it.
//!
//! With the hash goes a digest of the file's extended attributes as they
//! were left on it ([`xattrs_digest`]), read through the worker's own
//! descriptor once everything was set.
//!
//! The hash is XXH3-128, hex ([`hex_of`]): the manifest's.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::sync::Mutex;

/// What was recorded of one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Taken {
    size: u64,
    hash: u128,
    /// The digest of its extended attributes, when read (`Some(None)`:
    /// it has none).
    xattrs: Option<Option<u128>>,
}

/// What was recorded of a file, as [`Contents::get`] gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// The size it was hashed at.
    pub size: u64,
    /// Its content's hash, hex.
    pub hash: String,
    /// Its extended attributes' digest ([`xattrs_digest`], hex), when
    /// read: `Some(None)` if it has none.
    pub xattrs: Option<Option<String>>,
}

/// Paths in the root (relative, `/`-separated bytes) and what was
/// recorded of the file written there.
#[derive(Debug, Default)]
pub struct Contents {
    by_path: Mutex<BTreeMap<Vec<u8>, Taken>>,
}

impl Contents {
    /// Nothing recorded yet.
    pub fn new() -> Contents {
        Contents::default()
    }

    /// What was recorded at `rel`.
    pub fn get(&self, rel: &[u8]) -> Option<Recorded> {
        self.lock().get(rel).map(|t| Recorded {
            size: t.size,
            hash: hex_of(t.hash),
            xattrs: t.xattrs.map(|x| x.map(hex_of)),
        })
    }

    /// How many paths have a hash.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True if none has.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn put(
        &self,
        rel: Vec<u8>,
        size: u64,
        hash: u128,
        xattrs: Option<Option<u128>>,
    ) {
        self.lock().insert(rel, Taken { size, hash, xattrs });
    }

    /// Forgets `rel` and everything beneath it.
    pub(crate) fn forget(&self, rel: &[u8]) {
        let mut m = self.lock();
        m.remove(rel);
        let mut lo = rel.to_vec();
        let mut hi = rel.to_vec();
        if rel.is_empty() {
            m.clear();
            return;
        }
        lo.push(b'/');
        // `0` follows `/`: the range holds exactly what is beneath.
        hi.push(b'0');
        let doomed: Vec<Vec<u8>> =
            m.range(lo..hi).map(|(k, _)| k.clone()).collect();
        for k in doomed {
            m.remove(&k);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Vec<u8>, Taken>> {
        self.by_path.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A hash being taken.
#[derive(Default)]
pub struct Hasher(twox_hash::XxHash3_128);

impl Hasher {
    /// A new one.
    pub fn new() -> Hasher {
        Hasher(twox_hash::XxHash3_128::new())
    }

    /// Adds `b`.
    pub fn write(&mut self, b: &[u8]) {
        self.0.write(b);
    }

    /// The hash of everything written.
    pub fn finish(&self) -> u128 {
        self.0.finish_128()
    }
}

/// XFS lists a file's POSIX ACLs a second time under these names, to
/// root: they are the ACLs (`system.posix_acl_*`), never digested or
/// copied on their own.
pub fn xattr_alias(name: &[u8]) -> bool {
    name.starts_with(b"trusted.SGI_ACL_")
}

/// The digest of extended attributes (names and values, in any order,
/// XFS's aliases left out): `None` for none.
pub fn xattrs_digest(mut pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Option<u128> {
    pairs.retain(|(n, _)| !xattr_alias(n));
    if pairs.is_empty() {
        return None;
    }
    pairs.sort();
    let mut h = Hasher::new();
    for (n, v) in &pairs {
        h.write(&(n.len() as u64).to_le_bytes());
        h.write(n);
        h.write(&(v.len() as u64).to_le_bytes());
        h.write(v);
    }
    Some(h.finish())
}

/// How a hash is written down: 32 hex digits.
pub fn hex_of(h: u128) -> String {
    format!("{h:032x}")
}

/// The hash of everything `r` reads, and how many bytes it read.
pub fn hash_reader(
    mut r: impl Read,
    buf: &mut [u8],
) -> io::Result<(u64, u128)> {
    let mut h = Hasher::new();
    let mut total = 0u64;
    loop {
        let n = match r.read(buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.write(&buf[..n]);
        total += n as u64;
    }
    Ok((total, h.finish()))
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn forgetting_a_path_forgets_what_is_beneath_it_alone() {
        let c = Contents::new();
        for p in ["a", "a/b", "a/b/c", "a.b", "ab"] {
            c.put(p.as_bytes().to_vec(), 1, 7, Some(None));
        }
        c.forget(b"a");
        assert!(c.get(b"a").is_none() && c.get(b"a/b/c").is_none());
        assert_eq!(
            c.get(b"a.b"),
            Some(Recorded {
                size: 1,
                hash: hex_of(7),
                xattrs: Some(None)
            })
        );
        assert_eq!(c.len(), 2);
        let mut buf = [0u8; 3];
        let (n, h) = hash_reader(&b"hello world"[..], &mut buf).unwrap();
        let mut whole = Hasher::new();
        whole.write(b"hello world");
        assert_eq!((n, h), (11, whole.finish()));
    }
}
