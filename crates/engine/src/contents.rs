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
//! The hash is XXH3-128, hex ([`hex_of`]): the manifest's. A caller
//! that stores contents by another name (a composefs store's fs-verity
//! digest) gives [`Contents::with_objects`] its hasher; each file is then
//! hashed that way instead, and the extended attributes' digest is not
//! taken.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::sync::{Arc, Mutex};

/// A digest taken of a file's body beside XXH3, under which a store
/// keeps it (32 bytes: composefs's fs-verity SHA-256).
pub type ObjectDigest = [u8; 32];

/// A hash of a body as a store names it, fed as it is written.
pub trait ObjectHash: Send {
    /// Adds `b`.
    fn write(&mut self, b: &[u8]);
    /// The digest of everything written.
    fn finish(self: Box<Self>) -> ObjectDigest;
}

/// Makes a new [`ObjectHash`] for each file.
pub type ObjectHasher = Arc<dyn Fn() -> Box<dyn ObjectHash> + Send + Sync>;

/// What was recorded of one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Taken {
    size: u64,
    /// Its XXH3 hash, unless the recording takes objects instead.
    hash: Option<u128>,
    /// The digest of its extended attributes, when read (`Some(None)`:
    /// it has none).
    xattrs: Option<Option<u128>>,
    /// Its [`ObjectHash`] digest, when the recording takes one.
    object: Option<ObjectDigest>,
}

/// What was recorded of a file, as [`Contents::get`] gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// The size it was hashed at.
    pub size: u64,
    /// Its content's XXH3 hash, hex; `None` when the recording takes
    /// an [`ObjectHash`] instead.
    pub hash: Option<String>,
    /// Its extended attributes' digest ([`xattrs_digest`], hex), when
    /// read: `Some(None)` if it has none.
    pub xattrs: Option<Option<String>>,
    /// Its digest by the [`ObjectHash`] given to
    /// [`Contents::with_objects`].
    pub object: Option<ObjectDigest>,
}

/// Paths in the root (relative, `/`-separated bytes) and what was
/// recorded of the file written there.
#[derive(Default)]
pub struct Contents {
    by_path: Mutex<BTreeMap<Vec<u8>, Taken>>,
    objects: Option<ObjectHasher>,
}

impl std::fmt::Debug for Contents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Contents")
            .field("recorded", &self.len())
            .field("objects", &self.objects.is_some())
            .finish()
    }
}

impl Contents {
    /// Nothing recorded yet.
    pub fn new() -> Contents {
        Contents::default()
    }

    /// Nothing recorded yet; each file is hashed by a new `objects()`
    /// instead of XXH3 (its digest in [`Recorded::object`]), and its
    /// extended attributes are left unread.
    pub fn with_objects(objects: ObjectHasher) -> Contents {
        Contents {
            objects: Some(objects),
            ..Contents::default()
        }
    }

    /// A hasher for one file's body, as this recording takes it.
    pub fn hasher(&self) -> BodyHash {
        match &self.objects {
            Some(f) => BodyHash::Object(f()),
            None => BodyHash::Xxh(Hasher::new()),
        }
    }

    /// Whether each file is hashed by an [`ObjectHash`].
    pub fn takes_objects(&self) -> bool {
        self.objects.is_some()
    }

    /// Whether the digest of each file's extended attributes is wanted.
    pub fn wants_xattrs(&self) -> bool {
        self.objects.is_none()
    }

    /// What was recorded at `rel`.
    pub fn get(&self, rel: &[u8]) -> Option<Recorded> {
        self.lock().get(rel).map(|t| Recorded {
            size: t.size,
            hash: t.hash.map(hex_of),
            xattrs: t.xattrs.map(|x| x.map(hex_of)),
            object: t.object,
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
        hash: BodyHash,
        xattrs: Option<Option<u128>>,
    ) {
        let (hash, object) = match hash {
            BodyHash::Xxh(h) => (Some(h.finish()), None),
            BodyHash::Object(o) => (None, Some(o.finish())),
        };
        self.lock().insert(
            rel,
            Taken {
                size,
                hash,
                xattrs,
                object,
            },
        );
    }

    /// Forgets `rel` alone.
    pub(crate) fn forget_one(&self, rel: &[u8]) {
        self.lock().remove(rel);
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

/// A body's hash being taken as a recording takes it: XXH3, or the
/// store's [`ObjectHash`] alone (the other is never read then).
// One per file being written, on its writer's stack: boxing XXH3's
// state would cost an allocation per file.
#[allow(clippy::large_enum_variant)]
pub enum BodyHash {
    /// XXH3-128, the manifest's.
    Xxh(Hasher),
    /// The store's digest.
    Object(Box<dyn ObjectHash>),
}

impl BodyHash {
    /// The [`ObjectHash`] digest, when it is one.
    pub fn finish_object(self) -> Option<ObjectDigest> {
        match self {
            BodyHash::Xxh(_) => None,
            BodyHash::Object(o) => Some(o.finish()),
        }
    }

    /// Adds `b`.
    pub fn write(&mut self, b: &[u8]) {
        match self {
            BodyHash::Xxh(h) => h.write(b),
            BodyHash::Object(o) => o.write(b),
        }
    }
}

/// An XXH3-128 hash being taken.
#[derive(Default)]
pub struct Hasher {
    xxh: twox_hash::XxHash3_128,
}

impl Hasher {
    /// A new one.
    pub fn new() -> Hasher {
        Hasher::default()
    }

    /// Adds `b`.
    pub fn write(&mut self, b: &[u8]) {
        self.xxh.write(b);
    }

    /// The hash of everything written.
    pub fn finish(&self) -> u128 {
        self.xxh.finish_128()
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

    /// An object hash that counts bytes: enough to see it fed.
    struct Count(u64);

    impl ObjectHash for Count {
        fn write(&mut self, b: &[u8]) {
            self.0 += b.len() as u64;
        }
        fn finish(self: Box<Self>) -> ObjectDigest {
            let mut d = [0u8; 32];
            d[..8].copy_from_slice(&self.0.to_le_bytes());
            d
        }
    }

    #[test]
    fn an_object_hash_is_taken_instead_of_xxh3_and_a_directory_forgets_itself_alone()
     {
        let c = Contents::with_objects(Arc::new(|| Box::new(Count(0))));
        assert!(!c.wants_xattrs() && Contents::new().wants_xattrs());
        let mut h = c.hasher();
        h.write(b"abc");
        h.write(b"de");
        c.put(b"d/f".to_vec(), 5, h, None);
        let r = c.get(b"d/f").unwrap();
        assert_eq!(r.hash, None);
        assert_eq!(r.object.unwrap()[..8], 5u64.to_le_bytes());
        c.forget_one(b"d");
        assert!(c.get(b"d/f").is_some());
        c.forget(b"d");
        assert!(c.get(b"d/f").is_none());
    }

    #[test]
    fn forgetting_a_path_forgets_what_is_beneath_it_alone() {
        let c = Contents::new();
        let seven = || {
            let mut h = Hasher::new();
            h.write(b"7");
            h
        };
        let recorded_seven = || BodyHash::Xxh(seven());
        for p in ["a", "a/b", "a/b/c", "a.b", "ab"] {
            c.put(p.as_bytes().to_vec(), 1, recorded_seven(), Some(None));
        }
        c.forget(b"a");
        assert!(c.get(b"a").is_none() && c.get(b"a/b/c").is_none());
        assert_eq!(
            c.get(b"a.b"),
            Some(Recorded {
                size: 1,
                hash: Some(hex_of(seven().finish())),
                xattrs: Some(None),
                object: None,
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
