//! Where an image's files are: a layout directory, or the members of an
//! uncompressed tar of one (an oci-archive); and reading blobs so that
//! nothing unchecked is taken for a blob.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, Read, Seek};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use zinstall_archive::compress::{Compression, compression_of, read_up_to};
use zinstall_archive::tar;
use zinstall_core::foreign::{self, Follow, What};

use crate::digest::{Digest, Hasher};
use crate::error::{Error, Mismatch, Result};

/// Members of an oci-archive indexed at most: a layout holds a few files
/// per image, so far more than any real archive; a bound on the index's
/// memory whatever the archive says.
const MAX_MEMBERS: usize = 1 << 16;

/// An image's files.
pub(crate) enum Store {
    /// A layout directory; blobs it lacks are asked of `fetch`, if any.
    Dir {
        dir: PathBuf,
        fetch: Option<Arc<dyn Fetch>>,
    },
    /// An oci-archive or docker-archive: its file, and each member's
    /// name with its body's offset and length. `unhashed`: the blob paths
    /// of a docker-archive's uncompressed layers, whose digest is their
    /// diff_id, checked as the stream is read ([`DiffReader`]) rather
    /// than twice.
    Archive {
        file: Arc<File>,
        members: HashMap<String, (u64, u64)>,
        unhashed: HashSet<String>,
    },
}

impl Store {
    /// A layout directory, or an uncompressed tar of one.
    pub(crate) fn open(image: &Path) -> Result<Store> {
        let io = |op, e| Error::Io {
            image: image.to_path_buf(),
            path: image.to_path_buf(),
            op,
            error: e,
        };
        // Opened once: a layout directory, or an archive that must be a
        // regular file (a FIFO or a device is refused, never read).
        let mut f = match foreign::open(image, Follow::Yes) {
            Ok(f) => f,
            Err(e) if e.not_regular() == Some(What::Directory) => {
                return Ok(Store::Dir {
                    dir: image.to_path_buf(),
                    fetch: None,
                });
            }
            Err(e) => return Err(io("open", e.into())),
        };
        let mut head = [0u8; 6];
        let n = read_up_to(&mut f, &mut head).map_err(|e| io("read", e))?;
        let c = compression_of(&head[..n]);
        if c != Compression::None {
            return Err(Error::Layout {
                image: image.to_path_buf(),
                what: "oci-archive".into(),
                why: format!(
                    "compressed with {}; an oci-archive or docker-archive is \
                     read as a plain tar (as skopeo and docker save write \
                     it): decompress it first",
                    c.name()
                ),
            });
        }
        f.rewind().map_err(|e| io("read", e))?;
        let mut rd = tar::Reader::seekable(
            f.try_clone().map_err(|e| io("open", e))?,
            tar::Limits::default(),
        )
        .map_err(|e| io("read", e))?;
        let corrupt = |why: String| Error::Layout {
            image: image.to_path_buf(),
            what: "oci-archive".into(),
            why,
        };
        let mut members = HashMap::new();
        while let Some(m) = rd.next().map_err(|e| corrupt(e.to_string()))? {
            if m.kind != tar::Kind::File {
                continue;
            }
            let Some(name) = member_name(&m.name) else {
                continue;
            };
            if m.sparse.is_some() {
                return Err(corrupt(format!("{name}: a sparse member")));
            }
            if members.len() >= MAX_MEMBERS {
                return Err(corrupt(format!(
                    "more than {MAX_MEMBERS} members"
                )));
            }
            if members
                .insert(name.clone(), (m.data_offset, m.size))
                .is_some()
            {
                return Err(corrupt(format!("{name} is in it twice")));
            }
        }
        Ok(Store::Archive {
            file: Arc::new(f),
            members,
            unhashed: HashSet::new(),
        })
    }

    /// The layout directory `dir`, whose missing blobs `fetch` brings.
    pub(crate) fn fetching(dir: &Path, fetch: Arc<dyn Fetch>) -> Store {
        Store::Dir {
            dir: dir.to_path_buf(),
            fetch: Some(fetch),
        }
    }

    /// A file of the layout (`oci-layout`, `index.json`), at most
    /// `limit` bytes.
    pub(crate) fn read_file(
        &self,
        image: &Path,
        name: &str,
        limit: u64,
    ) -> Result<Vec<u8>> {
        let (file, start, len) = self.locate(image, Path::new(name))?;
        if len > limit {
            return Err(Error::TooLarge {
                image: image.to_path_buf(),
                what: name.to_string(),
                size: len,
                limit,
            });
        }
        let mut r = Range {
            file,
            pos: start,
            end: start + len,
        };
        let mut v = Vec::with_capacity(len as usize);
        r.read_to_end(&mut v).map_err(|e| Error::Io {
            image: image.to_path_buf(),
            path: PathBuf::from(name),
            op: "read",
            error: e,
        })?;
        Ok(v)
    }

    /// The blob `digest`, which must be `size` bytes: refused now if it
    /// is not; its digest is checked by [`BlobReader::finish`].
    pub(crate) fn blob(
        &self,
        image: &Path,
        digest: &Digest,
        size: u64,
        kind: BlobKind,
    ) -> Result<BlobReader> {
        if let Store::Dir {
            dir,
            fetch: Some(fetch),
        } = self
            && std::fs::symlink_metadata(dir.join(digest.blob_path())).is_err()
        {
            fetch
                .fetch(kind, digest, size)
                .map_err(|error| Error::Fetch {
                    image: image.to_path_buf(),
                    digest: digest.to_string(),
                    error,
                })?;
        }
        let (file, start, len) = self.locate(image, &digest.blob_path())?;
        if len != size {
            return Err(Error::Mismatch {
                image: image.to_path_buf(),
                digest: digest.to_string(),
                mismatch: Mismatch::Size {
                    declared: size,
                    found: len,
                },
            });
        }
        let hashed = !self.unhashed(digest);
        Ok(BlobReader {
            range: Range {
                file,
                pos: start,
                end: start + len,
            },
            hasher: hashed.then(|| Hasher::new(digest.algorithm())),
            digest: digest.clone(),
            image: image.to_path_buf(),
        })
    }

    /// Whether `digest` is a docker-archive layer's diff_id, its blob
    /// checked only as its stream is.
    pub(crate) fn unhashed(&self, digest: &Digest) -> bool {
        match self {
            Store::Archive { unhashed, .. } => {
                unhashed.contains(digest.blob_path().to_string_lossy().as_ref())
            }
            Store::Dir { .. } => false,
        }
    }

    /// Bytes `start..start + len` of the archive, read by offset.
    pub(crate) fn range(file: &Arc<File>, start: u64, len: u64) -> impl Read {
        Range {
            file: Arc::clone(file),
            pos: start,
            end: start + len,
        }
    }

    /// The file holding `rel`, and where in it `rel`'s bytes are.
    pub(crate) fn locate(
        &self,
        image: &Path,
        rel: &Path,
    ) -> Result<(Arc<File>, u64, u64)> {
        match self {
            Store::Dir { dir, .. } => {
                let f = open_in_layout(image, dir, rel)?;
                let len = f
                    .metadata()
                    .map_err(|e| Error::Io {
                        image: image.to_path_buf(),
                        path: rel.to_path_buf(),
                        op: "stat",
                        error: e,
                    })?
                    .len();
                Ok((Arc::new(f), 0, len))
            }
            Store::Archive { file, members, .. } => {
                let key = rel.to_string_lossy();
                match members.get(key.as_ref()) {
                    Some(&(off, len)) => Ok((Arc::clone(file), off, len)),
                    None => Err(Error::Layout {
                        image: image.to_path_buf(),
                        what: key.into_owned(),
                        why: "not in the archive".into(),
                    }),
                }
            }
        }
    }
}

/// A member's name as a layout path (`./` and a trailing `/` dropped),
/// if it is one a layout can hold.
pub(crate) fn member_name(raw: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(raw).ok()?;
    let s = s.trim_start_matches("./");
    (!s.is_empty() && !s.split('/').any(|c| c == ".." || c.is_empty()))
        .then(|| s.to_string())
}

/// Opens `dir/rel` as a regular file: no component of `rel` may be a
/// symlink, and a FIFO or device is refused, never read.
fn open_in_layout(image: &Path, dir: &Path, rel: &Path) -> Result<File> {
    let err = |op, e| Error::Io {
        image: image.to_path_buf(),
        path: rel.to_path_buf(),
        op,
        error: e,
    };
    // The directories on the way (`blobs`, `blobs/sha256`) must be
    // directories, not links elsewhere.
    let mut at = dir.to_path_buf();
    let parts: Vec<_> = rel.components().collect();
    for c in &parts[..parts.len().saturating_sub(1)] {
        at.push(c);
        let md = std::fs::symlink_metadata(&at).map_err(|e| err("stat", e))?;
        if !md.is_dir() {
            return Err(Error::Layout {
                image: image.to_path_buf(),
                what: rel.display().to_string(),
                why: format!("{} is not a directory", at.display()),
            });
        }
    }
    foreign::open(&dir.join(rel), Follow::No).map_err(|e| {
        match e.not_regular() {
            Some(What::Symlink) => Error::Layout {
                image: image.to_path_buf(),
                what: rel.display().to_string(),
                why: "a symlink; blobs are read only as regular files".into(),
            },
            Some(w) => Error::Layout {
                image: image.to_path_buf(),
                what: rel.display().to_string(),
                why: format!("{w}, not a regular file"),
            },
            None => err("open", e.into()),
        }
    })
}

/// Bytes `pos..end` of a file, read by offset (many readers may share
/// the file).
#[derive(Debug)]
struct Range {
    file: Arc<File>,
    pos: u64,
    end: u64,
}

impl Read for Range {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = (self.end - self.pos).min(buf.len() as u64) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file ended before the blob",
            ));
        }
        self.pos += n as u64;
        Ok(n)
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Store::Dir { dir, fetch } => f
                .debug_struct("Dir")
                .field("dir", dir)
                .field("fetching", &fetch.is_some())
                .finish(),
            Store::Archive { members, .. } => f
                .debug_struct("Archive")
                .field("members", &members.len())
                .finish(),
        }
    }
}

/// What a blob is to its image, so that a [`Fetch`] knows where to ask
/// for it (a registry serves manifests and blobs apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlobKind {
    /// An image index (or Docker manifest list).
    Index,
    /// An image manifest.
    Manifest,
    /// An image config.
    Config,
    /// A layer.
    Layer,
}

/// Brings blobs a layout directory lacks into it (a registry pull): the
/// image asks only for the blobs it reads, so a layer already unpacked
/// elsewhere is never fetched. What `fetch` stores is read back through
/// the same checks as any blob (size, digest, media type).
pub trait Fetch: Send + Sync {
    /// Makes `blobs/ALG/HEX` of `digest` (`size` bytes) present in the
    /// layout, whole: never a partial file under the blob's name.
    fn fetch(
        &self,
        kind: BlobKind,
        digest: &Digest,
        size: u64,
    ) -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;
}

/// A blob's bytes, exactly as many as its descriptor says, hashed as
/// they are read. Whoever reads it calls [`BlobReader::finish`] before
/// taking what was read as the blob.
#[derive(Debug)]
pub struct BlobReader {
    range: Range,
    hasher: Option<Hasher>,
    digest: Digest,
    image: PathBuf,
}

impl std::fmt::Debug for Hasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hasher")
    }
}

impl Read for BlobReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.range.read(buf)?;
        if let Some(h) = &mut self.hasher {
            h.update(&buf[..n]);
        }
        Ok(n)
    }
}

impl BlobReader {
    /// The digest the blob must have.
    pub fn digest(&self) -> &Digest {
        &self.digest
    }

    /// Reads what is left, then compares the digest of every byte with
    /// the descriptor's.
    pub fn finish(&mut self) -> Result<()> {
        io::copy(self, &mut io::sink()).map_err(|e| Error::Io {
            image: self.image.clone(),
            path: self.digest.blob_path(),
            op: "read",
            error: e,
        })?;
        let Some(h) = self.hasher.take() else {
            return Ok(());
        };
        let found = h.finish();
        if found != self.digest {
            return Err(Error::Mismatch {
                image: self.image.clone(),
                digest: self.digest.to_string(),
                mismatch: Mismatch::Digest {
                    found: found.to_string(),
                },
            });
        }
        Ok(())
    }

    /// The whole blob, checked.
    pub(crate) fn read_checked(mut self) -> Result<Vec<u8>> {
        let len = self.range.end - self.range.pos;
        let mut v = Vec::with_capacity(len as usize);
        self.read_to_end(&mut v).map_err(|e| Error::Io {
            image: self.image.clone(),
            path: self.digest.blob_path(),
            op: "read",
            error: e,
        })?;
        self.finish()?;
        Ok(v)
    }
}

/// A layer's uncompressed stream, hashed as it is read for the config's
/// diff_id; [`DiffReader::finish`] compares.
pub struct DiffReader<R> {
    inner: R,
    hasher: Option<Hasher>,
    diff_id: Digest,
    layer: String,
    image: PathBuf,
}

impl<R: Read> DiffReader<R> {
    /// Hashes what `inner` (the layer `layer`, decompressed) yields,
    /// to be `diff_id`.
    pub fn new(
        inner: R,
        image: &Path,
        layer: &Digest,
        diff_id: &Digest,
    ) -> Self {
        DiffReader {
            inner,
            hasher: Some(Hasher::new(diff_id.algorithm())),
            diff_id: diff_id.clone(),
            layer: layer.to_string(),
            image: image.to_path_buf(),
        }
    }

    /// Names the layer `name` in errors rather than by its digest (a
    /// docker-archive's member, whose digest is its diff_id).
    pub fn named(mut self, name: String) -> Self {
        self.layer = name;
        self
    }

    /// Reads what is left and compares.
    pub fn finish(&mut self) -> Result<()> {
        io::copy(self, &mut io::sink()).map_err(|e| Error::Layout {
            image: self.image.clone(),
            what: format!("layer {}", self.layer),
            why: e.to_string(),
        })?;
        let Some(h) = self.hasher.take() else {
            return Ok(());
        };
        let found = h.finish();
        if found != self.diff_id {
            return Err(Error::Mismatch {
                image: self.image.clone(),
                digest: self.layer.clone(),
                mismatch: Mismatch::DiffId {
                    diff_id: self.diff_id.to_string(),
                    found: found.to_string(),
                },
            });
        }
        Ok(())
    }
}

impl<R: Read> Read for DiffReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(h) = &mut self.hasher {
            h.update(&buf[..n]);
        }
        Ok(n)
    }
}
