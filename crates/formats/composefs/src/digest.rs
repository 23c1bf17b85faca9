//! Object names: the fs-verity SHA-256 digest of the contents (4 KiB
//! blocks, no salt), as composefs names its objects and images, and the
//! `XX/<62 hex>` path of an object under `objects/`.

use std::io::{self, Read, Write};

use composefs::fsverity::{FsVerityHashValue, FsVerityHasher};
use zerocopy::{FromBytes, IntoBytes};

/// An object's name: the fs-verity SHA-256 digest of its contents.
pub type ObjectId = composefs::fsverity::Sha256HashValue;

/// Files of at most this many bytes are stored in the image itself, not
/// as objects (composefs-rs's `INLINE_CONTENT_MAX_V0`, which mkcomposefs
/// uses too, so images of the same tree have the same ID).
pub const INLINE_MAX: u64 = composefs::INLINE_CONTENT_MAX_V0 as u64;

/// The digest of `data`.
pub fn of_bytes(data: &[u8]) -> ObjectId {
    FsVerityHasher::<ObjectId>::hash(data)
}

/// A digest taken as a body goes by, in pieces of any size: what a
/// writer that already holds the bytes (an unpacker's worker) feeds, so
/// that nobody reads the file back to name it.
#[derive(Default)]
pub struct BodyHasher(FsVerityHasher<ObjectId>);

impl BodyHasher {
    /// A new one.
    pub fn new() -> BodyHasher {
        BodyHasher::default()
    }

    /// Adds `b`.
    pub fn write(&mut self, b: &[u8]) {
        // Writing into the hasher only buffers: it cannot fail.
        let _ = self.0.write_all(b);
    }

    /// The digest of everything written, as bytes.
    pub fn finish(mut self) -> [u8; 32] {
        let mut out = [0u8; 32];
        out.copy_from_slice(self.0.digest().as_bytes());
        out
    }
}

/// The object name whose bytes are `b` (as [`BodyHasher::finish`] gives).
pub fn from_bytes(b: &[u8; 32]) -> ObjectId {
    // 32 bytes are always a SHA-256 value: this cannot fail.
    ObjectId::read_from_bytes(b).unwrap_or(ObjectId::EMPTY)
}

/// The largest read buffer: reads of 1 MiB, for large files.
const BUF_MAX: u64 = 1 << 20;

/// Streams what is left of `r` through the hasher, handing each chunk
/// read to `each` too (to copy it while it is hashed); returns the digest
/// and the number of bytes. `size_hint` (the file's size, if known)
/// sizes the buffer: a small file does not pay for zeroing a large one,
/// which for a tree of small files cost more than the hashing.
pub fn of_reader(
    mut r: impl Read,
    size_hint: u64,
    mut each: impl FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<(ObjectId, u64)> {
    let mut hasher = FsVerityHasher::<ObjectId>::new();
    // One byte more than the hint, so that the end is found in one read.
    let len = size_hint.saturating_add(1).clamp(4096, BUF_MAX);
    let mut buf = vec![0u8; len as usize];
    let mut total = 0u64;
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.write_all(&buf[..n])?;
        each(&buf[..n])?;
        total += n as u64;
    }
    Ok((hasher.digest(), total))
}

/// `XX/<62 hex>`: where the object `id` lies under `objects/`.
pub fn object_path(id: &ObjectId) -> String {
    id.to_object_pathname()
}

/// The hex digest, as `cfsctl` prints an image ID.
pub fn hex(id: &ObjectId) -> String {
    id.to_hex()
}

/// The ID written as hex (64 digits), or `None`.
pub fn parse_hex(text: &str) -> Option<ObjectId> {
    ObjectId::from_hex(text).ok()
}
